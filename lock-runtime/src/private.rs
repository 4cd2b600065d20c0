//! What `#[distributed_lock]` expands to. Not a public API: names here may change in any
//! release. Everything forwards to the public programmatic API, so there is one code path.
//!
//! The attribute crate is pinned to this crate's exact version (`=` in the dependency), so
//! an expansion never meets a `__private` of another release.

use std::future::Future;
use std::time::Duration;

pub use crate::OnLost;
pub use crate::key::KeyBuilder;
use crate::{Lock, LockError, LockOptions, MAX_TTL, MultiLock, RwLock};

/// [`MAX_TTL`] in milliseconds: the expansion asserts a written `ttl` against it in a
/// constant, so the attribute's compile-time check and the runtime's share one limit.
pub const MAX_TTL_MS: u64 = {
    let ms = MAX_TTL.as_millis();
    assert!(ms <= u64::MAX as u128);
    ms as u64
};

/// The default lease in milliseconds: the expansion asserts a written `hold_at_least`
/// against it when no `ttl` is written.
pub const DEFAULT_TTL_MS: u64 = {
    let ms = crate::options::DEFAULT_TTL.as_millis();
    assert!(ms <= u64::MAX as u128);
    ms as u64
};

/// The options of one annotated function: the runtime's defaults
/// ([`LockOptions::default`]), with the options the attribute names set on them, each
/// from a value it checked at compile time, or from a `Duration` expression.
#[derive(Debug)]
pub struct Options(LockOptions);

impl Options {
    /// The defaults of [`LockOptions`].
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Options(LockOptions::default())
    }

    /// `ttl = "..."`.
    pub fn ttl_ms(mut self, ms: u64) -> Self {
        self.0.ttl = Duration::from_millis(ms);
        self
    }

    /// `wait = "..."`.
    pub fn wait_ms(mut self, ms: u64) -> Self {
        self.0.wait = Duration::from_millis(ms);
        self
    }

    /// `ttl = EXPR`: checked when the lock is taken, as [`Lock::ttl`](crate::Lock::ttl) is.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.0.ttl = ttl;
        self
    }

    /// `wait = EXPR`.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.0.wait = wait;
        self
    }

    /// `watchdog = true | false`.
    pub fn watchdog(mut self, on: bool) -> Self {
        self.0.watchdog = on;
        self
    }

    /// `on_lost = "cancel" | "continue"`.
    pub fn on_lost(mut self, on_lost: OnLost) -> Self {
        self.0.on_lost = on_lost;
        self
    }

    /// `fencing = true | false`.
    pub fn fencing(mut self, on: bool) -> Self {
        self.0.fencing = on;
        self
    }

    /// `hold_at_least = "..."`.
    pub fn hold_at_least_ms(mut self, ms: u64) -> Self {
        self.0.hold_at_least = Duration::from_millis(ms);
        self
    }

    /// The finished options.
    pub fn finish(self) -> LockOptions {
        self.0
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

/// Runs `body` holding one of the `permits` of the semaphore `key` on the global client
/// (`permits = N`).
pub async fn run_semaphore<F, T, E>(
    key: Result<String, LockError>,
    permits: u32,
    options: LockOptions,
    body: F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    match key {
        Ok(key) => {
            crate::Semaphore::new(key, permits)
                .with_options(options)
                .run(body)
                .await
        }
        Err(err) => Err(err.into()),
    }
}

/// Runs `body` under the locks on all of `keys` on the global client (`key = [..]`): the
/// first key that failed to render is the error, before any Redis traffic.
pub async fn run_multi<K, F, T, E>(keys: K, options: LockOptions, body: F) -> Result<T, E>
where
    K: IntoIterator<Item = Result<String, LockError>>,
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    match keys.into_iter().collect::<Result<Vec<String>, LockError>>() {
        Ok(keys) => MultiLock::new(keys).with_options(options).run(body).await,
        Err(err) => Err(err.into()),
    }
}

/// Runs `body` holding a reader's share of the read-write lock `key` (`mode = "read"`).
pub async fn run_read<F, T, E>(
    key: Result<String, LockError>,
    options: LockOptions,
    body: F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    match key {
        Ok(key) => RwLock::new(key).with_options(options).run_read(body).await,
        Err(err) => Err(err.into()),
    }
}

/// Runs `body` holding the read-write lock `key` for writing (`mode = "write"`).
pub async fn run_write<F, T, E>(
    key: Result<String, LockError>,
    options: LockOptions,
    body: F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    match key {
        Ok(key) => RwLock::new(key).with_options(options).run_write(body).await,
        Err(err) => Err(err.into()),
    }
}
