//! The settings of the primary that Redis Sentinel names, where they differ from the
//! sentinels' (its credentials and TLS): data that `Config` carries; `sentinel.rs` sets and
//! uses them.

use crate::config::tls_files::TlsFiles;

/// The primary's connection settings, where they differ from the first sentinel URL's.
#[derive(Clone, Default)]
pub(crate) struct PrimarySettings {
    /// The primary's user and password; `None`: the first sentinel URL's.
    pub(crate) auth: Option<Credentials>,
    /// The primary's TLS; `None`: as the first sentinel URL (its scheme, and
    /// `Config::tls_ca_cert` / `Config::tls_client_cert`).
    pub(crate) tls: Option<PrimaryTls>,
}

#[derive(Clone)]
pub(crate) struct Credentials {
    pub(crate) username: Option<String>,
    pub(crate) password: String,
}

/// TLS to the primary, set apart from the sentinels'.
#[derive(Clone, Debug)]
pub(crate) enum PrimaryTls {
    /// Plain TCP, even when the sentinels are reached with `rediss://`.
    Off,
    /// TLS with these certificates (none: the system's trust store, no client certificate).
    On(TlsFiles),
}

impl std::fmt::Debug for PrimarySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a password.
        f.debug_struct("PrimarySettings")
            .field(
                "username",
                &self.auth.as_ref().map(|auth| auth.username.as_deref()),
            )
            .field("password", &self.auth.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .finish()
    }
}

impl PrimarySettings {
    /// Whether any of the primary's own settings was given.
    pub(crate) fn is_set(&self) -> bool {
        self.auth.is_some() || self.tls.is_some()
    }

    /// Turns TLS to the primary on (keeping certificates given before) and lets `set`
    /// change its certificates.
    pub(crate) fn tls_files(&mut self, set: impl FnOnce(&mut TlsFiles)) {
        let mut files = match self.tls.take() {
            Some(PrimaryTls::On(files)) => files,
            _ => TlsFiles::default(),
        };
        set(&mut files);
        self.tls = Some(PrimaryTls::On(files));
    }
}
