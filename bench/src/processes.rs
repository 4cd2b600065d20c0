//! Scenario 3b: one hot key contended by tasks in several processes.
//!
//! The bench starts its children (this binary again in worker mode, or redis-py's script in
//! its `hotworker` mode), waits until each has connected, warmed up and printed `ready`,
//! resets the server's counters, starts a `MONITOR` tap, writes `go` to every child's stdin,
//! and pools the one JSON line ([`WorkerReport`]) each prints after its window. Exclusion
//! across processes is checked from the holds' wall-clock intervals. Every wait is bounded;
//! a child that fails, hangs or says something else is killed with the others.

use std::io::Write as _;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use lock_runtime::Config;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::Instant;

use crate::admin::Admin;
use crate::contenders::{Clients, Contender};
use crate::error::BenchResult;
use crate::python::Python;
use crate::scenarios::{self, HotOutcome, HotRecord};

/// The first argument that makes this binary a worker of scenario 3b.
pub(crate) const WORKER_ARG: &str = "hot-worker";

/// How long a child may take to connect, warm up and say `ready`.
const READY_LIMIT: Duration = Duration::from_secs(60);

/// How long after its window a child may take to report.
const REPORT_GRACE: Duration = Duration::from_secs(60);

/// What one child reports on stdout after its window (one JSON line).
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct WorkerReport {
    /// Every wait that ended in an acquisition inside the window, in microseconds.
    pub(crate) waits_us: Vec<u64>,
    /// Waits still open when the window closed (lower bounds).
    pub(crate) censored_us: Vec<u64>,
    /// Mean time from acquired to release called, measured inside the critical section.
    pub(crate) mean_hold_us: f64,
    /// Holds seen by this process's own check (two of its tasks holding at once).
    pub(crate) violations: u64,
    /// The child's CPU time over the window.
    pub(crate) client_cpu_s: f64,
    /// Every hold as (acquired, about to release, task) with wall-clock microseconds.
    pub(crate) intervals_us: Vec<(u64, u64, u64)>,
}

/// The scenario's shape: how many processes, how many tasks in each.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// Child processes.
    pub(crate) processes: u64,
    /// Contending tasks (threads for redis-py) in each.
    pub(crate) tasks_each: u64,
    /// How long each holder sleeps while holding.
    pub(crate) hold: Duration,
    /// The measurement window.
    pub(crate) window: Duration,
}

/// One child: its process, the pipe its `go` goes down, and its stdout lines (also the
/// waiting children of section 11, [`crate::waiting`]).
pub(crate) struct Worker {
    pub(crate) child: Child,
    pub(crate) stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    /// Starts `command` with its stdin and stdout piped (stderr inherited), killed on drop.
    pub(crate) fn start(mut command: Command) -> BenchResult<Self> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().ok_or("a worker without stdin")?;
        let stdout = child.stdout.take().ok_or("a worker without stdout")?;
        Ok(Worker {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        })
    }

    /// The next line on the child's stdout, before `deadline`.
    pub(crate) async fn line(&mut self, deadline: Instant, what: &str) -> BenchResult<String> {
        match tokio::time::timeout_at(deadline, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => Ok(line),
            Ok(Ok(None)) => Err(format!("a worker closed its stdout before {what}").into()),
            Ok(Err(err)) => Err(err.into()),
            Err(_) => Err(format!("a worker did not send {what} in time").into()),
        }
    }
}

/// Scenario 3b for one contender: `shape.processes` children with `shape.tasks_each` tasks
/// each on one key, started together.
pub(crate) async fn hot_key_processes(
    admin: &Admin,
    url: &str,
    contender: Contender,
    run: usize,
    shape: Shape,
    python: Option<&Python>,
) -> BenchResult<HotRecord> {
    let key = format!("bench:hot{}p:{}:{run}", shape.processes, contender.id());
    let mut workers = Vec::new();
    for _ in 0..shape.processes {
        let command = match contender {
            Contender::RedisPy => python.ok_or("redis-py is not available")?.hot_worker(
                &key,
                shape.window,
                shape.tasks_each,
                shape.hold,
            ),
            _ => own_worker(url, contender, &key, shape)?,
        };
        workers.push(Worker::start(command)?);
    }
    let measured = drive(admin, &mut workers, shape).await;
    if measured.is_err() {
        for worker in &mut workers {
            let _ = worker.child.start_kill();
        }
    }
    for worker in &mut workers {
        let _ = tokio::time::timeout(Duration::from_secs(10), worker.child.wait()).await;
    }
    // Give-ups of waiters cut off by the window, then the key and whatever the contender
    // keeps beside it (its queue) go.
    tokio::time::sleep(Duration::from_millis(100)).await;
    admin.del_matching(&format!("*{key}*")).await?;
    let (reports, monitored, commands) = measured?;

    let process_acquisitions = reports.iter().map(|r| r.waits_us.len() as u64).collect();
    let outcome = pooled(reports);
    Ok(scenarios::hot_record(
        contender,
        run,
        (shape.processes * shape.tasks_each, process_acquisitions),
        shape.hold,
        shape.window,
        outcome,
        monitored,
        commands,
    ))
}

