//! `max_hold` as a string and as a `Duration` expression, on a lock, a semaphore and a
//! read-write lock.

use std::time::Duration;

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job:<name>", ttl = "10s", max_hold = "5m")]
async fn job(name: &str) -> Result<(), LockError> {
    let _ = name;
    Ok(())
}

#[distributed_lock(key = "report", max_hold = Duration::from_secs(60))]
async fn report() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "pool", permits = 3, max_hold = "1m")]
async fn pooled() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "doc", mode = "write", max_hold = "30s")]
async fn write_doc() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = (job("a"), report(), pooled(), write_doc());
}
