//! Section 12: one key shared with foreign clients that do not queue.
//!
//! [`TASKS`] of our tasks (one process, the Lock API with the default
//! `Config::foreign_window`) and [`TASKS`] tasks of a foreign client contend for one key
//! without a break, each holding it [`HOLD`]: redis-py's `Lock` (threads, its default
//! 0.1 s poll, `bench/redis_py_bench.py foreign`) and node-redlock 4 with ioredis (async
//! tasks retrying every 50 ms, `bench/redlock_node_bench.js`, when `node` and the modules in
//! bench/target/node are there). Every holder, ours and theirs, marks one server-side
//! overlap counter around its hold (`INCR KEY:inside`, `INCR KEY:overlaps` when it finds
//! another holder inside, `DECR`). Measured: each side's acquisitions, our waits (p50, p99,
//! max), the foreign side's p99 wait, and the overlaps.
//!
//! Run it alone with `BENCH_ONLY=foreign bench/run` (BENCHMARKS.md is then left as it was;
//! the section is written to bench/results/foreign.md).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

use crate::error::BenchResult;
use crate::python::Python;
use crate::scenarios::percentile;

/// The scenario's name for `BENCH_ONLY`.
pub(crate) const NAME: &str = "foreign";

/// Our tasks, and the foreign client's threads or tasks.
pub(crate) const TASKS: u64 = 8;

/// How long every holder holds the key.
pub(crate) const HOLD: Duration = Duration::from_millis(5);

/// The window of one measurement at scale 1 (the first measurements took 20 s).
pub(crate) const WINDOW_S: f64 = 8.0;

/// At most this many measurements per foreign client (the section stays under about a
/// minute per client at scale 1).
pub(crate) const MAX_RUNS: usize = 3;

/// How long a child may take to connect, warm up and say `ready`, and to report after its
/// window.
const CHILD_LIMIT: Duration = Duration::from_secs(60);

/// The goal of a shared key: each side's least share of the acquisitions.
const SHARE_GOAL: f64 = 1.0 / 3.0;

/// The goal of a shared key: our p99 wait, in microseconds.
const P99_GOAL_US: u64 = 1_000_000;

/// A foreign client the scenario can run.
pub(crate) enum Foreign<'a> {
    /// redis-py's `Lock`, in its threads.
    RedisPy(&'a Python),
    /// node-redlock 4 on ioredis: `node` with `NODE_PATH` set to the modules.
    NodeRedlock {
        node: PathBuf,
        modules: PathBuf,
        script: PathBuf,
    },
}

impl Foreign<'_> {
    /// The client's id in the records and in `BENCH_ONLY=foreign/<id>`.
    pub(crate) fn id(&self) -> &'static str {
        match self {
            Foreign::RedisPy(_) => "redis-py",
            Foreign::NodeRedlock { .. } => "node-redlock",
        }
    }

    fn command(&self, url: &str, key: &str, window: Duration) -> Command {
        let seconds = window.as_secs_f64().to_string();
        let hold_ms = (HOLD.as_secs_f64() * 1e3).to_string();
        let tasks = TASKS.to_string();
        match self {
            Foreign::RedisPy(python) => python.foreign_worker(key, window, TASKS, HOLD),
            Foreign::NodeRedlock {
                node,
                modules,
                script,
            } => {
                let mut command = Command::new(node);
                command
                    .env("NODE_PATH", modules)
                    .arg(script)
                    .args([url, key, &seconds, &tasks, &hold_ms]);
                command
            }
        }
    }
}

