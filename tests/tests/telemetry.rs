//! The `metrics` feature (see `lock_runtime::telemetry`): a recorder installed by the test
//! counts a small scenario against a real redis-server: one lock acquired and released,
//! one busy, one timed out, one lease lost to a `DEL` and one to a killed server; and the
//! INFO events of the timeout and of a body stopped by a lost lease, and the DEBUG event of
//! the busy lock. And a lease that `LockGuard::extend` finds gone, counted once.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::telemetry::{ACQUISITIONS, HOLD_SECONDS, LOST, RENEWAL_FAILURES, WAIT_SECONDS};
use lock_runtime::{Config, LockClient, LockError, LostCause, ReleaseOutcome};
use lock_tests::RedisServer;
use metrics::{SharedString, Unit};
use metrics_util::CompositeKey;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// One snapshot of everything recorded (taking one drains the histograms).
type Samples = Vec<(CompositeKey, Option<Unit>, Option<SharedString>, DebugValue)>;

/// The sum of the samples of metric `name` whose labels are exactly `labels` (counters:
/// their value; histograms: how many samples).
fn count(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> u64 {
    samples
        .iter()
        .filter(|(key, _, _, _)| {
            let mut have: Vec<(String, String)> = key
                .key()
                .labels()
                .map(|label| (label.key().to_owned(), label.value().to_owned()))
                .collect();
            let mut want: Vec<(String, String)> = labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            have.sort();
            want.sort();
            key.key().name() == name && have == want
        })
        .map(|(_, _, _, value)| match value {
            DebugValue::Counter(value) => *value,
            DebugValue::Histogram(samples) => samples.len() as u64,
            DebugValue::Gauge(_) => 0,
        })
        .sum()
}

/// Everything the `tracing` fmt subscriber writes, for the test to read.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The lines at `level` that contain `text`.
    fn lines(&self, level: &str, text: &str) -> usize {
        self.matching(level, &[text]).len()
    }

    /// The lines at `level` that contain every one of `texts`.
    fn matching(&self, level: &str, texts: &[&str]) -> Vec<String> {
        let bytes = self.0.lock().unwrap().clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|line| line.contains(level) && texts.iter().all(|text| line.contains(text)))
            .map(str::to_owned)
            .collect()
    }
}

/// The unit and description a recorder was given for metric `name`.
fn described(samples: &Samples, name: &str) -> (Option<Unit>, Option<String>) {
    samples
        .iter()
        .find(|(key, _, _, _)| key.key().name() == name)
        .map(|(_, unit, text, _)| (*unit, text.as_ref().map(ToString::to_string)))
        .unwrap_or_else(|| panic!("no sample of {name}"))
}

/// The values recorded in histogram `name` with exactly `labels`.
fn histogram(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    samples
        .iter()
        .filter(|(key, _, _, _)| {
            key.key().name() == name
                && key.key().labels().count() == labels.len()
                && labels.iter().all(|(k, v)| {
                    key.key()
                        .labels()
                        .any(|label| label.key() == *k && label.value() == *v)
                })
        })
        .flat_map(|(_, _, _, value)| match value {
            DebugValue::Histogram(values) => values.iter().map(|v| v.into_inner()).collect(),
            _ => Vec::new(),
        })
        .collect()
}

fn client(server: &RedisServer) -> LockClient {
    LockClient::new(
        Config::single(server.url())
            .connect_timeout(Duration::from_millis(200))
            .response_timeout(Duration::from_millis(200))
            .metrics_key_label(|key| key.split(':').next().unwrap_or_default().to_owned()),
    )
    .unwrap()
}

/// The process's recorder: the client's background work (the watchdog's losses) runs on
/// the client's own thread, so it reports to the global recorder, installed once here.
fn recorder() -> &'static metrics_util::debugging::Snapshotter {
    static SNAPSHOTTER: std::sync::OnceLock<metrics_util::debugging::Snapshotter> =
        std::sync::OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().unwrap();
        snapshotter
    })
}

