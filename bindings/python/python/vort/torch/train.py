"""``python -m vort.torch.train``: trains ``VortLM`` on the project's tasks (MQAR, books, the
synthetic ones) from the ``config.toml`` of ``vort train``, in one process or under
``torchrun --nproc-per-node N`` with DistributedDataParallel (gloo on the CPU, NCCL on CUDA,
chosen by the device).

Data: batch s of the run is the Rust trainer's batch s (``Source::batch`` with the run's seed,
through the bindings), ``train.batch_size`` sequences; with W ranks, rank r takes rows
[r B/W, (r+1) B/W) of it (a disjoint, deterministic shard; B must be a multiple of W). The
answer cross-entropy is the mean over every answer of the global batch (each rank's sum is
divided by the global answer count, times W, so DDP's gradient average is the global mean),
so W ranks take the steps one process takes on the whole batch, up to float summation order.
For the same reason ``--resume`` may use another number of ranks than the run started with:
it lands within rounding of the uninterrupted run (tested: ``tests/test_train.py``).

The optimizer is the Rust trainer's: AdamW (decoupled decay, on the matrices only when
``train.decay_matrices_only``; the bigram table at ``bigram_lr_scale`` times the rate), linear
warm-up then cosine decay, global-norm clipping at ``grad_clip``; the bigram loss at
``bigram_weight``. Not ported: the entity probe's auxiliary loss (a VORT config with
``entity_aux_weight > 0`` is refused), and the validation during training with its early stop
(``eval_every``, ``early_stop_accuracy``: every ``train.steps`` step runs; a note says so).

Output (rank 0 only): ``DIR/config.toml`` (the resolved config), ``DIR/weights.safetensors``
(the ``vort export`` format, read by ``vort eval --run DIR`` and ``vort generate --run DIR``
when the run has no Rust checkpoint), ``DIR/torch_checkpoint.pt`` (parameters, AdamW state and
step, for ``--resume``), ``DIR/metrics.jsonl`` (one line per logged step: step, loss, lr,
tokens/s, elapsed seconds). Every file is written by the CLI's atomic writer through the
bindings (``vort::fsio``: symlinks kept, a FIFO or a device refused), at every
``train.checkpoint_every`` steps and at the end; ``--resume`` continues from the checkpoint
exactly (the data and the learning rate are functions of the step). Progress goes to stderr from rank 0 only.

Exit status: 0 done, 2 for a user error (one ``error:`` line), 1 for the environment.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from typing import Any, Dict, List, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import _vort
from . import VortLM

CHECKPOINT = "torch_checkpoint.pt"
WEIGHTS = "weights.safetensors"
CONFIG = "config.toml"
METRICS = "metrics.jsonl"


class UserError(Exception):
    """A mistake the user can fix (exit status 2)."""


def learning_rate(step: int, warmup: int, total: int, peak: float, min_ratio: float) -> float:
    """The Rust trainer's schedule (``optim::learning_rate``)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    span = max(total - warmup, 1)
    progress = min((step - warmup) / span, 1.0)
    return peak * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def write_atomic(path: str, data: bytes) -> None:
    """The CLI's one atomic writer, through the bindings (``vort::fsio::write_atomic``): a
    temporary file, fsync, rename, fsync of the directory; a symlink is followed and kept, and
    a target that is not a regular file (a FIFO, /dev/null) is refused, exit 2."""
    try:
        _vort._write_atomic(path, data)
    except ValueError as e:
        raise UserError(str(e)) from None


def save_torch_atomic(obj: Any, path: str) -> None:
    """``torch.save`` through :func:`write_atomic`."""
    import io

    buf = io.BytesIO()
    torch.save(obj, buf)
    write_atomic(path, buf.getvalue())


class _Dist:
    """The process group of torchrun (RANK, WORLD_SIZE, LOCAL_RANK), or one process."""

    def __init__(self, device_arg: str):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        cuda = torch.cuda.is_available() if device_arg == "auto" else device_arg == "cuda"
        if cuda and not torch.cuda.is_available():
            raise UserError("--device cuda: no CUDA device is visible")
        self.device = torch.device(f"cuda:{self.local_rank}" if cuda else "cpu")
        if cuda:
            torch.cuda.set_device(self.device)
        self.backend = "nccl" if cuda else "gloo"
        if self.world > 1:
            torch.distributed.init_process_group(backend=self.backend)

    def close(self) -> None:
        if self.world > 1 and torch.distributed.is_initialized():
            # every rank reaches the end before the group goes: a rank that tears gloo down
            # while another still talks to it aborts ("terminate called without an active
            # exception", seen once in CI)
            try:
                torch.distributed.barrier()
            finally:
                torch.distributed.destroy_process_group()


