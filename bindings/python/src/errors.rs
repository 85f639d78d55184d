//! Errors, the panic guard and the checks of numbers from Python: a user error is a
//! `ValueError`, a failure of the run or the environment a `RuntimeError`, and a panic never
//! crosses into Python.

use std::panic::{catch_unwind, AssertUnwindSafe};

use numpy::AllowTypeChange;
use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use vort::error::VortError;
use vort::model::ModelError;
use vort_lab::train::TrainError;
use vort_math::MathError;

/// Joins a multi-line message into one line (as the CLI does before printing it).
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What a guarded call can fail with: built without the GIL, turned into a Python exception
/// after it is taken back.
pub(crate) enum Failure {
    /// The user's input (the CLI's exit status 2): `ValueError`.
    Input(String),
    /// The run or the environment (exit status 1), or a panic: `RuntimeError`.
    Run(String),
    /// An exception Python raised while the call ran: KeyboardInterrupt from Ctrl-C.
    Python(PyErr),
}

pub(crate) type Res<T> = std::result::Result<T, Failure>;

impl From<Failure> for PyErr {
    fn from(f: Failure) -> PyErr {
        match f {
            Failure::Input(m) => PyValueError::new_err(m),
            Failure::Run(m) => PyRuntimeError::new_err(m),
            Failure::Python(e) => e,
        }
    }
}

impl From<VortError> for Failure {
    fn from(e: VortError) -> Failure {
        let m = one_line(&e.to_string());
        if e.is_input_error() {
            Failure::Input(m)
        } else {
            Failure::Run(m)
        }
    }
}

impl From<TrainError> for Failure {
    fn from(e: TrainError) -> Failure {
        // a refusal of the output rule names its path itself ("D is a directory, ..."):
        // without the "D: " prefix of the I/O error, as the CLI words it
        if let TrainError::Io { source, .. } = &e {
            if vort::fsio::is_refused(source) {
                return Failure::Input(one_line(&source.to_string()));
            }
        }
        let m = one_line(&e.to_string());
        if e.is_bad_input() {
            Failure::Input(m)
        } else {
            Failure::Run(m)
        }
    }
}

impl From<ModelError> for Failure {
    fn from(e: ModelError) -> Failure {
        TrainError::from(e).into()
    }
}

impl From<MathError> for Failure {
    // the CLI maps every MathError to exit status 2 (a parameter out of its domain)
    fn from(e: MathError) -> Failure {
        Failure::Input(one_line(&e.to_string()))
    }
}

impl From<candle_core::Error> for Failure {
    fn from(e: candle_core::Error) -> Failure {
        Failure::Run(one_line(&format!("candle: {e}")))
    }
}

pub(crate) fn input(m: impl Into<String>) -> Failure {
    Failure::Input(m.into())
}

/// The panic payload as text.
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Runs `f` without the GIL and with panics caught: a panic is a `RuntimeError` with the
/// CLI's wording for an internal error. On Python's main thread, SIGINT is caught for the
/// call ([`sigint`]): the computations that check [`vort_math::interrupt`] stop, and the call
/// raises KeyboardInterrupt.
pub(crate) fn guarded<T: Send>(py: Python<'_>, f: impl FnOnce() -> Res<T> + Send) -> PyResult<T> {
    let main = is_main_thread(py);
    py.detach(|| {
        let guard = main.then(sigint::Guard::install);
        let r = catch_unwind(AssertUnwindSafe(f));
        drop(guard);
        if main && vort_math::interrupt::clear() {
            return Err(PyKeyboardInterrupt::new_err("interrupted"));
        }
        match r {
            Ok(r) => r.map_err(PyErr::from),
            Err(p) => Err(PyRuntimeError::new_err(format!(
                "internal error: {} (please report this)",
                one_line(&panic_message(p.as_ref()))
            ))),
        }
    })
}

/// Whether the caller runs on Python's main thread (the one SIGINT's KeyboardInterrupt is
/// raised in); false when that cannot be told.
fn is_main_thread(py: Python<'_>) -> bool {
    (|| -> PyResult<bool> {
        let threading = py.import("threading")?;
        let main = threading.call_method0("main_thread")?;
        Ok(main.is(&threading.call_method0("current_thread")?))
    })()
    .unwrap_or(false)
}