/// node-redlock when `BENCH_NODE` and `BENCH_NODE_MODULES` (set by bench/run) name a usable
/// `node` and modules with redlock and ioredis; otherwise `Err` with why it is skipped.
pub(crate) fn node_redlock<'a>() -> Result<Foreign<'a>, String> {
    let node = std::env::var_os("BENCH_NODE").filter(|node| !node.is_empty());
    let modules = std::env::var_os("BENCH_NODE_MODULES").filter(|modules| !modules.is_empty());
    let script = std::env::var_os("BENCH_NODE_SCRIPT")
        .filter(|script| !script.is_empty())
        .map_or_else(|| PathBuf::from("redlock_node_bench.js"), PathBuf::from);
    match (node, modules) {
        (Some(node), Some(modules)) => Ok(Foreign::NodeRedlock {
            node: node.into(),
            modules: modules.into(),
            script,
        }),
        (None, _) => Err("node-redlock 4: no `node` (BENCH_NODE)".to_owned()),
        (_, None) => Err(
            "node-redlock 4: `npm install redlock@4 ioredis` into bench/target/node failed or \
             was not tried (BENCH_NODE_MODULES)"
                .to_owned(),
        ),
    }
}

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ForeignRecord {
    /// The foreign client's id (`redis-py`, `node-redlock`).
    pub(crate) foreign: String,
    /// Which run of the scenario.
    pub(crate) run: usize,
    /// The window, in seconds.
    pub(crate) window_s: f64,
    /// Our acquisitions within the window.
    pub(crate) ours: u64,
    /// The foreign side's acquisitions within the window.
    pub(crate) theirs: u64,
    /// Our waits that ended in an acquisition: median, 99th percentile, longest (µs).
    pub(crate) our_p50_us: u64,
    pub(crate) our_p99_us: u64,
    pub(crate) our_max_us: u64,
    /// Our longest wait still open when the window closed (a lower bound), µs.
    pub(crate) our_open_us: u64,
    /// The foreign side's 99th percentile wait (µs).
    pub(crate) their_p99_us: u64,
    /// Holds that found another holder inside (server-side counter, both sides).
    pub(crate) overlaps: u64,
}

impl ForeignRecord {
    /// Our share of all acquisitions.
    pub(crate) fn our_share(&self) -> f64 {
        self.ours as f64 / (self.ours + self.theirs).max(1) as f64
    }
}

/// What a foreign child prints after its window (one JSON line).
#[derive(Debug, Deserialize)]
struct ChildReport {
    waits_us: Vec<u64>,
}

/// Every foreign client, `runs` times (at most [`MAX_RUNS`]), interleaved.
pub(crate) async fn measure(
    url: &str,
    foreign: &[Foreign<'_>],
    runs: usize,
    window: Duration,
    skipped: &mut Vec<String>,
) -> Vec<ForeignRecord> {
    let mut records = Vec::new();
    for run in 0..runs.clamp(1, MAX_RUNS) {
        for client in foreign {
            match measure_one(url, client, run, window).await {
                Ok(record) => {
                    eprintln!(
                        "run {run} foreign {:<13} ours {} ({:.0} %), theirs {}; our wait p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (open {:.1} ms); their p99 {:.1} ms; overlaps {}",
                        client.id(),
                        record.ours,
                        record.our_share() * 100.0,
                        record.theirs,
                        record.our_p50_us as f64 / 1e3,
                        record.our_p99_us as f64 / 1e3,
                        record.our_max_us as f64 / 1e3,
                        record.our_open_us as f64 / 1e3,
                        record.their_p99_us as f64 / 1e3,
                        record.overlaps,
                    );
                    records.push(record);
                }
                Err(err) => {
                    let note =
                        format!("run {run}, foreign clients, {}: failed: {err}", client.id());
                    eprintln!("{note}");
                    skipped.push(note);
                }
            }
        }
    }
    records
}

async fn measure_one(
    url: &str,
    foreign: &Foreign<'_>,
    run: usize,
    window: Duration,
) -> BenchResult<ForeignRecord> {
    let key = format!(
        "bench:foreign:{}:{run}:{}",
        foreign.id(),
        std::process::id()
    );
    let (inside, overlaps) = (format!("{key}:inside"), format!("{key}:overlaps"));
    let mut conn = cleared(url, [&key, &inside, &overlaps]).await?;
    let ours = LockClient::new(Config::single(url))?;
    // Warm-up: the connection, the scripts, the subscription.
    ours.lock(format!("{key}:warm"))
        .run(async { Ok::<_, LockError>(()) })
        .await?;

    let (mut child, mut lines) = start_child(foreign, url, &key, window).await?;
    let end = Instant::now() + window;
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (ours, conn) = (ours.clone(), conn.clone());
            let keys = (key.clone(), inside.clone(), overlaps.clone());
            tokio::spawn(contend(ours, conn, keys, end))
        })
        .collect();
    let mut waits = Vec::new();
    let mut open = 0;
    for task in tasks {
        let (task_waits, task_open) = task.await??;
        waits.extend(task_waits);
        open = open.max(task_open);
    }
    let report = child_report(&mut child, &mut lines, end).await?;
    let found = overlaps_found(&mut conn, &inside, &overlaps).await?;
    waits.sort_unstable();
    let mut theirs = report.waits_us;
    theirs.sort_unstable();
    Ok(ForeignRecord {
        foreign: foreign.id().to_owned(),
        run,
        window_s: window.as_secs_f64(),
        ours: waits.len() as u64,
        theirs: theirs.len() as u64,
        our_p50_us: percentile(&waits, 0.50),
        our_p99_us: percentile(&waits, 0.99),
        our_max_us: waits.last().copied().unwrap_or(0),
        our_open_us: open,
        their_p99_us: percentile(&theirs, 0.99),
        overlaps: found.unwrap_or(0),
    })
}

