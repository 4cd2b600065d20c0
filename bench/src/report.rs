//! Medians, ratios, the goal verdicts, and the files: results JSON/CSV and BENCHMARKS.md.

mod cluster_watchdog;
mod cycle_goals;
mod issue27;
mod issues;
mod primitives;
mod replicas;

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::BenchResult;
use crate::contenders::Contender;
use crate::figures::{median, ms, thousands};
use crate::scenarios::{CycleRecord, HotRecord, WatchdogRecord};

/// The machine the figures came from.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Machine {
    /// Logical CPUs.
    pub(crate) nproc: usize,
    /// `model name` from /proc/cpuinfo.
    pub(crate) cpu_model: String,
    /// The server's `redis_version`.
    pub(crate) redis_version: String,
    /// `rustc --version`.
    pub(crate) rustc: String,
    /// `uname -sr`-like kernel string from /proc.
    pub(crate) kernel: String,
    /// redis-py and Python versions, when redis-py ran.
    pub(crate) python: Option<String>,
    /// The commit measured (and the runtime files changed from it), from bench/run.
    pub(crate) code: String,
    /// `/proc/loadavg` when the measurements started and when they ended: other work on
    /// the machine shows here.
    pub(crate) load: (String, String),
}

/// How the run was set up.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Settings {
    /// Repetitions of every measurement.
    pub(crate) runs: usize,
    /// Scenario 1 duration per measurement.
    pub(crate) uncontended_s: f64,
    /// Scenario 2 tasks.
    pub(crate) many_tasks: u64,
    /// Scenario 2 duration per measurement.
    pub(crate) many_s: f64,
    /// Scenario 3 tasks.
    pub(crate) hot_tasks: u64,
    /// Scenario 3 hold.
    pub(crate) hot_hold_ms: f64,
    /// Scenario 3 window per measurement.
    pub(crate) hot_window_s: f64,
    /// Scenario 3b: processes.
    pub(crate) hot_processes: u64,
    /// Scenario 3b: tasks in each process.
    pub(crate) hot_tasks_per_process: u64,
    /// Scenario 3b window per measurement.
    pub(crate) hot_processes_window_s: f64,
    /// Scenario 3b: our two-level queue's settings (the defaults unless an experiment set
    /// them).
    pub(crate) hot_processes_queue: crate::processes::QueueSettings,
    /// Scenario 4 locks.
    pub(crate) watchdog_locks: u64,
    /// Scenario 4 ttl.
    pub(crate) watchdog_ttl_ms: u64,
    /// Scenario 4 window.
    pub(crate) watchdog_hold_s: f64,
    /// Section 5 (Redlock hot key): contending tasks.
    pub(crate) redlock_tasks: u64,
    /// Section 5 window per measurement.
    pub(crate) redlock_window_s: f64,
    /// Section 5: the masters started by bench/run (0: none).
    pub(crate) redlock_masters: u64,
    /// Section 7: runs of the cycle and wake-up sweeps (at most 3).
    pub(crate) scaling_runs: usize,
    /// Section 7: duration of each cycle measurement.
    pub(crate) scaling_cycle_s: f64,
    /// Section 9 (semaphore) window per measurement.
    pub(crate) semaphore_window_s: f64,
    /// Section 10 (read-heavy workload): tasks.
    pub(crate) rwlock_tasks: u64,
    /// Section 10 window per measurement.
    pub(crate) rwlock_window_s: f64,
    /// Section 11 (what waiting costs): the window of each measurement, at most.
    pub(crate) waiting_window_s: f64,
    /// Where the server came from.
    pub(crate) server: String,
    /// The command that produced these figures.
    pub(crate) command: String,
    /// Tokio worker threads.
    pub(crate) worker_threads: usize,
}

/// Everything one run of the bench measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Results {
    /// The machine.
    pub(crate) machine: Machine,
    /// The set-up.
    pub(crate) settings: Settings,
    /// Scenario 1, every measurement.
    pub(crate) uncontended: Vec<CycleRecord>,
    /// Scenario 2, every measurement.
    pub(crate) many_keys: Vec<CycleRecord>,
    /// Scenario 3, every measurement.
    pub(crate) hot_key: Vec<HotRecord>,
    /// Scenario 3b (several processes), every measurement.
    pub(crate) hot_key_processes: Vec<HotRecord>,
    /// Scenario 4, every measurement.
    pub(crate) watchdog: Vec<WatchdogRecord>,
    /// Section 4b (the watchdog of a cluster holder), every run.
    pub(crate) cluster_watchdog: Vec<crate::cluster::ClusterWatchdogRecord>,
    /// Section 5 (Redlock hot key), every measurement.
    pub(crate) redlock_hot: Vec<HotRecord>,
    /// Section 5 with one master silent (SIGSTOP), ours only, every measurement.
    pub(crate) redlock_silent: Vec<HotRecord>,
    /// Section 6 (instructions per cycle under callgrind), every count.
    pub(crate) instructions: Vec<crate::instructions::InstructionRecord>,
    /// Section 7 (how cost grows), every measurement.
    pub(crate) scaling: crate::scaling::Scaling,
    /// Section 8 (grants that wait for replicas), every measurement.
    pub(crate) replicas: crate::replicas::Measured,
    /// Section 8, durable grants (`WAITAOF`, on Valkey), every measurement.
    pub(crate) durable: crate::replicas::Measured,
    /// Section 8, durable grants on the primary's own append-only file only.
    pub(crate) durable_local: crate::replicas::Measured,
    /// Section 9 (a semaphore on a hot key), every run.
    pub(crate) semaphore: Vec<crate::semaphore::SemaphoreRecord>,
    /// Section 10 (read-heavy workload), every measurement.
    pub(crate) rwlock: Vec<crate::rwlock::RwRecord>,
    /// Section 11 (what waiting costs), every measurement.
    pub(crate) waiting: Vec<crate::waiting::WaitRecord>,
    /// Section 11 (a key shared with foreign clients, issue 27), every measurement.
    pub(crate) foreign: Vec<crate::foreign::ForeignRecord>,
    /// Contenders or scenarios that could not run, and why.
    pub(crate) skipped: Vec<String>,
    /// Total wall time of the measurements.
    pub(crate) wall_s: f64,
}

/// Medians of one contender's cycle measurements.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CycleSummary {
    contender: Contender,
    runs: usize,
    per_s: f64,
    per_s_min: f64,
    per_s_max: f64,
    ratio_to_raw: Option<f64>,
    /// The median over runs of this contender's rate over raw's in the same run: less
    /// sensitive to load drifting between runs than the ratio of medians.
    paired_ratio: Option<f64>,
    client_cpu_us_per_cycle: f64,
    client_switches_per_cycle: Option<f64>,
    server_cmds_per_cycle: f64,
    server_us_per_cycle: f64,
    /// Requests sent per cycle (MONITOR, one task only).
    requests_per_cycle: Option<f64>,
    failures: u64,
}

fn cycle_summaries(records: &[CycleRecord]) -> Vec<CycleSummary> {
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
    contender: Contender,
    runs: usize,
    /// Processes the tasks ran in.
    processes: u64,
    /// All contending tasks.
    tasks: u64,
    per_s: f64,
    /// Acquisitions/s × mean hold (medians of the per-run values).
    utilization: f64,
    /// The smallest and the largest process's share of the acquisitions (medians over runs).
    share_min: f64,
    share_max: f64,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    mean_hold_us: f64,
    same_task_share: f64,
    requests_per_acq: Option<f64>,
    lua_cmds_per_acq: Option<f64>,
    server_cmds_per_acq: f64,
    evalsha_per_acq: f64,
    subscribe_per_acq: f64,
    violations: u64,
    open_waits: f64,
}

