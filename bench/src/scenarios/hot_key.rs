//! Scenario 3: contending tasks on one hot key.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::cycle::MAX_ITERATIONS;
use crate::admin::{self, Admin, CommandStats, Monitored};
use crate::contenders::{Clients, Contender};
use crate::error::BenchResult;
use crate::python::{PyHot, Python};

/// One measurement of the hot key (scenario 3: one process; scenario 3b: several).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HotRecord {
    /// Which client.
    pub(crate) contender: Contender,
    /// Which repetition (0-based).
    pub(crate) run: usize,
    /// Contending tasks, all processes together.
    pub(crate) tasks: u64,
    /// Processes the tasks ran in (1: this one; more: child processes).
    pub(crate) processes: u64,
    /// Acquisitions inside the window won by each process.
    pub(crate) process_acquisitions: Vec<u64>,
    /// How long each holder sleeps while holding.
    pub(crate) hold_ms: f64,
    /// The measurement window.
    pub(crate) window_s: f64,
    /// Acquisitions completed inside the window.
    pub(crate) acquisitions: u64,
    /// Acquisitions per second.
    pub(crate) per_s: f64,
    /// Every completed wait, in microseconds.
    pub(crate) waits_us: Vec<u64>,
    /// Waits still open when the window closed (lower bounds), in microseconds.
    pub(crate) censored_us: Vec<u64>,
    /// Median wait (open waits counted at their length so far).
    pub(crate) p50_us: u64,
    /// 99th percentile wait.
    pub(crate) p99_us: u64,
    /// Longest wait.
    pub(crate) max_us: u64,
    /// Mean time from acquired to release called.
    pub(crate) mean_hold_us: f64,
    /// Acquisitions per second × mean hold: the share of the window the lock was held.
    pub(crate) utilization: f64,
    /// Share of acquisitions won by the task that released last.
    pub(crate) same_task_share: f64,
    /// Times two tasks held the lock at once (must be 0).
    pub(crate) violations: u64,
    /// Requests sent by clients per acquisition (MONITOR; `None` without a tap).
    pub(crate) requests_per_acq: Option<f64>,
    /// Commands run inside Lua per acquisition (MONITOR).
    pub(crate) lua_cmds_per_acq: Option<f64>,
    /// Server commands per acquisition (commandstats: inside Lua included).
    pub(crate) server_cmds_per_acq: f64,
    /// Client CPU seconds over the window.
    pub(crate) client_cpu_s: f64,
    /// The server's counters for the window.
    pub(crate) commands: CommandStats,
    /// How the processes took turns (scenario 3b, Rust contenders: their holds' intervals).
    pub(crate) tenures: Option<crate::tenures::Tenures>,
}

/// What the contending tasks of one hot-key run saw.
#[derive(Debug, Default)]
pub(crate) struct HotOutcome {
    pub(crate) waits_us: Vec<u64>,
    pub(crate) censored_us: Vec<u64>,
    pub(crate) holds_us: Vec<u64>,
    /// Each hold inside the window as (acquired, about to release, task) in microseconds
    /// of the wall clock (`CLOCK_REALTIME`, comparable between processes), for the checks
    /// across processes.
    pub(crate) intervals_us: Vec<(u64, u64, u64)>,
    pub(crate) same_task: u64,
    pub(crate) violations: u64,
    pub(crate) client_cpu_s: f64,
    /// The tenures of several processes' holds (scenario 3b only).
    pub(crate) tenures: Option<crate::tenures::Tenures>,
}

impl From<PyHot> for HotOutcome {
    fn from(out: PyHot) -> Self {
        let acquisitions = out.waits_us.len();
        HotOutcome {
            waits_us: out.waits_us,
            censored_us: out.censored_us,
            // The script reports the mean; spread it so the record's mean comes out the same.
            holds_us: vec![out.mean_hold_us.round() as u64; acquisitions],
            intervals_us: Vec::new(),
            same_task: out.same_task,
            violations: out.violations,
            client_cpu_s: out.client_cpu_s,
            tenures: None,
        }
    }
}

