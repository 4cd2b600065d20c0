//! Several keys at once, all or none, in a canonical order.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{
    Config, LockClient, LockError, LostCause, MultiLock, OnLost, current_lock, current_locks,
    distributed_lock,
};
use lock_tests::{RedisServer, child};

async fn balance(redis: &mut redis::aio::MultiplexedConnection, account: &str) -> i64 {
    redis::cmd("GET")
        .arg(account)
        .query_async::<Option<i64>>(redis)
        .await
        .unwrap()
        .unwrap_or(0)
}

/// Two clients (two processes to Redis) move money between two accounts, one naming them
/// `[a, b]`, the other `[b, a]`, each transfer a read-modify-write of both balances under the
/// two locks: nobody deadlocks, and the total never changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_in_both_orders_keep_the_total_and_never_deadlock() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let mut setup = server
        .redis()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("MSET")
        .arg("bal:a")
        .arg(1000)
        .arg("bal:b")
        .arg(1000)
        .query_async(&mut setup)
        .await
        .unwrap();
    let clients: Vec<LockClient> = (0..2).map(|_| server.lock_client()).collect();
    let mut tasks = Vec::new();
    for (index, client) in clients.iter().enumerate() {
        let (from, to) = if index == 0 { ("a", "b") } else { ("b", "a") };
        for _ in 0..6 {
            let client = client.clone();
            let mut redis = setup.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let both = MultiLock::new([format!("acct:{from}"), format!("acct:{to}")])
                        .client(&client)
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await
                        .unwrap();
                    let (source, target) = (format!("bal:{from}"), format!("bal:{to}"));
                    let have = balance(&mut redis, &source).await;
                    tokio::task::yield_now().await;
                    let other = balance(&mut redis, &target).await;
                    let _: () = redis::cmd("MSET")
                        .arg(&source)
                        .arg(have - 7)
                        .arg(&target)
                        .arg(other + 7)
                        .query_async(&mut redis)
                        .await
                        .unwrap();
                    both.release().await.unwrap();
                }
            }));
        }
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("a transfer deadlocked")
            .unwrap();
    }
    let total = balance(&mut setup, "bal:a").await + balance(&mut setup, "bal:b").await;
    assert_eq!(total, 2000, "money was created or lost");
    // 60 transfers each way: the balances are back where they started.
    assert_eq!(balance(&mut setup, "bal:a").await, 1000);
}

/// When one key cannot be had within the wait, the keys already taken are given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_acquisition_is_released_when_the_wait_runs_out() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let holder = server.lock_client();
    let other = server.lock_client();
    let held = holder.lock("acct:b").acquire().await.unwrap();
    let err = MultiLock::new(["acct:b", "acct:a"])
        .client(&other)
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Timeout { key, .. } if key == "acct:b"),
        "{err:?}"
    );
    assert_eq!(server.get("acct:a"), None, "the key taken first was kept");
    assert_eq!(server.get("acct:b").as_deref(), Some(held.token()));
    held.release().await.unwrap();
    let both = MultiLock::new(["acct:b", "acct:a", "acct:a"])
        .client(&other)
        .acquire()
        .await
        .unwrap();
    assert_eq!(both.guards().len(), 2, "a key named twice is taken once");
    both.release().await.unwrap();
    assert!(
        server.until_empty(Duration::from_secs(3)).await,
        "keys left behind: {}",
        server.dbsize()
    );
}

/// One transfer: a read-modify-write of both balances, with a pause between the reads so
/// that an unguarded transfer of another process can slip in between.
async fn move_money(
    redis: &mut redis::aio::MultiplexedConnection,
    from: &str,
    to: &str,
    amount: i64,
) -> Result<(), LockError> {
    let (source, target) = (format!("bal:{from}"), format!("bal:{to}"));
    let have = balance(redis, &source).await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    let other = balance(redis, &target).await;
    let _: () = redis::cmd("MSET")
        .arg(&source)
        .arg(have - amount)
        .arg(&target)
        .arg(other + amount)
        .query_async(redis)
        .await
        .unwrap();
    Ok(())
}

/// The attribute form: both accounts locked, named in the order of the arguments.
#[distributed_lock(key = ["acct:<from>", "acct:<to>"], ttl = "10s", wait = "30s")]
async fn transfer(
    redis: &mut redis::aio::MultiplexedConnection,
    from: &str,
    to: &str,
    amount: i64,
) -> Result<(), LockError> {
    move_money(redis, from, to, amount).await
}

