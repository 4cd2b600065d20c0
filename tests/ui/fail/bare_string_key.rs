use lock_runtime::{LockError, distributed_lock};

#[distributed_lock("e:<id>")]
async fn email(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
