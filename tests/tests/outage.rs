//! A Redis outage: once the server has been unreachable for longer than the grace
//! (`Config::outage_grace`, default 1 s), acquisitions fail with `Backend` at once instead
//! of holding each caller for its whole `wait`; the client says so once (WARN) and once
//! again when the server answers (INFO). Each case prints its figure:
//!
//! ```text
//! cargo test -p lock-tests --test outage -- --nocapture --test-threads=1 | grep FIGURE
//! ```
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError};
use lock_tests::proxy::{Direction, FaultProxy};
use lock_tests::{RedisServer, chain};
use tokio::time::Instant;

/// The captured lines at `level` that mention `text`.
fn logged(level: &str, text: &str) -> Vec<String> {
    lock_tests::events::mentioning(&[level, text])
}

/// Redis is killed after start-up: ten calls with `wait = 10s` all fail with `Backend`
/// soon after the grace, not after their wait; one WARN says the server is down; calls
/// made meanwhile fail at once. Redis comes back on the same port: the next acquire
/// succeeds, and one INFO says so.
#[test]
fn an_outage_fails_acquisitions_fast_and_is_announced_once() {
    lock_tests::one_at_a_time(async {
        lock_tests::events::capture(tracing::Level::INFO);
        let mut server = RedisServer::start();
        let address = format!("127.0.0.1:{}", server.port());
        let client = LockClient::new(Config::single(server.url())).unwrap();
        // Redis has answered this client: a failure after this is an outage, not a typo.
        client
            .lock("outage-warm")
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();

        server.kill9();
        let killed = Instant::now();
        let calls: Vec<_> = (0..10)
            .map(|index| {
                let client = client.clone();
                tokio::spawn(async move {
                    let started = Instant::now();
                    let result = client
                        .lock(format!("outage-{index}"))
                        .wait(Duration::from_secs(10))
                        .acquire()
                        .await;
                    (result.map(drop), started.elapsed())
                })
            })
            .collect();
        let mut slowest = Duration::ZERO;
        for (index, call) in calls.into_iter().enumerate() {
            let (result, took) = tokio::time::timeout(Duration::from_secs(15), call)
                .await
                .expect("a call hung")
                .unwrap();
            let err = result.expect_err("acquired with Redis down");
            assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
            let text = chain(&err);
            assert!(
                took < Duration::from_secs(3),
                "call {index} failed only after {took:?}: {text}"
            );
            assert!(text.contains(&format!("outage-{index}")), "{text}");
            assert!(text.contains("unreachable for"), "{text}");
            slowest = slowest.max(took);
        }
        // Down: a new call fails at once.
        let started = Instant::now();
        let err = client.lock("outage-new").acquire().await.unwrap_err();
        let at_once = started.elapsed();
        assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
        assert!(at_once < Duration::from_millis(500), "took {at_once:?}");
        // (Filtered by the server's address: the other tests log about their own.)
        let down = logged("WARN", "unreachable")
            .into_iter()
            .filter(|line| line.contains(&address))
            .count();
        assert_eq!(down, 1, "expected one WARN: {:#?}", logged("WARN", ""));

        server.restart();
        let restarted = Instant::now();
        // The client probes a down server by itself: it says when it answers again.
        let noticed = lock_tests::until(Duration::from_secs(5), Duration::from_millis(5), || {
            logged("INFO", "answers again")
                .iter()
                .any(|line| line.contains(&address))
        })
        .await
        .expect("the client never said the server answers again");
        let guard = client
            .lock("outage-after")
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .expect("no acquire after Redis came back");
        let back_in = restarted.elapsed() - noticed;
        guard.release().await.unwrap();
        let up = logged("INFO", "answers again")
            .into_iter()
            .filter(|line| line.contains(&address))
            .count();
        assert_eq!(up, 1, "expected one INFO: {:#?}", logged("INFO", ""));
        let down = logged("WARN", "unreachable")
            .into_iter()
            .filter(|line| line.contains(&address))
            .count();
        assert_eq!(down, 1);
        println!(
            "FIGURE outage: Redis killed, 10 calls with wait 10s all failed with Backend, the \
             slowest after {:.0} ms (grace 1 s); a call while down failed in {:.1} ms; the \
             client noticed the restarted server {:.0} ms after it was up, and the next \
             acquire took {:.1} ms ({:.0} ms after the kill)",
            slowest.as_secs_f64() * 1000.0,
            at_once.as_secs_f64() * 1000.0,
            noticed.as_secs_f64() * 1000.0,
            back_in.as_secs_f64() * 1000.0,
            killed.elapsed().as_secs_f64() * 1000.0,
        );
    });
}

