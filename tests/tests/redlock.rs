//! Redlock mode on real, independent redis-server masters started by the harness.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, LockState, LostCause, ReleaseOutcome};
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
    // Asks every master, which opens every connection: the acquire's round then reaches
    // all three at once. (A round ends once a majority granted; a master whose connection
    // is still opening then gets no grant, as designed.)
    assert!(!client.is_locked("order:1").await.unwrap());
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
    // A release returns once a majority released; the last master's may still be on its
    // way (under load it trailed, and the test's first round met the warm-up's token there).
    assert_eq!(still_held_on(&servers, key, 200).await, None);
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

/// The fence counter of `key` on one master.
fn fence_counter(server: &RedisServer, key: &str) -> Option<u64> {
    server
        .get(&format!("~lock/fence{{{key}}}"))
        .map(|value| value.parse().unwrap())
}

/// Takes `key` with fencing through `client` and releases it; its fence.
async fn fenced_cycle(client: &LockClient, key: &str) -> u64 {
    let guard = client.lock(key).fencing(true).acquire().await.unwrap();
    let fence = guard.fence().expect("no fence with fencing on");
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    fence
}

/// Fencing in Redlock mode: the token is the largest fence of the masters that granted
/// the lock, raised on a majority before it is handed out, so tokens strictly increase
/// from holder to holder, across processes (two clients taking turns).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_fences_strictly_increase_across_holders() {
    let servers = masters(3);
    let clients = [client_for(&servers), client_for(&servers)];
    let mut last = 0;
    for round in 0..40 {
        let fence = fenced_cycle(&clients[round % 2], "fenced").await;
        assert!(fence > last, "round {round}: fence {fence} after {last}");
        last = fence;
    }
    // The holder's token was raised on a majority of the masters (a master whose grant came
    // after the round was decided may have issued a greater fence, unused: under load one
    // was seen ahead of the last token).
    let raised = servers
        .iter()
        .filter(|server| fence_counter(server, "fenced").is_some_and(|counter| counter >= last))
        .count();
    assert!(
        raised >= 2,
        "the last token {last} was raised on {raised} of 3 masters"
    );
}

/// A master whose counter runs far ahead (its clock, or fences it issued alone) makes a
/// holder's token large; with that master down (a minority failure) the next holder is
/// granted by the two others, which the first holder raised: its token is larger still.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_fences_increase_with_a_master_down() {
    let mut servers = masters(3);
    let client = client_for(&servers);
    let ahead: u64 = 4_000_000_000_000_000;
    let _: () = redis::cmd("SET")
        .arg("~lock/fence{ahead}")
        .arg(ahead)
        .query(&mut servers[2].conn())
        .unwrap();
    let first = fenced_cycle(&client, "ahead").await;
    assert!(first > ahead, "the token {first} is not the largest fence");
    servers[2].kill9();
    let second = fenced_cycle(&client, "ahead").await;
    println!("FIGURE redlock-fence-minority: {first} then {second} with the leading master down");
    assert!(
        second > first,
        "fence {second} after {first} with one master down"
    );
}

/// A master restarting empty (no persistence) loses its counter: the next holder's token
/// still exceeds the last one, through the majority it shares with the last holder (which
/// raised it) and the counter's seed from the server clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_fences_increase_across_an_empty_restart() {
    let mut servers = masters(3);
    let client = client_for(&servers);
    let ahead: u64 = 4_000_000_000_000_000;
    let _: () = redis::cmd("SET")
        .arg("~lock/fence{restart}")
        .arg(ahead)
        .query(&mut servers[0].conn())
        .unwrap();
    let mut last = fenced_cycle(&client, "restart").await;
    for (restarted, server) in servers.iter_mut().enumerate() {
        server.restart();
        assert_eq!(fence_counter(server, "restart"), None);
        let fence = fenced_cycle(&client, "restart").await;
        assert!(
            fence > last,
            "fence {fence} after {last} once master {restarted} restarted empty"
        );
        last = fence;
    }
}

