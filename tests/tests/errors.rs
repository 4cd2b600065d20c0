//! How `LockError` reads: printed alone (`{err}`, as a log line prints it) it names the key
//! and the cause; printed as an error chain (`Display` of each `source()` in turn, as anyhow
//! and eyre print it) the cause text appears exactly once.
#![allow(clippy::unwrap_used, missing_docs)]

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError};
use lock_tests::{RedisServer, free_port};

/// Every link of the chain, top first (bounded: a chain longer than 16 is a bug).
fn chain(err: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut links = vec![err.to_string()];
    let mut next = err.source();
    while let Some(cause) = next {
        assert!(links.len() < 16, "source() chain does not end: {links:?}");
        links.push(cause.to_string());
        next = cause.source();
    }
    links
}

#[tokio::test]
async fn a_refused_connection_is_named_in_the_message_and_once_in_the_error_chain() {
    let port = free_port();
    let client = LockClient::new(
        Config::single(format!("redis://127.0.0.1:{port}"))
            .connect_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), client.lock("stock:7").acquire())
        .await
        .expect("acquire hung on an unreachable Redis")
        .unwrap_err();
    assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
    // `{err}` alone, as a log line prints it, names the key and the cause.
    let message = err.to_string();
    assert!(message.contains("`stock:7`"), "{message}");
    assert!(
        message.to_lowercase().contains("connection refused"),
        "the message does not name the cause: {message}"
    );
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    let links = chain(&err);
    let printed = links.join(": ");
    assert_eq!(
        printed.to_lowercase().matches("refused").count(),
        1,
        "the cause is printed more than once: {printed}"
    );
    // The redis-rs error stays reachable for code that inspects it.
    let LockError::Backend { source, .. } = &err else {
        unreachable!()
    };
    assert!(source.is_connection_refusal(), "{source:?}");
}

/// A server that answers with an error (here out of memory) is told from one that cannot be
/// reached by the message alone.
#[tokio::test]
async fn a_server_error_reply_is_named_in_the_message() {
    let server = RedisServer::start();
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", "1"])
        .query(&mut server.conn())
        .unwrap();
    let client = server.lock_client();
    let err = tokio::time::timeout(Duration::from_secs(10), client.lock("stock:8").acquire())
        .await
        .expect("acquire hung")
        .unwrap_err();
    assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("`stock:8`"), "{message}");
    assert!(
        message.contains("OOM"),
        "the message does not name the server's reply: {message}"
    );
    let printed = chain(&err).join(": ");
    assert_eq!(printed.matches("OOM").count(), 1, "{printed}");
}

/// A release that gave up names the last error it met.
#[test]
fn a_release_that_gave_up_names_its_last_error() {
    let err = LockError::ReleaseGaveUp {
        key: "stock:9".into(),
        source: Arc::new(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "Redis server 10.0.0.1:6379: timed out",
        ))),
    };
    let message = err.to_string();
    assert!(message.contains("`stock:9`"), "{message}");
    assert!(message.contains("gave up"), "{message}");
    assert!(
        message.contains("Redis server 10.0.0.1:6379: timed out"),
        "the message does not name the last error: {message}"
    );
    let printed = chain(&err).join(": ");
    assert_eq!(printed.matches("timed out").count(), 1, "{printed}");
}

#[tokio::test]
async fn a_bad_url_names_its_cause_once() {
    let err = LockClient::new(Config::single("rediss-nope://127.0.0.1:1")).unwrap_err();
    let LockError::InvalidUrl { source, .. } = &err else {
        panic!("{err:?}")
    };
    let cause = source.to_string();
    let message = err.to_string();
    assert!(message.contains("rediss-nope://127.0.0.1:1"), "{message}");
    assert!(
        message.contains(cause.as_str()),
        "the message does not say why the URL is rejected ({cause}): {message}"
    );
    let printed = chain(&err).join(": ");
    assert_eq!(printed.matches(cause.as_str()).count(), 1, "{printed}");
}

#[test]
fn a_configuration_error_without_a_cause_has_no_source() {
    let err = LockError::Config {
        reason: "init called twice".into(),
    };
    assert!(err.source().is_none());
    assert!(err.to_string().contains("init called twice"), "{err}");
}
