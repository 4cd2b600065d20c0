//! How the runtime reaches Redis.

#[cfg(feature = "cluster")]
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "cluster")]
use redis::cluster::ClusterClientBuilder;

use tls_files::TlsFiles;

mod deadlock;
mod identity;
mod lock_order;
pub(crate) mod long_holds;
#[cfg(feature = "sentinel")]
pub(crate) mod primary_settings;
mod replicas;
#[cfg(feature = "sentinel")]
mod sentinel;
pub(crate) mod tls_files;

/// The environment variable read when the global client is created without [`crate::init`].
pub const REDIS_URL_ENV: &str = "REDIS_URL";

/// The server used when neither [`crate::init`] nor `REDIS_URL` names one.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// Where the locks live and how the connections behave.
///
/// ```
/// use std::time::Duration;
/// use lock_runtime::Config;
///
/// let config = Config::single("redis://127.0.0.1:6379")
///     .key_prefix("shop:")
///     .connect_timeout(Duration::from_secs(1));
/// # let _ = config;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    pub(crate) topology: DeploymentKind,
    pub(crate) key_prefix: String,
    pub(crate) pool_size: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    #[cfg(feature = "redlock")]
    pub(crate) node_timeout: Duration,
    pub(crate) tls: TlsFiles,
    /// Sentinel mode: the primary's own credentials and TLS (see `sentinel.rs`).
    #[cfg(feature = "sentinel")]
    pub(crate) primary: primary_settings::PrimarySettings,
    pub(crate) local_passes: u32,
    pub(crate) local_pass_time: Duration,
    pub(crate) foreign_window: Duration,
    pub(crate) metrics_key_label: Option<crate::telemetry::KeyLabel>,
    pub(crate) replicas: Option<crate::replicas::Replicas>,
    pub(crate) outage_grace: Duration,
    pub(crate) lock_defaults: crate::options::LockDefaults,
    pub(crate) lock_order: crate::lock_order::LockOrderCheck,
    /// When a hold or a wait is logged as long ([`Config::log_long_holds`]).
    pub(crate) long: crate::telemetry::LongThresholds,
    /// The service its tokens name (`None`: the binary's name).
    pub(crate) service_name: Option<String>,
    /// How long a wait of a task that holds locks goes before it looks for a deadlock
    /// (zero: never).
    pub(crate) deadlock_delay: Duration,
}

/// How long a server may fail to answer before acquisitions that need it fail at once,
/// by default (see [`Config::outage_grace`]).
pub const DEFAULT_OUTAGE_GRACE: Duration = Duration::from_secs(1);

/// How long a wait of a task that holds locks goes, by default, before it looks for a
/// deadlock (see [`Config::deadlock_detection`]): PostgreSQL's `deadlock_timeout`.
pub const DEFAULT_DEADLOCK_DELAY: Duration = Duration::from_secs(1);

/// How long a foreign window leaves a contended key free, by default (see
/// [`Config::foreign_window`]).
pub const DEFAULT_FOREIGN_WINDOW: Duration = Duration::from_millis(100);

/// How many times a process passes a lock between its own tasks, by default, before the
/// next process gets it (see [`Config::local_passes`]).
pub const DEFAULT_LOCAL_PASSES: u32 = 16;

/// How long a process passes a lock between its own tasks, by default, before the next
/// process gets it (see [`Config::local_pass_time`]).
pub const DEFAULT_LOCAL_PASS_TIME: Duration = Duration::from_millis(25);

/// Makes the application's cluster client builder, once for commands and once for the
/// wake-up subscriptions (a builder cannot be cloned).
#[cfg(feature = "cluster")]
pub(crate) type ClusterBuilderFn = Arc<dyn Fn() -> ClusterClientBuilder + Send + Sync>;

/// How far a process passes a lock between its own tasks before other processes get it:
/// at most `passes` passes and `time` since the process took the lock in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PassBound {
    pub(crate) passes: u32,
    pub(crate) time: Duration,
}

