//! Checks of the TLS certificates a [`Config`](crate::Config) carries, made when the client
//! is built, so that a file that can never work is a [`LockError::Config`] naming the
//! setting and the fix, the same with `tls-rustls` and `tls-native-tls`, instead of a
//! `Backend` error at every acquire.
//!
//! What is checked:
//! - the certificate authority (`tls_ca_cert`) holds at least one certificate, and every
//!   certificate in it decodes (rustls alone would accept a text file or a key as an empty
//!   trust store and fail each handshake with `UnknownIssuer`);
//! - the client certificate (`tls_client_cert`) holds a certificate, its first (the leaf)
//!   is X.509 v3 (rustls refuses v1 and v2 at each handshake with a message that blames
//!   the server's certificate), and the key file holds a private key.
//!
//! The certificates are read with a minimal DER reader: only the outer structure and the
//! version field, no x509 parser.

use rustls_pki_types::pem::{PemObject as _, SectionKind};

use crate::config::tls_files::TlsFiles;
use crate::error::LockError;

/// Which settings the files came from, for messages.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TlsSettings {
    /// `Config::tls_ca_cert` / `Config::tls_client_cert`.
    Config,
    /// `Config::primary_tls_ca_cert` / `Config::primary_tls_client_cert` (Sentinel mode).
    #[cfg(feature = "sentinel")]
    Primary,
}

impl TlsSettings {
    /// The settings' names: the certificate authority's and the client certificate's.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            TlsSettings::Config => ("Config::tls_ca_cert", "Config::tls_client_cert"),
            #[cfg(feature = "sentinel")]
            TlsSettings::Primary => (
                "Config::primary_tls_ca_cert",
                "Config::primary_tls_client_cert",
            ),
        }
    }
}

/// Checks `files` (given through `settings`, for the servers `servers`).
pub(crate) fn check(
    files: &TlsFiles,
    settings: TlsSettings,
    servers: &str,
) -> Result<(), LockError> {
    let (ca_cert, client_cert) = settings.names();
    let refused = |what: &str, setting: &str, problem: String| LockError::Config {
        reason: format!("TLS for {servers}: the {what} given with {setting} {problem}"),
    };
    if let Some(pem) = &files.ca_cert {
        check_authority(pem)
            .map_err(|problem| refused("certificate authority", ca_cert, problem))?;
    }
    if let Some((cert, key)) = &files.client_cert {
        check_client_cert(cert, key)
            .map_err(|problem| refused("client certificate", client_cert, problem))?;
    }
    Ok(())
}

/// The PEM sections of `pem`, in order, with their kinds (unknown kinds are skipped).
fn sections(pem: &[u8]) -> Result<Vec<(SectionKind, Vec<u8>)>, String> {
    <(SectionKind, Vec<u8>)>::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| format!("is not valid PEM ({err})"))
}

/// What a PEM file holds instead of the `expected` block (`CERTIFICATE`), for messages.
fn found(sections: &[(SectionKind, Vec<u8>)], expected: &str) -> String {
    match sections.first() {
        None => format!("no PEM block (-----BEGIN {expected}-----) at all"),
        Some((kind, _)) => format!("a {} instead", describe(*kind)),
    }
}

fn describe(kind: SectionKind) -> &'static str {
    match kind {
        SectionKind::Certificate => "certificate",
        SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey => {
            "private key"
        }
        SectionKind::PublicKey => "public key",
        SectionKind::Csr => "certificate request (CSR)",
        SectionKind::Crl => "certificate revocation list",
        _ => "PEM block of another kind",
    }
}

fn check_authority(pem: &[u8]) -> Result<(), String> {
    let sections = sections(pem)?;
    let certificates: Vec<&[u8]> = sections
        .iter()
        .filter(|(kind, _)| *kind == SectionKind::Certificate)
        .map(|(_, der)| der.as_slice())
        .collect();
    if certificates.is_empty() {
        return Err(format!(
            "holds no certificate: it has {}. Give the authority's certificate (the PEM file \
             that starts with -----BEGIN CERTIFICATE-----, such as ca.crt), not its key or \
             another file",
            found(&sections, "CERTIFICATE")
        ));
    }
    for (index, der) in certificates.iter().enumerate() {
        x509_version(der).map_err(|problem| {
            format!(
                "has a certificate (number {}) that does not decode: {problem}",
                index + 1
            )
        })?;
    }
    Ok(())
}

