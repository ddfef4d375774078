//! `kmeta render --live`: the parent, its observed children and the CRDs of custom child kinds,
//! read from a cluster.

use serde_json::Value;

use super::files::child_type;
use super::{Inputs, RenderError};
use crate::object::meta_str;

/// Step (`--live`): the CRDs of the cluster (for custom child kinds), the parent as it is there
/// with the file's `spec`, labels and annotations (what kmeta would write if the file were
/// applied), and its observed children: the objects of each child resource it controls.
pub(super) async fn read_live(
    client: &kube::Client,
    inputs: &mut Inputs,
) -> Result<(), RenderError> {
    use kube::api::{Api, ApiResource, DynamicObject, ListParams};
    let api_err = |what: String| move |e: kube::Error| RenderError::Sync(format!("{what}: {e}"));
    let crd = ApiResource::erase::<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    >(&());
    let crds = Api::<DynamicObject>::all_with(client.clone(), &crd)
        .list(&ListParams::default())
        .await
        .map_err(api_err("listing CustomResourceDefinitions".into()))?;
    inputs.crds.extend(
        crds.items
            .iter()
            .filter_map(|o| serde_json::to_value(o).ok()),
    );
    let pr = &inputs.cc.spec.parent_resource;
    let (kind, namespaced) = child_type(&pr.api_version, &pr.resource, &inputs.crds, &[])?;
    let ns = inputs
        .parent
        .pointer("/metadata/namespace")
        .and_then(Value::as_str);
    let name = meta_str(&inputs.parent, "name");
    let parent_api = dynamic_api(
        client,
        &pr.api_version,
        &kind,
        &pr.resource,
        namespaced.then_some(ns).flatten(),
    );
    let live = parent_api
        .get(name)
        .await
        .map_err(api_err(format!("reading the parent {kind} {name}")))?;
    let mut parent = serde_json::to_value(live).unwrap_or(Value::Null);
    overlay_parent(&mut parent, &inputs.parent);
    let uid = meta_str(&parent, "uid").to_owned();
    let mut observed = Vec::new();
    for rule in inputs.cc.spec.child_rules() {
        let (kind, child_namespaced) =
            child_type(&rule.api_version, &rule.resource, &inputs.crds, &[])?;
        let api = dynamic_api(
            client,
            &rule.api_version,
            &kind,
            &rule.resource,
            child_namespaced.then_some(ns).flatten(),
        );
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(api_err(format!("listing {}", rule.resource)))?;
        observed.extend(
            list.items
                .iter()
                .filter_map(|o| serde_json::to_value(o).ok())
                .filter(|o| crate::object::controller_uid(o) == Some(uid.as_str())),
        );
    }
    inputs.parent = parent;
    inputs.observed = observed;
    Ok(())
}

/// A dynamic API of `plural` (`kind`) in `api_version`, in `namespace` or cluster-wide.
pub(crate) fn dynamic_api(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    namespace: Option<&str>,
) -> kube::Api<kube::api::DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
    match namespace {
        Some(ns) => kube::Api::namespaced_with(client.clone(), ns, &ar),
        None => kube::Api::all_with(client.clone(), &ar),
    }
}

/// The live parent with the `spec`, labels and annotations of the file's (those it sets).
fn overlay_parent(live: &mut Value, file: &Value) {
    if let Some(spec) = file.get("spec") {
        live["spec"] = spec.clone();
    }
    for field in ["labels", "annotations"] {
        if let Some(v) = file.pointer(&format!("/metadata/{field}")) {
            live["metadata"][field] = v.clone();
        }
    }
}
