//! Shutdown: what this process holds in Redis is given back when it shuts down, not left
//! to run out its ttl.
//!
//! What a process holds in Redis is, at any moment, on its client's watchdog (held leases,
//! the ones parked for a local waiter included, and queue places) or in a background
//! release or queue leave that a dropped guard or waiter spawned ([`Pending`]). Two ways
//! end them:
//!
//! - **Explicitly** ([`crate::LockClient::shutdown`], [`crate::shutdown`]), for applications that
//!   handle SIGTERM: the client stops taking locks, takes every lease and place off the
//!   watchdog (telling their holders, [`crate::LostCause::Shutdown`]), and releases and leaves them
//!   all on its own connections, one pipeline per server.
//! - **When the process exits** (`main` returns) or the client is dropped: a guard that an
//!   ending runtime dropped has sent its release to the client's own runtime (see
//!   `client_thread.rs`), which the exit would cut off. At exit (see `at_exit.rs`), and when the
//!   client's runtime drops a background give-back or the watchdog's scheduler unfinished
//!   (the client was dropped), the same as the explicit shutdown runs synchronously, on a
//!   thread of its own with its own connections, and waits for it at most
//!   [`SHUTDOWN_BUDGET`]: the process must not leave before Redis answered. Give-backs
//!   that finish after it find their lock given back already.
//!
//! The releases are the owner-checked release script (so a lock another owner holds now
//! is left alone, and the next queued process is granted the lock at once), the leaves
//! the queue-leaving script. A lock whose minimum hold is still ahead when its holder is
//! done with it (its guard's give-back in flight) is not deleted: an owner-checked
//! `PEXPIRE` leaves the key for what is left of the hold, as its own give-back would have,
//! so that the other processes still skip that run.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::aio::ConnectionLike;

use tokio::sync::Notify;

use crate::connection::{Connection, OwnConnection};
use crate::error::LockError;
use crate::lease::Token;
use crate::renewal::tries_in_flight::{TriesInFlight, TryInFlight};
use crate::renewal::watchdog::Watchdog;
use crate::scripts::renew_call;
use crate::scripts::{
    Call, KeyNames, LEAVE, RELEASE, RENEW, announced_release_call, full_release_call, invoke,
    queue_call,
};

/// The longest the release at shutdown may take, connecting included; what Redis has not
/// answered by then ends by its ttl.
pub const SHUTDOWN_BUDGET: Duration = Duration::from_secs(1);

/// How long a shutdown waits for the replies of acquisition tries in flight when it closes
/// the client (a reply slower than that is one the try gives up on, and leaves behind).
const TRIES_BOUND: Duration = Duration::from_millis(500);

/// What a shutdown gave back.
///
/// ```no_run
/// # async fn demo(client: lock_runtime::LockClient) {
/// let report = client.shutdown().await;
/// println!("released {} locks, left {} queues", report.released, report.left);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Locks released: this process's token was there, and is gone now.
    pub released: usize,
    /// Locks found expired or held by another owner (nothing deleted).
    pub not_held: usize,
    /// Places in Redis wait queues left.
    pub left: usize,
    /// Releases or leaves Redis did not answer within [`SHUTDOWN_BUDGET`]: those end by
    /// their ttl (a queue place within a second).
    pub failed: usize,
    /// Locks whose holder was done with them before their minimum hold
    /// ([`LockOptions::hold_at_least`](crate::LockOptions::hold_at_least)) ran out, left in
    /// Redis until it ends (the key keeps what is left of the hold, so that the other
    /// processes still skip that run) instead of released.
    pub kept: usize,
}

impl ShutdownReport {
    /// Adds what another client's shutdown gave back (the process-wide [`crate::shutdown`]).
    pub(crate) fn add(&mut self, other: ShutdownReport) {
        self.released += other.released;
        self.not_held += other.not_held;
        self.left += other.left;
        self.failed += other.failed;
        self.kept += other.kept;
    }
}

/// Something this process holds in Redis: a lock (by its token) or a place in a key's
/// queue.
#[derive(Clone)]
pub(crate) struct Leftover {
    pub(crate) names: Arc<KeyNames>,
    pub(crate) token: Token,
    pub(crate) place: bool,
    /// For a lock that must stay until then (its minimum hold): kept, not released.
    pub(crate) keep_until: Option<Instant>,
}

impl Leftover {
    /// A lock `token` holds on `names`.
    pub(crate) fn lock(names: &Arc<KeyNames>, token: &Token) -> Self {
        Leftover {
            names: names.clone(),
            token: token.clone(),
            place: false,
            keep_until: None,
        }
    }

