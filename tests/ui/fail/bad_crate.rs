use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "a", crate = "not a path")]
async fn spaces() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "b", crate = lock_runtime)]
async fn unquoted() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
