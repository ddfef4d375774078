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
    // the server's bookkeeping is left out of the controller, as of parents and children
    assert!(req["controller"]["metadata"].get("managedFields").is_none());
    assert!(req["controller"].get("status").is_none());
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

/// A sync that finds the parent, its children and the hook's answer as the parent's last sync
/// that wrote nothing left them is skipped after the hook call (`reconcile/unchanged.rs`), which
/// makes resyncs of unchanged parents cheap. A change to any of the three is still acted on: a
/// child edited by someone else is restored, and a new answer from the hook is written, with the
/// parent and children as they were.
#[tokio::test]
async fn resyncs_still_act_on_an_edited_child_and_on_a_new_answer() -> anyhow::Result<()> {
    let wanted = std::sync::Arc::new(std::sync::Mutex::new("v1".to_owned()));
    let answer = wanted.clone();
    let s = Scenario::new("unchanged")
        .crd("Thing", "things")
        .hook(move |_, _| {
            let value = answer.lock().map(|v| v.clone()).unwrap_or_default();
            Reply::Json(json!({
                "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "p-cm"}, "data": {"k": value}}],
                "resyncAfterSeconds": 0.1
            }))
        })
        .controller(Cc::new("unchanged-cc"))
        .config(
            kmeta::ManagerConfig::default().min_resync_after(std::time::Duration::from_millis(100)),
        )
        .parent("p", json!({}))
        .start()
        .await?;
    let cms = s.configmaps();
    s.wait_for(&cms, "p-cm", "the child", |c| c["data"]["k"] == "v1")
        .await?;
    let calls = s.hooks().count("sync");
    until("three more resyncs", || {
        s.hooks().count("sync") >= calls + 3
    })
    .await?;
    s.merge_patch(&cms, "p-cm", json!({"data": {"k": "edited"}}))
        .await?;
    s.wait_for(&cms, "p-cm", "the edited child restored", |c| {
        c["data"]["k"] == "v1"
    })
    .await?;
    let calls = s.hooks().count("sync");
    until("three more resyncs", || {
        s.hooks().count("sync") >= calls + 3
    })
    .await?;
    *wanted.lock().unwrap() = "v2".to_owned();
    s.wait_for(&cms, "p-cm", "the hook's new answer written", |c| {
        c["data"]["k"] == "v2"
    })
    .await?;
    s.finish().await
}

/// Things make a Bar each; Bars make a ConfigMap each. Bars are one controller's children (held
/// compact) and the other's parents (held decoded): two watches of one resource, each form
/// serving its controller.
fn chained_hook(_hook: &str, req: &Value) -> Reply {
    let parent = &req["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let observed: usize = req["children"].as_object().map_or(0, |groups| {
        groups
            .values()
            .filter_map(Value::as_object)
            .map(|g| g.len())
            .sum()
    });
    let child = match parent["kind"].as_str() {
        Some("Thing") => json!({
            "apiVersion": parent["apiVersion"], "kind": "Bar",
            "metadata": {"name": format!("{name}-bar"), "labels": {"from": name}},
            "spec": {"message": parent["spec"]["message"]}
        }),
        _ => json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-cm")},
            "data": {"message": parent["spec"]["message"]}
        }),
    };
    Reply::Json(json!({"status": {"observedChildren": observed}, "children": [child]}))
}

#[tokio::test]
async fn a_resource_that_is_a_child_and_a_parent_is_synced_in_both_roles() -> anyhow::Result<()> {
    let s = Scenario::new("chained")
        .crd("Thing", "things")
        .crd("Bar", "bars")
        .hook(chained_hook)
        .controller(Cc::new("things-cc").child("bars"))
        .controller(Cc::new("bars-cc").parent("bars"))
        .parent("one", json!({"message": "hello"}))
        .start()
        .await?;
    let bars = s.resource("Bar", "bars");
    // the Bar controller syncs the Bar the Thing controller made
    let cm = s.wait_child("one-bar-cm").await?;
    assert_eq!(cm["data"]["message"], "hello");
    assert_eq!(cm["metadata"]["ownerReferences"][0]["kind"], "Bar");
    let bar = s
        .env
        .wait_for(&bars, "one-bar", "Bar status with its ConfigMap", |b| {
            b["status"]["observedChildren"] == 1
        })
        .await?;
    assert_eq!(bar["metadata"]["ownerReferences"][0]["kind"], "Thing");
    // and the Thing controller observes its Bar (a child seen through the compact watch)
    s.wait_parent("one", "Thing status with its Bar", |p| {
        p["status"]["observedChildren"] == 1
    })
    .await?;
    let req = s
        .wait_call("sync", "a Thing sync observing its Bar", |r| {
            r["parent"]["kind"] == "Thing"
                && r["children"]
                    .as_object()
                    .is_some_and(|g| g.values().any(|m| m.get("one-bar").is_some()))
        })
        .await?;
    let observed_bar = req["children"]
        .as_object()
        .and_then(|g| g.values().find_map(|m| m.get("one-bar")))
        .cloned()
        .unwrap_or_default();
    assert_eq!(observed_bar["spec"]["message"], "hello");
    assert!(observed_bar["metadata"].get("managedFields").is_none());
    // a change flows through both: Thing → its Bar → the Bar's ConfigMap
    s.merge_patch(&s.parents(), "one", json!({"spec": {"message": "bye"}}))
        .await?;
    s.wait_child_where("one-bar-cm", "ConfigMap of the updated Bar", |c| {
        c["data"]["message"] == "bye"
    })
    .await?;
    s.finish().await
}
