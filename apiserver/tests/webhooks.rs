//! Admission webhooks called as kube-apiserver calls them: real HTTP(S) servers in the test
//! process answering `AdmissionReview` v1, configured by `MutatingWebhookConfiguration` and
//! `ValidatingWebhookConfiguration` objects written through the API; and the admission policies
//! in CEL (`ValidatingAdmissionPolicy`, `MutatingAdmissionPolicy` and their bindings).
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

use axum::Json;
use axum::routing::post;
use base64::Engine as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kmeta_apiserver::TestServer;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

fn b64(s: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn answer(req: &Value, allowed: bool, patch: Option<Value>, status: Option<Value>) -> Value {
    let mut resp = json!({"uid": req["request"]["uid"], "allowed": allowed,
        "warnings": ["answered by the test webhook"]});
    if let Some(p) = patch {
        resp["patchType"] = json!("JSONPatch");
        resp["patch"] = json!(b64(p.to_string().as_bytes()));
    }
    if let Some(s) = status {
        resp["status"] = s;
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp})
}

/// Mutating: labels the object `injected: "yes"` (and sets `data.required` if missing).
/// Validating: refuses an object with `data.bad`, naming it. Counts calls.
fn webhook_app(calls: Arc<AtomicUsize>) -> axum::Router {
    let c1 = calls.clone();
    let c2 = calls;
    axum::Router::new()
        .route(
            "/mutate",
            post(move |Json(req): Json<Value>| {
                c1.fetch_add(1, Ordering::SeqCst);
                async move {
                    let obj = &req["request"]["object"];
                    let mut patch = vec![];
                    if obj["metadata"]["labels"].is_null() {
                        patch.push(json!({"op": "add", "path": "/metadata/labels", "value": {}}));
                    }
                    patch.push(json!({"op": "add", "path": "/metadata/labels/injected", "value": "yes"}));
                    Json(answer(&req, true, Some(Value::Array(patch)), None))
                }
            }),
        )
        .route(
            "/validate",
            post(move |Json(req): Json<Value>| {
                c2.fetch_add(1, Ordering::SeqCst);
                async move {
                    let obj = &req["request"]["object"];
                    if obj["data"]["bad"].is_string() {
                        let status = json!({"code": 403, "reason": "Forbidden",
                            "message": format!("{} carries bad data", obj["metadata"]["name"].as_str().unwrap_or_default())});
                        return Json(answer(&req, false, None, Some(status)));
                    }
                    // the validating webhook sees what mutation made of the object
                    assert_eq!(obj["metadata"]["labels"]["injected"], "yes", "{obj}");
                    Json(answer(&req, true, None, None))
                }
            }),
        )
}

async fn serve_http(app: axum::Router) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    format!("http://{addr}")
}

fn rule(resources: &[&str]) -> Value {
    json!([{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
        "resources": resources}])
}

async fn create_config(
    s: &TestServer,
    kind: &str,
    name: &str,
    webhooks: Value,
    annotations: Value,
) {
    let (plural, gvk) = match kind {
        "MutatingWebhookConfiguration" => ("mutatingwebhookconfigurations", kind),
        _ => ("validatingwebhookconfigurations", kind),
    };
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", gvk),
        plural,
    );
    let api: Api<DynamicObject> = Api::all_with(s.client(), &ar);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
        "metadata": {"name": name, "annotations": annotations}, "webhooks": webhooks}))
    .unwrap();
    tokio::time::timeout(T, api.create(&PostParams::default(), &obj))
        .await
        .unwrap()
        .unwrap();
}

fn hook(name: &str, client: Value, rules: Value) -> Value {
    json!({"name": name, "clientConfig": client, "rules": rules, "sideEffects": "None",
        "admissionReviewVersions": ["v1"]})
}

fn cm(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap()
}

/// POSTs a ConfigMap raw, for the answer's `Warning` headers.
async fn create_raw(s: &TestServer, body: &ConfigMap) -> (u16, Vec<String>, Value) {
    let req = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).unwrap())
        .unwrap();
    let resp = tokio::time::timeout(T, s.client().send(req.map(kube::client::Body::from)))
        .await
        .unwrap()
        .unwrap();
    let code = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    (code, warnings, serde_json::from_slice(&body).unwrap())
}

