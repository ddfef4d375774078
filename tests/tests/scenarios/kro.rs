//! kro's ResourceGraphDefinitions served by kmeta (`kmeta::kro::serve`): an RGD becomes its
//! instance CRD and a CompositeController with a CEL hook that kmeta runs like any other. The
//! graph's resources are made in the order they read each other, a resource reading another's
//! status waits over successive syncs until that status exists, the instance's status follows
//! its expressions and kro's conditions; a sidecar injected by admission into a schemaless
//! child's embedded pod template survives an instance update (kro's server-side apply would
//! replace that list whole); an RGD whose expression does not parse, or does not type-check
//! against the instance's schema and the children's OpenAPI, is Inactive with a condition
//! naming the resource, the field path and the expression. Children owned by label are the CEL
//! resource graph's alone: an ordinary CompositeController still refuses a child in another
//! namespace.

use kmeta_apiserver::Operation;
use kmeta_tests::*;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

/// The RGD of these scenarios, its instances of kind `WebApp` in the scenario's group: a
/// ConfigMap holding the image, a `Workload` (schemaless) whose pod template reads it, and an
/// `endpoint` ConfigMap reading the Workload's status, written by "its controller" (the test).
fn rgd(s: &Running, name: &str) -> Value {
    json!({
        "apiVersion": "kro.run/v1alpha1", "kind": "ResourceGraphDefinition",
        "metadata": {"name": name, "labels": s.cc_labels()},
        "spec": {
            "schema": {
                "apiVersion": "v1alpha1", "kind": "WebApp", "group": s.group,
                "spec": {"image": "string | default=nginx", "replicas": "integer | default=1"},
                "status": {"url": "${workload.status.url}", "image": "${config.data.image}"},
            },
            "resources": [
                {"id": "endpoint", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "${schema.metadata.name}-endpoint"},
                    "data": {"url": "${workload.status.url}"}}},
                {"id": "workload",
                 "readyWhen": ["${workload.status.ready == true}"],
                 "template": {"apiVersion": s.av, "kind": "Workload",
                    "metadata": {"name": "${schema.metadata.name}"},
                    "spec": {"replicas": "${schema.spec.replicas}",
                        "template": {"metadata": {"labels": {"app": "${schema.metadata.name}"}},
                            "spec": {"containers": [{"name": "app", "image": "${config.data.image}",
                                "ports": [{"containerPort": 8080}]}]}}}}},
                {"id": "config", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "${schema.metadata.name}-config"},
                    "data": {"image": "${schema.spec.image}"}}},
            ],
        },
    })
}

fn rgds(s: &Running) -> Api<DynamicObject> {
    s.api(
        "kro.run/v1alpha1",
        "ResourceGraphDefinition",
        "resourcegraphdefinitions",
        None,
    )
}

fn webapps(s: &Running) -> Api<DynamicObject> {
    s.api(
        &format!("{}/v1alpha1", s.group),
        "WebApp",
        "webapps",
        Some(&s.ns),
    )
}

/// A scenario with the Workload CRD, the RGD CRD and kmeta serving RGDs, its controller
/// started; the serving task (aborted when dropped).
async fn start(name: &str) -> anyhow::Result<(Running, tokio::task::JoinHandle<()>)> {
    let mut s = Scenario::new(name)
        .crd("Workload", "workloads")
        .prepare()
        .await?;
    s.create_crd(kmeta::kro::resource_graph_definition_crd())
        .await?;
    let client = s.kro_client().await?;
    let serving = tokio::spawn(async move {
        if let Err(e) = kmeta::kro::serve(client).await {
            eprintln!("kro::serve: {e}");
        }
    });
    s.start_controller();
    Ok((s, serving))
}

