//! A semaphore's waiters are kept by their process's liveness key, as a lock's are: a
//! waiting process costs one refresh per period however many semaphore keys it waits on,
//! and a waiting process that stops loses its places once that key lapses, wherever it
//! stands among the waiters the free permits are owed to.
//!
//! ```text
//! cargo test -p lock-tests --test semaphore_liveness -- --nocapture | grep FIGURE
//! ```
#![allow(clippy::unwrap_used, missing_docs)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError};
use lock_tests::{RedisServer, SCRIPT_COMMANDS, child};
use tokio::time::Instant;

const KEY: &str = "sem-liveness";

/// The queue of `key` (no hash tag in it), and its ttls hash.
fn queue_keys(key: &str) -> (String, String) {
    (
        format!("~lock/queue{{{key}}}"),
        format!("~lock/ttls{{{key}}}"),
    )
}

/// The tokens queued on `key`, first first.
fn queued(server: &RedisServer, key: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(queue_keys(key).0)
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .unwrap()
}

/// The liveness key the queue entry of `token` on `key` names, if any.
fn alive_key(server: &RedisServer, key: &str, token: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(queue_keys(key).1)
        .arg(format!("~alive/{token}"))
        .query(&mut server.conn())
        .unwrap()
}

fn exists(server: &RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut server.conn())
        .unwrap()
        == 1
}

async fn until_queued(server: &RedisServer, key: &str, count: usize) {
    let queued = lock_tests::until(Duration::from_secs(30), Duration::from_millis(5), || {
        queued(server, key).len() >= count
    })
    .await;
    assert!(
        queued.is_some(),
        "fewer than {count} waiters queued on {key}"
    );
}

/// Counts, from `MONITOR`, the per-key keep-alive calls (`keepalive.lua`: the only script
/// called on three keys of which the first is a queue) and the semaphore's tries
/// (`semaphore_acquire.lua`: four keys, the second the queue) a server receives while it
/// runs.
fn count_keepalives_and_tries(port: u16, window: Duration) -> (u64, u64) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(b"MONITOR\r\n").unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut lines = BufReader::new(stream);
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    assert_eq!(line.trim_end(), "+OK");
    line.clear();
    let until = std::time::Instant::now() + window;
    let (mut keepalives, mut tries) = (0, 0);
    while std::time::Instant::now() < until {
        match lines.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) if !line.ends_with('\n') => {}
            Ok(_) => {
                let words: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
                let sent = line.contains("[0 127.0.0.1:");
                let script = sent
                    && words
                        .first()
                        .is_some_and(|c| SCRIPT_COMMANDS.iter().any(|s| c.eq_ignore_ascii_case(s)));
                let queue_at = |index: usize| {
                    words
                        .get(index)
                        .is_some_and(|k: &&str| k.starts_with("~lock/queue{"))
                };
                if script && words.get(2) == Some(&"3") && queue_at(3) {
                    keepalives += 1;
                }
                if script && words.get(2) == Some(&"4") && queue_at(4) {
                    tries += 1;
                }
                line.clear();
            }
            Err(_) => {}
        }
    }
    (keepalives, tries)
}

/// 20 tasks of one process wait on 20 semaphore keys of one permit, each held by another
/// client: each waiter's queue entry names its process's liveness key, and over a second
/// and a half (several keep-alive periods) no per-key keep-alive is sent, and the waiters
/// do not ask again (they park until the holders' leases would end, 30 s, unless a release
/// wakes them). When the holders release, every waiter gets its permit.
#[test]
fn semaphore_waiters_are_kept_by_the_liveness_key_not_per_key() {
    const KEYS: usize = 20;
    let server = RedisServer::start();
    lock_tests::two_worker_runtime().block_on(async {
        let holder = server.lock_client();
        let waiter = server.lock_client();
        let keys: Vec<String> = (0..KEYS).map(|i| format!("{KEY}:{i}")).collect();
        let mut held = Vec::new();
        for key in &keys {
            let permit = holder
                .semaphore(key.as_str(), 1)
                .ttl(Duration::from_secs(30));
            held.push(permit.acquire().await.unwrap());
        }
        let tasks: Vec<_> = keys
            .iter()
            .map(|key| {
                let permit = waiter
                    .semaphore(key.as_str(), 1)
                    .ttl(Duration::from_secs(30))
                    .wait(Duration::from_secs(60));
                tokio::spawn(async move { permit.acquire().await })
            })
            .collect();
        for key in &keys {
            until_queued(&server, key, 1).await;
        }
        let port = server.port();
        let (keepalives, tries) = tokio::task::spawn_blocking(move || {
            count_keepalives_and_tries(port, Duration::from_millis(1500))
        })
        .await
        .unwrap();
        println!(
            "FIGURE semaphore waiting cost: {KEYS} semaphore keys waited on by one process: \
             {keepalives} per-key keep-alive calls and {tries} tries in 1.5 s"
        );
        assert!(
            tries < KEYS as u64,
            "{KEYS} semaphore waiters behind held permits asked again {tries} times in 1.5 s"
        );
        assert_eq!(
            keepalives, 0,
            "waiting on {KEYS} semaphore keys sent {keepalives} per-key keep-alives in 1.5 s"
        );
        for key in &keys {
            let entry = queued(&server, key);
            assert_eq!(entry.len(), 1);
            let alive = alive_key(&server, key, &entry[0]);
            let alive = alive.unwrap_or_else(|| {
                panic!("the semaphore waiter's entry on {key} names no liveness key")
            });
            assert!(alive.starts_with("~lock/alive/"), "{alive}");
            assert!(exists(&server, &alive), "its liveness key {alive} is kept");
        }
        for guard in held {
            guard.release().await.unwrap();
        }
        for task in tasks {
            let guard = tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("a waiter did not get its permit within 30 s of the release")
                .unwrap()
                .unwrap();
            guard.release().await.unwrap();
        }
    });
}

