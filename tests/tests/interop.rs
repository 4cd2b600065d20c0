//! Sharing a contended key with a client that does not queue: redis-py's `Lock` takes a lock
//! only when its `SET NX` finds the key free, which our queue never leaves it while our
//! waiters wait. The foreign window (`Config::foreign_window`) leaves it free now and then.
//!
//! ```text
//! cargo test -p lock-tests --test interop -- --nocapture | grep FIGURE
//! ```
#![allow(clippy::unwrap_used, missing_docs)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_runtime::LockError;
use lock_tests::{RedisServer, child};
use tokio::time::Instant;

const KEY: &str = "shared";
const SECONDS: u64 = 10;
const TASKS: usize = 20;
const HOLD: Duration = Duration::from_millis(20);

/// 20 threads, each taking redis-py's `Lock` on the key in a loop (its default 0.1 s poll),
/// holding it 20 ms with the shared overlap detector and then working 20 ms without it, for
/// the given seconds; then one line `PY <acquisitions of each thread>`. Without the pause a
/// thread that releases takes the free key back within microseconds, and redis-py's own
/// threads starve one another (its `Lock` has no queue), whoever else shares the key.
const PYTHON: &str = r#"
import sys, threading, time, redis
url, key, seconds, tasks, hold = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
client = redis.Redis.from_url(url)
end = time.monotonic() + seconds
counts = [0] * tasks
def run(index):
    while time.monotonic() < end:
        lock = client.lock(key, timeout=5, sleep=0.1, blocking_timeout=max(0.01, end - time.monotonic()))
        if not lock.acquire():
            continue
        if client.incr("inside") > 1:
            client.incr("overlaps")
        time.sleep(hold)
        client.decr("inside")
        counts[index] += 1
        lock.release()
        time.sleep(hold)
threads = [threading.Thread(target=run, args=(i,)) for i in range(tasks)]
print("READY", flush=True)
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("PY " + " ".join(map(str, counts)), flush=True)
"#;

