//! The client: connections to Redis, the watchdog, and the global instance.

use std::sync::Arc;
use std::time::Duration;

use once_cell::sync::OnceCell;

use crate::client_thread::ClientThread;
use crate::config::PassBound;
use crate::connection::Connection;
use crate::lease_parts::LeaseParts;
use crate::renewal::liveness::Liveness;
use crate::renewal::shutdown::{Shutdown, ShutdownReport};
use crate::renewal::watchdog::Watchdog;
use crate::scripts::KeyNames;
use crate::telemetry::Telemetry;
use crate::topology::reach::{Reach, publish_command};
use crate::topology::{BuiltTopology, Setup};
use crate::wakeups::Wakeups;
use crate::{config::Config, error::LockError};

static GLOBAL_CONFIG: OnceCell<Config> = OnceCell::new();
static GLOBAL_CLIENT: OnceCell<LockClient> = OnceCell::new();

/// Sets the configuration of the global client, before its first use.
///
/// Without `init`, the first lock reads `REDIS_URL` (default `redis://127.0.0.1:6379`).
/// A second call, or a call after the first lock already configured the client, is an
/// error rather than a silent replacement: locks taken under one configuration must not
/// be released under another.
///
/// ```
/// use lock_runtime::{init, Config};
///
/// init(Config::single("redis://127.0.0.1:6379")).expect("first init");
/// assert!(init(Config::single("redis://127.0.0.1:6380")).is_err());
/// ```
pub fn init(config: Config) -> Result<(), LockError> {
    let url = config.urls().join(", ");
    GLOBAL_CONFIG.set(config).map_err(|_| {
        LockError::config(format!(
            "init({url}) called after the global client was already configured \
             (by an earlier init or by the first lock, from REDIS_URL); call init once, \
             before any lock is used"
        ))
    })
}

/// The global client, created on first use from [`init`]'s config or from `REDIS_URL`.
///
/// It serves every Tokio runtime of the process: one per `#[tokio::test]`, parallel or one
/// at a time, current-thread or multi-thread, and runtimes built after earlier ones were
/// dropped. Its connections and watchdog run on a thread of its own, so a runtime that
/// ends takes only its own tasks with it (the locks they held are released).
pub fn client() -> Result<&'static LockClient, LockError> {
    GLOBAL_CLIENT.get_or_try_init(|| {
        let config = GLOBAL_CONFIG.get_or_init(Config::from_env).clone();
        LockClient::new(config)
    })
}

/// Whether anyone holds `key` now, on the global client.
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_runtime::LockError> {
/// if lock_runtime::is_locked("stock:42").await? {
///     println!("someone is buying item 42");
/// }
/// # Ok(()) }
/// ```
pub async fn is_locked(key: &str) -> Result<bool, LockError> {
    client()?.is_locked(key).await
}

/// Shuts the global client down, if it was ever used: see [`LockClient::shutdown`].
/// Every lock the process holds is released and every wait-queue place it holds is left;
/// after it, acquiring fails with [`LockError::Shutdown`].
///
/// Call it last, after the server stopped taking requests, e.g. after axum's graceful
/// shutdown:
///
/// ```ignore
/// axum::serve(listener, app).with_graceful_shutdown(signal).await?;
/// let report = lock_runtime::shutdown().await;
/// tracing::info!(released = report.released, "locks given back");
/// ```
///
/// (`examples/web_shop.rs` is this, compiled and run.) Without axum:
///
/// ```no_run
/// # async fn serve_until_sigterm() {}
/// # async fn demo() {
/// serve_until_sigterm().await;
/// let report = lock_runtime::shutdown().await;
/// assert_eq!(report.failed, 0, "some locks end by their ttl");
/// # }
/// ```
pub async fn shutdown() -> ShutdownReport {
    // Every client registers its shutdown when it is built, the global one included.
    let live = crate::renewal::at_exit::live();
    let reports = futures_util::future::join_all(live.iter().map(|shutdown| shutdown.run())).await;
    let mut total = ShutdownReport::default();
    for report in reports {
        total.add(report);
    }
    total
}

/// A handle on Redis for locks: a small pool of multiplexed, auto-reconnecting
/// connections and one watchdog that renews every lease taken through it.
///
/// Cheap to clone. Most code uses the global client implicitly (through the attribute or
/// [`Lock::new`](crate::Lock::new)); an explicit client serves tests and programs that talk to several
/// Redis deployments.
#[derive(Clone)]
pub struct LockClient {
    inner: Arc<ClientInner>,
}

struct ClientInner {
    key_prefix: String,
    wakeups: Wakeups,
    /// How far the lock passes between tasks of this process (see `cohort.rs`).
    pass_bound: PassBound,
    /// Wakes the parked waiters when a server is declared down or the client shuts down.
    interrupt: Arc<tokio::sync::Notify>,
    /// The ttl and wait of the locks that set none ([`Config::default_ttl`]).
    lock_defaults: crate::options::LockDefaults,
    /// The lock-order check ([`Config::lock_order_check`]; none: off).
    lock_order: Option<crate::lock_order::LockOrder>,
    /// How long a holding task's wait goes before it looks for a deadlock (zero: never).
    deadlock_delay: std::time::Duration,
    /// What its guards, queue places and cohorts keep of it (the reach, the watchdog, the
    /// shutdown, its own thread, ...). Last: dropped after the wake-ups.
    parts: Arc<LeaseParts>,
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("connections", &self.inner.parts.reach.nodes().len())
            .field("key_prefix", &self.inner.key_prefix)
            .finish_non_exhaustive()
    }
}

