//! The four measured scenarios. Every loop is bounded by a deadline and by a count.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use lock_runtime::{Config, LockClient};
use serde::Serialize;
use tokio::time::Instant;

use crate::admin::{self, Admin, CommandStats, Monitored};
use crate::contenders::{Clients, Contender, Held, key_of};
use crate::error::BenchResult;
use crate::python::{PyHot, Python};

/// No loop of the bench runs more often than this, whatever its deadline.
const MAX_ITERATIONS: u64 = 5_000_000;

/// One measurement of acquire + release cycles (scenarios 1 and 2).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CycleRecord {
    /// Which client.
    pub(crate) contender: Contender,
    /// Which repetition (0-based).
    pub(crate) run: usize,
    /// Concurrent tasks, each on its own key.
    pub(crate) tasks: u64,
    /// Completed cycles.
    pub(crate) cycles: u64,
    /// Tries that found the lock busy (never expected).
    pub(crate) failures: u64,
    /// Wall time of the measurement.
    pub(crate) elapsed_s: f64,
    /// Cycles per second.
    pub(crate) per_s: f64,
    /// Client CPU per cycle (this process, or the Python process).
    pub(crate) client_cpu_us_per_cycle: f64,
    /// Context switches of this process per cycle (`None` for redis-py).
    pub(crate) client_switches_per_cycle: Option<f64>,
    /// Server commands per cycle (commandstats: commands inside Lua included).
    pub(crate) server_cmds_per_cycle: f64,
    /// Server time per cycle (commandstats usec).
    pub(crate) server_us_per_cycle: f64,
    /// Requests sent per cycle (one task only: every request is a round trip), counted by a
    /// `MONITOR` tap over a short pass of its own after the measurement, so that the tap
    /// does not slow the timed cycles. `None` without a tap, for many tasks and redis-py.
    pub(crate) requests_per_cycle: Option<f64>,
    /// The server's counters for the measurement.
    pub(crate) commands: CommandStats,
}

/// Cycles in the `MONITOR`-tapped pass that counts requests per uncontended cycle.
const TAPPED_CYCLES: u64 = 1_000;

/// Runs `tasks` tasks on distinct keys, each cycling for `duration`.
pub(crate) async fn cycles(
    clients: &Arc<Clients>,
    admin: &Admin,
    contender: Contender,
    run: usize,
    tasks: u64,
    duration: Duration,
) -> BenchResult<CycleRecord> {
    let base = contender.key_base() + (run as u64) * 10_000;
    // Warm-up: connections open, scripts loaded, caches hot.
    let warm_deadline = Instant::now() + duration / 5;
    spread(clients, contender, base, tasks, warm_deadline, 200).await?;
    admin.reset_stats().await?;
    let usage0 = admin::usage();
    let start = Instant::now();
    let (cycles, failures) = spread(
        clients,
        contender,
        base,
        tasks,
        start + duration,
        MAX_ITERATIONS,
    )
    .await?;
    let elapsed = start.elapsed().as_secs_f64();
    let used = admin::usage().since(usage0);
    let commands = admin.command_stats().await?;
    let mut record = cycle_record(
        contender,
        run,
        tasks,
        cycles,
        failures,
        elapsed,
        used.cpu.as_secs_f64(),
        commands,
    );
    record.client_switches_per_cycle = Some(used.switches as f64 / cycles.max(1) as f64);
    if tasks == 1 {
        record.requests_per_cycle = requests_per_cycle(clients, admin, contender, base).await?;
    }
    Ok(record)
}

/// Requests sent per cycle by one task on one key, over a short pass under a `MONITOR` tap
/// (bounded by [`TAPPED_CYCLES`] and 5 s); `None` when the server cannot be tapped.
async fn requests_per_cycle(
    clients: &Arc<Clients>,
    admin: &Admin,
    contender: Contender,
    base: u64,
) -> BenchResult<Option<f64>> {
    let Some(monitor) = admin.monitor().await? else {
        return Ok(None);
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let (cycles, busy) = spread(clients, contender, base, 1, deadline, TAPPED_CYCLES).await?;
    let monitored = monitor.finish(admin).await?;
    // A busy try is a request too; the pass runs alone, so there is none.
    Ok(Some(
        monitored.requests as f64 / (cycles + busy).max(1) as f64,
    ))
}

#[allow(clippy::too_many_arguments)] // a plain constructor of one record
fn cycle_record(
    contender: Contender,
    run: usize,
    tasks: u64,
    cycles: u64,
    failures: u64,
    elapsed_s: f64,
    cpu_s: f64,
    commands: CommandStats,
) -> CycleRecord {
    let per = |value: f64| {
        if cycles == 0 {
            0.0
        } else {
            value / cycles as f64
        }
    };
    CycleRecord {
        contender,
        run,
        tasks,
        cycles,
        failures,
        elapsed_s,
        per_s: cycles as f64 / elapsed_s.max(1e-9),
        client_cpu_us_per_cycle: per(cpu_s * 1e6),
        client_switches_per_cycle: None,
        server_cmds_per_cycle: per(commands.total_calls() as f64),
        server_us_per_cycle: per(commands.total_usec() as f64),
        requests_per_cycle: None,
        commands,
    }
}

/// `tasks` spawned tasks cycling until `deadline` (at most `limit` cycles each); returns
/// (cycles, busy tries).
async fn spread(
    clients: &Arc<Clients>,
    contender: Contender,
    base: u64,
    tasks: u64,
    deadline: Instant,
    limit: u64,
) -> BenchResult<(u64, u64)> {
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let clients = clients.clone();
            tokio::spawn(async move {
                let (mut done, mut busy) = (0u64, 0u64);
                for _ in 0..limit {
                    if Instant::now() >= deadline {
                        break;
                    }
                    if clients.cycle(contender, base + task).await? {
                        done += 1;
                    } else {
                        busy += 1;
                    }
                }
                BenchResult::Ok((done, busy))
            })
        })
        .collect();
    let (mut done, mut busy) = (0, 0);
    for handle in handles {
        let (d, b) = handle.await??;
        done += d;
        busy += b;
    }
    Ok((done, busy))
}

