//! Ports of Metacontroller's integration scenarios: resyncAfterSeconds, customize/related,
//! claim and release by selector, missing status subresource, v2 hooks, hook authorization,
//! finalize hook.

use std::sync::{Arc, Mutex};

use kmeta_tests::*;
use serde_json::{Value, json};

/// A ConfigMap `name` in the scenario's namespace (filled in by [`Scenario::object`]).
fn configmap(name: &str, labels: Value, data: Value) -> Value {
    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    if !labels.is_null() {
        cm["metadata"]["labels"] = labels;
    }
    if !data.is_null() {
        cm["data"] = data;
    }
    cm
}

each_hook_mode!(resync_after_seconds_calls_the_hook_again);
async fn resync_after_seconds_calls_the_hook_again(mode: HookMode) -> anyhow::Result<()> {
    let s = Scenario::new("resync")
        .hook_mode(mode)
        .crd("Thing", "things")
        .hook(|_, _| Reply::Json(json!({"children": [], "resyncAfterSeconds": 0.1})))
        .controller(Cc::new("resync-cc"))
        .parent("p", json!({}))
        .start()
        .await?;
    // without any event, the hook is called again and again
    until("five syncs from resyncAfterSeconds", || {
        s.hooks().count("sync") >= 5
    })
    .await?;
    s.finish().await
}

/// A tiny `resyncAfterSeconds` is raised to `min_resync_after` (`--min-resync-after`), so one
/// parent cannot become a hook-call loop: five resyncs take at least four minimum intervals. (The
/// first sync writes the parent's status, which requeues it at once, as in Metacontroller: the
/// resyncs are counted from the second call.)
#[tokio::test]
async fn resync_after_seconds_has_a_floor() -> anyhow::Result<()> {
    let calls: std::sync::Arc<std::sync::Mutex<Vec<std::time::Instant>>> = Default::default();
    let seen = calls.clone();
    let s = Scenario::new("floor")
        .crd("Thing", "things")
        .hook(move |_, _| {
            seen.lock().unwrap().push(std::time::Instant::now());
            Reply::Json(json!({"children": [], "resyncAfterSeconds": 0.001}))
        })
        .controller(Cc::new("floor-cc"))
        .config(
            kmeta::ManagerConfig::default().min_resync_after(std::time::Duration::from_millis(200)),
        )
        .parent("p", json!({}))
        .start()
        .await?;
    until("six syncs", || calls.lock().unwrap().len() >= 6).await?;
    let c = calls.lock().unwrap().clone();
    let spread = c[5] - c[1];
    assert!(
        spread >= std::time::Duration::from_millis(700),
        "five resyncs within {spread:?} despite a 200 ms floor"
    );
    s.finish().await
}

