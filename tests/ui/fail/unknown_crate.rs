use lock_runtime::{LockError, distributed_lock};

// A `crate` path that does not resolve is reported at the path the user wrote.
#[distributed_lock(key = "c", crate = "no_such_crate")]
async fn missing() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
