//! Release-channel subscriptions as the server sees them: after restarts, reconnects and
//! waiters dropped at any moment (mid-`SUBSCRIBE` included), the server's channels are
//! exactly the keys that still have local waiters, one subscription each; and a release
//! still wakes its waiter at once after a restart.
//!
//! ```text
//! cargo test -p lock-tests --test subscriptions -- --nocapture
//! ```
//!
//! `SUBSCRIPTIONS_SEED=<n>` replays the random-abort test with a given seed.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, LockGuard};
use lock_tests::proxy::{Direction, FaultProxy};
use lock_tests::{RedisServer, script_stat_on};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Runs one test on a fresh two-worker runtime, one test at a time in this binary: they
/// restart servers and poll them, and two at once on two cores would slow each other.
fn serial<F: std::future::Future>(future: F) -> F::Output {
    lock_tests::one_at_a_time(future)
}

/// A server that keeps its data over a restart (AOF, fsync always): the held keys and the
/// waiters' queue places survive, so the waiters keep waiting through it.
fn persistent_server() -> RedisServer {
    RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
}

fn client_for(url: &str) -> LockClient {
    LockClient::new(
        Config::single(url)
            .connect_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_secs(2)),
    )
    .unwrap()
}

/// The key a release channel belongs to: the hash tag in its name (`{key}`), whatever the
/// rest of the name.
fn key_of(channel: &str) -> &str {
    channel
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map_or(channel, |(key, _)| key)
}

/// `PUBSUB CHANNELS *`, but a client's notice channel (it lives as long as the client).
fn server_channels(admin: &mut redis::Connection) -> BTreeSet<String> {
    lock_tests::lock_channels(admin).into_iter().collect()
}

/// `PUBSUB NUMSUB` of `channels`.
fn numsub(admin: &mut redis::Connection, channels: &BTreeSet<String>) -> BTreeMap<String, i64> {
    if channels.is_empty() {
        return BTreeMap::new();
    }
    let reply: HashMap<String, i64> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channels.iter().collect::<Vec<_>>())
        .query(admin)
        .unwrap();
    reply.into_iter().collect()
}

/// Whether the server's channels are exactly the release channels of `keys`, each with
/// one subscriber.
fn server_has_exactly(admin: &mut redis::Connection, keys: &BTreeSet<String>) -> bool {
    let channels = server_channels(admin);
    let on_server: BTreeSet<String> = channels.iter().map(|c| key_of(c).to_owned()).collect();
    channels.len() == keys.len()
        && on_server == *keys
        && numsub(admin, &channels).values().all(|&n| n == 1)
}

/// Polls `condition` (server state, which has no event to wait on) every 5 ms, for at most
/// `bound`; how long it took, or `None`.
async fn until(bound: Duration, condition: impl FnMut() -> bool) -> Option<Duration> {
    lock_tests::until(bound, Duration::from_millis(5), condition).await
}

/// A task that waits for `key` until it gets it, trying again when Redis was unreachable
/// (a restart wakes every waiter, and a try while the server is down fails).
fn waiter(client: &LockClient, key: String) -> JoinHandle<LockGuard> {
    let client = client.clone();
    tokio::spawn(async move {
        for _ in 0..1000 {
            match client
                .lock(key.as_str())
                .ttl(Duration::from_secs(30))
                .wait(Duration::from_secs(120))
                .acquire()
                .await
            {
                Ok(guard) => return guard,
                Err(LockError::Backend { .. }) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(err) => panic!("waiter on {key}: {err:?}"),
            }
        }
        panic!("waiter on {key}: Redis unreachable for 1000 tries");
    })
}

/// Holds every key of `keys` through `holder` (long lease, no renewals: the holder sends
/// nothing while the test counts script calls). Right after a restart the holder's
/// connection may still be down: it tries again, for a few seconds at most.
async fn hold(holder: &LockClient, keys: &[String]) -> Vec<LockGuard> {
    let mut guards = Vec::new();
    for key in keys {
        let lock = holder
            .lock(key.as_str())
            .ttl(Duration::from_secs(300))
            .watchdog(false);
        let mut tries = 0;
        let guard = loop {
            match lock.acquire().await {
                Ok(guard) => break guard,
                Err(LockError::Backend { .. }) if tries < 100 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(err) => panic!("holder on {key}: {err:?}"),
            }
        };
        guards.push(guard);
    }
    guards
}

