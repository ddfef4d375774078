//! `kmeta rbac` grants what kmeta uses: every request kmeta makes while running a
//! CompositeController (with a rolling child, a finalize hook) and a DecoratorController (with a
//! finalize hook) against kmeta-apiserver is allowed by the ClusterRole generated from their
//! manifests. kmeta-apiserver counts requests by verb and resource; it does not enforce RBAC, so
//! the check is done here, rule by rule.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Context as _;
use kmeta::rbac;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

const MANIFESTS: &str = r"
apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: things}
spec:
  generateSelector: true
  parentResource: {apiVersion: rbac.kmeta.test/v1, resource: things}
  childResources:
  - {apiVersion: v1, resource: configmaps, updateStrategy: {method: RollingInPlace}}
  hooks:
    sync: {webhook: {url: HOOK/sync}}
    finalize: {webhook: {url: HOOK/finalize}}
---
apiVersion: metacontroller.k8s.io/v1alpha1
kind: DecoratorController
metadata: {name: labelled}
spec:
  resources: [{apiVersion: rbac.kmeta.test/v1, resource: things, labelSelector: {matchLabels: {decorate: 'yes'}}}]
  attachments: [{apiVersion: v1, resource: secrets}]
  hooks:
    sync: {webhook: {url: HOOK/decorate}}
    finalize: {webhook: {url: HOOK/finalize}}
";

