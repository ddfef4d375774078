//! Reading render's files: manifests (several documents or a `List`), the kinds of child
//! resources (built in, from a CRD, or from an object of that kind), and the offline client that
//! serves the hook client's reads from `--hook-objects` files.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::RenderError;

/// The objects in the file `path` (several documents, a `List`'s items).
pub(crate) fn read_docs(path: &Path) -> Result<Vec<Value>, RenderError> {
    let text = std::fs::read_to_string(path).map_err(|source| RenderError::Read {
        path: path.to_owned(),
        source,
    })?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|e| RenderError::Input {
        path: path.to_owned(),
        message: crate::manifest::yaml_error(&e),
    })?;
    let mut out = Vec::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        // a List (`kubectl get -o yaml`) is its items
        match doc.get("items").and_then(Value::as_array) {
            Some(items) if doc["kind"].as_str().is_some_and(|k| k.ends_with("List")) => {
                out.extend(items.iter().cloned());
            }
            _ => out.push(doc),
        }
    }
    Ok(out)
}

/// Every object in the files `paths`.
pub fn read_all(paths: &[PathBuf]) -> Result<Vec<Value>, RenderError> {
    let mut out = Vec::new();
    for p in paths {
        out.extend(read_docs(p)?);
    }
    Ok(out)
}

/// The one object in `path` that `pick` chooses (`what` it is, for the error).
pub fn read_one(
    path: &Path,
    what: &str,
    pick: impl Fn(&Value) -> bool,
) -> Result<Value, RenderError> {
    let docs = read_docs(path)?;
    let mut found = docs.into_iter().filter(|d| pick(d));
    match (found.next(), found.next()) {
        (Some(d), None) => Ok(d),
        (None, _) => Err(RenderError::Input {
            path: path.to_owned(),
            message: format!("no {} in it", what),
        }),
        (Some(_), Some(_)) => Err(RenderError::Input {
            path: path.to_owned(),
            message: format!("more than one {}: give one", what),
        }),
    }
}

/// Kind and scope of the built-in kinds children usually are, by `apiVersion` and plural.
const BUILTIN: &[(&str, &str, &str, bool)] = &[
    ("v1", "configmaps", "ConfigMap", true),
    ("v1", "secrets", "Secret", true),
    ("v1", "services", "Service", true),
    ("v1", "serviceaccounts", "ServiceAccount", true),
    ("v1", "pods", "Pod", true),
    (
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        true,
    ),
    ("v1", "namespaces", "Namespace", false),
    ("apps/v1", "deployments", "Deployment", true),
    ("apps/v1", "statefulsets", "StatefulSet", true),
    ("apps/v1", "daemonsets", "DaemonSet", true),
    ("apps/v1", "replicasets", "ReplicaSet", true),
    ("batch/v1", "jobs", "Job", true),
    ("batch/v1", "cronjobs", "CronJob", true),
    ("networking.k8s.io/v1", "ingresses", "Ingress", true),
    (
        "networking.k8s.io/v1",
        "networkpolicies",
        "NetworkPolicy",
        true,
    ),
    (
        "policy/v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
    ),
    (
        "autoscaling/v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        true,
    ),
    ("rbac.authorization.k8s.io/v1", "roles", "Role", true),
    (
        "rbac.authorization.k8s.io/v1",
        "rolebindings",
        "RoleBinding",
        true,
    ),
    (
        "rbac.authorization.k8s.io/v1",
        "clusterroles",
        "ClusterRole",
        false,
    ),
    (
        "rbac.authorization.k8s.io/v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
    ),
];

