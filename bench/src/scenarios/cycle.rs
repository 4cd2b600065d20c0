//! Scenarios 1 and 2: acquire + release cycles, one task or many, each on its own key.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::admin::{self, Admin, CommandStats};
use crate::contenders::{Clients, Contender, key_of};
use crate::error::BenchResult;
use crate::python::Python;

/// No loop of the bench runs more often than this, whatever its deadline.
pub(super) const MAX_ITERATIONS: u64 = 5_000_000;

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