/// Transfers per task, tasks per process.
const TRANSFERS: usize = 15;
const TASKS: usize = 4;

/// The worker side of the multi-process transfer test: runs only in children. The role
/// says the direction, the amount and the API: `attr <from> <to> <amount>` through the
/// attribute, `multi <from> <to> <amount>` through `MultiLock::run`.
#[test]
fn transfer_worker() {
    let Some(role) = child::role() else { return };
    let parts: Vec<String> = role.split_whitespace().map(str::to_owned).collect();
    let [api, from, to, amount] = &parts[..] else {
        panic!("bad role {role:?}")
    };
    let amount: i64 = amount.parse().unwrap();
    let url = std::env::var("LOCK_TESTS_URL").unwrap();
    lock_runtime::init(Config::single(url.clone())).unwrap();
    let runtime = lock_tests::two_worker_runtime();
    let (done, failed) = runtime.block_on(async {
        let redis = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let (api, from, to, mut redis) =
                    (api.clone(), from.clone(), to.clone(), redis.clone());
                tokio::spawn(async move {
                    let (mut done, mut failed) = (0, 0);
                    for _ in 0..TRANSFERS {
                        let moved = if api == "attr" {
                            transfer(&mut redis, &from, &to, amount).await
                        } else {
                            let keys = [format!("acct:{from}"), format!("acct:{to}")];
                            MultiLock::new(keys)
                                .wait(Duration::from_secs(30))
                                .run(move_money(&mut redis, &from, &to, amount))
                                .await
                        };
                        match moved {
                            Ok(()) => done += 1,
                            Err(err) => {
                                eprintln!("transfer failed: {err}");
                                failed += 1;
                            }
                        }
                    }
                    (done, failed)
                })
            })
            .collect();
        let mut totals = (0, 0);
        for task in tasks {
            let (done, failed) = task.await.unwrap();
            totals = (totals.0 + done, totals.1 + failed);
        }
        totals
    });
    println!("TRANSFERS {done} {failed}");
}

/// Three processes move money between two accounts through the global client: two through
/// the attribute, one naming the keys `[a, b]`, the other `[b, a]`, and a third through
/// `MultiLock::run` naming them `[b, a]`. Each transfer is a read-modify-write of both
/// balances. Nobody deadlocks (every process finishes within a bound), the total seen at
/// any moment is the starting total, and the balances end where the transfers say.
#[test]
fn transfers_across_processes_keep_the_total_and_never_deadlock() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let mut admin = server.conn();
    let _: () = redis::cmd("MSET")
        .arg("bal:a")
        .arg(1000)
        .arg("bal:b")
        .arg(1000)
        .query(&mut admin)
        .unwrap();
    // (role, what each transfer takes from `a`)
    let workers = [("attr a b 7", 7), ("attr b a 5", -5), ("multi b a 3", -3)];
    let mut children: Vec<_> = workers
        .iter()
        .map(|(role, _)| {
            let mut process =
                child::spawn("transfer_worker", role, &[("LOCK_TESTS_URL", server.url())]);
            let lines = child::stream_lines(process.stdout.take().unwrap());
            (process, lines)
        })
        .collect();
    // Watch the total while they run (MGET sees both balances at one instant), for at
    // most two minutes: a deadlock would keep a process running.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut totals_seen = std::collections::BTreeSet::new();
    while children
        .iter_mut()
        .any(|(process, _)| process.try_wait().unwrap().is_none())
    {
        if std::time::Instant::now() > deadline {
            for (process, _) in &mut children {
                let _ = process.kill();
                let _ = process.wait();
            }
            panic!("a transfer process did not finish within 2 minutes: deadlocked");
        }
        let (a, b): (i64, i64) = redis::cmd("MGET")
            .arg("bal:a")
            .arg("bal:b")
            .query(&mut admin)
            .unwrap();
        totals_seen.insert(a + b);
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut expected_a = 1000;
    for ((process, lines), (role, from_a)) in children.into_iter().zip(workers) {
        let status = {
            let mut process = process;
            process.wait().unwrap()
        };
        assert!(status.success(), "worker {role:?} failed: {status:?}");
        let line = child::expect_line(&lines, "TRANSFERS ", Duration::from_secs(5));
        let counts: Vec<u64> = line
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(
            counts,
            [(TASKS * TRANSFERS) as u64, 0],
            "worker {role:?}: done, failed"
        );
        expected_a -= from_a * (TASKS * TRANSFERS) as i64;
    }
    let (a, b): (i64, i64) = redis::cmd("MGET")
        .arg("bal:a")
        .arg("bal:b")
        .query(&mut admin)
        .unwrap();
    totals_seen.insert(a + b);
    assert_eq!(
        totals_seen.into_iter().collect::<Vec<_>>(),
        [2000],
        "money was created or lost"
    );
    assert_eq!(a, expected_a, "a transfer was lost");
    // Every lock was released.
    assert_eq!(server.get("acct:a"), None);
    assert_eq!(server.get("acct:b"), None);
}

