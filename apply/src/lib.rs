#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod error;
mod params;
mod plan;

use std::fmt::Debug;
use std::future::Future;

use kube::api::GetParams;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use dynapply::{ListRule, ListRules, Ordering};
pub use error::Error;
pub use params::DynApplyParams;
pub use plan::dropped_fields;

use plan::Step;

/// What [`DynApply::dyn_apply`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// There was no live object: desired was created (with the last-applied annotation).
    Created,
    /// Live differed from the merge of live, last-applied and desired: the merge was written.
    Updated,
    /// Live already was what an update would write: nothing was sent.
    Unchanged,
}

/// The result of [`DynApply::dyn_apply`].
#[derive(Clone, Debug)]
pub struct Outcome<K> {
    /// Created, updated or unchanged.
    pub action: Action,
    /// The object as the server stored it (as it would store it, with
    /// [`DynApplyParams::dry_run`]); live as read when [`Action::Unchanged`].
    pub object: K,
    /// Fields of desired the server did not store as sent (see [`dropped_fields`]): pruned by a
    /// CRD's schema or overridden by admission. Such an object will differ again on the next
    /// apply; fix desired or the schema. Always empty when [`Action::Unchanged`].
    pub dropped: Vec<String>,
    /// Writes sent: 1 for a write that succeeded at once, one more per 409 Conflict (after
    /// which live was read again), 0 when live was unchanged from the start.
    pub attempts: u32,
}

impl<K> Outcome<K> {
    /// True when the apply wrote (or, in a dry run, would have written) something.
    pub fn changed(&self) -> bool {
        self.action != Action::Unchanged
    }
}

/// Sidecar-safe three-way apply on a [`kube::Api`]: `api.dyn_apply(&desired, &params)`.
///
/// Implemented for every `Api<K>` whose `K` is a Kubernetes object that serializes with its
/// `apiVersion` and `kind`: the `k8s-openapi` types, `#[derive(CustomResource)]` types and
/// [`kube::api::DynamicObject`] (built with `types`, e.g. `DynamicObject::new(name, &ar)`).
/// The futures are `Send`, so both calls work inside a `kube::runtime::Controller` reconcile.
///
/// Live is read and written as JSON, so fields your `K` does not model (a newer Kubernetes
/// version's, another controller's) survive the update. Use a namespaced `Api` for namespaced
/// kinds (`Api::namespaced`, as for `Api::create`).
pub trait DynApply<K> {
    /// Reads live, merges it with its last-applied annotation and `desired`, and creates or
    /// replaces (with live's `resourceVersion`) or does nothing; re-reads and tries again on
    /// 409 Conflict, up to [`DynApplyParams::max_conflicts`] attempts.
    ///
    /// ```no_run
    /// use k8s_openapi::api::apps::v1::Deployment;
    /// use kmeta_apply::{DynApply as _, DynApplyParams};
    ///
    /// # async fn reconcile(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let desired: Deployment = serde_json::from_value(serde_json::json!({
    ///     "apiVersion": "apps/v1", "kind": "Deployment",
    ///     "metadata": {"name": "web", "namespace": "shop"},
    ///     "spec": {"selector": {"matchLabels": {"app": "web"}},
    ///              "template": {"metadata": {"labels": {"app": "web"}},
    ///                           "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}
    /// }))?;
    /// let api = kube::Api::<Deployment>::namespaced(client, "shop");
    /// // a sidecar another actor added to the containers stays; `web` is brought to nginx:1.27
    /// let out = api.dyn_apply(&desired, &DynApplyParams::default()).await?;
    /// println!("{:?} after {} write(s)", out.action, out.attempts);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error`]: desired without a name/kind, a merge error, the server's refusal, or
    /// [`Error::Conflicts`] when every attempt met a 409.
    fn dyn_apply<'a>(
        &'a self,
        desired: &'a K,
        params: &'a DynApplyParams,
    ) -> impl Future<Output = Result<Outcome<K>, Error>> + Send + 'a;

    /// [`DynApply::dyn_apply`] starting from a live object you already have, e.g. from a
    /// reflector [`Store`](kube::runtime::reflector::Store) (`None`: not there, create it). No
    /// read is made up front; a stale copy costs one 409 and one read.
    ///
    /// # Errors
    /// As [`DynApply::dyn_apply`].
    fn dyn_apply_from<'a>(
        &'a self,
        desired: &'a K,
        live: Option<&'a K>,
        params: &'a DynApplyParams,
    ) -> impl Future<Output = Result<Outcome<K>, Error>> + Send + 'a;
}

impl<K> DynApply<K> for kube::Api<K>
where
    K: kube::Resource + Serialize + DeserializeOwned + Clone + Debug + Send + Sync + 'static,
{
    async fn dyn_apply(&self, desired: &K, params: &DynApplyParams) -> Result<Outcome<K>, Error> {
        let (target, desired) = Target::new(self, desired)?;
        let live = target.get().await?;
        decode(&target, apply(&target, &desired, live, params).await?)
    }

    async fn dyn_apply_from(
        &self,
        desired: &K,
        live: Option<&K>,
        params: &DynApplyParams,
    ) -> Result<Outcome<K>, Error> {
        let (target, desired) = Target::new(self, desired)?;
        let live = live.map(|l| encode(&target.object, l)).transpose()?;
        decode(&target, apply(&target, &desired, live, params).await?)
    }
}

/// Where one apply reads and writes: the `Api`'s client and URL, and the object's name.
struct Target {
    client: kube::Client,
    request: kube::core::Request,
    name: String,
    /// `Kind namespace/name`, for errors.
    object: String,
}

