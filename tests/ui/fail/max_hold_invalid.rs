use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job", max_hold = "0s")]
async fn zero() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", max_hold = "5 parsecs")]
async fn bad_duration() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", ttl = "10s", watchdog = false, max_hold = "10s")]
async fn not_under_an_unrenewed_ttl() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", ttl = "1m", wait = "0s", hold_at_least = "30s", max_hold = "10s")]
async fn under_hold_at_least() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", max_hold = 30)]
async fn not_a_duration() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
