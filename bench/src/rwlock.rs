//! Read-heavy workload on one key (issue 26): 90 % reads, 10 % writes, each hold 1 ms,
//! `tasks` tasks in this process for a fixed window; once with the read-write lock
//! (`RwLock::read` / `write`), once with the mutex (`Lock`) on the same workload. Run only
//! it with `BENCH_ONLY=rwlock bench/run`; it prints one markdown row per kind (medians over
//! the runs), to be copied into BENCHMARKS.md by hand (section 8).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_runtime::{Lock, RwLock};
use tokio::time::Instant;

use crate::BenchResult;
use crate::scenarios::percentile;

/// Which lock the workload runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    ReadWrite,
    Mutex,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::ReadWrite => "RwLock (read / write)",
            Kind::Mutex => "Lock (every operation exclusive)",
        }
    }
}

/// One measurement.
#[derive(Debug, Clone)]
pub(crate) struct RwRecord {
    pub(crate) kind: Kind,
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
        handles.push(tokio::spawn(async move {
            let mut waits = (Vec::new(), Vec::new());
            let mut seed = 0x9E37_79B9_7F4A_7C15_u64 ^ (task + 1).wrapping_mul(run as u64 + 7);
            while Instant::now() < end {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let read = seed % 100 < READ_PERCENT;
                let asked = Instant::now();
                let held = match (kind, read) {
                    (Kind::ReadWrite, true) => match RwLock::new(key.as_str()).read().await {
                        Ok(guard) => {
                            let waited = asked.elapsed();
                            tokio::time::sleep(hold).await;
                            guard.release().await.map(|_| waited)
                        }
                        Err(err) => Err(err),
                    },
                    (Kind::ReadWrite, false) => match RwLock::new(key.as_str()).write().await {
                        Ok(guard) => {
                            let waited = asked.elapsed();
                            tokio::time::sleep(hold).await;
                            guard.release().await.map(|_| waited)
                        }
                        Err(err) => Err(err),
                    },
                    (Kind::Mutex, _) => match Lock::new(key.as_str()).acquire().await {
                        Ok(guard) => {
                            let waited = asked.elapsed();
                            tokio::time::sleep(hold).await;
                            guard.release().await.map(|_| waited)
                        }
                        Err(err) => Err(err),
                    },
                };
                match held {
                    Ok(waited) if read => waits.0.push(waited.as_micros() as u64),
                    Ok(waited) => waits.1.push(waited.as_micros() as u64),
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            waits
        }));
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
        operations_per_s: operations / window.as_secs_f64(),
        reads: reads.len() as u64,
        writes: writes.len() as u64,
        read_p50_us: percentile(&reads, 0.50),
        read_p99_us: percentile(&reads, 0.99),
        write_p99_us: percentile(&writes, 0.99),
        errors: errors.load(Ordering::Relaxed),
    })
}

/// Runs both kinds `runs` times (interleaved, the order alternating) and prints the rows.
pub(crate) async fn bench(runs: usize, tasks: u64, window: Duration) -> BenchResult<()> {
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
    let median = |kind: Kind, field: fn(&RwRecord) -> f64| {
        let mut values: Vec<f64> = records
            .iter()
            .filter(|record| record.kind == kind)
            .map(field)
            .collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let mutex_ops = median(Kind::Mutex, |record| record.operations_per_s);
    println!(
        "| lock | operations/s (median) | × mutex | read wait p50 | read wait p99 | write wait p99 | errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for kind in [Kind::ReadWrite, Kind::Mutex] {
        let ops = median(kind, |record| record.operations_per_s);
        println!(
            "| {} | {:.0} | {:.2}× | {:.1} ms | {:.1} ms | {:.1} ms | {} |",
            kind.name(),
            ops,
            ops / mutex_ops,
            median(kind, |record| record.read_p50_us as f64) / 1e3,
            median(kind, |record| record.read_p99_us as f64) / 1e3,
            median(kind, |record| record.write_p99_us as f64) / 1e3,
            records
                .iter()
                .filter(|record| record.kind == kind)
                .map(|record| record.errors)
                .sum::<u64>()
        );
    }
    Ok(())
}
