//! Drives the `kmeta-apiserver` binary with the real kubectl. Skips (with a message) when
//! kubectl is not installed, and fails then under CI.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;

const DEPLOY: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: team
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: app
        image: nginx:IMAGE
"#;

#[test]
fn kubectl_end_to_end_or_skips_without_kubectl() {
    if !have_kubectl() {
        return;
    }
    let s = start();
    let kc = s.kubeconfig.as_path();
    // discovery
    let ar = ok(kc, &["api-resources"], None);
    for r in [
        "configmaps",
        "deployments",
        "customresourcedefinitions",
        "leases",
        "clusterroles",
    ] {
        assert!(ar.contains(r), "api-resources lacks {r}:\n{ar}");
    }
    // create ns (protobuf body) and a configmap
    ok(kc, &["create", "ns", "team"], None);
    ok(
        kc,
        &[
            "create",
            "configmap",
            "cfg",
            "-n",
            "team",
            "--from-literal=a=b",
        ],
        None,
    );
    assert_eq!(get_json(kc, &["cm", "cfg", "-n", "team"])["data"]["a"], "b");
    // client-side apply, twice (second is a three-way strategic merge patch)
    ok(
        kc,
        &["apply", "-f", "-"],
        Some(&DEPLOY.replace("IMAGE", "1")),
    );
    // another actor injects a sidecar; client-side apply must keep it
    ok(
        kc,
        &[
            "patch",
            "deploy",
            "web",
            "-n",
            "team",
            "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","image":"envoy:1"}]}}}}"#,
        ],
        None,
    );
    let out = ok(
        kc,
        &["apply", "-f", "-"],
        Some(&DEPLOY.replace("IMAGE", "2")),
    );
    assert!(out.contains("configured"), "{out}");
    let d = get_json(kc, &["deploy", "web", "-n", "team"]);
    let cs = d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    let images: Vec<&str> = cs.iter().map(|c| c["image"].as_str().unwrap()).collect();
    assert_eq!(images, ["nginx:2", "envoy:1"]);
    assert!(
        d["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );
    // server-side apply
    let out = ok(
        kc,
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(&DEPLOY.replace("IMAGE", "3")),
    );
    assert!(out.contains("serverside-applied"), "{out}");
    let d = get_json(
        kc,
        &["deploy", "web", "-n", "team", "--show-managed-fields"],
    );
    let managers: Vec<&str> = d["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert!(managers.contains(&"kubectl"), "{managers:?}");
    // diff uses a server-side dry run and must not persist anything
    let before = get_json(kc, &["deploy", "web", "-n", "team"]);
    let (_, diff, _) = kubectl(
        kc,
        &["diff", "-f", "-"],
        Some(&DEPLOY.replace("IMAGE", "9")),
    );
    assert!(diff.contains("nginx:9"), "{diff}");
    let after = get_json(kc, &["deploy", "web", "-n", "team"]);
    assert_eq!(
        before["metadata"]["resourceVersion"],
        after["metadata"]["resourceVersion"]
    );
    // a CRD becomes Established and its kind is usable by kubectl
    let crd = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
      "metadata":{"name":"gadgets.example.com"},
      "spec":{"group":"example.com","scope":"Namespaced","names":{"kind":"Gadget","plural":"gadgets","shortNames":["gd"]},
      "versions":[{"name":"v1","served":true,"storage":true,
        "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}"#;
    ok(kc, &["apply", "-f", "-"], Some(crd));
    ok(
        kc,
        &[
            "wait",
            "--for=condition=Established",
            "crd/gadgets.example.com",
            "--timeout=10s",
        ],
        None,
    );
    ok(
        kc,
        &["apply", "-f", "-"],
        Some(
            r#"{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g1","namespace":"team"},"spec":{"size":1}}"#,
        ),
    );
    ok(
        kc,
        &["apply", "-f", "-"],
        Some(
            r#"{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g1","namespace":"team"},"spec":{"size":2}}"#,
        ),
    );
    assert_eq!(get_json(kc, &["gd", "g1", "-n", "team"])["spec"]["size"], 2);
    // patch: merge and json
    ok(
        kc,
        &[
            "patch",
            "deploy",
            "web",
            "-n",
            "team",
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"tier":"fe"}}}"#,
        ],
        None,
    );
    ok(
        kc,
        &[
            "patch",
            "deploy",
            "web",
            "-n",
            "team",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/replicas","value":4}]"#,
        ],
        None,
    );
    let d = get_json(kc, &["deploy", "web", "-n", "team"]);
    assert_eq!(d["metadata"]["labels"]["tier"], "fe");
    assert_eq!(d["spec"]["replicas"], 4);
    // get -w sees a change
    let mut w = Command::new(kubectl_path().unwrap())
        .arg("--kubeconfig")
        .arg(kc)
        .args(["get", "cm", "-n", "team", "-w", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = w.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), "configmap/cfg");
    ok(kc, &["create", "configmap", "second", "-n", "team"], None);
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), "configmap/second");
    let _ = w.kill();
    let _ = w.wait();
    // foreground cascade: a dependent configmap owned by the deployment goes first
    let uid = d["metadata"]["uid"].as_str().unwrap().to_string();
    let child = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"owned","namespace":"team",
        "ownerReferences":[{{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"{uid}","blockOwnerDeletion":true}}]}}}}"#
    );
    ok(kc, &["create", "-f", "-"], Some(&child));
    ok(
        kc,
        &[
            "delete",
            "deploy",
            "web",
            "-n",
            "team",
            "--cascade=foreground",
        ],
        None,
    );
    let (found, _, err) = kubectl(kc, &["get", "cm", "owned", "-n", "team"], None);
    assert!(!found && err.contains("NotFound"), "{err}");
    let (found, _, _) = kubectl(kc, &["get", "deploy", "web", "-n", "team"], None);
    assert!(!found);
    // deleting the namespace removes its contents
    ok(kc, &["delete", "ns", "team"], None);
    let list = get_json(kc, &["cm", "-A"]);
    assert_eq!(list["items"].as_array().unwrap().len(), 0);
}