/// 20 redis-py threads and 20 of our tasks (one process) take one key for 10 s, holding it
/// 20 ms (redis-py's threads work 20 ms between two holds): the redis-py side gets at least
/// a fifth of the acquisitions and at least 15 of its 20 threads acquire (without the
/// foreign window, all of them timed out with 6 acquisitions between them), mutual
/// exclusion holds across both, and each side's share is printed.
///
/// Which redis-py thread takes a window is redis-py's own race (its threads poll every
/// 0.1 s, with no queue among them, under one GIL): under CI load two of its threads once
/// never won one while the side took 53 % of all acquisitions. So the test holds the
/// foreign side's share to a bound, and its threads only mostly.
#[test]
fn redis_py_clients_get_the_key_beside_our_queue() {
    require_redis_py();
    let server = RedisServer::start();
    lock_tests::two_worker_runtime().block_on(async {
        let (mut python, lines) = spawn_redis_py(&server, PYTHON, SECONDS, TASKS as u64, HOLD);
        let client = server.lock_client();
        let redis = server
            .redis()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let end = Instant::now() + Duration::from_secs(SECONDS);
        let ours: Vec<Arc<AtomicU64>> = (0..TASKS).map(|_| Arc::new(AtomicU64::new(0))).collect();
        let tasks: Vec<_> = ours
            .iter()
            .map(|count| {
                let (client, count, mut redis) = (client.clone(), count.clone(), redis.clone());
                tokio::spawn(async move {
                    for _ in 0..100_000 {
                        let left = end.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        let lock = client.lock(KEY).ttl(Duration::from_secs(5)).wait(left);
                        let held = lock
                            .run(async {
                                lock_tests::checkers::enter(&mut redis, 1).await;
                                tokio::time::sleep(HOLD).await;
                                lock_tests::checkers::leave(&mut redis).await;
                                Ok::<_, LockError>(())
                            })
                            .await;
                        match held {
                            Ok(()) => {
                                count.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(LockError::Timeout { .. }) => break,
                            Err(other) => panic!("{other:?}"),
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let py: Vec<u64> = child::expect_line(&lines, "PY ", Duration::from_secs(30))
            .split_whitespace()
            .map(|count| count.parse().unwrap())
            .collect();
        assert!(python.wait().unwrap().success());
        let ours: Vec<u64> = ours
            .iter()
            .map(|count| count.load(Ordering::SeqCst))
            .collect();
        let (py_total, ours_total) = (py.iter().sum::<u64>(), ours.iter().sum::<u64>());
        let overlaps = server.get("overlaps");
        println!(
            "FIGURE foreign-share: {SECONDS} s, hold 20 ms: ours {ours_total} acquisitions \
             ({:.0} %, per task {}..{}), redis-py {py_total} ({:.0} %, per thread {}..{}); \
             overlaps {overlaps:?}",
            100.0 * ours_total as f64 / (ours_total + py_total) as f64,
            ours.iter().min().unwrap(),
            ours.iter().max().unwrap(),
            100.0 * py_total as f64 / (ours_total + py_total) as f64,
            py.iter().min().unwrap(),
            py.iter().max().unwrap(),
        );
        assert_eq!(overlaps, None, "our lock and redis-py's let two holders in");
        assert_eq!(py.len(), TASKS);
        assert!(
            py_total * 5 >= ours_total + py_total,
            "redis-py got under a fifth of the acquisitions: {py:?} against our {ours:?}"
        );
        assert!(
            py.iter().filter(|&&count| count > 0).count() >= TASKS * 3 / 4,
            "over a quarter of the redis-py threads never acquired: {py:?}"
        );
        assert!(
            ours.iter().all(|&count| count > 0),
            "a task of ours never acquired: {ours:?}"
        );
    });
}

/// 8 redis-py threads with no pause between their holds: each takes the key, holds it 5 ms
/// with the shared overlap detector, releases it and asks again at once (the foreign side
/// contends without a break, the workload of issue 27 item 3); one line `PY <acquisitions
/// of each thread>` at the end.
const PYTHON_CONTINUOUS: &str = r#"
import sys, threading, time, redis
url, key, seconds, tasks, hold = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
client = redis.Redis.from_url(url, max_connections=tasks + 4)
end = time.monotonic() + seconds
counts = [0] * tasks
def run(index):
    for _ in range(1_000_000):
        left = end - time.monotonic()
        if left <= 0:
            break
        lock = client.lock(key, timeout=10)
        if not lock.acquire(blocking=True, blocking_timeout=max(0.001, left)):
            break
        if client.incr("inside") > 1:
            client.incr("overlaps")
        time.sleep(hold)
        client.decr("inside")
        if time.monotonic() < end:
            counts[index] += 1
        lock.release()
threads = [threading.Thread(target=run, args=(i,)) for i in range(tasks)]
print("READY", flush=True)
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("PY " + " ".join(map(str, counts)), flush=True)
"#;

/// Both sides contend without a break: 8 redis-py threads (their `Lock`'s default 0.1 s
/// poll, each asking again the moment it releases) and 8 of our tasks (one process) take
/// one key for 8 s, holding it 5 ms. Each side gets at least a quarter of the acquisitions
/// (issue 27 item 3's goal is a third; `BENCH_ONLY=foreign bench/run` measures it), our
/// longest wait stays under 3 s, and exclusion holds across both.
///
/// Before the fix our side got 6 to 8 % (a redis-py thread that releases takes the key
/// back within a fraction of a millisecond, and our waiters asked every 20 ms).
#[test]
fn both_sides_get_a_share_when_redis_py_contends_without_a_break() {
    const SECONDS: u64 = 8;
    const TASKS: usize = 8;
    const HOLD: Duration = Duration::from_millis(5);
    require_redis_py();
    let server = RedisServer::start();
    lock_tests::two_worker_runtime().block_on(async {
        let (mut python, lines) =
            spawn_redis_py(&server, PYTHON_CONTINUOUS, SECONDS, TASKS as u64, HOLD);
        let client = server.lock_client();
        let redis = server
            .redis()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let end = Instant::now() + Duration::from_secs(SECONDS);
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let (client, mut redis) = (client.clone(), redis.clone());
                tokio::spawn(async move {
                    let mut waits = Vec::new();
                    for _ in 0..100_000 {
                        let left = end.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        let asked = Instant::now();
                        let lock = client.lock(KEY).ttl(Duration::from_secs(10)).wait(left);
                        let held = lock
                            .run(async {
                                let waited = asked.elapsed();
                                lock_tests::checkers::enter(&mut redis, 1).await;
                                tokio::time::sleep(HOLD).await;
                                lock_tests::checkers::leave(&mut redis).await;
                                Ok::<_, LockError>(waited)
                            })
                            .await;
                        match held {
                            Ok(waited) if Instant::now() < end => waits.push(waited),
                            Ok(_) | Err(LockError::Timeout { .. }) => break,
                            Err(other) => panic!("{other:?}"),
                        }
                    }
                    waits
                })
            })
            .collect();
        let mut waits = Vec::new();
        let mut ours = Vec::new();
        for task in tasks {
            let task_waits = task.await.unwrap();
            ours.push(task_waits.len() as u64);
            waits.extend(task_waits);
        }
        let py: Vec<u64> = child::expect_line(&lines, "PY ", Duration::from_secs(30))
            .split_whitespace()
            .map(|count| count.parse().unwrap())
            .collect();
        assert!(python.wait().unwrap().success());
        waits.sort();
        let (py_total, ours_total) = (py.iter().sum::<u64>(), ours.iter().sum::<u64>());
        let all = (ours_total + py_total).max(1);
        let p99 = waits
            .get(waits.len().saturating_sub(1) * 99 / 100)
            .copied()
            .unwrap_or_default();
        let longest = waits.last().copied().unwrap_or_default();
        let overlaps = server.get("overlaps");
        println!(
            "FIGURE foreign-continuous: {SECONDS} s, hold 5 ms: ours {ours_total} ({:.0} %, per \
             task {ours:?}), redis-py {py_total} ({:.0} %, per thread {py:?}); our wait p99 \
             {p99:?}, longest {longest:?}; overlaps {overlaps:?}",
            100.0 * ours_total as f64 / all as f64,
            100.0 * py_total as f64 / all as f64,
        );
        assert_eq!(overlaps, None, "our lock and redis-py's let two holders in");
        assert!(
            ours_total * 4 >= all,
            "our side got under a quarter of the acquisitions: ours {ours:?} against \
             redis-py's {py:?} (our longest wait {longest:?})"
        );
        assert!(
            py_total * 4 >= all,
            "redis-py got under a quarter of the acquisitions: {py:?} against our {ours:?}"
        );
        assert!(
            longest < Duration::from_secs(3),
            "a task of ours waited {longest:?} (p99 {p99:?})"
        );
    });
}

/// Fails with how to install them when python3 or redis-py is missing.
fn require_redis_py() {
    let python = Command::new("python3")
        .args(["-c", "import redis"])
        .status()
        .unwrap_or_else(|err| panic!("python3 cannot run ({err}): install python3 and redis-py"));
    assert!(
        python.success(),
        "python3 cannot import redis: run `pip install 'redis>=5,<6'` (scripts/ensure-redis)"
    );
}

/// Starts `script` (redis-py threads on KEY) against `server` and waits for its READY line.
fn spawn_redis_py(
    server: &RedisServer,
    script: &str,
    seconds: u64,
    tasks: u64,
    hold: Duration,
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let mut python = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(server.url())
        .arg(KEY)
        .arg(seconds.to_string())
        .arg(tasks.to_string())
        .arg(hold.as_secs_f64().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn python3");
    let lines = child::stream_lines(python.stdout.take().unwrap());
    child::expect_line(&lines, "READY", Duration::from_secs(30));
    (python, lines)
}
