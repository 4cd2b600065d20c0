//! Section 11: what waiting costs Redis.
//!
//! N keys are held by our lock (a client of this process of its own, its watchdog renewing
//! them), and N waiters wait on the N distinct keys in one child process or spread across
//! four (this binary again in `wait-worker` mode, or redis-py's script in its `waitworker`
//! mode). Once every waiter has queued, the server's counters are read over a window:
//! commands (`INFO commandstats`, commands run inside scripts included), requests sent (a
//! `MONITOR` tap), server CPU (`INFO cpu`) and the children's CPU.
//!
//! Our waiters park only behind a holder that a renewal has noted for them (its process's
//! liveness key, see `lock_runtime`'s liveness module), so for ours the window opens after
//! the holders' first renewal (a third of their ttl) and closes before their second: the
//! holders' renewals, which are not what waiting costs, fall outside it. What is left in
//! the window is the waiting processes' and the holders' process's liveness refreshes.
//!
//! A child connects, starts its waiters, says `ready` once they all wait, starts its CPU
//! clock at `go`, prints one JSON line ([`WaitReport`]) at `stop`, and keeps waiting until
//! its stdin says more or closes (a peer's requests are tapped after its report). Every
//! wait is bounded; a child that fails or hangs is killed with the others.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_runtime::{Config, LockClient};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::time::Instant;

use crate::admin::{Admin, CommandStats, Monitored};
use crate::contenders::Contender;
use crate::error::BenchResult;
use crate::processes::Worker;
use crate::python::Python;

mod semaphore;
use semaphore::{hold, semaphore_worker};

/// The first argument that makes this binary a waiting child of this section.
pub(crate) const WORKER_ARG: &str = "wait-worker";

/// `BENCH_ONLY=waiting` runs this section alone.
pub(crate) const NAME: &str = "waiting";

/// The goal of waiting at scale: 10,000 waiting keys in one process cost at most this many
/// requests per second in all ...
const GOAL_REQUESTS_PER_S: f64 = 10.0;

/// ... and at most this share of a server core.
const GOAL_SERVER_CORE: f64 = 0.05;

/// The waiting keys at which the goal is judged.
const GOAL_KEYS: u64 = 10_000;

/// How long a child may take to start its waiters and see them all wait.
const READY_LIMIT: Duration = Duration::from_secs(90);

/// How long a child may take to answer `stop`.
const REPORT_LIMIT: Duration = Duration::from_secs(30);

/// The MONITOR tap after a peer's window (a peer's polling is steady; the tap slows the
/// server, so it runs after the window whose CPU is counted).
const PEER_TAP: Duration = Duration::from_secs(2);

/// One measurement: who waits, on how many keys, in how many processes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Case {
    /// Ours, rslock or redis-py.
    pub(crate) contender: Contender,
    /// Waiting keys (one waiter each).
    pub(crate) keys: u64,
    /// Waiting processes the keys are spread over.
    pub(crate) processes: u64,
    /// Ours only: the keys are semaphores of one permit (held by the holders, so every
    /// waiter waits), not locks.
    pub(crate) semaphore: bool,
}

/// The cases of a full run: ours at 1,000 and 10,000 keys in one process and across four,
/// our semaphore (one permit) at 1,000 and 10,000 keys in one process; the polling peers
/// at 1,000 in one process. At 10,000 a poller's own process is the
/// limit, not the library (rslock measured 1.6 requests per waiter per second there, 27
/// at 1,000, its process at 67 % of a core of the 2; one Python process cannot poll
/// 10,000 locks ten times a second, and each redis-py task asking holds a connection).
pub(crate) fn cases(python: bool) -> Vec<Case> {
    let mut cases = Vec::new();
    for processes in [1, 4] {
        for keys in [1_000, 10_000] {
            cases.push(Case {
                contender: Contender::Api,
                keys,
                processes,
                semaphore: false,
            });
        }
    }
    for keys in [1_000, 10_000] {
        cases.push(Case {
            contender: Contender::Api,
            keys,
            processes: 1,
            semaphore: true,
        });
    }
    cases.push(Case {
        contender: Contender::Rslock,
        keys: 1_000,
        processes: 1,
        semaphore: false,
    });
    if python {
        cases.push(Case {
            contender: Contender::RedisPy,
            keys: 1_000,
            processes: 1,
            semaphore: false,
        });
    }
    cases
}