type Driven = (
    Vec<WorkerReport>,
    Option<crate::admin::Monitored>,
    crate::admin::CommandStats,
);

/// Ready, go, reports: the protocol with every child, and the server's counters between
/// `go` and the last report.
async fn drive(admin: &Admin, workers: &mut [Worker], shape: Shape) -> BenchResult<Driven> {
    let ready_by = Instant::now() + READY_LIMIT;
    for worker in workers.iter_mut() {
        let line = worker.line(ready_by, "ready").await?;
        if line.trim() != "ready" {
            return Err(format!("a worker said {line:?} instead of ready").into());
        }
    }
    admin.reset_stats().await?;
    let monitor = admin.monitor().await?;
    for worker in workers.iter_mut() {
        worker.stdin.write_all(b"go\n").await?;
        worker.stdin.flush().await?;
    }
    let report_by = Instant::now() + shape.window + REPORT_GRACE;
    let mut reports = Vec::new();
    for worker in workers.iter_mut() {
        let line = worker.line(report_by, "its report").await?;
        let report: WorkerReport = serde_json::from_str(&line)
            .map_err(|err| format!("a worker's report is not JSON ({err}): {line:.200}"))?;
        reports.push(report);
    }
    let monitored = match monitor {
        Some(monitor) => Some(monitor.finish(admin).await?),
        None => None,
    };
    let commands = admin.command_stats().await?;
    for worker in workers.iter_mut() {
        let status = tokio::time::timeout(Duration::from_secs(10), worker.child.wait())
            .await
            .map_err(|_| "a worker did not exit after its report")??;
        if !status.success() {
            return Err(format!("a worker failed after its report: {status}").into());
        }
    }
    Ok((reports, monitored, commands))
}

/// The children's reports as one outcome: holds of all processes in wall-clock order give
/// the overlaps (two holders at once) and how often the lock went back to the task that
/// released it last.
fn pooled(reports: Vec<WorkerReport>) -> HotOutcome {
    let mut outcome = HotOutcome::default();
    let mut holds: Vec<(u64, u64, (usize, u64))> = Vec::new();
    for (process, report) in reports.into_iter().enumerate() {
        let mean = report.mean_hold_us.round() as u64;
        outcome
            .holds_us
            .extend(std::iter::repeat_n(mean, report.waits_us.len()));
        outcome.waits_us.extend(report.waits_us);
        outcome.censored_us.extend(report.censored_us);
        outcome.violations += report.violations;
        outcome.client_cpu_s += report.client_cpu_s;
        holds.extend(
            report
                .intervals_us
                .into_iter()
                .map(|(start, end, task)| (start, end, (process, task))),
        );
    }
    holds.sort_unstable();
    outcome.tenures = crate::tenures::tenures(
        &holds
            .iter()
            .map(|&(start, end, (process, _))| (start, end, process))
            .collect::<Vec<_>>(),
    );
    outcome.violations +=
        scenarios::overlaps(holds.iter().map(|&(start, end, _)| (start, end)).collect());
    outcome.same_task = holds.windows(2).filter(|w| w[0].2 == w[1].2).count() as u64;
    outcome
}

/// This binary in worker mode for `contender`.
fn own_worker(url: &str, contender: Contender, key: &str, shape: Shape) -> BenchResult<Command> {
    let mut command = Command::new(std::env::current_exe()?);
    command.args([
        WORKER_ARG,
        contender.id(),
        url,
        key,
        &shape.tasks_each.to_string(),
        &shape.hold.as_micros().to_string(),
        &shape.window.as_millis().to_string(),
    ]);
    Ok(command)
}

/// Our two-level queue's settings in scenario 3b: the runtime's defaults, or an experiment's
/// from the environment the children inherit:
/// `BENCH_LOCAL_PASSES`, `BENCH_LOCAL_PASS_TIME_MS`, `BENCH_FOREIGN_WINDOW_MS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct QueueSettings {
    /// `Config::local_passes`.
    pub(crate) local_passes: u32,
    /// `Config::local_pass_time`, in ms.
    pub(crate) local_pass_time_ms: u64,
    /// `Config::foreign_window`, in ms.
    pub(crate) foreign_window_ms: u64,
}

impl QueueSettings {
    /// The runtime's defaults.
    pub(crate) fn defaults() -> Self {
        let millis = |duration: Duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        QueueSettings {
            local_passes: lock_runtime::DEFAULT_LOCAL_PASSES,
            local_pass_time_ms: millis(lock_runtime::DEFAULT_LOCAL_PASS_TIME),
            foreign_window_ms: millis(lock_runtime::DEFAULT_FOREIGN_WINDOW),
        }
    }

