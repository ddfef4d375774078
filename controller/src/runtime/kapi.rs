//! Thin dynamic API helpers: every write carries a resourceVersion or a UID precondition.

use kube::api::{
    Api, DeleteParams, DynamicObject, GetParams, PostParams, Preconditions, PropagationPolicy,
};
use kube::core::Request;
use serde_json::Value;

use crate::object::meta_str;
use crate::runtime::resources::Resolved;

/// Retries of a read-modify-write on conflict: 5 (client-go `retry.DefaultBackoff` steps).
pub const CONFLICT_RETRIES: usize = 5;

/// The API of `r` in `namespace` ("" = cluster-scoped or all namespaces).
pub fn api(client: &kube::Client, r: &Resolved, namespace: &str) -> Api<DynamicObject> {
    if r.namespaced && !namespace.is_empty() {
        Api::namespaced_with(client.clone(), namespace, &r.api)
    } else {
        Api::all_with(client.clone(), &r.api)
    }
}

/// HTTP status of an API error.
pub fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

pub use super::api_error::describe;

/// 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    code(e) == Some(404)
}

/// 409 (Conflict or AlreadyExists).
pub fn is_conflict(e: &kube::Error) -> bool {
    code(e) == Some(409)
}

/// Sends `req` (tagged `verb` for kube's tracing) and decodes the answer straight into a `Value`:
/// no `DynamicObject` in between.
async fn send_raw<T: serde::de::DeserializeOwned>(
    api: &Api<DynamicObject>,
    mut req: http::Request<Vec<u8>>,
    verb: &'static str,
) -> Result<T, kube::Error> {
    req.extensions_mut().insert(verb);
    api.clone().into_client().request::<T>(req).await
}

/// What a write's answer says of the stored object's metadata, decoded without the rest of the
/// object (which the caller already has: it sent it).
#[derive(Debug, Default, Clone, PartialEq, serde::Deserialize)]
pub struct Stored {
    /// The stored object's metadata (the fields read; any other is skipped).
    #[serde(default)]
    pub metadata: StoredMeta,
}

/// See [`Stored`].
#[derive(Debug, Default, Clone, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredMeta {
    /// `metadata.uid`.
    #[serde(default)]
    pub uid: Option<String>,
    /// `metadata.resourceVersion`.
    #[serde(default)]
    pub resource_version: Option<String>,
    /// `metadata.annotations` (any JSON: not checked here).
    #[serde(default)]
    pub annotations: Option<serde_json::Map<String, Value>>,
}

fn body(obj: &Value) -> Result<Vec<u8>, kube::Error> {
    serde_json::to_vec(obj).map_err(kube::Error::SerdeError)
}

fn request(api: &Api<DynamicObject>) -> Request {
    Request::new(api.resource_url())
}

