//! Section 11's driver: the holders, the waiting children, the window and its counters.

use std::time::Duration;

use lock_runtime::{Config, LockClient};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::time::Instant;

use super::case::{Case, cases, holder_ttl};
use super::protocol::{READY_LIMIT, WaitReport};
use super::record::WaitRecord;
use super::semaphore::hold;
use super::worker::WORKER_ARG;
use crate::admin::{Admin, CommandStats, Monitored};
use crate::contenders::Contender;
use crate::error::BenchResult;
use crate::processes::Worker;
use crate::python::Python;

/// How long a child may take to answer `stop`.
const REPORT_LIMIT: Duration = Duration::from_secs(30);

/// The MONITOR tap after a peer's window (a peer's polling is steady; the tap slows the
/// server, so it runs after the window whose CPU is counted).
pub(super) const PEER_TAP: Duration = Duration::from_secs(2);

/// Runs every case (of the contender `only`, unless empty), one after the other; a failed
/// case is noted in `skipped`.
pub(crate) async fn measure(
    admin: &Admin,
    url: &str,
    python: Option<&Python>,
    only: &str,
    window: Duration,
    skipped: &mut Vec<String>,
) -> Vec<WaitRecord> {
    let mut records = Vec::new();
    let cases = cases(python.is_some())
        .into_iter()
        .filter(|case| only.is_empty() || case.id() == only);
    for case in cases {
        match measure_case(admin, url, python, case, window).await {
            Ok(record) => {
                eprintln!(
                    "waiting {:>6} keys × {} proc {:<12} {:.1} requests/s ({:.4}/waiter), {:.0} commands/s with Lua, server {:.1} % of a core, clients {:.1} %, acquired {}; holders took {:.1} s, waiters queued in {:.1} s, case {:.0} s",
                    case.keys,
                    case.processes,
                    case.id(),
                    record.requests_per_s(),
                    record.requests_per_s() / case.keys as f64,
                    record.commands_per_s(),
                    record.server_core() * 100.0,
                    record.client_core() * 100.0,
                    record.acquired,
                    record.holders_s,
                    record.queued_s,
                    record.case_s
                );
                eprintln!("        commands by name: {:?}", record.by_command);
                records.push(record);
            }
            Err(err) => {
                let note = format!(
                    "waiting, {} keys in {} processes, {}: failed: {err}",
                    case.keys,
                    case.processes,
                    case.label()
                );
                eprintln!("{note}");
                skipped.push(note);
            }
        }
    }
    records
}

async fn measure_case(
    admin: &Admin,
    url: &str,
    python: Option<&Python>,
    case: Case,
    window: Duration,
) -> BenchResult<WaitRecord> {
    let prefix = format!("bench:wait:{}:{}x{}", case.id(), case.keys, case.processes);
    let ours = matches!(case.contender, Contender::Api | Contender::Attribute);
    // A peer's waiters do not queue, so nothing notes the holders for them: their keys are
    // held without renewals (which would otherwise fall into the window or the tap).
    let ttl = if ours {
        holder_ttl(window)
    } else {
        holder_ttl(window) * 4
    };
    let holder = LockClient::new(Config::single(url.to_owned()))?;
    let t0 = Instant::now();
    let guards = hold(&holder, &prefix, case, (ttl, ours)).await?;
    let t1 = Instant::now();

    let mut workers = Vec::new();
    let each = case.keys / case.processes;
    let started = (|| -> BenchResult<()> {
        for process in 0..case.processes {
            let from = process * each;
            let command = match case.contender {
                Contender::RedisPy => python
                    .ok_or("redis-py is not available")?
                    .wait_worker(&prefix, from, each),
                _ => own_worker(url, case, &prefix, from, each)?,
            };
            workers.push(Worker::start(command)?);
        }
        Ok(())
    })();
    let measured = match started {
        Ok(()) => drive(admin, &mut workers, case, window, (t0, t1, ttl)).await,
        Err(err) => Err(err),
    };
    for worker in &mut workers {
        let _ = worker.child.start_kill();
    }
    for worker in &mut workers {
        let _ = tokio::time::timeout(Duration::from_secs(10), worker.child.wait()).await;
    }
    guards.release().await;
    let _ = holder.shutdown().await;
    drop(holder);
    admin.del_matching(&format!("*{prefix}:*")).await?;
    let (mut record, acquired) = measured?;
    record.acquired = acquired;
    record.holder_ttl_s = ttl.as_secs_f64();
    record.case_s = t0.elapsed().as_secs_f64();
    Ok(record)
}

