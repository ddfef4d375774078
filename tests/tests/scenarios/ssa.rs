//! Server-side apply (`--apply-strategy=server-side-apply` or the `kmeta.dev/apply-strategy`
//! annotation): children are applied under one field manager per parent, every write names its
//! manager, and fields taken from other managers are named in an event.

use kmeta::ManagerConfig;
use kmeta::reconcile::ApplyStrategy;
use kmeta::reconcile::{STRATEGY_ANNOTATION, field_manager};
use kmeta_tests::*;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

/// One ConfigMap per parent with `data.message` from `spec.message`, and `data.extra` only
/// while the parent's `spec.extra` is set.
pub(crate) fn hook(_hook: &str, req: &Value) -> Reply {
    let parent = &req["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let mut data = json!({"message": parent["spec"]["message"]});
    if let Some(extra) = parent["spec"].get("extra") {
        data["extra"] = extra.clone();
    }
    Reply::Json(json!({
        "status": {"observedChildren": observed_configmaps(req)},
        "children": [{
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-cm"), "labels": {"app": name}},
            "data": data
        }]
    }))
}

fn ssa() -> ManagerConfig {
    ManagerConfig::default().apply_strategy(ApplyStrategy::ServerSideApply)
}

/// The managedFields entries of `obj` as (manager, operation).
fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or_default().to_owned(),
                        e["operation"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A person's `kubectl edit`: an update by manager `kubectl-edit`.
async fn edit_as_person(api: &Api<DynamicObject>, name: &str, patch: Value) -> anyhow::Result<()> {
    let params = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    api.patch(name, &params, &Patch::Merge(&patch)).await?;
    Ok(())
}

/// A person edits `name` (see [`edit_as_person`]); returns the `reason` event the parent gets
/// for it.
async fn person_edit_told(
    s: &Running,
    api: &Api<DynamicObject>,
    name: &str,
    patch: Value,
    reason: &str,
) -> anyhow::Result<Value> {
    edit_as_person(api, name, patch).await?;
    s.wait_event(&format!("{reason} event"), Some(&s.ns), |e| {
        e["reason"] == reason
    })
    .await
}

/// No field of `obj` is left to the person's manager.
fn assert_taken_from_person(obj: &Value) {
    assert!(
        !managers(obj).iter().any(|(m, _)| m == "kubectl-edit"),
        "the edit's fields were taken: {:?}",
        managers(obj)
    );
}

#[tokio::test]
async fn children_are_applied_under_a_manager_per_parent() -> anyhow::Result<()> {
    let s = Scenario::new("ssa-manager")
        .crd("Thing", "things")
        .hook(hook)
        .controller(Cc::new("ssa-cc"))
        .config(ssa())
        .parent("one", json!({"message": "hello", "extra": "x"}))
        .start()
        .await?;
    let cm = s.wait_child("one-cm").await?;
    assert_eq!(cm["data"], json!({"message": "hello", "extra": "x"}));
    let parent = s
        .wait_parent("one", "status written", |p| {
            p["status"]["observedChildren"] == 1
        })
        .await?;
    let mine = field_manager(
        "metacontroller",
        "ssa-cc",
        parent["metadata"]["uid"].as_str().unwrap(),
    );
    assert!(
        managers(&cm).iter().any(|(m, _)| *m == mine),
        "{mine} in {:?}",
        managers(&cm)
    );
    // kmeta's own write of the parent's status is named after its User-Agent (the test's
    // client, which created the parent, sends none: its write is `unknown`)
    let status_managers: Vec<_> = parent["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["subresource"] == "status")
        .map(|e| e["manager"].clone())
        .collect();
    assert_eq!(status_managers, vec![json!("kmeta")], "{parent}");
    assert!(!managers(&cm).iter().any(|(m, _)| m == "unknown"), "{cm}");

    // an update goes as an apply; the child is then owned by the parent's manager through
    // Apply only, so a field the hook stops setting is removed
    s.merge_patch(
        &s.parents(),
        "one",
        json!({"spec": {"message": "bye", "extra": null}}),
    )
    .await?;
    let cm = s
        .wait_child_where("one-cm", "child updated without extra", |c| {
            c["data"]["message"] == "bye"
        })
        .await?;
    assert_eq!(cm["data"], json!({"message": "bye"}), "{cm}");
    let ours: Vec<_> = managers(&cm)
        .into_iter()
        .filter(|(m, _)| *m == mine)
        .collect();
    assert_eq!(ours, vec![(mine.clone(), "Apply".to_owned())], "{cm}");
    s.finish().await
}

#[tokio::test]
async fn a_person_edit_of_a_configmap_is_reverted_and_named() -> anyhow::Result<()> {
    let s = Scenario::new("ssa-edit")
        .crd("Thing", "things")
        .hook(hook)
        .controller(Cc::new("ssa-edit-cc").annotate(STRATEGY_ANNOTATION, "server-side-apply"))
        .parent("two", json!({"message": "hello"}))
        .start()
        .await?;
    s.wait_child("two-cm").await?;
    let event = person_edit_told(
        &s,
        &s.configmaps(),
        "two-cm",
        json!({"data": {"message": "edited"}}),
        "ChildFieldsTaken",
    )
    .await?;
    let note = event["note"].as_str().unwrap_or_default();
    assert!(
        note.contains(".data.message") && note.contains("kubectl-edit"),
        "{note}"
    );
    assert_eq!(event["regarding"]["name"], "two");
    let cm = s
        .wait_child_where("two-cm", "edit reverted", |c| {
            c["data"]["message"] == "hello"
        })
        .await?;
    assert_taken_from_person(&cm);
    s.finish().await
}

#[tokio::test]
async fn switching_strategies_takes_over_children_in_place() -> anyhow::Result<()> {
    let mut s = Scenario::new("ssa-migrate")
        .crd("Thing", "things")
        .hook(hook)
        .controller(Cc::new("migrate-cc"))
        .parent("m", json!({"message": "a", "extra": "e"}))
        .start()
        .await?;
    let cm = s.wait_child("m-cm").await?;
    let uid = cm["metadata"]["uid"].clone();
    edit_as_person(
        &s.configmaps(),
        "m-cm",
        json!({"metadata": {"labels": {"team": "blue"}}, "data": {"foreign": "f"}}),
    )
    .await?;
    let foreign_kept = |c: &Value| {
        c["metadata"]["uid"] == uid
            && c["metadata"]["labels"]["team"] == "blue"
            && c["data"]["foreign"] == "f"
    };

    // dynamic apply → server-side apply: the child is applied in place, the field the hook no
    // longer sets is removed, the person's fields stay
    s.stop_controller().await?;
    s.start_controller_with(ssa());
    s.merge_patch(
        &s.parents(),
        "m",
        json!({"spec": {"message": "b", "extra": null}}),
    )
    .await?;
    let cm = s
        .wait_child_where("m-cm", "applied under SSA", |c| c["data"]["message"] == "b")
        .await?;
    assert!(foreign_kept(&cm), "{cm}");
    assert_eq!(cm["data"].get("extra"), None, "{cm}");
    let parent = s.get(&s.parents(), "m").await?.unwrap();
    let mine = field_manager(
        "metacontroller",
        "migrate-cc",
        parent["metadata"]["uid"].as_str().unwrap(),
    );
    let ours: Vec<_> = managers(&cm)
        .into_iter()
        .filter(|(m, _)| *m == mine)
        .collect();
    assert_eq!(ours, vec![(mine.clone(), "Apply".to_owned())], "{cm}");

    // and back to dynamic apply
    s.stop_controller().await?;
    s.start_controller_with(ManagerConfig::default());
    s.merge_patch(&s.parents(), "m", json!({"spec": {"message": "c"}}))
        .await?;
    let cm = s
        .wait_child_where("m-cm", "updated under dynamic apply", |c| {
            c["data"]["message"] == "c"
        })
        .await?;
    assert!(foreign_kept(&cm), "{cm}");
    s.finish().await
}

/// Drift policy `Report`: a person's edit is reported (event, `ChildDrift` condition,
/// `kmeta_child_drift`) and left; a change of the hook's answer is still written.
async fn report_leaves_a_person_edit(name: &str, strategy: ApplyStrategy) -> anyhow::Result<()> {
    let cc = format!("{name}-cc");
    let s = Scenario::new(name)
        .crd("Thing", "things")
        .hook(hook)
        .controller(Cc::new(&cc).patch(json!({"childResources": [{
            "apiVersion": "v1", "resource": "configmaps",
            "updateStrategy": {"method": "InPlace"}, "driftPolicy": "Report"}]})))
        .config(ManagerConfig::default().apply_strategy(strategy))
        .parent("r", json!({"message": "hello"}))
        .start()
        .await?;
    s.wait_child("r-cm").await?;
    let reason = match strategy {
        ApplyStrategy::ServerSideApply => "ChildConflict",
        ApplyStrategy::DynamicApply => "ChildDrift",
    };
    let event = person_edit_told(
        &s,
        &s.configmaps(),
        "r-cm",
        json!({"data": {"message": "edited"}}),
        reason,
    )
    .await?;
    let note = event["note"].as_str().unwrap_or_default();
    assert!(note.contains(".data.message"), "{note}");
    let parent = s
        .wait_parent("r", "ChildDrift condition", |p| {
            condition(p, "ChildDrift").is_some()
        })
        .await?;
    let c = condition(&parent, "ChildDrift").unwrap();
    assert_eq!(c["status"], "True");
    assert!(c["message"].as_str().unwrap().contains("r-cm"), "{c}");
    assert_eq!(s.metrics.child_drift_total(&cc), 1);
    // left as it is, also after another sync
    let touch = json!({"metadata": {"annotations": {"kmeta.test/touch": "1"}}});
    s.patch_and_sync(&cc, &s.parents(), "r", touch).await?;
    let cm = s.get(&s.configmaps(), "r-cm").await?.unwrap();
    assert_eq!(cm["data"]["message"], "edited", "{cm}");

    // a change of the hook's answer: dynamic apply writes it (the merge sets the hook's fields);
    // server-side apply never forces under Report, so while the person holds a field the hook
    // sets, the apply is refused whole and the child stays as it is, still reported
    let changed = json!({"spec": {"message": "bye", "extra": "x"}});
    match strategy {
        ApplyStrategy::DynamicApply => {
            s.merge_patch(&s.parents(), "r", changed).await?;
            let cm = s
                .wait_child_where("r-cm", "hook change written", |c| c["data"]["extra"] == "x")
                .await?;
            assert_eq!(cm["data"]["message"], "bye", "{cm}");
            s.wait_parent("r", "ChildDrift condition cleared", |p| {
                condition(p, "ChildDrift").is_none()
            })
            .await?;
            assert_eq!(s.metrics.child_drift_total(&cc), 0);
        }
        ApplyStrategy::ServerSideApply => {
            s.patch_and_sync(&cc, &s.parents(), "r", changed).await?;
            let cm = s.get(&s.configmaps(), "r-cm").await?.unwrap();
            assert_eq!(cm["data"], json!({"message": "edited"}), "{cm}");
            let parent = s.get(&s.parents(), "r").await?.unwrap();
            assert!(condition(&parent, "ChildDrift").is_some(), "{parent}");
            assert_eq!(s.metrics.child_drift_total(&cc), 1);
        }
    }
    s.finish().await
}

#[tokio::test]
async fn report_leaves_a_person_edit_under_dynamic_apply() -> anyhow::Result<()> {
    report_leaves_a_person_edit("drift-report", ApplyStrategy::DynamicApply).await
}

#[tokio::test]
async fn report_leaves_a_person_edit_under_server_side_apply() -> anyhow::Result<()> {
    report_leaves_a_person_edit("ssa-report", ApplyStrategy::ServerSideApply).await
}

/// Drift policy `Ignore`: children are created, never updated.
#[tokio::test]
async fn ignore_creates_children_only() -> anyhow::Result<()> {
    for (name, strategy) in [
        ("drift-ignore", ApplyStrategy::DynamicApply),
        ("ssa-ignore", ApplyStrategy::ServerSideApply),
    ] {
        let cc = format!("{name}-cc");
        let s = Scenario::new(name)
            .crd("Thing", "things")
            .hook(hook)
            .controller(Cc::new(&cc).patch(json!({"childResources": [{
                "apiVersion": "v1", "resource": "configmaps",
                "updateStrategy": {"method": "InPlace"}, "driftPolicy": "Ignore"}]})))
            .config(ManagerConfig::default().apply_strategy(strategy))
            .parent("i", json!({"message": "hello"}))
            .start()
            .await?;
        let created = s.wait_child("i-cm").await?;
        s.patch_and_sync(&cc, &s.parents(), "i", json!({"spec": {"message": "bye"}}))
            .await?;
        let cm = s.get(&s.configmaps(), "i-cm").await?.unwrap();
        assert_eq!(
            cm["metadata"]["resourceVersion"],
            created["metadata"]["resourceVersion"]
        );
        assert_eq!(cm["data"]["message"], "hello");
        s.finish().await?;
    }
    Ok(())
}

/// Every parent wants the same ConfigMap `shared`, unless its `spec.want` is `false`.
pub(crate) fn shared_hook(_hook: &str, req: &Value) -> Reply {
    let parent = &req["parent"];
    let children = if parent["spec"]["want"] == false {
        json!([])
    } else {
        json!([{"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "shared"},
            "data": {"owner": parent["metadata"]["name"]}}])
    };
    Reply::Json(json!({
        "status": {"observedChildren": observed_configmaps(req)},
        "children": children
    }))
}

/// The `resourceVersion` of ConfigMap `name` after each of `rounds` synced touches of every
/// parent in `parents` (a bounded window of syncs in which a flapping child would be rewritten).
async fn versions_over_syncs(
    s: &Running,
    cc: &str,
    parents: &[&str],
    rounds: usize,
) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for round in 0..rounds {
        for name in parents {
            let touch =
                json!({"metadata": {"annotations": {"kmeta.test/touch": round.to_string()}}});
            s.patch_and_sync(cc, &s.parents(), name, touch).await?;
        }
        let cm = s.get(&s.configmaps(), "shared").await?;
        out.push(
            cm.map(|c| c["metadata"]["resourceVersion"].clone())
                .unwrap_or_default(),
        );
    }
    Ok(out)
}

/// Parent `first` after a sync (made by touching it with `touch`), once it has (`contested`) or
/// has not a `ChildContested` condition.
async fn holder_after_a_sync(s: &Running, touch: &str, contested: bool) -> anyhow::Result<Value> {
    let patch = json!({"metadata": {"annotations": {"kmeta.test/touch": touch}}});
    s.patch_and_sync("contest-cc", &s.parents(), "first", patch)
        .await?;
    let what = format!("ChildContested on the holder: {contested} ({touch})");
    s.wait_parent("first", &what, |p| {
        condition(p, "ChildContested").is_some() == contested
    })
    .await
}

/// Two parents wanting one child under server-side apply: the first one's child stays its own;
/// both parents end with a `ChildContested` condition naming the child (the second also names
/// the holder), and neither rewrites the child again and again.
#[tokio::test]
async fn two_parents_wanting_one_child_end_contested_without_flapping() -> anyhow::Result<()> {
    let s = Scenario::new("ssa-contest")
        .crd("Thing", "things")
        .hook(shared_hook)
        .controller(Cc::new("contest-cc"))
        .config(ssa())
        .parent("first", json!({}))
        .start()
        .await?;
    let cm = s.wait_child("shared").await?;
    assert_eq!(cm["data"]["owner"], "first");
    let mut s = s;
    s.parent("second", json!({})).await?;
    let event = s
        .wait_event("ChildContested for the second parent", Some(&s.ns), |e| {
            e["reason"] == "ChildContested" && e["regarding"]["name"] == "second"
        })
        .await?;
    let note = event["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("ConfigMap") && note.contains("Thing first"),
        "{event}"
    );
    let second = s
        .wait_parent("second", "ChildContested condition", |p| {
            condition(p, "ChildContested").is_some()
        })
        .await?;
    let c = condition(&second, "ChildContested").unwrap();
    let message = c["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("shared") && message.contains("held by Thing first"),
        "{c}"
    );
    // the holder learns it at its next sync
    let first = holder_after_a_sync(&s, "holder", true).await?;
    let c = condition(&first, "ChildContested").unwrap();
    let message = c["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("shared") && message.contains("second"),
        "{c}"
    );
    s.wait_event("ChildContested for the holder", Some(&s.ns), |e| {
        e["reason"] == "ChildContested" && e["regarding"]["name"] == "first"
    })
    .await?;

    let rv =
        s.get(&s.configmaps(), "shared").await?.unwrap()["metadata"]["resourceVersion"].clone();
    let versions = versions_over_syncs(&s, "contest-cc", &["first", "second"], 3).await?;
    assert_eq!(versions, vec![rv.clone(); 3], "the child was rewritten");
    let cm = s.get(&s.configmaps(), "shared").await?.unwrap();
    assert_eq!(cm["data"]["owner"], "first");
    assert!(s.metrics.child_op_count("contest-cc", "contested") > 0);

    // once the second parent stops wanting it, the holder's condition goes at its next sync;
    // and so once the second parent is deleted while it wants the child
    let want = |w: bool| json!({"spec": {"want": w}});
    s.patch_and_sync("contest-cc", &s.parents(), "second", want(false))
        .await?;
    holder_after_a_sync(&s, "alone", false).await?;
    s.patch_and_sync("contest-cc", &s.parents(), "second", want(true))
        .await?;
    holder_after_a_sync(&s, "again", true).await?;
    s.parents().delete("second", &Default::default()).await?;
    s.wait_gone(&s.parents(), "second", "the other parent deleted")
        .await?;
    holder_after_a_sync(&s, "deleted", false).await?;
    s.finish().await
}

/// One Service per decorated ConfigMap, its port from the ConfigMap's `data.port`.
fn service_hook(_hook: &str, req: &Value) -> Reply {
    let obj = &req["object"];
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let port: i64 = obj["data"]["port"]
        .as_str()
        .and_then(|p| p.parse().ok())
        .unwrap_or(80);
    Reply::Json(
        json!({"attachments": [{"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": format!("{name}-svc")},
        "spec": {"selector": {"app": name}, "ports": [{"name": "web", "port": port}]}}]}),
    )
}

/// A DecoratorController's attachments follow the strategy too (here its annotation).
#[tokio::test]
async fn decorator_attachments_are_applied() -> anyhow::Result<()> {
    let mut s = Scenario::new("ssa-dc").hook(service_hook).start().await?;
    let dc = Dc::new("svc-dc")
        .resources(json!([{"apiVersion": "v1", "resource": "configmaps",
            "labelSelector": {"matchLabels": {"svc": "yes"}}}]))
        .attachments(json!([{"apiVersion": "v1", "resource": "services",
            "updateStrategy": {"method": "InPlace"}}]))
        .annotate(STRATEGY_ANNOTATION, "server-side-apply");
    s.decorator(dc).await?;
    let ns = s.ns.clone();
    let target = s
        .create(
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web", "namespace": ns, "labels": {"svc": "yes"}},
            "data": {"port": "80"}}),
        )
        .await?;
    let services = s.api("v1", "Service", "services", Some(&ns));
    s.wait_for(&services, "web-svc", "the attachment", |_| true)
        .await?;
    s.merge_patch(&s.configmaps(), "web", json!({"data": {"port": "8080"}}))
        .await?;
    let svc = s
        .wait_for(&services, "web-svc", "the attachment updated", |svc| {
            svc["spec"]["ports"] == json!([{"name": "web", "port": 8080}])
        })
        .await?;
    let mine = field_manager(
        "metacontroller",
        "svc-dc",
        target["metadata"]["uid"].as_str().unwrap(),
    );
    let ours: Vec<_> = managers(&svc)
        .into_iter()
        .filter(|(m, _)| *m == mine)
        .collect();
    assert_eq!(ours, vec![(mine.clone(), "Apply".to_owned())], "{svc}");
    s.finish().await
}

