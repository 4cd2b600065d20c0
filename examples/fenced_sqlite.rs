//! Fencing checked by a real store: a holder paused past its lease wakes up and writes, and
//! SQLite refuses the write because its fence is older than the one the row last accepted.
//!
//! Run it (it starts a Redis if none runs; SQLite is compiled in, no server):
//!
//! ```text
//! cargo run -p lock-examples --features sqlite --example fenced_sqlite
//! ```
//!
//! Redis: `REDIS_URL`, else a server on 127.0.0.1:6379, else a throwaway one.
//!
//! Holder A takes `price:<item>` with `fencing = true` and a 1 s lease, then stalls for
//! 1.5 s renewing nothing (as a process stopped by a GC pause or `SIGSTOP` renews nothing).
//! Holder B, another client, calls `set_price` (`#[distributed_lock(key = "price:<item>",
//! ttl = "1s", fencing = true)]`): it gets the lock once A's lease has run out, with a
//! greater fence, and writes. Then A wakes up and writes with its old fence: the store's
//! `UPDATE records SET value = ?, last_fence = ? WHERE id = ? AND last_fence < ?` updates
//! 0 rows, and the price stays B's. `tests/tests/fenced_sqlite.rs` does the same with a
//! real `SIGSTOP` of a child process.

use std::error::Error;
use std::process::ExitCode;
use std::time::Duration;

use lock_examples::fenced_sqlite::{self, PriceBook, WriteOutcome};
use lock_examples::servers::{Mode, Servers};
use lock_runtime::{LockClient, ReleaseOutcome};

const TTL: Duration = Duration::from_secs(1);
/// How long holder A stalls: past its lease.
const PAUSE: Duration = Duration::from_millis(1500);

fn main() -> Result<ExitCode, Box<dyn Error>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

async fn run() -> Result<ExitCode, Box<dyn Error>> {
    let servers = Servers::for_mode(Mode::Single)?;
    lock_runtime::init(servers.config())?;
    let item = format!("phone-{}", std::process::id());
    let file = std::env::temp_dir().join(format!("fenced-prices-{}.sqlite", std::process::id()));
    let book = PriceBook::open(&file)?;
    book.add(&item, 500).await?;
    println!(
        "price book {} (SQLite), item {item:?} at 500; lock `{}` on {}",
        file.display(),
        fenced_sqlite::lock_key(&item),
        servers.urls.join(", ")
    );

    // Holder A: its own client, so that the two holders are as two processes.
    let a_client = LockClient::new(servers.config())?;
    let a = a_client
        .lock(fenced_sqlite::lock_key(&item))
        .ttl(TTL)
        .fencing(true)
        .watchdog(false)
        .acquire()
        .await?;
    let a_fence = a.fence().ok_or("holder A got no fence")?;
    println!("A  holds the lock, fence {a_fence}; stalls {PAUSE:?} (lease {TTL:?}, no renewal)");

    // Holder B waits for the lock (woken when A's lease runs out) and writes.
    let b = tokio::spawn({
        let (book, item) = (book.clone(), item.clone());
        async move { fenced_sqlite::set_price(&book, &item, 450).await }
    });
    tokio::time::sleep(PAUSE).await;
    let b_outcome = b.await??;
    let after_b = book.read(&item).await?.ok_or("the item is gone")?;
    println!(
        "B  took the lock after A's lease ran out, fence {}: write 450 -> {b_outcome:?}",
        after_b.last_fence
    );

    // A wakes up believing it still holds the lock, and writes with its old fence.
    let a_outcome = book.write(&item, 999, a_fence).await?;
    println!("A  wakes up and writes 999 with fence {a_fence} -> {a_outcome:?} (0 rows updated)");
    let a_release = a.release().await?;
    println!("A  releases: {a_release:?}");

    let stored = book.read(&item).await?.ok_or("the item is gone")?;
    println!(
        "stored: price {} with last fence {}",
        stored.value, stored.last_fence
    );
    let _ = std::fs::remove_file(&file);
    let held = b_outcome == WriteOutcome::Accepted
        && matches!(a_outcome, WriteOutcome::Rejected { last_fence } if last_fence > a_fence)
        && stored.value == 450
        && a_release != ReleaseOutcome::Released;
    if held {
        println!("the stale write was refused by the store: the price is B's");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("the invariant broke: the store took a stale holder's write");
        Ok(ExitCode::FAILURE)
    }
}
