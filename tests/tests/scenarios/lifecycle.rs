//! The manager's lifecycle: a CompositeController whose parent CRD appears later, spec changes,
//! deletion; hooks asking to retry later (429); update strategies; the parent label selector.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kmeta_tests::*;
use serde_json::{Value, json};

fn one_configmap(tag: &'static str) -> impl Fn(&str, &Value) -> Reply + Send + Sync + 'static {
    move |_, req| {
        let p = &req["parent"];
        let name = p["metadata"]["name"].as_str().unwrap_or_default();
        Reply::Json(
            json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-c")},
            "data": {"v": p["spec"]["v"], "by": tag}}]}),
        )
    }
}

#[tokio::test]
async fn parent_crd_created_after_the_controller_starts_working() -> anyhow::Result<()> {
    let mut s = Scenario::new("late")
        .hook(one_configmap("a"))
        .controller(Cc::new("late-cc"))
        .start()
        .await?;
    // the CC cannot start yet: its parent resource is not served
    s.wait_event("a warning that the controller cannot start", None, |e| {
        e["regarding"]["name"] == "late-cc" && e["type"] == "Warning"
    })
    .await?;
    let thing = crd(&s.group, "Thing", "things", true);
    s.create_crd(thing).await?;
    s.parent("p", json!({"v": "1"})).await?;
    s.wait_child_where("p-c", "child once discovery found the CRD", |_| true)
        .await?;
    s.finish().await
}

#[tokio::test]
async fn spec_change_restarts_and_deletion_stops_the_controller() -> anyhow::Result<()> {
    let second = HookServer::start(one_configmap("second")).await?;
    let mut s = Scenario::new("restart")
        .crd("Thing", "things")
        .hook(one_configmap("first"))
        .controller(Cc::new("re-cc"))
        .parent("p", json!({"v": "1"}))
        .start()
        .await?;
    s.wait_child_where("p-c", "child from the first hook", |c| {
        c["data"]["by"] == "first"
    })
    .await?;
    // point the CC at another hook: the controller restarts with it
    let ccs = s.controllers();
    s.merge_patch(
        &ccs,
        "re-cc",
        json!({"spec": {"hooks": {"sync": {"webhook": {"url": second.url("sync")}}}}}),
    )
    .await?;
    s.wait_child_where("p-c", "child from the second hook", |c| {
        c["data"]["by"] == "second"
    })
    .await?;
    // delete the CC: a second Stopped event (the restart made the first; events of one object
    // and reason are one Event with a series), and parent changes no longer reach any hook
    ccs.delete("re-cc", &Default::default()).await?;
    s.wait_event("Stopped event after the deletion", None, |e| {
        e["regarding"]["name"] == "re-cc"
            && e["reason"] == "Stopped"
            && e["series"]["count"].as_u64() >= Some(2)
    })
    .await?;
    let calls = s.hooks().count("sync") + second.count("sync");
    s.merge_patch(&s.parents(), "p", json!({"spec": {"v": "2"}}))
        .await?;
    // a second, still-running controller on the same resources proves events flow; the stopped
    // one must not have called its hook for the change
    let witness = HookServer::start(one_configmap("witness")).await?;
    let cc = Cc::new("witness-cc")
        .sync_url(&witness.url("sync"))
        .strategy("OnDelete");
    s.controller(cc).await?;
    until("the witness controller saw v=2", || {
        witness
            .calls("sync")
            .iter()
            .any(|r| r["parent"]["spec"]["v"] == "2")
    })
    .await?;
    assert_eq!(s.hooks().count("sync") + second.count("sync"), calls);
    s.finish().await
}

#[tokio::test]
async fn hook_429_with_retry_after_is_retried() -> anyhow::Result<()> {
    let n = Arc::new(AtomicUsize::new(0));
    let ok = one_configmap("ok");
    let s = Scenario::new("retry")
        .crd("Thing", "things")
        .hook(move |h, req| {
            if n.fetch_add(1, Ordering::SeqCst) == 0 {
                Reply::Raw(429, "slow down".into())
            } else {
                ok(h, req)
            }
        })
        .controller(Cc::new("retry-cc"))
        .parent("p", json!({"v": "1"}))
        .start()
        .await?;
    s.wait_child_where("p-c", "child after the retry", |_| true)
        .await?;
    assert!(s.metrics.reconcile_count("retry-cc", "retry") >= 1);
    s.finish().await
}