const WIDGETS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
    additionalPrinterColumns:
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Ready, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].status'}
    - {name: Image, type: string, priority: 1, jsonPath: '.spec.image'}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
"#;

const WIDGET_AND_EVENTS: &str = r#"
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: default}
spec: {replicas: 3, image: app:2}
status:
  conditions:
  - {type: Ready, status: "True"}
---
apiVersion: v1
kind: Event
metadata: {name: w1.core, namespace: default}
involvedObject: {kind: Widget, name: w1, namespace: default}
type: Warning
reason: SyncError
message: hook answered 500
source: {component: kmeta}
---
apiVersion: events.k8s.io/v1
kind: Event
metadata: {name: w1.v1, namespace: default}
regarding: {kind: Widget, name: w1, namespace: default}
type: Normal
reason: Synced
note: children up to date
eventTime: "2026-01-01T00:00:00.000000Z"
reportingController: kmeta
reportingInstance: kmeta-0
action: Sync
"#;

/// Header and row of `kubectl get` output, split on runs of two or more spaces.
fn columns(line: &str) -> Vec<String> {
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn kubectl_get_prints_crd_printer_columns_and_event_columns_or_skips_without_kubectl() {
    if !have_kubectl() {
        return;
    }
    let s = start();
    let kc = s.kubeconfig.as_path();
    ok(kc, &["apply", "-f", "-"], Some(WIDGETS));
    ok(
        kc,
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=15s",
        ],
        None,
    );
    ok(kc, &["apply", "-f", "-"], Some(WIDGET_AND_EVENTS));

    let out = ok(kc, &["get", "widgets"], None);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        columns(lines[0]),
        ["NAME", "REPLICAS", "READY", "AGE"],
        "{out}"
    );
    let row = columns(lines[1]);
    assert_eq!(row[..3], ["w1", "3", "True"], "{out}");
    let wide = ok(kc, &["get", "widgets", "-o", "wide"], None);
    assert_eq!(
        columns(wide.lines().next().unwrap()),
        ["NAME", "REPLICAS", "READY", "IMAGE", "AGE"],
        "{wide}"
    );
    assert!(wide.contains("app:2"), "{wide}");
    let one = ok(kc, &["get", "widget", "w1"], None);
    assert_eq!(columns(one.lines().next().unwrap())[1], "REPLICAS", "{one}");

    // both Events, whichever API wrote them, through core/v1 with the event printer's columns
    let out = ok(kc, &["get", "events", "--sort-by=.metadata.name"], None);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        columns(lines[0]),
        ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{out}"
    );
    assert_eq!(
        columns(lines[1])[1..],
        ["Warning", "SyncError", "widget/w1", "hook answered 500"],
        "{out}"
    );
    assert_eq!(
        columns(lines[2])[1..],
        ["Normal", "Synced", "widget/w1", "children up to date"],
        "{out}"
    );
    // built-in printers and the default table
    ok(
        kc,
        &[
            "create",
            "configmap",
            "cfg",
            "--from-literal=a=1",
            "--from-literal=b=2",
        ],
        None,
    );
    let out = ok(kc, &["get", "configmaps", "cfg"], None);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(columns(lines[0]), ["NAME", "DATA", "AGE"], "{out}");
    assert_eq!(columns(lines[1])[..2], ["cfg", "2"], "{out}");
    let out = ok(kc, &["get", "crds"], None);
    assert_eq!(
        columns(out.lines().next().unwrap()),
        ["NAME", "CREATED AT"],
        "{out}"
    );

    let core = get_json(kc, &["events.v1.", "w1.v1"]);
    assert_eq!(core["involvedObject"]["name"], "w1");
    assert_eq!(core["reportingComponent"], "kmeta");
    let v1 = get_json(kc, &["events.v1.events.k8s.io", "w1.core"]);
    assert_eq!(v1["note"], "hook answered 500");
    assert_eq!(v1["deprecatedSource"]["component"], "kmeta");
}