fn hot_summaries(records: &[HotRecord]) -> Vec<HotSummary> {
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
    contender: Contender,
    runs: usize,
    locks: u64,
    acquire_s: f64,
    renewals_per_period: f64,
    server_reads_per_period: f64,
    client_cpu_share: f64,
    client_cpu_us_per_renewal: f64,
    rss_per_lock_bytes: f64,
    heap_per_lock_bytes: f64,
    guard_bytes: usize,
    dbsize_before: u64,
    dbsize_held: u64,
    dbsize_after: u64,
    settle_ms: f64,
    lost: u64,
    tracked_after: Option<u64>,
}

fn watchdog_summaries(records: &[WatchdogRecord]) -> Vec<WatchdogSummary> {
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

fn contenders_in(all: impl Iterator<Item = Contender>) -> Vec<Contender> {
    let mut seen: Vec<Contender> = all.collect();
    seen.sort();
    seen.dedup();
    seen
}

/// Everything a reader of the results needs: the medians next to the raw measurements.
#[derive(Debug, Clone, Serialize)]
struct Summary<'a> {
    uncontended: Vec<CycleSummary>,
    many_keys: Vec<CycleSummary>,
    hot_key: Vec<HotSummary>,
    hot_key_processes: Vec<HotSummary>,
    watchdog: Vec<WatchdogSummary>,
    redlock_hot_key: Vec<HotSummary>,
    instructions: Vec<issues::InstructionSummary>,
    goals: Vec<Goal>,
    contention_goals: Vec<SideBySide>,
    issue_goals: Vec<Goal>,
    issue27_goals: Vec<Goal>,
    results: &'a Results,
}

/// One goal of issue 5 and whether this run meets it.
#[derive(Debug, Clone, Serialize)]
struct Goal {
    goal: String,
    met: Option<bool>,
    /// Measured, but the run-to-run noise was too wide to decide.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    inconclusive: bool,
    detail: String,
}

fn find<T>(list: &[T], contender: Contender, of: impl Fn(&T) -> Contender) -> Option<&T> {
    list.iter().find(|item| of(item) == contender)
}

/// Why a contender's cycle is slower than raw's, from the measured costs per cycle.
fn cycle_gap(ours: &CycleSummary, raw: &CycleSummary) -> String {
    let mut why = format!(
        " Both make two round trips per cycle, so the gap is work per cycle, which a loop \
         waiting on its own replies pays in full on 2 cores shared by client and server: \
         client CPU {:.1} µs vs {:.1} µs, server {:.1} µs vs {:.1} µs ({:.1} vs {:.1} server \
         commands, Lua included)",
        ours.client_cpu_us_per_cycle,
        raw.client_cpu_us_per_cycle,
        ours.server_us_per_cycle,
        raw.server_us_per_cycle,
        ours.server_cmds_per_cycle,
        raw.server_cmds_per_cycle,
    );
    if let (Some(a), Some(b)) = (
        ours.client_switches_per_cycle,
        raw.client_switches_per_cycle,
    ) {
        let _ = write!(why, ", {a:.1} vs {b:.1} thread switches");
    }
    why.push('.');
    if ours
        .client_switches_per_cycle
        .zip(raw.client_switches_per_cycle)
        .is_some_and(|(a, b)| a > b + 1.0)
    {
        why.push_str(
            " The extra thread switches come from a task woken on the other worker thread \
             for every cycle (see \"Findings\" below).",
        );
    }
    if ours.server_us_per_cycle > 1.5 * raw.server_us_per_cycle {
        why.push_str(
            " On the server, ours sends the same SET NX PX and one script, but its release \
             script also looks at the wait queue (EXISTS) for a waiter to hand the lock to.",
        );
    }
    why
}

