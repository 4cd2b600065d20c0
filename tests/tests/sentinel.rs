//! Redis Sentinel: a real primary, replica and three sentinels on loopback
//! (`lock_tests::sentinel`). Locks work before a failover forced with `SENTINEL FAILOVER`
//! and after it, on the new primary, without a new client; the figures for RELIABILITY.md
//! are printed on lines that start with `FIGURE sentinel`.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient, LockError, ReleaseOutcome};
use lock_tests::sentinel::{MASTER, SentinelDeployment, info};
use lock_tests::tls::Certificates;

use lock_tests::chain;

fn client(deployment: &SentinelDeployment) -> LockClient {
    LockClient::new(
        Config::sentinel(MASTER, deployment.sentinel_urls())
            .connect_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_secs(1)),
    )
    .unwrap()
}

/// `master_repl_offset` minus the replica's acknowledged offset, from the primary's view.
fn replication_lag(deployment: &SentinelDeployment) -> Option<i64> {
    let primary = info(
        &deployment.servers[deployment.primary_index()],
        "replication",
    );
    let field = |name: &str| {
        primary
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
            .map(str::to_owned)
    };
    let master: i64 = field("master_repl_offset:")?.parse().ok()?;
    let replica = field("slave0:")?;
    let acknowledged: i64 = replica
        .split(',')
        .find_map(|pair| pair.strip_prefix("offset="))?
        .parse()
        .ok()?;
    Some(master - acknowledged)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_work_before_and_after_a_forced_failover() {
    let deployment = SentinelDeployment::start();
    let client = client(&deployment);
    assert_eq!(deployment.primary_index(), 0);

    // Before: the lock is on the first primary.
    let guard = client.lock("sentinel:before").acquire().await.unwrap();
    assert_eq!(
        deployment.servers[0].get("sentinel:before").as_deref(),
        Some(guard.token())
    );
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);

    // A lease held across the failover, renewed every second by the watchdog.
    let held = client
        .lock("sentinel:held")
        .ttl(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap();
    let lag = replication_lag(&deployment);
    let took = tokio::task::block_in_place(|| deployment.failover());
    let named_at = Instant::now();
    assert_eq!(deployment.primary_index(), 1);
    println!("FIGURE sentinel failover: SENTINEL FAILOVER to a new primary in {took:?}");
    println!(
        "FIGURE sentinel lag: primary's offset minus the replica's last acknowledged one \
         when the failover was forced: {lag:?} bytes"
    );
    // The old primary is not demoted yet: it still takes writes from clients that do
    // not follow the sentinels (the sentinels demote it seconds later).
    let old_takes_writes = redis::cmd("SET")
        .arg("sentinel:probe")
        .arg("1")
        .query::<String>(&mut deployment.servers[0].conn())
        .is_ok();
    println!(
        "FIGURE sentinel old: the old primary still accepts writes after the switch: {old_takes_writes}"
    );

    // After: the same client follows the sentinels' events to the new primary. Until it
    // has, its locks still land on the old primary (the unsafe window): measured here by
    // taking a lock every 10 ms until one lands on the new primary.
    let started = Instant::now();
    let mut on_old = 0;
    let mut guard = None;
    for attempt in 0..500 {
        let acquired = client
            .lock(format!("sentinel:after:{attempt}"))
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap();
        if deployment.servers[1].get(acquired.key()).as_deref() == Some(acquired.token()) {
            guard = Some(acquired);
            break;
        }
        on_old += 1;
        acquired.release().await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the client did not follow"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let guard = guard.expect("a lock on the new primary");
    println!(
        "FIGURE sentinel after: locks land on the new primary {:?} after the sentinel named \
         it; {on_old} locks landed on the old primary meanwhile",
        started.elapsed()
    );
    let key = guard.key().to_owned();
    assert_eq!(deployment.servers[0].get(&key), None, "not on the old one");
    assert!(client.is_locked(&key).await.unwrap());
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(deployment.servers[1].get(&key), None);

    // The lease taken before the failover: replication had copied it, so the new primary
    // has it, another client finds it busy there, and the watchdog renews it there (two
    // renewal periods at ttl/3 = 1 s; the copy alone would expire 3 s after the take).
    let on_new = deployment.servers[1].get("sentinel:held");
    println!(
        "FIGURE sentinel held: the lease taken before the failover is on the new primary: {}",
        on_new.as_deref() == Some(held.token())
    );
    assert_eq!(on_new.as_deref(), Some(held.token()));
    let other = LockClient::new(Config::sentinel(MASTER, deployment.sentinel_urls())).unwrap();
    let busy = other
        .lock("sentinel:held")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(busy, LockError::Busy { .. }), "{busy:?}");
    let lost = tokio::time::timeout(Duration::from_millis(3500), held.lost()).await;
    assert!(
        lost.is_err(),
        "the lease stays held across the failover: {lost:?}"
    );
    let pttl = deployment.servers[1].pttl("sentinel:held");
    println!("FIGURE sentinel renewed: 3.5 s later the new primary's pttl is {pttl} ms (ttl 3000)");
    assert!(pttl > 1000, "renewed on the new primary: pttl {pttl}");
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);

    // The window in which the old primary takes writes: until the sentinels demote it.
    // What it took meanwhile (the probe; a lock of a client that does not follow the
    // sentinels) is discarded when it resynchronises from the new primary.
    tokio::task::block_in_place(|| deployment.demoted(0));
    let window = named_at.elapsed();
    let probe_kept = deployment.servers[0].get("sentinel:probe").is_some();
    println!(
        "FIGURE sentinel window: the old primary took writes for {:?} after the new one was \
         named; the write it took then survived: {probe_kept}",
        window
    );
    assert!(!probe_kept, "a write to the demoted primary is discarded");
}

