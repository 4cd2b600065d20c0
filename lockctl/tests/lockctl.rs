//! The operator's command line, run as the binary `cargo install --path lockctl` installs,
//! against a real redis-server: `inspect`, `list` and `release` print what the README shows,
//! and `list` shows lock keys only (not the queues' and fence counters' keys, not other
//! keys).
#![allow(clippy::unwrap_used, missing_docs)]

use std::process::Command;
use std::time::Duration;

use lock_tests::RedisServer;

/// What one run of `lockctl` printed, and its exit code.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }
}

/// Runs `lockctl ARGS` with `REDIS_URL` set to `url` (off the runtime's threads: the lock
/// clients of the test keep their places alive meanwhile).
async fn lockctl(url: &str, args: &[&str]) -> Run {
    let binary = env!("CARGO_BIN_EXE_lockctl");
    let url = url.to_owned();
    let args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let output = Command::new(binary)
            .args(&args)
            .env("REDIS_URL", url)
            .output()
            .unwrap();
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
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
    assert_eq!(lines[2], "fence    none", "{}", run.stdout);
    assert_eq!(lines[3], "waiting  1", "{}", run.stdout);
    assert!(
        lines[4].starts_with(&format!("  1  {waiter_id}  waited ")),
        "{}",
        run.stdout
    );
    assert!(lines[4].contains("  since 20"), "{}", run.stdout);
    assert_eq!(lines.len(), 5, "{}", run.stdout);

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
    assert!(
        lines[0].starts_with(&format!("shop:2  held by {}  ttl ", held.token())),
        "{}",
        run.stdout
    );
    assert!(lines[0].ends_with("  waiting 1"), "{}", run.stdout);
    assert!(
        lines[1].starts_with(&format!("shop:{{eu}} 1  held by {}  ttl ", fenced.token())),
        "{}",
        run.stdout
    );
    assert!(
        lines[1].ends_with(&format!("  fence {}  waiting 0", fenced.fence().unwrap())),
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
    let run = lockctl(&url, &["release", "shop:nothing"]).await;
    assert_eq!(
        run.stdout.trim_end(),
        "released shop:nothing: nobody held it; no waiter"
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
    assert!(
        lines[0].starts_with(&format!("job:a  held by {}  ttl ", guard.token())),
        "{}",
        run.stdout
    );
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

    for command in ["inspect", "list", "release"] {
        let run = lockctl(url, &[command, "--help"]).await;
        assert_eq!(run.code, 0, "{command}: {}", run.stderr);
        assert!(
            run.stdout.contains(&format!("Usage: lockctl {command} ")),
            "{command}: {}",
            run.stdout
        );
        assert!(run.stdout.contains("--url <URL>"), "{}", run.stdout);
    }
}

/// `--cluster`: the URL names a cluster's seeds; `inspect` reads a key where its slot lives,
/// and `list` scans every master (a lock on each of three masters is listed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_lists_the_locks_of_every_master_of_a_cluster() {
    let cluster = tokio::task::block_in_place(|| lock_tests::cluster::RedisCluster::start(3));
    let urls = cluster.urls().join(",");
    let holder =
        lock_runtime::LockClient::new(lock_runtime::Config::cluster(cluster.urls())).unwrap();
    let mut held = Vec::new();
    for node in 0..3 {
        let key = cluster.key_on("shop:", node);
        held.push(holder.lock(key).acquire().await.unwrap());
    }
    let run = lockctl(&urls, &["--cluster", "inspect", held[2].key()]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.lines()[1].starts_with(&format!("holder   {}  ttl ", held[2].token())),
        "{}",
        run.stdout
    );
    let run = lockctl(&urls, &["--cluster", "list", "shop:*"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut lines = run.lines();
    let last = lines.pop().unwrap();
    assert!(last.starts_with("3 locks ("), "{}", run.stdout);
    for guard in &held {
        assert!(
            lines.iter().any(|line| line.starts_with(&format!(
                "{}  held by {}",
                guard.key(),
                guard.token()
            ))),
            "{} is not listed:\n{}",
            guard.key(),
            run.stdout
        );
    }
}
