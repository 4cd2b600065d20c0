//! A lock client built on the application's own redis-rs client: its settings (here a
//! password and a database given in code, not in a URL) apply to the lock connections.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{Config, LockClient, ReleaseOutcome};
use lock_tests::RedisServer;
use lock_tests::cluster::RedisCluster;
use redis::cluster::ClusterClientBuilder;

/// The application's client: password and database set in code.
fn application_client(server: &RedisServer) -> redis::Client {
    let info = redis::IntoConnectionInfo::into_connection_info(format!(
        "redis://127.0.0.1:{}",
        server.port()
    ))
    .unwrap();
    let settings = info
        .redis_settings()
        .clone()
        .set_password("s3cret")
        .set_db(3);
    redis::Client::open(info.set_redis_settings(settings)).unwrap()
}

/// GET `key` in database 3 with the password.
fn get_in_db3(server: &RedisServer, key: &str) -> Option<String> {
    let mut conn = application_client(server)
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    redis::cmd("GET").arg(key).query(&mut conn).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_client_uses_the_applications_password_and_database() {
    let server = RedisServer::start();
    // Set after the start: the harness's readiness check speaks without a password.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("s3cret")
        .query(&mut server.conn())
        .unwrap();
    let locks = LockClient::from_client(application_client(&server)).unwrap();
    let guard = locks.lock("own:1").acquire().await.unwrap();
    assert_eq!(get_in_db3(&server, "own:1").as_deref(), Some(guard.token()));
    assert!(locks.is_locked("own:1").await.unwrap());
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(get_in_db3(&server, "own:1"), None);

    // Through a Config: the other options combine with the application's client.
    let locks =
        LockClient::new(Config::from_client(application_client(&server)).key_prefix("app:"))
            .unwrap();
    let guard = locks.lock("own:2").acquire().await.unwrap();
    assert_eq!(
        get_in_db3(&server, "app:own:2").as_deref(),
        Some(guard.token())
    );
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_builder_uses_the_applications_builder() {
    let cluster = RedisCluster::start(3);
    let seeds = cluster.urls();
    let locks = LockClient::new(Config::cluster_builder(move || {
        ClusterClientBuilder::new(seeds.clone()).response_timeout(Duration::from_secs(1))
    }))
    .unwrap();
    let guard = locks.lock("own:cluster").acquire().await.unwrap();
    assert_eq!(cluster.get("own:cluster").as_deref(), Some(guard.token()));
    assert!(locks.is_locked("own:cluster").await.unwrap());
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(cluster.get("own:cluster"), None);
}

/// An application without a `redis` dependency of its own builds its client from the
/// re-export, which is the version `Config::from_client` takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reexported_redis_builds_the_applications_client() {
    let server = RedisServer::start();
    let client = lock_runtime::redis::Client::open(server.url()).unwrap();
    let locks = LockClient::from_client(client).unwrap();
    let guard = locks.lock("own:reexport").acquire().await.unwrap();
    assert_eq!(server.get("own:reexport").as_deref(), Some(guard.token()));
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}
