//! A sync reads only synced caches: at a (re)start the controller waits for every child watch's
//! first list before it syncs a parent, so the hook never sees fewer children than exist and no
//! child is created again (409 AlreadyExists).

use std::time::Duration;

use kmeta_tests::*;
use serde_json::{Value, json};

const CHILDREN: usize = 5;

/// Five ConfigMaps per parent; status counts the observed ones.
fn five_children(_hook: &str, req: &Value) -> Reply {
    let name = req["parent"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let observed = req["children"]["ConfigMap.v1"]
        .as_object()
        .map_or(0, |m| m.len());
    let children: Vec<Value> = (0..CHILDREN)
        .map(|i| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-{i}")}}))
        .collect();
    Reply::Json(json!({"status": {"observed": observed}, "children": children}))
}

fn observed_children(req: &Value) -> usize {
    req["children"]["ConfigMap.v1"]
        .as_object()
        .map_or(0, |m| m.len())
}

#[tokio::test]
async fn restart_waits_for_child_caches_before_the_first_sync() -> anyhow::Result<()> {
    let mut s = Scenario::new("caches")
        .crd("Thing", "things")
        .hook(five_children)
        .controller(Cc::new("things-cc"))
        .parent("p", json!({}))
        .start()
        .await?;
    s.wait_parent("p", "all children observed", |p| {
        p["status"]["observed"] == CHILDREN
    })
    .await?;
    s.stop_controller().await?;

    // the child list answers slowly: the parent watch syncs first, as after a leader takeover
    // on a busy cluster (a real cluster has no fault injection: the property is still checked)
    let slow = s.server().map(|server| {
        server
            .faults()
            .add_latency(Some("list"), Some("configmaps"), Duration::from_secs(2))
    });
    let before = s.server().map(|server| server.counters());
    let calls_before = s.hooks().count("sync");
    s.start_controller();
    until("a sync after the restart", || {
        s.hooks().count("sync") > calls_before
    })
    .await?;
    let seen: Vec<usize> = s.hooks().calls("sync")[calls_before..]
        .iter()
        .map(observed_children)
        .collect();
    assert!(
        seen.iter().all(|n| *n == CHILDREN),
        "children observed by the hook after the restart: {seen:?}, {CHILDREN} exist"
    );
    if let (Some(server), Some(before), Some(slow)) = (s.server(), before, slow) {
        let d = server.counters().since(&before);
        assert_eq!(
            d.get("create", "configmaps", 409),
            0,
            "creates answered 409: {d:?}"
        );
        server.faults().remove(slow);
    }
    s.finish().await
}
