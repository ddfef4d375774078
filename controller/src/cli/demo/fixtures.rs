//! What the demo creates: the `WebApp` CRD, its CompositeController, the parent, and the
//! simulated mutating admission webhook that injects the sidecar.

use kmeta_apiserver::Operation;
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use super::*;

pub(super) fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// `name=image` of every container in the pod template.
pub(super) fn containers(obj: &Value) -> Vec<(String, String)> {
    obj.pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (s("name"), s("image"))
        })
        .collect()
}

pub(super) fn describe(cs: &[(String, String)]) -> String {
    if cs.is_empty() {
        return "no containers".into();
    }
    let names: Vec<String> = cs.iter().map(|(n, i)| format!("{n} ({i})")).collect();
    format!("containers {}", names.join(", "))
}

pub(super) fn sidecar() -> Value {
    json!({"name": SIDECAR, "image": "docker.io/istio/proxyv2:1.24.0", "args": ["proxy", "sidecar"]})
}

pub(super) fn webapp_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("webapps.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": "WebApp", "plural": "webapps", "singular": "webapp",
                      "listKind": "WebAppList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "image": {"type": "string"},
                        "replicas": {"type": "integer", "minimum": 0},
                        "template": {"type": "object",
                                     "x-kubernetes-preserve-unknown-fields": true}
                    }},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    })
}

pub(super) fn composite_controller(hook_url: &str) -> Value {
    json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "CompositeController",
        "metadata": {"name": CONTROLLER},
        "spec": {
            "generateSelector": true,
            "parentResource": {"apiVersion": PARENT_API_VERSION, "resource": "webapps"},
            "childResources": [{"apiVersion": "apps/v1", "resource": "deployments",
                                "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"webhook": {"url": hook_url}}}
        }
    })
}

pub(super) fn parent() -> Value {
    json!({
        "apiVersion": PARENT_API_VERSION,
        "kind": "WebApp",
        "metadata": {"name": PARENT, "namespace": NAMESPACE},
        "spec": {
            "image": "nginx:1.27",
            "replicas": 2,
            "template": {
                "metadata": {"labels": {"tier": "frontend"}},
                "spec": {"containers": [{"name": APP_CONTAINER, "ports": [{"containerPort": 80}]}]}
            }
        }
    })
}

/// Injects the sidecar on CREATE only, as a real injector does: later updates keep it only if
/// the writer keeps it.
pub(super) fn inject(
    obj: &mut Value,
    op: Operation,
) -> Result<(), kmeta_apiserver::AdmissionError> {
    if op == Operation::Create
        && let Some(cs) = obj
            .pointer_mut("/spec/template/spec/containers")
            .and_then(Value::as_array_mut)
        && !cs.iter().any(|c| c["name"] == SIDECAR)
    {
        cs.push(sidecar());
    }
    Ok(())
}

pub(super) fn established(crd: &Value) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        })
}