/// One Service per parent, selecting `app: <spec.message>`.
fn service_child_hook(_hook: &str, req: &Value) -> Reply {
    let parent = &req["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    Reply::Json(json!({
        "children": [{
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": format!("{name}-svc")},
            "spec": {"selector": {"app": parent["spec"]["message"]},
                "ports": [{"name": "web", "port": 80}]}
        }]
    }))
}

/// A CompositeController of Things with Service children under server-side apply and drift
/// policy `drift`.
async fn service_scenario(name: &str, drift: &str) -> anyhow::Result<Running> {
    Scenario::new(name)
        .crd("Thing", "things")
        .hook(service_child_hook)
        .controller(
            Cc::new(&format!("{name}-cc")).patch(json!({"childResources": [{
            "apiVersion": "v1", "resource": "services",
            "updateStrategy": {"method": "InPlace"}, "driftPolicy": drift}]})),
        )
        .config(ssa())
        .parent("s", json!({"message": "web"}))
        .start()
        .await
}

/// A person's edit of a Service's spec (an update by another manager; a Service's generation
/// does not say it changed) is reverted under `Enforce`, naming the field and its manager.
#[tokio::test]
async fn a_person_edit_of_a_service_is_reverted_and_named() -> anyhow::Result<()> {
    let s = service_scenario("ssa-svc-edit", "Enforce").await?;
    let services = s.api("v1", "Service", "services", Some(&s.ns));
    s.wait_for(&services, "s-svc", "the child", |_| true)
        .await?;
    let event = person_edit_told(
        &s,
        &services,
        "s-svc",
        json!({"spec": {"selector": {"app": "edited"}}}),
        "ChildFieldsTaken",
    )
    .await?;
    let note = event["note"].as_str().unwrap_or_default();
    // a Service's selector is an atomic map (`+mapType=atomic`): the edit takes it whole
    assert!(
        note.contains(".spec.selector from \"kubectl-edit\""),
        "{note}"
    );
    let svc = s
        .wait_for(&services, "s-svc", "edit reverted", |svc| {
            svc["spec"]["selector"]["app"] == "web"
        })
        .await?;
    assert_taken_from_person(&svc);
    s.finish().await
}

