//! One optimisation step: the losses, AdamW over the model's parameters, and the [`Trainer`]
//! that holds a model and its optimizer state.

// the module's shared imports and the other jobs' items (re-exported from `train`)
use super::*;

/// The CPU device (the CUDA path is not built in this workspace).
pub fn device() -> Device {
    Device::Cpu
}

/// Model, parameters and optimiser of a run.
pub struct Trainer {
    /// The resolved config.
    pub cfg: RunConfig,
    /// The model.
    pub model: Model,
    /// Its parameters.
    pub vm: VarMap,
    /// The optimiser.
    pub opt: AdamW,
    /// Steps completed.
    pub step: u64,
    /// Where the sequences come from.
    pub source: Source,
    /// The lanes and the rows' carried state (`train.carry_state`), else None.
    pub carry: Option<Carry>,
}

/// Training with the state carried: where each row reads, and what it carries.
pub struct Carry {
    /// The lanes through the training books.
    pub plan: crate::tasks::lanes::LanePlan,
    /// The rows' state after the last step (detached; stored in checkpoints).
    pub state: ModelState,
}

/// Checkpoint tensors of the carried state are named `stream/<name>`
/// ([`ModelState::tensors`]); they are not parameters.
pub const STREAM_PREFIX: &str = "stream/";

/// Losses of one forward pass.
pub struct StepLoss {
    /// Total (what is differentiated).
    pub total: Tensor,
    /// Answer cross-entropy.
    pub task: Tensor,
    /// Correct answers and answers.
    pub correct: (usize, usize),
}

/// Mean binary cross-entropy with logits, stable: relu(z) - y z + log(1 + e^(-|z|)).
fn bce_with_logits(z: &Tensor, y: &Tensor) -> candle_core::Result<Tensor> {
    let t = ((z.relu()? - (z * y)?)? + ((z.abs()?.neg()?.exp()? + 1.0)?.log()?))?;
    t.mean_all()
}

/// Answer cross-entropy (+ bigram and entity auxiliary losses) of `out` on `batch`.
///
/// # Errors
/// candle errors.
pub fn losses(
    model: &Model,
    cfg: &RunConfig,
    batch: &Batch,
    out: &ModelOutput,
    device: &Device,
) -> Result<StepLoss, TrainError> {
    let pos = batch.answer_positions();
    let logits = model.logits_at(&out.hidden, &pos)?;
    let targets: Vec<u32> = pos.iter().map(|&p| batch.targets[p]).collect();
    let tgt = Tensor::from_vec(targets.clone(), pos.len(), device)?;
    let task = candle_nn::loss::cross_entropy(&logits, &tgt)?;
    let pred: Vec<u32> = logits.argmax(D::Minus1)?.to_vec1()?;
    let correct = pred.iter().zip(&targets).filter(|(a, b)| a == b).count();
    let mut total = task.clone();
    let (b, t) = (batch.b, batch.t);
    if let Some(bg) = &out.bigram_logits {
        if cfg.train.bigram_weight > 0.0 && t > 1 {
            let v = model.vocab;
            let lg = bg.narrow(1, 0, t - 1)?.reshape((b * (t - 1), v))?;
            let nxt: Vec<u32> = (0..b)
                .flat_map(|i| batch.tokens[i * t + 1..(i + 1) * t].to_vec())
                .collect();
            let nxt = Tensor::from_vec(nxt, b * (t - 1), device)?;
            let l = candle_nn::loss::cross_entropy(&lg, &nxt)?;
            total = (total + (l * cfg.train.bigram_weight)?)?;
        }
    }
    // The probe learns the task's annotation of what must be remembered (`memorable`): entity
    // bytes in books; entity and label in label copy, key and value in Zipf retrieval. With
    // the one-token shift a pair is stored at its second token, so marking only the first
    // (the entity) would raise α where nothing is written.
    if cfg.train.entity_aux_weight > 0.0
        && !out.entity_logits.is_empty()
        && batch.memorable.iter().any(|&e| e)
    {
        let y: Vec<f32> = batch
            .memorable
            .iter()
            .map(|&e| if e { 1.0 } else { 0.0 })
            .collect();
        let y = Tensor::from_vec(y, (b, t), device)?;
        let n = out.entity_logits.len() as f64;
        for z in &out.entity_logits {
            let l = bce_with_logits(z, &y)?;
            total = (total + (l * (cfg.train.entity_aux_weight / n))?)?;
        }
    }
    Ok(StepLoss {
        total,
        task,
        correct: (correct, pos.len()),
    })
}

