use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "stock:<id>")]
async fn buy(id: u64) -> Result<u64, LockError> {
    Ok("not a number")
}

fn _id(id: u64) -> u64 { id }

fn main() {}