/// Which servers hold the locks.
#[derive(Clone)]
pub(crate) enum DeploymentKind {
    /// One server (or a primary).
    Single(String),
    /// Independent masters; a lock needs a majority of them (Redlock).
    #[cfg(feature = "redlock")]
    Redlock(Vec<String>),
    /// A Redis Cluster, reached through these seed nodes.
    #[cfg(feature = "cluster")]
    Cluster(Vec<String>),
    /// A primary found through Redis Sentinel, followed across failovers.
    #[cfg(feature = "sentinel")]
    Sentinel {
        /// The name the sentinels monitor the primary under.
        master: String,
        /// The sentinels' URLs; `urls[..]` of the config.
        sentinels: Vec<String>,
    },
    /// One server, through the application's own client (its settings apply).
    Client {
        client: Box<redis::Client>,
        /// The server's address, for messages.
        described: Vec<String>,
    },
    /// A Redis Cluster, through the application's own builder.
    #[cfg(feature = "cluster")]
    ClusterBuilder {
        builder: ClusterBuilderFn,
        described: Vec<String>,
    },
}

impl std::fmt::Debug for DeploymentKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeploymentKind::Single(url) => f.debug_tuple("Single").field(url).finish(),
            #[cfg(feature = "redlock")]
            DeploymentKind::Redlock(urls) => f.debug_tuple("Redlock").field(urls).finish(),
            #[cfg(feature = "cluster")]
            DeploymentKind::Cluster(urls) => f.debug_tuple("Cluster").field(urls).finish(),
            #[cfg(feature = "sentinel")]
            DeploymentKind::Sentinel { master, sentinels } => f
                .debug_struct("Sentinel")
                .field("master", master)
                .field("sentinels", sentinels)
                .finish(),
            DeploymentKind::Client { client, .. } => f.debug_tuple("Client").field(client).finish(),
            #[cfg(feature = "cluster")]
            DeploymentKind::ClusterBuilder { described, .. } => {
                f.debug_tuple("ClusterBuilder").field(described).finish()
            }
        }
    }
}

/// The URL `REDIS_URL` names (blank counts as unset), else [`DEFAULT_REDIS_URL`].
pub(crate) fn env_url() -> String {
    std::env::var(REDIS_URL_ENV)
        .ok()
        .filter(|url| !url.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_REDIS_URL.to_owned())
}

impl Config {
    /// One Redis server (or a primary), by URL: `redis://[user:pass@]host:port[/db]`.
    pub fn single(url: impl Into<String>) -> Self {
        Config {
            topology: DeploymentKind::Single(url.into()),
            key_prefix: String::new(),
            pool_size: 1,
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            #[cfg(feature = "redlock")]
            node_timeout: Duration::from_millis(100),
            tls: TlsFiles::default(),
            #[cfg(feature = "sentinel")]
            primary: primary_settings::PrimarySettings::default(),
            local_passes: DEFAULT_LOCAL_PASSES,
            local_pass_time: DEFAULT_LOCAL_PASS_TIME,
            foreign_window: DEFAULT_FOREIGN_WINDOW,
            metrics_key_label: None,
            replicas: None,
            outage_grace: DEFAULT_OUTAGE_GRACE,
            lock_defaults: crate::options::LockDefaults::default(),
            lock_order: crate::lock_order::LockOrderCheck::Off,
            long: crate::telemetry::LongThresholds::default(),
            service_name: None,
            deadlock_delay: DEFAULT_DEADLOCK_DELAY,
        }
    }

    /// The server named by `REDIS_URL`, or [`DEFAULT_REDIS_URL`].
    pub fn from_env() -> Self {
        Config::single(env_url())
    }