const GADGETS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Gadget, plural: gadgets, singular: gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer, default: 1}
"#;

#[test]
fn kubectl_apply_reports_fields_the_crd_schema_does_not_declare_or_skips_without_kubectl() {
    if !have_kubectl() {
        return;
    }
    let s = start();
    let kc = s.kubeconfig.as_path();
    ok(kc, &["apply", "-f", "-"], Some(GADGETS));
    ok(
        kc,
        &[
            "wait",
            "--for=condition=Established",
            "crd/gadgets.example.com",
            "--timeout=15s",
        ],
        None,
    );
    let typo = "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g, namespace: default}\nspec: {replcas: 3}\n";
    // kubectl validates strictly by default: the typo is an error, nothing is created
    let (success, _, err) = kubectl(kc, &["apply", "-f", "-"], Some(typo));
    assert!(!success);
    assert!(
        err.contains("strict decoding error: unknown field \"spec.replcas\""),
        "{err}"
    );
    let (found, _, _) = kubectl(kc, &["get", "gadget", "g"], None);
    assert!(!found);
    // --validate=warn: created without the field, kubectl prints the server's warning
    let (success, _, err) = kubectl(kc, &["apply", "--validate=warn", "-f", "-"], Some(typo));
    assert!(success, "{err}");
    assert!(
        err.contains("Warning: unknown field \"spec.replcas\""),
        "{err}"
    );
    let g = get_json(kc, &["gadget", "g"]);
    assert_eq!(
        g["spec"],
        serde_json::json!({"replicas": 1}),
        "pruned, then defaulted"
    );

    // built-in kinds too: what their typed API does not declare
    let cm =
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: default}\ndataa: {a: b}\n";
    let (success, _, err) = kubectl(kc, &["apply", "-f", "-"], Some(cm));
    assert!(!success);
    assert!(
        err.contains(
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"dataa\""
        ),
        "{err}"
    );
    let (success, _, err) = kubectl(kc, &["apply", "--validate=warn", "-f", "-"], Some(cm));
    assert!(success, "{err}");
    assert!(err.contains("Warning: unknown field \"dataa\""), "{err}");
    assert!(get_json(kc, &["cm", "c"]).get("dataa").is_none());
}

/// kubectl explain reads `/openapi/v3`: the published schemas of built-in kinds (descriptions,
/// nested `$ref`s) and a CRD's schema.
#[test]
fn kubectl_explain_reads_built_in_and_crd_schemas_or_skips_without_kubectl() {
    if !have_kubectl() {
        return;
    }
    let s = start();
    let kc = s.kubeconfig.as_path();
    let out = ok(
        kc,
        &["explain", "deployment.spec.template.spec.containers"],
        None,
    );
    for expected in [
        "KIND:       Deployment",
        "FIELD: containers <[]Container>",
        "List of containers belonging to the pod.",
        "image\t<string>",
    ] {
        assert!(out.contains(expected), "{expected:?} missing in:\n{out}");
    }
    let out = ok(kc, &["explain", "endpointslices.ports"], None);
    assert!(out.contains("FIELD: ports <[]EndpointPort>"), "{out}");
    ok(kc, &["apply", "-f", "-"], Some(GADGETS));
    ok(
        kc,
        &[
            "wait",
            "--for=condition=Established",
            "crd/gadgets.example.com",
            "--timeout=15s",
        ],
        None,
    );
    let out = ok(kc, &["explain", "gadgets.spec"], None);
    assert!(out.contains("replicas\t<integer>"), "{out}");
}