/// SIGINT during a long call: Python's own handler only sets a flag that the interpreter
/// reads between bytecodes, which never come while Rust runs. For the call, a handler of
/// ours requests a stop ([`vort_math::interrupt::request`], one atomic store); Python's is
/// put back after. Installed only over Python's handler: a SIGINT that is ignored or left at
/// the default stays so.
mod sigint {
    use std::sync::Mutex;

    /// Calls in flight, and the handler to put back when the last one ends.
    static SAVED: Mutex<(usize, Option<libc::sigaction>)> = Mutex::new((0, None));

    extern "C" fn on_sigint(_: libc::c_int) {
        vort_math::interrupt::request();
    }

    /// Our handler while alive (nested and concurrent calls share one installation).
    pub(super) struct Guard;

    impl Guard {
        pub(super) fn install() -> Guard {
            let mut saved = SAVED.lock().unwrap_or_else(|e| e.into_inner());
            if saved.0 == 0 {
                // SAFETY: sigaction with zeroed structs filled as POSIX asks; the handler only
                // stores to an atomic (async-signal-safe).
                unsafe {
                    let mut old: libc::sigaction = std::mem::zeroed();
                    if libc::sigaction(libc::SIGINT, std::ptr::null(), &mut old) == 0
                        && old.sa_sigaction != libc::SIG_IGN
                        && old.sa_sigaction != libc::SIG_DFL
                    {
                        let mut new: libc::sigaction = std::mem::zeroed();
                        new.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as usize;
                        libc::sigemptyset(&mut new.sa_mask);
                        if libc::sigaction(libc::SIGINT, &new, std::ptr::null_mut()) == 0 {
                            saved.1 = Some(old);
                        }
                    }
                }
            }
            saved.0 += 1;
            Guard
        }
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            let mut saved = SAVED.lock().unwrap_or_else(|e| e.into_inner());
            saved.0 -= 1;
            if saved.0 == 0 {
                if let Some(old) = saved.1.take() {
                    // SAFETY: puts back the handler read in `install`.
                    unsafe {
                        libc::sigaction(libc::SIGINT, &old, std::ptr::null_mut());
                    }
                }
            }
        }
    }
}

/// `catch_unwind` for the (short) parts that must hold the GIL (building Python objects).
pub(crate) fn holding<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(PyRuntimeError::new_err(format!(
            "internal error: {} (please report this)",
            one_line(&panic_message(p.as_ref()))
        ))),
    }
}

/// A count such as a horizon: a Python int, or a float with an integer value (1e5), >= 1.
pub(crate) fn count(x: &Bound<'_, PyAny>, name: &str) -> PyResult<u64> {
    if let Ok(v) = x.extract::<u64>() {
        if v >= 1 {
            return Ok(v);
        }
    } else if let Ok(v) = x.extract::<f64>() {
        if v.is_finite() && v >= 1.0 && v.fract() == 0.0 && v <= 2f64.powi(53) {
            return Ok(v as u64);
        }
    }
    Err(PyValueError::new_err(format!(
        "{name} = {} must be an integer >= 1 (such as 4096 or 1e5)",
        x.repr().map_or_else(|_| "?".to_string(), |r| r.to_string())
    )))
}

/// _panic(): panics inside a guarded call (the tests check that it arrives as RuntimeError).
#[pyfunction]
pub(crate) fn _panic(py: Python<'_>) -> PyResult<()> {
    guarded(py, || -> Res<()> {
        panic!("deliberate panic for the tests")
    })
}

/// The whole numbers of an array read as float64 (`what` names them in the error): a value
/// with a fraction, NaN, inf or past ±2^53 is refused, where reading it as int64 truncated
/// 1.7 to 1 and overflowed on 10**30 (an OverflowError).
pub(crate) fn whole_numbers<'py, D: numpy::ndarray::Dimension>(
    a: &numpy::PyArrayLike<'py, f64, D, AllowTypeChange>,
    what: &str,
) -> Res<Vec<i64>> {
    const LIMIT: f64 = 9_007_199_254_740_992.0; // 2^53: every whole f64 below is exact
    a.as_array()
        .iter()
        .map(|&x| {
            if x.is_finite() && x.fract() == 0.0 && x.abs() <= LIMIT {
                Ok(x as i64)
            } else {
                Err(input(format!(
                    "{what} {x:?} is not a whole number in ±2^53"
                )))
            }
        })
        .collect()
}