    /// One Redis server for a test: [`single`](Self::single) with a
    /// [`key_prefix`](Self::key_prefix) of its own (`test-` and a fresh uuid), so that tests
    /// running in parallel on one server never share a key, in the spirit of
    /// `#[sqlx::test]`'s database per test. Each call gives a new prefix; the other options
    /// can be set on it as on any configuration. [`LockClient::for_tests`](crate::LockClient::for_tests)
    /// builds a client from it on `REDIS_URL`. Tests are where
    /// [`lock_order_check`](Self::lock_order_check) belongs: it reports nested locks taken
    /// in an order that could deadlock, before they do (it stays off unless set).
    ///
    /// ```no_run
    /// use lock_runtime::{Config, LockClient};
    ///
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// let locks = LockClient::new(Config::for_tests("redis://127.0.0.1:6379"))?;
    /// // In Redis: `test-<uuid>:gift:7`, a key no other test's client takes.
    /// let guard = locks.lock("gift:7").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn for_tests(url: impl Into<String>) -> Self {
        Config::single(url).key_prefix(format!("test-{}:", uuid::Uuid::new_v4().simple()))
    }

    /// Independent Redis masters (Redlock): a lock is held when a majority (N/2 + 1) of
    /// them granted it within its validity.
    ///
    /// Each master must be restarted with a delay of at least the longest ttl in use after a
    /// crash (or run with `appendfsync always`): a master that comes back empty at once can
    /// hand a second owner the majority while the first still holds the lock. A master whose
    /// clock jumps forward (expiring the holder's key early) does the same; fencing
    /// (`fencing = true`, strictly increasing tokens in this mode too) is the remedy for both.
    ///
    /// ```
    /// use lock_runtime::Config;
    ///
    /// let config = Config::redlock([
    ///     "redis://10.0.0.1:6379",
    ///     "redis://10.0.0.2:6379",
    ///     "redis://10.0.0.3:6379",
    /// ]);
    /// # let _ = config;
    /// ```
    #[cfg(feature = "redlock")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redlock")))]
    pub fn redlock<I, S>(urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut config = Config::single(String::new());
        config.topology = DeploymentKind::Redlock(urls.into_iter().map(Into::into).collect());
        config
    }

    /// A Redis Cluster, reached through any of these seed nodes. Every key a lock uses
    /// (lock, fence counter, queue) sits in the lock key's slot, wake-ups use sharded
    /// pub/sub, and MOVED/ASK during resharding are followed by the client.
    ///
    /// ```
    /// use lock_runtime::Config;
    ///
    /// let config = Config::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]);
    /// # let _ = config;
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn cluster<I, S>(seeds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut config = Config::single(String::new());
        config.topology = DeploymentKind::Cluster(seeds.into_iter().map(Into::into).collect());
        config
    }

    /// A primary found through Redis Sentinel: `master` is the name the sentinels monitor
    /// it under, `sentinels` their URLs (`redis://host:26379`, any number; each is tried in
    /// turn).
    ///
    /// Behavior:
    /// - Building the client asks the sentinels for the primary, in order, then logs in to
    ///   the primary once; this blocks for at most `connect_timeout + response_timeout` per
    ///   sentinel and for the primary. An unknown master name, no reachable sentinel, or a
    ///   primary that refuses the credentials is a
    ///   [`LockError::Config`](crate::LockError::Config) naming them (a primary that does
    ///   not answer is left to the lazy connections).
    /// - The client then subscribes to one sentinel's failover events (`+promoted-slave`,
    ///   `+failover-state-reconf-slaves`, `+switch-master`; the next sentinel when that one
    ///   goes away) and moves its connections to the primary the sentinels name after each.
    ///   The old primary keeps taking writes until the sentinels demote it, so following
    ///   the events, not waiting for errors, is what keeps locks off it.
    /// - A request refused by the server, dropped, timed out, or answered `READONLY` (a
    ///   demoted primary) also makes it ask; a refused or `READONLY` request is sent again
    ///   on the new primary.
    /// - The wake-up subscription follows the same events to the new primary (the old
    ///   connection is closed and every channel with waiters is subscribed there), so a
    ///   release on the new primary wakes this process's waiters. A primary found only
    ///   through a failed request (no event seen) moves the commands, not the subscription.
    ///
    /// There is no URL form (`redis+sentinel://` does not parse: redis-rs has no parser for
    /// it), so `REDIS_URL` cannot name a Sentinel deployment; use this with [`crate::init`].
    ///
    /// Locks taken before a failover can be lost in it: replication is asynchronous, so a
    /// lock written to the old primary just before it failed may not be on the new one (see
    /// RELIABILITY.md, "Sentinel failover"). Use fencing where that matters.
    ///
    /// The sentinel URLs carry the sentinels' own settings (`rediss://`, user, password),
    /// and [`tls_ca_cert`](Self::tls_ca_cert) / [`tls_client_cert`](Self::tls_client_cert)
    /// apply to them. The primary (commands and wake-ups) is reached with the first
    /// sentinel URL's settings and database, unless its own are given:
    /// [`primary_password`](Self::primary_password) or [`primary_auth`](Self::primary_auth)
    /// for its credentials, [`primary_tls`](Self::primary_tls),
    /// [`primary_tls_ca_cert`](Self::primary_tls_ca_cert),
    /// [`primary_tls_client_cert`](Self::primary_tls_client_cert) or
    /// [`primary_without_tls`](Self::primary_without_tls) for its TLS. A primary that
    /// refuses the credentials when the client is built is a
    /// [`LockError::Config`](crate::LockError::Config) naming the master.
    ///
    /// ```
    /// use lock_runtime::Config;
    ///
    /// let config = Config::sentinel(
    ///     "mymaster",
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    /// );
    /// # let _ = config;
    ///
    /// // Sentinels and data nodes with passwords of their own.
    /// let config = Config::sentinel("mymaster", ["redis://:sentinel-secret@10.0.0.1:26379"])
    ///     .primary_password("node-secret");
    /// # let _ = config;
    /// ```
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn sentinel<I, S>(master: impl Into<String>, sentinels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut config = Config::single(String::new());
        config.topology = DeploymentKind::Sentinel {
            master: master.into(),
            sentinels: sentinels.into_iter().map(Into::into).collect(),
        };
        config
    }

    /// One server through the application's own [`redis::Client`], so its connection
    /// settings apply (TLS certificates, credentials, database, protocol, TCP settings):
    /// the lock client opens its own connections from it. `connect_timeout`,
    /// `response_timeout` and `pool_size` still apply to those connections.
    ///
    /// Pass it to [`crate::init`] to make it the global client's, or to
    /// [`crate::LockClient::new`] (or use [`crate::LockClient::from_client`]).
    ///
    /// ```no_run
    /// use lock_runtime::{init, Config};
    ///
    /// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// // The application's client, configured once for all its Redis traffic.
    /// let redis = redis::Client::open("redis://:secret@10.0.0.1:6379/2")?;
    /// init(Config::from_client(redis.clone()).key_prefix("shop:"))?;
    /// # Ok(()) }
    /// ```
    pub fn from_client(client: redis::Client) -> Self {
        let described = vec![client.get_connection_info().addr().to_string()];
        let mut config = Config::single(String::new());
        config.topology = DeploymentKind::Client {
            client: Box::new(client),
            described,
        };
        config
    }

    /// A Redis Cluster through the application's own cluster client settings: `builder`
    /// makes a [`redis::cluster::ClusterClientBuilder`] the way the
    /// application makes its own (seeds, credentials, TLS, timeouts). It is called three
    /// times, once each for the command connection, the wake-up subscriptions and the
    /// connection that reads the slot map and probes the masters, because a builder cannot
    /// be cloned and each sets its own: the wake-ups add RESP3 and a push handler, the
    /// probes make no retries. The lock client keeps its own short redirect retries.
    ///
    /// ```no_run
    /// use lock_runtime::{init, Config};
    /// use redis::cluster::ClusterClientBuilder;
    ///
    /// # fn demo() -> Result<(), lock_runtime::LockError> {
    /// init(Config::cluster_builder(|| {
    ///     ClusterClientBuilder::new(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
    ///         .username("locks")
    ///         .password("secret")
    /// }))?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn cluster_builder<F>(builder: F) -> Self
    where
        F: Fn() -> ClusterClientBuilder + Send + Sync + 'static,
    {
        let mut config = Config::single(String::new());
        config.topology = DeploymentKind::ClusterBuilder {
            builder: Arc::new(builder),
            described: vec!["the application's Redis Cluster".to_owned()],
        };
        config
    }

    /// The server URLs (one, or the Redlock masters, the cluster seeds, the sentinels; for
    /// an application's own client, the address it connects to).
    pub fn urls(&self) -> &[String] {
        match &self.topology {
            DeploymentKind::Single(url) => std::slice::from_ref(url),
            #[cfg(feature = "redlock")]
            DeploymentKind::Redlock(urls) => urls,
            #[cfg(feature = "cluster")]
            DeploymentKind::Cluster(urls) => urls,
            #[cfg(feature = "sentinel")]
            DeploymentKind::Sentinel { sentinels, .. } => sentinels,
            DeploymentKind::Client { described, .. } => described,
            #[cfg(feature = "cluster")]
            DeploymentKind::ClusterBuilder { described, .. } => described,
        }
    }
}

