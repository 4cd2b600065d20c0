//! The client: connections to Redis, the watchdog, and the global instance.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use once_cell::sync::OnceCell;
use redis::aio::ConnectionManagerConfig;
#[cfg(feature = "cluster")]
use redis::cluster::ClusterClientBuilder;

#[cfg(feature = "cluster")]
use crate::cluster_nodes::ClusterNodes;
use crate::config::{PassBound, Topology as TopologyConfig};
#[cfg(feature = "cluster")]
use crate::connection::LazyCluster;
#[cfg(feature = "sentinel")]
use crate::connection::Sentinel;
use crate::connection::{Connection, SingleServer};
use crate::home::Home;
use crate::liveness::Liveness;
use crate::outage::{Health, Probe};
#[cfg(feature = "redlock")]
use crate::redlock::Redlock;
use crate::replicas::Replicas;
use crate::scripts::KeyNames;
#[cfg(feature = "sentinel")]
use crate::sentinel::{PrimaryTemplate, check_primary_auth};
use crate::shutdown::{Shutdown, ShutdownReport};
use crate::telemetry::Telemetry;
use crate::tls_files::TlsFiles;
use crate::wakeups::{Timeouts, Wakeups};
use crate::watchdog::Watchdog;
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
    GLOBAL_CONFIG.set(config).map_err(|_| LockError::Config {
        reason: format!(
            "init({url}) called after the global client was already configured \
             (by an earlier init or by the first lock, from REDIS_URL); call init once, \
             before any lock is used"
        ),
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
    match GLOBAL_CLIENT.get() {
        Some(client) => client.shutdown().await,
        None => ShutdownReport::default(),
    }
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
    /// Single mode: the pool, used round robin. Redlock mode: one per master, in order.
    /// Cluster mode: the one cluster connection.
    connections: Vec<Connection>,
    next: AtomicUsize,
    key_prefix: String,
    watchdog: Watchdog,
    wakeups: Wakeups,
    /// How far the lock passes between tasks of this process (see `cohort.rs`).
    pass_bound: PassBound,
    /// How long a foreign window leaves a contended key free (zero: never).
    foreign_window: Duration,
    #[cfg(feature = "redlock")]
    redlock: Option<Redlock>,
    /// Whether Redis ever answered an acquire through this client.
    answered: AtomicBool,
    /// How long one request may wait for its reply.
    response_timeout: Duration,
    /// Where outcomes are reported (events, and metrics with the `metrics` feature).
    telemetry: Telemetry,
    /// How many replicas must confirm a grant (`None`: grants count at once).
    replicas: Option<Replicas>,
    /// What the client holds in Redis is given back at shutdown (see `shutdown.rs`).
    shutdown: Arc<Shutdown>,
    /// Wakes the parked waiters when a server is declared down or the client shuts down.
    interrupt: Arc<tokio::sync::Notify>,
    /// The process's liveness key, which its queue places name (single server, Sentinel).
    liveness: Option<Arc<Liveness>>,
    /// The client's own runtime, where its background work runs, on a thread stopped when
    /// the client is dropped (see `home.rs`).
    home: Home,
    /// The ttl and wait of the locks that set none ([`Config::default_ttl`]).
    lock_defaults: crate::options::LockDefaults,
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("connections", &self.inner.connections.len())
            .field("key_prefix", &self.inner.key_prefix)
            .finish_non_exhaustive()
    }
}

impl LockClient {
    /// Creates a client; connections open lazily on the first command.
    ///
    /// The client serves every Tokio runtime of the process, and may be created outside
    /// one: its connections, watchdog and background releases run on a thread of its own
    /// (`lock-runtime`), which ends when the client's last clone is dropped.
    pub fn new(config: Config) -> Result<Self, LockError> {
        // The caller's runtime, for the blocking Sentinel lookup (before entering ours).
        let caller = tokio::runtime::Handle::try_current().is_ok_and(|runtime| {
            matches!(
                runtime.runtime_flavor(),
                tokio::runtime::RuntimeFlavor::MultiThread
            )
        });
        let home = Home::start().map_err(|err| LockError::Config {
            reason: format!("cannot start the lock client's thread: {err}"),
        })?;
        // What the client spawns while it is built (and the runtime its parts keep for
        // later) is the client's own.
        let runtime = home.handle().clone();
        let _entered = runtime.enter();
        let client = LockClient::build(config, caller, home)?;
        crate::at_exit::watch(&client.inner.shutdown);
        Ok(client)
    }

