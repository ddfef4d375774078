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

fn spec(av: &str, url: &str, method: &str) -> Value {
    json!({
        "parentResource": {"apiVersion": av, "resource": "things"},
        "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                            "updateStrategy": {"method": method}}],
        "hooks": {"sync": {"webhook": {"url": url}}},
        "generateSelector": true
    })
}

async fn parent(env: &mut Env, av: &str, name: &str, v: &str) -> anyhow::Result<Value> {
    let ns = env.ns.clone();
    env.create(
        "things",
        json!({"apiVersion": av, "kind": "Thing",
               "metadata": {"name": name, "namespace": ns}, "spec": {"v": v}}),
    )
    .await
}

#[tokio::test]
async fn parent_crd_created_after_the_controller_starts_working() -> anyhow::Result<()> {
    let mut env = Env::new("late").await?;
    install_kmeta_crds(&mut env).await?;
    let group = format!("{}.kmeta.test", env.id);
    let av = format!("{group}/v1");
    let hooks = HookServer::start(one_configmap("a")).await?;
    env.create(
        "compositecontrollers",
        composite_controller(&env, "late-cc", spec(&av, &hooks.url("sync"), "InPlace")),
    )
    .await?;
    env.start_controller();
    // the CC cannot start yet: its parent resource is not served
    env.wait_event("a warning that the controller cannot start", None, |e| {
        e["regarding"]["name"] == "late-cc" && e["type"] == "Warning"
    })
    .await?;
    env.create_crd(crd(&group, "Thing", "things", true)).await?;
    parent(&mut env, &av, "p", "1").await?;
    let cms = env.api("v1", "ConfigMap", "configmaps", Some(&env.ns));
    eventually("child once discovery found the CRD", TIMEOUT, || async {
        env.get(&cms, "p-c").await
    })
    .await?;
    env.finish().await
}

#[tokio::test]
async fn spec_change_restarts_and_deletion_stops_the_controller() -> anyhow::Result<()> {
    let mut env = Env::new("restart").await?;
    install_kmeta_crds(&mut env).await?;
    let group = format!("{}.kmeta.test", env.id);
    let av = format!("{group}/v1");
    env.create_crd(crd(&group, "Thing", "things", true)).await?;
    let first = HookServer::start(one_configmap("first")).await?;
    let second = HookServer::start(one_configmap("second")).await?;
    env.create(
        "compositecontrollers",
        composite_controller(&env, "re-cc", spec(&av, &first.url("sync"), "InPlace")),
    )
    .await?;
    env.start_controller();
    parent(&mut env, &av, "p", "1").await?;
    let cms = env.api("v1", "ConfigMap", "configmaps", Some(&env.ns));
    eventually("child from the first hook", TIMEOUT, || async {
        Ok(env
            .get(&cms, "p-c")
            .await?
            .filter(|c| c["data"]["by"] == "first"))
    })
    .await?;
    // point the CC at another hook: the controller restarts with it
    let ccs = env.api(
        "metacontroller.k8s.io/v1alpha1",
        "CompositeController",
        "compositecontrollers",
        None,
    );
    env.merge_patch(
        &ccs,
        "re-cc",
        json!({"spec": {"hooks": {"sync": {"webhook": {"url": second.url("sync")}}}}}),
    )
    .await?;
    eventually("child from the second hook", TIMEOUT, || async {
        Ok(env
            .get(&cms, "p-c")
            .await?
            .filter(|c| c["data"]["by"] == "second"))
    })
    .await?;
    // delete the CC: a Stopped event, and parent changes no longer reach any hook
    ccs.delete("re-cc", &Default::default()).await?;
    env.wait_event("Stopped event", None, |e| {
        e["regarding"]["name"] == "re-cc" && e["reason"] == "Stopped"
    })
    .await?;
    let calls = first.count("sync") + second.count("sync");
    let things = env.api(&av, "Thing", "things", Some(&env.ns));
    env.merge_patch(&things, "p", json!({"spec": {"v": "2"}}))
        .await?;
    // a second, still-running controller on the same resources proves events flow; the stopped
    // one must not have called its hook for the change
    let witness = HookServer::start(one_configmap("witness")).await?;
    env.create(
        "compositecontrollers",
        composite_controller(
            &env,
            "witness-cc",
            spec(&av, &witness.url("sync"), "OnDelete"),
        ),
    )
    .await?;
    eventually("the witness controller saw v=2", TIMEOUT, || async {
        Ok(witness
            .calls("sync")
            .iter()
            .any(|r| r["parent"]["spec"]["v"] == "2")
            .then_some(()))
    })
    .await?;
    assert_eq!(first.count("sync") + second.count("sync"), calls);
    env.finish().await
}

