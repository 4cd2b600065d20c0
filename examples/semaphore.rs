//! The README's semaphore example, verbatim between the `README:` markers (a test keeps it
//! so): at most 3 exports at once per tenant, through the attribute, and a partner API
//! called by at most 10 holders across the fleet, through the programmatic API.
//!
//! Run it against a Redis on `REDIS_URL` (default `redis://127.0.0.1:6379`):
//!
//! ```text
//! cargo run -p lock-examples --example semaphore
//! ```

// README:start
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_runtime::{LockError, Semaphore, distributed_lock};

static RUNNING: AtomicUsize = AtomicUsize::new(0);
static MOST: AtomicUsize = AtomicUsize::new(0);

// At most 3 exports at once per tenant, across every replica sharing the Redis. Each
// export holds a permit with a lease of its own: a crashed replica's permit comes back
// after its ttl.
#[distributed_lock(key = "export:<tenant>", permits = 3, ttl = "30s", wait = "60s")]
async fn export(tenant: &str, part: u32) -> Result<u32, LockError> {
    let running = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
    MOST.fetch_max(running, Ordering::SeqCst);
    println!("export {tenant}/{part}: {running} running");
    tokio::time::sleep(Duration::from_millis(200)).await; // the export's work
    RUNNING.fetch_sub(1, Ordering::SeqCst);
    Ok(part)
}

#[tokio::main]
async fn main() -> Result<(), LockError> {
    // Eight exports at once: three run, the others wait for a permit, first come first served.
    let exports: Vec<_> = (0..8)
        .map(|part| tokio::spawn(export("acme", part)))
        .collect();
    for export in exports {
        export.await.expect("the export task panicked")?;
    }
    println!(
        "at most {} exports ran at once",
        MOST.load(Ordering::SeqCst)
    );

    // The programmatic form: at most 10 calls to a partner's API across the fleet.
    let permit = Semaphore::new("partner-api", 10).acquire().await?;
    // ... the call ...
    permit.release().await?;
    Ok(())
}
// README:end