fn goals(
    results: &Results,
    uncontended: &[CycleSummary],
    many: &[CycleSummary],
    hot: &[HotSummary],
) -> Vec<Goal> {
    let mut goals = Vec::new();
    let raw_of = |list: &[CycleSummary]| find(list, Contender::Raw, |s| s.contender).cloned();
    for (name, list, bound) in [
        ("Uncontended cycle", uncontended, 0.95),
        ("Many keys (256 tasks)", many, 0.90),
    ] {
        let raw = raw_of(list);
        for contender in [Contender::Attribute, Contender::Api] {
            let Some(ours) = find(list, contender, |s| s.contender) else {
                goals.push(Goal {
                    inconclusive: false,
                    goal: format!("{name}: {} at least {bound:.2}× raw", contender.label()),
                    met: None,
                    detail: "not measured in this run".into(),
                });
                continue;
            };
            let ratio = ours.ratio_to_raw.unwrap_or(0.0);
            let met = ratio >= bound;
            let mut detail = format!(
                "{:.2}× raw ({} vs {} cycles/s, medians; the median of the per-run ratios is \
                 {:.2}×).",
                ratio,
                thousands(ours.per_s),
                thousands(raw.as_ref().map_or(0.0, |r| r.per_s)),
                ours.paired_ratio.unwrap_or(0.0)
            );
            if let (false, Some(raw)) = (met, &raw) {
                detail.push_str(&cycle_gap(ours, raw));
            }
            goals.push(Goal {
                inconclusive: false,
                goal: format!("{name}: {} at least {bound:.2}× raw", contender.label()),
                met: Some(met),
                detail,
            });
        }
    }

    // Hot key.
    let tasks = results.settings.hot_tasks as f64;
    let best_peer = hot
        .iter()
        .filter(|s| !matches!(s.contender, Contender::Api | Contender::Attribute))
        .max_by(|a, b| a.per_s.total_cmp(&b.per_s));
    if let Some(ours) = find(hot, Contender::Api, |s| s.contender) {
        let fair = tasks * ours.mean_hold_us;
        match best_peer {
            Some(peer) => goals.push(Goal {
                inconclusive: false,
                goal: "Hot key: acquisitions/s at least the best peer's".into(),
                met: Some(ours.per_s >= peer.per_s),
                detail: format!(
                    "ours {:.0}/s, best peer {} {:.0}/s ({:.2}×).{}",
                    ours.per_s,
                    peer.contender.label(),
                    peer.per_s,
                    ours.per_s / peer.per_s.max(1e-9),
                    if ours.per_s >= peer.per_s {
                        String::new()
                    } else {
                        format!(
                            " A fair hand-over passes the lock to another task: the release \
                             reaches Redis, the grant message reaches the waiter's process and \
                             wakes its task, which the peers skip when the releasing task \
                             takes the lock straight back ({:.0}% of their acquisitions); \
                             ours holds {:.2} ms per acquisition against their {:.2} ms \
                             (redis-py's sleep is closer to the 1 ms asked).",
                            peer.same_task_share * 100.0,
                            ours.mean_hold_us / 1e3,
                            peer.mean_hold_us / 1e3
                        )
                    }
                ),
            }),
            None => goals.push(Goal {
                inconclusive: false,
                goal: "Hot key: acquisitions/s at least the best peer's".into(),
                met: None,
                detail: "no peer measured".into(),
            }),
        }
        goals.push(Goal {
            inconclusive: false,
            goal: "Hot key: p99 wait at most 2 × (contenders × mean hold)".into(),
            met: Some(ours.p99_us <= 2.0 * fair),
            detail: format!(
                "p99 {} vs bound {} (64 × {} mean hold × 2).",
                ms(ours.p99_us),
                ms(2.0 * fair),
                ms(ours.mean_hold_us)
            ),
        });
        goals.push(Goal {
            inconclusive: false,
            goal: "Hot key: max wait at most 3 × (contenders × mean hold)".into(),
            met: Some(ours.max_us <= 3.0 * fair),
            detail: format!("max {} vs bound {}.", ms(ours.max_us), ms(3.0 * fair)),
        });
        goals.push(match ours.requests_per_acq {
            Some(requests) => Goal {
                inconclusive: false,
                goal: "Hot key: at most 3 requests sent per acquisition".into(),
                met: Some(requests <= 3.0),
                detail: format!(
                    "{requests:.2} requests sent per acquisition (MONITOR, commands inside Lua \
                     not counted: {:.2} script calls (FCALL or EVALSHA) + {:.2} SUBSCRIBE/UNSUBSCRIBE per acquisition); \
                     commandstats counts {:.1} server commands per acquisition including \
                     those run inside the scripts.{}",
                    ours.evalsha_per_acq,
                    ours.subscribe_per_acq,
                    ours.server_cmds_per_acq,
                    if requests <= 3.0 {
                        ""
                    } else {
                        " A hand-over takes 3 requests by design (the waiter's queueing \
                         try, its try when woken, the holder's release: see Findings); the \
                         rest is the 64 waiters' first tries, subscription and give-ups at \
                         the edges of the window."
                    }
                ),
            },
            None => Goal {
                inconclusive: false,
                goal: "Hot key: at most 3 requests sent per acquisition".into(),
                met: None,
                detail: "no MONITOR tap (REDIS_URL with credentials)".into(),
            },
        });
    }

    // Attribute against API: per-run ratios of neighbours in time (the two run one after
    // the other in every rotation but one), so machine-load drift cancels out.
    for (name, records) in [
        ("uncontended", &results.uncontended),
        ("256 keys", &results.many_keys),
    ] {
        let ratios: Vec<f64> = (0..results.settings.runs)
            .filter_map(|run| {
                let of = |c: Contender| {
                    records
                        .iter()
                        .find(|r| r.run == run && r.contender == c)
                        .map(|r| r.per_s)
                };
                Some(of(Contender::Attribute)? / of(Contender::Api)?.max(1e-9))
            })
            .collect();
        let goal = format!("Attribute costs nothing measurable over the API ({name})");
        if ratios.is_empty() {
            goals.push(Goal {
                inconclusive: false,
                goal,
                met: None,
                detail: "the attribute was not measured".into(),
            });
            continue;
        }
        let ratio = median(ratios.iter().copied());
        let spread = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            - ratios.iter().copied().fold(f64::INFINITY, f64::min);
        // Within noise: no more than 5% slower, or inside half the run-to-run spread; a
        // spread over ±10% cannot show a difference that small either way.
        let tolerance = 0.05f64.max(spread / 2.0);
        let listed: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        let listed = format!(
            "attribute/API per run: {} (median {ratio:.2})",
            listed.join(", ")
        );
        if tolerance > 0.10 {
            goals.push(Goal {
                goal,
                met: None,
                inconclusive: true,
                detail: format!(
                    "{listed}. The runs disagree by ±{:.0}%, too much to show or rule out a \
                     cost of a few percent: other work on the machine moved them (see the load \
                     average and the ranges below).",
                    tolerance * 100.0
                ),
            });
            continue;
        }
        let met = ratio >= 1.0 - tolerance;
        goals.push(Goal {
            goal,
            met: Some(met),
            inconclusive: false,
            detail: format!(
                "{listed}; counted as noise: ±{:.0}%.{}",
                tolerance * 100.0,
                if met {
                    ""
                } else {
                    " The attribute adds a task-local scope, a tracing span and a select on \
                     the lost signal around the same acquire and release."
                }
            ),
        });
    }
    goals
}

/// One goal of issue 18, judged for every contender of the run, side by side.
#[derive(Debug, Clone, Serialize)]
struct SideBySide {
    /// The scenario it is measured in.
    scenario: String,
    /// The goal, with its bound.
    goal: String,
    /// Per contender: the measured value (as shown) and whether it meets the bound.
    cells: Vec<Cell>,
}

/// One contender's value of a [`SideBySide`] goal.
#[derive(Debug, Clone, Serialize)]
struct Cell {
    contender: Contender,
    measured: String,
    met: bool,
}

/// The contenders that get a column in the side-by-side goals: ours, then the peers.
const SIDE_BY_SIDE: [Contender; 4] = [
    Contender::Api,
    Contender::Rslock,
    Contender::AsyncRedisLock,
    Contender::RedisPy,
];

/// One row of the side-by-side goals: `judge` gives a contender's value and verdict.
fn side_by_side<T>(
    scenario: &str,
    goal: String,
    list: &[T],
    of: impl Fn(&T) -> Contender,
    judge: impl Fn(&T) -> Option<(String, bool)>,
) -> Option<SideBySide> {
    let cells: Vec<Cell> = SIDE_BY_SIDE
        .iter()
        .filter_map(|&contender| {
            let (measured, met) = judge(find(list, contender, &of)?)?;
            Some(Cell {
                contender,
                measured,
                met,
            })
        })
        .collect();
    (!cells.is_empty()).then(|| SideBySide {
        scenario: scenario.to_owned(),
        goal,
        cells,
    })
}

/// The goals of issue 18 item 5: the uncontended cycle's round trips, the hot key in one
/// process and the hot key across processes, each for every contender of the run.
fn contention_goals(
    s: &Settings,
    uncontended: &[CycleSummary],
    hot: &[HotSummary],
    spread: &[HotSummary],
) -> Vec<SideBySide> {
    let mut rows = Vec::new();
    rows.push(side_by_side(
        "uncontended, 1 task",
        "requests sent (round trips) per cycle ≤ 2".into(),
        uncontended,
        |c| c.contender,
        |c| {
            c.requests_per_cycle
                .map(|r| (format!("{r:.2}"), r <= 2.005))
        },
    ));
    let one = format!("hot key, {} tasks in 1 process", s.hot_tasks);
    let many = format!(
        "hot key, {} processes × {} tasks",
        s.hot_processes, s.hot_tasks_per_process
    );
    for (scenario, list, utilization, commands) in
        [(&one, hot, 0.97, 1.0), (&many, spread, 0.93, 5.0)]
    {
        rows.push(side_by_side(
            scenario,
            format!("utilization (acquisitions/s × mean hold) ≥ {utilization:.2}"),
            list,
            |h| h.contender,
            |h| {
                Some((
                    format!(
                        "{:.2} ({:.0}/s × {})",
                        h.utilization,
                        h.per_s,
                        ms(h.mean_hold_us)
                    ),
                    h.utilization >= utilization,
                ))
            },
        ));
        rows.push(side_by_side(
            scenario,
            format!("server commands per acquisition (Lua included) ≤ {commands:.0}"),
            list,
            |h| h.contender,
            |h| {
                Some((
                    format!("{:.1}", h.server_cmds_per_acq),
                    h.server_cmds_per_acq <= commands,
                ))
            },
        ));
    }
    let quarter = 1.0 / s.hot_processes.max(1) as f64;
    rows.push(side_by_side(
        &many,
        format!(
            "each process's share of acquisitions within ±25 % of 1/{} ({:.1}–{:.1} %)",
            s.hot_processes,
            75.0 * quarter,
            125.0 * quarter
        ),
        spread,
        |h| h.contender,
        |h| {
            Some((
                format!("{:.1}–{:.1} %", h.share_min * 100.0, h.share_max * 100.0),
                h.share_min >= 0.75 * quarter && h.share_max <= 1.25 * quarter,
            ))
        },
    ));
    for (name, times, pick) in [
        (
            "p99",
            2.0,
            (|h: &HotSummary| h.p99_us) as fn(&HotSummary) -> f64,
        ),
        ("max", 3.0, |h: &HotSummary| h.max_us),
    ] {
        rows.push(side_by_side(
            &many,
            format!("{name} wait ≤ {times:.0} × (contenders × mean hold)"),
            spread,
            |h| h.contender,
            |h| {
                let bound = times * h.tasks as f64 * h.mean_hold_us;
                let wait = pick(h);
                Some((format!("{} vs {}", ms(wait), ms(bound)), wait <= bound))
            },
        ));
    }
    rows.push(side_by_side(
        &many,
        "no two holders at once (wall-clock holds of all processes)".into(),
        spread,
        |h| h.contender,
        |h| Some((format!("{} overlaps", h.violations), h.violations == 0)),
    ));
    rows.into_iter().flatten().collect()
}