each_hook_mode!(customize_hook_supplies_related_objects);
async fn customize_hook_supplies_related_objects(mode: HookMode) -> anyhow::Result<()> {
    let s = Scenario::new("related")
        .hook_mode(mode)
        .crd("Thing", "things")
        .hook(|hook, req| match hook {
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
        .object(
            "configmaps",
            configmap("shared", json!({"share": "yes"}), json!({"value": "a"})),
        )
        .object(
            "configmaps",
            configmap("private", Value::Null, json!({"value": "b"})),
        )
        .controller(Cc::new("related-cc").hook("customize"))
        .parent("p", json!({}))
        .start()
        .await?;
    s.wait_parent("p", "related object in status", |p| {
        p["status"]["related"] == json!({"shared": "a"})
    })
    .await?;
    let req = s.hooks().calls("customize").pop().unwrap();
    assert_eq!(req["parent"]["metadata"]["name"], "p");
    assert_eq!(req["controller"]["metadata"]["name"], "related-cc");
    // a change of the related object triggers a sync of the parent
    s.merge_patch(&s.configmaps(), "shared", json!({"data": {"value": "c"}}))
        .await?;
    s.wait_parent("p", "related change reaches the parent", |p| {
        p["status"]["related"] == json!({"shared": "c"})
    })
    .await?;
    s.finish().await
}

/// A customize hook asking for `resource` objects labelled `share: <parent's spec.share>`, and a
/// sync hook that copies the keys of every related group into the parent's status.
fn related_keys_hook(resource: &'static str) -> impl Fn(&str, &Value) -> Reply + Send + Sync {
    move |hook, req| match hook {
        "customize" => Reply::Json(json!({"relatedResources": [{
            "apiVersion": "v1", "resource": resource,
            "labelSelector": {"matchLabels": {"share": req["parent"]["spec"]["share"]}}
        }]})),
        _ => {
            let groups = req["related"].as_object().cloned().unwrap_or_default();
            let keys: serde_json::Map<String, Value> = groups
                .iter()
                .map(|(g, objs)| {
                    let mut k: Vec<&String> = objs
                        .as_object()
                        .map(|o| o.keys().collect())
                        .unwrap_or_default();
                    k.sort();
                    (g.clone(), json!(k))
                })
                .collect();
            Reply::Json(json!({"status": {"related": keys}, "children": []}))
        }
    }
}

/// A v2 customize rule with a labelSelector and no namespace selects in every namespace, not
/// only the parent's.
#[tokio::test]
async fn v2_related_label_selector_reads_every_namespace() -> anyhow::Result<()> {
    related_across_namespaces("related-v2", "v2").await
}

/// The rules follow the customize hook's version, the related map's keys the sync hook's (v1:
/// names only, for a namespaced parent).
#[tokio::test]
async fn related_selection_follows_the_customize_hook_version() -> anyhow::Result<()> {
    related_across_namespaces("related-v1-sync", "v1").await
}

/// A v2 customize hook and a sync hook of `sync_version` see ConfigMaps labelled for the parent
/// in its namespace and in another one.
async fn related_across_namespaces(name: &str, sync_version: &str) -> anyhow::Result<()> {
    let mut s = Scenario::new(name)
        .crd("Thing", "things")
        .hook(related_keys_hook("configmaps"))
        .controller(Cc::new(&format!("{name}-cc")).hook("customize").patch(
            json!({"hooks": {"sync": {"version": sync_version}, "customize": {"version": "v2"}}}),
        ))
        .start()
        .await?;
    let other = format!("{}-other", s.ns);
    let share = s.id.clone();
    s.create(
        "namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": other}}),
    )
    .await?;
    for (ns, name, value) in [
        (s.ns.clone(), "here", &share),
        (other.clone(), "there", &share),
    ] {
        let mut cm = configmap(name, json!({"share": value}), Value::Null);
        cm["metadata"]["namespace"] = json!(ns);
        s.create("configmaps", cm).await?;
    }
    s.parent("p", json!({"share": share})).await?;
    let mut keys = match sync_version {
        "v2" => [format!("{}/here", s.ns), format!("{other}/there")],
        _ => ["here".to_owned(), "there".to_owned()],
    };
    keys.sort();
    let want = json!({ "ConfigMap.v1": keys });
    s.wait_parent("p", "related ConfigMaps of both namespaces", |p| {
        p["status"]["related"] == want
    })
    .await?;
    s.finish().await
}

/// A namespaced parent with a v1 customize hook still reads cluster-scoped related objects
/// (here Namespaces).
#[tokio::test]
async fn v1_namespaced_parent_reads_cluster_scoped_related() -> anyhow::Result<()> {
    let mut s = Scenario::new("related-v1")
        .crd("Thing", "things")
        .hook(related_keys_hook("namespaces"))
        .controller(Cc::new("related-v1-cc").hook("customize"))
        .start()
        .await?;
    let share = s.id.clone();
    let names = [format!("{}-a", s.ns), format!("{}-b", s.ns)];
    for n in &names {
        s.create(
            "namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": n, "labels": {"share": share}}}),
        )
        .await?;
    }
    s.parent("p", json!({"share": share})).await?;
    s.wait_parent("p", "related Namespaces", |p| {
        p["status"]["related"] == json!({"Namespace.v1": names})
    })
    .await?;
    s.finish().await
}

each_hook_mode!(claims_matching_orphans_and_ignores_non_matching_objects);
async fn claims_matching_orphans_and_ignores_non_matching_objects(
    mode: HookMode,
) -> anyhow::Result<()> {
    // the hook reports what it observed and desires the orphan (so it is kept, now owned)
    let s = Scenario::new("claim")
        .hook_mode(mode)
        .crd("Thing", "things")
        .hook(|_, req| {
            let names: Vec<String> = req["children"]["ConfigMap.v1"]
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            Reply::Json(json!({"status": {"observed": names}, "children": [
                {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "orphan", "labels": {"app": "p"}}, "data": {"adopted": "yes"}}
            ]}))
        })
        .object(
            "configmaps",
            configmap("orphan", json!({"app": "p"}), Value::Null),
        )
        .object(
            "configmaps",
            configmap("stranger", json!({"app": "other"}), Value::Null),
        )
        .controller(Cc::new("claim-cc").no_generate_selector())
        .parent("p", json!({"selector": {"matchLabels": {"app": "p"}}}))
        .start()
        .await?;
    let parent = s.get(&s.parents(), "p").await?.unwrap();
    let adopted = s
        .wait_child_where("orphan", "orphan adopted", |c| {
            c["metadata"]["ownerReferences"][0]["uid"] == parent["metadata"]["uid"]
        })
        .await?;
    assert_eq!(
        adopted["metadata"]["ownerReferences"][0]["controller"],
        true
    );
    let stranger = s.get(&s.configmaps(), "stranger").await?.unwrap();
    assert!(stranger["metadata"]["ownerReferences"].is_null());
    s.wait_parent("p", "the hook observed the adopted child", |p| {
        p["status"]["observed"] == json!(["orphan"])
    })
    .await?;
    s.wait_child_where("orphan", "adopted child updated as desired", |c| {
        c["data"]["adopted"] == "yes"
    })
    .await?;
    s.finish().await
}

