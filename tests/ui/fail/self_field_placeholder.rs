use lock_runtime::{LockError, distributed_lock};

pub struct Shop {
    pub id: u64,
}

impl Shop {
    // `id` is a field of `self`, not an argument: `<self.id>`.
    #[distributed_lock(key = "shop:<id>")]
    async fn restock(&self, qty: u32) -> Result<u32, LockError> {
        Ok(qty)
    }
}

fn main() {}
