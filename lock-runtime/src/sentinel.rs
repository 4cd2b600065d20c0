//! How the client reaches the primary that Redis Sentinel names: with credentials and TLS
//! settings of its own, apart from the sentinels' (managed set-ups protect the sentinels
//! and the data nodes with different passwords, and often only the data nodes with TLS).

use crate::config::Config;
use crate::error::LockError;
use crate::primary_settings::{Credentials, PrimarySettings, PrimaryTls};
use crate::tls_files::TlsFiles;

/// The settings of the primary a Sentinel deployment names ([`Config::sentinel`]): by
/// default the first sentinel URL's (user, password, database, `rediss://` and
/// [`tls_ca_cert`](Config::tls_ca_cert) / [`tls_client_cert`](Config::tls_client_cert));
/// these set the primary's apart. They are used for every connection to the primary (the
/// command connections and the wake-up subscription) and follow it across failovers.
/// Outside Sentinel mode they are a [`LockError::Config`] when the client is built (the URLs
/// carry the servers' settings there).
impl Config {
    /// Sentinel mode: the data nodes' password (Redis `requirepass`, the default user),
    /// when it is not the sentinels' (their URLs carry theirs). See
    /// [`primary_auth`](Self::primary_auth) for an ACL user.
    ///
    /// ```
    /// use lock_runtime::Config;
    ///
    /// let config = Config::sentinel(
    ///     "mymaster",
    ///     ["redis://:sentinel-secret@10.0.0.1:26379", "redis://:sentinel-secret@10.0.0.2:26379"],
    /// )
    /// .primary_password("node-secret");
    /// # let _ = config;
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn primary_password(mut self, password: impl Into<String>) -> Self {
        self.primary.auth = Some(Credentials {
            username: None,
            password: password.into(),
        });
        self
    }

    /// Sentinel mode: the ACL user and password for the data nodes, when they are not the
    /// sentinels' (their URLs carry theirs). The sentinels themselves need
    /// `sentinel auth-user` / `sentinel auth-pass` for the same nodes.
    ///
    /// ```
    /// use lock_runtime::Config;
    ///
    /// let config = Config::sentinel("mymaster", ["redis://sentinel-user:s3cret@10.0.0.1:26379"])
    ///     .primary_auth("locks", "node-secret");
    /// # let _ = config;
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn primary_auth(
        mut self,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.primary.auth = Some(Credentials {
            username: Some(username.into()),
            password: password.into(),
        });
        self
    }

    /// Sentinel mode: reach the primary with TLS, whatever the sentinel URLs' scheme,
    /// trusting the system's trust store (or
    /// [`primary_tls_ca_cert`](Self::primary_tls_ca_cert)). Once a `primary_tls*` setting
    /// is given, the primary's TLS is exactly what they say: [`tls_ca_cert`](Self::tls_ca_cert)
    /// and [`tls_client_cert`](Self::tls_client_cert) apply to the sentinels only. Needs the
    /// feature `tls-rustls` or `tls-native-tls`.
    ///
    /// ```
    /// use lock_runtime::Config;
    ///
    /// // Plain sentinels, data nodes behind TLS with a public certificate.
    /// let config = Config::sentinel("mymaster", ["redis://10.0.0.1:26379"]).primary_tls();
    /// # let _ = config;
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn primary_tls(mut self) -> Self {
        self.primary.tls_files(|_| ());
        self
    }

    /// Sentinel mode: reach the primary with TLS, trusting the certificate authority in
    /// `pem` (PEM bytes, one or more certificates) for its certificate. See
    /// [`primary_tls`](Self::primary_tls).
    ///
    /// ```no_run
    /// use lock_runtime::Config;
    ///
    /// # fn demo() -> std::io::Result<()> {
    /// // Plain sentinels with their own password; data nodes with another, behind TLS.
    /// let config = Config::sentinel("mymaster", ["redis://:sentinel-secret@10.0.0.1:26379"])
    ///     .primary_password("node-secret")
    ///     .primary_tls_ca_cert(std::fs::read("/etc/redis/nodes-ca.crt")?);
    /// # let _ = config; Ok(()) }
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn primary_tls_ca_cert(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.primary
            .tls_files(|files| files.ca_cert = Some(pem.into()));
        self
    }

    /// Sentinel mode: reach the primary with TLS and present this client certificate (PEM
    /// chain, X.509 v3) and private key (PEM) to it, for data nodes that require mutual TLS.
    /// See [`primary_tls`](Self::primary_tls) and [`tls_client_cert`](Self::tls_client_cert).
    ///
    /// ```no_run
    /// use lock_runtime::Config;
    ///
    /// # fn demo() -> std::io::Result<()> {
    /// let config = Config::sentinel("mymaster", ["redis://10.0.0.1:26379"])
    ///     .primary_tls_ca_cert(std::fs::read("/etc/redis/ca.crt")?)
    ///     .primary_tls_client_cert(
    ///         std::fs::read("/etc/redis/client.crt")?,
    ///         std::fs::read("/etc/redis/client.key")?,
    ///     );
    /// # let _ = config; Ok(()) }
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn primary_tls_client_cert(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.primary
            .tls_files(|files| files.client_cert = Some((cert_pem.into(), key_pem.into())));
        self
    }