/// `MultiLock::run`: every key is held while the body runs, each counts as held by the task
/// (a nested lock on one of them is reentrant), `current_lock()` is the last key in the
/// canonical order and `current_locks()` lists them all; afterwards every key is released,
/// also when the body fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_holds_every_key_for_the_body_and_releases_them_after() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let client = server.lock_client();
    let other = server.lock_client();
    let seen = MultiLock::new(["run:b", "run:a"])
        .client(&client)
        .run(async {
            let nested = client.lock("run:a").wait(Duration::ZERO).acquire().await?;
            assert!(nested.is_reentrant(), "the body's own key was taken again");
            nested.release().await?;
            let busy = other.lock("run:b").wait(Duration::ZERO).acquire().await;
            assert!(matches!(busy, Err(LockError::Busy { .. })), "{busy:?}");
            let keys: Vec<String> = current_locks()
                .iter()
                .map(|lock| lock.key().to_owned())
                .collect();
            Ok::<_, LockError>((keys, current_lock().unwrap().key().to_owned()))
        })
        .await
        .unwrap();
    assert_eq!(seen.0, ["run:a", "run:b"]);
    assert_eq!(seen.1, "run:b");
    assert_eq!(server.dbsize(), 0, "a key was left held");

    let failed: Result<(), String> = MultiLock::new(["run:a", "run:b"])
        .client(&client)
        .run(async { Err::<(), _>(LockErrorOr("the body failed".to_owned())) })
        .await
        .map_err(|err: LockErrorOr| err.0);
    assert_eq!(failed.unwrap_err(), "the body failed");
    assert_eq!(server.dbsize(), 0, "a key was left held after an error");

    // A lock error: the body does not run.
    let held = other.lock("run:b").acquire().await.unwrap();
    let mut ran = false;
    let refused = MultiLock::new(["run:a", "run:b"])
        .client(&client)
        .wait(Duration::from_millis(200))
        .run(async {
            ran = true;
            Ok::<_, LockError>(())
        })
        .await;
    assert!(
        matches!(refused, Err(LockError::Timeout { ref key, .. }) if key == "run:b"),
        "{refused:?}"
    );
    assert!(!ran, "the body ran without the locks");
    held.release().await.unwrap();
    assert!(
        server.until_empty(Duration::from_secs(3)).await,
        "keys left behind: {}",
        server.dbsize()
    );
}

/// A body error type with `From<LockError>`, for the failing body above.
#[derive(Debug)]
struct LockErrorOr(String);

impl From<LockError> for LockErrorOr {
    fn from(err: LockError) -> Self {
        LockErrorOr(err.to_string())
    }
}

/// With `on_lost = cancel` (the default), losing the lease of either key stops the body and
/// returns `Lost` for that key; the other key is released. With `continue`, the body
/// finishes and sees the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_stops_the_body_when_any_key_is_lost() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let client = server.lock_client();
    let admin = server.redis();
    let delete = |key: &'static str| {
        let admin = admin.clone();
        async move {
            let mut admin = admin.get_multiplexed_async_connection().await.unwrap();
            let _: () = redis::cmd("DEL")
                .arg(key)
                .query_async(&mut admin)
                .await
                .unwrap();
        }
    };
    let mut finished = false;
    let stopped = MultiLock::new(["lost:a", "lost:b"])
        .client(&client)
        .ttl(Duration::from_millis(900))
        .run(async {
            delete("lost:a").await;
            tokio::time::sleep(Duration::from_secs(5)).await;
            finished = true;
            Ok::<_, LockError>(())
        })
        .await;
    assert!(
        matches!(&stopped, Err(LockError::Lost { key, cause: LostCause::TokenGone }) if key == "lost:a"),
        "{stopped:?}"
    );
    assert!(!finished, "the body ran on after the loss");
    assert_eq!(server.dbsize(), 0, "the key not lost was left held");

    let (finished, lost) = MultiLock::new(["lost:a", "lost:b"])
        .client(&client)
        .ttl(Duration::from_millis(900))
        .on_lost(OnLost::Continue)
        .run(async {
            delete("lost:b").await;
            let lost = current_locks()
                .into_iter()
                .find(|lock| lock.key() == "lost:b")
                .unwrap();
            let cause = tokio::time::timeout(Duration::from_secs(3), lost.lost())
                .await
                .unwrap();
            Ok::<_, LockError>((true, cause))
        })
        .await
        .unwrap();
    assert!(finished);
    assert_eq!(lost, LostCause::TokenGone);
    assert_eq!(server.dbsize(), 0);
}

