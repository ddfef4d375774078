//! A hook that sets a field the child's CRD schema does not declare: the API server prunes it on
//! every write, so each sync's update is a no-op for the server. kmeta notices (the server kept
//! the child's resourceVersion), says which fields in a Warning event on the parent, and does not
//! send the same update of the same child version again.

use kmeta_tests::*;
use serde_json::{Value, json};

/// One `Gadget` child per parent, with a declared field and an undeclared one.
pub(crate) fn hook(_hook: &str, req: &Value) -> Reply {
    let p = &req["parent"];
    let name = p["metadata"]["name"].as_str().unwrap_or_default();
    Reply::Json(json!({
        "status": {},
        "children": [{
            "apiVersion": p["apiVersion"],
            "kind": "Gadget",
            "metadata": {"name": format!("{name}-gadget")},
            "spec": {"size": p["spec"]["size"], "colour": "blue"}
        }]
    }))
}

/// The Gadget CRD declares `spec.size` only.
pub(crate) fn declare_size(c: &mut Value) {
    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}
    });
}

#[tokio::test]
async fn fields_the_server_drops_are_reported_on_the_parent() -> anyhow::Result<()> {
    let s = Scenario::new("schema")
        .crd("Box", "boxes")
        .crd_with("Gadget", "gadgets", declare_size)
        .hook(hook)
        .controller(Cc::new("boxes-cc").child("gadgets"))
        .parent("b", json!({"size": 3}))
        .start()
        .await?;
    let (boxes, gadgets) = (s.parents(), s.resource("Gadget", "gadgets"));
    let g = s
        .wait_for(&gadgets, "b-gadget", "child Gadget", |_| true)
        .await?;
    assert_eq!(g["spec"], json!({"size": 3}), "the server pruned colour");

    // another sync: the merge puts colour back, the server drops it again and writes nothing
    let touch = |n: &str| json!({"metadata": {"annotations": {"kmeta.test/touch": n}}});
    s.patch_and_sync("boxes-cc", &boxes, "b", touch("1"))
        .await?;
    let ev = s
        .wait_event("ChildFieldsIgnored event", Some(&s.ns), |e| {
            e["reason"] == "ChildFieldsIgnored" && e["regarding"]["name"] == "b"
        })
        .await?;
    assert_eq!(ev["type"], "Warning");
    let note = ev["note"].as_str().unwrap_or_default();
    assert!(note.contains("spec.colour"), "{note}");
    assert!(note.contains("b-gadget"), "{note}");
    let now = s.get(&gadgets, "b-gadget").await?.unwrap();
    assert_eq!(
        now["metadata"]["resourceVersion"], g["metadata"]["resourceVersion"],
        "the server wrote nothing"
    );

    // the futile update is remembered: later syncs do not send it again
    let before = s.server().map(|s| s.counters());
    s.patch_and_sync("boxes-cc", &boxes, "b", touch("2"))
        .await?;
    if let (Some(s), Some(before)) = (s.server(), before) {
        let d = s.counters().since(&before);
        assert_eq!(d.writes_to("gadgets"), 0, "requests during resync: {d:?}");
    }
    assert!(s.metrics.child_op_count("boxes-cc", "skip") >= 1);
    // a real change to the hook's answer still goes through (and colour is still dropped)
    s.merge_patch(&boxes, "b", json!({"spec": {"size": 4}}))
        .await?;
    s.wait_for(&gadgets, "b-gadget", "size 4", |g| {
        g["spec"] == json!({"size": 4})
    })
    .await?;
    s.finish().await
}
