//! Durable grants (`Config::wait_for_aof`, `WAITAOF`) on a real Valkey 8 server, and the
//! refusal of the option against Redis 7.0, which lacks the command.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, LostCause};
use lock_tests::RedisServer;

/// A Valkey server that writes an append-only file, fsynced as `fsync` says (`everysec`,
/// `always`).
fn valkey_with_aof(fsync: &str) -> RedisServer {
    RedisServer::start_valkey(&["--appendonly", "yes", "--appendfsync", fsync])
}

fn durable_client(server: &RedisServer, replicas: u32) -> LockClient {
    LockClient::new(
        Config::single(server.url())
            .response_timeout(Duration::from_secs(2))
            .wait_for_aof(true, replicas, Duration::from_millis(1500)),
    )
    .unwrap()
}

/// With the primary's own fsync asked for, grants, renewals (whose answer is `WAITAOF`'s
/// pair), extensions and permits count once the write is on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_renewals_and_permits_count_once_on_the_primarys_disk() {
    let server = tokio::task::block_in_place(|| valkey_with_aof("everysec"));
    let client = durable_client(&server, 0);
    // `everysec` fsyncs about once a second, so a renewal's WAITAOF answers within about a
    // second (later on a busy disk): the ttl leaves it room, as an application's must.
    let ttl = Duration::from_secs(2);
    let mut guard = client.lock("durable").ttl(ttl).acquire().await.unwrap();
    // Renewed through two ttls: each renewal's WAITAOF answer was read and counted.
    tokio::time::sleep(ttl * 2).await;
    assert!(!guard.is_lost(), "{:?}", guard.lost_cause());
    guard.extend(Duration::from_secs(5)).await.unwrap();
    assert!(
        server.pttl("durable") > 4000,
        "pttl {}",
        server.pttl("durable")
    );
    guard.release().await.unwrap();
    let permit = client
        .semaphore("durable-quota", 2)
        .acquire()
        .await
        .unwrap();
    permit.release().await.unwrap();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    assert!(
        stats.contains("cmdstat_waitaof:"),
        "no WAITAOF was sent:\n{stats}"
    );
}

/// Asking for a replica's append-only file where there is no replica: the grant (a lock's,
/// a permit's) falls short with `NotDurable`, naming what was reached, within the wait, and
/// is undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_no_replica_has_on_disk_is_refused_and_undone() {
    // Fsynced at once: the primary's own disk answers within the short timeout.
    let server = tokio::task::block_in_place(|| valkey_with_aof("always"));
    let client = LockClient::new(
        Config::single(server.url())
            .response_timeout(Duration::from_secs(1))
            .wait_for_aof(true, 1, Duration::from_millis(50)),
    )
    .unwrap();
    let wait = Duration::from_millis(300);
    let err = client.lock("no-replica").wait(wait).acquire().await;
    match err.map(drop).unwrap_err() {
        LockError::NotDurable {
            key,
            local: true,
            replicas: 0,
            needed_local: true,
            needed_replicas: 1,
            ..
        } if key == "no-replica" => {}
        other => panic!("expected NotDurable (on the primary's disk, 0 of 1 replicas): {other:?}"),
    }
    assert_eq!(server.get("no-replica"), None, "the grant was left");
    let err = client.semaphore("quota", 2).wait(wait).acquire().await;
    let err = err.map(drop).unwrap_err();
    assert!(matches!(err, LockError::NotDurable { .. }), "{err:?}");
    assert!(err.to_string().contains("0 of the 1 replicas"), "{err}");
    let holders: Vec<String> = redis::cmd("ZRANGEBYSCORE")
        .arg("quota")
        .arg(1)
        .arg("+inf")
        .query(&mut server.conn())
        .unwrap();
    assert!(holders.is_empty(), "a permit was left: {holders:?}");
}

/// Redis 7.0 has no `WAITAOF`: the client is refused when it is built, with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_waitaof_is_refused_when_the_client_is_built() {
    let server = RedisServer::start();
    let config = Config::single(server.url()).wait_for_aof(true, 0, Duration::from_millis(50));
    let err = LockClient::new(config).map(drop).unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err:?}");
    assert!(err.to_string().contains("WAITAOF"), "{err}");
}

