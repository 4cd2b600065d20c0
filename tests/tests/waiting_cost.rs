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
//!
//! In cluster mode the goal holds per master: each master's requests are counted with
//! `MONITOR` (a command a script runs shows as `[0 lua]` there and is not a request), and
//! its commands with `INFO commandstats` (those inside scripts included).

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient};
use lock_tests::RedisServer;
use lock_tests::cluster::RedisCluster;
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

/// The cluster version: 1,000 tasks of one process wait on 1,000 distinct keys spread over
/// the 3 masters of a real cluster, each key held by another client (ttl 120 s, 10,000 keys
/// 600 s, renewed by
/// its watchdog: its first renewals note it as the holder to wait for, the next ones come
/// after the window). Once they all wait, each master gets at most 10 requests per second
/// (every client counted: the waiting process, and the holder keeping its liveness), and
/// when the holders release, every waiter acquires.
#[test]
fn a_process_waiting_on_many_cluster_keys_costs_each_master_a_bounded_number_of_requests() {
    let keys_waited_on = std::env::var("WAITING_COST_KEYS")
        .ok()
        .and_then(|keys| keys.parse::<usize>().ok())
        .unwrap_or(KEYS);
    let cluster = RedisCluster::start(3);
    lock_tests::two_worker_runtime().block_on(async {
        // A debug build queueing thousands of waiters on a loaded machine answers slowly
        // for a while: not an outage here.
        let config = || {
            Config::cluster(cluster.urls())
                .response_timeout(Duration::from_secs(10))
                .outage_grace(Duration::from_secs(60))
        };
        let holder = LockClient::new(config()).unwrap();
        let waiter = LockClient::new(config()).unwrap();
        // Room to queue the waiters before the holder's first renewals (a third of its
        // ttl), which note it as the holder to wait for.
        let holder_ttl = Duration::from_secs(120 * (keys_waited_on as u64 / 2_000).max(1));
        let keys: Vec<String> = (0..keys_waited_on).map(|i| format!("waiting-cost:{i}")).collect();
        let acquired = std::time::Instant::now();
        let guards: Vec<_> = futures::future::join_all(keys.iter().map(|key| {
            let lock = holder.lock(key.as_str()).ttl(holder_ttl);
            async move { lock.acquire().await.unwrap() }
        }))
        .await;
        let mut tasks: Vec<_> = keys
            .iter()
            .map(|key| {
                let lock = waiter
                    .lock(key.as_str())
                    .ttl(Duration::from_secs(10))
                    .wait(holder_ttl * 2);
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
        // Settle: the holder's first renewals (a third of its ttl after it took the keys,
        // one request per key in cluster mode: 10,000 take a debug build a while) note it
        // as the holder to wait for, and the waiters' next tries (within a second) see the
        // note; its next renewals come a third of the ttl after those, past the window.
        let settled = acquired
            + holder_ttl / 3
            + Duration::from_secs(3)
            + Duration::from_millis(2 * keys_waited_on as u64);
        tokio::time::sleep(settled.saturating_duration_since(std::time::Instant::now())).await;
        let window = Duration::from_secs(5);
        assert!(
            acquired.elapsed() + window < holder_ttl / 2,
            "the waiters took too long to queue ({:?}): the holder's second renewals would fall in the window",
            acquired.elapsed()
        );

        let monitors: Vec<Monitor> = cluster.nodes.iter().map(|node| Monitor::start(node.port())).collect();
        // With many keys the holder's renewals (and the waiters' tries until they see its
        // note) may still run: wait for a quiet second on every master (2 minutes at most).
        let quiet = Instant::now() + Duration::from_secs(120);
        let mut last: Vec<u64> = monitors.iter().map(Monitor::requests).collect();
        while Instant::now() < quiet {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now: Vec<u64> = monitors.iter().map(Monitor::requests).collect();
            let busiest = now.iter().zip(&last).map(|(now, last)| now - last).max().unwrap_or(0);
            last = now;
            if busiest as f64 <= REQUESTS_PER_SECOND * 1.2 {
                break;
            }
        }
        let before: Vec<(u64, u64, f64)> = cluster
            .nodes
            .iter()
            .zip(&monitors)
            .map(|(node, monitor)| (monitor.requests(), node.server_commands(), server_cpu(node)))
            .collect();
        let started = Instant::now();
        tokio::time::sleep(window).await;
        let after: Vec<(u64, u64, f64)> = cluster
            .nodes
            .iter()
            .zip(&monitors)
            .map(|(node, monitor)| (monitor.requests(), node.server_commands(), server_cpu(node)))
            .collect();
        let seconds = started.elapsed().as_secs_f64();
        let kinds: Vec<Vec<(String, u64)>> = monitors.iter().map(Monitor::kinds).collect();
        drop(monitors);
        let mut rates = Vec::new();
        for (master, ((requests0, commands0, cpu0), (requests1, commands1, cpu1))) in
            before.iter().zip(&after).enumerate()
        {
            let requests = (requests1 - requests0) as f64 / seconds;
            let commands = (commands1 - commands0) as f64 / seconds;
            let cpu = (cpu1 - cpu0) / seconds * 100.0;
            println!(
                "FIGURE cluster waiting cost: {keys_waited_on} keys waited on by one process, master {master}: \
                 {requests:.1} requests/s ({commands:.1} commands/s counting those inside scripts; goal at \
                 most {REQUESTS_PER_SECOND} requests/s per master), redis-server CPU {cpu:.1} % of a core"
            );
            let top: Vec<_> = kinds[master].iter().take(6).collect();
            println!("  master {master}'s requests by command while monitored: {top:?}");
            rates.push(requests);
        }
        if waiter.waiting() != (keys_waited_on, keys_waited_on) {
            let waiting = waiter.waiting();
            let finished = tasks.iter().position(tokio::task::JoinHandle::is_finished);
            let outcome = match finished {
                Some(index) => format!("{:?}", (&mut tasks[index]).await),
                None => "none finished".to_owned(),
            };
            panic!("a waiter stopped waiting while the keys were held: {waiting:?}; a finished one: {outcome}");
        }

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
        for (master, rate) in rates.iter().enumerate() {
            assert!(
                *rate <= REQUESTS_PER_SECOND,
                "waiting on {keys_waited_on} cluster keys cost master {master} {rate:.1} requests/s; \
                 the goal is at most {REQUESTS_PER_SECOND}/s per master (all figures: {rates:?})"
            );
        }
    });
}

/// Counts the requests a server receives from clients, from its `MONITOR` feed (the
/// commands scripts run show as `[0 lua]` and are not counted, nor is `INFO`), until
/// dropped.
struct Monitor {
    requests: Arc<AtomicU64>,
    /// Requests by command (a script call by the start of its hash).
    kinds: Arc<std::sync::Mutex<std::collections::HashMap<String, u64>>>,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Monitor {
    fn start(port: u16) -> Monitor {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.write_all(b"MONITOR\r\n").unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut lines = BufReader::new(stream);
        let mut first = String::new();
        lines.read_line(&mut first).unwrap();
        assert_eq!(first.trim_end(), "+OK", "MONITOR refused on port {port}");
        let requests = Arc::new(AtomicU64::new(0));
        let kinds = Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (requests, kinds, stop) = (requests.clone(), kinds.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut line = String::new();
                // Bounded: the test stops it within seconds; 10 minutes at most.
                let until = Instant::now() + Duration::from_secs(600);
                while !stop.load(Ordering::Acquire) && Instant::now() < until {
                    // A read that times out keeps what it read of the line: the next read
                    // completes it.
                    match lines.read_line(&mut line) {
                        Ok(0) => return,
                        Ok(_) if !line.ends_with('\n') => {}
                        Ok(_) => {
                            let request = line.contains("[0 127.0.0.1:")
                                && !line.contains("\"INFO\"")
                                && !line.contains("\"info\"");
                            if request {
                                requests.fetch_add(1, Ordering::AcqRel);
                                let mut words = line.split('"').skip(1).step_by(2);
                                let command = words.next().unwrap_or("?").to_uppercase();
                                let kind = if command == "EVALSHA" {
                                    let hash = words.next().unwrap_or("?");
                                    format!("EVALSHA {}", &hash[..hash.len().min(8)])
                                } else {
                                    command
                                };
                                *kinds.lock().unwrap().entry(kind).or_insert(0) += 1;
                            }
                            line.clear();
                        }
                        Err(err)
                            if matches!(
                                err.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) => {}
                        Err(_) => return,
                    }
                }
            })
        };
        // Let the feed start before the caller reads the first count.
        std::thread::sleep(Duration::from_millis(200));
        Monitor {
            requests,
            kinds,
            stop,
            reader: Some(reader),
        }
    }

    /// Requests by command so far, most first.
    fn kinds(&self) -> Vec<(String, u64)> {
        let mut kinds: Vec<(String, u64)> = self
            .kinds
            .lock()
            .unwrap()
            .iter()
            .map(|(kind, count)| (kind.clone(), *count))
            .collect();
        kinds.sort_by_key(|kind| std::cmp::Reverse(kind.1));
        kinds
    }

    fn requests(&self) -> u64 {
        // What the server sent so far reaches the reader within its read timeout.
        std::thread::sleep(Duration::from_millis(200));
        self.requests.load(Ordering::Acquire)
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}
