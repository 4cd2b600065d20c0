//! Many held locks: the watchdog renews the leases due together in a few script calls (up
//! to a couple of hundred leases each), not one call per lease, so that the server's cost of
//! holding stays near a bare `PEXPIRE` per lease.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{Config, LockClient};
use lock_tests::RedisServer;

/// `calls` of `command` in `INFO commandstats` (0 when it never ran).
fn calls(server: &RedisServer, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// 1,000 locks held through several renewal periods: every lease lives and is renewed every
/// third of its ttl, and the renewals (each a `PEXPIRE` inside the script) go out in script
/// calls of many leases each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_held_locks_are_renewed_in_a_few_script_calls() {
    let server = RedisServer::start();
    let client = LockClient::new(Config::single(server.url())).unwrap();
    let ttl = Duration::from_millis(1500);
    let mut guards = Vec::new();
    for n in 0..1_000 {
        let guard = client
            .lock(format!("held:{n}"))
            .ttl(ttl)
            .acquire()
            .await
            .unwrap();
        guards.push(guard);
    }
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut server.conn())
        .unwrap();
    tokio::time::sleep(ttl * 3).await;
    let (scripts, renewals) = (server.script_calls(), calls(&server, "pexpire"));
    // Every third of the ttl: nine rounds in three ttls (seven asked, for a busy machine;
    // a lease renewed only when its validity runs out makes six).
    assert!(
        renewals >= 7 * 1_000,
        "every lease renewed every third of its ttl: {renewals} renewals of 1,000 leases in three ttls"
    );
    assert!(
        scripts * 20 <= renewals,
        "{renewals} renewals took {scripts} script calls: not batched"
    );
    for guard in &guards {
        assert!(!guard.is_lost(), "lease of {} lost", guard.key());
    }
}
