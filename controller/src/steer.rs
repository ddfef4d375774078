//! Steering an object kmeta manages, as a library: find it ([`resolve`], [`resolve_in`]), then
//! [`reconcile`], [`suspend`] or [`resume`] it. The commands below are thin shells over these.
//!
//! Steering one object from the command line: `kmeta reconcile` (sync a parent now and report the
//! result), `kmeta suspend` and `kmeta resume` (set and clear `kmeta.dev/paused`). Each talks to
//! the API server only, through annotations the running controller reads: no port-forward, and
//! what a person may do is what RBAC lets them patch.

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::{ApiResource, Discovery, Scope};
use serde_json::{Value, json};

use crate::object::condition;
use crate::reconcile::decide::{
    LAST_HANDLED_RECONCILE_AT, PAUSED_ANNOTATION, PAUSED_CONDITION, RECONCILE_REQUESTED_AT,
    SYNCED_CONDITION,
};

/// How often `kmeta reconcile` reads the parent while it waits: 200 ms.
const POLL: Duration = Duration::from_millis(200);

/// Why a steering command failed.
#[derive(Debug, thiserror::Error)]
pub enum SteerError {
    /// The target is not `<resource>/<name>`.
    #[error("{target:?}: expected <resource>/<name>, e.g. things/one or compositecontroller/web")]
    Target {
        /// As given.
        target: String,
    },
    /// No served resource has that name.
    #[error("{resource:?}: no such resource (plural or kind, optionally .<group>) on the server")]
    UnknownResource {
        /// As given.
        resource: String,
    },
    /// The API server refused or could not be reached.
    #[error("{action}: {}", crate::runtime::kapi::describe(.source))]
    Api {
        /// What was being done.
        action: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The sync did not report within the timeout.
    #[error(
        "{object}: no sync reported {RECONCILE_REQUESTED_AT}={value} within {timeout:?} (is kmeta running for it, and is it a CompositeController parent whose status schema admits lastHandledReconcileAt?)"
    )]
    Timeout {
        /// The object.
        object: String,
        /// The request's value.
        value: String,
        /// How long it waited.
        timeout: Duration,
    },
}

/// An object the command names: its resource and where it is.
#[derive(Debug, Clone)]
pub struct Target {
    /// The resource.
    pub resource: ApiResource,
    /// Its namespace (None: cluster-scoped).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl Target {
    /// `resource/name` as the user wrote it back.
    pub fn display(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/{} in {ns}", self.resource.plural, self.name),
            None => format!("{}/{}", self.resource.plural, self.name),
        }
    }

    /// The API of the target's resource, in its namespace if it has one.
    pub fn api(&self, client: &kube::Client) -> Api<DynamicObject> {
        match &self.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &self.resource),
            None => Api::all_with(client.clone(), &self.resource),
        }
    }
}

/// Whether `name` (lower case: plural or kind, optionally `<name>.<group>`) names resource `r`.
fn names_resource(name: &str, r: &ApiResource) -> bool {
    let (name, group) = match name.split_once('.') {
        Some((n, g)) => (n, Some(g)),
        None => (name, None),
    };
    group.is_none_or(|g| g == r.group) && (name == r.plural || name == r.kind.to_ascii_lowercase())
}

/// Resolves `<resource>/<name>` against the server's discovery; `namespace` is used for a
/// namespaced resource.
pub async fn resolve(
    client: &kube::Client,
    target: &str,
    namespace: &str,
) -> Result<Target, SteerError> {
    resolve_in(&discover(client).await?, target, namespace)
}

/// The server's resources (one discovery, for [`resolve_in`] and `kmeta trace`).
pub async fn discover(client: &kube::Client) -> Result<Discovery, SteerError> {
    Discovery::new(client.clone())
        .run()
        .await
        .map_err(|source| SteerError::Api {
            action: "discovering the server's resources".into(),
            source,
        })
}

/// [`resolve`] against a discovery already made.
pub fn resolve_in(
    discovery: &Discovery,
    target: &str,
    namespace: &str,
) -> Result<Target, SteerError> {
    let Some((resource, name)) = target
        .split_once('/')
        .filter(|(r, n)| !r.is_empty() && !n.is_empty())
    else {
        return Err(SteerError::Target {
            target: target.to_owned(),
        });
    };
    let wanted = resource.to_ascii_lowercase();
    for group in discovery.groups() {
        for (r, caps) in group.recommended_resources() {
            if names_resource(&wanted, &r) {
                let namespace = (caps.scope == Scope::Namespaced).then(|| namespace.to_owned());
                return Ok(Target {
                    resource: r,
                    namespace,
                    name: name.to_owned(),
                });
            }
        }
    }
    Err(SteerError::UnknownResource {
        resource: resource.to_owned(),
    })
}

