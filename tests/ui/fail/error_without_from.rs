use lock_runtime::{LockError, distributed_lock};

#[derive(Debug)]
struct ShopError;

#[distributed_lock(key = "stock:<id>")]
async fn buy(id: u64) -> Result<u64, ShopError> {
    Ok(id)
}

fn _uses(_: LockError) {}

fn main() {}
