//! Conformance suite: drives the server with a real `kube::Client`.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kmeta_apiserver::{AdmissionError, FaultSpec, Operation, TestServer};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, PropagationPolicy, WatchEvent, WatchParams,
};
use kube::discovery::Discovery;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use std::future::Future;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

async fn within<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(T, f).await.expect("timed out")
}

fn cm(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"}
    }))
    .unwrap()
}

fn j<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap()
}

fn api_err(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected api error, got {other:?}"),
    }
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1"}]}}}
    }))
    .unwrap()
}

#[tokio::test]
async fn configmap_crud_and_errors() {
    let s = TestServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let created = within(api.create(&PostParams::default(), &cm("a", json!({"x": "1"}))))
        .await
        .unwrap();
    let md = &created.metadata;
    assert!(md.uid.is_some() && md.resource_version.is_some());
    assert_eq!(md.generation, Some(1));
    let ts = md.creation_timestamp.as_ref().unwrap();
    assert!(!ts.0.to_string().is_empty());
    // AlreadyExists
    let e = api_err(
        api.create(&PostParams::default(), &cm("a", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
    // NotFound
    let e = api_err(api.get("nope").await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
    assert!(
        e.message.contains("configmaps \"nope\" not found"),
        "{}",
        e.message
    );
    // Invalid name
    let e = api_err(
        api.create(&PostParams::default(), &cm("Bad_Name", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    // namespace must exist
    let other: Api<ConfigMap> = Api::namespaced(s.client(), "missing");
    let e = api_err(
        other
            .create(&PostParams::default(), &cm("a", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 404);
    // update with stale rv -> 409 Conflict
    let mut c1 = created.clone();
    c1.data = Some([("k".to_string(), "v2".to_string())].into());
    let updated = api.replace("a", &PostParams::default(), &c1).await.unwrap();
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );
    let e = api_err(
        api.replace("a", &PostParams::default(), &c1)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    // generateName
    let mut g = cm("", json!({}));
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let g = api.create(&PostParams::default(), &g).await.unwrap();
    assert!(g.metadata.name.unwrap().starts_with("gen-"));
    // delete returns Status for an immediately deleted configmap
    let r = api.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(r.is_right());
    assert_eq!(api_err(api.get("a").await.unwrap_err()).code, 404);
    s.shutdown().await;
}

#[tokio::test]
async fn list_selectors_and_pagination() {
    let s = TestServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    for i in 0..10 {
        let tier = if i % 2 == 0 { "fe" } else { "be" };
        api.create(
            &PostParams::default(),
            &cm(&format!("c{i}"), json!({"tier": tier, "n": i.to_string()})),
        )
        .await
        .unwrap();
    }
    let count = |sel: &'static str| {
        let api = api.clone();
        async move {
            api.list(&ListParams::default().labels(sel))
                .await
                .unwrap()
                .items
                .len()
        }
    };
    assert_eq!(count("tier=fe").await, 5);
    assert_eq!(count("tier!=fe").await, 5);
    assert_eq!(count("n in (1,2,3)").await, 3);
    assert_eq!(count("n notin (1,2,3)").await, 7);
    assert_eq!(count("tier").await, 10);
    assert_eq!(count("!tier").await, 0);
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=c3"))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);
    // pagination
    let mut names = vec![];
    let mut lp = ListParams::default().limit(3);
    loop {
        let page = api.list(&lp).await.unwrap();
        names.extend(page.items.iter().map(|c| c.metadata.name.clone().unwrap()));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(names.len(), 10);
    let mut sorted = names.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), 10);
    let bad = api
        .list(&ListParams::default().labels("a in b"))
        .await
        .unwrap_err();
    assert_eq!(api_err(bad).code, 400);
}

#[tokio::test]
async fn discovery_legacy_and_aggregated() {
    let s = TestServer::start().await.unwrap();
    let d = within(Discovery::new(s.client()).run()).await.unwrap();
    let (ar, caps) = d
        .resolve_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"))
        .unwrap();
    assert_eq!(ar.plural, "deployments");
    assert!(
        caps.subresources
            .iter()
            .any(|(a, _)| a.plural.ends_with("status") || a.plural == "status")
    );
    let d2 = within(Discovery::new(s.client()).run_aggregated())
        .await
        .unwrap();
    for gvk in [
        GroupVersionKind::gvk("", "v1", "ConfigMap"),
        GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "ClusterRole"),
        GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"),
    ] {
        assert!(d2.resolve_gvk(&gvk).is_some(), "{gvk:?}");
        assert!(d.resolve_gvk(&gvk).is_some(), "{gvk:?}");
    }
    let v = s.client().apiserver_version().await.unwrap();
    assert_eq!(v.major, "1");
}

#[tokio::test]
async fn every_patch_type_and_status_subresource() {
    let s = TestServer::start().await.unwrap();
    let api: Api<Deployment> = Api::namespaced(s.client(), "default");
    api.create(&PostParams::default(), &deployment("web", 1))
        .await
        .unwrap();
    // strategic merge: containers merge by name
    let p = json!({"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "s:1"}]}}}});
    let d = api
        .patch("web", &PatchParams::default(), &Patch::Strategic(&p))
        .await
        .unwrap();
    assert_eq!(
        j(&d)["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(d.metadata.generation, Some(2));
    // merge patch replaces lists
    let p = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}}});
    let d = api
        .patch("web", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    assert_eq!(
        j(&d)["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // json patch
    let jp: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/spec/replicas", "value": 3}]))
    .unwrap();
    let d = api
        .patch("web", &PatchParams::default(), &Patch::<()>::Json(jp))
        .await
        .unwrap();
    assert_eq!(j(&d)["spec"]["replicas"], 3);
    // failing json patch test op -> 422
    let jp: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/replicas", "value": 9}]))
    .unwrap();
    let e = api_err(
        api.patch("web", &PatchParams::default(), &Patch::<()>::Json(jp))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    // status through main endpoint is ignored; /status only changes status
    let p = json!({"status": {"replicas": 5}, "spec": {"replicas": 4}});
    let d = api
        .patch("web", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    assert!(d.status.is_none() || d.status.as_ref().unwrap().replicas.is_none());
    let gen_before = d.metadata.generation;
    let d = api
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    assert_eq!(j(&d)["status"]["replicas"], 5);
    assert_eq!(j(&d)["spec"]["replicas"], 4);
    assert_eq!(d.metadata.generation, gen_before);
    // scale subresource
    let sc = api.get_scale("web").await.unwrap();
    assert_eq!(sc.spec.unwrap().replicas, Some(4));
    let sp = json!({"spec": {"replicas": 7}});
    api.patch_scale("web", &PatchParams::default(), &Patch::Merge(&sp))
        .await
        .unwrap();
    assert_eq!(j(&api.get("web").await.unwrap())["spec"]["replicas"], 7);
    // patch of missing object
    let e = api_err(
        api.patch("nope", &PatchParams::default(), &Patch::Merge(&sp))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 404);
}

#[tokio::test]
async fn server_side_apply_conflicts_and_force() {
    let s = TestServer::start().await.unwrap();
    let api: Api<Deployment> = Api::namespaced(s.client(), "default");
    let a = PatchParams::apply("alice");
    let d = api
        .patch("web", &a, &Patch::Apply(deployment("web", 1)))
        .await
        .unwrap();
    let mf = d.metadata.managed_fields.clone().unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("alice"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    // bob changes replicas without force -> conflict
    let bob = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 3}});
    let e = api_err(
        api.patch("web", &PatchParams::apply("bob"), &Patch::Apply(&bob))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(e.message.contains(".spec.replicas"), "{}", e.message);
    let d = api
        .patch(
            "web",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(&bob),
        )
        .await
        .unwrap();
    assert_eq!(j(&d)["spec"]["replicas"], 3);
    // alice re-applies without replicas: field now owned by bob, stays
    let mut mine = serde_json::to_value(deployment("web", 1)).unwrap();
    mine["spec"].as_object_mut().unwrap().remove("replicas");
    let d = api.patch("web", &a, &Patch::Apply(&mine)).await.unwrap();
    assert_eq!(j(&d)["spec"]["replicas"], 3);
    // an Update by another manager is tracked
    let p = json!({"metadata": {"labels": {"x": "y"}}});
    let d = api
        .patch("web", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    assert!(
        d.metadata
            .managed_fields
            .unwrap()
            .iter()
            .any(|m| m.operation.as_deref() == Some("Update"))
    );
    // apply creates
    let c: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let made = c
        .patch(
            "applied",
            &PatchParams::apply("alice"),
            &Patch::Apply(cm("applied", json!({}))),
        )
        .await
        .unwrap();
    assert_eq!(made.metadata.name.as_deref(), Some("applied"));
}

#[tokio::test]
async fn raw_watch_events_bookmarks_and_410() {
    let s = TestServer::builder()
        .watch_window(5)
        .bookmark_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let c = api
        .create(&PostParams::default(), &cm("w", json!({})))
        .await
        .unwrap();
    let rv = c.metadata.resource_version.clone().unwrap();
    let mut stream = api
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    let p = json!({"data": {"k": "v2"}});
    api.patch("w", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    api.delete("w", &DeleteParams::default()).await.unwrap();
    let mut seen = vec![];
    while seen.len() < 3 {
        match within(stream.try_next()).await.unwrap().unwrap() {
            WatchEvent::Modified(_) => seen.push("MODIFIED"),
            WatchEvent::Deleted(_) => seen.push("DELETED"),
            WatchEvent::Bookmark(_) => {
                if seen.len() == 2 {
                    seen.push("BOOKMARK")
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, ["MODIFIED", "DELETED", "BOOKMARK"]);
    // generate more events than the window, then watch from the old rv
    for i in 0..10 {
        api.create(&PostParams::default(), &cm(&format!("x{i}"), json!({})))
            .await
            .unwrap();
    }
    let mut old = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match within(old.try_next()).await.unwrap().unwrap() {
        WatchEvent::Error(e) => assert_eq!(e.code, 410),
        other => panic!("expected 410, got {other:?}"),
    }
}

/// `delay_watch_events`: a create is acknowledged at once while its watch event arrives at
/// least the delay later, on the delayed resource only; removing the delay ends it.
#[tokio::test]
async fn delayed_watch_events_trail_acknowledged_writes() {
    const LAG: Duration = Duration::from_millis(600);
    let s = TestServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let pods: Api<Pod> = Api::namespaced(s.client(), "default");
    let id = s.faults().delay_watch_events(Some("configmaps"), LAG);
    let mut cm_events = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let mut pod_events = pods
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let sent = std::time::Instant::now();
    cms.create(&PostParams::default(), &cm("late", json!({})))
        .await
        .unwrap();
    let acknowledged = sent.elapsed();
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    match within(pod_events.try_next()).await.unwrap().unwrap() {
        WatchEvent::Added(p) => assert_eq!(p.metadata.name.as_deref(), Some("p")),
        other => panic!("expected the pod ADDED, got {other:?}"),
    }
    assert!(
        sent.elapsed() < LAG,
        "an undelayed resource's event took {:?}",
        sent.elapsed()
    );
    match within(cm_events.try_next()).await.unwrap().unwrap() {
        WatchEvent::Added(c) => assert_eq!(c.metadata.name.as_deref(), Some("late")),
        other => panic!("expected the configmap ADDED, got {other:?}"),
    }
    let seen = sent.elapsed();
    assert!(
        acknowledged < LAG,
        "the create itself took {acknowledged:?}"
    );
    assert!(seen >= LAG, "the delayed event arrived after {seen:?}");
    s.faults().remove(id);
    let sent = std::time::Instant::now();
    cms.create(&PostParams::default(), &cm("prompt", json!({})))
        .await
        .unwrap();
    match within(cm_events.try_next()).await.unwrap().unwrap() {
        WatchEvent::Added(c) => assert_eq!(c.metadata.name.as_deref(), Some("prompt")),
        other => panic!("expected the configmap ADDED, got {other:?}"),
    }
    assert!(sent.elapsed() < LAG, "after removal: {:?}", sent.elapsed());
}

#[tokio::test]
async fn watcher_reflector_resume_and_relist() {
    let s = TestServer::builder()
        .watch_window(50)
        .start()
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let (reader, writer) = kube::runtime::reflector::store();
    let stream = kube::runtime::reflector(writer, watcher(api.clone(), watcher::Config::default()))
        .applied_objects();
    let handle = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    within(reader.wait_until_ready()).await.unwrap();
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("r{i}"), json!({})))
            .await
            .unwrap();
    }
    let wait_len = |n: usize| {
        let reader = reader.clone();
        async move {
            within(async {
                while reader.state().len() != n {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
        }
    };
    wait_len(5).await;
    // dropped watch: watcher resumes
    s.faults().close_watches();
    api.create(&PostParams::default(), &cm("after-close", json!({})))
        .await
        .unwrap();
    wait_len(6).await;
    // force 410 on the next watch and overflow the window: watcher relists
    s.faults().expire_next_watches(1);
    s.faults().close_watches();
    api.delete("r0", &DeleteParams::default()).await.unwrap();
    wait_len(5).await;
    assert!(
        s.counters().count("list", "configmaps") >= 2,
        "{:?}",
        s.counters()
    );
    handle.abort();
}

#[tokio::test]
async fn streaming_list_watcher() {
    let s = TestServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    api.create(&PostParams::default(), &cm("pre", json!({})))
        .await
        .unwrap();
    let (reader, writer) = kube::runtime::reflector::store();
    let stream = kube::runtime::reflector(
        writer,
        watcher(api.clone(), watcher::Config::default().streaming_lists()),
    )
    .applied_objects();
    let handle = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    within(reader.wait_until_ready()).await.unwrap();
    assert_eq!(reader.state().len(), 1);
    assert_eq!(s.counters().count("list", "configmaps"), 0);
    handle.abort();
}

/// kube-apiserver's `ValidateListOptions` for the watch-list: `sendInitialEvents` needs
/// `resourceVersionMatch=NotOlderThan` and the `WatchList` feature gate (`.watch_list(false)`
/// answers as a server with the gate off, which kube's streaming watcher sees as a failed
/// watch start), `resourceVersionMatch` on a watch needs `sendInitialEvents`, and a list takes
/// no `sendInitialEvents`.
#[tokio::test]
async fn watch_list_options_are_validated_as_kube_apiserver_does() {
    let s = TestServer::start().await.unwrap();
    let get = |q: &str| {
        let client = s.client();
        let req = http::Request::get(format!("/api/v1/namespaces/default/configmaps?{q}"))
            .body(Vec::new())
            .unwrap();
        async move { client.request_text(req).await }
    };
    let refused = |r: Result<String, kube::Error>| {
        let st = api_err(r.unwrap_err());
        assert_eq!((st.code, st.reason.as_str()), (422, "Invalid"), "{st:?}");
        st.message
    };
    let wl = "watch=true&allowWatchBookmarks=true&sendInitialEvents=true&timeoutSeconds=1";
    assert_eq!(
        refused(get(wl).await),
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    );
    let msg = refused(get("watch=true&resourceVersionMatch=NotOlderThan&resourceVersion=0").await);
    assert!(
        msg.contains(
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
        ),
        "{msg}"
    );
    let msg = refused(get("sendInitialEvents=true").await);
    assert!(
        msg.ends_with("sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"),
        "{msg}"
    );
    // served: no resourceVersion (a consistent read) ends with the bookmark
    let body = get(&format!("{wl}&resourceVersionMatch=NotOlderThan"))
        .await
        .unwrap();
    assert!(body.contains("k8s.io/initial-events-end"), "{body}");
    // the gate off
    s.set_watch_list(false);
    let msg = refused(get(&format!("{wl}&resourceVersionMatch=NotOlderThan")).await);
    assert_eq!(
        msg,
        "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
    );
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let mut w = watcher(api, watcher::Config::default().streaming_lists()).boxed();
    match within(w.next()).await.unwrap() {
        Err(watcher::Error::WatchStartFailed(kube::Error::Api(st))) => assert_eq!(st.code, 422),
        other => panic!("expected a refused watch start, got {other:?}"),
    }
}

#[tokio::test]
async fn finalizers_and_gc_cascades() {
    let s = TestServer::start().await.unwrap();
    let client = s.client();
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owner = deps
        .create(&PostParams::default(), &deployment("own", 1))
        .await
        .unwrap();
    let child = |name: &str, block: bool| {
        let mut c = cm(name, json!({}));
        c.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "own".into(),
                uid: owner.metadata.uid.clone().unwrap(),
                block_owner_deletion: Some(block),
                controller: Some(true),
            },
        ]);
        c
    };
    cms.create(&PostParams::default(), &child("c1", true))
        .await
        .unwrap();
    let mut fin = child("c2", true);
    fin.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &fin).await.unwrap();
    // foreground: owner stays while blocking dependent c2 is held by its finalizer
    let r = deps
        .delete("own", &DeleteParams::foreground())
        .await
        .unwrap();
    let pending = r.left().expect("object returned while pending");
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert!(cms.get("c1").await.is_err());
    let c2 = cms.get("c2").await.unwrap();
    assert!(c2.metadata.deletion_timestamp.is_some());
    assert!(deps.get("own").await.is_ok());
    // removing the finalizer completes the cascade
    let p = json!({"metadata": {"finalizers": null}});
    cms.patch("c2", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    assert_eq!(api_err(cms.get("c2").await.unwrap_err()).code, 404);
    assert_eq!(api_err(deps.get("own").await.unwrap_err()).code, 404);
    // orphan
    let owner2 = deps
        .create(&PostParams::default(), &deployment("own", 1))
        .await
        .unwrap();
    let mut c3 = cm("c3", json!({}));
    c3.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "own".into(),
            uid: owner2.metadata.uid.clone().unwrap(),
            ..Default::default()
        },
    ]);
    cms.create(&PostParams::default(), &c3).await.unwrap();
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..Default::default()
    };
    deps.delete("own", &dp).await.unwrap();
    assert!(
        cms.get("c3")
            .await
            .unwrap()
            .metadata
            .owner_references
            .is_none()
    );
    // background
    let owner3 = deps
        .create(&PostParams::default(), &deployment("own", 1))
        .await
        .unwrap();
    c3.metadata.name = Some("c4".into());
    c3.metadata.owner_references.as_mut().unwrap()[0].uid = owner3.metadata.uid.unwrap();
    cms.create(&PostParams::default(), &c3).await.unwrap();
    deps.delete("own", &DeleteParams::background())
        .await
        .unwrap();
    assert_eq!(api_err(cms.get("c4").await.unwrap_err()).code, 404);
    // preconditions
    let c5 = cms
        .create(&PostParams::default(), &cm("c5", json!({})))
        .await
        .unwrap();
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("wrong".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    assert_eq!(api_err(cms.delete("c5", &dp).await.unwrap_err()).code, 409);
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: c5.metadata.uid.clone(),
            resource_version: c5.metadata.resource_version.clone(),
        }),
        ..Default::default()
    };
    cms.delete("c5", &dp).await.unwrap();
}

#[tokio::test]
async fn namespace_lifecycle_and_deletecollection() {
    let s = TestServer::start().await.unwrap();
    let ns: Api<Namespace> = Api::all(s.client());
    let n: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    ns.create(&PostParams::default(), &n).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "team");
    for i in 0..3 {
        cms.create(
            &PostParams::default(),
            &cm(&format!("c{i}"), json!({"g": "a"})),
        )
        .await
        .unwrap();
    }
    let out = cms
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("g=a"),
        )
        .await
        .unwrap();
    assert_eq!(out.left().unwrap().items.len(), 3);
    cms.create(&PostParams::default(), &cm("left", json!({})))
        .await
        .unwrap();
    ns.delete("team", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_err(ns.get("team").await.unwrap_err()).code, 404);
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        0
    );
}

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "shortNames": ["wd"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"items": {"type": "array",
                        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "required": ["name"], "properties": {
                            "name": {"type": "string"}, "v": {"type": "integer"}}}}}},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    })
}