/// The memorable marks of a batch as a [B, T] f32 tensor (1 at a token to remember): what
/// oracle routing reads ([`vort::Routing::Oracle`]); the other mixers ignore it.
///
/// # Errors
/// candle errors.
pub fn marks_tensor(batch: &Batch, device: &Device) -> Result<Tensor, TrainError> {
    let m: Vec<f32> = batch
        .memorable
        .iter()
        .map(|&e| f32::from(u8::from(e)))
        .collect();
    Ok(Tensor::from_vec(m, (batch.b, batch.t), device)?)
}

/// Tokens of a batch as a [B, T] u32 tensor.
///
/// # Errors
/// candle errors.
pub fn tokens_tensor(batch: &Batch, device: &Device) -> Result<Tensor, TrainError> {
    Ok(Tensor::from_vec(
        batch.tokens.clone(),
        (batch.b, batch.t),
        device,
    )?)
}

fn scalar(t: &Tensor) -> Result<f64, TrainError> {
    Ok(t.to_dtype(DType::F64)?.to_scalar::<f64>()?)
}

/// The run's model (its task's vocabulary and sequence length, its seed), parameters in `vm`.
///
/// # Errors
/// Invalid sizes, an SOE that cannot be certified.
pub fn run_model(cfg: &RunConfig, vm: &VarMap, device: &Device) -> Result<Model, TrainError> {
    Ok(Model::seeded(&cfg.model_config(), cfg.seed, vm, device)?)
}

/// AdamW over every parameter in `vm` with the run's settings; the bigram table learns at its
/// own rate (`train.bigram_lr_scale`).
///
/// # Errors
/// candle errors.
pub fn optimizer(cfg: &RunConfig, vm: &VarMap) -> Result<AdamW, TrainError> {
    let t = &cfg.train;
    let opt = AdamW::new(
        trainable_vars(vm),
        AdamParams {
            beta1: t.beta1,
            beta2: t.beta2,
            eps: t.adam_eps,
            weight_decay: t.weight_decay,
        },
        |name| {
            if name == Model::BIGRAM_PARAM {
                t.bigram_lr_scale
            } else {
                1.0
            }
        },
    )?;
    Ok(if t.decay_matrices_only {
        // the model's own list (its blocks' projections, embeddings, MLPs, head)
        let decayed = cfg.model.decayed_params();
        opt.decay_only(|name, _| decayed.iter().any(|d| d == name))
    } else {
        opt
    })
}

/// One optimisation step on `batch`, the `step`-th of the run: forward, losses, backward,
/// gradient clipping, AdamW at the scheduled learning rate. With `state` the forward
/// continues the rows' streams and leaves their states after the batch (the gradient stops
/// at the window's edge: the carried state is detached). Returns the step's metrics (`step`
/// is the count after it; timing fields are 0).
///
/// # Errors
/// candle errors, [`TrainError::Diverged`] for a non-finite loss or gradient (nothing
/// updated).
pub fn optimizer_step(
    model: &Model,
    opt: &mut AdamW,
    c: &RunConfig,
    batch: &Batch,
    step: u64,
    device: &Device,
    state: Option<&mut ModelState>,
) -> Result<Metrics, TrainError> {
    let marks = marks_tensor(batch, device)?;
    let out = model.forward_marked(&tokens_tensor(batch, device)?, Some(&marks), state)?;
    let l = losses(model, c, batch, &out, device)?;
    let loss = scalar(&l.total)?;
    if !loss.is_finite() {
        return Err(TrainError::Diverged {
            step,
            loss,
            grad_norm: f64::NAN,
        });
    }
    let grads = l.total.backward()?;
    let vars: Vec<&Var> = opt.slots.iter().map(|s| &s.var).collect();
    let (norm, factor) = clip_factor(&grads, &vars, c.train.grad_clip)?;
    if !norm.is_finite() {
        return Err(TrainError::Diverged {
            step,
            loss,
            grad_norm: norm,
        });
    }
    let lr = learning_rate(
        step,
        c.train.warmup_steps,
        c.train.steps,
        c.train.lr,
        c.train.min_lr_ratio,
    );
    opt.step(&grads, lr, factor)?;
    Ok(Metrics {
        step: step + 1,
        loss,
        task_loss: scalar(&l.task)?,
        acc: l.correct.0 as f64 / l.correct.1.max(1) as f64,
        lr,
        grad_norm: norm,
        tokens_per_s: 0.0,
        elapsed_s: 0.0,
        val_acc: None,
        val_loss: None,
        recall_rows: None,
    })
}