def _param_groups(model: VortLM, train: Dict[str, Any], decayed: List[str]) -> List[Dict[str, Any]]:
    groups: Dict[tuple, List[nn.Parameter]] = {}
    names: Dict[tuple, List[str]] = {}
    for name, p in sorted(model.named_parameters()):
        decays = (not train["decay_matrices_only"]) or name in decayed
        scale = train["bigram_lr_scale"] if name == "bigram" else 1.0
        key = (decays, scale)
        groups.setdefault(key, []).append(p)
        names.setdefault(key, []).append(name)
    return [
        {
            "params": ps,
            "weight_decay": train["weight_decay"] if key[0] else 0.0,
            "lr_scale": key[1],
            "names": names[key],
        }
        for key, ps in sorted(groups.items())
    ]


class _Loss(nn.Module):
    """The training loss of one rank's rows (its forward is what DDP wraps)."""

    def __init__(self, lm: VortLM, bigram_weight: float):
        super().__init__()
        self.lm = lm
        self.bigram_weight = bigram_weight

    def forward(self, tokens, targets, mask, answers_global: int, world: int):
        logits = self.lm(tokens)
        sel = mask
        task_sum = F.cross_entropy(logits[sel].float(), targets[sel], reduction="sum")
        # DDP averages over ranks: world * (local sum / global count) averages to the mean
        loss = task_sum * (world / max(answers_global, 1))
        if self.lm.bigram is not None and self.bigram_weight > 0 and tokens.shape[1] > 1:
            lg = self.lm.bigram[tokens[:, :-1]]
            nxt = tokens[:, 1:]
            # every rank has B/W rows: the mean of the ranks' means is the global mean
            loss = loss + self.bigram_weight * F.cross_entropy(lg.reshape(-1, lg.shape[-1]), nxt.reshape(-1))
        return loss, task_sum.detach(), logits.detach()


