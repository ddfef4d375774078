//! DecoratorControllers: Metacontroller's decorator examples (service-per-pod in v1 and v2,
//! crd-roles, clusteredparent) unchanged but for their hooks, written here as Rust closures (and
//! crd-roles' in Python, its language, when `python3` is installed);
//! the status written to the target; finalize when a target stops matching; releasing the
//! targets of a deleted DecoratorController; a failing hook changing nothing; related objects
//! from the customize hook; a DecoratorController that cannot run reported.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kmeta_tests::*;
use serde_json::{Value, json};

const ANNOTATION: &str = "metacontroller.k8s.io/decorator-controller";

fn str_of<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn has_finalizer(o: &Value, fin: &str) -> bool {
    o["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == fin))
}

fn controlled_by(o: &Value, owner: &Value) -> bool {
    o["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r["uid"] == owner["metadata"]["uid"] && r["controller"] == json!(true))
        })
}

/// Metacontroller's service-per-pod hooks (examples/service-per-pod/manifest/*.jsonnet).
fn service_per_pod_hooks(path: &str, req: &Value) -> Reply {
    let obj = &req["object"];
    let name = str_of(obj, "/metadata/name");
    match path {
        "sync-service-per-pod" => {
            let label_key = str_of(obj, "/metadata/annotations/service-per-pod-label");
            let ports: Vec<Value> = str_of(obj, "/metadata/annotations/service-per-pod-ports")
                .split(',')
                .filter_map(|p| p.split_once(':'))
                .map(|(port, target)| {
                    let (port, target) =
                        (port.parse::<i64>().unwrap(), target.parse::<i64>().unwrap());
                    json!({"name": format!("port-{port}"), "port": port, "targetPort": target})
                })
                .collect();
            let replicas = obj["spec"]["replicas"].as_i64().unwrap_or(0);
            let attachments: Vec<Value> = (0..replicas)
                .map(|i| {
                    json!({"apiVersion": "v1", "kind": "Service",
                        "metadata": {"name": format!("{name}-{i}"), "labels": {"app": "service-per-pod"}},
                        "spec": {"selector": {label_key: format!("{name}-{i}")}, "ports": ports}})
                })
                .collect();
            Reply::Json(json!({"attachments": attachments}))
        }
        "finalize-service-per-pod" => {
            let left = req["attachments"]["Service.v1"]
                .as_object()
                .map_or(0, |m| m.len());
            Reply::Json(json!({"attachments": [], "finalized": left == 0}))
        }
        "sync-pod-name-label" => {
            let label_key = str_of(obj, "/metadata/annotations/pod-name-label");
            Reply::Json(json!({"labels": {label_key: name}}))
        }
        _ => Reply::Raw(404, format!("no hook {path}")),
    }
}

/// The two DecoratorControllers of examples/service-per-pod (`version`: v1) and
/// examples/service-per-pod-v2 (v2).
fn service_per_pod_controllers(version: &str) -> [Dc; 2] {
    let services = Dc::new("service-per-pod")
        .resources(json!([{"apiVersion": "apps/v1", "resource": "statefulsets",
            "annotationSelector": {"matchExpressions": [
                {"key": "service-per-pod-label", "operator": "Exists"},
                {"key": "service-per-pod-ports", "operator": "Exists"}]}}]))
        .attachments(json!([{"apiVersion": "v1", "resource": "services"}]))
        .hook_at("sync", "sync-service-per-pod")
        .hook_at("finalize", "finalize-service-per-pod")
        .version(version);
    let labels = Dc::new("pod-name-label")
        .resources(json!([{"apiVersion": "v1", "resource": "pods",
            "labelSelector": {"matchExpressions": [{"key": "pod-name", "operator": "DoesNotExist"}]},
            "annotationSelector": {"matchExpressions": [{"key": "pod-name-label", "operator": "Exists"}]}}]))
        .attachments(Value::Null)
        .hook_at("sync", "sync-pod-name-label")
        .version(version);
    [services, labels]
}