/// A hook serving the composite sync (one ConfigMap, a status), the decorator sync (one Secret,
/// a label) and both finalize hooks (done).
async fn serve_hooks() -> anyhow::Result<String> {
    use axum::Json;
    use axum::routing::post;
    let sync = |Json(req): Json<Value>| async move {
        let name = req["parent"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Json(json!({"status": {"ok": true}, "children": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-c")}}]}))
    };
    let decorate = |Json(req): Json<Value>| async move {
        let name = req["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Json(json!({"labels": {"decorated": "true"}, "attachments": [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("{name}-s")}}]}))
    };
    let finalize = |Json(_): Json<Value>| async move { Json(json!({"finalized": true})) };
    let app = axum::Router::new()
        .route("/sync", post(sync))
        .route("/decorate", post(decorate))
        .route("/finalize", post(finalize));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(base)
}

fn api(
    client: &kube::Client,
    av: &str,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let (group, version) = av.rsplit_once('/').unwrap_or(("", av));
    let r = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &r),
        None => Api::all_with(client.clone(), &r),
    }
}

async fn create(api: &Api<DynamicObject>, v: Value) -> anyhow::Result<()> {
    api.create(&PostParams::default(), &serde_json::from_value(v)?)
        .await
        .context("create")?;
    Ok(())
}

/// Polls until `check` holds (every 20 ms, 30 s at most).
async fn until<F, Fut>(what: &str, check: F) -> anyhow::Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check().await {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// The requests in `used` that `role` does not allow, but for this test's own deletes.
fn denied(role: &Value, used: &kmeta_apiserver::Counters) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (verb, resource, _) in used.by_key.keys() {
        if verb == "delete" && (resource == "things" || resource == "decoratorcontrollers") {
            continue;
        }
        if !allowed(role, verb, resource) {
            out.insert(format!("{verb} {resource}"));
        }
    }
    out
}

/// Whether the role allows `verb` on `resource` (kmeta-apiserver's counters carry no API group:
/// any group's grant of that resource name counts).
fn allowed(role: &Value, verb: &str, resource: &str) -> bool {
    role["rules"].as_array().into_iter().flatten().any(|r| {
        let has = |k: &str, v: &str| r[k].as_array().is_some_and(|a| a.iter().any(|x| x == v));
        has("resources", resource) && has("verbs", verb)
    })
}

/// The parent kind `Thing` (namespaced, with a status subresource).
async fn create_things_crd(client: &kube::Client) -> anyhow::Result<()> {
    let crds = api(
        client,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        None,
    );
    create(&crds, json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.rbac.kmeta.test"},
        "spec": {"group": "rbac.kmeta.test", "scope": "Namespaced",
            "names": {"kind": "Thing", "plural": "things", "singular": "thing", "listKind": "ThingList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})).await?;
    Ok(())
}

/// A kmeta-apiserver with kmeta's CRDs and `Thing`s, and [`MANIFESTS`] pointing at hooks
/// served here.
async fn prepared() -> anyhow::Result<(kmeta_apiserver::TestServer, kube::Client, String)> {
    let server = kmeta_apiserver::TestServer::start().await?;
    let client = server.client();
    kmeta::manifest::install_crds(&client).await?;
    create_things_crd(&client).await?;
    let manifests = MANIFESTS.replace("HOOK", &serve_hooks().await?);
    Ok((server, client, manifests))
}

#[tokio::test]
async fn the_generated_role_covers_every_request_kmeta_makes() -> anyhow::Result<()> {
    let (server, client, manifests) = prepared().await?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("controllers.yaml");
    std::fs::write(&file, &manifests)?;
    let controllers = rbac::load(std::slice::from_ref(&file))?;
    let role = rbac::cluster_role("kmeta", &rbac::grants(&controllers, &[]));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&manifests)?;
    let cc = api(
        &client,
        "metacontroller.k8s.io/v1alpha1",
        "CompositeController",
        "compositecontrollers",
        None,
    );
    let dc = api(
        &client,
        "metacontroller.k8s.io/v1alpha1",
        "DecoratorController",
        "decoratorcontrollers",
        None,
    );
    create(&cc, docs[0].clone()).await?;
    create(&dc, docs[1].clone()).await?;
    let things = api(
        &client,
        "rbac.kmeta.test/v1",
        "Thing",
        "things",
        Some("default"),
    );
    create(&things, json!({"apiVersion": "rbac.kmeta.test/v1", "kind": "Thing",
        "metadata": {"name": "t", "namespace": "default", "labels": {"decorate": "yes"}}, "spec": {"n": 1}})).await?;

    // from here on, the requests are kmeta's (and this test's reads and one delete)
    let before = server.counters();
    let stop = tokio_util::sync::CancellationToken::new();
    let manager = tokio::spawn(kmeta::reconcile::manager::run(
        client.clone(),
        kmeta::ManagerConfig::default(),
        stop.clone(),
    ));
    let cms = api(&client, "v1", "ConfigMap", "configmaps", Some("default"));
    let secrets = api(&client, "v1", "Secret", "secrets", Some("default"));
    until("the child, the attachment and the status", || async {
        let t = things.get_opt("t").await.ok().flatten();
        cms.get_opt("t-c").await.ok().flatten().is_some()
            && secrets.get_opt("t-s").await.ok().flatten().is_some()
            && t.is_some_and(|t| t.data["status"]["ok"] == true)
    })
    .await?;
    things.delete("t", &DeleteParams::default()).await?;
    until("the parent gone (finalized)", || async {
        things.get_opt("t").await.ok().flatten().is_none()
    })
    .await?;
    dc.delete("labelled", &DeleteParams::default()).await?;
    until("the DecoratorController gone (released)", || async {
        dc.get_opt("labelled").await.ok().flatten().is_none()
    })
    .await?;
    stop.cancel();
    manager.await??;

    let used = server.counters().since(&before);
    let denied = denied(&role, &used);
    assert!(
        denied.is_empty(),
        "not granted: {denied:?}\nrole: {role:#}\nused: {used:?}"
    );
    // and it is least privilege: no wildcard (but the OpenAPI documents' URL prefix), no
    // blanket Secret read
    for rule in role["rules"].as_array().into_iter().flatten() {
        for key in ["apiGroups", "resources", "verbs"] {
            assert!(!rule[key].to_string().contains('*'), "{rule}");
        }
        if let Some(urls) = rule.get("nonResourceURLs") {
            assert_eq!(urls, &serde_json::json!(["/openapi/v3", "/openapi/v3/*"]));
        }
    }
    assert!(!allowed(&role, "list", "customresourcedefinitions"));
    Ok(())
}

/// The controllers of [`kmeta_rbac_output_applied_in_sequence_replaces_no_earlier_grant`]: one
/// naming its ServiceAccount and namespace, one naming a ServiceAccount but no namespace.
const TEAMS: &str = r"
apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: things}
spec:
  parentResource: {apiVersion: rbac.kmeta.test/v1, resource: things}
  childResources: [{apiVersion: v1, resource: configmaps}]
  serviceAccountName: things-writer
  serviceAccountNamespace: team-a
  hooks: {sync: {webhook: {url: http://hook/sync}}}
---
apiVersion: metacontroller.k8s.io/v1alpha1
kind: DecoratorController
metadata: {name: labelled}
spec:
  resources: [{apiVersion: rbac.kmeta.test/v1, resource: things}]
  attachments: [{apiVersion: v1, resource: secrets}]
  serviceAccountName: labeller
  hooks: {sync: {webhook: {url: http://hook/decorate}}}
";

/// `kmeta rbac`'s output, as printed, for `args`.
fn kmeta_rbac(args: &[&str]) -> anyhow::Result<Vec<Value>> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kmeta"))
        .arg("rbac")
        .args(args)
        .output()?;
    let stdout = String::from_utf8(out.stdout)?;
    anyhow::ensure!(
        out.status.success(),
        "kmeta rbac {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_saphyr::from_multiple(&stdout)?)
}

/// Whether `user` may `verb` `resource` (of `group`), by a SubjectAccessReview.
async fn may(
    client: &kube::Client,
    user: &str,
    verb: &str,
    group: &str,
    resource: &str,
) -> anyhow::Result<bool> {
    let reviews = api(
        client,
        "authorization.k8s.io/v1",
        "SubjectAccessReview",
        "subjectaccessreviews",
        None,
    );
    let review: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "metadata": {"name": "r"},
        "spec": {"user": user, "groups": ["system:serviceaccounts", "system:authenticated"],
                 "resourceAttributes": {"verb": verb, "group": group, "resource": resource}}}))?;
    let answer = reviews.create(&PostParams::default(), &review).await?;
    Ok(answer.data["status"]["allowed"] == true)
}

#[tokio::test]
async fn kmeta_rbac_output_applied_in_sequence_replaces_no_earlier_grant() -> anyhow::Result<()> {
    use kube::api::{Patch, PatchParams};
    let server = kmeta_apiserver::TestServer::builder()
        .rbac(true)
        .start()
        .await?;
    let client = server.client();
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("controllers.yaml");
    std::fs::write(&file, TEAMS)?;
    let f = file.to_str().context("path")?;
    let outputs = [
        kmeta_rbac(&["-f", f])?,
        kmeta_rbac(&["-f", f, "--controller", "things"])?,
        kmeta_rbac(&[
            "-f",
            f,
            "--controller",
            "labelled",
            "--service-account",
            "team-b/labeller",
        ])?,
    ];
    // applied one after the other, as `kubectl apply --server-side -f -` would
    let apply = PatchParams::apply("kubectl").force();
    let api_of = |kind: &str| {
        let plural = format!("{}s", kind.to_lowercase());
        api(&client, "rbac.authorization.k8s.io/v1", kind, &plural, None)
    };
    for doc in outputs.iter().flatten() {
        let name = doc["metadata"]["name"].as_str().context("name")?;
        let kind = doc["kind"].as_str().context("kind")?;
        api_of(kind)
            .patch(name, &apply, &Patch::Apply(doc))
            .await
            .with_context(|| format!("applying {kind} {name}"))?;
    }
    // every document printed is stored as printed: none replaced an earlier one
    let mut names = BTreeSet::new();
    for doc in outputs.iter().flatten() {
        let (kind, name) = (doc["kind"].as_str().unwrap_or(""), &doc["metadata"]["name"]);
        assert!(
            names.insert(format!("{kind} {name}")),
            "{kind} {name} printed twice"
        );
        let stored = api_of(kind).get(name.as_str().unwrap_or("")).await?;
        for field in ["rules", "roleRef", "subjects"] {
            assert_eq!(
                stored.data.get(field),
                doc.get(field),
                "{kind} {name}: {field}"
            );
        }
    }
    assert_eq!(names.len(), 6, "{names:?}");
    // and the grants hold for each ServiceAccount, side by side
    let kmeta_sa = "system:serviceaccount:kmeta:kmeta";
    let writer = "system:serviceaccount:team-a:things-writer";
    let labeller = "system:serviceaccount:team-b:labeller";
    let mc = "metacontroller.k8s.io";
    assert!(may(&client, kmeta_sa, "watch", mc, "compositecontrollers").await?);
    assert!(may(&client, kmeta_sa, "update", mc, "decoratorcontrollers").await?);
    assert!(may(&client, kmeta_sa, "update", "coordination.k8s.io", "leases").await?);
    assert!(!may(&client, kmeta_sa, "create", "", "configmaps").await?);
    assert!(may(&client, writer, "create", "", "configmaps").await?);
    assert!(!may(&client, writer, "create", "", "secrets").await?);
    assert!(may(&client, labeller, "create", "", "secrets").await?);
    assert!(!may(&client, labeller, "watch", mc, "compositecontrollers").await?);
    Ok(())
}

/// `kmeta rbac --plan NAME` grants what `kmeta plan compositecontroller/NAME` reads, and no
/// write: every request a plan of a synced fleet makes is allowed by the printed role, and the
/// role allows no verb but `get` and `list`.
#[tokio::test]
async fn a_plans_read_only_role_covers_every_request_a_plan_makes() -> anyhow::Result<()> {
    let (server, client, manifests) = prepared().await?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&manifests)?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("controllers.yaml");
    std::fs::write(&file, serde_saphyr::to_string(&docs[0])?)?;
    let cc = api(
        &client,
        "metacontroller.k8s.io/v1alpha1",
        "CompositeController",
        "compositecontrollers",
        None,
    );
    create(&cc, docs[0].clone()).await?;
    let things = api(
        &client,
        "rbac.kmeta.test/v1",
        "Thing",
        "things",
        Some("default"),
    );
    create(
        &things,
        json!({"apiVersion": "rbac.kmeta.test/v1", "kind": "Thing",
        "metadata": {"name": "t", "namespace": "default"}, "spec": {"n": 1}}),
    )
    .await?;
    let stop = tokio_util::sync::CancellationToken::new();
    let manager = tokio::spawn(kmeta::reconcile::manager::run(
        client.clone(),
        kmeta::ManagerConfig::default(),
        stop.clone(),
    ));
    let cms = api(&client, "v1", "ConfigMap", "configmaps", Some("default"));
    until("the child", || async {
        cms.get_opt("t-c").await.ok().flatten().is_some()
    })
    .await?;
    stop.cancel();
    manager.await??;

    let printed = kmeta_rbac(&["-f", file.to_str().context("path")?, "--plan", "things"])?;
    let role = &printed[0];
    assert_eq!(role["metadata"]["name"], "kmeta-plan-things");
    let before = server.counters();
    let opts = kmeta::plan::PlanOptions {
        controller: "things".into(),
        controller_file: None,
        hook_url: None,
        hook_objects: Vec::new(),
        selector: None,
        namespace: None,
        concurrency: 2,
        jsonnet_worker: None,
    };
    let summary = kmeta::plan::plan(&client, &opts, |_| {}).await?;
    assert_eq!(summary.parents, 1);
    let used = server.counters().since(&before);
    let denied = denied(role, &used);
    assert!(
        denied.is_empty(),
        "not granted: {denied:?}\nrole: {role:#}\nused: {used:?}"
    );
    for rule in role["rules"].as_array().into_iter().flatten() {
        for verb in rule["verbs"].as_array().into_iter().flatten() {
            assert!(verb == "get" || verb == "list", "{rule}");
        }
    }
    Ok(())
}
