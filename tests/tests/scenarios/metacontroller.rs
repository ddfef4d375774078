//! Ports of Metacontroller's integration scenarios: resyncAfterSeconds, customize/related,
//! claim and release by selector, missing status subresource, v2 hooks, hook authorization,
//! finalize hook.

use std::sync::{Arc, Mutex};

use kmeta_tests::*;
use serde_json::{Value, json};

struct World {
    env: Env,
    av: String,
}

async fn world(name: &str) -> anyhow::Result<World> {
    let mut env = Env::new(name).await?;
    install_kmeta_crds(&mut env).await?;
    let group = format!("{}.kmeta.test", env.id);
    env.create_crd(crd(&group, "Thing", "things", true)).await?;
    Ok(World {
        av: format!("{group}/v1"),
        env,
    })
}

impl World {
    async fn cc(&mut self, name: &str, spec: Value) -> anyhow::Result<()> {
        let mut full = json!({
            "parentResource": {"apiVersion": self.av, "resource": "things"},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                "updateStrategy": {"method": "InPlace"}}],
        });
        if let (Some(f), Some(s)) = (full.as_object_mut(), spec.as_object()) {
            f.extend(s.clone());
        }
        let cc = composite_controller(&self.env, name, full);
        self.env.create("compositecontrollers", cc).await?;
        Ok(())
    }

    async fn parent(&mut self, name: &str, spec: Value) -> anyhow::Result<Value> {
        let ns = self.env.ns.clone();
        self.env
            .create(
                "things",
                json!({"apiVersion": self.av, "kind": "Thing",
                       "metadata": {"name": name, "namespace": ns}, "spec": spec}),
            )
            .await
    }

    fn things(&self) -> kube::Api<kube::api::DynamicObject> {
        self.env
            .api(&self.av, "Thing", "things", Some(&self.env.ns))
    }

    fn configmaps(&self) -> kube::Api<kube::api::DynamicObject> {
        self.env
            .api("v1", "ConfigMap", "configmaps", Some(&self.env.ns))
    }
}

#[tokio::test]
async fn resync_after_seconds_calls_the_hook_again() -> anyhow::Result<()> {
    let mut w = world("resync").await?;
    let hooks =
        HookServer::start(|_, _| Reply::Json(json!({"children": [], "resyncAfterSeconds": 0.1})))
            .await?;
    w.cc(
        "resync-cc",
        json!({"hooks": {"sync": {"webhook": {"url": hooks.url("sync")}}}, "generateSelector": true}),
    )
    .await?;
    w.env.start_controller();
    w.parent("p", json!({})).await?;
    // without any event, the hook is called again and again
    eventually("five syncs from resyncAfterSeconds", TIMEOUT, || async {
        Ok((hooks.count("sync") >= 5).then_some(()))
    })
    .await?;
    w.env.finish().await
}