fn statefulset(ns: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "nginx", "namespace": ns, "annotations": {
            "service-per-pod-label": "pod-name", "service-per-pod-ports": "80:8080"}},
        "spec": {"replicas": replicas, "serviceName": "nginx",
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {"metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}})
}

/// Deletes DecoratorController `name` while the controller runs, and waits until it is gone
/// (kmeta's release finalizer comes off once its targets are released).
async fn delete_decorator(s: &Running, name: &str) -> anyhow::Result<()> {
    let dcs = s.decorators();
    dcs.delete(name, &Default::default()).await?;
    s.wait_gone(&dcs, name, &format!("DecoratorController {name} deleted"))
        .await
}

async fn service_per_pod(version: &str) -> anyhow::Result<()> {
    let mut s = Scenario::new(&format!("spp-{version}"))
        .hook(service_per_pod_hooks)
        .start()
        .await?;
    for dc in service_per_pod_controllers(version) {
        s.decorator(dc).await?;
    }
    let ns = s.ns.clone();
    let sts = s.create("statefulsets", statefulset(&ns, 2)).await?;
    let services = s.api("v1", "Service", "services", Some(&ns));
    for i in 0..2 {
        let svc = s
            .wait_for(
                &services,
                &format!("nginx-{i}"),
                "a Service per Pod",
                |_| true,
            )
            .await?;
        assert_eq!(
            svc["metadata"]["annotations"][ANNOTATION],
            "service-per-pod"
        );
        assert!(controlled_by(&svc, &sts), "{svc}");
        assert_eq!(
            svc["spec"]["selector"],
            json!({"pod-name": format!("nginx-{i}")})
        );
    }
    // the hook saw its attachments keyed per the hook version
    let key = if version == "v2" {
        format!("{ns}/nginx-0")
    } else {
        "nginx-0".to_owned()
    };
    s.wait_call(
        "sync-service-per-pod",
        "a request with the observed Services",
        |r| r["attachments"]["Service.v1"].get(&key).is_some() && r["finalizing"] == false,
    )
    .await?;
    let statefulsets = s.api("apps/v1", "StatefulSet", "statefulsets", Some(&ns));
    let fin = "metacontroller.io/decoratorcontroller-service-per-pod";
    s.wait_for(
        &statefulsets,
        "nginx",
        "the finalizer on the StatefulSet",
        |o| has_finalizer(o, fin),
    )
    .await?;
    // pod-name-label: a label on the target itself
    let pods = s.api("v1", "Pod", "pods", Some(&ns));
    s.create("pods", json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nginx-0", "namespace": ns, "annotations": {"pod-name-label": "pod-name"}},
        "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}))
        .await?;
    s.wait_for(&pods, "nginx-0", "the pod-name label", |p| {
        p["metadata"]["labels"]["pod-name"] == "nginx-0"
    })
    .await?;
    // scaling down: the attachment no longer desired is deleted
    s.merge_patch(&statefulsets, "nginx", json!({"spec": {"replicas": 1}}))
        .await?;
    s.wait_gone(&services, "nginx-1", "the second Service deleted")
        .await?;
    // deleting the target: finalize deletes the attachments, then lets the target go
    statefulsets.delete("nginx", &Default::default()).await?;
    s.wait_call("finalize-service-per-pod", "the finalize hook", |r| {
        r["finalizing"] == true
    })
    .await?;
    s.wait_gone(&services, "nginx-0", "Services deleted by finalize")
        .await?;
    s.wait_gone(&statefulsets, "nginx", "the StatefulSet released")
        .await?;
    delete_decorator(&s, "service-per-pod").await?;
    s.finish().await
}

#[tokio::test]
async fn service_per_pod_v1() -> anyhow::Result<()> {
    service_per_pod("v1").await
}

#[tokio::test]
async fn service_per_pod_v2() -> anyhow::Result<()> {
    service_per_pod("v2").await
}

/// The crd-roles hook in Python (`hooks/crd_roles.py`), when `python3` runs here: its process
/// (killed on drop) and URL. None without Python.
async fn python_crd_roles_hook() -> anyhow::Result<Option<(tokio::process::Child, String)>> {
    use tokio::io::AsyncBufReadExt as _;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/scenarios/hooks/crd_roles.py"
    );
    let spawned = tokio::process::Command::new("python3")
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let Ok(mut child) = spawned else {
        eprintln!("python3 not found: the crd-roles hook runs as a Rust closure");
        return Ok(None);
    };
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    tokio::time::timeout(
        TIMEOUT,
        tokio::io::BufReader::new(stdout).read_line(&mut line),
    )
    .await??;
    if line.is_empty() {
        eprintln!("python3 exited before serving: the crd-roles hook runs as a Rust closure");
        return Ok(None);
    }
    let port: u16 = line.trim().parse()?;
    Ok(Some((
        child,
        format!("http://127.0.0.1:{port}/sync-crd-role"),
    )))
}

/// examples/crd-roles: cluster-scoped targets (CRDs) with cluster-scoped attachments
/// (ClusterRoles). Its hook is the example's language, Python, when `python3` is installed, else
/// the same hook as a closure.
#[tokio::test]
async fn crd_roles_decorates_cluster_scoped_targets() -> anyhow::Result<()> {
    let python = python_crd_roles_hook().await?;
    let mut s = Scenario::new("crdroles")
        .hook(|_, req| {
            let crd = &req["object"];
            Reply::Json(json!({"attachments": [{
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": format!("{}-reader", str_of(crd, "/metadata/name"))},
                "rules": []}]}))
        })
        .start()
        .await?;
    let mut my_crd = crd(&s.group, "Widget", "widgets", true);
    my_crd["metadata"]["annotations"] = json!({"enable-default-roles": "yes"});
    s.create_crd(my_crd).await?;
    let plain = crd(&s.group, "Gadget", "gadgets", true);
    s.create_crd(plain).await?;
    let mut dc = Dc::new(&format!("crd-role-{}", s.id))
        .resources(json!([{"apiVersion": "apiextensions.k8s.io/v1",
            "resource": "customresourcedefinitions",
            "annotationSelector": {"matchExpressions": [
                {"key": "enable-default-roles", "operator": "Exists"}]}}]))
        .attachments(json!([{"apiVersion": "rbac.authorization.k8s.io/v1",
            "resource": "clusterroles"}]));
    if let Some((_, url)) = &python {
        dc = dc.sync_url(url);
    }
    s.decorator(dc).await?;
    let crds = s.api(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        None,
    );
    let widget = s
        .get(&crds, &format!("widgets.{}", s.group))
        .await?
        .unwrap();
    let roles = s.api(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        "clusterroles",
        None,
    );
    let role = s
        .wait_for(
            &roles,
            &format!("widgets.{}-reader", s.group),
            "a ClusterRole for the annotated CRD",
            |_| true,
        )
        .await?;
    assert!(controlled_by(&role, &widget), "{role}");
    // the hook series say which kind of controller called
    let series = format!(
        "metacontroller_sync_requests_total{{controller_name=\"crd-role-{}\",controller_type=\"DecoratorController\"",
        s.id
    );
    assert!(s.metrics.encode().contains(&series), "no {series}");
    // only the annotated CRD is a target
    let gadget_role = format!("gadgets.{}-reader", s.group);
    assert!(
        s.get(&roles, &gadget_role).await?.is_none(),
        "{gadget_role}"
    );
    if python.is_some() {
        assert_eq!(s.hooks().count("sync"), 0, "the Python hook did not answer");
    } else {
        assert!(
            s.hooks()
                .calls("sync")
                .iter()
                .all(|c| { str_of(c, "/object/metadata/name") != format!("gadgets.{}", s.group) })
        );
    }
    s.finish().await
}

/// examples/clusteredparent: a cluster-scoped target (a ClusterRole) with a namespaced
/// attachment (a RoleBinding, in the namespace the hook names).
#[tokio::test]
async fn clustered_parent_attaches_namespaced_objects() -> anyhow::Result<()> {
    // the example binds in `default`; here the scenario's namespace, known once it exists
    let namespace = Arc::new(std::sync::OnceLock::<String>::new());
    let hook_ns = namespace.clone();
    let mut s = Scenario::new("clusterparent").hook(move |_, req| {
        let role = str_of(&req["object"], "/metadata/name").to_owned();
        let ns = hook_ns.get().cloned().unwrap_or_default();
        Reply::Json(json!({"attachments": [{
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": role, "namespace": ns},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
            "roleRef": {"kind": "ClusterRole", "name": role, "apiGroup": "rbac.authorization.k8s.io"}}]}))
    })
    .start()
    .await?;
    let role_name = format!("{}-role", s.id);
    let role = s
        .create(
            "clusterroles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole", "metadata": {"name": role_name,
                "annotations": {"default-service-account-binding": role_name}}, "rules": []}),
        )
        .await?;
    let ns = s.ns.clone();
    namespace.set(ns.clone()).unwrap();
    s.decorator(
        Dc::new(&format!("cluster-parent-{}", s.id))
            .resources(json!([{"apiVersion": "rbac.authorization.k8s.io/v1",
                "resource": "clusterroles",
                "annotationSelector": {"matchExpressions": [
                    {"key": "default-service-account-binding", "operator": "Exists"}]}}]))
            .attachments(json!([{"apiVersion": "rbac.authorization.k8s.io/v1",
                "resource": "rolebindings"}])),
    )
    .await?;
    let bindings = s.api(
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        "rolebindings",
        Some(&ns),
    );
    let binding = s
        .wait_for(
            &bindings,
            &role_name,
            "a RoleBinding for the ClusterRole",
            |_| true,
        )
        .await?;
    assert!(controlled_by(&binding, &role), "{binding}");
    assert_eq!(binding["roleRef"]["name"], json!(role_name));
    s.finish().await
}

