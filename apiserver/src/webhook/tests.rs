//! The webhook module's decisions on JSON values, cases drawn from kube-apiserver's own tests
//! of rule matching (`admission/plugin/webhook/predicates/rules`) and of its status errors.

use super::*;
use serde_json::json;

fn attrs(op: Op, group: &str, resource: &str, sub: &str) -> Attributes {
    Attributes {
        op,
        group: group.into(),
        version: "v1".into(),
        kind: "Kind".into(),
        resource: resource.into(),
        subresource: sub.into(),
        namespace: Some("default".into()),
        name: "a".into(),
        dry_run: false,
        user: None,
        field_manager: "m".into(),
    }
}

fn config(kind: &'static str, webhook: Value) -> Vec<Webhook> {
    let obj = json!({"metadata": {"name": "cfg"}, "webhooks": [webhook]});
    parse_configuration(kind, &obj).unwrap()
}

fn hook(rules: Value) -> Webhook {
    config(
        "MutatingWebhookConfiguration",
        json!({"name": "w.example.com", "clientConfig": {"url": "http://127.0.0.1:1/"},
               "rules": rules, "sideEffects": "None", "admissionReviewVersions": ["v1"]}),
    )
    .remove(0)
}

#[test]
fn resources_match_as_kube_apiserver_matches_them() {
    let r = |res: &str, sub: &str| resource_matches(res, "pods", sub);
    assert!(r("*", ""));
    assert!(!r("*", "status"));
    assert!(r("*/*", "status") && r("*/*", ""));
    assert!(r("pods/*", "status") && r("pods/*", ""));
    assert!(r("*/status", "status") && !r("*/status", "scale"));
    assert!(r("pods/status", "status") && !r("pods", "status"));
    assert!(!resource_matches("deployments", "pods", ""));
}

#[test]
fn rules_match_operation_group_version_and_scope() {
    let w = hook(json!([{"operations": ["CREATE"], "apiGroups": ["apps"],
        "apiVersions": ["v1"], "resources": ["deployments"], "scope": "Namespaced"}]));
    assert!(w.rule_matches(&attrs(Op::Create, "apps", "deployments", ""), true));
    assert!(!w.rule_matches(&attrs(Op::Update, "apps", "deployments", ""), true));
    assert!(!w.rule_matches(&attrs(Op::Create, "", "deployments", ""), true));
    assert!(!w.rule_matches(&attrs(Op::Create, "apps", "deployments", ""), false));
    let any = hook(
        json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"],
        "resources": ["*"], "scope": "Cluster"}]),
    );
    assert!(any.rule_matches(&attrs(Op::Delete, "x.io", "things", ""), false));
    assert!(!any.rule_matches(&attrs(Op::Delete, "x.io", "things", ""), true));
}

#[test]
fn selectors_match_object_or_old_object_and_namespace_labels() {
    let mut w = hook(json!([]));
    w.object_selector = Some(LabelSelector(vec![Requirement::Eq(
        "inject".into(),
        "yes".into(),
    )]));
    w.namespace_selector = Some(LabelSelector(vec![Requirement::Exists("mesh".into())]));
    let yes = json!({"metadata": {"labels": {"inject": "yes"}}});
    let no = json!({"metadata": {}});
    let ns = json!({"mesh": "on"});
    assert!(w.selectors_match(Some(&yes), None, Some(&ns)));
    assert!(w.selectors_match(Some(&no), Some(&yes), Some(&ns)));
    assert!(!w.selectors_match(Some(&no), None, Some(&ns)));
    assert!(!w.selectors_match(Some(&yes), None, Some(&json!({}))));
    // cluster-scoped objects: the namespace selector does not apply
    assert!(w.selectors_match(Some(&yes), None, None));
}

