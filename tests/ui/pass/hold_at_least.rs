//! `hold_at_least` with and without a written `ttl` (the default lease is 30 s).
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

fn main() {
    let _ = every_minute("report");
    let _ = default_ttl("report");
}