impl Trainer {
    /// A fresh model and optimiser from the config.
    ///
    /// # Errors
    /// Invalid config, layer errors.
    pub fn new(cfg: &RunConfig, device: &Device) -> Result<Trainer, TrainError> {
        cfg.validate()?;
        let source = Source::open(&cfg.task)?;
        let vm = VarMap::new();
        let model = run_model(cfg, &vm, device)?;
        let opt = optimizer(cfg, &vm)?;
        let carry = match cfg.train.carry_state {
            true => Some(Carry {
                plan: source.lane_plan(cfg.train.carry_context)?,
                state: model.new_state(),
            }),
            false => None,
        };
        Ok(Trainer {
            cfg: cfg.clone(),
            model,
            vm,
            opt,
            step: 0,
            source,
            carry,
        })
    }

    /// Runs step `self.step` and advances it; returns (metrics without timing).
    ///
    /// # Errors
    /// candle errors, [`TrainError::Diverged`].
    pub fn train_step(&mut self, device: &Device) -> Result<Metrics, TrainError> {
        let c = &self.cfg;
        let (b, step) = (c.train.batch_size, self.step);
        let mix = c.train.recall_mix.as_ref();
        let recall_step = mix.filter(|m| m.is_recall_step(c.seed, step));
        let mut m = match (&mut self.carry, recall_step) {
            // a recall step of a carried run: recall rows read from a copy of the lanes' state
            // (so a recall window follows book text, as a repeat in a book does: from an empty
            // state the model learnt that an empty state means random letters, and wrote them
            // from every fresh start), and the copy is dropped: the lanes wait
            (Some(carry), Some(recall)) => {
                let batch = recall.recall_batch(c.task.seq_len, c.seed, step, b);
                let mut scratch = carry.state.clone();
                let state = Some(&mut scratch);
                optimizer_step(&self.model, &mut self.opt, c, &batch, step, device, state)?
            }
            (Some(carry), None) => {
                // lane window k is read at the (k+1)-th books step
                let k = mix.map_or(step, |m| m.book_steps_before(c.seed, step));
                let (batch, fresh) = self.source.lane_batch(&carry.plan, c.seed, k, b)?;
                carry.state.reset_rows(&fresh)?;
                let state = Some(&mut carry.state);
                optimizer_step(&self.model, &mut self.opt, c, &batch, step, device, state)?
            }
            (None, _) => {
                let mut batch = self.source.batch(c.seed, Stream::Train, step, b);
                if let Some(mix) = &c.train.recall_mix {
                    mix.mix_into(&mut batch, c.seed, step);
                }
                optimizer_step(&self.model, &mut self.opt, c, &batch, step, device, None)?
            }
        };
        m.recall_rows = mix.map(|m| m.recall_rows(c.seed, step, b, self.carry.is_some()) as u64);
        self.step += 1;
        Ok(m)
    }

    /// The checkpoint of the current state.
    ///
    /// # Errors
    /// candle errors.
    pub fn checkpoint(&self) -> Result<Checkpoint, TrainError> {
        let host = HostTensor::of;
        let mut tensors = BTreeMap::new();
        for s in &self.opt.slots {
            tensors.insert(format!("param/{}", s.name), host(s.var.as_tensor())?);
            tensors.insert(format!("adam_m/{}", s.name), host(&s.m)?);
            tensors.insert(format!("adam_v/{}", s.name), host(&s.v)?);
        }
        // the buffers beside the parameters, without moments: the file computes the same
        // function under any seed
        for (name, var) in buffer_vars(&self.vm) {
            tensors.insert(format!("param/{name}"), host(var.as_tensor())?);
        }
        if let Some(carry) = &self.carry {
            for (name, t) in carry.state.tensors()? {
                tensors.insert(format!("{STREAM_PREFIX}{name}"), host(&t)?);
            }
        }
        Ok(Checkpoint {
            step: self.step,
            adam_t: self.opt.t,
            config: self.cfg.to_toml()?,
            tensors,
        })
    }

