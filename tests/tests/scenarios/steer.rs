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