impl LockClient {
    /// Creates a client; connections open lazily on the first command.
    ///
    /// The client serves every Tokio runtime of the process, and may be created outside
    /// one: its connections, watchdog and background releases run on a thread of its own
    /// (`lock-runtime`), which ends when the client's last clone, and the last guard taken
    /// through it, are dropped.
    pub fn new(config: Config) -> Result<Self, LockError> {
        // The caller's runtime, for the blocking Sentinel lookup (before entering ours).
        let caller = tokio::runtime::Handle::try_current().is_ok_and(|runtime| {
            matches!(
                runtime.runtime_flavor(),
                tokio::runtime::RuntimeFlavor::MultiThread
            )
        });
        let thread = ClientThread::start().map_err(|err| {
            LockError::config(format!("cannot start the lock client's thread: {err}"))
        })?;
        // What the client spawns while it is built (and the runtime its parts keep for
        // later) is the client's own.
        let runtime = thread.handle().clone();
        let _entered = runtime.enter();
        let client = LockClient::build(config, caller, thread)?;
        crate::renewal::at_exit::watch(&client.inner.parts.shutdown);
        Ok(client)
    }

    fn build(config: Config, caller: bool, thread: ClientThread) -> Result<Self, LockError> {
        let tokens = crate::identity::TokenMaker::new(config.service_name.as_deref());
        let setup = Setup::new(&config, caller, tokens.connection_name())?;
        let BuiltTopology {
            connections,
            wakeups,
            deployment,
        } = setup.build()?;
        let telemetry = Telemetry::new(config.metrics_key_label, config.long);
        // On the client's own runtime (entered by the caller), as the watchdog.
        telemetry.start_publishing();
        // Redlock mode: every master renewed, a majority counted.
        let masters = deployment.renewal_quorum();
        let (watchdog, liveness, shutdown) =
            start_renewal(&config, &connections, masters, &telemetry, &setup.interrupt);
        let interrupt = setup.interrupt.clone();
        // An operator's release of a held lock is heard at once (not in a cluster, whose
        // sharded channels the release's script cannot reach: see `notices.rs`).
        if connections[0].cluster_nodes().is_none() {
            let channel = crate::renewal::notices::channel(&tokens);
            crate::renewal::notices::listen(wakeups.registrar(), channel, watchdog.clone());
        }
        let parts = LeaseParts {
            reach: Arc::new(Reach::new(
                (connections, deployment),
                config.replicas,
                config.response_timeout,
            )),
            watchdog,
            shutdown,
            telemetry,
            tokens,
            liveness,
            foreign_window: config.foreign_window,
            thread,
        };
        Ok(LockClient {
            inner: Arc::new(ClientInner {
                key_prefix: config.key_prefix,
                wakeups,
                pass_bound: PassBound {
                    passes: config.local_passes,
                    time: config.local_pass_time,
                },
                interrupt,
                lock_defaults: config.lock_defaults,
                lock_order: crate::lock_order::LockOrder::new(config.lock_order),
                deadlock_delay: config.deadlock_delay,
                parts: Arc::new(parts),
            }),
        })
    }

