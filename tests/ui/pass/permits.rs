//! `permits = N`: a semaphore, with and without the other options it shares with locks.
#![deny(warnings)]
use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "export:<tenant>", permits = 3)]
async fn export(tenant: &str) -> Result<(), LockError> {
    let _ = tenant;
    Ok(())
}

#[distributed_lock(
    key = "partner-api",
    permits = 10,
    ttl = "5s",
    wait = "0s",
    watchdog = false,
    on_lost = "continue"
)]
async fn call_partner() -> Result<u32, LockError> {
    Ok(200)
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    assert_send(export("acme"));
    assert_send(call_partner());
}
