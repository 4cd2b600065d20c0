//! What waiting costs Redis (issue 27, item 1): a process whose tasks wait on many held keys
//! costs a bounded number of requests per second, however many keys it waits on.
//!
//! The waiting client talks to the server through a proxy that counts the commands it
//! sends (pipelined commands each count; the commands a script runs on the server do not),
//! so the holders' renewals, which go straight to the server, are not counted.
//!
//! ```text
//! cargo test -p lock-tests --test waiting_cost -- --nocapture | grep FIGURE
//! WAITING_COST_KEYS=10000 cargo test -p lock-tests --test waiting_cost -- --nocapture | grep FIGURE
//! ```

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient};
use lock_tests::RedisServer;
use lock_tests::proxy::FaultProxy;

/// Keys waited on at once, each held by another client (`WAITING_COST_KEYS` overrides it).
const KEYS: usize = 1_000;

/// The goal: a waiting process costs at most this many requests per second.
const REQUESTS_PER_SECOND: f64 = 10.0;

/// 1,000 tasks of one process wait on 1,000 distinct keys that another client holds (ttl
/// 3 s, renewed by its watchdog): once they all wait, the waiting process sends at most 10
/// requests per second in all (not per key), and when the holders release, every waiter
/// acquires.
#[test]
fn a_process_waiting_on_many_keys_costs_a_bounded_number_of_requests() {
    let keys_waited_on = std::env::var("WAITING_COST_KEYS")
        .ok()
        .and_then(|keys| keys.parse::<usize>().ok())
        .unwrap_or(KEYS);
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    lock_tests::two_worker_runtime().block_on(async {
        let holder = server.lock_client();
        // A watchdog renews 1,000 leases of 3 s easily; 10,000 in a debug build on a
        // loaded machine want more room.
        let holder_ttl = Duration::from_millis(3 * (keys_waited_on as u64).max(1_000));
        let waiter = LockClient::new(Config::single(proxy.url())).unwrap();
        let keys: Vec<String> = (0..keys_waited_on).map(|i| format!("waiting-cost:{i}")).collect();
        let mut guards = Vec::new();
        for key in &keys {
            let lock = holder.lock(key.as_str()).ttl(holder_ttl);
            guards.push(lock.acquire().await.unwrap());
        }
        let mut tasks: Vec<_> = keys
            .iter()
            .map(|key| {
                let lock = waiter
                    .lock(key.as_str())
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(120));
                tokio::spawn(async move { lock.acquire().await.map(|guard| guard.key().to_owned()) })
            })
            .collect();
        let all_wait = lock_tests::until(Duration::from_secs(60), Duration::from_millis(20), || {
            waiter.waiting() == (keys_waited_on, keys_waited_on)
        })
        .await;
        if all_wait.is_none() {
            let waiting = waiter.waiting();
            let finished = tasks.iter().position(tokio::task::JoinHandle::is_finished);
            let outcome = match finished {
                Some(index) => format!("{:?}", (&mut tasks[index]).await),
                None => "none finished".to_owned(),
            };
            panic!("the waiters did not all queue: {waiting:?}; a finished one: {outcome}");
        }
        // Settle: the holders renew (each renewal a third of their ttl apart) while queued
        // waiters exist, which notes them as the holders to wait for.
        tokio::time::sleep(holder_ttl / 3 + Duration::from_secs(2)).await;

        let window = Duration::from_secs(5);
        let before = proxy.requests();
        let cpu_before = server_cpu(&server);
        let started = Instant::now();
        tokio::time::sleep(window).await;
        let requests = proxy.requests() - before;
        let seconds = started.elapsed().as_secs_f64();
        let cpu = (server_cpu(&server) - cpu_before) / seconds * 100.0;
        let rate = requests as f64 / seconds;
        println!(
            "FIGURE waiting cost: {keys_waited_on} keys waited on by one process: {requests} requests in \
             {seconds:.1} s = {rate:.1}/s ({:.4} per waiting key per second; goal at most \
             {REQUESTS_PER_SECOND}/s in all); redis-server CPU {cpu:.1} % of a core (the \
             holders' renewals included)",
            rate / keys_waited_on as f64
        );
        assert_eq!(waiter.waiting(), (keys_waited_on, keys_waited_on), "a waiter stopped waiting while the keys were held");

        // The holders release: every waiter acquires its key.
        for guard in guards {
            guard.release().await.unwrap();
        }
        for (task, key) in tasks.into_iter().zip(&keys) {
            let acquired = tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("a waiter did not acquire within 30 s of its holder's release")
                .unwrap()
                .unwrap();
            assert_eq!(&acquired, key);
        }
        assert!(
            rate <= REQUESTS_PER_SECOND,
            "waiting on {keys_waited_on} keys cost {requests} requests in {seconds:.1} s ({rate:.1}/s); \
             the goal is at most {REQUESTS_PER_SECOND}/s for the whole process"
        );
    });
}

/// The server's CPU time so far (user and system, in seconds), from `INFO cpu`.
fn server_cpu(server: &RedisServer) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query(&mut server.conn())
        .unwrap();
    info.lines()
        .filter(|line| line.starts_with("used_cpu_sys:") || line.starts_with("used_cpu_user:"))
        .filter_map(|line| line.split_once(':')?.1.trim().parse::<f64>().ok())
        .sum()
}
