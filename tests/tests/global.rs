//! The global client against a real redis-server: the first lock reads `REDIS_URL`, a later
//! `init` is refused, and concurrent locks share the client's connections (no connection
//! per lock). The global client is per process, so the checks run in a child process whose
//! environment carries `REDIS_URL`.
#![allow(clippy::unwrap_used, missing_docs)]

use lock_runtime::{Config, Lock, LockError};
use lock_tests::{RedisServer, child};

const LOCKS: usize = 100;

fn connected_clients(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("clients").query(conn).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("connected_clients:"))
        .and_then(|count| count.trim().parse().ok())
        .unwrap()
}

/// The worker side: runs only in the child process started below.
#[test]
fn global_client_worker() {
    if child::role().is_none() {
        return;
    }
    let url = std::env::var("REDIS_URL").unwrap();
    let mut admin = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let before = connected_clients(&mut admin);
    let runtime = lock_tests::two_worker_runtime();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..LOCKS)
            .map(|index| {
                let lock = Lock::new(format!("global:{index}"));
                tokio::spawn(async move { lock.acquire().await })
            })
            .collect();
        let mut held = Vec::new();
        for task in tasks {
            held.push(task.await.unwrap().unwrap());
        }
        println!("HELD {}", held.len());
        println!(
            "LOCKED {}",
            lock_runtime::is_locked("global:7").await.unwrap()
        );
        println!("CLIENTS {}", connected_clients(&mut admin) - before);
        for guard in held {
            guard.release().await.unwrap();
        }
        println!(
            "LOCKED {}",
            lock_runtime::is_locked("global:7").await.unwrap()
        );
        let again = lock_runtime::init(Config::single(url.clone())).unwrap_err();
        assert!(matches!(again, LockError::Config { .. }), "{again:?}");
        println!("INIT {again}");
    });
}

#[test]
fn the_global_client_reads_redis_url_and_shares_its_connections() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let worker = child::spawn(
        "global_client_worker",
        "worker",
        &[("REDIS_URL", server.url())],
    );
    let lines = child::collect(worker, "");
    let value = |prefix: &str| -> Vec<String> {
        lines
            .iter()
            // libtest may print `test name ... ` on the same line first.
            .filter_map(|line| {
                line.find(prefix)
                    .map(|at| line[at + prefix.len()..].to_owned())
            })
            .collect()
    };
    // The locks went to the server named by REDIS_URL (this one, on a free port).
    assert_eq!(value("HELD "), vec![LOCKS.to_string()]);
    assert_eq!(value("LOCKED "), vec!["true", "false"]);
    assert_eq!(server.dbsize(), 0, "a lock was left behind");
    // One multiplexed command connection (plus, at most, the eviction-policy check and the
    // subscription connection), never one per lock.
    let clients: u64 = value("CLIENTS ")[0].parse().unwrap();
    assert!(
        clients <= 3,
        "{clients} connections for {LOCKS} concurrent locks"
    );
    // A second configuration is refused, and the message says why.
    let init = &value("INIT ")[0];
    assert!(init.contains("already configured"), "{init}");
}