/// What one case measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WaitRecord {
    /// The contender's id.
    pub(crate) contender: String,
    /// Waiting keys (one waiter each).
    pub(crate) keys: u64,
    /// Waiting processes.
    pub(crate) processes: u64,
    /// The keys were semaphores of one permit, not locks (ours only).
    #[serde(default)]
    pub(crate) semaphore: bool,
    /// The holders' ttl (ours renew at a third of it).
    pub(crate) holder_ttl_s: f64,
    /// The window the counters were read over.
    pub(crate) window_s: f64,
    /// Commands the server ran in the window (`INFO commandstats`, those run inside Lua
    /// scripts included; the bench's own INFO/ECHO excluded).
    pub(crate) commands: u64,
    /// Script calls in the window (EVAL, EVALSHA).
    pub(crate) script_calls: u64,
    /// The window's commands by name (Lua included), for telling what they were.
    pub(crate) by_command: std::collections::BTreeMap<String, u64>,
    /// Requests sent by clients (a MONITOR tap; commands inside Lua not counted).
    pub(crate) requests: u64,
    /// Commands run inside Lua scripts in the tap.
    pub(crate) tapped_in_lua: u64,
    /// How long the tap listened (the window itself for ours, a pass after it for peers).
    pub(crate) tap_s: f64,
    /// Whether the tap listened over the window itself (ours) or over a pass after it.
    pub(crate) tap_in_window: bool,
    /// Server CPU (user + system) in the window, seconds.
    pub(crate) server_cpu_s: f64,
    /// The waiting children's CPU in the window, seconds, summed.
    pub(crate) client_cpu_s: f64,
    /// Waiters that acquired while the keys were held (must be 0).
    pub(crate) acquired: u64,
    /// How long the holders took to acquire the keys.
    pub(crate) holders_s: f64,
    /// From the holders' last acquisition to every waiter queued.
    pub(crate) queued_s: f64,
    /// The whole case, holders, waiters and clean-up included.
    pub(crate) case_s: f64,
}

impl WaitRecord {
    fn contender(&self) -> Option<Contender> {
        Contender::from_id(&self.contender)
    }

    /// The row's label: the contender's, or our semaphore's.
    fn label(&self) -> &str {
        match self.contender() {
            Some(Contender::Api) if self.semaphore => "ours, Semaphore API (1 permit)",
            Some(contender) => contender.label(),
            None => &self.contender,
        }
    }

    /// Requests sent per second, all processes together: counted by the tap over the
    /// window, or (a peer, tapped after its window, when the tap slows it) the window's
    /// commands times the share of them the tap saw sent rather than run inside Lua.
    pub(crate) fn requests_per_s(&self) -> f64 {
        if self.tap_in_window {
            return self.requests as f64 / self.tap_s.max(1e-9);
        }
        let tapped = (self.requests + self.tapped_in_lua).max(1) as f64;
        self.commands_per_s() * self.requests as f64 / tapped
    }

    /// Commands (Lua included) per second.
    pub(crate) fn commands_per_s(&self) -> f64 {
        self.commands as f64 / self.window_s.max(1e-9)
    }

    /// Script calls per second.
    pub(crate) fn script_calls_per_s(&self) -> f64 {
        self.script_calls as f64 / self.window_s.max(1e-9)
    }

    /// The server's share of one core.
    pub(crate) fn server_core(&self) -> f64 {
        self.server_cpu_s / self.window_s.max(1e-9)
    }

    /// The waiting processes' share of one core, together.
    pub(crate) fn client_core(&self) -> f64 {
        self.client_cpu_s / self.window_s.max(1e-9)
    }
}

/// What a child prints at `stop`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct WaitReport {
    /// The child's CPU time from `go` to `stop`.
    pub(crate) client_cpu_s: f64,
    /// Its waiters that acquired (the keys are held throughout: 0).
    pub(crate) acquired: u64,
    /// Its waiters that stopped waiting with an error (must be 0).
    #[serde(default)]
    pub(crate) failed: u64,
    /// The first such error.
    #[serde(default)]
    pub(crate) failure: Option<String>,
}

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

