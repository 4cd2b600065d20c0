use lock_runtime::{LockError, distributed_lock};

pub struct User {
    pub name: String,
}

// `len` is a method of `String`, not a field. The attribute cannot see `User`'s fields, so
// this is rustc's "method, not a field" (its suggestion to add `()` does not apply).
#[distributed_lock(key = "job:<user.name.len>")]
async fn run(user: &User) -> Result<(), LockError> {
    let _ = user;
    Ok(())
}

fn main() {}