/// The uncontended cycle of redis-py, measured by its own process on the same server.
pub(crate) async fn python_cycles(
    python: &Python,
    admin: &Admin,
    run: usize,
    duration: Duration,
) -> BenchResult<CycleRecord> {
    let key = key_of(Contender::RedisPy.key_base() + run as u64);
    admin.reset_stats().await?;
    let out = python.uncontended(&key, duration).await?;
    let mut commands = admin.command_stats().await?;
    // The script's 200 warm-up cycles ran after the reset: take them out pro rata.
    let measured = out.cycles as f64 / (out.cycles + 200) as f64;
    for value in commands.calls.values_mut() {
        *value = (*value as f64 * measured).round() as u64;
    }
    for value in commands.usec.values_mut() {
        *value = (*value as f64 * measured).round() as u64;
    }
    Ok(cycle_record(
        Contender::RedisPy,
        run,
        1,
        out.cycles,
        out.failures,
        out.elapsed_s,
        out.client_cpu_s,
        commands,
    ))
}

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
            let clients = clients.clone();
            let key = key.to_owned();
            let last_releaser = last_releaser.clone();
            let held_now = held_now.clone();
            let me = me as i64;
            tokio::spawn(async move {
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
            })
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

/// One measurement of many held, renewed locks (scenario 4).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WatchdogRecord {
    /// Which client.
    pub(crate) contender: Contender,
    /// Which repetition (0-based).
    pub(crate) run: usize,
    /// Locks held at once.
    pub(crate) locks: u64,
    /// Their lease.
    pub(crate) ttl_ms: u64,
    /// How long acquiring all of them took.
    pub(crate) acquire_s: f64,
    /// The window over which renewals were counted.
    pub(crate) hold_s: f64,
    /// `hold_s` in renewal periods (ttl/3).
    pub(crate) periods: f64,
    /// Renewal commands (EVALSHA) per period.
    pub(crate) renewals_per_period: f64,
    /// Renewal calls that failed (e.g. NOSCRIPT) per period.
    pub(crate) failed_per_period: f64,
    /// Reads the server processed per period (`total_reads_processed`): one per request or
    /// pipeline chunk, so batching shows here.
    pub(crate) server_reads_per_period: f64,
    /// Client CPU over the hold window, as a share of one core.
    pub(crate) client_cpu_share: f64,
    /// Client CPU per renewal.
    pub(crate) client_cpu_us_per_renewal: f64,
    /// Server time of the script calls in the window (`INFO commandstats` usec of
    /// `evalsha`, which includes the commands run inside) per renewal.
    pub(crate) server_us_per_renewal: f64,
    /// Resident memory added per held lock (`/proc/self/statm`; heap reused from earlier
    /// scenarios does not show here).
    pub(crate) rss_per_lock_bytes: f64,
    /// Heap in use added per held lock (`mallinfo2`): what the lock allocates, the guard's
    /// own allocations included; the guard's inline size (in the caller's storage, made
    /// before the count) is `guard_bytes`.
    pub(crate) heap_per_lock_bytes: f64,
    /// The size of the contender's guard value itself (`size_of`), kept by the caller.
    pub(crate) guard_bytes: usize,
    /// `DBSIZE` before acquiring.
    pub(crate) dbsize_before: u64,
    /// `DBSIZE` while all were held.
    pub(crate) dbsize_held: u64,
    /// `DBSIZE` after releasing (polled until it reached the baseline, up to 5 s).
    pub(crate) dbsize_after: u64,
    /// How long after the releases returned the baseline was reached.
    pub(crate) settle_ms: f64,
    /// Locks whose holder was told the lease was lost (must be 0).
    pub(crate) lost: u64,
    /// Leases ours still tracks after all were released (must be 0).
    pub(crate) tracked_after: Option<u64>,
}

