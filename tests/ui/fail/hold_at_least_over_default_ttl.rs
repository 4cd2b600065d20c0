use lock_runtime::{LockError, distributed_lock};

// No `ttl` written: the default lease (30s) is the longest the key is kept.
#[distributed_lock(key = "job:<name>", wait = "0s", hold_at_least = "1m")]
async fn nightly(name: &str) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