    /// Sentinel mode: reach the primary over plain TCP even though the sentinel URLs are
    /// `rediss://`.
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn primary_without_tls(mut self) -> Self {
        self.primary.tls = Some(PrimaryTls::Off);
        self
    }
}

/// How to open a client for the primary at an address the sentinels name.
pub(crate) struct PrimaryTemplate {
    /// The first sentinel's settings (address replaced for each primary).
    first_sentinel: redis::ConnectionInfo,
    settings: PrimarySettings,
}

impl PrimaryTemplate {
    /// Checks the primary's own TLS files (a configuration error names them) and keeps
    /// what [`client`](Self::client) needs.
    pub(crate) fn new(
        first_sentinel: redis::ConnectionInfo,
        settings: PrimarySettings,
        master: &str,
    ) -> Result<Self, LockError> {
        if let Some(PrimaryTls::On(files)) = &settings.tls
            && files.is_set()
        {
            check_files(files, master)?;
        }
        let template = PrimaryTemplate {
            first_sentinel,
            settings,
        };
        // A first client, so that settings that can never work fail now, not at each
        // failover.
        template
            .client("127.0.0.1".to_owned(), 6379)
            .map_err(|err| LockError::Config {
                reason: format!(
                    "the connection settings for the primary `{master}` cannot be used: {err}"
                ),
            })?;
        Ok(template)
    }

    /// A client for the primary at `host:port`.
    pub(crate) fn client(&self, host: String, port: u16) -> redis::RedisResult<redis::Client> {
        let mut redis = self.first_sentinel.redis_settings().clone();
        if let Some(auth) = &self.settings.auth {
            let fresh = redis::RedisConnectionInfo::default()
                .set_db(redis.db())
                .set_protocol(redis.protocol())
                .set_password(&auth.password);
            redis = match &auth.username {
                Some(username) => fresh.set_username(username),
                None => fresh,
            };
        }
        let info = self.first_sentinel.clone().set_redis_settings(redis);
        let addr = match (&self.settings.tls, self.first_sentinel.addr()) {
            (
                None,
                redis::ConnectionAddr::TcpTls {
                    insecure,
                    tls_params,
                    ..
                },
            ) => redis::ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            (None | Some(PrimaryTls::Off), _) => redis::ConnectionAddr::Tcp(host, port),
            (Some(PrimaryTls::On(files)), _) => {
                let addr = redis::ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: false,
                    tls_params: None,
                };
                if files.is_set() {
                    return with_certificates(info.set_addr(addr), files);
                }
                addr
            }
        };
        redis::Client::open(info.set_addr(addr))
    }
}

#[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
fn check_files(files: &TlsFiles, master: &str) -> Result<(), LockError> {
    crate::tls::check(
        files,
        crate::tls::TlsSettings::Primary,
        &format!("the primary `{master}`"),
    )
}

#[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
fn check_files(_files: &TlsFiles, _master: &str) -> Result<(), LockError> {
    Ok(())
}

#[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
fn with_certificates(
    info: redis::ConnectionInfo,
    files: &TlsFiles,
) -> redis::RedisResult<redis::Client> {
    redis::Client::build_with_tls(info, crate::tls::certificates(files))
}

#[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
fn with_certificates(
    _info: redis::ConnectionInfo,
    _files: &TlsFiles,
) -> redis::RedisResult<redis::Client> {
    Err(redis::RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "TLS certificates were configured for the primary, but lock-runtime was built \
         without TLS: turn on its feature `tls-rustls` or `tls-native-tls`",
    )))
}

/// Whether `err` says the server refused our credentials (a wrong password or user, or
/// none given where one is needed).
pub(crate) fn is_auth_failure(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("WRONGPASS" | "NOAUTH"))
}

/// The fix for a primary that refused our credentials.
pub(crate) const AUTH_HINT: &str = "the sentinel URLs' credentials are the sentinels' own; \
     give the data nodes' with Config::primary_password(password) or \
     Config::primary_auth(user, password)";

/// `err` (a refused authentication on the primary of `master` at `server`) with the master,
/// the server and the fix named.
pub(crate) fn name_auth_failure(
    err: redis::RedisError,
    master: &str,
    server: &str,
) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::AuthenticationFailed,
        "the Redis primary refused the credentials",
        format!("primary `{master}` at {server}: {err} ({AUTH_HINT})"),
    ))
}

/// Connects once to the primary of `master` while the client is built, and turns a refused
/// authentication into a configuration error (it would fail every acquire). Any other
/// failure (the primary down for a moment) is left to the lazy connections.
pub(crate) fn check_primary_auth(
    primary: &redis::Client,
    master: &str,
    timeout: std::time::Duration,
) -> Result<(), LockError> {
    let server = primary.get_connection_info().addr().to_string();
    let checked = primary
        .get_connection_with_timeout(timeout)
        .and_then(|mut connection| {
            connection.set_read_timeout(Some(timeout))?;
            redis::cmd("PING").query::<String>(&mut connection)
        });
    match checked {
        Err(err) if is_auth_failure(&err) => Err(LockError::Config {
            reason: format!(
                "the primary `{master}` at {server} (named by the sentinels) refused the \
                 credentials: {err}; {AUTH_HINT}"
            ),
        }),
        Err(err) => {
            tracing::debug!(master, %server, error = %err, "the primary did not answer the start-up check");
            Ok(())
        }
        Ok(_) => Ok(()),
    }
}