/// Ready, the window (go … stop), the reports.
async fn drive(
    admin: &Admin,
    workers: &mut [Worker],
    case: Case,
    window: Duration,
    (t0, t1, ttl): (Instant, Instant, Duration),
) -> BenchResult<(WaitRecord, u64)> {
    wait_ready(workers).await?;
    let queued_s = t1.elapsed().as_secs_f64();
    let ours = matches!(case.contender, Contender::Api | Contender::Attribute);
    let (start, end) = window_bounds(ours, window, (t0, t1, ttl))?;
    tokio::time::sleep_until(start).await;

    let before = admin.command_stats().await?;
    let cpu_before = server_cpu(admin).await?;
    let monitor = if ours { admin.monitor().await? } else { None };
    say(workers, b"go\n").await?;
    let opened = Instant::now();
    tokio::time::sleep_until(end).await;
    let window_s = opened.elapsed().as_secs_f64();
    // The tap ends first, so that it counts none of the readings below.
    let tapped = match monitor {
        Some(monitor) => Some(monitor.finish(admin).await?),
        None => None,
    };
    let server_cpu_s = server_cpu(admin).await? - cpu_before;
    let after = admin.command_stats().await?;
    say(workers, b"stop\n").await?;
    let (client_cpu_s, acquired) = reports(workers).await?;
    let (commands, script_calls, by_command) = delta(&before, &after);
    let (monitored, tap_s, tap_in_window) = tap(admin, tapped, window_s).await?;
    Ok((
        WaitRecord {
            contender: case.contender.id().to_owned(),
            keys: case.keys,
            processes: case.processes,
            semaphore: case.semaphore,
            holder_ttl_s: 0.0,
            window_s,
            commands,
            script_calls,
            by_command,
            requests: monitored.requests,
            tapped_in_lua: monitored.in_lua,
            tap_s,
            tap_in_window,
            server_cpu_s,
            client_cpu_s,
            acquired: 0,
            holders_s: (t1 - t0).as_secs_f64(),
            queued_s,
            case_s: 0.0,
        },
        acquired,
    ))
}

/// Every child's `ready`, within [`READY_LIMIT`].
async fn wait_ready(workers: &mut [Worker]) -> BenchResult<()> {
    let ready_by = Instant::now() + READY_LIMIT;
    for worker in workers.iter_mut() {
        let line = worker.line(ready_by, "ready").await?;
        if line.trim() != "ready" {
            return Err(format!("a waiting child said {line:?} instead of ready").into());
        }
    }
    Ok(())
}

/// When the window opens and closes: for ours between the holders' first and second
/// renewal, for a peer after a settling pause.
fn window_bounds(
    ours: bool,
    window: Duration,
    (t0, t1, ttl): (Instant, Instant, Duration),
) -> BenchResult<(Instant, Instant)> {
    // Waiters that asked before the holders were noted ask again within about a second.
    let settle = Duration::from_millis(2_500);
    let (start, end) = if ours {
        // After the holders' first renewal (it notes them for the waiters), before their
        // second.
        let first = ttl / 3;
        let start = (t1 + first + settle).max(Instant::now() + settle);
        let second = t0 + first * 2 - ttl / 12 - Duration::from_millis(500);
        if t0 + first - ttl / 12 < Instant::now() {
            return Err(format!(
                "the waiters took {:.1} s to queue, past the holders' first renewal",
                t1.elapsed().as_secs_f64()
            )
            .into());
        }
        (start, (start + window).min(second))
    } else {
        let start = Instant::now() + settle;
        (start, start + window)
    };
    if end <= start + window / 2 {
        return Err("the holders took too long to acquire: no room for the window".into());
    }
    Ok((start, end))
}

