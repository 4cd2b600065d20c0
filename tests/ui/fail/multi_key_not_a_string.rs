use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = ["account:<from>", to])]
async fn transfer(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

fn main() {}
