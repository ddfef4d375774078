//! The one executor of webhook admission: POST an `AdmissionReview` to a webhook and read the
//! body, within its `timeoutSeconds`, trusting only its `caBundle` when it has one.

use super::{Target, Webhook, WebhookError};
use serde_json::Value;

/// POSTs `review` to the webhook; the answer's body, or why there is none (unreachable, a
/// `service` without [`super::SERVICE_ADDRESS_ANNOTATION`], a non-2xx status, the timeout).
pub(crate) async fn post(w: &Webhook, review: &Value) -> Result<Vec<u8>, WebhookError> {
    let fail = |reason: String| WebhookError::Call {
        webhook: w.name.clone(),
        reason,
    };
    let mut builder = reqwest::Client::builder()
        .timeout(w.timeout)
        .no_proxy()
        .user_agent("kube-apiserver-admission");
    if let Some(ca) = &w.ca_bundle {
        let certs = reqwest::Certificate::from_pem_bundle(ca)
            .map_err(|e| fail(format!("clientConfig.caBundle: {e}")))?;
        builder = builder.tls_built_in_root_certs(false);
        for c in certs {
            builder = builder.add_root_certificate(c);
        }
    }
    let url = match &w.target {
        Target::Url(u) => u.clone(),
        Target::Service { url, host, address } => {
            let Some(address) = address else {
                return Err(fail(format!(
                    "service {host} has no local address: set the {} annotation of the configuration to HOST:PORT",
                    super::SERVICE_ADDRESS_ANNOTATION
                )));
            };
            let sock = tokio::net::lookup_host(address.as_str())
                .await
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| fail(format!("cannot resolve {address:?}")))?;
            builder = builder.resolve(host, sock);
            service_url(url, host, sock.port())
        }
    };
    let client = builder
        .build()
        .map_err(|e| fail(format!("failed to build a client: {e}")))?;
    let resp = client
        .post(&url)
        .json(review)
        .send()
        .await
        .map_err(|e| fail(format!("failed to call webhook: Post {url:?}: {e}")))?;
    let status = resp.status();
    let body = resp
        .bytes()
        .await
        .map_err(|e| fail(format!("failed to read the answer: {e}")))?;
    if !status.is_success() {
        return Err(fail(format!(
            "failed to call webhook: the server responded with status {}",
            status.as_u16()
        )));
    }
    Ok(body.to_vec())
}

/// A fresh uid for one review (a webhook must echo it).
pub(crate) fn review_uid() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("00000000-0000-4000-8000-{:012x}", n & 0xffff_ffff_ffff)
}

/// The service URL with the port of the local address (the DNS name stays, for TLS).
fn service_url(url: &str, host: &str, port: u16) -> String {
    let path = url
        .split_once(host)
        .map(|(_, rest)| rest.split_once('/').map_or("", |(_, p)| p))
        .unwrap_or("");
    format!("https://{host}:{port}/{path}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_service_url_takes_the_local_port() {
        assert_eq!(
            super::service_url("https://inj.mesh.svc:443/inject", "inj.mesh.svc", 9443),
            "https://inj.mesh.svc:9443/inject"
        );
        assert_eq!(
            super::service_url("https://inj.mesh.svc:443", "inj.mesh.svc", 9443),
            "https://inj.mesh.svc:9443/"
        );
    }
}