impl Target {
    fn new<K: kube::Resource + Serialize + Clone>(
        api: &kube::Api<K>,
        desired: &K,
    ) -> Result<(Target, Value), Error> {
        let value = encode(&describe_typed(desired), desired)?;
        let object = describe(&value);
        let invalid = |reason: String| Error::InvalidDesired {
            object: object.clone(),
            reason,
        };
        let text = |p: &str| {
            value
                .pointer(p)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let name = text("/metadata/name").ok_or_else(|| invalid("no metadata.name".into()))?;
        if text("/apiVersion").is_none() || text("/kind").is_none() {
            return Err(invalid(
                "no apiVersion/kind (build a DynamicObject with its types)".into(),
            ));
        }
        match (text("/metadata/namespace"), api.namespace()) {
            (Some(want), Some(have)) if want != have => {
                return Err(invalid(format!("the Api is scoped to namespace {have}")));
            }
            (Some(_), None) => {
                return Err(invalid(
                    "the Api is not namespaced: use Api::namespaced for a namespaced object".into(),
                ));
            }
            _ => {}
        }
        let target = Target {
            client: api.clone().into_client(),
            request: kube::core::Request::new(api.resource_url()),
            name: name.to_owned(),
            object,
        };
        Ok((target, value))
    }

    /// The live object, `None` when there is none.
    async fn get(&self) -> Result<Option<Value>, Error> {
        let req = self
            .request
            .get(&self.name, &GetParams::default())
            .map_err(|source| self.request_error("get", source))?;
        match self.client.request::<Value>(req).await {
            Ok(live) => Ok(Some(live)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(source) => Err(Error::Api {
                verb: "get",
                object: self.object.clone(),
                source: Box::new(source),
            }),
        }
    }

    /// Sends a create or update; `Ok(None)` on 409 Conflict.
    async fn write(&self, step: &Step, params: &DynApplyParams) -> Result<Option<Value>, Error> {
        let pp = params.post_params();
        let (verb, req) = match step {
            Step::Create(body) => ("create", self.request.create(&pp, self.bytes(body)?)),
            Step::Update(body) => (
                "update",
                self.request.replace(&self.name, &pp, self.bytes(body)?),
            ),
            Step::Unchanged => return Ok(None),
        };
        let req = req.map_err(|source| self.request_error(verb, source))?;
        match self.client.request::<Value>(req).await {
            Ok(stored) => Ok(Some(stored)),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
            Err(source) => Err(Error::Api {
                verb,
                object: self.object.clone(),
                source: Box::new(source),
            }),
        }
    }

    fn bytes(&self, body: &Value) -> Result<Vec<u8>, Error> {
        serde_json::to_vec(body).map_err(|source| Error::Json {
            what: "encode",
            object: self.object.clone(),
            source,
        })
    }

    fn request_error(&self, verb: &'static str, source: kube::core::request::Error) -> Error {
        Error::Request {
            verb,
            object: self.object.clone(),
            source,
        }
    }
}

/// The apply loop on JSON: plan, write, and on 409 read live again, within the attempt bound.
async fn apply(
    target: &Target,
    desired: &Value,
    mut live: Option<Value>,
    params: &DynApplyParams,
) -> Result<Outcome<Value>, Error> {
    let opts = plan::options(desired, params);
    let attempts = params.max_conflicts.max(1);
    for attempt in 1..=attempts {
        let step = plan::plan(live.as_ref(), desired, &opts).map_err(|source| Error::Merge {
            object: target.object.clone(),
            source,
        })?;
        let action = match (&step, live) {
            (Step::Unchanged, Some(object)) => {
                return Ok(Outcome {
                    action: Action::Unchanged,
                    object,
                    dropped: Vec::new(),
                    attempts: attempt - 1,
                });
            }
            (Step::Create(_), _) => Action::Created,
            _ => Action::Updated,
        };
        if let Some(stored) = target.write(&step, params).await? {
            return Ok(Outcome {
                action,
                dropped: dropped_fields(desired, &stored, &params.annotation),
                object: stored,
                attempts: attempt,
            });
        }
        live = target.get().await?;
    }
    Err(Error::Conflicts {
        object: target.object.clone(),
        attempts,
    })
}

fn encode<T: Serialize>(object: &str, value: &T) -> Result<Value, Error> {
    serde_json::to_value(value).map_err(|source| Error::Json {
        what: "encode",
        object: object.to_owned(),
        source,
    })
}

fn decode<K: DeserializeOwned>(target: &Target, out: Outcome<Value>) -> Result<Outcome<K>, Error> {
    let object = serde_json::from_value(out.object).map_err(|source| Error::Json {
        what: "decode",
        object: target.object.clone(),
        source,
    })?;
    Ok(Outcome {
        action: out.action,
        object,
        dropped: out.dropped,
        attempts: out.attempts,
    })
}

/// `Kind namespace/name` of a JSON object, as far as it has them.
fn describe(obj: &Value) -> String {
    let text = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let kind = match text("/kind") {
        "" => "object",
        kind => kind,
    };
    match text("/metadata/namespace") {
        "" => format!("{kind} {}", text("/metadata/name")),
        ns => format!("{kind} {ns}/{}", text("/metadata/name")),
    }
}

fn describe_typed<K: kube::Resource>(obj: &K) -> String {
    let meta = obj.meta();
    match (&meta.namespace, &meta.name) {
        (Some(ns), Some(name)) => format!("{ns}/{name}"),
        (None, Some(name)) => name.clone(),
        _ => "object".to_owned(),
    }
}
