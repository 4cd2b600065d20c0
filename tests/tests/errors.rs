//! How `LockError` reads when printed as an error chain (`Display` of each `source()` in
//! turn, as anyhow, eyre and tracing print it): each link says something new, the top
//! names the key, and the cause text appears exactly once.
#![allow(clippy::unwrap_used, missing_docs)]

use std::error::Error as _;
use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError};
use lock_tests::free_port;

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
async fn a_refused_connection_is_named_once_in_the_error_chain() {
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
    let links = chain(&err);
    let printed = links.join(": ");
    assert!(links.len() >= 2, "the cause is not a source(): {links:?}");
    assert!(links[0].contains("`stock:7`"), "{printed}");
    assert!(
        !links[0].to_lowercase().contains("refused"),
        "Display repeats the cause that source() returns: {printed}"
    );
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

#[tokio::test]
async fn a_bad_url_keeps_its_cause_as_source() {
    let err = LockClient::new(Config::single("rediss-nope://127.0.0.1:1")).unwrap_err();
    let links = chain(&err);
    assert!(
        links.len() >= 2,
        "the URL's parse error is flattened into a string: {links:?}"
    );
    assert!(links[0].contains("rediss-nope://127.0.0.1:1"), "{links:?}");
    let cause = &links[1];
    assert!(
        !links[0].contains(cause.as_str()),
        "Display repeats the cause that source() returns: {links:?}"
    );
}

#[test]
fn a_configuration_error_without_a_cause_has_no_source() {
    let err = LockError::Config {
        reason: "init called twice".into(),
    };
    assert!(err.source().is_none());
    assert!(err.to_string().contains("init called twice"), "{err}");
}
