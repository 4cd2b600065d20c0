//! The parts of a client that what it hands out keeps: a guard, a place in a key's Redis
//! queue and a key's local cohort outlive the call that made them, and what they do later
//! (renew, release, give back in the background, report a loss, pass the lock on) needs
//! these parts, not the client.
//!
//! One `Arc` of them is shared by the client and every holder: a guard costs one reference
//! count, as a clone of the client did. The client's other parts (its key prefix, wake-ups,
//! defaults, lock-order check) serve only the calls that take a lock, and are not kept.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use crate::client_thread::ClientThread;
use crate::identity::TokenMaker;
use crate::renewal::liveness::Liveness;
use crate::renewal::shutdown::Shutdown;
use crate::renewal::watchdog::Watchdog;
use crate::telemetry::Telemetry;
use crate::topology::reach::Reach;

/// What a held lease keeps of its client, built by the client (`client.rs`). The watchdog
/// stops, and the client's own thread ends, when the client and every holder have let go
/// of it.
pub(crate) struct LeaseParts {
    /// How its steps reach Redis: the connections, the deployment, the replicas (shared
    /// with a wait that looks at a key's holder while it parks).
    pub(crate) reach: Arc<Reach>,
    pub(crate) watchdog: Watchdog,
    /// What the client holds in Redis is given back at shutdown (see `shutdown.rs`).
    pub(crate) shutdown: Arc<Shutdown>,
    /// Where outcomes are reported (events, and metrics with the `metrics` feature).
    pub(crate) telemetry: Telemetry,
    /// Makes its tokens, each naming this process ([`crate::identity`]).
    pub(crate) tokens: TokenMaker,
    /// The process's liveness key, which its queue places name (single server, Sentinel).
    pub(crate) liveness: Option<Arc<Liveness>>,
    /// How long a foreign window leaves a contended key free (zero: never).
    pub(crate) foreign_window: Duration,
    /// The client's own runtime, where its background work runs (see `client_thread.rs`).
    /// Last, so that it ends after the parts above are dropped.
    pub(crate) thread: ClientThread,
}

impl LeaseParts {
    /// How its steps reach Redis: the connections, the deployment, the replicas.
    pub(crate) fn reach(&self) -> &Arc<Reach> {
        &self.reach
    }

    /// The watchdog that renews and watches every lease of the client.
    pub(crate) fn watchdog(&self) -> &Watchdog {
        &self.watchdog
    }

    /// The client's shutdown: background give-backs, and whether it still takes locks.
    pub(crate) fn shutdown_state(&self) -> &Arc<Shutdown> {
        &self.shutdown
    }

    /// Where outcomes are reported.
    pub(crate) fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// What makes its tokens.
    pub(crate) fn tokens(&self) -> &TokenMaker {
        &self.tokens
    }

    /// The process's liveness key, where queue places name it (see [`crate::renewal::liveness`]).
    pub(crate) fn liveness(&self) -> Option<&Arc<Liveness>> {
        self.liveness.as_ref()
    }

    /// The process's liveness key for `lock`, if it has one ([`Liveness::key_for`]).
    pub(crate) fn liveness_key(&self, lock: &str) -> Option<Cow<'_, str>> {
        self.liveness()?.key_for(lock)
    }

    /// How long a foreign window leaves a contended key free (zero: never).
    pub(crate) fn foreign_window(&self) -> Duration {
        self.foreign_window
    }

    /// The client's own runtime: background work that must outlive the caller's runtime
    /// (a release in the background, a hand-over) is spawned there.
    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        self.thread.handle()
    }

    /// Identifies the client (all its clones, and all it handed out) for task-scoped
    /// reentrancy and its keys' local cohorts: the parts' address, which no other client
    /// can have while anything keeps them.
    pub(crate) fn id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }
}

impl std::fmt::Debug for LeaseParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseParts")
            .field("connections", &self.reach.nodes().len())
            .finish_non_exhaustive()
    }
}

impl Drop for LeaseParts {
    fn drop(&mut self) {
        self.watchdog.shutdown();
    }
}