async fn abort_all(tasks: Vec<JoinHandle<LockGuard>>) {
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        let err = task.await.expect_err("a waiter got its lock");
        assert!(err.is_cancelled(), "a waiter failed: {err:?}");
    }
}

fn describe(admin: &mut redis::Connection, keys: &BTreeSet<String>) -> String {
    let channels = server_channels(admin);
    let on_server: BTreeSet<String> = channels.iter().map(|c| key_of(c).to_owned()).collect();
    let extra: Vec<_> = on_server.difference(keys).take(5).collect();
    let missing: Vec<_> = keys.difference(&on_server).take(5).collect();
    let counts: Vec<_> = numsub(admin, &channels)
        .into_iter()
        .filter(|(_, n)| *n != 1)
        .take(5)
        .collect();
    format!(
        "{} channels on the server for {} keys, {} keys expected; keys extra (first 5) \
         {extra:?}; missing (first 5) {missing:?}; NUMSUB not 1 (first 5) {counts:?}",
        channels.len(),
        on_server.len(),
        keys.len()
    )
}

const KEYS: usize = 200;

/// Local waiters on one key beside its first one: still one subscription.
const EXTRA_ON_FIRST_KEY: usize = 3;

#[test]
fn after_a_restart_the_server_has_exactly_the_waiting_channels_and_none_once_they_leave() {
    channels_follow_the_waiters_through_a_restart(persistent_server);
}

/// The same on a server that refuses `HELLO 3`: the subscriptions go over a RESP2 pub/sub
/// connection, which is opened again after the restart.
#[test]
fn without_resp3_the_server_has_exactly_the_waiting_channels_and_none_once_they_leave() {
    channels_follow_the_waiters_through_a_restart(persistent_server_without_hello);
}

/// A persistent server with `HELLO` renamed away, as a server before Redis 6 or a proxy
/// that does not know it: RESP3 is refused.
fn persistent_server_without_hello() -> RedisServer {
    RedisServer::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--rename-command",
        "HELLO",
        "",
    ])
}

fn channels_follow_the_waiters_through_a_restart(start: fn() -> RedisServer) {
    serial(async {
        let mut server = start();
        let mut admin = server.conn();
        let holder = client_for(&server.url());
        let client = client_for(&server.url());
        let keys: Vec<String> = (0..KEYS).map(|i| format!("restart-{i}")).collect();
        let expected: BTreeSet<String> = keys.iter().cloned().collect();
        let held = hold(&holder, &keys).await;
        let mut tasks: Vec<_> = keys
            .iter()
            .map(|key| waiter(&client, key.clone()))
            .collect();
        for _ in 0..EXTRA_ON_FIRST_KEY {
            tasks.push(waiter(&client, keys[0].clone()));
        }
        let waiting = (KEYS + EXTRA_ON_FIRST_KEY, KEYS);
        let subscribed = until(Duration::from_secs(20), || {
            client.waiting() == waiting && server_has_exactly(&mut admin, &expected)
        })
        .await;
        assert!(
            subscribed.is_some(),
            "before the restart: {:?} waiting; {}",
            client.waiting(),
            describe(&mut admin, &expected)
        );

        tokio::task::block_in_place(|| server.restart());
        let mut admin = server.conn();
        let resubscribed = until(Duration::from_secs(20), || {
            server_has_exactly(&mut admin, &expected)
        })
        .await;
        assert!(
            resubscribed.is_some(),
            "after the restart, with every waiter still waiting ({:?}): {}",
            client.waiting(),
            describe(&mut admin, &expected)
        );
        assert!(tasks.iter().all(|task| !task.is_finished()));

        abort_all(tasks).await;
        assert_eq!(client.waiting(), (0, 0), "waiters left registered");
        let none = BTreeSet::new();
        let emptied = until(Duration::from_secs(10), || {
            server_has_exactly(&mut admin, &none)
        })
        .await;
        assert!(
            emptied.is_some(),
            "after every waiter left: {}",
            describe(&mut admin, &none)
        );
        println!(
            "{KEYS} keys: subscribed {:?} after the restart, emptied {:?} after the waiters left",
            resubscribed.unwrap(),
            emptied.unwrap()
        );
        drop(held);
    });
}