/// Takes one lock every 10 ms (bounded: 5 s) until one lands on server `index`: the
/// client has followed the sentinels there.
async fn until_on(client: &LockClient, deployment: &SentinelDeployment, index: usize) {
    let started = Instant::now();
    for attempt in 0..500 {
        let guard = client
            .lock(format!("sentinel:probe:{attempt}"))
            .acquire()
            .await
            .unwrap();
        let landed = deployment.servers[index].get(guard.key()).as_deref() == Some(guard.token());
        guard.release().await.unwrap();
        if landed {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the client did not follow"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the client did not follow");
}

/// A waiter behind a holder on the new primary is woken by the holder's release: the
/// release subscriptions follow the failover with the commands (before, they stayed on the
/// old primary, which never hears the new one's releases: the waiter slept out its park).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_a_release_after_a_failover() {
    let deployment = SentinelDeployment::start();
    let waiting = client(&deployment);
    let holding = client(&deployment);
    // A wait before the failover opens the subscription connection on the first primary.
    let held = holding
        .lock("sentinel:woken:before")
        .acquire()
        .await
        .unwrap();
    let waiter = {
        let waiting = waiting.clone();
        tokio::spawn(async move { waiting.lock("sentinel:woken:before").acquire().await })
    };
    deployment.servers[0]
        .until_queued("sentinel:woken:before", 1)
        .await;
    held.release().await.unwrap();
    waiter.await.unwrap().unwrap().release().await.unwrap();

    tokio::task::block_in_place(|| deployment.failover());
    assert_eq!(deployment.primary_index(), 1);
    until_on(&waiting, &deployment, 1).await;
    until_on(&holding, &deployment, 1).await;

    let key = "sentinel:woken:after";
    let held = holding
        .lock(key)
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let waiter = {
        let waiting = waiting.clone();
        tokio::spawn(async move {
            let guard = waiting
                .lock(key)
                .wait(Duration::from_secs(10))
                .acquire()
                .await;
            (Instant::now(), guard)
        })
    };
    deployment.servers[1].until_queued(key, 1).await;
    // Half-way through the waiter's park (capped at 1 s): a waiter that is not woken
    // takes the lock only when its park ends, about 500 ms after the release.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let released = Instant::now();
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let (acquired, guard) = waiter.await.unwrap();
    let guard = guard.unwrap();
    let after = acquired.duration_since(released);
    println!(
        "FIGURE sentinel wake: a waiter took the lock {after:?} after the release on the new primary"
    );
    assert!(
        after < Duration::from_millis(250),
        "the waiter was not woken by the release: it took the lock {after:?} later"
    );
    assert_eq!(
        deployment.servers[1].get(key).as_deref(),
        Some(guard.token())
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_master_name_or_no_sentinel_is_a_clear_error() {
    let deployment = SentinelDeployment::start();
    let err = LockClient::new(Config::sentinel(
        "no-such-master",
        deployment.sentinel_urls(),
    ))
    .unwrap_err();
    println!("unknown master: {err}");
    assert!(matches!(err, LockError::Config { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("no-such-master"), "{message}");
    assert!(
        message.contains(&deployment.sentinel_urls()[0]),
        "{message}"
    );

    let err =
        LockClient::new(Config::single("redis+sentinel://127.0.0.1:26379/mymaster")).unwrap_err();
    let message = chain(&err);
    println!("sentinel URL: {message}");
    assert!(matches!(err, LockError::InvalidUrl { .. }), "{err:?}");
    assert!(message.contains("Config::sentinel"), "{message}");

    let nowhere = format!("redis://127.0.0.1:{}", lock_tests::free_port());
    let started = Instant::now();
    let err = LockClient::new(
        Config::sentinel(MASTER, [nowhere.clone()]).connect_timeout(Duration::from_millis(300)),
    )
    .unwrap_err();
    println!("no sentinel: {err} ({:?})", started.elapsed());
    assert!(
        err.to_string()
            .contains(nowhere.trim_start_matches("redis://")),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

const SENTINEL_PASSWORD: &str = "sentinel-secret";
const NODE_PASSWORD: &str = "node-secret";

/// Sentinels and data nodes protected by different passwords (as managed set-ups do): the
/// sentinel URLs carry the sentinels' password, `primary_password` the data nodes'. Locks
/// are taken, handed over to a waiter woken by the release (the wake-up subscription
/// authenticates to the primary too), and released; a wrong node password is a
/// configuration error naming the master. Before `primary_password`, the primary got the
/// sentinels' password and every acquire failed with `AuthenticationFailed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_and_data_nodes_with_different_passwords() {
    let deployment = SentinelDeployment::start_with_passwords(SENTINEL_PASSWORD, NODE_PASSWORD);
    assert!(deployment.sentinel_urls()[0].contains(SENTINEL_PASSWORD));
    let config = |node_password: &str| {
        Config::sentinel(MASTER, deployment.sentinel_urls())
            .primary_password(node_password)
            .connect_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_secs(1))
    };

    // A wrong data-node password: refused when the client is built, naming the master.
    let err = LockClient::new(config("wrong")).unwrap_err();
    let message = chain(&err);
    println!("a wrong node password: {message}");
    assert!(matches!(err, LockError::Config { .. }), "{err:?}");
    assert!(message.contains(MASTER), "{message}");
    assert!(message.contains("Config::primary_password"), "{message}");
    // The sentinels' own password is refused by the data nodes, in the same words.
    let err = LockClient::new(config(SENTINEL_PASSWORD)).unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err:?}");
    // Outside Sentinel mode the primary's settings are a mistake, not silently ignored.
    let err = LockClient::new(Config::single(deployment.servers[0].url()).primary_password("x"))
        .unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err:?}");
    assert!(err.to_string().contains("Config::sentinel"), "{err}");

    let holding = LockClient::new(config(NODE_PASSWORD)).unwrap();
    let waiting = LockClient::new(config(NODE_PASSWORD)).unwrap();

    hand_over(&holding, &waiting, &deployment, "sentinel:auth").await;

    // A password changed on the data nodes later: the requests fail with an error that
    // names the master and the fix (here the connections are closed to make them log in
    // again).
    let mut admin = deployment.servers[0].conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("rotated")
        .query(&mut admin)
        .unwrap();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut admin)
        .unwrap();
    let err = holding
        .lock("sentinel:auth:rotated")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    let message = chain(&err);
    println!("a node password changed later: {message}");
    assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
    assert!(message.contains(MASTER), "{message}");
    assert!(message.contains("Config::primary_password"), "{message}");
}

/// `holding` takes `key`, a waiter of `waiting` queues behind it, and the release hands it
/// over: the waiter must be woken by the release's message (the wake-up subscription on the
/// primary works), not by the end of its park. Both release; the key is gone.
async fn hand_over(
    holding: &LockClient,
    waiting: &LockClient,
    deployment: &SentinelDeployment,
    key: &'static str,
) {
    let held = holding
        .lock(key)
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    assert_eq!(
        deployment.servers[0].get(key).as_deref(),
        Some(held.token())
    );
    let waiter = {
        let waiting = waiting.clone();
        tokio::spawn(async move {
            let guard = waiting
                .lock(key)
                .wait(Duration::from_secs(10))
                .acquire()
                .await;
            (Instant::now(), guard)
        })
    };
    deployment.servers[0].until_queued(key, 1).await;
    // Half-way through the waiter's park (capped at 1 s): a waiter that is not woken
    // takes the lock only when its park ends, about 500 ms after the release.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let released = Instant::now();
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let (acquired, guard) = waiter.await.unwrap();
    let guard = guard.unwrap();
    let after = acquired.duration_since(released);
    println!("{key}: the waiter took the lock {after:?} after the release");
    assert!(
        after < Duration::from_millis(250),
        "the waiter was not woken by the release: it took the lock {after:?} later"
    );
    assert_eq!(
        deployment.servers[0].get(key).as_deref(),
        Some(guard.token())
    );
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(deployment.servers[0].get(key), None);
}

/// TLS on the data nodes only: plain sentinels, nodes reached with TLS and the nodes'
/// authority (`primary_tls_ca_cert`). Locks are taken, handed over (the wake-up
/// subscription uses TLS too) and released. Without the primary's TLS settings the
/// client speaks plain TCP to the TLS port and fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_nodes_behind_tls_with_plain_sentinels() {
    let certificates = Certificates::generate();
    let deployment = SentinelDeployment::start_with_tls_nodes(&certificates);
    assert_eq!(deployment.primary_port(), deployment.tls_ports[0]);
    // A TLS handshake (RSA 2048, a debug build) on a loaded machine can outlast 500 ms.
    let config = || {
        Config::sentinel(MASTER, deployment.sentinel_urls())
            .connect_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2))
    };

    let plain = LockClient::new(config()).unwrap();
    let err = plain
        .lock("sentinel:tls:plain")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    println!("plain TCP to the TLS primary: {}", chain(&err));
    assert!(matches!(err, LockError::Backend { .. }), "{err:?}");

    let tls = || config().primary_tls_ca_cert(certificates.read("ca.crt"));
    let holding = LockClient::new(tls()).unwrap();
    let waiting = LockClient::new(tls()).unwrap();
    hand_over(&holding, &waiting, &deployment, "sentinel:tls").await;
}
