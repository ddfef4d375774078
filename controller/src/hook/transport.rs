//! Where and how a hook is reached: its URL (a `url`, or a Service reference), the
//! `endpointConfigs` entry for its host, and the TLS and auth material — CA bundle, client
//! certificate, bearer token or basic auth — read from Secrets and ConfigMaps once, when the
//! client is built. Credentials are never logged.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;

use rustls::pki_types::CertificateDer;

use super::error::HookError;
use super::tls;
/// Default hook timeout: 10 s (Metacontroller `webhookTimeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

use crate::api::{
    Authorization, BasicAuth, CaBundle, ClientTls, EndpointConfig, KeyReference, Webhook,
};

/// Why a webhook stanza cannot be used (reported as the hook's configuration error).
#[derive(Debug, thiserror::Error)]
pub enum WebhookSpecError {
    /// Neither `url` nor `service` is set.
    #[error("webhook needs url or service")]
    NoUrl,
    /// `timeout` is not a Go duration.
    #[error("timeout: {0}")]
    Timeout(crate::duration::NotADuration),
}

/// The URL a webhook is called at: `url`, else `{protocol}://{name}.{namespace}:{port}{path}`.
pub fn webhook_url(w: &Webhook) -> Result<String, WebhookSpecError> {
    if let Some(url) = w.url.as_deref().filter(|u| !u.is_empty()) {
        return Ok(url.to_owned());
    }
    let Some(svc) = &w.service else {
        return Err(WebhookSpecError::NoUrl);
    };
    let protocol = svc.protocol.as_deref().unwrap_or("http");
    let port = svc.port.unwrap_or(80);
    let path = w.path.as_deref().unwrap_or("");
    Ok(format!(
        "{protocol}://{}.{}:{port}{path}",
        svc.name, svc.namespace
    ))
}

/// `(host lowercased, port)` with the scheme's default port filled in.
fn host_port(url: &reqwest::Url) -> (String, u16) {
    (
        url.host_str().unwrap_or_default().to_ascii_lowercase(),
        url.port_or_known_default().unwrap_or(80),
    )
}

/// The endpointConfig whose `host` matches the URL (case-insensitive; a host without a port
/// matches the scheme's default port).
pub fn match_endpoint_config<'a>(
    url: &reqwest::Url,
    configs: &'a [EndpointConfig],
) -> Option<&'a EndpointConfig> {
    let (host, port) = host_port(url);
    let default_port = if url.scheme() == "https" { 443 } else { 80 };
    configs.iter().find(|c| {
        let ch = c.host.to_ascii_lowercase();
        match ch.rsplit_once(':') {
            Some((h, p)) if p.parse::<u16>().is_ok() => h == host && p.parse() == Ok(port),
            _ => ch == host && port == default_port,
        }
    })
}

async fn read_key(
    client: &kube::Client,
    hook: &'static str,
    secret: bool,
    r: &KeyReference,
    default_key: &str,
) -> Result<Vec<u8>, HookError> {
    let key = r.key.as_deref().unwrap_or(default_key);
    read_named(client, hook, secret, &r.namespace, &r.name, key).await
}

async fn read_named(
    client: &kube::Client,
    hook: &'static str,
    secret: bool,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<Vec<u8>, HookError> {
    let err = |message: String| HookError::Credentials {
        hook,
        what: if secret { "secret" } else { "configmap" },
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        message,
    };
    if secret {
        let s = Api::<Secret>::namespaced(client.clone(), namespace)
            .get(name)
            .await
            .map_err(|e| err(e.to_string()))?;
        if let Some(v) = s.data.as_ref().and_then(|d| d.get(key)) {
            return Ok(v.0.clone());
        }
        if let Some(v) = s.string_data.as_ref().and_then(|d| d.get(key)) {
            return Ok(v.clone().into_bytes());
        }
    } else {
        let c = Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get(name)
            .await
            .map_err(|e| err(e.to_string()))?;
        if let Some(v) = c.data.as_ref().and_then(|d| d.get(key)) {
            return Ok(v.clone().into_bytes());
        }
        if let Some(v) = c.binary_data.as_ref().and_then(|d| d.get(key)) {
            return Ok(v.0.clone());
        }
    }
    Err(err(format!("key {key:?} not found")))
}

/// The TLS/auth settings in effect: per-hook fields override the matching endpointConfig entry
/// as a whole (Metacontroller's rule).
pub(super) struct Security<'a> {
    pub(super) ca_bundle: Option<&'a CaBundle>,
    pub(super) client_tls: Option<&'a ClientTls>,
    pub(super) authorization: Option<&'a Authorization>,
    pub(super) basic_auth: Option<&'a BasicAuth>,
}

