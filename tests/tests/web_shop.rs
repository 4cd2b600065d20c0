//! End to end: the web shop of `examples/src/web_shop.rs` as two replicas in separate OS
//! processes on one real redis-server, hit by a concurrent HTTP client: no oversell, one
//! gift per user, unique ids across both replicas, and a graceful stop on SIGTERM.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

use lock_examples::web_shop::{self, Gift, NextId, Order, Shop, USER_HEADER};
use lock_tests::{RedisServer, child};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ITEM: u64 = 1;
const STOCK: u32 = 10;
const BUYERS: usize = 60;
const USERS: u64 = 10;
const CLAIMS_PER_USER: usize = 6;
const ID_REQUESTS: usize = 40;

/// A replica serves at most this long, should the test never stop it.
const REPLICA_LIFETIME: Duration = Duration::from_secs(60);
/// How long a replica may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one HTTP exchange may take (a buyer may queue behind all the others).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a replica may take to stop after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// The replica side: runs only in the child processes that `replicas_...` starts. It
/// serves the shop on 127.0.0.1, announces `LISTENING <port>` on stdout, and serves until
/// SIGTERM (or Ctrl-C) or [`REPLICA_LIFETIME`].
#[test]
fn web_shop_replica() {
    let Some(name) = child::role() else { return };
    let url = std::env::var("LOCK_TESTS_URL").unwrap();
    let run = std::env::var("WEB_SHOP_RUN").unwrap();
    let runtime = lock_tests::two_worker_runtime();
    runtime.block_on(async {
        lock_runtime::init(lock_runtime::Config::single(url.clone())).unwrap();
        let shop = Shop::connect(&url, run, name.clone()).await.unwrap();
        shop.stock_if_new(ITEM, STOCK).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        // Listening for SIGTERM before the announcement: the parent may stop us right after.
        let signal = web_shop::shutdown_signal();
        let shutdown = async move {
            let _ = tokio::time::timeout(REPLICA_LIFETIME, signal).await;
        };
        println!("LISTENING {}", listener.local_addr().unwrap().port());
        web_shop::serve(listener, shop, shutdown).await.unwrap();
    });
    println!("REPLICA-STOPPED {name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_never_oversell_never_double_grant_and_issue_unique_ids() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let run = format!("e2e-{}", uuid::Uuid::new_v4().simple());
    let mut replicas = [
        Replica::spawn("a", &server, &run),
        Replica::spawn("b", &server, &run),
    ];
    let mut ports = Vec::new();
    for replica in &mut replicas {
        ports.push(replica.listening().await);
    }
    let ports = [ports[0], ports[1]];

    flash_sale(&server, &run, ports).await;
    daily_gift(&server, &run, ports).await;
    unique_ids(&server, &run, ports).await;
    errors_map_to_statuses(ports).await;

    for replica in replicas {
        let (status, lines) = replica.stop().await;
        assert!(status.success(), "a replica failed: {status:?}");
        assert!(
            lines.iter().any(|line| line.contains("REPLICA-STOPPED")),
            "a replica did not shut down gracefully: {lines:?}"
        );
    }
}

/// 60 buyers, split over both replicas, for a stock of 10.
async fn flash_sale(server: &RedisServer, run: &str, ports: [u16; 2]) {
    let path = format!("/items/{ITEM}/buy");
    let replies =
        concurrently((0..BUYERS).map(|buyer| (ports[buyer % 2], "POST", path.clone(), None))).await;
    let statuses = count_statuses(&replies);
    println!("buy: {statuses:?}");
    assert_eq!(
        statuses.get(&200).copied().unwrap_or(0),
        STOCK as usize,
        "not exactly the stock sold: {statuses:?}"
    );
    assert_eq!(
        statuses.get(&410).copied().unwrap_or(0),
        BUYERS - STOCK as usize,
        "every other buyer must hear `sold out`: {statuses:?}"
    );
    let orders: Vec<Order> = replies
        .iter()
        .filter(|reply| reply.status == 200)
        .map(|reply| serde_json::from_str(&reply.body).unwrap())
        .collect();
    // Each sale saw a different stock: no two buyers read the same value.
    let mut remaining: Vec<u32> = orders.iter().map(|order| order.remaining).collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..STOCK).collect::<Vec<_>>());
    let sold_by_a = orders.iter().filter(|order| order.instance == "a").count();
    println!("sold by a: {sold_by_a}, by b: {}", orders.len() - sold_by_a);
    assert!(
        replies
            .iter()
            .filter(|reply| reply.status == 410)
            .all(|reply| reply.body == "sold out")
    );
    assert_eq!(
        server
            .get(&format!("web-shop:{run}:stock:{ITEM}"))
            .as_deref(),
        Some("0"),
        "the stock must end at exactly zero"
    );
}

