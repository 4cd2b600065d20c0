//! A server's client with the TLS certificates a configuration names, or, in a build
//! without TLS, the error that says so.

/// A client for `info` with the TLS certificates `files`; built without TLS, the error
/// `without_tls` instead.
#[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
pub(crate) fn with_certificates(
    info: impl redis::IntoConnectionInfo,
    files: &crate::config::tls_files::TlsFiles,
    _without_tls: &'static str,
) -> redis::RedisResult<redis::Client> {
    redis::Client::build_with_tls(info, crate::tls::certificates(files))
}

#[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
pub(crate) fn with_certificates(
    _info: impl redis::IntoConnectionInfo,
    _files: &crate::config::tls_files::TlsFiles,
    without_tls: &'static str,
) -> redis::RedisResult<redis::Client> {
    let kind = redis::ErrorKind::InvalidClientConfig;
    Err(redis::RedisError::from((kind, without_tls)))
}