#[tokio::test]
async fn hook_429_with_retry_after_is_retried() -> anyhow::Result<()> {
    let mut env = Env::new("retry").await?;
    install_kmeta_crds(&mut env).await?;
    let group = format!("{}.kmeta.test", env.id);
    let av = format!("{group}/v1");
    env.create_crd(crd(&group, "Thing", "things", true)).await?;
    let n = Arc::new(AtomicUsize::new(0));
    let seen = n.clone();
    let ok = one_configmap("ok");
    let hooks = HookServer::start(move |h, req| {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::Raw(429, "slow down".into())
        } else {
            ok(h, req)
        }
    })
    .await?;
    env.create(
        "compositecontrollers",
        composite_controller(&env, "retry-cc", spec(&av, &hooks.url("sync"), "InPlace")),
    )
    .await?;
    env.start_controller();
    parent(&mut env, &av, "p", "1").await?;
    let cms = env.api("v1", "ConfigMap", "configmaps", Some(&env.ns));
    eventually("child after the retry", TIMEOUT, || async {
        env.get(&cms, "p-c").await
    })
    .await?;
    assert!(env.metrics.reconcile_count("retry-cc", "retry") >= 1);
    env.finish().await
}

#[tokio::test]
async fn update_strategies_on_delete_and_recreate() -> anyhow::Result<()> {
    let mut env = Env::new("strategy").await?;
    install_kmeta_crds(&mut env).await?;
    let group = format!("{}.kmeta.test", env.id);
    let av = format!("{group}/v1");
    env.create_crd(crd(&group, "Thing", "things", true)).await?;
    let hooks = HookServer::start(one_configmap("h")).await?;
    let mut s = spec(&av, &hooks.url("sync"), "Recreate");
    s["parentResource"]["labelSelector"] = json!({"matchLabels": {"method": "recreate"}});
    env.create(
        "compositecontrollers",
        composite_controller(&env, "recreate-cc", s),
    )
    .await?;
    let mut s = spec(&av, &hooks.url("sync"), "OnDelete");
    s["parentResource"]["labelSelector"] = json!({"matchLabels": {"method": "ondelete"}});
    env.create(
        "compositecontrollers",
        composite_controller(&env, "ondelete-cc", s),
    )
    .await?;
    env.start_controller();
    let ns = env.ns.clone();
    for (name, method) in [("r", "recreate"), ("o", "ondelete"), ("x", "none")] {
        env.create(
            "things",
            json!({"apiVersion": av, "kind": "Thing",
                   "metadata": {"name": name, "namespace": ns, "labels": {"method": method}},
                   "spec": {"v": "1"}}),
        )
        .await?;
    }
    let cms = env.api("v1", "ConfigMap", "configmaps", Some(&ns));
    let r1 = eventually("r child", TIMEOUT, || async { env.get(&cms, "r-c").await }).await?;
    let o1 = eventually("o child", TIMEOUT, || async { env.get(&cms, "o-c").await }).await?;
    let things = env.api(&av, "Thing", "things", Some(&ns));
    env.merge_patch(&things, "r", json!({"spec": {"v": "2"}}))
        .await?;
    env.merge_patch(&things, "o", json!({"spec": {"v": "2"}}))
        .await?;
    // Recreate: deleted, then created again with the new content (a new uid)
    let r2 = eventually("r child recreated", TIMEOUT, || async {
        Ok(env
            .get(&cms, "r-c")
            .await?
            .filter(|c| c["data"]["v"] == "2"))
    })
    .await?;
    assert_ne!(r2["metadata"]["uid"], r1["metadata"]["uid"]);
    // OnDelete: the hook saw v=2 but the child is left as it was
    let o_syncs = env.syncs("ondelete-cc");
    env.merge_patch(
        &things,
        "o",
        json!({"metadata": {"annotations": {"poke": "1"}}}),
    )
    .await?;
    env.wait_syncs("ondelete-cc", o_syncs).await?;
    let o2 = env.get(&cms, "o-c").await?.unwrap();
    assert_eq!(
        o2["metadata"]["resourceVersion"],
        o1["metadata"]["resourceVersion"]
    );
    // ... until someone deletes it: then it comes back with the new content
    cms.delete("o-c", &Default::default()).await?;
    eventually("o child recreated after manual delete", TIMEOUT, || async {
        Ok(env
            .get(&cms, "o-c")
            .await?
            .filter(|c| c["data"]["v"] == "2"))
    })
    .await?;
    // the parent no CC selects never reached a hook and has no child
    assert!(
        hooks
            .calls("sync")
            .iter()
            .all(|r| r["parent"]["metadata"]["name"] != "x")
    );
    assert!(env.get(&cms, "x-c").await?.is_none());
    env.finish().await
}

