//! Where the locks live and how to reach them: the Redis URL (one server, a cluster's
//! seeds, or Sentinel's sentinels), the TLS files and the key prefix, the way the
//! applications' `Config` takes them; and lockctl's own connections (for SCAN), made the
//! same way.

use std::path::{Path, PathBuf};

use lock_runtime::{Config, DEFAULT_REDIS_URL, LockError, REDIS_URL_ENV};

/// The options that say where the locks are: global, before or after the command.
#[derive(clap::Args, Debug)]
pub(crate) struct Target {
    /// The Redis server (or the primary) that holds the locks; with `--cluster` a
    /// cluster's seeds, with `--sentinel` the sentinels (comma-separated). `rediss://`
    /// for TLS. For Redlock, run lockctl against each master in turn. An empty
    /// `REDIS_URL` counts as unset.
    #[arg(long, global = true, value_name = "URL", env = REDIS_URL_ENV, default_value = DEFAULT_REDIS_URL)]
    url: String,
    /// The URLs name the seeds of a Redis Cluster (`Config::cluster`): keys are read
    /// where their slots live, and `list` scans every master.
    #[arg(long, global = true, conflicts_with = "sentinel")]
    pub(crate) cluster: bool,
    /// Redis Sentinel (`Config::sentinel`): the name of the master the sentinels at the
    /// URLs watch; the primary is reached with the first URL's credentials, scheme and
    /// TLS files.
    #[arg(long, global = true, value_name = "MASTER", env = "LOCKCTL_SENTINEL")]
    sentinel: Option<String>,
    /// A PEM file of the certificate authority that signed the server's certificate, for
    /// `rediss://` URLs (`Config::tls_ca_cert`); else the system's trust store.
    #[arg(long, global = true, value_name = "FILE", env = "LOCKCTL_TLS_CA_CERT")]
    tls_ca_cert: Option<PathBuf>,
    /// A PEM file of the client certificate to present, for servers that require mutual
    /// TLS (`Config::tls_client_cert`); with `--tls-client-key`.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "LOCKCTL_TLS_CLIENT_CERT",
        requires = "tls_client_key"
    )]
    tls_client_cert: Option<PathBuf>,
    /// The PEM file of the client certificate's private key.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "LOCKCTL_TLS_CLIENT_KEY",
        requires = "tls_client_cert"
    )]
    tls_client_key: Option<PathBuf>,
    /// The applications' key prefix (their `Config::key_prefix`), if they set one: keys
    /// are named and listed without it.
    #[arg(
        long,
        global = true,
        value_name = "P",
        default_value = "",
        hide_default_value = true
    )]
    pub(crate) prefix: String,
}

impl Target {
    /// `--url`, else `REDIS_URL`, else the default; blank counts as unset, as for
    /// `Config::from_env`.
    pub(crate) fn url(&self) -> &str {
        match self.url.trim() {
            "" => DEFAULT_REDIS_URL,
            url => url,
        }
    }

    /// The URLs, comma-separated.
    fn urls(&self) -> impl Iterator<Item = &str> {
        self.url().split(',').map(str::trim)
    }

    /// The `Config` the applications would write for these options.
    pub(crate) fn config(&self) -> Result<Config, LockError> {
        let mut config = if self.cluster {
            Config::cluster(self.urls())
        } else if let Some(master) = &self.sentinel {
            Config::sentinel(master.clone(), self.urls())
        } else {
            Config::single(self.url())
        };
        let tls = self.tls()?;
        if let Some(ca_cert) = tls.root_cert {
            config = config.tls_ca_cert(ca_cert);
        }
        if let Some(client) = tls.client_tls {
            config = config.tls_client_cert(client.client_cert, client.client_key);
        }
        Ok(config.key_prefix(self.prefix.clone()))
    }

