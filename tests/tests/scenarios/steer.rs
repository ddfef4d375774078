//! Seeing and steering what kmeta does for one parent: events a hook asks for.

use kmeta_tests::*;
use serde_json::{Value, json};

/// One ConfigMap per parent, and three events: a Normal and a Warning to publish, one invalid.
fn hook_with_events(_hook: &str, req: &Value) -> Reply {
    let name = req["parent"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    Reply::Json(json!({
        "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": format!("{name}-cm")}, "data": {"a": "1"}}],
        "events": [
            {"type": "Normal", "reason": "ConfigRendered", "message": format!("{name}: one ConfigMap")},
            {"type": "Warning", "reason": "QuotaLow", "message": "2 ConfigMaps left"},
            {"type": "Error", "reason": "Bogus", "message": "not a type"}
        ]
    }))
}

each_hook_mode!(a_hooks_events_are_published_on_the_parent);
async fn a_hooks_events_are_published_on_the_parent(mode: HookMode) -> anyhow::Result<()> {
    let s = Scenario::new("hook-events")
        .hook_mode(mode)
        .crd("Thing", "things")
        .hook(hook_with_events)
        .controller(Cc::new("things-cc"))
        .parent("one", json!({}))
        .start()
        .await?;
    s.wait_child("one-cm").await?;
    let on_one = |e: &Value, reason: &str| e["reason"] == reason && e["regarding"]["name"] == "one";
    let normal = s
        .wait_event("the hook's Normal event", Some(&s.ns), |e| {
            on_one(e, "ConfigRendered")
        })
        .await?;
    assert_eq!(normal["type"], "Normal");
    assert_eq!(normal["note"], "one: one ConfigMap");
    assert_eq!(normal["regarding"]["kind"], "Thing");
    let warning = s
        .wait_event("the hook's Warning event", Some(&s.ns), |e| {
            on_one(e, "QuotaLow")
        })
        .await?;
    assert_eq!(warning["type"], "Warning");
    // the invalid one is reported, and the sync is not failed by it
    let invalid = s
        .wait_event("HookEventInvalid", Some(&s.ns), |e| {
            on_one(e, "HookEventInvalid")
        })
        .await?;
    let note = invalid["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("event 2: type must be Normal or Warning"),
        "{note}"
    );
    let parent = s.get(&s.parents(), "one").await?.unwrap_or_default();
    assert!(
        parent["status"]["conditions"]
            .as_array()
            .is_none_or(|c| c.iter().all(|c| c["type"] != "Synced")),
        "the sync did not fail: {parent}"
    );
    s.finish().await
}

/// One ConfigMap per name in the parent's `spec.children`.
fn children_from_spec(_hook: &str, req: &Value) -> Reply {
    let names = req["parent"]["spec"]["children"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let children: Vec<Value> = names
        .iter()
        .map(|n| {
            let mut child =
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}});
            if let Some(data) = req["parent"]["spec"].get("data") {
                child["data"] = data.clone();
            }
            child
        })
        .collect();
    Reply::Json(json!({"status": {"children": names.len()}, "children": children}))
}

/// `Action name` of each child in a sync record, sorted.
fn done(record: &Value) -> Vec<String> {
    let mut out: Vec<String> = record["children"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{} {}",
                c["action"].as_str().unwrap_or("?"),
                c["name"].as_str().unwrap_or("?")
            )
        })
        .collect();
    out.sort();
    out
}

const PAUSED: &str = "kmeta.dev/paused";