#[tokio::test]
async fn mutating_then_validating_webhooks_are_called_in_order_with_warnings() {
    let s = TestServer::start().await.unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let url = serve_http(webhook_app(calls.clone())).await;
    create_config(
        &s,
        "MutatingWebhookConfiguration",
        "inject",
        json!([hook(
            "inject.example.com",
            json!({"url": format!("{url}/mutate")}),
            rule(&["configmaps"])
        )]),
        json!({}),
    )
    .await;
    create_config(
        &s,
        "ValidatingWebhookConfiguration",
        "deny",
        json!([hook(
            "deny.example.com",
            json!({"url": format!("{url}/validate")}),
            rule(&["configmaps"])
        )]),
        json!({}),
    )
    .await;

    let (code, warnings, obj) = create_raw(&s, &cm("good", json!({"k": "v"}))).await;
    assert_eq!(code, 201, "{obj}");
    assert_eq!(obj["metadata"]["labels"]["injected"], "yes");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "one mutating and one validating call"
    );
    assert_eq!(
        warnings
            .iter()
            .filter(|w| w.contains("answered by the test webhook"))
            .count(),
        2,
        "{warnings:?}"
    );

    let (code, _, status) = create_raw(&s, &cm("evil", json!({"bad": "x"}))).await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status["message"],
        "admission webhook \"deny.example.com\" denied the request: evil carries bad data"
    );
    let api: Api<ConfigMap> = Api::default_namespaced(s.client());
    assert!(
        api.get_opt("evil").await.unwrap().is_none(),
        "a refused object is not stored"
    );

    // an update goes through both again, and the label survives a PUT without it
    let mut good = api.get("good").await.unwrap();
    good.metadata.labels = None;
    good.data = Some([("k".to_string(), "w".to_string())].into());
    let updated = api
        .replace("good", &PostParams::default(), &good)
        .await
        .unwrap();
    assert_eq!(updated.metadata.labels.unwrap()["injected"], "yes");
    // a resource the rules do not name is not sent
    let before = calls.load(Ordering::SeqCst);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::default_namespaced(s.client());
    let secret = serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), before);
}

#[tokio::test]
async fn failure_policy_decides_what_an_unreachable_webhook_does() {
    let s = TestServer::start().await.unwrap();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut ignore = hook(
        "ignore.example.com",
        json!({"url": format!("http://{dead}/")}),
        rule(&["configmaps"]),
    );
    ignore["failurePolicy"] = json!("Ignore");
    ignore["timeoutSeconds"] = json!(2);
    create_config(
        &s,
        "ValidatingWebhookConfiguration",
        "a-ignore",
        json!([ignore]),
        json!({}),
    )
    .await;
    let (code, _, obj) = create_raw(&s, &cm("one", json!({}))).await;
    assert_eq!(code, 201, "{obj}");

    let fail = hook(
        "fail.example.com",
        json!({"url": format!("http://{dead}/")}),
        rule(&["configmaps"]),
    );
    create_config(
        &s,
        "ValidatingWebhookConfiguration",
        "b-fail",
        json!([fail]),
        json!({}),
    )
    .await;
    let (code, _, status) = create_raw(&s, &cm("two", json!({}))).await;
    assert_eq!(code, 500, "{status}");
    let msg = status["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Internal error occurred: failed calling webhook \"fail.example.com\": failed to call webhook: Post"),
        "{msg}"
    );
}

/// A `clientConfig.service` webhook over HTTPS: called at the address the configuration's
/// `kmeta.dev/service-address` annotation names, its certificate checked against `caBundle`
/// for the service's DNS name; without the annotation the call fails (failurePolicy Fail).
#[tokio::test]
async fn a_service_webhook_is_called_over_https_at_its_configured_address() {
    let s = TestServer::start().await.unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let (addr, ca_pem) = serve_https(webhook_app(calls.clone()), "injector.mesh.svc").await;
    let service = json!({"service": {"namespace": "mesh", "name": "injector", "path": "/mutate"},
        "caBundle": b64(ca_pem.as_bytes())});
    create_config(
        &s,
        "MutatingWebhookConfiguration",
        "mesh",
        json!([hook(
            "inject.mesh.io",
            service.clone(),
            rule(&["configmaps"])
        )]),
        json!({"kmeta.dev/service-address": addr}),
    )
    .await;
    let (code, _, obj) = create_raw(&s, &cm("svc", json!({}))).await;
    assert_eq!(code, 201, "{obj}");
    assert_eq!(obj["metadata"]["labels"]["injected"], "yes");
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    create_config(
        &s,
        "MutatingWebhookConfiguration",
        "unresolved",
        json!([hook("nowhere.mesh.io", service, rule(&["configmaps"]))]),
        json!({}),
    )
    .await;
    let (code, _, status) = create_raw(&s, &cm("svc2", json!({}))).await;
    assert_eq!(code, 500, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("kmeta.dev/service-address"),
        "{status}"
    );
}