impl Case {
    /// The case's id for `BENCH_ONLY=waiting/ID`: the contender's, or `semaphore`.
    fn id(&self) -> &'static str {
        if self.semaphore {
            "semaphore"
        } else {
            self.contender.id()
        }
    }

    /// The case's label in notes.
    fn label(&self) -> &'static str {
        if self.semaphore {
            "ours, Semaphore API"
        } else {
            self.contender.label()
        }
    }
}

/// The holders' ttl for a window: the window, the settling before it and the spread of the
/// holders' first renewals fit between their first and second renewal (each may be sent up
/// to ttl/12 early, to share a pipeline).
fn holder_ttl(window: Duration) -> Duration {
    (window + Duration::from_secs(8)) * 3
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
    let ready_by = Instant::now() + READY_LIMIT;
    for worker in workers.iter_mut() {
        let line = worker.line(ready_by, "ready").await?;
        if line.trim() != "ready" {
            return Err(format!("a waiting child said {line:?} instead of ready").into());
        }
    }
    let queued_s = t1.elapsed().as_secs_f64();
    // Waiters that asked before the holders were noted ask again within about a second.
    let settle = Duration::from_millis(2_500);
    let ours = matches!(case.contender, Contender::Api | Contender::Attribute);
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
    tokio::time::sleep_until(start).await;

    let before = admin.command_stats().await?;
    let cpu_before = server_cpu(admin).await?;
    let monitor = if ours { admin.monitor().await? } else { None };
    for worker in workers.iter_mut() {
        worker.stdin.write_all(b"go\n").await?;
        worker.stdin.flush().await?;
    }
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
    for worker in workers.iter_mut() {
        worker.stdin.write_all(b"stop\n").await?;
        worker.stdin.flush().await?;
    }
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
    let (commands, script_calls, by_command) = delta(&before, &after);
    // A peer's requests: a pass of its own with the tap, its waiters still polling (a
    // child waits for its end after its report).
    let (monitored, tap_s, tap_in_window) = match tapped {
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
    };
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

/// Waiting mode: `lock-bench wait-worker CONTENDER URL PREFIX FROM COUNT`: one waiter on
/// each of `PREFIX:FROM` … `PREFIX:FROM+COUNT-1` (CONTENDER `semaphore`: our semaphore of
/// one permit on each).
pub(crate) fn worker_main(args: &[String]) -> BenchResult<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(worker(args))?;
    // The waiters still wait: the process ends with them (their places lapse with its
    // liveness key, or their polling stops).
    std::process::exit(0)
}

async fn worker(args: &[String]) -> BenchResult<()> {
    let [contender, url, prefix, from, count] = args else {
        return Err(format!("usage: {WORKER_ARG} CONTENDER URL PREFIX FROM COUNT").into());
    };
    let from: u64 = from.parse()?;
    let count: u64 = count.parse()?;
    let acquired = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Failures::default());
    let keys = (from..from + count).map(|i| format!("{prefix}:{i}"));
    if contender == "semaphore" {
        return semaphore_worker(url, keys, count, (&acquired, &failures)).await;
    }
    let contender = Contender::from_id(contender).ok_or("unknown contender")?;
    match contender {
        Contender::Api | Contender::Attribute => {
            let client = LockClient::new(Config::single(url.clone()))?;
            for key in keys {
                let lock = client
                    .lock(key)
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(600));
                let (acquired, failures) = (acquired.clone(), failures.clone());
                tokio::spawn(async move {
                    match lock.acquire().await {
                        Ok(guard) => {
                            acquired.fetch_add(1, Ordering::Relaxed);
                            drop(guard);
                        }
                        Err(err) => failures.note(err.to_string()),
                    }
                });
            }
            let all = usize::try_from(count)?;
            let deadline = Instant::now() + READY_LIMIT - Duration::from_secs(5);
            while client.waiting() != (all, all) {
                if Instant::now() > deadline {
                    return Err(format!(
                        "the waiters did not all queue: {:?} of {all}",
                        client.waiting()
                    )
                    .into());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            serve(&acquired, &failures).await?;
            drop(client);
        }
        Contender::Rslock => {
            let manager = rslock::LockManager::new(vec![url.clone()]);
            for key in keys {
                let manager = manager.clone();
                let (acquired, failures) = (acquired.clone(), failures.clone());
                tokio::spawn(async move {
                    // `acquire` polls until it wins (3 tries 0-200 ms apart, then again).
                    match manager.acquire(key.as_str(), Duration::from_secs(10)).await {
                        Ok(_guard) => {
                            acquired.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(err) => failures.note(err.to_string()),
                    }
                });
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            serve(&acquired, &failures).await?;
        }
        _ => return Err(format!("{} has no waiting mode", contender.id()).into()),
    }
    Ok(())
}

/// Waiters that stopped waiting with an error, and the first error.
#[derive(Default)]
struct Failures {
    count: AtomicU64,
    first: std::sync::Mutex<Option<String>>,
}

impl Failures {
    fn note(&self, error: String) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut first) = self.first.lock() {
            first.get_or_insert(error);
        }
    }
}

