//! The rustls client configuration of an HTTPS hook that has a `caBundle` or `clientTLS`, built
//! here rather than by reqwest so that kmeta accepts what Metacontroller (Go's `crypto/tls`)
//! accepts:
//!
//! - an X.509 **v1** client certificate (what `openssl x509 -req` makes without an extensions
//!   file): rustls' own `with_client_auth_cert` parses the certificate with webpki to check that
//!   the key matches, and webpki only parses v3 certificates. kmeta checks the match itself, on
//!   the certificate's SubjectPublicKeyInfo, like Go's `tls.X509KeyPair`;
//! - a `caBundle` **replaces** the built-in roots (Go's `RootCAs`), and may hold v1 CA
//!   certificates (webpki reads those as trust anchors).
//!
//! A v1 *server* certificate is still refused during the handshake: it cannot carry a
//! subjectAltName, which webpki and Go (since 1.15) both require to match the hook's host.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::{CertifiedKey, SingleCertAndKey};

/// Why a CA bundle, a client certificate or the TLS configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub(super) enum TlsError {
    /// A PEM bundle does not read.
    #[error("reading PEM certificates: {0}")]
    Pem(rustls::pki_types::pem::Error),
    /// The client certificate's PEM does not read.
    #[error("certificate: reading PEM certificates: {0}")]
    ClientPem(rustls::pki_types::pem::Error),
    /// The client certificate's PEM holds no certificate.
    #[error("certificate: no PEM CERTIFICATE found")]
    NoClientCertificate,
    /// The client certificate is not X.509 DER.
    #[error("certificate: not a DER X.509 certificate (no SubjectPublicKeyInfo found)")]
    NotX509,
    /// The private key's PEM does not read.
    #[error("private key: reading PEM (PKCS#1, PKCS#8 or SEC1): {0}")]
    KeyPem(rustls::pki_types::pem::Error),
    /// rustls refuses the private key.
    #[error("private key: {0}")]
    Key(rustls::Error),
    /// The private key is not the certificate's.
    #[error("private key does not match the certificate's public key")]
    KeyMismatch,
    /// rustls refuses the protocol versions.
    #[error("TLS versions: {0}")]
    Versions(rustls::Error),
    /// A CA bundle's certificate is not a usable trust anchor.
    #[error("caBundle certificate {index}: {error}")]
    CaCertificate {
        /// Its place in the bundle, from 1.
        index: usize,
        /// Why.
        error: rustls::Error,
    },
}

/// A client certificate chain and its private key, checked to belong together.
pub(super) struct ClientIdentity {
    chain: Vec<CertificateDer<'static>>,
    key: Arc<dyn rustls::sign::SigningKey>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate of a PEM bundle (other PEM sections are skipped).
pub(super) fn parse_certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(TlsError::Pem)
}

/// The client certificate chain (`tls.crt`) and key (`tls.key`: PKCS#1, PKCS#8 or SEC1 PEM).
/// The first certificate's public key must be the key's, as Go's `tls.X509KeyPair` requires;
/// the certificate may be X.509 v1 or v3.
pub(super) fn client_identity(cert_pem: &[u8], key_pem: &[u8]) -> Result<ClientIdentity, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(TlsError::ClientPem)?;
    let Some(leaf) = chain.first() else {
        return Err(TlsError::NoClientCertificate);
    };
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(TlsError::KeyPem)?;
    let key = provider()
        .key_provider
        .load_private_key(key)
        .map_err(TlsError::Key)?;
    let cert_spki = subject_public_key_info(leaf).ok_or(TlsError::NotX509)?;
    // keys whose public half rustls cannot derive are used unchecked, as rustls does
    if let Some(key_spki) = key.public_key()
        && key_spki.as_ref() != cert_spki
    {
        return Err(TlsError::KeyMismatch);
    }
    Ok(ClientIdentity { chain, key })
}

