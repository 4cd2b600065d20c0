use lock_runtime::{LockError, distributed_lock};

pub struct Item {
    pub id: u64,
}

// The whole struct, which does not print: the fix is to name a field, `<item.id>`.
#[distributed_lock(key = "item:<item>")]
async fn reserve(item: Item) -> Result<u64, LockError> {
    Ok(item.id)
}

fn main() {}