each_hook_mode!(a_paused_parent_keeps_its_children_while_the_hook_would_delete_them);
async fn a_paused_parent_keeps_its_children_while_the_hook_would_delete_them(
    mode: HookMode,
) -> anyhow::Result<()> {
    let s = Scenario::new("pause")
        .hook_mode(mode)
        .crd("Thing", "things")
        .hook(children_from_spec)
        .controller(Cc::new("things-cc"))
        .parent("one", json!({"children": ["a", "b"]}))
        .start()
        .await?;
    s.wait_child("a").await?;
    s.wait_child("b").await?;
    // paused, and in the same write the hook is told to delete every child
    let patch = json!({"metadata": {"annotations": {PAUSED: "true"}}, "spec": {"children": []}});
    s.merge_patch(&s.parents(), "one", patch).await?;
    let parent = s
        .wait_parent("one", "a Paused condition", |p| {
            condition(p, "Paused").is_some_and(|c| c["status"] == "True")
        })
        .await?;
    let message = condition(&parent, "Paused").map(|c| c["message"].clone());
    assert_eq!(
        message,
        Some(json!("kmeta.dev/paused is \"true\" on this object"))
    );
    s.wait_event("a Paused event", Some(&s.ns), |e| {
        e["reason"] == "Paused" && e["regarding"]["name"] == "one" && e["type"] == "Normal"
    })
    .await?;
    // the sync that read the pause (and every later one) called no hook and wrote no child
    for req in s.hooks().calls("sync") {
        assert!(
            req["parent"]["metadata"]["annotations"][PAUSED].is_null(),
            "the hook was called for a paused parent: {req}"
        );
    }
    assert!(s.get(&s.configmaps(), "a").await?.is_some(), "child a kept");
    assert!(s.get(&s.configmaps(), "b").await?.is_some(), "child b kept");

    // resumed: at once, the hook's answer applies and its status replaces the condition
    let resume = json!({"metadata": {"annotations": {PAUSED: null}}});
    s.merge_patch(&s.parents(), "one", resume).await?;
    s.wait_parent("one", "resumed: the hook's status, no Paused", |p| {
        p["status"]["children"] == 0 && condition(p, "Paused").is_none()
    })
    .await?;
    eventually("children deleted after the resume", TIMEOUT, || async {
        let a = s.get(&s.configmaps(), "a").await?;
        let b = s.get(&s.configmaps(), "b").await?;
        Ok((a.is_none() && b.is_none()).then_some(()))
    })
    .await?;
    s.finish().await
}

/// `kmeta.dev/paused` on the CompositeController pauses all of its parents; removing it resumes
/// them (webhook mode: in-process hooks have no CompositeController object to annotate).
#[tokio::test]
async fn a_paused_controller_pauses_every_parent() -> anyhow::Result<()> {
    let s = Scenario::new("pause-cc")
        .crd("Thing", "things")
        .hook(children_from_spec)
        .controller(Cc::new("things-cc"))
        .parent("one", json!({"children": ["a"]}))
        .parent("two", json!({"children": ["b"]}))
        .start()
        .await?;
    s.wait_child("a").await?;
    s.wait_child("b").await?;
    let cc_name = "things-cc";
    let pause = json!({"metadata": {"annotations": {PAUSED: "true"}}});
    s.merge_patch(&s.controllers(), cc_name, pause).await?;
    for name in ["one", "two"] {
        let p = s
            .wait_parent(name, "Paused by its controller", |p| {
                condition(p, "Paused").is_some()
            })
            .await?;
        let message = condition(&p, "Paused").map(|c| c["message"].clone());
        let want = format!("kmeta.dev/paused is \"true\" on its CompositeController {cc_name}");
        assert_eq!(message, Some(json!(want)));
    }
    // while paused, a change reaches no hook and no child
    s.merge_patch(&s.parents(), "one", json!({"spec": {"children": []}}))
        .await?;
    let resume = json!({"metadata": {"annotations": {PAUSED: null}}});
    s.merge_patch(&s.controllers(), cc_name, resume).await?;
    s.wait_parent("one", "resumed", |p| {
        condition(p, "Paused").is_none() && p["status"]["children"] == 0
    })
    .await?;
    s.wait_parent("two", "resumed", |p| condition(p, "Paused").is_none())
        .await?;
    assert!(
        s.get(&s.configmaps(), "b").await?.is_some(),
        "two's child kept"
    );
    s.finish().await
}