#[tokio::test]
async fn customize_hook_supplies_related_objects() -> anyhow::Result<()> {
    let mut w = world("related").await?;
    let hooks = HookServer::start(|hook, req| match hook {
        "customize" => Reply::Json(json!({"relatedResources": [{
            "apiVersion": "v1", "resource": "configmaps",
            "labelSelector": {"matchLabels": {"share": "yes"}}
        }]})),
        _ => {
            // copy every related ConfigMap's data into the parent's status
            let related = req["related"]["ConfigMap.v1"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            let data: serde_json::Map<String, Value> = related
                .iter()
                .map(|(k, v)| (k.clone(), v["data"]["value"].clone()))
                .collect();
            Reply::Json(json!({"status": {"related": data}, "children": []}))
        }
    })
    .await?;
    w.cc(
        "related-cc",
        json!({"hooks": {"sync": {"webhook": {"url": hooks.url("sync")}},
                         "customize": {"webhook": {"url": hooks.url("customize")}}},
               "generateSelector": true}),
    )
    .await?;
    let ns = w.env.ns.clone();
    w.env
        .create(
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "shared", "namespace": ns, "labels": {"share": "yes"}},
                   "data": {"value": "a"}}),
        )
        .await?;
    w.env
        .create(
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "private", "namespace": ns},
                   "data": {"value": "b"}}),
        )
        .await?;
    w.env.start_controller();
    w.parent("p", json!({})).await?;
    let things = w.things();
    eventually("related object in status", TIMEOUT, || async {
        Ok(w.env
            .get(&things, "p")
            .await?
            .filter(|p| p["status"]["related"] == json!({"shared": "a"})))
    })
    .await?;
    let req = hooks.calls("customize").pop().unwrap();
    assert_eq!(req["parent"]["metadata"]["name"], "p");
    assert_eq!(req["controller"]["metadata"]["name"], "related-cc");
    // a change of the related object triggers a sync of the parent
    w.env
        .merge_patch(&w.configmaps(), "shared", json!({"data": {"value": "c"}}))
        .await?;
    eventually("related change reaches the parent", TIMEOUT, || async {
        Ok(w.env
            .get(&things, "p")
            .await?
            .filter(|p| p["status"]["related"] == json!({"shared": "c"})))
    })
    .await?;
    w.env.finish().await
}

#[tokio::test]
async fn claims_matching_orphans_and_ignores_non_matching_objects() -> anyhow::Result<()> {
    let mut w = world("claim").await?;
    // the hook reports what it observed and desires the orphan (so it is kept, now owned)
    let hooks = HookServer::start(|_, req| {
        let names: Vec<String> = req["children"]["ConfigMap.v1"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        Reply::Json(json!({"status": {"observed": names}, "children": [
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "orphan", "labels": {"app": "p"}}, "data": {"adopted": "yes"}}
        ]}))
    })
    .await?;
    w.cc(
        "claim-cc",
        json!({"hooks": {"sync": {"webhook": {"url": hooks.url("sync")}}}}),
    )
    .await?;
    let ns = w.env.ns.clone();
    w.env
        .create(
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "orphan", "namespace": ns, "labels": {"app": "p"}}}),
        )
        .await?;
    w.env
        .create(
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "stranger", "namespace": ns, "labels": {"app": "other"}}}),
        )
        .await?;
    w.env.start_controller();
    let parent = w
        .parent("p", json!({"selector": {"matchLabels": {"app": "p"}}}))
        .await?;
    let cms = w.configmaps();
    let adopted = eventually("orphan adopted", TIMEOUT, || async {
        Ok(w.env
            .get(&cms, "orphan")
            .await?
            .filter(|c| c["metadata"]["ownerReferences"][0]["uid"] == parent["metadata"]["uid"]))
    })
    .await?;
    assert_eq!(
        adopted["metadata"]["ownerReferences"][0]["controller"],
        true
    );
    let stranger = w.env.get(&cms, "stranger").await?.unwrap();
    assert!(stranger["metadata"]["ownerReferences"].is_null());
    let things = w.things();
    eventually("the hook observed the adopted child", TIMEOUT, || async {
        Ok(w.env
            .get(&things, "p")
            .await?
            .filter(|p| p["status"]["observed"] == json!(["orphan"])))
    })
    .await?;
    eventually("adopted child updated as desired", TIMEOUT, || async {
        Ok(w.env
            .get(&cms, "orphan")
            .await?
            .filter(|c| c["data"]["adopted"] == "yes"))
    })
    .await?;
    w.env.finish().await
}

