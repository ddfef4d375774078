//! Server-side apply without the last-applied annotation (`kmeta.dev/last-applied: omit`,
//! docs/design/ssa-without-last-applied.md): children carry no record, what the parent applied
//! is read from its field manager's `managedFields`, so an update changes a field, a field the
//! hook stops setting goes, another manager's field stays, drift policies work, a recorded
//! child loses its record, and switching back to dynamic apply removes nothing it cannot know
//! was applied.

use kmeta::reconcile::{LAST_APPLIED_OPTION, STRATEGY_ANNOTATION, field_manager};
use kmeta_tests::*;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

const RECORD: &str = dynapply::LAST_APPLIED_ANNOTATION;

/// One ConfigMap per parent with `data.message` from `spec.message` and `data.extra` while
/// `spec.extra` is set; the status counts the observed children and those the hook sees with
/// the last-applied annotation.
fn hook(_hook: &str, req: &Value) -> Reply {
    let parent = &req["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let mut data = json!({"message": parent["spec"]["message"]});
    if let Some(extra) = parent["spec"].get("extra") {
        data["extra"] = extra.clone();
    }
    let annotated = req["children"]["ConfigMap.v1"].as_object().map_or(0, |m| {
        m.values()
            .filter(|c| c["metadata"]["annotations"].get(RECORD).is_some())
            .count()
    });
    Reply::Json(json!({
        "status": {"observedChildren": observed_configmaps(req), "annotatedChildren": annotated},
        "children": [{
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-cm"), "labels": {"app": name}},
            "data": data
        }]
    }))
}

/// A CompositeController `name` applying server-side without the record, its ConfigMaps under
/// drift policy `drift`.
fn omitting(name: &str, drift: &str) -> Cc {
    Cc::new(name)
        .annotate(STRATEGY_ANNOTATION, "server-side-apply")
        .annotate(LAST_APPLIED_OPTION, "omit")
        .patch(json!({"childResources": [{
            "apiVersion": "v1", "resource": "configmaps",
            "updateStrategy": {"method": "InPlace"}, "driftPolicy": drift}]}))
}

fn recorded(cm: &Value) -> bool {
    cm["metadata"]["annotations"].get(RECORD).is_some()
}

/// The managers of `obj` with their operations.
fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (s("manager"), s("operation"))
        })
        .collect()
}

/// The field manager of parent `name` of controller `cc`.
async fn manager_of(s: &Running, cc: &str, name: &str) -> anyhow::Result<String> {
    let parent = s.get(&s.parents(), name).await?.unwrap_or_default();
    let uid = parent["metadata"]["uid"].as_str().unwrap_or_default();
    Ok(field_manager("metacontroller", cc, uid))
}

/// Another writer (manager `injector`) applies `data.sidecar` and a label to ConfigMap `name`.
async fn inject(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"injected": "yes"}}, "data": {"sidecar": "s"}});
    api.patch(name, &PatchParams::apply("injector"), &Patch::Apply(&body))
        .await?;
    Ok(())
}

/// A person's `kubectl edit` (manager `kubectl-edit`) of ConfigMap `name`.
async fn edit_as_person(api: &Api<DynamicObject>, name: &str, patch: Value) -> anyhow::Result<()> {
    let params = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    api.patch(name, &params, &Patch::Merge(&patch)).await?;
    Ok(())
}

