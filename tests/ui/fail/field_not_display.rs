use lock_runtime::{LockError, distributed_lock};

struct User {
    id: Vec<u8>,
}

#[distributed_lock(key = "user:<user.id>")]
async fn claim(user: &User) -> Result<(), LockError> {
    let _ = &user.id;
    Ok(())
}

fn main() {}
