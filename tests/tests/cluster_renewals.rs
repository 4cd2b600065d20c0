//! Cluster mode's renewals: a holder of keys on every master renews them with one pipeline
//! per master per period (not one request per lease), and keeps them through a slot
//! migration that makes its slot map stale.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{Config, LockClient};
use lock_tests::cluster::RedisCluster;

/// The renewal requests sent since the capture was last cleared: per request, how many
/// leases it renewed.
fn renewal_requests() -> Vec<usize> {
    lock_tests::events::mentioning(&["lease renewals sent"])
        .iter()
        .filter_map(|line| {
            let leases = line.split("leases=").nth(1)?;
            leases.split_whitespace().next()?.parse().ok()
        })
        .collect()
}

/// 300 keys spread over the three masters, held through several renewal periods: every
/// lease lives, and the renewals go out as a few pipelines (one per master per round),
/// not one request per lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_on_every_master_are_renewed_in_one_pipeline_per_master() {
    lock_tests::events::capture(tracing::Level::DEBUG);
    let cluster = RedisCluster::start(3);
    let client = LockClient::new(Config::cluster(cluster.urls())).unwrap();
    let ttl = Duration::from_millis(1500);
    let mut guards = Vec::new();
    for n in 0..300 {
        let guard = client
            .lock(format!("held:{n}"))
            .ttl(ttl)
            .acquire()
            .await
            .unwrap();
        guards.push(guard);
    }
    let masters: std::collections::HashSet<usize> = (0..300)
        .map(|n| cluster.owner(cluster.slot(&format!("held:{n}"))))
        .collect();
    assert_eq!(masters.len(), 3, "the keys are spread over every master");
    lock_tests::events::clear();
    tokio::time::sleep(ttl * 3).await;
    let requests = renewal_requests();
    let renewed: usize = requests.iter().sum();
    assert!(
        renewed >= 300 * 2,
        "every lease was renewed at least twice in three ttls: {renewed} renewals"
    );
    assert!(
        requests.len() * 20 <= renewed,
        "{renewed} renewals went out in {} requests: not batched per master",
        requests.len()
    );
    for guard in &guards {
        assert!(!guard.is_lost(), "lease of {} lost", guard.key());
    }
}

/// Held keys of one master, some of whose slots move to another master (`redis-cli
/// --cluster reshard`) while the client's slot map still says otherwise: whichever master
/// the renewal pipeline goes to, the renewals that find their key elsewhere are sent again
/// by their key in the same round (none fails), the map is read again, and every lease
/// lives, the moved ones on their new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_keys_whose_slots_move_keep_their_leases() {
    lock_tests::events::capture(tracing::Level::DEBUG);
    let cluster = RedisCluster::start(3);
    let client = LockClient::new(Config::cluster(cluster.urls())).unwrap();
    let ttl = Duration::from_secs(2);
    let first = cluster.first_slot(0);
    let on_master_0 = |range: std::ops::Range<u16>| -> Vec<String> {
        (0..100_000)
            .map(|n| format!("moving{{{n}}}"))
            .filter(|key| range.contains(&cluster.slot(key)))
            .take(20)
            .collect()
    };
    let moving = on_master_0(first..first + 50);
    let staying = on_master_0(first + 200..first + 2000);
    assert_eq!((moving.len(), staying.len()), (20, 20));
    let keys: Vec<String> = moving.iter().chain(&staying).cloned().collect();
    let mut guards = Vec::new();
    for key in &keys {
        guards.push(client.lock(key).ttl(ttl).acquire().await.unwrap());
    }
    // One renewal round on the old master first: the client's map names it.
    tokio::time::sleep(ttl / 2).await;
    tokio::task::block_in_place(|| cluster.reshard(0, 1, 100));
    tokio::time::sleep(ttl * 3).await;
    for (guard, key) in guards.iter().zip(&keys) {
        assert!(!guard.is_lost(), "lease of {key} lost");
        let owner = if moving.contains(key) { 1 } else { 0 };
        assert_eq!(
            cluster.owner(cluster.slot(key)),
            owner,
            "{key} on its master"
        );
        assert!(cluster.get(key).is_some(), "{key} held on its new master");
    }
    let failed: Vec<String> = lock_tests::events::mentioning(&["renewal failed"])
        .into_iter()
        .filter(|line| keys.iter().any(|key| line.contains(key.as_str())))
        .collect();
    assert!(
        failed.is_empty(),
        "a moved key's renewal is sent again in the same round, not failed: {failed:?}"
    );
}