/// A connection of the bench's own to `url`, with `keys` deleted.
async fn cleared(url: &str, keys: [&str; 3]) -> BenchResult<redis::aio::MultiplexedConnection> {
    let redis = redis::Client::open(url)?;
    let mut conn = redis.get_multiplexed_async_connection().await?;
    let _: () = redis::cmd("DEL")
        .arg(keys[0])
        .arg(keys[1])
        .arg(keys[2])
        .query_async(&mut conn)
        .await?;
    Ok(conn)
}

/// The overlaps the counter found; then deletes it and the `inside` mark.
async fn overlaps_found(
    conn: &mut redis::aio::MultiplexedConnection,
    inside: &str,
    overlaps: &str,
) -> BenchResult<Option<u64>> {
    let found: Option<u64> = redis::cmd("GET").arg(overlaps).query_async(conn).await?;
    let _: () = redis::cmd("DEL")
        .arg(inside)
        .arg(overlaps)
        .query_async(conn)
        .await?;
    Ok(found)
}

/// The foreign child, started and told `go` once it said `ready`; its stdout's lines.
async fn start_child(
    foreign: &Foreign<'_>,
    url: &str,
    key: &str,
    window: Duration,
) -> BenchResult<(Child, Lines<BufReader<ChildStdout>>)> {
    let mut child = foreign
        .command(url, key, window)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or("a foreign child without stdin")?;
    let stdout = child
        .stdout
        .take()
        .ok_or("a foreign child without stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(CHILD_LIMIT, lines.next_line())
        .await
        .map_err(|_| "the foreign child did not say ready within 60 s")??;
    if ready.as_deref().map(str::trim) != Some("ready") {
        return Err(format!("the foreign child said {ready:?} instead of ready").into());
    }
    stdin.write_all(b"go\n").await?;
    stdin.flush().await?;
    drop(stdin);
    Ok((child, lines))
}

/// One task of ours: takes the lock on `key` until `end`, each hold marked on the
/// `inside` and `overlaps` counters. Returns its waits (µs) and its longest wait left open
/// at the window's end.
async fn contend(
    ours: LockClient,
    mut conn: redis::aio::MultiplexedConnection,
    (key, inside, overlaps): (String, String, String),
    end: Instant,
) -> Result<(Vec<u64>, u64), String> {
    let (mut waits, mut open) = (Vec::new(), 0u64);
    for _ in 0..1_000_000 {
        let asked = Instant::now();
        let left = end.saturating_duration_since(asked);
        if left.is_zero() {
            break;
        }
        let held = ours
            .lock(key.as_str())
            .ttl(Duration::from_secs(10))
            .wait(left)
            .run(async {
                let waited = asked.elapsed();
                // A failed mark is reported after the hold, not as the lock's.
                let marked = hold(&mut conn, &inside, &overlaps).await;
                Ok::<_, LockError>(marked.map(|()| waited))
            })
            .await;
        match held {
            Ok(Err(err)) => return Err(format!("the overlap counter: {err}")),
            Ok(Ok(waited)) if Instant::now() < end => {
                waits.push(waited.as_micros() as u64);
            }
            Ok(Ok(waited)) => {
                open = open.max(waited.as_micros() as u64);
                break;
            }
            Err(LockError::Timeout { .. }) => {
                open = open.max(asked.elapsed().as_micros() as u64);
                break;
            }
            Err(other) => return Err(other.to_string()),
        }
    }
    Ok((waits, open))
}

/// The foreign child's report after its window, and its exit.
async fn child_report(
    child: &mut Child,
    lines: &mut Lines<BufReader<ChildStdout>>,
    end: Instant,
) -> BenchResult<ChildReport> {
    let line = tokio::time::timeout_at(end + CHILD_LIMIT, lines.next_line())
        .await
        .map_err(|_| "the foreign child did not report within 60 s of its window")??
        .ok_or("the foreign child closed its stdout without a report")?;
    let report: ChildReport = serde_json::from_str(&line)?;
    let status = tokio::time::timeout(CHILD_LIMIT, child.wait())
        .await
        .map_err(|_| "the foreign child did not exit")??;
    if !status.success() {
        return Err(format!("the foreign child failed: {status}").into());
    }
    Ok(report)
}

/// One hold of ours: marks the overlap counter around [`HOLD`].
async fn hold(
    conn: &mut redis::aio::MultiplexedConnection,
    inside: &str,
    overlaps: &str,
) -> redis::RedisResult<()> {
    let count: i64 = redis::cmd("INCR").arg(inside).query_async(conn).await?;
    if count > 1 {
        let _: i64 = redis::cmd("INCR").arg(overlaps).query_async(conn).await?;
    }
    tokio::time::sleep(HOLD).await;
    let _: i64 = redis::cmd("DECR").arg(inside).query_async(conn).await?;
    Ok(())
}

/// The medians of one foreign client's measurements.
struct Summary {
    foreign: String,
    runs: usize,
    ours: f64,
    theirs: f64,
    share: f64,
    /// The least share either side got, median over the runs.
    least_share: f64,
    p50_us: f64,
    p99_us: f64,
    max_us: u64,
    their_p99_us: f64,
    overlaps: u64,
}

fn summaries(records: &[ForeignRecord]) -> Vec<Summary> {
    let mut ids: Vec<&str> = records.iter().map(|r| r.foreign.as_str()).collect();
    ids.dedup();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .map(|id| {
            let mine: Vec<&ForeignRecord> = records.iter().filter(|r| r.foreign == id).collect();
            let median = |f: &dyn Fn(&ForeignRecord) -> f64| {
                crate::figures::median(mine.iter().map(|r| f(r)))
            };
            Summary {
                foreign: id.to_owned(),
                runs: mine.len(),
                ours: median(&|r| r.ours as f64),
                theirs: median(&|r| r.theirs as f64),
                share: median(&|r| r.our_share()),
                least_share: median(&|r| r.our_share().min(1.0 - r.our_share())),
                p50_us: median(&|r| r.our_p50_us as f64),
                p99_us: median(&|r| r.our_p99_us as f64),
                max_us: mine
                    .iter()
                    .map(|r| r.our_max_us.max(r.our_open_us))
                    .max()
                    .unwrap_or(0),
                their_p99_us: median(&|r| r.their_p99_us as f64),
                overlaps: mine.iter().map(|r| r.overlaps).sum(),
            }
        })
        .collect()
}

fn label_of(id: &str) -> &'static str {
    match id {
        "redis-py" => "redis-py Lock (threads, 0.1 s poll)",
        _ => "node-redlock 4 (async tasks, 50 ms retry)",
    }
}

