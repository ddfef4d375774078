//! kmeta-apiserver's server-side apply as kubectl v1.32 sees it (`kubectl apply --server-side`
//! with two field managers, with and without `--force-conflicts`): the conflict errors kubectl
//! prints, the managed fields stored per manager, `x-kubernetes-list-type: map` merges and the
//! lists of a `x-kubernetes-preserve-unknown-fields` subtree. Expected values follow
//! kube-apiserver (k8s.io/apiserver fieldmanager/internal/conflict.go for the messages,
//! structured-merge-diff for the merges; kube-openapi schemaconv's `__untyped_deduced_` type for
//! preserve-unknown-fields: lists atomic, maps field by field). Skips without kubectl, fails then
//! under CI (`KMETA_CI=1`).
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

mod common;

use common::*;
use serde_json::{Value, json};
use std::path::Path;

/// `kubectl apply --server-side` of `manifest` as `manager` (forcing when `force`).
fn apply(kc: &Path, manager: &str, force: bool, manifest: &str) -> (bool, String, String) {
    let field_manager = format!("--field-manager={manager}");
    let mut args = vec!["apply", "--server-side", field_manager.as_str(), "-f", "-"];
    if force {
        args.push("--force-conflicts");
    }
    kubectl(kc, &args, Some(manifest))
}

/// A ConfigMap `cm` in namespace `ssa` with `data`.
fn configmap(data: &Value) -> String {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "ssa"}, "data": data})
    .to_string()
}

/// The managedFields entry of `manager` (its operation and owned fields).
fn entry<'a>(obj: &'a Value, manager: &str) -> Option<&'a Value> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager)
}

