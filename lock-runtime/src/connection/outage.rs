//! Outages: a Redis server (a Redlock master, a cluster master: see `cluster_nodes.rs`)
//! that has not answered for longer than a grace is declared down, and the acquisitions that need it fail at
//! once with [`LockError::Backend`] until it answers again.
//!
//! Every request of a connection reports here what came of it ([`Health::observe`]): a
//! reply (any reply, errors included: the server is there) or a failure to reach the
//! server (refused, reset, timed out). A server whose failures have gone on for the grace
//! with no reply in between, and that then answers no `PING` on a fresh connection for
//! [`CONFIRM_LIMIT`] either (our own connection may only be reconnecting, with a back-off,
//! after a restart; a restart under load may take about a second), is *down*: one WARN says so, the waiters parked on the client
//! are woken to fail, and new tries fail without traffic. While it is down, a probe (a
//! `PING` on a connection of its own) goes to it every [`PROBE_EVERY`] (and the watchdog's
//! renewals and keep-alives still go), so the first reply after the outage brings it back,
//! whether or not anyone is asking for a lock: one INFO says so.
//!
//! A short restart is ridden out: failures that last less than the grace only make the
//! acquire loop try again within each caller's `wait`, as before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{LockError, is_connection_error};
use crate::lease::lateness;

/// While a server is down, how often it is asked whether it is back.
const PROBE_EVERY: Duration = Duration::from_millis(200);

/// How long the probes that confirm an outage go on: a server that answers none of them
/// (one every [`CONFIRM_EVERY`]) is unreachable. A server restarting under load can take
/// longer than the grace to accept connections again.
const CONFIRM_LIMIT: Duration = Duration::from_millis(500);

/// How often a probe is sent while an outage is being confirmed.
const CONFIRM_EVERY: Duration = Duration::from_millis(50);

/// How much of its own lateness a confirmation forgives, at most: past that, a client
/// starved for so long counts the time as the server's silence too.
const LATE_LIMIT: Duration = Duration::from_secs(5);

/// Whether the server answers none of the probes sent over [`CONFIRM_LIMIT`] of the
/// client's own time.
///
/// Time the client itself lost does not count as the server's silence: a timer here that
/// fires well after its time (the process starved on a busy machine, stopped, or its
/// runtime blocked) moves the end of the confirmation by as much, up to [`LATE_LIMIT`] in
/// all. Otherwise a starved client, whose probes' replies wait unread in their sockets,
/// would declare a healthy server down.
async fn confirm_unreachable(probe: &Probe) -> bool {
    let started = Instant::now();
    let mut until = started + CONFIRM_LIMIT;
    let latest = until + LATE_LIMIT;
    for _ in 0..1_000 {
        match tokio::time::timeout_at(until, probe()).await {
            Ok(true) => return false,
            Ok(false) => {}
            Err(_) => until = forgive(until, until, latest),
        }
        if Instant::now() >= until {
            return true;
        }
        let due = Instant::now() + CONFIRM_EVERY;
        tokio::time::sleep_until(due.min(until)).await;
        until = forgive(until, due.min(until), latest);
    }
    true
}

/// `until`, moved by how late a timer due at `due` woke (beyond [`LATE_SLACK`](crate::lease::LATE_SLACK)), to
/// `latest` at most.
fn forgive(until: Instant, due: Instant, latest: Instant) -> Instant {
    lateness(due).map_or(until, |late| (until + late).min(latest))
}

/// Asks the server once whether it answers (a `PING` on a connection of its own).
pub(crate) type Probe =
    Arc<dyn Fn() -> futures_util::future::BoxFuture<'static, bool> + Send + Sync>;

/// What one server's requests found lately.
#[derive(Clone)]
pub(crate) struct Health {
    inner: Arc<HealthInner>,
}