#[tokio::test]
async fn children_without_the_record_follow_the_hook_and_keep_others_fields() -> anyhow::Result<()>
{
    let cc = "omit-cc";
    let s = Scenario::new("ssa-omit")
        .crd("Thing", "things")
        .hook(hook)
        .controller(omitting(cc, "Enforce"))
        .parent("one", json!({"message": "hello", "extra": "x"}))
        .start()
        .await?;
    let cm = s.wait_child("one-cm").await?;
    assert!(!recorded(&cm), "created without the record: {cm}");
    assert_eq!(cm["data"], json!({"message": "hello", "extra": "x"}));
    // the hook sees its child, without the record
    s.wait_parent("one", "the child observed", |p| {
        p["status"]["observedChildren"] == 1 && p["status"]["annotatedChildren"] == 0
    })
    .await?;
    inject(&s.configmaps(), "one-cm").await?;

    // a steady child is not written again
    let updates = s.metrics.child_op_count(cc, "update");
    let touch = json!({"metadata": {"annotations": {"kmeta.test/touch": "1"}}});
    s.patch_and_sync(cc, &s.parents(), "one", touch).await?;
    assert_eq!(s.metrics.child_op_count(cc, "update"), updates);

    // an update changes a field and removes the one the hook stops setting; the injected ones stay
    let change = json!({"spec": {"message": "bye", "extra": null}});
    s.merge_patch(&s.parents(), "one", change).await?;
    let cm = s
        .wait_child_where("one-cm", "the hook's change applied", |c| {
            c["data"]["message"] == "bye" && c["data"].get("extra").is_none()
        })
        .await?;
    assert_eq!(
        cm["data"],
        json!({"message": "bye", "sidecar": "s"}),
        "{cm}"
    );
    assert_eq!(cm["metadata"]["labels"]["injected"], "yes", "{cm}");
    assert!(!recorded(&cm), "{cm}");
    let mine = manager_of(&s, cc, "one").await?;
    let ours: Vec<_> = managers(&cm)
        .into_iter()
        .filter(|(m, _)| *m == mine)
        .collect();
    assert_eq!(ours, vec![(mine, "Apply".to_owned())], "{cm}");
    s.finish().await
}

/// Drift policy `Enforce` takes a person's edit back and names it; `Report` reports it and
/// leaves it, also after another sync: drift is found without the record.
#[tokio::test]
async fn drift_policies_work_without_the_record() -> anyhow::Result<()> {
    for (drift, reason) in [("Enforce", "ChildFieldsTaken"), ("Report", "ChildConflict")] {
        let cc = format!("omit-{}-cc", drift.to_lowercase());
        let s = Scenario::new(&format!("ssa-omit-{}", drift.to_lowercase()))
            .crd("Thing", "things")
            .hook(hook)
            .controller(omitting(&cc, drift))
            .parent("d", json!({"message": "hello"}))
            .start()
            .await?;
        s.wait_child("d-cm").await?;
        let edit = json!({"data": {"message": "edited"}});
        edit_as_person(&s.configmaps(), "d-cm", edit).await?;
        let event = s
            .wait_event(&format!("{reason} event"), Some(&s.ns), |e| {
                e["reason"] == reason
            })
            .await?;
        let note = event["note"].as_str().unwrap_or_default();
        assert!(
            note.contains(".data.message") && note.contains("kubectl-edit"),
            "{note}"
        );
        if drift == "Enforce" {
            let cm = s
                .wait_child_where("d-cm", "the edit taken back", |c| {
                    c["data"]["message"] == "hello"
                })
                .await?;
            assert!(!recorded(&cm), "{cm}");
        } else {
            s.wait_parent("d", "ChildDrift condition", |p| {
                p["status"]["conditions"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().any(|c| c["type"] == "ChildDrift"))
            })
            .await?;
            assert_eq!(s.metrics.child_drift_total(&cc), 1);
            let touch = json!({"metadata": {"annotations": {"kmeta.test/touch": "1"}}});
            s.patch_and_sync(&cc, &s.parents(), "d", touch).await?;
            let cm = s.get(&s.configmaps(), "d-cm").await?.unwrap();
            assert_eq!(cm["data"]["message"], "edited", "left as it is: {cm}");
        }
        s.finish().await?;
    }
    Ok(())
}

/// A controller switched from dynamic apply to server-side apply without the record: its next
/// apply removes the record from each child (the parent's manager owned it), and keeps the
/// child's content and others' fields.
#[tokio::test]
async fn a_recorded_child_loses_its_record() -> anyhow::Result<()> {
    let cc = "unrecord-cc";
    let s = Scenario::new("ssa-omit-switch")
        .crd("Thing", "things")
        .hook(hook)
        .controller(Cc::new(cc))
        .parent("r", json!({"message": "hello", "extra": "x"}))
        .start()
        .await?;
    let cm = s.wait_child("r-cm").await?;
    assert!(recorded(&cm), "dynamic apply records: {cm}");
    let uid = cm["metadata"]["uid"].clone();
    edit_as_person(&s.configmaps(), "r-cm", json!({"data": {"foreign": "f"}})).await?;
    let switch = json!({"metadata": {"annotations": {
        STRATEGY_ANNOTATION: "server-side-apply", LAST_APPLIED_OPTION: "omit"}}});
    s.merge_patch(&s.controllers(), cc, switch).await?;
    // the controller restarts and syncs its parents: the record goes
    let cm = s
        .wait_child_where("r-cm", "the record removed", |c| !recorded(c))
        .await?;
    assert_eq!(cm["metadata"]["uid"], uid, "updated in place: {cm}");
    assert_eq!(
        cm["data"],
        json!({"message": "hello", "extra": "x", "foreign": "f"}),
        "{cm}"
    );
    // and what was applied under the record is known: a field the hook stops setting goes
    let change = json!({"spec": {"extra": null}});
    s.merge_patch(&s.parents(), "r", change).await?;
    let cm = s
        .wait_child_where("r-cm", "extra removed", |c| {
            c["data"].get("extra").is_none()
        })
        .await?;
    assert_eq!(
        cm["data"],
        json!({"message": "hello", "foreign": "f"}),
        "{cm}"
    );
    s.finish().await
}