/// The hook's labels and annotations are merged into the target (`null` removes a label), its
/// status replaces the target's: through `/status` when the resource has the
/// subresource, in the object otherwise; a target already as asked is not written again.
#[tokio::test]
async fn status_is_written_to_the_target_once() -> anyhow::Result<()> {
    let mut s = Scenario::new("decstatus")
        .crd("Thing", "things")
        .crd_with("Plain", "plains", |c| {
            c["spec"]["versions"][0]
                .as_object_mut()
                .unwrap()
                .remove("subresources");
        })
        .hook(|_, req| {
            let name = str_of(&req["object"], "/metadata/name");
            Reply::Json(json!({"status": {"decorated": name},
                               "annotations": {"decorated": "yes"},
                               "labels": {"old": null, "new": "n"}}))
        })
        .start()
        .await?;
    let dc = Dc::new("dec-status")
        .resources(json!([{"apiVersion": s.av, "resource": "things"},
                          {"apiVersion": s.av, "resource": "plains"}]))
        .attachments(Value::Null)
        .patch(json!({"resyncPeriodSeconds": 1}));
    s.decorator(dc).await?;
    let (av, ns) = (s.av.clone(), s.ns.clone());
    s.parent_labeled("t", json!({"old": "x", "kept": "k"}), Value::Null)
        .await?;
    s.create(
        "plains",
        json!({"apiVersion": av, "kind": "Plain",
                              "metadata": {"name": "p", "namespace": ns}}),
    )
    .await?;
    let plains = s.resource("Plain", "plains");
    let t = s
        .wait_parent("t", "the status on the Thing", |o| {
            o["status"] == json!({"decorated": "t"})
                && o["metadata"]["annotations"]["decorated"] == "yes"
                && o["metadata"]["labels"] == json!({"kept": "k", "new": "n"})
        })
        .await?;
    let p = s
        .wait_for(&plains, "p", "the status in the Plain object", |o| {
            o["status"] == json!({"decorated": "p"})
        })
        .await?;
    // more resyncs of each find nothing to change, and send no write
    let before = s.server().map(|server| server.counters());
    let after = s.syncs("dec-status");
    let after = s.wait_syncs("dec-status", after + 3).await?;
    s.wait_syncs("dec-status", after).await?;
    let rv = |o: &Value| str_of(o, "/metadata/resourceVersion").to_owned();
    let t2 = s.get(&s.parents(), "t").await?.unwrap();
    let p2 = s.get(&plains, "p").await?.unwrap();
    assert_eq!((rv(&t2), rv(&p2)), (rv(&t), rv(&p)), "a resync wrote again");
    if let (Some(server), Some(before)) = (s.server(), before) {
        let d = server.counters().since(&before);
        let targets: u64 = d
            .by_key
            .iter()
            .filter(|((verb, r, _), _)| {
                (r.starts_with("things") || r.starts_with("plains"))
                    && verb != "get"
                    && verb != "list"
                    && verb != "watch"
            })
            .map(|(_, n)| n)
            .sum();
        assert_eq!(targets, 0, "writes to targets during resyncs: {d:?}");
    }
    s.finish().await
}