/// Mutation comes before the schema's validation: a custom resource missing a required field
/// is accepted when a mutating webhook adds it.
#[tokio::test]
async fn schema_validation_runs_after_mutating_webhooks() {
    let s = TestServer::start().await.unwrap();
    let app = axum::Router::new().route(
        "/",
        post(|Json(req): Json<Value>| async move {
            let patch = json!([{"op": "add", "path": "/spec/size", "value": 3}]);
            Json(answer(&req, true, Some(patch), None))
        }),
    );
    let url = serve_http(app).await;
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object", "properties": {"spec": {"type": "object", "required": ["size"],
                    "properties": {"size": {"type": "integer"}}}}}}}]}})).unwrap();
    let crds = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    Api::<DynamicObject>::all_with(s.client(), &crds)
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    let rules = json!([{"operations": ["CREATE"], "apiGroups": ["example.com"], "apiVersions": ["*"],
        "resources": ["things"], "scope": "Namespaced"}]);
    create_config(
        &s,
        "MutatingWebhookConfiguration",
        "sizer",
        json!([hook("size.example.com", json!({"url": url}), rules)]),
        json!({}),
    )
    .await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Thing"),
        "things",
    );
    let things: Api<DynamicObject> = Api::default_namespaced_with(s.client(), &ar);
    let thing: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.com/v1",
        "kind": "Thing", "metadata": {"name": "t"}, "spec": {}}))
    .unwrap();
    let created = things.create(&PostParams::default(), &thing).await.unwrap();
    assert_eq!(created.data["spec"]["size"], 3);
}

/// An HTTPS server for `host` with a certificate from a fresh CA: its address and the CA's PEM.
async fn serve_https(app: axum::Router, host: &str) -> (String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![host.to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = l.accept().await else {
                return;
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
            });
        }
    });
    (addr, ca.pem())
}

async fn create_admission(s: &TestServer, kind: &str, plural: &str, obj: Value) {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        plural,
    );
    let api: Api<DynamicObject> = Api::all_with(s.client(), &ar);
    let mut obj = obj;
    obj["apiVersion"] = json!("admissionregistration.k8s.io/v1");
    obj["kind"] = json!(kind);
    tokio::time::timeout(
        T,
        api.create(
            &PostParams::default(),
            &serde_json::from_value(obj).unwrap(),
        ),
    )
    .await
    .unwrap()
    .unwrap();
}

/// A ValidatingAdmissionPolicy bound with `Deny` and `Warn`, with a ConfigMap as its params, and
/// a MutatingAdmissionPolicy labelling ConfigMaps: the mutation is seen by the validation, a
/// refusal is worded as kube-apiserver's, a warning is a `Warning` header.
#[tokio::test]
async fn admission_policies_mutate_then_validate() {
    let s = TestServer::start().await.unwrap();
    let rules = json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]});
    create_admission(
        &s,
        "MutatingAdmissionPolicy",
        "mutatingadmissionpolicies",
        json!({
        "metadata": {"name": "stamp"}, "spec": {"matchConstraints": rules, "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                "Object{metadata: Object.metadata{labels: {'stamped': 'yes'}}}"}}]}}),
    )
    .await;
    create_admission(
        &s,
        "MutatingAdmissionPolicyBinding",
        "mutatingadmissionpolicybindings",
        json!({
        "metadata": {"name": "stamp"}, "spec": {"policyName": "stamp"}}),
    )
    .await;
    create_admission(
        &s,
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        json!({
        "metadata": {"name": "size"}, "spec": {"matchConstraints": rules, "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "validations": [
                {"expression": "object.metadata.labels.stamped == 'yes'", "message": "not stamped"},
                {"expression": "!has(object.data) || size(object.data) <= int(params.data.max)",
                 "messageExpression": "'at most ' + params.data.max + ' keys'"}]}}),
    )
    .await;
    // the params themselves are ConfigMaps: a binding for them excluded by name
    create_admission(&s, "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings", json!({
        "metadata": {"name": "size-default"}, "spec": {"policyName": "size",
            "validationActions": ["Deny", "Warn"],
            "paramRef": {"name": "limits", "namespace": "kube-system", "parameterNotFoundAction": "Deny"},
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "default"}}}}})).await;
    let (code, _, status) = create_raw(&s, &cm("early", json!({"a": "1"}))).await;
    assert_eq!(code, 422, "{status}");
    assert!(status["message"].as_str().unwrap().ends_with(
        "ValidatingAdmissionPolicy 'size' with binding 'size-default' denied request: no params found for policy binding with `Deny` parameterNotFoundAction"), "{status}");
    let limits: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "limits"}, "data": {"max": "2"}}))
            .unwrap();
    Api::<ConfigMap>::namespaced(s.client(), "kube-system")
        .create(&PostParams::default(), &limits)
        .await
        .unwrap();

    let (code, warnings, obj) = create_raw(&s, &cm("ok", json!({"a": "1"}))).await;
    assert_eq!(code, 201, "{obj}");
    assert_eq!(obj["metadata"]["labels"]["stamped"], "yes");
    assert!(warnings.is_empty(), "{warnings:?}");
    let (code, warnings, status) =
        create_raw(&s, &cm("big", json!({"a": "1", "b": "2", "c": "3"}))).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "configmaps \"big\" is forbidden: ValidatingAdmissionPolicy 'size' with binding 'size-default' denied request: at most 2 keys"
    );
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("Validation failed for ValidatingAdmissionPolicy 'size' with binding 'size-default': at most 2 keys"), "{warnings:?}");
}

