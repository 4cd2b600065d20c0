//! Declarative distributed locks on Redis for async Rust.
//!
//! One attribute turns an async function into a critical section guarded by a Redis lock:
//!
//! ```no_run
//! use lock_runtime::{distributed_lock, LockError};
//!
//! #[derive(Debug)]
//! enum ShopError { Lock(LockError), SoldOut }
//! impl From<LockError> for ShopError {
//!     fn from(err: LockError) -> Self { ShopError::Lock(err) }
//! }
//!
//! #[distributed_lock(key = "stock:<id>", ttl = "10s")]
//! async fn buy(id: u64, qty: u32) -> Result<u32, ShopError> {
//!     // runs on at most one process at a time per `id`, across every service
//!     // that shares the Redis
//!     Ok(qty)
//! }
//! ```
//!
//! Before the body runs, the lock is acquired (waiting up to `wait`); while it runs, a
//! watchdog renews the lease every `ttl/3`; afterwards (on return, `?`, panic or
//! cancellation) the lock is released. No client object is passed around: a global client
//! is created on first use from `REDIS_URL` (default `redis://127.0.0.1:6379`), or from
//! [`init`].
//!
//! # Redis layout
//!
//! The lock key is exactly the rendered template (behind [`Config::key_prefix`], none by
//! default); its value is a random token (a uuid v4); it is a plain string with a `PX`
//! expiry. That is the layout of redis-py's `Lock`, bsm/redislock and single-node redsync,
//! so their locks and ours on the same key exclude each other. Release is a Lua
//! compare-and-delete: it never deletes another owner's key.
//!
//! # The programmatic API
//!
//! For keys computed at run time or locks held across calls, build a [`Lock`], acquire a
//! [`LockGuard`] and release it; the attribute expands to exactly this API.
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_runtime::{Lock, LockError};
//!
//! # async fn demo() -> Result<(), LockError> {
//! let guard = Lock::new("nightly-report").ttl(Duration::from_secs(5)).acquire().await?;
//! // ... only one replica gets here at a time ...
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # What is promised
//!
//! Without faults: mutual exclusion per key. A lease can be lost (process pause, Redis
//! restart, eviction, an operator's `DEL`); the watchdog notices within `ttl/3` plus a round
//! trip and, by default, cancels the guarded body with [`LockError::Lost`]. No lease lock
//! promises exclusion under every fault; fencing tokens (`fencing = true`,
//! [`LockGuard::fence`]) let the storage you protect reject a stale holder's writes.

mod client;
mod config;
mod connection;
mod context;
mod error;
mod guard;
#[cfg(feature = "axum")]
pub mod http;
mod key;
mod lock;
mod redlock;
mod scripts;
mod wakeups;
mod watchdog;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use client::{LockClient, client, init, is_locked};
pub use config::{Config, DEFAULT_REDIS_URL, REDIS_URL_ENV};
pub use context::{CurrentLock, current_lock};
pub use error::{LockError, LostCause, ReleaseOutcome};
pub use guard::LockGuard;
pub use key::{KeyBuilder, MAX_KEY_LEN, escape_into};
pub use lock::{FENCE_COUNTER_LIFETIME, Lock, LockOptions, MAX_TTL, OnLost};
pub use lock_macros::distributed_lock;