/// A target that stops matching is finalized: the finalize hook is called, its attachments are
/// deleted and the finalizer removed, while the target itself stays.
#[tokio::test]
async fn finalize_when_a_target_stops_matching() -> anyhow::Result<()> {
    finalize_unmatched("decunmatch", None).await
}

/// The same when the target stops matching before kmeta's watch has shown the attachment it
/// just created (the ConfigMap watch trails by 1.5 s on kmeta-apiserver; a real cluster has no
/// fault injection, the property is still checked): the finalize hook must not be told there is
/// no attachment, or the finalizer goes and the attachment is left behind for good.
#[tokio::test]
async fn finalize_waits_for_an_attachment_the_watch_has_not_shown() -> anyhow::Result<()> {
    finalize_unmatched("declag", Some(std::time::Duration::from_millis(1500))).await
}

/// A DecoratorController with a finalize hook that deletes every attachment; the target `t`
/// gets its attachment `t-a`, then loses its label. With `lag`, ConfigMap watch events trail
/// their writes by that long from before `t` is created.
async fn finalize_unmatched(name: &str, lag: Option<std::time::Duration>) -> anyhow::Result<()> {
    let mut s = Scenario::new(name)
        .crd("Thing", "things")
        .hook(|path, req| {
            let name = str_of(&req["object"], "/metadata/name");
            match path {
                "sync" => Reply::Json(json!({"attachments": [{"apiVersion": "v1",
                    "kind": "ConfigMap", "metadata": {"name": format!("{name}-a")}}]})),
                _ => {
                    let left = req["attachments"]["ConfigMap.v1"]
                        .as_object()
                        .map_or(0, |m| m.len());
                    Reply::Json(json!({"attachments": [], "finalized": left == 0}))
                }
            }
        })
        .start()
        .await?;
    let dc = Dc::new("dec-unmatch")
        .hook("finalize")
        .resources(json!([{"apiVersion": s.av, "resource": "things",
                "labelSelector": {"matchLabels": {"decorate": "yes"}}}]));
    s.decorator(dc).await?;
    let lagging = lag.and_then(|lag| {
        s.server()
            .map(|server| server.faults().delay_watch_events(Some("configmaps"), lag))
    });
    s.parent_labeled("t", json!({"decorate": "yes"}), Value::Null)
        .await?;
    let fin = "metacontroller.io/decoratorcontroller-dec-unmatch";
    s.wait_child("t-a").await?;
    s.wait_parent("t", "our finalizer", |o| has_finalizer(o, fin))
        .await?;
    s.merge_patch(
        &s.parents(),
        "t",
        json!({"metadata": {"labels": {"decorate": null}}}),
    )
    .await?;
    s.wait_call("finalize", "the finalize hook", |r| {
        r["finalizing"] == true && str_of(r, "/object/metadata/name") == "t"
    })
    .await?;
    s.wait_gone(&s.configmaps(), "t-a", "the attachment deleted")
        .await?;
    s.wait_parent("t", "the finalizer removed", |o| !has_finalizer(o, fin))
        .await?;
    if let (Some(id), Some(server)) = (lagging, s.server()) {
        server.faults().remove(id);
    }
    delete_decorator(&s, "dec-unmatch").await?;
    s.finish().await
}

