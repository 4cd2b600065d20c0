//! The primitives an application takes (the lock, the read-write lock, the semaphore, the
//! multi-key lock), over one builder core and one run path for guarded bodies.

pub(crate) mod builder;
pub(crate) mod guard;
pub(crate) mod held_lease;
pub mod kind;
pub(crate) mod lock;
pub(crate) mod multi;
#[cfg(feature = "redlock")]
pub(crate) mod permit_slots;
pub(crate) mod run_path;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
pub(crate) mod semaphore_guard;