/// Waiters queued behind a holder when Redis dies are not held for their wait either.
#[test]
fn waiting_acquisitions_fail_fast_when_the_server_goes_down() {
    lock_tests::one_at_a_time(async {
        let mut server = RedisServer::start();
        let holder = server.lock_client();
        let client = LockClient::new(Config::single(server.url())).unwrap();
        let held = holder
            .lock("outage-held")
            .ttl(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        let waiters: Vec<_> = (0..5)
            .map(|_| {
                let lock = client.lock("outage-held").wait(Duration::from_secs(10));
                tokio::spawn(async move {
                    let started = Instant::now();
                    (lock.acquire().await.map(drop), started.elapsed())
                })
            })
            .collect();
        lock_tests::until_waiting(&client, 5).await;
        server.kill9();
        let mut slowest = Duration::ZERO;
        for waiter in waiters {
            let (result, took) = tokio::time::timeout(Duration::from_secs(15), waiter)
                .await
                .expect("a waiter hung")
                .unwrap();
            let err = result.expect_err("acquired with Redis down");
            assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
            slowest = slowest.max(took);
        }
        assert!(slowest < Duration::from_secs(3), "slowest {slowest:?}");
        std::mem::forget(held);
        println!(
            "FIGURE outage: 5 waiters queued when Redis was killed failed with Backend, the \
             slowest {:.0} ms after it",
            slowest.as_secs_f64() * 1000.0
        );
    });
}

/// A server that stops answering without closing its connections (both directions
/// blackholed): once one acquisition has had the client declare the outage, a new
/// uncontended acquisition (the one-`SET` path of a task alone on its key) fails with the
/// outage error at once, without sending its `SET` and waiting out the response timeout.
#[test]
fn a_blackholed_server_once_declared_down_fails_the_uncontended_path_at_once() {
    lock_tests::one_at_a_time(async {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.port());
        // A request (or a connection's hand-shake) sent to the blackhole waits this long.
        let response_timeout = Duration::from_secs(2);
        let client = LockClient::new(
            Config::single(proxy.url())
                .connect_timeout(response_timeout)
                .response_timeout(response_timeout),
        )
        .unwrap();
        client
            .lock("blackhole-warm")
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();

        proxy.set_blackhole(Direction::Up, true);
        proxy.set_blackhole(Direction::Down, true);
        let first = client
            .lock("blackhole-first")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .map(drop)
            .expect_err("acquired from a blackholed server");
        assert!(
            chain(&first).contains("unreachable for"),
            "{}",
            chain(&first)
        );

        let started = Instant::now();
        let err = client
            .lock("blackhole-alone")
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .map(drop)
            .expect_err("acquired from a blackholed server");
        let took = started.elapsed();
        let text = chain(&err);
        assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
        assert!(text.contains("blackhole-alone"), "{text}");
        assert!(text.contains("unreachable for"), "{text}");
        // Without the gate the SET goes out (on a new connection, whose hand-shake goes
        // unanswered) and waits out the connect or response timeout (2 s).
        assert!(
            took < response_timeout / 2,
            "the outage error came after {took:?}: the request was sent"
        );
        println!(
            "FIGURE outage: behind a blackhole, an uncontended acquire while down failed in \
             {:.1} ms",
            took.as_secs_f64() * 1000.0
        );
    });
}

