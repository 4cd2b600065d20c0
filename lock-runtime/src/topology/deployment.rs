//! The deployment a client was built for, as a value the client holds: how a step reaches
//! Redis (one node, or a majority of independent masters), and what the primitives and the
//! waits may count on there. The client asks it what it can do, not which deployment it
//! is.

use std::future::Future;
use std::time::Duration;

use crate::connection::Connection;
use crate::error::LockError;
use crate::options::LockOptions;
use crate::replicas::Replicas;
use crate::scripts::{Call, HANDOVER, KeyNames, invoke};
use crate::topology::one_node::{self, Waiters};
#[cfg(feature = "redlock")]
use crate::topology::redlock::{self, Redlock, every_master};

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

    /// The nodes an owner-checked step goes to and how many of them must take it: the
    /// connection `next` picks from the pool on one node, every master of `all` (a
    /// majority) for a quorum.
    pub(crate) fn step_nodes(
        &self,
        #[cfg_attr(not(feature = "redlock"), allow(unused_variables))] all: &[Connection],
        next: impl FnOnce() -> Connection,
    ) -> (Vec<Connection>, usize) {
        match self {
            Deployment::OneNode => (vec![next()], 1),
            #[cfg(feature = "redlock")]
            Deployment::Quorum(redlock) => (all.to_vec(), redlock.quorum),
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

    /// Whether anyone holds `key` now (`all`: the client's connections, `next` picks one):
    /// the one node's key holds a token (not a hand-over), or a majority of the masters
    /// have the key.
    pub(crate) async fn is_locked(
        &self,
        #[cfg_attr(not(feature = "redlock"), allow(unused_variables))] all: &[Connection],
        next: impl FnOnce() -> Connection,
        key: &str,
    ) -> Result<bool, LockError> {
        #[cfg(feature = "redlock")]
        if let Deployment::Quorum(redlock) = self {
            return crate::topology::redlock::is_locked(all, redlock, key).await;
        }
        let value: Option<String> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut next())
            .await
            .map_err(|err| LockError::backend(key, err))?;
        // A key being handed to the next waiter has no holder yet.
        Ok(value.is_some_and(|value| value != HANDOVER))
    }

    /// One send of the release of `token`'s lock `names`: on the node `next` picks, in the
    /// form `waiters` picks (announced with `publish`); or on every master of `all`, where
    /// a majority must release it. 1 released, 0 gone, -1 another owner's.
    pub(crate) async fn release(
        &self,
        #[cfg_attr(not(feature = "redlock"), allow(unused_variables))] all: &[Connection],
        next: impl FnOnce() -> Connection,
        names: &KeyNames,
        (token, waiters): (&str, Waiters),
        publish: &'static str,
    ) -> Result<i64, LockError> {
        match self {
            Deployment::OneNode => {
                one_node::release(next(), names, (token, waiters), publish).await
            }
            #[cfg(feature = "redlock")]
            Deployment::Quorum(redlock) => redlock::release_all(all, redlock, names, token).await,
        }
    }

    /// One send of a release `call` of the lease at `key` (its reply: 1 released, 0 gone,
    /// -1 another owner's): on the node `next` picks, or on every master of `all`, where a
    /// majority must release it and a master that failed it for a passing reason (a
    /// restart) is asked again in the background, so that it does not keep the lease until
    /// its ttl.
    pub(crate) async fn release_with(
        &self,
        #[cfg_attr(not(feature = "redlock"), allow(unused_variables))] all: &[Connection],
        next: impl FnOnce() -> Connection,
        key: &str,
        call: impl Fn() -> Call<'static>,
    ) -> Result<i64, LockError> {
        match self {
            Deployment::OneNode => invoke::<i64>(&call(), &mut next())
                .await
                .map_err(|err| LockError::backend(key, err)),
            #[cfg(feature = "redlock")]
            Deployment::Quorum(redlock) => redlock::release_each(all, redlock, key, call).await,
        }
    }

    /// Re-dates the lock `token` holds for a task of its process that takes it over: the
    /// key's expiry becomes `options.ttl` and, with fencing, a fresh fence is issued (on a
    /// quorum, the largest of the masters', raised on a majority). `Ok(None)` when the
    /// token no longer holds the key (on a majority). When grants wait for `replicas`, a
    /// re-dating too few replicas confirmed is [`LockError::NotReplicated`].
    pub(crate) async fn retake(
        &self,
        #[cfg_attr(not(feature = "redlock"), allow(unused_variables))] (all, next): (
            &[Connection],
            impl FnOnce() -> Connection,
        ),
        replicas: Option<&Replicas>,
        names: &KeyNames,
        token: &str,
        options: &LockOptions,
    ) -> Result<Option<Option<u64>>, LockError> {
        match self {
            Deployment::OneNode => one_node::retake(next(), replicas, names, token, options).await,
            #[cfg(feature = "redlock")]
            Deployment::Quorum(redlock) => {
                redlock::retake(all, redlock, names, token, options).await
            }
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

    /// Asks `ask` of the node that holds `key` (`next` picks it), or of every master of
    /// `all` at once (each within the node timeout): each node's answer (`None` for a
    /// master that failed) and how many of them make a majority, for the caller to count.
    /// The one node's failure is its error; fewer masters answering than a majority is
    /// [`LockError::NoQuorum`].
    pub(crate) async fn answers<T, F, Fut>(
        &self,
        #[cfg_attr(not(feature = "redlock"), allow(unused_variables))] all: &[Connection],
        next: impl FnOnce() -> Connection,
        #[cfg_attr(not(feature = "redlock"), allow(unused_variables))] key: &str,
        ask: F,
    ) -> Result<(Vec<Option<T>>, usize), LockError>
    where
        F: Fn(Connection) -> Fut,
        Fut: Future<Output = Result<T, LockError>>,
    {
        match self {
            Deployment::OneNode => Ok((vec![Some(ask(next()).await?)], 1)),
            #[cfg(feature = "redlock")]
            Deployment::Quorum(redlock) => Ok((
                every_master::ask_each(all, redlock, key, ask).await?,
                redlock.quorum,
            )),
        }
    }

    /// Asks `ask` of the node that holds `key` (`next` picks it), or of every master of
    /// `all` at once (each within the node timeout) and takes their [`Majority`] verdict;
    /// fewer answers than a majority is [`LockError::NoQuorum`].
    pub(crate) async fn ask_each<T, F, Fut>(
        &self,
        #[cfg_attr(not(feature = "redlock"), allow(unused_variables))] all: &[Connection],
        next: impl FnOnce() -> Connection,
        #[cfg_attr(not(feature = "redlock"), allow(unused_variables))] key: &str,
        ask: F,
    ) -> Result<T, LockError>
    where
        T: Majority,
        F: Fn(Connection) -> Fut,
        Fut: Future<Output = Result<T, LockError>>,
    {
        match self {
            Deployment::OneNode => ask(next()).await,
            #[cfg(feature = "redlock")]
            Deployment::Quorum(redlock) => {
                let answers = every_master::ask_each(all, redlock, key, ask).await?;
                Ok(T::verdict(key, answers, redlock.quorum))
            }
        }
    }
}