/// A paused parent that is deleted: with a finalize hook, kmeta's finalizer keeps it and the
/// finalize hook waits for the resume; without one, its children are garbage collected.
#[tokio::test]
async fn a_paused_parent_being_deleted_is_finalized_only_once_resumed() -> anyhow::Result<()> {
    let hook = |hook: &str, req: &Value| match hook {
        "finalize" => Reply::Json(json!({"finalized": true})),
        _ => children_from_spec(hook, req),
    };
    let s = Scenario::new("pause-delete")
        .crd("Thing", "things")
        .hook(hook)
        .controller(Cc::new("fin-cc").hook("finalize"))
        .parent("one", json!({"children": ["a"]}))
        .start()
        .await?;
    let (things, fin) = (s.parents(), "metacontroller.io/compositecontroller-fin-cc");
    s.wait_child("a").await?;
    let has_fin = |p: &Value| {
        p["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == fin))
    };
    s.wait_parent("one", "kmeta's finalizer", has_fin).await?;
    s.merge_patch(
        &things,
        "one",
        json!({"metadata": {"annotations": {PAUSED: "true"}}}),
    )
    .await?;
    s.wait_parent("one", "Paused", |p| condition(p, "Paused").is_some())
        .await?;
    things.delete("one", &Default::default()).await?;
    // two syncs of the terminating parent: the second read a version that is being deleted
    for poke in ["1", "2"] {
        let before = s.decided_syncs("fin-cc");
        let patch = json!({"metadata": {"annotations": {"poke": poke}}});
        s.merge_patch(&things, "one", patch).await?;
        s.wait_decided_syncs("fin-cc", before).await?;
    }
    let held = s.get(&things, "one").await?.unwrap_or_default();
    assert!(held["metadata"]["deletionTimestamp"].is_string() && has_fin(&held));
    assert_eq!(s.hooks().count("finalize"), 0, "finalized while paused");
    assert!(s.get(&s.configmaps(), "a").await?.is_some());
    // resumed: finalized and gone
    s.merge_patch(
        &things,
        "one",
        json!({"metadata": {"annotations": {PAUSED: null}}}),
    )
    .await?;
    s.wait_gone(&things, "one", "finalized once resumed")
        .await?;
    assert!(s.hooks().count("finalize") >= 1);
    s.finish().await
}

#[tokio::test]
async fn a_paused_parent_deleted_without_a_finalize_hook_loses_its_children() -> anyhow::Result<()>
{
    let s = Scenario::new("pause-gc")
        .crd("Thing", "things")
        .hook(children_from_spec)
        .controller(Cc::new("gc-cc"))
        .parent("one", json!({"children": ["a"]}))
        .start()
        .await?;
    s.wait_child("a").await?;
    let things = s.parents();
    s.merge_patch(
        &things,
        "one",
        json!({"metadata": {"annotations": {PAUSED: "true"}}}),
    )
    .await?;
    s.wait_parent("one", "Paused", |p| condition(p, "Paused").is_some())
        .await?;
    things.delete("one", &Default::default()).await?;
    s.wait_gone(&things, "one", "the parent deleted").await?;
    s.wait_gone(&s.configmaps(), "a", "its child garbage collected")
        .await?;
    s.finish().await
}

/// `kmeta reconcile` on a parent whose hook failed long enough for a backoff of 10 s or more,
/// then was mended with no event: the requested sync runs at once and reports success; then a
/// failing sync and a paused parent report as such.
#[tokio::test]
async fn reconcile_now_runs_past_a_long_backoff_and_reports_the_result() -> anyhow::Result<()> {
    use kmeta::steer::{self, Reconciled};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let failing = Arc::new(AtomicBool::new(true));
    let f = failing.clone();
    let hook = move |hook: &str, req: &Value| {
        if f.load(Ordering::SeqCst) {
            Reply::Raw(500, "the database is down".into())
        } else {
            children_from_spec(hook, req)
        }
    };
    let s = Scenario::new("reconcile-now")
        .crd("Thing", "things")
        .hook(hook)
        .controller(Cc::new("now-cc"))
        .parent("one", json!({"children": ["a"]}))
        .start()
        .await?;
    // 12 failed syncs: the next retry is 5 ms × 2^11 ≈ 10 s away (the queue's backoff)
    eventually(
        "12 failed syncs",
        std::time::Duration::from_secs(60),
        || async { Ok((s.hooks().count("sync") >= 12).then_some(())) },
    )
    .await?;
    failing.store(false, Ordering::SeqCst);
    let target = steer::resolve(&s.client, "things/one", &s.ns).await?;
    let started = std::time::Instant::now();
    let result = steer::reconcile(&s.client, &target, TIMEOUT).await?;
    let took = started.elapsed();
    assert_eq!(result, Reconciled::Synced);
    assert!(
        took < std::time::Duration::from_secs(5),
        "the requested sync waited for the backoff: {took:?}"
    );
    s.wait_child("a").await?;
    // a failing sync is reported as failed, with the hook's error
    failing.store(true, Ordering::SeqCst);
    match steer::reconcile(&s.client, &target, TIMEOUT).await? {
        Reconciled::Failed(why) => assert!(why.contains("500"), "{why}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    // a paused parent is reported as paused
    steer::suspend(&s.client, &target).await?;
    match steer::reconcile(&s.client, &target, TIMEOUT).await? {
        Reconciled::Paused(why) => assert!(why.contains("on this object"), "{why}"),
        other => panic!("expected paused, got {other:?}"),
    }
    steer::resume(&s.client, &target).await?;
    s.finish().await
}

/// The trace id of a `traceparent` header (`00-<trace>-<parent>-<flags>`), checked for shape.
fn trace_of(traceparent: &str) -> String {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!(parts[0], "00", "{traceparent}");
    assert!(
        parts[1].len() == 32 && parts[2].len() == 16,
        "{traceparent}"
    );
    parts[1].to_owned()
}

/// Every hook request carries a W3C `traceparent`; the customize and sync requests of one sync
/// share its trace id, another sync has another (webhook mode: in-process hooks get no request).
#[tokio::test]
async fn hook_requests_of_one_sync_share_a_trace() -> anyhow::Result<()> {
    let hook = |hook: &str, req: &Value| match hook {
        "customize" => Reply::Json(json!({"relatedResources": []})),
        _ => children_from_spec(hook, req),
    };
    let s = Scenario::new("traceparent")
        .crd("Thing", "things")
        .hook(hook)
        .controller(Cc::new("trace-cc").hook("customize"))
        .parent("one", json!({"children": ["a"]}))
        .start()
        .await?;
    s.wait_child("a").await?;
    let patch = json!({"spec": {"children": ["a", "b"]}});
    s.patch_and_sync("trace-cc", &s.parents(), "one", patch)
        .await?;
    let syncs: Vec<String> = s
        .hooks()
        .header("sync", "traceparent")
        .into_iter()
        .map(|h| trace_of(&h.unwrap_or_default()))
        .collect();
    let customizes: Vec<String> = s
        .hooks()
        .header("customize", "traceparent")
        .into_iter()
        .map(|h| trace_of(&h.unwrap_or_default()))
        .collect();
    assert!(
        syncs.len() >= 2 && customizes.len() >= 2,
        "{syncs:?} {customizes:?}"
    );
    // a customize call (one per parent generation, then cached) is followed by the sync call
    // of the same sync
    for t in &customizes {
        assert!(syncs.contains(t), "customize trace {t} not in {syncs:?}");
    }
    let distinct: std::collections::HashSet<&String> = syncs.iter().collect();
    assert_eq!(distinct.len(), syncs.len(), "one trace per sync: {syncs:?}");
    s.finish().await
}

/// One ConfigMap per name in `spec.children`, each with `data.v` = `spec.v`.
fn versioned_children(_hook: &str, req: &Value) -> Reply {
    let spec = &req["parent"]["spec"];
    let children: Vec<Value> = spec["children"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n},
                        "data": {"v": spec["v"]}})
        })
        .collect();
    Reply::Json(json!({"status": {"v": spec["v"]}, "children": children}))
}