    /// A client on the application's own [`redis::Client`]: its connection settings
    /// (TLS certificates, credentials, database, protocol, TCP settings) apply to the lock
    /// connections, with the default timeouts and pool size. The same as
    /// `LockClient::new(Config::from_client(client))`; for other options, or for the
    /// global client through [`crate::init`], use [`Config::from_client`].
    ///
    /// ```no_run
    /// use lock_runtime::LockClient;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let redis = redis::Client::open("redis://10.0.0.1:6379/2")?;
    /// let locks = LockClient::from_client(redis.clone())?;
    /// let guard = locks.lock("report:daily").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn from_client(client: redis::Client) -> Result<Self, LockError> {
        LockClient::new(Config::from_client(client))
    }

    /// A client for one test: on the server `REDIS_URL` names (else
    /// [`DEFAULT_REDIS_URL`](crate::DEFAULT_REDIS_URL)), with a key prefix of its own, so
    /// that tests running in parallel on one Redis never share a key (see
    /// [`Config::for_tests`]). Pass it to the code under test as the application passes its
    /// client (`client = state.locks` on the attribute, or axum's `State`).
    ///
    /// ```no_run
    /// use lock_runtime::{LockClient, LockError, distributed_lock};
    ///
    /// #[distributed_lock(key = "gift:<user_id>", wait = "0s", client = locks)]
    /// async fn claim(locks: &LockClient, user_id: u64) -> Result<u64, LockError> {
    ///     Ok(user_id)
    /// }
    ///
    /// # async fn demo() -> Result<(), LockError> {
    /// // In a `#[tokio::test]`:
    /// let locks = LockClient::for_tests()?;
    /// assert_eq!(claim(&locks, 7).await?, 7);
    /// # Ok(()) }
    /// ```
    pub fn for_tests() -> Result<Self, LockError> {
        LockClient::new(Config::for_tests(crate::config::env_url()))
    }

    /// Whether anyone holds `key` now (in Redlock mode: on a majority of the masters).
    pub async fn is_locked(&self, key: &str) -> Result<bool, LockError> {
        let redis_key = self.redis_key(key)?;
        self.inner.parts.reach.is_locked(&redis_key).await
    }

    /// How many held leases the watchdog is tracking now (renewed, or watched for expiry).
    /// A released or dropped guard leaves it at once; useful to check for leaks.
    pub fn held_leases(&self) -> usize {
        self.inner.parts.watchdog.len()
    }

    /// How its steps reach Redis: the connections, the deployment, the replicas.
    pub(crate) fn reach(&self) -> &Arc<Reach> {
        &self.inner.parts.reach
    }

    /// What its guards, queue places and cohorts keep of it.
    pub(crate) fn parts(&self) -> &Arc<LeaseParts> {
        &self.inner.parts
    }

    /// The client's shutdown: background give-backs, and whether it still takes locks.
    pub(crate) fn shutdown_state(&self) -> &Arc<Shutdown> {
        &self.inner.parts.shutdown
    }

    /// Fires when a server is declared down or the client shuts down: a parked waiter
    /// then looks again (and fails).
    pub(crate) fn interrupt(&self) -> &tokio::sync::Notify {
        &self.inner.interrupt
    }

    /// Shuts the client down: no new locks (acquiring fails with
    /// [`LockError::Shutdown`]), no more renewals, every lock it holds released and every
    /// place it holds in a wait queue left, on its own connections, one pipeline per
    /// server, within [`SHUTDOWN_BUDGET`](crate::SHUTDOWN_BUDGET). Tasks that still hold a
    /// guard are told the lease is gone ([`LostCause::Shutdown`](crate::LostCause::Shutdown):
    /// a guarded body under [`OnLost::Cancel`](crate::OnLost::Cancel) is stopped at its next await point), and
    /// tasks waiting for a lock fail with [`LockError::Shutdown`].
    ///
    /// Call it when the application stops (after SIGTERM, once the server stopped taking
    /// requests): the other replicas get the locks at once instead of after their ttl.
    /// Without it, the locks still held when the process exits (`main` returns) are
    /// released then, synchronously, within the same budget. A second call finds
    /// nothing left to do. The process-wide [`shutdown`](crate::shutdown()) does this for
    /// every client of the process at once.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{Config, LockClient};
    ///
    /// let client = LockClient::new(Config::single("redis://127.0.0.1:6379"))?;
    /// // ... serve until SIGTERM ...
    /// let report = client.shutdown().await;
    /// assert_eq!(report.failed, 0);
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self) -> ShutdownReport {
        self.inner.parts.shutdown.run().await
    }

    pub(crate) fn telemetry(&self) -> &Telemetry {
        &self.inner.parts.telemetry
    }

    /// A fresh token for a lease of `ttl` asked for at `site`, naming this process.
    pub(crate) fn new_token(
        &self,
        ttl: std::time::Duration,
        site: &crate::call_site::CallSite,
    ) -> crate::lease::Token {
        self.inner.parts.tokens.token(ttl, site)
    }

    /// How long a holding task's wait goes before it looks for a deadlock (zero: never).
    pub(crate) fn deadlock_delay(&self) -> std::time::Duration {
        self.inner.deadlock_delay
    }

    /// The lock-order check, when [`Config::lock_order_check`] turned it on.
    pub(crate) fn lock_order(&self) -> Option<&crate::lock_order::LockOrder> {
        self.inner.lock_order.as_ref()
    }

    pub(crate) fn pass_bound(&self) -> PassBound {
        self.inner.pass_bound
    }

    pub(crate) fn wakeups(&self) -> &Wakeups {
        &self.inner.wakeups
    }

    /// Identifies this client (all its clones) for task-scoped reentrancy (see
    /// [`LeaseParts::id`]).
    pub(crate) fn id(&self) -> usize {
        self.inner.parts.id()
    }

    /// The names of the lock `key` (prefix applied), validated.
    pub(crate) fn key_names(&self, key: &str) -> Result<KeyNames, LockError> {
        KeyNames::prefixed(self.checked_prefix(key)?, key)
    }

    /// The key as stored in Redis (prefix applied), validated.
    pub(crate) fn redis_key(&self, key: &str) -> Result<String, LockError> {
        Ok(format!("{}{key}", self.checked_prefix(key)?))
    }

    /// The key prefix, once `key` and the prefixed key are checked against the limits.
    fn checked_prefix(&self, key: &str) -> Result<&str, LockError> {
        crate::key::validate(key)?;
        let prefix = &self.inner.key_prefix;
        if !prefix.is_empty() && prefix.len() + key.len() > crate::key::MAX_KEY_LEN {
            // Refused for its length, with the message a whole key gets.
            crate::key::validate(&format!("{prefix}{key}"))?;
        }
        Ok(prefix)
    }

    pub(crate) fn lock_defaults(&self) -> crate::options::LockDefaults {
        self.inner.lock_defaults
    }
}

