//! Hook transport: ETag caching (If-None-Match / 304), basic auth from a Secret, the response
//! size cap, HTTPS with a CA bundle and a client certificate (mTLS).

use base64::Engine as _;
use kmeta::ManagerConfig;
use kmeta::hook::HookOptions;

fn base64_encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
use kmeta_tests::*;
use serde_json::{Value, json};

fn child(req: &Value, v: &str) -> Value {
    let name = req["parent"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": format!("{name}-c")}, "data": {"v": v}})
}

/// `hooks.sync.webhook.etag.enabled`.
fn etag() -> Value {
    json!({"etag": {"enabled": true}})
}

#[tokio::test]
async fn etag_from_the_hook_is_sent_back_as_if_none_match() -> anyhow::Result<()> {
    // the hook answers 304 whenever the client presents the ETag of its last answer
    let s = Scenario::new("etag")
        .crd("Thing", "things")
        .hook(|_, req| {
            let tag = format!("\"{}\"", req["parent"]["metadata"]["generation"]);
            Reply::Headers(
                vec![("etag".into(), tag)],
                Box::new(Reply::Json(json!({"children": [child(req, "cached")]}))),
            )
        })
        .controller(Cc::new("etag-cc").webhook(etag()))
        .parent("p", Value::Null)
        .start()
        .await?;
    s.wait_child("p-c").await?;
    // later calls for the same parent carry the ETag the hook sent
    let poke = json!({"metadata": {"annotations": {"poke": "1"}}});
    s.patch_and_sync("etag-cc", &s.parents(), "p", poke).await?;
    let tags = s.hooks().header("sync", "if-none-match");
    assert!(
        tags.iter().skip(1).any(|t| t.as_deref() == Some("\"1\"")),
        "no If-None-Match sent: {tags:?}"
    );
    s.finish().await
}

#[tokio::test]
async fn not_modified_answers_reuse_the_cached_body() -> anyhow::Result<()> {
    // first answer with a body and an ETag; afterwards only 304 Not Modified
    let s = Scenario::new("etag304")
        .crd("Thing", "things")
        .hook(|_, req| {
            if req["parent"]["metadata"]["annotations"]["poke"].is_null() {
                Reply::Headers(
                    vec![("etag".into(), "\"v1\"".into())],
                    Box::new(Reply::Json(
                        json!({"status": {"from": "body"}, "children": [child(req, "1")]}),
                    )),
                )
            } else {
                Reply::Raw(304, String::new())
            }
        })
        .controller(Cc::new("e304-cc").no_strategy().webhook(etag()))
        .parent("p", Value::Null)
        .start()
        .await?;
    s.wait_child("p-c").await?;
    let (errors, faults) = (
        s.metrics.reconcile_count("e304-cc", "error"),
        s.hooks().faults(),
    );
    let poke = json!({"metadata": {"annotations": {"poke": "1"}}});
    s.patch_and_sync("e304-cc", &s.parents(), "p", poke).await?;
    // the 304 was served from the cache: no failure (but those of requests
    // KMETA_TEST_HOOK_FAULT_PCT failed before the hook), the child is still there
    let failed = s.metrics.reconcile_count("e304-cc", "error") - errors;
    let injected = (s.hooks().faults() - faults) as u64;
    assert!(
        failed <= injected,
        "{failed} failed syncs, {injected} injected hook faults"
    );
    assert!(s.get(&s.configmaps(), "p-c").await?.is_some());
    s.finish().await
}

#[tokio::test]
async fn basic_auth_from_a_secret() -> anyhow::Result<()> {
    let mut s = Scenario::new("basic-auth")
        .crd("Thing", "things")
        .hook(|_, _| Reply::Json(json!({"children": []})))
        .object(
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hook-basic"},
                   "data": {"username": "YWxpY2U=", "password": "czNjcmV0"}}),
        )
        .prepare()
        .await?;
    let basic = json!({"secretRef": {"name": "hook-basic", "namespace": s.ns}});
    let cc = Cc::new("basic-cc")
        .no_children()
        .webhook(json!({"basicAuth": basic}));
    s.controller(cc).await?;
    s.start_controller();
    s.parent("p", Value::Null).await?;
    until("an authenticated call", || {
        !s.hooks().authorizations("sync").is_empty()
    })
    .await?;
    // base64("alice:s3cret")
    assert_eq!(
        s.hooks().authorizations("sync")[0].as_deref(),
        Some("Basic YWxpY2U6czNjcmV0")
    );
    s.finish().await
}

