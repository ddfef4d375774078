//! The headline case: a child custom resource with an embedded pod template (schemaless CRD),
//! another actor injects a sidecar container into it; a parent update changes the app image;
//! the child keeps the sidecar and gets the new image; a further resync writes nothing.

use kmeta::ManagerConfig;
use kmeta::reconcile::ApplyStrategy;
use kmeta_apiserver::Operation;
use kmeta_tests::*;
use serde_json::{Value, json};

/// The hook: one `Workload` child per `App`, whose pod template has the app container.
fn hook(_hook: &str, req: &Value) -> Reply {
    let p = &req["parent"];
    let name = p["metadata"]["name"].as_str().unwrap_or_default();
    let av = p["apiVersion"].as_str().unwrap_or_default();
    Reply::Json(json!({
        "status": {"workloads": req["children"].as_object().map_or(0, |m| m.values().map(|v| v.as_object().map_or(0, |o| o.len())).sum::<usize>())},
        "children": [{
            "apiVersion": av, "kind": "Workload",
            "metadata": {"name": name},
            "spec": {"template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "app", "image": p["spec"]["image"],
                    "ports": [{"containerPort": 8080}]
                }]}}}
        }]
    }))
}

fn sidecar() -> Value {
    json!({"name": "proxy", "image": "envoy:1.30", "ports": [{"containerPort": 15001}]})
}

/// Inserts the sidecar into `spec.template.spec.containers` unless present (what a mutating
/// webhook such as a service-mesh injector does).
fn inject(obj: &mut Value) {
    if let Some(cs) = obj
        .pointer_mut("/spec/template/spec/containers")
        .and_then(Value::as_array_mut)
        && !cs.iter().any(|c| c["name"] == "proxy")
    {
        cs.push(sidecar());
    }
}

/// The injector as another client: patches `w`'s containers with the sidecar added.
async fn inject_by_patch(
    s: &Running,
    workloads: &kube::Api<kube::api::DynamicObject>,
    w: &Value,
) -> anyhow::Result<()> {
    let mut patched = w.clone();
    inject(&mut patched);
    let cs = patched.pointer("/spec/template/spec/containers").cloned();
    let name = patched["metadata"]["name"].as_str().unwrap_or_default();
    s.merge_patch(
        workloads,
        name,
        json!({"spec": {"template": {"spec": {"containers": cs}}}}),
    )
    .await?;
    Ok(())
}

/// Changes the parent `web`'s image to `web:2`, waits for the child to have it and checks that
/// the sidecar survived, in place (`why` names the case in the failure); the child as it is then.
async fn update_image_keeping_the_sidecar(
    s: &Running,
    workloads: &kube::Api<kube::api::DynamicObject>,
    why: &str,
) -> anyhow::Result<Value> {
    s.merge_patch(&s.parents(), "web", json!({"spec": {"image": "web:2"}}))
        .await?;
    let w = s
        .wait_for(workloads, "web", "new image in the child", |w| {
            containers(w).first().is_some_and(|c| c.1 == "web:2")
        })
        .await?;
    assert_eq!(containers(&w), app_and_proxy("web:2"), "{why}: {w}");
    Ok(w)
}

/// The child's containers as they should be: the app with `image`, then the sidecar.
fn app_and_proxy(image: &str) -> [(String, String); 2] {
    [
        ("app".into(), image.into()),
        ("proxy".into(), "envoy:1.30".into()),
    ]
}

each_hook_mode!(injected_sidecar_survives_parent_updates_and_resync_writes_nothing);
async fn injected_sidecar_survives_parent_updates_and_resync_writes_nothing(
    mode: HookMode,
) -> anyhow::Result<()> {
    sidecar_survives("sidecar", mode, ApplyStrategy::DynamicApply, true).await
}

/// The same under server-side apply: the pod template is in a preserve-unknown-fields subtree,
/// whose lists the API server replaces whole, so kmeta sends the merged subtree. The injector is
/// another writer patching the child once (an admission hook would re-inject the sidecar into
/// every write and hide a lost one).
#[tokio::test]
async fn injected_sidecar_survives_under_server_side_apply() -> anyhow::Result<()> {
    sidecar_survives(
        "sidecar-ssa",
        HookMode::Webhook,
        ApplyStrategy::ServerSideApply,
        false,
    )
    .await
}