/// Runs Python's signal handlers from inside a call that released the GIL (Python only sets a
/// flag when SIGINT arrives; the handler runs when some thread checks it): Ctrl-C raises
/// KeyboardInterrupt here, returned as [`Failure::Python`] for the caller to stop with.
pub(crate) fn check_signals() -> Res<()> {
    Python::attach(|py| py.check_signals()).map_err(Failure::Python)
}

/// Refuses work that needs about `bytes` of memory when this process may allocate less (the
/// CLI's limit, `vort_lab::train::memory_limit`: the available memory, `ulimit -v`, the
/// cgroup's): a ValueError naming `what`, checked before any copy, where the allocation would
/// abort the interpreter (issue #43 A: a 10^12-row broadcast view, 10^11 generated bytes).
pub(crate) fn fits(what: &str, bytes: f64) -> Res<()> {
    let Some((limit, source)) = vort_lab::train::memory_limit() else {
        return Ok(());
    };
    // NaN or infinite (sizes past f64's range) is refused too
    if bytes <= limit as f64 {
        return Ok(());
    }
    Err(input(format!(
        "{what} needs about {:.1} GB, more than the {:.1} GB this process may allocate ({})",
        bytes / 1e9,
        limit as f64 / 1e9,
        source.words()
    )))
}

/// Bytes of `n` values of `size` bytes each, in f64 (no overflow).
pub(crate) fn bytes_of(n: usize, size: usize) -> f64 {
    n as f64 * size as f64
}

/// Refuses an array whose rank is not `dims.len()` (ValueError naming `name`, its wanted
/// dimensions and its shape). Array arguments are taken with any rank and checked here: a
/// fixed-rank argument raised a two-line TypeError ("dimensionality mismatch"), and a 2-d
/// array of 10^12 rows given for a 1-d one was copied into a list first, which aborted.
pub(crate) fn rank(
    a: &numpy::PyArrayLikeDyn<'_, f64, numpy::AllowTypeChange>,
    name: &str,
    dims: &[&str],
) -> Res<()> {
    use numpy::PyUntypedArrayMethods as _;
    if a.ndim() == dims.len() {
        return Ok(());
    }
    Err(input(format!(
        "{name} must be [{}] ({} dimension{}), not an array of shape {:?}",
        dims.join(", "),
        dims.len(),
        if dims.len() == 1 { "" } else { "s" },
        a.shape()
    )))
}

/// A whole number in [lo, hi] from any Python number (an int, a numpy integer, or a float
/// with an integral value such as 1e5), else a ValueError naming `name`: where pyo3's own
/// conversions raised OverflowError for -1 or 2**64 and TypeError for 2.5 (issue #43 I).
pub(crate) fn whole(x: &Bound<'_, PyAny>, name: &str, lo: i128, hi: i128) -> PyResult<i128> {
    let v = if let Ok(v) = x.extract::<i128>() {
        Some(v)
    } else if let Ok(f) = x.extract::<f64>() {
        // 2^100 as a float is exact, and out of every range asked for
        (f.is_finite() && f.fract() == 0.0 && f.abs() < 2f64.powi(100)).then_some(f as i128)
    } else {
        None
    };
    match v {
        Some(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(PyValueError::new_err(format!(
            "{name} = {} must be a whole number in [{lo}, {hi}]",
            x.repr().map_or_else(|_| "?".to_string(), |r| r.to_string())
        ))),
    }
}

/// `x` as float64 of any rank, after refusing complex input (ValueError naming `name`):
/// numpy's cast dropped the imaginary part with a warning at most (issue #43 J).
pub(crate) fn real_array<'py>(
    x: &Bound<'py, PyAny>,
    name: &str,
) -> PyResult<numpy::PyArrayLikeDyn<'py, f64, AllowTypeChange>> {
    let numpy = x.py().import("numpy")?;
    if numpy.call_method1("iscomplexobj", (x,))?.is_truthy()? {
        return Err(PyValueError::new_err(format!(
            "{name} holds complex numbers: give real values"
        )));
    }
    x.extract()
}