/// Under `Report`, the same edit of a Service is reported (`ChildConflict` event, `ChildDrift`
/// condition) and left as it is.
#[tokio::test]
async fn a_person_edit_of_a_service_is_reported_and_left() -> anyhow::Result<()> {
    let s = service_scenario("ssa-svc-report", "Report").await?;
    let services = s.api("v1", "Service", "services", Some(&s.ns));
    s.wait_for(&services, "s-svc", "the child", |_| true)
        .await?;
    let event = person_edit_told(
        &s,
        &services,
        "s-svc",
        json!({"spec": {"selector": {"app": "edited"}}}),
        "ChildConflict",
    )
    .await?;
    let note = event["note"].as_str().unwrap_or_default();
    // a Service's selector is an atomic map (`+mapType=atomic`): the edit takes it whole
    assert!(
        note.contains(".spec.selector from \"kubectl-edit\""),
        "{note}"
    );
    let parent = s
        .wait_parent("s", "ChildDrift condition", |p| {
            condition(p, "ChildDrift").is_some()
        })
        .await?;
    let c = condition(&parent, "ChildDrift").unwrap();
    assert!(
        c["message"].as_str().unwrap_or_default().contains("s-svc"),
        "{c}"
    );
    let touch = json!({"metadata": {"annotations": {"kmeta.test/touch": "1"}}});
    s.patch_and_sync("ssa-svc-report-cc", &s.parents(), "s", touch)
        .await?;
    let svc = s.get(&services, "s-svc").await?.unwrap();
    assert_eq!(svc["spec"]["selector"]["app"], "edited", "{svc}");
    s.finish().await
}

