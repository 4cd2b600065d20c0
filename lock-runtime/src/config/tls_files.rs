//! The certificates a client connects with over TLS: data that `Config` carries, checked
//! by `tls.rs` and handed to redis-rs.

/// Certificates for TLS connections (`rediss://`), as PEM bytes.
#[derive(Clone, Default)]
pub(crate) struct TlsFiles {
    /// The certificate authority that signed the server's certificate (instead of the
    /// system's trust store).
    pub(crate) ca_cert: Option<Vec<u8>>,
    /// The client's certificate chain and private key, for mutual TLS.
    pub(crate) client_cert: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsFiles {
    pub(crate) fn is_set(&self) -> bool {
        self.ca_cert.is_some() || self.client_cert.is_some()
    }
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a private key.
        f.debug_struct("TlsFiles")
            .field("ca_cert", &self.ca_cert.is_some())
            .field("client_cert", &self.client_cert.is_some())
            .finish()
    }
}