/// GET (uncached).
pub async fn get(api: &Api<DynamicObject>, name: &str) -> Result<Option<Value>, kube::Error> {
    let req = request(api)
        .get(name, &GetParams::default())
        .map_err(kube::Error::BuildRequest)?;
    match send_raw(api, req, "get").await {
        Ok(o) => Ok(Some(o)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// POST: the object is sent as raw JSON, exactly as given.
pub async fn create(api: &Api<DynamicObject>, obj: &Value) -> Result<Value, kube::Error> {
    let req = request(api)
        .create(&PostParams::default(), body(obj)?)
        .map_err(kube::Error::BuildRequest)?;
    send_raw(api, req, "create").await
}

/// PUT (the object carries its resourceVersion), as raw JSON.
pub async fn replace(api: &Api<DynamicObject>, obj: &Value) -> Result<Value, kube::Error> {
    let req = request(api)
        .replace(meta_str(obj, "name"), &PostParams::default(), body(obj)?)
        .map_err(kube::Error::BuildRequest)?;
    send_raw(api, req, "replace").await
}

/// PUT /status, as raw JSON.
pub async fn replace_status(api: &Api<DynamicObject>, obj: &Value) -> Result<Value, kube::Error> {
    replace_status_of(api, meta_str(obj, "name"), obj).await
}

/// PUT `/status` of the object `name`, the body any encoding of the object (e.g. a parent with
/// its new status serialised in place), the answer decoded as `T` (e.g. [`Stored`]: only the
/// stored object's metadata).
pub async fn replace_status_of<B: serde::Serialize, T: serde::de::DeserializeOwned>(
    api: &Api<DynamicObject>,
    name: &str,
    obj: &B,
) -> Result<T, kube::Error> {
    let body = serde_json::to_vec(obj).map_err(kube::Error::SerdeError)?;
    let req = request(api)
        .replace_subresource("status", name, &PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    send_raw(api, req, "replace_subresource").await
}

/// DELETE with a UID precondition and Background propagation.
pub async fn delete(api: &Api<DynamicObject>, obj: &Value) -> Result<(), kube::Error> {
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(meta_str(obj, "uid").to_owned()).filter(|u| !u.is_empty()),
            resource_version: None,
        }),
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    api.delete(meta_str(obj, "name"), &dp).await.map(|_| ())
}

/// What [`atomic_update`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Updated {
    /// The object as this call wrote it.
    Written(Value),
    /// `modify` wanted no write: the object as read (its resourceVersion may be another
    /// writer's, never this call's).
    Unchanged(Value),
    /// The object is gone, or its UID changed.
    Gone,
}

impl Updated {
    /// The object as it is now (written or read), `None` when gone.
    pub fn object(self) -> Option<Value> {
        match self {
            Updated::Written(v) | Updated::Unchanged(v) => Some(v),
            Updated::Gone => None,
        }
    }

    /// The object as this call wrote it, `None` when nothing was written.
    pub fn written(&self) -> Option<&Value> {
        match self {
            Updated::Written(v) => Some(v),
            Updated::Unchanged(_) | Updated::Gone => None,
        }
    }
}

/// GET-modify-PUT with retries on conflict. `modify` returns false when no write is needed.
pub async fn atomic_update(
    api: &Api<DynamicObject>,
    name: &str,
    uid: &str,
    status: bool,
    modify: impl Fn(&mut Value) -> bool,
) -> Result<Updated, kube::Error> {
    atomic_update_from(api, None, name, uid, status, modify).await
}

/// [`atomic_update`] whose first attempt modifies `cached` (a copy from a watch cache, with its
/// resourceVersion) instead of reading the object: a stale copy is answered 409 and the next
/// attempts read it fresh, as client-go's and Metacontroller's `AtomicUpdate` start from the
/// informer's object. Saves one GET per write when the cache is current (adoption, release).
pub async fn atomic_update_from(
    api: &Api<DynamicObject>,
    cached: Option<Value>,
    name: &str,
    uid: &str,
    status: bool,
    modify: impl Fn(&mut Value) -> bool,
) -> Result<Updated, kube::Error> {
    let mut attempt = 0;
    let mut cached = cached;
    loop {
        let live = match cached.take() {
            Some(v) => Some(v),
            None => get(api, name).await?,
        };
        let Some(mut live) = live else {
            return Ok(Updated::Gone);
        };
        if !uid.is_empty() && meta_str(&live, "uid") != uid {
            return Ok(Updated::Gone);
        }
        if !modify(&mut live) {
            return Ok(Updated::Unchanged(live));
        }
        let res = if status {
            replace_status(api, &live).await
        } else {
            replace(api, &live).await
        };
        match res {
            Ok(v) => return Ok(Updated::Written(v)),
            Err(e) if is_conflict(&e) && attempt + 1 < CONFLICT_RETRIES => attempt += 1,
            Err(e) if is_not_found(&e) => return Ok(Updated::Gone),
            Err(e) => return Err(e),
        }
    }
}

/// The User-Agent of every kmeta request: `kmeta/<version>` (the API server names writes that
/// carry no field manager after its first segment, `kmeta`).
pub fn user_agent() -> String {
    format!("kmeta/{}", env!("CARGO_PKG_VERSION"))
}

/// kmeta's User-Agent naming the instance that sends it: `kmeta/<version> (<identity>)`, the
/// form `kmeta run` uses with its leader-election identity (`POD_NAME`), so an API server's audit
/// log (or kmeta-apiserver's write log) tells replicas apart. The first segment stays `kmeta`.
pub fn user_agent_of(identity: &str) -> String {
    format!("{} ({identity})", user_agent())
}

/// `config` with kmeta's User-Agent on every request; a User-Agent of kmeta's already there
/// (one naming an instance, as `kmeta run` sets) is kept.
pub fn with_user_agent(config: kube::Config) -> kube::Config {
    let ours = |v: &http::HeaderValue| v.to_str().is_ok_and(|s| s.starts_with("kmeta/"));
    if config
        .headers
        .iter()
        .any(|(k, v)| k == http::header::USER_AGENT && ours(v))
    {
        return config;
    }
    set_user_agent(config, &user_agent())
}

/// `config` with the User-Agent naming `identity` (`kmeta/<version> (<identity>)`) on every
/// request.
pub fn with_identity(config: kube::Config, identity: &str) -> kube::Config {
    set_user_agent(config, &user_agent_of(identity))
}

fn set_user_agent(mut config: kube::Config, agent: &str) -> kube::Config {
    if let Ok(v) = http::HeaderValue::from_str(agent) {
        config
            .headers
            .retain(|(k, _)| k != http::header::USER_AGENT);
        config.headers.push((http::header::USER_AGENT, v));
    }
    config
}

fn post_params(field_manager: &str) -> PostParams {
    PostParams {
        field_manager: Some(field_manager.to_owned()),
        ..PostParams::default()
    }
}

/// POST as `field_manager`; the answer's metadata only.
pub async fn create_as(
    api: &Api<DynamicObject>,
    obj: &Value,
    field_manager: &str,
) -> Result<Stored, kube::Error> {
    let req = request(api)
        .create(&post_params(field_manager), body(obj)?)
        .map_err(kube::Error::BuildRequest)?;
    send_raw(api, req, "create").await
}

/// PUT as `field_manager` (the object carries its resourceVersion).
pub async fn replace_as(
    api: &Api<DynamicObject>,
    obj: &Value,
    field_manager: &str,
) -> Result<Value, kube::Error> {
    let req = request(api)
        .replace(
            meta_str(obj, "name"),
            &post_params(field_manager),
            body(obj)?,
        )
        .map_err(kube::Error::BuildRequest)?;
    send_raw(api, req, "replace").await
}

/// Server-side apply (`application/apply-patch+yaml`) of `obj` as `field_manager`, forcing
/// conflicts when `force`.
pub async fn apply_as(
    api: &Api<DynamicObject>,
    obj: &Value,
    field_manager: &str,
    force: bool,
) -> Result<Value, kube::Error> {
    let params = kube::api::PatchParams {
        field_manager: Some(field_manager.to_owned()),
        force,
        ..kube::api::PatchParams::default()
    };
    let req = request(api)
        .patch(
            meta_str(obj, "name"),
            &params,
            &kube::api::Patch::Apply(obj),
        )
        .map_err(kube::Error::BuildRequest)?;
    send_raw(api, req, "patch").await
}

/// Replaces `metadata.managedFields` of `obj` (merge patch carrying its resourceVersion, so a
/// concurrent write makes it fail with 409) as `field_manager`.
pub async fn set_managed_fields(
    api: &Api<DynamicObject>,
    obj: &Value,
    managed: &Value,
    field_manager: &str,
) -> Result<Value, kube::Error> {
    let params = kube::api::PatchParams {
        field_manager: Some(field_manager.to_owned()),
        ..kube::api::PatchParams::default()
    };
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": meta_str(obj, "resourceVersion"),
        "managedFields": managed,
    }});
    let req = request(api)
        .patch(
            meta_str(obj, "name"),
            &params,
            &kube::api::Patch::Merge(&patch),
        )
        .map_err(kube::Error::BuildRequest)?;
    send_raw(api, req, "patch").await
}