pub(super) fn security<'a>(w: &'a Webhook, ep: Option<&'a EndpointConfig>) -> Security<'a> {
    let own = w.ca_bundle.is_some()
        || w.client_tls.is_some()
        || w.authorization.is_some()
        || w.basic_auth.is_some();
    match ep {
        Some(ep) if !own => Security {
            ca_bundle: ep.ca_bundle.as_ref(),
            client_tls: ep.client_tls.as_ref(),
            authorization: ep.authorization.as_ref(),
            basic_auth: ep.basic_auth.as_ref(),
        },
        _ => Security {
            ca_bundle: w.ca_bundle.as_ref(),
            client_tls: w.client_tls.as_ref(),
            authorization: w.authorization.as_ref(),
            basic_auth: w.basic_auth.as_ref(),
        },
    }
}

/// Where a hook's CA bundle and credentials are read from, and the hook its errors name.
pub(super) struct Credentials<'a> {
    pub(super) client: &'a kube::Client,
    pub(super) hook: &'static str,
}

impl Credentials<'_> {
    /// A configuration error of this hook.
    pub(super) fn invalid(&self, message: String) -> HookError {
        HookError::Config {
            hook: self.hook,
            message,
        }
    }

    /// The CA bundle's certificates (inline, or from a Secret or ConfigMap).
    pub(super) async fn ca_bundle(
        &self,
        ca: &CaBundle,
    ) -> Result<Vec<CertificateDer<'static>>, HookError> {
        let (client, name) = (self.client, self.hook);
        let pem = match (&ca.inline, &ca.secret_ref, &ca.config_map_ref) {
            (Some(p), None, None) => p.clone().into_bytes(),
            (None, Some(r), None) => read_key(client, name, true, r, "ca.crt").await?,
            (None, None, Some(r)) => read_key(client, name, false, r, "ca.crt").await?,
            _ => {
                return Err(self.invalid(
                    "caBundle needs exactly one of inline, secretRef, configMapRef".into(),
                ));
            }
        };
        let certs =
            tls::parse_certificates(&pem).map_err(|e| self.invalid(format!("caBundle: {e}")))?;
        if certs.is_empty() {
            return Err(self.invalid("caBundle holds no certificate".into()));
        }
        Ok(certs)
    }

    /// The client certificate and key read from the `clientTLS` Secret.
    pub(super) async fn client_identity(
        &self,
        tls: &ClientTls,
    ) -> Result<tls::ClientIdentity, HookError> {
        let (client, name) = (self.client, self.hook);
        let r = &tls.secret_ref;
        let cert_key = tls.cert_key.as_deref().unwrap_or("tls.crt");
        let key_key = tls.private_key_key.as_deref().unwrap_or("tls.key");
        let cert = read_named(client, name, true, &r.namespace, &r.name, cert_key).await?;
        let key = read_named(client, name, true, &r.namespace, &r.name, key_key).await?;
        tls::client_identity(&cert, &key).map_err(|e| {
            self.invalid(format!(
                "clientTLS (secret {}/{}, keys {cert_key:?} and {key_key:?}): {e}",
                r.namespace, r.name
            ))
        })
    }

    /// The `Authorization` header value: from `authorization` (a token) or `basicAuth`, never
    /// both.
    pub(super) async fn authorization(
        &self,
        sec: &Security<'_>,
    ) -> Result<Option<String>, HookError> {
        let (client, name) = (self.client, self.hook);
        match (sec.authorization, sec.basic_auth) {
            (Some(_), Some(_)) => {
                Err(self.invalid("authorization and basicAuth are exclusive".into()))
            }
            (Some(a), None) => {
                let scheme = a.type_.as_deref().unwrap_or("Bearer");
                if scheme.eq_ignore_ascii_case("basic") {
                    return Err(self
                        .invalid("authorization type Basic is not allowed; use basicAuth".into()));
                }
                let token = read_key(client, name, true, &a.secret_ref, "token").await?;
                let token = String::from_utf8(token)
                    .map_err(|_| self.invalid("token is not utf-8".into()))?;
                Ok(Some(format!("{scheme} {}", token.trim())))
            }
            (None, Some(b)) => {
                let r = &b.secret_ref;
                let uk = b.username_key.as_deref().unwrap_or("username");
                let pk = b.password_key.as_deref().unwrap_or("password");
                let user = read_named(client, name, true, &r.namespace, &r.name, uk).await?;
                let pass = read_named(client, name, true, &r.namespace, &r.name, pk).await?;
                let mut raw = user;
                raw.push(b':');
                raw.extend(pass);
                Ok(Some(format!("Basic {}", base64_encode(&raw))))
            }
            (None, None) => Ok(None),
        }
    }
}

