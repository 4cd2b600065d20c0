//! How a client's steps reach Redis: its connections (a pool on one node, one per master
//! for a quorum), the deployment that says how a step goes to them and what counts as a
//! grant, and the replicas a grant waits for. The client holds one; the steps that give a
//! lock back, pass it on or re-date it take it, not the client.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::connection::Connection;
use crate::error::LockError;
use crate::options::LockOptions;
use crate::replicas::Replicas;
use crate::scripts::{Call, HANDOVER, KeyNames, invoke};
use crate::topology::deployment::{Deployment, Majority};
use crate::topology::one_node::{self, Waiters};
#[cfg(feature = "redlock")]
use crate::topology::redlock::{self, every_master};

/// The connections, the deployment over them, and the replicas a grant waits for.
pub(crate) struct Reach {
    /// One node: the pool, used round robin. A quorum: one per master, in order. A
    /// cluster: the one cluster connection. Never empty.
    connections: Vec<Connection>,
    next: AtomicUsize,
    deployment: Deployment,
    /// How many replicas must confirm a grant (`None`: grants count at once).
    replicas: Option<Replicas>,
    /// How long one request may wait for its reply.
    response_timeout: Duration,
    /// Whether Redis ever answered an acquire sent this way.
    answered: AtomicBool,
}

impl Reach {
    /// `connections` (at least one) reached as `deployment` says, whose grants wait for
    /// `replicas`, each request for its reply `response_timeout` at most.
    pub(crate) fn new(
        (connections, deployment): (Vec<Connection>, Deployment),
        replicas: Option<Replicas>,
        response_timeout: Duration,
    ) -> Self {
        debug_assert!(!connections.is_empty());
        Reach {
            connections,
            next: AtomicUsize::new(0),
            deployment,
            replicas,
            response_timeout,
            answered: AtomicBool::new(false),
        }
    }

    /// How long one request may wait for its reply.
    pub(crate) fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// Notes that Redis answered an acquire: a later timeout may hide a grant.
    pub(crate) fn mark_answered(&self) {
        self.answered.store(true, Ordering::Relaxed);
    }

    /// Whether Redis ever answered an acquire sent this way. Until it has, a timeout is a
    /// server that cannot be reached (no command got through, nothing to find again).
    pub(crate) fn has_answered(&self) -> bool {
        self.answered.load(Ordering::Relaxed)
    }

    /// The next connection of the pool (round robin).
    pub(crate) fn connection(&self) -> Connection {
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
        self.connections[index].clone()
    }

    /// Every connection: the masters of a quorum.
    pub(crate) fn nodes(&self) -> &[Connection] {
        &self.connections
    }

    /// How a step goes to the connections, and what the waits may count on there.
    pub(crate) fn deployment(&self) -> &Deployment {
        &self.deployment
    }

    /// How many replicas must confirm a grant, when grants wait for them.
    pub(crate) fn replicas(&self) -> Option<&Replicas> {
        self.replicas.as_ref()
    }

    /// Whether the connections bound a call's requests by its deadline
    /// ([`Connection::until`]): a single server's (also behind Sentinel), not a cluster's
    /// nor a quorum's masters.
    pub(crate) fn keeps_deadlines(&self) -> bool {
        self.deployment.keeps_deadlines(&self.connections[0])
    }

    /// The outage error for `key` when the node it needs is declared down (one node; in a
    /// cluster, the master of its slot).
    pub(crate) fn outage(&self, key: &str) -> Option<LockError> {
        self.deployment.outage(&self.connections[0], key)
    }

