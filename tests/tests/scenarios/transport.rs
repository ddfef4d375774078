//! Hook transport: ETag caching (If-None-Match / 304), basic auth from a Secret, the response
//! size cap, HTTPS with a CA bundle and a client certificate (mTLS).

use kmeta::ManagerConfig;
use kmeta::hook::{HookOptions, base64_encode};
use kmeta_tests::*;
use serde_json::{Value, json};

async fn world(env: &mut Env) -> anyhow::Result<String> {
    install_kmeta_crds(env).await?;
    let group = format!("{}.kmeta.test", env.id);
    env.create_crd(crd(&group, "Thing", "things", true)).await?;
    Ok(format!("{group}/v1"))
}

fn child(req: &Value, v: &str) -> Value {
    let name = req["parent"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": format!("{name}-c")}, "data": {"v": v}})
}

#[tokio::test]
async fn etag_from_the_hook_is_sent_back_as_if_none_match() -> anyhow::Result<()> {
    let mut env = Env::new("etag").await?;
    let av = world(&mut env).await?;
    // the hook answers 304 whenever the client presents the ETag of its last answer
    let hooks = HookServer::start(|_, req| {
        let tag = format!("\"{}\"", req["parent"]["metadata"]["generation"]);
        Reply::Headers(
            vec![("etag".into(), tag)],
            Box::new(Reply::Json(json!({"children": [child(req, "cached")]}))),
        )
    })
    .await?;
    let spec = json!({
        "parentResource": {"apiVersion": av, "resource": "things"},
        "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                            "updateStrategy": {"method": "InPlace"}}],
        "hooks": {"sync": {"webhook": {"url": hooks.url("sync"), "etag": {"enabled": true}}}},
        "generateSelector": true
    });
    env.create(
        "compositecontrollers",
        composite_controller(&env, "etag-cc", spec),
    )
    .await?;
    env.start_controller();
    let ns = env.ns.clone();
    env.create(
        "things",
        json!({"apiVersion": av, "kind": "Thing", "metadata": {"name": "p", "namespace": ns}}),
    )
    .await?;
    let cms = env.api("v1", "ConfigMap", "configmaps", Some(&ns));
    eventually("child", TIMEOUT, || async { env.get(&cms, "p-c").await }).await?;
    // later calls for the same parent carry the ETag the hook sent
    let things = env.api(&av, "Thing", "things", Some(&ns));
    let syncs = env.syncs("etag-cc");
    env.merge_patch(
        &things,
        "p",
        json!({"metadata": {"annotations": {"poke": "1"}}}),
    )
    .await?;
    env.wait_syncs("etag-cc", syncs).await?;
    let tags = hooks.header("sync", "if-none-match");
    assert!(
        tags.iter().skip(1).any(|t| t.as_deref() == Some("\"1\"")),
        "no If-None-Match sent: {tags:?}"
    );
    env.finish().await
}

#[tokio::test]
async fn not_modified_answers_reuse_the_cached_body() -> anyhow::Result<()> {
    let mut env = Env::new("etag304").await?;
    let av = world(&mut env).await?;
    // first answer with a body and an ETag; afterwards only 304 Not Modified
    let hooks = HookServer::start(|_, req| {
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
    .await?;
    let spec = json!({
        "parentResource": {"apiVersion": av, "resource": "things"},
        "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
        "hooks": {"sync": {"webhook": {"url": hooks.url("sync"), "etag": {"enabled": true}}}},
        "generateSelector": true
    });
    env.create(
        "compositecontrollers",
        composite_controller(&env, "e304-cc", spec),
    )
    .await?;
    env.start_controller();
    let ns = env.ns.clone();
    env.create(
        "things",
        json!({"apiVersion": av, "kind": "Thing", "metadata": {"name": "p", "namespace": ns}}),
    )
    .await?;
    let cms = env.api("v1", "ConfigMap", "configmaps", Some(&ns));
    eventually("child", TIMEOUT, || async { env.get(&cms, "p-c").await }).await?;
    let things = env.api(&av, "Thing", "things", Some(&ns));
    let errors = env.metrics.reconcile_count("e304-cc", "error");
    let syncs = env.syncs("e304-cc");
    env.merge_patch(
        &things,
        "p",
        json!({"metadata": {"annotations": {"poke": "1"}}}),
    )
    .await?;
    env.wait_syncs("e304-cc", syncs).await?;
    // the 304 was served from the cache: no failure, the child is still there
    assert_eq!(env.metrics.reconcile_count("e304-cc", "error"), errors);
    assert!(env.get(&cms, "p-c").await?.is_some());
    env.finish().await
}

#[tokio::test]
async fn basic_auth_from_a_secret() -> anyhow::Result<()> {
    let mut env = Env::new("basic-auth").await?;
    let av = world(&mut env).await?;
    let hooks = HookServer::start(|_, _| Reply::Json(json!({"children": []}))).await?;
    let ns = env.ns.clone();
    env.create(
        "secrets",
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "hook-basic", "namespace": ns},
               "data": {"username": "YWxpY2U=", "password": "czNjcmV0"}}),
    )
    .await?;
    let spec = json!({
        "parentResource": {"apiVersion": av, "resource": "things"},
        "hooks": {"sync": {"webhook": {"url": hooks.url("sync"),
            "basicAuth": {"secretRef": {"name": "hook-basic", "namespace": ns}}}}},
        "generateSelector": true
    });
    env.create(
        "compositecontrollers",
        composite_controller(&env, "basic-cc", spec),
    )
    .await?;
    env.start_controller();
    env.create(
        "things",
        json!({"apiVersion": av, "kind": "Thing", "metadata": {"name": "p", "namespace": ns}}),
    )
    .await?;
    eventually("an authenticated call", TIMEOUT, || async {
        Ok(hooks.authorizations("sync").first().cloned())
    })
    .await?;
    // base64("alice:s3cret")
    assert_eq!(
        hooks.authorizations("sync")[0].as_deref(),
        Some("Basic YWxpY2U6czNjcmV0")
    );
    env.finish().await
}