#[tokio::test]
async fn oversized_responses_are_rejected_and_change_nothing() -> anyhow::Result<()> {
    let s = Scenario::new("big")
        .crd("Thing", "things")
        .hook(|_, req| {
            let big = "x".repeat(if req["parent"]["spec"]["big"] == true {
                8192
            } else {
                1
            });
            Reply::Json(json!({"children": [child(req, &big)]}))
        })
        .controller(Cc::new("big-cc"))
        .config(ManagerConfig::default().hook(HookOptions {
            max_response_bytes: 4096,
            ..HookOptions::default()
        }))
        .parent("p", json!({"big": false}))
        .start()
        .await?;
    let small = s.wait_child("p-c").await?;
    let errors = s.metrics.reconcile_count("big-cc", "error");
    s.merge_patch(&s.parents(), "p", json!({"spec": {"big": true}}))
        .await?;
    let p = s
        .wait_parent("p", "a failure condition naming the cap", |p| {
            p["status"]["conditions"][0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("larger than 4096 bytes"))
        })
        .await?;
    assert!(s.metrics.reconcile_count("big-cc", "error") > errors, "{p}");
    let now = s.get(&s.configmaps(), "p-c").await?.unwrap();
    assert_eq!(
        now["metadata"]["resourceVersion"],
        small["metadata"]["resourceVersion"]
    );
    s.finish().await
}

#[tokio::test]
async fn https_hook_with_ca_bundle_and_client_certificate() -> anyhow::Result<()> {
    let pki = kmeta_tests::tls::Pki::generate()?;
    // The hook only accepts clients presenting a certificate from the test CA (mTLS).
    let hooks = HookServer::start_tls(
        |_, req| Reply::Json(json!({"children": [child(req, "over-tls")]})),
        pki.server_config(true)?,
    )
    .await?;
    let mut s = Scenario::new("mtls")
        .crd("Thing", "things")
        .object(
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                   "metadata": {"name": "hook-client"},
                   "data": {"tls.crt": base64_encode(pki.client_cert_pem.as_bytes()),
                            "tls.key": base64_encode(pki.client_key_pem.as_bytes())}}),
        )
        .object(
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hook-ca"},
                   "data": {"ca.crt": pki.ca_pem}}),
        )
        .prepare()
        .await?;
    let ns = s.ns.clone();
    // With the CA (from a ConfigMap) and the client certificate (from a Secret): children appear.
    let cc = Cc::new("mtls-cc")
        .selector(json!({"matchExpressions": [{"key": "cert", "operator": "DoesNotExist"}]}))
        .no_strategy()
        .sync_url(&hooks.url("sync"))
        .webhook(json!({
            "caBundle": {"configMapRef": {"name": "hook-ca", "namespace": ns}},
            "clientTLS": {"secretRef": {"name": "hook-client", "namespace": ns}}}));
    s.controller(cc).await?;
    // Without a client certificate (CA inline): the handshake fails, nothing is created.
    let cc = Cc::new("nocert-cc")
        .selector(json!({"matchLabels": {"cert": "none"}}))
        .no_strategy()
        .sync_url(&hooks.url("sync"))
        .webhook(json!({"caBundle": {"inline": pki.ca_pem}}));
    s.controller(cc).await?;
    s.start_controller();
    s.parent("p", Value::Null).await?;
    let cm = s
        .wait_child_where("p-c", "the child from the HTTPS hook", |_| true)
        .await?;
    assert_eq!(cm["data"]["v"], "over-tls");

    s.parent_labeled("q", json!({"cert": "none"}), Value::Null)
        .await?;
    until("a refused handshake", || hooks.tls_failures() > 0).await?;
    s.wait_event("a SyncError event on q", Some(&ns), |e| {
        e["reason"] == "SyncError" && e["regarding"]["name"] == "q"
    })
    .await?;
    assert!(s.get(&s.configmaps(), "q-c").await?.is_none());
    s.finish().await
}

/// A `kubernetes.io/tls` Secret `name` holding `cert` and `key` (PEM).
fn tls_secret(name: &str, cert: &str, key: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
           "metadata": {"name": name},
           "data": {"tls.crt": base64_encode(cert.as_bytes()),
                    "tls.key": base64_encode(key.as_bytes())}})
}