/// Asking for the primary's own fsync from a server without an append-only file: refused
/// when the client is built (`WAITAOF` would answer every grant with an error); asking for
/// replicas only is accepted there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primarys_own_fsync_without_appendonly_is_refused_when_the_client_is_built() {
    let server = tokio::task::block_in_place(|| RedisServer::start_valkey(&[]));
    let config =
        |local| Config::single(server.url()).wait_for_aof(local, 1, Duration::from_millis(50));
    let err = LockClient::new(config(true)).map(drop).unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err:?}");
    assert!(err.to_string().contains("appendonly"), "{err}");
    assert!(LockClient::new(config(false)).is_ok());
}

/// The refusal of a durable grant the server cannot give (`appendonly no` with the primary's
/// own fsync asked for) when the check at build time could not ask: a `LockError::Config`
/// that names the key, the server's reason and the fix, at once (not a `Backend` error to
/// retry, nor a wait until `wait` runs out), and no key left behind.
async fn assert_refused_at_the_first_grant(server: &RedisServer, client: &LockClient) {
    let wait = Duration::from_secs(5);
    let started = std::time::Instant::now();
    let err = client
        .lock("refused")
        .wait(wait)
        .acquire()
        .await
        .map(drop)
        .unwrap_err();
    assert_refusal(&err, "refused");
    assert!(
        started.elapsed() < wait / 2,
        "the refusal waited {:?}: it was tried again",
        started.elapsed()
    );
    assert_eq!(server.get("refused"), None, "the grant was left behind");
    // The acquire script's path (a fenced lock) and a permit's are refused the same way.
    let err = client
        .lock("refused-fenced")
        .fencing(true)
        .wait(wait)
        .acquire()
        .await;
    assert_refusal(&err.map(drop).unwrap_err(), "refused-fenced");
    assert_eq!(
        server.get("refused-fenced"),
        None,
        "the fenced grant was left behind"
    );
    let err = client
        .semaphore("refused-quota", 2)
        .wait(wait)
        .acquire()
        .await;
    assert_refusal(&err.map(drop).unwrap_err(), "refused-quota");
    let holders: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg("refused-quota")
        .query(&mut server.conn())
        .unwrap();
    assert!(holders.is_empty(), "a permit was left: {holders:?}");
}

fn assert_refusal(err: &LockError, key: &str) {
    assert!(matches!(err, LockError::Config { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&format!("`{key}`")), "{message}");
    assert!(
        message.contains("WAITAOF") && message.contains("appendonly"),
        "the server's reason is not named: {message}"
    );
    assert!(
        message.contains("appendonly yes"),
        "the fix is not named: {message}"
    );
}

/// A client built while the server was down could not check it: the first grant is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primarys_own_fsync_without_appendonly_is_refused_at_the_first_grant_when_the_server_was_down()
 {
    let mut server = tokio::task::block_in_place(|| RedisServer::start_valkey(&[]));
    tokio::task::block_in_place(|| server.kill9());
    let client = LockClient::new(
        Config::single(server.url())
            .connect_timeout(Duration::from_millis(200))
            .response_timeout(Duration::from_secs(1))
            .wait_for_aof(true, 0, Duration::from_millis(100)),
    )
    .expect("a server that does not answer is not checked at build time");
    tokio::task::block_in_place(|| server.restart());
    assert_refused_at_the_first_grant(&server, &client).await;
}

/// A server that refuses `CONFIG` (renamed away, as managed services do) cannot be checked
/// when the client is built: the first grant is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primarys_own_fsync_without_appendonly_is_refused_at_the_first_grant_when_config_is_renamed()
 {
    let server = tokio::task::block_in_place(|| {
        RedisServer::start_valkey(&["--rename-command", "CONFIG", ""])
    });
    let client = LockClient::new(
        Config::single(server.url())
            .response_timeout(Duration::from_secs(1))
            .wait_for_aof(true, 0, Duration::from_millis(100)),
    )
    .expect("a server that refuses CONFIG is not checked at build time");
    assert_refused_at_the_first_grant(&server, &client).await;
}

/// An extension is one write and one `WAITAOF`, as a grant is: on a server whose script
/// library the client has not loaded yet (the lock was taken by a plain `SET NX`), on one
/// where it has, and for a client that finds the library another client loaded (it loads
/// nothing). A grant through the acquire script (a fenced lock) on a fresh server waits
/// once too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_waits_for_the_disk_once() {
    let server = tokio::task::block_in_place(|| valkey_with_aof("always"));
    let waited = |what: &str| {
        assert_eq!(
            server.calls("waitaof"),
            1,
            "{what}: {}",
            server.command_calls()
        );
    };
    // The watchdog renews at a third of the ttl: not within this test.
    let ttl = Duration::from_secs(60);
    let client = durable_client(&server, 0);
    let mut guard = client.lock("extended").ttl(ttl).acquire().await.unwrap();
    for round in ["the first extension", "the second extension"] {
        server.reset_stats();
        guard.extend(Duration::from_secs(90)).await.unwrap();
        waited(round);
    }
    guard.release().await.unwrap();
    let other = durable_client(&server, 0);
    let mut guard = other.lock("extended").ttl(ttl).acquire().await.unwrap();
    server.reset_stats();
    guard.extend(Duration::from_secs(90)).await.unwrap();
    waited("another client's first extension");
    assert_eq!(
        server.calls("function|load"),
        0,
        "{}",
        server.command_calls()
    );
    guard.release().await.unwrap();

    let fresh = tokio::task::block_in_place(|| valkey_with_aof("always"));
    let client = durable_client(&fresh, 0);
    fresh.reset_stats();
    let guard = client.lock("fenced").fencing(true).acquire().await.unwrap();
    assert_eq!(
        fresh.calls("waitaof"),
        1,
        "a fenced grant on a fresh server: {}",
        fresh.command_calls()
    );
    guard.release().await.unwrap();
}

