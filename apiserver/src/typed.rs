//! Unknown fields of built-in kinds, found through the typed Kubernetes API (k8s-openapi).
//!
//! kube-apiserver decodes a built-in object into its Go type, so a field the type does not have
//! is dropped (and, with `fieldValidation=Strict`, rejected). This server stores objects as JSON;
//! to behave the same it decodes a copy into the k8s-openapi type, encodes it back, and treats
//! every key of the request that did not survive the round trip as unknown: it is removed from
//! the object and reported. Values are never taken from the round trip (the request's own
//! spelling of quantities, timestamps and numbers is kept). A body that does not decode into the
//! type (a wrong value type) is left alone.

use serde_json::Value;

/// Removes from `obj` (a built-in kind's object of `group`) the fields its typed API does not
/// declare, returning their paths (`spec.replcas`, `spec.template.spec.containers[0].imag`).
/// Kinds without a typed mapping, and bodies that do not decode, return no paths.
pub(crate) fn prune_unknown(group: &str, kind: &str, obj: &mut Value) -> Vec<String> {
    let Some(typed) = round_trip(group, kind, obj) else {
        return Vec::new();
    };
    let mut unknown = Vec::new();
    prune(obj, &typed, "", &mut unknown);
    unknown
}

/// The object decoded into its k8s-openapi type and encoded again.
fn round_trip(group: &str, kind: &str, obj: &Value) -> Option<Value> {
    use k8s_openapi::api::{
        admissionregistration::v1 as admissionregistration, apps::v1 as apps, batch::v1 as batch,
        coordination::v1 as coordination, core::v1 as core, discovery::v1 as discovery,
        events::v1 as events, networking::v1 as networking, policy::v1 as policy, rbac::v1 as rbac,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
    fn via<T: serde::de::DeserializeOwned + serde::Serialize>(obj: &Value) -> Option<Value> {
        // decoded from the borrowed value: no copy of the object first
        let typed = T::deserialize(obj).ok()?;
        serde_json::to_value(typed).ok()
    }
    match (group, kind) {
        ("", "Namespace") => via::<core::Namespace>(obj),
        ("", "ConfigMap") => via::<core::ConfigMap>(obj),
        ("", "Secret") => via::<core::Secret>(obj),
        ("", "Service") => via::<core::Service>(obj),
        ("", "ServiceAccount") => via::<core::ServiceAccount>(obj),
        ("", "Pod") => via::<core::Pod>(obj),
        ("", "Event") => via::<core::Event>(obj),
        ("", "Endpoints") => via::<core::Endpoints>(obj),
        ("", "PersistentVolumeClaim") => via::<core::PersistentVolumeClaim>(obj),
        ("", "ResourceQuota") => via::<core::ResourceQuota>(obj),
        ("", "Node") => via::<core::Node>(obj),
        ("events.k8s.io", "Event") => via::<events::Event>(obj),
        ("apps", "Deployment") => via::<apps::Deployment>(obj),
        ("apps", "StatefulSet") => via::<apps::StatefulSet>(obj),
        ("apps", "DaemonSet") => via::<apps::DaemonSet>(obj),
        ("apps", "ReplicaSet") => via::<apps::ReplicaSet>(obj),
        ("apps", "ControllerRevision") => via::<apps::ControllerRevision>(obj),
        ("batch", "Job") => via::<batch::Job>(obj),
        ("batch", "CronJob") => via::<batch::CronJob>(obj),
        ("coordination.k8s.io", "Lease") => via::<coordination::Lease>(obj),
        ("discovery.k8s.io", "EndpointSlice") => via::<discovery::EndpointSlice>(obj),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            via::<admissionregistration::MutatingWebhookConfiguration>(obj)
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            via::<admissionregistration::ValidatingWebhookConfiguration>(obj)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            via::<admissionregistration::ValidatingAdmissionPolicy>(obj)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            via::<admissionregistration::ValidatingAdmissionPolicyBinding>(obj)
        }
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicy") => {
            via::<admissionregistration::MutatingAdmissionPolicy>(obj)
        }
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding") => {
            via::<admissionregistration::MutatingAdmissionPolicyBinding>(obj)
        }
        ("policy", "PodDisruptionBudget") => via::<policy::PodDisruptionBudget>(obj),
        ("networking.k8s.io", "Ingress") => via::<networking::Ingress>(obj),
        ("networking.k8s.io", "NetworkPolicy") => via::<networking::NetworkPolicy>(obj),
        ("rbac.authorization.k8s.io", "Role") => via::<rbac::Role>(obj),
        ("rbac.authorization.k8s.io", "RoleBinding") => via::<rbac::RoleBinding>(obj),
        ("rbac.authorization.k8s.io", "ClusterRole") => via::<rbac::ClusterRole>(obj),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => via::<rbac::ClusterRoleBinding>(obj),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            via::<apiextensions::CustomResourceDefinition>(obj)
        }
        _ => None,
    }
}