impl Config {
    /// For `rediss://` URLs: trust the certificate authority in `pem` (PEM bytes, one or
    /// more certificates) for the server's certificate, instead of the system's trust
    /// store. Needs the feature `tls-rustls` or `tls-native-tls`. Bytes that hold no
    /// certificate (a text file, a key) are a [`LockError::Config`](crate::LockError::Config)
    /// when the client is built.
    ///
    /// ```no_run
    /// use lock_runtime::Config;
    ///
    /// # fn demo() -> std::io::Result<()> {
    /// let config = Config::single("rediss://redis.internal:6380")
    ///     .tls_ca_cert(std::fs::read("/etc/redis/ca.crt")?);
    /// # let _ = config; Ok(()) }
    /// ```
    pub fn tls_ca_cert(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.ca_cert = Some(pem.into());
        self
    }

    /// For `rediss://` URLs: present this client certificate (PEM chain) and private key
    /// (PEM, PKCS#8 or RSA/SEC1) to the server, for servers that require mutual TLS
    /// (`tls-auth-clients yes`). Needs the feature `tls-rustls` or `tls-native-tls` (which
    /// reads PKCS#8 keys only). The certificate must be X.509 v3 (`openssl x509 -req` makes
    /// v1 unless given `-extfile`): any other version, or a certificate or key argument
    /// that holds none, is a [`LockError::Config`](crate::LockError::Config) when the
    /// client is built, with either feature.
    ///
    /// ```no_run
    /// use lock_runtime::Config;
    ///
    /// # fn demo() -> std::io::Result<()> {
    /// let config = Config::single("rediss://redis.internal:6380")
    ///     .tls_ca_cert(std::fs::read("/etc/redis/ca.crt")?)
    ///     .tls_client_cert(
    ///         std::fs::read("/etc/redis/client.crt")?,
    ///         std::fs::read("/etc/redis/client.key")?,
    ///     );
    /// # let _ = config; Ok(()) }
    /// ```
    pub fn tls_client_cert(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client_cert = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// In Redlock mode, how long one master may take to answer an acquire or a renewal
    /// before it counts as failed (default 100 ms). Keep it small against your ttls: grants
    /// that arrive after the lease's validity (`ttl − elapsed − drift`) acquire nothing. It
    /// is also what a silent master (one that accepts connections and answers nothing) costs
    /// a round or a release, and when a round without a majority of answers fails with
    /// `NoQuorum`, whatever the response timeout.
    #[cfg(feature = "redlock")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redlock")))]
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Puts `prefix` in front of every lock key in Redis (none by default).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Adds a `key` label to every metric (feature `metrics`, see [`crate::telemetry`]):
    /// `label` derives it from the lock's Redis key (with [`key_prefix`](Config::key_prefix)).
    /// Without it no metric names a key: keys hold user data and are unbounded, so
    /// `label` must map them onto a few values, such as the part before the first `:`.
    /// Without the `metrics` feature this has no effect.
    ///
    /// ```
    /// use lock_runtime::Config;
    ///
    /// // "stock:42" and "stock:43" are both counted under key="stock".
    /// let config = Config::single("redis://127.0.0.1:6379")
    ///     .metrics_key_label(|key| key.split(':').next().unwrap_or_default().to_owned());
    /// # let _ = config;
    /// ```
    pub fn metrics_key_label(mut self, label: crate::telemetry::KeyLabel) -> Self {
        self.metrics_key_label = Some(label);
        self
    }

    /// How many multiplexed connections to spread commands over (at least 1; default 1).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// How long one connection attempt may take before it fails (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one command may wait for its reply before it fails (default 2 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How many times in a row a lock passes between tasks of this process without Redis
    /// (default [`DEFAULT_LOCAL_PASSES`]). The tasks of a process that want the same key
    /// queue locally, and a release hands the lock straight to the next of them: no round
    /// trip, the same token and lease. After this many passes (or
    /// [`local_pass_time`](Config::local_pass_time)), the release goes through Redis: the
    /// next process in the key's queue gets the lock, and this process queues again behind
    /// it in the same round trip (or keeps the lock when no other process waits). Zero
    /// turns local passing off: every release goes through Redis.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_runtime::Config;
    ///
    /// // Let other processes in after at most 4 local passes or 10 ms.
    /// let config = Config::single("redis://127.0.0.1:6379")
    ///     .local_passes(4)
    ///     .local_pass_time(Duration::from_millis(10));
    /// # let _ = config;
    /// ```
    pub fn local_passes(mut self, passes: u32) -> Self {
        self.local_passes = passes;
        self
    }

    /// How long a process keeps passing a lock between its own tasks, from when it took the
    /// lock in Redis, before the next process gets it (default
    /// [`DEFAULT_LOCAL_PASS_TIME`]; see [`local_passes`](Config::local_passes)).
    pub fn local_pass_time(mut self, time: Duration) -> Self {
        self.local_pass_time = time;
        self
    }

    /// How long a contended key is left free, now and then, for clients that do not queue
    /// (default [`DEFAULT_FOREIGN_WINDOW`]; zero: never).
    ///
    /// redis-py's `Lock`, redsync and node-redlock take a lock only when a `SET NX` finds
    /// the key free; our queue hands a contended key from holder to waiter and never leaves
    /// it free, so without this they would wait until their timeout. Once a key has been
    /// contended for 1 s, the release that ends a hold leaves it free this long (none of our
    /// waiters takes it meanwhile); a window that no foreign client used makes the next
    /// come four times later (up to 16 s). A used one brings the next after as long as the
    /// foreign side held the key (from when our waiters first saw a foreign holder until
    /// one of ours took the key back), at least one tenure of ours
    /// ([`local_pass_time`](Config::local_pass_time)) and at most 1 s: so each side holds
    /// the key about as long, also against foreign clients that release and ask again at
    /// once (a used window also lasts at least one tenure of ours from the first foreign
    /// holder seen). A foreign client that holds a key before any window exists is noticed when the
    /// key changes hands between two holders that do not note themselves while our
    /// waiters wait (ours pass it on through the queue): that opens a window in use. The
    /// schedule is kept per key in Redis, shared by all processes, and ends when a
    /// release finds nobody waiting. While a window is open, the process whose turn it is
    /// asks again every millisecond (one asker per process and key: its tasks wait locally;
    /// a foreign release publishes nothing, and a foreign client in a loop takes the key
    /// back within a fraction of a millisecond), our other processes every 20 ms. The
    /// window should span the foreign clients' retry period (redis-py's `Lock` retries
    /// every 100 ms, node-redlock every 200 ms, redsync every 50 to 250 ms), or they may
    /// miss it.
    ///
    /// Measured (`BENCH_ONLY=foreign bench/run`, section 12 of BENCHMARKS.md): 8 of our
    /// tasks and 8 redis-py threads or node-redlock tasks on one key, 5 ms holds, both
    /// sides asking again at once: ours 54 % of the acquisitions beside redis-py and 54 %
    /// beside node-redlock (medians), our p99 wait 363 and 337 ms.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_runtime::Config;
    ///
    /// // Keys shared with redis-py's Lock, which asks every 100 ms: a window that spans it.
    /// let config = Config::single("redis://127.0.0.1:6379")
    ///     .foreign_window(Duration::from_millis(120));
    /// // No foreign client on these keys: never leave a contended key free.
    /// let ours_only = Config::single("redis://127.0.0.1:6379").foreign_window(Duration::ZERO);
    /// # let _ = (config, ours_only);
    /// ```
    pub fn foreign_window(mut self, window: Duration) -> Self {
        self.foreign_window = window;
        self
    }

    /// How long Redis may stay unreachable before acquisitions stop waiting for it
    /// (default [`DEFAULT_OUTAGE_GRACE`], 1 s).
    ///
    /// Behavior:
    /// - A server (a Redlock master, a cluster as a whole) whose requests have all failed
    ///   to reach it (refused, reset, timed out) for longer than this, and that answers
    ///   no `PING` on a fresh connection for another 500 ms, is declared down, with one
    ///   WARN naming it. From then on every acquisition that needs it fails at
    ///   once with [`LockError::Backend`](crate::LockError::Backend), whose cause says for
    ///   how long it has been unreachable, and the waiters parked on it fail too, instead
    ///   of holding their callers for the whole `wait`. In Redlock mode a call fails fast
    ///   only when too many masters are down for a majority (`NoQuorum`).
    /// - The client probes a down server every 200 ms (and the watchdog's renewals still
    ///   go to it): its first answer brings it back, with one INFO.
    /// - Shorter failures (a restart, a failover behind Sentinel) are ridden out: the
    ///   acquire loop tries again within each caller's `wait`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_runtime::Config;
    ///
    /// // Ride out restarts of up to 3 s before failing callers fast.
    /// let config = Config::single("redis://127.0.0.1:6379").outage_grace(Duration::from_secs(3));
    /// # let _ = config;
    /// ```
    pub fn outage_grace(mut self, grace: Duration) -> Self {
        self.outage_grace = grace;
        self
    }

    /// The lease of every lock taken through this client that sets no `ttl` (attribute or
    /// builder; default 30 s): ShedLock's `defaultLockAtMostFor`. Checked as
    /// [`Lock::ttl`](crate::Lock::ttl) is, when a lock is taken: under 1 ms or over
    /// [`MAX_TTL`](crate::MAX_TTL) fails the call with `LockError::Config`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let config = lock_runtime::Config::single("redis://127.0.0.1:6379")
    ///     .default_ttl(Duration::from_secs(5))
    ///     .default_wait(Duration::ZERO);
    /// # let _ = config;
    /// ```
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.lock_defaults.ttl = Some(ttl);
        self
    }

    /// How long every lock taken through this client that sets no `wait` waits for a held
    /// key (default 10 s; zero tries once). An explicit `wait` wins.
    pub fn default_wait(mut self, wait: Duration) -> Self {
        self.lock_defaults.wait = Some(wait);
        self
    }
}
