//! The demo's sync hook: a pure function of the hook request, and the HTTP server that answers
//! kmeta with it and counts what it was asked.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::*;

/// Why the demo's sync hook rejects a parent.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// `spec.template` is missing or not an object.
    #[error("webapp {name}: spec.template must be an object")]
    NoTemplate {
        /// The parent.
        name: String,
    },
    /// No image anywhere: neither `spec.image` nor the app container's own.
    #[error("webapp {name}: spec.image must be set")]
    NoImage {
        /// The parent.
        name: String,
    },
}

/// The demo's sync hook, as a pure function of the hook request: one Deployment named like the
/// parent, whose pod template is the parent's `spec.template` with `spec.image` on the `app`
/// container and the parent's label added; `spec.replicas` (default 1) as the Deployment's.
/// The status reports the desired replicas and what the observed Deployment runs (kmeta adds
/// `observedGeneration` itself).
pub fn sync_hook(request: &Value) -> Result<Value, HookError> {
    let parent = &request["parent"];
    let name = parent
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let Some(Value::Object(mut template)) = parent.pointer("/spec/template").cloned() else {
        return Err(HookError::NoTemplate { name });
    };
    let labels = object_at(&mut template, &["metadata", "labels"]);
    labels.insert(APP_LABEL.into(), json!(name));
    let pod = object_at(&mut template, &["spec"]);
    let containers = pod
        .entry("containers")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !containers.is_array() {
        *containers = Value::Array(Vec::new());
    }
    if let Value::Array(list) = containers {
        if !list.iter().any(|c| c["name"] == APP_CONTAINER) {
            list.insert(0, json!({"name": APP_CONTAINER}));
        }
        for c in list.iter_mut().filter(|c| c["name"] == APP_CONTAINER) {
            let image = parent
                .pointer("/spec/image")
                .or_else(|| c.get("image"))
                .filter(|i| i.is_string())
                .cloned()
                .ok_or_else(|| HookError::NoImage { name: name.clone() })?;
            // name and image first, then the rest as the parent wrote it (easier to read)
            let mut ordered = Map::new();
            ordered.insert("name".into(), json!(APP_CONTAINER));
            ordered.insert("image".into(), image);
            if let Value::Object(rest) = c {
                for (k, v) in rest.iter() {
                    ordered.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            *c = Value::Object(ordered);
        }
    }
    let replicas = parent
        .pointer("/spec/replicas")
        .cloned()
        .unwrap_or(json!(1));
    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {APP_LABEL: name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {APP_LABEL: name}},
            "template": template,
        }
    });
    let observed = request
        .pointer("/children/Deployment.apps~1v1")
        .and_then(|m| m.get(&name));
    let running: Vec<Value> = observed
        .and_then(|d| d.pointer("/spec/template/spec/containers"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| json!({"name": c["name"], "image": c["image"]}))
        .collect();
    Ok(json!({
        "status": {"replicas": replicas, "containers": running},
        "children": [deployment],
    }))
}

/// The object at `path` under `map`, created (or replaced when not an object) on the way.
pub(super) fn object_at<'a>(
    map: &'a mut Map<String, Value>,
    path: &[&str],
) -> &'a mut Map<String, Value> {
    let mut cur = map;
    for key in path {
        let v = cur.entry(*key).or_insert_with(|| Value::Object(Map::new()));
        if !v.is_object() {
            *v = Value::Object(Map::new());
        }
        let Value::Object(next) = v else {
            unreachable!("just made an object")
        };
        cur = next;
    }
    cur
}

/// What the built-in hook server counts.
#[derive(Default)]
pub(super) struct HookState {
    pub(super) calls: AtomicU64,
    /// The `demo.kmeta.dev/touch` annotation of every parent the hook was asked about.
    pub(super) touches: Mutex<Vec<String>>,
    /// The pod template containers of the hook's last desired Deployment.
    pub(super) desired: Mutex<Value>,
}

