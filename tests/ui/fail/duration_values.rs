use lock_runtime::{LockError, distributed_lock};

// A number without a unit.
#[distributed_lock(key = "a:<id>", ttl = 10)]
async fn integer(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

// The last number has no unit.
#[distributed_lock(key = "a:<id>", wait = "1m30")]
async fn compound_without_unit(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

// Redis counts leases in whole milliseconds.
#[distributed_lock(key = "a:<id>", ttl = "1.5ms")]
async fn under_a_millisecond(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

// An expression must be a `Duration`.
#[distributed_lock(key = "a:<id>", ttl = secs)]
async fn not_a_duration(id: u64, secs: u64) -> Result<u64, LockError> {
    Ok(id + secs)
}

fn main() {}