/// 10 users, each clicking 6 times at once on both replicas, then once more.
async fn daily_gift(server: &RedisServer, run: &str, ports: [u16; 2]) {
    let claims = (1..=USERS).flat_map(|user| {
        (0..CLAIMS_PER_USER)
            .map(move |click| (ports[click % 2], "POST", "/gift".to_owned(), Some(user)))
    });
    let replies = concurrently(claims).await;
    let statuses = count_statuses(&replies);
    println!("gift: {statuses:?}");
    for user in 1..=USERS {
        let mine: Vec<&Reply> = replies
            .iter()
            .filter(|reply| reply.user == Some(user))
            .collect();
        let granted: Vec<Gift> = mine
            .iter()
            .filter(|reply| reply.status == 200)
            .map(|reply| serde_json::from_str(&reply.body).unwrap())
            .collect();
        assert_eq!(granted.len(), 1, "user {user} got {} gifts", granted.len());
        assert_eq!(granted[0].user, user);
        let refused: Vec<u16> = mine
            .iter()
            .map(|reply| reply.status)
            .filter(|status| *status != 200)
            .collect();
        assert!(
            refused.iter().all(|status| [409, 429].contains(status)),
            "user {user}: {refused:?}"
        );
        assert_eq!(
            server.get(&format!("web-shop:{run}:gift:{user}")),
            Some(granted[0].coupon.clone())
        );
    }
    // The claims overlapped: the lock refused some at once instead of queueing them.
    assert!(
        statuses.get(&429).copied().unwrap_or(0) > 0,
        "no claim was refused as busy: {statuses:?}"
    );
    // Once the gift is granted, a later claim is a conflict, on either replica.
    let again = concurrently((1..=USERS).map(|user| {
        (
            ports[user as usize % 2],
            "POST",
            "/gift".to_owned(),
            Some(user),
        )
    }))
    .await;
    for reply in again {
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (409, "already claimed")
        );
    }
}

/// 40 id requests split over both replicas: 40 distinct ids, 1 to 40.
async fn unique_ids(server: &RedisServer, run: &str, ports: [u16; 2]) {
    let replies = concurrently(
        (0..ID_REQUESTS).map(|index| (ports[index % 2], "GET", "/ids/next".to_owned(), None)),
    )
    .await;
    let mut ids = Vec::new();
    for reply in &replies {
        assert_eq!(reply.status, 200, "{}", reply.body);
        let next: NextId = serde_json::from_str(&reply.body).unwrap();
        ids.push(next.id);
    }
    let distinct: HashSet<u64> = ids.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        ID_REQUESTS,
        "an id was issued twice: {ids:?}"
    );
    ids.sort_unstable();
    assert_eq!(ids, (1..=ID_REQUESTS as u64).collect::<Vec<_>>());
    assert_eq!(
        server.get(&format!("web-shop:{run}:last-id")),
        Some(ID_REQUESTS.to_string())
    );
}

async fn errors_map_to_statuses(ports: [u16; 2]) {
    let unknown = request(ports[0], "POST", "/items/999/buy", None).await;
    assert_eq!(
        (unknown.status, unknown.body.as_str()),
        (404, "no such item")
    );
    let anonymous = request(ports[1], "POST", "/gift", None).await;
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
}