#[test]
fn waiters_that_leave_while_redis_is_down_leave_no_channel_after_the_restart() {
    serial(async {
        let mut server = RedisServer::start();
        let mut admin = server.conn();
        let holder = client_for(&server.url());
        let client = client_for(&server.url());
        let keys: Vec<String> = (0..KEYS).map(|i| format!("down-{i}")).collect();
        let expected: BTreeSet<String> = keys.iter().cloned().collect();
        let held = hold(&holder, &keys).await;
        let tasks: Vec<_> = keys
            .iter()
            .map(|key| waiter(&client, key.clone()))
            .collect();
        let subscribed = until(Duration::from_secs(20), || {
            server_has_exactly(&mut admin, &expected)
        })
        .await;
        assert!(subscribed.is_some(), "{}", describe(&mut admin, &expected));

        // The waiters leave while the server is down: they cannot unsubscribe now, and the
        // server they will reconnect to must not get their channels back.
        tokio::task::block_in_place(|| server.kill9());
        abort_all(tasks).await;
        assert_eq!(client.waiting(), (0, 0), "waiters left registered");
        drop(held);
        tokio::task::block_in_place(|| server.restart());
        let mut admin = server.conn();

        // One more contended lock: its waiter brings the subscription connection back.
        let later = vec!["later".to_owned()];
        let held = hold(&holder, &later).await;
        let task = waiter(&client, later[0].clone());
        let only_later: BTreeSet<String> = ["later".to_owned()].into();
        let only_later_there = until(Duration::from_secs(5), || {
            server_has_exactly(&mut admin, &only_later)
        })
        .await;
        let while_waiting = describe(&mut admin, &only_later);
        for guard in held {
            guard.release().await.unwrap();
        }
        let guard = tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the later waiter hung")
            .unwrap();
        guard.release().await.unwrap();
        let none = BTreeSet::new();
        let emptied = until(Duration::from_secs(10), || {
            server_has_exactly(&mut admin, &none)
        })
        .await;
        assert!(
            only_later_there.is_some() && emptied.is_some(),
            "while the later lock waited: {while_waiting}; after it: {}",
            describe(&mut admin, &none)
        );
    });
}

#[test]
fn a_release_after_a_restart_wakes_its_waiter_before_the_safety_park_could() {
    a_release_after_a_restart_wakes_its_waiter(persistent_server);
}

/// The same over RESP2 pub/sub (a server that refuses `HELLO 3`).
#[test]
fn without_resp3_a_release_after_a_restart_wakes_its_waiter() {
    a_release_after_a_restart_wakes_its_waiter(persistent_server_without_hello);
}

fn a_release_after_a_restart_wakes_its_waiter(start: fn() -> RedisServer) {
    serial(async {
        let mut server = start();
        let holder = client_for(&server.url());
        let client = client_for(&server.url());
        let key = "wake".to_owned();
        let only: BTreeSet<String> = [key.clone()].into();
        let mut held = hold(&holder, std::slice::from_ref(&key)).await;
        let task = waiter(&client, key.clone());
        let mut admin = server.conn();
        assert!(
            until(Duration::from_secs(10), || server_has_exactly(
                &mut admin, &only
            ))
            .await
            .is_some()
        );

        tokio::task::block_in_place(|| server.restart());
        let mut admin = server.conn();
        assert!(
            until(Duration::from_secs(20), || server_has_exactly(
                &mut admin, &only
            ))
            .await
            .is_some(),
            "not subscribed again after the restart: {}",
            describe(&mut admin, &only)
        );
        // The waiter's next try after it subscribed again; it then parks, and with the
        // holder's lease far away the park lasts its cap (a queue lease, 1 s). Only the
        // release's message can wake it sooner: the bound is half the cap, so a waiter the
        // park's end woke cannot pass.
        let before = script_stat_on(&mut admin, "calls");
        let tried = until(Duration::from_secs(5), || {
            script_stat_on(&mut admin, "calls") > before
        })
        .await;
        assert!(tried.is_some(), "the waiter never tried again");
        let parked = Instant::now();
        held.pop().unwrap().release().await.unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the waiter hung")
            .unwrap();
        let woken_after = parked.elapsed();
        assert!(
            woken_after < Duration::from_millis(500),
            "the waiter got the lock {woken_after:?} after it parked: the release's message \
             did not wake it"
        );
        println!("after the restart, woken {woken_after:?} after it parked");
        guard.release().await.unwrap();
    });
}