/// Says `line` to every child.
async fn say(workers: &mut [Worker], line: &[u8]) -> BenchResult<()> {
    for worker in workers.iter_mut() {
        worker.stdin.write_all(line).await?;
        worker.stdin.flush().await?;
    }
    Ok(())
}

/// Every child's report, within [`REPORT_LIMIT`]: their CPU seconds summed and their
/// waiters that acquired.
async fn reports(workers: &mut [Worker]) -> BenchResult<(f64, u64)> {
    let report_by = Instant::now() + REPORT_LIMIT;
    let mut client_cpu_s = 0.0;
    let mut acquired = 0;
    for worker in workers.iter_mut() {
        let line = worker.line(report_by, "its report").await?;
        let report: WaitReport = serde_json::from_str(&line)
            .map_err(|err| format!("a waiting child's report is not JSON ({err}): {line:.200}"))?;
        if report.failed > 0 {
            return Err(format!(
                "{} waiters of a child failed while the keys were held, first: {}",
                report.failed,
                report.failure.as_deref().unwrap_or("(no message)")
            )
            .into());
        }
        client_cpu_s += report.client_cpu_s;
        acquired += report.acquired;
    }
    Ok((client_cpu_s, acquired))
}

/// The requests tapped: over the window (ours), or a peer's in a pass of its own with the
/// tap, its waiters still polling (a child waits for its end after its report). Returns
/// what was tapped, for how long, and whether over the window.
async fn tap(
    admin: &Admin,
    tapped: Option<Monitored>,
    window_s: f64,
) -> BenchResult<(Monitored, f64, bool)> {
    Ok(match tapped {
        Some(monitored) => (monitored, window_s, true),
        None => match admin.monitor().await? {
            Some(monitor) => {
                let tapped = Instant::now();
                tokio::time::sleep(PEER_TAP).await;
                let tap_s = tapped.elapsed().as_secs_f64();
                (monitor.finish(admin).await?, tap_s, false)
            }
            None => (Monitored::default(), 0.0, false),
        },
    })
}

/// Commands (Lua included) and script calls between two readings, without the bench's own
/// `INFO`, `ECHO` and `MONITOR`.
fn delta(
    before: &CommandStats,
    after: &CommandStats,
) -> (u64, u64, std::collections::BTreeMap<String, u64>) {
    let own = |name: &str| matches!(name, "info" | "echo" | "monitor");
    let mut commands = 0;
    let mut scripts = 0;
    let mut by_command = std::collections::BTreeMap::new();
    for (name, calls) in &after.calls {
        if own(name) {
            continue;
        }
        let calls = calls.saturating_sub(before.get(name));
        commands += calls;
        if name.starts_with("eval") || name.starts_with("fcall") {
            scripts += calls;
        }
        if calls > 0 {
            by_command.insert(name.clone(), calls);
        }
    }
    (commands, scripts, by_command)
}

/// The server's CPU time so far (user + system, seconds), from `INFO cpu`.
async fn server_cpu(admin: &Admin) -> BenchResult<f64> {
    let mut seconds = 0.0;
    for field in ["used_cpu_sys", "used_cpu_user"] {
        seconds += admin.info_text("cpu", field).await?.parse::<f64>()?;
    }
    Ok(seconds)
}

/// This binary in waiting mode for `contender`.
fn own_worker(url: &str, case: Case, prefix: &str, from: u64, count: u64) -> BenchResult<Command> {
    let mut command = Command::new(std::env::current_exe()?);
    command.args([
        WORKER_ARG,
        case.id(),
        url,
        prefix,
        &from.to_string(),
        &count.to_string(),
    ]);
    Ok(command)
}
