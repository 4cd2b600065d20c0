//! Declarative distributed locks on Redis for async Rust.
//!
//! One attribute turns an async function into a critical section guarded by a Redis lock:
//!
//! ```no_run
//! use lock_runtime::{LockError, distributed_lock};
//!
//! #[derive(Debug)]
//! enum ShopError {
//!     Lock(LockError),
//!     SoldOut,
//! }
//!
//! impl From<LockError> for ShopError {
//!     fn from(err: LockError) -> Self {
//!         ShopError::Lock(err)
//!     }
//! }
//!
//! // At most one process at a time per item, across every service sharing the Redis.
//! #[distributed_lock(key = "stock:<id>", ttl = "10s")]
//! async fn buy(id: u64, qty: u32) -> Result<u32, ShopError> {
//!     let stock = 10; // read, check, write: safe under the lock
//!     if stock < qty {
//!         return Err(ShopError::SoldOut);
//!     }
//!     Ok(stock - qty)
//! }
//!
//! // A per-user dedup: a concurrent second claim fails at once with LockError::Busy.
//! #[distributed_lock(key = "gift:<user>", ttl = "5s", wait = "0s")]
//! async fn claim_gift(user: u64) -> Result<String, LockError> {
//!     Ok(format!("coupon-{user}"))
//! }
//! ```
//!
//! Before the body runs, the lock is acquired (waiting up to `wait`, in arrival order, woken
//! by the release); while it runs, a watchdog renews the lease every `ttl/3`; afterwards (on
//! return, `?`, panic or cancellation) it is released with an owner check. No client object
//! is passed around: a global client is created on first use from `REDIS_URL` (default
//! `redis://127.0.0.1:6379`), or from [`init`]. For keys computed at run time and locks held
//! across calls, the same locks are a programmatic API: [`Lock`], [`LockGuard`],
//! [`MultiLock`], [`RwLock`], [`Semaphore`].
//!
//! # Reference
//!
//! - The attribute's options, what each means and its default: [`distributed_lock`]; the
//!   programmatic API's setters: [`LockBuilder`].
//! - The errors, when each happens and what to do: [`LockError`].
//! - The settings of a client (deployment, timeouts, key prefix, replicas): [`Config`].
//!
//! # Guide
//!
//! 1. [Choosing `ttl` and `wait`, failover, and what is promised](guide::choosing). In
//!    short: without faults, a key has at most one holder; a lease can be lost (a paused
//!    process, a failover), which is detected and reported, never silent; when two holders
//!    for a moment would corrupt data, use fencing tokens.
//! 2. [Fencing with a store](guide::fencing).
//! 3. [Web services: axum, the tower layer, shutdown, metrics, testing](guide::web).
//! 4. [Patterns: a scheduled job, a semaphore, read-write locks, several keys, nested
//!    locks and their order](guide::patterns).
//! 5. [Deployments: a single server, TLS, Sentinel, Cluster, Redlock](guide::deployments).
//!    Every mode, Redlock included, issues fencing tokens.
//! 6. [Operations: events, alerts, inspecting and force-releasing locks](guide::operations).
//!
//! # Features
//!
//! `cluster`, `sentinel` and `redlock` are on by default; a single-server application can
//! turn them off (`default-features = false`), and the methods they bring
//! ([`Config::cluster`], [`Config::sentinel`], [`Config::redlock`] and their settings) are
//! then absent: using one is a compile error, not a failure at run time. The others are
//! off by default.
//!
#![cfg_attr(feature = "docs", doc = document_features::document_features!())]
#![cfg_attr(
    not(feature = "docs"),
    doc = "The list is rendered from `Cargo.toml` when the documentation is built with \
           `--all-features` (or the feature `docs`), as docs.rs does: `cluster`, `sentinel`, \
           `redlock`, `axum`, `tower`, `tls-rustls`, `tls-native-tls`, `metrics`."
)]
//!
//! # Dependencies in the public API
//!
//! These crates' types or traits appear in this crate's API, so a new major version of
//! one of them (a new minor one while it is at 0.x) means a breaking release of this crate,
//! and an application that uses them beside this crate needs the same versions:
//!
//! | crate | where | what the application must match |
//! |---|---|---|
//! | `redis` 1 | [`Config::from_client`], [`Config::cluster_builder`], the `source` of [`LockError::Backend`] and [`LockError::InvalidUrl`] | build the client with the re-export `lock_runtime::redis`, or the same major version |
//! | `axum-core` 0.5, `http` 1 (feature `axum`) | `impl IntoResponse for LockError` | axum 0.8 |
//! | `tower-layer`, `tower-service` 0.3 (feature `tower`) | `layer::LockLayer`'s `Layer` and `Service` impls | tower 0.4 / 0.5 (both use these 0.3 traits) |
//! | `metrics` 0.24 (feature `metrics`) | the metrics are recorded through this facade | the recorder the application installs must be for `metrics` 0.24 |
//!
//! `tokio` 1 is required at run time (locks are taken from any Tokio runtime; the client's
//! own work runs on a thread of its own) but none of
//! its types is in the API. `rustls` (feature `tls-rustls`) is process-wide state, not an
//! API type. The provider the application installed is the one used. Without one, when the
//! lock client is created (the first lock, or [`init`]) for a server reached over TLS,
//! ring is installed as the process default: redis-rs builds its TLS configurations from
//! the process default and cannot be handed a provider. A client with no TLS server installs
//! nothing. An application that wants another provider (aws-lc-rs) installs it before the
//! first lock or [`init`].
//!

