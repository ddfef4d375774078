//! API semantics over [`Storage`]: create/update/patch/delete with Kubernetes rules, status
//! subresource, generation, finalizers, garbage collection, namespaces and CRDs.
//!
//! Every operation runs under one lock and settles all consequences (garbage collection,
//! namespace and CRD cleanup) before returning, so results are deterministic.

use crate::error::{ApiError, ApiResult, Target};
use crate::hooks::{Admission, AdmissionError, Operation, SplitMix};
use crate::patch::{self, ListKind};
use crate::registry::{self, Registry, ResourceDef};
use crate::selector::{FieldSelector, LabelSelector};
use crate::ssa::{self, Scope, Writer};
use crate::store::{AtError, Key, Obj, Storage, owner_uids, uid_of};
use serde_json::{Map, Value, json};
use std::collections::VecDeque;
use std::sync::Arc;

/// Finalizer set by foreground deletion.
pub const FOREGROUND: &str = "foregroundDeletion";
/// Finalizer set by orphan deletion.
pub const ORPHAN: &str = "orphan";
/// Finalizer the apiextensions server puts on CRDs.
pub const CRD_CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";
/// Namespace spec finalizer.
pub const NS_FINALIZER: &str = "kubernetes";

/// Current time as RFC3339 with second precision (`2026-11-22T20:00:00Z`).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A request's resolved target.
#[derive(Debug, Clone)]
pub struct Req {
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
    fn target(&self) -> Target<'_> {
        Target {
            group: &self.def.group,
            plural: &self.def.plural,
            name: self.name.as_deref().unwrap_or(""),
        }
    }
    fn key(&self, name: &str) -> Key {
        Key {
            res: self.def.storage_key(),
            ns: self.ns.clone().unwrap_or_default(),
            name: name.to_string(),
        }
    }
    fn api_version(&self) -> String {
        self.def.api_version(&self.version)
    }
    fn scope(&self) -> Scope {
        match (self.def.status_subresource, self.sub.as_deref()) {
            (_, Some("status")) => Scope::StatusOnly,
            (true, _) => Scope::NoStatus,
            (false, _) => Scope::All,
        }
    }
}

/// Options shared by writes.
#[derive(Debug, Clone, Default)]
pub struct WriteOpts {
    /// Field manager (from `fieldManager` or the User-Agent).
    pub field_manager: String,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `force=true` (apply).
    pub force: bool,
    /// `fieldValidation`: what to do with fields the object's schema (a CRD version's, or a
    /// built-in kind's typed API) does not declare.
    pub field_validation: FieldValidation,
}

/// The `fieldValidation` query parameter (kube-apiserver's default is `Warn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
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
    pub fn parse(v: Option<&str>) -> ApiResult<FieldValidation> {
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
pub enum Propagation {
    /// Delete now; the garbage collector deletes dependents afterwards.
    Background,
    /// Delete dependents first (`foregroundDeletion` finalizer).
    Foreground,
    /// Strip owner references from dependents (`orphan` finalizer).
    Orphan,
}

/// DeleteOptions.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// propagationPolicy (None: Background).
    pub propagation: Option<Propagation>,
    /// preconditions.uid
    pub uid: Option<String>,
    /// preconditions.resourceVersion
    pub resource_version: Option<String>,
    /// dryRun=All
    pub dry_run: bool,
}

/// Result of a delete.
#[derive(Debug, Clone)]
pub enum Deleted {
    /// Removed from storage (final state).
    Gone(Obj),
    /// Still present with deletionTimestamp (finalizers pending).
    Pending(Obj),
}

/// List parameters.
#[derive(Debug, Clone, Default)]
pub struct ListOpts {
    /// labelSelector.
    pub label: LabelSelector,
    /// fieldSelector.
    pub field: FieldSelector,
    /// limit (0 = none).
    pub limit: usize,
    /// continue token.
    pub continue_token: Option<String>,
    /// resourceVersion.
    pub resource_version: Option<String>,
    /// resourceVersionMatch.
    pub resource_version_match: Option<String>,
}

/// `Retry-After` of the 504 for a resourceVersion the server has not reached after waiting
/// (kube-apiserver's watch cache: `resourceVersionTooHighRetrySeconds`).
pub const RV_TOO_LARGE_RETRY_SECONDS: u64 = 1;

/// 410 for an exact list older than the retained history (etcd3 store `expiredList`).
const LIST_EXPIRED: &str = "The resourceVersion for the provided list is too old.";

/// 410 for a continue token older than the retained history (etcd3 store `inconsistentContinue`).
const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// Which state a list reads, from `resourceVersion`, `resourceVersionMatch` and `limit`
/// (<https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list>).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListRead {
    /// `resourceVersion` unset (most recent) or `"0"` (any; this server has no stale cache, so
    /// any is the current state).
    Current,
    /// Not older than this rv: the current state once the server has reached it.
    NotOlderThan(u64),
    /// Exactly this rv (`resourceVersionMatch=Exact`, a continue token, or the legacy case of
    /// `limit` with `resourceVersion=N` and no match), read from the retained history.
    Exact(u64),
}

impl ListOpts {
    /// `ValidateListOptions` of kube-apiserver (422 `ListOptions.meta.k8s.io`).
    fn validate(&self) -> ApiResult<()> {
        let Some(m) = self.resource_version_match.as_deref() else {
            return Ok(());
        };
        let mut errs = vec![];
        if self.resource_version.is_none() {
            errs.push((
                "FieldValueForbidden",
                "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
                    .to_string(),
            ));
        }
        if self.continue_token.is_some() {
            errs.push((
                "FieldValueForbidden",
                "Forbidden: resourceVersionMatch is forbidden when continue is provided".into(),
            ));
        }
        if m != "Exact" && m != "NotOlderThan" {
            errs.push((
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: {m:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""
                ),
            ));
        }
        if m == "Exact" && self.resource_version.as_deref() == Some("0") {
            errs.push((
                "FieldValueForbidden",
                "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
                    .into(),
            ));
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid_fields(
                "ListOptions",
                "meta.k8s.io",
                "",
                "resourceVersionMatch",
                &errs,
            ))
        }
    }

    /// The read these options ask for (validated; the continue token is not looked at).
    pub fn read(&self) -> ApiResult<ListRead> {
        self.validate()?;
        let n = match self.resource_version.as_deref() {
            None | Some("0") => return Ok(ListRead::Current),
            Some(r) => r
                .parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {r:?}")))?,
        };
        Ok(match self.resource_version_match.as_deref() {
            Some("Exact") => ListRead::Exact(n),
            None if self.limit > 0 => ListRead::Exact(n),
            _ => ListRead::NotOlderThan(n),
        })
    }

    /// The rv a list must wait for before it is served (NotOlderThan a future rv).
    pub fn not_older_than(&self) -> Option<u64> {
        match self.read() {
            Ok(ListRead::NotOlderThan(n)) if self.continue_token.is_none() => Some(n),
            _ => None,
        }
    }
}

/// A computed list (serialized outside the lock).
#[derive(Debug)]
pub struct ListResult {
    /// Items (already converted to the requested version).
    pub items: Vec<Obj>,
    /// List resourceVersion.
    pub rv: u64,
    /// Continue token if more items remain.
    pub continue_token: Option<String>,
    /// Items left after this page.
    pub remaining: Option<u64>,
}

enum Work {
    Check(Key),
    Removed(Key, Obj),
}

/// Mutable server state.
pub struct Inner {
    /// Object storage.
    pub store: Storage,
    /// Served resources.
    pub registry: Registry,
    rng: SplitMix,
    /// `Warning` header texts produced by the current request (taken by the HTTP layer).
    pub warnings: Vec<String>,
}

fn meta(v: &Value) -> Option<&Map<String, Value>> {
    v.get("metadata").and_then(Value::as_object)
}

fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.get("metadata").is_some_and(Value::is_object) {
        v["metadata"] = json!({});
    }
    match v.get_mut("metadata").and_then(Value::as_object_mut) {
        Some(m) => m,
        None => unreachable_meta(),
    }
}

fn unreachable_meta() -> ! {
    // invariant: `meta_mut` stores an object under "metadata" right before reading it back
    unreachable!("metadata was just set to an object")
}

fn meta_str<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    meta(v)?.get(k)?.as_str()
}

fn finalizers(v: &Value) -> Vec<String> {
    meta(v)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn set_finalizers(v: &mut Value, f: &[String]) {
    let m = meta_mut(v);
    if f.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), json!(f));
    }
}

fn deleting(v: &Value) -> bool {
    meta(v).is_some_and(|m| m.get("deletionTimestamp").is_some_and(|t| !t.is_null()))
}

fn ns_spec_finalizers(v: &Value) -> Vec<String> {
    v.get("spec")
        .and_then(|s| s.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_label)
}

/// Validate an object name for a resource; returns the failure message.
pub fn validate_name(def: &ResourceDef, name: &str) -> Result<(), String> {
    let label_only =
        def.group.is_empty() && matches!(def.plural.as_str(), "namespaces" | "services");
    if def.group == "rbac.authorization.k8s.io" {
        if name.is_empty()
            || name == "."
            || name == ".."
            || name.contains('/')
            || name.contains('%')
        {
            return Err(format!(
                "Invalid value: \"{name}\": may not be '.' or '..' and may not contain '/' or '%'"
            ));
        }
        return Ok(());
    }
    if label_only {
        if !is_label(name) {
            return Err(format!("Invalid value: \"{name}\": {DNS1123_LABEL_MSG}"));
        }
    } else if !is_subdomain(name) {
        return Err(format!(
            "Invalid value: \"{name}\": {DNS1123_SUBDOMAIN_MSG}"
        ));
    }
    Ok(())
}

