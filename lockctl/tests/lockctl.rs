//! The operator's command line, run as the binary `cargo install --path lockctl` installs,
//! against a real redis-server (the deployments are in deployments.rs): `inspect`, `list`,
//! `watch` and `release` print what the guide shows, `list` shows our locks only (not the
//! queues' and fence counters' keys, not other keys), `release` takes only what its checks
//! allow, an unknown key and a refused `--if-holder` have exit codes of their own, and
//! `--json` prints objects.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::time::Duration;

use common::{lockctl, objects};
use lock_tests::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_graph_follows_what_each_holder_waits_for() {
    use lock_runtime::{Config, LockClient, LockError};
    let server = RedisServer::start();
    let url = server.url();
    let fast = Config::single(&url).deadlock_detection(Duration::from_millis(20));
    let x = LockClient::new(fast).unwrap();
    let y = server.lock_client();
    let held = y.lock("g:b").acquire().await.unwrap();
    // X holds `g:a` in a guarded body and waits there for `g:b`, which Y holds.
    let task = tokio::spawn(async move {
        let outer = x.lock("g:a");
        outer
            .run(async {
                let inner = x.lock("g:b").wait(Duration::from_secs(30));
                inner.run(async { Ok::<_, LockError>(()) }).await
            })
            .await
    });
    for _ in 0..500 {
        let state = y.inspect("g:a").await.unwrap();
        let waited = y.inspect("g:b").await.unwrap();
        let holds = waited.waiters.first().map(|w| w.holds.clone());
        if state.holder().is_some_and(|h| h.waits_for.is_some())
            && holds == Some(vec!["g:a".into()])
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let run = lockctl(&url, &["graph", "g:a"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = run.lines();
    assert!(lines[0].starts_with("g:a  held by "), "{}", run.stdout);
    assert!(lines[0].ends_with("  waits for g:b"), "{}", run.stdout);
    assert!(lines[1].starts_with("g:b  held by "), "{}", run.stdout);
    assert!(lines[1].ends_with("  waits for nothing"), "{}", run.stdout);
    // X's wait for `g:b` shows what X holds meanwhile.
    assert!(
        lines[2].starts_with("g:b  waited for by "),
        "{}",
        run.stdout
    );
    assert!(lines[2].ends_with("  who holds g:a"), "{}", run.stdout);
    assert_eq!(lines.len(), 3, "{}", run.stdout);
    let inspected = lockctl(&url, &["inspect", "g:b"]).await;
    assert!(
        inspected.stdout.contains("holds g:a meanwhile"),
        "{}",
        inspected.stdout
    );
    held.release().await.unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_inspects_lists_and_releases_locks() {
    let server = RedisServer::start();
    let url = server.url();
    let holder = server.lock_client();
    let fenced = holder
        .lock("shop:{eu} 1")
        .fencing(true)
        .acquire()
        .await
        .unwrap();
    let held = holder.lock("shop:2").acquire().await.unwrap();
    let other = server.lock_client();
    let waiter = {
        let lock = other.lock("shop:2").wait(Duration::from_secs(60));
        tokio::spawn(async move { lock.acquire().await })
    };
    server.until_queued("shop:2", 1).await;
    let waiter_id = holder.inspect("shop:2").await.unwrap().waiters[0]
        .id
        .clone();
    // Keys that match the pattern but are no locks.
    let mut conn = server.conn();
    let _: () = redis::cmd("SET")
        .arg("shop:count")
        .arg(5)
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("shop:hash")
        .arg("a")
        .arg("b")
        .query(&mut conn)
        .unwrap();

    let run = lockctl(&url, &["inspect", "shop:2"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = run.lines();
    assert_eq!(lines[0], "key      shop:2", "{}", run.stdout);
    assert!(
        lines[1].starts_with(&format!("holder   {}  ttl ", held.token())),
        "{}",
        run.stdout
    );
    // Who holds it: this process, the builder's line, since when, its last renewal.
    let pid = std::process::id();
    let by = format!("         by {} pid {pid} ", hostname());
    assert!(lines[2].starts_with(&by), "{}", run.stdout);
    assert!(lines[2].contains("`lockctl.rs:"), "{}", run.stdout);
    assert!(
        lines[2].contains("  since 20") && lines[2].contains("renewed "),
        "{}",
        run.stdout
    );
    assert_eq!(lines[3], "fence    none", "{}", run.stdout);
    assert_eq!(lines[4], "waiting  1", "{}", run.stdout);
    assert!(
        lines[5].starts_with(&format!("  1  {waiter_id}  waited ")),
        "{}",
        run.stdout
    );
    assert!(lines[5].contains("  since 20"), "{}", run.stdout);
    // And who waits: this process too.
    assert!(
        lines[6].starts_with(&format!("     by {} pid {pid} ", hostname())),
        "{}",
        run.stdout
    );
    assert_eq!(lines.len(), 7, "{}", run.stdout);

    let run = lockctl(&url, &["inspect", "shop:{eu} 1"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains(&format!("fence    {}", fenced.fence().unwrap())),
        "{}",
        run.stdout
    );

    // Every key matches `*`: the queue's, its deadlines', the fence counter's too.
    assert!(server.dbsize() >= 8, "{}", server.dbsize());
    let run = lockctl(&url, &["list", "*"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut lines = run.lines();
    let last = lines.pop().unwrap();
    lines.sort_unstable();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    assert!(listed(lines[0], "shop:2", held.token()), "{}", run.stdout);
    assert!(lines[0].contains("  waiting 1  token "), "{}", run.stdout);
    assert!(
        listed(lines[1], "shop:{eu} 1", fenced.token()),
        "{}",
        run.stdout
    );
    assert!(
        lines[1].contains(&format!(
            "  fence {}  waiting 0  token ",
            fenced.fence().unwrap()
        )),
        "{}",
        run.stdout
    );
    let others = server.dbsize() - 2;
    assert_eq!(last, format!("2 locks ({others} other keys matched)"));

    let run = lockctl(&url, &["list", "shop:2*", "--limit", "1"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.lines()[1],
        "1 lock (stopped at --limit 1; more may match)"
    );

    let run = lockctl(&url, &["release", "shop:2"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let line = run.stdout.trim_end();
    assert!(
        line.starts_with(&format!(
            "released shop:2: removed holder {} (ttl ",
            held.token()
        )),
        "{line}"
    );
    assert!(
        line.ends_with(&format!("s left); granted to waiter {waiter_id}")),
        "{line}"
    );
    let taken = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(taken.token(), waiter_id);
    // A key with nothing of a lock at it (a mistyped one) is unknown: exit 3.
    let run = lockctl(&url, &["release", "shop:nothing"]).await;
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stdout
            .starts_with("shop:nothing  unknown: no lock, no waiter"),
        "{}",
        run.stdout
    );

    // Errors: a key of another type (exit 1, the message names it), a usage error (2).
    let run = lockctl(&url, &["inspect", "shop:hash"]).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stderr.contains("`shop:hash`") && run.stderr.contains("Redis hash, not a lock"),
        "{}",
        run.stderr
    );
    let run = lockctl("redis://127.0.0.1:1", &["inspect", "shop:2"]).await;
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("lock `shop:2`"), "{}", run.stderr);

    let _ = held.release().await;
    taken.release().await.unwrap();
    fenced.release().await.unwrap();
}

/// With the applications' key prefix, keys are named and listed without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_takes_the_key_prefix() {
    let server = RedisServer::start();
    let url = server.url();
    let client = lock_runtime::LockClient::new(
        lock_runtime::Config::single(url.clone()).key_prefix("app*1/"),
    )
    .unwrap();
    let guard = client.lock("job:a").acquire().await.unwrap();
    // Another application's lock, without the prefix: not listed.
    let other = server.lock_client().lock("job:b").acquire().await.unwrap();
    // A key the prefix would match as a glob (`*`): not even scanned.
    let mut conn = server.conn();
    let _: () = redis::cmd("SET")
        .arg("appXY1/job:c")
        .arg("x")
        .arg("PX")
        .arg(60_000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(server.get("app*1/job:a").as_deref(), Some(guard.token()));

    let run = lockctl(&url, &["--prefix", "app*1/", "inspect", "job:a"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.lines()[0], "key      app*1/job:a", "{}", run.stdout);
    let run = lockctl(&url, &["--prefix", "app*1/", "list", "job:*"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = run.lines();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    assert!(listed(lines[0], "job:a", guard.token()), "{}", run.stdout);
    assert_eq!(lines[1], "1 lock (0 other keys matched)");
    let run = lockctl(&url, &["--prefix", "app*1/", "release", "job:a"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(server.get("app*1/job:a"), None);
    assert_eq!(server.get("job:b").as_deref(), Some(other.token()));
    let _ = guard.release().await;
    other.release().await.unwrap();
}

/// Usage errors exit with 2 and say what is wrong, with the usage line of the command; a
/// help exits with 0. No Redis is reached.
#[tokio::test]
async fn lockctl_usage_errors_exit_with_2_and_show_the_usage() {
    let url = "redis://127.0.0.1:1";
    let run = lockctl(url, &["frobnicate"]).await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("unrecognized subcommand 'frobnicate'"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("Usage: lockctl "), "{}", run.stderr);

    let run = lockctl(url, &["inspect"]).await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("<KEY>"), "{}", run.stderr);
    assert!(
        run.stderr.contains("Usage: lockctl inspect "),
        "{}",
        run.stderr
    );

    let run = lockctl(url, &["list", "*", "--limit", "0"]).await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("--limit"), "{}", run.stderr);

    let run = lockctl(url, &[]).await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("Usage: lockctl "), "{}", run.stderr);

    for command in ["inspect", "list", "release", "watch"] {
        let run = lockctl(url, &[command, "--help"]).await;
        assert_eq!(run.code, 0, "{command}: {}", run.stderr);
        assert!(
            run.stdout
                .contains(&format!("Usage: lockctl {command} [--url URL] ")),
            "{command}: {}",
            run.stdout
        );
        assert!(run.stdout.contains("--url <URL>"), "{}", run.stdout);
    }
}

/// The URL has a default: the usage line shows it as optional; the help lists every exit
/// status; a bad `--interval` is a usage error.
#[tokio::test]
async fn lockctl_help_shows_the_url_as_optional_and_every_exit_status() {
    let url = "redis://127.0.0.1:1";
    let run = lockctl(url, &["--help"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("Usage: lockctl [--url URL] "),
        "{}",
        run.stdout
    );
    for code in [
        "0 done",
        "1 Redis failed",
        "2 a usage",
        "3 the key is unknown",
        "4 --if-holder",
    ] {
        assert!(run.stdout.contains(code), "{code}: {}", run.stdout);
    }
    let run = lockctl(url, &["watch", "k", "--interval", "0s"]).await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("--interval"), "{}", run.stderr);
}

/// `release --if-holder` takes the lock only from the holder named (a stale token: exit 4,
/// nothing changed; the holder's: released, the waiter gets it); `--dry-run` says what
/// it would take and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_release_checks_the_holder_and_a_dry_run_changes_nothing() {
    let server = RedisServer::start();
    let url = server.url();
    let holder = server.lock_client();
    let held = holder.lock("safe:1").acquire().await.unwrap();
    let other = server.lock_client();
    let waiter = {
        let lock = other.lock("safe:1").wait(Duration::from_secs(60));
        tokio::spawn(async move { lock.acquire().await })
    };
    server.until_queued("safe:1", 1).await;
    let waiter_id = holder.inspect("safe:1").await.unwrap().waiters[0]
        .id
        .clone();

    let stale = "lr-00000000000000000000000000000000";
    let run = lockctl(&url, &["release", "safe:1", "--if-holder", stale]).await;
    assert_eq!(run.code, 4, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.starts_with(&format!(
            "not released safe:1: {stale} holds no part of it; now holder {} (ttl ",
            held.token()
        )),
        "{}",
        run.stdout
    );
    assert_eq!(server.get("safe:1").as_deref(), Some(held.token()));

    dry_run_changes_nothing(&server, held.token(), &waiter_id).await;

    let run = lockctl(&url, &["release", "safe:1", "--if-holder", held.token()]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.starts_with("released safe:1: removed holder "),
        "{}",
        run.stdout
    );
    let taken = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(taken.token(), waiter_id);
    let _ = held.release().await;
    taken.release().await.unwrap();
}

/// `release safe:1 --dry-run` says it would remove `holder` and wake `waiter_id` (in text
/// and JSON), and changes nothing.
async fn dry_run_changes_nothing(server: &RedisServer, holder: &str, waiter_id: &str) {
    let url = server.url();
    let run = lockctl(&url, &["release", "safe:1", "--dry-run"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let line = run.stdout.trim_end();
    assert!(
        line.starts_with(&format!(
            "dry run: would release safe:1: remove holder {} (ttl ",
            holder
        )),
        "{line}"
    );
    assert!(
        line.ends_with(&format!("; wake waiter {waiter_id}")),
        "{line}"
    );
    let run = lockctl(&url, &["--json", "release", "safe:1", "--dry-run"]).await;
    let [object] = &objects(&run)[..] else {
        panic!("one object: {}", run.stdout)
    };
    assert_eq!(object["dry_run"], true);
    assert_eq!(object["removed"][0]["token"], holder);
    assert_eq!(object["woken"], waiter_id);
    assert_eq!(server.get("safe:1").as_deref(), Some(holder));
    assert_eq!(server.queued("safe:1"), 1);
}

/// A string key that is not one of our locks (the incident's `session:abc`, a ttl and a
/// JSON value) is not listed, is said to be no lock of ours by `inspect`, and is refused
/// by `release` (also a dry run) unless `--force`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_refuses_a_key_that_is_not_one_of_our_locks_unless_forced() {
    let server = RedisServer::start();
    let url = server.url();
    let guard = server.lock_client().lock("ours").acquire().await.unwrap();
    let mut conn = server.conn();
    let _: () = redis::cmd("SET")
        .arg("session:abc")
        .arg(r#"{"user":7}"#)
        .arg("PX")
        .arg(60_000)
        .query(&mut conn)
        .unwrap();

    let run = lockctl(&url, &["list", "*"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = run.lines();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    assert!(lines[0].starts_with("ours  held by "), "{}", run.stdout);
    assert!(lines[1].starts_with("1 lock ("), "{}", run.stdout);

    let run = lockctl(&url, &["inspect", "session:abc"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("note     not one of lock-runtime's locks"),
        "{}",
        run.stdout
    );
    for args in [
        &["release", "session:abc"][..],
        &["release", "session:abc", "--dry-run"],
    ] {
        let run = lockctl(&url, args).await;
        assert_eq!(run.code, 1, "{args:?}: {}", run.stdout);
        assert!(
            run.stderr.contains("`session:abc`")
                && run.stderr.contains("not a token of this crate's")
                && run.stderr.contains("--force"),
            "{args:?}: {}",
            run.stderr
        );
        assert_eq!(server.get("session:abc").as_deref(), Some(r#"{"user":7}"#));
    }
    let run = lockctl(&url, &["release", "session:abc", "--force"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(server.get("session:abc"), None);
    guard.release().await.unwrap();
}

/// A key with nothing of a lock at it is "unknown" with exit 3, in text and JSON; `--json`
/// prints LockState's fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_says_unknown_and_prints_json() {
    let server = RedisServer::start();
    let url = server.url();
    let guard = server.lock_client().lock("job:a").acquire().await.unwrap();

    let run = lockctl(&url, &["inspect", "job:typo"]).await;
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stdout.starts_with("job:typo  unknown: "),
        "{}",
        run.stdout
    );
    let run = lockctl(&url, &["inspect", "job:typo", "--json"]).await;
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert_eq!(objects(&run)[0]["unknown"], true);

    let run = lockctl(&url, &["--json", "inspect", "job:a"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let [state] = &objects(&run)[..] else {
        panic!("one object: {}", run.stdout)
    };
    assert_eq!(state["key"], "job:a");
    assert_eq!(state["unknown"], false);
    assert_eq!(state["holders"][0]["token"], guard.token());
    assert_eq!(state["holders"][0]["kind"], "exclusive");
    assert!(state["holders"][0]["ttl"].as_u64().unwrap() > 0);
    let identity = &state["holders"][0]["identity"];
    assert_eq!(identity["pid"], std::process::id(), "{identity}");
    assert_eq!(identity["host"], hostname(), "{identity}");
    assert!(
        identity["function"]
            .as_str()
            .unwrap()
            .starts_with("lockctl.rs:"),
        "{identity}"
    );
    assert!(
        identity["since"].as_u64().unwrap() > 1_700_000_000_000,
        "{identity}"
    );
    assert!(
        state["holders"][0]["since_renewal"].as_u64().is_some(),
        "{state}"
    );
    assert_eq!(state["queued"], 0);
    let run = lockctl(&url, &["list", "job:*", "--json"]).await;
    let listed = objects(&run);
    assert_eq!(listed.len(), 2, "{}", run.stdout);
    assert_eq!(listed[0]["holders"][0]["token"], guard.token());
    assert_eq!(listed[1]["locks"], 1);
    guard.release().await.unwrap();
}

/// `watch --count 2` prints two rounds, in text and JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_watch_prints_each_round() {
    let server = RedisServer::start();
    let url = server.url();
    let guard = server.lock_client().lock("job:a").acquire().await.unwrap();
    let run = lockctl(
        &url,
        &["watch", "job:a", "--count", "2", "--interval", "50ms"],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let headers: Vec<&str> = run
        .lines()
        .into_iter()
        .filter(|line| line.starts_with("--- "))
        .collect();
    assert_eq!(
        headers,
        ["--- job:a  round 1 of 2", "--- job:a  round 2 of 2"],
        "{}",
        run.stdout
    );
    let holders = format!("holder   {}  ttl ", guard.token());
    assert_eq!(run.stdout.matches(&holders).count(), 2, "{}", run.stdout);
    let run = lockctl(
        &url,
        &[
            "watch",
            "job:a",
            "--count",
            "2",
            "--interval",
            "50ms",
            "--json",
        ],
    )
    .await;
    let rounds: Vec<u64> = objects(&run)
        .iter()
        .map(|object| object["round"].as_u64().unwrap())
        .collect();
    assert_eq!(rounds, [1, 2], "{}", run.stdout);
    guard.release().await.unwrap();
}

/// Whether a `list` line names `key` and its holder, whose token is `token`: the holder's
/// process (this one), its age and ttl, and the token last.
fn listed(line: &str, key: &str, token: &str) -> bool {
    line.starts_with(&format!("{key}  held by "))
        && line.contains(&format!(" pid {} ", std::process::id()))
        && line.contains("  ttl ")
        && line.ends_with(&format!("  token {token}"))
}

/// This host's name, as tokens name it.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}
