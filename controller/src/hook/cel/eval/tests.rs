//! One sync at a time, on JSON: what kro's runtime would decide for the same graph and
//! observed objects.

use super::*;
use crate::hook::cel::graph::parse;

const NOW: &str = "2026-12-06T21:00:00Z";

fn webapp() -> Graph {
    parse(&json!({
        "schema": {"apiVersion": "v1alpha1", "kind": "WebApp",
            "spec": {"name": "string", "replicas": "integer | default=1",
                     "service": {"enabled": "boolean | default=true"}},
            "status": {"availableReplicas": "${deployment.status.availableReplicas}",
                       "svc": "${service.metadata.name}"}},
        "resources": [
            {"id": "service", "includeWhen": ["${schema.spec.service.enabled}"],
             "template": {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "${deployment.metadata.name}-svc"},
                "spec": {"ports": [{"port": 80, "targetPort": "${deployment.spec.template.spec.containers[0].ports[0].containerPort}"}]}}},
            {"id": "deployment",
             "readyWhen": ["${deployment.status.availableReplicas == deployment.spec.replicas}"],
             "template": {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "${schema.spec.name}"},
                "spec": {"replicas": "${schema.spec.replicas}",
                    "template": {"spec": {"containers": [{"name": "web", "image": "nginx",
                        "ports": [{"containerPort": 8080}]}]}}}}},
        ]
    }))
    .unwrap()
}

fn instance(service: bool) -> Value {
    json!({"apiVersion": "kro.run/v1alpha1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": "ns", "uid": "u1", "generation": 2},
        "spec": {"name": "shop", "replicas": 2, "service": {"enabled": service}}})
}

fn observe(out: &Outcome, status: Option<Value>) -> Observed {
    let mut o = Observed::default();
    for c in &out.children {
        let id = c["metadata"]["labels"][NODE_ID_LABEL]
            .as_str()
            .unwrap()
            .to_owned();
        let mut c = c.clone();
        if let Some(s) = &status {
            c["status"] = s.clone();
        }
        o.children.entry(id).or_default().push(c);
    }
    o
}

fn names(out: &Outcome) -> Vec<String> {
    out.children
        .iter()
        .map(|c| {
            format!(
                "{}/{}",
                c["kind"].as_str().unwrap(),
                c["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn a_resource_reading_another_waits_for_it_over_successive_syncs() {
    let g = webapp();
    // first sync: only the deployment; the service reads it and waits
    let first = evaluate_graph(&g, &instance(true), &Observed::default(), NOW).unwrap();
    assert_eq!(names(&first), ["Deployment/shop"]);
    assert_eq!(first.children[0]["spec"]["replicas"], 2);
    assert_eq!(first.status["state"], "IN_PROGRESS");
    assert!(first.status.get("availableReplicas").is_none());
    // second sync: the deployment exists, not available yet: still waiting (readyWhen)
    let second =
        evaluate_graph(&g, &instance(true), &observe(&first, Some(json!({}))), NOW).unwrap();
    assert_eq!(names(&second), ["Deployment/shop"]);
    // third: available: the service is rendered from the observed deployment
    let ready = observe(&first, Some(json!({"availableReplicas": 2})));
    let third = evaluate_graph(&g, &instance(true), &ready, NOW).unwrap();
    assert_eq!(names(&third), ["Deployment/shop", "Service/shop-svc"]);
    assert_eq!(third.children[1]["spec"]["ports"][0]["targetPort"], 8080);
    assert_eq!(third.status["availableReplicas"], 2);
    // fourth: everything exists: ACTIVE, Ready
    let mut all = ready.clone();
    all.children.extend(
        observe(&third, None)
            .children
            .into_iter()
            .filter(|(k, _)| k == "service"),
    );
    let fourth = evaluate_graph(&g, &instance(true), &all, NOW).unwrap();
    assert_eq!(fourth.status["state"], "ACTIVE");
    assert_eq!(fourth.status["svc"], "shop-svc");
    let ready_cond = &fourth.status["conditions"][3];
    assert_eq!(
        (ready_cond["type"].as_str(), ready_cond["status"].as_str()),
        (Some("Ready"), Some("True"))
    );
}

#[test]
fn include_when_false_leaves_the_resource_out() {
    let g = webapp();
    let ready = observe(
        &evaluate_graph(&g, &instance(false), &Observed::default(), NOW).unwrap(),
        Some(json!({"availableReplicas": 2})),
    );
    let out = evaluate_graph(&g, &instance(false), &ready, NOW).unwrap();
    assert_eq!(names(&out), ["Deployment/shop"]);
    assert_eq!(out.states[1], ("service".to_owned(), State::Excluded));
    assert_eq!(out.status["state"], "ACTIVE");
}

#[test]
fn a_waiting_resource_keeps_its_objects_as_last_written() {
    let g = webapp();
    let ready = observe(
        &evaluate_graph(&g, &instance(true), &Observed::default(), NOW).unwrap(),
        Some(json!({"availableReplicas": 2})),
    );
    let mut seen = ready.clone();
    let svc = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "shop-svc", "labels": {NODE_ID_LABEL: "service"},
            "annotations": {dynapply::LAST_APPLIED_ANNOTATION: "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"shop-svc\"}}"}},
        "spec": {"clusterIP": "10.0.0.1"}});
    seen.children.insert("service".into(), vec![svc]);
    // the deployment is rolling: not ready; the service must not be deleted meanwhile
    seen.children.get_mut("deployment").unwrap()[0]["status"] = json!({"availableReplicas": 1});
    let out = evaluate_graph(&g, &instance(true), &seen, NOW).unwrap();
    assert_eq!(names(&out), ["Deployment/shop", "Service/shop-svc"]);
    assert_eq!(
        out.children[1],
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "shop-svc"}})
    );
    assert!(matches!(&out.states[1].1, State::Waiting(w) if w.contains("deployment")));
}