/// Strip fields that must not count as spec changes, for generation decisions.
fn spec_view(v: &Value, has_status_sub: bool) -> Value {
    let mut c = v.clone();
    if let Some(m) = c.as_object_mut() {
        m.remove("metadata");
        if has_status_sub {
            m.remove("status");
        }
    }
    c
}

fn without_volatile(v: &Value) -> Value {
    let mut c = v.clone();
    if let Some(m) = c.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        // ownership changes are real changes; timestamps of unchanged entries are not
        if let Some(Value::Array(entries)) = m.get_mut("managedFields") {
            for e in entries.iter_mut() {
                if let Some(em) = e.as_object_mut() {
                    em.remove("time");
                }
            }
        }
    }
    c
}

/// Fold a Secret's write-only `stringData` into `data` (base64), as the real server does.
fn fold_string_data(def: &ResourceDef, obj: &mut Value) {
    if !(def.group.is_empty() && def.plural == "secrets") {
        return;
    }
    let Some(sd) = obj.as_object_mut().and_then(|m| m.remove("stringData")) else {
        return;
    };
    if let Some(m) = sd.as_object() {
        if !obj.get("data").is_some_and(Value::is_object) {
            obj["data"] = json!({});
        }
        for (k, v) in m {
            let s = v.as_str().unwrap_or_default();
            obj["data"][k] = json!(crate::proto::base64(s.as_bytes()));
        }
    }
}

/// Validate label keys and values (qualified names / label values).
pub fn validate_labels(labels: Option<&Value>) -> Result<(), (String, String)> {
    let Some(labels) = labels else { return Ok(()) };
    let Some(m) = labels.as_object() else {
        return Err(("metadata.labels".into(), "must be a map of strings".into()));
    };
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.len() <= 63
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && n.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && n.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
    };
    for (k, v) in m {
        let (prefix, name) = match k.split_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, k.as_str()),
        };
        if prefix.is_some_and(|p| !is_subdomain(p)) || !name_ok(name) {
            return Err((
                "metadata.labels".into(),
                format!(
                    "Invalid value: \"{k}\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
                ),
            ));
        }
        let Some(val) = v.as_str() else {
            return Err((format!("metadata.labels[{k}]"), "must be a string".into()));
        };
        if !val.is_empty() && !name_ok(val) {
            return Err((
                "metadata.labels".into(),
                format!(
                    "Invalid value: \"{val}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
                ),
            ));
        }
    }
    Ok(())
}

/// Labels and the rest of `metadata` of an object about to be stored: 422 Invalid naming the field.
fn validate_object_meta(def: &ResourceDef, name: &str, obj: &Value) -> ApiResult<()> {
    if let Err((field, msg)) = validate_labels(meta(obj).and_then(|m| m.get("labels"))) {
        return Err(ApiError::invalid(&def.kind, &def.group, name, &field, &msg));
    }
    if let Err(e) = crate::validation::validate_metadata(obj) {
        return Err(ApiError::invalid(
            &def.kind, &def.group, name, &e.field, &e.message,
        ));
    }
    Ok(())
}

fn admission_error(e: AdmissionError, req: &Req, name: &str) -> ApiError {
    if e.code == 422 {
        let mut err = ApiError::invalid(&req.def.kind, &req.def.group, name, "", &e.message);
        err.message = format!(
            "admission webhook denied the request: {} \"{name}\" is invalid: {}",
            req.def.kind, e.message
        );
        err
    } else {
        ApiError::new(
            e.code,
            match e.code {
                403 => "Forbidden",
                409 => "Conflict",
                400 => "BadRequest",
                _ => "InternalError",
            },
            format!("admission webhook denied the request: {}", e.message),
        )
    }
}

/// Split a storage key `group/plural`.
fn split_res(res: &str) -> (&str, &str) {
    res.rsplit_once('/').unwrap_or(("", res))
}

fn value_at_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = v;
    for p in path.trim_start_matches('.').split('.') {
        cur = cur.get(p)?;
    }
    Some(cur)
}

fn set_at_path(v: &mut Value, path: &str, val: Value) {
    let parts: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let mut cur = v;
    for (i, p) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        if i == parts.len() - 1 {
            cur[*p] = val;
            return;
        }
        if cur.get(*p).is_none() {
            cur[*p] = json!({});
        }
        cur = &mut cur[*p];
    }
}

impl Inner {
    /// New state.
    pub fn new(window: usize, seed: u64) -> Self {
        Inner {
            store: Storage::new(window),
            registry: Registry::with_builtins(),
            rng: SplitMix::new(seed),
            warnings: Vec::new(),
        }
    }

    fn uid(&mut self) -> String {
        let a = self.rng.next_u64().to_be_bytes();
        let b = self.rng.next_u64().to_be_bytes();
        let mut x = [0u8; 16];
        x[..8].copy_from_slice(&a);
        x[8..].copy_from_slice(&b);
        x[6] = (x[6] & 0x0f) | 0x40;
        x[8] = (x[8] & 0x3f) | 0x80;
        let h: String = x.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }

