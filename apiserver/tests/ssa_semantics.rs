//! Server-side apply cases where kmeta-apiserver differed from structured-merge-diff (found by
//! `ssa_differential.rs`), each as the smallest sequence that showed it, with the result
//! kube-apiserver gives.
#![allow(clippy::unwrap_used)]

use kmeta_apiserver::TestServer;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

async fn widgets(s: &TestServer) -> Api<DynamicObject> {
    let str_ = json!({"type": "string"});
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.smd.kmeta.test"},
        "spec": {"group": "smd.kmeta.test", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "m": {"type": "object", "additionalProperties": str_},
                        "st": {"type": "object", "x-kubernetes-map-type": "atomic",
                               "properties": {"x": str_, "y": str_}},
                        "g": {"type": "object", "properties": {
                            "z": {"type": "object", "properties": {"p": str_}}}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": str_}
                    }}}}}}]}
    });
    let crds: Api<DynamicObject> = Api::all_with(
        s.client(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(crd).unwrap(),
    )
    .await
    .unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("smd.kmeta.test", "v1", "Widget"),
        "widgets",
    );
    Api::namespaced_with(s.client(), "default", &ar)
}

fn widget(metadata: Value, spec: Value) -> Value {
    let mut md = json!({"name": "w"});
    md.as_object_mut()
        .unwrap()
        .extend(metadata.as_object().unwrap().clone());
    json!({"apiVersion": "smd.kmeta.test/v1", "kind": "Widget", "metadata": md, "spec": spec})
}

async fn apply(
    api: &Api<DynamicObject>,
    manager: &str,
    force: bool,
    body: &Value,
) -> Result<Value, kube::Error> {
    let mut pp = PatchParams::apply(manager);
    pp.force = force;
    api.patch("w", &pp, &Patch::Apply(body))
        .await
        .map(|o| serde_json::to_value(o).unwrap())
}

async fn create(api: &Api<DynamicObject>, manager: &str, body: Value) -> Value {
    let pp = PostParams {
        field_manager: Some(manager.to_owned()),
        ..Default::default()
    };
    let o = api
        .create(&pp, &serde_json::from_value(body).unwrap())
        .await
        .unwrap();
    serde_json::to_value(o).unwrap()
}

