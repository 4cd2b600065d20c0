//! `LockLayer` (feature `tower`) on a real axum server on loopback, against a real
//! redis-server: a per-user lock derived from a request header, a concurrent duplicate
//! answered 429 without reaching the handler, other users and unlocked requests served,
//! the key held in Redis while the handler runs and released after, and an unreachable
//! Redis answered 503 with `Retry-After`.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::HeaderMap;
use axum::routing::post;
use lock_runtime::layer::LockLayer;
use lock_runtime::{Config, LockClient};
use lock_tests::{RedisServer, free_port, until};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

const USER_HEADER: &str = "x-user-id";
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The handler's side of the test: how many calls ran, and, for user 7 only, a signal on
/// entry and a gate that holds the call inside the handler until the test opens it.
#[derive(Default)]
struct Handler {
    calls: AtomicUsize,
    entered: Notify,
    gate: Notify,
}

fn user_key(req: &Request) -> Option<String> {
    let user = req.headers().get(USER_HEADER)?.to_str().ok()?;
    Some(format!("sign-in:{user}"))
}

/// Serves `POST /gift` behind `layer` on a free loopback port; returns the port.
async fn serve(layer: LockLayer<fn(&Request) -> Option<String>>, handler: Arc<Handler>) -> u16 {
    let app = Router::new()
        .route(
            "/gift",
            post(move |headers: HeaderMap| {
                let handler = Arc::clone(&handler);
                async move {
                    handler.calls.fetch_add(1, Ordering::SeqCst);
                    if headers.get(USER_HEADER).is_some_and(|user| user == "7") {
                        handler.entered.notify_one();
                        handler.gate.notified().await;
                    }
                    "granted"
                }
            }),
        )
        .layer(layer);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    port
}

struct Reply {
    status: u16,
    head: String,
}

/// One HTTP/1.1 request on its own connection, to 127.0.0.1 only.
async fn post_gift(port: u16, user: Option<u64>) -> Reply {
    let user_header = user
        .map(|id| format!("{USER_HEADER}: {id}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "POST /gift HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{user_header}\
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
        .expect("no reply in time")
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, _body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Reply {
        status,
        head: head.to_lowercase(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_duplicate_is_refused_and_other_requests_are_served() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let handler = Arc::new(Handler::default());
    let layer = LockLayer::new(user_key as fn(&Request) -> Option<String>)
        .client(&client)
        .ttl(Duration::from_secs(5))
        .wait(Duration::ZERO);
    let port = serve(layer, Arc::clone(&handler)).await;

    // User 7's first request enters the handler and stays there.
    let entered = handler.entered.notified();
    let first = tokio::spawn(post_gift(port, Some(7)));
    tokio::time::timeout(REQUEST_TIMEOUT, entered)
        .await
        .expect("the first request never reached the handler");
    assert!(
        server.get("sign-in:7").is_some(),
        "the lock key is not in Redis while the handler runs"
    );

    // A duplicate of user 7 is refused at once, without reaching the handler.
    let duplicate = post_gift(port, Some(7)).await;
    assert_eq!(duplicate.status, 429, "{}", duplicate.head);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);

    // Another user is served meanwhile; so is a request the closure gives no key.
    for user in [Some(8), None] {
        assert_eq!(post_gift(port, user).await.status, 200, "user {user:?}");
    }

    // The first request finishes; its lock is released and user 7 is served again.
    handler.gate.notify_one();
    assert_eq!(first.await.unwrap().status, 200);
    until(Duration::from_secs(5), Duration::from_millis(10), || {
        server.get("sign-in:7").is_none()
    })
    .await
    .expect("the lock of user 7 was not released");
    let entered = handler.entered.notified();
    let again = tokio::spawn(post_gift(port, Some(7)));
    tokio::time::timeout(REQUEST_TIMEOUT, entered)
        .await
        .expect("user 7's next request never reached the handler");
    handler.gate.notify_one();
    assert_eq!(again.await.unwrap().status, 200);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_is_a_503_with_retry_after() {
    let client = LockClient::new(
        Config::single(format!("redis://127.0.0.1:{}", free_port()))
            .connect_timeout(Duration::from_millis(300)),
    )
    .unwrap();
    let handler = Arc::new(Handler::default());
    let layer = LockLayer::new(user_key as fn(&Request) -> Option<String>)
        .client(&client)
        .wait(Duration::ZERO);
    let port = serve(layer, Arc::clone(&handler)).await;
    let reply = post_gift(port, Some(7)).await;
    assert_eq!(reply.status, 503, "{}", reply.head);
    assert!(reply.head.contains("retry-after: 1"), "{}", reply.head);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 0, "the handler ran");
}

/// A handler during which another owner takes the request's key (a failover's shape: its
/// token written over ours) does not answer 200: the layer's release finds the other
/// owner's token and answers `Lost`'s 503; the other owner's key is left alone. The lease
/// is 30 s, so no renewal runs during the handler: only the release finds the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_found_taken_over_at_release_is_a_503() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let layer = LockLayer::new(user_key as fn(&Request) -> Option<String>)
        .client(&client)
        .ttl(Duration::from_secs(30));
    let admin = server.redis();
    let app = Router::new()
        .route(
            "/gift",
            post(move || {
                let admin = admin.clone();
                async move {
                    let mut admin = admin.get_multiplexed_async_connection().await.unwrap();
                    let _: () = redis::cmd("SET")
                        .arg("sign-in:9")
                        .arg("other-owner")
                        .arg("PX")
                        .arg(30_000)
                        .query_async(&mut admin)
                        .await
                        .unwrap();
                    "granted"
                }
            }),
        )
        .layer(layer);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let reply = post_gift(port, Some(9)).await;
    assert_eq!(reply.status, 503, "{}", reply.head);
    assert_eq!(server.get("sign-in:9").as_deref(), Some("other-owner"));
}

/// A ttl the layer sets is the ttl of its locks, also when it equals the library's
/// default: the client's `default_ttl` fills in only a ttl the layer does not set. (Before
/// the layer counted which options were given, a 30 s ttl, the library's default, was
/// taken as unset and the client's 2 s applied.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_the_layer_sets_wins_over_the_clients_default() {
    let server = RedisServer::start();
    let client =
        LockClient::new(Config::single(server.url()).default_ttl(Duration::from_secs(2))).unwrap();
    let handler = Arc::new(Handler::default());
    let layer = LockLayer::new(user_key as fn(&Request) -> Option<String>)
        .client(&client)
        .ttl(Duration::from_secs(30));
    let port = serve(layer, Arc::clone(&handler)).await;
    let entered = handler.entered.notified();
    let request = tokio::spawn(post_gift(port, Some(7)));
    tokio::time::timeout(REQUEST_TIMEOUT, entered)
        .await
        .expect("the request never reached the handler");
    let pttl = server.pttl("sign-in:7");
    handler.gate.notify_one();
    assert_eq!(request.await.unwrap().status, 200);
    assert!(
        pttl > 20_000,
        "the lock's PTTL was {pttl} ms, not the layer's 30 s"
    );
}
