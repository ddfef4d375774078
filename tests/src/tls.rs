//! A throw-away PKI for HTTPS hook scenarios: a CA, a server certificate for 127.0.0.1 and a
//! client certificate, all signed by the CA; and the rustls server configuration that requires
//! (or not) a client certificate from that CA.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// PEM material of one test PKI.
pub struct Pki {
    /// The CA certificate (what a `caBundle` holds).
    pub ca_pem: String,
    /// Server certificate for `127.0.0.1` and its key.
    pub server_cert_pem: String,
    /// The server's private key.
    pub server_key_pem: String,
    /// Client certificate (what a `clientTLS` Secret holds as `tls.crt`).
    pub client_cert_pem: String,
    /// The client's private key (`tls.key`).
    pub client_key_pem: String,
}

impl Pki {
    /// Generates a fresh CA and the two leaf certificates.
    pub fn generate() -> anyhow::Result<Pki> {
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "kmeta test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;

        let mut server = CertificateParams::new(vec!["127.0.0.1".to_owned()])?;
        server.distinguished_name.push(DnType::CommonName, "hook");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate()?;
        let server_cert = server.signed_by(&server_key, &ca)?;

        let mut client = CertificateParams::new(Vec::<String>::new())?;
        client.distinguished_name.push(DnType::CommonName, "kmeta");
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_key = KeyPair::generate()?;
        let client_cert = client.signed_by(&client_key, &ca)?;

        Ok(Pki {
            ca_pem: ca.pem(),
            server_cert_pem: server_cert.pem(),
            server_key_pem: server_key.serialize_pem(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
        })
    }

    /// A rustls server configuration presenting the server certificate; with `require_client`,
    /// only clients presenting a certificate signed by the CA complete the handshake.
    pub fn server_config(&self, require_client: bool) -> anyhow::Result<Arc<rustls::ServerConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs = vec![CertificateDer::from_pem_slice(
            self.server_cert_pem.as_bytes(),
        )?];
        let key = PrivateKeyDer::from_pem_slice(self.server_key_pem.as_bytes())?;
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let builder = if require_client {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(CertificateDer::from_pem_slice(self.ca_pem.as_bytes())?)?;
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()?;
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let mut config = builder.with_single_cert(certs, key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}
