//! managedFields on an update (PUT) like kube-apiserver's field manager: a body without
//! `managedFields` keeps the stored entries (the controller's cache drops them and writes
//! objects back without them); only an explicit list replaces them.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use kmeta_apiserver::TestServer;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(20);

fn managers(obj: &Value) -> Vec<(String, String)> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .map(|e| {
                    let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
                    (s("manager"), s("operation"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn configmaps(s: &TestServer) -> Api<DynamicObject> {
    let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    Api::namespaced_with(s.client(), "default", &ar)
}

fn j(o: &DynamicObject) -> Value {
    serde_json::to_value(o).unwrap()
}

fn dynamic(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

/// A ConfigMap applied by `applier`, read back, and its managedFields removed from the body.
async fn applied_without_managed_fields(api: &Api<DynamicObject>) -> Value {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "a"}, "data": {"k": "v"}});
    let applied = tokio::time::timeout(
        T,
        api.patch("a", &PatchParams::apply("applier"), &Patch::Apply(&cm)),
    )
    .await
    .unwrap()
    .map(|o| j(&o))
    .unwrap();
    assert_eq!(
        managers(&applied),
        vec![("applier".to_owned(), "Apply".to_owned())]
    );
    let mut body = applied;
    body["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    body
}

#[tokio::test]
async fn a_put_without_managed_fields_keeps_the_stored_ones() {
    let s = TestServer::start().await.unwrap();
    let api = configmaps(&s);
    let mut body = applied_without_managed_fields(&api).await;
    // a field nobody owns yet: the applier keeps `data.k`, the updater gets `data.other`
    body["data"]["other"] = json!("w");
    let pp = PostParams {
        field_manager: Some("updater".into()),
        ..PostParams::default()
    };
    let put = tokio::time::timeout(T, api.replace("a", &pp, &dynamic(body)))
        .await
        .unwrap()
        .map(|o| j(&o))
        .unwrap();
    let read = j(&api.get("a").await.unwrap());
    for obj in [&put, &read] {
        let m = managers(obj);
        assert!(
            m.contains(&("applier".to_owned(), "Apply".to_owned())),
            "the applier's entry is kept: {m:?}"
        );
        assert!(
            m.contains(&("updater".to_owned(), "Update".to_owned())),
            "the update is recorded: {m:?}"
        );
    }
}

#[tokio::test]
async fn a_put_with_an_explicit_managed_fields_list_replaces_them() {
    let s = TestServer::start().await.unwrap();
    let api = configmaps(&s);
    let mut body = applied_without_managed_fields(&api).await;
    body["metadata"]["managedFields"] = json!([{"manager": "other", "operation": "Update",
        "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}}]);
    let put = tokio::time::timeout(T, api.replace("a", &PostParams::default(), &dynamic(body)))
        .await
        .unwrap()
        .map(|o| j(&o))
        .unwrap();
    assert_eq!(
        managers(&put),
        vec![("other".to_owned(), "Update".to_owned())]
    );
}
