//! Custom resources through a real `kube::Client`: the CRD version's structural schema prunes,
//! defaults and validates every write (create, update, patch, apply, `/status`), with ratcheting.
#![allow(clippy::unwrap_used)]

use kmeta_apiserver::{Operation, TestServer};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

fn gadget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["image"], "properties": {
                        "image": {"type": "string", "minLength": 1},
                        "replicas": {"type": "integer", "default": 1, "minimum": 0, "maximum": 10},
                        "mode": {"type": "string", "enum": ["fast", "safe"], "default": "safe"},
                        "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string", "enum": ["Pending", "Ready"]}}}}}}}]}
    })
}

async fn setup() -> (TestServer, Api<DynamicObject>) {
    let s = TestServer::start().await.unwrap();
    let client = s.client();
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(gadget_crd()).unwrap(),
    )
    .await
    .unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Gadget"),
        "gadgets",
    );
    let api = Api::namespaced_with(client, "default", &ar);
    (s, api)
}

fn gadget(spec: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "g"}, "spec": spec}))
    .unwrap()
}

fn status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected api error, got {other:?}"),
    }
}

#[tokio::test]
async fn create_prunes_defaults_and_validates() {
    let (_s, api) = setup().await;
    let created = api
        .create(
            &PostParams::default(),
            &gadget(json!({"image": "nginx", "unknown": 1, "template": {"free": {"x": 1}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        created.data["spec"],
        json!({"image": "nginx", "replicas": 1, "mode": "safe", "template": {"free": {"x": 1}}})
    );
    let stored = api.get("g").await.unwrap();
    assert!(stored.data["spec"].get("unknown").is_none());

    let mut bad = gadget(json!({"image": "", "replicas": 20, "mode": "turbo"}));
    bad.metadata.name = Some("bad".into());
    let e = status(api.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!(e.code, 422);
    assert_eq!(e.reason, "Invalid");
    assert_eq!(
        e.message,
        "Gadget.example.com \"bad\" is invalid: [spec.image: Invalid value: \"\": spec.image in body should be at least 1 chars long, spec.replicas: Invalid value: 20: spec.replicas in body should be less than or equal to 10, spec.mode: Unsupported value: \"turbo\": supported values: \"fast\", \"safe\"]"
    );
    let d = e.details.unwrap();
    assert_eq!(d.kind, "Gadget");
    assert_eq!(d.group, "example.com");
    let causes: Vec<(&str, &str)> = d
        .causes
        .iter()
        .map(|c| (c.reason.as_str(), c.field.as_str()))
        .collect();
    assert_eq!(
        causes,
        vec![
            ("FieldValueInvalid", "spec.image"),
            ("FieldValueInvalid", "spec.replicas"),
            ("FieldValueNotSupported", "spec.mode"),
        ]
    );

    let mut missing = gadget(json!({}));
    missing.metadata.name = Some("missing".into());
    let e = status(
        api.create(&PostParams::default(), &missing)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.message,
        "Gadget.example.com \"missing\" is invalid: spec.image: Required value"
    );
    assert_eq!(e.details.unwrap().causes[0].reason, "FieldValueRequired");
}

#[tokio::test]
async fn updates_patches_and_status_use_the_schema() {
    let (_s, api) = setup().await;
    api.create(&PostParams::default(), &gadget(json!({"image": "nginx"})))
        .await
        .unwrap();
    // merge patch: nulling a defaulted field brings the default back; unknown fields pruned
    let r = api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": null, "junk": true, "mode": "fast"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        r.data["spec"],
        json!({"image": "nginx", "replicas": 1, "mode": "fast"})
    );
    // an invalid patch is rejected and nothing changes
    let e = status(
        api.patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": "many"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert_eq!(
        e.message,
        "Gadget.example.com \"g\" is invalid: spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
    );
    assert_eq!(e.details.unwrap().causes[0].reason, "FieldValueTypeInvalid");
    // server-side apply goes through the same path
    let e = status(
        api.patch(
            "g",
            &PatchParams::apply("me").force(),
            &Patch::Apply(json!({"apiVersion": "example.com/v1", "kind": "Gadget",
                "metadata": {"name": "g"}, "spec": {"image": "nginx", "replicas": -1}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    // /status: validated, pruned
    let e = status(
        api.patch_status(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Lost"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        e.message,
        "Gadget.example.com \"g\" is invalid: status.phase: Unsupported value: \"Lost\": supported values: \"Pending\", \"Ready\""
    );
    let r = api
        .patch_status(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready", "extra": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(r.data["status"], json!({"phase": "Ready"}));
}

#[tokio::test]
async fn ratcheting_keeps_unchanged_invalid_values_writable() {
    // an object stored under a looser schema, then the CRD is tightened
    let s = TestServer::start().await.unwrap();
    let client = s.client();
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let mut crd = gadget_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["replicas"]
        ["maximum"] = json!(100);
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(crd.clone()).unwrap(),
    )
    .await
    .unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Gadget"),
        "gadgets",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
    api.create(
        &PostParams::default(),
        &gadget(json!({"image": "nginx", "replicas": 50})),
    )
    .await
    .unwrap();
    // tighten: maximum 10
    let mut current = crds.get("gadgets.example.com").await.unwrap();
    current.data["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["replicas"]["maximum"] = json!(10);
    crds.replace("gadgets.example.com", &PostParams::default(), &current)
        .await
        .unwrap();
    // replicas unchanged: the update of another field is allowed
    let r = api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"image": "httpd"}})),
        )
        .await
        .unwrap();
    assert_eq!(r.data["spec"]["replicas"], 50);
    // changing it to another invalid value is not
    let e = status(
        api.patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 60}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert_eq!(e.details.unwrap().causes[0].field, "spec.replicas");
}

#[tokio::test]
async fn admission_mutations_are_pruned_defaulted_and_validated() {
    let (s, api) = setup().await;
    s.admission().mutate(
        "example.com/v1",
        "gadgets",
        |obj: &mut Value, op: Operation| {
            if op == Operation::Create {
                obj["spec"]["injected"] = json!(true);
                obj["spec"]["mode"] = Value::Null;
            }
            Ok(())
        },
    );
    let r = api
        .create(
            &PostParams::default(),
            &gadget(json!({"image": "x", "mode": "fast"})),
        )
        .await
        .unwrap();
    assert_eq!(
        r.data["spec"],
        json!({"image": "x", "mode": "safe", "replicas": 1})
    );
}

/// POSTs `obj` to the gadgets collection with `query`; status, Warning headers and body.
async fn post_gadget(
    s: &TestServer,
    query: &str,
    obj: &DynamicObject,
) -> (u16, Vec<String>, Value) {
    let req = http::Request::post(format!(
        "/apis/example.com/v1/namespaces/default/gadgets{query}"
    ))
    .header("content-type", "application/json")
    .body(serde_json::to_vec(obj).unwrap())
    .unwrap();
    let resp = s.client().send(req.map(Into::into)).await.unwrap();
    let code = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    let body = resp.into_body().collect_bytes().await.unwrap();
    (code, warnings, serde_json::from_slice(&body).unwrap())
}

#[tokio::test]
async fn field_validation_strict_rejects_warn_warns_ignore_drops() {
    let (s, api) = setup().await;
    let typo = |name: &str| {
        let mut g = gadget(json!({"image": "x", "replcas": 3, "template": {"free": 1}}));
        g.metadata.name = Some(name.into());
        g
    };
    // Strict: 400 naming the field, nothing stored
    let (code, _, st) = post_gadget(&s, "?fieldValidation=Strict", &typo("strict")).await;
    assert_eq!((code, &st["reason"]), (400, &json!("BadRequest")));
    assert_eq!(
        st["message"],
        "Gadget in version \"v1\" cannot be handled as a Gadget: strict decoding error: unknown field \"spec.replcas\""
    );
    assert!(api.get_opt("strict").await.unwrap().is_none());
    // the same through a strict merge patch of an existing object
    api.create(&PostParams::default(), &typo("patched"))
        .await
        .unwrap();
    let e = status(
        api.patch(
            "patched",
            &PatchParams {
                field_validation: Some(kube::api::ValidationDirective::Strict),
                ..Default::default()
            },
            &Patch::Merge(json!({"spec": {"imag": "y"}})),
        )
        .await
        .unwrap_err(),
    );
    assert!(
        e.message.ends_with("unknown field \"spec.imag\""),
        "{}",
        e.message
    );

    // Warn (the default): stored without the field, one Warning header per field
    let (code, warnings, stored) = post_gadget(&s, "", &typo("warned")).await;
    assert_eq!(code, 201);
    assert_eq!(warnings, ["299 - \"unknown field \\\"spec.replcas\\\"\""]);
    assert!(stored["spec"].get("replcas").is_none());
    assert_eq!(
        stored["spec"]["template"]["free"], 1,
        "preserved subtree kept"
    );

    // Ignore: silently dropped
    let (code, warnings, stored) =
        post_gadget(&s, "?fieldValidation=Ignore", &typo("ignored")).await;
    assert_eq!((code, warnings.len()), (201, 0));
    assert!(stored["spec"].get("replcas").is_none());
    let (code, _, _) = post_gadget(&s, "?fieldValidation=Loose", &typo("bad")).await;
    assert_eq!(code, 400);
}

/// CEL `x-kubernetes-validations`: a failing rule answers 422 with kube-apiserver's message and
/// field path; a transition rule refuses a change; a CRD whose rule does not compile is refused.
#[tokio::test]
async fn cel_rules_refuse_writes_as_kube_apiserver_does() {
    let s = TestServer::start().await.unwrap();
    let crds: Api<DynamicObject> = Api::all_with(
        s.client(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let mut crd = gadget_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] = json!([
        {"rule": "self.replicas <= 5 || self.mode == 'fast'",
         "message": "more than 5 replicas need mode fast"},
        {"rule": "self.image == oldSelf.image", "message": "image is immutable",
         "reason": "FieldValueForbidden", "fieldPath": ".image"}]);
    let mut bad = crd.clone();
    bad["metadata"]["name"] = json!("gizmos.example.com");
    bad["spec"]["names"] = json!({"kind": "Gizmo", "plural": "gizmos", "singular": "gizmo"});
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] =
        json!([{"rule": "self.spec.replicas >"}]);
    let refused = crds
        .create(
            &PostParams::default(),
            &serde_json::from_value(bad).unwrap(),
        )
        .await
        .unwrap_err();
    let st = status(refused);
    assert_eq!(st.code, 422, "{st:?}");
    assert!(
        st.message
            .contains("spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[0].rule"),
        "{st:?}"
    );
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(crd).unwrap(),
    )
    .await
    .unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Gadget"),
        "gadgets",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(s.client(), "default", &ar);
    let e = api
        .create(
            &PostParams::default(),
            &gadget(json!({"image": "a", "replicas": 7})),
        )
        .await
        .unwrap_err();
    let st = status(e);
    assert_eq!(st.code, 422);
    assert_eq!(
        st.message,
        "Gadget.example.com \"g\" is invalid: spec: Invalid value: \"object\": more than 5 replicas need mode fast"
    );
    api.create(
        &PostParams::default(),
        &gadget(json!({"image": "a", "replicas": 7, "mode": "fast"})),
    )
    .await
    .unwrap();
    let e = api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"image": "b"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        status(e).message,
        "Gadget.example.com \"g\" is invalid: spec.image: Forbidden: image is immutable"
    );
}