/// `kmeta render` shows the writes a running controller then makes: the create bodies of a new
/// parent's children, then, after another actor added a field to one child and the parent
/// changed, the three-way-merged update that keeps that field.
#[tokio::test]
async fn render_shows_the_writes_the_controller_then_makes() -> anyhow::Result<()> {
    use kmeta::render::{self, RenderOptions, Write as ChildOp};
    let mut s = Scenario::new("render")
        .crd("Thing", "things")
        .hook(versioned_children)
        .prepare()
        .await?;
    let cc = s.controller(Cc::new("render-cc")).await?;
    let parent = s
        .parent("one", json!({"children": ["a", "b"], "v": "1"}))
        .await?;
    let dir = tempfile::tempdir()?;
    let write = |name: &str, objects: &[Value]| {
        manifest_file(dir.path(), name, &objects.iter().collect::<Vec<_>>())
    };
    let opts = RenderOptions {
        controller: write("cc.yaml", &[cc])?,
        parent: write("parent.yaml", &[parent])?,
        ..RenderOptions::default()
    };
    let first = render::render(&opts).await?;
    assert_eq!(first.writes.len(), 2, "{:?}", first.writes);
    s.start_controller();
    for op in &first.writes {
        let ChildOp::Create(body) = op else {
            panic!("expected creates: {op:?}")
        };
        let name = body["metadata"]["name"].as_str().unwrap();
        let made = s.wait_child(name).await?;
        assert_eq!(
            as_written(made),
            *body,
            "render's create body vs the child kmeta created"
        );
    }
    s.wait_parent("one", "status v 1", |p| p["status"]["v"] == "1")
        .await?;
    s.stop_controller().await?;

    // another actor adds a field to child a; the parent asks for v 2
    s.merge_patch(&s.configmaps(), "a", json!({"data": {"theirs": "kept"}}))
        .await?;
    s.merge_patch(&s.parents(), "one", json!({"spec": {"v": "2"}}))
        .await?;
    let parent = s.get(&s.parents(), "one").await?.unwrap_or_default();
    let a = s.get(&s.configmaps(), "a").await?.unwrap_or_default();
    let b = s.get(&s.configmaps(), "b").await?.unwrap_or_default();
    let opts = RenderOptions {
        parent: write("parent.yaml", &[parent])?,
        observed: vec![write("observed.yaml", &[a, b])?],
        ..opts
    };
    let second = render::render(&opts).await?;
    assert_eq!(second.writes.len(), 2, "{:?}", second.writes);
    // --live reads the same children from the cluster: the same writes
    let live = RenderOptions {
        observed: Vec::new(),
        live: Some(render::Live(s.client.clone())),
        ..opts.clone()
    };
    assert_eq!(render::render(&live).await?.writes, second.writes, "--live");
    assert!(
        render::as_diff(&second).contains("+  v: \"2\""),
        "{}",
        render::as_diff(&second)
    );
    s.start_controller();
    for op in &second.writes {
        let ChildOp::Update(body) = op else {
            panic!("expected updates: {op:?}")
        };
        let name = body["metadata"]["name"].as_str().unwrap();
        let made = s
            .wait_child_where(name, "updated to v 2", |c| c["data"]["v"] == "2")
            .await?;
        assert_eq!(
            as_written(made),
            as_written(body.clone()),
            "render's PUT body vs the child kmeta wrote"
        );
    }
    let a = s.get(&s.configmaps(), "a").await?.unwrap_or_default();
    assert_eq!(a["data"]["theirs"], "kept");
    s.finish().await
}

