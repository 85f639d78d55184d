//! The model: every memory kind builds and runs with the expected shapes; VORT returns orders
//! in [δ, 1] per layer; initialisation is a function of the seed; the router bias override.

use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use vort_lab::model::{MemoryKind, Model, ModelConfig};
use vort_lab::train::named_vars;

fn cfg(memory: MemoryKind) -> ModelConfig {
    ModelConfig {
        memory,
        d_model: 16,
        layers: 2,
        heads: 2,
        head_dim: 8,
        features: 8,
        chunk: 16,
        ..ModelConfig::default()
    }
}

#[test]
fn every_kind_runs_with_expected_shapes() {
    let dev = Device::Cpu;
    let tokens = Tensor::from_vec(
        (0..2 * 37).map(|i| (i % 11) as u32).collect::<Vec<_>>(),
        (2, 37),
        &dev,
    )
    .unwrap();
    for kind in MemoryKind::ALL {
        let vm = VarMap::new();
        let m = Model::new(&cfg(kind), 11, 37, 3, &vm, &dev).unwrap();
        let out = m.forward(&tokens).unwrap();
        assert_eq!(out.hidden.dims(), &[2, 37, 16], "{kind}");
        let logits = m.logits_at(&out.hidden, &[0, 40, 73]).unwrap();
        assert_eq!(logits.dims(), &[3, 11]);
        if kind == MemoryKind::Vort {
            assert_eq!(out.alphas.len(), 2);
            assert_eq!(out.entity_logits.len(), 2);
            let a: Vec<f32> = out.alphas[0].flatten_all().unwrap().to_vec1().unwrap();
            assert!(a.iter().all(|&x| (0.1..=1.0).contains(&x)), "{a:?}");
            assert!(out.bigram_logits.is_some());
        } else {
            assert!(
                out.alphas.is_empty() && out.bigram_logits.is_none(),
                "{kind}"
            );
        }
    }
}

#[test]
fn initialisation_is_a_function_of_the_seed() {
    let dev = Device::Cpu;
    let params = |seed: u64| -> Vec<Vec<f32>> {
        let vm = VarMap::new();
        Model::new(&cfg(MemoryKind::Vort), 11, 37, seed, &vm, &dev).unwrap();
        named_vars(&vm)
            .iter()
            .map(|(_, v)| v.as_tensor().flatten_all().unwrap().to_vec1().unwrap())
            .collect()
    };
    assert_eq!(params(4), params(4));
    assert_ne!(params(4), params(5));
}

#[test]
fn router_bias_override_reaches_the_layer() {
    let dev = Device::Cpu;
    let vm = VarMap::new();
    let c = ModelConfig {
        router_bias_init: 2.5,
        ..cfg(MemoryKind::Vort)
    };
    let m = Model::new(&c, 11, 37, 0, &vm, &dev).unwrap();
    let bias: Vec<f32> = named_vars(&vm)
        .into_iter()
        .find(|(n, _)| n == "blocks.1.mix.router.c")
        .unwrap()
        .1
        .as_tensor()
        .to_vec1()
        .unwrap();
    assert_eq!(bias, vec![2.5, 2.5]);
    // a larger bias means larger initial orders
    let tokens = Tensor::zeros((1, 20), candle_core::DType::U32, &dev).unwrap();
    let mean = |m: &Model| -> f32 {
        m.forward(&tokens).unwrap().alphas[0]
            .mean_all()
            .unwrap()
            .to_scalar()
            .unwrap()
    };
    let vm0 = VarMap::new();
    let m0 = Model::new(&cfg(MemoryKind::Vort), 11, 37, 0, &vm0, &dev).unwrap();
    assert!(mean(&m) > mean(&m0) + 0.1);
}