/// Tasks of one process passing a fenced lock between them (the local level) each get a
/// fresh fence from the masters, strictly above the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_fences_increase_across_local_passes() {
    let servers = masters(3);
    let client = client_for(&servers);
    let fences = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (client, fences) = (client.clone(), fences.clone());
            tokio::spawn(async move {
                for _ in 0..10 {
                    let guard = client.lock("passed").fencing(true).acquire().await.unwrap();
                    fences.lock().unwrap().push(guard.fence().unwrap());
                    tokio::time::sleep(Duration::from_micros(300)).await;
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let fences = fences.lock().unwrap();
    assert_eq!(fences.len(), 40);
    for pair in fences.windows(2) {
        assert!(pair[1] > pair[0], "fence {} after {}", pair[1], pair[0]);
    }
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
        .map(|server| server.script_calls() - server.failed_script_calls())
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

/// A round that hears fewer masters than a majority while one master is down says little of
/// the others: one starved for a moment (a busy machine) misses the node timeout, and the
/// round fails for want of a majority. Such a round is tried again at once, as a round
/// that heard no master is; the second, which the starved master answers, takes the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_short_of_a_majority_is_tried_once_more() {
    let node_timeout = Duration::from_millis(400);
    let (servers, proxies, client) = proxied_masters(node_timeout, "k").await;
    // The first master silent for good; the second slow for a moment: its first request
    // after this reaches it past the first round's node timeout (the requests behind it
    // wait for it, as on a starved server), well within the second round's.
    proxies[0].set_blackhole(Direction::Up, true);
    proxies[1].set_delay(Direction::Up, node_timeout * 3 / 2);
    let before = proxies[1].requests();
    let acquire = tokio::spawn({
        let client = client.clone();
        async move {
            let lock = client.lock("k").ttl(Duration::from_secs(5));
            lock.wait(Duration::from_secs(5)).acquire().await
        }
    });
    let reached = lock_tests::until(Duration::from_secs(5), Duration::from_millis(1), || {
        proxies[1].requests() > before
    })
    .await;
    assert!(
        reached.is_some(),
        "the first round never reached the second master"
    );
    proxies[1].set_delay(Direction::Up, Duration::ZERO);
    let guard = acquire
        .await
        .unwrap()
        .expect("the second round, which a majority answered, takes the lock");
    assert_eq!(servers[2].get("k").as_deref(), Some(guard.token()));
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

/// A round that hears no master at all says nothing of the masters: a client stalled past
/// the node timeout (a busy machine, a starved thread) reads no reply, and every master
/// seems silent at once. Such a round is tried again at once, and the second round, which
/// the masters answer, takes the lock. Two such rounds in a row fail with `NoQuorum`, long
/// before the wait ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_that_hears_no_master_is_tried_once_more() {
    let servers = masters(3);
    let node_timeout = Duration::from_millis(500);
    let client = warm_client(&servers, node_timeout, Duration::from_secs(4)).await;
    // Every master silent through the first round and into the second.
    let silent: Vec<Silenced<'_>> = servers.iter().map(Silenced::new).collect();
    let started = tokio::time::Instant::now();
    let acquire = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .lock("k")
                .wait(Duration::from_secs(5))
                .acquire()
                .await
        }
    });
    tokio::time::sleep(node_timeout + Duration::from_millis(100)).await;
    drop(silent);
    let guard = acquire
        .await
        .unwrap()
        .expect("the second round, which the masters answered, takes the lock");
    println!(
        "FIGURE redlock-unheard-round: acquired after {:?} (node timeout {node_timeout:?})",
        started.elapsed()
    );
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    // Silent for good: the second silent round is a verdict.
    let silent: Vec<Silenced<'_>> = servers.iter().map(Silenced::new).collect();
    let err = tokio::time::timeout(
        Duration::from_secs(8),
        client.lock("k").wait(Duration::from_secs(10)).acquire(),
    )
    .await
    .expect("the call kept retrying rounds")
    .unwrap_err();
    drop(silent);
    assert!(
        matches!(err, LockError::NoQuorum { answered: 0, .. }),
        "{err:?}"
    );
}

/// The same for a reader's share: a round of shares that hears no master (every master
/// silent past the node timeout, as a stalled client sees them) is asked once more at once,
/// and the reader takes its share in the second round, long before its wait ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_round_that_hears_no_master_is_tried_once_more() {
    let servers = masters(3);
    let node_timeout = Duration::from_millis(500);
    let client = warm_client(&servers, node_timeout, Duration::from_secs(4)).await;
    let warm = client.rw_lock("doc").read().await.unwrap();
    warm.release().await.unwrap();
    // Every master silent through the first round and into the second.
    let silent: Vec<Silenced<'_>> = servers.iter().map(Silenced::new).collect();
    let read = tokio::spawn({
        let client = client.clone();
        async move {
            let rw = client.rw_lock("doc").wait(Duration::from_secs(5));
            rw.read().await
        }
    });
    tokio::time::sleep(node_timeout + Duration::from_millis(100)).await;
    drop(silent);
    let reader = read
        .await
        .unwrap()
        .expect("the second round, which the masters answered, takes the share");
    assert_eq!(reader.release().await.unwrap(), ReleaseOutcome::Released);
}

/// A master stopped with SIGSTOP (a dead network path, a long stall: connections are
/// accepted, nothing is answered) until dropped, when it gets SIGCONT, so no test leaves a
/// server stopped, whatever fails.
struct Silenced<'a>(&'a RedisServer);

impl<'a> Silenced<'a> {
    fn new(server: &'a RedisServer) -> Self {
        server.signal("STOP");
        Silenced(server)
    }
}