/// Creates the RGD and waits until it is Active and its instance CRD is served.
async fn serve_rgd(s: &mut Running, name: &str) -> anyhow::Result<Value> {
    let object = rgd(s, name);
    s.create("resourcegraphdefinitions", object).await?;
    let served = s
        .wait_for(&rgds(s), name, "the RGD Active", |r| {
            r["status"]["state"] == "Active"
        })
        .await?;
    let crds = s.api(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        None,
    );
    let crd = format!("webapps.{}", s.group);
    s.wait_for(&crds, &crd, "the instance CRD Established", |c| {
        c["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        })
    })
    .await?;
    Ok(served)
}

async fn instance(s: &Running, name: &str, spec: Value) -> anyhow::Result<()> {
    let obj = json!({"apiVersion": format!("{}/v1alpha1", s.group), "kind": "WebApp",
        "metadata": {"name": name, "namespace": s.ns}, "spec": spec});
    let obj: DynamicObject = serde_json::from_value(obj)?;
    webapps(s).create(&Default::default(), &obj).await?;
    Ok(())
}

/// The graph in kmeta: the RGD's order, children made as each resource's data arrives, the
/// instance's status following its expressions and kro's state.
#[tokio::test]
async fn an_rgd_instance_gets_its_children_in_the_order_they_read_each_other() -> anyhow::Result<()>
{
    let (mut s, serving) = start("kro-graph").await?;
    let served = serve_rgd(&mut s, "webapp").await?;
    assert_eq!(
        served["status"]["topologicalOrder"],
        json!(["config", "workload", "endpoint"])
    );
    let cc = s
        .wait_for(
            &s.controllers(),
            "webapp",
            "the generated CompositeController",
            |_| true,
        )
        .await?;
    assert!(
        cc.pointer("/spec/hooks/sync/cel/resourceGraph/resources")
            .is_some(),
        "{cc}"
    );

    instance(&s, "shop", json!({"image": "web:1", "replicas": 2})).await?;
    let config = s.wait_child("shop-config").await?;
    assert_eq!(config["data"]["image"], "web:1");
    assert_eq!(config["metadata"]["labels"]["kro.run/node-id"], "config");
    let workloads = s.resource("Workload", "workloads");
    let w = s
        .wait_for(
            &workloads,
            "shop",
            "the Workload, made from the ConfigMap",
            |_| true,
        )
        .await?;
    assert_eq!(containers(&w), [("app".to_owned(), "web:1".to_owned())]);
    assert_eq!(
        w["spec"]["replicas"], 2,
        "defaults and spec reach the template: {w}"
    );
    // the endpoint reads the Workload's status, which no one wrote yet: it waits
    let inst = s
        .wait_for(
            &webapps(&s),
            "shop",
            "the instance IN_PROGRESS with its image",
            |i| i["status"]["state"] == "IN_PROGRESS" && i["status"]["image"] == "web:1",
        )
        .await?;
    assert!(inst["status"].get("url").is_none(), "{inst}");
    assert!(
        s.get(&s.configmaps(), "shop-endpoint").await?.is_none(),
        "the endpoint must wait"
    );

    // the Workload's controller reports it ready: the endpoint is made, the instance is ACTIVE
    let status = json!({"status": {"ready": true, "url": "http://shop.example"}});
    workloads
        .patch_status("shop", &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    let endpoint = s.wait_child("shop-endpoint").await?;
    assert_eq!(endpoint["data"]["url"], "http://shop.example");
    s.wait_for(&webapps(&s), "shop", "the instance ACTIVE and Ready", |i| {
        let ready = i["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        i["status"]["state"] == "ACTIVE" && i["status"]["url"] == "http://shop.example" && ready
    })
    .await?;
    serving.abort();
    s.finish().await
}

/// The difference kmeta makes: a sidecar injected by admission into the Workload's embedded pod
/// template (a schemaless custom resource, whose lists server-side apply replaces whole)
/// survives an update of the instance, which reaches the app container.
#[tokio::test]
async fn a_sidecar_injected_into_a_schemaless_child_survives_instance_updates() -> anyhow::Result<()>
{
    let (mut s, serving) = start("kro-sidecar").await?;
    let admission = s.server().map(|server| {
        server.admission().mutate(&s.av, "workloads", |obj, op| {
            let cs = obj
                .pointer_mut("/spec/template/spec/containers")
                .and_then(Value::as_array_mut);
            if let (true, Some(cs)) = (matches!(op, Operation::Create | Operation::Update), cs)
                && !cs.iter().any(|c| c["name"] == "proxy")
            {
                cs.push(json!({"name": "proxy", "image": "envoy:1.30"}));
            }
            Ok(())
        })
    });
    serve_rgd(&mut s, "webapp").await?;
    instance(&s, "shop", json!({"image": "web:1"})).await?;
    let workloads = s.resource("Workload", "workloads");
    let w = s
        .wait_for(&workloads, "shop", "the Workload", |_| true)
        .await?;
    if admission.is_none() {
        // a real cluster: the injector is a second client patching the child
        let mut cs = w["spec"]["template"]["spec"]["containers"].clone();
        if let Some(a) = cs.as_array_mut() {
            a.push(json!({"name": "proxy", "image": "envoy:1.30"}));
        }
        s.merge_patch(
            &workloads,
            "shop",
            json!({"spec": {"template": {"spec": {"containers": cs}}}}),
        )
        .await?;
    }
    s.wait_for(&workloads, "shop", "the sidecar injected", |w| {
        containers(w).len() == 2
    })
    .await?;

    let api = webapps(&s);
    s.merge_patch(&api, "shop", json!({"spec": {"image": "web:2"}}))
        .await?;
    let w = s
        .wait_for(&workloads, "shop", "the Workload with web:2", |w| {
            containers(w)
                .iter()
                .any(|(n, i)| n == "app" && i == "web:2")
        })
        .await?;
    assert_eq!(
        containers(&w),
        [
            ("app".to_owned(), "web:2".to_owned()),
            ("proxy".to_owned(), "envoy:1.30".to_owned())
        ],
        "the sidecar must survive the instance update"
    );
    serving.abort();
    s.finish().await
}

/// An RGD whose expression does not parse is not served: Inactive, `GraphAccepted=False` naming
/// the resource, the field path and the expression; no CompositeController is made.
#[tokio::test]
async fn an_rgd_with_a_broken_expression_is_refused_with_its_place_named() -> anyhow::Result<()> {
    let (mut s, serving) = start("kro-broken").await?;
    let mut bad = rgd(&s, "broken");
    bad["spec"]["resources"][2]["template"]["data"]["image"] = json!("${schema.spec.image +}");
    s.create("resourcegraphdefinitions", bad).await?;
    let r = s
        .wait_for(&rgds(&s), "broken", "the RGD Inactive", |r| {
            r["status"]["state"] == "Inactive"
        })
        .await?;
    let cond = r["status"]["conditions"][0].clone();
    assert_eq!(
        (cond["type"].as_str(), cond["status"].as_str()),
        (Some("GraphAccepted"), Some("False")),
        "{r}"
    );
    let msg = cond["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("resource \"config\": template.data.image: schema.spec.image +:"),
        "{msg}"
    );
    assert!(s.get(&s.controllers(), "broken").await?.is_none());
    serving.abort();
    s.finish().await
}

/// A summary reading a misspelt function, then a misspelt resource id, and how each is refused.
const MISSPELT: [(&str, &str); 2] = [
    (
        "${string(deployment.status.availableReplicas).lowerAsci()}",
        "resource \"summary\": template.data.available: \
         string(deployment.status.availableReplicas).lowerAsci(): undeclared reference to \
         function \"lowerAsci\"",
    ),
    (
        "${string(deploymnt.status.availableReplicas)}",
        "resource \"summary\": template.data.available: \
         string(deploymnt.status.availableReplicas): undeclared reference to \"deploymnt\" \
         (declared: deployment, schema, summary)",
    ),
];

/// Writes `spec` into the RGD `name` and waits until it is refused with `message`.
async fn refused_with(s: &Running, name: &str, spec: &Value, message: &str) -> anyhow::Result<()> {
    s.merge_patch(&rgds(s), name, json!({"spec": spec})).await?;
    s.wait_for(&rgds(s), name, message, |r| {
        let c = &r["status"]["conditions"][0];
        c["message"] == message && c["type"] == "GraphAccepted" && c["status"] == "False"
    })
    .await?;
    Ok(())
}

/// An RGD that parses but does not type-check is refused when it is created, kro's way: a
/// field read from a child that its kind's OpenAPI schema (the API server's `/openapi/v3`)
/// does not have, then a string placed in a Deployment's integer field, a misspelt function and
/// a misspelt resource id (refused, not waited for as data not there yet), each named on
/// `GraphAccepted=False` with the resource, the field path and the expression; once fixed, the
/// same RGD is served.
#[tokio::test]
async fn an_rgd_that_does_not_type_check_is_refused_with_its_place_named() -> anyhow::Result<()> {
    let (mut s, serving) = start("kro-typed").await?;
    let deployment = |replicas: &str| {
        json!({"id": "deployment", "template": {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "${schema.metadata.name}"},
            "spec": {"replicas": replicas,
                "selector": {"matchLabels": {"app": "${schema.metadata.name}"}},
                "template": {"metadata": {"labels": {"app": "${schema.metadata.name}"}},
                    "spec": {"containers": [{"name": "app", "image": "${schema.spec.image}"}]}}}}})
    };
    let summary = |read: &str| {
        json!({"id": "summary", "template": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "${schema.metadata.name}-summary"},
            "data": {"available": read}}})
    };
    let mut typed = rgd(&s, "typed");
    typed["spec"]["resources"] = json!([
        deployment("${schema.spec.replicas}"),
        summary("${string(deployment.status.availableReplica)}"),
    ]);
    typed["spec"]["schema"]["status"] = json!({});
    s.create("resourcegraphdefinitions", typed.clone()).await?;
    let refused = |r: &Value, at: &str| {
        r["status"]["state"] == "Inactive"
            && r["status"]["conditions"][0]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(at))
    };
    let r = s
        .wait_for(&rgds(&s), "typed", "a child's unknown field refused", |r| {
            refused(r, "resource \"summary\"")
        })
        .await?;
    let cond = &r["status"]["conditions"][0];
    assert_eq!(
        (cond["type"].as_str(), cond["status"].as_str()),
        (Some("GraphAccepted"), Some("False")),
        "{r}"
    );
    assert_eq!(
        cond["message"],
        "resource \"summary\": template.data.available: string(deployment.status.availableReplica): \
         deployment.status has no field \"availableReplica\" (it has: availableReplicas, collisionCount, \
         conditions, observedGeneration, readyReplicas, replicas, terminatingReplicas, unavailableReplicas, \
         updatedReplicas)"
    );

    let mut spec = typed["spec"].clone();
    spec["resources"] = json!([
        deployment("${schema.spec.image}"),
        summary("${string(deployment.status.availableReplicas)}"),
    ]);
    let message = "resource \"deployment\": template.spec.replicas: schema.spec.image: returns \
                   string, but the field must be int";
    refused_with(&s, "typed", &spec, message).await?;
    assert!(s.get(&s.controllers(), "typed").await?.is_none());

    // a misspelt function, then a misspelt resource id: refused, not data waited for
    spec["resources"][0] = deployment("${schema.spec.replicas}");
    for (read, message) in MISSPELT {
        spec["resources"][1] = summary(read);
        refused_with(&s, "typed", &spec, message).await?;
    }
    spec["resources"][1] = summary("${string(deployment.status.availableReplicas)}");
    typed["spec"] = spec.clone();
    s.grant_rgd(&typed).await?;
    s.merge_patch(&rgds(&s), "typed", json!({"spec": spec}))
        .await?;
    s.wait_for(&rgds(&s), "typed", "the fixed RGD Active", |r| {
        r["status"]["state"] == "Active"
    })
    .await?;
    serving.abort();
    s.finish().await
}

