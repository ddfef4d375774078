//! LIST and GET at past and future resourceVersions, through a real `kube::Client`: exact reads
//! from the retained history, consistent pagination, 410 once compacted, 504 for versions the
//! server has not reached.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

use k8s_openapi::api::core::v1::ConfigMap;
use kmeta_apiserver::{ServerConfig, TestServer};
use kube::api::{Api, DeleteParams, GetParams, ListParams, ObjectList, PostParams, VersionMatch};
use serde_json::json;
use std::future::Future;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

async fn within<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(T, f).await.expect("timed out")
}

fn cm(name: &str, v: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "data": {"v": v}
    }))
    .unwrap()
}

fn names(l: &ObjectList<ConfigMap>) -> Vec<String> {
    l.items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect()
}

fn rv_of(l: &ObjectList<ConfigMap>) -> String {
    l.metadata.resource_version.clone().unwrap()
}

fn api_err(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected api error, got {other:?}"),
    }
}

/// A client that does not retry 504 (kube's default client retries 429/503/504 with backoff).
fn no_retry_client(s: &TestServer) -> kube::Client {
    let mut config = kube::Config::new(s.url().parse().unwrap());
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

async fn create(api: &Api<ConfigMap>, name: &str, v: &str) -> ConfigMap {
    within(api.create(&PostParams::default(), &cm(name, v)))
        .await
        .unwrap()
}

async fn delete(api: &Api<ConfigMap>, name: &str) {
    within(api.delete(name, &DeleteParams::default()))
        .await
        .unwrap();
}

#[tokio::test]
async fn exact_list_sees_the_old_state() {
    let s = TestServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    for n in ["a", "b", "c"] {
        create(&api, n, "1").await;
    }
    let before = within(api.list(&ListParams::default())).await.unwrap();
    let rv1 = rv_of(&before);
    within(api.replace("a", &PostParams::default(), &cm("a", "2")))
        .await
        .unwrap();
    delete(&api, "b").await;
    create(&api, "d", "1").await;

    let exact = ListParams::default().at(&rv1).matching(VersionMatch::Exact);
    let old = within(api.list(&exact)).await.unwrap();
    assert_eq!(names(&old), ["a", "b", "c"]);
    assert_eq!(rv_of(&old), rv1);
    assert_eq!(old.items[0].data.as_ref().unwrap()["v"], "1");
    assert_eq!(
        serde_json::to_value(&old.items).unwrap(),
        serde_json::to_value(&before.items).unwrap(),
        "the same objects, resourceVersions included"
    );

    // not older than an old rv: the current state, at the current rv
    let nlt = ListParams::default()
        .at(&rv1)
        .matching(VersionMatch::NotOlderThan);
    let now = within(api.list(&nlt)).await.unwrap();
    assert_eq!(names(&now), ["a", "c", "d"]);
    assert_eq!(rv_of(&now), s.state().resource_version().to_string());

    // exact needs a resourceVersion other than 0 (the server's own check, past kube's)
    let raw = http::Request::get(
        "/api/v1/namespaces/default/configmaps?resourceVersion=0&resourceVersionMatch=Exact",
    )
    .body(vec![])
    .unwrap();
    let e = api_err(
        within(s.client().request::<ConfigMap>(raw))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    s.shutdown().await;
}

#[tokio::test]
async fn pages_come_from_the_first_page_snapshot() {
    let s = TestServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    for i in 0..7 {
        create(&api, &format!("cm-{i}"), "1").await;
    }
    let mut lp = ListParams::default().limit(2);
    let first = within(api.list(&lp)).await.unwrap();
    let snapshot_rv = rv_of(&first);
    assert_eq!(names(&first), ["cm-0", "cm-1"]);
    let mut seen = first.items.clone();
    let mut token = first.metadata.continue_.clone();
    let mut pages = 1;
    while let Some(c) = token.filter(|c| !c.is_empty()) {
        // change the collection between pages: ahead of the cursor, behind it, and in place
        create(&api, &format!("cm-{pages}x"), "new").await;
        if 2 * pages + 1 < 7 {
            delete(&api, &format!("cm-{}", 2 * pages + 1)).await;
        }
        within(api.replace(
            &format!("cm-{}", 2 * pages),
            &PostParams::default(),
            &cm(&format!("cm-{}", 2 * pages), "changed"),
        ))
        .await
        .unwrap();
        lp = lp.continue_token(&c);
        let page = within(api.list(&lp)).await.unwrap();
        assert_eq!(
            rv_of(&page),
            snapshot_rv,
            "every page carries the snapshot's rv"
        );
        seen.extend(page.items.clone());
        token = page.metadata.continue_.clone();
        pages += 1;
    }
    assert_eq!(pages, 4);
    let got: Vec<String> = seen
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(got, (0..7).map(|i| format!("cm-{i}")).collect::<Vec<_>>());
    assert!(
        seen.iter().all(|c| c.data.as_ref().unwrap()["v"] == "1"),
        "no page shows a later change"
    );
    // exactly what a single exact list at that rv returns
    let exact = ListParams::default()
        .at(&snapshot_rv)
        .matching(VersionMatch::Exact);
    let whole = within(api.list(&exact)).await.unwrap();
    assert_eq!(
        serde_json::to_value(&whole.items).unwrap(),
        serde_json::to_value(&seen).unwrap()
    );
    // and the collection did change meanwhile
    let now = within(api.list(&ListParams::default())).await.unwrap();
    assert_ne!(names(&now), got);
    s.shutdown().await;
}

#[tokio::test]
async fn compacted_history_answers_410() {
    let s = TestServer::builder().watch_window(3).start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    for i in 0..4 {
        create(&api, &format!("cm-{i}"), "1").await;
    }
    let first = within(api.list(&ListParams::default().limit(2)))
        .await
        .unwrap();
    let rv = rv_of(&first);
    let exact = ListParams::default().at(&rv).matching(VersionMatch::Exact);
    // still within the window of 3 events
    create(&api, "w-0", "1").await;
    assert_eq!(within(api.list(&exact)).await.unwrap().items.len(), 4);
    for i in 1..4 {
        create(&api, &format!("w-{i}"), "1").await;
    }
    let e = api_err(within(api.list(&exact)).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
    assert_eq!(
        e.message,
        "The resourceVersion for the provided list is too old."
    );
    let next = ListParams::default()
        .limit(2)
        .continue_token(first.metadata.continue_.as_deref().unwrap());
    let e = api_err(within(api.list(&next)).await.unwrap_err());
    assert_eq!(e.code, 410);
    assert!(
        e.message.starts_with(
            "The provided continue parameter is too old to display a consistent list result."
        ),
        "{}",
        e.message
    );
    // the current rv is always readable, also after compaction
    s.state().compact();
    let now = s.state().resource_version().to_string();
    let l = within(api.list(&ListParams::default().at(&now).matching(VersionMatch::Exact)))
        .await
        .unwrap();
    assert_eq!(l.items.len(), 8);
    s.shutdown().await;
}

#[tokio::test]
async fn future_resource_versions_wait_then_answer_504() {
    let wait = Duration::from_millis(300);
    let s = TestServer::builder()
        .config(ServerConfig {
            rv_wait: wait,
            ..Default::default()
        })
        .start()
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(no_retry_client(&s), "default");
    create(&api, "a", "1").await;
    let current = s.state().resource_version();
    let future = (current + 1).to_string();

    // exact: etcd answers a future revision at once, without a retry hint
    let exact = ListParams::default()
        .at(&(current + 10).to_string())
        .matching(VersionMatch::Exact);
    let e = api_err(within(api.list(&exact)).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (504, "Timeout"));
    assert_eq!(
        e.message,
        format!(
            "Timeout: Too large resource version: {}, current: {current}",
            current + 10
        )
    );
    let d = e.details.unwrap();
    assert_eq!(d.causes[0].reason, "ResourceVersionTooLarge");
    assert_eq!(d.causes[0].message, "Too large resource version");
    assert_eq!(d.retry_after_seconds, 0);

    // not older than / get: wait for the rv, then 504 with retryAfterSeconds 1
    let nlt = ListParams::default()
        .at(&future)
        .matching(VersionMatch::NotOlderThan);
    let t = Instant::now();
    let e = api_err(within(api.list(&nlt)).await.unwrap_err());
    assert!(t.elapsed() >= wait, "waited {:?}", t.elapsed());
    assert_eq!((e.code, e.reason.as_str()), (504, "Timeout"));
    assert_eq!(e.details.unwrap().retry_after_seconds, 1);
    let e = api_err(
        within(api.get_with("a", &GetParams::at(&future)))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (504, "Timeout"));
    assert_eq!(
        e.message,
        format!("Timeout: Too large resource version: {future}, current: {current}")
    );
    // an old rv, or 0, is served at once from the current state
    let got = within(api.get_with("a", &GetParams::at("1")))
        .await
        .unwrap();
    assert_eq!(got.metadata.name.as_deref(), Some("a"));
    within(api.get_with("a", &GetParams::any())).await.unwrap();

    // a write during the wait lets the request through (whether the requests arrive before or
    // after the write, they are answered from a state at least as new as `next`)
    let slow = TestServer::builder()
        .config(ServerConfig {
            rv_wait: T,
            ..Default::default()
        })
        .start()
        .await
        .unwrap();
    let sapi: Api<ConfigMap> = Api::namespaced(no_retry_client(&slow), "default");
    create(&sapi, "a", "1").await;
    let next = (slow.state().resource_version() + 1).to_string();
    let (list, get) = {
        let lp = ListParams::default()
            .at(&next)
            .matching(VersionMatch::NotOlderThan);
        let list = tokio::spawn({
            let sapi = sapi.clone();
            async move { sapi.list(&lp).await }
        });
        let gp = GetParams::at(&next);
        let get = tokio::spawn({
            let sapi = sapi.clone();
            async move { sapi.get_with("a", &gp).await }
        });
        (list, get)
    };
    create(&sapi, "b", "1").await;
    let list = within(list).await.unwrap().unwrap();
    assert_eq!(names(&list), ["a", "b"]);
    assert_eq!(rv_of(&list), next);
    within(get).await.unwrap().unwrap();
    slow.shutdown().await;
    s.shutdown().await;
}
