"""The fuzz of the Python entry points (issue #43, 4): a few hundred mutated inputs per public
function of ``vort``, drawn from a fixed seed. Each call must return, or raise ValueError or
RuntimeError; a numeric input of any dtype, rank or size never raises anything else (a wrong
*type*, a str where a number goes, may be a TypeError, as Python's own functions raise).

Run as a script (``python fuzz_entry_points.py MODEL_PATH [N]``) by test_fuzz.py, in a
subprocess, so that a crash of the interpreter is a failed test and not a dead pytest. Prints
one line per entry point (calls, returns, ValueError, RuntimeError, TypeError) and, for each
violation, the call; exits 1 if there was one.
"""

import random
import sys
import time
from collections import Counter

import numpy as np
import vort

HUGE = 10**12


def numbers(r: random.Random):
    """Scalars that stress a numeric argument."""
    return r.choice(
        [0, 1, -1, 2, 7, 64, 4096, 10**5, 2**31, 2**53 + 1, 2**63, 2**64, 10**30, -(10**30),
         0.0, -0.0, 0.5, 1.7, -2.5, 1e-300, 1e300, float("nan"), float("inf"), float("-inf"),
         1e12, 3.0, True, False, np.float32(0.3), np.int64(5), np.uint8(200), 1 + 2j]
    )  # fmt: skip


def arrays(r: random.Random):
    """Arrays of every dtype, rank, size and layout."""
    n = r.choice([0, 1, 2, 3, 7, 16, 33])
    kind = r.randrange(12)
    if kind == 0:
        return np.array(numbers(r))  # 0-d
    if kind == 1:
        return np.broadcast_to(np.float64(r.choice([0.5, 1.0, 3.0])), (HUGE,))
    if kind == 2:
        return np.broadcast_to(np.ones(8), (HUGE, 8))
    if kind == 3:
        return np.zeros((n, 3, 2))  # rank 3
    if kind == 4:
        return np.arange(2 * n, dtype=np.float64)[::2]  # non-contiguous
    if kind == 5:
        return np.full(n, numbers(r))
    if kind == 6:
        return np.random.default_rng(r.randrange(1 << 30)).random((n, r.choice([1, 4, 8])))
    if kind == 7:
        return np.array([float("nan")] * n)
    if kind == 8:
        return np.ones(n, dtype=r.choice([np.complex128, np.bool_, np.int8, np.uint64, np.float16]))
    if kind == 9:
        return np.array(["a"] * n, dtype=object)
    if kind == 10:
        return [numbers(r) for _ in range(n)]
    return np.random.default_rng(r.randrange(1 << 30)).integers(-5, 300, n)


FORMS = ["naive", "exact_gl", "recurrent", "chunked", "fused", "chunk", "fused_chunk", "bogus"]
MODES = ["refuse", "cap", "temper", "bogus", ""]
WRONG_TYPES = ["", "shared", "xyz", None, b"bytes", [[1, 2], [3]], {"a": 1}, object()]


def scalar(r: random.Random):
    """A scalar argument: a number, sometimes of the wrong type."""
    return numbers(r) if r.random() < 0.85 else r.choice(WRONG_TYPES)


# Horizons: every kind of bad one, and valid ones small enough to build at once (a valid 10^12
# is minutes of certification, the point of the Ctrl-C test, not of this one).
HORIZONS = [0, 1, -1, 2, 64, 4096, 10**5, 2.5, 1e5, float("nan"), float("inf"), -1e300, 2**64, 10**30, True]


def horizon(r: random.Random):
    """A horizon argument: small, invalid, or of the wrong type."""
    return r.choice(HORIZONS) if r.random() < 0.85 else r.choice(WRONG_TYPES)


def array(r: random.Random):
    """An array argument: an array or a number, sometimes of the wrong type."""
    k = r.random()
    return arrays(r) if k < 0.7 else numbers(r) if k < 0.9 else r.choice(WRONG_TYPES)


def head(r: random.Random):
    """Retention inputs: a valid head (T in 1..40, F, D in 1..8) with, half the time, one
    argument mutated."""
    g = np.random.default_rng(r.randrange(1 << 30))
    t, f, d = r.randrange(1, 40), r.randrange(1, 9), r.randrange(1, 9)
    args = [g.random((t, f)), g.random((t, f)), g.standard_normal((t, d)), g.uniform(0.2, 1.0, t)]
    if r.random() < 0.5:
        args[r.randrange(4)] = array(r)
    return tuple(args)