/// Label ownership is the CEL resource graph's alone: an ordinary CompositeController (a
/// webhook) whose hook answers a ConfigMap in another namespace keeps Metacontroller's rule —
/// the sync fails naming the child and why, nothing is written there, and its parent gets
/// neither kro's finalizer nor kro's labels.
#[tokio::test]
async fn an_ordinary_controller_still_refuses_a_child_in_another_namespace() -> anyhow::Result<()> {
    let s = Scenario::new("kro-not-label-owned")
        .crd("Thing", "things")
        .hook(|_, _| {
            let child = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "elsewhere-child", "namespace": "default"}});
            Reply::Json(json!({"status": {}, "children": [child]}))
        })
        .controller(Cc::new("plain-cc"))
        .parent("t", json!({}))
        .start()
        .await?;
    let p = s
        .wait_parent("t", "Synced=False naming the namespace", |p| {
            condition(p, "Synced").is_some_and(|c| c["status"] == "False")
        })
        .await?;
    let msg = condition(&p, "Synced").map(|c| c["message"].to_string());
    let msg = msg.unwrap_or_default();
    assert!(
        msg.contains("elsewhere-child") && msg.contains("may only own children in its namespace"),
        "{msg}"
    );
    let default = s.api("v1", "ConfigMap", "configmaps", Some("default"));
    assert!(s.get(&default, "elsewhere-child").await?.is_none());
    assert!(p["metadata"].get("finalizers").is_none(), "{p}");
    let labels = p["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert!(!labels.keys().any(|k| k.starts_with("kro.run/")), "{p}");
    s.finish().await
}

