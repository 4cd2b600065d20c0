use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job:<id>", client = 5)]
async fn job(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

pub struct State {
    pub locks: String,
}

#[distributed_lock(key = "job:<id>", client = state.locks)]
async fn handler(state: &State, id: u64) -> Result<u64, LockError> {
    Ok(id + state.locks.len() as u64)
}

fn main() {}