/// An X.509 v1 client certificate (`openssl x509 -req` without extensions) is presented, as Go
/// presents it; a certificate whose key is not the Secret's key is refused with that cause in the
/// CompositeController's event, not hidden behind "builder error".
#[tokio::test]
async fn v1_client_certificate_and_clear_tls_configuration_errors() -> anyhow::Result<()> {
    let pki = kmeta_tests::tls::Pki::generate()?;
    let hooks = HookServer::start_tls(
        |_, req| Reply::Json(json!({"children": [child(req, "v1-client")]})),
        pki.server_config_accepting_v1_clients()?,
    )
    .await?;
    let mut s = Scenario::new("v1-client")
        .crd("Thing", "things")
        .object(
            "secrets",
            tls_secret("v1", &pki.client_v1_cert_pem, &pki.client_v1_key_pem),
        )
        .object(
            "secrets",
            tls_secret("mismatch", &pki.client_v1_cert_pem, &pki.client_key_pem),
        )
        .prepare()
        .await?;
    let ns = s.ns.clone();
    let client_tls = |secret: &str| {
        json!({"caBundle": {"inline": pki.ca_pem},
               "clientTLS": {"secretRef": {"name": secret, "namespace": ns}}})
    };
    let cc = Cc::new("v1-client-cc")
        .selector(json!({"matchExpressions": [{"key": "cert", "operator": "DoesNotExist"}]}))
        .no_strategy()
        .sync_url(&hooks.url("sync"))
        .webhook(client_tls("v1"));
    s.controller(cc).await?;
    let cc = Cc::new("mismatch-cc")
        .selector(json!({"matchLabels": {"cert": "mismatch"}}))
        .no_strategy()
        .sync_url(&hooks.url("sync"))
        .webhook(client_tls("mismatch"));
    s.controller(cc).await?;
    s.start_controller();
    s.parent("p", Value::Null).await?;
    let cm = s
        .wait_child_where("p-c", "the child from the mTLS hook", |_| true)
        .await?;
    assert_eq!(cm["data"]["v"], "v1-client");
    // waited for by its note: a transient failure to read the Secret is a CreateError of its own
    s.wait_event(
        "CreateError of mismatch-cc naming the mismatch",
        None,
        |e| {
            let note = e["note"].as_str().unwrap_or_default();
            e["reason"] == "CreateError"
                && e["regarding"]["name"] == "mismatch-cc"
                && note.contains("clientTLS")
                && note.contains("does not match")
        },
    )
    .await?;
    s.finish().await
}

/// An X.509 v1 *server* certificate is refused, as Go refuses it (no subjectAltName), and the
/// parent's SyncError event says why.
#[tokio::test]
async fn v1_server_certificate_is_refused_with_its_cause() -> anyhow::Result<()> {
    let pki = kmeta_tests::tls::Pki::generate()?;
    let hooks = HookServer::start_tls(
        |_, req| Reply::Json(json!({"children": [child(req, "v1-server")]})),
        pki.server_v1_config()?,
    )
    .await?;
    let s = Scenario::new("v1-server")
        .crd("Thing", "things")
        .controller(
            Cc::new("v1-server-cc")
                .no_strategy()
                .sync_url(&hooks.url("sync"))
                .webhook(json!({"caBundle": {"inline": pki.ca_pem}})),
        )
        .parent("p", Value::Null)
        .start()
        .await?;
    let ns = s.ns.clone();
    let event = s
        .wait_event("a SyncError event on p", Some(&ns), |e| {
            e["reason"] == "SyncError" && e["regarding"]["name"] == "p"
        })
        .await?;
    let note = event["note"].as_str().unwrap_or_default();
    assert!(note.contains("X.509 v1"), "{note}");
    assert!(s.get(&s.configmaps(), "p-c").await?.is_none());
    s.finish().await
}

/// An HTTPS hook answering HTTP/1.0 without Content-Length and closing without TLS close_notify
/// (Python's `http.server` over `ssl`) is read to the end, as Go reads it; a body cut short the
/// same way still fails, as a decoding error.
#[tokio::test]
async fn close_delimited_https_answer_without_close_notify() -> anyhow::Result<()> {
    let pki = kmeta_tests::tls::Pki::generate()?;
    let body = |req: &Value| {
        serde_json::to_vec(&json!({"children": [child(req, "http-1.0")]})).unwrap_or_default()
    };
    let whole =
        kmeta_tests::tls::CloseDelimitedHook::start(pki.server_config(false)?, body).await?;
    let cut = kmeta_tests::tls::CloseDelimitedHook::start(pki.server_config(false)?, move |req| {
        let b = body(req);
        b[..b.len() / 2].to_vec()
    })
    .await?;
    let ca = json!({"caBundle": {"inline": pki.ca_pem}});
    let mut s = Scenario::new("close-notify")
        .crd("Thing", "things")
        .prepare()
        .await?;
    let ns = s.ns.clone();
    for (name, hook, labels) in [
        (
            "http10-cc",
            &whole,
            json!({"matchExpressions": [{"key": "cut", "operator": "DoesNotExist"}]}),
        ),
        (
            "http10-cut-cc",
            &cut,
            json!({"matchLabels": {"cut": "yes"}}),
        ),
    ] {
        let cc = Cc::new(name)
            .selector(labels)
            .no_strategy()
            .sync_url(&hook.url("sync"))
            .webhook(ca.clone());
        s.controller(cc).await?;
    }
    s.start_controller();
    s.parent("p", Value::Null).await?;
    let cm = s
        .wait_child_where("p-c", "the child from the HTTP/1.0 hook", |_| true)
        .await?;
    assert_eq!(cm["data"]["v"], "http-1.0");
    s.parent_labeled("q", json!({"cut": "yes"}), Value::Null)
        .await?;
    let event = s
        .wait_event("a SyncError event on q", Some(&ns), |e| {
            e["reason"] == "SyncError" && e["regarding"]["name"] == "q"
        })
        .await?;
    let note = event["note"].as_str().unwrap_or_default();
    assert!(note.contains("decoding sync hook response"), "{note}");
    assert!(s.get(&s.configmaps(), "q-c").await?.is_none());
    s.finish().await
}