/// Holds `locks` locks with lease `ttl` for `hold`, then releases them all.
#[allow(clippy::too_many_arguments)] // the scenario's parameters, each used once
pub(crate) async fn watchdog(
    clients: &Arc<Clients>,
    admin: &Admin,
    url: &str,
    contender: Contender,
    run: usize,
    locks: u64,
    ttl: Duration,
    hold: Duration,
) -> BenchResult<WatchdogRecord> {
    // A client of its own, so that its watchdog schedules these leases only.
    let client = LockClient::new(Config::single(url))?;
    let base = contender.key_base() + 500_000 + (run as u64) * 20_000;
    // Warm-up: open the connection, load the scripts, renewal included (a short lease held
    // past its first renewal), so the window sees steady-state renewals, not script loads.
    let warm = clients
        .acquire_renewed(
            contender,
            &client,
            base + 19_999,
            Duration::from_millis(300),
        )
        .await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    warm.release().await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let dbsize_before = admin.dbsize().await?;
    let rss0 = admin::rss_bytes();
    // The caller's storage for the guards is made before the count starts: the count is
    // the heap the locks themselves take (guards' own allocations included), not the
    // slack of a growing vector. The guard's inline size is reported beside it.
    let mut held: Vec<Held> = Vec::with_capacity(usize::try_from(locks)?);
    let mut failed_acquire = None;
    let heap0 = admin::heap_in_use();
    let started = Instant::now();
    futures_util::stream::iter(0..locks)
        .map(|i| {
            let client = &client;
            async move {
                clients
                    .acquire_renewed(contender, client, base + i, ttl)
                    .await
            }
        })
        .buffer_unordered(1_000)
        .for_each(|acquired| {
            match acquired {
                Ok(guard) => held.push(guard),
                Err(err) => {
                    failed_acquire.get_or_insert(err);
                }
            }
            std::future::ready(())
        })
        .await;
    let acquire_s = started.elapsed().as_secs_f64();
    let rss1 = admin::rss_bytes();
    let heap1 = admin::heap_in_use();
    if let Some(err) = failed_acquire {
        return Err(err);
    }
    let dbsize_held = admin.dbsize().await?;

    admin.reset_stats().await?;
    let reads0 = admin.info_field("stats", "total_reads_processed").await?;
    let cpu0 = admin::cpu_time();
    let window = Instant::now();
    tokio::time::sleep(hold).await;
    let hold_s = window.elapsed().as_secs_f64();
    let cpu = admin::cpu_time().saturating_sub(cpu0).as_secs_f64();
    let commands = admin.command_stats().await?;
    let reads = admin
        .info_field("stats", "total_reads_processed")
        .await?
        .saturating_sub(reads0);
    let lost = held.iter().filter(|held| held.is_lost()).count() as u64;

    let released: Vec<BenchResult<()>> = futures_util::stream::iter(held)
        .map(Held::release)
        .buffer_unordered(1_000)
        .collect()
        .await;
    released.into_iter().collect::<BenchResult<()>>()?;
    let released_at = Instant::now();
    let mut dbsize_after = admin.dbsize().await?;
    for _ in 0..500 {
        if dbsize_after <= dbsize_before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        dbsize_after = admin.dbsize().await?;
    }
    let settle_ms = released_at.elapsed().as_secs_f64() * 1e3;
    let tracked_after = (contender == Contender::Api).then(|| client.held_leases() as u64);

    let periods = hold_s / (ttl.as_secs_f64() / 3.0);
    // A renewal is its `PEXPIRE` (run inside the script, which may renew many leases);
    // failed script calls (NOSCRIPT after a script flush, errors) are counted apart.
    let failed: u64 = ["fcall", "evalsha"]
        .iter()
        .map(|command| commands.errors.get(*command).copied().unwrap_or(0))
        .sum();
    let renewals = commands.get("pexpire") as f64;
    Ok(WatchdogRecord {
        contender,
        run,
        locks,
        ttl_ms: ttl.as_millis() as u64,
        acquire_s,
        hold_s,
        periods,
        renewals_per_period: renewals / periods,
        failed_per_period: failed as f64 / periods,
        server_reads_per_period: reads as f64 / periods,
        client_cpu_share: cpu / hold_s,
        client_cpu_us_per_renewal: if renewals > 0.0 {
            cpu * 1e6 / renewals
        } else {
            0.0
        },
        server_us_per_renewal: if renewals > 0.0 {
            (commands.usec("fcall") + commands.usec("evalsha")) as f64 / renewals
        } else {
            0.0
        },
        rss_per_lock_bytes: rss1.saturating_sub(rss0) as f64 / locks as f64,
        heap_per_lock_bytes: heap1.saturating_sub(heap0) as f64 / locks as f64,
        guard_bytes: contender.guard_size(),
        dbsize_before,
        dbsize_held,
        dbsize_after,
        settle_ms,
        lost,
        tracked_after,
    })
}
