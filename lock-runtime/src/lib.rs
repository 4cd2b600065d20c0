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
//! # The attribute's options
//!
//! | option | meaning | default |
//! |---|---|---|
//! | `key = "stock:<id>"` | the key: `<arg>`, `<arg.field>` or `<self.field>` is that value's `Display`, escaped; `key = ["a:<x>", "b:<y>"]` locks several, all or none ([`MultiLock`]) | required |
//! | `ttl = "10s"` | the lease: `"250ms"`, `"1.5s"`, `"1m30s"`, or a `Duration` expression | `"30s"` |
//! | `wait = "5s"` | how long to wait for a held lock; `"0s"` tries once | `"10s"` |
//! | `watchdog = false` | no renewal: the lease ends after `ttl` | `true` |
//! | `on_lost = "continue"` | let the body finish when the lease is lost ([`OnLost`]) | `"cancel"` |
//! | `fencing = true` | a fencing token, read with [`current_lock`] | `false` |
//! | `permits = 3` | a semaphore: at most 3 bodies at once per key, each permit its own lease ([`Semaphore`]) | none (a lock) |
//! | `mode = "read"` / `"write"` | a read-write lock: many readers or one writer ([`RwLock`]) | a plain lock |
//! | `crate = "locks"` | the path of this crate when renamed or re-exported | `"::lock_runtime"` |
//!
//! The function must be `async` and return `Result<T, E>` with `E: From<LockError>`.
//! Mistakes the attribute can see (an unknown placeholder, a bad duration, a non-async
//! function) are compile errors at the offending token; [`distributed_lock`] has the
//! details. Inside the body, [`current_lock`] tells the key, the fence and whether the lease
//! was lost.
//!
//! # Errors
//!
//! A lock failure comes back as [`LockError`] through the function's error type, and the
//! body does not run: `Busy` (held, and `wait` is zero), `Timeout` (still held when `wait`
//! ran out), `Lost` (the lease was lost while the body ran), `Backend` (Redis unreachable
//! or failing), `NoQuorum` (Redlock), `InvalidKey`, `Config` and `InvalidUrl`. Every
//! variant about a lock names its key; the message says what failed and how to fix it, and
//! the underlying error is its `source()`. With the `axum` feature, `LockError` is an
//! `IntoResponse` (the `http` module).
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
//! # Deployments
//!
//! [`init`] with a [`Config`] before the first lock chooses one; without it the first
//! lock reads `REDIS_URL` as a single server.
//!
//! - **A single server** ([`Config::single`], or [`Config::from_client`] with the
//!   application's own `redis::Client`): mutual exclusion without faults; unsafe when an
//!   asynchronous replica is promoted on failover (it may lack the key).
//! - **A primary behind Redis Sentinel** ([`Config::sentinel`]): followed across failovers,
//!   with the same caveat about promoted replicas.
//! - **A Redis Cluster** ([`Config::cluster`], [`Config::cluster_builder`]): every key of a
//!   lock in one slot, wake-ups on sharded pub/sub (Redis 7).
//! - **Redlock** over N independent masters ([`Config::redlock`]): a lock needs N/2+1
//!   masters; survives the loss of a minority; a master that restarts empty must stay down
//!   for the longest ttl in use. No fencing tokens (no single order across masters).
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
//!   [`current_lock`]`().is_lost()` or await `lost()`. A loss that only the release finds
//!   (another owner's token, as after a failover) is a loss too: WARNed, counted, and with
//!   `"cancel"` the call returns `Lost` ([`LostCause::FoundAtRelease`]; the body's effects
//!   may have happened).
//! - **Mutual exclusion under faults is not promised** by this or any lease lock: a holder
//!   paused past its lease may still act on stale belief. **Fencing** closes the gap: with
//!   `fencing = true` ([`LockGuard::fence`], [`CurrentLock::fence`]) every acquisition gets a
//!   token strictly greater than every earlier one for that key, also across a Redis restart
//!   without persistence (the acquire script seeds it with `max(counter + 1, server TIME in
//!   µs)`), so storage that remembers the highest token it saw rejects a stale holder's
//!   writes. The counter key sits in the lock key's cluster slot and expires
//!   [`FENCE_COUNTER_LIFETIME`] after the last fenced acquisition.
//! - **Known-unsafe setups** (reproduced by the crate's tests where they can be): a single
//!   primary whose asynchronous replica is promoted on failover can grant a lock twice; a
//!   Redlock master restarted without persistence and without a delay of at least the
//!   longest ttl can let a second holder in. Fencing protects storage in both cases.
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
//! `tokio` 1 is required at run time (locks run on the current Tokio runtime) but none of
//! its types is in the API. `rustls` (feature `tls-rustls`) is process-wide state, not an
//! API type. The provider the application installed is the one used. Without one, when the
//! lock client is created (the first lock, or [`init`]) for a server reached over TLS,
//! ring is installed as the process default: redis-rs builds its TLS configurations from
//! the process default and cannot be handed a provider. A client with no TLS server installs
//! nothing. An application that wants another provider (aws-lc-rs) installs it before the
//! first lock or [`init`].
//!
//! # Redis layout
//!
//! The lock key is exactly the rendered template (behind [`Config::key_prefix`], none by
//! default); its value is a random token (a uuid v4); it is a plain string with a `PX`
//! expiry. That is the layout of redis-py's `Lock`, bsm/redislock and single-node redsync,
//! so their locks and ours on the same key exclude each other. Release is a Lua
//! compare-and-delete: it never deletes another owner's key.
//!
//! # How waiting works
//!
//! The tasks of one process that want the same key wait in a local first-come-first-served
//! queue, and a holder passes the lock to the next of them without a Redis round trip; only
//! the process waits in Redis, as one queue entry per key. Passes are bounded
//! ([`Config::local_passes`], [`Config::local_pass_time`]): then the next process in the
//! key's Redis queue gets the lock. Clients that do not queue (redis-py's `Lock`) get the key
//! in occasional foreign windows ([`Config::foreign_window`]).
//!
//! The words the logs and the configuration use for it:
//!
//! | term | meaning |
//! |---|---|
//! | lease | the key's expiry a holder owns: valid until `send time + ttl − drift` on the local clock, renewed by the watchdog |
//! | tenure | one process's hold of a key in Redis, under one token, across the local passes |
//! | pass | a holder gives the lock to the next task of its process, without Redis |
//! | yield | past the pass bound, one release call gives the lock to the next process and queues this one again (or keeps it when no other waits) |
//! | queue entry (place) | a process's place in a key's Redis queue, kept alive by its watchdog for one queue lease at a time |
//! | grant | a release gives the lock to the head entry outright (the key holds its token for a confirmation window) |
//! | hand-over | the whole path from a holder's release to the next holder: a pass, or a grant and its confirming try |
//! | foreign window | a contended key left free for a moment for clients that do not queue, on a schedule kept per key in Redis |

