use lock_runtime::{LockError, distributed_lock};

// `len` is a method of `str`, not a field: placeholders read fields.
#[distributed_lock(key = "job:<name.len>")]
async fn run(name: &str) -> Result<(), LockError> {
    let _ = name;
    Ok(())
}

fn main() {}