/// Writes results.json, the CSV files, and BENCHMARKS.md.
pub(crate) fn write_all(
    results: &Results,
    results_dir: &Path,
    report: &Path,
    (plot_link, scaling_link): (Option<&str>, Option<&str>),
) -> BenchResult<()> {
    std::fs::create_dir_all(results_dir)?;
    let uncontended = cycle_summaries(&results.uncontended);
    let many = cycle_summaries(&results.many_keys);
    let hot = hot_summaries(&results.hot_key);
    let spread = hot_summaries(&results.hot_key_processes);
    let watchdog = watchdog_summaries(&results.watchdog);
    let goals = goals(results, &uncontended, &many, &hot);
    let contention = contention_goals(&results.settings, &uncontended, &hot, &spread);
    let redlock = hot_summaries(&results.redlock_hot);
    let counted = issues::instruction_summaries(&results.instructions);
    let mut issue_goals = issues::goals(&redlock, &counted);
    issue_goals.extend(cycle_goals::cycle_goals(&uncontended, &many, &counted));
    issue_goals.extend(issues::held_goals(&results.scaling.held));
    let mut issue27_goals = issue27::goal_rows_issue27(results, &spread);
    issue27_goals.extend(cluster_watchdog::goals(results));
    let summary = Summary {
        uncontended: uncontended.clone(),
        many_keys: many.clone(),
        hot_key: hot.clone(),
        hot_key_processes: spread.clone(),
        watchdog: watchdog.clone(),
        redlock_hot_key: redlock.clone(),
        instructions: counted.clone(),
        goals: goals.clone(),
        contention_goals: contention.clone(),
        issue_goals: issue_goals.clone(),
        issue27_goals: issue27_goals.clone(),
        results,
    };
    std::fs::write(
        results_dir.join("results.json"),
        serde_json::to_string_pretty(&summary)?,
    )?;
    write_csv(results, results_dir)?;
    let markdown = markdown(
        results,
        Tables {
            uncontended: &uncontended,
            many: &many,
            hot: &hot,
            spread: &spread,
            watchdog: &watchdog,
            goals: &goals,
            contention: &contention,
            redlock: &redlock,
            counted: &counted,
            issue_goals: &issue_goals,
            issue27_goals: &issue27_goals,
        },
        (plot_link, scaling_link),
    );
    std::fs::write(report, markdown)?;
    Ok(())
}

/// Sections 9 and 10 alone, for a `BENCH_ONLY=semaphore` or `BENCH_ONLY=rwlock` run
/// (BENCHMARKS.md is then left as it was).
pub(crate) fn primitives_markdown(results: &Results) -> String {
    primitives::markdown(results)
}

/// Section 4b alone, for a `BENCH_ONLY=cluster-watchdog` run (BENCHMARKS.md is then left
/// as it was; the section is pasted into it by hand).
pub(crate) fn cluster_watchdog_markdown(results: &Results) -> String {
    let mut out = String::new();
    cluster_watchdog::section(&mut out, results);
    out
}

/// Section 8 and its finding alone, for a `BENCH_ONLY=replicas` run (BENCHMARKS.md is then
/// left as it was; the section is pasted into it by hand).
pub(crate) fn replicas_markdown(results: &Results) -> String {
    let mut out = String::new();
    replicas::section(&mut out, results);
    if let Some(finding) = replicas::finding(&results.replicas) {
        let _ = writeln!(out, "Finding:\n\n- {finding}\n");
    }
    out
}

fn write_csv(results: &Results, dir: &Path) -> BenchResult<()> {
    let mut cycles = String::from(
        "scenario,contender,run,tasks,cycles,failures,elapsed_s,per_s,client_cpu_us_per_cycle,server_cmds_per_cycle,server_us_per_cycle\n",
    );
    for (scenario, list) in [
        ("uncontended", &results.uncontended),
        ("many_keys", &results.many_keys),
    ] {
        for r in list {
            let _ = writeln!(
                cycles,
                "{scenario},{},{},{},{},{},{:.3},{:.1},{:.2},{:.2},{:.2}",
                r.contender.id(),
                r.run,
                r.tasks,
                r.cycles,
                r.failures,
                r.elapsed_s,
                r.per_s,
                r.client_cpu_us_per_cycle,
                r.server_cmds_per_cycle,
                r.server_us_per_cycle
            );
        }
    }
    std::fs::write(dir.join("cycles.csv"), cycles)?;

    let mut hot = String::from(
        "contender,run,tasks,acquisitions,per_s,p50_us,p99_us,max_us,mean_hold_us,same_task_share,requests_per_acq,lua_cmds_per_acq,server_cmds_per_acq,open_waits,violations,utilization\n",
    );
    for r in &results.hot_key {
        let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
        let _ = writeln!(
            hot,
            "{},{},{},{},{:.1},{},{},{},{:.1},{:.4},{},{},{:.3},{},{},{:.4}",
            r.contender.id(),
            r.run,
            r.tasks,
            r.acquisitions,
            r.per_s,
            r.p50_us,
            r.p99_us,
            r.max_us,
            r.mean_hold_us,
            r.same_task_share,
            opt(r.requests_per_acq),
            opt(r.lua_cmds_per_acq),
            r.server_cmds_per_acq,
            r.censored_us.len(),
            r.violations,
            r.utilization
        );
    }
    std::fs::write(dir.join("hot_key.csv"), hot)?;

    let mut spread = String::from(
        "contender,run,processes,tasks,acquisitions,per_s,utilization,mean_hold_us,p50_us,p99_us,max_us,process_acquisitions,same_task_share,requests_per_acq,server_cmds_per_acq,open_waits,violations\n",
    );
    for r in &results.hot_key_processes {
        let per_process: Vec<String> = r.process_acquisitions.iter().map(u64::to_string).collect();
        let _ = writeln!(
            spread,
            "{},{},{},{},{},{:.1},{:.4},{:.1},{},{},{},{},{:.4},{},{:.3},{},{}",
            r.contender.id(),
            r.run,
            r.processes,
            r.tasks,
            r.acquisitions,
            r.per_s,
            r.utilization,
            r.mean_hold_us,
            r.p50_us,
            r.p99_us,
            r.max_us,
            per_process.join(" "),
            r.same_task_share,
            r.requests_per_acq
                .map_or(String::new(), |v| format!("{v:.3}")),
            r.server_cmds_per_acq,
            r.censored_us.len(),
            r.violations
        );
    }
    std::fs::write(dir.join("hot_key_processes.csv"), spread)?;

    let mut waits = String::from("contender,run,wait_us,open\n");
    for r in &results.hot_key {
        for w in &r.waits_us {
            let _ = writeln!(waits, "{},{},{w},0", r.contender.id(), r.run);
        }
        for w in &r.censored_us {
            let _ = writeln!(waits, "{},{},{w},1", r.contender.id(), r.run);
        }
    }
    std::fs::write(dir.join("hot_key_waits.csv"), waits)?;

    let mut wd = String::from(
        "contender,run,locks,ttl_ms,acquire_s,hold_s,renewals_per_period,server_reads_per_period,client_cpu_share,client_cpu_us_per_renewal,rss_per_lock_bytes,dbsize_before,dbsize_held,dbsize_after,settle_ms,lost\n",
    );
    for r in &results.watchdog {
        let _ = writeln!(
            wd,
            "{},{},{},{},{:.3},{:.3},{:.1},{:.1},{:.4},{:.2},{:.0},{},{},{},{:.1},{}",
            r.contender.id(),
            r.run,
            r.locks,
            r.ttl_ms,
            r.acquire_s,
            r.hold_s,
            r.renewals_per_period,
            r.server_reads_per_period,
            r.client_cpu_share,
            r.client_cpu_us_per_renewal,
            r.rss_per_lock_bytes,
            r.dbsize_before,
            r.dbsize_held,
            r.dbsize_after,
            r.settle_ms,
            r.lost
        );
    }
    std::fs::write(dir.join("watchdog.csv"), wd)?;
    issues::write_csv(results, dir)?;
    Ok(())
}