#[tokio::test]
async fn oversized_responses_are_rejected_and_change_nothing() -> anyhow::Result<()> {
    let mut env = Env::new("big").await?;
    let av = world(&mut env).await?;
    let hooks = HookServer::start(|_, req| {
        let big = "x".repeat(if req["parent"]["spec"]["big"] == true {
            8192
        } else {
            1
        });
        Reply::Json(json!({"children": [child(req, &big)]}))
    })
    .await?;
    let spec = json!({
        "parentResource": {"apiVersion": av, "resource": "things"},
        "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                            "updateStrategy": {"method": "InPlace"}}],
        "hooks": {"sync": {"webhook": {"url": hooks.url("sync")}}},
        "generateSelector": true
    });
    env.create(
        "compositecontrollers",
        composite_controller(&env, "big-cc", spec),
    )
    .await?;
    env.start_controller_with(ManagerConfig {
        hook: HookOptions {
            max_response_bytes: 4096,
        },
        ..ManagerConfig::default()
    });
    let ns = env.ns.clone();
    env.create(
        "things",
        json!({"apiVersion": av, "kind": "Thing", "metadata": {"name": "p", "namespace": ns},
               "spec": {"big": false}}),
    )
    .await?;
    let cms = env.api("v1", "ConfigMap", "configmaps", Some(&ns));
    let small = eventually("child", TIMEOUT, || async { env.get(&cms, "p-c").await }).await?;
    let things = env.api(&av, "Thing", "things", Some(&ns));
    let errors = env.metrics.reconcile_count("big-cc", "error");
    env.merge_patch(&things, "p", json!({"spec": {"big": true}}))
        .await?;
    let p = eventually("a failure condition naming the cap", TIMEOUT, || async {
        Ok(env.get(&things, "p").await?.filter(|p| {
            p["status"]["conditions"][0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("larger than 4096 bytes"))
        }))
    })
    .await?;
    assert!(
        env.metrics.reconcile_count("big-cc", "error") > errors,
        "{p}"
    );
    let now = env.get(&cms, "p-c").await?.unwrap();
    assert_eq!(
        now["metadata"]["resourceVersion"],
        small["metadata"]["resourceVersion"]
    );
    env.finish().await
}

