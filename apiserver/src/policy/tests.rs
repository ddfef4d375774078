//! Admission policies on JSON values, cases drawn from kube-apiserver's
//! `validatingadmissionpolicy` and `mutating` plugin tests where they fit, in our own words.

use super::mutating::{desugar, mutate};
use super::validating::evaluate;
use super::*;
use crate::patch::ListKind;
use crate::webhook::Op;
use serde_json::json;

fn attrs(op: Op, name: &str) -> Attributes {
    Attributes {
        op,
        group: "apps".into(),
        version: "v1".into(),
        kind: "Deployment".into(),
        resource: "deployments".into(),
        subresource: String::new(),
        namespace: Some("team".into()),
        name: name.into(),
        dry_run: false,
        user: Some(("jane".into(), vec!["dev".into()])),
        field_manager: "m".into(),
    }
}

fn deployments_rule() -> Value {
    json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]})
}

fn vap(spec: Value) -> Value {
    let mut s = json!({"matchConstraints": deployments_rule()});
    if let (Some(m), Some(add)) = (s.as_object_mut(), spec.as_object()) {
        m.extend(add.clone());
    }
    json!({"metadata": {"name": "max-replicas"}, "spec": s})
}

fn binding(actions: Value, extra: Value) -> Value {
    let mut spec = json!({"policyName": "max-replicas", "validationActions": actions});
    if let (Some(m), Some(add)) = (spec.as_object_mut(), extra.as_object()) {
        m.extend(add.clone());
    }
    json!({"metadata": {"name": "max-replicas-binding"}, "spec": spec})
}

fn deployment(replicas: i64, labels: Value) -> Value {
    json!({"metadata": {"name": "web", "labels": labels}, "spec": {"replicas": replicas}})
}

fn run(policy: &Value, b: &Value, obj: &Value, params: Vec<Value>) -> validating::Outcome {
    let a = attrs(Op::Create, "web");
    let ns = json!({"metadata": {"name": "team", "labels": {"env": "prod"}}});
    let req = Request {
        attrs: &a,
        namespaced: true,
        object: Some(obj),
        old: None,
        namespace: Some(&ns),
    };
    let p = move |_: &ParamQuery| params.clone();
    evaluate(
        std::slice::from_ref(policy),
        std::slice::from_ref(b),
        &p,
        &req,
    )
}

#[test]
fn a_failed_validation_denies_with_kube_apiservers_words() {
    let p = vap(json!({"validations": [{"expression": "object.spec.replicas <= 5"}]}));
    let out = run(
        &p,
        &binding(json!(["Deny"]), json!({})),
        &deployment(7, json!({})),
        vec![],
    );
    let d = out.deny.unwrap();
    assert_eq!(
        d.message,
        "ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas-binding' denied request: failed expression: object.spec.replicas <= 5"
    );
    assert_eq!((d.reason.as_str(), d.code), ("Invalid", 422));
    assert!(
        run(
            &p,
            &binding(json!(["Deny"]), json!({})),
            &deployment(3, json!({})),
            vec![]
        )
        .deny
        .is_none()
    );
}

#[test]
fn message_expression_reason_and_the_warn_action() {
    let p = vap(
        json!({"validations": [{"expression": "object.spec.replicas <= 5",
        "message": "static", "reason": "Forbidden",
        "messageExpression": "'replicas ' + string(object.spec.replicas) + ' > 5'"}]}),
    );
    let out = run(
        &p,
        &binding(json!(["Deny", "Warn"]), json!({})),
        &deployment(7, json!({})),
        vec![],
    );
    let d = out.deny.unwrap();
    assert!(d.message.ends_with("denied request: replicas 7 > 5"));
    assert_eq!((d.reason.as_str(), d.code), ("Forbidden", 403));
    assert_eq!(
        out.warnings,
        vec!["Validation failed for ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas-binding': replicas 7 > 5".to_string()]
    );
    let warn_only = run(
        &p,
        &binding(json!(["Warn", "Audit"]), json!({})),
        &deployment(7, json!({})),
        vec![],
    );
    assert!(warn_only.deny.is_none() && warn_only.warnings.len() == 1);
}

#[test]
fn params_variables_request_and_namespace_object() {
    let p = vap(
        json!({"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "variables": [{"name": "max", "expression": "int(params.data.max)"}],
        "validations": [
            {"expression": "object.spec.replicas <= variables.max", "message": "too many"},
            {"expression": "request.userInfo.username == 'jane' && namespaceObject.metadata.labels.env == 'prod'",
             "message": "wrong user or namespace"}]}),
    );
    let b = binding(
        json!(["Deny"]),
        json!({"paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"}}),
    );
    let limits = json!({"metadata": {"name": "limits"}, "data": {"max": "4"}});
    assert!(
        run(&p, &b, &deployment(3, json!({})), vec![limits.clone()])
            .deny
            .is_none()
    );
    assert!(
        run(&p, &b, &deployment(5, json!({})), vec![limits])
            .deny
            .unwrap()
            .message
            .ends_with("too many")
    );
    let missing = run(&p, &b, &deployment(1, json!({})), vec![]).deny.unwrap();
    assert!(
        missing
            .message
            .ends_with("no params found for policy binding with `Deny` parameterNotFoundAction")
    );
    let allow = binding(
        json!(["Deny"]),
        json!({"paramRef": {"name": "limits", "parameterNotFoundAction": "Allow"}}),
    );
    assert!(
        run(&p, &allow, &deployment(9, json!({})), vec![])
            .deny
            .is_none()
    );
}

