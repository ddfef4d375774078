//! A throw-away PKI for HTTPS hook scenarios: a CA, a server certificate for 127.0.0.1 and a
//! client certificate, all signed by the CA; and the rustls server configuration that requires
//! (or not) a client certificate from that CA.
//!
//! It also makes X.509 **v1** certificates, what `openssl x509 -req` issues without an
//! extensions file: rcgen only writes v3, so [`v1_certificate`] encodes the DER itself and signs
//! it with the CA's key (no extensions, hence no subjectAltName).

use base64::Engine as _;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, PublicKeyData, SigningKey,
};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, SubjectPublicKeyInfoDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

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
    /// An X.509 v1 client certificate signed by the CA (for `client_v1_key_pem`).
    pub client_v1_cert_pem: String,
    /// The v1 client certificate's key.
    pub client_v1_key_pem: String,
    /// An X.509 v1 server certificate for CN=127.0.0.1 signed by the CA (no subjectAltName).
    pub server_v1_cert_pem: String,
    /// The v1 server certificate's key.
    pub server_v1_key_pem: String,
}

impl Pki {
    /// Generates a fresh CA and the two leaf certificates.
    pub fn generate() -> anyhow::Result<Pki> {
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "kmeta test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate()?;
        let ca_key_pem = ca_key.serialize_pem();
        let ca = CertifiedIssuer::self_signed(ca, ca_key)?;
        let ca_key = KeyPair::from_pem(&ca_key_pem)?;
        let (client_v1_key, server_v1_key) = (KeyPair::generate()?, KeyPair::generate()?);
        let client_v1 = v1_certificate(
            3,
            "kmeta v1 client",
            &client_v1_key,
            ca.der().as_ref(),
            &ca_key,
        )?;
        let server_v1 = v1_certificate(4, "127.0.0.1", &server_v1_key, ca.der().as_ref(), &ca_key)?;

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
            client_v1_cert_pem: pem("CERTIFICATE", &client_v1),
            client_v1_key_pem: client_v1_key.serialize_pem(),
            server_v1_cert_pem: pem("CERTIFICATE", &server_v1),
            server_v1_key_pem: server_v1_key.serialize_pem(),
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

    /// A TLS 1.3 server configuration presenting the v1 server certificate.
    pub fn server_v1_config(&self) -> anyhow::Result<Arc<rustls::ServerConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs = vec![CertificateDer::from_pem_slice(
            self.server_v1_cert_pem.as_bytes(),
        )?];
        let key = provider
            .key_provider
            .load_private_key(PrivateKeyDer::from_pem_slice(
                self.server_v1_key_pem.as_bytes(),
            )?)?;
        // with_single_cert would parse the certificate with webpki, which refuses v1
        let resolver =
            rustls::sign::SingleCertAndKey::from(rustls::sign::CertifiedKey::new(certs, key));
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
        Ok(Arc::new(config))
    }

    /// A TLS 1.3 server configuration that requires a client certificate and, like Go's
    /// `crypto/tls`, accepts an X.509 v1 one: only this PKI's two client certificates (v3 and v1)
    /// are let in, each proving it holds its key.
    pub fn server_config_accepting_v1_clients(&self) -> anyhow::Result<Arc<rustls::ServerConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut known = Vec::new();
        for (cert, key) in [
            (&self.client_cert_pem, &self.client_key_pem),
            (&self.client_v1_cert_pem, &self.client_v1_key_pem),
        ] {
            let cert = CertificateDer::from_pem_slice(cert.as_bytes())?;
            known.push((
                cert.to_vec(),
                KeyPair::from_pem(key)?.subject_public_key_info(),
            ));
        }
        let verifier = KnownClients {
            known,
            algorithms: provider.signature_verification_algorithms,
        };
        let certs = vec![CertificateDer::from_pem_slice(
            self.server_cert_pem.as_bytes(),
        )?];
        let key = PrivateKeyDer::from_pem_slice(self.server_key_pem.as_bytes())?;
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(Arc::new(verifier))
            .with_single_cert(certs, key)?;
        Ok(Arc::new(config))
    }
}

/// A client certificate verifier that knows the exact certificates it accepts (v1 or v3).
#[derive(Debug)]
struct KnownClients {
    /// (certificate DER, its SubjectPublicKeyInfo DER).
    known: Vec<(Vec<u8>, Vec<u8>)>,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl KnownClients {
    fn spki(&self, cert: &CertificateDer<'_>) -> Result<&[u8], rustls::Error> {
        self.known
            .iter()
            .find(|(c, _)| c.as_slice() == cert.as_ref())
            .map(|(_, spki)| spki.as_slice())
            .ok_or(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            ))
    }
}