/// The field keys `manager` owns under `fieldsV1` at `pointer`, sorted.
fn owned(obj: &Value, manager: &str, pointer: &str) -> Vec<String> {
    let mut keys: Vec<String> = entry(obj, manager)
        .and_then(|e| e["fieldsV1"].pointer(pointer))
        .and_then(Value::as_object)
        .map(|m| m.keys().filter(|k| *k != ".").cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

#[test]
fn kubectl_server_side_apply_conflicts_and_managed_fields_or_skips_without_kubectl() {
    if !have_kubectl() {
        return;
    }
    let s = start();
    let kc = s.kubeconfig.as_path();
    ok(kc, &["create", "ns", "ssa"], None);
    let (applied, out, err) = apply(kc, "mgr-a", false, &configmap(&json!({"a": "1", "b": "1"})));
    assert!(applied && out.contains("serverside-applied"), "{out}{err}");

    // one conflict: the exact line kube-apiserver words, then kubectl's advice
    let (applied, _, err) = apply(kc, "mgr-b", false, &configmap(&json!({"a": "2", "c": "1"})));
    assert!(!applied);
    assert!(
        err.contains(r#"Apply failed with 1 conflict: conflict with "mgr-a": .data.a"#),
        "{err}"
    );
    assert!(err.contains("--force-conflicts"), "{err}");
    let cm = get_json(kc, &["cm", "cm", "-n", "ssa", "--show-managed-fields"]);
    assert_eq!(cm["data"], json!({"a": "1", "b": "1"}), "nothing written");
    assert!(entry(&cm, "mgr-b").is_none(), "{cm}");

    // several conflicts are grouped by manager
    let (applied, _, err) = apply(kc, "mgr-b", false, &configmap(&json!({"a": "2", "b": "2"})));
    assert!(!applied);
    assert!(
        err.contains(
            "Apply failed with 2 conflicts: conflicts with \"mgr-a\":\n- .data.a\n- .data.b"
        ),
        "{err}"
    );

    // a field owned through an update (kubectl edit, patch) is named with its API version
    ok(
        kc,
        &[
            "patch",
            "cm",
            "cm",
            "-n",
            "ssa",
            "--field-manager=editor",
            "-p",
            r#"{"data":{"d":"1"}}"#,
        ],
        None,
    );
    let (applied, _, err) = apply(
        kc,
        "mgr-a",
        false,
        &configmap(&json!({"a": "1", "b": "1", "d": "2"})),
    );
    assert!(!applied);
    assert!(
        err.contains(r#"Apply failed with 1 conflict: conflict with "editor" using v1: .data.d"#),
        "{err}"
    );

    // forcing takes the field: its owner loses it, the rest stays shared out per manager
    let (applied, out, err) = apply(kc, "mgr-b", true, &configmap(&json!({"a": "2", "c": "1"})));
    assert!(applied, "{out}{err}");
    let cm = get_json(kc, &["cm", "cm", "-n", "ssa", "--show-managed-fields"]);
    assert_eq!(
        cm["data"],
        json!({"a": "2", "b": "1", "c": "1", "d": "1"}),
        "{cm}"
    );
    assert_eq!(owned(&cm, "mgr-a", "/f:data"), ["f:b"], "{cm}");
    assert_eq!(owned(&cm, "mgr-b", "/f:data"), ["f:a", "f:c"], "{cm}");
    assert_eq!(owned(&cm, "editor", "/f:data"), ["f:d"], "{cm}");
    assert_eq!(entry(&cm, "mgr-b").unwrap()["operation"], "Apply");
    assert_eq!(entry(&cm, "editor").unwrap()["operation"], "Update");

    // a manager that stops applying a field it alone owns removes it
    let (applied, out, err) = apply(kc, "mgr-a", false, &configmap(&json!({})));
    assert!(applied, "{out}{err}");
    let cm = get_json(kc, &["cm", "cm", "-n", "ssa"]);
    assert_eq!(cm["data"], json!({"a": "2", "c": "1", "d": "1"}), "{cm}");
}

const PORTS_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gateways.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Gateway, plural: gateways}
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
              ports:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    port: {type: integer}
              template:
                type: object
                x-kubernetes-preserve-unknown-fields: true
"#;

/// A Gateway `gw` in namespace `ssa` with `spec`.
fn gateway(spec: &Value) -> String {
    json!({"apiVersion": "example.com/v1", "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": "ssa"}, "spec": spec})
    .to_string()
}

#[test]
fn kubectl_server_side_apply_merges_list_maps_and_replaces_unknown_lists_or_skips_without_kubectl()
{
    if !have_kubectl() {
        return;
    }
    let s = start();
    let kc = s.kubeconfig.as_path();
    ok(kc, &["create", "ns", "ssa"], None);
    ok(kc, &["apply", "-f", "-"], Some(PORTS_CRD));
    ok(
        kc,
        &[
            "wait",
            "--for=condition=Established",
            "crd/gateways.example.com",
            "--timeout=15s",
        ],
        None,
    );
    let first = json!({
        "ports": [{"name": "http", "port": 80}],
        "template": {"containers": [{"name": "app"}], "labels": {"app": "gw"}}
    });
    let (applied, out, err) = apply(kc, "mgr-a", false, &gateway(&first));
    assert!(applied, "{out}{err}");

    // list-type map: each manager's items are merged by key, and owned per key
    let second = json!({"ports": [{"name": "metrics", "port": 9090}]});
    let (applied, out, err) = apply(kc, "mgr-b", false, &gateway(&second));
    assert!(applied, "{out}{err}");
    let gw = get_json(kc, &["gateway", "gw", "-n", "ssa", "--show-managed-fields"]);
    assert_eq!(
        gw["spec"]["ports"],
        json!([{"name": "http", "port": 80}, {"name": "metrics", "port": 9090}]),
        "{gw}"
    );
    assert_eq!(
        owned(&gw, "mgr-a", "/f:spec/f:ports"),
        [r#"k:{"name":"http"}"#],
        "{gw}"
    );
    assert_eq!(
        owned(&gw, "mgr-b", "/f:spec/f:ports"),
        [r#"k:{"name":"metrics"}"#],
        "{gw}"
    );
    // an item's field owned by another manager conflicts, named by its key
    let clash = json!({"ports": [{"name": "http", "port": 8080}]});
    let (applied, _, err) = apply(kc, "mgr-b", false, &gateway(&clash));
    assert!(!applied);
    assert!(
        err.contains(
            r#"Apply failed with 1 conflict: conflict with "mgr-a": .spec.ports[name="http"].port"#
        ),
        "{err}"
    );

    // in a preserve-unknown-fields subtree a list is atomic: the whole list is one field, so
    // another manager's apply replaces it whole (after a conflict on it), while maps there
    // merge field by field
    let sidecar = json!({"template": {"containers": [{"name": "sidecar"}]}});
    let (applied, _, err) = apply(kc, "mgr-b", false, &gateway(&sidecar));
    assert!(!applied);
    assert!(
        err.contains(
            r#"Apply failed with 1 conflict: conflict with "mgr-a": .spec.template.containers"#
        ),
        "{err}"
    );
    let (applied, out, err) = apply(kc, "mgr-b", true, &gateway(&sidecar));
    assert!(applied, "{out}{err}");
    let gw = get_json(kc, &["gateway", "gw", "-n", "ssa", "--show-managed-fields"]);
    assert_eq!(
        gw["spec"]["template"],
        json!({"containers": [{"name": "sidecar"}], "labels": {"app": "gw"}}),
        "{gw}"
    );
    assert_eq!(
        owned(&gw, "mgr-b", "/f:spec/f:template"),
        ["f:containers"],
        "{gw}"
    );
    assert_eq!(
        owned(&gw, "mgr-a", "/f:spec/f:template"),
        ["f:labels"],
        "{gw}"
    );
    assert_eq!(
        gw["spec"]["ports"],
        json!([{"name": "http", "port": 80}]),
        "mgr-b's apply without ports removed its own port and left mgr-a's: {gw}"
    );
}
