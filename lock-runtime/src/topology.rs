//! The deployment a client is built for (one server, Sentinel, a cluster, Redlock's
//! masters): the one place that matches on it, builds its connections, wake-ups and
//! probes, and checks its settings before any lock is taken.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
#[cfg(feature = "cluster")]
use redis::cluster::ClusterClientBuilder;

use crate::config::DeploymentKind;
#[cfg(feature = "sentinel")]
use crate::connection::Sentinel;
#[cfg(feature = "cluster")]
use crate::connection::cluster_nodes::ClusterNodes;
#[cfg(feature = "cluster")]
use crate::connection::lazy_cluster::LazyCluster;
use crate::connection::outage::{Health, Probe, Role};
#[cfg(feature = "sentinel")]
use crate::connection::sentinel::{PrimaryTemplate, check_primary_auth};
use crate::connection::{Connection, SingleServer};
use crate::wakeups::{Timeouts, Wakeups};
use crate::{config::Config, error::LockError};
use deployment::Deployment;
#[cfg(feature = "redlock")]
use redlock::Redlock;

pub(crate) mod deployment;
pub(crate) mod one_node;
pub(crate) mod reach;
#[cfg(feature = "redlock")]
pub(crate) mod redlock;

/// The connections of one topology: the command connections, the wake-ups, and in Redlock
/// mode its settings.
pub(crate) struct BuiltTopology {
    pub(crate) connections: Vec<Connection>,
    pub(crate) wakeups: Wakeups,
    /// How the client's steps reach Redis.
    pub(crate) deployment: Deployment,
}

/// What building the connections of any topology needs, checked once.
pub(crate) struct Setup<'a> {
    pub(crate) config: &'a Config,
    pub(crate) urls: Vec<String>,
    pub(crate) manager: ConnectionManagerConfig,
    /// How long the startup checks (eviction, Sentinel lookup) may take per server: one
    /// connect and one reply.
    pub(crate) limit: Duration,
    pub(crate) timeouts: Timeouts,
    /// Wakes the client's parked waiters (a server declared down, the client shut down).
    pub(crate) interrupt: Arc<tokio::sync::Notify>,
    /// Whether the client is created on a multi-thread runtime, whose worker the start-up
    /// checks (the Sentinel lookup, WAITAOF's) hand its other tasks away from while they block.
    pub(crate) caller: bool,
    /// The name the command connections give themselves (the client's identity).
    pub(crate) name: Arc<str>,
}

