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
    let api_err = |what: String| move |e: kube::Error| RenderError::Sync(format!("{what}: {e}"));
    let crds = list_crds(client)
        .await
        .map_err(api_err("listing CustomResourceDefinitions".into()))?;
    inputs.crds.extend(crds);
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
        let what = Listing {
            api_version: &rule.api_version,
            kind: &kind,
            plural: &rule.resource,
            namespace: child_namespaced.then_some(ns).flatten(),
        };
        let list = list_all(client, &what)
            .await
            .map_err(api_err(format!("listing {}", rule.resource)))?;
        observed.extend(
            list.into_iter()
                .filter(|o| crate::object::controller_uid(o) == Some(uid.as_str())),
        );
    }
    inputs.parent = parent;
    inputs.observed = observed;
    Ok(())
}

/// A dynamic API of `plural` (`kind`) in `api_version`, in `namespace` or cluster-wide.
fn dynamic_api(
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

/// A list response, its items kept as JSON.
#[derive(serde::Deserialize)]
struct RawList {
    #[serde(default)]
    metadata: kube::api::ListMeta,
    #[serde(default)]
    items: Vec<Value>,
}

/// One resource to list: `plural` (of `kind`) in `api_version`, in `namespace` or every one.
pub(crate) struct Listing<'a> {
    /// `group/version`, or `v1`.
    pub(crate) api_version: &'a str,
    /// The kind (filled into items that leave it out).
    pub(crate) kind: &'a str,
    /// The resource.
    pub(crate) plural: &'a str,
    /// The namespace, or every namespace.
    pub(crate) namespace: Option<&'a str>,
}

/// One page of `what` as JSON (no typed round trip), and the token of the next page. Items
/// get `apiVersion` and `kind` when the server leaves them out, as kube-apiserver does in lists
/// of built-in kinds (kmeta's watch caches fill them in the same way).
pub(crate) async fn list_page(
    client: &kube::Client,
    what: &Listing<'_>,
    params: &kube::api::ListParams,
) -> Result<(Vec<Value>, Option<String>), kube::Error> {
    use kube::Resource as _;
    let (group, version) = what
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", what.api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, what.kind);
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, what.plural);
    let url = kube::api::DynamicObject::url_path(&ar, what.namespace);
    let request = kube::core::Request::new(url)
        .list(params)
        .map_err(kube::Error::BuildRequest)?;
    let list: RawList = client.request(request).await?;
    let mut items = list.items;
    for item in &mut items {
        if let Some(m) = item.as_object_mut() {
            m.entry("apiVersion")
                .or_insert_with(|| Value::String(what.api_version.to_owned()));
            m.entry("kind")
                .or_insert_with(|| Value::String(what.kind.to_owned()));
        }
    }
    let next = list.metadata.continue_.filter(|t| !t.is_empty());
    Ok((items, next))
}

/// Every CustomResourceDefinition of the cluster (the kinds, scopes and list markers of custom
/// child kinds).
pub(crate) async fn list_crds(client: &kube::Client) -> Result<Vec<Value>, kube::Error> {
    let what = Listing {
        api_version: "apiextensions.k8s.io/v1",
        kind: "CustomResourceDefinition",
        plural: "customresourcedefinitions",
        namespace: None,
    };
    list_all(client, &what).await
}

/// Every object of `what`, page by page (500 a request).
pub(crate) async fn list_all(
    client: &kube::Client,
    what: &Listing<'_>,
) -> Result<Vec<Value>, kube::Error> {
    let mut out = Vec::new();
    let mut params = kube::api::ListParams::default().limit(500);
    loop {
        let (items, next) = list_page(client, what, &params).await?;
        out.extend(items);
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A client answering every request with `body`, as kube-apiserver answers a list of a
    /// built-in kind: items without `apiVersion` and `kind`.
    fn answering(body: &'static str) -> kube::Client {
        let service =
            tower::service_fn(move |_req: http::Request<kube::client::Body>| async move {
                let mut response =
                    http::Response::new(kube::client::Body::from(body.as_bytes().to_vec()));
                response.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
                Ok::<_, std::convert::Infallible>(response)
            });
        kube::Client::new(service, "default")
    }

    #[tokio::test]
    async fn list_items_get_the_kind_the_server_leaves_out() {
        let client = answering(
            r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"9"},
               "items":[{"metadata":{"name":"a","namespace":"n"},"data":{"k":"v"}}]}"#,
        );
        let what = Listing {
            api_version: "v1",
            kind: "ConfigMap",
            plural: "configmaps",
            namespace: Some("n"),
        };
        let items = list_all(&client, &what).await.unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["kind"], "ConfigMap");
        assert_eq!(items[0]["apiVersion"], "v1");
        assert_eq!(
            crate::reconcile::decide::child_key(&items[0]),
            "ConfigMap.v1 n/a"
        );
    }
}
