//! How the client reaches the primary that Redis Sentinel names: with credentials and TLS
//! settings of its own, apart from the sentinels' (managed set-ups protect the sentinels
//! and the data nodes with different passwords, and often only the data nodes with TLS).

use crate::config::Config;
use crate::config::primary_settings::{Credentials, PrimaryTls};

/// The settings of the primary a Sentinel deployment names ([`Config::sentinel`]): by
/// default the first sentinel URL's (user, password, database, `rediss://` and
/// [`tls_ca_cert`](Config::tls_ca_cert) / [`tls_client_cert`](Config::tls_client_cert));
/// these set the primary's apart. They are used for every connection to the primary (the
/// command connections and the wake-up subscription) and follow it across failovers.
/// Outside Sentinel mode they are a [`LockError::Config`](crate::LockError::Config) when the client is built (the URLs
/// carry the servers' settings there).
impl Config {
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
}

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

    /// Sentinel mode: reach the primary over plain TCP even though the sentinel URLs are
    /// `rediss://`.
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn primary_without_tls(mut self) -> Self {
        self.primary.tls = Some(PrimaryTls::Off);
        self
    }
}
