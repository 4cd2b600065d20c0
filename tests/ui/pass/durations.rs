//! Durations as `humantime` writes them, and `Duration` expressions from configuration.
#![deny(warnings)]

use std::time::Duration;

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "d:<id>", ttl = "1.5s", wait = "1m30s")]
async fn fractions_and_compounds(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "d:<id>", ttl = "2h 30min", wait = "250ms")]
async fn spaced(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

struct Settings {
    ttl: Duration,
    wait: Duration,
}

#[distributed_lock(key = "d:<id>", ttl = settings.ttl, wait = settings.wait)]
async fn from_settings(id: u64, settings: &Settings) -> Result<u64, LockError> {
    Ok(id + settings.ttl.as_secs())
}

const LEASE: Duration = Duration::from_secs(5);

#[distributed_lock(key = "d:<id>", ttl = LEASE, wait = Duration::from_millis(n))]
async fn from_a_constant(id: u64, n: u64) -> Result<u64, LockError> {
    Ok(id + n)
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let settings = Settings {
        ttl: Duration::from_secs(1),
        wait: Duration::ZERO,
    };
    assert_send(fractions_and_compounds(1));
    assert_send(spaced(1));
    assert_send(from_settings(1, &settings));
    assert_send(from_a_constant(1, 2));
}