impl Drop for Silenced<'_> {
    fn drop(&mut self) {
        self.0.signal("CONT");
    }
}

/// A Redlock client on `servers` with the given node and response timeouts, its connections
/// (commands and subscriptions) opened by one uncontended cycle and one wait.
async fn warm_client(
    servers: &[RedisServer],
    node_timeout: Duration,
    response_timeout: Duration,
) -> LockClient {
    let client = LockClient::new(
        Config::redlock(servers.iter().map(RedisServer::url))
            .node_timeout(node_timeout)
            .connect_timeout(Duration::from_secs(2))
            .response_timeout(response_timeout),
    )
    .unwrap();
    client
        .lock("warm")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    client
}

/// The channels with a subscriber on `server` (a client's notice channel, which lives as
/// long as the client, not counted).
fn subscribed_channels(server: &RedisServer) -> usize {
    lock_tests::lock_channels(&mut server.conn()).len()
}

/// One master of three silent (SIGSTOP): a waiter in another process gets the lock within
/// the node timeout (plus a margin for a loaded machine) of the holder's release, not after
/// the silent master's response timeout, and the release, answered by a quorum, reports
/// `Released`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_silent_master_delays_a_hand_over_by_the_node_timeout_at_most() {
    let servers = masters(3);
    let node_timeout = Duration::from_millis(100);
    let holder = warm_client(&servers, node_timeout, Duration::from_secs(2)).await;
    let waiter = warm_client(&servers, node_timeout, Duration::from_secs(2)).await;
    let _silent = Silenced::new(&servers[2]);
    for round in 0..3 {
        let guard = holder
            .lock("handover")
            .ttl(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap();
        let waiting = {
            let waiter = waiter.clone();
            tokio::spawn(async move {
                let guard = waiter
                    .lock("handover")
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await;
                (guard, tokio::time::Instant::now())
            })
        };
        // The waiter has subscribed on both live masters: it waits for a release message.
        let subscribed =
            lock_tests::until(Duration::from_secs(10), Duration::from_millis(5), || {
                servers[..2]
                    .iter()
                    .all(|server| subscribed_channels(server) > 0)
            })
            .await;
        assert!(subscribed.is_some(), "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let released_at = tokio::time::Instant::now();
        let outcome = guard.release().await;
        let release_took = released_at.elapsed();
        let (taken, taken_at) = waiting.await.unwrap();
        let taken = taken.unwrap_or_else(|err| panic!("round {round}: the waiter failed: {err}"));
        let hand_over = taken_at - released_at;
        println!(
            "FIGURE redlock-silent-master: round {round}: release {release_took:?} \
             ({outcome:?}), waiter took the lock {hand_over:?} after the release began \
             (node timeout {node_timeout:?}, response timeout 2 s)"
        );
        assert_eq!(
            outcome.unwrap(),
            ReleaseOutcome::Released,
            "a release answered by 2 of 3 masters"
        );
        assert!(
            hand_over < node_timeout + Duration::from_millis(500),
            "round {round}: the hand-over took {hand_over:?} with one master silent"
        );
        assert_eq!(taken.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

/// A silent majority (two of three masters SIGSTOPped) fails the call with `NoQuorum`
/// naming both once the round's node timeout has passed, well before the response timeout
/// (4 s here), even with a long wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_majority_fails_with_no_quorum_after_the_node_timeout() {
    let servers = masters(3);
    let node_timeout = Duration::from_millis(100);
    let client = warm_client(&servers, node_timeout, Duration::from_secs(4)).await;
    let silent = [Silenced::new(&servers[1]), Silenced::new(&servers[2])];
    let started = tokio::time::Instant::now();
    let err = tokio::time::timeout(
        Duration::from_secs(20),
        client.lock("k").wait(Duration::from_secs(10)).acquire(),
    )
    .await
    .expect("the call kept retrying rounds")
    .unwrap_err();
    let took = started.elapsed();
    println!(
        "FIGURE redlock-silent-majority: NoQuorum after {took:?} (node timeout {node_timeout:?}, \
         response timeout 4 s, wait 10 s): {err}"
    );
    assert!(matches!(err, LockError::NoQuorum { .. }), "{err:?}");
    for server in &servers[1..] {
        assert!(
            err.to_string().contains(&server.port().to_string()),
            "{err} does not name {}",
            server.url()
        );
    }
    assert!(
        took < Duration::from_millis(1500),
        "NoQuorum took {took:?}: it waited for the response timeout"
    );
    drop(silent);
    assert_eq!(
        servers[0].get("k"),
        None,
        "a key was left on the live master"
    );
}

/// The second known-unsafe case: a clock jump on one master (simulated by shortening the
/// holder's key there with `PEXPIRE`, which is what a master whose clock jumps forward
/// does to it) lets a second owner acquire while a holder that has 2 of 3 masters still
/// holds the lock. The first is told `Lost` at its next renewal (up to a third of the ttl
/// later); fencing is the remedy: the second holder's token is larger, so storage that
/// checks it refuses the first holder's writes meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_jump_on_one_master_allows_a_second_holder_until_the_first_is_told_lost() {
    let servers = masters(3);
    let proxy = FaultProxy::start(servers[2].port());
    let urls = [servers[0].url(), servers[1].url(), proxy.url()];
    let client_a = redlock_client(urls.clone());
    let client_b = redlock_client(urls);
    let ttl = Duration::from_secs(2);
    // A takes the lock on masters 0 and 1 while master 2 is unreachable.
    proxy.set_blackhole(Direction::Up, true);
    let a = client_a
        .lock("clock")
        .ttl(ttl)
        .fencing(true)
        .acquire()
        .await
        .unwrap();
    proxy.set_blackhole(Direction::Up, false);
    proxy.reset_all();
    assert_eq!(servers[2].get("clock"), None);
    // Master 0's clock jumps: A's key there expires at once.
    let _: () = redis::cmd("PEXPIRE")
        .arg("clock")
        .arg(1)
        .query(&mut servers[0].conn())
        .unwrap();
    let gone = lock_tests::until(Duration::from_secs(2), Duration::from_millis(1), || {
        servers[0].get("clock").is_none()
    })
    .await;
    assert!(gone.is_some(), "the shortened key did not expire");
    let b = client_b
        .lock("clock")
        .ttl(ttl)
        .fencing(true)
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("the clock jump did not let a second owner in");
    let both_from = tokio::time::Instant::now();
    assert!(!a.is_lost(), "A was told Lost before B acquired");
    let cause = tokio::time::timeout(Duration::from_secs(10), a.lost())
        .await
        .expect("A was never told Lost");
    let both_for = both_from.elapsed();
    println!(
        "FIGURE redlock-clock-jump: a second holder acquired while the first held 2 of 3 \
         masters; the first was told Lost ({cause}) {both_for:?} later (ttl {ttl:?}, renewal \
         every ttl/3); fences {:?} then {:?}",
        a.fence(),
        b.fence()
    );
    assert_eq!(cause, LostCause::TokenGone);
    assert!(
        b.fence() > a.fence(),
        "fencing: the second token is not larger"
    );
    b.release().await.unwrap();
    drop(a);
}

/// Three masters that keep their keys across a restart (AOF), as a restarted production
/// master does, and a client on them.
fn persistent_masters() -> (Vec<RedisServer>, LockClient) {
    let persistent = ["--appendonly", "yes", "--appendfsync", "always"];
    let servers: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_with(&persistent))
        .collect();
    // Each write waits for its fsync (`appendfsync always`), which a busy disk can hold
    // past the suite's 500 ms response timeout: a live master's late reply would leave
    // the release one confirmation short of the majority.
    let client = LockClient::new(
        Config::redlock(servers.iter().map(RedisServer::url))
            .connect_timeout(Duration::from_millis(300))
            .response_timeout(Duration::from_secs(3)),
    )
    .unwrap();
    (servers, client)
}

/// Kills master 0 while `key` holds `token` on every master, gives the lease back with
/// `release` (the two live masters release it), restarts the master and checks that the
/// release reaches it too within its budget: its copy of the token does not stay until
/// its ttl (30 s), where it would block the key should another master fail.
async fn a_master_back_soon_gets_the_release(
    servers: &mut [RedisServer],
    key: &str,
    token: &str,
    release: impl std::future::Future<Output = Result<ReleaseOutcome, LockError>>,
) {
    let _: () = redis::cmd("SET")
        .arg("marker")
        .arg(1)
        .query(&mut servers[0].conn())
        .unwrap();
    // Every master holds the token before one goes down. An acquire's round ends once a
    // majority granted (plus a short grace), so on a busy machine a master whose write
    // waits for its fsync may get no grant: it gets the token here, as its late grant
    // would have given it (this test is about the release, not the acquire).
    let token = Some(token.to_owned());
    let on_all = lock_tests::until(Duration::from_secs(2), Duration::from_millis(5), || {
        holders(servers, key) == vec![token.clone(); 3]
    })
    .await;
    if on_all.is_none() {
        for server in servers.iter() {
            let _: () = redis::cmd("SET")
                .arg(key)
                .arg(token.as_deref())
                .arg("PX")
                .arg(30_000)
                .query(&mut server.conn())
                .unwrap();
        }
    }
    assert_eq!(holders(servers, key), vec![token.clone(); 3]);
    servers[0].kill9();
    let before = holders(&servers[1..], key);
    let released = release.await.unwrap();
    assert_eq!(
        released,
        ReleaseOutcome::Released,
        "the two live masters held {before:?} before the release, {:?} after",
        holders(&servers[1..], key)
    );
    assert_eq!(holders(&servers[1..], key), vec![None, None]);
    servers[0].restart();
    assert_eq!(
        servers[0].get("marker").as_deref(),
        Some("1"),
        "the restarted master lost its keys (no AOF?)"
    );
    // The ttl is 30 s: only the release can take the key away within the bound.
    for _ in 0..300 {
        if servers[0].get(key).is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the master back from its restart kept the released token at {key}");
}

/// A master that is down when a lock is released (the majority released it) and back
/// within the release's budget gets the release too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_back_soon_after_a_release_gets_it_too() {
    let (mut servers, client) = persistent_masters();
    // Every connection open first (see a_lock_is_held_on_every_master_and_released_on_all).
    assert!(!client.is_locked("back-soon").await.unwrap());
    let guard = client
        .lock("back-soon")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let token = guard.token().to_owned();
    a_master_back_soon_gets_the_release(&mut servers, "back-soon", &token, guard.release()).await;
}

/// The same for a reader's share of a read-write lock: a master back soon after the share
/// was given back gets the give-back too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_back_soon_after_a_share_is_given_back_gets_it_too() {
    let (mut servers, client) = persistent_masters();
    assert!(!client.is_locked("back-soon-doc").await.unwrap());
    let rw = client.rw_lock("back-soon-doc").ttl(Duration::from_secs(30));
    let reader = rw.read().await.unwrap();
    let token = reader.token().to_owned();
    let share = format!("~lock/share/{token}{{back-soon-doc}}");
    a_master_back_soon_gets_the_release(&mut servers, &share, &token, reader.release()).await;
}

