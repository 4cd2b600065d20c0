//! The medians of each contender's measurements, per scenario: what the tables and the
//! goals are made of.

use serde::Serialize;

use crate::contenders::Contender;
use crate::figures::median;
use crate::instructions::InstructionRecord;
use crate::scenarios::{CycleRecord, HotRecord, WatchdogRecord};

/// Medians of one contender's cycle measurements.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CycleSummary {
    pub(super) contender: Contender,
    pub(super) runs: usize,
    pub(super) per_s: f64,
    pub(super) per_s_min: f64,
    pub(super) per_s_max: f64,
    pub(super) ratio_to_raw: Option<f64>,
    /// The median over runs of this contender's rate over raw's in the same run: less
    /// sensitive to load drifting between runs than the ratio of medians.
    pub(super) paired_ratio: Option<f64>,
    pub(super) client_cpu_us_per_cycle: f64,
    pub(super) client_switches_per_cycle: Option<f64>,
    pub(super) server_cmds_per_cycle: f64,
    pub(super) server_us_per_cycle: f64,
    /// Requests sent per cycle (MONITOR, one task only).
    pub(super) requests_per_cycle: Option<f64>,
    pub(super) failures: u64,
}

pub(super) fn cycle_summaries(records: &[CycleRecord]) -> Vec<CycleSummary> {
    let raw = median(
        records
            .iter()
            .filter(|r| r.contender == Contender::Raw)
            .map(|r| r.per_s),
    );
    contenders_in(records.iter().map(|r| r.contender))
        .into_iter()
        .map(|contender| {
            let mine: Vec<&CycleRecord> = records
                .iter()
                .filter(|r| r.contender == contender)
                .collect();
            let per_s = median(mine.iter().map(|r| r.per_s));
            CycleSummary {
                contender,
                runs: mine.len(),
                per_s,
                per_s_min: mine.iter().map(|r| r.per_s).fold(f64::INFINITY, f64::min),
                per_s_max: mine.iter().map(|r| r.per_s).fold(0.0, f64::max),
                ratio_to_raw: (raw > 0.0).then(|| per_s / raw),
                paired_ratio: {
                    let ratios: Vec<f64> = mine
                        .iter()
                        .filter_map(|r| {
                            let raw = records
                                .iter()
                                .find(|o| o.run == r.run && o.contender == Contender::Raw)?;
                            (raw.per_s > 0.0).then(|| r.per_s / raw.per_s)
                        })
                        .collect();
                    (!ratios.is_empty()).then(|| median(ratios))
                },
                client_cpu_us_per_cycle: median(mine.iter().map(|r| r.client_cpu_us_per_cycle)),
                client_switches_per_cycle: mine
                    .iter()
                    .all(|r| r.client_switches_per_cycle.is_some())
                    .then(|| median(mine.iter().filter_map(|r| r.client_switches_per_cycle))),
                server_cmds_per_cycle: median(mine.iter().map(|r| r.server_cmds_per_cycle)),
                server_us_per_cycle: median(mine.iter().map(|r| r.server_us_per_cycle)),
                requests_per_cycle: mine
                    .iter()
                    .any(|r| r.requests_per_cycle.is_some())
                    .then(|| median(mine.iter().filter_map(|r| r.requests_per_cycle))),
                failures: mine.iter().map(|r| r.failures).sum(),
            }
        })
        .collect()
}

/// Medians of one contender's hot-key measurements.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HotSummary {
    pub(super) contender: Contender,
    pub(super) runs: usize,
    /// Processes the tasks ran in.
    pub(super) processes: u64,
    /// All contending tasks.
    pub(super) tasks: u64,
    pub(super) per_s: f64,
    /// Acquisitions/s × mean hold (medians of the per-run values).
    pub(super) utilization: f64,
    /// The smallest and the largest process's share of the acquisitions (medians over runs).
    pub(super) share_min: f64,
    pub(super) share_max: f64,
    pub(super) p50_us: f64,
    pub(super) p99_us: f64,
    pub(super) max_us: f64,
    pub(super) mean_hold_us: f64,
    pub(super) same_task_share: f64,
    pub(super) requests_per_acq: Option<f64>,
    pub(super) lua_cmds_per_acq: Option<f64>,
    pub(super) server_cmds_per_acq: f64,
    pub(super) evalsha_per_acq: f64,
    pub(super) subscribe_per_acq: f64,
    pub(super) violations: u64,
    pub(super) open_waits: f64,
}