    /// The defaults, with what the environment sets.
    pub(crate) fn from_env() -> Self {
        let defaults = Self::defaults();
        let number = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|value| value.trim().parse::<u64>().ok())
                .unwrap_or(default)
        };
        QueueSettings {
            local_passes: u32::try_from(number(
                "BENCH_LOCAL_PASSES",
                u64::from(defaults.local_passes),
            ))
            .unwrap_or(u32::MAX),
            local_pass_time_ms: number("BENCH_LOCAL_PASS_TIME_MS", defaults.local_pass_time_ms),
            foreign_window_ms: number("BENCH_FOREIGN_WINDOW_MS", defaults.foreign_window_ms),
        }
    }

    fn apply(&self, config: Config) -> Config {
        config
            .local_passes(self.local_passes)
            .local_pass_time(Duration::from_millis(self.local_pass_time_ms))
            .foreign_window(Duration::from_millis(self.foreign_window_ms))
    }
}

/// Worker mode: `lock-bench hot-worker CONTENDER URL KEY TASKS HOLD_US WINDOW_MS`.
pub(crate) fn worker_main(args: &[String]) -> BenchResult<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(worker(args))
}

async fn worker(args: &[String]) -> BenchResult<()> {
    let [contender, url, key, tasks, hold_us, window_ms] = args else {
        return Err(
            format!("usage: {WORKER_ARG} CONTENDER URL KEY TASKS HOLD_US WINDOW_MS").into(),
        );
    };
    let contender = Contender::from_id(contender).ok_or("unknown contender")?;
    let tasks: u64 = tasks.parse()?;
    let hold = Duration::from_micros(hold_us.parse()?);
    let window = Duration::from_millis(window_ms.parse()?);

    lock_runtime::init(QueueSettings::from_env().apply(Config::single(url.clone())))?;
    let clients = Arc::new(Clients::connect(url).await?);
    // Warm-up on a key of its own: connections open, scripts known, before the window.
    let warm = contender.key_base() + 900_000 + u64::from(std::process::id()) % 90_000;
    clients.cycle(contender, warm).await?;

    let mut stdout = std::io::stdout();
    writeln!(stdout, "ready")?;
    stdout.flush()?;
    let mut go = String::new();
    let mut stdin = BufReader::new(tokio::io::stdin());
    tokio::time::timeout(READY_LIMIT, stdin.read_line(&mut go))
        .await
        .map_err(|_| "no go from the bench")??;
    if go.trim() != "go" {
        return Err(format!("expected go, got {go:?}").into());
    }

    let cpu0 = crate::admin::cpu_time();
    let outcome = tokio::time::timeout(
        window + REPORT_GRACE / 2,
        scenarios::hot_tasks(&clients, contender, key, tasks, hold, window),
    )
    .await
    .map_err(|_| "the hot-key tasks overran their window")??;
    let client_cpu_s = crate::admin::cpu_time().saturating_sub(cpu0).as_secs_f64();

    let holds = outcome.holds_us.len().max(1) as f64;
    let report = WorkerReport {
        mean_hold_us: outcome.holds_us.iter().sum::<u64>() as f64 / holds,
        waits_us: outcome.waits_us,
        censored_us: outcome.censored_us,
        violations: outcome.violations,
        client_cpu_s,
        intervals_us: outcome.intervals_us,
    };
    writeln!(stdout, "{}", serde_json::to_string(&report)?)?;
    stdout.flush()?;
    // Reported first, so that the server's counters, read when every report is in, leave
    // out the give-ups of the waiters cut off by the window, as scenario 3's do; then a
    // moment for those give-ups to reach the server before the process goes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{WorkerReport, pooled};

    fn report(intervals: &[(u64, u64, u64)]) -> WorkerReport {
        WorkerReport {
            waits_us: vec![10; intervals.len()],
            mean_hold_us: 100.0,
            intervals_us: intervals.to_vec(),
            ..WorkerReport::default()
        }
    }

    #[test]
    fn holds_of_two_processes_that_overlap_are_violations() {
        // Process 0 holds 0–100 and 300–400; process 1 holds 100–200 (touching is fine)
        // and 350–450 (inside process 0's second hold).
        let outcome = pooled(vec![
            report(&[(0, 100, 0), (300, 400, 0)]),
            report(&[(100, 200, 0), (350, 450, 1)]),
        ]);
        assert_eq!(outcome.violations, 1);
        assert_eq!(outcome.waits_us.len(), 4);
        assert_eq!(outcome.holds_us, vec![100; 4]);
    }

    #[test]
    fn the_same_task_counts_only_within_its_own_process() {
        // Task 0 of process 0 twice in a row, then task 0 of process 1 (another task), then
        // task 0 of process 1 again.
        let outcome = pooled(vec![
            report(&[(0, 10, 0), (20, 30, 0)]),
            report(&[(40, 50, 0), (60, 70, 0)]),
        ]);
        assert_eq!(outcome.violations, 0);
        assert_eq!(outcome.same_task, 2);
    }
}
