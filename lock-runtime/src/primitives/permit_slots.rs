//! A semaphore's permit in its deployment's form. On one node the permits are members of
//! the semaphore's key, taken in the key's queue ([`Semaphore`]'s own wait). On a quorum
//! of independent masters (Redlock) no single order of holders exists, and a majority's
//! count of members would not bound them (2 permits on 3 masters: three holders, each
//! counted by two masters, fill every master's 2). There each permit is one of `permits`
//! numbered slots, and a slot is a Redlock lock of its own: a holder holds a slot on a
//! majority, two majorities share a master, which grants a slot to one holder only, so
//! never more than `permits` hold at once. A try asks for the slots in turn (from a
//! random one) and takes the first a majority grants; the slots' releases are announced
//! on the semaphore's channel, where its waiters listen.

use std::sync::Arc;

use tokio::time::Instant;

use crate::client::LockClient;
use crate::error::LockError;
use crate::primitives::semaphore::{Semaphore, SemaphoreGuard};
#[cfg(feature = "redlock")]
use crate::queue::quorum_wait;
use crate::scripts::KeyNames;
use crate::topology::deployment::ByDeployment;
#[cfg(feature = "redlock")]
use crate::topology::redlock::{Masters, Redlock};

/// One task's acquisition of a permit of `semaphore` (`names`: its key), within `window`.
pub(super) struct TakePermit<'a> {
    pub(super) semaphore: &'a Semaphore,
    pub(super) client: &'a LockClient,
    pub(super) names: Arc<KeyNames>,
    /// When the wait started, and when it ends.
    pub(super) window: (Instant, Instant),
}

impl ByDeployment for TakePermit<'_> {
    type Output = Result<SemaphoreGuard, LockError>;

    /// A member of the key's permit set, in the key's queue.
    async fn one_node(self) -> Self::Output {
        let TakePermit {
            semaphore,
            client,
            names,
            window,
        } = self;
        semaphore.permit_in_queue(client, names, window).await
    }

    /// A slot on a majority of the masters, through the quorum's wait.
    #[cfg(feature = "redlock")]
    async fn quorum(self, redlock: &Redlock) -> Self::Output {
        let client = self.client;
        let mut slots: Vec<KeyNames> = (0..self.semaphore.permits())
            .map(|index| self.names.slot(index))
            .collect();
        let masters = Masters {
            nodes: client.nodes(),
            shutdown: client.shutdown_state(),
            interrupt: client.interrupt(),
        };
        let options = self.semaphore.options();
        let keys = (&*self.names, &slots[..]);
        let (index, token, taken) =
            quorum_wait::acquire_any(masters, redlock, keys, options, self.window).await?;
        let slot = Arc::new(slots.swap_remove(index));
        Ok(SemaphoreGuard::new(
            client,
            (self.names, slot),
            token,
            self.semaphore,
            taken.sent,
        ))
    }
}
