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
    /// Sentinel: the data nodes' password, when it is not the sentinels'
    /// (`Config::primary_password`).
    #[arg(
        long,
        global = true,
        value_name = "PASSWORD",
        env = "LOCKCTL_PRIMARY_PASSWORD",
        hide_env_values = true,
        requires = "sentinel"
    )]
    primary_password: Option<String>,
    /// Sentinel: reach the primary over TLS, trusting the certificate authority in this
    /// PEM file (`Config::primary_tls_ca_cert`), whatever the sentinels' scheme.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "LOCKCTL_PRIMARY_TLS_CA_CERT",
        requires = "sentinel"
    )]
    primary_tls_ca_cert: Option<PathBuf>,
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
            self.primary_settings(Config::sentinel(master.clone(), self.urls()))?
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

    /// `config` with the Sentinel primary's own settings, where given.
    fn primary_settings(&self, mut config: Config) -> Result<Config, LockError> {
        if let Some(password) = &self.primary_password {
            config = config.primary_password(password.clone());
        }
        if let Some(path) = &self.primary_tls_ca_cert {
            config = config.primary_tls_ca_cert(read("--primary-tls-ca-cert", path)?);
        }
        Ok(config)
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
    /// or the primary the sentinels name; and the TLS files to reach them with.
    pub(crate) async fn servers(&self) -> Result<Vec<Server>, LockError> {
        let server = |url: String| Server {
            url,
            tls: self.tls(),
        };
        if self.cluster {
            Ok(self.masters().await?.into_iter().map(server).collect())
        } else if let Some(master) = &self.sentinel {
            self.primary(master).await.map(|primary| vec![primary])
        } else {
            Ok(vec![server(self.url().to_owned())])
        }
    }

    /// A connection of lockctl's own to the server at `url` (for CLUSTER NODES and the
    /// sentinels), with the TLS files.
    async fn connect(&self, url: &str) -> Result<redis::aio::MultiplexedConnection, LockError> {
        let server = Server {
            url: url.to_owned(),
            tls: self.tls(),
        };
        server.connect().await
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
    async fn primary(&self, master: &str) -> Result<Server, LockError> {
        let mut last = None;
        for sentinel in self.urls() {
            let mut ask = redis::cmd("SENTINEL");
            ask.arg("GET-MASTER-ADDR-BY-NAME").arg(master);
            match self.ask::<Option<(String, u16)>>(sentinel, &ask).await {
                Ok(Some((host, port))) => return self.primary_at(sentinel, &host, port),
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

    /// The primary at `host`:`port`, reached as `Config::sentinel` reaches it: with the
    /// `sentinel` URL's scheme, credentials and TLS files, unless the primary's own
    /// settings say otherwise.
    fn primary_at(&self, sentinel: &str, host: &str, port: u16) -> Result<Server, LockError> {
        let mut url = with_address(sentinel, &format!("{host}:{port}"));
        let mut tls = self.tls();
        if let Some(path) = &self.primary_tls_ca_cert {
            let rest = url.split_once("://").map_or("", |(_, rest)| rest);
            url = format!("rediss://{rest}");
            tls = Ok(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(read("--primary-tls-ca-cert", path)?),
            });
        }
        if let Some(password) = &self.primary_password {
            let (scheme, rest) = url.split_once("://").unwrap_or(("redis", &url));
            let address = rest.rsplit_once('@').map_or(rest, |(_, address)| address);
            url = format!("{scheme}://:{}@{address}", percent_encode(password));
        }
        Ok(Server { url, tls })
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

/// A server lockctl connects to itself (for SCAN): its URL and TLS files.
pub(crate) struct Server {
    pub(crate) url: String,
    tls: Result<redis::TlsCertificates, LockError>,
}

impl Server {
    /// A connection of lockctl's own to the server, with its TLS files.
    pub(crate) async fn connect(self) -> Result<redis::aio::MultiplexedConnection, LockError> {
        let (url, tls) = (self.url, self.tls?);
        let client = if tls.root_cert.is_some() || tls.client_tls.is_some() {
            redis::Client::build_with_tls(url.as_str(), tls)
        } else {
            redis::Client::open(url.as_str())
        };
        let client = client.map_err(|err| LockError::Config {
            reason: format!("the URL `{url}`: {err}"),
        })?;
        client
            .get_multiplexed_async_connection()
            .await
            .map_err(backend)
    }
}

/// `text` with every byte but letters, digits and `-._~` percent-encoded, for a URL's
/// password.
fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
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