#![cfg_attr(docsrs, feature(doc_cfg))]

mod client;
#[cfg(feature = "cluster")]
mod cluster_nodes;
mod cohort;
mod config;
mod connection;
mod context;
mod error;
mod force_release;
mod guard;
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod http;
mod inspect;
mod key;
mod lease;
mod liveness;
mod lock;
mod lost_signal;
mod multi;
mod options;
mod outage;
mod redis_queue;
#[cfg(feature = "redlock")]
mod redlock;
mod replicas;
mod rwlock;
mod scripts;
mod semaphore;
#[cfg(feature = "sentinel")]
mod sentinel;
mod shutdown;
pub mod telemetry;
#[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
mod tls;
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
pub use force_release::{ForcedRelease, force_release};
pub use guard::LockGuard;
pub use inspect::{Holder, HolderKind, LockState, MAX_LISTED_WAITERS, Waiter, inspect};
pub use key::{KeyBuilder, MAX_KEY_LEN, escape_into};
pub use lock::Lock;
pub use lock_macros::distributed_lock;
pub use multi::{MultiGuard, MultiLock};
pub use options::{FENCE_COUNTER_LIFETIME, LockOptions, MAX_TTL, OnLost};
pub use rwlock::{ReadGuard, RwLock};
pub use semaphore::{MAX_PERMITS, Semaphore, SemaphoreGuard};

/// The `redis` crate (redis-rs) this release is built on. [`Config::from_client`] and
/// [`Config::cluster_builder`] take its types, so an application that builds its own
/// client needs this same version: through this re-export (`lock_runtime::redis::Client`),
/// or a `redis` dependency that resolves to it (see "Dependencies in the public API").
pub use redis;
pub use shutdown::{SHUTDOWN_BUDGET, ShutdownReport};