/// A key that another owner took while the body ran (a failover's shape: its token written
/// over ours) is found at release: `run` returns `Lost` naming that key, with the cause
/// `FoundAtRelease`; the other owner's key is left alone and the other key is released.
/// With `continue`, the body's result stands and that key reads lost. The leases are 30 s:
/// no renewal runs during the body, so only the release can find the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_reports_a_key_found_taken_over_at_release() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let client = server.lock_client();
    let admin = server.redis();
    let take_over = |key: &'static str| {
        let admin = admin.clone();
        async move {
            let mut admin = admin.get_multiplexed_async_connection().await.unwrap();
            let _: () = redis::cmd("SET")
                .arg(key)
                .arg("other-owner")
                .arg("PX")
                .arg(30_000)
                .query_async(&mut admin)
                .await
                .unwrap();
        }
    };
    let found = MultiLock::new(["failover:a", "failover:b"])
        .client(&client)
        .ttl(Duration::from_secs(30))
        .run(async {
            take_over("failover:b").await;
            Ok::<_, LockError>(())
        })
        .await;
    assert!(
        matches!(&found, Err(LockError::Lost { key, cause: LostCause::FoundAtRelease }) if key == "failover:b"),
        "{found:?}"
    );
    assert_eq!(
        server.get("failover:a"),
        None,
        "the other key was left held"
    );
    assert_eq!(server.get("failover:b").as_deref(), Some("other-owner"));

    let _: () = redis::cmd("DEL")
        .arg("failover:b")
        .query(&mut server.conn())
        .unwrap();
    let held = MultiLock::new(["failover:a", "failover:b"])
        .client(&client)
        .ttl(Duration::from_secs(30))
        .on_lost(OnLost::Continue)
        .run(async {
            take_over("failover:a").await;
            Ok::<_, LockError>(current_locks())
        })
        .await
        .unwrap();
    let lost: Vec<_> = held
        .iter()
        .map(|lock| (lock.key().to_owned(), lock.lost_cause()))
        .collect();
    assert_eq!(
        lost,
        [
            ("failover:a".to_owned(), Some(LostCause::FoundAtRelease)),
            ("failover:b".to_owned(), None)
        ]
    );
    assert_eq!(server.get("failover:a").as_deref(), Some("other-owner"));
    assert_eq!(server.get("failover:b"), None);
}

/// A multi-lock takes `fencing` and `watchdog` for each of its keys: every key's guard has
/// a fence, and without the watchdog each key's lease simply runs out at its ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_fences_each_key_and_can_go_without_renewal() {
    let server = RedisServer::start();
    let client = LockClient::new(Config::single(server.url())).unwrap();
    let fenced = MultiLock::new(["fenced:a", "fenced:b"])
        .client(&client)
        .fencing(true)
        .acquire()
        .await
        .unwrap();
    let fences: Vec<Option<u64>> = fenced.guards().iter().map(|g| g.fence()).collect();
    assert!(fences.iter().all(Option::is_some), "{fences:?}");
    fenced.release().await.unwrap();

    let ttl = Duration::from_millis(300);
    let unrenewed = MultiLock::new(["unrenewed:a", "unrenewed:b"])
        .client(&client)
        .ttl(ttl)
        .watchdog(false)
        .acquire()
        .await
        .unwrap();
    let expired = lock_tests::until(Duration::from_secs(5), Duration::from_millis(10), || {
        server.get("unrenewed:a").is_none() && server.get("unrenewed:b").is_none()
    })
    .await;
    assert!(expired.is_some(), "the keys were renewed past their ttl");
    for guard in unrenewed.guards() {
        assert_eq!(
            guard.lost_cause(),
            Some(LostCause::Expired),
            "{}",
            guard.key()
        );
    }
}
