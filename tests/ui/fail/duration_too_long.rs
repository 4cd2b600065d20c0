use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job", ttl = "99999999999999999999h")]
async fn run() -> Result<u32, LockError> {
    Ok(0)
}

fn main() {}