#[test]
fn match_constraints_conditions_selectors_and_failure_policy() {
    let p = vap(
        json!({"validations": [{"expression": "false", "message": "no"}],
        "matchConditions": [{"name": "labelled", "expression": "has(object.metadata.labels.team)"}]}),
    );
    let b = binding(json!(["Deny"]), json!({}));
    assert!(
        run(&p, &b, &deployment(1, json!({})), vec![])
            .deny
            .is_none()
    );
    assert!(
        run(&p, &b, &deployment(1, json!({"team": "a"})), vec![])
            .deny
            .is_some()
    );
    let narrowed = binding(
        json!(["Deny"]),
        json!({"matchResources": {"objectSelector": {"matchLabels": {"tier": "web"}}}}),
    );
    assert!(
        run(&p, &narrowed, &deployment(1, json!({"team": "a"})), vec![])
            .deny
            .is_none()
    );
    let excluded = vap(json!({"validations": [{"expression": "false"}],
        "matchConstraints": {"resourceRules": deployments_rule()["resourceRules"],
            "excludeResourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["deployments"], "resourceNames": ["web"]}]}}));
    assert!(
        run(&excluded, &b, &deployment(1, json!({})), vec![])
            .deny
            .is_none()
    );
    let broken = vap(json!({"validations": [{"expression": "object.spec.nope > 1"}]}));
    let d = run(&broken, &b, &deployment(1, json!({})), vec![])
        .deny
        .unwrap();
    assert!(
        d.message
            .contains("expression 'object.spec.nope > 1' resulted in error: "),
        "{d:?}"
    );
    let mut ignore = broken.clone();
    ignore["spec"]["failurePolicy"] = json!("Ignore");
    assert!(
        run(&ignore, &b, &deployment(1, json!({})), vec![])
            .deny
            .is_none()
    );
}

#[test]
fn object_construction_reads_as_maps() {
    assert_eq!(
        desugar("Object{spec: Object.spec{replicas: 3, 'a{b': \"x: y\"}}"),
        "{\"spec\": {\"replicas\": 3, 'a{b': \"x: y\"}}"
    );
    assert_eq!(
        desugar("[JSONPatch{op: \"add\", path: \"/a\", value: {\"k\": object.x}}]"),
        "[{\"op\": \"add\", \"path\": \"/a\", \"value\": {\"k\": object.x}}]"
    );
    assert_eq!(
        desugar("object.spec.replicas > 1.5"),
        "object.spec.replicas > 1.5"
    );
}

fn map_binding(policy: &str) -> Value {
    json!({"metadata": {"name": format!("{policy}-binding")}, "spec": {"policyName": policy}})
}

fn containers(kinds_path: &[String]) -> ListKind {
    crate::patch::builtin_list_kind(kinds_path)
}

#[test]
fn mutating_policies_apply_configurations_and_json_patches_in_order() {
    let sidecar = json!({"metadata": {"name": "sidecar"}, "spec": {
        "matchConstraints": deployments_rule(), "reinvocationPolicy": "IfNeeded",
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
            "Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: 'proxy', image: 'envoy:1'}]}}}}"}}]}});
    let label = json!({"metadata": {"name": "label"}, "spec": {
        "matchConstraints": deployments_rule(),
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression":
            "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'injected': 'yes'}}]"}}]}});
    let a = attrs(Op::Create, "web");
    let req = Request {
        attrs: &a,
        namespaced: true,
        object: None,
        old: None,
        namespace: None,
    };
    let mut obj = json!({"metadata": {"name": "web"}, "spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": "web:1"}]}}}});
    let none = |_: &ParamQuery| Vec::new();
    mutate(
        &[sidecar.clone(), label.clone()],
        &[map_binding("sidecar"), map_binding("label")],
        &none,
        &req,
        &mut obj,
        &containers,
    )
    .unwrap();
    assert_eq!(
        obj["spec"]["template"]["spec"]["containers"],
        json!([{"name": "app", "image": "web:1"}, {"name": "proxy", "image": "envoy:1"}])
    );
    assert_eq!(obj["metadata"]["labels"]["injected"], "yes");
    // applied again, nothing changes: the container is merged by name
    let before = obj.clone();
    mutate(
        &[sidecar],
        &[map_binding("sidecar")],
        &none,
        &req,
        &mut obj,
        &containers,
    )
    .unwrap();
    assert_eq!(obj, before);
}