#[tokio::test]
async fn crd_lifecycle_dynamic_api() {
    let s = TestServer::start().await.unwrap();
    let client = s.client();
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd: DynamicObject = serde_json::from_value(widget_crd()).unwrap();
    let created = crds.create(&PostParams::default(), &crd).await.unwrap();
    let conds = created.data["status"]["conditions"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        conds
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    );
    assert!(created.data["spec"]["versions"][0]["schema"]["openAPIV3Schema"].is_object());
    let d = Discovery::new(client.clone()).run().await.unwrap();
    let (ar, _) = d
        .resolve_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget"))
        .unwrap();
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let w: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"items": [{"name": "a", "v": 1}]}}))
        .unwrap();
    widgets.create(&PostParams::default(), &w).await.unwrap();
    // strategic merge is not supported for custom resources
    let e = api_err(
        widgets
            .patch(
                "w1",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 415);
    // SSA uses the schema's list-map-keys: another manager's item survives
    let p = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"},
        "spec": {"items": [{"name": "b", "v": 2}]}});
    let r = widgets
        .patch("w1", &PatchParams::apply("other"), &Patch::Apply(&p))
        .await
        .unwrap();
    assert_eq!(r.data["spec"]["items"].as_array().unwrap().len(), 2);
    // status subresource
    let st = json!({"status": {"ok": true}});
    let r = widgets
        .patch_status("w1", &PatchParams::default(), &Patch::Merge(&st))
        .await
        .unwrap();
    assert_eq!(r.data["status"]["ok"], true);
    // delete CRD removes resource and objects
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    let e = api_err(widgets.get("w1").await.unwrap_err());
    assert_eq!(e.code, 404);
    let d = Discovery::new(client.clone()).run().await.unwrap();
    assert!(
        d.resolve_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget"))
            .is_none()
    );
}