/// `ready`, then the window between `go` and `stop` on stdin, then the report.
async fn serve(acquired: &AtomicU64, failures: &Failures) -> BenchResult<()> {
    let mut stdout = std::io::stdout();
    writeln!(stdout, "ready")?;
    stdout.flush()?;
    let mut stdin = BufReader::new(tokio::io::stdin());
    let mut line = String::new();
    tokio::time::timeout(READY_LIMIT, stdin.read_line(&mut line))
        .await
        .map_err(|_| "no go from the bench")??;
    if line.trim() != "go" {
        return Err(format!("expected go, got {line:?}").into());
    }
    let cpu0 = crate::admin::cpu_time();
    line.clear();
    tokio::time::timeout(Duration::from_secs(600), stdin.read_line(&mut line))
        .await
        .map_err(|_| "no stop from the bench")??;
    let report = WaitReport {
        client_cpu_s: crate::admin::cpu_time().saturating_sub(cpu0).as_secs_f64(),
        acquired: acquired.load(Ordering::Relaxed),
        failed: failures.count.load(Ordering::Relaxed),
        failure: failures.first.lock().ok().and_then(|first| first.clone()),
    };
    writeln!(stdout, "{}", serde_json::to_string(&report)?)?;
    stdout.flush()?;
    // The waiters go on until the bench has tapped what they send (or gives up on them).
    line.clear();
    let _ = tokio::time::timeout(Duration::from_secs(60), stdin.read_line(&mut line)).await;
    Ok(())
}

/// One row of the goal table, as the report writes it.
pub(crate) struct GoalRow {
    /// The goal.
    pub(crate) goal: String,
    /// Met, missed, or not measured (`None`).
    pub(crate) met: Option<bool>,
    /// What was measured.
    pub(crate) detail: String,
}

fn find(
    records: &[WaitRecord],
    contender: Contender,
    keys: u64,
    processes: u64,
) -> Option<&WaitRecord> {
    records.iter().find(|r| {
        r.contender() == Some(contender)
            && !r.semaphore
            && r.keys == keys
            && r.processes == processes
    })
}

/// The goals of waiting at scale: 10,000 waiting keys in one process cost at most 10
/// requests per second and at most 5 % of a server core.
pub(crate) fn goal_rows(records: &[WaitRecord]) -> Vec<GoalRow> {
    let ours = find(records, Contender::Api, GOAL_KEYS, 1);
    let peers = [Contender::RedisPy, Contender::Rslock]
        .into_iter()
        .filter_map(|peer| {
            records
                .iter()
                .filter(|r| r.contender() == Some(peer) && r.processes == 1)
                .max_by_key(|r| r.keys)
                .map(|r| {
                    format!(
                        "{} at {}: {:.2} requests per waiter per second",
                        peer.label(),
                        crate::figures::thousands(r.keys as f64),
                        r.requests_per_s() / r.keys as f64
                    )
                })
        })
        .collect::<Vec<_>>();
    let peers = if peers.is_empty() {
        String::new()
    } else {
        format!(" The polling peers: {}.", peers.join("; "))
    };
    let Some(ours) = ours else {
        return ["requests", "server CPU"]
            .into_iter()
            .map(|what| GoalRow {
                goal: format!("10,000 waiting keys in one process: {what}"),
                met: None,
                detail: "not measured in this run".to_owned(),
            })
            .collect();
    };
    vec![
        GoalRow {
            goal: format!(
                "10,000 waiting keys in one process cost at most {GOAL_REQUESTS_PER_S} requests per second"
            ),
            met: Some(ours.requests_per_s() <= GOAL_REQUESTS_PER_S),
            detail: format!(
                "{:.1} requests/s in all ({:.4} per waiter; MONITOR over {:.1} s, the holders' process's liveness refresh included); {:.1} commands/s counting those run inside scripts ({:.1} script calls/s). Section 11.{peers}",
                ours.requests_per_s(),
                ours.requests_per_s() / ours.keys as f64,
                ours.tap_s,
                ours.commands_per_s(),
                ours.script_calls_per_s()
            ),
        },
        GoalRow {
            goal: format!(
                "10,000 waiting keys in one process cost at most {:.0} % of a server core",
                GOAL_SERVER_CORE * 100.0
            ),
            met: Some(ours.server_core() <= GOAL_SERVER_CORE),
            detail: format!(
                "redis-server {:.1} % of a core (`INFO cpu` user + system over {:.1} s); the waiting process {:.1} %. Section 11.",
                ours.server_core() * 100.0,
                ours.window_s,
                ours.client_core() * 100.0
            ),
        },
    ]
}