    /// Loads `ck` into this trainer after checking that it belongs to the same config and
    /// model (every tensor present with the right shape, no extra ones).
    ///
    /// # Errors
    /// [`TrainError::CheckpointMismatch`]; nothing is modified on error.
    pub fn restore(&mut self, ck: &Checkpoint, path: &Path) -> Result<(), TrainError> {
        let mismatch = |reason: String| TrainError::CheckpointMismatch {
            path: path.display().to_string(),
            reason,
        };
        ck.check_config(&self.cfg.to_toml()?, path)?;
        let names: Vec<String> = self.opt.slots.iter().map(|s| s.name.clone()).collect();
        let buffers = buffer_vars(&self.vm);
        let buffer_names: Vec<String> = buffers.iter().map(|(n, _)| n.clone()).collect();
        let stored = ck.check_contents(self.cfg.train.steps, (&names, &buffer_names), path)?;
        let carried = self.carried_state(ck, path)?;
        let want = 3 * self.opt.slots.len()
            + if stored { buffers.len() } else { 0 }
            + ck.tensors
                .keys()
                .filter(|k| k.starts_with(STREAM_PREFIX))
                .count();
        if ck.tensors.len() != want {
            return Err(mismatch(format!(
                "{} tensors, the model has {want}",
                ck.tensors.len()
            )));
        }
        // check everything first, then write
        let mut loaded = Vec::new();
        for s in &self.opt.slots {
            let v = s.var.as_tensor();
            let three = ["param", "adam_m", "adam_v"]
                .iter()
                .map(|kind| ck.tensor(&format!("{kind}/{}", s.name), v.dims(), v.device(), path))
                .collect::<Result<Vec<_>, _>>()?;
            loaded.push(three);
        }
        // a checkpoint written before the buffers were stored keeps the seeded ones
        let mut loaded_buffers = Vec::new();
        if stored {
            for (name, var) in &buffers {
                let t = ck.tensor(&format!("param/{name}"), var.dims(), var.device(), path)?;
                loaded_buffers.push((var, t));
            }
        }
        for (var, t) in loaded_buffers {
            var.set(&t)?;
        }
        for (s, three) in self.opt.slots.iter_mut().zip(loaded) {
            s.var.set(&three[0])?;
            s.m = three[1].clone();
            s.v = three[2].clone();
        }
        if let (Some(carry), Some(state)) = (&mut self.carry, carried) {
            carry.state = state;
        }
        self.opt.t = ck.adam_t;
        self.step = ck.step;
        Ok(())
    }

    /// The carried state stored in `ck` (None for a run that carries none), checked against
    /// the model: a carried run's checkpoint past step 0 holds it, any other holds none.
    fn carried_state(
        &self,
        ck: &Checkpoint,
        path: &Path,
    ) -> Result<Option<ModelState>, TrainError> {
        let mismatch = |reason: String| TrainError::CheckpointMismatch {
            path: path.display().to_string(),
            reason,
        };
        let mut named = BTreeMap::new();
        for (key, h) in &ck.tensors {
            if let Some(name) = key.strip_prefix(STREAM_PREFIX) {
                let t = Tensor::from_vec(h.data.clone(), h.shape.clone(), self.model.device())?;
                named.insert(name.to_string(), t);
            }
        }
        match (&self.carry, named.is_empty()) {
            (None, true) => Ok(None),
            (None, false) => Err(mismatch(
                "it holds a carried stream state, and its config carries none".into(),
            )),
            (Some(_), true) if ck.step > 0 => Err(mismatch(format!(
                "a run that carries its state (train.carry_state) is at step {} without it",
                ck.step
            ))),
            (Some(_), _) => self
                .model
                .state_from_tensors(&named)
                .map(Some)
                .map_err(|e| mismatch(e.to_string())),
        }
    }
}

/// The (name, var) pairs of a VarMap, sorted by name: the parameters and the buffers (the
/// FAVOR+ projections, [`vort::block::is_buffer`]), everything a weights file stores.
pub fn named_vars(vm: &VarMap) -> Vec<(String, Var)> {
    let data = vm.data().lock().expect("VarMap lock");
    let mut v: Vec<(String, Var)> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// [`named_vars`] without the buffers: the parameters an optimiser trains (the order and
/// the set of every run trained before the projections were stored).
pub fn trainable_vars(vm: &VarMap) -> Vec<(String, Var)> {
    named_vars(vm)
        .into_iter()
        .filter(|(n, _)| !vort::block::is_buffer(n))
        .collect()
}

/// The buffers of a VarMap ([`named_vars`] less [`trainable_vars`]), sorted by name.
pub fn buffer_vars(vm: &VarMap) -> Vec<(String, Var)> {
    named_vars(vm)
        .into_iter()
        .filter(|(n, _)| vort::block::is_buffer(n))
        .collect()
}
