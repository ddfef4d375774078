//! The sidecar-safe hook: one `apps/v1` Deployment per `WebApp`, built from the WebApp's
//! embedded pod template; the WebApp's status reports what the observed Deployment runs.
//!
//! The hook only says what it wants (its containers); kmeta's dynamic apply merges that with
//! what others added to the live Deployment (an injected sidecar), so the sidecar survives
//! image updates and a resync with nothing new writes nothing.

use kmeta_hook::{Hooks, SyncRequest, SyncResponse, child};
use serde_json::{Map, Value, json};

/// The parent's kind and apiVersion.
pub const PARENT_KIND: (&str, &str) = ("WebApp", "examples.kmeta.dev/v1alpha1");

/// Why a WebApp cannot be synced.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// `spec.template` is missing or not an object.
    #[error("webapp {name}: spec.template must be an object")]
    NoTemplate {
        /// The WebApp.
        name: String,
    },
    /// `spec.template.spec.containers` is missing or empty.
    #[error("webapp {name}: spec.template.spec.containers must list at least one container")]
    NoContainers {
        /// The WebApp.
        name: String,
    },
}

/// The label that ties the Deployment's pods to their WebApp.
pub const APP_LABEL: &str = "webapps.examples.kmeta.dev/name";

/// The sync hook.
pub fn sync(req: SyncRequest) -> Result<SyncResponse, HookError> {
    let name = req.parent_name().to_owned();
    let mut template = match req.parent_field("/spec/template") {
        Some(Value::Object(t)) => t.clone(),
        _ => return Err(HookError::NoTemplate { name }),
    };
    let has_containers = template
        .get("spec")
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array)
        .is_some_and(|c| !c.is_empty());
    if !has_containers {
        return Err(HookError::NoContainers { name });
    }
    // the pods carry the WebApp's label so the Deployment's selector finds them
    let meta = template
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(APP_LABEL.into(), Value::String(name.clone()));
        }
    }
    let mut spec = json!({
        "selector": {"matchLabels": {APP_LABEL: name}},
        "template": template,
    });
    if let Some(r) = req.parent_field("/spec/replicas") {
        spec["replicas"] = r.clone();
    }
    let deployment = child("apps/v1", "Deployment", &name)
        .label(APP_LABEL, &name)
        .spec(spec)
        .build();

    let observed = req
        .children
        .get("Deployment", "apps/v1", req.parent_namespace(), &name);
    let status = match observed {
        None => json!({"deployment": null, "readyReplicas": 0, "containers": []}),
        Some(d) => {
            let containers: Vec<Value> = d
                .pointer("/spec/template/spec/containers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| json!({"name": c["name"], "image": c["image"]}))
                .collect();
            json!({
                "deployment": name,
                "readyReplicas": d.pointer("/status/readyReplicas").cloned().unwrap_or(json!(0)),
                "containers": containers,
            })
        }
    };
    Ok(SyncResponse::new().child(deployment).status(status))
}

/// The hook server's routes (`POST /sync`).
pub fn hooks() -> Hooks {
    kmeta_hook::router().sync(sync)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(parent_spec: Value, children: Value) -> SyncRequest {
        serde_json::from_value(json!({
            "controller": {},
            "parent": {"apiVersion": PARENT_KIND.1, "kind": PARENT_KIND.0,
                       "metadata": {"name": "shop", "namespace": "ns"}, "spec": parent_spec},
            "children": children,
            "related": {},
            "finalizing": false
        }))
        .expect("request")
    }

    #[test]
    fn desired_deployment_from_the_template() {
        let req = request(
            json!({"replicas": 2, "template": {"metadata": {"labels": {"tier": "fe"}},
                    "spec": {"containers": [{"name": "app", "image": "nginx:1"}]}}}),
            json!({"Deployment.apps/v1": {}}),
        );
        let resp = sync(req).expect("syncs");
        assert_eq!(resp.children.len(), 1);
        let d = &resp.children[0];
        assert_eq!(d["metadata"]["name"], "shop");
        assert_eq!(d["spec"]["replicas"], 2);
        assert_eq!(d["spec"]["selector"]["matchLabels"][APP_LABEL], "shop");
        assert_eq!(
            d["spec"]["template"]["metadata"]["labels"],
            json!({"tier": "fe", APP_LABEL: "shop"})
        );
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx:1"
        );
        assert_eq!(resp.status.expect("status")["deployment"], Value::Null);
    }

    #[test]
    fn status_from_the_observed_deployment() {
        let req = request(
            json!({"template": {"spec": {"containers": [{"name": "app", "image": "a:1"}]}}}),
            json!({"Deployment.apps/v1": {"shop": {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "shop", "namespace": "ns"},
                "spec": {"template": {"spec": {"containers": [
                    {"name": "app", "image": "a:1"}, {"name": "proxy", "image": "envoy"}]}}},
                "status": {"readyReplicas": 1}}}}),
        );
        let status = sync(req).expect("syncs").status.expect("status");
        assert_eq!(
            status,
            json!({"deployment": "shop", "readyReplicas": 1, "containers": [
                {"name": "app", "image": "a:1"}, {"name": "proxy", "image": "envoy"}]})
        );
    }

    #[test]
    fn missing_template_or_containers_is_an_error() {
        let err = sync(request(json!({}), json!({}))).expect_err("no template");
        assert!(err.to_string().contains("spec.template"));
        let err = sync(request(json!({"template": {"spec": {}}}), json!({}))).expect_err("none");
        assert!(err.to_string().contains("containers"));
    }
}
