//! Read-heavy workload on one key (section 10): 90 % reads, 10 % writes, each hold 1 ms,
//! `tasks` tasks in this process for a fixed window; once with the read-write lock
//! (`RwLock::read` / `write`), once with the mutex (`Lock`) on the same workload. A full
//! `bench/run` writes section 10 of BENCHMARKS.md from it; `BENCH_ONLY=rwlock bench/run`
//! runs only it and writes the section to `bench/results/rwlock.md`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_runtime::{Lock, LockError, RwLock};
use tokio::time::Instant;

use crate::error::BenchResult;
use crate::scenarios::percentile;

/// The scenario's name in `BENCH_ONLY`.
pub(crate) const NAME: &str = "rwlock";

/// Which lock the workload runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) enum Kind {
    ReadWrite,
    Mutex,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::ReadWrite => "RwLock (read / write)",
            Kind::Mutex => "Lock (every operation exclusive)",
        }
    }
}

/// One measurement.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct RwRecord {
    pub(crate) kind: Kind,
    /// Which repetition (0-based).
    pub(crate) run: usize,
    pub(crate) operations_per_s: f64,
    pub(crate) reads: u64,
    pub(crate) writes: u64,
    pub(crate) read_p50_us: u64,
    pub(crate) read_p99_us: u64,
    pub(crate) write_p99_us: u64,
    pub(crate) errors: u64,
}

/// Share of reads, in percent.
const READ_PERCENT: u64 = 90;

/// `tasks` tasks run 90 % reads and 10 % writes, each held for `hold`, for `window`.
pub(crate) async fn read_heavy(
    kind: Kind,
    run: usize,
    tasks: u64,
    hold: Duration,
    window: Duration,
) -> BenchResult<RwRecord> {
    let key = format!("bench:rw:{kind:?}:{run}");
    let end = Instant::now() + window;
    let errors = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (key, errors) = (key.clone(), errors.clone());
        let operations = one_task(kind, (run, task), key, errors, (hold, end));
        handles.push(tokio::spawn(operations));
    }
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    for handle in handles {
        let (task_reads, task_writes) = handle.await?;
        reads.extend(task_reads);
        writes.extend(task_writes);
    }
    reads.sort_unstable();
    writes.sort_unstable();
    let operations = (reads.len() + writes.len()) as f64;
    Ok(RwRecord {
        kind,
        run,
        operations_per_s: operations / window.as_secs_f64(),
        reads: reads.len() as u64,
        writes: writes.len() as u64,
        read_p50_us: percentile(&reads, 0.50),
        read_p99_us: percentile(&reads, 0.99),
        write_p99_us: percentile(&writes, 0.99),
        errors: errors.load(Ordering::Relaxed),
    })
}

/// One task of [`read_heavy`]: reads or writes (90 to 10, by its own xorshift sequence)
/// until `end`; its read waits and its write waits, in µs, each error counted in `errors`.
async fn one_task(
    kind: Kind,
    (run, task): (usize, u64),
    key: String,
    errors: Arc<AtomicU64>,
    (hold, end): (Duration, Instant),
) -> (Vec<u64>, Vec<u64>) {
    let mut waits = (Vec::new(), Vec::new());
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64 ^ (task + 1).wrapping_mul(run as u64 + 7);
    while Instant::now() < end {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let read = seed % 100 < READ_PERCENT;
        let held = operate(kind, read, &key, hold).await;
        match held {
            Ok(waited) if read => waits.0.push(waited.as_micros() as u64),
            Ok(waited) => waits.1.push(waited.as_micros() as u64),
            Err(_) => {
                errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    waits
}

/// One operation: takes the key (to read, to write, or the mutex), holds it for `hold` and
/// releases it; how long it waited for it.
async fn operate(kind: Kind, read: bool, key: &str, hold: Duration) -> Result<Duration, LockError> {
    let asked = Instant::now();
    match (kind, read) {
        (Kind::ReadWrite, true) => match RwLock::new(key).read().await {
            Ok(guard) => {
                let waited = asked.elapsed();
                tokio::time::sleep(hold).await;
                guard.release().await.map(|_| waited)
            }
            Err(err) => Err(err),
        },
        (Kind::ReadWrite, false) => match RwLock::new(key).write().await {
            Ok(guard) => {
                let waited = asked.elapsed();
                tokio::time::sleep(hold).await;
                guard.release().await.map(|_| waited)
            }
            Err(err) => Err(err),
        },
        (Kind::Mutex, _) => match Lock::new(key).acquire().await {
            Ok(guard) => {
                let waited = asked.elapsed();
                tokio::time::sleep(hold).await;
                guard.release().await.map(|_| waited)
            }
            Err(err) => Err(err),
        },
    }
}

/// Runs both kinds `runs` times (interleaved, the order alternating): every measurement,
/// for section 10 of BENCHMARKS.md.
pub(crate) async fn measure(
    runs: usize,
    tasks: u64,
    window: Duration,
) -> BenchResult<Vec<RwRecord>> {
    let hold = Duration::from_millis(1);
    let mut records: Vec<RwRecord> = Vec::new();
    for run in 0..runs {
        let order = if run % 2 == 0 {
            [Kind::ReadWrite, Kind::Mutex]
        } else {
            [Kind::Mutex, Kind::ReadWrite]
        };
        for kind in order {
            let record = read_heavy(kind, run, tasks, hold, window).await?;
            eprintln!(
                "run {run} read-heavy {:<34} {:>8.0} ops/s ({} reads, {} writes), read wait p50 {:.1} ms p99 {:.1} ms, write wait p99 {:.1} ms, {} errors",
                kind.name(),
                record.operations_per_s,
                record.reads,
                record.writes,
                record.read_p50_us as f64 / 1e3,
                record.read_p99_us as f64 / 1e3,
                record.write_p99_us as f64 / 1e3,
                record.errors
            );
            records.push(record);
        }
    }
    Ok(records)
}
