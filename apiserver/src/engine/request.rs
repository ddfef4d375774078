//! The vocabulary of a request to the engine: its resolved target ([`Req`]) and the options of
//! writes and deletes, as parsed by the HTTP layer.

use crate::error::{ApiError, ApiResult, Target};
use crate::registry::{Registry, ResourceDef};
use crate::ssa::{Scope, Writer};
use crate::store::{Key, Obj, Storage};
use serde_json::Value;
use std::sync::Arc;

/// A request's resolved target.
#[derive(Debug, Clone)]
pub(crate) struct Req {
    /// Resource definition.
    pub def: ResourceDef,
    /// Requested version.
    pub version: String,
    /// Namespace (namespaced resources only).
    pub ns: Option<String>,
    /// Object name, for item requests.
    pub name: Option<String>,
    /// Subresource (`status`, `scale`).
    pub sub: Option<String>,
}

impl Req {
    pub(super) fn target(&self) -> Target<'_> {
        Target {
            group: &self.def.group,
            plural: &self.def.plural,
            name: self.name.as_deref().unwrap_or(""),
        }
    }
    pub(super) fn key(&self, name: &str) -> Key {
        Key {
            res: self.def.storage_key(),
            ns: self.ns.clone().unwrap_or_default(),
            name: name.to_string(),
        }
    }
    pub(super) fn api_version(&self) -> String {
        self.def.api_version(&self.version)
    }
    /// The `managedFields` writer of an update or apply by `manager` through this request (its
    /// subresource is `status` or the main resource).
    pub(super) fn writer<'a>(
        &self,
        manager: &'a str,
        api_version: &'a str,
        now: &'a str,
    ) -> Writer<'a> {
        Writer {
            manager,
            api_version,
            subresource: if self.sub.as_deref() == Some("status") {
                "status"
            } else {
                ""
            },
            scope: self.scope(),
            now,
        }
    }
    pub(super) fn scope(&self) -> Scope {
        match (self.def.status_subresource, self.sub.as_deref()) {
            (_, Some("status")) => Scope::StatusOnly,
            (true, _) => Scope::NoStatus,
            (false, _) => Scope::All,
        }
    }
}

/// A check of a write by the identity that sends it, run on the object as it would be stored
/// (after admission and validation), with the stored object of an update: authorization that
/// depends on the object (the RBAC escalation check, ownerReference permissions). It sees the
/// storage and the served resources as they are inside the write.
pub(crate) type WriteCheckFn =
    dyn Fn(&Storage, &Registry, &Value, Option<&Value>) -> ApiResult<()> + Send + Sync;

/// A [`WriteCheckFn`], shared.
#[derive(Clone)]
pub(crate) struct WriteCheck(pub Arc<WriteCheckFn>);

impl std::fmt::Debug for WriteCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteCheck")
    }
}

/// Options shared by writes.
#[derive(Debug, Clone, Default)]
pub(crate) struct WriteOpts {
    /// Field manager (from `fieldManager` or the User-Agent).
    pub field_manager: String,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `force=true` (apply).
    pub force: bool,
    /// `fieldValidation`: what to do with fields the object's schema (a CRD version's, or a
    /// built-in kind's typed API) does not declare.
    pub field_validation: FieldValidation,
    /// The check of the sender's authority over the written object, if authorization is on.
    pub check: Option<WriteCheck>,
    /// Admission by webhooks, carried between the passes of one write (`http/admit.rs`).
    pub external: Option<Arc<External>>,
    /// The requesting user and groups, for admission (`request.userInfo`).
    pub user: Option<(String, Vec<String>)>,
}

/// What admission webhooks make of one write, run by the HTTP layer between passes of the
/// engine (the engine runs under a lock; a webhook is an HTTP call): a first pass stops where
/// mutating admission starts and keeps what it would see ([`Seen`]); later passes apply the
/// webhooks' JSON patches there, after the in-process mutating functions, and the last one
/// stores the result unless the stored object changed since the first (`stale`).
#[derive(Debug, Default)]
pub(crate) struct External {
    /// Stop at mutating admission, keeping what it sees in `seen`.
    pub capture: bool,
    /// The mutating webhooks' patches, in the order they were answered.
    pub patches: Vec<json_patch::Patch>,
    /// The resourceVersion of the stored object the first pass saw (updates).
    pub old_rv: Option<String>,
    /// What mutating admission saw in the capturing pass.
    pub seen: std::sync::Mutex<Option<Seen>>,
    /// Set when a later pass found the stored object changed since the first.
    pub stale: std::sync::atomic::AtomicBool,
    /// The name and uid given to a created object by the first pass, kept by the later ones
    /// (a generated name and a uid are drawn anew by each pass otherwise).
    pub identity: std::sync::Mutex<Option<(String, String)>>,
}

/// The object (and the stored one, on update) that mutating admission sees.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// Create or update.
    pub op: crate::hooks::Operation,
    /// The object after the in-process mutating functions.
    pub object: Value,
    /// The stored object (update).
    pub old: Option<Value>,
}

/// The `fieldValidation` query parameter (kube-apiserver's default is `Warn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum FieldValidation {
    /// Drop unknown fields silently.
    Ignore,
    /// Drop them and answer with a `Warning` header per field.
    #[default]
    Warn,
    /// Reject the request (400) naming them.
    Strict,
}

impl FieldValidation {
    /// Parses the query value (`Ignore`, `Warn`, `Strict`; absent: `Warn`).
    pub(crate) fn parse(v: Option<&str>) -> ApiResult<FieldValidation> {
        match v {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation: invalid value {other:?}: must be one of Ignore, Warn, Strict"
            ))),
        }
    }
}

/// Deletion propagation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Propagation {
    /// Delete now; the garbage collector deletes dependents afterwards.
    Background,
    /// Delete dependents first (`foregroundDeletion` finalizer).
    Foreground,
    /// Strip owner references from dependents (`orphan` finalizer).
    Orphan,
}

/// DeleteOptions.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOpts {
    /// propagationPolicy (None: Background).
    pub propagation: Option<Propagation>,
    /// preconditions.uid
    pub uid: Option<String>,
    /// preconditions.resourceVersion
    pub resource_version: Option<String>,
    /// dryRun=All
    pub dry_run: bool,
    /// The requesting user and groups, for admission policies (`request.userInfo`).
    pub user: Option<(String, Vec<String>)>,
}

/// Result of a delete.
#[derive(Debug, Clone)]
pub(crate) enum Deleted {
    /// Removed from storage (final state).
    Gone(Obj),
    /// Still present with deletionTimestamp (finalizers pending).
    Pending(Obj),
}