#[cfg(all(test, feature = "embedded-apiserver"))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kube::api::ApiResource;
    use kube::core::GroupVersionKind;
    use serde_json::json;

    async fn configmap(server: &kmeta_apiserver::TestServer) -> (Api<DynamicObject>, Value) {
        let r = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "ConfigMap"),
            "configmaps",
        );
        let api: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &r);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "c", "namespace": "default"}, "data": {"a": "1"}});
        let created = api
            .create(&PostParams::default(), &serde_json::from_value(cm).unwrap())
            .await
            .unwrap();
        (api, serde_json::to_value(created).unwrap())
    }

    fn label(o: &mut Value) -> bool {
        o["metadata"]["labels"] = json!({"adopted": "yes"});
        true
    }

    /// A create's answer is read for the stored version and annotations only; they are the
    /// stored object's.
    #[tokio::test]
    async fn a_create_answers_the_stored_version_and_annotations() {
        let server = kmeta_apiserver::TestServer::start().await.unwrap();
        let (api, _) = configmap(&server).await;
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "d", "namespace": "default",
                         "annotations": {"a": "{\"x\":1}", "b": ""}},
            "data": {"big": "x".repeat(4096)}});
        let stored = create_as(&api, &cm, "kmeta").await.unwrap();
        let live = get(&api, "d").await.unwrap().unwrap();
        assert_eq!(stored.metadata.uid.as_deref(), Some(meta_str(&live, "uid")));
        assert_eq!(
            stored.metadata.resource_version.as_deref(),
            Some(meta_str(&live, "resourceVersion"))
        );
        let annotations = stored.metadata.annotations.unwrap();
        assert_eq!(annotations["a"], "{\"x\":1}");
        assert_eq!(annotations["b"], "");
        // an answer of any other shape is still read (a create that worked is not an error)
        let odd: Stored =
            serde_json::from_value(json!({"metadata": {"annotations": null}, "kind": 1})).unwrap();
        assert_eq!(odd, Stored::default());
    }

    /// A current cached copy is written as it is: one PUT, no GET.
    #[tokio::test]
    async fn a_current_cached_copy_is_written_without_a_read() {
        let server = kmeta_apiserver::TestServer::start().await.unwrap();
        let (api, cached) = configmap(&server).await;
        server.state().reset_counters();
        let uid = meta_str(&cached, "uid").to_owned();
        let out = atomic_update_from(&api, Some(cached), "c", &uid, false, label)
            .await
            .unwrap();
        assert_eq!(
            out.written().unwrap()["metadata"]["labels"]["adopted"],
            "yes"
        );
        let counters = server.state().counters();
        assert_eq!(counters.count("get", "configmaps"), 0);
        assert_eq!(counters.count("update", "configmaps"), 1);
    }

    /// A stale cached copy is answered 409; the change is made again on the object read fresh,
    /// so another writer's change is kept.
    #[tokio::test]
    async fn a_stale_cached_copy_is_retried_on_the_fresh_object() {
        let server = kmeta_apiserver::TestServer::start().await.unwrap();
        let (api, cached) = configmap(&server).await;
        api.patch(
            "c",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {"b": "2"}})),
        )
        .await
        .unwrap();
        server.state().reset_counters();
        let uid = meta_str(&cached, "uid").to_owned();
        let out = atomic_update_from(&api, Some(cached), "c", &uid, false, label)
            .await
            .unwrap();
        let written = out.written().unwrap();
        assert_eq!(written["metadata"]["labels"]["adopted"], "yes");
        assert_eq!(written["data"], json!({"a": "1", "b": "2"}));
        let counters = server.state().counters();
        assert_eq!(counters.get("update", "configmaps", 409), 1);
        assert_eq!(counters.count("get", "configmaps"), 1);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod user_agent_tests {
    use super::*;

    fn agents(c: &kube::Config) -> Vec<&str> {
        c.headers
            .iter()
            .filter(|(k, _)| k == http::header::USER_AGENT)
            .map(|(_, v)| v.to_str().unwrap())
            .collect()
    }

    #[test]
    fn an_identity_in_the_user_agent_survives_the_client_builders() {
        let plain = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let v = env!("CARGO_PKG_VERSION");
        assert_eq!(
            agents(&with_user_agent(plain.clone())),
            [format!("kmeta/{v}")]
        );
        let named = with_identity(plain, "kmeta-0");
        assert_eq!(agents(&named), [format!("kmeta/{v} (kmeta-0)")]);
        // the builders of ops::client apply with_user_agent: the identity stays
        assert_eq!(
            agents(&with_user_agent(named)),
            [format!("kmeta/{v} (kmeta-0)")]
        );
    }
}