/// Two DecoratorControllers attaching the same Service to one ConfigMap under server-side
/// apply: the attachment stays the first one's; the second is told who holds it, the first is
/// told who else wants it (`ChildContested` events on the target), and the Service is not
/// rewritten by either.
#[tokio::test]
async fn two_decorators_attaching_one_child_end_contested_without_flapping() -> anyhow::Result<()> {
    let mut s = Scenario::new("ssa-dc-contest")
        .hook(service_hook)
        .config(ssa())
        .start()
        .await?;
    let dc = |name: &str| {
        Dc::new(name)
            .resources(json!([{"apiVersion": "v1", "resource": "configmaps",
                "labelSelector": {"matchLabels": {"svc": "yes"}}}]))
            .attachments(json!([{"apiVersion": "v1", "resource": "services",
                "updateStrategy": {"method": "InPlace"}}]))
    };
    s.decorator(dc("svc-first")).await?;
    let ns = s.ns.clone();
    s.create(
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web", "namespace": ns, "labels": {"svc": "yes"}},
            "data": {"port": "80"}}),
    )
    .await?;
    let services = s.api("v1", "Service", "services", Some(&ns));
    s.wait_for(
        &services,
        "web-svc",
        "the first decorator's attachment",
        |svc| {
            svc["metadata"]["annotations"]["metacontroller.k8s.io/decorator-controller"]
                == "svc-first"
        },
    )
    .await?;
    s.decorator(dc("svc-second")).await?;
    let event = s
        .wait_event("ChildContested for the second decorator", Some(&ns), |e| {
            e["reason"] == "ChildContested"
                && e["note"]
                    .as_str()
                    .is_some_and(|n| n.contains("held by ConfigMap web"))
        })
        .await?;
    let note = event["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("Service") && note.contains("DecoratorController svc-first"),
        "{event}"
    );
    // the holder learns it at its next sync of the target (checked through its own
    // `kmeta_child_drift` count: its event about the target has the contender's reason)
    let touch = json!({"metadata": {"annotations": {"kmeta.test/touch": "holder"}}});
    s.patch_and_sync("svc-first", &s.configmaps(), "web", touch)
        .await?;
    // (once; a sync retried after an injected fault may report it again)
    let drift = s.metrics.child_drift_total("svc-first");
    if requests_disturbed()? {
        assert!(drift >= 1, "{drift}");
    } else {
        assert_eq!(drift, 1);
    }

    let rv = s.get(&services, "web-svc").await?.unwrap()["metadata"]["resourceVersion"].clone();
    for round in 0..3 {
        let touch = json!({"metadata": {"annotations": {"kmeta.test/touch": round.to_string()}}});
        let first = s.syncs("svc-first");
        s.patch_and_sync("svc-second", &s.configmaps(), "web", touch)
            .await?;
        s.wait_syncs("svc-first", first).await?;
        let svc = s.get(&services, "web-svc").await?.unwrap();
        assert_eq!(
            svc["metadata"]["resourceVersion"], rv,
            "round {round}: the attachment was rewritten: {svc}"
        );
    }
    assert!(s.metrics.child_op_count("svc-second", "contested") > 0);
    s.finish().await
}

