//! The guide: how to use the locks well, chapter by chapter.
//!
//! The reference is elsewhere: the attribute's options on
//! [`distributed_lock`](crate::distributed_lock), the errors and what to do about each on
//! [`LockError`](crate::LockError), every setting on [`Config`](crate::Config).
//!
//! 1. [`choosing`]: choosing `ttl` and `wait`, what a failover or an outage does, and what
//!    is promised.
//! 2. [`fencing`]: fencing tokens, and how a store checks them.
//! 3. [`web`]: web services: axum handlers, the tower layer, shutdown, metrics, testing.
//! 4. [`patterns`]: a scheduled job, a semaphore, read-write locks, several keys, nested
//!    locks and their order (the lock-order check), the programmatic API.
//! 5. [`deployments`]: a single server, TLS, Sentinel, Cluster, Redlock, your own client.
//! 6. [`operations`]: events, metrics and alerts, inspecting and force-releasing locks,
//!    `lockctl`.
//!
//! The code of each chapter is compiled with the crate's tests; the examples that need a
//! Redis server are compiled, not run.

#[doc = include_str!("choosing.md")]
pub mod choosing {}

#[doc = include_str!("fencing.md")]
pub mod fencing {}

#[cfg_attr(feature = "tower", doc = include_str!("web.md"))]
#[cfg_attr(
    not(feature = "tower"),
    doc = "Web services: axum handlers, the tower layer, shutdown, metrics, testing. \
           This chapter is built with the `tower` feature (docs.rs builds every feature)."
)]
pub mod web {}

#[doc = include_str!("patterns.md")]
pub mod patterns {}

#[cfg_attr(
    all(feature = "cluster", feature = "sentinel", feature = "redlock"),
    doc = include_str!("deployments.md")
)]
#[cfg_attr(
    not(all(feature = "cluster", feature = "sentinel", feature = "redlock")),
    doc = "Deployments: a single server, TLS, Sentinel, Cluster, Redlock, your own client. \
           This chapter is built with the default features (docs.rs builds every feature)."
)]
pub mod deployments {}

#[doc = include_str!("operations.md")]
pub mod operations {}