/// One replica of the shop in a child process.
struct Replica {
    child: Option<Child>,
    listening: Option<tokio::sync::oneshot::Receiver<u16>>,
    output: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Replica {
    fn spawn(name: &str, server: &RedisServer, run: &str) -> Replica {
        let mut child = child::spawn(
            "web_shop_replica",
            name,
            &[
                ("LOCK_TESTS_URL", server.url()),
                ("WEB_SHOP_RUN", run.to_owned()),
            ],
        );
        let stdout = child.stdout.take().unwrap();
        let (port_tx, port_rx) = tokio::sync::oneshot::channel();
        // Reads the replica's stdout as it runs: the port first, then everything until
        // the replica exits (so its pipe never fills up).
        let output = std::thread::spawn(move || {
            let mut port_tx = Some(port_tx);
            let mut lines = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find("LISTENING ") {
                    let port = line[at + "LISTENING ".len()..].trim().parse().unwrap();
                    if let Some(port_tx) = port_tx.take() {
                        let _ = port_tx.send(port);
                    }
                }
                lines.push(line);
            }
            lines
        });
        Replica {
            child: Some(child),
            listening: Some(port_rx),
            output: Some(output),
        }
    }

    /// Waits (bounded) for the replica's `LISTENING <port>` line.
    async fn listening(&mut self) -> u16 {
        let announced = self.listening.take().unwrap();
        match tokio::time::timeout(START_TIMEOUT, announced).await {
            Ok(Ok(port)) => port,
            Ok(Err(_)) => panic!("the replica exited before it listened"),
            Err(_) => panic!("the replica did not listen within {START_TIMEOUT:?}"),
        }
    }

    /// SIGTERM, then waits (bounded) for the replica to finish; returns its exit status and
    /// its stdout.
    async fn stop(mut self) -> (ExitStatus, Vec<String>) {
        let mut child = self.child.take().unwrap();
        let pid = child.id();
        signal(pid, "TERM");
        let exited = tokio::time::timeout(
            STOP_TIMEOUT,
            tokio::task::spawn_blocking(move || child.wait()),
        )
        .await;
        let Ok(exited) = exited else {
            signal(pid, "KILL");
            panic!("replica {pid} did not stop within {STOP_TIMEOUT:?} of SIGTERM");
        };
        let status = exited.unwrap().unwrap();
        let lines = self.output.take().unwrap().join().unwrap();
        (status, lines)
    }
}

impl Drop for Replica {
    /// A test that fails half-way still kills its replicas.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status();
}

/// One HTTP exchange's outcome.
#[derive(Debug)]
struct Reply {
    user: Option<u64>,
    status: u16,
    body: String,
}

fn count_statuses(replies: &[Reply]) -> BTreeMap<u16, usize> {
    let mut counts = BTreeMap::new();
    for reply in replies {
        *counts.entry(reply.status).or_insert(0) += 1;
    }
    counts
}

/// Sends every request at once and returns the replies in request order.
async fn concurrently(
    requests: impl IntoIterator<Item = (u16, &'static str, String, Option<u64>)>,
) -> Vec<Reply> {
    let tasks: Vec<_> = requests
        .into_iter()
        .map(|(port, method, path, user)| {
            tokio::spawn(async move { request(port, method, &path, user).await })
        })
        .collect();
    let mut replies = Vec::with_capacity(tasks.len());
    for task in tasks {
        replies.push(task.await.unwrap());
    }
    replies
}

/// One HTTP/1.1 request on its own connection (`connection: close`, so the reply ends at
/// EOF), to 127.0.0.1 only.
async fn request(port: u16, method: &str, path: &str, user: Option<u64>) -> Reply {
    let user_header = user
        .map(|id| format!("{USER_HEADER}: {id}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{user_header}\
         content-length: 0\r\nconnection: close\r\n\r\n"
    );
    let exchange = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(head.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| panic!("{method} {path} on :{port}: no reply in {REQUEST_TIMEOUT:?}"))
        .unwrap_or_else(|err| panic!("{method} {path} on :{port}: {err}"));
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP reply: {head:?}"));
    Reply {
        user,
        status,
        body: body.to_owned(),
    }
}
