//! What `#[distributed_lock]` expands to. Not a public API: names here may change in any
//! release. Everything forwards to the public programmatic API, so there is one code path.

use std::future::Future;
use std::time::Duration;

pub use crate::OnLost;
pub use crate::key::KeyBuilder;
use crate::{Lock, LockError, LockOptions};

/// The options of one annotated function, from values the attribute checked at compile time.
pub fn options(
    ttl_ms: u64,
    wait_ms: u64,
    watchdog: bool,
    on_lost: OnLost,
    fencing: bool,
) -> LockOptions {
    LockOptions {
        ttl: Duration::from_millis(ttl_ms),
        wait: Duration::from_millis(wait_ms),
        watchdog,
        on_lost,
        fencing,
    }
}

/// Returns `body` unchanged, with its output type fixed to `R` (the function's return type),
/// so that rustc checks the body's `return`s and tail against it and reports a mismatch
/// at the user's expression rather than at the attribute.
pub fn body<R, F: Future<Output = R>>(body: F) -> F {
    body
}

/// Runs `body` under the lock `key` on the global client.
pub async fn run<F, T, E>(
    key: Result<String, LockError>,
    options: LockOptions,
    body: F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    match key {
        Ok(key) => Lock::new(key).with_options(options).run(body).await,
        Err(err) => Err(err.into()),
    }
}