/// Section 11 of BENCHMARKS.md.
pub(crate) fn section(out: &mut String, records: &[WaitRecord], window_s: f64) {
    use std::fmt::Write as _;
    if records.is_empty() {
        return;
    }
    let ttl = holder_ttl(Duration::from_secs_f64(window_s)).as_secs_f64();
    let _ = writeln!(out, "## 11. What waiting costs\n");
    let _ = writeln!(
        out,
        "N keys held by our lock (a client of the bench's own process, ttl {ttl:.0} s, its \
         watchdog renewing them; for a peer, whose waiters do not queue, without renewals), one waiter on each key in a child process (or spread over 4), \
         waiting as a user would: ours `client.lock(key).wait(600s).acquire()` (our semaphore's \
         rows: each key a semaphore of one permit, held by the bench's client, and \
         `client.semaphore(key, 1).wait(600s).acquire()`), rslock's \
         `LockManager::acquire` (it polls: 3 tries 0–200 ms apart, then again), redis-py's \
         `redis.asyncio` `Lock.acquire(blocking=True)` (it polls every 0.1 s, one connection \
         per waiter). The polling peers wait on 1,000 keys: at 10,000 the poller's own \
         process is the limit, not the library (rslock measured 1.6 requests per waiter per \
         second there against 27 at 1,000, its process at 67 % of a core of the 2; one Python \
         process cannot poll 10,000 locks ten times a second). The counters are read over a \
         window of up to {window_s:.0} s once every waiter has queued; for ours the window lies \
         between the holders' first renewal (which notes them for the waiters, so that they \
         park) and their second, so the renewals fall outside it and what is counted is the \
         processes' liveness refreshes (the waiters' and the holders').\n"
    );
    let _ = writeln!(
        out,
        "| waiters | keys | processes | requests sent/s | per waiter per s | commands/s, Lua included | script calls/s | redis-server, % of a core | waiting clients, % of a core | window | acquired |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in records {
        let label = r.label();
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {:.1} | {:.4} | {} | {} | {:.1} % | {:.1} % | {:.1} s | {} |",
            crate::figures::thousands(r.keys as f64),
            r.processes,
            r.requests_per_s(),
            r.requests_per_s() / r.keys as f64,
            crate::figures::thousands(r.commands_per_s()),
            crate::figures::thousands(r.script_calls_per_s()),
            r.server_core() * 100.0,
            r.client_core() * 100.0,
            r.window_s,
            r.acquired
        );
    }
    let _ = writeln!(
        out,
        "\nRequests sent are counted by a `MONITOR` tap (commands run inside Lua not counted): \
         for ours over the window itself (a few commands a second cost the tap nothing); for a \
         peer the tap listens over a {:.0} s pass after its window (it slows the server, so \
         the window whose CPU is counted runs without it) and gives the share of the window's \
         commands that were sent rather than run inside Lua. Commands come from `INFO commandstats` \
         (commands run inside scripts counted, as the goal counts them); CPU is `INFO cpu` \
         (`used_cpu_sys + used_cpu_user`) and the children's `getrusage`, over the window. \
         \"acquired\": waiters that got their key while it was held (must be 0).\n",
        PEER_TAP.as_secs_f64()
    );
}