/// DELETE: a validating webhook and a ValidatingAdmissionPolicy see the stored object as
/// `oldObject` (no `object`) and may refuse; a webhook's `matchConditions` narrow what it sees.
#[tokio::test]
async fn deletes_are_reviewed_by_validating_webhooks_and_policies() {
    let s = TestServer::start().await.unwrap();
    let reviews = Arc::new(AtomicUsize::new(0));
    let seen = reviews.clone();
    let app = axum::Router::new().route(
        "/",
        post(move |Json(req): Json<Value>| {
            seen.fetch_add(1, Ordering::SeqCst);
            async move {
                assert_eq!(req["request"]["operation"], "DELETE");
                assert!(req["request"]["object"].is_null());
                let old = &req["request"]["oldObject"];
                let protected = old["metadata"]["labels"]["protected"] == "webhook";
                let status = json!({"code": 403, "reason": "Forbidden", "message": "protected by the webhook"});
                Json(answer(&req, !protected, None, protected.then_some(status)))
            }
        }),
    );
    let url = serve_http(app).await;
    let mut w = hook(
        "guard.example.com",
        json!({"url": url}),
        json!([{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]),
    );
    w["matchConditions"] =
        json!([{"name": "labelled", "expression": "has(oldObject.metadata.labels)"}]);
    create_config(
        &s,
        "ValidatingWebhookConfiguration",
        "guard",
        json!([w]),
        json!({}),
    )
    .await;
    create_admission(
        &s,
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        json!({
        "metadata": {"name": "keep"}, "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["DELETE"], "resources": ["configmaps"]}]},
            "validations": [{"expression": "oldObject.metadata.name != 'keep-me'",
                "message": "keep-me stays", "reason": "Forbidden"}]}}),
    )
    .await;
    create_admission(&s, "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings", json!({
        "metadata": {"name": "keep"}, "spec": {"policyName": "keep", "validationActions": ["Deny"]}})).await;
    let api: Api<ConfigMap> = Api::default_namespaced(s.client());
    for (name, labels) in [
        ("plain", json!(null)),
        ("guarded", json!({"protected": "webhook"})),
        ("keep-me", json!(null)),
    ] {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    api.delete("plain", &Default::default()).await.unwrap();
    assert_eq!(
        reviews.load(Ordering::SeqCst),
        0,
        "matchConditions: an unlabelled object is not sent"
    );
    let e = api
        .delete("guarded", &Default::default())
        .await
        .unwrap_err();
    let kube::Error::Api(st) = e else {
        panic!("{e:?}")
    };
    assert_eq!(st.code, 403);
    assert_eq!(
        st.message,
        "admission webhook \"guard.example.com\" denied the request: protected by the webhook"
    );
    let e = api
        .delete("keep-me", &Default::default())
        .await
        .unwrap_err();
    let kube::Error::Api(st) = e else {
        panic!("{e:?}")
    };
    assert_eq!(st.code, 403, "{st:?}");
    assert!(
        st.message.ends_with(
            "ValidatingAdmissionPolicy 'keep' with binding 'keep' denied request: keep-me stays"
        ),
        "{st:?}"
    );
    assert!(
        api.get_opt("guarded").await.unwrap().is_some()
            && api.get_opt("keep-me").await.unwrap().is_some()
    );
}
