//! Leases an operator took away ([`crate::force_release`]): the release tells the
//! holder's process on its notice channel (`renewal/notices.rs` listens), and the lease
//! ends at once with [`LostCause::ForceReleased`], instead of at its next renewal.

use std::sync::atomic::Ordering;

use super::state::WatchdogShared;
use crate::error::LostCause;

impl WatchdogShared {
    /// A lease was renewed: the first one wakes [`first_renewal`](Self::first_renewal).
    pub(super) fn note_renewal(&self) {
        if !self.renewed.swap(true, Ordering::AcqRel) {
            self.first_renewal.notify_waiters();
        }
    }

    /// Resolves once a lease of this client has been renewed: a hold long enough that an
    /// operator may take it away (a shorter one finds out at its first renewal).
    pub(super) async fn first_renewal(&self) {
        loop {
            let renewed = self.first_renewal.notified();
            tokio::pin!(renewed);
            renewed.as_mut().enable();
            if self.renewed.load(Ordering::Acquire) {
                return;
            }
            renewed.await;
        }
    }

    /// An operator (`by`) took away the lock held under `token`: its lease ends now, lost
    /// with [`LostCause::ForceReleased`]; false when no lease of this client has it (it
    /// was released or lost meanwhile).
    pub(super) fn force_released(&self, token: &str, by: &str) -> bool {
        let lease = {
            let mut state = self.state();
            let id = state
                .leases
                .iter()
                .find(|(_, lease)| &*lease.token == token)
                .map(|(id, _)| *id);
            id.and_then(|id| state.take_lease(id))
        };
        let Some(lease) = lease else {
            return false;
        };
        tracing::warn!(key = %lease.names.lock(), token, by, "lock force-released by an operator: its holder was told");
        let telemetry = self.state().telemetry.clone();
        lease.end(LostCause::ForceReleased, &telemetry);
        true
    }
}
