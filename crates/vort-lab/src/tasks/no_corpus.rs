//! The books source of a build without the `corpus` feature (the Python wheel): a books
//! config parses and validates, and opening its data says what the build lacks.

use super::lanes::LanePlan;
use super::{Sample, Stream, TaskConfig, TaskError};

/// No books corpus: never constructed.
#[derive(Debug)]
pub enum BookCorpus {}

impl BookCorpus {
    /// Always [`TaskError::Data`]: this build reads no books.
    pub fn open(cfg: &TaskConfig) -> Result<BookCorpus, TaskError> {
        Err(TaskError::Data(format!(
            "this build cannot read the books in {} (vort-lab was built without its `corpus` \
             feature; use the `vort` binary, or build the Python package with the `lab` feature)",
            cfg.data_dir().unwrap_or_default()
        )))
    }

    pub fn test_windows(&self, _seq_len: usize) -> usize {
        match *self {}
    }

    pub fn valid_windows(&self, _seq_len: usize) -> usize {
        match *self {}
    }

    pub fn eval_book(&self, _seq_len: usize, _index: u64) -> &str {
        match *self {}
    }

    pub fn valid_book(&self, _seq_len: usize, _index: u64) -> &str {
        match *self {}
    }

    pub fn sample(&self, _seq_len: usize, _seed: u64, _stream: Stream, _index: u64) -> Sample {
        match *self {}
    }

    pub fn lane_plan(&self, _seq_len: usize, _context_cap: u64) -> Result<LanePlan, TaskError> {
        match *self {}
    }

    pub fn lane_sample(&self, _plan: &LanePlan, _seed: u64, _lane: u64, _k: u64) -> (Sample, bool) {
        match *self {}
    }
}