    /// The command that announces a release: sharded in a cluster.
    pub(crate) fn publish_command(&self) -> &'static str {
        publish_command(&self.connections[0])
    }

    /// The nodes an owner-checked step goes to and how many of them must take it: the next
    /// connection of the pool on one node, every master (a majority) for a quorum.
    pub(crate) fn step_nodes(&self) -> (Vec<Connection>, usize) {
        match &self.deployment {
            Deployment::OneNode => (vec![self.connection()], 1),
            #[cfg(feature = "redlock")]
            Deployment::Quorum(redlock) => (self.connections.clone(), redlock.quorum),
        }
    }

    /// Whether anyone holds the Redis key `key` now: the one node's key holds a token (not
    /// a hand-over), or a majority of the masters have the key.
    pub(crate) async fn is_locked(&self, key: &str) -> Result<bool, LockError> {
        #[cfg(feature = "redlock")]
        if let Deployment::Quorum(redlock) = &self.deployment {
            return redlock::is_locked(&self.connections, redlock, key).await;
        }
        let value: Option<String> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut self.connection())
            .await
            .map_err(|err| LockError::backend(key, err))?;
        // A key being handed to the next waiter has no holder yet.
        Ok(value.is_some_and(|value| value != HANDOVER))
    }

    /// One send of the release of `token`'s lock `names`: on one node, in the form
    /// `waiters` picks and by a connection whose requests end by `until` (`now`: the
    /// clock's reading); or on every master, where a majority must release it. 1 released,
    /// 0 gone, -1 another owner's.
    pub(crate) async fn release(
        &self,
        names: &KeyNames,
        (token, waiters): (&str, Waiters),
        (until, now): (Instant, Instant),
    ) -> Result<i64, LockError> {
        match &self.deployment {
            Deployment::OneNode => {
                let connection = self.connection().until(until, now);
                let publish = self.publish_command();
                one_node::release(connection, names, (token, waiters), publish).await
            }
            #[cfg(feature = "redlock")]
            Deployment::Quorum(redlock) => {
                redlock::release_all(&self.connections, redlock, names, token).await
            }
        }
    }

    /// One send of a release `call` of the lease at `key` (its reply: 1 released, 0 gone,
    /// -1 another owner's): on one node, or on every master, where a majority must release
    /// it and a master that failed it for a passing reason (a restart) is asked again in
    /// the background, so that it does not keep the lease until its ttl.
    pub(crate) async fn release_with(
        &self,
        key: &str,
        call: impl Fn() -> Call<'static>,
    ) -> Result<i64, LockError> {
        match &self.deployment {
            Deployment::OneNode => invoke::<i64>(&call(), &mut self.connection())
                .await
                .map_err(|err| LockError::backend(key, err)),
            #[cfg(feature = "redlock")]
            Deployment::Quorum(redlock) => {
                redlock::release_each(&self.connections, redlock, key, call).await
            }
        }
    }

    /// Re-dates the lock `token` holds for a task of its process that takes it over: the
    /// key's expiry becomes `options.ttl` and, with fencing, a fresh fence is issued (on a
    /// quorum, the largest of the masters', raised on a majority). `Ok(None)` when the
    /// token no longer holds the key (on a majority). When grants wait for replicas, a
    /// re-dating too few replicas confirmed is [`LockError::NotReplicated`].
    pub(crate) async fn retake(
        &self,
        names: &KeyNames,
        token: &str,
        options: &LockOptions,
    ) -> Result<Option<Option<u64>>, LockError> {
        match &self.deployment {
            Deployment::OneNode => {
                let replicas = self.replicas();
                one_node::retake(self.connection(), replicas, names, token, options).await
            }
            #[cfg(feature = "redlock")]
            Deployment::Quorum(redlock) => {
                redlock::retake(&self.connections, redlock, names, token, options).await
            }
        }
    }

    /// Asks `ask` of the node that holds `key`, or of every master at once (each within the
    /// node timeout): each node's answer (`None` for a master that failed) and how many of
    /// them make a majority, for the caller to count. The one node's failure is its error;
    /// fewer masters answering than a majority is [`LockError::NoQuorum`], once a second
    /// round, asked at once, is short too: as the lock's wait does (`quorum_wait.rs`), since
    /// a process stalled past the node timeout hears no master at all. `ask` must be safe to
    /// ask twice (a reader's share with the same token, a look).
    pub(crate) async fn answers<T, F, Fut>(
        &self,
        #[cfg_attr(not(feature = "redlock"), allow(unused_variables))] key: &str,
        ask: F,
    ) -> Result<(Vec<Option<T>>, usize), LockError>
    where
        F: Fn(Connection) -> Fut,
        Fut: Future<Output = Result<T, LockError>>,
    {
        match &self.deployment {
            Deployment::OneNode => Ok((vec![Some(ask(self.connection()).await?)], 1)),
            #[cfg(feature = "redlock")]
            Deployment::Quorum(redlock) => {
                let nodes = &self.connections;
                let answers = match every_master::ask_each(nodes, redlock, key, &ask).await {
                    Err(LockError::NoQuorum { .. }) => {
                        every_master::ask_each(nodes, redlock, key, &ask).await?
                    }
                    answers => answers?,
                };
                Ok((answers, redlock.quorum))
            }
        }
    }

    /// Asks `ask` of the node that holds `key`, or of every master at once (each within the
    /// node timeout) and takes their [`Majority`] verdict; fewer answers than a majority is
    /// [`LockError::NoQuorum`].
    pub(crate) async fn ask_each<T, F, Fut>(
        &self,
        #[cfg_attr(not(feature = "redlock"), allow(unused_variables))] key: &str,
        ask: F,
    ) -> Result<T, LockError>
    where
        T: Majority,
        F: Fn(Connection) -> Fut,
        Fut: Future<Output = Result<T, LockError>>,
    {
        match &self.deployment {
            Deployment::OneNode => ask(self.connection()).await,
            #[cfg(feature = "redlock")]
            Deployment::Quorum(redlock) => {
                let answers = every_master::ask_each(&self.connections, redlock, key, ask).await?;
                Ok(T::verdict(key, answers, redlock.quorum))
            }
        }
    }
}

/// The command that announces a release on `connection`'s deployment: sharded in a cluster.
pub(crate) fn publish_command(connection: &Connection) -> &'static str {
    if connection.is_cluster() {
        "SPUBLISH"
    } else {
        "PUBLISH"
    }
}