/// Rounds of the random-abort test, keys it spreads its waiters over, waiters per round.
const ROUNDS: usize = 30;
const ABORT_KEYS: usize = 64;
const PER_ROUND: usize = 40;

#[test]
fn waiters_aborted_at_random_moments_leave_exactly_the_waiting_channels() {
    serial(async {
        let seed = std::env::var("SUBSCRIPTIONS_SEED")
            .ok()
            .and_then(|seed| seed.parse().ok())
            .unwrap_or_else(|| fastrand::u64(..));
        println!("seed {seed} (SUBSCRIPTIONS_SEED={seed} replays it)");
        let mut rng = fastrand::Rng::with_seed(seed);
        let server = RedisServer::start();
        let mut admin = server.conn();
        // The waiters talk through a 2 ms proxy each way, so that an abort lands inside a
        // SUBSCRIBE (or an UNSUBSCRIBE) often.
        let proxy = FaultProxy::start(server.port());
        proxy.set_delay(Direction::Up, Duration::from_millis(2));
        proxy.set_delay(Direction::Down, Duration::from_millis(2));
        let holder = client_for(&server.url());
        let client = client_for(&proxy.url());
        let keys: Vec<String> = (0..ABORT_KEYS).map(|i| format!("abort-{i}")).collect();
        let held = hold(&holder, &keys).await;
        // Waiters still alive: (key, task).
        let mut alive: Vec<(String, JoinHandle<LockGuard>)> = Vec::new();
        let mut aborted = 0;
        for round in 0..ROUNDS {
            for _ in 0..PER_ROUND {
                let key = keys[rng.usize(..keys.len())].clone();
                alive.push((key.clone(), waiter(&client, key)));
            }
            // This round's waiters are aborted with probability 2/3, older ones with 1/3,
            // at a moment from "before it ran at all" through its first try and its
            // SUBSCRIBE (a few round trips of 4 ms) to "long parked".
            let mut schedule = Vec::new();
            let new_from = alive.len() - PER_ROUND;
            for index in 0..alive.len() {
                let odds = if index >= new_from { 2 } else { 1 };
                if rng.u8(..3) < odds {
                    let after = match rng.u8(..4) {
                        0 => Duration::ZERO,
                        1 | 2 => Duration::from_micros(rng.u64(..16_000)),
                        _ => Duration::from_millis(rng.u64(..80)),
                    };
                    schedule.push((after, index));
                }
            }
            schedule.sort();
            let started = Instant::now();
            for &(after, index) in &schedule {
                tokio::time::sleep_until(started + after).await;
                alive[index].1.abort();
            }
            let mut next = Vec::new();
            for (index, (key, task)) in alive.into_iter().enumerate() {
                if schedule.iter().any(|&(_, i)| i == index) {
                    let err = task.await.expect_err("an aborted waiter got its lock");
                    assert!(err.is_cancelled(), "seed {seed}: a waiter failed: {err:?}");
                    aborted += 1;
                } else {
                    next.push((key, task));
                }
            }
            alive = next;
            let expected: BTreeSet<String> = alive.iter().map(|(key, _)| key.clone()).collect();
            let settled = until(Duration::from_secs(5), || {
                client.waiting() == (alive.len(), expected.len())
                    && server_has_exactly(&mut admin, &expected)
            })
            .await;
            assert!(
                settled.is_some(),
                "seed {seed}, round {round}: {} waiters alive on {} keys, {:?} registered; {}",
                alive.len(),
                expected.len(),
                client.waiting(),
                describe(&mut admin, &expected)
            );
        }
        let tasks = alive.into_iter().map(|(_, task)| task).collect();
        abort_all(tasks).await;
        let none = BTreeSet::new();
        let emptied = until(Duration::from_secs(5), || {
            client.waiting() == (0, 0) && server_has_exactly(&mut admin, &none)
        })
        .await;
        assert!(
            emptied.is_some(),
            "seed {seed}, at the end: {:?} registered; {}",
            client.waiting(),
            describe(&mut admin, &none)
        );
        println!("{ROUNDS} rounds, {aborted} waiters aborted: no channel left behind");
        drop(held);
    });
}