/// The client's renewal: the watchdog (every master renewed, a majority counted, in Redlock
/// mode: `masters` holds its quorum and node timeout), the process's liveness key, and the
/// shutdown that gives everything back (also when the watchdog's runtime ends).
fn start_renewal(
    config: &Config,
    connections: &[Connection],
    masters: Option<(usize, Duration)>,
    telemetry: &Telemetry,
    interrupt: &Arc<tokio::sync::Notify>,
) -> (Watchdog, Option<Arc<Liveness>>, Arc<Shutdown>) {
    // The scheduler's runtime shutting down gives back what the client holds.
    let shutdown_slot: Arc<std::sync::OnceLock<std::sync::Weak<Shutdown>>> = Arc::default();
    let on_dropped: crate::renewal::watchdog::OnDropped = {
        let slot = shutdown_slot.clone();
        Box::new(move || {
            if let Some(shutdown) = slot.get().and_then(std::sync::Weak::upgrade) {
                shutdown.runtime_gone(None);
            }
        })
    };
    // One liveness key for the process's queue places, where every script can read it
    // (one per master in a cluster, where a script reads only its node's keys; Redlock
    // waiters do not queue).
    let liveness = match (masters, connections[0].cluster_nodes()) {
        (Some(_), _) => None,
        #[cfg(feature = "cluster")]
        (None, Some(nodes)) => Some(Liveness::cluster(nodes.clone())),
        (None, _) => Some(Liveness::new()),
    };
    // Redlock mode (no liveness key): every master renewed, no replicas waited for.
    let (nodes, quorum, waits) = match masters {
        None => (vec![connections[0].clone()], 1, (None, config.replicas)),
        Some((quorum, node_timeout)) => (connections.to_vec(), quorum, (Some(node_timeout), None)),
    };
    let watchdog = Watchdog::start(
        nodes,
        quorum,
        waits,
        liveness.clone(),
        telemetry.clone(),
        on_dropped,
    );
    let shutdown = Arc::new(Shutdown::new(
        watchdog.clone(),
        connections,
        masters.is_some(),
        publish_command(&connections[0]),
        interrupt.clone(),
    ));
    let _ = shutdown_slot.set(Arc::downgrade(&shutdown));
    (watchdog, liveness, shutdown)
}