/// Under server-side apply, `kmeta render --diff` shows the apply kmeta then sends: the body
/// (the hook's fields, the owner reference; not another actor's field) under the parent's field
/// manager, which is the manager holding the child after the controller's sync.
#[tokio::test]
async fn render_shows_the_server_side_apply_the_controller_then_sends() -> anyhow::Result<()> {
    use kmeta::render::{self, RenderOptions, Write};
    let mut s = Scenario::new("render-ssa")
        .crd("Thing", "things")
        .hook(versioned_children)
        .prepare()
        .await?;
    let cc = Cc::new("render-ssa-cc").annotate("kmeta.dev/apply-strategy", "server-side-apply");
    let cc = s.controller(cc).await?;
    s.parent("one", json!({"children": ["a"], "v": "1"}))
        .await?;
    s.start_controller();
    s.wait_parent("one", "status v 1", |p| p["status"]["v"] == "1")
        .await?;
    s.stop_controller().await?;
    s.merge_patch(&s.configmaps(), "a", json!({"data": {"theirs": "kept"}}))
        .await?;
    s.merge_patch(&s.parents(), "one", json!({"spec": {"v": "2"}}))
        .await?;
    let parent = s.get(&s.parents(), "one").await?.unwrap_or_default();
    let a = s.get(&s.configmaps(), "a").await?.unwrap_or_default();
    let dir = tempfile::tempdir()?;
    let file = |name: &str, v: &Value| manifest_file(dir.path(), name, &[v]);
    let opts = RenderOptions {
        controller: file("cc.yaml", &cc)?,
        parent: file("parent.yaml", &parent)?,
        observed: vec![file("observed.yaml", &a)?],
        ..RenderOptions::default()
    };
    let rendered = render::render(&opts).await?;
    let [
        Write::Apply {
            body,
            field_manager,
        },
    ] = rendered.writes.as_slice()
    else {
        panic!("expected one apply: {:?}", rendered.writes)
    };
    assert_eq!(body["data"]["v"], "2", "{body}");
    assert!(body["data"].get("theirs").is_none(), "{body}");
    assert_eq!(
        body["metadata"]["ownerReferences"][0]["uid"],
        parent["metadata"]["uid"]
    );
    assert!(render::as_diff(&rendered).contains("# server-side apply"));
    s.start_controller();
    let made = s
        .wait_child_where("a", "applied v 2", |c| c["data"]["v"] == "2")
        .await?;
    assert_eq!(made["data"]["theirs"], "kept");
    let appliers: Vec<&Value> = made["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["operation"] == "Apply")
        .map(|m| &m["manager"])
        .collect();
    assert_eq!(appliers, [field_manager.as_str()], "{made}");
    for (k, v) in body["metadata"]["labels"].as_object().into_iter().flatten() {
        assert_eq!(&made["metadata"]["labels"][k], v, "label {k}");
    }
    s.finish().await
}

/// `kmeta trace` on a synced parent (its children with their field managers) and on one whose
/// hook fails (Failed, with the SyncError event); the controller's list puts the failing one first.
#[tokio::test]
async fn trace_shows_a_parents_children_sync_state_and_events() -> anyhow::Result<()> {
    use kmeta::steer;
    use kmeta::trace::{self, SyncState};
    let hook = |hook: &str, req: &Value| {
        if req["parent"]["metadata"]["name"] == "broken" {
            Reply::Raw(500, "no database".into())
        } else {
            children_from_spec(hook, req)
        }
    };
    let s = Scenario::new("trace")
        .crd("Thing", "things")
        .hook(hook)
        .controller(Cc::new("trace-cc"))
        .parent("one", json!({"children": ["a", "b"]}))
        .parent("broken", json!({"children": ["c"]}))
        .start()
        .await?;
    s.wait_child("a").await?;
    s.wait_parent("one", "synced", |p| p["status"]["children"] == 2)
        .await?;
    s.wait_parent("broken", "failed", |p| condition(p, "Synced").is_some())
        .await?;
    let discovery = steer::discover(&s.client).await?;
    let one = steer::resolve_in(&discovery, "things/one", &s.ns)?;
    let t = trace::trace_parent(&s.client, &discovery, &one).await?;
    assert_eq!(t.sync, SyncState::Synced);
    assert_eq!(t.controllers, ["trace-cc"]);
    let names: Vec<&str> = t.children.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names.iter().all(|n| n.ends_with("/a") || n.ends_with("/b")),
        "{names:?}"
    );
    assert!(
        t.children
            .iter()
            .all(|c| c.kind == "ConfigMap" && !c.managers.is_empty())
    );
    let text = trace::render_text(&t, false);
    assert!(
        text.contains("sync: Synced") && text.contains("children (2):"),
        "{text}"
    );

    let broken = steer::resolve_in(&discovery, "things/broken", &s.ns)?;
    let t = eventually("the SyncError event in the trace", TIMEOUT, || async {
        let t = trace::trace_parent(&s.client, &discovery, &broken).await?;
        Ok(t.events
            .iter()
            .any(|e| e.reason == "SyncError")
            .then_some(t))
    })
    .await?;
    assert!(
        matches!(&t.sync, SyncState::Failed(m) if m.contains("500")),
        "{:?}",
        t.sync
    );
    let rows = trace::trace_controller(&s.client, &discovery, "trace-cc").await?;
    let list = trace::render_list(&rows);
    let first = list.lines().nth(1).unwrap_or_default();
    assert!(
        first.ends_with("") && first.contains("/broken\tFailed"),
        "{list}"
    );
    s.finish().await
}