/// A CustomResourceDefinition for `Gadget` in the scenario's group, its status schema `status`.
fn gadget_crd(s: &Running, status: Value) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{}", s.group)},
        "spec": {"group": s.group, "scope": "Namespaced",
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget",
                "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": status}}}}]}})
}

/// An RGD whose instances (`GadgetApp`) make a `Gadget` and a ConfigMap reading the Gadget's
/// `status.endpoint`.
fn gadget_rgd(s: &Running) -> Value {
    json!({
        "apiVersion": "kro.run/v1alpha1", "kind": "ResourceGraphDefinition",
        "metadata": {"name": "gadgetapp", "labels": s.cc_labels()},
        "spec": {
            "schema": {"apiVersion": "v1alpha1", "kind": "GadgetApp", "group": s.group,
                "spec": {"size": "integer | default=1"}},
            "resources": [
                {"id": "gadget", "template": {"apiVersion": format!("{}/v1", s.group),
                    "kind": "Gadget", "metadata": {"name": "${schema.metadata.name}"},
                    "spec": {"size": "${schema.spec.size}"}}},
                {"id": "info", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "${schema.metadata.name}-info"},
                    "data": {"endpoint": "${gadget.status.endpoint}"}}},
            ],
        },
    })
}

/// A `GadgetApp` instance `g1` gets its Gadget, and its ConfigMap once the Gadget's status
/// has an endpoint.
async fn gadget_instance_gets_its_children(s: &Running) -> anyhow::Result<()> {
    let group = &s.group;
    let apps = s.api(
        &format!("{group}/v1alpha1"),
        "GadgetApp",
        "gadgetapps",
        Some(&s.ns),
    );
    let app = json!({"apiVersion": format!("{group}/v1alpha1"), "kind": "GadgetApp",
        "metadata": {"name": "g1", "namespace": s.ns}, "spec": {"size": 3}});
    apps.create(&Default::default(), &serde_json::from_value(app)?)
        .await?;
    let gadgets = s.api(&format!("{group}/v1"), "Gadget", "gadgets", Some(&s.ns));
    let g = s
        .wait_for(&gadgets, "g1", "the instance's Gadget", |_| true)
        .await?;
    assert_eq!(g["spec"]["size"], 3, "{g}");
    let status = json!({"status": {"endpoint": "http://g1.example"}});
    gadgets
        .patch_status("g1", &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    let info = s.wait_child("g1-info").await?;
    assert_eq!(info["data"]["endpoint"], "http://g1.example");
    Ok(())
}

/// Whether an RGD is Inactive with `GraphAccepted=False` and `message`.
fn refused(message: String) -> impl Fn(&Value) -> bool {
    move |r: &Value| {
        let c = &r["status"]["conditions"][0];
        r["status"]["state"] == "Inactive"
            && c["type"] == "GraphAccepted"
            && c["status"] == "False"
            && c["message"] == message.as_str()
    }
}

/// An RGD is checked again when a child's CRD appears or changes (kmeta watches CRDs): refused
/// while its child kind `Gadget` has no CRD, refused again once the CRD exists but its status
/// lacks the field the graph reads, then served when the CRD gains the field (a refusal for a
/// type error is never retried on a timer: only the CRD's change brings it back), and its
/// instance gets its children; when the CRD loses the field again, the served RGD says so.
#[tokio::test]
async fn an_rgd_refused_for_a_child_crd_is_served_once_the_crd_fits() -> anyhow::Result<()> {
    let (mut s, serving) = start("kro-crd-later").await?;
    let rgd = gadget_rgd(&s);
    s.create("resourcegraphdefinitions", rgd).await?;
    let missing = format!(
        "resource \"gadget\": {}/v1 Gadget is not served by the API server",
        s.group
    );
    s.wait_for(
        &rgds(&s),
        "gadgetapp",
        "refused: no Gadget CRD",
        refused(missing),
    )
    .await?;

    let lacking_crd = gadget_crd(
        &s,
        json!({"type": "object", "properties": {
        "phase": {"type": "string"}}}),
    );
    s.create_crd(lacking_crd).await?;
    let lacking = "resource \"info\": template.data.endpoint: gadget.status.endpoint: \
                   gadget.status has no field \"endpoint\" (it has: phase)";
    s.wait_for(
        &rgds(&s),
        "gadgetapp",
        "refused: the Gadget CRD lacks status.endpoint",
        refused(lacking.to_owned()),
    )
    .await?;

    let crds = s.api(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        None,
    );
    let fitting = gadget_crd(
        &s,
        json!({"type": "object", "properties": {
        "phase": {"type": "string"}, "endpoint": {"type": "string"}}}),
    );
    let crd_name = format!("gadgets.{}", s.group);
    s.merge_patch(&crds, &crd_name, json!({"spec": fitting["spec"]}))
        .await?;
    s.wait_for(&rgds(&s), "gadgetapp", "served once the CRD fits", |r| {
        r["status"]["state"] == "Active"
    })
    .await?;
    let instance_crd = format!("gadgetapps.{}", s.group);
    s.wait_for(&crds, &instance_crd, "the instance CRD Established", |c| {
        c["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        })
    })
    .await?;

    gadget_instance_gets_its_children(&s).await?;

    // the CRD changes back: the served RGD says it no longer checks, the instance keeps its
    // children (the CompositeController made of the last graph that checked runs on)
    let phase_only = json!({"type": "object", "properties": {"phase": {"type": "string"}}});
    let lacking_crd = gadget_crd(&s, phase_only);
    s.merge_patch(&crds, &crd_name, json!({"spec": lacking_crd["spec"]}))
        .await?;
    s.wait_for(&rgds(&s), "gadgetapp", lacking, refused(lacking.to_owned()))
        .await?;
    assert!(s.get(&s.controllers(), "gadgetapp").await?.is_some());
    assert!(s.get(&s.configmaps(), "g1-info").await?.is_some());
    serving.abort();
    s.finish().await
}

/// kro's `--allow-crd-deletion` (`kmeta run --kro-allow-crd-deletion`): the RGD owns the
/// instance CRD kmeta generates, so deleting the RGD deletes the CRD, its instances and, by
/// garbage collection, their children.
#[tokio::test]
async fn with_crd_deletion_allowed_an_rgds_crd_and_instances_go_with_it() -> anyhow::Result<()> {
    let mut s = Scenario::new("kro-crd-deletion")
        .crd("Workload", "workloads")
        .prepare()
        .await?;
    s.create_crd(kmeta::kro::resource_graph_definition_crd())
        .await?;
    let client = s.kro_client_with(true).await?;
    let options = kmeta::kro::ServeOptions::default().allow_crd_deletion(true);
    let serving = tokio::spawn(async move {
        if let Err(e) = kmeta::kro::serve_with(client, options).await {
            eprintln!("kro::serve_with: {e}");
        }
    });
    s.start_controller();
    let served = serve_rgd(&mut s, "webapp").await?;
    let crds = s.api(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        None,
    );
    let crd_name = format!("webapps.{}", s.group);
    let crd = s
        .wait_for(&crds, &crd_name, "the instance CRD", |_| true)
        .await?;
    let owner = &crd["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["kind"], &owner["uid"]),
        (
            &json!("ResourceGraphDefinition"),
            &served["metadata"]["uid"]
        ),
        "{crd}"
    );
    instance(&s, "shop", json!({"image": "web:1"})).await?;
    s.wait_child("shop-config").await?;

    rgds(&s).delete("webapp", &Default::default()).await?;
    eventually("the instance CRD deleted with its RGD", TIMEOUT, || async {
        Ok(crds.get_opt(&crd_name).await?.is_none().then_some(()))
    })
    .await?;
    let configmaps = s.configmaps();
    eventually("the instance's children deleted", TIMEOUT, || async {
        Ok(configmaps
            .get_opt("shop-config")
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    serving.abort();
    s.finish().await
}

/// A team moving a live instance from kro: the children kro made in the instance's namespace
/// carry kro's labels with the instance's UID and no owner reference. kmeta takes them over —
/// the same objects updated in place to what the graph wants, then owned by reference — where
/// a create would fail on the name they hold.
#[tokio::test]
async fn children_kro_made_in_the_instances_namespace_are_taken_over() -> anyhow::Result<()> {
    let (mut s, serving) = start("kro-takeover").await?;
    serve_rgd(&mut s, "webapp").await?;
    // the instance, paused while "kro's" child is put in place
    let obj = json!({"apiVersion": format!("{}/v1alpha1", s.group), "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": s.ns,
            "annotations": {"kmeta.dev/paused": "true"}},
        "spec": {"image": "web:2"}});
    let made = webapps(&s)
        .create(&Default::default(), &serde_json::from_value(obj)?)
        .await?;
    let uid = made.metadata.uid.clone().unwrap_or_default();
    let kros = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "shop-config", "namespace": s.ns, "labels": {
            "kro.run/owned": "true", "kro.run/instance-id": uid,
            "kro.run/instance-name": "shop", "kro.run/instance-namespace": s.ns}},
        "data": {"image": "web:1"}});
    let before = s
        .configmaps()
        .create(&Default::default(), &serde_json::from_value(kros)?)
        .await?;
    let resume = json!({"metadata": {"annotations": {"kmeta.dev/paused": null}}});
    webapps(&s)
        .patch("shop", &PatchParams::default(), &Patch::Merge(&resume))
        .await?;
    let config = s
        .wait_for(
            &s.configmaps(),
            "shop-config",
            "kro's child updated to the graph's image and owned by the instance",
            |c| {
                c["data"]["image"] == "web:2"
                    && c["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|o| o.iter().any(|r| r["uid"] == uid.as_str()))
            },
        )
        .await?;
    assert_eq!(
        config["metadata"]["uid"],
        json!(before.metadata.uid),
        "the same object, taken over, not made again"
    );
    let workloads = s.resource("Workload", "workloads");
    s.wait_for(&workloads, "shop", "the graph's next resource", |_| true)
        .await?;
    let inst = s.get(&webapps(&s), "shop").await?.unwrap_or_default();
    assert!(
        condition(&inst, "Synced").is_none_or(|c| c["status"] != "False"),
        "{inst}"
    );
    serving.abort();
    s.finish().await
}