/// A goals table: its heading, then one row per goal with its verdict.
fn goal_table(out: &mut String, title: &str, goals: &[Goal]) {
    let _ = writeln!(out, "## {title}\n");
    let _ = writeln!(out, "| goal | verdict | measured |\n|---|---|---|");
    for goal in goals {
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            goal.goal,
            verdict(goal),
            goal.detail
        );
    }
    let _ = writeln!(out);
}

fn verdict(goal: &Goal) -> &'static str {
    match goal.met {
        Some(true) => "**met**",
        Some(false) => "**missed**",
        None if goal.inconclusive => "**inconclusive**",
        None => "not measured",
    }
}

/// Section 12 and the goals of its item alone, for a `BENCH_ONLY=foreign` run.
pub(crate) fn foreign_markdown(results: &Results) -> String {
    let mut out = String::new();
    issue27::goals_table(&mut out, &issue27::item3_goals(results));
    crate::foreign::section(&mut out, &results.foreign, &results.skipped);
    out
}

/// The summaries BENCHMARKS.md is made of.
struct Tables<'a> {
    uncontended: &'a [CycleSummary],
    many: &'a [CycleSummary],
    hot: &'a [HotSummary],
    spread: &'a [HotSummary],
    watchdog: &'a [WatchdogSummary],
    goals: &'a [Goal],
    contention: &'a [SideBySide],
    redlock: &'a [HotSummary],
    counted: &'a [issues::InstructionSummary],
    issue_goals: &'a [Goal],
    issue27_goals: &'a [Goal],
}

/// The report's sections by topic, for a reader who looks for one question's answer.
const TOPICS: &str = "What it measures, by topic (the goal tables come first and say whether \
this run met each target):

- **One lock at a time**: the uncontended cycle (section 1) and its instructions (6).
- **Many locks**: many keys (2), the watchdog at scale (4), the watchdog of a cluster holder \
(4b), how cost grows (7).
- **Contention**: one hot key (3), across processes (3b), in Redlock mode (5), a semaphore \
(9), a read-write lock (10).
- **Replication**: grants that wait for replicas, and durable grants (8).
- **Waiting and other clients**: what waiting costs Redis (11), a key shared with clients \
that do not queue (12).
";