fn check_client_cert(cert_pem: &[u8], key_pem: &[u8]) -> Result<(), String> {
    let certificate = sections(cert_pem)?;
    let Some((_, leaf)) = certificate
        .iter()
        .find(|(kind, _)| *kind == SectionKind::Certificate)
    else {
        return Err(format!(
            "holds no certificate: it has {}. The first argument is the certificate \
             (-----BEGIN CERTIFICATE-----), the second its private key",
            found(&certificate, "CERTIFICATE")
        ));
    };
    let version = x509_version(leaf).map_err(|problem| format!("does not decode: {problem}"))?;
    if version != 3 {
        return Err(format!(
            "is X.509 v{version}; it must be v3 (rustls refuses other versions at every \
             handshake, so either TLS feature refuses them here). Re-issue it as v3: `openssl x509 -req ... -extfile client.ext` with \
             client.ext holding `basicConstraints=CA:FALSE`, \
             `keyUsage=digitalSignature,keyEncipherment` and `extendedKeyUsage=clientAuth` \
             (`openssl x509 -req` without -extfile makes a v1 certificate)"
        ));
    }
    let keys = sections(key_pem).map_err(|problem| format!("has a key that {problem}"))?;
    if !keys.iter().any(|(kind, _)| {
        matches!(
            kind,
            SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey
        )
    }) {
        return Err(format!(
            "has no private key in its key argument: it has {}. The second argument is the \
             certificate's private key (-----BEGIN PRIVATE KEY-----)",
            found(&keys, "PRIVATE KEY")
        ));
    }
    Ok(())
}

/// One DER element: its tag, its contents and what follows it.
fn element(input: &[u8]) -> Result<(u8, &[u8], &[u8]), &'static str> {
    let (&tag, rest) = input.split_first().ok_or("truncated")?;
    let (&first, rest) = rest.split_first().ok_or("truncated")?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let octets = usize::from(first & 0x7f);
        if octets == 0 || octets > 4 || rest.len() < octets {
            return Err("bad length");
        }
        let (bytes, rest) = rest.split_at(octets);
        let length = bytes
            .iter()
            .fold(0usize, |length, &byte| (length << 8) | usize::from(byte));
        (length, rest)
    };
    if rest.len() < length {
        return Err("truncated");
    }
    let (contents, rest) = rest.split_at(length);
    Ok((tag, contents, rest))
}

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
/// `[0] EXPLICIT`, constructed: the TBSCertificate's version field.
const VERSION_TAG: u8 = 0xa0;

/// The X.509 version (1, 2 or 3) of the DER certificate `der`: the optional
/// `[0] EXPLICIT INTEGER` at the start of the TBSCertificate (absent: v1).
fn x509_version(der: &[u8]) -> Result<u8, String> {
    let read = || -> Result<u8, &'static str> {
        let (tag, certificate, _) = element(der)?;
        if tag != SEQUENCE {
            return Err("not a DER certificate (no outer SEQUENCE)");
        }
        let (tag, tbs, _) = element(certificate)?;
        if tag != SEQUENCE {
            return Err("not a DER certificate (no TBSCertificate SEQUENCE)");
        }
        let (tag, version, _) = element(tbs)?;
        if tag != VERSION_TAG {
            return Ok(1);
        }
        match element(version)? {
            (INTEGER, [value @ 0..=2], _) => Ok(value + 1),
            _ => Err("an unknown version field"),
        }
    };
    read().map_err(str::to_owned)
}

/// The certificates of `tls`, as redis-rs takes them.
pub(crate) fn certificates(tls: &TlsFiles) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: tls.client_cert.clone().map(|(client_cert, client_key)| {
            redis::ClientTlsConfig {
                client_cert,
                client_key,
            }
        }),
        root_cert: tls.ca_cert.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A certificate whose TBSCertificate starts with `tbs_start`, wrapped in SEQUENCEs.
    fn certificate(tbs_start: &[u8]) -> Vec<u8> {
        let mut tbs = vec![SEQUENCE, u8::try_from(tbs_start.len()).unwrap()];
        tbs.extend_from_slice(tbs_start);
        let mut der = vec![SEQUENCE, u8::try_from(tbs.len()).unwrap()];
        der.extend_from_slice(&tbs);
        der
    }

    #[test]
    fn the_version_field_is_read_and_its_absence_is_v1() {
        // [0] { INTEGER 2 }, serial INTEGER 1
        assert_eq!(
            x509_version(&certificate(&[0xa0, 3, 2, 1, 2, 2, 1, 1])),
            Ok(3)
        );
        assert_eq!(x509_version(&certificate(&[2, 1, 1])), Ok(1));
        assert!(x509_version(b"plain text").is_err());
        assert!(x509_version(&[SEQUENCE, 0x82, 0xff]).is_err());
    }

    #[test]
    fn text_or_a_key_is_not_an_authority() {
        let text = check_authority(b"just some notes\n").unwrap_err();
        assert!(text.contains("holds no certificate"), "{text}");
        let key = b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        let key = check_authority(key).unwrap_err();
        assert!(key.contains("a private key instead"), "{key}");
    }

    #[test]
    fn a_key_given_as_the_client_certificate_is_named() {
        let key = b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        let swapped = check_client_cert(key, key).unwrap_err();
        assert!(swapped.contains("holds no certificate"), "{swapped}");
        assert!(swapped.contains("a private key instead"), "{swapped}");
    }
}