/// A snapshot drains the counters: the tests that read the one recorder run one at a time,
/// each from a drained recorder.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_scenario_is_counted() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let snapshotter = recorder();
    drop(snapshotter.snapshot());
    let events = Captured::default();
    let writer = events.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    let mut server = RedisServer::start();
    let ours = client(&server);
    let theirs = client(&server);

    // Acquired, then busy and timed out for another client, then released.
    let held = ours.lock("shop:1").acquire().await.unwrap();
    let busy = theirs.lock("shop:1").wait(Duration::ZERO).acquire().await;
    assert!(matches!(busy, Err(LockError::Busy { .. })), "{busy:?}");
    let timeout = theirs
        .lock("shop:1")
        .wait(Duration::from_millis(100))
        .acquire()
        .await;
    assert!(
        matches!(timeout, Err(LockError::Timeout { .. })),
        "{timeout:?}"
    );
    held.release().await.unwrap();

    // A hold of about 50 ms, whose release waits 100 ms for the server (writes paused):
    // the histogram and the release's event say the same.
    let guard = ours.lock("held:7").acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(100)
        .arg("WRITE")
        .query(&mut server.conn())
        .unwrap();
    guard.release().await.unwrap();

    // A guarded call with an event of the application's in its body.
    ours.lock("once:6")
        .run(async {
            tracing::info!("the body's own event");
            Ok::<_, LockError>(())
        })
        .await
        .unwrap();

    // Another owner took the key during the body (30 s lease: no renewal ran): found at
    // release, a WARN and a counted loss.
    let admin = server.redis();
    let taken_over: Result<(), LockError> = ours
        .lock("failover:5")
        .ttl(Duration::from_secs(30))
        .run(async {
            let mut admin = admin.get_multiplexed_async_connection().await.unwrap();
            let _: () = redis::cmd("SET")
                .arg("failover:5")
                .arg("other-owner")
                .arg("PX")
                .arg(30_000)
                .query_async(&mut admin)
                .await
                .unwrap();
            Ok(())
        })
        .await;
    assert!(
        matches!(
            taken_over,
            Err(LockError::Lost {
                cause: LostCause::FoundAtRelease,
                ..
            })
        ),
        "{taken_over:?}"
    );

    // Release futures dropped after their first poll: the drop releases in the background;
    // each hold is reported once.
    for index in 0..5 {
        let guard = ours.lock(format!("drop:{index}")).acquire().await.unwrap();
        let mut release = Box::pin(guard.release());
        let _ = futures::FutureExt::now_or_never(&mut release);
        drop(release);
    }

    // Lost: the key deleted under its holder (the next renewal finds the token gone).
    let deleted = ours
        .lock("stock:2")
        .ttl(Duration::from_millis(900))
        .acquire()
        .await
        .unwrap();
    let deleted_token = deleted.token().to_owned();
    let _: () = redis::cmd("DEL")
        .arg("stock:2")
        .query(&mut server.conn())
        .unwrap();
    let cause = tokio::time::timeout(Duration::from_secs(3), deleted.lost())
        .await
        .unwrap();
    assert_eq!(cause, LostCause::TokenGone);

    // A guarded body stopped by the loss of its lease: the INFO event.
    let admin = server.redis();
    let stopped: Result<(), LockError> = ours
        .lock("run:4")
        .ttl(Duration::from_millis(900))
        .run(async {
            let mut admin = admin.get_multiplexed_async_connection().await.unwrap();
            let _: () = redis::cmd("DEL")
                .arg("run:4")
                .query_async(&mut admin)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_secs(3)).await;
            Ok(())
        })
        .await;
    assert!(
        matches!(stopped, Err(LockError::Lost { .. })),
        "{stopped:?}"
    );

    // Lost: the server killed under the holder (renewals fail until the validity ends).
    let stranded = ours
        .lock("stock:3")
        .ttl(Duration::from_millis(900))
        .acquire()
        .await
        .unwrap();
    server.kill9();
    let cause = tokio::time::timeout(Duration::from_secs(3), stranded.lost())
        .await
        .unwrap();
    assert_eq!(cause, LostCause::RenewalFailed);
    drop((deleted, stranded));
    let snapshot: Samples = snapshotter.snapshot().into_vec();
    let snapshotter = &snapshot;

    let acquired = [("outcome", "acquired"), ("key", "shop")];
    assert_eq!(count(snapshotter, ACQUISITIONS, &acquired), 1);
    assert_eq!(count(snapshotter, WAIT_SECONDS, &acquired), 1);
    let stock_acquired = [("outcome", "acquired"), ("key", "stock")];
    assert_eq!(count(snapshotter, ACQUISITIONS, &stock_acquired), 2);
    let busy = [("outcome", "busy"), ("key", "shop")];
    assert_eq!(count(snapshotter, ACQUISITIONS, &busy), 1);
    let timeout = [("outcome", "timeout"), ("key", "shop")];
    assert_eq!(count(snapshotter, ACQUISITIONS, &timeout), 1);
    assert_eq!(count(snapshotter, WAIT_SECONDS, &timeout), 1);
    assert_eq!(count(snapshotter, HOLD_SECONDS, &[("key", "shop")]), 1);
    assert_eq!(count(snapshotter, HOLD_SECONDS, &[("key", "stock")]), 2);
    assert_eq!(count(snapshotter, HOLD_SECONDS, &[("key", "drop")]), 5);
    let gone = [("cause", "token_gone"), ("key", "stock")];
    assert_eq!(count(snapshotter, LOST, &gone), 1);
    let failed = [("cause", "renewal_failed"), ("key", "stock")];
    assert_eq!(count(snapshotter, LOST, &failed), 1);
    let failures = count(snapshotter, RENEWAL_FAILURES, &[("key", "stock")]);
    assert!(failures >= 1, "renewal failures: {failures}");
    // The events: INFO for the timeout, DEBUG for busy.
    assert_eq!(events.lines("INFO", "lock wait timed out"), 1);
    assert_eq!(events.lines("DEBUG", "lock busy"), 1);
    assert_eq!(events.lines("INFO", "the lease was lost"), 1);

    // A loss found at release: one WARN naming the key, counted once.
    assert_eq!(events.lines("WARN", "failover:5"), 1);
    let found = [("cause", "found_at_release"), ("key", "failover")];
    assert_eq!(count(snapshotter, LOST, &found), 1);

    // Failed renewals name their lease's key.
    let renewals_failed = events.lines("WARN", "lease renewal failed");
    assert!(renewals_failed >= 1, "no renewal failure logged");
    assert_eq!(
        events
            .matching("WARN", &["lease renewal failed", "stock:3"])
            .len(),
        renewals_failed,
        "a renewal failure without its key"
    );

    // Every line names a lock's key at most once (a span's field and an event's field, or
    // a field and an error's text, would name it twice).
    let keys = [
        "shop:1",
        "held:7",
        "once:6",
        "failover:5",
        "stock:2",
        "run:4",
        "stock:3",
        "drop:0",
    ];
    for line in events.matching("", &[]) {
        for key in keys {
            assert!(line.matches(key).count() <= 1, "{key} twice in: {line}");
        }
    }
    assert_eq!(
        events
            .matching("INFO", &["the body's own event", "once:6"])
            .len(),
        1,
        "the body's event does not say which lock it ran under"
    );

    // One definition of hold time: the histogram's value is the event's `held_ms`.
    let seconds = histogram(snapshotter, HOLD_SECONDS, &[("key", "held")]);
    assert_eq!(seconds.len(), 1, "{seconds:?}");
    let released = events.matching("DEBUG", &["lock released", "key=held:7"]);
    assert_eq!(released.len(), 1, "{released:?}");
    // The events of a hold carry its token, which names the holder.
    assert!(released[0].contains("token=lr-"), "{released:?}");
    let lost = events.matching("WARN", &["lock lost", &format!("token={deleted_token}")]);
    assert_eq!(lost.len(), 1, "{lost:?}");
    let held_ms: f64 = released[0]
        .split("held_ms=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    let histogram_ms = seconds[0] * 1000.0;
    assert!(
        (0.0..1.0).contains(&(histogram_ms - held_ms)),
        "lock_hold_seconds says {histogram_ms} ms, the event held_ms={held_ms}"
    );
    assert!(held_ms >= 50.0, "held_ms={held_ms}");

    // Each metric is described, with its unit.
    for name in [ACQUISITIONS, LOST, RENEWAL_FAILURES] {
        let (unit, text) = described(snapshotter, name);
        assert_eq!(unit, Some(Unit::Count), "{name}");
        assert!(text.is_some_and(|text| !text.is_empty()), "{name}");
    }
    for name in [WAIT_SECONDS, HOLD_SECONDS] {
        let (unit, text) = described(snapshotter, name);
        assert_eq!(unit, Some(Unit::Seconds), "{name}");
        assert!(text.is_some_and(|text| !text.is_empty()), "{name}");
    }

    // Nothing labelled by the full key.
    let full_keys = snapshot
        .iter()
        .filter(|(key, _, _, _)| key.key().labels().any(|label| label.value().contains(':')))
        .count();
    assert_eq!(full_keys, 0);
}

