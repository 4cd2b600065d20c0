//! The live gauges of the `metrics` feature (see `lock_runtime::telemetry`), against a real
//! redis-server: a body that hangs shows as one lock held whose age grows, a waiter as one
//! task waiting whose age grows, and both go back to zero after the release, after a guard
//! dropped without one, and after a waiting future is dropped.
//!
//! The gauges are published once a second, so each test polls the recorder in a bounded
//! loop until it sees what it waits for; no assertion depends on how fast that happens.
//! Each test uses a key label of its own (the gauges are the process's).
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError};
use lock_tests::RedisServer;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};
use tokio::sync::Notify;

/// A recorder that keeps each gauge's last value. (The debugging recorder's snapshots
/// reset every gauge to zero: tests that read it at once would read each other's zeros.)
struct Latest(Registry<Key, AtomicStorage>);

impl Recorder for Latest {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.0
            .get_or_create_counter(key, |counter| Counter::from_arc(counter.clone()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.0
            .get_or_create_gauge(key, |gauge| Gauge::from_arc(gauge.clone()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.0
            .get_or_create_histogram(key, |histogram| Histogram::from_arc(histogram.clone()))
    }
}

/// The process's recorder: the gauges are published from the clients' own threads, so
/// they go to the global recorder, installed once here.
fn recorder() -> &'static Latest {
    static RECORDER: std::sync::OnceLock<&'static Latest> = std::sync::OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder: &'static Latest = Box::leak(Box::new(Latest(Registry::atomic())));
        metrics::set_global_recorder(recorder).unwrap();
        recorder
    })
}

/// The value of gauge `name` whose `key` label is `label` (`None`: the series without
/// labels), as last published.
fn gauge(name: &str, label: Option<&str>) -> Option<f64> {
    let mut found = None;
    recorder().0.visit_gauges(|key, value| {
        let labels: Vec<_> = key.labels().collect();
        let labelled = match label {
            None => labels.is_empty(),
            Some(label) => {
                labels.len() == 1 && labels[0].key() == "key" && labels[0].value() == label
            }
        };
        if key.name() == name && labelled {
            found = Some(f64::from_bits(value.load(Ordering::Acquire)));
        }
    });
    found
}

