//! rustls's process-wide crypto provider is the application's choice: with `tls-rustls`
//! on, a lock client whose servers need no TLS installs none, so an application that
//! installs its own (aws-lc-rs) later can still do so. Its own test binary: the provider
//! is process-wide state, and the TLS suite's clients install one.
#![allow(clippy::unwrap_used, missing_docs)]

use lock_runtime::{Config, LockClient, ReleaseOutcome};
use lock_tests::RedisServer;

#[tokio::test]
async fn a_client_without_tls_leaves_the_crypto_provider_to_the_application() {
    let server = RedisServer::start();
    let client = LockClient::new(Config::single(server.url())).unwrap();
    let guard = client.lock("provider:plain").acquire().await.unwrap();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert!(
        rustls::crypto::CryptoProvider::get_default().is_none(),
        "a lock client on redis:// installed a process-wide rustls crypto provider: an \
         application that installs its own later gets an error"
    );
}