#[allow(clippy::too_many_lines)]
fn markdown(
    results: &Results,
    tables: Tables<'_>,
    (plot_link, scaling_link): (Option<&str>, Option<&str>),
) -> String {
    let Tables {
        uncontended,
        many,
        hot,
        spread,
        watchdog,
        goals,
        contention,
        redlock,
        counted,
        issue_goals,
        issue27_goals,
    } = tables;
    let s = &results.settings;
    let m = &results.machine;
    let mut out = String::new();
    let _ = writeln!(out, "# Benchmarks\n");
    let _ = writeln!(
        out,
        "Generated by `{}`. Every figure below is the median of {} runs measured in \
         one invocation against one `redis-server` ({}), with the contenders interleaved (the \
         order rotates each run). Ratios are against the raw limit measured in the same run. \
         Regenerate it with the same command; the raw measurements are in \
         `bench/results/*.json|csv`.\n",
        s.command, s.runs, s.server
    );

    let _ = writeln!(out, "## Machine\n");
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(out, "| code measured | {} |", m.code);
    let _ = writeln!(out, "| CPUs (nproc) | {} |", m.nproc);
    let _ = writeln!(out, "| CPU model | {} |", m.cpu_model);
    let _ = writeln!(out, "| redis-server | {} |", m.redis_version);
    let _ = writeln!(out, "| rustc | {} |", m.rustc);
    let _ = writeln!(out, "| kernel | {} |", m.kernel);
    let _ = writeln!(
        out,
        "| Python reference | {} |",
        m.python.as_deref().unwrap_or("not run")
    );
    let _ = writeln!(
        out,
        "| load average (1, 5, 15 min) at start / end | {} / {} |",
        m.load.0, m.load.1
    );
    let _ = writeln!(
        out,
        "| client runtime | tokio multi-thread, {} worker threads, one process (section 3b: {} child processes, each with as many threads); the server on the same cores |",
        s.worker_threads, s.hot_processes
    );
    let _ = writeln!(
        out,
        "\nCommand, from the repository root:\n\n```sh\n{}\n```\n",
        s.command
    );

    let _ = writeln!(out, "{TOPICS}");
    goal_table(
        &mut out,
        "Goals: speed against the raw limit and the peers",
        goals,
    );
    side_by_side_table(&mut out, contention);
    issues::goals_table(&mut out, issue_goals);
    issue27::goals_table(&mut out, issue27_goals);

    for (title, note, list) in [
        (
            "1. Uncontended cycle",
            format!(
                "One task, one key: acquire (no waiting) + release, for {:.1} s per run.",
                s.uncontended_s
            ),
            uncontended,
        ),
        (
            "2. Many keys",
            format!(
                "{} concurrent tasks, each cycling on its own key, for {:.1} s per run.",
                s.many_tasks, s.many_s
            ),
            many,
        ),
    ] {
        let _ = writeln!(out, "## {title}\n\n{note}\n");
        let _ = writeln!(
            out,
            "| contender | cycles/s (median) | range over runs | × raw | × raw, same run (median) | client CPU µs/cycle | client thread switches/cycle | server µs/cycle | server cmds/cycle | requests sent/cycle | busy |"
        );
        let _ = writeln!(
            out,
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for c in list {
            let _ = writeln!(
                out,
                "| {} | {} | {}–{} | {} | {} | {:.1} | {} | {:.1} | {:.1} | {} | {} |",
                c.contender.label(),
                thousands(c.per_s),
                thousands(c.per_s_min),
                thousands(c.per_s_max),
                c.ratio_to_raw
                    .map_or("–".to_owned(), |r| format!("{r:.2}×")),
                c.paired_ratio
                    .map_or("–".to_owned(), |r| format!("{r:.2}×")),
                c.client_cpu_us_per_cycle,
                c.client_switches_per_cycle
                    .map_or("–".to_owned(), |v| format!("{v:.1}")),
                c.server_us_per_cycle,
                c.server_cmds_per_cycle,
                c.requests_per_cycle
                    .map_or("–".to_owned(), |r| format!("{r:.2}")),
                c.failures
            );
        }
        let _ = writeln!(
            out,
            "\nServer commands count what `INFO commandstats` counts, commands run inside Lua \
             scripts included. Client CPU is this process's (or the Python process's) user + \
             system time over the measurement. Requests sent per cycle are counted by a \
             `MONITOR` tap over a pass of up to 1,000 cycles of its own after the timed one \
             (the tap slows the server); one task waits for each reply, so every request is \
             a round trip.\n"
        );
    }

    let _ = writeln!(out, "## 3. One hot key\n");
    let _ = writeln!(
        out,
        "{} tasks contend for one key for {:.1} s per run; each holds it for \
         `tokio::time::sleep({} ms)` (the mean hold below is what that really took). Waits \
         still open when the window closed count at their length so far. The peers wait with \
         their defaults: rslock retries 3 times 0–200 ms apart and starts over, \
         async-redis-lock polls every 100 ms, redis-py polls every 100 ms.\n",
        s.hot_tasks, s.hot_window_s, s.hot_hold_ms
    );
    let _ = writeln!(
        out,
        "| contender | acquisitions/s | p50 wait | p99 wait | max wait | mean hold | utilization | went back to the releaser | requests sent/acq | server cmds/acq | open waits at end | exclusion violations |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for h in hot {
        let _ = writeln!(
            out,
            "| {} | {:.0} | {} | {} | {} | {} | {:.2} | {:.1}% | {} | {:.1} | {:.0} | {} |",
            h.contender.label(),
            h.per_s,
            ms(h.p50_us),
            ms(h.p99_us),
            ms(h.max_us),
            ms(h.mean_hold_us),
            h.utilization,
            h.same_task_share * 100.0,
            h.requests_per_acq
                .map_or("–".to_owned(), |r| format!("{r:.2}")),
            h.server_cmds_per_acq,
            h.open_waits,
            h.violations
        );
    }
    let _ = writeln!(
        out,
        "\n*Requests sent* are the commands clients sent (counted by a `MONITOR` tap, which \
         tells them from commands run inside Lua); *server cmds* are `INFO commandstats` \
         calls, Lua included. *Utilization* is acquisitions/s × mean hold: the share of the \
         window in which some task held the lock (1 would be a lock never idle between \
         holders). A fair hand-over bounds the wait by contenders × hold: here \
         {} × {} = {}.\n",
        s.hot_tasks,
        hot.iter()
            .find(|h| h.contender == Contender::Api)
            .map_or("–".to_owned(), |h| ms(h.mean_hold_us)),
        hot.iter()
            .find(|h| h.contender == Contender::Api)
            .map_or("–".to_owned(), |h| ms(h.mean_hold_us * s.hot_tasks as f64))
    );
    if let Some(link) = plot_link {
        let _ = writeln!(
            out,
            "![Acquire-wait distributions on the hot key (CDF, all runs pooled)]({link})\n"
        );
    }

    hot_processes_section(&mut out, s, spread);

    let _ = writeln!(out, "## 4. Watchdog at scale\n");
    let _ = writeln!(
        out,
        "{} locks acquired at once (ttl {:.0} s, renewed every ttl/3 = 1 s), held for \
         {:.1} s, then released. Renewals are the `PEXPIRE` calls in the window (each \
         renewal's, run inside its script: ours renews up to 200 leases per script call, a \
         peer one per call); server reads count \
         `total_reads_processed` (one per request, or per chunk of a pipeline), so batching \
         shows as few reads per period. Heap per held lock is the allocator's bytes in use \
         (`mallinfo2`) after acquiring minus before: what the lock allocates, the guard's own \
         allocations included; the guard value itself (its `size_of`, in the *guard* column) \
         sits in storage the caller made before the count. RSS per held \
         lock is the `/proc/self/statm` difference, which stays low when the heap reuses memory \
         freed by earlier scenarios. Only contenders with a watchdog take part.\n",
        s.watchdog_locks,
        s.watchdog_ttl_ms as f64 / 1e3,
        s.watchdog_hold_s
    );
    let _ = writeln!(
        out,
        "| contender | acquire all | renewals/period | server reads/period | client CPU (share of a core) | CPU µs/renewal | heap per held lock | guard | RSS per held lock | DBSIZE before → held → after | lost | leases tracked after |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"
    );
    for w in watchdog {
        let _ = writeln!(
            out,
            "| {} | {:.2} s | {} | {} | {:.1}% | {:.2} | {:.0} B | {} B | {:.0} B | {} → {} → {} | {} | {} |",
            w.contender.label(),
            w.acquire_s,
            thousands(w.renewals_per_period),
            thousands(w.server_reads_per_period),
            w.client_cpu_share * 100.0,
            w.client_cpu_us_per_renewal,
            w.heap_per_lock_bytes,
            w.guard_bytes,
            w.rss_per_lock_bytes,
            w.dbsize_before,
            w.dbsize_held,
            w.dbsize_after,
            w.lost,
            w.tracked_after.map_or("–".to_owned(), |t| t.to_string())
        );
    }
    let _ = writeln!(out);
    cluster_watchdog::section(&mut out, results);
    issues::redlock_section(
        &mut out,
        s,
        redlock,
        &hot_summaries(&results.redlock_silent),
    );
    issues::instructions_section(&mut out, results, counted);
    issues::scaling_section(&mut out, results, scaling_link);
    replicas::section(&mut out, results);
    primitives::semaphore_section(
        &mut out,
        results,
        find(hot, Contender::Api, |h| h.contender).map(|h| h.mean_hold_us),
    );
    primitives::rwlock_section(&mut out, results);
    crate::waiting::section(&mut out, &results.waiting, s.waiting_window_s);
    if !results.foreign.is_empty() {
        crate::foreign::section(&mut out, &results.foreign, &results.skipped);
    }

    findings(&mut out, (uncontended, hot, watchdog), results, s);
    // The measured changes (bench/ab runs) are history, kept in bench/HISTORY.md: the
    // report says where, and shows only what this run measured.
    let _ = writeln!(
        out,
        "How each change to the runtime moved these figures, measured before and after with \
         `bench/ab`, is kept in `bench/HISTORY.md`.\n"
    );

    if !results.skipped.is_empty() {
        let _ = writeln!(out, "## Not measured in this run\n");
        for skipped in &results.skipped {
            let _ = writeln!(out, "- {skipped}");
        }
        let _ = writeln!(out);
    }

    let _ = writeln!(out, "## How it measures\n");
    let _ = writeln!(
        out,
        "- **raw limit**: one redis-rs multiplexed connection; `SET key token NX PX 10000`, \
         then `EVALSHA` of a GET-compare-DEL script: the two round trips any token lock needs.\n\
         - **ours**: the global client (`lock_runtime::init(Config::single(url))`, pool of \
         1); the attribute is `#[distributed_lock(key = \"bench:<id>\", ttl = \"10s\", \
         wait = \"0s\")]` on an empty `async fn`; the API is \
         `Lock::new(key).ttl(10s).wait(0s).client(&global).acquire()` + `guard.release()`.\n\
         - **rslock**: `LockManager::lock` + `unlock` (one server), `acquire` for the hot key; \
         **async-redis-lock**: `acquire_with_options` + `release`; **redis-py**: \
         `Redis.lock(key, timeout=10)` with one thread per task.\n\
         - Client CPU: `getrusage(RUSAGE_SELF)`; memory: `/proc/self/statm` before and after \
         acquiring; server counters: `CONFIG RESETSTAT` before each measurement, then \
         `INFO commandstats` / `INFO stats`.\n\
         - **Redlock (section 5)**: three more throwaway redis-servers started by `bench/run` \
         (`BENCH_REDLOCK_URLS`); ours is `LockClient::new(Config::redlock(urls))`, rslock \
         `LockManager::new(urls)`; every master's counters are reset, tapped and summed.\n\
         - **Replicas (section 8)**: a primary and a replica (`--replicaof`) started by \
         `bench/run` (`BENCH_REPLICA_URLS`); ours and raw each get a client without and one \
         with the option, run one after the other in the same run; the counters are the \
         primary's. Durable grants: the same on a Valkey primary and replica with their \
         append-only files on (`BENCH_AOF_URLS`; not measured without `valkey-server`).\n\
         - **Cluster holder (section 4b)**: three redis-servers with `cluster-enabled yes` \
         joined by `redis-cli --cluster create` (`BENCH_CLUSTER_URLS`); each master's \
         `INFO stats` and `INFO cpu` are read before and after the window.\n\
         - **Instructions (section 6)**: `valgrind --tool=callgrind` around \
         `lock-bench instructions CONTENDER N` (the bench's own binary), two values of N, \
         the difference per cycle.\n\
         - Wall time of all measurements: {:.0} s.\n",
        results.wall_s
    );
    out
}

/// Section 11 and the goals of issue 27 alone, for a `BENCH_ONLY=waiting` run (BENCHMARKS.md
/// is then left as it was; they are pasted into it by hand).
pub(crate) fn waiting_markdown(results: &Results) -> String {
    let mut out = String::new();
    issue27::goals_table(&mut out, &issue27::item1_goals(results));
    crate::waiting::section(
        &mut out,
        &results.waiting,
        results.settings.waiting_window_s,
    );
    let _ = writeln!(
        out,
        "Command: `{}` (BENCH_ONLY=waiting), code {}, load average {} at start / {} at end, wall time {:.0} s.\n",
        results.settings.command,
        results.machine.code,
        results.machine.load.0,
        results.machine.load.1,
        results.wall_s
    );
    out
}

/// The goals of issue 18 with every contender of the run side by side.
fn side_by_side_table(out: &mut String, rows: &[SideBySide]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(out, "## Goals: contention, every contender side by side\n");
    let _ = writeln!(
        out,
        "The bounds are the contention goals for ours; the peers are judged by the same bounds \
         for comparison. Each value is the median over the runs.\n"
    );
    let columns: Vec<Contender> = SIDE_BY_SIDE
        .iter()
        .copied()
        .filter(|c| {
            rows.iter()
                .any(|r| r.cells.iter().any(|x| x.contender == *c))
        })
        .collect();
    let _ = write!(out, "| scenario | goal |");
    for c in &columns {
        let _ = write!(out, " {} |", c.label());
    }
    let _ = write!(out, "\n|---|---|");
    for _ in &columns {
        let _ = write!(out, "---|");
    }
    let _ = writeln!(out);
    for row in rows {
        let _ = write!(out, "| {} | {} |", row.scenario, row.goal);
        for c in &columns {
            match row.cells.iter().find(|x| x.contender == *c) {
                Some(cell) => {
                    let verdict = if cell.met { "**met**" } else { "**missed**" };
                    let _ = write!(out, " {} {verdict} |", cell.measured);
                }
                None => {
                    let _ = write!(out, " not measured |");
                }
            }
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out);
}

/// Section 3b: the hot key contended from several processes.
fn hot_processes_section(out: &mut String, s: &Settings, spread: &[HotSummary]) {
    let _ = writeln!(
        out,
        "## 3b. One hot key, {} processes × {} tasks\n",
        s.hot_processes, s.hot_tasks_per_process
    );
    let _ = writeln!(
        out,
        "The bench starts {} child processes of its own (this binary in worker mode; for \
         redis-py, {} Python processes with {} threads each), each with {} tasks contending \
         for one key for {:.1} s per run and holding it for a 1 ms sleep (the mean hold is \
         what that really took). The children connect and warm up, say `ready`, and start \
         together on `go`; the server's counters and the `MONITOR` tap cover the window. \
         Waits still open when the window closed count at their length so far. A process's \
         share is its part of all acquisitions (smallest – largest); *went back to the \
         releaser* counts, over the holds of all processes in time order, a hold by the task \
         that held just before. Utilization, requests sent and server cmds are as in section \
         3. Exclusion is checked across processes from every hold's wall-clock interval, \
         measured inside the critical section.\n",
        s.hot_processes,
        s.hot_processes,
        s.hot_tasks_per_process,
        s.hot_tasks_per_process,
        s.hot_processes_window_s
    );
    if spread.is_empty() {
        let _ = writeln!(out, "Not measured in this run.\n");
        return;
    }
    let _ = writeln!(
        out,
        "| contender | acquisitions/s | utilization | mean hold | p50 wait | p99 wait | max wait | contenders × mean hold | share per process | went back to the releaser | requests sent/acq | server cmds/acq | open waits at end | exclusion violations |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for h in spread {
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.2} | {} | {} | {} | {} | {} | {:.1}–{:.1} % | {:.1}% | {} | {:.1} | {:.0} | {} |",
            h.contender.label(),
            h.per_s,
            h.utilization,
            ms(h.mean_hold_us),
            ms(h.p50_us),
            ms(h.p99_us),
            ms(h.max_us),
            ms(h.tasks as f64 * h.mean_hold_us),
            h.share_min * 100.0,
            h.share_max * 100.0,
            h.same_task_share * 100.0,
            h.requests_per_acq
                .map_or("–".to_owned(), |r| format!("{r:.2}")),
            h.server_cmds_per_acq,
            h.open_waits,
            h.violations
        );
    }
    let _ = writeln!(out);
}

