use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "doc:<id>", mode = "read", ttl = "5s", wait = "1s", on_lost = "continue")]
async fn read(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "doc:<id>", mode = "write", fencing = true, watchdog = false)]
async fn write(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    assert_send(read(1));
    assert_send(write(1));
}
