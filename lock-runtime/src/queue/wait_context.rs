//! What a wait uses of its client, and nothing else: how its tries reach Redis, the
//! release messages it parks on, the liveness key that keeps its place, the shutdown that
//! refuses new tries, the signal that ends a park early, and the gauges it is counted on.
//! The wait loop ([`super::wait`]) and the waits in Redis take this, not the client.

use std::sync::Arc;

use tokio::sync::Notify;

use crate::client::LockClient;
use crate::config::PassBound;
use crate::error::LockError;
use crate::renewal::liveness::Liveness;
use crate::renewal::shutdown::Shutdown;
use crate::telemetry::Telemetry;
use crate::topology::reach::Reach;
use crate::wakeups::Wakeups;

/// The parts of a client that a wait uses, borrowed (a few loads to make; pass it by
/// reference: copied into nested futures, its nine words cost the uncontended try).
#[derive(Clone, Copy)]
pub(crate) struct WaitContext<'a> {
    /// How its tries reach Redis and what counts as granted.
    pub(crate) reach: &'a Arc<Reach>,
    /// Where it registers for the key's release messages.
    pub(crate) wakeups: &'a Wakeups,
    /// The process's liveness key, where queue places name it.
    pub(crate) liveness: Option<&'a Arc<Liveness>>,
    /// Refuses tries once the client is shut down; a shutdown waits for a try in flight.
    pub(crate) shutdown: &'a Shutdown,
    /// Fires when a server is declared down or the client shuts down.
    pub(crate) interrupt: &'a Notify,
    /// The live gauges a wait is counted on.
    pub(crate) telemetry: &'a Telemetry,
    /// How long a process may keep a key for its own tasks (acquire.lua's argument).
    pub(crate) pass_bound: PassBound,
}

impl<'a> WaitContext<'a> {
    /// The parts of `client` that a wait uses.
    pub(crate) fn of(client: &'a LockClient) -> Self {
        WaitContext {
            reach: client.reach(),
            wakeups: client.wakeups(),
            liveness: client.parts().liveness(),
            shutdown: client.shutdown_state(),
            interrupt: client.interrupt(),
            telemetry: client.telemetry(),
            pass_bound: client.pass_bound(),
        }
    }

    /// Whether a try for `key` may go to Redis now: not once the client is shut down, and
    /// not while the server it needs (single mode; in a cluster, the master that serves
    /// its slot) is declared down (see `outage.rs`, `cluster_nodes.rs`).
    pub(crate) fn may_try(&self, key: &str) -> Result<(), LockError> {
        self.shutdown.check_open(key)?;
        self.reach.outage(key).map_or(Ok(()), Err)
    }

    /// The process's liveness key for `lock`, if it has one ([`Liveness::key_for`]).
    pub(crate) fn liveness_key(&self, lock: &str) -> Option<std::borrow::Cow<'a, str>> {
        self.liveness?.key_for(lock)
    }
}
