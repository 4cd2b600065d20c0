use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "pair:<pair.4294967296>")]
async fn pick(pair: (u32, u32)) -> Result<u32, LockError> {
    Ok(0)
}

fn main() {}