/// A round this process was too late to read is lost, not failed: with one master down,
/// the other two answer within the node timeout, but the client's runtime is blocked past
/// it (a starved process) and reads their answers late. The acquisition goes on and takes
/// the lock within its wait; counted as failures, the two late masters and the dead one
/// left no majority and the call failed at once with `NoQuorum`.
#[tokio::test]
async fn a_round_read_late_by_a_starved_client_is_tried_again() {
    let (mut servers, proxies, client) =
        proxied_masters(Duration::from_millis(100), "starved-round").await;
    servers[0].kill9();
    for proxy in &proxies[1..] {
        proxy.set_delay(Direction::Down, Duration::from_millis(30));
    }
    // This runtime's one thread, blocked 10 ms into the round, for 300 ms.
    let blocker = tokio::spawn(async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        std::thread::sleep(Duration::from_millis(300));
    });
    let guard = client
        .lock("starved-round")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    blocker.await.unwrap();
    for proxy in &proxies[1..] {
        proxy.set_delay(Direction::Down, Duration::ZERO);
    }
    guard.release().await.unwrap();
}

/// The operator's view in Redlock mode: `inspect` reads every master (each one's holder in
/// `masters`) and names the holder a majority holds; once only a minority holds the token,
/// nobody holds the lock. `force_release` clears every master and lists the holder once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_gives_the_majority_view_and_force_release_clears_every_master() {
    let servers = masters(3);
    let client = client_for(&servers);
    let guard = client
        .lock("report")
        .watchdog(false)
        .acquire()
        .await
        .unwrap();
    // The acquire returns once a majority granted; the last master's grant may still be on
    // its way.
    let token = Some(guard.token().to_owned());
    lock_tests::until(Duration::from_secs(5), Duration::from_millis(5), || {
        holders(&servers, "report") == vec![token.clone(); 3]
    })
    .await;
    let state = client.inspect("report").await.unwrap();
    let holder = state.holder().expect("a majority holds it");
    assert_eq!(holder.token, guard.token());
    assert!(holder.ttl.is_some_and(|ttl| ttl > Duration::from_secs(20)));
    assert_eq!(state.masters.len(), 3);
    for master in &state.masters {
        let held = master.as_ref().and_then(|master| master.holder());
        assert_eq!(held.map(|held| held.token.as_str()), Some(guard.token()));
    }
    assert!(state.to_string().contains("master 3  holder   "), "{state}");
    // Two masters of three lose the key: a minority is no holder.
    for server in &servers[..2] {
        let _: i64 = redis::cmd("DEL")
            .arg("report")
            .query(&mut server.conn())
            .unwrap();
    }
    let state = client.inspect("report").await.unwrap();
    assert!(
        !state.is_held(),
        "a minority was taken for the holder: {state}"
    );
    assert!(state.masters[2].as_ref().is_some_and(LockState::is_held));
    let released = client.force_release("report").await.unwrap();
    let removed: Vec<&str> = released.removed.iter().map(|h| h.token.as_str()).collect();
    assert_eq!(removed, [guard.token()]);
    assert_eq!(holders(&servers, "report"), vec![None; 3]);
    // With the masters down, none answers.
    drop(servers);
    let err = client.inspect("report").await.unwrap_err();
    assert!(
        matches!(err, LockError::NoQuorum { answered: 0, .. }),
        "{err:?}"
    );
}

