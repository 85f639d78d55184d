//! `Model::tensor_shapes` (what a loader checks a file against) is exactly what `Model::new`
//! reads, name for name and shape for shape, for every mixer kind and routing: the lab's
//! loader checks files against the first and builds through the second.

use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;
use vort::model::{Config, Model, ModelConfig, TensorShapes};
use vort::{Mixer, Routing};

/// A candle backend that serves zeros of any requested shape and records (name, shape).
struct ShapeRecorder(Arc<Mutex<TensorShapes>>);

impl SimpleBackend for ShapeRecorder {
    fn get(
        &self,
        shape: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        self.0
            .lock()
            .unwrap()
            .push((name.to_string(), shape.dims().to_vec()));
        Tensor::zeros(shape, dtype, dev)
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle_core::Result<Tensor> {
        candle_core::bail!("the recorder needs the shape of `{name}`")
    }

    fn contains_tensor(&self, _: &str) -> bool {
        true
    }
}

/// The (name, shape) pairs `Model::new` reads for `cfg`, sorted.
fn read_by_new(cfg: &Config) -> TensorShapes {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let vb = VarBuilder::from_backend(
        Box::new(ShapeRecorder(seen.clone())),
        DType::F32,
        Device::Cpu,
    );
    Model::new(cfg, vb).unwrap();
    let mut read = seen.lock().unwrap().clone();
    read.sort();
    read
}

#[test]
fn the_listed_shapes_are_what_new_reads_for_every_mixer() {
    let mut mixers: Vec<Mixer> = Mixer::KINDS
        .iter()
        .map(|k| Mixer::of_kind(k).unwrap())
        .collect();
    for routing in [
        Routing::EntityOnly,
        Routing::EntropyOnly,
        Routing::Learned,
        Routing::Fixed { alpha: 0.5 },
        Routing::Oracle {
            entity: 0.8,
            other: 0.35,
        },
    ] {
        let Mixer::Vort {
            nodes,
            router_bias_init,
            ..
        } = Mixer::of_kind("vort").unwrap()
        else {
            unreachable!()
        };
        mixers.push(Mixer::Vort {
            nodes,
            routing,
            router_bias_init,
        });
    }
    for (mixer, (token_shift, short_conv, mlp_mult)) in mixers.into_iter().zip(
        [(true, 3, 2), (false, 0, 0), (true, 0, 1), (false, 4, 0)]
            .iter()
            .cycle(),
    ) {
        let model = ModelConfig {
            mixer: mixer.clone(),
            d_model: 16,
            layers: 2,
            heads: 2,
            head_dim: 8,
            features: 8,
            chunk: 8,
            token_shift: *token_shift,
            short_conv: *short_conv,
            mlp_mult: *mlp_mult,
            ..ModelConfig::default()
        };
        let cfg = Config::new(model, 23, 64);
        let listed = Model::tensor_shapes(&cfg).unwrap();
        assert!(!listed.is_empty());
        assert_eq!(listed, read_by_new(&cfg), "{mixer:?}");
    }
}
