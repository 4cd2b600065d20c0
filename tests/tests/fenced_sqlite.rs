//! Fencing checked by a real store (`examples/src/fenced_sqlite.rs`): a holder in another
//! OS process is stopped (`SIGSTOP`) past its lease, a second holder takes the lock with a
//! greater fence and writes, then the first is resumed (`SIGCONT`) and writes with its
//! stale fence: SQLite's `UPDATE ... WHERE id = ? AND last_fence < ?` updates 0 rows, and
//! the stored price is the second holder's. Without the store's `last_fence < ?` check the
//! stale write overwrites it, and this test fails.
#![allow(clippy::unwrap_used, missing_docs)]

use std::io::Write;
use std::process::Child;
use std::time::Duration;

use lock_examples::fenced_sqlite::{self, PriceBook, WriteOutcome};
use lock_runtime::{Config, LockClient, ReleaseOutcome};
use lock_tests::{RedisServer, child};

const URL_ENV: &str = "LOCK_TESTS_URL";
const DB_ENV: &str = "FENCED_SQLITE_DB";
const ITEM: &str = "phone";
/// The paused holder's lease: short, so the test waits about a second for it to run out.
const TTL: Duration = Duration::from_secs(1);
const PAUSED_VALUE: i64 = 999;
const SECOND_VALUE: i64 = 450;
/// Bound on every wait for a line from the child (a loaded machine is slow, not stuck).
const LINE_BOUND: Duration = Duration::from_secs(30);

/// The first holder: runs only in the child process the test below starts. It takes the
/// lock with fencing (watchdog renewing a 1 s lease), says so, waits for a line on stdin,
/// then writes with its fence, whatever happened to its lease meanwhile, and reports how
/// many rows the store updated.
#[test]
fn paused_holder_worker() {
    let Some(role) = child::role() else { return };
    assert_eq!(role, "paused-holder");
    let url = std::env::var(URL_ENV).unwrap();
    let db = std::env::var(DB_ENV).unwrap();
    let runtime = lock_tests::two_worker_runtime();
    runtime.block_on(async move {
        let client = LockClient::new(Config::single(url)).unwrap();
        let book = PriceBook::open(db.as_ref()).unwrap();
        let guard = client
            .lock(fenced_sqlite::lock_key(ITEM))
            .ttl(TTL)
            .fencing(true)
            .wait(Duration::ZERO)
            .acquire()
            .await
            .unwrap();
        let fence = guard.fence().unwrap();
        println!("acquired fence={fence}");
        // The parent stops this process here, past the lease, and sends the line.
        let go = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|_| line)
        })
        .await
        .unwrap()
        .unwrap();
        assert_eq!(go.trim(), "write", "unexpected line from the test: {go:?}");
        let outcome = book.write(ITEM, PAUSED_VALUE, fence).await.unwrap();
        let rows = u8::from(outcome == WriteOutcome::Accepted);
        println!("wrote fence={fence} rows={rows} outcome={outcome:?}");
        println!("released {:?}", guard.release().await.unwrap());
    });
}

/// The child process, killed on drop if it is still there (also when stopped), so a
/// failing test leaves no stopped process behind.
struct Holder(Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_holder_stopped_past_its_lease_has_its_write_rejected_by_the_store() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let dir = std::env::temp_dir().join(format!(
        "lock-tests-fenced-sqlite-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("prices.sqlite");
    let runtime = lock_tests::two_worker_runtime();
    runtime.block_on(async {
        // The second holder is this process, through the example's `set_price`
        // (`#[distributed_lock]` on the global client).
        lock_runtime::init(Config::single(server.url())).unwrap();
        let book = PriceBook::open(&db).unwrap();
        book.add(ITEM, 500).await.unwrap();

        let mut holder = Holder(child::spawn_with_stdin(
            "paused_holder_worker",
            "paused-holder",
            &[
                (URL_ENV, server.url()),
                (DB_ENV, db.to_str().unwrap().to_owned()),
            ],
        ));
        let pid = holder.0.id();
        let mut go = holder.0.stdin.take().unwrap();
        let lines = child::stream_lines(holder.0.stdout.take().unwrap());
        let paused_fence: u64 = child::expect_line(&lines, "acquired fence=", LINE_BOUND)
            .parse()
            .unwrap();
        child::pause(pid);

        // Waits (woken, not polling) until the stopped holder's lease runs out: the one
        // wait that cannot be an event.
        let second = fenced_sqlite::set_price(&book, ITEM, SECOND_VALUE).await;
        assert_eq!(
            second.as_ref().ok(),
            Some(&WriteOutcome::Accepted),
            "the second holder's write: {second:?}"
        );
        let second_fence = book.read(ITEM).await.unwrap().unwrap().last_fence;
        assert!(
            second_fence > paused_fence,
            "fence {second_fence} of the second holder is not above the first's {paused_fence}"
        );

        // The line waits in the pipe; on SIGCONT the holder writes at once, as a process
        // resumed from a pause does, before its watchdog has noticed anything.
        go.write_all(b"write\n").unwrap();
        go.flush().unwrap();
        child::signal(pid, "CONT");
        let wrote = child::expect_line(&lines, "wrote ", LINE_BOUND);
        let released = child::expect_line(&lines, "released ", LINE_BOUND);
        let status = holder.0.wait().unwrap();
        assert!(status.success(), "the paused holder failed: {status:?}");

        let stored = book.read(ITEM).await.unwrap().unwrap();
        assert_eq!(
            wrote,
            format!(
                "fence={paused_fence} rows=0 outcome={:?}",
                WriteOutcome::Rejected {
                    last_fence: second_fence
                }
            ),
            "the store took the stale write of the stopped holder (stored now: {stored:?})"
        );
        assert_eq!(
            (stored.value, stored.last_fence),
            (SECOND_VALUE, second_fence),
            "the stored price is not the second holder's"
        );
        assert_ne!(
            released,
            format!("{:?}", ReleaseOutcome::Released),
            "the stopped holder released a lock it no longer held"
        );
    });
    let _ = std::fs::remove_dir_all(&dir);
}