struct HealthInner {
    /// The server, as messages name it.
    server: String,
    /// What the server is, for messages: a single server, a Redlock master, a cluster
    /// master.
    role: Role,
    /// Set when the server no longer serves the keys this health is asked about (a
    /// cluster master whose slots failed over): it is then neither announced down nor
    /// back, nor probed.
    retired: AtomicBool,
    /// How long failures may last before the server is declared down.
    grace: Duration,
    state: Mutex<Reachability>,
    /// Whether `state` is `Up`, kept beside it (written under its lock) so that every
    /// request's report and every try's check read an atomic, not the shared lock, in the
    /// common case.
    up: AtomicBool,
    /// Wakes the client's parked waiters when a server is declared down.
    interrupt: Arc<Notify>,
    /// How to ask the server whether it is back, while it is down.
    probe: Option<Probe>,
    /// Where probes run: the client's own runtime (see `client_thread.rs`).
    runtime: Option<tokio::runtime::Handle>,
}

#[derive(Debug, Clone)]
enum Reachability {
    Up,
    /// Every request since `since` failed to reach the server; `confirming`: the grace
    /// has passed, and a probe on a fresh connection is checking that the server itself
    /// is unreachable (not only our connection, still reconnecting after a restart).
    Failing {
        since: Instant,
        confirming: bool,
    },
    /// Declared down: failing since `since`.
    Down {
        since: Instant,
        last_error: String,
    },
}

impl Health {
    /// A server (a `role`) reported as `server` (a cluster master's `host:port`, a
    /// cluster's seeds), declared down after `grace` of failures; its declaration wakes
    /// `interrupt`'s waiters. `probe` asks the server whether it is back, while it is down.
    pub(crate) fn new(
        server: impl Into<String>,
        role: Role,
        grace: Duration,
        interrupt: Arc<Notify>,
        probe: Option<Probe>,
    ) -> Self {
        Health {
            inner: Arc::new(HealthInner {
                server: server.into(),
                role,
                retired: AtomicBool::new(false),
                grace,
                state: Mutex::new(Reachability::Up),
                up: AtomicBool::new(true),
                interrupt,
                probe,
                runtime: crate::client_thread::captured(),
            }),
        }
    }