#[tokio::test]
async fn admission_faults_and_counters() {
    let s = TestServer::start().await.unwrap();
    s.admission()
        .mutate("v1", "pods", |obj: &mut Value, op: Operation| {
            if op == Operation::Create {
                let cs = obj["spec"]["containers"]
                    .as_array_mut()
                    .ok_or_else(|| AdmissionError::invalid("no containers"))?;
                cs.push(json!({"name": "injected", "image": "sidecar:1"}));
            }
            Ok(())
        });
    s.admission().validate("v1", "pods", |obj: &Value, _| {
        if obj["metadata"]["name"] == "forbidden" {
            Err(AdmissionError::invalid("name not allowed"))
        } else {
            Ok(())
        }
    });
    let pods: Api<Pod> = Api::namespaced(s.client(), "default");
    let pod = |name: &str| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "app", "image": "a"}]}})).unwrap()
    };
    let p = pods
        .create(&PostParams::default(), &pod("p"))
        .await
        .unwrap();
    assert_eq!(j(&p)["spec"]["containers"].as_array().unwrap().len(), 2);
    let e = api_err(
        pods.create(&PostParams::default(), &pod("forbidden"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    // faults: the next 2 gets fail with 503; kube's default retry layer retries them
    s.faults()
        .inject(FaultSpec::error(503).verb("get").resource("pods").times(2));
    within(pods.get("p")).await.unwrap();
    assert_eq!(s.counters().get("get", "pods", 503), 2);
    assert_eq!(s.counters().get("get", "pods", 200), 1);
    // 500 is not retried and reaches the caller as an InternalError Status
    s.faults()
        .inject(FaultSpec::error(500).verb("list").times(1));
    let e = api_err(pods.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (500, "InternalError"));
    assert!(pods.list(&ListParams::default()).await.is_ok());
    // a lost answer: the create is carried out, the client sees 500
    s.faults().inject(
        FaultSpec::error(500)
            .verb("create")
            .resource("pods")
            .after_commit()
            .times(1),
    );
    let e = api_err(
        pods.create(&PostParams::default(), &pod("lost"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 500);
    assert!(pods.get("lost").await.is_ok(), "the create took effect");
    // 409 on update
    s.faults()
        .inject(FaultSpec::error(409).verb("update").times(1));
    let cur = pods.get("p").await.unwrap();
    assert_eq!(
        api_err(
            pods.replace("p", &PostParams::default(), &cur)
                .await
                .unwrap_err()
        )
        .code,
        409
    );
    // counters: a no-op resync makes zero writes
    let before = s.counters();
    let p = pods.get("p").await.unwrap();
    let same = pods.replace("p", &PostParams::default(), &p).await.unwrap();
    assert_eq!(
        same.metadata.resource_version, p.metadata.resource_version,
        "no-op update writes nothing"
    );
    let delta = s.counters().since(&before);
    assert_eq!(delta.writes(), 1);
    assert_eq!(delta.get("get", "pods", 200), 1);
}

#[tokio::test]
async fn in_process_router_client() {
    let state = kmeta_apiserver::ServerState::new(Default::default());
    let client = kube::Client::new(kmeta_apiserver::router(state), "default");
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(&PostParams::default(), &cm("inproc", json!({})))
        .await
        .unwrap();
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
}

#[tokio::test]
async fn runtime_controller_reconciles_and_gc_cleans_up() {
    use kube::runtime::controller::{Action, Controller};
    use kube::{Resource, ResourceExt};
    use std::sync::Arc;

    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct E(#[from] kube::Error);

    let s = TestServer::start().await.unwrap();
    let client = s.client();
    let parents: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let children: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let reconcile = |p: Arc<ConfigMap>, api: Arc<Api<ConfigMap>>| async move {
        if p.labels().get("role").map(String::as_str) != Some("parent") {
            return Ok::<_, E>(Action::await_change());
        }
        let mut child = cm(&format!("{}-child", p.name_any()), json!({"role": "child"}));
        child.metadata.owner_references = Some(vec![p.controller_owner_ref(&()).unwrap()]);
        child.data = p.data.clone();
        api.patch(
            &child.name_any(),
            &PatchParams::apply("test-controller").force(),
            &Patch::Apply(&child),
        )
        .await?;
        Ok(Action::await_change())
    };
    let ctrl = Controller::new(
        parents.clone(),
        watcher::Config::default().labels("role=parent"),
    )
    .owns(
        children.clone(),
        watcher::Config::default().labels("role=child"),
    )
    .run(
        reconcile,
        |_, _, _| Action::requeue(Duration::from_secs(1)),
        Arc::new(children.clone()),
    )
    .for_each(|_| async {});
    let handle = tokio::spawn(ctrl);
    parents
        .create(&PostParams::default(), &cm("p", json!({"role": "parent"})))
        .await
        .unwrap();
    within(async {
        loop {
            if let Ok(c) = children.get("p-child").await
                && c.data.as_ref().and_then(|d| d.get("k")).map(String::as_str) == Some("v")
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // a parent change propagates to the child
    let patch = json!({"data": {"k": "v2"}});
    parents
        .patch("p", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    within(async {
        loop {
            if children.get("p-child").await.unwrap().data.unwrap()["k"] == "v2" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    parents.delete("p", &DeleteParams::default()).await.unwrap();
    assert_eq!(
        api_err(children.get("p-child").await.unwrap_err()).code,
        404
    );
    handle.abort();
}

#[tokio::test]
async fn reapply_unchanged_makes_no_write_and_labels_are_validated() {
    let s = TestServer::start().await.unwrap();
    let api: Api<Deployment> = Api::namespaced(s.client(), "default");
    let pp = PatchParams::apply("ctrl");
    let first = api
        .patch("web", &pp, &Patch::Apply(deployment("web", 2)))
        .await
        .unwrap();
    // another manager takes a label so there are two entries
    let p = json!({"metadata": {"labels": {"x": "y"}}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    let before = api.get("web").await.unwrap();
    let again = api
        .patch("web", &pp, &Patch::Apply(deployment("web", 2)))
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        before.metadata.resource_version
    );
    assert_ne!(
        first.metadata.resource_version,
        before.metadata.resource_version
    );
    let bad = json!({"metadata": {"labels": {"bad key": "v"}}});
    let e = api_err(
        api.patch("web", &PatchParams::default(), &Patch::Merge(&bad))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
}

#[tokio::test]
async fn watch_selector_transitions_and_initial_events_bookmark() {
    let s = TestServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let c = api
        .create(&PostParams::default(), &cm("t", json!({"tier": "fe"})))
        .await
        .unwrap();
    let wp = WatchParams::default().labels("tier=fe").timeout(10);
    let mut w = api
        .watch(&wp, c.metadata.resource_version.as_deref().unwrap())
        .await
        .unwrap()
        .boxed();
    let set = |tier: &str| json!({"metadata": {"labels": {"tier": tier}}});
    api.patch("t", &PatchParams::default(), &Patch::Merge(&set("be")))
        .await
        .unwrap();
    api.patch("t", &PatchParams::default(), &Patch::Merge(&set("be2")))
        .await
        .unwrap();
    api.patch("t", &PatchParams::default(), &Patch::Merge(&set("fe")))
        .await
        .unwrap();
    let mut types = vec![];
    while types.len() < 2 {
        match within(w.try_next()).await.unwrap().unwrap() {
            WatchEvent::Added(_) => types.push("ADDED"),
            WatchEvent::Modified(_) => types.push("MODIFIED"),
            WatchEvent::Deleted(_) => types.push("DELETED"),
            _ => {}
        }
    }
    assert_eq!(types, ["DELETED", "ADDED"]);
    // streaming list: initial ADDED then a bookmark annotated initial-events-end
    let wp = WatchParams::streaming_lists().timeout(10);
    let mut w = api.watch(&wp, "0").await.unwrap().boxed();
    assert!(matches!(
        within(w.try_next()).await.unwrap().unwrap(),
        WatchEvent::Added(_)
    ));
    match within(w.try_next()).await.unwrap().unwrap() {
        WatchEvent::Bookmark(b) => {
            assert_eq!(
                b.metadata
                    .annotations
                    .get("k8s.io/initial-events-end")
                    .map(String::as_str),
                Some("true")
            )
        }
        other => panic!("expected bookmark, got {other:?}"),
    }
}

#[tokio::test]
async fn terminating_namespace_forbids_creates_until_contents_are_gone() {
    let s = TestServer::start().await.unwrap();
    let ns: Api<Namespace> = Api::all(s.client());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "t"}})).unwrap(),
    )
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "t");
    let mut held = cm("held", json!({}));
    held.metadata.finalizers = Some(vec!["example.com/x".into()]);
    cms.create(&PostParams::default(), &held).await.unwrap();
    ns.delete("t", &DeleteParams::default()).await.unwrap();
    let n = ns.get("t").await.unwrap();
    assert_eq!(j(&n)["status"]["phase"], "Terminating");
    let e = api_err(
        cms.create(&PostParams::default(), &cm("new", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    let p = json!({"metadata": {"finalizers": []}});
    cms.patch("held", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    assert_eq!(api_err(ns.get("t").await.unwrap_err()).code, 404);
}

#[tokio::test]
async fn crd_multiple_versions_and_instance_finalizers_block_crd_removal() {
    let s = TestServer::start().await.unwrap();
    let client = s.client();
    let crd_ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let crds: Api<DynamicObject> = Api::all_with(client.clone(), &crd_ar);
    let mut crd = widget_crd();
    crd["spec"]["scope"] = json!("Cluster");
    let v1 = crd["spec"]["versions"][0].clone();
    let mut beta = v1.clone();
    beta["name"] = json!("v1beta1");
    beta["storage"] = json!(false);
    crd["spec"]["versions"] = json!([beta, v1]);
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(crd).unwrap(),
    )
    .await
    .unwrap();
    let d = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    let (ar1, _) = d
        .resolve_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget"))
        .unwrap();
    let (arb, _) = d
        .resolve_gvk(&GroupVersionKind::gvk("example.com", "v1beta1", "Widget"))
        .unwrap();
    let w1: Api<DynamicObject> = Api::all_with(client.clone(), &ar1);
    let wb: Api<DynamicObject> = Api::all_with(client.clone(), &arb);
    let w: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "finalizers": ["example.com/keep"]}}))
        .unwrap();
    w1.create(&PostParams::default(), &w).await.unwrap();
    let via_beta = wb.get("w").await.unwrap();
    assert_eq!(via_beta.types.unwrap().api_version, "example.com/v1beta1");
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    // the CRD waits for its instances; the instance is being deleted
    let c = crds.get("widgets.example.com").await.unwrap();
    assert!(c.metadata.deletion_timestamp.is_some());
    assert!(
        w1.get("w")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let p = json!({"metadata": {"finalizers": null}});
    w1.patch("w", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    assert_eq!(
        api_err(crds.get("widgets.example.com").await.unwrap_err()).code,
        404
    );
    assert_eq!(api_err(w1.get("w").await.unwrap_err()).code, 404);
}

#[tokio::test]
async fn metadata_only_get_list_and_watcher() {
    let s = TestServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    api.create(&PostParams::default(), &cm("m1", json!({"a": "b"})))
        .await
        .unwrap();
    let m = api.get_metadata("m1").await.unwrap();
    assert_eq!(m.metadata.labels.unwrap()["a"], "b");
    let l = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(l.items.len(), 1);
    let (reader, writer) = kube::runtime::reflector::store();
    let meta_api: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::namespaced(s.client(), "default");
    let stream = kube::runtime::reflector(writer, watcher(meta_api, watcher::Config::default()))
        .applied_objects();
    let handle = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    within(reader.wait_until_ready()).await.unwrap();
    api.create(&PostParams::default(), &cm("m2", json!({})))
        .await
        .unwrap();
    within(async {
        while reader.state().len() != 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    handle.abort();
}

#[tokio::test]
async fn admission_is_not_applied_to_status_writes_of_the_main_resource() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let s = TestServer::start().await.unwrap();
    let main_calls = Arc::new(AtomicUsize::new(0));
    let status_calls = Arc::new(AtomicUsize::new(0));
    let m = main_calls.clone();
    s.admission()
        .mutate("apps/v1", "deployments", move |obj: &mut Value, _| {
            m.fetch_add(1, Ordering::SeqCst);
            obj["metadata"]["labels"]["mutated"] = json!("yes");
            Ok(())
        });
    let sc = status_calls.clone();
    s.admission()
        .validate("apps/v1", "deployments/status", move |_, op| {
            assert_eq!(op, Operation::Update);
            sc.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
    let api: Api<Deployment> = Api::namespaced(s.client(), "default");
    let d = api
        .create(&PostParams::default(), &deployment("st", 1))
        .await
        .unwrap();
    assert_eq!(d.metadata.labels.unwrap()["mutated"], "yes");
    // removing the label through the main resource is re-mutated
    let p = json!({"metadata": {"labels": {"mutated": null}}});
    let d = api
        .patch("st", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    assert_eq!(d.metadata.labels.unwrap()["mutated"], "yes");
    assert_eq!(main_calls.load(Ordering::SeqCst), 2);
    let st = json!({"status": {"observedGeneration": 1}});
    api.patch_status("st", &PatchParams::default(), &Patch::Merge(&st))
        .await
        .unwrap();
    assert_eq!(main_calls.load(Ordering::SeqCst), 2);
    assert_eq!(status_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn builtin_defaults_then_sidecar_injection() {
    let s = TestServer::builder()
        .builtin_defaults(true)
        .start()
        .await
        .unwrap();
    s.admission()
        .mutate("apps/v1", "deployments", |obj: &mut Value, _| {
            let cs = obj["spec"]["template"]["spec"]["containers"]
                .as_array_mut()
                .ok_or_else(|| AdmissionError::invalid("no containers"))?;
            if !cs.iter().any(|c| c["name"] == "sidecar") {
                cs.push(json!({"name": "sidecar", "image": "envoy:1"}));
            }
            Ok(())
        });
    let api: Api<Deployment> = Api::namespaced(s.client(), "default");
    let d = j(&api
        .create(&PostParams::default(), &deployment("dd", 2))
        .await
        .unwrap());
    let cs = d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(cs[0]["imagePullPolicy"], "IfNotPresent");
    assert_eq!(cs[1]["name"], "sidecar");
    assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(d["spec"]["replicas"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_see_every_event_in_order_under_concurrent_writes() {
    let s = TestServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let start = s.state().resource_version().to_string();
    let writers = 8;
    let per_writer = 25;
    // each writer creates one object then updates it per_writer-1 times
    let expected = writers * per_writer;
    let mut watchers = vec![];
    for _ in 0..4 {
        let mut w = api
            .watch(&WatchParams::default().timeout(60), &start)
            .await
            .unwrap()
            .boxed();
        watchers.push(tokio::spawn(async move {
            let mut rvs: Vec<u64> = vec![];
            while rvs.len() < expected {
                match w.try_next().await {
                    Ok(Some(WatchEvent::Added(o) | WatchEvent::Modified(o))) => {
                        rvs.push(o.metadata.resource_version.unwrap().parse().unwrap())
                    }
                    Ok(Some(_)) => {}
                    other => panic!("watch ended early: {other:?}"),
                }
            }
            rvs
        }));
    }
    let mut tasks = vec![];
    for wi in 0..writers {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            let name = format!("cw{wi}");
            api.create(&PostParams::default(), &cm(&name, json!({})))
                .await
                .unwrap();
            for n in 1..per_writer {
                let p = json!({"data": {"n": n.to_string()}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&p))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        within(t).await.unwrap();
    }
    for w in watchers {
        let rvs = within(w).await.unwrap();
        assert_eq!(rvs.len(), expected);
        assert!(rvs.windows(2).all(|p| p[0] < p[1]), "events out of order");
        // every write is one event: the rvs are exactly the next `expected` versions
        let first: u64 = start.parse().unwrap();
        assert_eq!(
            rvs,
            ((first + 1)..=(first + expected as u64)).collect::<Vec<_>>()
        );
    }
}

#[tokio::test]
async fn apply_create_owns_only_the_applied_fields_not_defaults() {
    let s = TestServer::builder()
        .builtin_defaults(true)
        .start()
        .await
        .unwrap();
    let api: Api<Deployment> = Api::namespaced(s.client(), "default");
    let d = api
        .patch(
            "web",
            &PatchParams::apply("alice"),
            &Patch::Apply(deployment("web", 1)),
        )
        .await
        .unwrap();
    let stored = j(&d);
    let container = &stored["spec"]["template"]["spec"]["containers"][0];
    assert!(
        container["imagePullPolicy"].is_string(),
        "defaulting ran: {container}"
    );
    let mf = d.metadata.managed_fields.clone().unwrap();
    assert_eq!(mf.len(), 1);
    let owned = j(&mf[0].fields_v1);
    let text = owned.to_string();
    assert!(text.contains("f:image"), "{text}");
    assert!(text.contains("f:replicas"), "{text}");
    for defaulted in [
        "f:imagePullPolicy",
        "f:terminationMessagePath",
        "f:strategy",
    ] {
        assert!(
            !text.contains(defaulted),
            "the applier does not own {defaulted}: {text}"
        );
    }
    // a plain create's manager owns what it created, defaults included (as kube-apiserver)
    let created = api
        .create(&PostParams::default(), &deployment("plain", 1))
        .await
        .unwrap();
    let mf = created.metadata.managed_fields.clone().unwrap();
    assert!(
        j(&mf[0].fields_v1)
            .to_string()
            .contains("f:imagePullPolicy")
    );
}

/// A Namespace as kube-apiserver keeps it: the `kubernetes.io/metadata.name` label on every
/// write, `status.phase` kept `Active` by a `PUT /status` whose status holds only a field the
/// type does not declare (dropped), and labels taken from a built-in's `/status` write while
/// its spec is not.
#[tokio::test]
async fn namespace_status_and_name_label_as_kube_apiserver_keeps_them() {
    let s = TestServer::start().await.unwrap();
    let api: Api<Namespace> = Api::all(s.client());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team-a"}})).unwrap();
    let created = within(api.create(&PostParams::default(), &ns))
        .await
        .unwrap();
    let labels = created.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("kubernetes.io/metadata.name")
            .map(String::as_str),
        Some("team-a")
    );
    assert_eq!(j(&created)["status"], json!({"phase": "Active"}));
    let defaults = within(api.get("default")).await.unwrap();
    assert_eq!(
        j(&defaults)["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "default"
    );

    // a DecoratorController's status write: an undeclared status field, labels changed
    let mut body = j(&created);
    body["status"] = json!({"observedGeneration": 1, "hook": {"ready": true}});
    body["metadata"]["labels"] = json!({"team": "a"});
    body["spec"] = json!({"finalizers": []});
    let req = http::Request::put("/api/v1/namespaces/team-a/status")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    let after: Value = within(s.client().request(req)).await.unwrap();
    assert_eq!(after["status"], json!({"phase": "Active"}));
    assert_eq!(after["spec"], json!({"finalizers": ["kubernetes"]}));
    assert_eq!(
        after["metadata"]["labels"],
        json!({"team": "a", "kubernetes.io/metadata.name": "team-a"})
    );

    // the label comes back when a main-resource write removes it
    let mut body = after.clone();
    body["metadata"]["labels"] = json!({});
    let put: Namespace = serde_json::from_value(body).unwrap();
    let updated = within(api.replace("team-a", &PostParams::default(), &put))
        .await
        .unwrap();
    assert_eq!(
        j(&updated)["metadata"]["labels"],
        json!({"kubernetes.io/metadata.name": "team-a"})
    );
}

/// A Deployment's `/status` write keeps its labels (its status strategy resets them) and a
/// Pod's keeps its ownerReferences, while a Service's takes the request's labels.
#[tokio::test]
async fn builtin_status_writes_keep_what_their_strategies_reset() {
    let s = TestServer::start().await.unwrap();
    let deps: Api<Deployment> = Api::namespaced(s.client(), "default");
    let d = within(deps.create(&PostParams::default(), &deployment("web", 1)))
        .await
        .unwrap();
    let mut body = j(&d);
    body["metadata"]["labels"] = json!({"changed": "yes"});
    body["metadata"]["annotations"] = json!({"note": "by status"});
    body["status"] = json!({"replicas": 1});
    let d2 = within(deps.replace_status(
        "web",
        &PostParams::default(),
        &serde_json::from_value(body).unwrap(),
    ))
    .await
    .unwrap();
    let d2 = j(&d2);
    assert!(d2["metadata"].get("labels").is_none(), "{d2}");
    assert_eq!(d2["metadata"]["annotations"]["note"], "by status");
    assert_eq!(d2["status"]["replicas"], 1);

    let svcs: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(s.client(), "default");
    let svc = serde_json::from_value(json!({"metadata": {"name": "svc"},
        "spec": {"ports": [{"port": 80}]}}))
    .unwrap();
    let svc = within(svcs.create(&PostParams::default(), &svc))
        .await
        .unwrap();
    let mut body = j(&svc);
    body["metadata"]["labels"] = json!({"lb": "ready"});
    body["spec"]["ports"][0]["port"] = json!(81);
    body["status"] = json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}});
    let svc2 = within(svcs.replace_status(
        "svc",
        &PostParams::default(),
        &serde_json::from_value(body).unwrap(),
    ))
    .await
    .unwrap();
    let svc2 = j(&svc2);
    assert_eq!(svc2["metadata"]["labels"]["lb"], "ready");
    assert_eq!(svc2["spec"]["ports"][0]["port"], 80);
    assert_eq!(
        svc2["status"]["loadBalancer"]["ingress"][0]["ip"],
        "10.0.0.1"
    );
}
