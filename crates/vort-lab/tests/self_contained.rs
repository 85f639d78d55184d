//! The model is self-contained (issue #42): its FAVOR+ projections are stored tensors
//! (`blocks.<l>.mix.features.omega_t`, buffers) beside the parameters, so weights carry the
//! function they compute and `vort::Model::new(&cfg, vb)` needs nothing else. Files written
//! before the buffers were stored still load, with the projections drawn from their run seed
//! once (what they were trained with): their outputs do not change.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use vort::model::Model;
use vort_lab::tasks::{TaskConfig, TaskKind};
use vort_lab::train::checkpoint::{Checkpoint, HostTensor};
use vort_lab::train::{
    buffer_vars, eval, named_vars, optimizer, run_model, trainable_vars, RunConfig,
};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vort-self-contained-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A tiny two-layer books model of `mixer` with run seed `seed`.
fn tiny(mixer: &str, seed: u64) -> RunConfig {
    let mut c = RunConfig {
        task: TaskConfig {
            seq_len: 32,
            ..TaskConfig::of_kind(TaskKind::Books)
        },
        ..RunConfig::default()
    };
    c.seed = seed;
    c.model.mixer = vort::Mixer::of_kind(mixer).unwrap();
    c.model.d_model = 16;
    c.model.layers = 2;
    c.model.heads = 2;
    c.model.head_dim = 8;
    c.model.features = 8;
    c.model.chunk = 16;
    c.train.steps = 1;
    c.validate().unwrap();
    c
}

/// Writes the tensors of `vm` as a run directory's released weights under `dir`; without
/// the buffers when `buffers` is false (a file written before they were stored).
fn write_run(cfg: &RunConfig, vm: &VarMap, dir: &Path, buffers: bool) -> PathBuf {
    let tensors = named_vars(vm)
        .into_iter()
        .filter(|(n, _)| buffers || !vort::block::is_buffer(n))
        .map(|(n, v)| {
            let t = v.as_tensor();
            (
                format!("param/{n}"),
                HostTensor {
                    shape: t.dims().to_vec(),
                    data: t.flatten_all().unwrap().to_vec1().unwrap(),
                },
            )
        })
        .collect();
    std::fs::create_dir_all(dir).unwrap();
    let text = cfg.to_toml().unwrap();
    std::fs::write(dir.join("config.toml"), &text).unwrap();
    Checkpoint {
        step: 0,
        adam_t: 0,
        config: text,
        tensors,
    }
    .save(&dir.join("weights.safetensors"))
    .unwrap();
    dir.to_path_buf()
}

/// The hidden states of `model` on a fixed byte sequence [1, 32], as f32 bits.
fn hidden(model: &Model) -> Vec<u32> {
    let toks: Vec<u32> = (0..32).map(|i| (i * 37 + 11) % 256).collect();
    let t = Tensor::from_vec(toks, (1, 32), &Device::Cpu).unwrap();
    let h: Vec<f32> = model
        .forward(&t)
        .unwrap()
        .hidden
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    h.into_iter().map(f32::to_bits).collect()
}