/// Deleting a DecoratorController removes its finalizer from its targets (Metacontroller leaves
/// them stuck, its issue #1062), even when the finalize hook never finishes.
#[tokio::test]
async fn deleting_the_decorator_releases_its_targets() -> anyhow::Result<()> {
    let s = release_scenario("decrelease").await?;
    delete_decorator(&s, "dec-release").await?;
    s.wait_parent("t", "the finalizer released", |o| {
        !has_finalizer(o, RELEASED)
    })
    .await?;
    // and the target can now be deleted
    s.parents().delete("t", &Default::default()).await?;
    s.wait_gone(&s.parents(), "t", "the target deleted").await?;
    s.finish().await
}

/// The target finalizer of `dec-release`.
const RELEASED: &str = "metacontroller.io/decoratorcontroller-dec-release";

/// A running `dec-release` (finalize hook that never finishes) whose target `t` carries its
/// finalizer, and a `dec-witness` without finalize hook annotating every Thing `witnessed`.
async fn release_scenario(name: &str) -> anyhow::Result<Running> {
    let mut s = Scenario::new(name)
        .crd("Thing", "things")
        .hook(|path, _| match path {
            "sync" => Reply::Json(json!({"annotations": {"seen": "yes"}})),
            "witness" => Reply::Json(json!({"annotations": {"witnessed": "yes"}})),
            _ => Reply::Json(json!({"finalized": false})),
        })
        .start()
        .await?;
    let dc = Dc::new("dec-release")
        .hook("finalize")
        .attachments(Value::Null);
    s.decorator(dc).await?;
    let witness = Dc::new("dec-witness").hook_at("sync", "witness");
    s.decorator(witness.attachments(Value::Null)).await?;
    s.parent("t", Value::Null).await?;
    s.wait_parent("t", "our finalizer and the hook's annotation", |o| {
        has_finalizer(o, RELEASED) && o["metadata"]["annotations"]["seen"] == "yes"
    })
    .await?;
    s.wait_for(
        &s.decorators(),
        "dec-release",
        "kmeta's release finalizer",
        |o| has_finalizer(o, "kmeta.dev/release-decorator-targets"),
    )
    .await?;
    Ok(s)
}