/// What the figures say about lock-runtime's own costs; each paragraph appears only while
/// the measurement still shows it.
fn findings(
    out: &mut String,
    (uncontended, hot, watchdog): (&[CycleSummary], &[HotSummary], &[WatchdogSummary]),
    results: &Results,
    s: &Settings,
) {
    let mut notes = Vec::new();
    let api = find(uncontended, Contender::Api, |c| c.contender);
    let raw = find(uncontended, Contender::Raw, |c| c.contender);
    if let (Some(api), Some(raw)) = (api, raw) {
        if let (Some(a), Some(b)) = (api.client_switches_per_cycle, raw.client_switches_per_cycle)
            && a > b + 1.0
        {
            notes.push(format!(
                "**A task wake-up per acquisition.** {a:.1} thread switches per cycle where \
                 raw's costs {b:.1}, and {:.0} µs of client CPU per cycle against {:.0} µs. \
                 The watchdog's scheduler used to be woken by every lease registration \
                 (fixed: an idle scheduler now looks again after the recent ttl/3, see \
                 bench/HISTORY.md); something else now wakes a task per cycle.",
                api.client_cpu_us_per_cycle, raw.client_cpu_us_per_cycle
            ));
        }
        if api.server_us_per_cycle > 1.5 * raw.server_us_per_cycle {
            notes.push(format!(
                "**Server time per uncontended cycle.** Ours acquires with a plain `SET NX \
                 PX` (a client that knows of no waiter on the key) and releases with \
                 release.lua, which besides compare-and-delete looks at the wait queue for \
                 a waiter to hand the lock to: {:.1} server commands and {:.1} µs of server \
                 time per cycle against raw's {:.1} and {:.1} µs. That is the price of \
                 fairness across processes; it shows most where client and server share two \
                 cores.",
                api.server_cmds_per_cycle,
                api.server_us_per_cycle,
                raw.server_cmds_per_cycle,
                raw.server_us_per_cycle
            ));
        }
    }
    if let Some(ours) = find(hot, Contender::Api, |h| h.contender) {
        if ours.requests_per_acq.is_some_and(|r| r > 2.5) {
            notes.push(format!(
                "**Three requests per hand-over on a hot key.** A waiter sends one acquire \
                 that puts it in the queue and another when the release wakes it, and the \
                 holder sends the release: {:.2} script calls (FCALL or EVALSHA) per acquisition measured (plus the \
                 one subscription per process and the waiters' first tries and give-ups at \
                 the edges of the window). The release already keeps the key for the head \
                 waiter (`~handover`); setting it to the head's own token instead would save \
                 the woken waiter's round trip, but the waiter could then date its lease only \
                 from its first try (a lease shortened by the whole wait). That round trip is \
                 also what separates ours from the peers in acquisitions/s: they skip the \
                 hand-over when the releasing task takes the lock straight back.",
                ours.evalsha_per_acq
            ));
        }
        if ours.mean_hold_us > 1.5e3 * s.hot_hold_ms {
            notes.push(format!(
                "**`tokio::time::sleep({} ms)` holds for {}.** Tokio's timer wheel has a \
                 1 ms tick and rounds up, so every Rust contender holds about 2 ms; redis-py's \
                 `time.sleep` holds closer to 1 ms. The fairness bounds above use the measured \
                 mean hold.",
                s.hot_hold_ms,
                ms(ours.mean_hold_us)
            ));
        }
    }
    if let Some(ours) = find(watchdog, Contender::Api, |w| w.contender)
        && ours.renewals_per_period > 1.2 * ours.locks as f64
    {
        notes.push(format!(
            "**Renewals more often than every ttl/3.** {} renewals per period for {} \
                 locks: leases renewed early (up to ttl/12 before they fall due, to share a \
                 pipeline) restart their ttl/3 from the early send time.",
            thousands(ours.renewals_per_period),
            ours.locks
        ));
    }
    notes.extend(replicas::finding(&results.replicas));
    notes.extend(replicas::durable_finding(results));
    if notes.is_empty() {
        return;
    }
    let _ = writeln!(out, "## Findings\n");
    for note in notes {
        let _ = writeln!(out, "- {note}");
    }
    let _ = writeln!(out);
}