def typed(x) -> bool:
    """True where a TypeError is no defect: a value of the wrong type (a str, None, an object,
    a ragged list, an object array), or a complex scalar where a real goes (as float(1j))."""
    if isinstance(x, (complex, np.complexfloating)):
        return True
    if isinstance(x, np.ndarray):
        return x.dtype == object
    if isinstance(x, list):
        return any(typed(v) for v in x) or len({np.shape(v) for v in x}) > 1
    return not isinstance(x, (bool, int, float, np.number, np.bool_))


def main() -> int:
    model_path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    r = random.Random(20261206)
    m = vort.load(model_path)
    soe = vort.soe(0.5, 1000, 1e-3)
    shared = vort.shared_nodes(0.2, 1000, 1e-2)
    entry = {
        "gl_weights": lambda: ((scalar(r), array(r)), {}, vort.gl_weights),
        "soe": lambda: ((scalar(r), horizon(r), scalar(r)), {}, vort.soe),
        "shared_nodes": lambda: ((scalar(r), horizon(r), scalar(r)), {}, vort.shared_nodes),
        "Soe.kernel": lambda: ((array(r),), {}, soe.kernel),
        "SharedNodes.weights": lambda: ((array(r),), {}, shared.weights),
        "retention": lambda: (
            head(r) if r.random() < 0.5 else (array(r), array(r), array(r), array(r)),
            {
                "form": r.choice(FORMS),
                "chunk": r.choice([1, 3, 64, 0, -1, 2**70]),
                "banks": r.choice([1, 4, 0, -1]),
                "eps": r.choice([1e-3, 0.0, -1.0, float("nan")]),
            },
            vort.retention,
        ),
        "Model.logits": lambda: ((array(r),), {}, m.logits),
        "Model.step": lambda: ((scalar(r), m.state()), {}, m.step),
        "Model.generate": lambda: (
            (r.choice([b"", b"hi", b"\x00\xff"]), r.choice([0, 1, 3, -1, 2**64, 10**13, 2.5, scalar(r)])),
            {"temperature": scalar(r), "seed": r.choice([0, -1, 2**64, 5, scalar(r)])},
            m.generate,
        ),
        "Model.set_horizon": lambda: ((horizon(r),), {}, m.set_horizon),
        "Model.set_past_horizon": lambda: (
            (r.choice(MODES),),
            {"tau": r.choice([None, 1.0, 100.0, 0.0, -1.0, float("nan")])},
            m.set_past_horizon,
        ),
    }
    # the model's stateful entry points rebuild node tables (generate: for 2^20 lags, seconds
    # each), so they take a fifth or a third of the calls, to keep the suite inside CI's time
    share = {"Model.generate": 5, "Model.set_horizon": 3, "Model.set_past_horizon": 3}
    bad = 0
    for name, draw in entry.items():
        counts: Counter = Counter()
        t0 = time.perf_counter()
        calls = n // share.get(name, 1)
        for _ in range(calls):
            args, kwargs, f = draw()
            try:
                f(*args, **kwargs)
                counts["returned"] += 1
            except (ValueError, RuntimeError) as e:
                counts[type(e).__name__] += 1
            except TypeError as e:
                counts["TypeError"] += 1
                # the arguments that are not numbers by design: the prompt, the state, the mode
                skip = {"Model.generate": {0}, "Model.step": {1}, "Model.set_past_horizon": {0}}
                values = [a for i, a in enumerate(args) if i not in skip.get(name, set())]
                values += [v for k, v in kwargs.items() if k != "form"]
                if not any(typed(x) for x in values):
                    bad += 1
                    print(f"VIOLATION {name}: TypeError for numeric input: {e!r:.200}")
            except Exception as e:  # noqa: BLE001 - the point is to catch anything else
                bad += 1
                print(f"VIOLATION {name}: {type(e).__name__}: {e!r:.200}")
            # keep the model usable for the next call (set_horizon may have shrunk it)
            if name in ("Model.set_horizon", "Model.set_past_horizon") and m.horizon != 64:
                m.set_horizon(64)
        print(f"{name}: {calls} calls, {dict(sorted(counts.items()))}, {time.perf_counter() - t0:.1f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