/// The client configuration: TLS 1.2 and 1.3; `roots` (a caBundle) as the only trust roots, else
/// the built-in Mozilla roots; the client certificate when given; ALPN `http/1.1`.
pub(super) fn client_config(
    roots: Option<&[CertificateDer<'static>]>,
    identity: Option<ClientIdentity>,
) -> Result<rustls::ClientConfig, TlsError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(TlsError::Versions)?
        .with_root_certificates(root_store(roots)?);
    let mut config = match identity {
        Some(id) => builder.with_client_cert_resolver(Arc::new(SingleCertAndKey::from(
            CertifiedKey::new(id.chain, id.key),
        ))),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The trust roots: a caBundle's certificates only (Go's `RootCAs`), else the Mozilla roots.
fn root_store(
    roots: Option<&[CertificateDer<'static>]>,
) -> Result<rustls::RootCertStore, TlsError> {
    let mut store = rustls::RootCertStore::empty();
    match roots {
        Some(certs) => {
            for (i, c) in certs.iter().enumerate() {
                store
                    .add(c.clone())
                    .map_err(|error| TlsError::CaCertificate {
                        index: i + 1,
                        error,
                    })?;
            }
        }
        None => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    Ok(store)
}

/// What to do about a handshake failure whose error chain is `chain`, when kmeta knows: an
/// X.509 v1 server certificate (webpki's `UnsupportedCertVersion`).
pub(super) fn handshake_hint(chain: &str) -> Option<&'static str> {
    chain.contains("UnsupportedCertVersion").then_some(
        "the hook presented an X.509 v1 certificate, which cannot carry a subjectAltName; \
         kmeta, like Go since 1.15, needs a v3 server certificate naming the hook's host in \
         subjectAltName",
    )
}

/// One DER element at the start of `der`: (tag, whole element, contents).
fn der_element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    let header = der.len() - rest.len();
    let contents = rest.get(..len)?;
    Some((tag, &der[..header + len], contents))
}

/// The SubjectPublicKeyInfo (whole DER element) of an X.509 certificate of any version:
/// `Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL, serialNumber,
/// signature, issuer, validity, subject, subjectPublicKeyInfo, ... }, ... }`.
pub(super) fn subject_public_key_info(cert: &[u8]) -> Option<&[u8]> {
    const SEQUENCE: u8 = 0x30;
    const VERSION: u8 = 0xa0;
    let (SEQUENCE, _, cert) = der_element(cert)? else {
        return None;
    };
    let (SEQUENCE, _, mut tbs) = der_element(cert)? else {
        return None;
    };
    if let Some((VERSION, whole, _)) = der_element(tbs) {
        tbs = &tbs[whole.len()..];
    }
    // serialNumber, signature, issuer, validity, subject
    for _ in 0..5 {
        let (_, whole, _) = der_element(tbs)?;
        tbs = &tbs[whole.len()..];
    }
    match der_element(tbs)? {
        (SEQUENCE, whole, _) => Some(whole),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// DER `tag` element around `contents` (short or two-byte long length).
    fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match contents.len() {
            n if n < 0x80 => out.push(n as u8),
            n => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend(contents);
        out
    }

    fn cert(version: bool, spki: &[u8]) -> Vec<u8> {
        let mut tbs = Vec::new();
        if version {
            tbs.extend(tlv(0xa0, &tlv(0x02, &[2])));
        }
        tbs.extend(tlv(0x02, &[7])); // serialNumber
        for _ in 0..4 {
            tbs.extend(tlv(0x30, &[])); // signature, issuer, validity, subject
        }
        tbs.extend(spki);
        let body = [tlv(0x30, &tbs), tlv(0x30, &[]), tlv(0x03, &[0])].concat();
        tlv(0x30, &body)
    }

    #[test]
    fn spki_of_v1_and_v3_certificates() {
        let spki = tlv(0x30, &[vec![0x30, 0x00], tlv(0x03, &[0; 200])].concat());
        assert_eq!(
            subject_public_key_info(&cert(false, &spki)),
            Some(&spki[..])
        );
        assert_eq!(subject_public_key_info(&cert(true, &spki)), Some(&spki[..]));
        assert_eq!(subject_public_key_info(b"\x30\x05junk"), None);
        assert_eq!(subject_public_key_info(&[]), None);
        // an INTEGER where the key should be
        assert_eq!(
            subject_public_key_info(&cert(false, &tlv(0x02, &[1]))),
            None
        );
    }

    #[test]
    fn a_ca_bundle_replaces_the_built_in_roots() {
        assert_eq!(root_store(Some(&[])).unwrap().len(), 0);
        let builtin = root_store(None).unwrap().len();
        assert!(builtin > 0 && builtin == webpki_roots::TLS_SERVER_ROOTS.len());
        let garbage = CertificateDer::from(vec![0x30, 0x00]);
        let e = root_store(Some(&[garbage])).unwrap_err().to_string();
        assert!(e.starts_with("caBundle certificate 1:"), "{e}");
    }

    #[test]
    fn v1_server_certificates_get_a_hint() {
        let chain = "client error (Connect): invalid peer certificate: \
                     Other(OtherError(UnsupportedCertVersion))";
        assert!(handshake_hint(chain).unwrap().contains("X.509 v1"));
        assert_eq!(
            handshake_hint("invalid peer certificate: UnknownIssuer"),
            None
        );
    }

    #[test]
    fn identity_errors_name_their_cause() {
        let e = client_identity(b"", b"").err().unwrap().to_string();
        assert!(e.contains("no PEM CERTIFICATE"), "{e}");
        let pem = "-----BEGIN CERTIFICATE-----\nMAMCAQc=\n-----END CERTIFICATE-----\n";
        let e = client_identity(pem.as_bytes(), b"nothing")
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("private key:"), "{e}");
    }
}
