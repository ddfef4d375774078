//! Admission as a cluster does it, with real webhooks: HTTP servers in the test process that
//! kmeta-apiserver calls with `AdmissionReview`s, configured by the `MutatingWebhookConfiguration`
//! and `ValidatingWebhookConfiguration` objects a user would apply.
//!
//! (a) a hook child violating its CRD's CEL rule is refused and reported; (b) a mutating
//! webhook puts a sidecar at index 0 of a Deployment child's containers and a
//! MutatingAdmissionPolicy appends another: kmeta's three-way merge keeps both across image
//! updates, and a resync writes nothing (so the webhook is not even called); (c) a validating
//! webhook refuses one child of five (403): the other four are written and the refusal is
//! reported on the parent, with no RBAC grant suggested.

use axum::Json;
use axum::routing::post;
use base64::Engine as _;
use kmeta_tests::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An `AdmissionReview` answer to `review`.
fn answer(review: &Value, allowed: bool, patch: Option<Value>, status: Option<Value>) -> Value {
    let mut resp = json!({"uid": review["request"]["uid"], "allowed": allowed});
    if let Some(p) = patch {
        resp["patchType"] = json!("JSONPatch");
        resp["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(p.to_string()));
    }
    if let Some(s) = status {
        resp["status"] = s;
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp})
}

/// Serves `app` on a free local port; its base URL.
async fn serve(app: axum::Router) -> anyhow::Result<String> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", l.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    Ok(url)
}

fn sidecar() -> Value {
    json!({"name": "proxy", "image": "envoy:1.30", "ports": [{"containerPort": 15001}]})
}

/// The injector: a JSON patch inserting the sidecar at index 0 of the pod template's containers
/// of a Deployment that has none, and nothing otherwise (what a service-mesh injector does).
/// Counts the reviews it answers.
fn injector(reviews: Arc<AtomicUsize>) -> axum::Router {
    axum::Router::new().route(
        "/inject",
        post(move |Json(review): Json<Value>| {
            reviews.fetch_add(1, Ordering::SeqCst);
            async move {
                let cs = review["request"]["object"]
                    .pointer("/spec/template/spec/containers")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let patch = (!cs.iter().any(|c| c["name"] == "proxy")).then(|| {
                    json!([{"op": "add", "path": "/spec/template/spec/containers/0",
                        "value": sidecar()}])
                });
                Json(answer(&review, true, patch, None))
            }
        }),
    )
}

/// The hook: one Deployment per App, running the parent's image.
fn deployment_hook(_hook: &str, req: &Value) -> Reply {
    let p = &req["parent"];
    let name = p["metadata"]["name"].as_str().unwrap_or_default();
    Reply::Json(json!({"children": [{
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": p["spec"]["image"]}]}}}
    }]}))
}

fn containers(d: &Value) -> Vec<(String, String)> {
    d.pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
                    (s("name"), s("image"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn proxy_then_app(image: &str) -> Vec<(String, String)> {
    vec![
        ("proxy".into(), "envoy:1.30".into()),
        ("app".into(), image.into()),
        ("log-agent".into(), "fluent-bit:3".into()),
    ]
}

/// A MutatingAdmissionPolicy (with its binding) adding a `log-agent` container to every
/// Deployment in namespace `ns`, as an ApplyConfiguration (merged by container name).
fn log_agent_policy(name: &str, ns: &str) -> (Value, Value) {
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy", "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail", "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}},
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                "Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: 'log-agent', image: 'fluent-bit:3'}]}}}}"}}]}});
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name}});
    (policy, binding)
}

/// A webhook configuration object of `kind` named `name` with one webhook.
fn configuration(kind: &str, name: &str, webhook: Value) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
        "metadata": {"name": name}, "webhooks": [webhook]})
}

/// True (after saying so) when the scenario runs against a real cluster, which cannot reach a
/// webhook served in the test process.
fn needs_in_process_server(s: &Running, name: &str) -> bool {
    if s.server().is_some() {
        return false;
    }
    eprintln!("SKIPPED {name}: a real cluster cannot call the test process's webhook");
    true
}