each_hook_mode!(adopts_orphans_that_come_to_match_after_the_parent_synced);
/// No resync period: only the orphans' own events can bring the parent back to adopt them — one
/// created after the parent's first sync, and one relabelled to match.
async fn adopts_orphans_that_come_to_match_after_the_parent_synced(
    mode: HookMode,
) -> anyhow::Result<()> {
    // the hook keeps what it observes and reports it
    let mut s = Scenario::new("late-orphan")
        .hook_mode(mode)
        .crd("Thing", "things")
        .hook(|_, req| {
            let observed = req["children"]["ConfigMap.v1"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            let names: Vec<&String> = observed.keys().collect();
            let children: Vec<Value> = observed
                .values()
                .map(|c| {
                    configmap(
                        c["metadata"]["name"].as_str().unwrap_or_default(),
                        json!({"app": "p"}),
                        json!({"kept": "yes"}),
                    )
                })
                .collect();
            Reply::Json(json!({"status": {"observed": names}, "children": children}))
        })
        .object(
            "configmaps",
            configmap("stranger", json!({"app": "other"}), Value::Null),
        )
        .controller(Cc::new("late-orphan-cc").no_generate_selector())
        .parent("p", json!({"selector": {"matchLabels": {"app": "p"}}}))
        .start()
        .await?;
    let parent = s.get(&s.parents(), "p").await?.unwrap();
    s.wait_parent("p", "the first sync, nothing observed", |p| {
        p["status"]["observed"] == json!([])
    })
    .await?;
    let ours = |c: &Value| c["metadata"]["ownerReferences"][0]["uid"] == parent["metadata"]["uid"];
    let mut late = configmap("late", json!({"app": "p", "extra": "x"}), Value::Null);
    late["metadata"]["namespace"] = json!(s.ns);
    s.create("configmaps", late).await?;
    s.wait_child_where("late", "the late orphan adopted", ours)
        .await?;
    s.merge_patch(
        &s.configmaps(),
        "stranger",
        json!({"metadata": {"labels": {"app": "p"}}}),
    )
    .await?;
    s.wait_child_where("stranger", "the relabelled orphan adopted", ours)
        .await?;
    s.wait_parent("p", "the hook observed both", |p| {
        let mut names: Vec<&str> = p["status"]["observed"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        names.sort_unstable();
        names == ["late", "stranger"]
    })
    .await?;
    s.finish().await
}

each_hook_mode!(releases_owned_children_whose_labels_stop_matching);
async fn releases_owned_children_whose_labels_stop_matching(mode: HookMode) -> anyhow::Result<()> {
    let keep = Arc::new(Mutex::new(true));
    let k = keep.clone();
    let s = Scenario::new("release")
        .hook_mode(mode)
        .crd("Thing", "things")
        .hook(move |_, req| {
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
        .controller(Cc::new("release-cc").no_generate_selector())
        .parent(
            "p",
            json!({"selector": {"matchLabels": {"app": "p"}}, "keep": true}),
        )
        .start()
        .await?;
    let (things, cms) = (s.parents(), s.configmaps());
    s.wait_child_where("p-c", "child", |_| true).await?;
    // someone relabels the child: it no longer matches the parent's selector, so it is
    // released (ownerReference removed), not deleted; then the hook stops desiring it
    s.merge_patch(
        &cms,
        "p-c",
        json!({"metadata": {"labels": {"app": "moved"}}}),
    )
    .await?;
    s.merge_patch(&things, "p", json!({"spec": {"keep": false}}))
        .await?;
    let released = s
        .wait_child_where("p-c", "child released", |c| {
            c["metadata"]["ownerReferences"]
                .as_array()
                .is_none_or(Vec::is_empty)
        })
        .await?;
    assert_eq!(released["metadata"]["labels"]["app"], "moved");
    // after the hook stopped desiring it, it still exists: released children are not deleted
    let poke = json!({"metadata": {"annotations": {"poke": "1"}}});
    s.patch_and_sync("release-cc", &things, "p", poke).await?;
    assert!(s.get(&cms, "p-c").await?.is_some());
    s.finish().await
}

#[tokio::test]
async fn parent_without_status_subresource_is_reported() -> anyhow::Result<()> {
    let s = Scenario::new("nostatus")
        .crd_with("Bare", "bares", |c| {
            c["spec"]["versions"][0]
                .as_object_mut()
                .unwrap()
                .remove("subresources");
        })
        .controller(
            Cc::new("bare-cc")
                .no_children()
                .no_generate_selector()
                .sync_url("http://127.0.0.1:9/sync"),
        )
        .start()
        .await?;
    let ev = s
        .wait_event("warning on the CompositeController", None, |e| {
            e["regarding"]["name"] == "bare-cc" && e["type"] == "Warning"
        })
        .await?;
    let note = ev["note"].as_str().unwrap_or_default();
    assert!(note.contains("status subresource"), "{note}");
    s.finish().await
}

each_hook_mode!(v2_hooks_key_children_by_namespace_and_name);
async fn v2_hooks_key_children_by_namespace_and_name(mode: HookMode) -> anyhow::Result<()> {
    let s = Scenario::new("v2")
        .hook_mode(mode)
        .crd("Thing", "things")
        .hook(|_, req| {
            let name = req["parent"]["metadata"]["name"]
                .as_str()
                .unwrap_or_default();
            Reply::Json(
                json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{name}-c")}}]}),
            )
        })
        .controller(Cc::new("v2-cc").patch(json!({"hooks": {"sync": {"version": "v2"}}})))
        .parent("p", json!({}))
        .start()
        .await?;
    let key = format!("{}/p-c", s.ns);
    let req = s
        .wait_call("sync", "a request observing the child", |r| {
            r["children"]["ConfigMap.v1"].get(&key).is_some()
        })
        .await?;
    assert_eq!(
        req["children"]["ConfigMap.v1"][&key]["metadata"]["name"],
        "p-c"
    );
    s.finish().await
}

#[tokio::test]
async fn hook_authorization_from_a_secret() -> anyhow::Result<()> {
    let mut s = Scenario::new("auth")
        .crd("Thing", "things")
        .hook(|_, _| Reply::Json(json!({"children": []})))
        .object(
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hook-token"},
                   "stringData": {"token": "s3cret"}, "data": {"token": "czNjcmV0"}}),
        )
        .prepare()
        .await?;
    let auth = json!({"secretRef": {"name": "hook-token", "namespace": s.ns}});
    s.controller(Cc::new("auth-cc").webhook(json!({"authorization": auth})))
        .await?;
    s.start_controller();
    s.parent("p", json!({})).await?;
    until("an authorized call", || {
        !s.hooks().authorizations("sync").is_empty()
    })
    .await?;
    assert_eq!(
        s.hooks().authorizations("sync")[0].as_deref(),
        Some("Bearer s3cret")
    );
    s.finish().await
}

each_hook_mode!(finalize_hook_runs_before_the_parent_goes_away);
async fn finalize_hook_runs_before_the_parent_goes_away(mode: HookMode) -> anyhow::Result<()> {
    let done = Arc::new(Mutex::new(false));
    let d = done.clone();
    let s = Scenario::new("finalize")
        .hook_mode(mode)
        .crd("Thing", "things")
        .hook(move |hook, req| {
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
        .controller(Cc::new("fin-cc").hook("finalize"))
        .parent("p", json!({}))
        .start()
        .await?;
    let (things, cms) = (s.parents(), s.configmaps());
    let p = s
        .wait_parent("p", "finalizer added", |p| {
            p["metadata"]["finalizers"].as_array().is_some_and(|f| {
                f.iter()
                    .any(|f| f == "metacontroller.io/compositecontroller-fin-cc")
            })
        })
        .await?;
    assert!(p["metadata"]["deletionTimestamp"].is_null());
    s.wait_child_where("p-c", "child", |_| true).await?;
    things.delete("p", &Default::default()).await?;
    until("finalize hook called", || s.hooks().count("finalize") > 0).await?;
    // not finalized yet: the parent stays (terminating) and so does its child
    let p = s.get(&things, "p").await?.unwrap();
    assert!(p["metadata"]["deletionTimestamp"].is_string());
    assert!(s.get(&cms, "p-c").await?.is_some());
    *done.lock().unwrap() = true;
    // the finalize hook is called again (resync after an unfinished finalize or the next event)
    s.merge_patch(
        &things,
        "p",
        json!({"metadata": {"annotations": {"poke": "1"}}}),
    )
    .await?;
    s.wait_gone(&things, "p", "parent gone").await?;
    s.wait_gone(&cms, "p-c", "child gone").await?;
    s.finish().await
}
