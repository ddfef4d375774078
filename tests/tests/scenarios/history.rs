//! The sync record remembers why: a status-only sync never hides the last sync that wrote
//! children, and the last five syncs that wrote something are kept, each with what triggered it.

use kmeta::{steer, trace};
use kmeta_tests::*;
use serde_json::{Value, json};

/// One ConfigMap `<parent>-a` with the parent's `v`, and a status counting the observed
/// children: the sync that creates the child is followed by one that writes the status only.
fn counting(_hook: &str, req: &Value) -> Reply {
    let parent = &req["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    Reply::Json(json!({
        "status": {"observed": observed_configmaps(req)},
        "children": [{"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-a")}, "data": {"v": parent["spec"]["v"]}}],
    }))
}

/// The trace of `things/one` once `ok` holds for it.
async fn trace_when(
    s: &Running,
    what: &str,
    ok: impl Fn(&trace::ParentTrace) -> bool,
) -> anyhow::Result<trace::ParentTrace> {
    let discovery = steer::discover(&s.client).await?;
    let one = steer::resolve_in(&discovery, "things/one", &s.ns)?;
    eventually(what, TIMEOUT, || async {
        let t = trace::trace_parent(&s.client, &discovery, &one).await?;
        Ok(ok(&t).then_some(t))
    })
    .await
}

fn wrote_children(r: &Value) -> bool {
    r["children"].as_array().is_some_and(|c| !c.is_empty())
}

#[tokio::test]
async fn a_status_only_sync_never_hides_the_last_change_to_children() -> anyhow::Result<()> {
    let s = Scenario::new("record-history")
        .crd("Thing", "things")
        .hook(counting)
        .controller(Cc::new("record-history-cc"))
        .parent("one", json!({"v": "1"}))
        .start()
        .await?;
    s.wait_parent("one", "the child observed", |p| {
        p["status"]["observed"] == 1
    })
    .await?;
    let t = trace_when(&s, "a status-only record after the create", |t| {
        t.last_change.as_ref().is_some_and(|r| !wrote_children(r))
    })
    .await?;
    let text = trace::render_text(&t, false);
    assert!(text.contains("last change to children:"), "{text}");
    assert!(text.contains("Created ConfigMap one-a"), "{text}");
    let created = t.history.iter().find(|r| wrote_children(r)).cloned();
    let created = created.expect("the create in the history");
    assert!(created["trigger"].is_string(), "{created}");

    // someone edits the child: kmeta puts it back, and says the child's watch event did it
    s.merge_patch(&s.configmaps(), "one-a", json!({"data": {"v": "edited"}}))
        .await?;
    s.wait_child_where("one-a", "restored", |c| c["data"]["v"] == "1")
        .await?;
    let t = trace_when(&s, "the restore recorded", |t| {
        t.last_change
            .as_ref()
            .is_some_and(|r| r["children"][0]["action"] == "Updated")
    })
    .await?;
    let last = t.last_change.clone().unwrap_or_default();
    let trigger = last["trigger"].as_str().unwrap_or_default();
    assert!(
        trigger.starts_with(&format!("watch: ConfigMap {}/one-a", s.ns)),
        "{last}"
    );
    // --history prints every record kept, newest first, each with its trigger
    let text = trace::render_text(&trace::with_history(t.clone()), false);
    assert!(text.contains("earlier change:"), "{text}");
    assert!(t.history.len() <= 4, "at most 4 earlier records");
    for r in std::iter::once(&last).chain(&t.history) {
        assert!(r["trigger"].is_string(), "every record says why: {r}");
    }
    s.finish().await
}
