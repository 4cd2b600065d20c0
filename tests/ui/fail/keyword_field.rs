use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "user:<user.self>")]
async fn claim(user: (u32, u32)) -> Result<u32, LockError> {
    Ok(0)
}

fn main() {}
