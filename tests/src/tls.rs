//! A real redis-server with TLS (`--tls-port`), and the certificates it and its clients use,
//! made for each test with the `openssl` command-line tool: a certificate authority, a
//! server certificate for 127.0.0.1 signed by it, a client certificate signed by it (for
//! mutual TLS), and a second, unrelated authority (to show a wrong CA is refused).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{RedisServer, free_port};

/// PEM files in a directory of their own, removed on drop.
pub struct Certificates {
    pub dir: PathBuf,
}

impl Certificates {
    /// Makes the authority, the server and client certificates, and an unrelated authority.
    pub fn generate() -> Certificates {
        let dir = std::env::temp_dir().join(format!("lock-tls-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let certificates = Certificates { dir };
        certificates.authority("ca");
        certificates.authority("other-ca");
        certificates.signed("server", "subjectAltName=IP:127.0.0.1,DNS:localhost");
        certificates.signed("client", "extendedKeyUsage=clientAuth");
        certificates
    }

    /// Adds `client-v1.crt` / `client-v1.key`: a client certificate signed by the authority
    /// with `openssl x509 -req` and no extensions, which makes an X.509 version 1
    /// certificate (rustls refuses those).
    pub fn with_v1_client(self) -> Certificates {
        self.request("client-v1");
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                "client-v1.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                "client-v1.crt",
            ],
        );
        self
    }

    /// The path of `name` (e.g. `ca.crt`, `client.key`).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The contents of `name`.
    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }

    fn authority(&self, name: &str) {
        openssl(
            &self.dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
                "-subj",
                &format!("/CN=lock-tests {name}"),
            ],
        );
    }

    fn signed(&self, name: &str, extension: &str) {
        self.request(name);
        std::fs::write(
            self.dir.join(format!("{name}.ext")),
            format!("{extension}\n"),
        )
        .unwrap();
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                &format!("{name}.crt"),
                "-extfile",
                &format!("{name}.ext"),
            ],
        );
    }

    /// A key and a certificate request for `name`.
    fn request(&self, name: &str) {
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN=lock-tests {name}"),
            ],
        );
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (scripts/ensure-redis installs it)");
    assert!(
        output.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A redis-server that also listens with TLS on 127.0.0.1; `mutual` makes it require a
/// client certificate signed by the authority. The plain port stays open for the
/// harness's readiness check and the tests' assertions.
pub struct TlsServer {
    pub server: RedisServer,
    pub tls_port: u16,
}

impl TlsServer {
    pub fn start(certificates: &Certificates, mutual: bool) -> TlsServer {
        let tls_port = free_port();
        let path = |name: &str| certificates.path(name).to_str().unwrap().to_owned();
        let server = RedisServer::start_with(&[
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert-file",
            &path("server.crt"),
            "--tls-key-file",
            &path("server.key"),
            "--tls-ca-cert-file",
            &path("ca.crt"),
            "--tls-auth-clients",
            if mutual { "yes" } else { "no" },
        ]);
        TlsServer { server, tls_port }
    }

    /// `rediss://127.0.0.1:TLS_PORT`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }
}
