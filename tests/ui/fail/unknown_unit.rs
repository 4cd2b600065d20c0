use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "stock:<id>", ttl = "2 fortnights")]
async fn buy(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