/// A released DecoratorController still held by another finalizer does not run again: a new
/// target (seen by a witness decorator) gets no finalizer that nothing would remove.
#[tokio::test]
async fn a_released_decorator_does_not_run_again() -> anyhow::Result<()> {
    let mut s = release_scenario("decreleased").await?;
    let dcs = s.decorators();
    let hold = json!({"metadata": {"finalizers": ["kmeta.test/hold", "kmeta.dev/release-decorator-targets"]}});
    s.merge_patch(&dcs, "dec-release", hold).await?;
    dcs.delete("dec-release", &Default::default()).await?;
    s.wait_for(
        &dcs,
        "dec-release",
        "the release done, the hold left",
        |o| o["metadata"]["finalizers"] == json!(["kmeta.test/hold"]),
    )
    .await?;
    s.wait_parent("t", "the finalizer released", |o| {
        !has_finalizer(o, RELEASED)
    })
    .await?;
    s.parent("t2", Value::Null).await?;
    let t2 = s
        .wait_parent("t2", "the witness's annotation", |o| {
            o["metadata"]["annotations"]["witnessed"] == "yes"
        })
        .await?;
    assert!(!has_finalizer(&t2, RELEASED), "{t2}");
    let t = s.get(&s.parents(), "t").await?.unwrap();
    assert!(!has_finalizer(&t, RELEASED), "{t}");
    s.merge_patch(
        &dcs,
        "dec-release",
        json!({"metadata": {"finalizers": null}}),
    )
    .await?;
    s.wait_gone(&dcs, "dec-release", "the DecoratorController gone")
        .await?;
    s.finish().await
}

