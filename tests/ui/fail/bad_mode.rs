use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "doc:<id>", mode = "exclusive")]
async fn unknown(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "doc:<id>", mode = read)]
async fn not_a_string(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "doc:<id>", mode = "read", fencing = true)]
async fn fenced_reader(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = ["doc:<a>", "doc:<b>"], mode = "write")]
async fn several_keys(a: u64, b: u64) -> Result<u64, LockError> {
    Ok(a + b)
}

#[distributed_lock(key = "job:<id>", mode = "write", ttl = "60s", hold_at_least = "30s")]
async fn held_at_least(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
