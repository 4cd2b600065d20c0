//! The handles on its client that a process's stake in a key's queue keeps: a place in the
//! Redis queue and a task's membership in the key's local queue outlive the call that made
//! them, and what they do later (keep the place alive, give back a lock or a place when
//! they are dropped) needs these parts of the client, not the client.

use std::sync::Arc;

use crate::client::LockClient;
use crate::renewal::shutdown::Shutdown;
use crate::renewal::watchdog::Watchdog;
use crate::topology::reach::Reach;

/// The client's watchdog, reach and shutdown, owned.
#[derive(Clone)]
pub(crate) struct QueueHandles {
    /// Keeps a place alive while it waits; holds a lock parked between two tasks.
    pub(crate) watchdog: Watchdog,
    /// Where the key is: a leave, an undo, a give-back go through it.
    pub(crate) reach: Arc<Reach>,
    /// Runs a give-back in the background (synchronously when the runtime is gone).
    pub(crate) shutdown: Arc<Shutdown>,
}

impl QueueHandles {
    /// `client`'s handles.
    pub(crate) fn of(client: &LockClient) -> Self {
        QueueHandles {
            watchdog: client.watchdog().clone(),
            reach: client.reach().clone(),
            shutdown: client.shutdown_state().clone(),
        }
    }
}