#[tokio::test]
async fn releases_owned_children_whose_labels_stop_matching() -> anyhow::Result<()> {
    let mut w = world("release").await?;
    let keep = Arc::new(Mutex::new(true));
    let k = keep.clone();
    let hooks = HookServer::start(move |_, req| {
        let name = req["parent"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        let children = if *k.lock().unwrap() {
            json!([{"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("{name}-c"), "labels": {"app": name}}}])
        } else {
            json!([])
        };
        Reply::Json(json!({"children": children}))
    })
    .await?;
    w.cc(
        "release-cc",
        json!({"hooks": {"sync": {"webhook": {"url": hooks.url("sync")}}}}),
    )
    .await?;
    w.env.start_controller();
    w.parent(
        "p",
        json!({"selector": {"matchLabels": {"app": "p"}}, "keep": true}),
    )
    .await?;
    let cms = w.configmaps();
    eventually("child", TIMEOUT, || async { w.env.get(&cms, "p-c").await }).await?;
    // someone relabels the child: it no longer matches the parent's selector, so it is
    // released (ownerReference removed), not deleted; then the hook stops desiring it
    w.env
        .merge_patch(
            &cms,
            "p-c",
            json!({"metadata": {"labels": {"app": "moved"}}}),
        )
        .await?;
    let things = w.things();
    w.env
        .merge_patch(&things, "p", json!({"spec": {"keep": false}}))
        .await?;
    let released = eventually("child released", TIMEOUT, || async {
        Ok(w.env.get(&cms, "p-c").await?.filter(|c| {
            c["metadata"]["ownerReferences"]
                .as_array()
                .is_none_or(Vec::is_empty)
        }))
    })
    .await?;
    assert_eq!(released["metadata"]["labels"]["app"], "moved");
    // after the hook stopped desiring it, it still exists: released children are not deleted
    let syncs = w.env.syncs("release-cc");
    w.env
        .merge_patch(
            &things,
            "p",
            json!({"metadata": {"annotations": {"poke": "1"}}}),
        )
        .await?;
    w.env.wait_syncs("release-cc", syncs).await?;
    assert!(w.env.get(&cms, "p-c").await?.is_some());
    w.env.finish().await
}

#[tokio::test]
async fn parent_without_status_subresource_is_reported() -> anyhow::Result<()> {
    let mut env = Env::new("nostatus").await?;
    install_kmeta_crds(&mut env).await?;
    let group = format!("{}.kmeta.test", env.id);
    let mut c = crd(&group, "Bare", "bares", true);
    c["spec"]["versions"][0]
        .as_object_mut()
        .unwrap()
        .remove("subresources");
    env.create_crd(c).await?;
    let cc = composite_controller(
        &env,
        "bare-cc",
        json!({"parentResource": {"apiVersion": format!("{group}/v1"), "resource": "bares"},
               "hooks": {"sync": {"webhook": {"url": "http://127.0.0.1:9/sync"}}}}),
    );
    env.create("compositecontrollers", cc).await?;
    env.start_controller();
    let ev = env
        .wait_event("warning on the CompositeController", None, |e| {
            e["regarding"]["name"] == "bare-cc" && e["type"] == "Warning"
        })
        .await?;
    let note = ev["note"].as_str().unwrap_or_default();
    assert!(note.contains("status subresource"), "{note}");
    env.finish().await
}

#[tokio::test]
async fn v2_hooks_key_children_by_namespace_and_name() -> anyhow::Result<()> {
    let mut w = world("v2").await?;
    let hooks = HookServer::start(|_, req| {
        let name = req["parent"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        Reply::Json(
            json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-c")}}]}),
        )
    })
    .await?;
    w.cc(
        "v2-cc",
        json!({"hooks": {"sync": {"version": "v2", "webhook": {"url": hooks.url("sync")}}},
               "generateSelector": true}),
    )
    .await?;
    w.env.start_controller();
    w.parent("p", json!({})).await?;
    let ns = w.env.ns.clone();
    let key = format!("{ns}/p-c");
    let req = eventually("a request observing the child", TIMEOUT, || async {
        Ok(hooks
            .calls("sync")
            .into_iter()
            .find(|r| r["children"]["ConfigMap.v1"].get(&key).is_some()))
    })
    .await?;
    assert_eq!(
        req["children"]["ConfigMap.v1"][&key]["metadata"]["name"],
        "p-c"
    );
    w.env.finish().await
}

#[tokio::test]
async fn hook_authorization_from_a_secret() -> anyhow::Result<()> {
    let mut w = world("auth").await?;
    let hooks = HookServer::start(|_, _| Reply::Json(json!({"children": []}))).await?;
    let ns = w.env.ns.clone();
    w.env
        .create(
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "hook-token", "namespace": ns},
                   "stringData": {"token": "s3cret"}, "data": {"token": "czNjcmV0"}}),
        )
        .await?;
    w.cc(
        "auth-cc",
        json!({"hooks": {"sync": {"webhook": {"url": hooks.url("sync"),
            "authorization": {"secretRef": {"name": "hook-token", "namespace": ns}}}}},
            "generateSelector": true}),
    )
    .await?;
    w.env.start_controller();
    w.parent("p", json!({})).await?;
    eventually("an authorized call", TIMEOUT, || async {
        Ok((!hooks.authorizations("sync").is_empty()).then_some(()))
    })
    .await?;
    assert_eq!(
        hooks.authorizations("sync")[0].as_deref(),
        Some("Bearer s3cret")
    );
    w.env.finish().await
}

#[tokio::test]
async fn finalize_hook_runs_before_the_parent_goes_away() -> anyhow::Result<()> {
    let mut w = world("finalize").await?;
    let done = Arc::new(Mutex::new(false));
    let d = done.clone();
    let hooks = HookServer::start(move |hook, req| {
        let name = req["parent"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        let child = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-c")}});
        match hook {
            "finalize" => {
                assert_eq!(req["finalizing"], true);
                // keep the child until told to finish; then drop it and finish
                if *d.lock().unwrap() {
                    Reply::Json(json!({"children": [], "finalized": true}))
                } else {
                    Reply::Json(json!({"children": [child], "finalized": false}))
                }
            }
            _ => Reply::Json(json!({"children": [child]})),
        }
    })
    .await?;
    w.cc(
        "fin-cc",
        json!({"hooks": {"sync": {"webhook": {"url": hooks.url("sync")}},
                         "finalize": {"webhook": {"url": hooks.url("finalize")}}},
               "generateSelector": true}),
    )
    .await?;
    w.env.start_controller();
    w.parent("p", json!({})).await?;
    let things = w.things();
    let cms = w.configmaps();
    let p = eventually("finalizer added", TIMEOUT, || async {
        Ok(w.env.get(&things, "p").await?.filter(|p| {
            p["metadata"]["finalizers"].as_array().is_some_and(|f| {
                f.iter()
                    .any(|f| f == "metacontroller.io/compositecontroller-fin-cc")
            })
        }))
    })
    .await?;
    assert!(p["metadata"]["deletionTimestamp"].is_null());
    eventually("child", TIMEOUT, || async { w.env.get(&cms, "p-c").await }).await?;
    things.delete("p", &Default::default()).await?;
    eventually("finalize hook called", TIMEOUT, || async {
        Ok((hooks.count("finalize") > 0).then_some(()))
    })
    .await?;
    // not finalized yet: the parent stays (terminating) and so does its child
    let p = w.env.get(&things, "p").await?.unwrap();
    assert!(p["metadata"]["deletionTimestamp"].is_string());
    assert!(w.env.get(&cms, "p-c").await?.is_some());
    *done.lock().unwrap() = true;
    // the finalize hook is called again (resync after an unfinished finalize or the next event)
    w.env
        .merge_patch(
            &things,
            "p",
            json!({"metadata": {"annotations": {"poke": "1"}}}),
        )
        .await?;
    eventually("parent gone", TIMEOUT, || async {
        Ok(w.env.get(&things, "p").await?.is_none().then_some(()))
    })
    .await?;
    eventually("child gone", TIMEOUT, || async {
        Ok(w.env.get(&cms, "p-c").await?.is_none().then_some(()))
    })
    .await?;
    w.env.finish().await
}
