use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job", ttl = "8761h")]
async fn run() -> Result<u32, LockError> {
    Ok(0)
}

fn main() {}
