//! An incident, as an on-call engineer meets it, against a real server: process A takes
//! `stock:42` and its body hangs; B and C wait; D holds `user:7` and waits for `stock:42`
//! too; E's wait runs out. Each question is answered by what the tools print: who holds
//! the key (host, pid, service, function) and since when, who waits, whether the holder
//! still renews, why E's wait failed, and a safe release that the old holder hears of at
//! once.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, SystemTime};

use lock_runtime::{CheckedRelease, Config, Identity, LockClient, LockError, LostCause};
use lock_tests::RedisServer;

/// A generous bound for anything that happens within a renewal interval or two.
const BOUND: Duration = Duration::from_secs(10);

/// A client of `service` on `server`.
fn service(server: &RedisServer, name: &str) -> LockClient {
    LockClient::new(Config::single(server.url()).service_name(name)).unwrap()
}

/// The service a token names (empty for a token that names none).
fn service_of(token: &str) -> String {
    Identity::of_token(token)
        .process()
        .map(|process| process.service.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_name_the_holder_and_the_waiters_and_free_the_key_safely() {
    let server = RedisServer::start();
    let (a, b, c, e) = (
        service(&server, "shop-a"),
        service(&server, "shop-b"),
        service(&server, "shop-c"),
        service(&server, "shop-e"),
    );
    // D's waits are recorded for the wait-for graph after 50 ms (the default is a second).
    let d = LockClient::new(
        Config::single(server.url())
            .service_name("shop-d")
            .deadlock_detection(Duration::from_millis(50)),
    )
    .unwrap();
    let started = SystemTime::now();
    // A's body hangs while the watchdog renews its lease (every third of its ttl).
    let held = a
        .lock("stock:42")
        .ttl(Duration::from_millis(1500))
        .acquire()
        .await
        .unwrap();
    let mut waiters = Vec::new();
    for client in [&b, &c] {
        let lock = client.lock("stock:42").wait(Duration::from_secs(30));
        waiters.push(tokio::spawn(async move { lock.acquire().await }));
        server.until_queued("stock:42", waiters.len()).await;
    }
    // D holds `user:7` in a guarded body and waits for `stock:42` in it.
    let d_task = {
        let d = d.clone();
        tokio::spawn(async move {
            let user = d.lock("user:7");
            user.run(async {
                let stock = d.lock("stock:42").wait(Duration::from_secs(30));
                stock.run(async { Ok::<_, LockError>(()) }).await
            })
            .await
        })
    };
    server.until_queued("stock:42", 3).await;

    // Who holds it, since when, and whether it still renews.
    let state = e.inspect("stock:42").await.unwrap();
    let holder = state.holder().expect("held");
    assert_eq!(holder.token, held.token());
    let process = holder
        .identity()
        .process()
        .cloned()
        .expect("a process of ours");
    assert_eq!(process.service, "shop-a");
    assert_eq!(process.pid, std::process::id());
    assert!(process.function.starts_with("incident.rs:"), "{process:?}");
    assert!(!process.host.is_empty());
    assert!(
        process.since >= started - Duration::from_secs(1),
        "{process:?}"
    );
    assert!(holder.since_renewal().unwrap() <= Duration::from_millis(1500));
    // Who waits: B, C, and D, which holds `user:7` meanwhile.
    let waiting: Vec<String> = state.waiters.iter().map(|w| service_of(&w.id)).collect();
    assert_eq!(waiting, ["shop-b", "shop-c", "shop-d"], "{state}");
    let d_waits = state.waiters[2].identity().process().cloned().unwrap();
    assert!(d_waits.function.starts_with("incident.rs:"), "{d_waits:?}");
    let text = state.to_string();
    assert!(text.contains("by "), "{text}");
    assert!(text.contains(" shop-a `incident.rs:"), "{text}");
    assert!(text.contains(" shop-d `incident.rs:"), "{text}");
    // D holds `user:7` while it waits for `stock:42`: the holder of `user:7` says so.
    let mut user_state = e.inspect("user:7").await.unwrap();
    for _ in 0..500 {
        if user_state.holder().is_some_and(|h| h.waits_for.is_some()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        user_state = e.inspect("user:7").await.unwrap();
    }
    let user_holder = user_state.holder().unwrap();
    assert_eq!(service_of(&user_holder.token), "shop-d");
    assert_eq!(
        user_holder.waits_for.as_deref(),
        Some("stock:42"),
        "{user_state}"
    );
    assert!(
        user_state.to_string().contains("waits for stock:42"),
        "{user_state}"
    );
    // ... and D's place in the queue of `stock:42` says what D holds meanwhile.
    let mut d_holds = Vec::new();
    for _ in 0..500 {
        let state = e.inspect("stock:42").await.unwrap();
        let d = state.waiters.iter().find(|w| service_of(&w.id) == "shop-d");
        d_holds = d.map(|w| w.holds.clone()).unwrap_or_default();
        if !d_holds.is_empty() {
            assert!(
                state.to_string().contains("holds user:7 meanwhile"),
                "{state}"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(d_holds, ["user:7"]);

    // E's wait runs out: its error names A and how long A has held the key.
    let err = e
        .lock("stock:42")
        .wait(Duration::from_millis(200))
        .acquire()
        .await
        .unwrap_err();
    let LockError::Timeout {
        holder: Some(seen), ..
    } = &err
    else {
        panic!("a timeout that names the holder: {err:?}");
    };
    assert_eq!(seen.token, held.token());
    assert_eq!(seen.identity.process().unwrap().service, "shop-a");
    let message = err.to_string();
    assert!(
        message.contains("stock:42") && message.contains("shop-a"),
        "{message}"
    );
    assert!(message.contains("through the whole wait"), "{message}");

    // A renews, so its process listens for notices; a stale token is refused.
    until_renewed(&server, held.token()).await;
    let stale = "lr-0000000000000000.0/1/1/1@h/s/f";
    let outcome = e.force_release_if("stock:42", stale).await.unwrap();
    assert!(
        matches!(outcome, CheckedRelease::NotHolder { .. }),
        "{outcome:?}"
    );
    assert_eq!(server.get("stock:42").as_deref(), Some(held.token()));
    // The token the engineer looked at releases it; A hears of it at once (not at its
    // next renewal, which would say the token is gone), and B gets the key.
    let outcome = e.force_release_if("stock:42", held.token()).await.unwrap();
    assert!(outcome.released().is_some(), "{outcome:?}");
    let cause = tokio::time::timeout(BOUND, held.lost()).await.unwrap();
    assert_eq!(cause, LostCause::ForceReleased);
    let first = tokio::time::timeout(BOUND, waiters.remove(0))
        .await
        .unwrap();
    let first = first.unwrap().unwrap();
    assert_eq!(service_of(first.token()), "shop-b");
    first.release().await.unwrap();
    for waiter in waiters {
        let guard = tokio::time::timeout(BOUND, waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        guard.release().await.unwrap();
    }
    tokio::time::timeout(BOUND, d_task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_holder_shows_as_foreign() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let _: () = redis::cmd("SET")
        .arg("session:abc")
        .arg("{\"user\":7}")
        .arg("PX")
        .arg(60_000)
        .query(&mut server.conn())
        .unwrap();
    let state = client.inspect("session:abc").await.unwrap();
    assert_eq!(state.holder().unwrap().identity(), Identity::Foreign);
    assert!(state.to_string().contains("by a foreign client"), "{state}");
    let err = client
        .lock("session:abc")
        .wait(Duration::from_millis(100))
        .acquire()
        .await
        .unwrap_err();
    let LockError::Timeout {
        holder: Some(seen), ..
    } = &err
    else {
        panic!("a timeout that names the holder: {err:?}");
    };
    assert_eq!(seen.identity, Identity::Foreign);
    assert!(
        err.to_string().contains("not a lock of this crate"),
        "{err}"
    );
}

/// Waits (bounded) until the client that holds `token` listens on its notice channel: it
/// does once it has renewed a lease.
async fn until_renewed(server: &RedisServer, token: &str) {
    let id = token
        .strip_prefix("lr-")
        .and_then(|rest| rest.split('.').next())
        .unwrap();
    let channel = format!("{}{id}", lock_tests::NOTICE_CHANNEL);
    for _ in 0..1000 {
        let (_, subscribers): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query(&mut server.conn())
            .unwrap();
        if subscribers > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the holder's client never listened on {channel}");
}

/// The names of the connections `CLIENT LIST` shows on `server`.
fn connection_names(server: &RedisServer) -> Vec<String> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.conn())
        .unwrap();
    list.lines()
        .filter_map(|line| {
            line.split(' ')
                .find_map(|field| field.strip_prefix("name="))
        })
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connections_carry_the_holders_name_on_one_server_and_on_every_master() {
    let server = RedisServer::start();
    let client = service(&server, "shop-a");
    let guard = client.lock("named:1").acquire().await.unwrap();
    let token = guard.token().to_owned();
    let process = Identity::of_token(&token).process().cloned().unwrap();
    let id = token
        .strip_prefix("lr-")
        .unwrap()
        .split('.')
        .next()
        .unwrap();
    let name = format!("lr-{id}/{}@{}/shop-a", process.pid, process.host);
    // Sent beside the connection's first request: there by the time it is polled for.
    let named = |server: &RedisServer, wanted: &dyn Fn(&str) -> bool| {
        (0..500).any(|_| {
            let found = connection_names(server).iter().any(|name| wanted(name));
            found || {
                std::thread::sleep(Duration::from_millis(5));
                false
            }
        })
    };
    assert!(
        named(&server, &|found| found == name),
        "{name} not in {:?}",
        connection_names(&server)
    );
    guard.release().await.unwrap();

    let masters: Vec<_> = (0..3).map(|_| RedisServer::start()).collect();
    let config = Config::redlock(masters.iter().map(RedisServer::url)).service_name("shop-r");
    let redlock = LockClient::new(config).unwrap();
    let guard = redlock.lock("named:2").acquire().await.unwrap();
    let id = guard
        .token()
        .strip_prefix("lr-")
        .unwrap()
        .split('.')
        .next()
        .unwrap()
        .to_owned();
    let ours = |name: &str| name.starts_with(&format!("lr-{id}/")) && name.ends_with("/shop-r");
    for master in &masters {
        assert!(named(master, &ours), "{:?}", connection_names(master));
    }
    guard.release().await.unwrap();
}
