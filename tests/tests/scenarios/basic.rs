//! Sync creates children and sets status; updates flow through; children of a deleted parent
//! are garbage collected.

use kmeta_tests::*;
use serde_json::{Value, json};

/// A hook that makes one ConfigMap per parent, carrying `spec.message`, and reports how many
/// ConfigMaps it observed.
fn configmap_hook(_hook: &str, req: &Value) -> Reply {
    let parent = &req["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let observed = req["children"]["ConfigMap.v1"]
        .as_object()
        .map_or(0, |m| m.len());
    Reply::Json(json!({
        "status": {"observedChildren": observed, "message": parent["spec"]["message"]},
        "children": [{
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-cm"), "labels": {"app": name}},
            "data": {"message": parent["spec"]["message"]}
        }]
    }))
}

pub async fn setup(
    env: &mut Env,
    hooks: &HookServer,
    cc_name: &str,
    extra: Value,
) -> anyhow::Result<(String, kube::Api<kube::api::DynamicObject>)> {
    install_kmeta_crds(env).await?;
    let group = format!("{}.kmeta.test", env.id);
    env.create_crd(crd(&group, "Thing", "things", true)).await?;
    let mut spec = json!({
        "parentResource": {"apiVersion": format!("{group}/v1"), "resource": "things"},
        "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                            "updateStrategy": {"method": "InPlace"}}],
        "hooks": {"sync": {"webhook": {"url": hooks.url("sync")}}},
        "generateSelector": true
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    env.create(
        "compositecontrollers",
        composite_controller(env, cc_name, spec),
    )
    .await?;
    let things = env.api(
        &format!("{group}/v1"),
        "Thing",
        "things",
        Some(&env.ns.clone()),
    );
    Ok((format!("{group}/v1"), things))
}

#[tokio::test]
async fn sync_creates_children_and_sets_status() -> anyhow::Result<()> {
    let mut env = Env::new("basic").await?;
    let hooks = HookServer::start(configmap_hook).await?;
    let (av, things) = setup(&mut env, &hooks, "things-cc", json!({})).await?;
    env.start_controller();
    let ns = env.ns.clone();
    env.create(
        "things",
        json!({"apiVersion": av, "kind": "Thing",
        "metadata": {"name": "one", "namespace": ns}, "spec": {"message": "hello"}}),
    )
    .await?;
    let cms = env.api("v1", "ConfigMap", "configmaps", Some(&ns));
    let cm = eventually("child ConfigMap", TIMEOUT, || async {
        env.get(&cms, "one-cm").await
    })
    .await?;
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
    let parent = eventually("parent status with the observed child", TIMEOUT, || async {
        let p = env.get(&things, "one").await?;
        Ok(p.filter(|p| p["status"]["observedChildren"] == 1))
    })
    .await?;
    assert_eq!(parent["status"]["observedGeneration"], 1);
    assert_eq!(parent["status"]["message"], "hello");
    // the request had Metacontroller's shape
    let req = hooks.calls("sync").last().cloned().unwrap();
    assert_eq!(req["controller"]["metadata"]["name"], "things-cc");
    assert_eq!(req["finalizing"], false);
    assert!(req["children"]["ConfigMap.v1"].is_object());
    assert!(req["related"].is_object());

    // an update of the parent reaches the child
    env.merge_patch(&things, "one", json!({"spec": {"message": "bye"}}))
        .await?;
    eventually("child updated", TIMEOUT, || async {
        Ok(env
            .get(&cms, "one-cm")
            .await?
            .filter(|c| c["data"]["message"] == "bye"))
    })
    .await?;
    let parent = eventually("status of generation 2", TIMEOUT, || async {
        Ok(env
            .get(&things, "one")
            .await?
            .filter(|p| p["status"]["observedGeneration"] == 2))
    })
    .await?;
    assert_eq!(parent["status"]["message"], "bye");
    env.finish().await
}

#[tokio::test]
async fn deleting_the_parent_garbage_collects_children() -> anyhow::Result<()> {
    let mut env = Env::new("gc").await?;
    let hooks = HookServer::start(configmap_hook).await?;
    let (av, things) = setup(&mut env, &hooks, "gc-cc", json!({})).await?;
    env.start_controller();
    let ns = env.ns.clone();
    env.create(
        "things",
        json!({"apiVersion": av, "kind": "Thing",
        "metadata": {"name": "two", "namespace": ns}, "spec": {"message": "x"}}),
    )
    .await?;
    let cms = env.api("v1", "ConfigMap", "configmaps", Some(&ns));
    eventually("child ConfigMap", TIMEOUT, || async {
        env.get(&cms, "two-cm").await
    })
    .await?;
    things.delete("two", &Default::default()).await?;
    eventually("child garbage collected", TIMEOUT, || async {
        Ok(env.get(&cms, "two-cm").await?.is_none().then_some(()))
    })
    .await?;
    env.finish().await
}