    /// A lock `token` holds on `names` whose key must stay until `until`
    /// (its minimum hold): given back by leaving it to expire then.
    pub(crate) fn kept(names: &Arc<KeyNames>, token: &Token, until: Instant) -> Self {
        Leftover {
            keep_until: Some(until),
            ..Leftover::lock(names, token)
        }
    }

    /// A place `token` holds in the queue of `names`.
    pub(crate) fn place(names: &Arc<KeyNames>, token: &Token) -> Self {
        Leftover {
            place: true,
            ..Leftover::lock(names, token)
        }
    }
}

/// A client's shutdown: the background give-backs in flight, whether it still takes locks,
/// and what it needs to give everything back (its watchdog and its connections).
pub(crate) struct Shutdown {
    state: Mutex<ShutdownState>,
    /// No new locks: shut down, explicitly or with the runtime. Set under `state`'s lock
    /// as the give-backs in flight are collected; read without it on every acquire.
    closed: AtomicBool,
    watchdog: Watchdog,
    /// The one server's (or the cluster's) connection, or every Redlock master's.
    nodes: Vec<Connection>,
    mode: Mode,
    /// Wakes the client's parked waiters (to find the client closed).
    interrupt: Arc<Notify>,
    /// Where background give-backs run: the client's own runtime (see `client_thread.rs`).
    runtime: Option<tokio::runtime::Handle>,
    /// The acquisition tries whose replies are not read yet: the shutdown waits for them.
    tries: TriesInFlight,
}

#[derive(Default)]
struct ShutdownState {
    next_id: u64,
    /// Background releases and leaves spawned and not finished, by id.
    pending: HashMap<u64, Leftover>,
    /// What was given back already (token, place), so that nothing goes twice.
    given_back: HashSet<(Token, bool)>,
}

/// A background give-back in flight. Dropped before it [`finish`](Pending::finish)ed, it
/// was dropped by its runtime shutting down: what it was to give back is given back now,
/// synchronously, with everything else the client holds.
struct Pending {
    shutdown: Arc<Shutdown>,
    id: u64,
}

impl Pending {
    fn finish(self) {
        self.shutdown.state().pending.remove(&self.id);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let orphan = self.shutdown.state().pending.remove(&self.id);
        if let Some(orphan) = orphan {
            self.shutdown.runtime_gone(Some(orphan));
        }
    }
}

impl Shutdown {
    /// The shutdown of a client whose leases and places are on `watchdog`, on `nodes` (the
    /// pool, or the Redlock masters), announcing releases with `publish`.
    pub(crate) fn new(
        watchdog: Watchdog,
        nodes: &[Connection],
        redlock: bool,
        publish: &'static str,
        interrupt: Arc<Notify>,
    ) -> Self {
        let mode = Mode {
            redlock,
            cluster: nodes.first().is_some_and(Connection::is_cluster),
            publish,
        };
        let nodes = if redlock {
            nodes.to_vec()
        } else {
            nodes.iter().take(1).cloned().collect()
        };
        Shutdown {
            state: Mutex::default(),
            closed: AtomicBool::new(false),
            watchdog,
            nodes,
            mode,
            interrupt,
            runtime: crate::client_thread::captured(),
            tries: TriesInFlight::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, ShutdownState> {
        // Every update is a single insert, remove or store: nothing to repair after a panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Refuses a new acquisition of `key` once the client is shut down.
    pub(crate) fn check_open(&self, key: &str) -> Result<(), LockError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(LockError::Shutdown {
                key: key.to_owned(),
            });
        }
        Ok(())
    }

    /// Runs `give_back` (a release or a queue leave of `leftover`) on the client's own
    /// runtime, whichever runtime the caller is on (or none). When that runtime drops it
    /// before it finished (the client is dropped), `leftover` is given back synchronously
    /// instead, with everything else the client holds.
    pub(crate) fn give_back_in_background<F>(self: &Arc<Self>, leftover: Leftover, give_back: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let id = {
            let mut state = self.state();
            state.next_id += 1;
            let id = state.next_id;
            state.pending.insert(id, leftover);
            id
        };
        let pending = Pending {
            shutdown: self.clone(),
            id,
        };
        match self.runtime.clone().or_else(crate::client_thread::captured) {
            Some(runtime) => {
                runtime.spawn(async move {
                    give_back.await;
                    pending.finish();
                });
            }
            // No runtime to run it on: given back synchronously, as by a runtime's end.
            None => drop(pending),
        }
    }

    /// Counts an acquisition try about to be sent, until the returned value is dropped:
    /// after its reply was read and what it holds registered (a place kept, a lease on the
    /// schedule). A shutdown meanwhile waits for it.
    pub(crate) fn try_in_flight(&self) -> TryInFlight<'_> {
        self.tries.start()
    }