#[test]
fn for_each_expands_a_collection_and_each_item_is_labelled() {
    let g = parse(&json!({"resources": [
        {"id": "cms", "forEach": [{"region": "${schema.spec.regions}"}, {"tier": "${['a', 'b']}"}],
         "readyWhen": ["${each.data.ok == 'yes'}"],
         "template": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "${schema.metadata.name + '-' + region + '-' + tier}"},
            "data": {"ok": "yes"}}},
        {"id": "summary", "template": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "summary"}, "data": {"count": "${string(size(cms))}"}}},
    ]}))
    .unwrap();
    let inst =
        json!({"metadata": {"name": "x", "namespace": "ns"}, "spec": {"regions": ["eu", "us"]}});
    let first = evaluate_graph(&g, &inst, &Observed::default(), NOW).unwrap();
    assert_eq!(
        names(&first),
        [
            "ConfigMap/x-eu-a",
            "ConfigMap/x-eu-b",
            "ConfigMap/x-us-a",
            "ConfigMap/x-us-b"
        ]
    );
    assert_eq!(
        first.children[3]["metadata"]["labels"][COLLECTION_INDEX_LABEL],
        "3"
    );
    let second = evaluate_graph(&g, &inst, &observe(&first, None), NOW).unwrap();
    assert_eq!(second.children.len(), 5);
    assert_eq!(second.children[4]["data"]["count"], "4");
}

#[test]
fn a_failing_expression_names_resource_path_and_expression() {
    let g = parse(&json!({"resources": [
        {"id": "cm", "template": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x"}, "data": {"n": "n-${schema.spec.replicas}"}}},
    ]}))
    .unwrap();
    let inst = json!({"metadata": {"name": "x"}, "spec": {"replicas": 3}});
    let e = evaluate_graph(&g, &inst, &Observed::default(), NOW).unwrap_err();
    assert_eq!(e.id, "cm");
    assert!(
        e.error
            .starts_with("template.data.n: ${schema.spec.replicas}: "),
        "{}",
        e.error
    );
    // a misspelt function (in a hook nothing checked) fails: it is no data to wait for
    let g = parse(&json!({"resources": [
        {"id": "cm", "template": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "${schema.metadata.name.lowerAsci()}"}}},
    ]}))
    .unwrap();
    let e = evaluate_graph(&g, &inst, &Observed::default(), NOW).unwrap_err();
    assert_eq!(e.id, "cm");
    assert!(e.error.contains("lowerAsci"), "{}", e.error);
}

#[test]
fn conditions_keep_their_transition_time_while_they_hold() {
    let g = parse(&json!({"resources": []})).unwrap();
    let inst = json!({"metadata": {"name": "x", "generation": 1}, "spec": {}});
    let out = evaluate_graph(&g, &inst, &Observed::default(), NOW).unwrap();
    let mut later = inst.clone();
    later["status"] = out.status.clone();
    let again = evaluate_graph(&g, &later, &Observed::default(), "2030-01-01T00:00:00Z").unwrap();
    assert_eq!(
        again.status, out.status,
        "an unchanged status is not rewritten"
    );
}