/// Removes the keys of `obj` that `typed` lacks (recursing into objects, and into lists of the
/// same length item by item), recording their paths. Nulls are left alone (they decode to an
/// absent optional field, not to an unknown one).
fn prune(obj: &mut Value, typed: &Value, path: &str, unknown: &mut Vec<String>) {
    match (obj, typed) {
        (Value::Object(o), Value::Object(t)) => {
            let mut gone = Vec::new();
            for (k, v) in o.iter_mut() {
                let here = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match t.get(k) {
                    Some(tv) => prune(v, tv, &here, unknown),
                    None if v.is_null() => {}
                    None => {
                        gone.push(k.clone());
                        unknown.push(here);
                    }
                }
            }
            for k in gone {
                o.shift_remove(&k);
            }
        }
        (Value::Array(o), Value::Array(t)) if o.len() == t.len() => {
            for (i, (v, tv)) in o.iter_mut().zip(t).enumerate() {
                prune(v, tv, &format!("{path}[{i}]"), unknown);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_of_a_deployment_are_pruned_with_their_paths() {
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labelz": {"a": "b"}, "annotations": null},
            "spec": {"replcas": 3, "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [
                        {"name": "app", "imag": "nginx", "resources": {"limits": {"cpu": "0.5"}}},
                        {"name": "side", "image": "envoy"}]}}}});
        let unknown = prune_unknown("apps", "Deployment", &mut d);
        assert_eq!(
            unknown,
            [
                "metadata.labelz",
                "spec.replcas",
                "spec.template.spec.containers[0].imag"
            ]
        );
        assert!(d["spec"].get("replcas").is_none());
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"], "0.5",
            "the request's spelling of a quantity is kept"
        );
        assert!(
            d["metadata"]["annotations"].is_null(),
            "nulls are not unknown"
        );
    }

    #[test]
    fn known_objects_and_unmapped_or_undecodable_bodies_are_untouched() {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c",
            "creationTimestamp": "2026-11-23T10:00:00Z"}, "data": {"a": "1"}, "binaryData": {}});
        let before = cm.clone();
        assert!(prune_unknown("", "ConfigMap", &mut cm).is_empty());
        assert_eq!(cm, before);
        let mut bad = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "spec": {"replicas": "three", "extra": 1}});
        assert!(prune_unknown("apps", "Deployment", &mut bad).is_empty());
        assert_eq!(
            bad["spec"]["extra"], 1,
            "an undecodable body is left to the rest of the server"
        );
        let mut other = json!({"kind": "Widget", "x": 1});
        assert!(prune_unknown("example.com", "Widget", &mut other).is_empty());
    }

    #[test]
    fn every_builtin_kind_has_a_typed_mapping() {
        for def in crate::registry::Registry::with_builtins().all() {
            let mut obj = json!({"metadata": {"name": "x"}, "zzUnknown": 1});
            let unknown = prune_unknown(&def.group, &def.kind, &mut obj);
            assert_eq!(unknown, ["zzUnknown"], "{}/{}", def.group, def.kind);
        }
    }
}
