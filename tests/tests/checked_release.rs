//! An operator's checked release against real servers: `force_release_if` takes a lock
//! only from the holder the operator looked at (the check and the release in one script
//! call), and `force_release_checked` refuses a key that is not one of our locks unless
//! told to take it. Beside inspect.rs, which covers the unchecked `force_release`.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{CheckedRelease, Config, HolderKind, LockClient, LockError, ReleaseCheck};
use lock_tests::{RedisServer, shared_server};

/// A generous bound for anything that happens within a renewal interval or two.
const BOUND: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_token_is_refused_and_the_right_one_releases_to_the_waiter() {
    let server = shared_server();
    let key = "checked:stale";
    let client = server.lock_client();
    // The operator looked at a holder that has since released; another holds it now.
    let first = client.lock(key).acquire().await.unwrap();
    let stale = first.token().to_owned();
    first.release().await.unwrap();
    let current = client.lock(key).acquire().await.unwrap();
    let other = server.lock_client();
    let waiter = {
        let lock = other.lock(key).wait(Duration::from_secs(30));
        tokio::spawn(async move { lock.acquire().await })
    };
    server.until_queued(key, 1).await;

    let operator = server.lock_client();
    let outcome = operator.force_release_if(key, &stale).await.unwrap();
    let CheckedRelease::NotHolder { token, holders, .. } = &outcome else {
        panic!("a stale token released the lock: {outcome:?}")
    };
    assert_eq!(token, &stale);
    assert_eq!(holders.len(), 1, "{outcome:?}");
    assert_eq!(holders[0].token, current.token());
    assert_eq!(holders[0].kind, HolderKind::Exclusive);
    let text = outcome.to_string();
    assert!(
        text.starts_with(&format!(
            "not released {key}: {stale} holds no part of it; now holder {} (ttl ",
            current.token()
        )),
        "{text}"
    );
    // Untouched: the holder keeps it, the waiter still waits.
    assert_eq!(server.get(key).as_deref(), Some(current.token()));
    assert_eq!(server.queued(key), 1);

    let outcome = operator
        .force_release_if(key, current.token())
        .await
        .unwrap();
    let released = outcome.released().expect("the holder's token releases");
    assert_eq!(released.removed[0].token, current.token());
    let waiter_id = released.woken.clone().unwrap();
    let taken = tokio::time::timeout(BOUND, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(taken.token(), waiter_id);
    assert_eq!(server.get(key).as_deref(), Some(taken.token()));
    let _ = current.release().await;
    taken.release().await.unwrap();
}

#[tokio::test]
async fn a_key_that_is_not_one_of_our_locks_is_refused_unless_forced() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let mut conn = server.conn();
    let _: () = redis::cmd("SET")
        .arg("session:abc")
        .arg(r#"{"user":7}"#)
        .arg("PX")
        .arg(60_000)
        .query(&mut conn)
        .unwrap();
    for err in [
        client
            .force_release_checked("session:abc", &ReleaseCheck::new())
            .await
            .unwrap_err(),
        client
            .force_release_if("session:abc", r#"{"user":7}"#)
            .await
            .unwrap_err(),
    ] {
        let LockError::InvalidKey { key, reason } = &err else {
            panic!("expected InvalidKey, got {err:?}")
        };
        assert_eq!(key, "session:abc");
        assert!(reason.contains(r#"`{"user":7}`"#), "{reason}");
        assert!(reason.contains("not a token of this crate's"), "{reason}");
    }
    assert_eq!(server.get("session:abc").as_deref(), Some(r#"{"user":7}"#));
    assert!(server.pttl("session:abc") > 0);

    // Forced: taken, as another client's lock would be.
    let forced = ReleaseCheck::new().foreign(true);
    let outcome = client
        .force_release_checked("session:abc", &forced)
        .await
        .unwrap();
    assert_eq!(
        outcome.released().unwrap().removed[0].token,
        r#"{"user":7}"#
    );
    assert_eq!(server.get("session:abc"), None);
}

#[tokio::test]
async fn a_permit_or_a_readers_token_is_a_holder_to_check_against() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let permit = client.semaphore("checked:pool", 3).acquire().await.unwrap();
    let outcome = client
        .force_release_if("checked:pool", "permit:lr-0000")
        .await
        .unwrap();
    assert!(
        matches!(&outcome, CheckedRelease::NotHolder { holders, .. }
            if holders[0].kind == HolderKind::Permit && holders[0].token == permit.token()),
        "{outcome:?}"
    );
    let outcome = client
        .force_release_if("checked:pool", permit.token())
        .await
        .unwrap();
    assert_eq!(outcome.released().unwrap().removed[0].token, permit.token());
    drop(permit);

    let reader = client.rw_lock("checked:doc").read().await.unwrap();
    let outcome = client
        .force_release_if("checked:doc", "lr-0000")
        .await
        .unwrap();
    assert!(outcome.released().is_none(), "{outcome:?}");
    assert!(client.inspect("checked:doc").await.unwrap().is_held());
    let outcome = client
        .force_release_if("checked:doc", reader.token())
        .await
        .unwrap();
    assert_eq!(outcome.released().unwrap().removed[0].token, reader.token());
    assert!(!client.inspect("checked:doc").await.unwrap().is_held());
}

/// On Redlock each master checks the token: a stale one releases nowhere, the holder's
/// clears every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redlock_every_master_checks_the_token() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let client = LockClient::new(
        Config::redlock(servers.iter().map(RedisServer::url))
            .connect_timeout(Duration::from_millis(300))
            .response_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    let guard = client.lock("checked:report").acquire().await.unwrap();
    let outcome = client
        .force_release_if("checked:report", "lr-stale")
        .await
        .unwrap();
    let CheckedRelease::NotHolder { holders, .. } = &outcome else {
        panic!("a stale token released the lock: {outcome:?}")
    };
    assert_eq!(holders[0].token, guard.token());
    let held = servers
        .iter()
        .filter(|server| server.get("checked:report").as_deref() == Some(guard.token()))
        .count();
    assert!(held >= 2, "{held} masters hold it");
    let outcome = client
        .force_release_if("checked:report", guard.token())
        .await
        .unwrap();
    assert_eq!(outcome.released().unwrap().removed[0].token, guard.token());
    for server in &servers {
        assert_eq!(server.get("checked:report"), None);
    }
}

/// On a cluster the check runs on the node that owns the key's slot: a stale token is
/// refused there, the holder's releases, a foreign string is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_owning_node_checks_the_token() {
    let cluster = tokio::task::block_in_place(|| lock_tests::cluster::RedisCluster::start(3));
    let client = LockClient::new(Config::cluster(cluster.urls())).unwrap();
    for node in 0..3 {
        let key = cluster.key_on("checked:", node);
        let guard = client.lock(key.clone()).acquire().await.unwrap();
        let outcome = client.force_release_if(&key, "lr-stale").await.unwrap();
        assert!(outcome.released().is_none(), "{outcome:?}");
        assert!(client.inspect(&key).await.unwrap().is_held(), "{key}");
        let outcome = client.force_release_if(&key, guard.token()).await.unwrap();
        assert_eq!(outcome.released().unwrap().removed[0].token, guard.token());
        assert!(client.inspect(&key).await.unwrap().is_empty(), "{key}");
    }
    let foreign = cluster.key_on("checked:foreign:", 1);
    let owner = cluster.owner(cluster.slot(&foreign));
    let mut conn = redis::Client::open(cluster.urls()[owner].as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&foreign)
        .arg("someone-else")
        .arg("PX")
        .arg(60_000)
        .query(&mut conn)
        .unwrap();
    let err = client
        .force_release_checked(&foreign, &ReleaseCheck::new())
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidKey { .. }), "{err:?}");
    assert_eq!(cluster.get(&foreign).as_deref(), Some("someone-else"));
}