    fn build(config: Config, caller: bool, home: Home) -> Result<Self, LockError> {
        let setup = Setup::new(&config, caller)?;
        if let Some(replicas) = &config.replicas {
            replicas.check(config.response_timeout, config.topology.is_redlock())?;
        }
        let Topology {
            connections,
            wakeups,
            #[cfg(feature = "redlock")]
            redlock,
        } = match &config.topology {
            TopologyConfig::Single(_) | TopologyConfig::Client { .. } => setup.single_server()?,
            #[cfg(feature = "sentinel")]
            TopologyConfig::Sentinel { .. } => setup.single_server()?,
            #[cfg(feature = "redlock")]
            TopologyConfig::Redlock(urls) => setup.redlock(urls)?,
            #[cfg(feature = "cluster")]
            TopologyConfig::Cluster(_) | TopologyConfig::ClusterBuilder { .. } => {
                setup.cluster()?
            }
        };
        let telemetry = Telemetry::new(config.metrics_key_label);
        // The scheduler's runtime shutting down gives back what the client holds.
        let shutdown_slot: Arc<std::sync::OnceLock<std::sync::Weak<Shutdown>>> = Arc::default();
        let on_dropped: crate::watchdog::OnDropped = {
            let slot = shutdown_slot.clone();
            Box::new(move || {
                if let Some(shutdown) = slot.get().and_then(std::sync::Weak::upgrade) {
                    shutdown.runtime_gone(None);
                }
            })
        };
        // Redlock mode: every master renewed, a majority counted.
        #[cfg(feature = "redlock")]
        let masters = redlock.as_ref().map(|redlock| {
            (
                redlock.quorum,
                config.node_timeout.max(Duration::from_millis(1)),
            )
        });
        #[cfg(not(feature = "redlock"))]
        let masters: Option<(usize, Duration)> = None;
        // One liveness key for the process's queue places, where every script can read it
        // (one per master in a cluster, where a script reads only its node's keys; Redlock
        // waiters do not queue).
        let liveness = match (masters, connections[0].cluster_nodes()) {
            (Some(_), _) => None,
            #[cfg(feature = "cluster")]
            (None, Some(nodes)) => Some(Liveness::cluster(nodes.clone())),
            (None, _) => Some(Liveness::new()),
        };
        let watchdog = match masters {
            None => Watchdog::start(
                vec![connections[0].clone()],
                1,
                (None, config.replicas),
                liveness.clone(),
                telemetry.clone(),
                on_dropped,
            ),
            Some((quorum, node_timeout)) => Watchdog::start(
                connections.clone(),
                quorum,
                (Some(node_timeout), None),
                None,
                telemetry.clone(),
                on_dropped,
            ),
        };
        let publish = if connections[0].is_cluster() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        };
        let shutdown = Arc::new(Shutdown::new(
            watchdog.clone(),
            &connections,
            masters.is_some(),
            publish,
            setup.interrupt.clone(),
        ));
        let _ = shutdown_slot.set(Arc::downgrade(&shutdown));
        let interrupt = setup.interrupt.clone();
        Ok(LockClient {
            inner: Arc::new(ClientInner {
                connections,
                next: AtomicUsize::new(0),
                key_prefix: config.key_prefix,
                watchdog,
                wakeups,
                pass_bound: PassBound {
                    passes: config.local_passes,
                    time: config.local_pass_time,
                },
                foreign_window: config.foreign_window,
                #[cfg(feature = "redlock")]
                redlock,
                answered: AtomicBool::new(false),
                response_timeout: config.response_timeout,
                telemetry,
                replicas: config.replicas,
                shutdown,
                interrupt,
                liveness,
                home,
                lock_defaults: config.lock_defaults,
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

    /// Whether anyone holds `key` now (in Redlock mode: on a majority of the masters).
    pub async fn is_locked(&self, key: &str) -> Result<bool, LockError> {
        let redis_key = self.redis_key(key)?;
        #[cfg(feature = "redlock")]
        if let Some(redlock) = &self.inner.redlock {
            return crate::redlock::is_locked(&self.inner.connections, redlock, &redis_key).await;
        }
        let value: Option<String> = redis::cmd("GET")
            .arg(&redis_key)
            .query_async(&mut self.connection())
            .await
            .map_err(|err| LockError::backend(&redis_key, err))?;
        // A key being handed to the next waiter has no holder yet.
        Ok(value.is_some_and(|value| value != crate::scripts::HANDOVER))
    }

    /// How many held leases the watchdog is tracking now (renewed, or watched for expiry).
    /// A released or dropped guard leaves it at once; useful to check for leaks.
    pub fn held_leases(&self) -> usize {
        self.inner.watchdog.len()
    }

    /// The next connection of the pool (round robin).
    pub(crate) fn connection(&self) -> Connection {
        let connections = &self.inner.connections;
        let index = self.inner.next.fetch_add(1, Ordering::Relaxed) % connections.len();
        connections[index].clone()
    }

    /// Whether the connections bound a call's requests by its deadline
    /// ([`Connection::until`]): a single server's (also behind Sentinel), not a cluster's
    /// nor Redlock's masters.
    pub(crate) fn keeps_deadlines(&self) -> bool {
        !self.is_redlock() && self.inner.connections[0].keeps_deadlines()
    }

    /// Notes that Redis answered an acquire: a later timeout may hide a grant.
    pub(crate) fn mark_answered(&self) {
        self.inner.answered.store(true, Ordering::Relaxed);
    }

    /// Whether Redis ever answered an acquire through this client. Until it has, a timeout
    /// is a server that cannot be reached (no command got through, nothing to find again).
    pub(crate) fn has_answered(&self) -> bool {
        self.inner.answered.load(Ordering::Relaxed)
    }

    /// The client's shutdown: background give-backs, and whether it still takes locks.
    pub(crate) fn shutdown_state(&self) -> &Arc<Shutdown> {
        &self.inner.shutdown
    }

    /// Fires when a server is declared down or the client shuts down: a parked waiter
    /// then looks again (and fails).
    pub(crate) fn interrupt(&self) -> &tokio::sync::Notify {
        &self.inner.interrupt
    }

    /// Whether a try for `key` may go to Redis now: not once the client is shut down, and
    /// not while the server it needs (single mode; in a cluster, the master that serves
    /// its slot) is declared down (see `outage.rs`, `cluster_nodes.rs`).
    pub(crate) fn may_try(&self, key: &str) -> Result<(), LockError> {
        self.inner.shutdown.check_open(key)?;
        self.outage(key).map_or(Ok(()), Err)
    }

    /// The outage error for `key` when its server (single mode; in a cluster, the master
    /// of its slot) is declared down: a failed try then ends the acquisition instead of
    /// being tried again.
    pub(crate) fn outage(&self, key: &str) -> Option<LockError> {
        if self.is_redlock() {
            return None;
        }
        self.inner.connections[0].down(key)
    }

    /// Shuts the client down: no new locks (acquiring fails with
    /// [`LockError::Shutdown`]), no more renewals, every lock it holds released and every
    /// place it holds in a wait queue left, on its own connections, one pipeline per
    /// server, within [`SHUTDOWN_BUDGET`](crate::SHUTDOWN_BUDGET). Tasks that still hold a
    /// guard are told the lease is gone ([`LostCause::Shutdown`](crate::LostCause::Shutdown):
    /// a guarded body with `on_lost = "cancel"` is stopped at its next await point), and
    /// tasks waiting for a lock fail with [`LockError::Shutdown`].
    ///
    /// Call it when the application stops (after SIGTERM, once the server stopped taking
    /// requests): the other replicas get the locks at once instead of after their ttl.
    /// Without it, the locks still held when the process exits (`main` returns) are
    /// released then, synchronously, within the same budget. A second call finds
    /// nothing left to do.
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
        self.inner.shutdown.run().await
    }

    /// How long one request may wait for its reply.
    pub(crate) fn response_timeout(&self) -> Duration {
        self.inner.response_timeout
    }

    /// How many replicas must confirm a grant, when grants wait for replicas.
    pub(crate) fn replicas(&self) -> Option<&Replicas> {
        self.inner.replicas.as_ref()
    }

    /// Where outcomes are reported.
    pub(crate) fn telemetry(&self) -> &Telemetry {
        &self.inner.telemetry
    }

    pub(crate) fn watchdog(&self) -> &Watchdog {
        &self.inner.watchdog
    }

    /// The client's own runtime: background work that must outlive the caller's runtime
    /// (a release in the background, a hand-over) is spawned there.
    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        self.inner.home.handle()
    }

    /// The Redlock settings, in that mode.
    #[cfg(feature = "redlock")]
    pub(crate) fn redlock(&self) -> Option<&Redlock> {
        self.inner.redlock.as_ref()
    }

    /// Whether this client is in Redlock mode (a majority of independent masters).
    pub(crate) fn is_redlock(&self) -> bool {
        #[cfg(feature = "redlock")]
        return self.inner.redlock.is_some();
        #[cfg(not(feature = "redlock"))]
        false
    }

    /// Every connection: the masters in Redlock mode.
    #[cfg(feature = "redlock")]
    pub(crate) fn nodes(&self) -> &[Connection] {
        &self.inner.connections
    }

    /// The command that announces a release: sharded in a cluster.
    /// The process's liveness key, where queue places name it (see [`crate::liveness`]).
    pub(crate) fn liveness(&self) -> Option<&Arc<Liveness>> {
        self.inner.liveness.as_ref()
    }

    pub(crate) fn publish_command(&self) -> &'static str {
        if self.inner.connections[0].is_cluster() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    /// How far the lock passes between tasks of this process.
    pub(crate) fn pass_bound(&self) -> PassBound {
        self.inner.pass_bound
    }

    /// How long a foreign window leaves a contended key free (zero: never).
    pub(crate) fn foreign_window(&self) -> Duration {
        self.inner.foreign_window
    }

    pub(crate) fn wakeups(&self) -> &Wakeups {
        &self.inner.wakeups
    }

    /// Identifies this client (all its clones) for task-scoped reentrancy.
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// The names of the lock `key` (prefix applied), validated.
    pub(crate) fn key_names(&self, key: &str) -> Result<KeyNames, LockError> {
        KeyNames::prefixed(self.checked_prefix(key)?, key)
    }

    /// The key as stored in Redis (prefix applied), validated.
    pub(crate) fn redis_key(&self, key: &str) -> Result<String, LockError> {
        let prefix = self.checked_prefix(key)?;
        Ok(format!("{prefix}{key}"))
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

    /// The ttl and wait of the locks that set none.
    pub(crate) fn lock_defaults(&self) -> crate::options::LockDefaults {
        self.inner.lock_defaults
    }
}

/// The connections of one topology: the command connections, the wake-ups, and in Redlock
/// mode its settings.
struct Topology {
    connections: Vec<Connection>,
    wakeups: Wakeups,
    #[cfg(feature = "redlock")]
    redlock: Option<Redlock>,
}

/// What building the connections of any topology needs, checked once.
struct Setup<'a> {
    config: &'a Config,
    urls: Vec<String>,
    manager: ConnectionManagerConfig,
    /// How long the startup checks (eviction, Sentinel lookup) may take per server: one
    /// connect and one reply.
    limit: Duration,
    timeouts: Timeouts,
    /// Wakes the client's parked waiters (a server declared down, the client shut down).
    interrupt: Arc<tokio::sync::Notify>,
    /// Whether the client is created on a multi-thread runtime, whose worker the Sentinel
    /// lookup hands its other tasks away from while it blocks.
    #[cfg(feature = "sentinel")]
    caller: bool,
}

impl<'a> Setup<'a> {
    /// Checks what every topology needs: at least one URL. `caller` is the runtime the
    /// client is created on, if any (the Sentinel lookup blocks it).
    fn new(
        config: &'a Config,
        #[cfg_attr(not(feature = "sentinel"), allow(unused_variables))] caller: bool,
    ) -> Result<Self, LockError> {
        #[cfg(feature = "sentinel")]
        if config.primary.is_set() && !matches!(config.topology, TopologyConfig::Sentinel { .. }) {
            return Err(LockError::Config {
                reason: format!(
                    "Config::primary_password, primary_auth and primary_tls* set the primary \
                     that Sentinel names, but {} is not a Config::sentinel set-up: put the \
                     credentials in the URL (redis://user:password@host) and use \
                     Config::tls_ca_cert / tls_client_cert",
                    config.urls().join(", ")
                ),
            });
        }
        let urls = config.urls().to_vec();
        if urls.is_empty() {
            return Err(LockError::Config {
                reason: "no Redis URL given (Redlock needs its masters, a cluster its seeds)"
                    .into(),
            });
        }
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.response_timeout))
            // One connection attempt per command that needs it, so a failure comes back
            // within `connect_timeout`; the callers' own loops (acquire within `wait`, the
            // watchdog, release) decide when to try again.
            .set_number_of_retries(0)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500));
        #[cfg(feature = "tls-rustls")]
        if uses_tls(config) {
            ensure_crypto_provider();
        }
        Ok(Setup {
            config,
            urls,
            manager,
            limit: config
                .connect_timeout
                .saturating_add(config.response_timeout),
            timeouts: Timeouts {
                connect: config.connect_timeout,
                response: config.response_timeout,
            },
            interrupt: Arc::default(),
            #[cfg(feature = "sentinel")]
            caller,
        })
    }

    /// What the requests to `server` found lately, for the outage rule; `probe` asks it
    /// whether it is back while it is down.
    fn health(&self, server: String, probe: Probe) -> Health {
        Health::new(
            server,
            self.config.outage_grace,
            self.interrupt.clone(),
            Some(probe),
        )
    }

    fn open(&self, url: &str) -> Result<redis::Client, LockError> {
        open_client(url, &self.config.tls)
    }

    fn setup_failed(&self, err: redis::RedisError) -> LockError {
        LockError::invalid_url(self.urls.join(", "), err)
    }

    /// One server: by URL, the application's client, or the primary Sentinel names (then
    /// followed across failovers, wake-ups included).
    fn single_server(&self) -> Result<Topology, LockError> {
        let (client, sentinel) = match &self.config.topology {
            TopologyConfig::Client { client, .. } => ((**client).clone(), None),
            #[cfg(feature = "sentinel")]
            TopologyConfig::Sentinel { master, sentinels } => {
                let (primary, sentinel) = self.sentinel(master, sentinels)?;
                (primary, Some(sentinel))
            }
            _ => (self.open(&self.urls[0])?, None),
        };
        let health = self.health(
            match &sentinel {
                #[cfg(feature = "sentinel")]
                Some(sentinel) => format!("the primary `{}` (Sentinel)", sentinel.master),
                _ => client.get_connection_info().addr().to_string(),
            },
            ping_server(&client, self.limit),
        );
        let pool = (0..self.config.pool_size.max(1))
            .map(|_| {
                SingleServer::with_sentinel(client.clone(), self.manager.clone(), sentinel.clone())
                    .map(|server| server.watched(health.clone()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| self.setup_failed(err))?;
        warn_if_evicting(&client, self.limit);
        let wakeups = Wakeups::single(client, self.manager.clone(), self.timeouts)
            .map_err(|err| self.setup_failed(err))?;
        #[cfg(feature = "sentinel")]
        if let Some(sentinel) = &sentinel {
            let follower = wakeups.follower();
            sentinel.follow(&pool, Arc::new(move |primary| follower.move_to(primary)));
        }
        Ok(Topology {
            connections: pool.into_iter().map(Connection::Single).collect(),
            wakeups,
            #[cfg(feature = "redlock")]
            redlock: None,
        })
    }

    /// Finds the primary `master` through `sentinels` (a blocking lookup).
    #[cfg(feature = "sentinel")]
    fn sentinel(
        &self,
        master: &str,
        sentinels: &[String],
    ) -> Result<(redis::Client, Arc<Sentinel>), LockError> {
        let clients = sentinels
            .iter()
            .map(|url| self.open(url))
            .collect::<Result<Vec<_>, _>>()?;
        let Some(first) = clients.first() else {
            return Err(LockError::Config {
                reason: format!("no sentinel URL given for the primary `{master}`"),
            });
        };
        // The primary's settings: the first sentinel's, or its own (`sentinel.rs`).
        let template = PrimaryTemplate::new(
            first.get_connection_info().clone(),
            self.config.primary.clone(),
            master,
        )?;
        let sentinel = Sentinel::new(master.to_owned(), clients, template, self.limit);
        let primary = blocking(self.caller, || sentinel.lookup_blocking()).map_err(|err| {
            LockError::Config {
                reason: format!(
                    "cannot find the primary `{master}` through the sentinels {}: {err}",
                    self.urls.join(", ")
                ),
            }
        })?;
        blocking(self.caller, || {
            check_primary_auth(&primary, master, self.limit)
        })?;
        Ok((primary, Arc::new(sentinel)))
    }

    /// Independent masters: one connection and one wake-up subscription per master.
    #[cfg(feature = "redlock")]
    fn redlock(&self, urls: &[String]) -> Result<Topology, LockError> {
        let clients = urls
            .iter()
            .map(|url| self.open(url))
            .collect::<Result<Vec<_>, _>>()?;
        let nodes = clients
            .iter()
            .map(|client| {
                let health = self.health(
                    client.get_connection_info().addr().to_string(),
                    ping_server(client, self.limit),
                );
                manager(client, &self.manager, health)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| self.setup_failed(err))?;
        for client in &clients {
            warn_if_evicting(client, self.limit);
        }
        // Redlock waiters subscribe on every master (one subscription per key per
        // master); the client-wide registry stays empty.
        let single = |client: &redis::Client| {
            Wakeups::single(client.clone(), self.manager.clone(), self.timeouts)
                .map_err(|err| self.setup_failed(err))
        };
        let masters = clients.iter().map(single).collect::<Result<Vec<_>, _>>()?;
        let wakeups = single(&clients[0])?;
        let redlock = Redlock {
            urls: urls.to_vec(),
            quorum: urls.len() / 2 + 1,
            node_timeout: self.config.node_timeout,
            wakeups: masters,
        };
        Ok(Topology {
            connections: nodes,
            wakeups,
            redlock: Some(redlock),
        })
    }

    /// A cluster: one connection for commands, one for the sharded wake-ups.
    #[cfg(feature = "cluster")]
    fn cluster(&self) -> Result<Topology, LockError> {
        let commands = self
            .cluster_builder()?
            .build()
            .map_err(|err| self.setup_failed(err))?;
        let wakeups =
            Wakeups::cluster(self.cluster_builder()?).map_err(|err| self.setup_failed(err))?;
        // Map reads and probes: connections of their own, without retries (a probe
        // answers for one moment; the outage rule does the waiting).
        let probes = self
            .cluster_builder()?
            .retries(0)
            .build()
            .map_err(|err| self.setup_failed(err))?;
        let whole = Health::cluster(
            self.urls.join(", "),
            self.config.outage_grace,
            self.interrupt.clone(),
            ping_cluster(commands.clone()),
        );
        let nodes = ClusterNodes::new(
            self.config.outage_grace,
            self.interrupt.clone(),
            probes,
            self.limit,
            whole,
        );
        Ok(Topology {
            connections: vec![Connection::Cluster(
                LazyCluster::new(commands).watched(nodes),
            )],
            wakeups,
            #[cfg(feature = "redlock")]
            redlock: None,
        })
    }

    /// A cluster builder (the application's, or one from the seeds) with short
    /// redirect/TRYAGAIN retries: a lock operation is latency-bound, and the acquire loop
    /// itself tries again within `wait` (the client's default first wait is over a
    /// second, longer than a whole response timeout).
    #[cfg(feature = "cluster")]
    fn cluster_builder(&self) -> Result<ClusterClientBuilder, LockError> {
        let retries = |builder: ClusterClientBuilder| {
            builder
                .retries(6)
                .min_retry_wait(5)
                .max_retry_wait(200)
                .retry_wait_formula(5, 2)
        };
        match &self.config.topology {
            // The application's builder: its own timeouts apply.
            TopologyConfig::ClusterBuilder { builder, .. } => Ok(retries(builder())),
            _ => cluster_tls(
                retries(
                    ClusterClientBuilder::new(self.urls.clone())
                        .connection_timeout(self.config.connect_timeout)
                        .response_timeout(self.config.response_timeout),
                ),
                &self.config.tls,
            ),
        }
    }
}

/// A client for `url`, with the configured TLS certificates if any.
fn open_client(url: &str, tls: &TlsFiles) -> Result<redis::Client, LockError> {
    // The URL alone first: a URL the client rejects is `InvalidUrl`; certificates that
    // cannot be used with it are a configuration error of their own.
    let client =
        redis::Client::open(url).map_err(|err| LockError::invalid_url(url, with_hint(url, err)))?;
    if !tls.is_set() {
        return Ok(client);
    }
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    crate::tls::check(tls, crate::tls::TlsSettings::Config, url)?;
    with_certificates(url, tls).map_err(|err| LockError::Config {
        reason: format!("the TLS certificates given for `{url}` cannot be used: {err}"),
    })
}

/// The client's error about `url`, with the fix when there is one we know.
fn with_hint(url: &str, err: redis::RedisError) -> redis::RedisError {
    let hint = if url.contains("+sentinel://") {
        "Sentinel URLs are not supported: use Config::sentinel(master_name, sentinel_urls) \
         with lock_runtime::init"
    } else if url.starts_with("rediss://")
        && !cfg!(any(feature = "tls-rustls", feature = "tls-native-tls"))
    {
        "rediss:// needs TLS: turn on the lock-runtime feature `tls-rustls` or `tls-native-tls`"
    } else {
        return err;
    };
    redis::RedisError::from((err.kind(), hint, err.to_string()))
}

#[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
fn with_certificates(url: &str, tls: &TlsFiles) -> redis::RedisResult<redis::Client> {
    redis::Client::build_with_tls(url, crate::tls::certificates(tls))
}

#[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
fn with_certificates(_url: &str, _tls: &TlsFiles) -> redis::RedisResult<redis::Client> {
    Err(redis::RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "TLS certificates were configured, but lock-runtime was built without TLS: turn on \
         its feature `tls-rustls` or `tls-native-tls`",
    )))
}

/// The cluster builder with the configured TLS certificates, if any.
#[cfg(feature = "cluster")]
fn cluster_tls(
    builder: ClusterClientBuilder,
    tls: &TlsFiles,
) -> Result<ClusterClientBuilder, LockError> {
    if !tls.is_set() {
        return Ok(builder);
    }
    #[cfg(feature = "tls-rustls")]
    {
        crate::tls::check(tls, crate::tls::TlsSettings::Config, "the cluster")?;
        Ok(builder.certs(crate::tls::certificates(tls)))
    }
    #[cfg(not(feature = "tls-rustls"))]
    Err(LockError::Config {
        reason: "TLS certificates for a cluster need the lock-runtime feature `tls-rustls` \
                 (redis-rs takes cluster certificates only through rustls)"
            .into(),
    })
}

/// Whether a server of `config` may be reached over TLS: only then does redis-rs build a
/// rustls configuration, and only then is a process-wide crypto provider needed.
#[cfg(feature = "tls-rustls")]
fn uses_tls(config: &Config) -> bool {
    use redis::IntoConnectionInfo as _;
    let tls = |addr: &redis::ConnectionAddr| matches!(addr, redis::ConnectionAddr::TcpTls { .. });
    let topology = match &config.topology {
        TopologyConfig::Client { client, .. } => tls(client.get_connection_info().addr()),
        // The application's builder: its TLS settings cannot be seen.
        #[cfg(feature = "cluster")]
        TopologyConfig::ClusterBuilder { .. } => true,
        #[cfg(feature = "sentinel")]
        TopologyConfig::Sentinel { .. } => {
            matches!(
                config.primary.tls,
                Some(crate::primary_settings::PrimaryTls::On(_))
            )
        }
        _ => false,
    };
    topology
        || config.tls.is_set()
        || config.urls().iter().any(|url| {
            url.as_str()
                .into_connection_info()
                .is_ok_and(|info| tls(info.addr()))
        })
}

/// rustls needs a process-wide crypto provider when a server is reached over TLS:
/// redis-rs (1.8) builds each TLS connection's configuration with
/// `rustls::ClientConfig::builder()`, which takes the process default and has no way to be
/// handed a provider. One the application installed stays; otherwise ours is ring, installed
/// here rather than by rustls's own fallback, which panics when the application's
/// dependencies enable a second provider (aws-lc-rs) too.
#[cfg(feature = "tls-rustls")]
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing the race to another installer is fine: a provider is there either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Runs `work` (the Sentinel lookup, the primary's start-up check) while the client is
/// being built. The constructor is synchronous, so the work blocks, bounded by the timeout
/// per server; on a multi-thread runtime the worker hands its other tasks away meanwhile.
#[cfg(feature = "sentinel")]
fn blocking<T>(multi_thread: bool, work: impl FnOnce() -> T) -> T {
    if multi_thread {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

/// A probe of one server: a `PING` on a connection of its own (not the pool's, which may
/// be stuck on the dead socket), within `limit`.
fn ping_server(client: &redis::Client, limit: Duration) -> Probe {
    let client = client.clone();
    Arc::new(move || {
        let client = client.clone();
        Box::pin(async move {
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(limit))
                .set_response_timeout(Some(limit));
            let Ok(mut connection) = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
            else {
                return false;
            };
            redis::cmd("PING")
                .query_async::<String>(&mut connection)
                .await
                .is_ok()
        })
    })
}

/// A probe of a cluster: a connection of its own that answers a `PING`.
#[cfg(feature = "cluster")]
fn ping_cluster(cluster: redis::cluster::ClusterClient) -> Probe {
    Arc::new(move || {
        let cluster = cluster.clone();
        Box::pin(async move {
            let Ok(mut connection) = cluster.get_async_connection().await else {
                return false;
            };
            redis::cmd("PING")
                .query_async::<String>(&mut connection)
                .await
                .is_ok()
        })
    })
}

#[cfg(feature = "redlock")]
fn manager(
    client: &redis::Client,
    config: &ConnectionManagerConfig,
    health: Health,
) -> redis::RedisResult<Connection> {
    SingleServer::new(client.clone(), config.clone())
        .map(|server| Connection::Single(server.watched(health)))
}

/// Warns once, in the background, when the server may evict lock keys: a `maxmemory` limit
/// with an `allkeys-*` or `volatile-*` policy (every lock key has an expiry, so `volatile-*`
/// can take it too). An evicted lock is a lock lost. Servers that refuse `CONFIG`
/// (managed services, ACLs) or do not answer within `limit` are not checked.
///
/// The check opens a connection of its own and drops it: the shared connections stay lazy,
/// so none of them is opened early and left stale by a server restart before first use.
fn warn_if_evicting(client: &redis::Client, limit: Duration) {
    let server = client.get_connection_info().addr().to_string();
    let client = client.clone();
    tokio::spawn(async move {
        let check = async {
            let mut connection = client.get_multiplexed_async_connection().await?;
            redis::cmd("CONFIG")
                .arg("GET")
                .arg("maxmemory*")
                .query_async::<std::collections::HashMap<String, String>>(&mut connection)
                .await
        };
        let Ok(Ok(config)) = tokio::time::timeout(limit, check).await else {
            return;
        };
        let policy = config.get("maxmemory-policy").map_or("", String::as_str);
        let limited = config.get("maxmemory").is_some_and(|limit| limit != "0");
        if limited && (policy.starts_with("allkeys-") || policy.starts_with("volatile-")) {
            tracing::warn!(
                %server,
                policy,
                "the Redis server may evict lock keys (maxmemory-policy {policy} with a \
                 maxmemory limit): an evicted lock is lost while its holder runs; use \
                 noeviction for the locks' server"
            );
        }
    });
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        self.watchdog.shutdown();
    }
}
