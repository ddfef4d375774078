//! A failing hook — garbage body, HTTP 500, timeout, a desired child of an undeclared kind —
//! changes no child and reports a SyncError event on the parent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kmeta_tests::*;
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Good,
    Garbage,
    Error500,
    Slow,
    EmptyChildren,
    Undeclared,
}

fn answer(mode: Mode, req: &Value) -> Reply {
    let p = &req["parent"];
    let name = p["metadata"]["name"].as_str().unwrap_or_default();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{name}-cm")},
        "data": {"v": p["spec"]["v"]}});
    match mode {
        Mode::Good => Reply::Json(json!({"status": {}, "children": [cm]})),
        Mode::Garbage => Reply::Raw(200, "{\"children\": [not json".into()),
        Mode::Error500 => Reply::Raw(500, "boom".into()),
        Mode::Slow => Reply::Delay(
            Duration::from_secs(3),
            Box::new(Reply::Json(json!({"children": []}))),
        ),
        // a hook that answers garbage-but-valid JSON of the wrong type
        Mode::EmptyChildren => Reply::Json(json!({"children": "none"})),
        Mode::Undeclared => Reply::Json(json!({"children": [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}
        ]})),
    }
}

#[tokio::test]
async fn failing_hooks_leave_children_unchanged() -> anyhow::Result<()> {
    let mut env = Env::new("fail").await?;
    install_kmeta_crds(&mut env).await?;
    let group = format!("{}.kmeta.test", env.id);
    let av = format!("{group}/v1");
    env.create_crd(crd(&group, "Thing", "things", true)).await?;
    let mode = Arc::new(Mutex::new(Mode::Good));
    let m = mode.clone();
    let hooks = HookServer::start(move |_, req| answer(*m.lock().unwrap(), req)).await?;
    let spec = json!({
        "parentResource": {"apiVersion": av, "resource": "things"},
        "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                            "updateStrategy": {"method": "InPlace"}}],
        "hooks": {"sync": {"webhook": {"url": hooks.url("sync"), "timeout": "1s"}}},
        "generateSelector": true
    });
    env.create(
        "compositecontrollers",
        composite_controller(&env, "fail-cc", spec),
    )
    .await?;
    env.start_controller();
    let ns = env.ns.clone();
    let things = env.api(&av, "Thing", "things", Some(&ns));
    let cms = env.api("v1", "ConfigMap", "configmaps", Some(&ns));
    env.create(
        "things",
        json!({"apiVersion": av, "kind": "Thing", "metadata": {"name": "t", "namespace": ns},
               "spec": {"v": "1"}}),
    )
    .await?;
    let good = eventually("child", TIMEOUT, || async { env.get(&cms, "t-cm").await }).await?;
    for bad in [
        Mode::Garbage,
        Mode::Error500,
        Mode::Slow,
        Mode::EmptyChildren,
        Mode::Undeclared,
    ] {
        *mode.lock().unwrap() = bad;
        let calls = hooks.count("sync");
        let errors = env.metrics.reconcile_count("fail-cc", "error");
        // a spec change would normally change (and with a bad hook must not touch) the child
        env.merge_patch(&things, "t", json!({"spec": {"v": format!("{bad:?}")}}))
            .await?;
        eventually(&format!("{bad:?}: a failed sync"), TIMEOUT, || async {
            Ok((hooks.count("sync") > calls
                && env.metrics.reconcile_count("fail-cc", "error") > errors)
                .then_some(()))
        })
        .await?;
        let now = env.get(&cms, "t-cm").await?.unwrap();
        assert_eq!(
            now["metadata"]["resourceVersion"], good["metadata"]["resourceVersion"],
            "{bad:?} changed the child"
        );
        assert!(env.get(&cms, "s").await?.is_none());
    }
    // each failure was reported on the parent as a SyncError event
    let ev = env
        .wait_event("SyncError event", Some(&ns), |e| {
            e["reason"] == "SyncError" && e["regarding"]["name"] == "t"
        })
        .await?;
    assert_eq!(ev["type"], "Warning");
    // and as a condition on the parent's status
    let p = eventually("Synced=False condition", TIMEOUT, || async {
        Ok(env.get(&things, "t").await?.filter(|p| {
            p["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Synced" && c["status"] == "False")
            })
        }))
    })
    .await?;
    let cond = &p["status"]["conditions"][0];
    assert_eq!(cond["reason"], "SyncError");
    assert!(
        cond["message"]
            .as_str()
            .unwrap()
            .contains("not a declared child"),
        "{cond}"
    );
    // a good answer again: the child follows
    *mode.lock().unwrap() = Mode::Good;
    env.merge_patch(&things, "t", json!({"spec": {"v": "2"}}))
        .await?;
    eventually("child updated after recovery", TIMEOUT, || async {
        Ok(env
            .get(&cms, "t-cm")
            .await?
            .filter(|c| c["data"]["v"] == "2"))
    })
    .await?;
    env.finish().await
}
