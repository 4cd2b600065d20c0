//! Distributed deadlock detection against real servers: tasks that each hold a lock the
//! next one waits for (two clients in opposite orders, three in a ring, two tasks of one
//! client; on one server, on a cluster with the keys in different slots, and on three
//! Redlock masters) are found after the
//! detection delay; exactly one of them fails with `Deadlock`, naming the cycle, and the
//! others complete. A wait behind a holder that waits for nothing is no deadlock. Under
//! Redlock the walk reads every master and follows what a majority says.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient, LockError};
use lock_tests::RedisServer;
use lock_tests::cluster::RedisCluster;
use tokio::sync::Barrier;

/// The detection delay of these tests' clients.
const DELAY: Duration = Duration::from_millis(50);

/// A wait far longer than any detection: a wait that runs out means none happened.
const LONG_WAIT: Duration = Duration::from_secs(20);

fn client(config: Config) -> LockClient {
    LockClient::new(config.deadlock_detection(DELAY)).unwrap()
}

/// Takes `first`, then (once every task of the ring holds its first key) `second`, inside
/// the first's guarded body: the outcome of the inner acquisition, and how long after the
/// ring closed (every task waiting) the inner acquisition returned.
async fn nested(
    client: LockClient,
    (first, second): (String, String),
    ring: Arc<Barrier>,
) -> (Result<(), LockError>, Duration) {
    let outer = client.lock(&first).wait(LONG_WAIT);
    let mut closed = None;
    let outcome = outer
        .run(async {
            ring.wait().await;
            closed = Some(Instant::now());
            let inner = client.lock(&second).wait(LONG_WAIT);
            inner.run(async { Ok::<_, LockError>(()) }).await
        })
        .await;
    (outcome, closed.map_or(Duration::ZERO, |at| at.elapsed()))
}

/// Runs a ring: task `i` holds `keys[i]` and then takes `keys[i + 1]` (the last the
/// first), each through its own client of `clients` (repeated as given). Returns each
/// task's outcome.
/// Also returns how long after the ring closed its victim's error came.
async fn ring_timed(
    clients: &[LockClient],
    keys: &[String],
) -> (Vec<Result<(), LockError>>, Duration) {
    let barrier = Arc::new(Barrier::new(keys.len()));
    let tasks: Vec<_> = (0..keys.len())
        .map(|i| {
            let pair = (keys[i].clone(), keys[(i + 1) % keys.len()].clone());
            let client = clients[i % clients.len()].clone();
            tokio::spawn(nested(client, pair, barrier.clone()))
        })
        .collect();
    let (mut outcomes, mut detected) = (Vec::new(), Duration::ZERO);
    for task in tasks {
        let (outcome, after) = tokio::time::timeout(LONG_WAIT * 2, task)
            .await
            .unwrap()
            .unwrap();
        if outcome.is_err() {
            detected = after;
        }
        outcomes.push(outcome);
    }
    (outcomes, detected)
}

/// Spawns a task that holds `outer` (through `client`, in a guarded body) and waits there
/// for `inner` up to [`LONG_WAIT`].
fn hold_then_wait(
    client: &LockClient,
    outer: &str,
    inner: &str,
) -> tokio::task::JoinHandle<Result<(), LockError>> {
    let (client, outer, inner) = (client.clone(), outer.to_owned(), inner.to_owned());
    tokio::spawn(async move {
        let outer = client.lock(&outer);
        outer
            .run(async {
                let inner = client.lock(&inner).wait(LONG_WAIT);
                inner.run(async { Ok::<_, LockError>(()) }).await
            })
            .await
    })
}

