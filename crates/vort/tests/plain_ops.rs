//! The fused ops (GELU, RMSNorm, q/k norm, FAVOR+ exp, short convolution, causal row
//! softmax, the fused retention) have a CPU kernel only; on any other candle device the
//! model falls back to their plain candle twins (`vort::ops::fused_on`). CI has no GPU, so
//! `vort::ops::with_plain_ops` forces that path on the CPU, and this test compares it with
//! the fused one for every mixer: the hidden states of a training forward, a stream in
//! pieces, decoding token by token, and the gradients of every parameter.

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use vort::model::{Config, Model, ModelConfig};
use vort::ops::with_plain_ops;
use vort::tol::{rel_rms_tensor, F32_GRAD_REL, F32_SAME_KERNEL_REL, STREAMING_F32_REL};
use vort::Mixer;

/// A two-layer model of `kind` with a short convolution and an MLP (every fused op runs).
fn tiny(kind: &str) -> Config {
    let model = ModelConfig {
        mixer: Mixer::of_kind(kind).unwrap(),
        d_model: 16,
        layers: 2,
        heads: 2,
        head_dim: 8,
        features: 8,
        chunk: 8,
        short_conv: 3,
        mlp_mult: 2,
        ..ModelConfig::default()
    };
    Config::new(model, 20, 64)
}

/// A fixed scalar of the hidden states: Σ h ∘ r for a fixed r (every output feeds it).
fn loss(h: &Tensor) -> Tensor {
    let n = h.elem_count();
    let r: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 13) as f32 / 13.0 - 0.5)
        .collect();
    let r = Tensor::from_vec(r, h.dims(), h.device()).unwrap();
    (h * r).unwrap().sum_all().unwrap()
}

#[test]
fn the_plain_path_of_other_devices_matches_the_fused_ops() {
    let dev = Device::Cpu;
    // T = 37: not a multiple of the chunk, and a stream in uneven pieces
    let toks: Vec<u32> = (0..2 * 37).map(|i| (i * 7 % 20) as u32).collect();
    let tokens = Tensor::from_vec(toks, (2, 37), &dev).unwrap();
    for kind in [
        "vort",
        "power-law",
        "exponential",
        "retnet",
        "mixture",
        "softmax",
    ] {
        let vm = VarMap::new();
        let model = Model::seeded(&tiny(kind), 3, &vm, &dev).unwrap();
        let fused = model.forward(&tokens).unwrap().hidden;
        let plain = with_plain_ops(|| model.forward(&tokens).unwrap().hidden);
        let e = rel_rms_tensor(&plain, &fused).unwrap();
        assert!(e < F32_SAME_KERNEL_REL, "{kind}: forward {e:.2e}");

        // a stream in pieces on the plain path gives its one-pass states
        let streamed = with_plain_ops(|| {
            let mut st = model.new_state();
            let mut parts = Vec::new();
            let mut s = 0;
            for len in [5, 1, 16, 15] {
                let piece = tokens.narrow(1, s, len).unwrap();
                parts.push(model.forward_with_state(&piece, &mut st).unwrap().hidden);
                s += len;
            }
            Tensor::cat(&parts, 1).unwrap()
        });
        let e = rel_rms_tensor(&streamed, &plain).unwrap();
        assert!(e < STREAMING_F32_REL, "{kind}: stream {e:.2e}");

        // decode token by token: the recurrent form on the CPU, the chunk form at T = 1 on
        // other devices (whose state never leaves the device); the same logits
        let decode = || {
            let mut st = model.new_state();
            let rows: Vec<Tensor> = (0..6)
                .map(|i| {
                    let t = tokens.narrow(1, i, 1).unwrap().squeeze(1).unwrap();
                    model.decode(&t, &mut st).unwrap()
                })
                .collect();
            Tensor::stack(&rows, 1).unwrap()
        };
        let (d_fused, d_plain) = (decode(), with_plain_ops(decode));
        assert_eq!(d_plain.dims(), &[2, 6, 20]);
        let e = rel_rms_tensor(&d_plain, &d_fused).unwrap();
        assert!(e < STREAMING_F32_REL, "{kind}: decode {e:.2e}");

        // the gradient of every parameter (buffers have none)
        let g_fused = loss(&fused).backward().unwrap();
        let g_plain = with_plain_ops(|| loss(&plain).backward().unwrap());
        let data = vm.data().lock().unwrap();
        let mut compared = 0;
        for (name, var) in data.iter() {
            let (a, b) = (g_plain.get(var.as_tensor()), g_fused.get(var.as_tensor()));
            if vort::block::is_buffer(name) {
                assert!(a.is_none() && b.is_none(), "{kind}: {name} has a gradient");
                continue;
            }
            let (Some(a), Some(b)) = (a, b) else {
                // a parameter the mixer does not read (the router's under a fixed order)
                assert_eq!(a.is_some(), b.is_some(), "{kind}: {name}");
                continue;
            };
            let e = rel_rms_tensor(a, b).unwrap();
            assert!(e < F32_GRAD_REL, "{kind}: d{name} {e:.2e}");
            compared += 1;
        }
        assert!(compared >= 10, "{kind}: {compared} gradients compared");
        assert_eq!(fused.dtype(), DType::F32);
    }
}
