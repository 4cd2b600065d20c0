//! lockctl against the deployments the applications use, configured as their `Config`
//! is: a cluster's seeds (`list` scans every master), a server that requires mutual TLS,
//! Sentinel by the master's name, with the data nodes' own password or TLS.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::time::Duration;

use common::lockctl;

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
            lines.iter().any(
                |line| line.starts_with(&format!("{}  held by ", guard.key()))
                    && line.ends_with(&format!("  token {}", guard.token()))
            ),
            "{} is not listed:\n{}",
            guard.key(),
            run.stdout
        );
    }
}

/// TLS as the applications configure it: a `rediss://` URL, the authority's and the
/// client's PEM files (flags; `LOCKCTL_TLS_CA_CERT` and the like set them too) on a
/// server that requires mutual TLS; `inspect` and `list` (lockctl's own SCAN connection)
/// both reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_reaches_a_server_over_mutual_tls() {
    use lock_tests::tls::{Certificates, TlsServer};
    let certificates = Certificates::generate();
    let server = tokio::task::block_in_place(|| TlsServer::start(&certificates, true));
    let holder = lock_runtime::LockClient::new(
        lock_runtime::Config::single(server.url())
            .tls_ca_cert(certificates.read("ca.crt"))
            .tls_client_cert(
                certificates.read("client.crt"),
                certificates.read("client.key"),
            )
            .connect_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2)),
    )
    .unwrap();
    let guard = holder.lock("tls:job").acquire().await.unwrap();
    let path = |name: &str| certificates.path(name).to_str().unwrap().to_owned();
    let (ca, cert, key) = (path("ca.crt"), path("client.crt"), path("client.key"));
    let flags = [
        "--tls-ca-cert",
        &ca,
        "--tls-client-cert",
        &cert,
        "--tls-client-key",
        &key,
    ];
    let run = lockctl(
        &server.url(),
        &[&flags[..], &["inspect", "tls:job"]].concat(),
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.lines()[1].starts_with(&format!("holder   {}  ttl ", guard.token())),
        "{}",
        run.stdout
    );
    let run = lockctl(&server.url(), &[&flags[..], &["list", "tls:*"]].concat()).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        listed(run.lines()[0], "tls:job", guard.token()),
        "{}",
        run.stdout
    );
    // Without the client certificate the server refuses: exit 1, the cause named.
    let run = lockctl(&server.url(), &["--tls-ca-cert", &ca, "inspect", "tls:job"]).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    guard.release().await.unwrap();
}

/// Sentinel as `Config::sentinel` takes it: the sentinels' URLs and the master's name;
/// `inspect` and `list` reach the primary the sentinels name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_finds_the_primary_through_sentinel() {
    use lock_tests::sentinel::{MASTER, SentinelDeployment};
    let deployment = tokio::task::block_in_place(SentinelDeployment::start);
    let urls = deployment.sentinel_urls();
    let holder = tokio::task::block_in_place(|| {
        lock_runtime::LockClient::new(lock_runtime::Config::sentinel(MASTER, urls.clone()))
    })
    .unwrap();
    let guard = holder.lock("sentinel:job").acquire().await.unwrap();
    let urls = urls.join(",");
    let run = lockctl(&urls, &["--sentinel", MASTER, "inspect", "sentinel:job"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.lines()[1].starts_with(&format!("holder   {}  ttl ", guard.token())),
        "{}",
        run.stdout
    );
    let run = lockctl(&urls, &["--sentinel", MASTER, "list", "sentinel:*"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        listed(run.lines()[0], "sentinel:job", guard.token()),
        "{}",
        run.stdout
    );
    let run = lockctl(&urls, &["--sentinel", "nosuch", "list", "*"]).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    guard.release().await.unwrap();
}

/// Sentinel with the data nodes' own password, as `Config::primary_password` takes it:
/// `list`'s own connection reaches the primary the same way; without the password the
/// primary refuses (exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_reaches_a_sentinel_primary_with_its_own_password() {
    use lock_tests::sentinel::{MASTER, SentinelDeployment};
    let deployment = tokio::task::block_in_place(|| {
        SentinelDeployment::start_with_passwords("sentinel-secret", "node-secret")
    });
    let urls = deployment.sentinel_urls();
    let config =
        lock_runtime::Config::sentinel(MASTER, urls.clone()).primary_password("node-secret");
    let holder = tokio::task::block_in_place(|| lock_runtime::LockClient::new(config)).unwrap();
    let guard = holder.lock("pw:job").acquire().await.unwrap();
    let urls = urls.join(",");
    let flags = ["--sentinel", MASTER, "--primary-password", "node-secret"];
    let run = lockctl(&urls, &[&flags[..], &["list", "pw:*"]].concat()).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        listed(run.lines()[0], "pw:job", guard.token()),
        "{}",
        run.stdout
    );
    let run = lockctl(&urls, &["--sentinel", MASTER, "inspect", "pw:job"]).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    guard.release().await.unwrap();
}

/// Sentinel with data nodes behind TLS (plain sentinels): `--primary-tls-ca-cert`, as
/// `Config::primary_tls_ca_cert`, reaches the primary for `inspect` and `list`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_reaches_a_sentinel_primary_behind_tls() {
    use lock_tests::sentinel::{MASTER, SentinelDeployment};
    use lock_tests::tls::Certificates;
    let certificates = Certificates::generate();
    let deployment =
        tokio::task::block_in_place(|| SentinelDeployment::start_with_tls_nodes(&certificates));
    let urls = deployment.sentinel_urls();
    let config = lock_runtime::Config::sentinel(MASTER, urls.clone())
        .primary_tls_ca_cert(certificates.read("ca.crt"));
    let holder = tokio::task::block_in_place(|| lock_runtime::LockClient::new(config)).unwrap();
    let guard = holder.lock("tls:job").acquire().await.unwrap();
    let ca = certificates.path("ca.crt").to_str().unwrap().to_owned();
    let urls = urls.join(",");
    let flags = ["--sentinel", MASTER, "--primary-tls-ca-cert", &ca];
    for command in [&["inspect", "tls:job"][..], &["list", "tls:*"]] {
        let run = lockctl(&urls, &[&flags[..], command].concat()).await;
        assert_eq!(run.code, 0, "{command:?}: {}", run.stderr);
        assert!(run.stdout.contains(guard.token()), "{}", run.stdout);
    }
    guard.release().await.unwrap();
}

/// Whether a `list` line names `key` and its holder, whose token is `token`, as held by
/// this process.
fn listed(line: &str, key: &str, token: &str) -> bool {
    line.starts_with(&format!("{key}  held by "))
        && line.contains(&format!(" pid {} ", std::process::id()))
        && line.ends_with(&format!("  token {token}"))
}