/// The webhook's `timeout` (Go duration), else [`DEFAULT_TIMEOUT`].
pub(super) fn webhook_timeout(w: &Webhook) -> Result<Duration, WebhookSpecError> {
    match w.timeout.as_deref() {
        Some(t) => crate::duration::parse_go_duration(t).map_err(WebhookSpecError::Timeout),
        None => Ok(DEFAULT_TIMEOUT),
    }
}

/// Standard base64 with padding (for the basic auth header).
pub(crate) fn base64_encode(input: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(input)
}

/// `url` as kmeta prints, labels and stores it: without userinfo (`user:password@`), which is a
/// credential. A URL that does not parse loses everything between `://` and the last `@` of its
/// authority.
pub fn without_userinfo(url: &str) -> String {
    if let Ok(mut u) = reqwest::Url::parse(url) {
        if u.username().is_empty() && u.password().is_none() {
            return url.to_owned();
        }
        let _ = u.set_username("");
        let _ = u.set_password(None);
        return u.to_string();
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// `text` with the password of every URL in it (`scheme://user:password@host`) replaced by
/// `<redacted>`: a hook body carries the controller object, whose webhook URLs (and a
/// last-applied annotation copying them) may hold one.
pub fn mask_url_passwords(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("://") || !text.contains('@') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (before, after) = rest.split_at(i + 3);
        out.push_str(before);
        let end = after
            .find(|c: char| matches!(c, '/' | '?' | '#' | '"' | '\\' | '\'') || c.is_whitespace())
            .unwrap_or(after.len());
        let authority = &after[..end];
        match authority.rfind('@').and_then(|at| {
            let userinfo = &authority[..at];
            userinfo.find(':').map(|colon| (colon, at))
        }) {
            Some((colon, at)) => {
                out.push_str(&authority[..=colon]);
                out.push_str("<redacted>");
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// The credential values a hook request carries — the URL's password, the bearer token, the
/// basic-auth header and its password — to be masked in any text kmeta copies from a response.
pub fn sent_credentials(url: &str, authorization: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(u) = reqwest::Url::parse(url)
        && let Some(p) = u.password()
    {
        out.push(p.to_owned());
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        let (user, password) = (decode(u.username()), decode(p));
        // the basic-auth header an HTTP client derives from the userinfo
        out.push(base64_encode(format!("{user}:{password}").as_bytes()));
        out.push(password);
    }
    if let Some(a) = authorization {
        if let Some(token) = a.strip_prefix("Bearer ") {
            out.push(token.to_owned());
        } else if let Some(blob) = a.strip_prefix("Basic ") {
            out.push(blob.to_owned());
            use base64::Engine as _;
            if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(blob)
                && let Ok(pair) = String::from_utf8(bytes)
                && let Some((_, password)) = pair.split_once(':')
            {
                out.push(password.to_owned());
            }
        }
    }
    // short values would mask ordinary text; longer ones first so no part of one survives
    out.retain(|s| s.len() >= 4);
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

/// `text` with every value of `secrets` replaced by `<redacted>`.
pub fn mask(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .fold(text.to_owned(), |t, s| t.replace(s.as_str(), "<redacted>"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::api::ServiceReference;

    #[test]
    fn urls() {
        let w = Webhook {
            url: Some("http://x/sync".into()),
            ..Default::default()
        };
        assert_eq!(webhook_url(&w).unwrap(), "http://x/sync");
        let w = Webhook {
            service: Some(ServiceReference {
                name: "hook".into(),
                namespace: "ns".into(),
                port: None,
                protocol: None,
            }),
            path: Some("/sync".into()),
            ..Default::default()
        };
        assert_eq!(webhook_url(&w).unwrap(), "http://hook.ns:80/sync");
        assert!(webhook_url(&Webhook::default()).is_err());
    }

    #[test]
    fn endpoint_config_matching() {
        let ep = |h: &str| EndpointConfig {
            host: h.into(),
            ca_bundle: None,
            client_tls: None,
            authorization: None,
            basic_auth: None,
        };
        let configs = [ep("other"), ep("Hook.NS"), ep("x:8443")];
        let u = reqwest::Url::parse("https://hook.ns/sync").unwrap();
        assert_eq!(match_endpoint_config(&u, &configs).unwrap().host, "Hook.NS");
        let u = reqwest::Url::parse("https://hook.ns:443/sync").unwrap();
        assert_eq!(match_endpoint_config(&u, &configs).unwrap().host, "Hook.NS");
        let u = reqwest::Url::parse("https://hook.ns:8443/sync").unwrap();
        assert!(match_endpoint_config(&u, &configs).is_none());
        let u = reqwest::Url::parse("https://x:8443/").unwrap();
        assert_eq!(match_endpoint_config(&u, &configs).unwrap().host, "x:8443");
    }

    #[test]
    fn base64() {
        assert_eq!(base64_encode(b"user:pass"), "dXNlcjpwYXNz");
        assert_eq!(base64_encode(b"a"), "YQ==");
        assert_eq!(base64_encode(b"ab"), "YWI=");
        assert_eq!(base64_encode(b""), "");
    }

    #[test]
    fn per_hook_security_overrides_endpoint_entry() {
        let ep = EndpointConfig {
            host: "h".into(),
            ca_bundle: Some(CaBundle {
                inline: Some("x".into()),
                ..Default::default()
            }),
            client_tls: None,
            authorization: None,
            basic_auth: None,
        };
        let w = Webhook::default();
        assert!(security(&w, Some(&ep)).ca_bundle.is_some());
        let w = Webhook {
            basic_auth: Some(BasicAuth {
                secret_ref: crate::api::SecretReference {
                    name: "s".into(),
                    namespace: "n".into(),
                },
                username_key: None,
                password_key: None,
            }),
            ..Default::default()
        };
        let s = security(&w, Some(&ep));
        assert!(s.ca_bundle.is_none() && s.basic_auth.is_some());
    }

    #[test]
    fn userinfo_never_shown() {
        assert_eq!(
            without_userinfo("http://user:s3cret@hook.ns:8080/sync?x=1"),
            "http://hook.ns:8080/sync?x=1"
        );
        assert_eq!(without_userinfo("https://hook/sync"), "https://hook/sync");
        assert_eq!(
            without_userinfo("http://u:p@ss@bad host/sync"),
            "http://bad host/sync"
        );
    }

    #[test]
    fn url_passwords_are_masked_wherever_they_appear() {
        assert_eq!(mask_url_passwords("no url here"), "no url here");
        assert_eq!(
            mask_url_passwords("http://hook.example/sync"),
            "http://hook.example/sync"
        );
        assert_eq!(
            mask_url_passwords("https://kmeta:s3cret@hook.example:8443/sync?x=1"),
            "https://kmeta:<redacted>@hook.example:8443/sync?x=1"
        );
        assert_eq!(
            mask_url_passwords("only-user@ http://user@hook/x"),
            "only-user@ http://user@hook/x",
            "a user without a password is kept"
        );
        // inside JSON text (a last-applied annotation), two URLs, a password with an `@`
        let text = r#"{"url":"http://a:p@ss@one/s","other":"http://b:q2@two"}"#;
        assert_eq!(
            mask_url_passwords(text),
            r#"{"url":"http://a:<redacted>@one/s","other":"http://b:<redacted>@two"}"#
        );
    }

    #[test]
    fn credentials_sent_are_masked() {
        let basic = format!("Basic {}", base64_encode(b"kmeta:pa55word"));
        let secrets = sent_credentials("http://u:url%2Fpass@h/sync", Some(&basic));
        let body = format!("echo: {basic} url%2Fpass url/pass pa55word fine");
        let masked = mask(&body, &secrets);
        for s in ["pa55word", "url%2Fpass", "url/pass", "cGE1NXdvcmQ"] {
            assert!(!masked.contains(s), "{s} in {masked}");
        }
        assert!(masked.ends_with("fine"), "{masked}");
        let bearer = sent_credentials("http://h/sync", Some("Bearer tok-123456"));
        assert_eq!(mask("got tok-123456", &bearer), "got <redacted>");
    }
}