    /// The explicit shutdown (see [`crate::LockClient::shutdown`]), on the client's own
    /// connections.
    ///
    /// A try in flight when the client closes may come back with a place in a queue or a
    /// grant: the shutdown waits (at most [`TRIES_BOUND`], within [`SHUTDOWN_BUDGET`])
    /// until each such reply was read and what it holds registered, then collects again,
    /// so that nothing a reply brought stays in Redis.
    pub(crate) async fn run(&self) -> ShutdownReport {
        let started = Instant::now();
        let mut batch = self.close(None);
        self.tries
            .settled(tokio::time::Instant::now() + TRIES_BOUND)
            .await;
        batch.extend(self.close(None));
        if batch.is_empty() {
            return ShutdownReport::default();
        }
        let nodes = self.nodes.iter().cloned().map(Some).collect();
        let budget = SHUTDOWN_BUDGET.saturating_sub(started.elapsed());
        let report = tokio::time::timeout(budget, give_back_all(nodes, self.mode, &batch))
            .await
            .unwrap_or_else(|_| failed(&batch));
        log_report("the lock client shut down", &report, started.elapsed());
        report
    }

    /// Closes the client and collects what it holds and has not given back yet: the
    /// leases and places on the watchdog (their holders are told), the give-backs in
    /// flight, and `orphan` (one its runtime dropped).
    fn close(&self, orphan: Option<Leftover>) -> Vec<Leftover> {
        let mut batch: Vec<Leftover> = {
            let mut state = self.state();
            self.closed.store(true, Ordering::Release);
            state
                .pending
                .drain()
                .map(|(_, leftover)| leftover)
                .collect()
        };
        // Outside the state's lock: taking the leases off lets local waiters go on.
        for (names, token, place) in self.watchdog.drain() {
            batch.push(Leftover {
                names,
                token,
                place,
                keep_until: None,
            });
        }
        batch.extend(orphan);
        // Waiters parked on Redis wake up and find the client closed.
        self.interrupt.notify_waiters();
        let mut state = self.state();
        batch.retain(|leftover| {
            state
                .given_back
                .insert((leftover.token.clone(), leftover.place))
        });
        batch
    }

    /// The process is exiting, or the client's own runtime is ending (it dropped a
    /// background give-back, `orphan`, or the watchdog's scheduler): gives back,
    /// synchronously, what the client holds.
    pub(crate) fn runtime_gone(&self, orphan: Option<Leftover>) {
        let batch = self.close(orphan);
        if batch.is_empty() {
            return;
        }
        let started = Instant::now();
        let fresh: Vec<OwnConnection> = self.nodes.iter().map(Connection::fresh).collect();
        match give_back_blocking(fresh, self.mode, batch) {
            Some(report) => log_report(
                "the process exited or the lock client was dropped with locks held",
                &report,
                started.elapsed(),
            ),
            None => tracing::warn!(
                budget_ms = SHUTDOWN_BUDGET.as_millis() as u64,
                "the process exited or the lock client was dropped with locks held, and Redis \
                 did not answer their \
                 release in time: they end by their ttl"
            ),
        }
    }
}

fn log_report(what: &str, report: &ShutdownReport, took: Duration) {
    let took_ms = took.as_millis() as u64;
    if report.failed > 0 {
        tracing::warn!(
            released = report.released,
            kept = report.kept,
            not_held = report.not_held,
            left = report.left,
            failed = report.failed,
            took_ms,
            "{what}: {} releases or leaves got no answer from Redis; those end by their ttl",
            report.failed
        );
    } else {
        tracing::info!(
            released = report.released,
            kept = report.kept,
            not_held = report.not_held,
            left = report.left,
            took_ms,
            "{what}: released every lock it held and left every queue"
        );
    }
}

/// How the give-back is addressed.
#[derive(Clone, Copy)]
struct Mode {
    redlock: bool,
    cluster: bool,
    publish: &'static str,
}

/// Gives back `batch` on a thread of its own, with connections of its own, and waits for
/// it at most [`SHUTDOWN_BUDGET`] (plus a little for the thread): for a runtime that is
/// shutting down, which can run nothing any more. `None` when it did not finish in time.
fn give_back_blocking(
    nodes: Vec<OwnConnection>,
    mode: Mode,
    batch: Vec<Leftover>,
) -> Option<ShutdownReport> {
    let (done, finished) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("lock-shutdown".into())
        .spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            let report = runtime.block_on(async {
                tokio::time::timeout(SHUTDOWN_BUDGET, give_back_fresh(nodes, mode, &batch))
                    .await
                    .ok()
            });
            let _ = done.send(report);
        });
    if spawned.is_err() {
        return None;
    }
    finished
        .recv_timeout(SHUTDOWN_BUDGET + Duration::from_millis(250))
        .ok()
        .flatten()
}