/// `tasks` tasks contending for one key for `window`, each holding it for `hold`.
#[allow(clippy::too_many_arguments)] // the scenario's parameters, each used once
pub(crate) async fn hot_key(
    clients: &Arc<Clients>,
    admin: &Admin,
    contender: Contender,
    run: usize,
    tasks: u64,
    hold: Duration,
    window: Duration,
    python: Option<&Python>,
) -> BenchResult<HotRecord> {
    let key = format!("bench:hot:{}:{run}", contender.id());
    admin.reset_stats().await?;
    let monitor = admin.monitor().await?;
    let outcome = match contender {
        Contender::RedisPy => {
            let python = python.ok_or("redis-py is not available")?;
            HotOutcome::from(python.hot(&key, window, tasks, hold).await?)
        }
        _ => hot_tasks(clients, contender, &key, tasks, hold, window).await?,
    };
    let monitored = match monitor {
        Some(monitor) => Some(monitor.finish(admin).await?),
        None => None,
    };
    let commands = admin.command_stats().await?;
    // Let background give-ups (dropped waiters leaving the queue) finish before clean-up.
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The key and whatever the contender keeps beside it (ours: its queue, whatever the
    // runtime names it), found by the key's name inside theirs.
    admin.del_matching(&format!("*{key}*")).await?;
    let acquisitions = vec![outcome.waits_us.len() as u64];
    Ok(hot_record(
        contender,
        run,
        (tasks, acquisitions),
        hold,
        window,
        outcome,
        monitored,
        commands,
    ))
}

/// The record of one hot-key measurement; `tasks` is (all tasks, acquisitions per process).
#[allow(clippy::too_many_arguments)] // a plain constructor of one record
pub(crate) fn hot_record(
    contender: Contender,
    run: usize,
    (tasks, process_acquisitions): (u64, Vec<u64>),
    hold: Duration,
    window: Duration,
    outcome: HotOutcome,
    monitored: Option<Monitored>,
    commands: CommandStats,
) -> HotRecord {
    let acquisitions = outcome.waits_us.len() as u64;
    let per_acq = |value: f64| value / (acquisitions.max(1)) as f64;
    let mut all: Vec<u64> = outcome
        .waits_us
        .iter()
        .chain(&outcome.censored_us)
        .copied()
        .collect();
    all.sort_unstable();
    let mean_hold_us = if outcome.holds_us.is_empty() {
        0.0
    } else {
        outcome.holds_us.iter().sum::<u64>() as f64 / outcome.holds_us.len() as f64
    };
    let per_s = acquisitions as f64 / window.as_secs_f64();
    HotRecord {
        contender,
        run,
        tasks,
        processes: process_acquisitions.len() as u64,
        process_acquisitions,
        hold_ms: hold.as_secs_f64() * 1e3,
        window_s: window.as_secs_f64(),
        acquisitions,
        per_s,
        p50_us: percentile(&all, 0.50),
        p99_us: percentile(&all, 0.99),
        max_us: all.last().copied().unwrap_or(0),
        waits_us: outcome.waits_us,
        censored_us: outcome.censored_us,
        mean_hold_us,
        utilization: per_s * mean_hold_us / 1e6,
        same_task_share: per_acq(outcome.same_task as f64),
        violations: outcome.violations,
        requests_per_acq: monitored.map(|m| per_acq(m.requests as f64)),
        lua_cmds_per_acq: monitored.map(|m| per_acq(m.in_lua as f64)),
        server_cmds_per_acq: per_acq(commands.total_calls() as f64),
        client_cpu_s: outcome.client_cpu_s,
        commands,
        tenures: outcome.tenures,
    }
}

/// The `q` quantile of sorted values (nearest rank).
pub(crate) fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The contending tasks of one Rust contender (in this process).
pub(crate) async fn hot_tasks(
    clients: &Arc<Clients>,
    contender: Contender,
    key: &str,
    tasks: u64,
    hold: Duration,
    window: Duration,
) -> BenchResult<HotOutcome> {
    let last_releaser = Arc::new(AtomicI64::new(-1));
    let held_now = Arc::new(AtomicBool::new(false));
    let cpu0 = admin::cpu_time();
    let start = Instant::now();
    let end = start + window;
    let handles: Vec<_> = (0..tasks)
        .map(|me| {
            let task = Task {
                clients: clients.clone(),
                contender,
                key: key.to_owned(),
                last_releaser: last_releaser.clone(),
                held_now: held_now.clone(),
                me: me as i64,
            };
            tokio::spawn(task.contend(end, hold))
        })
        .collect();
    let mut total = HotOutcome::default();
    for handle in handles {
        let out = handle.await??;
        total.waits_us.extend(out.waits_us);
        total.censored_us.extend(out.censored_us);
        total.holds_us.extend(out.holds_us);
        total.intervals_us.extend(out.intervals_us);
        total.same_task += out.same_task;
        total.violations += out.violations;
    }
    // Same-task wins are only counted for acquisitions inside the window.
    total.client_cpu_s = admin::cpu_time().saturating_sub(cpu0).as_secs_f64();
    Ok(total)
}

/// One contending task of [`hot_tasks`] and what it shares with the others.
struct Task {
    clients: Arc<Clients>,
    contender: Contender,
    key: String,
    /// The task that released last (-1: none yet).
    last_releaser: Arc<AtomicI64>,
    /// Whether some task holds the key now.
    held_now: Arc<AtomicBool>,
    /// This task's number.
    me: i64,
}

impl Task {
    /// Acquires, holds for `hold` and releases until `end`.
    async fn contend(self, end: Instant, hold: Duration) -> BenchResult<HotOutcome> {
        let Task {
            clients,
            contender,
            key,
            last_releaser,
            held_now,
            me,
        } = self;
        let mut out = HotOutcome::default();
        for _ in 0..MAX_ITERATIONS {
            let t0 = Instant::now();
            if t0 >= end {
                break;
            }
            let Some(held) = clients.acquire_hot(contender, &key, end).await? else {
                out.censored_us.push(micros(t0.elapsed()));
                break;
            };
            let acquired = Instant::now();
            if held_now.swap(true, Ordering::SeqCst) {
                out.violations += 1;
            }
            if last_releaser.load(Ordering::SeqCst) == me {
                out.same_task += 1;
            }
            if acquired >= end {
                held_now.store(false, Ordering::SeqCst);
                held.release().await?;
                out.censored_us.push(micros(acquired - t0));
                break;
            }
            let acquired_wall = wall_micros();
            out.waits_us.push(micros(acquired - t0));
            tokio::time::sleep(hold).await;
            out.holds_us.push(micros(acquired.elapsed()));
            out.intervals_us
                .push((acquired_wall, wall_micros(), me as u64));
            held_now.store(false, Ordering::SeqCst);
            last_releaser.store(me, Ordering::SeqCst);
            held.release().await?;
        }
        BenchResult::Ok(out)
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// Microseconds since the Unix epoch on the wall clock (the same clock in every process).
fn wall_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, micros)
}

/// Holds of different processes that overlap: `intervals` are (acquired, about to release)
/// on the wall clock, each measured inside its holder's critical section, so any overlap
/// is two holders at once. Counts the holds that start before an earlier one ended.
pub(crate) fn overlaps(mut intervals: Vec<(u64, u64)>) -> u64 {
    intervals.sort_unstable();
    let mut ended = 0u64;
    let mut overlapping = 0;
    for (start, end) in intervals {
        if start < ended {
            overlapping += 1;
        }
        ended = ended.max(end);
    }
    overlapping
}