#[test]
fn a_configuration_reads_its_defaults_and_service_address() {
    let obj = json!({"metadata": {"name": "mesh", "annotations": {SERVICE_ADDRESS_ANNOTATION: "127.0.0.1:9443"}},
        "webhooks": [{"name": "inject.mesh.io", "sideEffects": "Some", "admissionReviewVersions": ["v1"],
            "reinvocationPolicy": "IfNeeded", "failurePolicy": "Ignore", "timeoutSeconds": 99,
            "clientConfig": {"service": {"namespace": "mesh", "name": "injector", "path": "/inject"}}}]});
    let w = parse_configuration("MutatingWebhookConfiguration", &obj)
        .unwrap()
        .remove(0);
    assert!(w.mutating && w.reinvoke && w.ignore_failure && !w.dry_run_safe);
    assert_eq!(w.timeout, Duration::from_secs(30));
    assert_eq!(
        w.target,
        Target::Service {
            url: "https://injector.mesh.svc:443/inject".into(),
            host: "injector.mesh.svc".into(),
            address: Some("127.0.0.1:9443".into()),
        }
    );
    let v = config(
        "ValidatingWebhookConfiguration",
        json!({"name": "v", "sideEffects": "None",
        "admissionReviewVersions": ["v1"], "clientConfig": {"url": "https://x/"}}),
    );
    assert!(!v[0].mutating && !v[0].ignore_failure && v[0].dry_run_safe);
    assert_eq!(v[0].timeout, Duration::from_secs(10));
    let both = json!({"metadata": {"name": "bad"}, "webhooks": [{"name": "b", "sideEffects": "None",
        "admissionReviewVersions": ["v1"], "clientConfig": {}}]});
    assert!(matches!(
        parse_configuration("ValidatingWebhookConfiguration", &both),
        Err(WebhookError::Config { .. })
    ));
}

#[test]
fn a_review_names_the_request_and_an_answer_is_read() {
    let a = attrs(Op::Update, "apps", "deployments", "status");
    let r = review_request(&a, "u1", Some(&json!({"n": 1})), Some(&json!({"n": 0})));
    assert_eq!(r["request"]["operation"], "UPDATE");
    assert_eq!(
        r["request"]["resource"],
        json!({"group": "apps", "version": "v1", "resource": "deployments"})
    );
    assert_eq!(r["request"]["subResource"], "status");
    assert_eq!(r["request"]["oldObject"]["n"], 0);
    assert_eq!(r["request"]["options"]["kind"], "UpdateOptions");
    let patch = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        br#"[{"op":"add","path":"/a","value":1}]"#,
    );
    let answer = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "response": {"uid": "u1", "allowed": true, "patchType": "JSONPatch", "patch": patch,
        "warnings": ["careful"]}});
    let v = read_response("w", true, "u1", answer.to_string().as_bytes()).unwrap();
    assert!(v.allowed && v.patch.is_some());
    assert_eq!(v.warnings, vec!["careful".to_string()]);
    assert!(read_response("w", false, "u1", answer.to_string().as_bytes()).is_err());
    assert!(read_response("w", true, "u2", answer.to_string().as_bytes()).is_err());
    assert!(read_response("w", true, "u1", b"not json").is_err());
}

#[test]
fn a_denial_is_worded_and_coded_as_kube_apiserver_words_it() {
    let e = denial(
        "v.example.com",
        Some(&json!({"code": 403, "message": "no thanks", "reason": "Forbidden"})),
    );
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        "admission webhook \"v.example.com\" denied the request: no thanks"
    );
    let e = denial("d", Some(&json!({"code": 200})));
    assert_eq!(e.code, 400);
    assert_eq!(
        e.message,
        "admission webhook \"d\" denied the request without explanation"
    );
    assert_eq!(denial("d", None).code, 400);
    let e = denial("d", Some(&json!({"reason": "Because"})));
    assert_eq!(
        e.message,
        "admission webhook \"d\" denied the request: Because"
    );
}

#[test]
fn match_conditions_decide_in_cel_with_object_and_request() {
    let w = config(
        "ValidatingWebhookConfiguration",
        json!({"name": "v", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://x/"},
            "matchConditions": [
                {"name": "not-kube-system", "expression": "request.namespace != 'kube-system'"},
                {"name": "not-skipped", "expression": "!has(object.metadata.labels) || !('skip' in object.metadata.labels)"}]}),
    )
    .remove(0);
    let a = attrs(Op::Create, "", "configmaps", "");
    assert!(
        w.conditions_hold(&a, Some(&json!({"metadata": {}})), None)
            .unwrap()
    );
    let skip = json!({"metadata": {"labels": {"skip": "1"}}});
    assert!(!w.conditions_hold(&a, Some(&skip), None).unwrap());
    let mut system = a.clone();
    system.namespace = Some("kube-system".into());
    assert!(
        !w.conditions_hold(&system, Some(&json!({"metadata": {}})), None)
            .unwrap()
    );
    let broken = config(
        "ValidatingWebhookConfiguration",
        json!({"name": "b", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://x/"},
            "matchConditions": [{"name": "typo", "expression": "object.spec.nope == 1"}]}),
    )
    .remove(0);
    let e = broken
        .conditions_hold(&a, Some(&json!({"spec": {}})), None)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("failed to evaluate matchCondition \"typo\""),
        "{e}"
    );
}
