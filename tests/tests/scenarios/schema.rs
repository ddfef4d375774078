//! A hook that sets a field the child's CRD schema does not declare: the API server prunes it on
//! every write, so each sync's update is a no-op for the server. kmeta notices (the server kept
//! the child's resourceVersion), says which fields in a Warning event on the parent, and does not
//! send the same update of the same child version again.

use kmeta_tests::*;
use serde_json::{Value, json};

/// One `Gadget` child per parent, with a declared field and an undeclared one.
fn hook(_hook: &str, req: &Value) -> Reply {
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

fn gadget_crd(group: &str) -> Value {
    let mut c = crd(group, "Gadget", "gadgets", true);
    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}
    });
    c
}

#[tokio::test]
async fn fields_the_server_drops_are_reported_on_the_parent() -> anyhow::Result<()> {
    let mut env = Env::new("schema").await?;
    let hooks = HookServer::start(hook).await?;
    install_kmeta_crds(&mut env).await?;
    let group = format!("{}.kmeta.test", env.id);
    env.create_crd(crd(&group, "Box", "boxes", true)).await?;
    env.create_crd(gadget_crd(&group)).await?;
    let av = format!("{group}/v1");
    let spec = json!({
        "parentResource": {"apiVersion": av, "resource": "boxes"},
        "childResources": [{"apiVersion": av, "resource": "gadgets",
                            "updateStrategy": {"method": "InPlace"}}],
        "hooks": {"sync": {"webhook": {"url": hooks.url("sync")}}},
        "generateSelector": true
    });
    env.create(
        "compositecontrollers",
        composite_controller(&env, "boxes-cc", spec),
    )
    .await?;
    env.start_controller();
    let ns = env.ns.clone();
    let boxes = env.api(&av, "Box", "boxes", Some(&ns));
    let gadgets = env.api(&av, "Gadget", "gadgets", Some(&ns));
    env.create(
        "boxes",
        json!({"apiVersion": av, "kind": "Box", "metadata": {"name": "b", "namespace": ns},
               "spec": {"size": 3}}),
    )
    .await?;
    let g = eventually("child Gadget", TIMEOUT, || async {
        env.get(&gadgets, "b-gadget").await
    })
    .await?;
    assert_eq!(g["spec"], json!({"size": 3}), "the server pruned colour");

    // another sync: the merge puts colour back, the server drops it again and writes nothing
    let syncs = env.syncs("boxes-cc");
    env.merge_patch(
        &boxes,
        "b",
        json!({"metadata": {"annotations": {"kmeta.test/touch": "1"}}}),
    )
    .await?;
    env.wait_syncs("boxes-cc", syncs).await?;
    let ev = env
        .wait_event("ChildFieldsIgnored event", Some(&ns), |e| {
            e["reason"] == "ChildFieldsIgnored" && e["regarding"]["name"] == "b"
        })
        .await?;
    assert_eq!(ev["type"], "Warning");
    let note = ev["note"].as_str().unwrap_or_default();
    assert!(note.contains("spec.colour"), "{note}");
    assert!(note.contains("b-gadget"), "{note}");
    let now = env.get(&gadgets, "b-gadget").await?.unwrap();
    assert_eq!(
        now["metadata"]["resourceVersion"], g["metadata"]["resourceVersion"],
        "the server wrote nothing"
    );

    // the futile update is remembered: later syncs do not send it again
    let before = env.server().map(|s| s.counters());
    let syncs = env.syncs("boxes-cc");
    env.merge_patch(
        &boxes,
        "b",
        json!({"metadata": {"annotations": {"kmeta.test/touch": "2"}}}),
    )
    .await?;
    env.wait_syncs("boxes-cc", syncs).await?;
    if let (Some(s), Some(before)) = (env.server(), before) {
        let d = s.counters().since(&before);
        assert_eq!(d.writes_to("gadgets"), 0, "requests during resync: {d:?}");
    }
    assert!(env.metrics.child_op_count("boxes-cc", "skip") >= 1);
    // a real change to the hook's answer still goes through (and colour is still dropped)
    env.merge_patch(&boxes, "b", json!({"spec": {"size": 4}}))
        .await?;
    eventually("size 4", TIMEOUT, || async {
        Ok(env
            .get(&gadgets, "b-gadget")
            .await?
            .filter(|g| g["spec"] == json!({"size": 4})))
    })
    .await?;
    env.finish().await
}