#[tokio::test]
async fn update_strategies_on_delete_and_recreate() -> anyhow::Result<()> {
    let mut s = Scenario::new("strategy")
        .crd("Thing", "things")
        .hook(one_configmap("h"))
        .controller(
            Cc::new("recreate-cc")
                .strategy("Recreate")
                .selector(json!({"matchLabels": {"method": "recreate"}})),
        )
        .controller(
            Cc::new("ondelete-cc")
                .strategy("OnDelete")
                .selector(json!({"matchLabels": {"method": "ondelete"}})),
        )
        .start()
        .await?;
    for (name, method) in [("r", "recreate"), ("o", "ondelete"), ("x", "none")] {
        s.parent_labeled(name, json!({"method": method}), json!({"v": "1"}))
            .await?;
    }
    let (things, cms) = (s.parents(), s.configmaps());
    let r1 = s.wait_child_where("r-c", "r child", |_| true).await?;
    let o1 = s.wait_child_where("o-c", "o child", |_| true).await?;
    s.merge_patch(&things, "r", json!({"spec": {"v": "2"}}))
        .await?;
    s.merge_patch(&things, "o", json!({"spec": {"v": "2"}}))
        .await?;
    // Recreate: deleted, then created again with the new content (a new uid)
    let r2 = s
        .wait_child_where("r-c", "r child recreated", |c| c["data"]["v"] == "2")
        .await?;
    assert_ne!(r2["metadata"]["uid"], r1["metadata"]["uid"]);
    // OnDelete: the hook saw v=2 but the child is left as it was
    let poke = json!({"metadata": {"annotations": {"poke": "1"}}});
    s.patch_and_sync("ondelete-cc", &things, "o", poke).await?;
    let o2 = s.get(&cms, "o-c").await?.unwrap();
    assert_eq!(
        o2["metadata"]["resourceVersion"],
        o1["metadata"]["resourceVersion"]
    );
    // ... until someone deletes it: then it comes back with the new content
    cms.delete("o-c", &Default::default()).await?;
    s.wait_child_where("o-c", "o child recreated after manual delete", |c| {
        c["data"]["v"] == "2"
    })
    .await?;
    // the parent no CC selects never reached a hook and has no child
    assert!(
        s.hooks()
            .calls("sync")
            .iter()
            .all(|r| r["parent"]["metadata"]["name"] != "x")
    );
    assert!(s.get(&cms, "x-c").await?.is_none());
    s.finish().await
}

#[tokio::test]
async fn controllers_share_one_watch_per_child_resource() -> anyhow::Result<()> {
    let gadgets_hook = HookServer::start(one_configmap("gadgets")).await?;
    let mut s = Scenario::new("shared")
        .crd("Thing", "things")
        .crd("Gadget", "gadgets")
        .hook(one_configmap("things"))
        .controller(Cc::new("things-cc"))
        .controller(
            Cc::new("gadgets-cc")
                .parent("gadgets")
                .sync_url(&gadgets_hook.url("sync")),
        )
        .parent("t", json!({"v": "1"}))
        .start()
        .await?;
    let gadget = json!({"apiVersion": s.av, "kind": "Gadget",
                        "metadata": {"name": "g", "namespace": s.ns}, "spec": {"v": "1"}});
    s.create("gadgets", gadget).await?;
    for (name, by) in [("t-c", "things"), ("g-c", "gadgets")] {
        s.wait_child_where(name, &format!("child {name}"), |c| c["data"]["by"] == by)
            .await?;
    }
    // One watch on configmaps serves both controllers (in-process server only: a real cluster
    // has no request counters; counted only when no fault mode adds re-watches).
    if let Some(server) = s.server().filter(|_| !requests_disturbed().unwrap_or(true)) {
        assert_eq!(server.counters().count("watch", "configmaps"), 1);
    }
    // Stopping one controller releases its reference, not the watch: the other still sees its
    // child's deletion and recreates it.
    s.controllers()
        .delete("things-cc", &Default::default())
        .await?;
    s.wait_event("Stopped event", None, |e| {
        e["regarding"]["name"] == "things-cc" && e["reason"] == "Stopped"
    })
    .await?;
    let cms = s.configmaps();
    let old_uid = s
        .get(&cms, "g-c")
        .await?
        .map(|c| c["metadata"]["uid"].clone());
    cms.delete("g-c", &Default::default()).await?;
    s.wait_child_where("g-c", "g-c recreated by the remaining controller", |c| {
        Some(&c["metadata"]["uid"]) != old_uid.as_ref()
    })
    .await?;
    s.finish().await
}

/// A CompositeController naming a resource by its kind or with a typo is reported with the
/// served resource it probably means.
#[tokio::test]
async fn a_misspelt_child_resource_is_reported_with_a_suggestion() -> anyhow::Result<()> {
    let s = Scenario::new("typo")
        .crd("Thing", "things")
        .hook(|_, _| Reply::Json(json!({})))
        .controller(
            Cc::new("typo-cc")
                .patch(json!({"childResources": [{"apiVersion": "v1", "resource": "configmap"}]})),
        )
        .start()
        .await?;
    s.wait_event("a CreateError with a suggestion", None, |e| {
        e["regarding"]["name"] == "typo-cc"
            && e["reason"] == "CreateError"
            && e["note"].as_str().is_some_and(|n| {
                n.contains("configmap in apiVersion v1; did you mean v1 configmaps?")
            })
    })
    .await?;
    s.finish().await
}
