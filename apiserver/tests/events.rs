//! core/v1 Events and events.k8s.io/v1 Events are one resource in two versions, as in
//! kube-apiserver: what one API writes, the other reads (converted), watches and deletes.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, ObjectReference};
use k8s_openapi::api::events::v1::Event as EventsV1;
use kmeta_apiserver::TestServer;
use kube::Resource;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::json;
use std::future::Future;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

async fn within<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(T, f).await.expect("timed out")
}

#[tokio::test]
async fn recorder_events_are_listed_through_core_v1_and_back() {
    let server = TestServer::start().await.unwrap();
    let client = server.client();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "target"}, "data": {"k": "v"}}))
            .unwrap();
    let cm = cms.create(&PostParams::default(), &cm).await.unwrap();
    let reference = cm.object_ref(&());

    // kube's Recorder writes events.k8s.io/v1 (create, then a patch for the repeat)
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "kmeta-test".into(),
            instance: Some("pod-0".into()),
        },
    );
    let event = Event {
        type_: EventType::Warning,
        reason: "SyncError".into(),
        note: Some("hook answered 500".into()),
        action: "Sync".into(),
        secondary: None,
    };
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();

    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let listed = core.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1, "one event, seen through core/v1");
    let e = &listed.items[0];
    assert_eq!(e.involved_object.name.as_deref(), Some("target"));
    assert_eq!(e.involved_object.kind.as_deref(), Some("ConfigMap"));
    assert_eq!(e.message.as_deref(), Some("hook answered 500"));
    assert_eq!(e.reason.as_deref(), Some("SyncError"));
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.reporting_component.as_deref(), Some("kmeta-test"));
    assert_eq!(e.reporting_instance.as_deref(), Some("pod-0"));
    assert_eq!(
        e.series.as_ref().and_then(|s| s.count),
        Some(2),
        "the repeat patched the same object"
    );

    // the same object, same identity, through events.k8s.io/v1
    let ev1: Api<EventsV1> = Api::namespaced(client.clone(), "default");
    let name = e.metadata.name.clone().unwrap();
    let same = ev1.get(&name).await.unwrap();
    assert_eq!(same.metadata.uid, e.metadata.uid);
    assert_eq!(same.metadata.resource_version, e.metadata.resource_version);
    assert_eq!(same.note.as_deref(), Some("hook answered 500"));
    assert_eq!(
        same.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("target")
    );

    // field selectors: each version with its own labels
    let by_core = core
        .list(&ListParams::default().fields("involvedObject.name=target,type=Warning"))
        .await
        .unwrap();
    assert_eq!(by_core.items.len(), 1);
    let by_v1 = ev1
        .list(&ListParams::default().fields("regarding.name=target,reportingController=kmeta-test"))
        .await
        .unwrap();
    assert_eq!(by_v1.items.len(), 1);
    let none = ev1
        .list(&ListParams::default().fields("regarding.name=other"))
        .await
        .unwrap();
    assert!(none.items.is_empty());
    let err = ev1
        .list(&ListParams::default().fields("involvedObject.name=target"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 400),
        "core labels are not events.k8s.io/v1 labels: {err:?}"
    );

    // deleting through one API deletes it for both
    core.delete(&name, &DeleteParams::default()).await.unwrap();
    assert!(
        ev1.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn core_events_are_watched_through_events_v1() {
    let server = TestServer::start().await.unwrap();
    let client = server.client();
    let ev1: Api<EventsV1> = Api::namespaced(client.clone(), "default");
    let start = ev1.list(&ListParams::default()).await.unwrap();
    let rv = start.metadata.resource_version.unwrap();
    let mut stream = ev1
        .watch(&WatchParams::default().fields("regarding.kind=Widget"), &rv)
        .await
        .unwrap()
        .boxed();

    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    for (name, kind) in [("about-a-pod", "Pod"), ("about-a-widget", "Widget")] {
        let e = CoreEvent {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                kind: Some(kind.into()),
                name: Some("w".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            message: Some("created through core/v1".into()),
            reason: Some("Created".into()),
            count: Some(4),
            ..Default::default()
        };
        core.create(&PostParams::default(), &e).await.unwrap();
    }

    let first = within(stream.try_next()).await.unwrap().unwrap();
    let WatchEvent::Added(seen) = first else {
        panic!("expected ADDED, got {first:?}")
    };
    assert_eq!(seen.metadata.name.as_deref(), Some("about-a-widget"));
    assert_eq!(seen.note.as_deref(), Some("created through core/v1"));
    assert_eq!(seen.deprecated_count, Some(4));
    assert_eq!(
        seen.regarding.as_ref().and_then(|r| r.kind.as_deref()),
        Some("Widget")
    );
}
