//! Liveness of the wait queue when waiting processes die or stop (issue: "crash-proof
//! queue"): a waiter's place lives only while its process keeps it alive, and a direct grant
//! that its process does not confirm lapses. Each test kills or pauses a real process that
//! has tasks queued on a key, and measures how long the live waiters of another process are
//! held up.
//!
//! ```text
//! cargo test -p lock-tests --test queue_liveness -- --nocapture | grep FIGURE
//! ```
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::mpsc;
use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, OnLost};
use lock_tests::cluster::RedisCluster;
use lock_tests::{RedisServer, child};
use tokio::time::Instant;

const KEY: &str = "liveness";

/// The waiting process: `LIVENESS_TASKS` tasks queue on [`KEY`] (ttl 30 s, wait 60 s), it
/// prints `QUEUED` once all of them wait (in its local queue, and the process in the Redis
/// queue, subscribed to the key's releases), and each task that acquires runs a body with
/// a cross-process overlap detector (`inside` in Redis) and prints `RAN <inside>`.
#[test]
fn waiting_process() {
    let Some(_) = child::role() else { return };
    let url = std::env::var("LIVENESS_URL").unwrap();
    let tasks: usize = std::env::var("LIVENESS_TASKS").unwrap().parse().unwrap();
    let runtime = lock_tests::two_worker_runtime();
    runtime.block_on(async move {
        let client = LockClient::new(Config::single(url.as_str())).unwrap();
        let redis = redis::Client::open(url.as_str()).unwrap();
        let redis = redis.get_multiplexed_async_connection().await.unwrap();
        let mut handles = Vec::new();
        for _ in 0..tasks {
            let lock = client
                .lock(KEY)
                .ttl(Duration::from_secs(30))
                .wait(Duration::from_secs(60));
            let mut redis = redis.clone();
            handles.push(tokio::spawn(async move {
                let _ = lock
                    .run(async {
                        let inside = lock_tests::checkers::enter(&mut redis, 1).await;
                        println!("RAN {inside}");
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        lock_tests::checkers::leave(&mut redis).await;
                        Ok::<_, LockError>(())
                    })
                    .await;
            }));
        }
        for _ in 0..2000 {
            if client.waiting() == (tasks, 1) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        println!("QUEUED {}", client.waiting().0);
        for handle in handles {
            handle.await.unwrap();
        }
    });
}

/// Starts the waiting process with `tasks` tasks and returns it with its stdout lines.
fn start_waiters(
    server: &RedisServer,
    tasks: usize,
) -> (std::process::Child, mpsc::Receiver<String>) {
    let mut worker = child::spawn(
        "waiting_process",
        "waiters",
        &[
            ("LIVENESS_URL", server.url()),
            ("LIVENESS_TASKS", tasks.to_string()),
        ],
    );
    let lines = child::stream_lines(worker.stdout.take().unwrap());
    (worker, lines)
}

/// Waits (30 s at most) for a line of the child's that contains `prefix`: the rest of it.
fn expect_line(lines: &mpsc::Receiver<String>, prefix: &str) -> String {
    child::expect_line(lines, prefix, Duration::from_secs(30))
}

/// The length of the queue of [`KEY`] on the server.
fn queued(server: &RedisServer) -> u64 {
    redis::cmd("ZCARD")
        .arg(format!("~lock/queue{{{KEY}}}"))
        .query(&mut server.conn())
        .unwrap()
}

/// kill -9 of a process with 64 tasks queued on a key (ahead of a live waiter of another
/// process), then the holder releases: the live waiter acquires within 1.5 s, not after
/// the 30 s ttl a grant to the dead head used to hold the key for.
#[test]
fn a_killed_waiting_process_holds_the_others_up_about_a_second() {
    let server = RedisServer::start();
    lock_tests::two_worker_runtime().block_on(async {
        let holder = server.lock_client();
        let held = holder
            .lock(KEY)
            .ttl(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        let (mut worker, lines) = start_waiters(&server, 64);
        assert_eq!(expect_line(&lines, "QUEUED "), "64");
        // One place for the process, however many of its tasks wait.
        assert_eq!(queued(&server), 1);
        let live = server.lock_client();
        let waiter = {
            let lock = live
                .lock(KEY)
                .ttl(Duration::from_secs(30))
                .wait(Duration::from_secs(60));
            tokio::spawn(async move {
                let guard = lock.acquire().await;
                (Instant::now(), guard)
            })
        };
        for _ in 0..2000 {
            if queued(&server) == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(queued(&server), 2, "the live waiter queued behind the 64");
        worker.kill().unwrap();
        worker.wait().unwrap();
        let released = Instant::now();
        held.release().await.unwrap();
        let (acquired, guard) = waiter.await.unwrap();
        let guard = guard.unwrap();
        let delay = acquired - released;
        println!(
            "FIGURE killed-waiting-process: 64 tasks queued, kill -9, release: the live waiter of \
             another process acquired {:.0} ms after the release (ttl 30 s)",
            delay.as_secs_f64() * 1000.0
        );
        // The goal: held up no more than 1.5 s (one queue lease, then one park at most).
        assert!(
            delay < Duration::from_millis(1500),
            "the dead waiters held the key up for {delay:?}"
        );
        guard.release().await.unwrap();
    });
}

/// The waiting process on a cluster (`LIVENESS_URLS`, comma-separated): `LIVENESS_TASKS`
/// tasks queue on [`KEY`] (ttl 30 s, wait 60 s), and it prints `QUEUED` once all of them
/// wait.
#[test]
fn waiting_cluster_process() {
    let Some(_) = child::role() else { return };
    let urls: Vec<String> = std::env::var("LIVENESS_URLS")
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    let tasks: usize = std::env::var("LIVENESS_TASKS").unwrap().parse().unwrap();
    lock_tests::two_worker_runtime().block_on(async move {
        let client = LockClient::new(Config::cluster(urls)).unwrap();
        let handles: Vec<_> = (0..tasks)
            .map(|_| {
                let lock = client
                    .lock(KEY)
                    .ttl(Duration::from_secs(30))
                    .wait(Duration::from_secs(60));
                tokio::spawn(async move {
                    let _ = lock.run(async { Ok::<_, LockError>(()) }).await;
                })
            })
            .collect();
        for _ in 0..2000 {
            if client.waiting() == (tasks, 1) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        println!("QUEUED {}", client.waiting().0);
        for handle in handles {
            handle.await.unwrap();
        }
    });
}

/// The cluster version of the kill test: kill -9 of a process with 64 tasks queued on a
/// cluster key (ahead of a live waiter of another process), then the holder releases: the
/// live waiter acquires within 1.5 s. The dead process's entry is a kept one: it names the
/// process's liveness key on the key's master (issue 27: waiting costs per process and
/// master, not per key), which lapses within a second of the kill.
#[test]
fn a_killed_waiting_process_holds_the_others_up_about_a_second_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let master = cluster.owner(cluster.slot(KEY));
    let node = &cluster.nodes[master];
    let queued = || -> u64 {
        redis::cmd("ZCARD")
            .arg(format!("~lock/queue{{{KEY}}}"))
            .query(&mut node.conn())
            .unwrap()
    };
    lock_tests::two_worker_runtime().block_on(async {
        let holder = LockClient::new(Config::cluster(cluster.urls())).unwrap();
        let held = holder
            .lock(KEY)
            .ttl(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        let mut worker = child::spawn(
            "waiting_cluster_process",
            "waiters",
            &[
                ("LIVENESS_URLS", cluster.urls().join(",")),
                ("LIVENESS_TASKS", "64".to_owned()),
            ],
        );
        let lines = child::stream_lines(worker.stdout.take().unwrap());
        assert_eq!(expect_line(&lines, "QUEUED "), "64");
        assert_eq!(
            queued(),
            1,
            "one place for the process, however many of its tasks wait"
        );
        // A client's first tries may come before it read the slot map (their entry then
        // keeps a per-key deadline); its next try, within a second, names the key.
        let ttls = || -> Vec<(String, String)> {
            redis::cmd("HGETALL")
                .arg(format!("~lock/ttls{{{KEY}}}"))
                .query(&mut node.conn())
                .unwrap()
        };
        let named = |ttls: &[(String, String)]| {
            ttls.iter()
                .find(|(field, _)| field.starts_with("~alive/"))
                .map(|(_, alive)| alive.clone())
        };
        lock_tests::until(Duration::from_secs(5), Duration::from_millis(10), || {
            named(&ttls()).is_some()
        })
        .await;
        let alive = named(&ttls()).unwrap_or_else(|| {
            panic!(
                "the waiting process's entry names no liveness key (kept per key): {:?}",
                ttls()
            )
        });
        assert_eq!(
            cluster.owner(cluster.slot(&alive)),
            master,
            "the entry's liveness key {alive} is not on the key's master"
        );
        let live = LockClient::new(Config::cluster(cluster.urls())).unwrap();
        let waiter = {
            let lock = live
                .lock(KEY)
                .ttl(Duration::from_secs(30))
                .wait(Duration::from_secs(60));
            tokio::spawn(async move {
                let guard = lock.acquire().await;
                (Instant::now(), guard)
            })
        };
        for _ in 0..2000 {
            if queued() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(queued(), 2, "the live waiter queued behind the 64");
        worker.kill().unwrap();
        worker.wait().unwrap();
        let released = Instant::now();
        held.release().await.unwrap();
        let (acquired, guard) = waiter.await.unwrap();
        let guard = guard.unwrap();
        let delay = acquired - released;
        println!(
            "FIGURE killed-waiting-process (cluster): 64 tasks queued, kill -9, release: the live \
             waiter of another process acquired {:.0} ms after the release (ttl 30 s)",
            delay.as_secs_f64() * 1000.0
        );
        assert!(
            delay < Duration::from_millis(1500),
            "the dead waiters held the key up for {delay:?}"
        );
        guard.release().await.unwrap();
    });
}

/// A waiting process paused (SIGSTOP) for 1.5 s (shorter than the ttl, longer than a queue
/// lease) while it is at the head of the queue: the other process's waiter is held up
/// about a second, and after SIGCONT the paused process never runs a body while the other
/// holds the key (the overlap detector `inside` in Redis stays at 1).
#[test]
fn a_waiting_process_paused_shorter_than_the_ttl_neither_stalls_the_queue_nor_overlaps() {
    paused_waiting_process(Duration::from_millis(1500));
}

/// The same, paused for 3 s: longer than the ttl.
#[test]
fn a_paused_waiting_process_neither_stalls_the_queue_nor_overlaps_after_it_resumes() {
    paused_waiting_process(Duration::from_secs(3));
}

fn paused_waiting_process(pause: Duration) {
    let server = RedisServer::start();
    lock_tests::two_worker_runtime().block_on(async {
        let holder = server.lock_client();
        let held = holder
            .lock(KEY)
            .ttl(Duration::from_secs(2))
            .acquire()
            .await
            .unwrap();
        let (mut worker, lines) = start_waiters(&server, 16);
        assert_eq!(expect_line(&lines, "QUEUED "), "16");
        let live = server.lock_client();
        let waiter = {
            let lock = live
                .lock(KEY)
                .ttl(Duration::from_secs(2))
                .wait(Duration::from_secs(60));
            let url = server.url();
            tokio::spawn(async move {
                let guard = lock.acquire().await.unwrap();
                let acquired = Instant::now();
                let mut redis = redis::Client::open(url.as_str())
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap();
                let inside = lock_tests::checkers::enter(&mut redis, 1).await;
                // Held past the paused process's SIGCONT (the watchdog renews the 2 s ttl).
                tokio::time::sleep(pause + Duration::from_secs(1)).await;
                lock_tests::checkers::leave(&mut redis).await;
                guard.release().await.unwrap();
                (acquired, inside)
            })
        };
        for _ in 0..2000 {
            if queued(&server) == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(queued(&server), 2, "the live waiter queued behind the 16");
        // Stopped before the release: a thread of the worker still running could confirm
        // the grant and hold the key for its 30 s ttl.
        child::pause(worker.id());
        let released = Instant::now();
        held.release().await.unwrap();
        // The live waiter holds the key meanwhile.
        tokio::time::sleep(pause).await;
        child::signal(worker.id(), "CONT");
        let (acquired, inside) = waiter.await.unwrap();
        let delay = acquired - released;
        assert_eq!(inside, 1, "the live waiter was not alone in its body");
        // After SIGCONT the 16 run one at a time, each alone.
        let mut ran = Vec::new();
        for _ in 0..16 {
            ran.push(expect_line(&lines, "RAN "));
        }
        worker.wait().unwrap();
        assert!(
            ran.iter().all(|inside| inside == "1"),
            "a body of the resumed process overlapped another: {ran:?}"
        );
        println!(
            "FIGURE paused-waiting-process: 16 tasks queued, SIGSTOP {:.1} s (ttl 2 s), \
             release: the live waiter of another process acquired {:.0} ms after the release; \
             after SIGCONT 16 of 16 bodies ran alone",
            pause.as_secs_f64(),
            delay.as_secs_f64() * 1000.0
        );
        assert!(
            delay < Duration::from_millis(1500),
            "the paused waiters held the key up for {delay:?}"
        );
    });
}

/// With `watchdog = false`, a waiter that a release granted the lock gets the lease its
/// options promise (its whole ttl from when it took the key), not `ttl − time waited`.
#[test]
fn a_granted_waiter_without_watchdog_gets_its_whole_ttl() {
    let server = RedisServer::start();
    lock_tests::two_worker_runtime().block_on(async {
        let holder = server.lock_client();
        let ttl = Duration::from_millis(1500);
        let held = holder.lock(KEY).ttl(ttl).acquire().await.unwrap();
        let waiter = server.lock_client();
        let body = tokio::spawn(async move {
            waiter
                .lock(KEY)
                .ttl(ttl)
                .watchdog(false)
                .on_lost(OnLost::Cancel)
                .wait(Duration::from_secs(10))
                .run(async {
                    // Well within one ttl of taking the lock.
                    tokio::time::sleep(Duration::from_millis(1000)).await;
                    Ok::<_, LockError>(())
                })
                .await
        });
        // The waiter waits 1.2 s of its 1.5 s ttl before the release grants it the key.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        held.release().await.unwrap();
        let outcome = body.await.unwrap();
        assert!(
            outcome.is_ok(),
            "the granted body was cut short: {outcome:?}"
        );
    });
}

/// The holding process: takes [`KEY`] (ttl 2 s, watchdog on), queues `LIVENESS_TASKS` more
/// of its tasks behind it (local waiters), prints `HOLDING` and keeps the lock until killed.
#[test]
fn holding_process() {
    let Some(_) = child::role() else { return };
    let url = std::env::var("LIVENESS_URL").unwrap();
    let tasks: usize = std::env::var("LIVENESS_TASKS").unwrap().parse().unwrap();
    lock_tests::two_worker_runtime().block_on(async move {
        let client = LockClient::new(Config::single(url.as_str())).unwrap();
        let lock = client.lock(KEY).ttl(Duration::from_secs(2));
        // The holder takes the key through the local queue (behind a task that took it
        // alone), so that the tasks coming after it queue locally, not in Redis.
        let opener = lock.acquire().await.unwrap();
        let holder = {
            let lock = lock.clone().wait(Duration::from_secs(60));
            tokio::spawn(async move { lock.acquire().await.unwrap() })
        };
        for _ in 0..2000 {
            if client.waiting().0 == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        opener.release().await.unwrap();
        let held = holder.await.unwrap();
        let waiters: Vec<_> = (0..tasks)
            .map(|_| {
                let lock = lock.clone().wait(Duration::from_secs(60));
                tokio::spawn(
                    async move { lock.acquire().await.map(|guard| guard.token().to_owned()) },
                )
            })
            .collect();
        for _ in 0..2000 {
            if client.waiting().0 == tasks {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        println!("HOLDING {}", held.token());
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop((held, waiters));
    });
}

/// kill -9 of a process that holds the lock with 16 of its tasks queued locally behind the
/// holder: its local waiters die with it, and the other process's waiter acquires once the
/// lease ends (the key expires: no pass can outlive the process), within one queue lease of
/// that.
#[test]
fn a_killed_holding_process_with_local_waiters_frees_the_key_when_its_lease_ends() {
    let server = RedisServer::start();
    lock_tests::two_worker_runtime().block_on(async {
        let mut worker = child::spawn(
            "holding_process",
            "holder",
            &[
                ("LIVENESS_URL", server.url()),
                ("LIVENESS_TASKS", "16".into()),
            ],
        );
        let lines = child::stream_lines(worker.stdout.take().unwrap());
        let token = expect_line(&lines, "HOLDING ");
        assert_eq!(server.get(KEY).as_deref(), Some(token.as_str()));
        assert_eq!(queued(&server), 0, "local waiters do not queue in Redis");
        let live = server.lock_client();
        let waiter = {
            let lock = live.lock(KEY).wait(Duration::from_secs(30));
            tokio::spawn(async move {
                let guard = lock.acquire().await;
                (Instant::now(), guard)
            })
        };
        server.until_queued(KEY, 1).await;
        worker.kill().unwrap();
        worker.wait().unwrap();
        let killed = Instant::now();
        let left = Duration::from_millis(u64::try_from(server.pttl(KEY)).unwrap_or(0));
        let (acquired, guard) = waiter.await.unwrap();
        let guard = guard.unwrap();
        let delay = acquired - killed;
        println!(
            "FIGURE killed-holding-process: holder with 16 local waiters killed with {:.0} ms of \
             its lease left: the other process acquired {:.0} ms after the kill",
            left.as_secs_f64() * 1000.0,
            delay.as_secs_f64() * 1000.0
        );
        assert!(
            delay >= left.saturating_sub(Duration::from_millis(50)),
            "acquired before the lease ended"
        );
        assert!(
            delay < left + Duration::from_millis(1500),
            "held up {delay:?} with {left:?} of the lease left"
        );
        assert_ne!(guard.token(), token);
        guard.release().await.unwrap();
    });
}
