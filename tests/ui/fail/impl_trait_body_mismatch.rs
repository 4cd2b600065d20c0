use std::fmt::Display;

use lock_runtime::{LockError, distributed_lock};

struct NotTheError;

// With `impl Trait` in the return type, a wrong error type is still reported at the body
// (the return type is pinned with `impl Display` erased to `_`), not only at the attribute.
#[distributed_lock(key = "label:<id>")]
async fn label(id: u64) -> Result<impl Display, LockError> {
    if id == 0 {
        return Err(NotTheError);
    }
    Ok(id)
}

fn main() {}