pub(super) fn hot_summaries(records: &[HotRecord]) -> Vec<HotSummary> {
    contenders_in(records.iter().map(|r| r.contender))
        .into_iter()
        .map(|contender| {
            let mine: Vec<&HotRecord> = records
                .iter()
                .filter(|r| r.contender == contender)
                .collect();
            let per_acq = |r: &HotRecord, name: &str| {
                r.commands.get(name) as f64 / r.acquisitions.max(1) as f64
            };
            let share = |r: &HotRecord, pick: fn(u64, u64) -> u64| {
                let picked = r.process_acquisitions.iter().copied().reduce(pick);
                picked.unwrap_or(0) as f64 / r.acquisitions.max(1) as f64
            };
            HotSummary {
                contender,
                runs: mine.len(),
                processes: mine.first().map_or(1, |r| r.processes),
                tasks: mine.first().map_or(0, |r| r.tasks),
                per_s: median(mine.iter().map(|r| r.per_s)),
                utilization: median(mine.iter().map(|r| r.utilization)),
                share_min: median(mine.iter().map(|r| share(r, u64::min))),
                share_max: median(mine.iter().map(|r| share(r, u64::max))),
                p50_us: median(mine.iter().map(|r| r.p50_us as f64)),
                p99_us: median(mine.iter().map(|r| r.p99_us as f64)),
                max_us: median(mine.iter().map(|r| r.max_us as f64)),
                mean_hold_us: median(mine.iter().map(|r| r.mean_hold_us)),
                same_task_share: median(mine.iter().map(|r| r.same_task_share)),
                requests_per_acq: mine
                    .iter()
                    .all(|r| r.requests_per_acq.is_some())
                    .then(|| median(mine.iter().filter_map(|r| r.requests_per_acq))),
                lua_cmds_per_acq: mine
                    .iter()
                    .all(|r| r.lua_cmds_per_acq.is_some())
                    .then(|| median(mine.iter().filter_map(|r| r.lua_cmds_per_acq))),
                server_cmds_per_acq: median(mine.iter().map(|r| r.server_cmds_per_acq)),
                evalsha_per_acq: median(
                    mine.iter()
                        .map(|r| per_acq(r, "fcall") + per_acq(r, "evalsha")),
                ),
                subscribe_per_acq: median(
                    mine.iter()
                        .map(|r| per_acq(r, "subscribe") + per_acq(r, "unsubscribe")),
                ),
                violations: mine.iter().map(|r| r.violations).sum(),
                open_waits: median(mine.iter().map(|r| r.censored_us.len() as f64)),
            }
        })
        .collect()
}

/// Medians of one contender's watchdog measurements.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WatchdogSummary {
    pub(super) contender: Contender,
    pub(super) runs: usize,
    pub(super) locks: u64,
    pub(super) acquire_s: f64,
    pub(super) renewals_per_period: f64,
    pub(super) server_reads_per_period: f64,
    pub(super) client_cpu_share: f64,
    pub(super) client_cpu_us_per_renewal: f64,
    pub(super) rss_per_lock_bytes: f64,
    pub(super) heap_per_lock_bytes: f64,
    pub(super) guard_bytes: usize,
    pub(super) dbsize_before: u64,
    pub(super) dbsize_held: u64,
    pub(super) dbsize_after: u64,
    pub(super) settle_ms: f64,
    pub(super) lost: u64,
    pub(super) tracked_after: Option<u64>,
}

pub(super) fn watchdog_summaries(records: &[WatchdogRecord]) -> Vec<WatchdogSummary> {
    contenders_in(records.iter().map(|r| r.contender))
        .into_iter()
        .map(|contender| {
            let mine: Vec<&WatchdogRecord> = records
                .iter()
                .filter(|r| r.contender == contender)
                .collect();
            WatchdogSummary {
                contender,
                runs: mine.len(),
                locks: mine.first().map_or(0, |r| r.locks),
                acquire_s: median(mine.iter().map(|r| r.acquire_s)),
                renewals_per_period: median(mine.iter().map(|r| r.renewals_per_period)),
                server_reads_per_period: median(mine.iter().map(|r| r.server_reads_per_period)),
                client_cpu_share: median(mine.iter().map(|r| r.client_cpu_share)),
                client_cpu_us_per_renewal: median(mine.iter().map(|r| r.client_cpu_us_per_renewal)),
                rss_per_lock_bytes: median(mine.iter().map(|r| r.rss_per_lock_bytes)),
                heap_per_lock_bytes: median(mine.iter().map(|r| r.heap_per_lock_bytes)),
                guard_bytes: mine.first().map_or(0, |r| r.guard_bytes),
                dbsize_before: mine.iter().map(|r| r.dbsize_before).max().unwrap_or(0),
                dbsize_held: mine.iter().map(|r| r.dbsize_held).max().unwrap_or(0),
                dbsize_after: mine.iter().map(|r| r.dbsize_after).max().unwrap_or(0),
                settle_ms: median(mine.iter().map(|r| r.settle_ms)),
                lost: mine.iter().map(|r| r.lost).sum(),
                tracked_after: mine.iter().filter_map(|r| r.tracked_after).max(),
            }
        })
        .collect()
}

pub(super) fn contenders_in(all: impl Iterator<Item = Contender>) -> Vec<Contender> {
    let mut seen: Vec<Contender> = all.collect();
    seen.sort();
    seen.dedup();
    seen
}

/// The item of `list` that belongs to `contender`.
pub(super) fn find<T>(
    list: &[T],
    contender: Contender,
    of: impl Fn(&T) -> Contender,
) -> Option<&T> {
    list.iter().find(|item| of(item) == contender)
}

/// Medians of one contender's instruction counts.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct InstructionSummary {
    pub(super) contender: Contender,
    pub(super) runs: usize,
    pub(super) per_cycle: f64,
    pub(super) per_cycle_min: f64,
    pub(super) per_cycle_max: f64,
}

pub(super) fn instruction_summaries(records: &[InstructionRecord]) -> Vec<InstructionSummary> {
    contenders_in(records.iter().map(|r| r.contender))
        .into_iter()
        .map(|contender| {
            let mine: Vec<f64> = records
                .iter()
                .filter(|r| r.contender == contender)
                .map(|r| r.per_cycle)
                .collect();
            InstructionSummary {
                contender,
                runs: mine.len(),
                per_cycle: median(mine.iter().copied()),
                per_cycle_min: mine.iter().copied().fold(f64::INFINITY, f64::min),
                per_cycle_max: mine.iter().copied().fold(0.0, f64::max),
            }
        })
        .collect()
}