/// `kmeta reconcile` while the hook circuit is open (the hook answers 503 to every parent): the
/// requested sync calls the hook at once, past the circuit that parks the other parents, and
/// reports the hook's failure.
#[tokio::test]
async fn reconcile_now_runs_past_an_open_circuit() -> anyhow::Result<()> {
    use kmeta::steer::{self, Reconciled};
    let mut builder = Scenario::new("reconcile-circuit")
        .crd("Thing", "things")
        .hook(|_, _| Reply::Raw(503, "down for maintenance".into()))
        .controller(Cc::new("circuit-cc"));
    for i in 0..6 {
        builder = builder.parent(&format!("p{i}"), json!({}));
    }
    let s = builder.start().await?;
    until("the circuit to open", || {
        s.metrics.reconcile_count("circuit-cc", "parked") > 0
    })
    .await?;
    let target = steer::resolve(&s.client, "things/p3", &s.ns).await?;
    let started = std::time::Instant::now();
    let result = steer::reconcile(&s.client, &target, TIMEOUT).await?;
    let took = started.elapsed();
    match result {
        Reconciled::Failed(why) => assert!(why.contains("503"), "{why}"),
        other => panic!("expected the hook's failure, got {other:?}"),
    }
    assert!(
        took < std::time::Duration::from_secs(5),
        "the requested sync waited for the circuit: {took:?}"
    );
    // the hook saw the request: the sync that reported it called the hook with the annotation
    let called = s.hooks().requests("sync").iter().any(|r| {
        r["parent"]["metadata"]["name"] == "p3"
            && !r["parent"]["metadata"]["annotations"]["kmeta.dev/reconcile-requested-at"].is_null()
    });
    assert!(called, "no hook call carried the request");
    s.finish().await
}