#[tokio::test]
async fn sidecars_from_a_webhook_and_a_policy_survive_image_updates_and_resyncs_write_nothing()
-> anyhow::Result<()> {
    let mut s = Scenario::new("adm-inject")
        .crd("App", "apps")
        .hook(deployment_hook)
        .prepare()
        .await?;
    if needs_in_process_server(&s, "adm-inject") {
        return s.finish().await;
    }
    let reviews = Arc::new(AtomicUsize::new(0));
    let url = serve(injector(reviews.clone())).await?;
    // only the scenario's namespace, as a mesh injects only labelled namespaces
    let webhook = json!({"name": "inject.mesh.example.com",
        "clientConfig": {"url": format!("{url}/inject")},
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["apps"],
            "apiVersions": ["v1"], "resources": ["deployments"]}],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": s.ns}},
        "sideEffects": "None", "admissionReviewVersions": ["v1"],
        "reinvocationPolicy": "IfNeeded"});
    let mwc = configuration(
        "MutatingWebhookConfiguration",
        &format!("{}-inject", s.id),
        webhook,
    );
    s.create("mutatingwebhookconfigurations", mwc).await?;
    let (policy, binding) = log_agent_policy(&format!("{}-log-agent", s.id), &s.ns.clone());
    s.create("mutatingadmissionpolicies", policy).await?;
    s.create("mutatingadmissionpolicybindings", binding).await?;
    s.controller(Cc::new("inject-cc").patch(json!({"childResources": [
        {"apiVersion": "apps/v1", "resource": "deployments", "updateStrategy": {"method": "InPlace"}}
    ]})))
    .await?;
    s.start_controller();
    s.parent("web", json!({"image": "web:1"})).await?;
    let deployments = s.api("apps/v1", "Deployment", "deployments", Some(&s.ns));
    let d = s
        .wait_for(&deployments, "web", "the Deployment child", |_| true)
        .await?;
    assert_eq!(
        containers(&d),
        proxy_then_app("web:1"),
        "injected at create: {d}"
    );

    // the image changes: the child gets it, the sidecar stays first
    s.merge_patch(&s.parents(), "web", json!({"spec": {"image": "web:2"}}))
        .await?;
    let d = s
        .wait_for(&deployments, "web", "the new image", |d| {
            containers(d).iter().any(|c| c.1 == "web:2")
        })
        .await?;
    assert_eq!(
        containers(&d),
        proxy_then_app("web:2"),
        "after the update: {d}"
    );

    // a resync: nothing written, so no review either
    let before_rv = d["metadata"]["resourceVersion"].clone();
    let server = s.server().map(|srv| srv.counters());
    let reviews_before = reviews.load(Ordering::SeqCst);
    let touch = json!({"metadata": {"annotations": {"kmeta.test/touch": "1"}}});
    s.patch_and_sync("inject-cc", &s.parents(), "web", touch)
        .await?;
    let d = s.get(&deployments, "web").await?.unwrap_or_default();
    assert_eq!(
        d["metadata"]["resourceVersion"], before_rv,
        "the resync rewrote the child"
    );
    if let (Some(srv), Some(before)) = (s.server(), server) {
        let delta = srv.counters().since(&before);
        assert_eq!(
            delta.writes_to("deployments"),
            0,
            "writes during the resync: {delta:?}"
        );
    }
    assert_eq!(
        reviews.load(Ordering::SeqCst),
        reviews_before,
        "a resync sent a review"
    );
    s.finish().await
}

/// The hook: five ConfigMaps `<parent>-0` … `<parent>-4`.
fn five_children(_hook: &str, req: &Value) -> Reply {
    let name = req["parent"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let children: Vec<Value> = (0..5)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{name}-{i}")}, "data": {"i": i.to_string()}})
        })
        .collect();
    Reply::Json(json!({"children": children}))
}