/// Sets how the server fsyncs its append-only file.
fn set_fsync(server: &RedisServer, fsync: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendfsync")
        .arg(fsync)
        .query(&mut server.conn())
        .unwrap();
}

/// Asserts that `err` is a durable grant refused for want of the primary's own fsync.
fn assert_not_on_the_primarys_disk(err: &LockError, key: &str) {
    match err {
        LockError::NotDurable {
            key: refused,
            local: false,
            needed_local: true,
            ..
        } if refused == key => {}
        other => panic!("expected NotDurable (not on the primary's disk) for {key}: {other:?}"),
    }
}

/// A server that never fsyncs (`appendfsync no`) answers `WAITAOF 1 0 t` with `[0, 0]`:
/// a grant it made is not on its disk, and a power loss could take it back. An acquire
/// fails with `NotDurable { local: false }` and leaves no key; so does an `extend`; and
/// renewals that are never confirmed do not count, so the lease is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_the_primary_never_fsyncs_does_not_count() {
    let server = tokio::task::block_in_place(|| valkey_with_aof("always"));
    let client = LockClient::new(
        Config::single(server.url())
            .response_timeout(Duration::from_secs(2))
            .wait_for_aof(true, 0, Duration::from_millis(50)),
    )
    .unwrap();
    // Taken while the server fsyncs every write: one to renew, one to extend.
    let renewed = client
        .lock("fsync-renewed")
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    let mut extended = client
        .lock("fsync-extended")
        .ttl(Duration::from_secs(20))
        .watchdog(false)
        .acquire()
        .await
        .unwrap();

    set_fsync(&server, "no");
    let err = client
        .lock("fsync-never")
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .map(drop)
        .unwrap_err();
    assert_not_on_the_primarys_disk(&err, "fsync-never");
    assert_eq!(server.get("fsync-never"), None, "the grant was left");

    let err = extended.extend(Duration::from_secs(60)).await.unwrap_err();
    assert_not_on_the_primarys_disk(&err, "fsync-extended");

    let lost = lock_tests::until(Duration::from_secs(10), Duration::from_millis(10), || {
        renewed.is_lost()
    })
    .await;
    assert!(
        lost.is_some(),
        "renewals the primary never fsynced kept the lease"
    );
    assert_eq!(renewed.lost_cause(), Some(LostCause::RenewalFailed));
}