/// A reconcile request that arrives while a failing sync is calling the hook is not answered by
/// that sync's failure: the failure is reported on the version the sync read, and the request is
/// answered by the next sync, whose hook call carries it. (Each call takes 2 s, so a wrong
/// answer would stay on the parent for 2 s, far longer than `kmeta reconcile`'s poll.)
#[tokio::test]
async fn a_request_arriving_during_a_failing_sync_is_answered_by_the_next() -> anyhow::Result<()> {
    use kmeta::steer::{self, Reconciled};
    let slow = std::time::Duration::from_secs(2);
    let s = Scenario::new("reconcile-during")
        .crd("Thing", "things")
        .hook(move |_, req: &Value| {
            let requested =
                !req["parent"]["metadata"]["annotations"]["kmeta.dev/reconcile-requested-at"]
                    .is_null();
            let body = if requested {
                "saw the request"
            } else {
                "before the request"
            };
            Reply::Delay(slow, Box::new(Reply::Raw(500, body.into())))
        })
        .controller(Cc::new("during-cc"))
        .parent("one", json!({}))
        .start()
        .await?;
    until("the first hook call", || s.hooks().count("sync") >= 1).await?;
    let target = steer::resolve(&s.client, "things/one", &s.ns).await?;
    match steer::reconcile(&s.client, &target, TIMEOUT).await? {
        Reconciled::Failed(why) => assert!(why.contains("saw the request"), "{why}"),
        other => panic!("expected the hook's failure, got {other:?}"),
    }
    s.finish().await
}