/// A validating webhook refusing ConfigMaps whose name ends in `-3`, with a message naming it.
fn refuse_the_fourth() -> axum::Router {
    axum::Router::new().route(
        "/validate",
        post(|Json(review): Json<Value>| async move {
            let name = review["request"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let (allowed, status) = if name.ends_with("-3") {
                let message = format!("{name} is reserved by policy");
                (
                    false,
                    Some(json!({"code": 403, "reason": "Forbidden", "message": message})),
                )
            } else {
                (true, None)
            };
            Json(answer(&review, allowed, None, status))
        }),
    )
}

#[tokio::test]
async fn a_validating_webhook_refusing_one_child_of_five_leaves_four_written_and_is_reported()
-> anyhow::Result<()> {
    let mut s = Scenario::new("adm-refuse")
        .crd("Thing", "things")
        .hook(five_children)
        .prepare()
        .await?;
    if needs_in_process_server(&s, "adm-refuse") {
        return s.finish().await;
    }
    let url = serve(refuse_the_fourth()).await?;
    let webhook = json!({"name": "policy.example.com",
        "clientConfig": {"url": format!("{url}/validate")},
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""],
            "apiVersions": ["v1"], "resources": ["configmaps"], "scope": "Namespaced"}],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": s.ns}},
        "sideEffects": "None", "admissionReviewVersions": ["v1"]});
    let vwc = configuration(
        "ValidatingWebhookConfiguration",
        &format!("{}-policy", s.id),
        webhook,
    );
    s.create("validatingwebhookconfigurations", vwc).await?;
    s.controller(Cc::new("refuse-cc")).await?;
    s.start_controller();
    s.parent("t", json!({})).await?;
    let cms = s.configmaps();
    for i in [0, 1, 2, 4] {
        s.wait_for(&cms, &format!("t-{i}"), "an admitted child", |_| true)
            .await?;
    }
    let refusal =
        "admission webhook \"policy.example.com\" denied the request: t-3 is reserved by policy";
    let p = s
        .wait_parent("t", "Synced=False naming the refusal", |p| {
            p["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter().any(|c| {
                    c["type"] == "Synced"
                        && c["status"] == "False"
                        && c["message"].as_str().is_some_and(|m| m.contains(refusal))
                })
            })
        })
        .await?;
    let ev = s
        .wait_event("a Warning event naming the refusal", Some(&s.ns), |e| {
            e["regarding"]["name"] == "t"
                && e["type"] == "Warning"
                && e["note"].as_str().is_some_and(|n| n.contains(refusal))
        })
        .await?;
    assert!(
        s.get(&cms, "t-3").await?.is_none(),
        "the refused child was stored: {p}"
    );
    // a 403 from admission is no missing permission: no role is suggested
    let note = ev["note"].as_str().unwrap_or_default();
    assert!(!note.contains("grant it"), "{note}");
    eprintln!("reported as {}: {}", ev["reason"], ev["note"]);
    s.finish().await
}

/// The hook: one `Workload` per parent, with the parent's replicas.
fn workload_hook(_hook: &str, req: &Value) -> Reply {
    let p = &req["parent"];
    let name = p["metadata"]["name"].as_str().unwrap_or_default();
    let av = p["apiVersion"].as_str().unwrap_or_default();
    Reply::Json(json!({"children": [{"apiVersion": av, "kind": "Workload",
        "metadata": {"name": name}, "spec": {"replicas": p["spec"]["replicas"]}}]}))
}

/// (a) A hook child violating its CRD's CEL rule: the write is refused as by kube-apiserver
/// (422, the rule's message), nothing is stored, `Synced=False` names the message; once the
/// parent asks for what the rule allows, the child is written.
#[tokio::test]
async fn a_child_violating_a_crd_validation_rule_is_refused_and_reported() -> anyhow::Result<()> {
    const MESSAGE: &str = "a Workload runs at most 3 replicas";
    let mut s = Scenario::new("adm-cel")
        .crd("App", "apps")
        .crd_with("Workload", "workloads", |crd| {
            crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] =
                json!([{"rule": "!has(self.spec) || !has(self.spec.replicas) || self.spec.replicas <= 3",
                        "message": MESSAGE}]);
        })
        .hook(workload_hook)
        .prepare()
        .await?;
    s.controller(Cc::new("cel-cc").child("workloads")).await?;
    s.start_controller();
    s.parent("big", json!({"replicas": 5})).await?;
    let p = s
        .wait_parent("big", "Synced=False naming the rule's message", |p| {
            p["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter().any(|c| {
                    c["type"] == "Synced"
                        && c["status"] == "False"
                        && c["message"].as_str().is_some_and(|m| m.contains(MESSAGE))
                })
            })
        })
        .await?;
    let workloads = s.resource("Workload", "workloads");
    assert!(
        s.get(&workloads, "big").await?.is_none(),
        "the refused child was stored: {p}"
    );
    if let Some(server) = s.server() {
        let c = server.counters();
        assert_eq!(c.get("create", "workloads", 201), 0, "{c:?}");
        assert!(c.get("create", "workloads", 422) > 0, "{c:?}");
    }
    s.merge_patch(&s.parents(), "big", json!({"spec": {"replicas": 3}}))
        .await?;
    s.wait_for(&workloads, "big", "the child within the rule", |w| {
        w["spec"]["replicas"] == 3
    })
    .await?;
    s.finish().await
}