/// A file without buffers computes what the same weights with them compute; its export
/// carries them; and a plain candle `VarBuilder` over that export builds, with
/// `Model::new(&cfg, vb)` alone, the model the lab loads, bit for bit.
#[test]
fn old_files_load_unchanged_and_their_export_is_self_contained() {
    let dev = Device::Cpu;
    for mixer in ["vort", "exponential", "softmax"] {
        let d = tmp(mixer);
        let cfg = tiny(mixer, 7);
        let vm = VarMap::new();
        run_model(&cfg, &vm, &dev).unwrap();
        let stores = mixer != "softmax";
        assert_eq!(
            buffer_vars(&vm).len(),
            if stores { 2 } else { 0 },
            "{mixer}"
        );
        let new = write_run(&cfg, &vm, &d.join("new"), true);
        let old = write_run(&cfg, &vm, &d.join("old"), false);
        let (_, m_new, _) = eval::load_inference_model(&new).unwrap();
        let (_, m_old, _) = eval::load_inference_model(&old).unwrap();
        let want = hidden(&m_old);
        assert_eq!(
            hidden(&m_new),
            want,
            "{mixer}: stored projections = seeded ones"
        );

        let out = d.join("export.safetensors");
        eval::export(&old, &out).unwrap();
        let ck = Checkpoint::load(&out).unwrap();
        for (name, _) in buffer_vars(&vm) {
            assert!(
                ck.tensors.contains_key(&format!("param/{name}")),
                "{mixer}: the export stores {name}"
            );
        }
        // SAFETY: the file is not modified while it is mapped.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[&out], DType::F32, &dev) }
            .unwrap()
            .rename_f(|n| format!("param/{n}"));
        let plain = Model::new(&cfg.model_config(), vb).unwrap();
        assert_eq!(hidden(&plain), want, "{mixer}: candle over the export");
        // and with the layer crate alone: the config from the export's metadata
        let (own, vb) = vort::pretrained::load(&out, DType::F32, &dev).unwrap();
        assert_eq!(own, cfg.model_config(), "{mixer}: the export's vort_config");
        assert_eq!(
            hidden(&Model::new(&own, vb).unwrap()),
            want,
            "{mixer}: pretrained::load"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}

/// The stored projection, not the seed, defines the function: another seed's model given
/// these tensors computes the same outputs (and without them, other ones).
#[test]
fn the_stored_projection_not_the_seed_defines_the_model() {
    let dev = Device::Cpu;
    let (a, b) = (tiny("vort", 1), tiny("vort", 2));
    let (vm_a, vm_b) = (VarMap::new(), VarMap::new());
    let m_a = run_model(&a, &vm_a, &dev).unwrap();
    let m_b = run_model(&b, &vm_b, &dev).unwrap();
    assert_ne!(hidden(&m_a), hidden(&m_b));
    for ((na, va), (nb, vb)) in named_vars(&vm_a).into_iter().zip(named_vars(&vm_b)) {
        assert_eq!(na, nb);
        vb.set(va.as_tensor()).unwrap();
    }
    assert_eq!(hidden(&m_b), hidden(&m_a));
    let rebuilt = Model::new(
        &b.model_config(),
        VarBuilder::from_varmap(&vm_b, DType::F32, &dev),
    )
    .unwrap();
    assert_eq!(hidden(&rebuilt), hidden(&m_a));
}

/// The optimiser holds no buffer, a file with some buffers but not all is refused naming
/// the missing one, and a candle source without the projections is refused naming them.
#[test]
fn buffers_are_never_trained_and_partial_files_are_refused() {
    let dev = Device::Cpu;
    let cfg = tiny("vort", 3);
    let vm = VarMap::new();
    run_model(&cfg, &vm, &dev).unwrap();
    let opt = optimizer(&cfg, &vm).unwrap();
    assert_eq!(opt.slots.len(), trainable_vars(&vm).len());
    assert!(opt.slots.iter().all(|s| !vort::block::is_buffer(&s.name)));
    assert_eq!(
        opt.slots.len() + buffer_vars(&vm).len(),
        named_vars(&vm).len()
    );

    let d = tmp("partial");
    let dir = write_run(&cfg, &vm, &d.join("run"), true);
    let path = dir.join("weights.safetensors");
    let mut ck = Checkpoint::load(&path).unwrap();
    let dropped = "param/blocks.1.mix.features.omega_t";
    assert!(ck.tensors.remove(dropped).is_some());
    ck.save(&path).unwrap();
    let e = eval::load_inference_model(&dir).err().unwrap().to_string();
    assert!(e.contains("blocks.1.mix.features.omega_t"), "{e}");

    let params: std::collections::HashMap<String, Tensor> = trainable_vars(&vm)
        .into_iter()
        .map(|(n, v)| (n, v.as_tensor().clone()))
        .collect();
    let e = Model::new(
        &cfg.model_config(),
        VarBuilder::from_tensors(params, DType::F32, &dev),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("features.omega_t"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

/// The README's library path on a committed run: `vort export` it, then
/// `vort::pretrained::load` + `Model::new` (the layer crate alone) give the logits of the
/// lab's loader (what `vort eval` and `vort.load(...).logits` use) bit for bit. A run's own
/// weights file, which has no `vort_config`, is refused with what to do.
#[test]
fn a_committed_run_exported_loads_with_the_layer_crate_alone() {
    let dev = Device::Cpu;
    let run = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../results/recall-quick/runs/L256-K16-d64/vort/lr1.0e-2/seed0");
    let d = tmp("committed");
    let out = d.join("model.safetensors");
    eval::export(&run, &out).unwrap();
    let (cfg, lab, _) = eval::load_inference_model(&run).unwrap();
    let (own, vb) = vort::pretrained::load(&out, DType::F32, &dev).unwrap();
    assert_eq!(own, cfg.model_config());
    let model = Model::new(&own, vb).unwrap();
    let t = 96;
    let toks: Vec<u32> = (0..t as u32).map(|i| (i * 131 + 7) % 512).collect();
    let x = Tensor::from_vec(toks, (1, t), &dev).unwrap();
    let logits = |m: &Model| -> Vec<u32> {
        let h = m.forward(&x).unwrap().hidden;
        let l: Vec<f32> = m
            .logits_at(&h, &(0..t).collect::<Vec<_>>())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        l.into_iter().map(f32::to_bits).collect()
    };
    let want = logits(&lab);
    assert_eq!(want.len(), t * 512);
    assert_eq!(logits(&model), want);
    // the README's `Model::logits` [B, T, V]: the same numbers
    let h = model.forward(&x).unwrap().hidden;
    let all = model.logits(&h).unwrap();
    assert_eq!(all.dims(), &[1, t, 512]);
    let all: Vec<f32> = all.flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(all.into_iter().map(f32::to_bits).collect::<Vec<_>>(), want);

    let e = vort::pretrained::load(&run.join("weights.safetensors"), DType::F32, &dev)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("vort_config") && e.contains("vort export"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);
}
