//! TLS (`rediss://`): a real redis-server with `--tls-port` and certificates made by the
//! test; the lock client trusts the test's authority and, for mutual TLS, presents a client
//! certificate. A wrong authority is refused with an error that names the server.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, ReleaseOutcome};
use lock_tests::tls::{Certificates, TlsServer};

use lock_tests::chain;

fn client(config: Config) -> LockClient {
    LockClient::new(
        config
            .connect_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2)),
    )
    .unwrap()
}

/// Takes and releases a lock through `client`, checking the key on the plain port.
async fn lock_round_trip(client: &LockClient, server: &TlsServer, key: &str) {
    let guard = client
        .lock(key)
        .wait(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    assert_eq!(server.server.get(key).as_deref(), Some(guard.token()));
    assert!(client.is_locked(key).await.unwrap());
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(server.server.get(key), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_the_servers_authority_takes_and_releases_locks() {
    let certificates = Certificates::generate();
    let server = TlsServer::start(&certificates, false);
    let client = client(Config::single(server.url()).tls_ca_cert(certificates.read("ca.crt")));
    lock_round_trip(&client, &server, "tls:one-way").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_with_a_client_certificate_takes_and_releases_locks() {
    let certificates = Certificates::generate();
    let server = TlsServer::start(&certificates, true);
    let client = client(
        Config::single(server.url())
            .tls_ca_cert(certificates.read("ca.crt"))
            .tls_client_cert(
                certificates.read("client.crt"),
                certificates.read("client.key"),
            ),
    );
    lock_round_trip(&client, &server, "tls:mutual").await;
    // The global-client path (init) builds its client through the same constructor; the
    // own-client path keeps the application's TLS settings too.
    let own = redis::Client::build_with_tls(
        server.url(),
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: certificates.read("client.crt"),
                client_key: certificates.read("client.key"),
            }),
            root_cert: Some(certificates.read("ca.crt")),
        },
    )
    .unwrap();
    let client = LockClient::from_client(own).unwrap();
    lock_round_trip(&client, &server, "tls:own-client").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_wants_a_client_certificate_refuses_a_client_without_one() {
    let certificates = Certificates::generate();
    let server = TlsServer::start(&certificates, true);
    let client = client(Config::single(server.url()).tls_ca_cert(certificates.read("ca.crt")));
    let err = client
        .lock("tls:no-client-cert")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    println!("without a client certificate: {}", chain(&err));
    assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
    assert_eq!(server.server.get("tls:no-client-cert"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_authority_is_a_clear_error_naming_the_server() {
    let certificates = Certificates::generate();
    let server = TlsServer::start(&certificates, false);
    let client =
        client(Config::single(server.url()).tls_ca_cert(certificates.read("other-ca.crt")));
    let err = client
        .lock("tls:wrong-ca")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    let message = chain(&err);
    println!("with a wrong authority: {message}");
    assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
    assert!(
        message.contains(&format!("127.0.0.1:{}", server.tls_port)),
        "the error names the server: {message}"
    );
    assert!(
        message.to_lowercase().contains("certificate") || message.contains("UnknownIssuer"),
        "the error says the certificate is the cause: {message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_that_do_not_parse_are_a_configuration_error() {
    let err = LockClient::new(Config::single("rediss://127.0.0.1:6380").tls_ca_cert(
        b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n".to_vec(),
    ))
    .unwrap_err();
    println!("unparsable authority: {}", chain(&err));
    assert!(matches!(err, LockError::Config { .. }), "{err:?}");
    assert!(err.to_string().contains("rediss://127.0.0.1:6380"), "{err}");
}

/// The client's outcome for `config`: the construction's error, or (a client built) the
/// error of one acquire.
async fn outcome(config: Config, key: &str) -> Result<LockError, LockError> {
    match LockClient::new(config.connect_timeout(Duration::from_secs(2))) {
        Err(err) => Ok(err),
        Ok(client) => Err(
            match client.lock(key).wait(Duration::ZERO).acquire().await {
                Err(err) => err,
                Ok(_) => panic!("the lock was taken"),
            },
        ),
    }
}

/// An X.509 v1 client certificate (`openssl x509 -req` without extensions) is refused when
/// the client is built, naming the setting and the fix. rustls refuses it at every
/// handshake with a message that blames the server ("invalid peer certificate"); the
/// same input is refused the same way under `tls-native-tls`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_client_certificate_is_a_configuration_error_naming_the_fix() {
    let certificates = Certificates::generate().with_v1_client();
    let server = TlsServer::start(&certificates, true);
    let config = Config::single(server.url())
        .tls_ca_cert(certificates.read("ca.crt"))
        .tls_client_cert(
            certificates.read("client-v1.crt"),
            certificates.read("client-v1.key"),
        );
    let err = match outcome(config, "tls:v1").await {
        Ok(err) => err,
        Err(late) => panic!(
            "accepted when the client was built; the acquire failed with: {}",
            chain(&late)
        ),
    };
    let message = chain(&err);
    println!("a v1 client certificate: {message}");
    assert!(matches!(err, LockError::Config { .. }), "{err:?}");
    assert!(message.contains("Config::tls_client_cert"), "{message}");
    assert!(message.contains("X.509 v1"), "{message}");
    assert!(message.contains("-extfile"), "the fix: {message}");
    assert!(
        message.contains(&server.url()),
        "names the server: {message}"
    );
    assert_eq!(server.server.get("tls:v1"), None);
}

/// A CA "certificate" that holds no certificate (a text file, the authority's key) is
/// refused when the client is built; rustls took it as an empty trust store and failed
/// every acquire with `UnknownIssuer`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_file_that_is_not_a_certificate_is_a_configuration_error() {
    let certificates = Certificates::generate();
    let server = TlsServer::start(&certificates, false);
    let cases = [
        (
            "a text file",
            b"redis CA: ask the platform team\n".to_vec(),
            "no PEM block",
        ),
        (
            "the authority's key",
            certificates.read("ca.key"),
            "a private key instead",
        ),
    ];
    for (what, pem, found) in cases {
        let config = Config::single(server.url()).tls_ca_cert(pem);
        let err = match outcome(config, "tls:bad-ca").await {
            Ok(err) => err,
            Err(late) => panic!(
                "{what} as the CA was accepted when the client was built; the acquire \
                 failed with: {}",
                chain(&late)
            ),
        };
        let message = chain(&err);
        println!("{what} as the CA: {message}");
        assert!(matches!(err, LockError::Config { .. }), "{what}: {err:?}");
        assert!(message.contains("Config::tls_ca_cert"), "{message}");
        assert!(message.contains("holds no certificate"), "{message}");
        assert!(message.contains(found), "{message}");
        assert!(message.contains(&server.url()), "{message}");
    }
}