    fn name_suffix(&mut self) -> String {
        const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..5)
            .map(|_| ALPHA[(self.rng.next_u64() % ALPHA.len() as u64) as usize] as char)
            .collect()
    }

    fn kinds_for(def: &ResourceDef, version: &str) -> impl Fn(&[String]) -> ListKind + use<> {
        let schema = if def.is_builtin() {
            None
        } else {
            def.schemas.get(version).cloned()
        };
        let builtin = def.is_builtin();
        move |p: &[String]| {
            if builtin {
                patch::builtin_list_kind(p)
            } else {
                patch::schema_list_kind(schema.as_ref(), p)
            }
        }
    }

    /// Convert a stored object to the requested version (CRDs: `None` conversion; Events
    /// between core `v1` and `events.k8s.io/v1`, see [`crate::convert`]).
    pub fn present(obj: &Obj, api_version: &str) -> Obj {
        if obj.get("apiVersion").and_then(Value::as_str) == Some(api_version) {
            obj.clone()
        } else if let Some(v) = crate::convert::present(obj, api_version) {
            Arc::new(v)
        } else {
            let mut v = (**obj).clone();
            v["apiVersion"] = json!(api_version);
            Arc::new(v)
        }
    }

    /// What decoding a written object does before admission: a custom resource is pruned and
    /// defaulted by its version's schema, a built-in kind loses the fields its typed API does not
    /// declare; the dropped fields are answered per `fieldValidation` (a 400 worded as
    /// kube-apiserver's strict decoding error, a warning per field, or nothing). Returns the
    /// schema, which validates the object after admission.
    fn decode_body(
        &mut self,
        req: &Req,
        validation: FieldValidation,
        obj: &mut Value,
    ) -> ApiResult<Option<Arc<crate::schema::Schema>>> {
        let schema = crate::schema::for_version(&req.def, &req.version);
        let unknown = match &schema {
            Some(s) => s.prune(obj),
            None if req.def.is_builtin() => {
                crate::typed::prune_unknown(&req.def.group, &req.def.kind, obj)
            }
            None => Vec::new(),
        };
        self.unknown_fields(req, validation, &unknown)?;
        if let Some(s) = &schema {
            s.default(obj);
        }
        Ok(schema)
    }

    fn unknown_fields(
        &mut self,
        req: &Req,
        validation: FieldValidation,
        unknown: &[String],
    ) -> ApiResult<()> {
        if unknown.is_empty() {
            return Ok(());
        }
        let each = unknown.iter().map(|f| format!("unknown field {f:?}"));
        match validation {
            FieldValidation::Ignore => Ok(()),
            FieldValidation::Warn => {
                self.warnings.extend(each);
                Ok(())
            }
            FieldValidation::Strict => {
                let kind = &req.def.kind;
                Err(ApiError::bad_request(format!(
                    "{kind} in version {:?} cannot be handled as a {kind}: strict decoding error: {}",
                    req.version,
                    each.collect::<Vec<_>>().join(", ")
                )))
            }
        }
    }

    fn ensure_namespace(&self, req: &Req) -> ApiResult<()> {
        let Some(ns) = req.ns.as_deref() else {
            return Ok(());
        };
        let key = Key {
            res: Arc::from("/namespaces"),
            ns: String::new(),
            name: ns.to_string(),
        };
        match self.store.get(&key) {
            None => Err(ApiError::not_found(Target {
                group: "",
                plural: "namespaces",
                name: ns,
            })),
            Some(n) if deleting(n) => Err(ApiError::forbidden(format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                req.def.group_resource(),
                req.name.as_deref().unwrap_or("")
            ))),
            Some(_) => Ok(()),
        }
    }

    /// GET one object.
    pub fn get(&self, req: &Req) -> ApiResult<Obj> {
        let name = req.name.as_deref().unwrap_or("");
        self.store
            .get(&req.key(name))
            .map(|o| Self::present(o, &req.api_version()))
            .ok_or_else(|| ApiError::not_found(req.target()))
    }

    /// LIST, reading the state [`ListOpts::read`] asks for.
    ///
    /// Exact reads (`resourceVersionMatch=Exact`, continue tokens, legacy `limit` + N) come from
    /// [`Storage::snapshot`] at that rv and carry it as the list's resourceVersion: 410 once it
    /// is compacted; a future rv is a 504 `ResourceVersionTooLarge` at once, without a retry
    /// hint, because kube-apiserver serves these from etcd, which refuses a future revision
    /// immediately (etcd3 store `GetList`, `NewTooLargeResourceVersionError(rev, current, 0)`).
    /// A not-older-than read of a future rv is a 504 with `Retry-After: 1`; the HTTP layer
    /// first waits for the rv as the watch cache does ([`crate::ServerState`]), this function
    /// does not wait (it runs under the state lock).
    pub fn list(&self, req: &Req, opts: &ListOpts) -> ApiResult<ListResult> {
        opts.field
            .check(|f| req.def.supports_field(f))
            .map_err(|e| ApiError::bad_request(format!("fieldSelector: {e}")))?;
        let res = req.def.storage_key();
        let current = self.store.rv();
        let (read, after) = match &opts.continue_token {
            Some(tok) => {
                opts.read()?;
                if opts.resource_version.as_deref().is_some_and(|r| r != "0") {
                    return Err(ApiError::bad_request(
                        "specifying resource version is not allowed when using continue",
                    ));
                }
                let (rv, ns, name) = decode_continue(tok).ok_or_else(|| {
                    ApiError::bad_request(format!("invalid continue token {tok:?}"))
                })?;
                (
                    ListRead::Exact(rv),
                    Some(Key {
                        res: res.clone(),
                        ns,
                        name,
                    }),
                )
            }
            None => (opts.read()?, None),
        };
        let list_rv = match read {
            ListRead::Current => current,
            ListRead::NotOlderThan(n) if n > current => {
                return Err(ApiError::resource_version_too_large(
                    n,
                    current,
                    RV_TOO_LARGE_RETRY_SECONDS,
                ));
            }
            ListRead::NotOlderThan(_) => current,
            ListRead::Exact(n) => n,
        };
        let snap = self
            .store
            .snapshot(&res, req.ns.as_deref(), list_rv)
            .map_err(|e| match e {
                AtError::Compacted { .. } if after.is_some() => ApiError::gone(CONTINUE_EXPIRED),
                AtError::Compacted { .. } => ApiError::gone(LIST_EXPIRED),
                // etcd answers a read at a future revision at once (no wait, no retry hint)
                AtError::TooLarge { current } => {
                    ApiError::resource_version_too_large(list_rv, current, 0)
                }
            })?;
        let api_version = req.api_version();
        let matches = |o: &Obj| opts.label.matches(o) && opts.field.matches(o);
        let mut items = vec![];
        let mut cont = None;
        let mut remaining = None;
        if let Some(name) = opts.field.exact_name() {
            let ns = req.ns.clone().unwrap_or_default();
            let key = Key {
                res: res.clone(),
                ns,
                name: name.to_string(),
            };
            if req.ns.is_some() || !req.def.namespaced {
                if let Some(o) = snap.get(&key).filter(|o| matches(o)) {
                    items.push(Self::present(o, &api_version));
                }
            } else {
                for (_, o) in snap.range(None) {
                    if matches(o) {
                        items.push(Self::present(o, &api_version));
                    }
                }
            }
        } else {
            let mut it = snap.range(after.as_ref()).filter(|(_, o)| matches(o));
            for (k, o) in it.by_ref() {
                items.push(Self::present(o, &api_version));
                if opts.limit > 0 && items.len() >= opts.limit {
                    cont = Some(k.clone());
                    break;
                }
            }
            if let Some(last) = cont.take() {
                let rest = it.count() as u64;
                if rest > 0 {
                    cont = Some(last);
                    remaining = Some(rest);
                }
            }
        }
        Ok(ListResult {
            items,
            rv: list_rv,
            continue_token: cont.map(|k| encode_continue(list_rv, &k.ns, &k.name)),
            remaining,
        })
    }

    /// POST.
    pub fn create(
        &mut self,
        adm: &Admission,
        req: &Req,
        body: Value,
        opts: &WriteOpts,
        apply: bool,
    ) -> ApiResult<Obj> {
        if req.sub.is_some() {
            return Err(ApiError::method_not_allowed("create on a subresource"));
        }
        let mut obj = body;
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        let api_version = req.api_version();
        check_type(&mut obj, &req.def, &api_version)?;
        let now = now_rfc3339();
        {
            let m = meta_mut(&mut obj);
            m.remove("resourceVersion");
            m.remove("deletionTimestamp");
            m.remove("deletionGracePeriodSeconds");
            m.remove("selfLink");
            m.remove("managedFields");
        }
        let applied = apply.then(|| obj.clone());
        // name / generateName (apply-create takes the name from the URL)
        if meta_str(&obj, "name").is_none_or(str::is_empty)
            && let Some(n) = &req.name
        {
            meta_mut(&mut obj).insert("name".into(), json!(n));
        }
        let name = match meta_str(&obj, "name").filter(|n| !n.is_empty()) {
            Some(n) => n.to_string(),
            None => match meta_str(&obj, "generateName").filter(|n| !n.is_empty()) {
                Some(prefix) => {
                    let prefix = prefix.to_string();
                    format!("{prefix}{}", self.name_suffix())
                }
                None => {
                    return Err(ApiError::invalid(
                        &req.def.kind,
                        &req.def.group,
                        "",
                        "metadata.name",
                        "Required value: name or generateName is required",
                    ));
                }
            },
        };
        if let Err(msg) = validate_name(&req.def, &name) {
            return Err(ApiError::invalid(
                &req.def.kind,
                &req.def.group,
                &name,
                "metadata.name",
                &msg,
            ));
        }
        if let Some(u) = &req.name
            && *u != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({name}) does not match the name on the URL ({u})"
            )));
        }
        let req = Req {
            name: Some(name.clone()),
            ..req.clone()
        };
        if req.def.namespaced {
            let url_ns = req.ns.clone().unwrap_or_default();
            match meta_str(&obj, "namespace") {
                Some(n) if !n.is_empty() && n != url_ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {}
            }
            meta_mut(&mut obj).insert("namespace".into(), json!(url_ns));
        } else {
            meta_mut(&mut obj).remove("namespace");
        }
        let uid = self.uid();
        {
            let m = meta_mut(&mut obj);
            m.insert("name".into(), json!(name));
            m.insert("uid".into(), json!(uid));
            m.insert("creationTimestamp".into(), json!(now));
            m.insert("generation".into(), json!(1));
        }
        if req.def.status_subresource
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        let is_ns = req.def.group.is_empty() && req.def.plural == "namespaces";
        let is_crd = req.def.group == "apiextensions.k8s.io"
            && req.def.plural == "customresourcedefinitions";
        if is_ns {
            obj["spec"] = json!({"finalizers": [NS_FINALIZER]});
            obj["status"] = json!({"phase": "Active"});
        }
        let schema = self.decode_body(&req, opts.field_validation, &mut obj)?;
        adm.run(
            &req.def.group,
            &req.version,
            &req.def.plural,
            &mut obj,
            Operation::Create,
        )
        .map_err(|e| admission_error(e, &req, &name))?;
        fold_string_data(&req.def, &mut obj);
        validate_object_meta(&req.def, &name, &obj)?;
        if let Some(s) = &schema {
            let mutated = adm.mutates(&req.def.group, &req.version, &req.def.plural);
            crate::schema::admit(s, &req.def, &name, &mut obj, None, mutated)?;
        }
        let crd_def = if is_crd {
            let def = registry::crd_to_def(&obj).map_err(|e| {
                ApiError::invalid(&req.def.kind, &req.def.group, &name, "spec", &e.to_string())
            })?;
            if let Some(existing) = self.registry.lookup_group_resource(&def.group, &def.plural)
                && existing.crd.as_deref() != Some(name.as_str())
            {
                return Err(ApiError::invalid(
                    &req.def.kind,
                    &req.def.group,
                    &name,
                    "spec.names.plural",
                    &format!("Invalid value: \"{}\": is already served", def.plural),
                ));
            }
            let mut f = finalizers(&obj);
            if !f.iter().any(|x| x == CRD_CLEANUP) {
                f.push(CRD_CLEANUP.into());
            }
            set_finalizers(&mut obj, &f);
            let storage = def.versions.first().cloned().unwrap_or_default();
            let storage = crd_storage_version(&obj).unwrap_or(storage);
            obj["status"] = registry::crd_accepted_status(&obj, &now, &storage);
            Some(def)
        } else {
            None
        };
        // managedFields
        let kinds = Self::kinds_for(&req.def, &req.version);
        let writer = Writer {
            manager: &opts.field_manager,
            api_version: &api_version,
            subresource: "",
            scope: req.scope(),
            now: &now,
        };
        // an applier owns the fields of its configuration, not what defaulting or admission
        // added; a plain create's manager owns the whole object it created
        let set = ssa::field_set(applied.as_ref().unwrap_or(&obj), writer.scope, &kinds);
        if !set.is_empty() {
            let entry = ssa::Entry {
                manager: opts.field_manager.clone(),
                operation: if apply { "Apply" } else { "Update" }.into(),
                api_version: api_version.clone(),
                time: now.clone(),
                subresource: String::new(),
                fields: set,
            };
            meta_mut(&mut obj).insert("managedFields".into(), ssa::render_managed(&[entry]));
        }
        let key = req.key(&name);
        if self.store.get(&key).is_some() {
            return Err(ApiError::already_exists(req.target()));
        }
        self.ensure_namespace(&req)?;
        if opts.dry_run {
            return Ok(Arc::new(obj));
        }
        let obj = crate::convert::to_storage(&req.def.group, &req.def.plural, obj);
        let stored = self.store.put(key.clone(), obj);
        if let Some(def) = crd_def {
            self.registry.install(def);
        }
        let mut work = VecDeque::new();
        self.check_orphaned(&key, &mut work);
        self.settle(work);
        Ok(Self::present(&stored, &api_version))
    }

    /// If an object's every owner is absent, the garbage collector deletes it.
    fn check_orphaned(&mut self, key: &Key, work: &mut VecDeque<Work>) {
        let Some(obj) = self.store.get(key) else {
            return;
        };
        let owners = owner_uids(obj);
        if owners.is_empty() || deleting(obj) {
            return;
        }
        let alive: Vec<&String> = owners
            .iter()
            .filter(|u| self.store.key_of_uid(u).is_some())
            .collect();
        if alive.is_empty() {
            self.delete_inner(key, Propagation::Background, work);
        } else if alive.len() < owners.len() {
            let alive: Vec<String> = alive.into_iter().cloned().collect();
            let mut v = (**obj).clone();
            if let Some(refs) = meta_mut(&mut v)
                .get_mut("ownerReferences")
                .and_then(Value::as_array_mut)
            {
                refs.retain(|r| {
                    r.get("uid")
                        .and_then(Value::as_str)
                        .is_some_and(|u| alive.iter().any(|a| a == u))
                });
            }
            self.store.put(key.clone(), v);
        }
    }

    /// PUT (main resource or `/status`).
    pub fn update(
        &mut self,
        adm: &Admission,
        req: &Req,
        body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Obj> {
        let name = req.name.clone().unwrap_or_default();
        let key = req.key(&name);
        let Some(old) = self.store.get(&key).cloned() else {
            return Err(ApiError::not_found(req.target()));
        };
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        let mut body = body;
        check_type(&mut body, &req.def, &req.api_version())?;
        if let Some(n) = meta_str(&body, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(rv) = meta_str(&body, "resourceVersion").filter(|s| !s.is_empty())
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::stale(req.target()));
        }
        self.commit(adm, req, &key, &old, body, opts, None)
    }

    /// Shared tail of update/patch/apply: identity, subresource rules, admission, managedFields,
    /// generation, no-op detection, finalizer-driven deletion.
    #[allow(clippy::too_many_arguments)]
    fn commit(
        &mut self,
        adm: &Admission,
        req: &Req,
        key: &Key,
        old: &Obj,
        mut new: Value,
        opts: &WriteOpts,
        applied: Option<Value>,
    ) -> ApiResult<Obj> {
        let api_version = req.api_version();
        // every comparison below is between the request's version of the stored object and the
        // result; `new` is converted back to the stored form only when it is stored
        let old = &Self::present(old, &api_version);
        let name = key.name.clone();
        let now = now_rfc3339();
        if !new.is_object() || new.get("metadata").is_some_and(|m| !m.is_object()) {
            return Err(ApiError::invalid(
                &req.def.kind,
                &req.def.group,
                &name,
                "",
                "the result of the request is not a JSON object with object metadata",
            ));
        }
        new["apiVersion"] = json!(api_version);
        new["kind"] = json!(req.def.kind);
        // identity and system metadata come from the stored object
        let client_managed = meta(&new).and_then(|m| m.get("managedFields")).cloned();
        {
            let om = meta(old).cloned().unwrap_or_default();
            let m = meta_mut(&mut new);
            for k in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "resourceVersion",
            ] {
                match om.get(k) {
                    Some(v) => {
                        m.insert(k.into(), v.clone());
                    }
                    None => {
                        m.remove(k);
                    }
                }
            }
        }
        // subresource rules
        match (req.sub.as_deref(), req.def.status_subresource) {
            (Some("status"), _) => {
                let status = new.get("status").cloned();
                let mut merged = (**old).clone();
                match status {
                    Some(s) => merged["status"] = s,
                    None => {
                        if let Some(m) = merged.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                new = merged;
            }
            (_, true) => match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            },
            _ => {}
        }
        if deleting(old) {
            let of = finalizers(old);
            if let Some(added) = finalizers(&new).iter().find(|f| !of.contains(f)) {
                return Err(ApiError::invalid(
                    &req.def.kind,
                    &req.def.group,
                    &name,
                    "metadata.finalizers",
                    &format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{\"{added}\"}}"
                    ),
                ));
            }
        }
        // like webhooks, hooks for `plural` see main-resource writes; `/status` writes are only
        // seen by hooks registered for `plural/status`
        let adm_resource = match req.sub.as_deref() {
            Some("status") => format!("{}/status", req.def.plural),
            _ => req.def.plural.clone(),
        };
        let schema = self.decode_body(req, opts.field_validation, &mut new)?;
        adm.run(
            &req.def.group,
            &req.version,
            &adm_resource,
            &mut new,
            Operation::Update,
        )
        .map_err(|e| admission_error(e, req, &name))?;
        fold_string_data(&req.def, &mut new);
        validate_object_meta(&req.def, &name, &new)?;
        if req.sub.is_none()
            && let Err(e) = crate::validation::validate_update(&req.def, old, &new)
        {
            return Err(ApiError::invalid(
                &req.def.kind,
                &req.def.group,
                &name,
                &e.field,
                &e.message,
            ));
        }
        if let Some(s) = &schema {
            let mutated = adm.mutates(&req.def.group, &req.version, &adm_resource);
            crate::schema::admit(s, &req.def, &name, &mut new, Some(old), mutated)?;
        }
        // the namespace spec finalizer list cannot be edited through the main endpoint
        if req.def.group.is_empty() && req.def.plural == "namespaces" {
            match old.get("spec") {
                Some(s) => new["spec"] = s.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("spec");
                    }
                }
            }
        }
        let is_crd = req.def.group == "apiextensions.k8s.io"
            && req.def.plural == "customresourcedefinitions";
        let crd_def = if is_crd && req.sub.is_none() {
            let def = registry::crd_to_def(&new).map_err(|e| {
                ApiError::invalid(&req.def.kind, &req.def.group, &name, "spec", &e.to_string())
            })?;
            Some(def)
        } else {
            None
        };
        // generation
        if spec_view(old, req.def.status_subresource) != spec_view(&new, req.def.status_subresource)
        {
            let g = meta(old)
                .and_then(|m| m.get("generation"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        // managedFields
        let kinds = Self::kinds_for(&req.def, &req.version);
        let writer = Writer {
            manager: &opts.field_manager,
            api_version: &api_version,
            subresource: if req.sub.as_deref() == Some("status") {
                "status"
            } else {
                ""
            },
            scope: req.scope(),
            now: &now,
        };
        let old_managed = meta(old).and_then(|m| m.get("managedFields")).cloned();
        match (applied, client_managed) {
            (Some(mf), _) => {
                meta_mut(&mut new).insert("managedFields".into(), mf);
            }
            (None, Some(cm)) if Some(&cm) != old_managed.as_ref() => {
                // the client replaced managedFields explicitly
                if cm.as_array().is_some_and(|a| a.is_empty()) {
                    meta_mut(&mut new).remove("managedFields");
                } else {
                    meta_mut(&mut new).insert("managedFields".into(), cm);
                }
            }
            _ => {
                let mut entries = ssa::parse_managed(old);
                ssa::record_update(&mut entries, Some(old), &new, &writer, &kinds);
                let rendered = ssa::render_managed(&entries);
                let m = meta_mut(&mut new);
                if rendered.as_array().is_some_and(|a| a.is_empty()) {
                    m.remove("managedFields");
                } else {
                    m.insert("managedFields".into(), rendered);
                }
            }
        }
        if without_volatile(old) == without_volatile(&new) {
            return Ok(Self::present(old, &api_version));
        }
        if opts.dry_run {
            return Ok(Arc::new(new));
        }
        let mut work = VecDeque::new();
        let new = crate::convert::to_storage(&req.def.group, &req.def.plural, new);
        let result = if deleting(&new) && finalizers(&new).is_empty() && !self.ns_blocked(key, &new)
        {
            let gone = self.store.remove(key, Some(new));
            if let Some(g) = &gone {
                work.push_back(Work::Removed(key.clone(), g.clone()));
            }
            gone.unwrap_or_else(|| old.clone())
        } else {
            let stored = self.store.put(key.clone(), new);
            if let Some(def) = crd_def
                && !deleting(&stored)
            {
                self.registry.install(def);
            }
            if deleting(&stored) {
                work.push_back(Work::Check(key.clone()));
            }
            self.check_orphaned(key, &mut work);
            stored
        };
        self.settle(work);
        Ok(Self::present(&result, &api_version))
    }

    fn ns_blocked(&self, key: &Key, obj: &Value) -> bool {
        &*key.res == "/namespaces" && !ns_spec_finalizers(obj).is_empty()
    }

    /// PATCH with any supported content type.
    pub fn patch(
        &mut self,
        adm: &Admission,
        req: &Req,
        content_type: &str,
        body: &[u8],
        opts: &WriteOpts,
    ) -> ApiResult<Obj> {
        let name = req.name.clone().unwrap_or_default();
        let key = req.key(&name);
        let accepted: &[&str] = if req.def.is_builtin() {
            &[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
                "application/apply-patch+yaml",
            ]
        } else {
            &[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            ]
        };
        if !accepted.contains(&content_type) {
            return Err(ApiError::unsupported_media_type(content_type, accepted));
        }
        if content_type == "application/apply-patch+yaml" {
            return self.apply(adm, req, body, opts);
        }
        let patch: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
        let Some(old) = self.store.get(&key).cloned() else {
            return Err(ApiError::not_found(req.target()));
        };
        let base = if req.sub.as_deref() == Some("scale") {
            return self.patch_scale(adm, req, &key, &old, content_type, &patch, opts);
        } else {
            (*Self::present(&old, &req.api_version())).clone()
        };
        let kinds = Self::kinds_for(&req.def, &req.version);
        let new = apply_patch(base, content_type, &patch, &kinds)?;
        if let Some(rv) = meta_str(&new, "resourceVersion")
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::stale(req.target()));
        }
        self.commit(adm, req, &key, &old, new, opts, None)
    }

    #[allow(clippy::too_many_arguments)]
    fn patch_scale(
        &mut self,
        adm: &Admission,
        req: &Req,
        key: &Key,
        old: &Obj,
        content_type: &str,
        patch: &Value,
        opts: &WriteOpts,
    ) -> ApiResult<Obj> {
        let scale = Self::to_scale(req, old)?;
        let patched = apply_patch(
            (*scale).clone(),
            content_type,
            patch,
            &patch::builtin_list_kind,
        )?;
        self.write_scale(adm, req, key, old, patched, opts)
    }

    /// Render the `/scale` subresource of an object.
    pub fn to_scale(req: &Req, obj: &Obj) -> ApiResult<Obj> {
        let Some(spec) = &req.def.scale else {
            return Err(ApiError::path_not_found("scale"));
        };
        let m = meta(obj).cloned().unwrap_or_default();
        let mut md = Map::new();
        for k in [
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "creationTimestamp",
        ] {
            if let Some(v) = m.get(k) {
                md.insert(k.into(), v.clone());
            }
        }
        let mut status = json!({
            "replicas": value_at_path(obj, &spec.status_replicas_path).cloned().unwrap_or(json!(0)),
        });
        if let Some(p) = &spec.label_selector_path
            && let Some(sel) = value_at_path(obj, p)
        {
            status["selector"] = sel.clone();
        }
        Ok(Arc::new(json!({
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": md,
            "spec": {"replicas": value_at_path(obj, &spec.spec_replicas_path).cloned().unwrap_or(json!(0))},
            "status": status,
        })))
    }

    /// PUT `/scale` (also used by PATCH `/scale`).
    pub fn write_scale(
        &mut self,
        adm: &Admission,
        req: &Req,
        key: &Key,
        old: &Obj,
        scale: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Obj> {
        let Some(spec) = req.def.scale.clone() else {
            return Err(ApiError::path_not_found("scale"));
        };
        if let Some(rv) = meta_str(&scale, "resourceVersion").filter(|s| !s.is_empty())
            && Some(rv) != meta_str(old, "resourceVersion")
        {
            return Err(ApiError::stale(req.target()));
        }
        let replicas = scale
            .get("spec")
            .and_then(|s| s.get("replicas"))
            .cloned()
            .unwrap_or(json!(0));
        let mut new = (**old).clone();
        set_at_path(&mut new, &spec.spec_replicas_path, replicas);
        let main = Req {
            sub: None,
            ..req.clone()
        };
        let res = self.commit(adm, &main, key, old, new, opts, None)?;
        Self::to_scale(req, &res)
    }

    /// PUT `/scale`.
    pub fn update_scale(
        &mut self,
        adm: &Admission,
        req: &Req,
        body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Obj> {
        let name = req.name.clone().unwrap_or_default();
        let key = req.key(&name);
        let Some(old) = self.store.get(&key).cloned() else {
            return Err(ApiError::not_found(req.target()));
        };
        self.write_scale(adm, req, &key, &old, body, opts)
    }

    fn apply(
        &mut self,
        adm: &Admission,
        req: &Req,
        body: &[u8],
        opts: &WriteOpts,
    ) -> ApiResult<Obj> {
        if opts.field_manager.is_empty() {
            return Err(ApiError::bad_request(
                "PATCH, fieldManager is required for apply requests",
            ));
        }
        let text = std::str::from_utf8(body)
            .map_err(|e| ApiError::bad_request(format!("apply body is not UTF-8: {e}")))?;
        let cfg: Value = serde_saphyr::from_str(text)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        if !cfg.is_object() {
            return Err(ApiError::bad_request("apply body must be an object"));
        }
        for f in ["apiVersion", "kind"] {
            if cfg.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                return Err(ApiError::bad_request(format!(
                    "invalid object: {f} must be set in an applied configuration"
                )));
            }
        }
        let name = req.name.clone().unwrap_or_default();
        let key = req.key(&name);
        let Some(old) = self.store.get(&key).cloned() else {
            if req.sub.is_some() {
                return Err(ApiError::not_found(req.target()));
            }
            let main = Req {
                sub: None,
                ..req.clone()
            };
            return self.create(adm, &main, cfg, opts, true);
        };
        let api_version = req.api_version();
        let mut check = cfg.clone();
        check_type(&mut check, &req.def, &api_version)?;
        if let Some(n) = meta_str(&cfg, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(rv) = meta_str(&cfg, "resourceVersion").filter(|s| !s.is_empty())
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::stale(req.target()));
        }
        let now = now_rfc3339();
        let kinds = Self::kinds_for(&req.def, &req.version);
        let writer = Writer {
            manager: &opts.field_manager,
            api_version: &api_version,
            subresource: if req.sub.as_deref() == Some("status") {
                "status"
            } else {
                ""
            },
            scope: req.scope(),
            now: &now,
        };
        let live = Self::present(&old, &api_version);
        let merged = ssa::apply(&live, &cfg, &writer, opts.force, &kinds).map_err(|conflicts| {
            let n = conflicts.len();
            let msgs: Vec<String> = conflicts
                .iter()
                .map(|c| {
                    format!(
                        "conflict with \"{}\" using {}: {}",
                        c.manager, c.api_version, c.field
                    )
                })
                .collect();
            let mut e = ApiError::conflict(req.target(), "");
            e.message = format!(
                "Apply failed with {n} conflict{}: {}",
                if n == 1 { "" } else { "s" },
                msgs.join("\n")
            );
            e.details = Some(Box::new(json!({
                "name": name, "group": req.def.group, "kind": req.def.plural,
                "causes": conflicts.iter().map(|c| json!({
                    "reason": "FieldManagerConflict",
                    "message": format!("conflict with \"{}\" using {}", c.manager, c.api_version),
                    "field": c.field,
                })).collect::<Vec<_>>(),
            })));
            e
        })?;
        let managed = meta(&merged)
            .and_then(|m| m.get("managedFields"))
            .cloned()
            .unwrap_or(json!([]));
        self.commit(adm, req, &key, &old, merged, opts, Some(managed))
    }

    /// DELETE one object.
    pub fn delete(&mut self, adm: &Admission, req: &Req, opts: &DeleteOpts) -> ApiResult<Deleted> {
        let name = req.name.clone().unwrap_or_default();
        let key = req.key(&name);
        let Some(obj) = self.store.get(&key).cloned() else {
            return Err(ApiError::not_found(req.target()));
        };
        if let Some(uid) = &opts.uid
            && Some(uid.as_str()) != uid_of(&obj)
        {
            return Err(ApiError::conflict(
                req.target(),
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    uid_of(&obj).unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && Some(rv.as_str()) != meta_str(&obj, "resourceVersion")
        {
            return Err(ApiError::conflict(
                req.target(),
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&obj, "resourceVersion").unwrap_or("")
                ),
            ));
        }
        let mut probe = (*obj).clone();
        adm.run(
            &req.def.group,
            &req.version,
            &req.def.plural,
            &mut probe,
            Operation::Delete,
        )
        .map_err(|e| admission_error(e, req, &name))?;
        if opts.dry_run {
            return Ok(Deleted::Pending(obj));
        }
        let mut work = VecDeque::new();
        let policy = opts.propagation.unwrap_or(Propagation::Background);
        let out = self.delete_inner(&key, policy, &mut work);
        self.settle(work);
        let api_version = req.api_version();
        Ok(match out {
            Some(Deleted::Pending(_)) => match self.store.get(&key) {
                Some(o) => Deleted::Pending(Self::present(o, &api_version)),
                None => Deleted::Gone(obj),
            },
            Some(Deleted::Gone(o)) => Deleted::Gone(Self::present(&o, &api_version)),
            None => Deleted::Gone(obj),
        })
    }

    /// DELETE a collection; returns the affected objects.
    pub fn delete_collection(
        &mut self,
        adm: &Admission,
        req: &Req,
        list: &ListOpts,
        opts: &DeleteOpts,
    ) -> ApiResult<Vec<Obj>> {
        let items = self.list(req, list)?.items;
        let mut out = vec![];
        for item in items {
            let name = meta_str(&item, "name").unwrap_or_default().to_string();
            let ns = meta_str(&item, "namespace").map(str::to_string);
            let r = Req {
                name: Some(name),
                ns: if req.def.namespaced { ns } else { None },
                ..req.clone()
            };
            match self.delete(adm, &r, opts) {
                Ok(Deleted::Gone(o)) | Ok(Deleted::Pending(o)) => out.push(o),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Start deletion of an object. Returns `None` when it does not exist.
    fn delete_inner(
        &mut self,
        key: &Key,
        policy: Propagation,
        work: &mut VecDeque<Work>,
    ) -> Option<Deleted> {
        let obj = self.store.get(key)?.clone();
        let mut v = (*obj).clone();
        let mut fins = finalizers(&v);
        let want = match policy {
            Propagation::Foreground => Some(FOREGROUND),
            Propagation::Orphan => Some(ORPHAN),
            Propagation::Background => None,
        };
        if deleting(&obj) {
            if let Some(f) = want
                && !fins.iter().any(|x| x == f)
            {
                fins.push(f.into());
                set_finalizers(&mut v, &fins);
                let stored = self.store.put(key.clone(), v);
                work.push_back(Work::Check(key.clone()));
                return Some(Deleted::Pending(stored));
            }
            return Some(Deleted::Pending(obj));
        }
        if let Some(f) = want
            && !fins.iter().any(|x| x == f)
        {
            fins.push(f.into());
        }
        let is_ns = &*key.res == "/namespaces";
        if fins.is_empty() && !is_ns {
            let gone = self.store.remove(key, None)?;
            work.push_back(Work::Removed(key.clone(), gone.clone()));
            return Some(Deleted::Gone(gone));
        }
        set_finalizers(&mut v, &fins);
        let now = now_rfc3339();
        let generation = meta(&v)
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        {
            let m = meta_mut(&mut v);
            m.insert("deletionTimestamp".into(), json!(now));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            m.insert("generation".into(), json!(generation + 1));
        }
        if is_ns {
            v["status"] = json!({"phase": "Terminating"});
        }
        let stored = self.store.put(key.clone(), v);
        work.push_back(Work::Check(key.clone()));
        Some(Deleted::Pending(stored))
    }

    fn put_finalizers(&mut self, key: &Key, fins: &[String]) {
        if let Some(o) = self.store.get(key) {
            let mut v = (**o).clone();
            set_finalizers(&mut v, fins);
            self.store.put(key.clone(), v);
        }
    }

    /// Run garbage collection, namespace and CRD cleanup until nothing changes.
    fn settle(&mut self, mut work: VecDeque<Work>) {
        let mut guard = 0usize;
        while let Some(w) = work.pop_front() {
            guard += 1;
            if guard > 1_000_000 {
                tracing::error!("garbage collection did not settle after 1e6 steps");
                break;
            }
            match w {
                Work::Check(key) => self.check_deleting(&key, &mut work),
                Work::Removed(key, obj) => self.on_removed(&key, &obj, &mut work),
            }
        }
    }

    fn check_deleting(&mut self, key: &Key, work: &mut VecDeque<Work>) {
        let Some(obj) = self.store.get(key).cloned() else {
            return;
        };
        if !deleting(&obj) {
            return;
        }
        let uid = uid_of(&obj).unwrap_or("").to_string();
        let mut fins = finalizers(&obj);
        if fins.iter().any(|f| f == ORPHAN) {
            for dep in self.store.dependents(&uid) {
                if let Some(d) = self.store.get(&dep) {
                    let mut v = (**d).clone();
                    if let Some(refs) = meta_mut(&mut v)
                        .get_mut("ownerReferences")
                        .and_then(Value::as_array_mut)
                    {
                        refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()));
                        if refs.is_empty() {
                            meta_mut(&mut v).remove("ownerReferences");
                        }
                    }
                    self.store.put(dep, v);
                }
            }
            fins.retain(|f| f != ORPHAN);
            self.put_finalizers(key, &fins);
        }
        if fins.iter().any(|f| f == FOREGROUND) {
            for dep in self.store.dependents(&uid) {
                let has_own = self
                    .store
                    .get(&dep)
                    .and_then(|d| uid_of(d).map(|u| !self.store.dependents(u).is_empty()))
                    .unwrap_or(false);
                let p = if has_own {
                    Propagation::Foreground
                } else {
                    Propagation::Background
                };
                self.delete_inner(&dep, p, work);
            }
            let blocking = self.store.dependents(&uid).iter().any(|dep| {
                self.store.get(dep).is_some_and(|d| {
                    meta(d)
                        .and_then(|m| m.get("ownerReferences"))
                        .and_then(Value::as_array)
                        .is_some_and(|refs| {
                            refs.iter().any(|r| {
                                r.get("uid").and_then(Value::as_str) == Some(uid.as_str())
                                    && r.get("blockOwnerDeletion").and_then(Value::as_bool)
                                        == Some(true)
                            })
                        })
                })
            });
            if !blocking {
                fins.retain(|f| f != FOREGROUND);
                self.put_finalizers(key, &fins);
            }
        }
        if &*key.res == "/namespaces" {
            let mut nsf = ns_spec_finalizers(&obj);
            if nsf.iter().any(|f| f == NS_FINALIZER) {
                for k in self.store.namespace_keys(&key.name) {
                    self.delete_inner(&k, Propagation::Background, work);
                }
                if self.store.namespace_keys(&key.name).is_empty() {
                    nsf.retain(|f| f != NS_FINALIZER);
                    if let Some(o) = self.store.get(key) {
                        let mut v = (**o).clone();
                        v["spec"]["finalizers"] = json!(nsf);
                        self.store.put(key.clone(), v);
                    }
                }
            }
            if !ns_spec_finalizers(self.store.get(key).map(|o| &**o).unwrap_or(&json!({})))
                .is_empty()
            {
                return;
            }
        }
        if &*key.res == "apiextensions.k8s.io/customresourcedefinitions"
            && fins.iter().any(|f| f == CRD_CLEANUP)
        {
            if let Some(def) = self
                .registry
                .all()
                .iter()
                .find(|d| d.crd.as_deref() == Some(key.name.as_str()))
                .cloned()
            {
                let res = def.storage_key();
                let keys: Vec<Key> = self
                    .store
                    .range(&res, None, None)
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in keys {
                    self.delete_inner(&k, Propagation::Background, work);
                }
                if self.store.range(&res, None, None).next().is_none() {
                    self.registry.uninstall_crd(&key.name);
                    fins.retain(|f| f != CRD_CLEANUP);
                    self.put_finalizers(key, &fins);
                }
            } else {
                fins.retain(|f| f != CRD_CLEANUP);
                self.put_finalizers(key, &fins);
            }
        }
        if fins.is_empty()
            && let Some(gone) = self.store.remove(key, None)
        {
            work.push_back(Work::Removed(key.clone(), gone));
        }
    }

    fn on_removed(&mut self, key: &Key, obj: &Obj, work: &mut VecDeque<Work>) {
        if let Some(uid) = uid_of(obj) {
            for dep in self.store.dependents(uid) {
                self.check_orphaned(&dep, work);
            }
        }
        for owner in owner_uids(obj) {
            if let Some(k) = self.store.key_of_uid(&owner).cloned()
                && self.store.get(&k).is_some_and(|o| deleting(o))
            {
                work.push_back(Work::Check(k));
            }
        }
        if !key.ns.is_empty() {
            let nk = Key {
                res: Arc::from("/namespaces"),
                ns: String::new(),
                name: key.ns.clone(),
            };
            if self.store.get(&nk).is_some_and(|o| deleting(o)) {
                work.push_back(Work::Check(nk));
            }
        }
        let (group, plural) = split_res(&key.res);
        if let Some(crd) = self
            .registry
            .lookup_group_resource(group, plural)
            .and_then(|d| d.crd.clone())
        {
            let ck = Key {
                res: Arc::from("apiextensions.k8s.io/customresourcedefinitions"),
                ns: String::new(),
                name: crd,
            };
            if self.store.get(&ck).is_some_and(|o| deleting(o)) {
                work.push_back(Work::Check(ck));
            }
        }
        if &*key.res == "apiextensions.k8s.io/customresourcedefinitions" {
            self.registry.uninstall_crd(&key.name);
        }
    }
}

fn crd_storage_version(crd: &Value) -> Option<String> {
    crd.get("spec")?
        .get("versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))?
        .get("name")?
        .as_str()
        .map(str::to_string)
}

/// Check (and default) `apiVersion`/`kind` of a request body.
fn check_type(obj: &mut Value, def: &ResourceDef, api_version: &str) -> ApiResult<()> {
    match obj.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => obj["apiVersion"] = json!(api_version),
        Some(v) if v == api_version => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({api_version})"
            )));
        }
    }
    match obj.get("kind").and_then(Value::as_str) {
        None | Some("") => obj["kind"] = json!(def.kind),
        Some(k) if k == def.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                def.kind
            )));
        }
    }
    Ok(())
}