/// A lease that `extend` finds gone is a lost lease like one the watchdog finds gone:
/// counted at once, and once.
#[test]
fn a_lease_extend_finds_gone_is_counted_once() {
    let _alone = ONE_AT_A_TIME.blocking_lock();
    let snapshotter = recorder();
    drop(snapshotter.snapshot());
    // A snapshot drains the counters: keep every snapshot, and count over them all.
    let snapshots = std::cell::RefCell::new(Samples::new());
    let lost = |label: &str| {
        let mut snapshots = snapshots.borrow_mut();
        snapshots.extend(snapshotter.snapshot().into_vec());
        count(&snapshots, LOST, &[("cause", "token_gone"), ("key", label)])
    };
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let server = RedisServer::start();
            let client = client(&server);
            let delete = |key: &str| {
                let _: () = redis::cmd("DEL")
                    .arg(key)
                    .query(&mut server.conn())
                    .unwrap();
            };

            // Watchdog on: `extend` finds the key deleted before any renewal does. Counted
            // then, and not again by the renewals that follow (every 300 ms).
            let mut renewed = client
                .lock("renewed:1")
                .ttl(Duration::from_millis(900))
                .acquire()
                .await
                .unwrap();
            delete("renewed:1");
            let err = renewed.extend(Duration::from_secs(5)).await.unwrap_err();
            assert!(matches!(err, LockError::Lost { .. }), "{err:?}");
            assert_eq!(lost("renewed"), 1, "the loss extend found was not counted");
            assert_eq!(renewed.lost_cause(), Some(LostCause::TokenGone));
            tokio::time::sleep(Duration::from_millis(1500)).await;
            assert_eq!(lost("renewed"), 1, "one lost lease counted twice");
            drop(renewed);

            // Watchdog off: nothing else would ever count it.
            let mut unrenewed = client
                .lock("unrenewed:1")
                .ttl(Duration::from_secs(5))
                .watchdog(false)
                .acquire()
                .await
                .unwrap();
            delete("unrenewed:1");
            let err = unrenewed.extend(Duration::from_secs(5)).await.unwrap_err();
            assert!(matches!(err, LockError::Lost { .. }), "{err:?}");
            assert_eq!(
                lost("unrenewed"),
                1,
                "the loss extend found was not counted"
            );
            assert!(unrenewed.is_lost());
            drop(unrenewed);

            // The watchdog found it gone first and counted it: `extend` does not again.
            let mut watched = client
                .lock("watched:1")
                .ttl(Duration::from_millis(900))
                .acquire()
                .await
                .unwrap();
            delete("watched:1");
            let cause = tokio::time::timeout(Duration::from_secs(3), watched.lost())
                .await
                .unwrap();
            assert_eq!(cause, LostCause::TokenGone);
            assert_eq!(lost("watched"), 1);
            let err = watched.extend(Duration::from_secs(5)).await.unwrap_err();
            assert!(matches!(err, LockError::Lost { .. }), "{err:?}");
            assert_eq!(lost("watched"), 1, "one lost lease counted twice");
        });
    }
}