#[tokio::test]
async fn https_hook_with_ca_bundle_and_client_certificate() -> anyhow::Result<()> {
    let mut env = Env::new("mtls").await?;
    let av = world(&mut env).await?;
    let pki = kmeta_tests::tls::Pki::generate()?;
    // The hook only accepts clients presenting a certificate from the test CA (mTLS).
    let hooks = HookServer::start_tls(
        |_, req| Reply::Json(json!({"children": [child(req, "over-tls")]})),
        pki.server_config(true)?,
    )
    .await?;
    let ns = env.ns.clone();
    env.create(
        "secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
               "metadata": {"name": "hook-client", "namespace": ns},
               "data": {"tls.crt": base64_encode(pki.client_cert_pem.as_bytes()),
                        "tls.key": base64_encode(pki.client_key_pem.as_bytes())}}),
    )
    .await?;
    env.create(
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "hook-ca", "namespace": ns},
               "data": {"ca.crt": pki.ca_pem}}),
    )
    .await?;
    let children = json!([{"apiVersion": "v1", "resource": "configmaps"}]);
    // With the CA (from a ConfigMap) and the client certificate (from a Secret): children appear.
    let spec = json!({
        "parentResource": {"apiVersion": av, "resource": "things",
                           "labelSelector": {"matchExpressions":
                               [{"key": "cert", "operator": "DoesNotExist"}]}},
        "childResources": children,
        "hooks": {"sync": {"webhook": {"url": hooks.url("sync"),
            "caBundle": {"configMapRef": {"name": "hook-ca", "namespace": ns}},
            "clientTLS": {"secretRef": {"name": "hook-client", "namespace": ns}}}}},
        "generateSelector": true
    });
    env.create(
        "compositecontrollers",
        composite_controller(&env, "mtls-cc", spec),
    )
    .await?;
    // Without a client certificate (CA inline): the handshake fails, nothing is created.
    let spec = json!({
        "parentResource": {"apiVersion": av, "resource": "things",
                           "labelSelector": {"matchLabels": {"cert": "none"}}},
        "childResources": children,
        "hooks": {"sync": {"webhook": {"url": hooks.url("sync"),
            "caBundle": {"inline": pki.ca_pem}}}},
        "generateSelector": true
    });
    env.create(
        "compositecontrollers",
        composite_controller(&env, "nocert-cc", spec),
    )
    .await?;
    env.start_controller();
    env.create(
        "things",
        json!({"apiVersion": av, "kind": "Thing", "metadata": {"name": "p", "namespace": ns}}),
    )
    .await?;
    let cms = env.api("v1", "ConfigMap", "configmaps", Some(&ns));
    let cm = eventually("the child from the HTTPS hook", TIMEOUT, || async {
        env.get(&cms, "p-c").await
    })
    .await?;
    assert_eq!(cm["data"]["v"], "over-tls");

    env.create(
        "things",
        json!({"apiVersion": av, "kind": "Thing",
               "metadata": {"name": "q", "namespace": ns, "labels": {"cert": "none"}}}),
    )
    .await?;
    eventually("a refused handshake", TIMEOUT, || async {
        Ok((hooks.tls_failures() > 0).then_some(()))
    })
    .await?;
    env.wait_event("a SyncError event on q", Some(&ns), |e| {
        e["reason"] == "SyncError" && e["regarding"]["name"] == "q"
    })
    .await?;
    assert!(env.get(&cms, "q-c").await?.is_none());
    env.finish().await
}
