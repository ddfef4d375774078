//! Sync creates children and sets status; updates flow through; children of a deleted parent
//! are garbage collected.

use kmeta_tests::*;
use serde_json::{Value, json};

/// A hook that makes one ConfigMap per parent, carrying `spec.message`, and reports how many
/// ConfigMaps it observed.
fn configmap_hook(_hook: &str, req: &Value) -> Reply {
    let parent = &req["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let observed = observed_configmaps(req);
    Reply::Json(json!({
        "status": {"observedChildren": observed, "message": parent["spec"]["message"]},
        "children": [{
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-cm"), "labels": {"app": name}},
            "data": {"message": parent["spec"]["message"]}
        }]
    }))
}

each_hook_mode!(sync_creates_children_and_sets_status);
async fn sync_creates_children_and_sets_status(mode: HookMode) -> anyhow::Result<()> {
    let s = Scenario::new("basic")
        .hook_mode(mode)
        .crd("Thing", "things")
        .hook(configmap_hook)
        .controller(Cc::new("things-cc"))
        .parent("one", json!({"message": "hello"}))
        .start()
        .await?;
    let cm = s.wait_child("one-cm").await?;
    assert_eq!(cm["data"]["message"], "hello");
    let owner = &cm["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Thing");
    assert_eq!(owner["name"], "one");
    assert_eq!(owner["controller"], true);
    assert_eq!(owner["blockOwnerDeletion"], true);
    assert!(
        cm["metadata"]["annotations"]["metacontroller.k8s.io/last-applied-configuration"]
            .is_string()
    );
    let parent = s
        .wait_parent("one", "parent status with the observed child", |p| {
            p["status"]["observedChildren"] == 1
        })
        .await?;
    assert_eq!(parent["status"]["observedGeneration"], 1);
    assert_eq!(parent["status"]["message"], "hello");
    // the request had Metacontroller's shape
    let req = s.hooks().calls("sync").last().cloned().unwrap();
    assert_eq!(req["controller"]["metadata"]["name"], "things-cc");
    assert_eq!(req["finalizing"], false);
    assert!(req["children"]["ConfigMap.v1"].is_object());
    assert!(req["related"].is_object());
    // the hook's calls are counted as Metacontroller's hook series, under the hook's URL
    let url = match mode {
        HookMode::Webhook => s.hooks().url("sync"),
        HookMode::InProcess => "in-process".to_owned(),
    };
    let metrics = s.metrics.encode();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("metacontroller_sync_requests_total{")
                && l.contains(&format!("url=\"{url}\""))
                && l.contains("code=\"200\"")),
        "no hook series for {url}: {metrics}"
    );

    // an update of the parent reaches the child
    s.merge_patch(&s.parents(), "one", json!({"spec": {"message": "bye"}}))
        .await?;
    s.wait_child_where("one-cm", "child updated", |c| c["data"]["message"] == "bye")
        .await?;
    let parent = s
        .wait_parent("one", "status of generation 2", |p| {
            p["status"]["observedGeneration"] == 2
        })
        .await?;
    assert_eq!(parent["status"]["message"], "bye");
    s.finish().await
}

each_hook_mode!(deleting_the_parent_garbage_collects_children);
async fn deleting_the_parent_garbage_collects_children(mode: HookMode) -> anyhow::Result<()> {
    let s = Scenario::new("gc")
        .hook_mode(mode)
        .crd("Thing", "things")
        .hook(configmap_hook)
        .controller(Cc::new("gc-cc"))
        .parent("two", json!({"message": "x"}))
        .start()
        .await?;
    s.wait_child("two-cm").await?;
    s.parents().delete("two", &Default::default()).await?;
    s.wait_gone(&s.configmaps(), "two-cm", "child garbage collected")
        .await?;
    s.finish().await
}