/// An unknown `kmeta.dev/apply-strategy` value stops that controller: a Warning event on the
/// CompositeController names the annotation and the value, and no child is written.
#[tokio::test]
async fn an_unknown_strategy_annotation_stops_the_controller() -> anyhow::Result<()> {
    let s = Scenario::new("ssa-bad")
        .crd("Thing", "things")
        .hook(hook)
        .controller(Cc::new("ssa-bad-cc").annotate(STRATEGY_ANNOTATION, "merge"))
        .parent("b", json!({"message": "hello"}))
        .start()
        .await?;
    let event = s
        .wait_event("the controller's start failure", None, |e| {
            e["regarding"]["kind"] == "CompositeController"
                && e["regarding"]["name"] == "ssa-bad-cc"
                && e["type"] == "Warning"
        })
        .await?;
    let note = event["note"].as_str().unwrap_or_default();
    assert!(
        note.contains(STRATEGY_ANNOTATION) && note.contains("merge"),
        "{event}"
    );
    assert!(s.get(&s.configmaps(), "b-cm").await?.is_none());
    assert_eq!(s.syncs("ssa-bad-cc"), 0);
    s.finish().await
}

/// Annotating a running CompositeController with `kmeta.dev/apply-strategy` switches it: the
/// controller restarts and its next child write is a server-side apply (before, the annotation
/// was read only when the controller started).
#[tokio::test]
async fn annotating_a_running_controller_switches_its_strategy() -> anyhow::Result<()> {
    let s = Scenario::new("ssa-annotate")
        .crd("Thing", "things")
        .hook(hook)
        .controller(Cc::new("annotate-cc"))
        .parent("n", json!({"message": "a"}))
        .start()
        .await?;
    s.wait_child("n-cm").await?;
    let cc_name = "annotate-cc";
    let switch = json!({"metadata": {"annotations": {STRATEGY_ANNOTATION: "server-side-apply"}}});
    s.merge_patch(&s.controllers(), cc_name, switch).await?;
    let parent = s.get(&s.parents(), "n").await?.unwrap();
    let mine = field_manager(
        "metacontroller",
        cc_name,
        parent["metadata"]["uid"].as_str().unwrap(),
    );
    // a change after the switch is applied under server-side apply. The switch rebuilds the
    // controller; an edit the old one synced first is applied by dynamic apply, and the new one
    // then has nothing to change: each round edits again until the new one applies an edit
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let mut round = 0;
    let cm = loop {
        round += 1;
        let message = format!("b{round}");
        s.merge_patch(&s.parents(), "n", json!({"spec": {"message": message}}))
            .await?;
        let scenario = &s;
        let applied = eventually(
            "the edit applied by the parent's field manager",
            ROUND,
            || {
                let message = message.clone();
                let mine = mine.clone();
                async move {
                    let s = scenario;
                    let cm = s.get(&s.configmaps(), "n-cm").await?;
                    Ok(cm.filter(|c| {
                        c["data"]["message"] == message.as_str()
                            && managers(c)
                                .iter()
                                .any(|(m, op)| *m == mine && op == "Apply")
                    }))
                }
            },
        )
        .await;
        match applied {
            Ok(cm) => break cm,
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
            Err(_) => {}
        }
    };
    assert!(
        cm["data"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with('b'))
    );
    s.finish().await
}

