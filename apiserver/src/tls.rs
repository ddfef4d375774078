//! HTTPS: a throw-away CA and a serving certificate for `127.0.0.1` and `localhost` signed by
//! it, generated at start, and the accept loop serving the router over TLS (HTTP/2 and
//! HTTP/1.1). kubectl sends credentials (a bearer token, `--as`) only over TLS, so a server
//! with authorization is checked with kubectl through this.

use axum::Router;
use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::Arc;

/// Errors generating the certificates or the TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Generating a key or a certificate failed.
    #[error("generating the serving certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// Building the rustls configuration failed.
    #[error("building the TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// Building the client certificate verifier failed.
    #[error("building the client certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

/// The CA of a server and its TLS configuration.
pub(crate) struct Pki {
    /// The CA certificate, PEM (what a kubeconfig's `certificate-authority-data` holds).
    pub ca_pem: String,
    /// The CA certificate, DER (a `kube::Config`'s `root_cert`).
    pub ca_der: Vec<u8>,
    /// The server configuration presenting the serving certificate and accepting (not
    /// requiring) client certificates the CA signed.
    pub server_config: Arc<rustls::ServerConfig>,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    /// A fresh CA and serving certificate.
    pub(crate) fn generate() -> Result<Pki, TlsError> {
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "kmeta-apiserver CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
        let mut serving = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])?;
        serving
            .distinguished_name
            .push(DnType::CommonName, "kmeta-apiserver");
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate()?;
        let cert = serving.signed_by(&key, &ca)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.der().clone())?;
        // a client certificate authenticates when sent; without one the handshake succeeds
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Pki {
            ca_pem: ca.pem(),
            ca_der: CertificateDer::from(ca.der().to_vec()).to_vec(),
            server_config: Arc::new(config),
            issuer: ca,
        })
    }

    /// A client certificate signed by the CA, for `user` (subject CN) in `group` (the O), as
    /// kube-apiserver's `--client-ca-file` authenticates them: its PEM and its key's. (rcgen
    /// writes one attribute of a type, so one group; the server reads every O.)
    pub(crate) fn client_certificate(
        &self,
        user: &str,
        group: Option<&str>,
    ) -> Result<(String, String), TlsError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        if let Some(g) = group {
            params.distinguished_name.push(DnType::OrganizationName, g);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// The CA as a kubeconfig's `certificate-authority-data`.
    pub(crate) fn ca_data(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.ca_pem.as_bytes())
    }
}

/// Serve the router over TLS until `shutdown` resolves; then every connection is ended.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    config: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                while connections.try_join_next().is_some() {}
                let acceptor = acceptor.clone();
                let app = app.clone();
                connections.spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    // the user of the client certificate, if one was sent, on every request
                    let cert_user = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(|c| crate::authn::x509_user(c).ok());
                    let app = match cert_user {
                        Some(u) => app.layer(axum::Extension(crate::authn::ClientCertUser(u))),
                        None => app,
                    };
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let builder = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    );
                    if let Err(e) = builder
                        .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(tls), service)
                        .await
                    {
                        tracing::debug!("TLS connection ended: {e}");
                    }
                });
            }
        }
    }
    connections.abort_all();
}