/// Opens a connection to each node and gives `batch` back over them.
async fn give_back_fresh(
    nodes: Vec<OwnConnection>,
    mode: Mode,
    batch: &[Leftover],
) -> ShutdownReport {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(SHUTDOWN_BUDGET))
        .set_response_timeout(Some(SHUTDOWN_BUDGET));
    #[cfg(feature = "cluster")]
    if mode.cluster {
        let Some(OwnConnection::Cluster(cluster)) = nodes.into_iter().next() else {
            return failed(batch);
        };
        let connection = cluster.get_async_connection().await.ok();
        return give_back_all(vec![connection], mode, batch).await;
    }
    let connections = join_all(nodes.into_iter().map(|node| {
        let config = config.clone();
        async move {
            match node {
                OwnConnection::Server(client) => client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .ok(),
                #[cfg(feature = "cluster")]
                OwnConnection::Cluster(_) => None,
            }
        }
    }))
    .await;
    give_back_all(connections, mode, batch).await
}

fn failed(batch: &[Leftover]) -> ShutdownReport {
    ShutdownReport {
        failed: batch.len(),
        ..ShutdownReport::default()
    }
}

/// Releases every lock and leaves every queue place of `batch`: on each node (`None`: it
/// could not be reached) one pipeline after loading the scripts (in a cluster, where a
/// pipeline must stay in one slot, every call at once on the multiplexed connection).
async fn give_back_all<C>(nodes: Vec<Option<C>>, mode: Mode, batch: &[Leftover]) -> ShutdownReport
where
    C: crate::connection::Query + Clone + Send + Sync,
{
    let now = Instant::now();
    let kept = |leftover: &Leftover| {
        leftover
            .keep_until
            .filter(|until| *until > now)
            .map(|until| until - now)
    };
    let calls: Vec<Call<'static>> = batch
        .iter()
        .map(|leftover| {
            let (names, token) = (&leftover.names, &*leftover.token);
            if let Some(left) = kept(leftover) {
                renew_call(names, token, left, false)
            } else if leftover.place {
                queue_call(&LEAVE, names, token, mode.publish)
            } else if mode.redlock {
                announced_release_call(names, token, "PUBLISH")
            } else {
                full_release_call(names, token, mode.publish)
            }
        })
        .collect();
    let per_node = join_all(
        nodes
            .into_iter()
            .map(|node| give_back_on(node, mode, &calls)),
    )
    .await;
    let mut report = ShutdownReport::default();
    for (index, leftover) in batch.iter().enumerate() {
        let replies: Vec<i64> = per_node.iter().filter_map(|node| node[index]).collect();
        match (leftover.place, replies.is_empty()) {
            (_, true) => report.failed += 1,
            (false, false) if kept(leftover).is_some() && replies.contains(&1) => {
                report.kept += 1;
            }
            (true, false) => report.left += 1,
            (false, false) if replies.contains(&1) => report.released += 1,
            (false, false) => report.not_held += 1,
        }
    }
    report
}

/// Sends every call to one node (`None`: it could not be reached); per call, its reply or `None`.
async fn give_back_on<C>(node: Option<C>, mode: Mode, calls: &[Call<'static>]) -> Vec<Option<i64>>
where
    C: crate::connection::Query + Clone + Send + Sync,
{
    let Some(mut node) = node else {
        return vec![None; calls.len()];
    };
    if !mode.cluster {
        return in_one_pipeline(&mut node, calls).await;
    }
    join_all(calls.iter().map(|call| {
        let mut node = node.clone();
        async move { invoke::<i64>(call, &mut node).await.ok() }
    }))
    .await
}

/// Sends every call in one pipeline, after loading the scripts they use (a server
/// restarted since the client loaded them has an empty script cache). Per call, its reply
/// or `None`.
async fn in_one_pipeline<C>(node: &mut C, calls: &[Call<'static>]) -> Vec<Option<i64>>
where
    C: ConnectionLike + Clone + Send,
{
    let (mut other, mut third) = (node.clone(), node.clone());
    let _ = tokio::join!(
        RELEASE.script().load_async(node),
        LEAVE.script().load_async(&mut other),
        RENEW.script().load_async(&mut third)
    );
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for call in calls {
        pipe.add_command(call.evalsha());
    }
    match pipe.query_async::<Vec<redis::Value>>(node).await {
        Ok(replies) => replies
            .into_iter()
            .map(|reply| redis::from_redis_value::<i64>(reply).ok())
            .collect(),
        Err(_) => vec![None; calls.len()],
    }
}