/// Apply a non-apply patch to a base object.
pub fn apply_patch(
    mut base: Value,
    content_type: &str,
    patch: &Value,
    kinds: &dyn Fn(&[String]) -> ListKind,
) -> ApiResult<Value> {
    match content_type {
        "application/merge-patch+json" => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("merge patch must be a JSON object"));
            }
            patch::merge_patch(&mut base, patch);
            Ok(base)
        }
        "application/json-patch+json" => {
            patch::json_patch(&mut base, patch)
                .map_err(|e| ApiError::new(422, "Invalid", e.to_string()))?;
            Ok(base)
        }
        "application/strategic-merge-patch+json" => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "strategic merge patch must be a JSON object",
                ));
            }
            patch::strategic_merge(&base, patch, kinds)
                .map_err(|e| ApiError::bad_request(e.to_string()))
        }
        other => Err(ApiError::unsupported_media_type(other, &[])),
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// Encode a continue token (opaque to clients).
pub fn encode_continue(rv: u64, ns: &str, name: &str) -> String {
    hex(&json!({"v": "meta.k8s.io/v1", "rv": rv, "ns": ns, "start": name}).to_string())
}

/// Decode a continue token.
pub fn decode_continue(tok: &str) -> Option<(u64, String, String)> {
    let v: Value = serde_json::from_str(&unhex(tok)?).ok()?;
    Some((
        v.get("rv")?.as_u64()?,
        v.get("ns")?.as_str()?.to_string(),
        v.get("start")?.as_str()?.to_string(),
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::store::EventType;

    fn req(inner: &Inner, group: &str, plural: &str, ns: Option<&str>, name: Option<&str>) -> Req {
        Req {
            def: inner.registry.lookup(group, "v1", plural).unwrap().clone(),
            version: "v1".into(),
            ns: ns.map(str::to_string),
            name: name.map(str::to_string),
            sub: None,
        }
    }

    fn opts() -> WriteOpts {
        WriteOpts {
            field_manager: "test".into(),
            ..Default::default()
        }
    }

    fn setup() -> (Inner, Admission) {
        let mut i = Inner::new(100, 1);
        let a = Admission::default();
        let r = req(&i, "", "namespaces", None, None);
        i.create(&a, &r, json!({"metadata": {"name": "ns"}}), &opts(), false)
            .unwrap();
        (i, a)
    }

    #[test]
    fn continue_roundtrip() {
        let t = encode_continue(5, "a", "b:c");
        assert_eq!(decode_continue(&t), Some((5, "a".into(), "b:c".into())));
        assert_eq!(decode_continue("zz"), None);
    }

    /// Every object of the given resources, in key order, as stored now.
    fn everything(i: &Inner, res: &[Arc<str>]) -> Vec<(Key, Obj)> {
        res.iter()
            .flat_map(|r| i.store.range(r, None, None))
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect()
    }

    /// The same, as of `rv`, read from the retained history.
    fn everything_at(i: &Inner, res: &[Arc<str>], rv: u64) -> Vec<(Key, Obj)> {
        let mut out = vec![];
        for r in res {
            let snap = i.store.snapshot(r, None, rv).unwrap();
            out.extend(snap.range(None).map(|(k, o)| (k.clone(), o.clone())));
        }
        out
    }

    /// Deletions by GC (background and foreground), finalizer removal, namespace deletion and
    /// deletecollection all record `prev`, so the state after every operation can be read back
    /// from history.
    #[test]
    fn history_covers_gc_finalizer_namespace_and_collection_deletes() {
        let (mut i, a) = setup();
        let cm = req(&i, "", "configmaps", Some("ns"), None);
        let res: Vec<Arc<str>> = [("", "configmaps"), ("", "secrets"), ("", "namespaces")]
            .iter()
            .map(|(g, p)| req(&i, g, p, None, None).def.storage_key())
            .collect();
        let mut recorded = vec![(i.store.rv(), everything(&i, &res))];
        macro_rules! step {
            ($e:expr) => {{
                let out = $e;
                recorded.push((i.store.rv(), everything(&i, &res)));
                out
            }};
        }
        let owned = |name: &str, owner: &Obj, block: bool, fins: Value| {
            json!({"metadata": {"name": name, "finalizers": fins, "labels": {"k": "v"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                "blockOwnerDeletion": block}]}})
        };
        // background GC of a chain
        let p =
            step!(i.create(&a, &cm, json!({"metadata": {"name": "p"}}), &opts(), false)).unwrap();
        let c = step!(i.create(&a, &cm, owned("c", &p, false, json!([])), &opts(), false)).unwrap();
        step!(i.create(&a, &cm, owned("g", &c, false, json!([])), &opts(), false)).unwrap();
        let del = |p: Propagation| DeleteOpts {
            propagation: Some(p),
            ..Default::default()
        };
        let pr = req(&i, "", "configmaps", Some("ns"), Some("p"));
        step!(i.delete(&a, &pr, &del(Propagation::Background))).unwrap();
        // foreground deletion held by a finalizer, released by removing it
        let p2 =
            step!(i.create(&a, &cm, json!({"metadata": {"name": "p2"}}), &opts(), false)).unwrap();
        step!(i.create(
            &a,
            &cm,
            owned("c2", &p2, true, json!(["x/y"])),
            &opts(),
            false
        ))
        .unwrap();
        let p2r = req(&i, "", "configmaps", Some("ns"), Some("p2"));
        step!(i.delete(&a, &p2r, &del(Propagation::Foreground))).unwrap();
        let c2r = req(&i, "", "configmaps", Some("ns"), Some("c2"));
        let mut c2 = (*i.get(&c2r).unwrap()).clone();
        c2["metadata"]["finalizers"] = json!([]);
        step!(i.update(&a, &c2r, c2, &opts())).unwrap();
        assert!(i.get(&p2r).is_err(), "owner went with its last dependent");
        // deletecollection with a selector
        for n in ["d1", "d2", "keep"] {
            let labels = if n == "keep" {
                json!({})
            } else {
                json!({"k": "v"})
            };
            step!(i.create(
                &a,
                &cm,
                json!({"metadata": {"name": n, "labels": labels}}),
                &opts(),
                false
            ))
            .unwrap();
        }
        let sel = ListOpts {
            label: LabelSelector::parse("k=v").unwrap(),
            ..Default::default()
        };
        let gone = step!(i.delete_collection(&a, &cm, &sel, &DeleteOpts::default())).unwrap();
        assert_eq!(gone.len(), 2);
        // namespace deletion removes its contents and then the namespace
        let nr = req(&i, "", "namespaces", None, None);
        step!(i.create(
            &a,
            &nr,
            json!({"metadata": {"name": "ns2"}}),
            &opts(),
            false
        ))
        .unwrap();
        let cm2 = req(&i, "", "configmaps", Some("ns2"), None);
        step!(i.create(&a, &cm2, json!({"metadata": {"name": "x"}}), &opts(), false)).unwrap();
        let sec = req(&i, "", "secrets", Some("ns2"), None);
        step!(i.create(&a, &sec, json!({"metadata": {"name": "s"}}), &opts(), false)).unwrap();
        let n2 = req(&i, "", "namespaces", None, Some("ns2"));
        step!(i.delete(&a, &n2, &DeleteOpts::default())).unwrap();
        assert!(
            i.store
                .range(&res[2], None, None)
                .all(|(k, _)| k.name != "ns2")
        );

        let events = i.store.events_since(i.store.compacted()).unwrap();
        assert!(events.iter().any(|e| e.ty == EventType::Deleted));
        for e in &events {
            if e.ty != EventType::Added {
                assert!(
                    e.prev.is_some(),
                    "{:?} {:?} at {} without prev",
                    e.ty,
                    e.key,
                    e.rv
                );
            }
        }
        assert!(recorded.len() > 15);
        for (rv, want) in &recorded {
            assert_eq!(&everything_at(&i, &res, *rv), want, "state at rv {rv}");
        }
    }

    fn item_names(l: &ListResult) -> Vec<String> {
        l.items
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    fn at(rv: u64, m: Option<&str>) -> ListOpts {
        ListOpts {
            resource_version: Some(rv.to_string()),
            resource_version_match: m.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn list_reads_past_resource_versions() {
        let (mut i, a) = setup();
        let cm = req(&i, "", "configmaps", Some("ns"), None);
        for n in ["a", "b", "c"] {
            i.create(
                &a,
                &cm,
                json!({"metadata": {"name": n}, "data": {"v": "1"}}),
                &opts(),
                false,
            )
            .unwrap();
        }
        let rv1 = i.store.rv();
        let ar = req(&i, "", "configmaps", Some("ns"), Some("a"));
        let mut av = (*i.get(&ar).unwrap()).clone();
        av["data"]["v"] = json!("2");
        i.update(&a, &ar, av, &opts()).unwrap();
        let br = req(&i, "", "configmaps", Some("ns"), Some("b"));
        i.delete(&a, &br, &DeleteOpts::default()).unwrap();
        i.create(&a, &cm, json!({"metadata": {"name": "d"}}), &opts(), false)
            .unwrap();
        let now = i.store.rv();

        // Exact: the old state, stamped with the old rv
        let old = i.list(&cm, &at(rv1, Some("Exact"))).unwrap();
        assert_eq!(item_names(&old), ["a", "b", "c"]);
        assert_eq!(old.items[0]["data"]["v"], "1");
        assert_eq!(old.rv, rv1);
        // the same through the all-namespaces and metadata.name paths
        let all = req(&i, "", "configmaps", None, None);
        assert_eq!(
            item_names(&i.list(&all, &at(rv1, Some("Exact"))).unwrap()),
            ["a", "b", "c"]
        );
        let mut by_name = at(rv1, Some("Exact"));
        by_name.field = FieldSelector::parse("metadata.name=b").unwrap();
        assert_eq!(item_names(&i.list(&cm, &by_name).unwrap()), ["b"]);
        // legacy: limit with resourceVersion=N and no match is exact too
        let mut legacy = at(rv1, None);
        legacy.limit = 10;
        assert_eq!(item_names(&i.list(&cm, &legacy).unwrap()), ["a", "b", "c"]);
        // NotOlderThan (or no match, no limit) an old rv: the current state
        for m in [Some("NotOlderThan"), None] {
            let l = i.list(&cm, &at(rv1, m)).unwrap();
            assert_eq!(item_names(&l), ["a", "c", "d"]);
            assert_eq!(l.rv, now);
        }
        assert_eq!(
            item_names(&i.list(&cm, &at(0, None)).unwrap()),
            ["a", "c", "d"]
        );

        // pagination reads every page from the first page's snapshot
        let first = i
            .list(
                &cm,
                &ListOpts {
                    limit: 2,
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(item_names(&first), ["a", "c"]);
        assert_eq!(first.remaining, Some(1));
        let cr = req(&i, "", "configmaps", Some("ns"), Some("d"));
        i.delete(&a, &cr, &DeleteOpts::default()).unwrap();
        i.create(&a, &cm, json!({"metadata": {"name": "e"}}), &opts(), false)
            .unwrap();
        let next = ListOpts {
            limit: 2,
            continue_token: first.continue_token.clone(),
            ..Default::default()
        };
        let second = i.list(&cm, &next).unwrap();
        assert_eq!(item_names(&second), ["d"]);
        assert_eq!(second.rv, now);
        assert!(second.continue_token.is_none());

        // too new: 504 at once for exact reads, with a retry hint for not-older-than
        let e = i
            .list(&cm, &at(i.store.rv() + 5, Some("Exact")))
            .unwrap_err();
        assert_eq!(
            (e.code, e.reason.as_str(), e.retry_after),
            (504, "Timeout", None)
        );
        assert_eq!(
            e.message,
            format!(
                "Timeout: Too large resource version: {}, current: {}",
                i.store.rv() + 5,
                i.store.rv()
            )
        );
        assert_eq!(
            e.to_status()["details"]["causes"][0]["reason"],
            "ResourceVersionTooLarge"
        );
        let e = i
            .list(&cm, &at(i.store.rv() + 1, Some("NotOlderThan")))
            .unwrap_err();
        assert_eq!((e.code, e.retry_after), (504, Some(1)));

        // invalid combinations
        for (o, code) in [
            (at(0, Some("Exact")), 422),
            (
                ListOpts {
                    resource_version_match: Some("Exact".into()),
                    ..Default::default()
                },
                422,
            ),
            (at(rv1, Some("Newest")), 422),
            (
                ListOpts {
                    continue_token: first.continue_token.clone(),
                    ..at(rv1, Some("Exact"))
                },
                422,
            ),
            (
                ListOpts {
                    continue_token: first.continue_token.clone(),
                    ..at(rv1, None)
                },
                400,
            ),
            (
                ListOpts {
                    resource_version: Some("x".into()),
                    ..Default::default()
                },
                400,
            ),
        ] {
            assert_eq!(i.list(&cm, &o).unwrap_err().code, code, "{o:?}");
        }
        let e = i.list(&cm, &at(0, Some("Exact"))).unwrap_err();
        assert_eq!(
            e.message,
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
        );

        // compacted history: 410
        i.store.compact_all();
        let e = i.list(&cm, &at(rv1, Some("Exact"))).unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
        assert_eq!(
            e.message,
            "The resourceVersion for the provided list is too old."
        );
        let e = i.list(&cm, &next).unwrap_err();
        assert_eq!(e.code, 410);
        assert!(
            e.message
                .starts_with("The provided continue parameter is too old")
        );
        let l = i.list(&cm, &at(i.store.rv(), Some("Exact"))).unwrap();
        assert_eq!(item_names(&l), ["a", "c", "e"]);
    }

    #[test]
    fn secret_string_data_is_folded() {
        let (mut i, a) = setup();
        let r = req(&i, "", "secrets", Some("ns"), None);
        let s = i
            .create(
                &a,
                &r,
                json!({"metadata": {"name": "s"}, "stringData": {"p": "hello"}}),
                &opts(),
                false,
            )
            .unwrap();
        assert_eq!(s["data"]["p"], "aGVsbG8=");
        assert!(s.get("stringData").is_none());
    }

    #[test]
    fn patches_that_break_the_object_are_rejected() {
        let (mut i, a) = setup();
        let r = req(&i, "", "configmaps", Some("ns"), None);
        i.create(&a, &r, json!({"metadata": {"name": "c"}}), &opts(), false)
            .unwrap();
        let r = req(&i, "", "configmaps", Some("ns"), Some("c"));
        let root = br#"[{"op": "replace", "path": "", "value": [1]}]"#;
        let e = i
            .patch(&a, &r, "application/json-patch+json", root, &opts())
            .unwrap_err();
        assert_eq!(e.code, 422);
        let e = i
            .patch(
                &a,
                &r,
                "application/merge-patch+json",
                br#"{"metadata": 5}"#,
                &opts(),
            )
            .unwrap_err();
        assert_eq!(e.code, 422);
        let e = i
            .patch(&a, &r, "application/merge-patch+json", b"not json", &opts())
            .unwrap_err();
        assert_eq!(e.code, 400);
        let e = i.patch(&a, &r, "text/plain", b"{}", &opts()).unwrap_err();
        assert_eq!(e.code, 415);
    }

    #[test]
    fn labels() {
        assert!(
            validate_labels(Some(
                &json!({"app": "web", "example.com/x": "", "a_b.c-d": "v.1"})
            ))
            .is_ok()
        );
        assert!(validate_labels(Some(&json!({"bad key": "v"}))).is_err());
        assert!(validate_labels(Some(&json!({"k": "-v"}))).is_err());
        assert!(validate_labels(Some(&json!({"k": 1}))).is_err());
        assert!(validate_labels(Some(&json!({"Bad_Prefix/k": "v"}))).is_err());
    }

    #[test]
    fn names() {
        let r = Registry::with_builtins();
        let cm = r.lookup("", "v1", "configmaps").unwrap();
        assert!(validate_name(cm, "a.b-c").is_ok());
        assert!(validate_name(cm, "A").is_err());
        let ns = r.lookup("", "v1", "namespaces").unwrap();
        assert!(validate_name(ns, "a.b").is_err());
        let role = r
            .lookup("rbac.authorization.k8s.io", "v1", "clusterroles")
            .unwrap();
        assert!(validate_name(role, "system:foo").is_ok());
    }

    #[test]
    fn create_update_generation_and_noop() {
        let (mut i, a) = setup();
        let r = req(&i, "apps", "deployments", Some("ns"), None);
        let d = i
            .create(
                &a,
                &r,
                json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}, "status": {"x": 1}}),
                &opts(),
                false,
            )
            .unwrap();
        assert_eq!(d["metadata"]["generation"], 1);
        assert!(d.get("status").is_none());
        let r = req(&i, "apps", "deployments", Some("ns"), Some("d"));
        let same = i.update(&a, &r, (*d).clone(), &opts()).unwrap();
        assert_eq!(
            same["metadata"]["resourceVersion"],
            d["metadata"]["resourceVersion"]
        );
        let mut changed = (*d).clone();
        changed["spec"]["replicas"] = json!(2);
        let u = i.update(&a, &r, changed.clone(), &opts()).unwrap();
        assert_eq!(u["metadata"]["generation"], 2);
        // stale rv
        let e = i.update(&a, &r, changed, &opts()).unwrap_err();
        assert_eq!(e.code, 409);
        // label change does not bump generation
        let mut l = (*u).clone();
        l["metadata"]["labels"] = json!({"a": "b"});
        let u2 = i.update(&a, &r, l, &opts()).unwrap();
        assert_eq!(u2["metadata"]["generation"], 2);
    }

    #[test]
    fn gc_background_foreground_orphan() {
        let (mut i, a) = setup();
        let cm = req(&i, "", "configmaps", Some("ns"), None);
        let mk = |i: &mut Inner, name: &str, owner: Option<&Obj>, block: bool| {
            let mut body = json!({"metadata": {"name": name}});
            if let Some(o) = owner {
                body["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
                    "name": o["metadata"]["name"], "uid": o["metadata"]["uid"], "blockOwnerDeletion": block}]);
            }
            i.create(&a, &cm, body, &opts(), false).unwrap()
        };
        let p = mk(&mut i, "p", None, false);
        let c = mk(&mut i, "c", Some(&p), false);
        mk(&mut i, "gc", Some(&c), false);
        let del = |i: &mut Inner, name: &str, p: Propagation| {
            let r = req(i, "", "configmaps", Some("ns"), Some(name));
            i.delete(
                &a,
                &r,
                &DeleteOpts {
                    propagation: Some(p),
                    ..Default::default()
                },
            )
            .unwrap()
        };
        del(&mut i, "p", Propagation::Background);
        assert_eq!(i.store.len(), 1, "only the namespace remains");
        let p = mk(&mut i, "p", None, false);
        mk(&mut i, "c", Some(&p), false);
        del(&mut i, "p", Propagation::Orphan);
        let c = i
            .get(&req(&i, "", "configmaps", Some("ns"), Some("c")))
            .unwrap();
        assert!(c["metadata"].get("ownerReferences").is_none());
        // foreground waits on a blocking dependent that has a finalizer
        let p = mk(&mut i, "p2", None, false);
        let mut body = json!({"metadata": {"name": "c2", "finalizers": ["x/y"], "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "p2", "uid": p["metadata"]["uid"], "blockOwnerDeletion": true}]}});
        body["data"] = json!({});
        i.create(&a, &cm, body, &opts(), false).unwrap();
        let out = del(&mut i, "p2", Propagation::Foreground);
        assert!(matches!(out, Deleted::Pending(_)));
        let c2r = req(&i, "", "configmaps", Some("ns"), Some("c2"));
        let c2 = i.get(&c2r).unwrap();
        assert!(c2["metadata"]["deletionTimestamp"].is_string());
        let mut c2v = (*c2).clone();
        c2v["metadata"]["finalizers"] = json!([]);
        i.update(&a, &c2r, c2v, &opts()).unwrap();
        assert!(
            i.get(&req(&i, "", "configmaps", Some("ns"), Some("p2")))
                .is_err()
        );
    }

    #[test]
    fn namespace_deletion_removes_contents() {
        let (mut i, a) = setup();
        let cm = req(&i, "", "configmaps", Some("ns"), None);
        i.create(&a, &cm, json!({"metadata": {"name": "x"}}), &opts(), false)
            .unwrap();
        let n = req(&i, "", "namespaces", None, Some("ns"));
        i.delete(&a, &n, &DeleteOpts::default()).unwrap();
        assert!(i.store.is_empty());
    }
}