/// The waiting process: one task waits for a permit of [`KEY`]'s semaphore of
/// `SEM_PERMITS` (ttl 30 s, wait 60 s), it prints `QUEUED` once the task waits, and when it
/// gets the permit it runs a body with a cross-process counter of holders (`inside` in
/// Redis) and prints `RAN <inside>`.
#[test]
fn semaphore_waiting_process() {
    let Some(_) = child::role() else { return };
    let url = std::env::var("SEM_URL").unwrap();
    let permits: u32 = std::env::var("SEM_PERMITS").unwrap().parse().unwrap();
    let runtime = lock_tests::two_worker_runtime();
    runtime.block_on(async move {
        let client = LockClient::new(Config::single(url.as_str())).unwrap();
        let redis = redis::Client::open(url.as_str()).unwrap();
        let mut redis = redis.get_multiplexed_async_connection().await.unwrap();
        let permit = client
            .semaphore(KEY, permits)
            .ttl(Duration::from_secs(30))
            .wait(Duration::from_secs(60));
        let task = tokio::spawn(async move {
            permit
                .run(async {
                    let inside = lock_tests::checkers::enter(&mut redis, permits.into()).await;
                    println!("RAN {inside}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    lock_tests::checkers::leave(&mut redis).await;
                    Ok::<_, LockError>(())
                })
                .await
        });
        for _ in 0..2000 {
            if client.waiting().1 == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        println!("QUEUED");
        task.await.unwrap().unwrap();
    });
}

/// A waiting process, killed when dropped (also a stopped one, when a test fails).
struct Worker(std::process::Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a waiting process on a semaphore of `permits`, and returns it with its stdout
/// lines once its entry is the `place`-th of the queue (from 1).
async fn start_waiter(
    server: &RedisServer,
    permits: u32,
    place: usize,
) -> (Worker, mpsc::Receiver<String>) {
    let mut worker = child::spawn(
        "semaphore_waiting_process",
        "waiter",
        &[
            ("SEM_URL", server.url()),
            ("SEM_PERMITS", permits.to_string()),
        ],
    );
    let lines = child::stream_lines(worker.stdout.take().unwrap());
    child::expect_line(&lines, "QUEUED", Duration::from_secs(30));
    let worker = Worker(worker);
    until_queued(server, KEY, place).await;
    (worker, lines)
}

/// A live waiter of the test's process on [`KEY`] (ttl 30 s, wait 30 s): acquires, counts
/// itself in `inside`, holds the permit for `hold`, and returns when it acquired, what
/// `inside` was, and who was queued right after it acquired.
fn live_waiter(
    server: &RedisServer,
    client: &LockClient,
    permits: u32,
    hold: Duration,
) -> tokio::task::JoinHandle<(Instant, i64, Vec<String>)> {
    let permit = client
        .semaphore(KEY, permits)
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(30));
    let url = server.url();
    tokio::spawn(async move {
        let guard = permit.acquire().await.unwrap();
        let acquired = Instant::now();
        let mut redis = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let inside = lock_tests::checkers::enter(&mut redis, permits.into()).await;
        let queued: Vec<String> = redis::cmd("ZRANGE")
            .arg(queue_keys(KEY).0)
            .arg(0)
            .arg(-1)
            .query_async(&mut redis)
            .await
            .unwrap();
        tokio::time::sleep(hold).await;
        lock_tests::checkers::leave(&mut redis).await;
        guard.release().await.unwrap();
        (acquired, inside, queued)
    })
}

/// Resumes a paused waiting process and checks that its body ran with at most `permits`
/// holders inside (the counter `inside` in Redis).
fn resume_and_check(mut worker: Worker, lines: &mpsc::Receiver<String>, permits: i64) {
    child::signal(worker.0.id(), "CONT");
    let inside: i64 = child::expect_line(lines, "RAN ", Duration::from_secs(60))
        .parse()
        .unwrap();
    assert!(
        inside <= permits,
        "the resumed process held a permit beside {} others (permits {permits})",
        inside - 1
    );
    assert!(worker.0.wait().unwrap().success());
}

/// A process queued on a semaphore of one permit ahead of a live waiter is paused
/// (SIGSTOP), then the holder releases: the live waiter gets the permit once the paused
/// process's liveness key has lapsed (not after the hour a kept entry's deadline allows),
/// and after SIGCONT the paused process never holds a permit beside it.
#[test]
fn a_paused_process_ahead_on_a_semaphore_lets_the_live_waiter_in_once_its_liveness_lapses() {
    let server = RedisServer::start();
    lock_tests::two_worker_runtime().block_on(async {
        let holder = server.lock_client();
        let held = holder
            .semaphore(KEY, 1)
            .ttl(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        let (worker, lines) = start_waiter(&server, 1, 1).await;
        let live = server.lock_client();
        let waiter = live_waiter(&server, &live, 1, Duration::from_secs(3));
        until_queued(&server, KEY, 2).await;
        let paused_token = queued(&server, KEY)[0].clone();
        let paused_alive = alive_key(&server, KEY, &paused_token)
            .expect("the waiting process's semaphore entry names no liveness key");
        child::pause(worker.0.id());
        let released = Instant::now();
        held.release().await.unwrap();
        let (acquired, inside, _) = tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("the live waiter did not get the permit within 20 s")
            .unwrap();
        // Still paused: its liveness key lapsed, which is what let the live waiter in.
        assert!(
            !exists(&server, &paused_alive),
            "the live waiter got the permit while the paused process's liveness key lived"
        );
        assert_eq!(inside, 1, "the live waiter was not alone with its permit");
        let delay = acquired - released;
        println!(
            "FIGURE paused-semaphore-waiter: the live waiter behind a paused process got the \
             one permit {:.0} ms after the release",
            delay.as_secs_f64() * 1000.0
        );
        resume_and_check(worker, &lines, 1);
    });
}

/// A semaphore of two permits, both held; queued: a live process's waiter that has not
/// come for its permit yet (paused, its liveness key kept), a paused process whose liveness
/// key lapsed (the SECOND in the queue), and a live waiter. Both holders release: the live
/// waiter gets the permit the dead entry was owed, while the live entry ahead still waits
/// for its own; after SIGCONT nobody holds a permit beyond the two.
#[test]
fn a_dead_second_waiter_on_a_semaphore_does_not_keep_a_free_permit_from_the_live_one_behind() {
    let server = RedisServer::start();
    lock_tests::two_worker_runtime().block_on(async {
        let holder = server.lock_client();
        let mut held = Vec::new();
        for _ in 0..2 {
            let permit = holder.semaphore(KEY, 2).ttl(Duration::from_secs(60));
            held.push(permit.acquire().await.unwrap());
        }
        let (first, first_lines) = start_waiter(&server, 2, 1).await;
        let (second, second_lines) = start_waiter(&server, 2, 2).await;
        let live = server.lock_client();
        let waiter = live_waiter(&server, &live, 2, Duration::from_secs(2));
        until_queued(&server, KEY, 3).await;
        let order = queued(&server, KEY);
        let first_alive = alive_key(&server, KEY, &order[0])
            .expect("the first waiting process's semaphore entry names no liveness key");
        let second_alive = alive_key(&server, KEY, &order[1])
            .expect("the second waiting process's semaphore entry names no liveness key");
        child::pause(first.0.id());
        child::pause(second.0.id());
        // The first stays alive to the scripts (a live process whose waiter has not come
        // yet); the second's key lapses.
        let _: i64 = redis::cmd("PERSIST")
            .arg(&first_alive)
            .query(&mut server.conn())
            .unwrap();
        let lapsed = lock_tests::until(Duration::from_secs(10), Duration::from_millis(10), || {
            !exists(&server, &second_alive)
        })
        .await;
        assert!(
            lapsed.is_some(),
            "the paused process's liveness key lived on"
        );
        // The first release owes its permit to the first entry; the second, with two free,
        // to the first two.
        for guard in held {
            guard.release().await.unwrap();
        }
        let (_, inside, left) = tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("the live waiter did not get the free permit within 20 s")
            .unwrap();
        assert_eq!(inside, 1, "the live waiter held a permit beside another");
        println!(
            "FIGURE dead-second-semaphore-waiter: queued after the live waiter's turn: {left:?}"
        );
        assert!(
            left.contains(&order[0]),
            "the live waiter got its permit only after the live entry ahead lost its place"
        );
        assert!(!left.contains(&order[1]), "the dead entry kept its place");
        resume_and_check(first, &first_lines, 2);
        resume_and_check(second, &second_lines, 2);
    });
}
