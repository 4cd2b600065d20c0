use lock_runtime::{LockError, distributed_lock};

pub struct User {
    pub id: u64,
}

// `{id}` and `{user.id}` look like format! placeholders but would render as written:
// one key for every call.
#[distributed_lock(key = "d:{id}")]
async fn deliver(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "u:{user.id}")]
async fn greet(user: &User) -> Result<u64, LockError> {
    Ok(user.id)
}

// Braces that name no argument are a cluster hash tag: this one compiles.
#[distributed_lock(key = "{app}:job:<id>")]
async fn job(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