    /// Where probes run: the client's runtime, else the caller's.
    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        self.inner
            .runtime
            .clone()
            .or_else(crate::client_thread::captured)
    }

    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    /// The server, as messages name it (a cluster master's `host:port`).
    pub(crate) fn server(&self) -> &str {
        &self.inner.server
    }

    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    /// This server no longer serves the keys asked about (its slots moved or failed
    /// over): it is no longer announced nor probed. Returns whether it was failing or
    /// down.
    pub(crate) fn retire(&self) -> bool {
        self.inner.retired.store(true, Ordering::Release);
        !self.inner.up.load(Ordering::Acquire)
    }

    /// Whether both stand for the same server (one shared health).
    #[cfg(test)]
    pub(crate) fn same(&self, other: &Health) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn is_retired(&self) -> bool {
        self.inner.retired.load(Ordering::Acquire)
    }

    fn state(&self) -> MutexGuard<'_, Reachability> {
        // Every update is a single store: a panic elsewhere cannot leave it half-done.
        let state = self.inner.state.lock();
        state.unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes note of what a request to the server came to.
    pub(crate) fn observe<T>(&self, result: &redis::RedisResult<T>) {
        match result {
            Err(err) if is_connection_error(err) => self.failed_to_reach(err),
            _ => self.answered(),
        }
    }

    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    /// Takes note of a reply thought to come from this server, unless it is declared down:
    /// a reply for a down cluster master's slot came from elsewhere (the slot moved), and
    /// only its own probe brings it back. Returns whether the reply counted.
    pub(crate) fn answered_unless_down(&self) -> bool {
        if self.inner.up.load(Ordering::Acquire) {
            return true;
        }
        if matches!(*self.state(), Reachability::Down { .. }) {
            return false;
        }
        self.answered();
        true
    }

    fn answered(&self) {
        if self.inner.up.load(Ordering::Acquire) {
            return;
        }
        let mut state = self.state();
        if let Reachability::Up = *state {
            return;
        }
        let was = std::mem::replace(&mut *state, Reachability::Up);
        self.inner.up.store(true, Ordering::Release);
        drop(state);
        if let Reachability::Down { since, .. } = was
            && !self.is_retired()
        {
            tracing::info!(
                server = %self.inner.server,
                unreachable_ms = since.elapsed().as_millis() as u64,
                "the {} answers again after {:.1?} unreachable; locks are taken on it again",
                self.inner.role.noun(),
                since.elapsed()
            );
        }
    }

    /// Takes note that a request could not reach the server (`err`, a connection error
    /// or, in a cluster, a redirection to this master that no connection could follow).
    pub(crate) fn failed_to_reach(&self, err: &redis::RedisError) {
        let now = Instant::now();
        let mut state = self.state();
        let since = match &mut *state {
            Reachability::Down { .. }
            | Reachability::Failing {
                confirming: true, ..
            } => return,
            Reachability::Up => {
                *state = Reachability::Failing {
                    since: now,
                    confirming: false,
                };
                self.inner.up.store(false, Ordering::Release);
                return;
            }
            Reachability::Failing { since, confirming } => {
                if now.saturating_duration_since(*since) < self.inner.grace {
                    return;
                }
                *confirming = true;
                *since
            }
        };
        drop(state);
        let last_error = err.to_string();
        match (&self.inner.probe, self.runtime()) {
            (Some(probe), Some(runtime)) => {
                let (health, probe) = (self.clone(), probe.clone());
                runtime.spawn(async move {
                    if confirm_unreachable(&probe).await {
                        health.declare_down(since, last_error);
                    } else {
                        // Reachable: our connection only lags behind (it reconnects with
                        // a back-off). The count starts again at its next failure.
                        health.answered();
                    }
                });
            }
            _ => self.declare_down(since, last_error),
        }
    }

    /// The server failed for longer than the grace, and a fresh connection failed too:
    /// down, until it answers again.
    fn declare_down(&self, since: Instant, last_error: String) {
        {
            let mut state = self.state();
            if !matches!(*state, Reachability::Failing { .. }) {
                return; // it answered meanwhile
            }
            *state = Reachability::Down {
                since,
                last_error: last_error.clone(),
            };
        }
        if self.is_retired() {
            // Its keys are another server's now: nothing to announce or wait for.
            return;
        }
        if let (Some(probe), Some(runtime)) = (&self.inner.probe, self.runtime()) {
            runtime.spawn(probe_until_back(Arc::downgrade(&self.inner), probe.clone()));
        }
        tracing::warn!(
            server = %self.inner.server,
            grace_ms = self.inner.grace.as_millis() as u64,
            error = %last_error,
            "the {} has been unreachable for {:.1?}, longer than the outage grace: \
             acquisitions that need it fail at once until it answers again{}",
            self.inner.role.noun(),
            since.elapsed(),
            self.inner.role.others()
        );
        self.inner.interrupt.notify_waiters();
    }

    /// The error for `key` while the server is down, or `None` when it is not.
    pub(crate) fn down(&self, key: &str) -> Option<LockError> {
        if self.inner.up.load(Ordering::Acquire) {
            return None;
        }
        let Reachability::Down {
            since, last_error, ..
        } = &*self.state()
        else {
            return None;
        };
        let message = format!(
            "{} has been unreachable for {:.1?} (outage grace {:?}; last error: \
             {last_error}); acquisitions fail at once until it answers again{}",
            self.inner.role.named(&self.inner.server),
            since.elapsed(),
            self.inner.grace,
            self.inner.role.others()
        );
        let err = std::io::Error::new(std::io::ErrorKind::NotConnected, message);
        Some(LockError::backend(key, err.into()))
    }
}

/// Asks the server every [`PROBE_EVERY`] whether it is back, while it is down (and while
/// the client that watches it lives). Probes overlap: one that hangs (a blackholed path)
/// does not delay the next, so the server is seen back within a period of its return.
async fn probe_until_back(health: std::sync::Weak<HealthInner>, probe: Probe) {
    use futures_util::StreamExt as _;
    let mut in_flight = futures_util::stream::FuturesUnordered::new();
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let Some(inner) = health.upgrade() else {
                    return;
                };
                let health = Health { inner };
                if !matches!(*health.state(), Reachability::Down { .. }) || health.is_retired() {
                    return;
                }
                let probe = probe();
                in_flight.push(async move {
                    matches!(tokio::time::timeout(PROBE_EVERY * 5, probe).await, Ok(true))
                });
            }
            Some(answered) = in_flight.next() => {
                if answered {
                    if let Some(inner) = health.upgrade() {
                        Health { inner }.answered();
                    }
                    return;
                }
            }
        }
    }
}