#![cfg_attr(docsrs, feature(doc_cfg))]

mod call_site;
mod client;
mod client_thread;
mod config;
mod connection;
mod context;
mod deadlock;
mod error;
pub mod guide;
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod http;
mod identity;
mod key;
mod lease;
mod lease_parts;
mod lock_order;
mod ops;
mod options;
mod primitives;
mod queue;
mod renewal;
mod replicas;
mod scripts;
pub mod telemetry;
#[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
mod tls;
mod topology;
mod turn;
mod wakeups;

#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod layer;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use client::{LockClient, client, init, is_locked, shutdown};
pub use config::{
    Config, DEFAULT_DEADLOCK_DELAY, DEFAULT_FOREIGN_WINDOW, DEFAULT_LOCAL_PASS_TIME,
    DEFAULT_LOCAL_PASSES, DEFAULT_OUTAGE_GRACE, DEFAULT_REDIS_URL, REDIS_URL_ENV,
};
pub use context::{CurrentLock, current_lock, current_locks};
pub use error::{LockError, LostCause, ReleaseOutcome};
pub use identity::{Identity, ProcessIdentity};
pub use key::{KeyBuilder, MAX_KEY_LEN, escape_into};
pub use lock_macros::distributed_lock;
pub use lock_order::LockOrderCheck;
pub use ops::force_release::{CheckedRelease, ForcedRelease, ReleaseCheck, force_release};
pub use ops::inspect::{Holder, HolderKind, LockState, MAX_LISTED_WAITERS, Waiter, inspect};
pub use options::{FENCE_COUNTER_LIFETIME, LockOptions, MAX_TTL, OnLost};
pub use primitives::builder::LockBuilder;
pub use primitives::guard::LockGuard;
pub use primitives::kind;
pub use primitives::lock::Lock;
pub use primitives::multi::{MultiGuard, MultiLock};
pub use primitives::rwlock::RwLock;
pub use primitives::rwlock::read_guard::ReadGuard;
pub use primitives::semaphore::{MAX_PERMITS, Semaphore};
pub use primitives::semaphore_guard::SemaphoreGuard;
pub use telemetry::DEFAULT_LOG_LONG_WAITS;
#[cfg(feature = "redlock")]
pub use topology::deployment::MAX_REDLOCK_PERMITS;

/// The `redis` crate (redis-rs) this release is built on. [`Config::from_client`] and
/// [`Config::cluster_builder`] take its types, so an application that builds its own
/// client needs this same version: through this re-export (`lock_runtime::redis::Client`),
/// or a `redis` dependency that resolves to it (see "Dependencies in the public API").
pub use redis;
pub use renewal::shutdown::{SHUTDOWN_BUDGET, ShutdownReport};