/// kubectl against the admission configurations: a ValidatingWebhookConfiguration applied from
/// YAML, listed, and its webhook (an HTTP server in this test) refusing a ConfigMap with the
/// message kubectl prints, and its warning printed on an allowed one.
#[test]
fn kubectl_applies_webhook_configurations_and_prints_denials_and_warnings_or_skips_without_kubectl()
{
    if !have_kubectl() {
        return;
    }
    let url = deny_bad_data_webhook();
    let s = start();
    let kc = s.kubeconfig.as_path();
    let config = format!(
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: deny-bad
webhooks:
- name: deny.example.com
  clientConfig:
    url: {url}
  rules:
  - operations: ["CREATE", "UPDATE"]
    apiGroups: [""]
    apiVersions: ["v1"]
    resources: ["configmaps"]
  sideEffects: None
  admissionReviewVersions: ["v1"]
"#
    );
    ok(kc, &["apply", "-f", "-"], Some(&config));
    let listed = ok(kc, &["get", "validatingwebhookconfigurations"], None);
    assert!(listed.contains("deny-bad"), "{listed}");
    let ar = ok(
        kc,
        &["api-resources", "--api-group=admissionregistration.k8s.io"],
        None,
    );
    assert!(ar.contains("validatingwebhookconfigurations"), "{ar}");
    let (good, _, stderr) = kubectl(
        kc,
        &["create", "configmap", "fine", "--from-literal=a=b"],
        None,
    );
    assert!(good, "{stderr}");
    assert!(
        stderr.contains("Warning: checked by deny.example.com"),
        "{stderr}"
    );
    let (created, _, stderr) = kubectl(
        kc,
        &["create", "configmap", "evil", "--from-literal=bad=1"],
        None,
    );
    assert!(!created);
    assert!(
        stderr.contains(
            "admission webhook \"deny.example.com\" denied the request: configmap evil carries bad data"
        ),
        "{stderr}"
    );
    // a ValidatingAdmissionPolicy and its binding, from YAML
    ok(kc, &["apply", "-f", "-"], Some(POLICY));
    let listed = ok(
        kc,
        &[
            "get",
            "validatingadmissionpolicies,validatingadmissionpolicybindings",
        ],
        None,
    );
    assert!(listed.contains("no-forbidden"), "{listed}");
    let (created, _, stderr) = kubectl(
        kc,
        &[
            "create",
            "configmap",
            "locked",
            "--from-literal=forbidden=1",
        ],
        None,
    );
    assert!(!created);
    assert!(
        stderr.contains(
            "ValidatingAdmissionPolicy 'no-forbidden' with binding 'no-forbidden' denied request: the key forbidden is not allowed"
        ),
        "{stderr}"
    );
    // a MutatingAdmissionPolicy and its binding, from YAML: the ConfigMaps kubectl creates next
    // carry its label
    ok(kc, &["apply", "-f", "-"], Some(MUTATING_POLICY));
    let listed = ok(
        kc,
        &[
            "get",
            "mutatingadmissionpolicies,mutatingadmissionpolicybindings",
        ],
        None,
    );
    assert!(listed.contains("stamp"), "{listed}");
    ok(
        kc,
        &["create", "configmap", "stamped", "--from-literal=a=b"],
        None,
    );
    assert_eq!(
        get_json(kc, &["cm", "stamped"])["metadata"]["labels"]["stamped"],
        "yes"
    );
}

const MUTATING_POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: stamp
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["configmaps"]
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{metadata: Object.metadata{labels: {'stamped': 'yes'}}}"
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: stamp
spec:
  policyName: stamp
"#;

const POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: no-forbidden
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["configmaps"]
  validations:
  - expression: "!has(object.data) || !('forbidden' in object.data)"
    message: the key forbidden is not allowed
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: no-forbidden
spec:
  policyName: no-forbidden
  validationActions: [Deny]
"#;

/// An admission webhook on its own thread: refuses objects with `data.bad`, warns on the rest.
fn deny_bad_data_webhook() -> String {
    use axum::Json;
    use serde_json::{Value, json};
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let app = axum::Router::new().route(
                "/",
                axum::routing::post(|Json(req): Json<Value>| async move {
                    let obj = &req["request"]["object"];
                    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
                    let mut resp = json!({"uid": req["request"]["uid"], "allowed": true,
                        "warnings": ["checked by deny.example.com"]});
                    if obj["data"]["bad"].is_string() {
                        resp = json!({"uid": req["request"]["uid"], "allowed": false,
                            "status": {"code": 403, "reason": "Forbidden",
                                "message": format!("configmap {name} carries bad data")}});
                    }
                    Json(
                        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                        "response": resp}),
                    )
                }),
            );
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(format!("http://{}/", l.local_addr().unwrap()))
                .unwrap();
            axum::serve(l, app).await.unwrap();
        });
    });
    rx.recv().unwrap()
}
