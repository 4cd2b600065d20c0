use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "user:<user id>")]
async fn claim(user: u32) -> Result<u32, LockError> {
    Ok(0)
}

fn main() {}