/// `kmeta trace` shows the last change kmeta made, kept in `status.kmeta.lastSync`: the children
/// created, then one updated (the paths named) and one deleted (why); a sync that changes
/// nothing writes nothing, the record included.
#[tokio::test]
async fn trace_shows_the_last_change_and_a_sync_that_changes_nothing_writes_none()
-> anyhow::Result<()> {
    use kmeta::{steer, trace};
    let s = Scenario::new("trace-change")
        .crd("Thing", "things")
        .hook(children_from_spec)
        .controller(Cc::new("trace-cc"))
        .parent("one", json!({"children": ["a", "b"]}))
        .start()
        .await?;
    s.wait_parent("one", "synced", |p| p["status"]["children"] == 2)
        .await?;
    let discovery = steer::discover(&s.client).await?;
    let one = steer::resolve_in(&discovery, "things/one", &s.ns)?;
    let t = trace::trace_parent(&s.client, &discovery, &one).await?;
    let text = trace::render_text(&t, false);
    // the record of the last change: both children created, the hook's time and trace id
    let change = t.last_change.clone().expect("a record of the last change");
    assert_eq!(done(&change), ["Created a", "Created b"], "{change}");
    assert!(change["traceID"].as_str().is_some_and(|t| t.len() == 32));
    assert!(change["hookMillis"].is_u64(), "{change}");
    assert!(text.contains("last change:") && text.contains("Created ConfigMap a"));
    // a change: one child updated (the paths named), the other deleted (why)
    let things = s.parents();
    let spec = json!({"spec": {"children": ["a"], "data": {"k": "v"}}});
    s.patch_and_sync("trace-cc", &things, "one", spec).await?;
    let t = eventually("the record of the change", TIMEOUT, || async {
        let t = trace::trace_parent(&s.client, &discovery, &one).await?;
        let changed = t
            .last_change
            .as_ref()
            .is_some_and(|c| done(c).iter().any(|d| d.starts_with("Deleted")));
        Ok(changed.then_some(t))
    })
    .await?;
    let change = t.last_change.clone().unwrap_or_default();
    assert_eq!(done(&change), ["Deleted b", "Updated a"], "{change}");
    assert_eq!(change["children"][1]["fields"], json!(["data"]), "{change}");
    assert_eq!(change["children"][0]["reason"], "not desired", "{change}");
    // a sync that changes nothing writes nothing, the record included
    let at = things.get("one").await?.metadata.resource_version;
    let poke = json!({"metadata": {"annotations": {"poke": "1"}}});
    let poked = s.patch_and_sync("trace-cc", &things, "one", poke).await?;
    let after = things.get("one").await?;
    assert_eq!(
        after.metadata.resource_version.as_deref(),
        poked["metadata"]["resourceVersion"].as_str(),
        "the no-op sync wrote the parent (it was at {at:?} before the poke)"
    );
    s.finish().await
}

/// `kmeta trace --related` lists the related objects the hook was sent at the parent's last
/// change, as kmeta recorded them.
#[tokio::test]
async fn trace_related_lists_what_the_customize_hook_selected() -> anyhow::Result<()> {
    use kmeta::{steer, trace};
    let shared = |name: &str, share: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"share": share}}, "data": {"value": name}})
    };
    let s = Scenario::new("trace-related")
        .crd("Thing", "things")
        .hook(|hook, req| match hook {
            "customize" => Reply::Json(json!({"relatedResources": [{
                "apiVersion": "v1", "resource": "configmaps",
                "labelSelector": {"matchLabels": {"share": "yes"}}
            }]})),
            _ => {
                let n = req["related"]["ConfigMap.v1"]
                    .as_object()
                    .map_or(0, |m| m.len());
                Reply::Json(json!({"status": {"related": n}, "children": []}))
            }
        })
        .object("configmaps", shared("shared", "yes"))
        .object("configmaps", shared("private", "no"))
        .controller(Cc::new("related-cc").hook("customize"))
        .parent("p", json!({}))
        .start()
        .await?;
    s.wait_parent("p", "one related object", |p| p["status"]["related"] == 1)
        .await?;
    let discovery = steer::discover(&s.client).await?;
    let p = steer::resolve_in(&discovery, "things/p", &s.ns)?;
    let t = trace::trace_parent(&s.client, &discovery, &p).await?;
    assert_eq!(t.related, None, "only when asked for");
    let t = trace::with_related(t);
    let shared_name = format!("ConfigMap {}/shared", s.ns);
    assert_eq!(t.related.as_deref(), Some(&[shared_name.clone()][..]));
    let text = trace::render_text(&t, false);
    assert!(
        text.contains("related at the last change (1):") && text.contains(&shared_name),
        "{text}"
    );
    s.finish().await
}