    /// The TLS files, read.
    fn tls(&self) -> Result<redis::TlsCertificates, LockError> {
        let root_cert = self
            .tls_ca_cert
            .as_deref()
            .map(|path| read("--tls-ca-cert", path))
            .transpose()?;
        let client_tls = match (&self.tls_client_cert, &self.tls_client_key) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read("--tls-client-cert", cert)?,
                client_key: read("--tls-client-key", key)?,
            }),
            _ => None,
        };
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert,
        })
    }

    /// The servers whose keys `list` scans: the one server, every master of a cluster,
    /// or the primary the sentinels name.
    pub(crate) async fn servers(&self) -> Result<Vec<String>, LockError> {
        if self.cluster {
            self.masters().await
        } else if let Some(master) = &self.sentinel {
            Ok(vec![self.primary(master).await?])
        } else {
            Ok(vec![self.url().to_owned()])
        }
    }

    /// A connection of lockctl's own to the server at `url` (for SCAN, CLUSTER NODES and
    /// the sentinels), with the TLS files.
    pub(crate) async fn connect(
        &self,
        url: &str,
    ) -> Result<redis::aio::MultiplexedConnection, LockError> {
        let tls = self.tls()?;
        let client = if tls.root_cert.is_some() || tls.client_tls.is_some() {
            redis::Client::build_with_tls(url, tls)
        } else {
            redis::Client::open(url)
        };
        let client = client.map_err(|err| LockError::Config {
            reason: format!("the URL `{url}`: {err}"),
        })?;
        client
            .get_multiplexed_async_connection()
            .await
            .map_err(backend)
    }

    /// The URLs of a cluster's masters, from `CLUSTER NODES` on the first seed that
    /// answers (each with the seed's scheme and credentials).
    async fn masters(&self) -> Result<Vec<String>, LockError> {
        let mut last = None;
        for seed in self.urls() {
            let mut ask = redis::cmd("CLUSTER");
            ask.arg("NODES");
            match self.ask::<String>(seed, &ask).await {
                Ok(nodes) => return Ok(master_urls(seed, &nodes)),
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| no_url("--cluster")))
    }

    /// The URL of the primary the sentinels name for `master`, from the first sentinel
    /// that answers (with its scheme and credentials, as `Config::sentinel` reaches it).
    async fn primary(&self, master: &str) -> Result<String, LockError> {
        let mut last = None;
        for sentinel in self.urls() {
            let mut ask = redis::cmd("SENTINEL");
            ask.arg("GET-MASTER-ADDR-BY-NAME").arg(master);
            match self.ask::<Option<(String, u16)>>(sentinel, &ask).await {
                Ok(Some((host, port))) => {
                    return Ok(with_address(sentinel, &format!("{host}:{port}")));
                }
                Ok(None) => {
                    last = Some(LockError::Config {
                        reason: format!("the sentinel at `{sentinel}` knows no master `{master}`"),
                    })
                }
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| no_url("--sentinel")))
    }

    /// `command`'s reply from the server at `url`.
    async fn ask<T: redis::FromRedisValue>(
        &self,
        url: &str,
        command: &redis::Cmd,
    ) -> Result<T, LockError> {
        let mut connection = self.connect(url).await?;
        command.query_async(&mut connection).await.map_err(backend)
    }
}

/// The bytes of the file at `path`, given as `flag`.
fn read(flag: &str, path: &Path) -> Result<Vec<u8>, LockError> {
    std::fs::read(path).map_err(|err| LockError::Config {
        reason: format!("{flag} {}: {err}", path.display()),
    })
}

/// The error for `flag` without any URL.
fn no_url(flag: &str) -> LockError {
    LockError::Config {
        reason: format!("{flag} needs at least one URL"),
    }
}

/// A Redis failure, named for the operator.
pub(crate) fn backend(err: redis::RedisError) -> LockError {
    LockError::Backend {
        key: String::new(),
        source: std::sync::Arc::new(err),
    }
}

/// The masters `CLUSTER NODES` lists (not failed, with an address), as URLs like `seed`.
pub(crate) fn master_urls(seed: &str, nodes: &str) -> Vec<String> {
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            let listed = flags.split(',').any(|flag| flag == "master")
                && !flags.contains("fail")
                && !flags.contains("noaddr");
            let address = fields.get(1)?.split(['@', ',']).next()?;
            (listed && !address.starts_with(':')).then(|| with_address(seed, address))
        })
        .collect()
}

/// The URL of the server at `address` (`host:port`), with `seed`'s scheme and
/// credentials.
fn with_address(seed: &str, address: &str) -> String {
    let (scheme, rest) = seed.split_once("://").unwrap_or(("redis", seed));
    let credentials = rest
        .split_once('/')
        .map_or(rest, |(authority, _)| authority)
        .rsplit_once('@')
        .map_or(String::new(), |(credentials, _)| format!("{credentials}@"));
    format!("{scheme}://{credentials}{address}")
}