fn ms(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.0} ms", us / 1e3)
    } else {
        format!("{:.1} ms", us / 1e3)
    }
}

/// The goal rows of a shared key (goal, verdict, measured), for the "Goals: cost at scale"
/// table: per foreign client, each side's share and our p99 wait; exclusion over all.
pub(crate) fn goal_rows(records: &[ForeignRecord]) -> Vec<(String, Option<bool>, String)> {
    let mut rows = Vec::new();
    for s in summaries(records) {
        rows.push((
            format!(
                "Foreign clients: beside {}, each side at least a third of the acquisitions",
                label_of(&s.foreign)
            ),
            Some(s.least_share >= SHARE_GOAL),
            format!(
                "ours {:.0}, theirs {:.0} (our share {:.0} %; median of {} runs of {TASKS} + \
                 {TASKS} tasks)",
                s.ours,
                s.theirs,
                s.share * 100.0,
                s.runs
            ),
        ));
        rows.push((
            format!(
                "Foreign clients: beside {}, our p99 wait under 1 s",
                label_of(&s.foreign)
            ),
            Some(s.p99_us < P99_GOAL_US as f64),
            format!(
                "p99 {}, longest {} (median p99 of {} runs)",
                ms(s.p99_us),
                ms(s.max_us as f64),
                s.runs
            ),
        ));
    }
    if !records.is_empty() {
        let overlaps: u64 = records.iter().map(|r| r.overlaps).sum();
        rows.push((
            "Foreign clients: exclusion holds across both sides".to_owned(),
            Some(overlaps == 0),
            format!("{overlaps} overlaps in {} runs", records.len()),
        ));
    }
    rows
}

