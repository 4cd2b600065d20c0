//! The turn: among the tasks of this process that want one key, the right to hold its lock
//! or to lead the process's wait for it in Redis (see `cohort`).
//!
//! A turn is kept with its holder's lease on the watchdog, so that a lost lease lets the
//! next local task go on at once. It is its own small module so that the watchdog can keep
//! one without depending on the local queue.

use std::sync::Arc;

/// A queue of tasks whose head holds the turn.
pub(crate) trait Queue: Send + Sync {
    /// The head gave the turn up: lets the next task in.
    fn next(&self);
}

/// The turn of a [`Queue`]'s head; dropping it lets the next task in.
pub(crate) struct Turn(Arc<dyn Queue>);

impl Turn {
    /// The turn of `queue`, whose head the caller has become.
    pub(crate) fn new(queue: Arc<dyn Queue>) -> Self {
        Turn(queue)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.0.next();
    }
}

impl std::fmt::Debug for Turn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Turn")
    }
}
