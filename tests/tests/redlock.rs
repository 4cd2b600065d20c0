//! Redlock mode on real, independent redis-server masters started by the harness.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, LostCause, ReleaseOutcome};
use lock_tests::proxy::{Direction, FaultProxy};
use lock_tests::{Overlaps, RedisServer};

fn masters(count: usize) -> Vec<RedisServer> {
    (0..count).map(|_| RedisServer::start()).collect()
}

fn redlock_client(urls: impl IntoIterator<Item = String>) -> LockClient {
    LockClient::new(
        Config::redlock(urls)
            .connect_timeout(Duration::from_millis(300))
            .response_timeout(Duration::from_millis(500)),
    )
    .unwrap()
}

fn client_for(servers: &[RedisServer]) -> LockClient {
    redlock_client(servers.iter().map(RedisServer::url))
}

fn holders(servers: &[RedisServer], key: &str) -> Vec<Option<String>> {
    servers.iter().map(|server| server.get(key)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_held_on_every_master_and_released_on_all() {
    let servers = masters(3);
    let client = client_for(&servers);
    let guard = client.lock("order:1").acquire().await.unwrap();
    let token = Some(guard.token().to_owned());
    assert_eq!(holders(&servers, "order:1"), vec![token.clone(); 3]);
    assert!(client.is_locked("order:1").await.unwrap());
    let other = client
        .lock("order:1")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(other, LockError::Busy { .. }), "{other:?}");
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(holders(&servers, "order:1"), vec![None; 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_three_down_still_acquires() {
    let mut servers = masters(3);
    servers[2].kill9();
    let client = client_for(&servers);
    let guard = client.lock("k").acquire().await.unwrap();
    assert_eq!(
        holders(&servers[..2], "k"),
        vec![Some(guard.token().to_owned()); 2]
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_down_still_acquires() {
    let mut servers = masters(5);
    servers[0].kill9();
    servers[3].kill9();
    let client = client_for(&servers);
    let guard = client.lock("k").acquire().await.unwrap();
    let live: Vec<_> = [1, 2, 4]
        .iter()
        .map(|&index| servers[index].get("k"))
        .collect();
    assert_eq!(live, vec![Some(guard.token().to_owned()); 3]);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_down_fails_clearly_and_leaves_no_key() {
    let mut servers = masters(3);
    servers[0].kill9();
    servers[1].kill9();
    let client = client_for(&servers);
    let err = client
        .lock("k")
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap_err();
    match &err {
        LockError::NoQuorum {
            key,
            answered,
            needed,
            nodes,
            ..
        } => {
            assert_eq!((key.as_str(), *answered, *needed, *nodes), ("k", 1, 2, 3));
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    assert!(err.to_string().contains("quorum needs 2"), "{err}");
    assert_eq!(
        servers[2].get("k"),
        None,
        "a key was left on the live master"
    );
    assert_eq!(servers[2].dbsize(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_master_beyond_the_node_timeout_is_outvoted() {
    let servers = masters(3);
    let proxy = FaultProxy::start(servers[2].port());
    proxy.set_delay(Direction::Down, Duration::from_millis(400));
    let client = redlock_client([servers[0].url(), servers[1].url(), proxy.url()]);
    let guard = client
        .lock("slow")
        .ttl(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    assert!(!guard.is_lost());
    assert_eq!(servers[0].get("slow").as_deref(), Some(guard.token()));
    guard.release().await.unwrap();
}

/// Three masters, each behind a fault proxy, and a Redlock client on the proxies whose
/// connections and script caches are warmed with one cycle on `key`.
async fn proxied_masters(
    node_timeout: Duration,
    key: &str,
) -> (Vec<RedisServer>, Vec<FaultProxy>, LockClient) {
    let servers = masters(3);
    let proxies: Vec<_> = servers
        .iter()
        .map(|server| FaultProxy::start(server.port()))
        .collect();
    let client = LockClient::new(
        Config::redlock(proxies.iter().map(FaultProxy::url)).node_timeout(node_timeout),
    )
    .unwrap();
    client
        .lock(key)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    (servers, proxies, client)
}

/// Polls (every 10 ms, `polls` times at most) until no master holds `key`; the index of
/// the first master that still does, or `None`.
async fn still_held_on(servers: &[RedisServer], key: &str, polls: usize) -> Option<usize> {
    for _ in 0..polls {
        if servers.iter().all(|server| server.get(key).is_none()) {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    servers.iter().position(|server| server.get(key).is_some())
}

/// A failed round gives its grants back on every master, also on those whose reply was
/// lost: there the grant landed although the client saw only a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_round_gives_back_grants_whose_replies_were_lost() {
    let (servers, proxies, client) =
        proxied_masters(Duration::from_millis(200), "lost-replies").await;
    // Masters 0 and 1 execute what they get but their replies never come back.
    for proxy in &proxies[..2] {
        proxy.set_blackhole(Direction::Down, true);
    }
    let ttl = Duration::from_secs(30);
    let err = client
        .lock("lost-replies")
        .ttl(ttl)
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("lost-replies"), "{err}");
    if let Some(index) = still_held_on(&servers, "lost-replies", 250).await {
        panic!(
            "master {index} kept the failed round's grant (pttl {} of a {ttl:?} lease)",
            servers[index].pttl("lost-replies")
        );
    }
}

/// The validity is `ttl − elapsed − drift` from the send time: grants that come back after
/// it acquire nothing, and are given back on every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_that_arrive_after_the_validity_acquire_nothing() {
    let (servers, proxies, client) = proxied_masters(Duration::from_secs(1), "late").await;
    for proxy in &proxies[..2] {
        proxy.set_delay(Direction::Down, Duration::from_millis(250));
    }
    let err = client
        .lock("late")
        .ttl(Duration::from_millis(200))
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    for proxy in &proxies {
        proxy.set_delay(Direction::Down, Duration::ZERO);
    }
    // Whatever was granted late was released (or expired by its 200 ms lease).
    assert_eq!(still_held_on(&servers, "late", 100).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_counts_a_quorum() {
    let servers = masters(3);
    let client = client_for(&servers);
    let guard = client
        .lock("renewed")
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    // One master loses the key: a majority still renews it.
    let _: () = redis::cmd("DEL")
        .arg("renewed")
        .query(&mut servers[0].conn())
        .unwrap();
    let still_held = tokio::time::timeout(Duration::from_millis(1500), guard.lost()).await;
    assert!(still_held.is_err(), "lost with a majority still holding it");
    // A second master loses it: no quorum is left.
    let _: () = redis::cmd("DEL")
        .arg("renewed")
        .query(&mut servers[1].conn())
        .unwrap();
    let cause = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("the quorum loss was not noticed");
    assert_eq!(cause, LostCause::TokenGone);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_is_refused_in_redlock_mode() {
    let servers = masters(3);
    let client = client_for(&servers);
    let err = client
        .lock("fenced")
        .fencing(true)
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Config { reason } if reason.contains("fencing")),
        "{err:?}"
    );
}

/// The known-unsafe case, as a tested fact: a master that restarts empty at once (no
/// persistence, no delay) can hand a second owner the majority while the first still holds
/// the lock. Restarting it only after the longest ttl (the documented remedy) prevents it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_immediate_restart_without_persistence_allows_a_second_holder() {
    let outcome = restart_scenario(Duration::ZERO).await;
    assert!(outcome.both_held, "the unsafe setup did not reproduce");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_restart_prevents_the_second_holder() {
    let outcome = restart_scenario(Duration::from_millis(1200)).await;
    assert!(
        !outcome.both_held,
        "a second holder while the first was valid"
    );
    // While the master stays down, A's lease still stands on a majority: B is refused.
    assert_eq!(outcome.refused_while_down, Some(true));
    // After the delay A's lease has run out, and B gets the lock: the remedy costs only
    // the wait.
    assert!(
        outcome.b_acquired,
        "B was refused after the delayed restart"
    );
}

struct Outcome {
    both_held: bool,
    /// With a delay: whether B was refused while the master was down and A still valid.
    refused_while_down: Option<bool>,
    b_acquired: bool,
}

/// A takes the lock on masters 0 and 1 while master 2 is unreachable; master 0 crashes and
/// comes back empty after `restart_delay`; B then asks, with master 2 reachable again.
async fn restart_scenario(restart_delay: Duration) -> Outcome {
    let mut servers = masters(3);
    let proxy = FaultProxy::start(servers[2].port());
    let urls = [servers[0].url(), servers[1].url(), proxy.url()];
    let client_a = redlock_client(urls.clone());
    let client_b = redlock_client(urls);
    let ttl = Duration::from_secs(1);

    proxy.set_blackhole(Direction::Up, true);
    let a = client_a
        .lock("job")
        .ttl(ttl)
        .watchdog(false)
        .acquire()
        .await
        .unwrap();
    proxy.set_blackhole(Direction::Up, false);
    proxy.reset_all();

    servers[0].kill9();
    let mut refused_while_down = None;
    if !restart_delay.is_zero() {
        let early = client_b
            .lock("job")
            .ttl(ttl)
            .wait(Duration::ZERO)
            .acquire()
            .await;
        assert!(!a.is_lost(), "A's lease ran out before B's early try");
        refused_while_down = Some(early.is_err());
        if let Ok(early) = early {
            early.release().await.unwrap();
        }
        tokio::time::sleep(restart_delay).await;
    }
    servers[0].restart();

    let b = client_b
        .lock("job")
        .ttl(ttl)
        .wait(Duration::ZERO)
        .acquire()
        .await;
    let both_held = b.is_ok() && !a.is_lost();
    let b_acquired = b.is_ok();
    if let Ok(b) = b {
        b.release().await.unwrap();
    }
    drop(a);
    Outcome {
        both_held,
        refused_while_down,
        b_acquired,
    }
}

/// The local level applies in Redlock mode too: 8 tasks of one process taking a key 10 times
/// each pass the lock between them, so the masters run far fewer script calls than
/// acquisitions (a round through Redis is a script call per master to acquire and another
/// to release), and no two bodies overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_one_process_pass_the_lock_without_the_masters() {
    let servers = masters(3);
    let client = client_for(&servers);
    client
        .lock("pass")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    for server in &servers {
        server.reset_stats();
    }
    let overlaps = Overlaps::default();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (client, overlaps) = (client.clone(), overlaps.clone());
            tokio::spawn(async move {
                for _ in 0..10 {
                    let guard = client.lock("pass").acquire().await.unwrap();
                    let inside = overlaps.enter();
                    tokio::time::sleep(Duration::from_micros(500)).await;
                    drop(inside);
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let scripts: u64 = servers
        .iter()
        .map(|server| server.calls("evalsha") - server.failed_calls("evalsha"))
        .sum();
    println!("80 acquisitions on 3 masters: {scripts} script calls");
    assert_eq!(overlaps.count(), 0, "two bodies overlapped");
    assert!(
        scripts < 80,
        "{scripts} script calls for 80 acquisitions: no local passing"
    );
    assert_eq!(holders(&servers, "pass"), vec![None; 3]);
}

/// With a majority of the masters refusing connections, a call with a long wait fails at
/// once with `NoQuorum` naming each master and why, instead of retrying rounds until the
/// wait runs out; with one of three down it still acquires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_majority_fails_fast_even_with_a_long_wait() {
    let mut servers = masters(3);
    servers[1].kill9();
    servers[2].kill9();
    let client = client_for(&servers);
    let started = tokio::time::Instant::now();
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        client.lock("k").wait(Duration::from_secs(60)).acquire(),
    )
    .await
    .expect("the call kept retrying rounds")
    .unwrap_err();
    let took = started.elapsed();
    println!("FIGURE redlock-no-majority: NoQuorum after {took:?} with wait 60 s: {err}");
    assert!(matches!(err, LockError::NoQuorum { .. }), "{err:?}");
    for server in &servers[1..] {
        assert!(
            err.to_string().contains(&server.port().to_string()),
            "{err} does not name {}",
            server.url()
        );
    }
    assert!(took < Duration::from_secs(2), "NoQuorum took {took:?}");
    servers[1].restart();
    let guard = client
        .lock("k")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap_or_else(|err| panic!("with 2 of 3 masters up again: {err}"));
    guard.release().await.unwrap();
}

/// Redlock waiters are woken by the releases' messages (one subscription per key per
/// master), not by a backoff poll. While one client holds a key for 500 ms, three others
/// wait: each tries once, subscribes, tries once more and parks until the release; a
/// backoff poll (5, 10, 20 ... 200 ms) makes about seven rounds each meanwhile. After the
/// release the three take the key one after another, alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_waiters_are_woken_by_releases() {
    let servers = masters(3);
    let clients: Vec<_> = (0..4).map(|_| client_for(&servers)).collect();
    for client in &clients {
        client
            .lock("warm")
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let held = clients[0].lock("contended").acquire().await.unwrap();
    for server in &servers {
        server.reset_stats();
    }
    let overlaps = Overlaps::default();
    let waiters: Vec<_> = clients[1..]
        .iter()
        .map(|client| {
            let (client, overlaps) = (client.clone(), overlaps.clone());
            tokio::spawn(async move {
                let guard = client
                    .lock("contended")
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .unwrap();
                let inside = overlaps.enter();
                tokio::time::sleep(Duration::from_millis(20)).await;
                drop(inside);
                guard.release().await.unwrap();
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Every round of tries runs one SET NX on each master.
    let rounds = servers[0].calls("set");
    held.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    let after = servers[0].calls("set") - rounds;
    println!(
        "FIGURE redlock-wakeups: 3 waiters behind a 500 ms hold made {rounds} rounds during \
         it (a backoff poll: about 21), {after} after the release for their 3 acquisitions"
    );
    assert_eq!(overlaps.count(), 0, "two bodies overlapped");
    assert!(
        rounds <= 6,
        "{rounds} rounds while the key was held: the waiters poll instead of being woken"
    );
}
