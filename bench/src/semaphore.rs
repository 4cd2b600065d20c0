//! The semaphore's hot key (section 9): 16 tasks share one key, a semaphore of 4 permits,
//! each taking a permit, holding it 1 ms and giving it back, as fast as they can; beside it
//! in the same run, the mutex's hot key with the same tasks and hold, and raw round trips
//! (`PING` by the same 16 tasks on one multiplexed connection), so that the row reads as
//! ratios: a semaphore admits up to 4 holders at once, so its ideal is 4 × the mutex's.
//!
//! A full `bench/run` writes section 9 of BENCHMARKS.md from it. Run only it (BENCHMARKS.md
//! is then left as it was; the section goes to `bench/results/semaphore.md`):
//!
//! ```text
//! BENCH_ONLY=semaphore BENCH_NO_PYTHON=1 bench/run
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::LockClient;

use crate::error::BenchResult;

/// The scenario's name in `BENCH_ONLY`.
pub(crate) const NAME: &str = "semaphore";
/// The semaphore's permits.
pub(crate) const PERMITS: u32 = 4;
/// The contending tasks.
pub(crate) const TASKS: usize = 16;
/// How long each holder keeps its permit (or the lock).
pub(crate) const HOLD: Duration = Duration::from_millis(1);
const TTL: Duration = Duration::from_secs(10);
/// A bound on each task's iterations, far above what a window allows.
const MAX_ITERATIONS: u64 = 10_000_000;

/// One run's measurements, per second of its window.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct SemaphoreRecord {
    pub(crate) run: u64,
    /// Permits taken and given back per second (4 permits, 16 tasks).
    pub(crate) semaphore_per_s: f64,
    /// The most permit holders ever seen at once (must be 4 at most).
    pub(crate) semaphore_most_at_once: u64,
    /// Mutex acquisitions per second on the same shape (1 holder at a time).
    pub(crate) mutex_per_s: f64,
    /// Round trips per second (`PING`) by the same tasks on one connection.
    pub(crate) raw_round_trips_per_s: f64,
    /// p99 wait for a permit, in microseconds.
    pub(crate) semaphore_p99_wait_us: u64,
}

/// Runs the three measurements `runs` times, interleaved, on `url` through `client`.
pub(crate) async fn measure(
    client: &LockClient,
    url: &str,
    runs: usize,
    window: Duration,
) -> BenchResult<Vec<SemaphoreRecord>> {
    let redis = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let mut records = Vec::new();
    for run in 0..runs as u64 {
        let key = format!("bench:semaphore:{run}");
        let (semaphore_per_s, most, p99) = holders(client, &key, Some(PERMITS), window).await?;
        let key = format!("bench:semaphore-mutex:{run}");
        let (mutex_per_s, _, _) = holders(client, &key, None, window).await?;
        let raw = round_trips(&redis, window).await?;
        let record = SemaphoreRecord {
            run,
            semaphore_per_s,
            semaphore_most_at_once: most,
            mutex_per_s,
            raw_round_trips_per_s: raw,
            semaphore_p99_wait_us: p99,
        };
        eprintln!(
            "run {run} semaphore   4 permits {:>7.0} acq/s (most at once {most}), mutex {:>7.0} acq/s, raw {:>7.0} round trips/s: semaphore/mutex {:.2}, semaphore/raw {:.3}, p99 wait {:.1} ms",
            record.semaphore_per_s,
            record.mutex_per_s,
            record.raw_round_trips_per_s,
            record.semaphore_per_s / record.mutex_per_s,
            record.semaphore_per_s / record.raw_round_trips_per_s,
            p99 as f64 / 1e3
        );
        records.push(record);
    }
    Ok(records)
}

/// [`TASKS`] tasks take the key (`permits`: a semaphore; `None`: the mutex), hold it
/// [`HOLD`], give it back, until `window` ends: acquisitions per second, the most holders
/// seen at once, and the p99 wait in µs.
async fn holders(
    client: &LockClient,
    key: &str,
    permits: Option<u32>,
    window: Duration,
) -> BenchResult<(f64, u64, u64)> {
    let inside = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let end = start + window;
    let handles: Vec<_> = (0..TASKS)
        .map(|_| {
            let (client, key) = (client.clone(), key.to_owned());
            let (inside, most) = (inside.clone(), most.clone());
            tokio::spawn(holder(client, key, permits, (inside, most), end))
        })
        .collect();
    let mut waits = Vec::new();
    for handle in handles {
        waits.extend(handle.await??);
    }
    let elapsed = start.elapsed().as_secs_f64();
    waits.sort();
    let p99 = waits
        .get((waits.len() * 99 / 100).min(waits.len().saturating_sub(1)))
        .map_or(0, |wait| {
            u64::try_from(wait.as_micros()).unwrap_or(u64::MAX)
        });
    Ok((
        waits.len() as f64 / elapsed,
        most.load(Ordering::SeqCst),
        p99,
    ))
}

/// One task of [`holders`]: takes the key, holds it [`HOLD`], gives it back, until `end`;
/// its waits. `inside` counts the holders now, `most` the most seen at once.
async fn holder(
    client: LockClient,
    key: String,
    permits: Option<u32>,
    (inside, most): (Arc<AtomicU64>, Arc<AtomicU64>),
    end: Instant,
) -> BenchResult<Vec<Duration>> {
    let mut waits = Vec::new();
    for _ in 0..MAX_ITERATIONS {
        let t0 = Instant::now();
        if t0 >= end {
            break;
        }
        let wait = end.saturating_duration_since(t0) + Duration::from_secs(5);
        let enter = |inside: &AtomicU64, most: &AtomicU64| {
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
        };
        match permits {
            Some(permits) => {
                let permit = client
                    .semaphore(key.as_str(), permits)
                    .ttl(TTL)
                    .wait(wait)
                    .acquire()
                    .await?;
                waits.push(t0.elapsed());
                enter(&inside, &most);
                tokio::time::sleep(HOLD).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await?;
            }
            None => {
                let guard = client
                    .lock(key.as_str())
                    .ttl(TTL)
                    .wait(wait)
                    .acquire()
                    .await?;
                waits.push(t0.elapsed());
                enter(&inside, &most);
                tokio::time::sleep(HOLD).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await?;
            }
        }
    }
    BenchResult::Ok(waits)
}

/// [`TASKS`] tasks send `PING` on one multiplexed connection until `window` ends: round
/// trips per second, the physical limit of the shape.
async fn round_trips(
    redis: &redis::aio::MultiplexedConnection,
    window: Duration,
) -> BenchResult<f64> {
    let start = Instant::now();
    let end = start + window;
    let handles: Vec<_> = (0..TASKS)
        .map(|_| {
            let mut redis = redis.clone();
            tokio::spawn(async move {
                let mut count = 0u64;
                while Instant::now() < end && count < MAX_ITERATIONS {
                    let _: String = redis::cmd("PING").query_async(&mut redis).await?;
                    count += 1;
                }
                BenchResult::Ok(count)
            })
        })
        .collect();
    let mut total = 0;
    for handle in handles {
        total += handle.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}
