//! The four measured scenarios. Every loop is bounded by a deadline and by a count.

mod cycle;
mod hot_key;
mod watchdog;

pub(crate) use cycle::{CycleRecord, cycles, python_cycles};
pub(crate) use hot_key::{
    HotOutcome, HotRecord, hot_key, hot_record, hot_tasks, overlaps, percentile,
};
pub(crate) use watchdog::{WatchdogRecord, watchdog};
