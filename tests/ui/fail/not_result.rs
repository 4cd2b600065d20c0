use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "stock:<id>")]
async fn buy(id: u64) -> u64 {
    id
}

#[distributed_lock(key = "stock:<id>")]
async fn sell(id: u64) {
    let _ = id;
}

fn main() {}