def _read_text(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as e:
        raise UserError(f"{what} {path}: {e.strerror or e}") from None


def train(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m vort.torch.train",
        description="Train VortLM from a `vort train` config, on one process or under torchrun (DDP).",
    )
    ap.add_argument("--config", help="run config (TOML, the format of `vort train --config`)")
    ap.add_argument("--out", required=True, help="run directory to write")
    ap.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    # for the tests: the last rank kills itself (SIGKILL) after this step, a crash mid-run
    ap.add_argument("--crash-after-step", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    out = a.out
    ck_path = os.path.join(out, CHECKPOINT)
    if os.path.exists(out) and not os.path.isdir(out):
        raise UserError(f"--out {out} is not a directory (give a run directory to create or resume)")
    lock = _lock_run(out) if int(os.environ.get("RANK", "0")) == 0 else None  # noqa: F841
    # the output rule for every file of the run, before anything is read or written: a FIFO
    # at weights.safetensors blocked, a link to /dev/null was replaced by a regular file
    for name in (CONFIG, METRICS, CHECKPOINT, WEIGHTS):
        try:
            _vort._check_output(os.path.join(out, name))
        except ValueError as e:
            raise UserError(f"--out {e}") from None
    if a.resume:
        if not os.path.isfile(ck_path):
            raise UserError(f"--resume: no {CHECKPOINT} in {out} (train it first, without --resume)")
        config_toml = _read_text(os.path.join(out, CONFIG), "the run's config")
        if a.config is not None and _vort_config(_read_text(a.config, "--config")) != _vort_config(config_toml):
            raise UserError(f"--resume: --config {a.config} differs from {out}/{CONFIG}; leave it out")
    else:
        if a.config is None:
            raise UserError("--config FILE is needed (or --resume to continue a run)")
        config_toml = _read_text(a.config, "--config")
        if os.path.exists(os.path.join(out, CONFIG)):
            raise UserError(f"{out} already holds a run ({CONFIG}); --resume continues it")
    try:
        # `vort train`'s memory estimate first: a run that cannot fit is refused before the
        # model is allocated or anything is written (d_model = 10^8 aborted the interpreter)
        _vort._check_memory(config_toml)
        lm = VortLM.from_config(config_toml)
    except ValueError as e:
        raise UserError(str(e)) from None
    cfg = lm.config
    tr = cfg["train"]
    if tr.get("carry_state", False):
        raise UserError(
            "train.carry_state: training with the state carried through the books is not "
            "ported to torch yet (train it with `vort train`)"
        )
    if tr.get("recall_mix") is not None:
        raise UserError(
            "train.recall_mix: recall windows mixed into the books batches are not ported to "
            "torch yet (train it with `vort train`)"
        )
    if tr["entity_aux_weight"] > 0 and cfg["model"]["mixer"]["kind"] == "vort":
        raise UserError(
            "train.entity_aux_weight > 0: the entity probe's loss is not ported to torch yet "
            "(set it to 0, or train with `vort train`)"
        )
    dist = _Dist(a.device)
    try:
        return _train(a, lm, cfg, dist, out, ck_path)
    finally:
        dist.close()


def _lock_run(out: str) -> Any:
    """An exclusive advisory lock on `out`/run.lock (the file `vort train` locks), taken
    before anything is checked or written, held until the process ends: a second trainer or a
    --resume on the same directory is refused (it interleaved two runs' files, and neither
    survived). Returns the open lock file (keep it alive)."""
    import fcntl

    try:
        os.makedirs(out, exist_ok=True)
        fh = open(os.path.join(out, "run.lock"), "a+b")
    except OSError as e:
        raise UserError(f"--out {out}: {e.strerror or e}") from None
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise UserError(
            f"--out {out}: another trainer holds this run (run.lock); wait for it or pick another --out"
        ) from None
    return fh


def _config_digest(config_toml: str) -> str:
    """The SHA-256 of the run's config text: binds a checkpoint to the config it trained."""
    import hashlib

    return hashlib.sha256(config_toml.encode()).hexdigest()


def _restore(ck_path: str, lm: VortLM, opt: torch.optim.Optimizer, config_toml: str, steps: int, device: Any) -> int:
    """Loads the checkpoint into `lm` and `opt`, and returns its step; a file that does not
    belong to this run (another config, another model, garbage, a step outside [0, steps])
    is a UserError of one line (exit 2)."""

    def refuse(why: str) -> UserError:
        return UserError(f"--resume: {ck_path} {why}; start a new run in another --out")

    import warnings

    try:
        with warnings.catch_warnings():  # torch warns about the pickle before it fails
            warnings.simplefilter("ignore")
            ck = torch.load(ck_path, map_location=device, weights_only=True)
    except Exception as e:  # a truncated or foreign pickle raises many kinds
        raise refuse(f"is not a checkpoint of this trainer ({type(e).__name__})") from None
    if not isinstance(ck, dict) or not {"model", "optimizer", "step"} <= set(ck):
        raise refuse("is not a checkpoint of this trainer (no model, optimizer and step)")
    digest = ck.get("config_sha256")
    if digest is not None and digest != _config_digest(config_toml):
        raise refuse(f"was written under another config than {os.path.dirname(ck_path)}/{CONFIG} (edited since?)")
    step = ck["step"]
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= steps:
        raise refuse(f"holds step {step!r}, outside [0, train.steps = {steps}]")
    try:
        lm.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
    except (RuntimeError, ValueError, KeyError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise refuse(f"does not fit this config's model ({first})") from None
    return step


def _vort_config(text: str) -> Dict[str, Any]:
    try:
        return VortLM.from_config(text).config
    except ValueError as e:
        raise UserError(str(e)) from None


def _train(a, lm: VortLM, cfg: Dict[str, Any], dist: _Dist, out: str, ck_path: str) -> int:
    tr = cfg["train"]
    big_b, steps = int(tr["batch_size"]), int(tr["steps"])
    if big_b % dist.world != 0:
        raise UserError(f"train.batch_size {big_b} is not a multiple of the {dist.world} ranks")
    b = big_b // dist.world
    rows = slice(dist.rank * b, (dist.rank + 1) * b)
    config_toml = lm.config_toml
    # the data check before anything is written: the books must be there
    try:
        _vort._task_batch(config_toml, 0, "train", 1)
    except ValueError as e:
        raise UserError(str(e)) from None
    lm = lm.to(dist.device)
    decayed = _vort._decayed_params(config_toml)
    groups = _param_groups(lm, tr, decayed)
    opt = torch.optim.AdamW(
        [{k: v for k, v in g.items() if k != "names"} for g in groups],
        lr=tr["lr"],
        betas=(tr["beta1"], tr["beta2"]),
        eps=tr["adam_eps"],
    )
    start = 0
    if a.resume:
        start = _restore(ck_path, lm, opt, config_toml, steps, dist.device)
    loss_mod = _Loss(lm, float(tr["bigram_weight"]))
    if dist.world > 1:
        # some parameters get no gradient in some configs (the bigram table at weight 0, the
        # entity probe without its loss): like the Rust optimizer, they are left alone
        dev_ids = [dist.device.index] if dist.device.type == "cuda" else None
        model: nn.Module = nn.parallel.DistributedDataParallel(
            loss_mod, device_ids=dev_ids, find_unused_parameters=True
        )
    else:
        model = loss_mod
    lead = dist.rank == 0
    if lead:
        os.makedirs(out, exist_ok=True)
        if not a.resume:
            write_atomic(os.path.join(out, CONFIG), config_toml.encode())
            write_atomic(os.path.join(out, METRICS), b"")
        else:
            _truncate_metrics(os.path.join(out, METRICS), start)
    t_len = int(cfg["task"]["seq_len"])
    progress = lead and not a.quiet
    if progress and tr.get("early_stop_accuracy", 0) > 0:
        print(
            f"{out}: note: train.early_stop_accuracy is not ported to torch (no validation "
            f"during training): all {steps} steps run",
            file=sys.stderr,
        )
    if progress:
        print(
            f"{out}: {steps} steps of {big_b} sequences ({dist.world} rank(s) of {b}, "
            f"{dist.backend} on {dist.device.type}), from step {start}",
            file=sys.stderr,
        )
    t0 = time.perf_counter()
    tokens_done = 0
    log_every = max(int(tr["log_every"]), 1)
    ck_every = int(tr["checkpoint_every"])
    for step in range(start, steps):
        tok, tgt, mask = _vort._task_batch(config_toml, step, "train", None)
        answers = int(mask.sum())
        tok_t = torch.from_numpy(tok[rows].astype(np.int64)).to(dist.device)
        tgt_t = torch.from_numpy(tgt[rows].astype(np.int64)).to(dist.device)
        mask_t = torch.from_numpy(mask[rows]).to(dist.device)
        lr = learning_rate(step, int(tr["warmup_steps"]), steps, float(tr["lr"]), float(tr["min_lr_ratio"]))
        for g in opt.param_groups:
            g["lr"] = lr * g["lr_scale"]
        opt.zero_grad(set_to_none=True)
        loss, task_sum, _ = model(tok_t, tgt_t, mask_t, answers, dist.world)
        loss.backward()
        if tr["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(lm.parameters(), float(tr["grad_clip"]))
        opt.step()
        tokens_done += big_b * t_len
        done = step + 1
        if done % log_every == 0 or done == steps:
            ts = task_sum.clone()
            if dist.world > 1:
                torch.distributed.all_reduce(ts)
            task_loss = float(ts) / max(answers, 1)
            if not math.isfinite(task_loss):
                raise RuntimeError(f"step {done}: the loss is not finite")
            elapsed = time.perf_counter() - t0
            tps = tokens_done / max(elapsed, 1e-9)
            if lead:
                line = {
                    "step": done,
                    "loss": task_loss,
                    "lr": lr,
                    "tokens_per_s": tps,
                    "elapsed_s": elapsed,
                    "ranks": dist.world,
                }
                _append(os.path.join(out, METRICS), json.dumps(line) + "\n")
                if progress:
                    print(f"{out}: step {done}/{steps} loss {task_loss:.4f} {tps:.0f} tok/s", file=sys.stderr)
        if lead and ((ck_every > 0 and done % ck_every == 0) or done == steps):
            lm.save_pretrained(os.path.join(out, WEIGHTS), step=done)
            save_torch_atomic(
                {
                    "model": lm.state_dict(),
                    "optimizer": opt.state_dict(),
                    "step": done,
                    "config_sha256": _config_digest(config_toml),
                },
                ck_path,
            )
        if a.crash_after_step is not None and done == a.crash_after_step and dist.rank == dist.world - 1:
            os.kill(os.getpid(), signal.SIGKILL)
    if progress:
        el = time.perf_counter() - t0
        print(f"{out}: done, {steps} steps, {tokens_done / max(el, 1e-9):.0f} tok/s over this call", file=sys.stderr)
    return 0


def _append(path: str, line: str) -> None:
    """metrics.jsonl: the file so far plus the line, written atomically."""
    try:
        with open(path, "rb") as fh:
            old = fh.read()
    except FileNotFoundError:
        old = b""
    write_atomic(path, old + line.encode())


def _truncate_metrics(path: str, step: int) -> None:
    """On resume: the metric lines up to the checkpoint's step."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [ln for ln in fh if ln.strip() and json.loads(ln)["step"] <= step]
    except FileNotFoundError:
        lines = []
    write_atomic(path, "".join(lines).encode())


def main(argv: Optional[List[str]] = None) -> int:
    try:
        return train(argv)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    code = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # A torchrun rank leaves without the interpreter's teardown. Its process group is
        # destroyed (after a barrier) and every file is written atomically by then, but a rank
        # could still abort in the C++ destructors at exit ("terminate called without an
        # active exception", a joinable thread destroyed: 2 of about 15 two-rank test runs
        # under load), and torchrun then reports a finished run as failed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
