use lock_runtime::distributed_lock;

// `String` has no `From<LockError>`: the attribute cannot return a lock failure in it.
#[distributed_lock(key = "stock:<id>")]
async fn buy(id: u64) -> Result<u64, String> {
    Ok(id)
}

fn main() {}