/// `force_release` lists each holder it removed once, however many masters held it: with
/// every master holding the token, the report names it once and every master is cleared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_lists_a_holder_of_every_master_once() {
    let servers = masters(3);
    let client = client_for(&servers);
    let guard = client
        .lock("forced-everywhere")
        .watchdog(false)
        .acquire()
        .await
        .unwrap();
    // Every master holds the token: a master the round left out (a slow one on a busy
    // machine) is given it by hand.
    for server in &servers {
        let _: () = redis::cmd("SET")
            .arg("forced-everywhere")
            .arg(guard.token())
            .arg("PX")
            .arg(30_000)
            .query(&mut server.conn())
            .unwrap();
    }
    let token = Some(guard.token().to_owned());
    assert_eq!(holders(&servers, "forced-everywhere"), vec![token; 3]);
    let released = client.force_release("forced-everywhere").await.unwrap();
    let removed: Vec<&str> = released.removed.iter().map(|h| h.token.as_str()).collect();
    assert_eq!(removed, [guard.token()], "{released}");
    assert_eq!(holders(&servers, "forced-everywhere"), vec![None; 3]);
}

/// `inspect` reports the fence a majority of the masters' counters reached, not a number
/// that one master alone has: a counter raised far above the others (as a failed round
/// can leave one) is not the lock's fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reports_the_fence_a_majority_reached() {
    let servers = masters(3);
    let client = client_for(&servers);
    let fence = fenced_cycle(&client, "majority-fence").await;
    // A majority's counters reached the fence (a master left out of the round, a slow one
    // on a busy machine, may have none: the verdict is the majority's either way).
    let reached = lock_tests::until(Duration::from_secs(5), Duration::from_millis(5), || {
        let counted = servers
            .iter()
            .filter(|server| fence_counter(server, "majority-fence").is_some_and(|n| n >= fence))
            .count();
        counted >= 2
    })
    .await;
    assert!(
        reached.is_some(),
        "no majority of the masters counted the fence"
    );
    let outlier = fence + 1_000_000_000;
    let _: () = redis::cmd("SET")
        .arg("~lock/fence{majority-fence}")
        .arg(outlier)
        .query(&mut servers[0].conn())
        .unwrap();
    let state = client.inspect("majority-fence").await.unwrap();
    let reported = state.fence.expect("a majority has a fence");
    assert!(
        reported >= fence && reported < outlier,
        "inspect reported fence {reported} (granted {fence}, one master's outlier {outlier})"
    );
}