/// What a watched server is, for messages.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Role {
    /// A single server, the primary behind Sentinel, a Redlock master.
    Server,
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    /// A master of a Redis Cluster: only the keys of its slots need it (its own keys fail
    /// while it is down, and the messages say that the other masters' keys are still
    /// taken).
    ClusterMaster,
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    /// A Redis Cluster as a whole, named by its seeds (for the requests whose master is
    /// not known yet).
    Cluster,
}

impl Role {
    fn noun(self) -> &'static str {
        match self {
            Role::Server => "Redis server",
            Role::ClusterMaster => "Redis Cluster master",
            Role::Cluster => "Redis Cluster",
        }
    }

    /// The server named, for errors.
    fn named(self, server: &str) -> String {
        match self {
            Role::Cluster => format!("Redis Cluster reached through {server}"),
            role => format!("{} {server}", role.noun()),
        }
    }

    /// What still works meanwhile, and the fix.
    fn others(self) -> &'static str {
        match self {
            Role::Server | Role::Cluster => "",
            Role::ClusterMaster => {
                " (only the keys of its slots: the other masters' keys are still taken; a \
                 master with a replica fails over instead)"
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A probe that answers (after 5 ms) what `up` says.
    fn probe_of(up: &Arc<AtomicBool>) -> Probe {
        let up = up.clone();
        Arc::new(move || {
            let up = up.clone();
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                up.load(Ordering::SeqCst)
            })
        })
    }

    /// The client's own lateness is not the server's silence: the runtime blocked for
    /// 800 ms (a starved process) while the server came back 100 ms in, and the next probe
    /// finds it. Without the lateness forgiven, the confirmation ran out while starved and
    /// declared the server down.
    #[tokio::test]
    async fn a_starved_confirmation_does_not_count_its_own_lateness() {
        let up = Arc::new(AtomicBool::new(false));
        let back = {
            let up = up.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                up.store(true, Ordering::SeqCst);
            })
        };
        // The one thread of this runtime, blocked 20 ms in, for 800 ms.
        tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            std::thread::sleep(Duration::from_millis(800));
        });
        assert!(!confirm_unreachable(&probe_of(&up)).await);
        back.join().unwrap();
        // A silent server on a runtime on time is unreachable within the limit.
        let silent = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        assert!(confirm_unreachable(&probe_of(&silent)).await);
        assert!(started.elapsed() < CONFIRM_LIMIT + LATE_LIMIT);
    }

    pub(in crate::connection) fn refused() -> redis::RedisResult<()> {
        Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into())
    }

    #[test]
    fn failures_for_the_grace_declare_the_server_down_until_it_answers() {
        let sleep = |ms| std::thread::sleep(Duration::from_millis(ms));
        let health = Health::new(
            "server",
            Role::Server,
            Duration::from_millis(100),
            Arc::new(Notify::new()),
            None,
        );
        health.observe(&refused());
        sleep(50);
        health.observe(&refused());
        assert!(health.down("k").is_none(), "within the grace");
        // An answer in between starts the count again.
        health.observe(&Ok(()));
        health.observe(&refused());
        sleep(60);
        health.observe(&refused());
        assert!(health.down("k").is_none());
        sleep(60);
        health.observe(&refused());
        let err = health.down("k").expect("down after the grace");
        let text = err.to_string();
        assert!(text.contains("has been unreachable for"), "{text}");
        assert!(text.contains("`k`"), "{text}");
        // Down: tries fail until the server answers.
        assert!(health.down("k").is_some());
        health.observe(&refused());
        assert!(health.down("k").is_some());
        // A server error is an answer.
        let busy: redis::RedisResult<()> = Err(redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading),
            "loading",
        )));
        health.observe(&busy);
        assert!(health.down("k").is_none());
        assert!(health.down("k").is_none());
    }
}
