//! The model's streaming state as truncated backpropagation through books uses it: rows that
//! restart while the others carry on (`ModelState::reset_rows`), and the state stored as named
//! tensors and read back (`ModelState::tensors`, `Model::state_from_tensors`).

use candle_core::{Device, IndexOp, Tensor};
use candle_nn::VarMap;
use vort::model::{Config, Model, ModelConfig, ModelState};
use vort::tol::{rel_rms_tensor, STREAMING_F32_REL};
use vort::{Mixer, NodeMode, NodeSpec, Routing};

/// A two-layer byte model of `mixer`, with the token shift, a short convolution and an MLP
/// (every part of the state is exercised).
fn model(mixer: Mixer) -> Model {
    model_in(mixer, &VarMap::new())
}

/// [`model`] with its parameters in `vm` (for their gradients).
fn model_in(mixer: Mixer, vm: &VarMap) -> Model {
    let cfg = ModelConfig {
        mixer,
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
    Model::seeded(&Config::new(cfg, 23, 64), 7, vm, &Device::Cpu).unwrap()
}

fn vort_mixer(horizon: u64) -> Mixer {
    Mixer::Vort {
        nodes: NodeSpec {
            mode: NodeMode::Shared,
            banks: 4,
            delta: 0.1,
            horizon,
            eps: 1e-3,
        },
        routing: Routing::Full,
        router_bias_init: 0.0,
    }
}

/// Tokens [B, T] of a fixed pattern (offset by `shift`).
fn tokens(b: usize, t: usize, shift: usize) -> Tensor {
    let v: Vec<u32> = (0..b * t).map(|i| ((i * 7 + shift) % 23) as u32).collect();
    Tensor::from_vec(v, (b, t), &Device::Cpu).unwrap()
}

/// Every value of `t`, row-major.
fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

/// Every value of a state, by name (a `Debug` print shows a tensor's shape only).
fn snapshot(st: &ModelState) -> Vec<(String, Vec<f32>)> {
    st.tensors()
        .unwrap()
        .into_iter()
        .map(|(n, t)| (n, values(&t)))
        .collect()
}

fn stream(m: &Model, st: &mut ModelState, toks: &Tensor) -> Tensor {
    m.forward_with_state(toks, st).unwrap().hidden
}

/// A reset row continues as a fresh stream would, the other row as if nothing happened.
#[test]
fn a_reset_row_starts_anew_and_the_others_carry_on() {
    for mixer in [vort_mixer(64), Mixer::of_kind("exponential").unwrap()] {
        let m = model(mixer.clone());
        let (first, second) = (tokens(2, 11, 0), tokens(2, 9, 5));
        let mut carried = m.new_state();
        stream(&m, &mut carried, &first);
        let mut reset = carried.clone();
        reset.reset_rows(&[true, false]).unwrap();
        assert_eq!(reset.row_tokens(), &[0, 11]);
        let after_reset = stream(&m, &mut reset, &second);
        let after_carry = stream(&m, &mut carried, &second);
        // row 1 was not touched: the same numbers as the unreset stream
        assert_eq!(
            values(&after_reset.i(1).unwrap()),
            values(&after_carry.i(1).unwrap()),
            "{mixer}: the carried row changed"
        );
        // row 0 is a fresh stream of its second piece
        let fresh = m.forward(&second.narrow(0, 0, 1).unwrap()).unwrap().hidden;
        let row0 = after_reset.narrow(0, 0, 1).unwrap();
        let e = rel_rms_tensor(&row0, &fresh).unwrap();
        assert!(e < STREAMING_F32_REL, "{mixer}: reset row vs fresh {e:.2e}");
        // and it differs from the carried row 0: the reset did something
        let e = rel_rms_tensor(&after_carry.narrow(0, 0, 1).unwrap(), &fresh).unwrap();
        assert!(e > 100.0 * STREAMING_F32_REL, "{mixer}: {e:.2e}");
        assert_eq!(reset.row_tokens(), &[9, 20]);
    }
}

/// The position checked against the node tables' horizon is the longest context a row holds:
/// with every row reset, a stream goes on past the horizon it would otherwise be refused at.
#[test]
fn resetting_every_row_frees_the_horizon() {
    let m = model(vort_mixer(16));
    let piece = tokens(2, 12, 1);
    let mut st = m.new_state();
    stream(&m, &mut st, &piece);
    let before = snapshot(&st);
    assert!(m.forward_with_state(&piece, &mut st).is_err(), "24 > 16");
    assert_eq!(
        snapshot(&st),
        before,
        "a refused piece moves no layer's state"
    );
    st.reset_rows(&[true, false]).unwrap();
    assert!(
        m.forward_with_state(&piece, &mut st.clone()).is_err(),
        "row 1 holds 12"
    );
    st.reset_rows(&[false, true]).unwrap();
    stream(&m, &mut st, &piece);
    assert_eq!(st.row_tokens(), &[12, 12]);
}

/// Stored and read back, a state continues bit for bit; a state of another model, a
/// misshapen tensor or a stray one is refused; resets need a flag per row; softmax caches do
/// not restart rows.
#[test]
fn a_stored_state_continues_bit_for_bit() {
    let m = model(vort_mixer(64));
    let mut st = m.new_state();
    assert!(
        st.tensors().unwrap().is_empty(),
        "nothing before the first piece"
    );
    stream(&m, &mut st, &tokens(3, 10, 2));
    st.reset_rows(&[false, true, false]).unwrap();
    let named = st.tensors().unwrap();
    let mut back = m.state_from_tensors(&named).unwrap();
    let next = tokens(3, 6, 4);
    let (a, b) = (stream(&m, &mut st, &next), stream(&m, &mut back, &next));
    assert_eq!(values(&a), values(&b));
    assert_eq!(st.row_tokens(), back.row_tokens());

    let other = model(Mixer::of_kind("exponential").unwrap());
    assert!(
        other.state_from_tensors(&named).is_err(),
        "another model's nodes"
    );
    let mut stray = named.clone();
    stray.insert(
        "extra".into(),
        Tensor::zeros(1, candle_core::DType::F32, &Device::Cpu).unwrap(),
    );
    assert!(m.state_from_tensors(&stray).is_err());
    let mut half = named.clone();
    half.insert(
        "row_tokens".into(),
        Tensor::new(&[1.5f32, 2.0, 3.0], &Device::Cpu).unwrap(),
    );
    assert!(
        m.state_from_tensors(&half).is_err(),
        "a count that is not whole"
    );

    assert!(st.reset_rows(&[true]).is_err(), "one flag for three rows");
    assert!(
        st.reset_rows(&[false]).is_err(),
        "one flag for three rows, none set"
    );
    let soft = model(Mixer::of_kind("softmax").unwrap());
    let mut kv = soft.new_state();
    stream(&soft, &mut kv, &tokens(2, 5, 0));
    assert!(kv.reset_rows(&[true, false]).is_err());
    assert!(kv.tensors().is_err());
}

/// Truncated backpropagation, as `train.carry_state` trains: two windows with the state
/// carried compute one window of twice the length, and the second window's loss sends no
/// gradient into the first window's tokens: the carried state is detached at the edge.
#[test]
fn two_carried_windows_are_one_window_and_the_gradient_stops_at_the_edge() {
    let vm = VarMap::new();
    let m = model_in(vort_mixer(64), &vm);
    // window 1 reads only tokens 1 and 2 (and ends on 3), window 2 only 4 and 5
    let w1: Vec<u32> = (0..12)
        .map(|i| if i == 11 { 3 } else { 1 + i % 2 })
        .collect();
    let w2: Vec<u32> = (0..12).map(|i| 4 + i % 2).collect();
    let dev = Device::Cpu;
    let (w1, w2) = (
        Tensor::new(w1.as_slice(), &dev)
            .unwrap()
            .unsqueeze(0)
            .unwrap(),
        Tensor::new(w2.as_slice(), &dev)
            .unwrap()
            .unsqueeze(0)
            .unwrap(),
    );
    let both = Tensor::cat(&[&w1, &w2], 1).unwrap();
    let whole = m.forward(&both).unwrap().hidden;
    let mut st = m.new_state();
    let h1 = stream(&m, &mut st, &w1);
    let h2 = stream(&m, &mut st, &w2);
    let e = rel_rms_tensor(&Tensor::cat(&[&h1, &h2], 1).unwrap(), &whole).unwrap();
    assert!(e < STREAMING_F32_REL, "two windows vs one {e:.2e}");

    let emb = vm.data().lock().unwrap().get("emb").unwrap().clone();
    let rows = |g: &candle_core::backprop::GradStore, r: usize| -> f32 {
        let g = g.get(emb.as_tensor()).expect("emb has a gradient");
        g.i(r)
            .unwrap()
            .abs()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar()
            .unwrap()
    };
    // the loss of the second window alone: carried, nothing reaches tokens 1 and 2
    let carried = h2.sqr().unwrap().sum_all().unwrap().backward().unwrap();
    assert_eq!((rows(&carried, 1), rows(&carried, 2)), (0.0, 0.0));
    assert!(rows(&carried, 4) > 0.0 && rows(&carried, 5) > 0.0);
    // in one pass the same positions' loss reaches them through the retention state
    let tail = whole.narrow(1, 12, 12).unwrap();
    let untruncated = tail.sqr().unwrap().sum_all().unwrap().backward().unwrap();
    assert!(rows(&untruncated, 1) > 0.0 && rows(&untruncated, 2) > 0.0);
}