// ---------------------------------------------------------------------------------------
// The semaphore: each permit is a slot, a Redlock lock of its own.

/// The keys matching `pattern` on `server`.
fn keys_on(server: &RedisServer, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(pattern)
        .query(&mut server.conn())
        .unwrap()
}

/// Fails when a master still has a key that `held` says a holder left.
fn none_left(servers: &[RedisServer], held: impl Fn(&str) -> bool) {
    for server in servers {
        let keys = keys_on(server, "*");
        assert!(!keys.iter().any(|key| held(key)), "left behind: {keys:?}");
    }
}

/// The most holders inside at once, and how many entered in all.
#[derive(Default)]
struct Occupancy {
    inside: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    entered: std::sync::atomic::AtomicUsize,
}

impl Occupancy {
    fn enter(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.inside.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        self.entered.fetch_add(1, SeqCst);
    }

    fn leave(&self) {
        self.inside
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Two permits on three masters, eight tasks of two clients: never more than two holders
/// at once (a count of holders per master would let three in), and two do hold together;
/// the releases leave no key behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_on_independent_masters_never_admits_more_than_its_permits() {
    let servers = masters(3);
    let clients = [client_for(&servers), client_for(&servers)];
    let occupancy = std::sync::Arc::new(Occupancy::default());
    let mut tasks = Vec::new();
    for task in 0..8 {
        let (client, occupancy) = (clients[task % 2].clone(), occupancy.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let permit = client
                    .semaphore("pool", 2)
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
                    .unwrap();
                occupancy.enter();
                tokio::time::sleep(Duration::from_millis(15)).await;
                occupancy.leave();
                assert_eq!(permit.release().await.unwrap(), ReleaseOutcome::Released);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    use std::sync::atomic::Ordering::SeqCst;
    assert_eq!(occupancy.entered.load(SeqCst), 32);
    assert!(
        occupancy.most.load(SeqCst) <= 2,
        "{} holders at once with 2 permits",
        occupancy.most.load(SeqCst)
    );
    assert_eq!(
        occupancy.most.load(SeqCst),
        2,
        "the second permit was never used"
    );
    none_left(&servers, |key| {
        key.starts_with("~lock/permit/") || key == "pool"
    });
}

/// A full semaphore refuses a try-once caller with `Busy` naming the semaphore's key; a
/// permit's slot key holds its token on every master (`inspect` of the semaphore's own key
/// lists nothing there); more permits than a try can ask for in turn is a `Config` error
/// naming the bound; a released permit's slot is taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_semaphore_on_independent_masters_is_busy_and_its_slots_show_the_holders() {
    let servers = masters(3);
    let client = client_for(&servers);
    assert!(!client.is_locked("warm-up").await.unwrap());
    let first = client.semaphore("gate", 2).acquire().await.unwrap();
    let second = client.semaphore("gate", 2).acquire().await.unwrap();
    let busy = client.semaphore("gate", 2).try_acquire().await.unwrap_err();
    assert!(
        matches!(&busy, LockError::Busy { key } if key == "gate"),
        "{busy:?}"
    );
    let mut slots = Vec::new();
    for permit in [&first, &second] {
        assert_eq!(permit.key(), "gate");
        let slot = (0..2)
            .map(|index| format!("~lock/permit/{index}{{gate}}"))
            .find(|slot| servers[0].get(slot).as_deref() == Some(permit.token()))
            .unwrap_or_else(|| panic!("no slot holds {}", permit.token()));
        assert_eq!(
            holders(&servers, &slot),
            vec![Some(permit.token().to_owned()); 3]
        );
        slots.push(slot);
    }
    assert_ne!(slots[0], slots[1]);
    assert!(!client.inspect("gate").await.unwrap().is_held());
    let too_many = client
        .semaphore("gate", lock_runtime::MAX_REDLOCK_PERMITS + 1)
        .try_acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(&too_many, LockError::Config { reason }
            if reason.contains("gate") && reason.contains(&lock_runtime::MAX_REDLOCK_PERMITS.to_string())),
        "{too_many:?}"
    );
    first.release().await.unwrap();
    let third = client.semaphore("gate", 2).try_acquire().await.unwrap();
    third.release().await.unwrap();
    second.release().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// The read-write lock: each step on every master.

/// Readers and writers of two clients on three masters: a writer is never inside beside
/// anyone, readers are inside together; the key and every share are gone at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_on_independent_masters_excludes_every_reader_and_writer() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    #[derive(Default)]
    struct Room {
        readers: AtomicUsize,
        writers: AtomicUsize,
        violations: AtomicUsize,
        readers_together: AtomicUsize,
    }
    let servers = masters(3);
    let clients = [client_for(&servers), client_for(&servers)];
    let room = std::sync::Arc::new(Room::default());
    let mut tasks = Vec::new();
    for task in 0..8 {
        let (client, room) = (clients[task % 2].clone(), room.clone());
        tasks.push(tokio::spawn(async move {
            let rw = client.rw_lock("doc").wait(Duration::from_secs(20));
            for round in 0..4 {
                if (task + round) % 3 == 0 {
                    let guard = rw.write().await.unwrap();
                    if room.writers.fetch_add(1, SeqCst) > 0 || room.readers.load(SeqCst) > 0 {
                        room.violations.fetch_add(1, SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    room.writers.fetch_sub(1, SeqCst);
                    guard.release().await.unwrap();
                } else {
                    let guard = rw.read().await.unwrap();
                    if room.readers.fetch_add(1, SeqCst) > 0 {
                        room.readers_together.fetch_add(1, SeqCst);
                    }
                    if room.writers.load(SeqCst) > 0 {
                        room.violations.fetch_add(1, SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    room.readers.fetch_sub(1, SeqCst);
                    guard.release().await.unwrap();
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(room.violations.load(SeqCst), 0, "a writer beside someone");
    assert!(
        room.readers_together.load(SeqCst) > 0,
        "readers never shared the key"
    );
    none_left(&servers, |key| {
        key == "doc" || key.starts_with("~lock/share/")
    });
}

/// A reader's share is on every master; a writer that tries once meanwhile is `Busy` and
/// leaves the key to the reader; a writer that waits gets the key once the reader left,
/// and a reader that tries once while it writes is `Busy`. `inspect` lists the reader a
/// majority holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_a_writer_on_independent_masters_take_turns() {
    let servers = masters(3);
    let client = client_for(&servers);
    assert!(!client.is_locked("warm-up").await.unwrap());
    let rw = client.rw_lock("page");
    let reader = rw.read().await.unwrap();
    for server in &servers {
        let shares = keys_on(server, "~lock/share/*");
        assert_eq!(shares.len(), 1, "{shares:?}");
    }
    let state = client.inspect("page").await.unwrap();
    assert_eq!(state.holders.len(), 1, "{state:?}");
    assert_eq!(state.holders[0].kind, lock_runtime::HolderKind::Reader);
    let busy = client.rw_lock("page").try_write().await.unwrap_err();
    assert!(matches!(busy, LockError::Busy { .. }), "{busy:?}");
    assert_eq!(holders(&servers, "page"), vec![None; 3]);
    let writer = tokio::spawn({
        let rw = client.rw_lock("page").wait(Duration::from_secs(10));
        async move { rw.write().await }
    });
    // The writer holds the key on the masters while it waits for the reader.
    let mut waiting = false;
    for _ in 0..500 {
        if holders(&servers, "page")
            .iter()
            .filter(|held| held.is_some())
            .count()
            >= 2
        {
            waiting = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(waiting, "the writer never took the key");
    assert_eq!(reader.release().await.unwrap(), ReleaseOutcome::Released);
    let writer = writer.await.unwrap().unwrap();
    let refused = client.rw_lock("page").try_read().await.unwrap_err();
    assert!(matches!(refused, LockError::Busy { .. }), "{refused:?}");
    assert_eq!(writer.release().await.unwrap(), ReleaseOutcome::Released);
    let again = client.rw_lock("page").try_read().await.unwrap();
    again.release().await.unwrap();
}

/// Shares held on just a majority (the first master lost the reader's share, as one that
/// restarted empty would) keep a writer out: the one master without a reader is no
/// majority. A writer's key held on just a majority (the third master unreachable when it
/// took it) keeps a reader out: the one master that would grant a share is no majority
/// either. (Each side's client is built after the fault, so that it reaches all three
/// masters.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_of_shares_or_of_the_writers_key_keeps_the_other_side_out() {
    let servers = masters(3);
    let proxy = FaultProxy::start(servers[2].port());
    let urls = [servers[0].url(), servers[1].url(), proxy.url()];
    let warm_client = || async {
        let client = redlock_client(urls.clone());
        assert!(!client.is_locked("warm-up").await.unwrap());
        client
    };
    let shares_on = |server: &RedisServer| keys_on(server, "~lock/share/*").len();

    let readers = warm_client().await;
    let reader = readers.rw_lock("doc").read().await.unwrap();
    let share = keys_on(&servers[0], "~lock/share/*");
    let _: () = redis::cmd("DEL")
        .arg(&share)
        .query(&mut servers[0].conn())
        .unwrap();
    assert_eq!(servers.iter().map(shares_on).collect::<Vec<_>>(), [0, 1, 1]);
    let writers = warm_client().await;
    let busy = writers.rw_lock("doc").try_write().await.unwrap_err();
    assert!(matches!(busy, LockError::Busy { .. }), "{busy:?}");
    assert_eq!(reader.release().await.unwrap(), ReleaseOutcome::Released);

    let writers = warm_client().await;
    proxy.set_blackhole(Direction::Up, true);
    let writer = writers.rw_lock("doc").write().await.unwrap();
    proxy.set_blackhole(Direction::Up, false);
    proxy.reset_all();
    let token = Some(writer.token().to_owned());
    assert_eq!(holders(&servers, "doc"), [token.clone(), token, None]);
    let readers = warm_client().await;
    let refused = readers.rw_lock("doc").try_read().await.unwrap_err();
    assert!(matches!(refused, LockError::Busy { .. }), "{refused:?}");
    assert_eq!(servers.iter().map(shares_on).collect::<Vec<_>>(), [0, 0, 0]);
    assert_eq!(writer.release().await.unwrap(), ReleaseOutcome::Released);
}

/// Over Redlock masters nobody queues and no take is recorded, yet a holder that waited
/// shows since it took the key: each round of its wait asks with a token of its own, so the
/// token that won names the round that took the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_waited_shows_since_the_round_that_took_the_key() {
    let servers = masters(3);
    let (first, waiter) = (client_for(&servers), client_for(&servers));
    let key = "redlock:since";
    let held = first.lock(key).acquire().await.unwrap();
    let asked = std::time::SystemTime::now();
    let task = {
        let lock = waiter.lock(key).wait(Duration::from_secs(10));
        tokio::spawn(async move { lock.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = std::time::SystemTime::now();
    held.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let state = first.inspect(key).await.unwrap();
    let holder = state.holder().unwrap();
    assert_eq!(holder.token, guard.token());
    assert_eq!(holder.took, None, "{holder:?}");
    let since = holder.identity().process().unwrap().since;
    let slack = Duration::from_millis(50);
    assert!(
        since + slack >= released,
        "since {since:?}, asked at {asked:?}, released at {released:?}"
    );
    guard.release().await.unwrap();
    for server in &servers {
        assert_eq!(server.dbsize(), 0, "left behind on a master");
    }
}
