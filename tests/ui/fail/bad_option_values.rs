use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = stock, watchdog = "no", on_lost = "panic", fencing = 1)]
async fn buy(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