impl<'a> Setup<'a> {
    /// Checks what every topology needs: at least one URL. `caller` is the runtime the
    /// client is created on, if any (the start-up checks block it); `name` is what its
    /// connections to a server call themselves.
    pub(crate) fn new(config: &'a Config, caller: bool, name: Arc<str>) -> Result<Self, LockError> {
        #[cfg(feature = "sentinel")]
        if config.primary.is_set() && !matches!(config.topology, DeploymentKind::Sentinel { .. }) {
            return Err(LockError::config(format!(
                "Config::primary_password, primary_auth and primary_tls* set the primary \
                 that Sentinel names, but {} is not a Config::sentinel set-up: put the \
                 credentials in the URL (redis://user:password@host) and use \
                 Config::tls_ca_cert / tls_client_cert",
                config.urls().join(", ")
            )));
        }
        if let Some(replicas) = &config.replicas {
            #[cfg(feature = "redlock")]
            let quorum = matches!(config.topology, DeploymentKind::Redlock(_));
            #[cfg(not(feature = "redlock"))]
            let quorum = false;
            replicas.check(config.response_timeout, quorum)?;
        }
        let urls = config.urls().to_vec();
        if urls.is_empty() {
            return Err(LockError::config(
                "no Redis URL given (Redlock needs its masters, a cluster its seeds)",
            ));
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
            caller,
            name,
        })
    }

    /// What the requests to `server` found lately, for the outage rule; `probe` asks it
    /// whether it is back while it is down.
    pub(crate) fn health(&self, server: String, probe: Probe) -> Health {
        Health::new(
            server,
            Role::Server,
            self.config.outage_grace,
            self.interrupt.clone(),
            Some(probe),
        )
    }

    /// A client for `url`, with the configured TLS certificates if any.
    pub(crate) fn open(&self, url: &str) -> Result<redis::Client, LockError> {
        // The URL alone first: a URL the client rejects is `InvalidUrl`; certificates that
        // cannot be used with it are a configuration error of their own.
        let client = redis::Client::open(url)
            .map_err(|err| LockError::invalid_url(url, with_hint(url, err)))?;
        let tls = &self.config.tls;
        if !tls.is_set() {
            return Ok(client);
        }
        #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
        crate::tls::check(tls, crate::tls::TlsSettings::Config, url)?;
        let without_tls = "TLS certificates were configured, but lock-runtime was built without \
                           TLS: turn on its feature `tls-rustls` or `tls-native-tls`";
        crate::connection::tls_client::with_certificates(url, tls, without_tls).map_err(|err| {
            LockError::config(format!(
                "the TLS certificates given for `{url}` cannot be used: {err}"
            ))
        })
    }

    pub(crate) fn setup_failed(&self, err: redis::RedisError) -> LockError {
        LockError::invalid_url(self.urls.join(", "), err)
    }

    /// The deployment's connections and wake-ups: the one `match` on the deployment.
    pub(crate) fn build(&self) -> Result<BuiltTopology, LockError> {
        match &self.config.topology {
            DeploymentKind::Single(_) | DeploymentKind::Client { .. } => self.single_server(),
            #[cfg(feature = "sentinel")]
            DeploymentKind::Sentinel { .. } => self.single_server(),
            #[cfg(feature = "redlock")]
            DeploymentKind::Redlock(urls) => self.redlock(urls),
            #[cfg(feature = "cluster")]
            DeploymentKind::Cluster(_) | DeploymentKind::ClusterBuilder { .. } => self.cluster(),
        }
    }

    /// One server: by URL, the application's client, or the primary Sentinel names (then
    /// followed across failovers, wake-ups included).
    fn single_server(&self) -> Result<BuiltTopology, LockError> {
        let (client, sentinel) = match &self.config.topology {
            DeploymentKind::Client { client, .. } => ((**client).clone(), None),
            #[cfg(feature = "sentinel")]
            DeploymentKind::Sentinel { master, sentinels } => {
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
                    .map(|server| server.watched(health.clone()).named(self.name.clone()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| self.setup_failed(err))?;
        warn_if_evicting(&client, self.limit);
        if let Some(replicas) = &self.config.replicas {
            blocking(self.caller, || replicas.check_server(&client, self.limit))?;
        }
        let wakeups = Wakeups::single(client, self.manager.clone(), self.timeouts)
            .map_err(|err| self.setup_failed(err))?;
        #[cfg(feature = "sentinel")]
        if let Some(sentinel) = &sentinel {
            let follower = wakeups.follower();
            let wakeups = Arc::new(move |primary: &redis::Client| follower.move_to(primary));
            SingleServer::follow_primary(&pool, sentinel, wakeups);
        }
        Ok(BuiltTopology {
            connections: pool.into_iter().map(Connection::Single).collect(),
            wakeups,
            deployment: Deployment::OneNode,
        })
    }

    /// Finds the primary `master` through `sentinels` (a blocking lookup).
    #[cfg(feature = "sentinel")]
    pub(crate) fn sentinel(
        &self,
        master: &str,
        sentinels: &[String],
    ) -> Result<(redis::Client, Arc<Sentinel>), LockError> {
        let clients = sentinels
            .iter()
            .map(|url| self.open(url))
            .collect::<Result<Vec<_>, _>>()?;
        let Some(first) = clients.first() else {
            return Err(LockError::config(format!(
                "no sentinel URL given for the primary `{master}`"
            )));
        };
        // The primary's settings: the first sentinel's, or its own (`sentinel.rs`).
        let template = PrimaryTemplate::new(
            first.get_connection_info().clone(),
            self.config.primary.clone(),
            master,
        )?;
        let sentinel = Sentinel::new(master.to_owned(), clients, template, self.limit);
        let primary = blocking(self.caller, || sentinel.lookup_blocking()).map_err(|err| {
            LockError::config(format!(
                "cannot find the primary `{master}` through the sentinels {}: {err}",
                self.urls.join(", ")
            ))
        })?;
        blocking(self.caller, || {
            check_primary_auth(&primary, master, self.limit)
        })?;
        Ok((primary, Arc::new(sentinel)))
    }

    /// Independent masters: one connection and one wake-up subscription per master.
    #[cfg(feature = "redlock")]
    fn redlock(&self, urls: &[String]) -> Result<BuiltTopology, LockError> {
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
                SingleServer::with_sentinel(client.clone(), self.manager.clone(), None).map(
                    |server| Connection::Single(server.watched(health).named(self.name.clone())),
                )
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| self.setup_failed(err))?;
        for client in &clients {
            warn_if_evicting(client, self.limit);
        }
        // Redlock waiters subscribe on every master (one subscription per key per
        // master). The client-wide registry, on the first master, serves a read-write
        // lock's writer waiting for its readers (the last reader's release wakes it there;
        // its waiting lease bounds each look otherwise).
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
        Ok(BuiltTopology {
            connections: nodes,
            wakeups,
            deployment: Deployment::Quorum(redlock),
        })
    }

    /// A cluster: one connection for commands, one for the sharded wake-ups.
    #[cfg(feature = "cluster")]
    fn cluster(&self) -> Result<BuiltTopology, LockError> {
        // The application's builder keeps its seeds to itself: its servers are not checked
        // here, and a server that cannot answer `WAITAOF` refuses the first grant instead.
        if let Some(replicas) = &self.config.replicas
            && let DeploymentKind::Cluster(seeds) = &self.config.topology
            && let Some(seed) = seeds.first()
        {
            let seed = self.open(seed)?;
            blocking(self.caller, || replicas.check_server(&seed, self.limit))?;
        }
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
        let whole = Health::new(
            self.urls.join(", "),
            Role::Cluster,
            self.config.outage_grace,
            self.interrupt.clone(),
            Some(ping_cluster(commands.clone())),
        );
        let nodes = ClusterNodes::new(
            self.config.outage_grace,
            self.interrupt.clone(),
            probes,
            self.limit,
            whole,
        );
        Ok(BuiltTopology {
            connections: vec![Connection::Cluster(
                LazyCluster::new(commands).watched(nodes),
            )],
            wakeups,
            deployment: Deployment::OneNode,
        })
    }

    /// A cluster builder (the application's, or one from the seeds) with short
    /// redirect/TRYAGAIN retries: a lock operation is latency-bound, and the acquire loop
    /// itself tries again within `wait` (the client's default first wait is over a
    /// second, longer than a whole response timeout).
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster_builder(&self) -> Result<ClusterClientBuilder, LockError> {
        let retries = |builder: ClusterClientBuilder| {
            builder
                .retries(6)
                .min_retry_wait(5)
                .max_retry_wait(200)
                .retry_wait_formula(5, 2)
        };
        match &self.config.topology {
            // The application's builder: its own timeouts apply.
            DeploymentKind::ClusterBuilder { builder, .. } => Ok(retries(builder())),
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

/// The client's error about `url`, with the fix when there is one we know.
pub(crate) fn with_hint(url: &str, err: redis::RedisError) -> redis::RedisError {
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

/// The cluster builder with the configured TLS certificates, if any.
#[cfg(feature = "cluster")]
pub(crate) fn cluster_tls(
    builder: ClusterClientBuilder,
    tls: &crate::config::tls_files::TlsFiles,
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
    Err(LockError::config(
        "TLS certificates for a cluster need the lock-runtime feature `tls-rustls` \
         (redis-rs takes cluster certificates only through rustls)",
    ))
}

/// Whether a server of `config` may be reached over TLS: only then does redis-rs build a
/// rustls configuration, and only then is a process-wide crypto provider needed.
#[cfg(feature = "tls-rustls")]
pub(crate) fn uses_tls(config: &Config) -> bool {
    use redis::IntoConnectionInfo as _;
    let tls = |addr: &redis::ConnectionAddr| matches!(addr, redis::ConnectionAddr::TcpTls { .. });
    let topology = match &config.topology {
        DeploymentKind::Client { client, .. } => tls(client.get_connection_info().addr()),
        // The application's builder: its TLS settings cannot be seen.
        #[cfg(feature = "cluster")]
        DeploymentKind::ClusterBuilder { .. } => true,
        #[cfg(feature = "sentinel")]
        DeploymentKind::Sentinel { .. } => {
            matches!(
                config.primary.tls,
                Some(crate::config::primary_settings::PrimaryTls::On(_))
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
pub(crate) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing the race to another installer is fine: a provider is there either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Runs `work` (the Sentinel lookup, the primary's start-up checks) while the client is
/// being built. The constructor is synchronous, so the work blocks, bounded by the timeout
/// per server; on a multi-thread runtime the worker hands its other tasks away meanwhile.
pub(crate) fn blocking<T>(multi_thread: bool, work: impl FnOnce() -> T) -> T {
    // The multi-thread scheduler comes with the `sentinel` feature (a default one); without
    // it the check blocks its worker for its bound.
    #[cfg(feature = "sentinel")]
    if multi_thread {
        return tokio::task::block_in_place(work);
    }
    #[cfg(not(feature = "sentinel"))]
    let _ = multi_thread;
    work()
}

/// A probe of one server: a `PING` on a connection of its own (not the pool's, which may
/// be stuck on the dead socket), within `limit`.
pub(crate) fn ping_server(client: &redis::Client, limit: Duration) -> Probe {
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
pub(crate) fn ping_cluster(cluster: redis::cluster::ClusterClient) -> Probe {
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

/// Warns once, in the background, when the server may evict lock keys: a `maxmemory` limit
/// with an `allkeys-*` or `volatile-*` policy (every lock key has an expiry, so `volatile-*`
/// can take it too). An evicted lock is a lock lost. Servers that refuse `CONFIG`
/// (managed services, ACLs) or do not answer within `limit` are not checked.
///
/// The check opens a connection of its own and drops it: the shared connections stay lazy,
/// so none of them is opened early and left stale by a server restart before first use.
pub(crate) fn warn_if_evicting(client: &redis::Client, limit: Duration) {
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