/// Whether the holder of `key` is recorded as waiting (within 2.5 s), as `client` inspects it.
async fn until_recorded(client: &LockClient, key: &str) -> bool {
    for _ in 0..500 {
        let state = client.inspect(key).await.unwrap();
        if state.holder().is_some_and(|h| h.waits_for.is_some()) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

/// Prints the slowest detection of `label`'s trials (a figure for BENCHMARKS.md, not an
/// assertion: the test runs on busy machines).
fn report(label: &str, slowest: Duration) {
    println!(
        "deadlock detection, {label}: slowest {slowest:?} after the cycle closed (delay {DELAY:?})"
    );
}

/// Exactly one task gave way with `Deadlock` naming every key of the ring; the others
/// completed.
fn exactly_one_gave_way(outcomes: &[Result<(), LockError>], keys: &[String], trial: usize) {
    let deadlocks: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    assert_eq!(deadlocks.len(), 1, "trial {trial}: {outcomes:?}");
    let LockError::Deadlock { cycle, .. } = deadlocks[0] else {
        panic!("trial {trial}: not a deadlock: {:?}", deadlocks[0]);
    };
    for key in keys {
        assert!(
            cycle.contains(&format!("`{key}` held by")),
            "trial {trial}: {cycle}"
        );
    }
    assert!(
        deadlocks[0].to_string().contains("deadlock"),
        "{}",
        deadlocks[0]
    );
}

/// 100 trials of rings through `clients` (task `i` through `clients[i % len]`), each on the
/// keys `keys` makes for the trial: exactly one task gives way in every trial.
async fn hundred_rings(label: &str, clients: &[LockClient], keys: impl Fn(usize) -> Vec<String>) {
    let mut slowest = Duration::ZERO;
    for trial in 0..100 {
        let keys = keys(trial);
        let (outcomes, detected) = ring_timed(clients, &keys).await;
        exactly_one_gave_way(&outcomes, &keys, trial);
        slowest = slowest.max(detected);
    }
    report(&format!("{label}, 100 trials"), slowest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_clients_in_opposite_orders_one_gives_way_in_every_trial() {
    let server = RedisServer::start();
    let clients = [
        client(Config::single(server.url())),
        client(Config::single(server.url())),
    ];
    hundred_rings("two clients", &clients, |trial| {
        vec![format!("stock:{trial}"), format!("user:{trial}")]
    })
    .await;
    // Nothing is left behind: no lock, no record of a wait.
    assert!(
        server.until_empty(Duration::from_secs(5)).await,
        "keys left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ring_of_three_clients_and_two_tasks_of_one_client() {
    let server = RedisServer::start();
    let three: Vec<_> = (0..3)
        .map(|_| client(Config::single(server.url())))
        .collect();
    hundred_rings("three clients", &three, |trial| {
        (0..3).map(|i| format!("ring3:{trial}:{i}")).collect()
    })
    .await;
    hundred_rings("two tasks of one client", &three[..1], |trial| {
        vec![format!("local:{trial}:a"), format!("local:{trial}:b")]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wait_behind_a_holder_that_waits_for_nothing_is_no_deadlock() {
    let server = RedisServer::start();
    let (x, y) = (
        client(Config::single(server.url())),
        client(Config::single(server.url())),
    );
    // Y holds `b` and waits for nothing; X holds `a` and waits for `b` past many delays.
    let held = y.lock("plain:b").acquire().await.unwrap();
    let waiter = hold_then_wait(&x, "plain:a", "plain:b");
    server.until_queued("plain:b", 1).await;
    tokio::time::sleep(DELAY * 10).await;
    held.release().await.unwrap();
    let outcome = tokio::time::timeout(LONG_WAIT, waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(outcome.is_ok(), "{outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_holding_waiter_pays_one_walk_per_delay_and_one_that_holds_nothing_pays_nothing() {
    let server = RedisServer::start();
    let (x, y) = (
        client(Config::single(server.url())),
        client(Config::single(server.url())),
    );
    let held = y.lock("cost:b").acquire().await.unwrap();
    // A wait of a task that holds nothing: no record, no walk, however long it waits.
    let plain = {
        let lock = x.lock("cost:b").wait(LONG_WAIT);
        tokio::spawn(async move { lock.acquire().await.map(drop) })
    };
    server.until_queued("cost:b", 1).await;
    server.reset_stats();
    tokio::time::sleep(DELAY * 20).await;
    assert_eq!(server.calls("hgetall"), 0, "{}", server.command_calls());
    let records: Vec<String> = redis::cmd("KEYS")
        .arg("~lock/wait*")
        .query(&mut server.conn())
        .unwrap();
    assert!(records.is_empty(), "{records:?}");
    // A wait of a task that holds `cost:a`: one walk per delay (one step here: `cost:b`'s
    // holder waits for nothing), and its two records written once (redis-rs sends them as
    // HMSET, which no script of ours runs): the second may land after the first was seen.
    let holding = hold_then_wait(&x, "cost:a", "cost:b");
    assert!(
        until_recorded(&y, "cost:a").await,
        "the wait was never recorded"
    );
    server.reset_stats();
    let started = Instant::now();
    tokio::time::sleep(DELAY * 40).await;
    let (walked, recorded) = (server.calls("hgetall"), server.calls("hmset"));
    let delays = started.elapsed().as_secs_f64() / DELAY.as_secs_f64();
    println!(
        "deadlock detection cost: {walked} walk steps and {recorded} record writes over {delays:.1} delays ({})",
        server.command_calls()
    );
    // A look sleeps a delay after it: no more looks than delays, plus the one under way.
    assert!(
        walked as f64 <= delays + 2.0,
        "{walked} walks in {delays:.1} delays"
    );
    assert!(walked > 0, "{}", server.command_calls());
    assert!(
        recorded <= 1,
        "{recorded} record writes in {delays:.1} delays: written again"
    );
    held.release().await.unwrap();
    plain.await.unwrap().unwrap();
    holding.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wait_through_another_client_than_the_holds_is_not_watched() {
    let server = RedisServer::start();
    let clients: Vec<_> = (0..3)
        .map(|_| client(Config::single(server.url())))
        .collect();
    let (xa, xb, y) = (&clients[0], &clients[1], &clients[2]);
    let ring = Arc::new(Barrier::new(2));
    let nest = |outer: &LockClient, inner: &LockClient, keys: (&str, &str), wait| {
        let (outer, inner, ring) = (outer.clone(), inner.clone(), ring.clone());
        let (first, second) = (keys.0.to_owned(), keys.1.to_owned());
        tokio::spawn(async move {
            let lock = outer.lock(&first);
            lock.run(async {
                ring.wait().await;
                let then = inner.lock(&second).wait(wait);
                then.run(async { Ok::<_, LockError>(()) }).await
            })
            .await
        })
    };
    // X holds `two:a` through one client and waits for `two:b` through another; Y holds
    // `two:b` and waits for `two:a` through one. X's wait is not watched (its client holds
    // nothing) and Y's walk finds no record of it: no deadlock is found. X's shorter wait
    // runs out, and Y gets `two:a` then.
    let x = nest(xa, xb, ("two:a", "two:b"), DELAY * 8);
    let y = nest(y, y, ("two:b", "two:a"), LONG_WAIT);
    let (x, y) = (x.await.unwrap(), y.await.unwrap());
    assert!(matches!(x, Err(LockError::Timeout { .. })), "{x:?}");
    assert!(y.is_ok(), "{y:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_the_server_lost_are_written_again_at_the_next_look() {
    let server = RedisServer::start();
    let (x, y) = (
        client(Config::single(server.url())),
        client(Config::single(server.url())),
    );
    let held = y.lock("lost:b").acquire().await.unwrap();
    let waiting = hold_then_wait(&x, "lost:a", "lost:b");
    assert!(
        until_recorded(&y, "lost:a").await,
        "the wait was never recorded"
    );
    // What a restart without persistence does to them (the locks aside). The hash beside
    // the waited key (the mark) is written after the record beside the held key, so the
    // first may show before the second does.
    let records = || -> Vec<String> {
        redis::cmd("KEYS")
            .arg("~lock/wait*")
            .query(&mut server.conn())
            .unwrap()
    };
    let both = lock_tests::until(Duration::from_secs(5), Duration::from_millis(5), || {
        records().len() == 2
    })
    .await;
    let records = records();
    assert!(both.is_some(), "{records:?}");
    let _: () = redis::cmd("DEL")
        .arg(&records)
        .query(&mut server.conn())
        .unwrap();
    let state = y.inspect("lost:a").await.unwrap();
    assert!(
        state.holder().is_some_and(|h| h.waits_for.is_none()),
        "{state}"
    );
    assert!(
        until_recorded(&y, "lost:a").await,
        "the lost records were not written again"
    );
    held.release().await.unwrap();
    waiting.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cycles_across_cluster_slots_are_found() {
    let cluster = RedisCluster::start(3);
    let clients: Vec<_> = (0..3)
        .map(|_| client(Config::cluster(cluster.urls())))
        .collect();
    let on_masters = |trial: usize, n: usize| -> Vec<String> {
        let keys: Vec<String> = (0..n)
            .map(|i| cluster.key_on(&format!("c{trial}:{i}:"), i))
            .collect();
        assert_ne!(cluster.slot(&keys[0]), cluster.slot(&keys[1]));
        keys
    };
    hundred_rings(
        "cluster, two clients, keys on two masters",
        &clients[..2],
        |t| on_masters(t, 2),
    )
    .await;
    hundred_rings("cluster, a ring of three on three masters", &clients, |t| {
        on_masters(t + 100, 3)
    })
    .await;
    hundred_rings("cluster, two tasks of one client", &clients[..1], |t| {
        on_masters(t + 200, 2)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cycle_across_redlock_masters_is_found_by_their_majority() {
    let mut servers: Vec<_> = (0..3).map(|_| RedisServer::start()).collect();
    let config = || Config::redlock(servers.iter().map(RedisServer::url));
    let clients = [client(config()), client(config()), client(config())];
    let keys = |label: &'static str, n: usize| {
        move |trial: usize| (0..n).map(|i| format!("rl:{label}:{trial}:{i}")).collect()
    };
    hundred_rings("Redlock, two clients", &clients[..2], keys("two", 2)).await;
    hundred_rings("Redlock, a ring of three", &clients, keys("three", 3)).await;
    hundred_rings(
        "Redlock, two tasks of one client",
        &clients[..1],
        keys("one", 2),
    )
    .await;
    // With one master gone, the other two still make a majority that sees the cycle.
    drop(servers.remove(0));
    let keys = ["rl:down:a".to_owned(), "rl:down:b".to_owned()];
    let (outcomes, _) = ring_timed(&clients, &keys).await;
    exactly_one_gave_way(&outcomes, &keys, 100);
}
