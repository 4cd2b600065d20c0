//! Cluster mode on a real local 3-master Redis Cluster: exclusion, wake-ups on keys served by
//! different nodes, fencing in the key's slot, and a slot migration during a run.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError};
use lock_tests::cluster::RedisCluster;

fn cluster_client(cluster: &RedisCluster) -> LockClient {
    LockClient::new(Config::cluster(cluster.urls())).unwrap()
}

#[derive(Default)]
struct Detector {
    inside: AtomicUsize,
    overlaps: AtomicUsize,
    entries: AtomicUsize,
}

impl Detector {
    async fn hold(&self, hold: Duration) {
        if self.inside.fetch_add(1, Ordering::SeqCst) > 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        self.entries.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(hold).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `tasks` tasks spread over `clients` (separate connections, as separate processes would
/// be) each take `key` once and hold it for `hold`.
async fn contend(clients: &[LockClient], key: &str, tasks: usize, hold: Duration) -> Arc<Detector> {
    let detector = Arc::new(Detector::default());
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let client = clients[task % clients.len()].clone();
            let detector = detector.clone();
            let key = key.to_owned();
            tokio::spawn(async move {
                client
                    .lock(key)
                    .wait(Duration::from_secs(60))
                    .run(async {
                        detector.hold(hold).await;
                        Ok::<_, LockError>(())
                    })
                    .await
                    .unwrap();
            })
        })
        .collect();
    for handle in handles {
        handle.await.unwrap();
    }
    detector
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flash_sale_invariant_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let clients: Vec<_> = (0..3).map(|_| cluster_client(&cluster)).collect();
    let mut redis = redis::cluster::ClusterClient::new(cluster.urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("phones")
        .arg(10)
        .query_async(&mut redis)
        .await
        .unwrap();
    let sold = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..60)
        .map(|buyer| {
            let client = clients[buyer % 3].clone();
            let mut redis = redis.clone();
            let sold = sold.clone();
            tokio::spawn(async move {
                client
                    .lock("stock:phones")
                    .wait(Duration::from_secs(60))
                    .run(async {
                        // A deliberately non-atomic read-modify-write.
                        let stock: i64 = redis::cmd("GET")
                            .arg("phones")
                            .query_async(&mut redis)
                            .await
                            .unwrap();
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        if stock > 0 {
                            let _: () = redis::cmd("SET")
                                .arg("phones")
                                .arg(stock - 1)
                                .query_async(&mut redis)
                                .await
                                .unwrap();
                            sold.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok::<(), LockError>(())
                    })
                    .await
                    .unwrap();
            })
        })
        .collect();
    for handle in handles {
        handle.await.unwrap();
    }
    let remaining: i64 = redis::cmd("GET")
        .arg("phones")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(sold.load(Ordering::SeqCst), 10, "oversold or undersold");
    assert_eq!(remaining, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_keys_of_different_nodes_are_woken_not_polling() {
    let cluster = RedisCluster::start(3);
    let keys: Vec<String> = (0..3)
        .map(|node| cluster.key_near_first_slot("hot", node, 2000))
        .collect();
    let owners: Vec<usize> = keys
        .iter()
        .map(|key| cluster.owner(cluster.slot(key)))
        .collect();
    assert_eq!(owners, vec![0, 1, 2], "the keys should live on three nodes");
    let clients: Vec<_> = (0..2).map(|_| cluster_client(&cluster)).collect();
    for node in &cluster.nodes {
        node.reset_stats();
    }
    let tasks = 30;
    for key in &keys {
        let detector = contend(&clients, key, tasks, Duration::from_millis(2)).await;
        assert_eq!(detector.overlaps.load(Ordering::SeqCst), 0);
        assert_eq!(detector.entries.load(Ordering::SeqCst), tasks);
    }
    let executed: u64 = cluster
        .nodes
        .iter()
        .map(|node| node.script_calls() - node.failed_script_calls())
        .sum();
    let acquisitions = (tasks * keys.len()) as u64;
    // Tasks of one client pass the lock between them; each client waits in Redis as one
    // place per key, woken by releases: a few script calls per Redis tenure, shared by its
    // acquisitions. Waiting per task costs two or more per acquisition, polling many more.
    let per_acquisition = executed as f64 / acquisitions as f64;
    println!("script calls per acquisition on the cluster: {per_acquisition:.2}");
    assert!(
        per_acquisition <= 1.5,
        "{per_acquisition:.2} script calls per acquisition"
    );
    for client in &clients {
        assert_eq!(client.waiting(), (0, 0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_increase_and_the_counter_shares_the_slot() {
    let cluster = RedisCluster::start(3);
    let client = cluster_client(&cluster);
    assert_eq!(
        cluster.slot("order:7"),
        cluster.slot("~lock/fence{order:7}")
    );
    let mut last = 0;
    for _ in 0..5 {
        let guard = client
            .lock("order:7")
            .fencing(true)
            .acquire()
            .await
            .unwrap();
        let fence = guard.fence().unwrap();
        assert!(fence > last, "fence {fence} after {last}");
        last = fence;
        guard.release().await.unwrap();
    }
    assert!(cluster.get("~lock/fence{order:7}").is_some());
}

/// Safety across a slot migration: while `redis-cli --cluster reshard` moves the lock key's
/// slot to another node, no two holders overlap, and every waiter still gets its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migration_during_a_run_grants_no_lock_twice() {
    let cluster = RedisCluster::start(3);
    let key = cluster.key_near_first_slot("migrating", 0, 100);
    let slot = cluster.slot(&key);
    assert_eq!(cluster.owner(slot), 0);
    let clients: Vec<_> = (0..2).map(|_| cluster_client(&cluster)).collect();
    let detector = Arc::new(Detector::default());
    let gave_up = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // Tasks keep taking the lock until told to stop (each at most 3,000 times), so the run
    // surely spans the whole migration.
    let tasks = 16;
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let client = clients[task % clients.len()].clone();
            let (detector, gave_up, stop, key) =
                (detector.clone(), gave_up.clone(), stop.clone(), key.clone());
            tokio::spawn(async move {
                for _ in 0..3_000 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let run = client
                        .lock(key.clone())
                        .wait(Duration::from_secs(8))
                        .run(async {
                            detector.hold(Duration::from_millis(3)).await;
                            Ok::<_, LockError>(())
                        })
                        .await;
                    match run {
                        Ok(()) => {}
                        Err(LockError::Timeout { .. } | LockError::Backend { .. }) => {
                            gave_up.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(other) => panic!("{other:?}"),
                    }
                }
            })
        })
        .collect();
    let entries = |detector: &Detector| detector.entries.load(Ordering::SeqCst);
    let until_entries = |target: usize| {
        let detector = detector.clone();
        async move {
            for _ in 0..10_000 {
                if entries(&detector) >= target {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            false
        }
    };
    assert!(until_entries(20).await, "the run did not get going");
    let before = entries(&detector);
    // Move the first 100 slots of node 0, the key's among them, while the run goes on.
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.reshard(0, 1, 100);
        cluster
    })
    .await
    .unwrap();
    let at_move = entries(&detector);
    // Served by the slot's new owner after the move, by the same running tasks.
    let served_after = until_entries(at_move + 50).await;
    stop.store(true, Ordering::SeqCst);
    for handle in handles {
        handle.await.unwrap();
    }
    let (total, gave_up) = (entries(&detector), gave_up.load(Ordering::SeqCst));
    println!(
        "migration run: {before} acquisitions before the move, {} during it, {} after; \
         {gave_up} waiters gave up",
        at_move - before,
        total - at_move
    );
    assert_eq!(cluster.owner(slot), 1, "the slot did not move");
    assert!(served_after, "no acquisitions after the move");
    assert_eq!(
        detector.overlaps.load(Ordering::SeqCst),
        0,
        "a lock was granted twice"
    );
    assert_eq!(gave_up, 0, "waiters stalled through the migration");
    // After the move the slot's new owner grants the lock.
    let after = clients[0]
        .lock(key)
        .wait(Duration::from_secs(40))
        .acquire()
        .await
        .unwrap();
    after.release().await.unwrap();
}

/// The application's builder names its seeds itself: a client with `wait_for_replicas` is
/// built without reading a seed from the configuration (whose only "URL" is a description
/// of the builder).
#[test]
fn an_applications_cluster_builder_takes_the_replicas_option() {
    let builder = || redis::cluster::ClusterClientBuilder::new(["redis://127.0.0.1:1"]);
    let replicas = Config::cluster_builder(builder).wait_for_replicas(1, Duration::from_millis(50));
    let built = LockClient::new(replicas).map(drop);
    assert!(built.is_ok(), "{built:?}");
}