/// How long one round of `annotating_a_running_controller_switches_its_strategy` waits for its
/// edit to be applied before it edits again.
const ROUND: std::time::Duration = std::time::Duration::from_secs(3);

/// `kmeta trace` on a parent under drift policy `Report` after a person edited its child: the
/// `ChildDrift` condition, and the last change recording the child left alone, and why.
#[tokio::test]
async fn trace_shows_a_child_left_alone_under_report() -> anyhow::Result<()> {
    use kmeta::{steer, trace};
    let cc = "trace-report-cc";
    let s = Scenario::new("trace-report")
        .crd("Thing", "things")
        .hook(hook)
        .controller(Cc::new(cc).patch(json!({"childResources": [{
            "apiVersion": "v1", "resource": "configmaps",
            "updateStrategy": {"method": "InPlace"}, "driftPolicy": "Report"}]})))
        .parent("r", json!({"message": "hello"}))
        .start()
        .await?;
    s.wait_child("r-cm").await?;
    let edit = json!({"data": {"message": "edited"}});
    person_edit_told(&s, &s.configmaps(), "r-cm", edit, "ChildDrift").await?;
    s.wait_parent("r", "ChildDrift condition", |p| {
        condition(p, "ChildDrift").is_some()
    })
    .await?;
    let discovery = steer::discover(&s.client).await?;
    let r = steer::resolve_in(&discovery, "things/r", &s.ns)?;
    let t = eventually("the drift in the record", TIMEOUT, || async {
        let t = trace::trace_parent(&s.client, &discovery, &r).await?;
        let left = t.last_change.as_ref().is_some_and(|c| {
            c["children"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["action"] == "LeftAlone"))
        });
        Ok(left.then_some(t))
    })
    .await?;
    let change = t.last_change.clone().unwrap_or_default();
    assert_eq!(change["children"][0]["name"], "r-cm", "{change}");
    assert_eq!(
        change["children"][0]["reason"], "drift policy Report",
        "{change}"
    );
    assert!(
        t.conditions
            .iter()
            .any(|c| c.starts_with("ChildDrift=True")),
        "{:?}",
        t.conditions
    );
    let text = trace::render_text(&t, false);
    assert!(
        text.contains("LeftAlone ConfigMap r-cm (drift policy Report)"),
        "{text}"
    );
    s.finish().await
}