#[cfg(test)]
mod tests {
    use super::{Machine, Results, Settings, Tables, markdown};
    use crate::semaphore::SemaphoreRecord;

    pub(super) fn empty_results() -> Results {
        Results {
            machine: Machine {
                nproc: 2,
                cpu_model: "test".into(),
                redis_version: "7".into(),
                rustc: "rustc".into(),
                kernel: "Linux".into(),
                python: None,
                code: "test".into(),
                load: (String::new(), String::new()),
            },
            settings: Settings {
                runs: 1,
                uncontended_s: 1.0,
                many_tasks: 256,
                many_s: 1.0,
                hot_tasks: 64,
                hot_hold_ms: 1.0,
                hot_window_s: 1.0,
                hot_processes: 4,
                hot_tasks_per_process: 16,
                hot_processes_window_s: 1.0,
                hot_processes_queue: crate::processes::QueueSettings::defaults(),
                watchdog_locks: 10,
                watchdog_ttl_ms: 3_000,
                watchdog_hold_s: 1.0,
                redlock_tasks: 64,
                redlock_window_s: 1.0,
                redlock_masters: 0,
                scaling_runs: 1,
                scaling_cycle_s: 1.0,
                semaphore_window_s: 1.0,
                rwlock_tasks: 64,
                rwlock_window_s: 1.0,
                waiting_window_s: 1.0,
                server: "test".into(),
                command: "bench/run".into(),
                worker_threads: 2,
            },
            uncontended: Vec::new(),
            many_keys: Vec::new(),
            hot_key: Vec::new(),
            hot_key_processes: Vec::new(),
            watchdog: Vec::new(),
            cluster_watchdog: Vec::new(),
            redlock_hot: Vec::new(),
            redlock_silent: Vec::new(),
            instructions: Vec::new(),
            scaling: crate::scaling::Scaling::default(),
            replicas: crate::replicas::Measured::default(),
            durable: crate::replicas::Measured::default(),
            durable_local: crate::replicas::Measured::default(),
            semaphore: Vec::new(),
            rwlock: Vec::new(),
            waiting: Vec::new(),
            foreign: Vec::new(),
            skipped: Vec::new(),
            wall_s: 0.0,
        }
    }

    pub(super) fn report(results: &Results) -> String {
        markdown(
            results,
            Tables {
                uncontended: &[],
                many: &[],
                hot: &[],
                spread: &[],
                watchdog: &[],
                goals: &[],
                contention: &[],
                redlock: &[],
                counted: &[],
                issue_goals: &[],
                issue27_goals: &[],
            },
            (None, None),
        )
    }

    /// Results with a semaphore and a read-write lock run, so those sections are written.
    fn primitives_results() -> Results {
        let mut results = empty_results();
        results.semaphore.push(SemaphoreRecord {
            run: 0,
            semaphore_per_s: 1_200.0,
            semaphore_most_at_once: 4,
            mutex_per_s: 450.0,
            raw_round_trips_per_s: 120_000.0,
            semaphore_p99_wait_us: 20_000,
        });
        results.rwlock.push(crate::rwlock::RwRecord {
            kind: crate::rwlock::Kind::ReadWrite,
            run: 0,
            operations_per_s: 1_600.0,
            reads: 5_760,
            writes: 640,
            read_p50_us: 35_000,
            read_p99_us: 70_000,
            write_p99_us: 140_000,
            errors: 0,
        });
        results
    }

    #[test]
    fn a_full_report_writes_the_semaphore_and_rwlock_sections() {
        let results = primitives_results();
        let text = report(&results);
        for heading in [
            "## 9. A semaphore of 4 permits on a hot key",
            "## 10. Read-heavy workload: read-write lock against the mutex",
        ] {
            assert!(text.contains(heading), "no {heading:?} in the report");
        }
        assert!(text.contains("| semaphore, 4 permits: permits taken and given back | 1,200 | 2.67× the mutex; 0.010× raw |"));
        assert!(text.contains("| RwLock (read / write) | 1,600 |"));
    }

    /// The report is for users, organised by topic: it names no issue of the project, and
    /// the history of changes stays in bench/HISTORY.md instead of being copied in.
    #[test]
    fn the_report_is_by_topic_without_issue_numbers_or_history() {
        let text = report(&primitives_results());
        assert!(
            text.contains("What it measures, by topic"),
            "no topic list:\n{text}"
        );
        for line in text.lines() {
            let lower = line.to_lowercase();
            assert!(
                !lower.contains("issue"),
                "the report names an issue: {line}"
            );
        }
        assert!(
            !text.contains("## Before and after"),
            "the report copies bench/HISTORY.md's history"
        );
        assert!(
            text.contains("`bench/HISTORY.md`"),
            "the report does not say where the history is"
        );
    }
}
