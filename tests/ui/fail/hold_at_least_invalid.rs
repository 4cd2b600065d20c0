use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job", ttl = "10s", wait = "0s", hold_at_least = "30s")]
async fn over_the_ttl() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", wait = "0s", hold_at_least = "0s")]
async fn zero() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = ["job:a", "job:b"], hold_at_least = "1s")]
async fn several_keys() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", hold_at_least = 30)]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