/// Redlock: the rule holds per master. With one of three masters killed, locks are still
/// taken (a majority answers); with two killed, calls fail at once with `NoQuorum`; each
/// killed master is announced down once (WARN) and back once (INFO).
#[test]
fn redlock_masters_are_declared_down_and_back_one_by_one() {
    lock_tests::one_at_a_time(async {
        lock_tests::events::capture(tracing::Level::INFO);
        let mut masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        let addresses: Vec<String> = masters
            .iter()
            .map(|master| format!("127.0.0.1:{}", master.port()))
            .collect();
        let client = LockClient::new(Config::redlock(
            masters.iter().map(RedisServer::url).collect::<Vec<_>>(),
        ))
        .unwrap();
        let acquire = |key: &str| {
            let lock = client
                .lock(key)
                .wait(Duration::from_secs(10))
                .ttl(Duration::from_secs(5));
            async move { lock.acquire().await }
        };
        acquire("redlock-warm")
            .await
            .unwrap()
            .release()
            .await
            .unwrap();

        // One master down: a majority still answers.
        masters[0].kill9();
        for index in 0..3 {
            let guard = acquire(&format!("redlock-minority-{index}")).await.unwrap();
            guard.release().await.unwrap();
        }
        // Two down: no majority; every call fails at once, for longer than the grace.
        masters[1].kill9();
        let started = Instant::now();
        let mut calls = 0;
        let mut slowest = Duration::ZERO;
        while started.elapsed() < Duration::from_millis(1500) {
            let call = Instant::now();
            let err = acquire("redlock-majority").await.map(drop).unwrap_err();
            assert!(matches!(err, LockError::NoQuorum { .. }), "{err:?}");
            slowest = slowest.max(call.elapsed());
            calls += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(slowest < Duration::from_secs(1), "slowest {slowest:?}");
        let down = |address: &str| {
            logged("WARN", "unreachable")
                .into_iter()
                .filter(|line| line.contains(address))
                .count()
        };
        let settled = lock_tests::until(Duration::from_secs(3), Duration::from_millis(10), || {
            down(&addresses[0]) == 1 && down(&addresses[1]) == 1
        })
        .await;
        assert!(
            settled.is_some(),
            "expected one WARN for each of the two killed masters: {:#?}",
            logged("WARN", "unreachable")
        );
        assert_eq!(down(&addresses[2]), 0);

        masters[0].restart();
        masters[1].restart();
        let back = |address: &str| {
            logged("INFO", "answers again")
                .into_iter()
                .filter(|line| line.contains(address))
                .count()
        };
        let noticed = lock_tests::until(Duration::from_secs(5), Duration::from_millis(10), || {
            back(&addresses[0]) == 1 && back(&addresses[1]) == 1
        })
        .await
        .expect("the masters were never seen back");
        acquire("redlock-after")
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        println!(
            "FIGURE outage redlock: 1 of 3 masters killed: locks still taken; 2 of 3 killed: \
             {calls} calls in 1.5 s all NoQuorum, the slowest in {:.1} ms; one WARN per \
             killed master; both seen back {:.0} ms after their restart, one INFO each",
            slowest.as_secs_f64() * 1000.0,
            noticed.as_secs_f64() * 1000.0
        );
    });
}

/// Cluster mode: the rule holds per master (the node that serves the key's slot). A
/// 3-master cluster without replicas, one master killed: a key it serves fails with
/// `Backend` naming the node well before its `wait`, while keys on the other masters are
/// still taken (the cluster keeps serving them: `cluster-require-full-coverage no`). The
/// dead master is announced once (WARN); restarted (same port, same nodes.conf), its keys
/// are taken again and it is announced back once (INFO).
#[test]
fn a_dead_cluster_master_fails_its_keys_fast_while_the_others_still_lock() {
    lock_tests::one_at_a_time(async {
        lock_tests::events::capture(tracing::Level::INFO);
        let mut cluster = lock_tests::cluster::RedisCluster::start_with(
            3,
            &["--cluster-require-full-coverage", "no"],
        );
        let client = LockClient::new(Config::cluster(cluster.urls())).unwrap();
        let dead_key = cluster.key_on("cluster-outage-dead-", 1);
        let live_key = cluster.key_on("cluster-outage-live-", 0);
        let address = format!("127.0.0.1:{}", cluster.nodes[1].port());
        let acquire = |key: &str, wait: Duration| {
            let lock = client.lock(key).wait(wait).ttl(Duration::from_secs(5));
            async move { lock.acquire().await }
        };
        // Every master has answered this client.
        for node in 0..3 {
            let key = cluster.key_on("cluster-outage-warm-", node);
            let guard = acquire(&key, Duration::from_secs(5)).await.unwrap();
            guard.release().await.unwrap();
        }

        cluster.nodes[1].kill9();
        let started = Instant::now();
        let result = tokio::time::timeout(
            Duration::from_secs(15),
            acquire(&dead_key, Duration::from_secs(10)),
        )
        .await
        .expect("the acquisition hung");
        let took = started.elapsed();
        let err = result.map(drop).expect_err("acquired on a dead master");
        let text = chain(&err);
        assert!(matches!(err, LockError::Backend { .. }), "{text}");
        assert!(
            took < Duration::from_secs(5),
            "the key on the dead master failed only after {took:?}: {text}"
        );
        assert!(text.contains(&dead_key), "{text}");
        assert!(
            text.contains(&address),
            "the error does not name the node: {text}"
        );
        // Down: a new call for its keys fails at once.
        let call = Instant::now();
        let err = acquire(&dead_key, Duration::from_secs(10))
            .await
            .map(drop)
            .unwrap_err();
        let at_once = call.elapsed();
        assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
        assert!(at_once < Duration::from_millis(500), "took {at_once:?}");
        // The other masters still take locks.
        let live = Instant::now();
        let guard = acquire(&live_key, Duration::from_secs(10))
            .await
            .expect("a key on a live master was refused");
        guard.release().await.unwrap();
        let live_took = live.elapsed();
        let down = || {
            logged("WARN", "unreachable")
                .into_iter()
                .filter(|line| line.contains(&address))
                .count()
        };
        assert_eq!(down(), 1, "expected one WARN: {:#?}", logged("WARN", ""));

        cluster.nodes[1].restart();
        let restarted = Instant::now();
        let back = || {
            logged("INFO", "answers again")
                .into_iter()
                .filter(|line| line.contains(&address))
                .count()
        };
        let noticed = lock_tests::until(Duration::from_secs(10), Duration::from_millis(10), || {
            back() >= 1
        })
        .await
        .expect("the client never said the master answers again");
        let mut again = None;
        for _ in 0..50 {
            match acquire(&dead_key, Duration::from_secs(2)).await {
                Ok(guard) => {
                    guard.release().await.unwrap();
                    again = Some(restarted.elapsed());
                    break;
                }
                Err(_) if restarted.elapsed() < Duration::from_secs(15) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(err) => panic!("no acquire on the restarted master: {}", chain(&err)),
            }
        }
        let again = again.expect("no acquire on the restarted master");
        assert_eq!(back(), 1, "expected one INFO: {:#?}", logged("INFO", ""));
        assert_eq!(down(), 1, "expected one WARN: {:#?}", logged("WARN", ""));
        println!(
            "FIGURE outage cluster: 1 of 3 masters killed: its key (wait 10s) failed with \
             Backend after {:.0} ms, a second call in {:.1} ms; a key on a live master \
             acquired and released in {:.1} ms; the restarted master noticed {:.0} ms after \
             its restart, its key taken again {:.0} ms after it",
            took.as_secs_f64() * 1000.0,
            at_once.as_secs_f64() * 1000.0,
            live_took.as_secs_f64() * 1000.0,
            noticed.as_secs_f64() * 1000.0,
            again.as_secs_f64() * 1000.0,
        );
    });
}

/// Cluster mode: a master that fails over to its replica is not held against its keys:
/// once the replica is promoted, the slot's new master is the one checked, and the keys
/// are taken there (the dead master may be declared down meanwhile, not for good).
#[test]
fn a_cluster_master_that_failed_over_does_not_hold_its_keys_down() {
    lock_tests::one_at_a_time(async {
        lock_tests::events::capture(tracing::Level::INFO);
        let mut cluster = lock_tests::cluster::RedisCluster::start_with(
            3,
            &["--cluster-require-full-coverage", "no"],
        );
        let replica = cluster.add_replica(1);
        let client = LockClient::new(Config::cluster(cluster.urls())).unwrap();
        let key = cluster.key_on("cluster-failover-", 1);
        let acquire = |key: &str, wait: Duration| {
            let lock = client.lock(key).wait(wait).ttl(Duration::from_secs(5));
            async move { lock.acquire().await }
        };
        for node in 0..3 {
            let warm = cluster.key_on("cluster-failover-warm-", node);
            acquire(&warm, Duration::from_secs(5))
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
        }

        cluster.nodes[1].kill9();
        let killed = Instant::now();
        let mut failures = Vec::new();
        let mut taken = None;
        for _ in 0..200 {
            match acquire(&key, Duration::from_secs(2)).await {
                Ok(guard) => {
                    guard.release().await.unwrap();
                    taken = Some(killed.elapsed());
                    break;
                }
                Err(err) if killed.elapsed() < Duration::from_secs(20) => {
                    failures.push(chain(&err));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(err) => panic!(
                    "the key was never taken on the promoted replica: {}; earlier: {failures:#?}",
                    chain(&err)
                ),
            }
        }
        let taken = taken.expect("the key was never taken on the promoted replica");
        assert_eq!(
            cluster.owner(cluster.slot(&key)),
            replica,
            "the replica serves the key's slot"
        );
        // From then on the key is taken every time: the old master is checked no longer.
        for _ in 0..5 {
            acquire(&key, Duration::from_secs(1))
                .await
                .expect("the key was refused after the failover")
                .release()
                .await
                .unwrap();
        }
        println!(
            "FIGURE outage cluster failover: master killed, its key taken on the promoted \
             replica {:.0} ms after the kill ({} failed tries before: {:?})",
            taken.as_secs_f64() * 1000.0,
            failures.len(),
            failures.last()
        );
    });
}

/// Cluster mode: tasks waiting for a key of a master that dies are not held for their
/// wait either, while a waiter on another master's key still gets its lock.
#[test]
fn cluster_waiters_on_a_dead_master_fail_fast_and_the_others_still_get_theirs() {
    lock_tests::one_at_a_time(async {
        let mut cluster = lock_tests::cluster::RedisCluster::start_with(
            3,
            &["--cluster-require-full-coverage", "no"],
        );
        let holder = LockClient::new(Config::cluster(cluster.urls())).unwrap();
        let client = LockClient::new(Config::cluster(cluster.urls())).unwrap();
        let dead_key = cluster.key_on("cluster-waited-dead-", 1);
        let live_key = cluster.key_on("cluster-waited-live-", 0);
        let held_dead = holder
            .lock(&dead_key)
            .ttl(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        let held_live = holder
            .lock(&live_key)
            .ttl(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        let wait_for = |key: &str| {
            let lock = client.lock(key).wait(Duration::from_secs(10));
            tokio::spawn(async move {
                let started = Instant::now();
                (lock.acquire().await, started.elapsed())
            })
        };
        let dead_waiters: Vec<_> = (0..3).map(|_| wait_for(&dead_key)).collect();
        let live_waiter = wait_for(&live_key);
        lock_tests::until_waiting(&client, 4).await;

        cluster.nodes[1].kill9();
        let mut slowest = Duration::ZERO;
        for waiter in dead_waiters {
            let (result, took) = tokio::time::timeout(Duration::from_secs(15), waiter)
                .await
                .expect("a waiter hung")
                .unwrap();
            let err = result.map(drop).expect_err("acquired on a dead master");
            assert!(matches!(err, LockError::Backend { .. }), "{}", chain(&err));
            slowest = slowest.max(took);
        }
        assert!(slowest < Duration::from_secs(6), "slowest {slowest:?}");
        // The live master's key is handed over as usual.
        held_live.release().await.unwrap();
        let (result, _) = tokio::time::timeout(Duration::from_secs(15), live_waiter)
            .await
            .expect("the live waiter hung")
            .unwrap();
        result
            .expect("the waiter on a live master got nothing")
            .release()
            .await
            .unwrap();
        std::mem::forget(held_dead);
        println!(
            "FIGURE outage cluster waiters: 3 waiters on a killed master's key failed with \
             Backend, the slowest {:.0} ms after they started waiting; a waiter on a live \
             master got its lock",
            slowest.as_secs_f64() * 1000.0
        );
    });
}