async fn sidecar_survives(
    name: &str,
    mode: HookMode,
    strategy: ApplyStrategy,
    by_admission: bool,
) -> anyhow::Result<()> {
    let mut s = Scenario::new(name)
        .hook_mode(mode)
        .crd("App", "apps")
        .crd("Workload", "workloads")
        .hook(hook)
        .prepare()
        .await?;
    // the injector: an admission hook on the test server, or (real cluster) a second client
    // patching the child after each write, as an operator's own automation would
    let admission = s.server().filter(|_| by_admission).map(|server| {
        server.admission().mutate(&s.av, "workloads", |obj, op| {
            if matches!(op, Operation::Create | Operation::Update) {
                inject(obj);
            }
            Ok(())
        })
    });
    s.controller(Cc::new("apps-cc").child("workloads")).await?;
    s.start_controller_with(ManagerConfig::default().apply_strategy(strategy));
    s.parent("web", json!({"image": "web:1"})).await?;
    let (apps, workloads) = (s.parents(), s.resource("Workload", "workloads"));
    let w = s
        .wait_for(&workloads, "web", "child Workload", |_| true)
        .await?;
    if admission.is_none() {
        inject_by_patch(&s, &workloads, &w).await?;
    }
    let w = s
        .wait_for(&workloads, "web", "sidecar injected", |w| {
            containers(w).len() == 2
        })
        .await?;
    assert_eq!(containers(&w), app_and_proxy("web:1"));

    // the parent's image changes: the child gets it and keeps the sidecar
    let w = update_image_keeping_the_sidecar(
        &s,
        &workloads,
        "the sidecar must survive the update, in place",
    )
    .await?;
    // the sidecar's own list-map items were not touched either
    assert_eq!(
        w.pointer("/spec/template/spec/containers/1/ports"),
        Some(&json!([{"containerPort": 15001}]))
    );

    // settle: wait until status reflects the child, then force another sync and see no write
    s.wait_parent("web", "parent status", |p| {
        p["status"]["observedGeneration"] == 2 && p["status"]["workloads"] == 1
    })
    .await?;
    let before_rv = w["metadata"]["resourceVersion"].clone();
    let before = s.server().map(|s| s.counters());
    let touch = json!({"metadata": {"annotations": {"kmeta.test/touch": "1"}}});
    s.patch_and_sync("apps-cc", &apps, "web", touch).await?;
    let w = s.get(&workloads, "web").await?.unwrap();
    assert_eq!(
        w["metadata"]["resourceVersion"], before_rv,
        "resync rewrote the child"
    );
    if let (Some(server), Some(before)) = (s.server(), before) {
        resync_wrote_nothing(&server.counters().since(&before))?;
    }
    s.finish().await
}

/// The requests of a resync (`d`) wrote nothing to the child, and tried nothing either (an apply
/// from a stale cached copy would be refused, 409, but should not be tried: the sync waits until
/// the watch shows kmeta's own last write, whatever the watch's lag or churn).
fn resync_wrote_nothing(d: &kmeta_apiserver::Counters) -> anyhow::Result<()> {
    assert_eq!(d.writes_to("workloads"), 0, "writes during resync: {d:?}");
    Ok(())
}

/// Under server-side apply kmeta sends the merged pod template, lists included, so a sidecar
/// another writer injected after the version in kmeta's cache must not be overwritten by an
/// apply built from that version: the apply carries the cached resourceVersion and a stale one
/// is refused (409) and redone once the watch shows the sidecar. Here the Workload watch trails
/// its writes by 1.5 s (kmeta-apiserver; a real cluster has no fault injection, the property is
/// still checked) and the parent's image changes right after the injection.
#[tokio::test]
async fn a_sidecar_injected_just_before_an_update_survives_server_side_apply() -> anyhow::Result<()>
{
    let mut s = Scenario::new("sidecar-race")
        .crd("App", "apps")
        .crd("Workload", "workloads")
        .hook(hook)
        .prepare()
        .await?;
    s.controller(Cc::new("apps-cc").child("workloads")).await?;
    s.start_controller_with(
        ManagerConfig::default().apply_strategy(ApplyStrategy::ServerSideApply),
    );
    s.parent("web", json!({"image": "web:1"})).await?;
    let workloads = s.resource("Workload", "workloads");
    s.wait_parent("web", "the child observed", |p| {
        p["status"]["workloads"] == 1
    })
    .await?;
    let lag = s.server().map(|server| {
        server
            .faults()
            .delay_watch_events(Some("workloads"), std::time::Duration::from_millis(1500))
    });
    let w = s.get(&workloads, "web").await?.expect("the child");
    inject_by_patch(&s, &workloads, &w).await?;
    update_image_keeping_the_sidecar(
        &s,
        &workloads,
        "the sidecar injected just before the update must survive",
    )
    .await?;
    if let (Some(server), Some(lag)) = (s.server(), lag) {
        server.faults().remove(lag);
    }
    s.finish().await
}

/// A child schema kmeta cannot read when it starts the controller (its list markers and
/// preserve-unknown-fields subtrees come from its group-version's OpenAPI v3 document) fails the
/// start, reported and retried — not a controller merging without them, whose server-side apply
/// would send the pod template's containers without the live ones and lose the sidecar.
#[tokio::test]
async fn an_unreadable_child_schema_fails_the_start_instead_of_losing_the_sidecar()
-> anyhow::Result<()> {
    let mut s = Scenario::new("sidecar-schema")
        .crd("App", "apps")
        .crd("Workload", "workloads")
        .hook(hook)
        .prepare()
        .await?;
    let Some(()) = s.server().map(|server| {
        server.faults().inject(
            kmeta_apiserver::FaultSpec::error(500)
                .verb("get")
                .resource("openapi")
                .user_agent("kmeta/")
                .times(1),
        );
    }) else {
        eprintln!(
            "needs kmeta-apiserver's fault injection to refuse the schema read: checked there"
        );
        return s.finish().await;
    };
    s.controller(Cc::new("apps-cc").child("workloads")).await?;
    s.start_controller_with(
        ManagerConfig::default().apply_strategy(ApplyStrategy::ServerSideApply),
    );
    s.wait_event("the failed start, naming the document", None, |e| {
        e["reason"] == "CreateError"
            && e["note"].as_str().is_some_and(|n| {
                n.contains("reading the list markers of the OpenAPI v3 document /openapi/v3/apis/")
            })
    })
    .await?;
    // retried: the controller starts with the schema's rules
    s.parent("web", json!({"image": "web:1"})).await?;
    let workloads = s.resource("Workload", "workloads");
    let w = s
        .wait_for(&workloads, "web", "child Workload", |_| true)
        .await?;
    inject_by_patch(&s, &workloads, &w).await?;
    update_image_keeping_the_sidecar(&s, &workloads, "the sidecar after a retried start").await?;
    s.finish().await
}