/// A hook that fails, or answers something unusable, changes nothing: no attachment, no label,
/// no status; a SyncError event on the target and an error in the metrics instead.
#[tokio::test]
async fn a_failing_hook_changes_nothing() -> anyhow::Result<()> {
    let answered = Arc::new(AtomicBool::new(false));
    let seen = answered.clone();
    let mut s = Scenario::new("decfail")
        .crd("Thing", "things")
        .hook(move |_, req| {
            seen.store(true, Ordering::SeqCst);
            match str_of(&req["object"], "/metadata/name") {
                "down" => Reply::Raw(500, "hook down".into()),
                // labels, status and a good attachment, plus one of an undeclared kind
                _ => Reply::Json(json!({"labels": {"l": "x"}, "status": {"s": 1},
                    "attachments": [
                        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "good"}},
                        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bad"}}]})),
            }
        })
        .start()
        .await?;
    s.decorator(Dc::new("dec-fail")).await?;
    s.parent("down", Value::Null).await?;
    s.parent("bad", Value::Null).await?;
    for (name, says) in [("down", "500"), ("bad", "not a declared")] {
        s.wait_event(&format!("SyncError on {name}"), Some(&s.ns), |e| {
            e["regarding"]["name"] == name
                && e["reason"] == "SyncError"
                && e["note"].as_str().is_some_and(|n| n.contains(says))
        })
        .await?;
    }
    assert!(answered.load(Ordering::SeqCst));
    assert!(s.metrics.reconcile_count("dec-fail", "error") > 0);
    for name in ["down", "bad"] {
        let t = s.get(&s.parents(), name).await?.unwrap();
        assert_eq!(t["metadata"]["labels"]["l"], Value::Null, "{t}");
        assert_eq!(t["status"]["s"], Value::Null, "{t}");
        // and no Synced condition on an object the decorator does not own
        assert_eq!(t["status"]["conditions"], Value::Null, "{t}");
    }
    assert!(s.get(&s.configmaps(), "good").await?.is_none());
    s.finish().await
}

/// The customize hook selects related objects for a decorator's targets: they arrive in the
/// sync request's `related`, and a change of one syncs the targets that asked for it.
#[tokio::test]
async fn customize_sends_related_objects() -> anyhow::Result<()> {
    let mut s = Scenario::new("deccustomize")
        .crd("Thing", "things")
        .hook(|path, req| match path {
            "customize" => Reply::Json(json!({"relatedResources": [{"apiVersion": "v1",
                "resource": "configmaps", "labelSelector": {"matchLabels": {"share": "yes"}}}]})),
            _ => {
                let shared = req["related"]["ConfigMap.v1"]
                    .as_object()
                    .map(|m| {
                        m.values()
                            .filter_map(|c| c["data"]["v"].as_str())
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default();
                Reply::Json(json!({"annotations": {"shared": shared}}))
            }
        })
        .object(
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "labels": {"share": "yes"}}, "data": {"v": "1"}}),
        )
        .start()
        .await?;
    s.decorator(
        Dc::new("dec-customize")
            .hook("customize")
            .attachments(Value::Null),
    )
    .await?;
    s.parent("t", Value::Null).await?;
    s.wait_parent("t", "the related ConfigMap's value on the target", |o| {
        o["metadata"]["annotations"]["shared"] == "1"
    })
    .await?;
    let req = s
        .wait_call("customize", "a customize request", |_| true)
        .await?;
    assert_eq!(str_of(&req, "/controller/kind"), "DecoratorController");
    assert_eq!(str_of(&req, "/parent/metadata/name"), "t");
    s.merge_patch(&s.configmaps(), "cfg", json!({"data": {"v": "2"}}))
        .await?;
    s.wait_parent("t", "the change of the related ConfigMap", |o| {
        o["metadata"]["annotations"]["shared"] == "2"
    })
    .await?;
    s.finish().await
}

/// A DecoratorController kmeta cannot run is not ignored silently: a Warning event on it names
/// why (here a resource that is not served).
#[tokio::test]
async fn an_unusable_decorator_is_reported() -> anyhow::Result<()> {
    let mut s = Scenario::new("decunusable")
        .crd("Thing", "things")
        .hook(|_, _| Reply::Json(json!({})))
        .start()
        .await?;
    let unknown = format!("dec-unknown-{}", s.id);
    let av = s.av.clone();
    s.decorator(Dc::new(&unknown).resources(json!([{"apiVersion": av, "resource": "nonesuches"}])))
        .await?;
    s.wait_event("a CreateError warning", None, |e| {
        e["regarding"]["name"] == unknown.as_str()
            && e["type"] == "Warning"
            && e["reason"] == "CreateError"
            && e["note"].as_str().is_some_and(|n| n.contains("nonesuches"))
    })
    .await?;
    s.finish().await
}

/// `kmeta trace` on a DecoratorController's target names the decorator and lists its
/// attachments.
#[tokio::test]
async fn trace_shows_a_targets_decorator_and_attachments() -> anyhow::Result<()> {
    use kmeta::{steer, trace};
    let mut s = Scenario::new("dectrace")
        .crd("Thing", "things")
        .hook(|_, req| {
            let name = str_of(&req["object"], "/metadata/name");
            Reply::Json(
                json!({"attachments": [{"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{name}-attached")}}]}),
            )
        })
        .start()
        .await?;
    s.decorator(Dc::new("dec-trace")).await?;
    s.parent("t", Value::Null).await?;
    s.wait_child("t-attached").await?;
    let discovery = steer::discover(&s.client).await?;
    let target = steer::resolve_in(&discovery, "things/t", &s.ns)?;
    let t = trace::trace_parent(&s.client, &discovery, &target).await?;
    assert_eq!(t.controllers, ["dec-trace"]);
    let names: Vec<&str> = t.children.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, [format!("{}/t-attached", s.ns)], "{t:?}");
    s.finish().await
}