pub(super) async fn serve_sync(
    State(state): State<Arc<HookState>>,
    body: axum::body::Bytes,
) -> Response {
    state.calls.fetch_add(1, Ordering::SeqCst);
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("bad request: {e}")).into_response(),
    };
    if let Some(t) = request
        .pointer("/parent/metadata/annotations")
        .and_then(|a| a.get(TOUCH))
        .and_then(Value::as_str)
        && let Ok(mut touches) = state.touches.lock()
    {
        touches.push(t.to_owned());
    }
    match sync_hook(&request) {
        Ok(response) => {
            if let Ok(mut d) = state.desired.lock() {
                *d = response["children"][0]["spec"]["template"]["spec"]["containers"].clone();
            }
            axum::Json(response).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The demo's sync hook server, running.
pub(super) struct HookServer {
    /// What it counts.
    pub(super) state: Arc<HookState>,
    /// Its `/sync` URL.
    pub(super) url: String,
    /// Stops it gracefully.
    pub(super) stop: CancellationToken,
    /// Its task (aborted when dropped).
    pub(super) task: AbortOnDrop,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(spec: Value, children: Value) -> Value {
        json!({
            "controller": {},
            "parent": {"apiVersion": PARENT_API_VERSION, "kind": "WebApp",
                       "metadata": {"name": "shop", "namespace": "ns", "generation": 3},
                       "spec": spec},
            "children": children,
        })
    }

    #[test]
    fn deployment_from_the_parents_template_and_image() {
        let req = request(
            json!({"image": "nginx:2", "replicas": 3, "template": {
                "metadata": {"labels": {"tier": "fe"}},
                "spec": {"containers": [{"name": "app", "ports": [{"containerPort": 80}]},
                                        {"name": "log", "image": "fluent:1"}]}}}),
            json!({"Deployment.apps/v1": {}}),
        );
        let resp = sync_hook(&req).expect("syncs");
        let d = &resp["children"][0];
        assert_eq!(resp["children"].as_array().map(Vec::len), Some(1));
        assert_eq!(d["apiVersion"], "apps/v1");
        assert_eq!(d["metadata"]["name"], "shop");
        assert_eq!(d["spec"]["replicas"], 3);
        assert_eq!(
            d["spec"]["selector"]["matchLabels"],
            json!({APP_LABEL: "shop"})
        );
        assert_eq!(
            d["spec"]["template"]["metadata"]["labels"],
            json!({"tier": "fe", APP_LABEL: "shop"})
        );
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"],
            json!([{"name": "app", "image": "nginx:2", "ports": [{"containerPort": 80}]},
                   {"name": "log", "image": "fluent:1"}])
        );
        assert_eq!(resp["status"], json!({"replicas": 3, "containers": []}));
    }

    #[test]
    fn status_reports_the_observed_containers() {
        let req = request(
            json!({"image": "a:1", "template": {"spec": {}}}),
            json!({"Deployment.apps/v1": {"shop": {"spec": {"template": {"spec": {"containers": [
                {"name": "app", "image": "a:1"}, {"name": SIDECAR, "image": "proxy:1"}]}}}}}}),
        );
        let resp = sync_hook(&req).expect("syncs");
        assert_eq!(
            resp["children"][0]["spec"]["template"]["spec"]["containers"],
            json!([{"name": "app", "image": "a:1"}])
        );
        assert_eq!(
            resp["status"],
            json!({"replicas": 1, "containers": [
                {"name": "app", "image": "a:1"}, {"name": SIDECAR, "image": "proxy:1"}]})
        );
    }

    #[test]
    fn parent_without_template_or_image_is_rejected() {
        let e = sync_hook(&request(json!({"image": "a:1"}), json!({}))).expect_err("no template");
        assert!(e.to_string().contains("spec.template"), "{e}");
        let e = sync_hook(&request(json!({"template": {}}), json!({}))).expect_err("no image");
        assert!(e.to_string().contains("spec.image"), "{e}");
    }
}
