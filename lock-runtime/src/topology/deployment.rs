//! The deployment a client was built for, as a value its [`Reach`](super::reach::Reach)
//! holds beside the connections: how a step reaches Redis (one node, or a majority of
//! independent masters), and what the primitives and the waits may count on there. The
//! crate asks it what it can do, not which deployment it is.

use std::time::Duration;

use crate::connection::Connection;
use crate::error::LockError;
#[cfg(feature = "redlock")]
use crate::topology::redlock::Redlock;

/// How a client's steps reach Redis.
pub(crate) enum Deployment {
    /// One node takes each step: a single server, the primary Sentinel names, or the
    /// cluster node that serves the key's slot. A key has one fair queue there.
    OneNode,
    /// A majority of independent masters (Redlock): each step goes to every master, and a
    /// grant counts once a majority made it within the lease's validity.
    #[cfg(feature = "redlock")]
    Quorum(Redlock),
}

/// The most permits a [`Semaphore`](crate::Semaphore) may have in Redlock mode: each
/// permit is a slot there (a lock of its own on a majority of the masters), and a try asks
/// for the slots in turn, one round on every master each.
#[cfg(feature = "redlock")]
pub const MAX_REDLOCK_PERMITS: u32 = 64;

/// What a step's answers come to when a deployment asks several nodes: the verdict a
/// majority reached.
pub(crate) trait Majority: Sized {
    /// The verdict on the lock `key` of `answers` (one per node, in the client's order;
    /// `None` for a node that failed), where `quorum` of them must agree.
    #[cfg_attr(not(feature = "redlock"), allow(dead_code))]
    fn verdict(key: &str, answers: Vec<Option<Self>>, quorum: usize) -> Self;
}

/// A step whose form differs by deployment and whose code lives above topology/ (a wait
/// leads through the key's queue on one node, through rounds on the masters of a quorum):
/// the deployment picks the form ([`Deployment::take`]).
pub(crate) trait ByDeployment {
    /// What the step comes to, in either form.
    type Output;
    /// The step where the key lives on one node.
    async fn one_node(self) -> Self::Output;
    /// The step across a quorum of independent masters.
    #[cfg(feature = "redlock")]
    async fn quorum(self, redlock: &Redlock) -> Self::Output;
}

impl Deployment {
    /// Whether a key has one fair queue in Redis: a task alone on its key may take it
    /// with a plain `SET NX`, and a holder whose process still has tasks waiting may yield
    /// the key to the next process and queue again in the same call.
    pub(crate) fn queues(&self) -> bool {
        match self {
            Deployment::OneNode => true,
            #[cfg(feature = "redlock")]
            Deployment::Quorum(_) => false,
        }
    }

    /// Whether a call's requests end by its deadline themselves (`first`, the client's
    /// first connection, says so for one node; a quorum's rounds keep their own time).
    pub(crate) fn keeps_deadlines(&self, first: &Connection) -> bool {
        self.queues() && first.keeps_deadlines()
    }

    /// The outage error for `key` when the node it needs is declared down (`first`: the
    /// client's first connection). A quorum counts its masters' answers in each round
    /// instead: no master's outage alone fails a call.
    pub(crate) fn outage(&self, first: &Connection, key: &str) -> Option<LockError> {
        match self {
            Deployment::OneNode => first.down(key),
            #[cfg(feature = "redlock")]
            Deployment::Quorum(_) => None,
        }
    }

    /// The most permits a semaphore may have here, where fewer than it has alone: on a
    /// quorum each permit is a slot that a try asks for in turn (`MAX_REDLOCK_PERMITS`).
    pub(crate) fn most_permits(&self) -> Option<u32> {
        match self {
            Deployment::OneNode => None,
            #[cfg(feature = "redlock")]
            Deployment::Quorum(_) => Some(MAX_REDLOCK_PERMITS),
        }
    }

    /// How the watchdog counts a renewal: `None` on one node; for a quorum, the majority
    /// of masters that must renew it, and how long each master may take (the node
    /// timeout, at least 1 ms).
    pub(crate) fn renewal_quorum(&self) -> Option<(usize, Duration)> {
        match self {
            Deployment::OneNode => None,
            #[cfg(feature = "redlock")]
            Deployment::Quorum(redlock) => Some((
                redlock.quorum,
                redlock.node_timeout.max(Duration::from_millis(1)),
            )),
        }
    }

    /// Takes `step` in this deployment's form.
    pub(crate) async fn take<S: ByDeployment>(&self, step: S) -> S::Output {
        match self {
            Deployment::OneNode => step.one_node().await,
            #[cfg(feature = "redlock")]
            Deployment::Quorum(redlock) => step.quorum(redlock).await,
        }
    }
}
