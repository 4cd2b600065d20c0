use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "stock:<idd>")]
async fn buy(id: u64, qty: u32) -> Result<u32, LockError> {
    Ok(qty + id as u32)
}

fn main() {}