/// Sets (`Some`) or removes (`None`) annotation `key` of the target with a merge patch.
async fn annotate(
    client: &kube::Client,
    target: &Target,
    key: &str,
    value: Option<&str>,
) -> Result<(), SteerError> {
    let patch = json!({"metadata": {"annotations": {key: value}}});
    target
        .api(client)
        .patch(&target.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|source| SteerError::Api {
            action: format!("annotating {}", target.display()),
            source,
        })
}

/// `kmeta suspend`: sets `kmeta.dev/paused: "true"`.
pub async fn suspend(client: &kube::Client, target: &Target) -> Result<(), SteerError> {
    annotate(client, target, PAUSED_ANNOTATION, Some("true")).await
}

/// `kmeta resume`: removes `kmeta.dev/paused`.
pub async fn resume(client: &kube::Client, target: &Target) -> Result<(), SteerError> {
    annotate(client, target, PAUSED_ANNOTATION, None).await
}

/// What the sync `kmeta reconcile` asked for did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    /// The hook answered and its children and status were written.
    Synced,
    /// The sync failed: the parent's `Synced=False` message.
    Failed(String),
    /// kmeta left the parent alone: the `Paused` condition's message.
    Paused(String),
}

/// The result the parent's status reports for request `value`, once it does.
fn reconciled(parent: &Value, value: &str) -> Option<Reconciled> {
    let status = parent.get("status")?;
    if status
        .get(LAST_HANDLED_RECONCILE_AT)
        .and_then(Value::as_str)
        != Some(value)
    {
        return None;
    }
    let message = |c: &Value| {
        c.get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    if let Some(c) = condition(parent, PAUSED_CONDITION).filter(|c| c["status"] == "True") {
        return Some(Reconciled::Paused(message(c)));
    }
    if let Some(c) = condition(parent, SYNCED_CONDITION).filter(|c| c["status"] == "False") {
        return Some(Reconciled::Failed(message(c)));
    }
    Some(Reconciled::Synced)
}

/// `kmeta reconcile`: sets `kmeta.dev/reconcile-requested-at` to a new value (the time now) and
/// waits until the parent's status reports the sync that handled it; returns what it did.
pub async fn reconcile(
    client: &kube::Client,
    target: &Target,
    timeout: Duration,
) -> Result<Reconciled, SteerError> {
    let value = jiff::Timestamp::now().to_string();
    annotate(client, target, RECONCILE_REQUESTED_AT, Some(&value)).await?;
    let api = target.api(client);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let parent = api
            .get(&target.name)
            .await
            .map_err(|source| SteerError::Api {
                action: format!("reading {}", target.display()),
                source,
            })?;
        let parent = serde_json::to_value(parent).unwrap_or(Value::Null);
        if let Some(result) = reconciled(&parent, &value) {
            return Ok(result);
        }
        if tokio::time::Instant::now() + POLL > deadline {
            return Err(SteerError::Timeout {
                object: target.display(),
                value,
                timeout,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_is_named_by_plural_kind_or_group() {
        let r = ApiResource {
            group: "example.com".into(),
            version: "v1".into(),
            api_version: "example.com/v1".into(),
            kind: "Thing".into(),
            plural: "things".into(),
        };
        for name in ["things", "thing", "things.example.com", "thing.example.com"] {
            assert!(names_resource(name, &r), "{name}");
        }
        assert!(!names_resource("things.other.com", &r));
        assert!(!names_resource("widgets", &r));
    }

    #[test]
    fn the_status_tells_the_result_of_one_request() {
        let v = "2026-11-27T08:00:00Z";
        let mut p = json!({"status": {"lastHandledReconcileAt": "earlier"}});
        assert_eq!(reconciled(&p, v), None, "not handled yet");
        p["status"]["lastHandledReconcileAt"] = json!(v);
        assert_eq!(reconciled(&p, v), Some(Reconciled::Synced));
        p["status"]["conditions"] =
            json!([{"type": "Synced", "status": "False", "message": "hook timed out"}]);
        assert_eq!(
            reconciled(&p, v),
            Some(Reconciled::Failed("hook timed out".into()))
        );
        p["status"]["conditions"] = json!([{"type": "Paused", "status": "True", "message": "m"}]);
        assert_eq!(reconciled(&p, v), Some(Reconciled::Paused("m".into())));
    }
}