/// The section of BENCHMARKS.md.
pub(crate) fn section(out: &mut String, records: &[ForeignRecord], skipped: &[String]) {
    let _ = writeln!(out, "## 12. One key shared with foreign clients\n");
    let window = records.first().map_or(WINDOW_S, |r| r.window_s);
    let _ = writeln!(
        out,
        "{TASKS} of our tasks (one process, the Lock API, default `Config::foreign_window`) \
         and {TASKS} tasks of a client that does not queue contend for one key for {window:.1} s \
         per run, without a break: each holds it {} ms and asks again at once. redis-py's `Lock` \
         runs in threads with its default 0.1 s poll; node-redlock 4 (ioredis) in async tasks \
         retrying every 50 ms. Every holder marks a server-side overlap counter around its \
         hold. Medians of the runs (`BENCH_ONLY=foreign bench/run` runs this section alone); \
         the longest wait is the longest of all runs, waits still open at the end included.\n",
        HOLD.as_millis()
    );
    let _ = writeln!(
        out,
        "| foreign client | ours | theirs | our share | our p50 wait | our p99 wait | our longest wait | their p99 wait | overlaps |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for s in summaries(records) {
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.0} % | {} | {} | {} | {} | {} |",
            label_of(&s.foreign),
            s.ours,
            s.theirs,
            s.share * 100.0,
            ms(s.p50_us),
            ms(s.p99_us),
            ms(s.max_us as f64),
            ms(s.their_p99_us),
            s.overlaps
        );
    }
    for note in skipped
        .iter()
        .filter(|note| note.starts_with("node-redlock"))
    {
        let _ = writeln!(out, "\nNot run: {note}.");
    }
    let _ = writeln!(out);
}