/// The `fieldsV1` of `manager`'s entry.
fn fields(obj: &Value, manager: &str) -> Value {
    obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == manager)
        .map(|e| e["fieldsV1"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn an_update_owns_the_maps_it_adds() {
    let s = TestServer::start().await.unwrap();
    let api = widgets(&s).await;
    let created = create(&api, "u", widget(json!({}), json!({"m": {"k": "v"}}))).await;
    assert_eq!(
        fields(&created, "u"),
        json!({"f:spec": {".": {}, "f:m": {".": {}, "f:k": {}}}})
    );
}

#[tokio::test]
async fn an_apply_owns_the_undeclared_keys_it_sets() {
    let s = TestServer::start().await.unwrap();
    let api = widgets(&s).await;
    let body = widget(json!({}), json!({"free": {"obj": {"p": "a"}}}));
    let applied = apply(&api, "a", false, &body).await.unwrap();
    assert_eq!(
        fields(&applied, "a"),
        json!({"f:spec": {"f:free": {"f:obj": {".": {}, "f:p": {}}}}})
    );
}

#[tokio::test]
async fn an_atomic_struct_is_owned_and_replaced_whole() {
    let s = TestServer::start().await.unwrap();
    let api = widgets(&s).await;
    let first = apply(
        &api,
        "a",
        false,
        &widget(json!({}), json!({"st": {"x": "a"}})),
    )
    .await
    .unwrap();
    assert_eq!(fields(&first, "a"), json!({"f:spec": {"f:st": {}}}));
    let other = widget(json!({}), json!({"st": {"y": "b"}}));
    let kube::Error::Api(e) = apply(&api, "b", false, &other).await.unwrap_err() else {
        panic!("not an API error")
    };
    assert_eq!(e.code, 409);
    assert!(e.message.contains(".spec.st"), "{}", e.message);
    let forced = apply(&api, "b", true, &other).await.unwrap();
    assert_eq!(forced["spec"]["st"], json!({"y": "b"}));
}

#[tokio::test]
async fn pruning_takes_the_declared_fields_it_empties() {
    let s = TestServer::start().await.unwrap();
    let api = widgets(&s).await;
    apply(
        &api,
        "a",
        false,
        &widget(json!({}), json!({"g": {"z": {"p": "a"}}})),
    )
    .await
    .unwrap();
    let next = apply(&api, "a", false, &widget(json!({}), json!({"g": {}})))
        .await
        .unwrap();
    // `z` goes with its last field; `g`, emptied, becomes null, which the schema does not allow
    assert_eq!(next["spec"], json!({}));
}

#[tokio::test]
async fn labels_emptied_by_pruning_are_gone() {
    let s = TestServer::start().await.unwrap();
    let api = widgets(&s).await;
    create(&api, "u", widget(json!({"labels": {"l1": "a"}}), json!({}))).await;
    apply(
        &api,
        "a",
        true,
        &widget(json!({"labels": {"l1": "b"}}), json!({})),
    )
    .await
    .unwrap();
    let next = apply(&api, "a", false, &widget(json!({}), json!({})))
        .await
        .unwrap();
    assert!(next["metadata"].get("labels").is_none(), "{next}");
    // `u` still owns the labels map it created (and the empty spec), not the label
    assert_eq!(
        fields(&next, "u"),
        json!({"f:metadata": {"f:labels": {}}, "f:spec": {}})
    );
}

#[tokio::test]
async fn an_applied_null_keeps_the_items_of_a_map() {
    let s = TestServer::start().await.unwrap();
    let api = widgets(&s).await;
    apply(
        &api,
        "b",
        false,
        &widget(json!({}), json!({"free": {"obj": {}}})),
    )
    .await
    .unwrap();
    let next = apply(&api, "a", false, &widget(json!({}), json!({"free": null})))
        .await
        .unwrap();
    assert_eq!(next["spec"], json!({"free": {"obj": {}}}));
    assert_eq!(fields(&next, "a"), json!({"f:spec": {"f:free": {}}}));
}

#[tokio::test]
async fn an_empty_list_left_by_pruning_stays() {
    let s = TestServer::start().await.unwrap();
    let api = widgets(&s).await;
    apply(&api, "b", false, &widget(json!({}), json!({"tags": null})))
        .await
        .unwrap();
    let next = apply(&api, "b", false, &widget(json!({}), json!({"tags": []})))
        .await
        .unwrap();
    assert_eq!(next["spec"], json!({"tags": []}));
}

#[tokio::test]
async fn a_set_follows_the_applied_order() {
    let s = TestServer::start().await.unwrap();
    let api = widgets(&s).await;
    apply(
        &api,
        "a",
        false,
        &widget(json!({}), json!({"tags": ["a", "b", "c"]})),
    )
    .await
    .unwrap();
    let next = apply(
        &api,
        "a",
        false,
        &widget(json!({}), json!({"tags": ["c", "a"]})),
    )
    .await
    .unwrap();
    assert_eq!(next["spec"]["tags"], json!(["c", "a"]));
    let other = apply(
        &api,
        "b",
        false,
        &widget(json!({}), json!({"tags": ["d", "a"]})),
    )
    .await
    .unwrap();
    // kube-apiserver 1.32: the applied items in the applied order, the others where they were
    assert_eq!(other["spec"]["tags"], json!(["c", "d", "a"]));
}

/// structured-merge-diff's pruning puts back only what the field set of the result names: a
/// struct left holding nothing but an empty list names nothing, so it goes too, even when the
/// applier still applies it empty.
#[tokio::test]
async fn a_struct_left_with_only_an_empty_list_is_pruned() {
    let s = TestServer::start().await.unwrap();
    let api = widgets(&s).await;
    apply(
        &api,
        "a",
        false,
        &widget(json!({}), json!({"tags": [], "st": {"x": "a"}})),
    )
    .await
    .unwrap();
    let next = apply(&api, "a", false, &widget(json!({}), json!({})))
        .await
        .unwrap();
    assert!(next.get("spec").is_none(), "{next}");
}
