//! `hold_at_least` with and without a written `ttl`. Without one, the hold is checked when
//! the lock is taken, against the ttl in force (30 s, or the client's `default_ttl`).
use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job:<name>", ttl = "1m", wait = "0s", hold_at_least = "30s")]
async fn every_minute(name: &str) -> Result<(), LockError> {
    let _ = name;
    Ok(())
}

#[distributed_lock(key = "job:<name>", wait = "0s", hold_at_least = "30s")]
async fn default_ttl(name: &str) -> Result<(), LockError> {
    let _ = name;
    Ok(())
}

#[distributed_lock(key = "job:<name>", wait = "0s", hold_at_least = "1m")]
async fn over_the_runtime_default(name: &str) -> Result<(), LockError> {
    let _ = name;
    Ok(())
}

fn main() {
    let _ = every_minute("report");
    let _ = default_ttl("report");
    let _ = over_the_runtime_default("report");
}