/// Polls until `seen` holds for the gauges (up to 30 s: a busy machine may delay the
/// once-a-second publisher, never by that much).
async fn until(what: &str, seen: impl Fn() -> bool) {
    for _ in 0..300 {
        if seen() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not seen within 30 s");
}

/// Waits until gauge `name` of `label` equals `value`.
async fn until_equal(name: &str, label: Option<&str>, value: f64) {
    let what = format!("{name} {{key={label:?}}} = {value}");
    until(&what, || gauge(name, label) == Some(value)).await;
}

/// A client whose metrics are labelled by the part of the key before its first `:`.
fn labelled_client(server: &RedisServer) -> LockClient {
    LockClient::new(
        Config::single(server.url())
            .metrics_key_label(|key| key.split(':').next().unwrap_or_default().to_owned()),
    )
    .unwrap()
}

/// Waits until the age gauge `name` of `label` is past `at_least` seconds, and returns it.
async fn until_older(name: &str, label: &str, at_least: f64) -> f64 {
    let what = format!("{name} {{key={label}}} > {at_least}");
    until(&what, || {
        gauge(name, Some(label)).is_some_and(|age| age > at_least)
    })
    .await;
    gauge(name, Some(label)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_body_shows_as_held_and_its_age_grows_until_the_release() {
    recorder();
    let server = RedisServer::start();
    let client = labelled_client(&server);
    // Kept: the gauges go back to zero while the client lives.
    let _alive = client.clone();
    let release = Arc::new(Notify::new());
    let hang = release.clone();
    // A body that hangs on a lease of 1 s: only the watchdog's renewals keep it.
    let held = tokio::spawn(async move {
        client
            .lock("hung:1")
            .ttl(Duration::from_secs(1))
            .run(async move {
                hang.notified().await;
                Ok::<_, LockError>(())
            })
            .await
    });
    until_equal("lock_held", Some("hung"), 1.0).await;
    let first = until_older("lock_oldest_hold_seconds", "hung", 0.0).await;
    // Older by more than the lease's ttl: still held, and still counted.
    let later = until_older("lock_oldest_hold_seconds", "hung", first + 1.5).await;
    assert!(later > first, "{later} after {first}");
    assert_eq!(gauge("lock_held", Some("hung")), Some(1.0));

    release.notify_one();
    held.await.unwrap().unwrap();
    until_equal("lock_held", Some("hung"), 0.0).await;
    until_equal("lock_oldest_hold_seconds", Some("hung"), 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_without_a_release_is_no_longer_counted() {
    recorder();
    let server = RedisServer::start();
    let client = labelled_client(&server);
    let guard = client.lock("dropped:1").acquire().await.unwrap();
    until_equal("lock_held", Some("dropped"), 1.0).await;
    drop(guard);
    until_equal("lock_held", Some("dropped"), 0.0).await;
    until_equal("lock_oldest_hold_seconds", Some("dropped"), 0.0).await;
}

/// Spawns a wait for `key` on `client` of up to a minute.
fn spawn_wait(client: &LockClient, key: &'static str) -> tokio::task::JoinHandle<()> {
    let client = client.clone();
    tokio::spawn(async move {
        let taken = client
            .lock(key)
            .wait(Duration::from_secs(60))
            .acquire()
            .await;
        drop(taken);
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_redis_shows_as_waiting_until_its_future_is_dropped() {
    recorder();
    let server = RedisServer::start();
    let (holder, other) = (labelled_client(&server), labelled_client(&server));
    let guard = holder.lock("queued:1").acquire().await.unwrap();
    // Another client's task: it waits in the key's queue in Redis.
    let waiter = spawn_wait(&other, "queued:1");
    until_equal("lock_waiting", Some("queued"), 1.0).await;
    let first = until_older("lock_oldest_wait_seconds", "queued", 0.0).await;
    let later = until_older("lock_oldest_wait_seconds", "queued", first + 1.0).await;
    assert!(later > first, "{later} after {first}");

    // The waiting future dropped mid-wait: no longer counted.
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    until_equal("lock_waiting", Some("queued"), 0.0).await;
    until_equal("lock_oldest_wait_seconds", Some("queued"), 0.0).await;
    guard.release().await.unwrap();
    until_equal("lock_held", Some("queued"), 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_behind_its_own_process_shows_as_waiting_until_it_takes_the_lock() {
    recorder();
    let server = RedisServer::start();
    let client = labelled_client(&server);
    let guard = client.lock("local:1").acquire().await.unwrap();
    // A task of the same client: it waits in the process's local queue.
    let waiter = spawn_wait(&client, "local:1");
    until_equal("lock_waiting", Some("local"), 1.0).await;
    until_older("lock_oldest_wait_seconds", "local", 0.5).await;

    guard.release().await.unwrap();
    waiter.await.unwrap();
    until_equal("lock_waiting", Some("local"), 0.0).await;
    until_equal("lock_oldest_wait_seconds", Some("local"), 0.0).await;
    until_equal("lock_held", Some("local"), 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_key_label_the_gauges_are_one_series_without_labels() {
    recorder();
    let server = RedisServer::start();
    // The only client of this binary without a key label.
    let client = server.lock_client();
    let guard = client.lock("unlabelled:1").acquire().await.unwrap();
    until_equal("lock_held", None, 1.0).await;
    assert!(gauge("lock_held", Some("unlabelled")).is_none());
    guard.release().await.unwrap();
    until_equal("lock_held", None, 0.0).await;
    until_equal("lock_waiting", None, 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_and_a_task_waiting_for_one_are_counted() {
    recorder();
    let server = RedisServer::start();
    let client = labelled_client(&server);
    let permit = client.semaphore("permits:1", 1).acquire().await.unwrap();
    until_equal("lock_held", Some("permits"), 1.0).await;
    let waiting = client.clone();
    let waiter = tokio::spawn(async move {
        let semaphore = waiting.semaphore("permits:1", 1);
        let taken = semaphore.wait(Duration::from_secs(60)).acquire().await;
        drop(taken);
    });
    until_equal("lock_waiting", Some("permits"), 1.0).await;
    until_older("lock_oldest_wait_seconds", "permits", 0.5).await;

    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    until_equal("lock_waiting", Some("permits"), 0.0).await;
    permit.release().await.unwrap();
    until_equal("lock_held", Some("permits"), 0.0).await;
    until_equal("lock_oldest_hold_seconds", Some("permits"), 0.0).await;
}

/// A gauge one client published and another did not see is still set back to zero when its
/// entry ends: client B publishes `stuck`'s hold (its first publication comes at once) and
/// is dropped while the hold lasts; A, whose hold it is, has not published since before
/// the hold began. The gauges are the process's, so whichever client publishes next sets
/// it to zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_series_another_client_published_is_zeroed_when_its_entry_ends() {
    recorder();
    let server = RedisServer::start();
    let a = labelled_client(&server);
    let guard = a.lock("stuck:1").acquire().await.unwrap();
    let b = labelled_client(&server);
    until_equal("lock_held", Some("stuck"), 1.0).await;
    drop(b);
    guard.release().await.unwrap();
    until_equal("lock_held", Some("stuck"), 0.0).await;
    until_equal("lock_oldest_hold_seconds", Some("stuck"), 0.0).await;
}
