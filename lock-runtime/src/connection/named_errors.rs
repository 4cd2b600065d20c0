//! Connection-level errors that say which server failed.

/// Puts the server's address in front of a connection-level error (refused, reset, a TLS
/// handshake that failed), so that the error says which server failed and why. The
/// caller's checks (`is_io_error`, `is_timeout`, `is_connection_refusal`,
/// `is_connection_dropped`) answer as before: an I/O error stays one, with an I/O kind
/// chosen to give the same answers, and a client-side error (native-tls reports a failed
/// handshake so) keeps its kind and had no I/O answers to keep. Server replies are left
/// as they are.
pub(crate) fn name_server(err: redis::RedisError, server: &str) -> redis::RedisError {
    use std::io::ErrorKind;
    let client_side = err.kind() == redis::ErrorKind::Client;
    if !(err.is_io_error() || client_side) || err.to_string().contains("Redis server ") {
        return err;
    }
    let message = err.to_string();
    let hint = if message.contains("invalid peer certificate")
        || message.contains("certificate verify failed")
    {
        " (the server's TLS certificate is not trusted: give its authority with \
         Config::tls_ca_cert, and check that it names this host)"
    } else {
        ""
    };
    let named = format!("Redis server {server}: {message}{hint}");
    if client_side {
        return redis::RedisError::from((redis::ErrorKind::Client, "client-side failure", named));
    }
    let kind = if err.is_timeout() {
        ErrorKind::TimedOut
    } else if err.is_connection_refusal() {
        ErrorKind::ConnectionRefused
    } else if err.is_connection_dropped() {
        ErrorKind::ConnectionReset
    } else {
        ErrorKind::Other
    };
    std::io::Error::new(kind, named).into()
}