impl ClientCertVerifier for KnownClients {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.spki(end_entity)
            .map(|_| ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("TLS 1.2 is not offered".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let spki = SubjectPublicKeyInfoDer::from(self.spki(cert)?);
        rustls::crypto::verify_tls13_signature_with_raw_key(message, &spki, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A DER element: `tag`, length, `contents`.
fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
    let n = contents.len();
    let mut out = vec![tag];
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let len: Vec<u8> = n
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | len.len() as u8);
        out.extend(len);
    }
    out.extend(contents);
    out
}

/// The DER elements inside the SEQUENCE `der` (each whole, tag and length included).
fn elements(der: &[u8]) -> anyhow::Result<Vec<&[u8]>> {
    let header = |d: &[u8]| -> anyhow::Result<(usize, usize)> {
        let first = *d.get(1).ok_or_else(|| anyhow::anyhow!("short DER"))?;
        if first < 0x80 {
            return Ok((2, usize::from(first)));
        }
        let n = usize::from(first & 0x7f);
        let bytes = d
            .get(2..2 + n)
            .ok_or_else(|| anyhow::anyhow!("short DER"))?;
        Ok((
            2 + n,
            bytes.iter().fold(0, |a, b| (a << 8) | usize::from(*b)),
        ))
    };
    let (h, len) = header(der)?;
    let mut rest = der
        .get(h..h + len)
        .ok_or_else(|| anyhow::anyhow!("short DER"))?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (h, len) = header(rest)?;
        out.push(&rest[..h + len]);
        rest = &rest[h + len..];
    }
    Ok(out)
}

/// An X.509 v1 certificate (no version field, no extensions) for `key`, with subject
/// `CN=<cn>`, issued by the CA whose DER certificate is `issuer_cert` and key `issuer_key`
/// (ECDSA P-256 with SHA-256), valid from 2025 to 2049.
pub fn v1_certificate(
    serial: u8,
    cn: &str,
    key: &KeyPair,
    issuer_cert: &[u8],
    issuer_key: &KeyPair,
) -> anyhow::Result<Vec<u8>> {
    // the issuer is the CA's subject, byte for byte: tbsCertificate's 6th element (v3 CA)
    let ca_tbs = elements(issuer_cert)?[0];
    let issuer = elements(ca_tbs)?
        .get(5)
        .copied()
        .ok_or_else(|| anyhow::anyhow!("CA certificate without subject"))?;
    // ecdsa-with-SHA256 (1.2.840.10045.4.3.2)
    let alg = tlv(
        0x30,
        &tlv(0x06, &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02]),
    );
    let cn_attr = [tlv(0x06, &[0x55, 0x04, 0x03]), tlv(0x0c, cn.as_bytes())].concat();
    let subject = tlv(0x30, &tlv(0x31, &tlv(0x30, &cn_attr)));
    let validity = [tlv(0x17, b"250101000000Z"), tlv(0x17, b"491231235959Z")].concat();
    let tbs = tlv(
        0x30,
        &[
            tlv(0x02, &[serial]),
            alg.clone(),
            issuer.to_vec(),
            tlv(0x30, &validity),
            subject,
            key.subject_public_key_info(),
        ]
        .concat(),
    );
    let signature = issuer_key.sign(&tbs)?;
    let bits = [&[0u8][..], &signature].concat();
    Ok(tlv(0x30, &[tbs, alg, tlv(0x03, &bits)].concat()))
}

/// `der` as PEM with `label`.
fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap_or_default())
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
}

/// An HTTPS hook that answers like Python's `http.server` over `ssl`: `HTTP/1.0 200`, no
/// Content-Length, the body delimited by closing the connection — without TLS close_notify.
/// Aborted when dropped.
pub struct CloseDelimitedHook {
    /// `https://127.0.0.1:PORT`.
    pub base: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CloseDelimitedHook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CloseDelimitedHook {
    /// Serves every request with the body `respond` makes from the request's JSON.
    pub async fn start(
        tls: Arc<rustls::ServerConfig>,
        respond: impl Fn(&serde_json::Value) -> Vec<u8> + Send + Sync + 'static,
    ) -> anyhow::Result<CloseDelimitedHook> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let base = format!("https://{}", listener.local_addr()?);
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        let respond = Arc::new(respond);
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, respond) = (acceptor.clone(), respond.clone());
                tokio::spawn(async move {
                    if let Ok(stream) = acceptor.accept(tcp).await {
                        let _ = answer_once(stream, respond.as_ref()).await;
                    }
                });
            }
        });
        Ok(CloseDelimitedHook { base, task })
    }

    /// The URL of hook path `hook`.
    pub fn url(&self, hook: &str) -> String {
        format!("{}/{hook}", self.base)
    }
}

/// Reads one request (head and Content-Length body), writes the HTTP/1.0 answer and drops the
/// stream: TCP closes without close_notify.
async fn answer_once(
    mut stream: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    respond: &(dyn Fn(&serde_json::Value) -> Vec<u8> + Send + Sync),
) -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let (head_end, length) = loop {
        let n = stream.read(&mut chunk).await?;
        anyhow::ensure!(n > 0, "request ended early");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (i + 4, length);
        }
    };
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await?;
        anyhow::ensure!(n > 0, "request body ended early");
        buf.extend_from_slice(&chunk[..n]);
    }
    let request = serde_json::from_slice(&buf[head_end..head_end + length])?;
    let mut answer = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n".to_vec();
    answer.extend(respond(&request));
    stream.write_all(&answer).await?;
    stream.flush().await?;
    // dropped here: no poll_shutdown, so no close_notify
    Ok(())
}
