use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "export:<tenant>", permits = 0)]
async fn zero(tenant: u64) -> Result<(), LockError> {
    let _ = tenant;
    Ok(())
}

#[distributed_lock(key = "export:<tenant>", permits = "3")]
async fn a_string(tenant: u64) -> Result<(), LockError> {
    let _ = tenant;
    Ok(())
}

#[distributed_lock(key = "export:<tenant>", permits = 2.5)]
async fn a_fraction(tenant: u64) -> Result<(), LockError> {
    let _ = tenant;
    Ok(())
}

#[distributed_lock(key = "export:<tenant>", permits = -1)]
async fn negative(tenant: u64) -> Result<(), LockError> {
    let _ = tenant;
    Ok(())
}

#[distributed_lock(key = ["export:a", "export:b"], permits = 3, fencing = true)]
async fn several_keys_and_fencing() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
