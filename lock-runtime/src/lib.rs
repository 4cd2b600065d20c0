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
//! # Waiting: two levels
//!
//! The tasks of one process that want the same key wait in a local first-come-first-served
//! queue, and a holder passes the lock to the next of them without a Redis round trip; only
//! the process waits in Redis, as one queue entry per key. Passes are bounded
//! ([`Config::local_passes`], [`Config::local_pass_time`]): then the next process in the
//! key's Redis queue gets the lock. Clients that do not queue (redis-py's `Lock`) get the key
//! in occasional foreign windows ([`Config::foreign_window`]).
//!
//! # Glossary
//!
//! | term | meaning | where |
//! |---|---|---|
//! | lease | the key's expiry a holder owns: valid until `send time + ttl − drift` on the local clock, renewed by the watchdog | `lease.rs`, `watchdog.rs` |
//! | tenure | one process's hold of a key in Redis, under one token, across the local passes | `cohort.rs` |
//! | pass | a holder gives the lock to the next task of its process, without Redis | `cohort.rs`, `guard.rs` |
//! | yield | past the pass bound, one release call gives the lock to the next process and queues this one again (or keeps it when no other waits) | `guard.rs`, `lua/release.lua` |
//! | queue entry (place) | a process's place in a key's Redis queue, kept alive by its watchdog for one queue lease at a time | `redis_queue.rs`, `lua/acquire.lua`, `lua/keepalive.lua` |
//! | grant | a release gives the lock to the head entry outright (the key holds its token for a confirmation window) | `lua/release.lua` |
//! | hand-over | the whole path from a holder's release to the next holder: a pass, or a grant and its confirming try | `cohort.rs`, `redis_queue.rs` |
//! | foreign window | a contended key left free for a moment for clients that do not queue, on a schedule kept per key in Redis | `lua/release.lua`, `lua/acquire.lua` |
//!
//! # What is promised, and what is not
//!
//! - **Without faults: mutual exclusion per key.** The key is `SET NX PX` with a random
//!   token; release and renewal compare the token first, so an owner never deletes or
//!   extends another owner's key.
//! - **A lease is valid until `send_time + ttl − drift`** (drift = 1% of ttl + 2 ms) on the
//!   local monotonic clock: a reply that arrives later acquires nothing.
//! - **A lease can be lost** (process pause, Redis restart, eviction, an operator's `DEL`).
//!   The watchdog notices within `ttl/3` plus a round trip. With `on_lost = "cancel"` (the
//!   default) the guarded body is dropped at its next await point and the call returns
//!   [`LockError::Lost`]; with `on_lost = "continue"` it finishes and can read
//!   [`current_lock`]`().is_lost()` or await `lost()`.
//! - **Mutual exclusion under faults is not promised** by this or any lease lock: a holder
//!   paused past its lease may still act on stale belief. **Fencing** closes the gap: with
//!   `fencing = true` ([`LockGuard::fence`], [`CurrentLock::fence`]) every acquisition gets a
//!   token strictly greater than every earlier one for that key, also across a Redis restart
//!   without persistence (the acquire script seeds it with `max(counter + 1, server TIME in
//!   µs)`), so storage that remembers the highest token it saw rejects a stale holder's
//!   writes. The counter key sits in the lock key's cluster slot and expires
//!   [`FENCE_COUNTER_LIFETIME`] after the last fenced acquisition.
//! - **Known-unsafe setups** (documented in `RELIABILITY.md`, reproduced by the tests where
//!   the harness can): a single primary whose asynchronous replica is promoted on failover
//!   can grant a lock twice; a Redlock master restarted without persistence and without a
//!   delay of at least the longest ttl can let a second holder in. Fencing protects storage
//!   in both cases.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod client;
mod cohort;
mod config;
mod connection;
mod context;
mod error;
mod guard;
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod http;
mod key;
mod lease;
mod lock;
mod lost_signal;
mod multi;
mod options;
mod outage;
mod redis_queue;
mod redlock;
mod scripts;
mod shutdown;
pub mod telemetry;
mod turn;
mod wakeups;
mod watchdog;

#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod layer;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use client::{LockClient, client, init, is_locked, shutdown};
pub use config::{
    Config, DEFAULT_FOREIGN_WINDOW, DEFAULT_LOCAL_PASS_TIME, DEFAULT_LOCAL_PASSES,
    DEFAULT_OUTAGE_GRACE, DEFAULT_REDIS_URL, REDIS_URL_ENV,
};
pub use context::{CurrentLock, current_lock, current_locks};
pub use error::{LockError, LostCause, ReleaseOutcome};
pub use guard::LockGuard;
pub use key::{KeyBuilder, MAX_KEY_LEN, escape_into};
pub use lock::Lock;
pub use lock_macros::distributed_lock;
pub use multi::{MultiGuard, MultiLock};
pub use options::{FENCE_COUNTER_LIFETIME, LockOptions, MAX_TTL, OnLost};
pub use shutdown::{SHUTDOWN_BUDGET, ShutdownReport};
