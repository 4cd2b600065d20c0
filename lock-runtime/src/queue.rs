//! The two-level queue: the tasks of a process wait in a key's local cohort, and the
//! process waits for them in Redis, in one place per key.

pub(crate) mod cohort;
#[cfg(feature = "redlock")]
pub(crate) mod quorum_wait;
pub(crate) mod redis_queue;
pub(crate) mod wait;
pub(crate) mod wait_context;
