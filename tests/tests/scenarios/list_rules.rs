//! List rules of built-in child kinds read from the API server's OpenAPI v3 documents
//! (`docs/design/list-rules-from-openapi.md`): through kmeta's updates (dynamic apply, the
//! default strategy) items another actor added to a child's lists are kept where the kind's
//! schema says the list merges, and where it says `atomic` but the items carry a conventional
//! merge key (as Metacontroller keeps them); with the controller's
//! `kmeta.dev/schema-atomic-lists: "true"` an `atomic` list is replaced with the hook's. The
//! documents are read when a controller is built, not on every sync.

use kmeta_tests::*;
use serde_json::{Value, json};

/// The webhook kmeta's hook declares in the MutatingWebhookConfiguration of a `Gate`.
fn own_webhook(id: &str, timeout: &Value) -> Value {
    json!({"name": format!("app.{id}.kmeta.test"),
           "clientConfig": {"url": "https://app.example.test/mutate"},
           "admissionReviewVersions": ["v1"], "sideEffects": "None",
           "timeoutSeconds": timeout})
}

fn webhook_names(mwc: &Value) -> Vec<String> {
    mwc["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| w["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

each_hook_mode!(a_child_mutating_webhook_configuration_keeps_webhooks_another_actor_appended);
/// A cluster-scoped parent `Gate` has one child MutatingWebhookConfiguration; another actor
/// appends a webhook of its own; the parent's timeout changes and kmeta updates its webhook, the
/// other one stays (`webhooks` is a map keyed by `name`).
async fn a_child_mutating_webhook_configuration_keeps_webhooks_another_actor_appended(
    mode: HookMode,
) -> anyhow::Result<()> {
    let name = "mwc";
    let mut s = Scenario::new(name)
        .hook_mode(mode)
        .crd_with("Gate", "gates", |c| c["spec"]["scope"] = json!("Cluster"))
        .hook(|_, req| {
            let p = &req["parent"];
            let gate = p["metadata"]["name"].as_str().unwrap_or_default();
            let id = gate.trim_end_matches("-gate");
            Reply::Json(json!({"children": [{
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": gate},
                "webhooks": [own_webhook(id, &p["spec"]["timeout"])]}]}))
        })
        .prepare()
        .await?;
    s.controller(
        Cc::new(&format!("{name}-cc")).patch(json!({"childResources": [{
        "apiVersion": "admissionregistration.k8s.io/v1",
        "resource": "mutatingwebhookconfigurations",
        "updateStrategy": {"method": "InPlace"}}]})),
    )
    .await?;
    s.start_controller();
    let gate = format!("{}-gate", s.id);
    let av = s.av.clone();
    s.create(
        "gates",
        json!({"apiVersion": av, "kind": "Gate", "metadata": {"name": gate}, "spec": {"timeout": 5}}),
    )
    .await?;
    let mwcs = s.api(
        "admissionregistration.k8s.io/v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        None,
    );
    let mwc = s
        .wait_for(
            &mwcs,
            &gate,
            "the child MutatingWebhookConfiguration",
            |_| true,
        )
        .await?;
    // another actor (a second operator, an admin) appends its webhook
    let mut webhooks = mwc["webhooks"].as_array().cloned().unwrap_or_default();
    let other = format!("other.{}.kmeta.test", s.id);
    webhooks.push(
        json!({"name": other, "clientConfig": {"url": "https://other.example.test/m"},
        "admissionReviewVersions": ["v1"], "sideEffects": "None", "timeoutSeconds": 3}),
    );
    s.merge_patch(&mwcs, &gate, json!({"webhooks": webhooks}))
        .await?;
    // the parent's timeout changes: kmeta updates its own webhook and keeps the other
    let gates = s.api(&s.av, "Gate", "gates", None);
    s.merge_patch(&gates, &gate, json!({"spec": {"timeout": 7}}))
        .await?;
    let own = format!("app.{}.kmeta.test", s.id);
    let mwc = s
        .wait_for(&mwcs, &gate, "the new timeout on kmeta's webhook", |m| {
            m["webhooks"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|w| w["name"] == json!(own) && w["timeoutSeconds"] == 7)
        })
        .await?;
    assert_eq!(
        webhook_names(&mwc),
        [own, other],
        "the other actor's webhook must survive kmeta's update: {mwc}"
    );
    s.finish().await
}

fn endpoint_addresses(slice: &Value) -> Vec<Value> {
    slice["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["addresses"].clone())
        .collect()
}

fn port_names(slice: &Value) -> Vec<String> {
    slice["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

each_hook_mode!(a_child_endpoint_slice_keeps_another_actors_port_by_default);
/// A child EndpointSlice; another actor appends an endpoint and a port; a parent update changes
/// a label. The published schema marks `endpoints` and `ports` `atomic`; by default that does
/// not override the convention: the ports are keyed by `port`, so the other actor's port stays
/// (as with Metacontroller), and the endpoints, whose items have no conventional key, are
/// replaced. kmeta read the OpenAPI v3 documents only while building the controller.
async fn a_child_endpoint_slice_keeps_another_actors_port_by_default(
    mode: HookMode,
) -> anyhow::Result<()> {
    endpoint_slice_scenario(mode, false).await
}

each_hook_mode!(a_child_endpoint_slice_follows_atomic_lists_when_opted_in);
/// The same with `kmeta.dev/schema-atomic-lists: "true"` on the CompositeController: `ports` is
/// atomic, so kmeta's update writes the hook's list and the other actor's port is gone, as
/// kubectl and the API server's own apply do.
async fn a_child_endpoint_slice_follows_atomic_lists_when_opted_in(
    mode: HookMode,
) -> anyhow::Result<()> {
    endpoint_slice_scenario(mode, true).await
}

async fn endpoint_slice_scenario(mode: HookMode, schema_atomic: bool) -> anyhow::Result<()> {
    let name = if schema_atomic { "eps-atomic" } else { "eps" };
    let mut s = Scenario::new(name)
        .hook_mode(mode)
        .crd("Thing", "things")
        .hook(|_, req| {
            let p = &req["parent"];
            let thing = p["metadata"]["name"].as_str().unwrap_or_default();
            Reply::Json(json!({"children": [{
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": thing, "labels": {"tier": p["spec"]["tier"]}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.0.0.1"]}],
                "ports": [{"name": "http", "port": p["spec"]["port"], "protocol": "TCP"}]}]}))
        })
        .prepare()
        .await?;
    let mut cc = Cc::new(&format!("{name}-cc")).patch(json!({"childResources": [{
        "apiVersion": "discovery.k8s.io/v1", "resource": "endpointslices",
        "updateStrategy": {"method": "InPlace"}}]}));
    if schema_atomic {
        cc = cc.annotate("kmeta.dev/schema-atomic-lists", "true");
    }
    s.controller(cc).await?;
    s.start_controller();
    s.parent("web", json!({"tier": "a", "port": 8080})).await?;
    let ns = s.ns.clone();
    let slices = s.api(
        "discovery.k8s.io/v1",
        "EndpointSlice",
        "endpointslices",
        Some(&ns),
    );
    let slice = s
        .wait_for(&slices, "web", "the child EndpointSlice", |_| true)
        .await?;
    // another actor appends an endpoint and a port
    let mut endpoints = slice["endpoints"].as_array().cloned().unwrap_or_default();
    endpoints.push(json!({"addresses": ["10.0.0.2"]}));
    let mut ports = slice["ports"].as_array().cloned().unwrap_or_default();
    ports.push(json!({"name": "metrics", "port": 9090, "protocol": "TCP"}));
    s.merge_patch(
        &slices,
        "web",
        json!({"endpoints": endpoints, "ports": ports}),
    )
    .await?;

    // a label changes: kmeta updates the slice
    s.merge_patch(&s.parents(), "web", json!({"spec": {"tier": "b"}}))
        .await?;
    let slice = s
        .wait_for(&slices, "web", "the new label", |e| {
            e["metadata"]["labels"]["tier"] == "b"
        })
        .await?;
    assert_eq!(endpoint_addresses(&slice), [json!(["10.0.0.1"])], "{slice}");
    if schema_atomic {
        assert_eq!(
            port_names(&slice),
            ["http"],
            "opted in, ports is atomic as the published schema says: {slice}"
        );
    } else {
        assert_eq!(
            port_names(&slice),
            ["http", "metrics"],
            "by default the other actor's port is kept (merged by `port`): {slice}"
        );
    }

    syncs_read_no_document(&mut s, name).await?;
    s.finish().await
}

/// Once the parent `web` has settled, three syncs read no OpenAPI v3 document (the controller
/// read them while it was built).
async fn syncs_read_no_document(s: &mut Running, name: &str) -> anyhow::Result<()> {
    s.wait_parent("web", "parent status", |p| {
        p["status"]["observedGeneration"] == 2
    })
    .await?;
    let fetches = s.metrics.openapi_fetches();
    assert!(fetches > 0, "the controller read no OpenAPI v3 document");
    for i in 0..3 {
        let touch = json!({"metadata": {"annotations": {"kmeta.test/touch": i.to_string()}}});
        s.patch_and_sync(&format!("{name}-cc"), &s.parents(), "web", touch)
            .await?;
    }
    assert_eq!(
        s.metrics.openapi_fetches(),
        fetches,
        "syncs read OpenAPI v3 documents"
    );
    Ok(())
}