/// A release that finds the key gone, or held by another owner, while the guard still
/// believed its lease valid is a loss like one a renewal finds: counted once, with the
/// cause `found_at_release`, and `release` still reports what it found. A loss the
/// watchdog or `extend` reported already is not counted again by the release.
#[test]
fn a_loss_found_at_release_is_counted_once() {
    let _alone = ONE_AT_A_TIME.blocking_lock();
    let snapshotter = recorder();
    drop(snapshotter.snapshot());
    let snapshots = std::cell::RefCell::new(Samples::new());
    let lost = |cause: &str, label: &str| {
        let mut snapshots = snapshots.borrow_mut();
        snapshots.extend(snapshotter.snapshot().into_vec());
        count(&snapshots, LOST, &[("cause", cause), ("key", label)])
    };
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let server = RedisServer::start();
            let client = client(&server);
            let take_over = |key: &str| {
                let _: () = redis::cmd("SET")
                    .arg(key)
                    .arg("other-owner")
                    .arg("PX")
                    .arg(30_000)
                    .query(&mut server.conn())
                    .unwrap();
            };
            let delete = |key: &str| {
                let _: () = redis::cmd("DEL")
                    .arg(key)
                    .query(&mut server.conn())
                    .unwrap();
            };
            let held = |key: &'static str| {
                let lock = client.lock(key).ttl(Duration::from_secs(30));
                async move { lock.acquire().await }
            };

            // Taken over (30 s lease: no renewal ran): NotOwner, counted.
            let guard = held("owner:1").await.unwrap();
            take_over("owner:1");
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::NotOwner);
            assert_eq!(lost("found_at_release", "owner"), 1);
            assert_eq!(server.get("owner:1").as_deref(), Some("other-owner"));

            // Gone (deleted, evicted, a failover to a replica without it): counted.
            let guard = held("gone:1").await.unwrap();
            delete("gone:1");
            assert_eq!(
                guard.release().await.unwrap(),
                ReleaseOutcome::AlreadyExpired
            );
            assert_eq!(lost("found_at_release", "gone"), 1);

            // Dropped, not released: the background release counts it too.
            let guard = held("dropped:1").await.unwrap();
            take_over("dropped:1");
            drop(guard);
            for _ in 0..250 {
                if lost("found_at_release", "dropped") > 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(lost("found_at_release", "dropped"), 1);

            // The watchdog found it first and counted it: the release does not again.
            let guard = client
                .lock("watched:1")
                .ttl(Duration::from_millis(900))
                .acquire()
                .await
                .unwrap();
            take_over("watched:1");
            let cause = tokio::time::timeout(Duration::from_secs(3), guard.lost())
                .await
                .unwrap();
            assert_eq!(cause, LostCause::TokenGone);
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::NotOwner);
            assert_eq!(lost("token_gone", "watched"), 1);
            assert_eq!(lost("found_at_release", "watched"), 0);

            // `extend` found it first and counted it: the release does not again.
            let mut guard = held("extended:1").await.unwrap();
            take_over("extended:1");
            assert!(guard.extend(Duration::from_secs(30)).await.is_err());
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::NotOwner);
            assert_eq!(lost("token_gone", "extended"), 1);
            assert_eq!(lost("found_at_release", "extended"), 0);
        });
    }
}
