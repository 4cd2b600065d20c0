use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<shop><id>")]
async fn buy(shop: u64, id: u64) -> Result<u64, LockError> {
    Ok(shop + id)
}

fn main() {}