/// Back to dynamic apply: a child without the record has no merge base, so the first update
/// removes nothing (a field the hook stopped setting stays, and so do others' fields); it
/// writes the record again, and from then on a field the hook stops setting goes.
#[tokio::test]
async fn switching_back_to_dynamic_apply_removes_nothing_unknown() -> anyhow::Result<()> {
    let cc = "back-cc";
    let mut s = Scenario::new("ssa-omit-back")
        .crd("Thing", "things")
        .hook(hook)
        .controller(omitting(cc, "Enforce"))
        .parent("b", json!({"message": "hello", "extra": "x"}))
        .start()
        .await?;
    let cm = s.wait_child("b-cm").await?;
    assert!(!recorded(&cm), "{cm}");
    inject(&s.configmaps(), "b-cm").await?;
    // switched and answering without `extra` at once (kmeta stopped meanwhile): the first
    // write under dynamic apply is the one that would need a base
    s.stop_controller().await?;
    let back = json!({"metadata": {"annotations": {
        STRATEGY_ANNOTATION: "dynamic-apply", LAST_APPLIED_OPTION: null}}});
    s.merge_patch(&s.controllers(), cc, back).await?;
    let change = json!({"spec": {"message": "bye", "extra": null}});
    s.merge_patch(&s.parents(), "b", change).await?;
    s.start_controller();
    let cm = s
        .wait_child_where("b-cm", "updated under dynamic apply", |c| {
            c["data"]["message"] == "bye" && recorded(c)
        })
        .await?;
    assert_eq!(
        cm["data"],
        json!({"message": "bye", "extra": "x", "sidecar": "s"}),
        "nothing removed without a base: {cm}"
    );
    // with the record back, a field the hook sets and then drops is removed again
    s.merge_patch(&s.parents(), "b", json!({"spec": {"extra": "y"}}))
        .await?;
    s.wait_child_where("b-cm", "extra set", |c| c["data"]["extra"] == "y")
        .await?;
    s.merge_patch(&s.parents(), "b", json!({"spec": {"extra": null}}))
        .await?;
    let cm = s
        .wait_child_where("b-cm", "extra removed", |c| {
            c["data"].get("extra").is_none()
        })
        .await?;
    assert_eq!(
        cm["data"],
        json!({"message": "bye", "sidecar": "s"}),
        "{cm}"
    );
    s.finish().await
}

/// `omit` without server-side apply stops the controller, naming the annotation.
#[tokio::test]
async fn omitting_the_record_under_dynamic_apply_stops_the_controller() -> anyhow::Result<()> {
    let s = Scenario::new("ssa-omit-bad")
        .crd("Thing", "things")
        .hook(hook)
        .controller(Cc::new("omit-bad-cc").annotate(LAST_APPLIED_OPTION, "omit"))
        .parent("x", json!({"message": "hello"}))
        .start()
        .await?;
    let event = s
        .wait_event("the controller's start failure", None, |e| {
            e["regarding"]["kind"] == "CompositeController"
                && e["regarding"]["name"] == "omit-bad-cc"
                && e["type"] == "Warning"
        })
        .await?;
    let note = event["note"].as_str().unwrap_or_default();
    assert!(note.contains(LAST_APPLIED_OPTION), "{event}");
    assert!(s.get(&s.configmaps(), "x-cm").await?.is_none());
    s.finish().await
}
