//! One process's place in a key's Redis queue: kept alive while it waits, left when it
//! gives up.

use super::release::{RELEASE_BUDGET, leave_queue, release_script, retrying};
use std::sync::Arc;

use tokio::time::Instant;

use crate::lease::Token;
use crate::lease_parts::LeaseParts;
use crate::scripts::KeyNames;

/// A process's stake in a key's Redis queue: its place (one per key, whichever of its
/// tasks leads the wait; one per task for a semaphore's permit), and possibly a grant (or
/// a permit) whose reply it never saw. Dropping it
/// before the lock was taken (every task of the process gave up, Redis failed) leaves the
/// queue in the background, which also passes such a grant on.
pub(crate) struct Place {
    /// The watchdog that keeps it alive, the reach it leaves through, the shutdown that runs
    /// a leave in the background when it is dropped.
    parts: Arc<LeaseParts>,
    pub(crate) names: Arc<KeyNames>,
    pub(crate) token: Token,
    /// A try may have queued this token or granted it the lock: leaving must clean both.
    pub(crate) joined: bool,
    /// The watchdog's keep-alive of the place, once a try queued it, and whether it keeps
    /// it per key.
    pub(super) kept: Option<(u64, bool)>,
    /// A try queued this place (the process waited in the key's Redis queue).
    pub(super) queued: bool,
    /// A release just queued this place behind its grant to the next process: a try now
    /// could only learn that the grantee holds the key for its confirmation window.
    pub(super) behind_grant: bool,
    /// The task that leads the wait tried a plain `SET NX PX` alone just before (see
    /// [`super::try_alone`]): the wait starts with the acquire script.
    pub(super) tried_alone: bool,
}

impl Place {
    /// A place in the queue of `names` of the client whose `parts` it keeps: not yet in
    /// Redis (`joined` false), or one a release just put at the tail of the queue (`joined`
    /// true: kept alive from now on).
    pub(crate) fn new(
        parts: &Arc<LeaseParts>,
        names: &Arc<KeyNames>,
        token: Token,
        joined: bool,
    ) -> Self {
        let mut place = Place {
            parts: parts.clone(),
            names: names.clone(),
            token,
            joined,
            kept: None,
            queued: joined,
            behind_grant: false,
            tried_alone: false,
        };
        if joined {
            // The release that queued it named the process's liveness key for the lock,
            // if it had one.
            let per_key = parts.liveness_key(names.lock()).is_none();
            place.keep(per_key);
        }
        place
    }

    /// A place the release that queued it also granted the key to another process with
    /// (see [`Yielded::Passed`](super::Yielded::Passed)): the wait starts with a park
    /// instead of a try. The try would find the grant, not yet confirmed and so not noted
    /// as a holder to watch, and park for its confirmation window; meanwhile a release
    /// reaching this place wakes it as any other. That try was one script run per
    /// hand-over between processes.
    pub(crate) fn behind_grant(mut self) -> Self {
        self.behind_grant = true;
        self
    }

    /// A place whose leading task found the key held by a plain `SET NX PX` just before
    /// ([`super::try_alone`]): its first try is the acquire script, not that `SET` again.
    pub(crate) fn after_try_alone(mut self) -> Self {
        self.tried_alone = true;
        self
    }

    /// The token of a place whose wait took the lock (settled: nothing left to leave).
    pub(crate) fn into_token(mut self) -> Token {
        self.settle();
        std::mem::take(&mut self.token)
    }

    /// After a try that did not take: a try-once caller (`once`) did not join the queue
    /// (nothing to clean); else the try queued us, and the watchdog keeps our place.
    pub(crate) fn not_taken(&mut self, once: bool, per_key: bool) {
        if once {
            self.joined = false;
        } else {
            self.keep(per_key);
        }
    }

    /// Has the watchdog keep the place alive: by the process's liveness key, or with
    /// `per_key` by a keep-alive of its key (once per way).
    pub(crate) fn keep(&mut self, per_key: bool) {
        self.queued = true;
        match self.kept {
            Some((_, kept_per_key)) if kept_per_key == per_key => return,
            Some((id, _)) => self.parts.watchdog.forget_queued(id),
            None => {}
        }
        let id = (self.parts.watchdog).keep_queued(&self.names, &self.token, per_key);
        self.kept = Some((id, per_key));
    }

    /// Whether the watchdog keeps the place by the process's liveness key (not per key).
    pub(crate) fn kept_by_liveness(&self) -> bool {
        self.kept.is_some_and(|(_, per_key)| !per_key)
    }

    /// Stops keeping the place: the lock was taken (or nothing of it is in Redis).
    pub(crate) fn settle(&mut self) {
        self.joined = false;
        if let Some((id, _)) = self.kept.take() {
            self.parts.watchdog.forget_queued(id);
        }
    }

    /// Gives back a grant too few replicas confirmed (a lock's or a permit's, by `undo_by`
    /// at the latest): it does not count, and nothing of it is left to leave. A failure is
    /// only logged: the grant expires by its ttl.
    pub(crate) async fn undo_unconfirmed(&mut self, undo_by: Instant) {
        self.joined = false;
        if let Err(err) = release_script(&self.parts.reach, &self.names, &self.token, undo_by).await
        {
            tracing::warn!(key = %self.names.lock(), error = %err, "undoing a grant the replicas did not confirm failed; it expires by its ttl");
        }
    }

    /// Leaves the queue now, but not past `bound`; a place still joined then leaves in the
    /// background when it is dropped.
    pub(crate) async fn leave(mut self, bound: Instant) {
        if !self.joined {
            return;
        }
        if let Ok(Ok(())) = tokio::time::timeout_at(
            bound,
            leave_queue(&self.parts.reach, &self.names, &self.token),
        )
        .await
        {
            self.settle();
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let joined = self.joined;
        self.settle();
        if !joined {
            return;
        }
        let (reach, names, token) = (
            self.parts.reach.clone(),
            self.names.clone(),
            std::mem::take(&mut self.token),
        );
        // In the background, so retried like a release: a grant this process never heard of
        // (its reply lost with a reset connection) would otherwise stay until its window ends.
        // Left synchronously instead when the runtime drops it (shutting down).
        let leftover = crate::renewal::shutdown::Leftover::place(&names, &token);
        self.parts
            .shutdown
            .give_back_in_background(leftover, async move {
                let _ = retrying(
                    &names,
                    "leaving the queue",
                    (Instant::now() + RELEASE_BUDGET, false),
                    |_, _| leave_queue(&reach, &names, &token),
                )
                .await;
            });
    }
}