/// Kind and scope of child resource `plural` of `api_version`: built in, from a CRD given, or
/// from an observed object of that apiVersion whose kind's plural it is.
pub(crate) fn child_type(
    api_version: &str,
    plural: &str,
    crds: &[Value],
    observed: &[Value],
) -> Result<(String, bool), RenderError> {
    if let Some((_, _, kind, ns)) = BUILTIN
        .iter()
        .find(|(av, p, _, _)| *av == api_version && *p == plural)
    {
        return Ok(((*kind).to_owned(), *ns));
    }
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    for crd in crds {
        let spec = &crd["spec"];
        let served = spec["versions"]
            .as_array()
            .is_some_and(|vs| vs.iter().any(|v| v["name"] == version));
        if spec["group"] == group && spec["names"]["plural"] == plural && served {
            let kind = spec["names"]["kind"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            return Ok((kind, spec["scope"] != "Cluster"));
        }
    }
    for o in observed {
        let kind = o["kind"].as_str().unwrap_or_default();
        let lower = kind.to_ascii_lowercase();
        if o["apiVersion"] == api_version
            && (plural == format!("{lower}s") || plural == format!("{lower}es"))
        {
            let namespaced = o.pointer("/metadata/namespace").is_some();
            return Ok((kind.to_owned(), namespaced));
        }
    }
    Err(RenderError::Controller(format!(
        "child resource {api_version}/{plural}: its kind and scope are unknown here; give its CustomResourceDefinition with --crd"
    )))
}

/// The dynapply options of a child kind, as a sync uses them: the built-in list rules, and a
/// CRD's list markers when its CRD is given.
pub(super) fn child_options(api_version: &str, kind: &str, crds: &[Value]) -> dynapply::Options {
    let mut rules = dynapply::ListRules::builtin(api_version, kind);
    let version = api_version.rsplit_once('/').map_or(api_version, |(_, v)| v);
    for crd in crds.iter().filter(|c| c["spec"]["names"]["kind"] == kind) {
        if let Ok(from_schema) = dynapply::ListRules::from_crd(crd, Some(version)) {
            rules = rules.merge(from_schema);
        }
    }
    dynapply::Options {
        rules,
        ..dynapply::Options::default()
    }
}

/// A client that answers GETs of namespaced objects from `objects` (by namespace, plural of its
/// kind and name) and 404 to everything else: what the hook client reads, without a cluster.
pub(crate) fn files_client(objects: Vec<Value>) -> kube::Client {
    let objects = std::sync::Arc::new(objects);
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let objects = objects.clone();
        async move {
            let (code, body) = answer_get(&objects, req.method(), req.uri().path());
            let mut response =
                http::Response::new(kube::client::Body::from(body.to_string().into_bytes()));
            *response.status_mut() = http::StatusCode::from_u16(code).unwrap_or_default();
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    kube::Client::new(service, "default")
}

/// The answer to `method path` from `objects`: 200 with the object that path names, else a 404
/// Status naming what was asked for and where to give it.
fn answer_get(objects: &[Value], method: &http::Method, path: &str) -> (u16, Value) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let found = match parts.as_slice() {
        [_, .., "namespaces", ns, plural, name] if *method == http::Method::GET => {
            objects.iter().find(|o| {
                o.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns)
                    && o.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
                    && plural_of(o).as_deref() == Some(plural)
            })
        }
        _ => None,
    };
    match found {
        Some(o) => (200, o.clone()),
        None => {
            let message = format!(
                "kmeta render has no cluster: {method} {path} is not among the --hook-objects files"
            );
            let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": message, "reason": "NotFound", "code": 404});
            (404, status)
        }
    }
}

/// The resource name of a built-in object's kind (`ConfigMap` → `configmaps`).
fn plural_of(obj: &Value) -> Option<String> {
    let kind = obj.get("kind")?.as_str()?;
    Some(format!("{}s", kind.to_ascii_lowercase()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_child_kind_is_built_in_from_a_crd_or_from_an_observed_object() {
        assert_eq!(
            child_type("apps/v1", "deployments", &[], &[]).unwrap(),
            ("Deployment".to_owned(), true)
        );
        let crd = json!({"spec": {"group": "example.com", "scope": "Cluster",
            "names": {"plural": "gadgets", "kind": "Gadget"}, "versions": [{"name": "v1"}]}});
        assert_eq!(
            child_type("example.com/v1", "gadgets", std::slice::from_ref(&crd), &[]).unwrap(),
            ("Gadget".to_owned(), false)
        );
        assert!(
            child_type("example.com/v2", "gadgets", &[crd], &[]).is_err(),
            "a version the CRD does not serve"
        );
        let seen = json!({"apiVersion": "example.com/v1", "kind": "Box",
            "metadata": {"name": "b", "namespace": "n"}});
        assert_eq!(
            child_type("example.com/v1", "boxes", &[], &[seen]).unwrap(),
            ("Box".to_owned(), true)
        );
        let e = child_type("example.com/v1", "widgets", &[], &[]).unwrap_err();
        assert!(e.to_string().contains("--crd"), "{e}");
    }

    #[test]
    fn manifests_may_be_several_documents_or_a_list() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.yaml");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n",
        )
        .unwrap();
        let docs = read_docs(&path).unwrap();
        let names: Vec<&str> = docs
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        let one = read_one(&path, "ConfigMap b", |d| d["metadata"]["name"] == "b").unwrap();
        assert_eq!(one["metadata"]["name"], "b");
        let e = read_one(&path, "ConfigMap", |d| d["kind"] == "ConfigMap").unwrap_err();
        assert!(e.to_string().contains("more than one ConfigMap"), "{e}");
    }
}