#[tokio::test]
async fn controllers_share_one_watch_per_child_resource() -> anyhow::Result<()> {
    let mut env = Env::new("shared").await?;
    install_kmeta_crds(&mut env).await?;
    let group = format!("{}.kmeta.test", env.id);
    let av = format!("{group}/v1");
    env.create_crd(crd(&group, "Thing", "things", true)).await?;
    env.create_crd(crd(&group, "Gadget", "gadgets", true))
        .await?;
    let things_hook = HookServer::start(one_configmap("things")).await?;
    let gadgets_hook = HookServer::start(one_configmap("gadgets")).await?;
    let mut gadget_spec = spec(&av, &gadgets_hook.url("sync"), "InPlace");
    gadget_spec["parentResource"]["resource"] = json!("gadgets");
    env.create(
        "compositecontrollers",
        composite_controller(
            &env,
            "things-cc",
            spec(&av, &things_hook.url("sync"), "InPlace"),
        ),
    )
    .await?;
    env.create(
        "compositecontrollers",
        composite_controller(&env, "gadgets-cc", gadget_spec),
    )
    .await?;
    env.start_controller();
    parent(&mut env, &av, "t", "1").await?;
    let ns = env.ns.clone();
    env.create(
        "gadgets",
        json!({"apiVersion": av, "kind": "Gadget",
               "metadata": {"name": "g", "namespace": ns}, "spec": {"v": "1"}}),
    )
    .await?;
    let cms = env.api("v1", "ConfigMap", "configmaps", Some(&ns));
    for (name, by) in [("t-c", "things"), ("g-c", "gadgets")] {
        eventually(&format!("child {name}"), TIMEOUT, || async {
            Ok(env.get(&cms, name).await?.filter(|c| c["data"]["by"] == by))
        })
        .await?;
    }
    // One watch on configmaps serves both controllers (in-process server only: a real cluster
    // has no request counters).
    if let Some(server) = env.server() {
        assert_eq!(server.counters().count("watch", "configmaps"), 1);
    }
    // Stopping one controller releases its reference, not the watch: the other still sees its
    // child's deletion and recreates it.
    let ccs = env.api(
        "metacontroller.k8s.io/v1alpha1",
        "CompositeController",
        "compositecontrollers",
        None,
    );
    ccs.delete("things-cc", &Default::default()).await?;
    env.wait_event("Stopped event", None, |e| {
        e["regarding"]["name"] == "things-cc" && e["reason"] == "Stopped"
    })
    .await?;
    let old_uid = env
        .get(&cms, "g-c")
        .await?
        .map(|c| c["metadata"]["uid"].clone());
    cms.delete("g-c", &Default::default()).await?;
    eventually(
        "g-c recreated by the remaining controller",
        TIMEOUT,
        || async {
            Ok(env
                .get(&cms, "g-c")
                .await?
                .filter(|c| Some(&c["metadata"]["uid"]) != old_uid.as_ref()))
        },
    )
    .await?;
    env.finish().await
}
