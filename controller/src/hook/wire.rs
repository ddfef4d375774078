//! The controller's side of the hook wire format. The types are kmeta-wire's (shared with the
//! `kmeta-hook` SDK); this module builds requests (object maps keyed `<Kind>.<apiVersion>`, then
//! by object key: v1 relative, v2 uniform) and decodes responses in loose or strict mode.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

use serde::de::{DeserializeOwned, Error as _, IgnoredAny};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

pub use kmeta_wire::{
    CustomizeRequest, CustomizeResponse, DecoratorSyncRequest, DecoratorSyncResponse, ObjectMap,
    RelatedResourceRule, SyncRequest, SyncResponse, WireFields, group_key,
};

use crate::api::{Hook, HookVersion, ResponseUnmarshallMode};
use crate::object::{ObjectView, meta_str};

/// A hook response that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The body is not valid JSON or does not fit the response type.
    #[error("decoding {hook} hook response ({mode} mode): {message}")]
    Decode {
        /// `sync`, `finalize`, `customize`.
        hook: &'static str,
        /// `loose` or `strict`.
        mode: &'static str,
        /// Cause, with line/column.
        message: String,
    },
    /// An attachment in a DecoratorController's response is not an object or lacks
    /// apiVersion/kind/name.
    #[error("{hook} hook response: attachments[{index}]: {message}")]
    Attachment {
        /// Hook.
        hook: &'static str,
        /// Position in `attachments`.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// A child in the response is not an object or lacks apiVersion/kind/name.
    #[error("{hook} hook response: children[{index}]: {message}")]
    Child {
        /// Hook.
        hook: &'static str,
        /// Position in `children`.
        index: usize,
        /// What is wrong.
        message: String,
    },
}

/// The key of one object inside a group: v1 uses `name`, or `namespace/name` for a namespaced
/// object seen by a cluster-scoped parent; v2 always uses `namespace/name` for namespaced objects
/// and `name` for cluster-scoped ones.
pub fn object_key(version: HookVersion, parent_namespaced: bool, obj: &impl ObjectView) -> String {
    let name = obj.name();
    let namespace = Some(obj.namespace()).filter(|ns| !ns.is_empty());
    match (namespace, version) {
        (Some(ns), HookVersion::V2) => format!("{ns}/{name}"),
        (Some(ns), HookVersion::V1) if !parent_namespaced => format!("{ns}/{name}"),
        _ => name.to_owned(),
    }
}

/// Builds a `children`/`related` map: one (possibly empty) entry per declared group, then every
/// object under its group (objects of undeclared groups get their own entry).
pub fn object_map<'a>(
    version: HookVersion,
    parent_namespaced: bool,
    declared: &[String],
    objects: impl IntoIterator<Item = &'a Value>,
) -> Map<String, Value> {
    let mut out = ObjectMap::new();
    for g in declared {
        out.declare(g);
    }
    for obj in objects {
        let av = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
        out.insert(
            &group_key(av, kind),
            object_key(version, parent_namespaced, obj),
            obj.clone(),
        );
    }
    out.into()
}

/// An object map (`children`) borrowed from the observed objects: it serializes to the same
/// JSON as [`object_map`] without copying an object. Groups and objects keep their order.
#[derive(Debug)]
pub struct ObjectMapRef<'a, T = Value>(Vec<(String, Vec<(String, &'a T)>)>);

/// One group of an [`ObjectMapRef`].
struct GroupRef<'b, 'a, T>(&'b [(String, &'a T)]);

impl<T: Serialize> Serialize for GroupRef<'_, '_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, *v)))
    }
}

impl<T: Serialize> Serialize for ObjectMapRef<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(g, objs)| (g, GroupRef(objs))))
    }
}

/// [`object_map`] by reference: one (possibly empty) entry per declared group, then every
/// object under its group (a later object with the same key replaces an earlier one).
pub fn object_map_ref<'a, T: ObjectView>(
    version: HookVersion,
    parent_namespaced: bool,
    declared: &[String],
    objects: impl IntoIterator<Item = &'a T>,
) -> ObjectMapRef<'a, T> {
    let mut groups: Vec<(String, Vec<(String, &'a T)>)> =
        declared.iter().map(|g| (g.clone(), Vec::new())).collect();
    for obj in objects {
        let (av, kind) = (obj.api_version(), obj.kind());
        // `g == group_key(av, kind)` without building the key for every object
        let is_group = |g: &str| {
            g.len() == kind.len() + 1 + av.len()
                && g.starts_with(kind)
                && g.ends_with(av)
                && g.as_bytes()[kind.len()] == b'.'
        };
        let idx = match groups.iter().position(|(g, _)| is_group(g)) {
            Some(i) => i,
            None => {
                groups.push((group_key(av, kind), Vec::new()));
                groups.len() - 1
            }
        };
        let key = object_key(version, parent_namespaced, obj);
        groups[idx].1.push((key, obj));
    }
    for (_, objs) in &mut groups {
        keep_last_per_key(objs);
    }
    ObjectMapRef(groups)
}

/// A map's entries from a list of them: a later entry with a key seen before replaces the
/// earlier one in its place (as a map insert does), and is dropped from its own.
fn keep_last_per_key<V: Copy>(entries: &mut Vec<(String, V)>) {
    let repeated = repeated_keys(entries);
    if repeated.is_empty() {
        return;
    }
    let mut dropped = vec![false; entries.len()];
    for (first, later) in repeated {
        entries[first].1 = entries[later].1;
        dropped[later] = true;
    }
    let mut i = 0;
    entries.retain(|_| {
        i += 1;
        !dropped[i - 1]
    });
}

/// Each entry whose key an earlier entry has: (the first entry with the key, the later one), in
/// list order. Short lists are compared pairwise (no allocation when no key repeats).
fn repeated_keys<V>(entries: &[(String, V)]) -> Vec<(usize, usize)> {
    const PAIRWISE: usize = 32;
    let mut repeated = Vec::new();
    if entries.len() <= PAIRWISE {
        for (later, (key, _)) in entries.iter().enumerate() {
            if let Some(first) = entries[..later].iter().position(|(k, _)| k == key) {
                repeated.push((first, later));
            }
        }
        return repeated;
    }
    let mut first: HashMap<&str, usize> = HashMap::with_capacity(entries.len());
    for (later, (key, _)) in entries.iter().enumerate() {
        match first.entry(key) {
            Entry::Occupied(f) => repeated.push((*f.get(), later)),
            Entry::Vacant(f) => {
                f.insert(later);
            }
        }
    }
    repeated
}

/// The sync/finalize request body by reference: the same JSON as [`sync_request`], encoded
/// straight from the cached parent, children and related objects (nothing is copied). The
/// parent is any form that encodes as the parent (`P`: the decoded object, or the cached one
/// with its detached record's text).
#[derive(Debug, Serialize)]
pub struct SyncRequestRef<'a, T: Serialize = Value, P: Serialize + ?Sized = Value> {
    /// The CompositeController object, encoded.
    pub controller: &'a RawValue,
    /// The parent.
    pub parent: &'a P,
    /// Observed children.
    pub children: ObjectMapRef<'a, T>,
    /// Related objects.
    pub related: &'a Map<String, Value>,
    /// True for the finalize hook.
    pub finalizing: bool,
}

/// The DecoratorController sync/finalize request body by reference: the same JSON as
/// [`decorator_request`], encoded straight from the cached object and attachments.
#[derive(Debug, Serialize)]
pub struct DecoratorRequestRef<'a> {
    /// The DecoratorController object.
    pub controller: &'a Value,
    /// The decorated object.
    pub object: &'a Value,
    /// Observed attachments.
    pub attachments: ObjectMapRef<'a>,
    /// Related objects.
    pub related: &'a Map<String, Value>,
    /// True for the finalize hook.
    pub finalizing: bool,
}

/// A CompositeController or DecoratorController object as hook requests carry it (`controller`):
/// without its `status` (Metacontroller's) and its `metadata.managedFields` (kmeta's, as for
/// parents and children: the server's bookkeeping, about the size of the spec again).
pub fn controller_object(mut controller: Value) -> Value {
    if let Some(m) = controller.as_object_mut() {
        m.shift_remove("status");
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.shift_remove("managedFields");
        }
    }
    controller
}

/// The sync/finalize request body.
pub fn sync_request(
    controller: &Value,
    parent: &Value,
    children: Map<String, Value>,
    related: Map<String, Value>,
    finalizing: bool,
) -> Value {
    SyncRequest {
        controller: controller.clone(),
        parent: parent.clone(),
        children: children.into(),
        related: related.into(),
        finalizing,
    }
    .into()
}

/// The DecoratorController sync/finalize request body:
/// `{controller, object, attachments, related, finalizing}`.
pub fn decorator_request(
    controller: &Value,
    object: &Value,
    attachments: Map<String, Value>,
    related: Map<String, Value>,
    finalizing: bool,
) -> Value {
    DecoratorSyncRequest {
        controller: controller.clone(),
        object: object.clone(),
        attachments: attachments.into(),
        related: related.into(),
        finalizing,
    }
    .into()
}

/// The customize request body.
pub fn customize_request(controller: &Value, parent: &Value) -> Value {
    CustomizeRequest {
        controller: controller.clone(),
        parent: parent.clone(),
    }
    .into()
}

fn mode_name(mode: ResponseUnmarshallMode) -> &'static str {
    match mode {
        ResponseUnmarshallMode::Loose => "loose",
        ResponseUnmarshallMode::Strict => "strict",
    }
}

/// The effective decode mode of a hook: its `responseUnMarshallMode`, else loose for v1 and
/// strict for v2 (Metacontroller's defaults).
pub fn response_mode(hook: &Hook) -> ResponseUnmarshallMode {
    let jsonnet = hook
        .jsonnet
        .as_ref()
        .and_then(|j| j.response_unmarshall_mode);
    if let Some(m) = hook
        .webhook
        .as_ref()
        .and_then(|w| w.response_unmarshall_mode)
        .or(jsonnet)
    {
        return m;
    }
    match hook.version.unwrap_or_default() {
        HookVersion::V1 => ResponseUnmarshallMode::Loose,
        HookVersion::V2 => ResponseUnmarshallMode::Strict,
    }
}

/// Decodes a response body into its wire type. Loose mode parses into a JSON value first, so
/// duplicate keys keep the last value and unknown fields are ignored. Strict mode decodes the
/// bytes directly (a duplicate field is an error) and then rejects any top-level field that is
/// not in the type's [`WireFields::FIELDS`].
fn decode_as<T>(
    body: &[u8],
    mode: ResponseUnmarshallMode,
    hook: &'static str,
) -> Result<T, WireError>
where
    T: DeserializeOwned + WireFields,
{
    let err = |message: String| WireError::Decode {
        hook,
        mode: mode_name(mode),
        message,
    };
    let located = |e: serde_path_to_error::Error<serde_json::Error>| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." {
            err(inner.to_string())
        } else {
            err(format!("at `{path}`: {inner}"))
        }
    };
    match mode {
        ResponseUnmarshallMode::Strict => {
            let mut de = serde_json::Deserializer::from_slice(body);
            let decoded = serde_path_to_error::deserialize::<_, T>(&mut de).map_err(located)?;
            de.end().map_err(|e| err(e.to_string()))?;
            let fields: BTreeMap<String, IgnoredAny> =
                serde_json::from_slice(body).map_err(|e| err(e.to_string()))?;
            if let Some(unknown) = fields.keys().find(|k| !T::FIELDS.contains(&k.as_str())) {
                return Err(err(
                    serde_json::Error::unknown_field(unknown, T::FIELDS).to_string()
                ));
            }
            Ok(decoded)
        }
        ResponseUnmarshallMode::Loose => {
            // the common case straight from the bytes: an object without a repeated envelope
            // field (which a typed decode rejects, where Go keeps the last) or an ill-typed one;
            // anything else takes the path below, which keeps Go's reading and the messages
            if body.trim_ascii_start().first() == Some(&b'{')
                && let Ok(decoded) = serde_json::from_slice::<T>(body)
            {
                return Ok(decoded);
            }
            let v: Value = serde_json::from_slice(body).map_err(|e| err(e.to_string()))?;
            if !v.is_object() {
                return Err(err("expected a JSON object".into()));
            }
            serde_path_to_error::deserialize::<_, T>(v).map_err(located)
        }
    }
}

fn child_problem(child: &Value) -> Option<&'static str> {
    let missing = |field: &str| {
        child
            .get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    };
    if !child.is_object() {
        Some("not an object")
    } else if missing("apiVersion") {
        Some("missing apiVersion")
    } else if missing("kind") {
        Some("missing kind")
    } else if meta_str(child, "name").is_empty() {
        Some("missing metadata.name")
    } else {
        None
    }
}

/// A hook's `status`: an object, or null (treated as absent).
fn checked_status(
    status: Option<Value>,
    mode: ResponseUnmarshallMode,
    hook: &'static str,
) -> Result<Option<Value>, WireError> {
    match status {
        Some(s) if !(s.is_null() || s.is_object()) => Err(WireError::Decode {
            hook,
            mode: mode_name(mode),
            message: "status must be an object or null".into(),
        }),
        s => Ok(s.filter(|s| !s.is_null())),
    }
}

/// Desired objects (children, attachments): null items dropped, each other item an object with
/// `apiVersion`, `kind` and `metadata.name`, else `problem(index, message)`.
fn checked_objects(
    objects: Vec<Value>,
    problem: impl Fn(usize, String) -> WireError,
) -> Result<Vec<Value>, WireError> {
    let mut out = Vec::with_capacity(objects.len());
    for (index, object) in objects.into_iter().enumerate() {
        if object.is_null() {
            continue;
        }
        if let Some(message) = child_problem(&object) {
            return Err(problem(index, message.to_owned()));
        }
        out.push(object);
    }
    Ok(out)
}

/// Decodes and checks a sync/finalize response: `status` must be an object (or null), each
/// child an object with `apiVersion`, `kind` and `metadata.name`; null children are dropped.
pub fn decode_sync_response(
    body: &[u8],
    mode: ResponseUnmarshallMode,
    hook: &'static str,
) -> Result<SyncResponse, WireError> {
    let decoded: SyncResponse = decode_as(body, mode, hook)?;
    Ok(SyncResponse {
        status: checked_status(decoded.status, mode, hook)?,
        children: checked_objects(decoded.children, |index, message| WireError::Child {
            hook,
            index,
            message,
        })?,
        ..decoded
    })
}

/// Decodes and checks a DecoratorController sync/finalize response: `status` must be an object
/// (or null: left unchanged), each attachment an object with `apiVersion`, `kind` and
/// `metadata.name`; null attachments are dropped.
pub fn decode_decorator_response(
    body: &[u8],
    mode: ResponseUnmarshallMode,
    hook: &'static str,
) -> Result<DecoratorSyncResponse, WireError> {
    let decoded: DecoratorSyncResponse = decode_as(body, mode, hook)?;
    Ok(DecoratorSyncResponse {
        status: checked_status(decoded.status, mode, hook)?,
        attachments: checked_objects(decoded.attachments, |index, message| {
            WireError::Attachment {
                hook,
                index,
                message,
            }
        })?,
        ..decoded
    })
}

/// Decodes a customize response.
pub fn decode_customize_response(
    body: &[u8],
    mode: ResponseUnmarshallMode,
) -> Result<Vec<RelatedResourceRule>, WireError> {
    let decoded: CustomizeResponse = decode_as(body, mode, "customize")?;
    Ok(decoded.related_resources)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn borrowed_request_encodes_like_the_owned_one() {
        let declared = vec!["Pod.v1".to_owned(), "ConfigMap.v1".to_owned()];
        let (a, b) = (pod(Some("ns"), "a"), pod(Some("ns"), "b"));
        let mut b2 = b.clone();
        b2["spec"] = json!({"again": true});
        let cm = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        let related = object_map(HookVersion::V1, true, &declared, [&cm]);
        let (controller, parent) = (json!({"kind": "CompositeController"}), pod(None, "p"));
        for version in [HookVersion::V1, HookVersion::V2] {
            let objs = [&b, &cm, &a, &b2];
            let owned = sync_request(
                &controller,
                &parent,
                object_map(version, false, &declared, objs),
                related.clone(),
                true,
            );
            let raw = serde_json::value::to_raw_value(&controller).unwrap();
            let borrowed = SyncRequestRef {
                controller: &raw,
                parent: &parent,
                children: object_map_ref(version, false, &declared, objs),
                related: &related,
                finalizing: true,
            };
            assert_eq!(
                serde_json::to_string(&borrowed).unwrap(),
                serde_json::to_string(&owned).unwrap()
            );
            let owned = decorator_request(
                &controller,
                &parent,
                object_map(version, false, &declared, objs),
                related.clone(),
                false,
            );
            let borrowed = DecoratorRequestRef {
                controller: &controller,
                object: &parent,
                attachments: object_map_ref(version, false, &declared, objs),
                related: &related,
                finalizing: false,
            };
            assert_eq!(
                serde_json::to_string(&borrowed).unwrap(),
                serde_json::to_string(&owned).unwrap()
            );
        }
    }

    /// Many objects, some keys three times, in short and long groups: the borrowed map encodes
    /// as the owned one (a later object replaces an earlier one in its place).
    #[test]
    fn borrowed_map_keeps_the_last_object_per_key_in_the_first_place() {
        let declared = vec!["Pod.v1".to_owned()];
        for n in [3, 10, 40, 100] {
            let objs: Vec<Value> = (0..n)
                .map(|i| {
                    let mut p = pod(Some("ns"), &format!("p{}", i % (n / 3 + 1)));
                    p["spec"] = json!({"i": i});
                    p
                })
                .collect();
            for version in [HookVersion::V1, HookVersion::V2] {
                let owned = object_map(version, true, &declared, &objs);
                let borrowed = object_map_ref(version, true, &declared, &objs);
                assert_eq!(
                    serde_json::to_string(&borrowed).unwrap(),
                    serde_json::to_string(&owned).unwrap(),
                    "{n} objects"
                );
            }
        }
    }

    fn pod(ns: Option<&str>, name: &str) -> Value {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}});
        if let Some(ns) = ns {
            p["metadata"]["namespace"] = json!(ns);
        }
        p
    }

    #[test]
    fn controller_object_leaves_out_status_and_managed_fields() {
        let cc = json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "c", "managedFields": [{"manager": "kubectl"}], "labels": {"a": "b"}},
            "spec": {"x": 1}, "status": {"y": 2}});
        assert_eq!(
            controller_object(cc),
            json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
                "metadata": {"name": "c", "labels": {"a": "b"}}, "spec": {"x": 1}})
        );
        assert_eq!(controller_object(Value::Null), Value::Null);
    }

    #[test]
    fn group_keys() {
        assert_eq!(group_key("v1", "Pod"), "Pod.v1");
        assert_eq!(group_key("apps/v1", "StatefulSet"), "StatefulSet.apps/v1");
    }

    #[test]
    fn object_keys_v1_and_v2() {
        let p = pod(Some("ns"), "a");
        assert_eq!(object_key(HookVersion::V1, true, &p), "a");
        assert_eq!(object_key(HookVersion::V1, false, &p), "ns/a");
        assert_eq!(object_key(HookVersion::V2, true, &p), "ns/a");
        let c = pod(None, "c");
        assert_eq!(object_key(HookVersion::V2, true, &c), "c");
        assert_eq!(object_key(HookVersion::V1, false, &c), "c");
    }

    #[test]
    fn map_has_every_declared_group() {
        let declared = vec!["Pod.v1".to_owned(), "Service.v1".to_owned()];
        let p = pod(Some("ns"), "a");
        let m = object_map(HookVersion::V1, true, &declared, [&p]);
        assert_eq!(
            Value::Object(m),
            json!({"Pod.v1": {"a": p}, "Service.v1": {}})
        );
    }

    #[test]
    fn request_shape() {
        let req = sync_request(
            &json!({"kind": "CompositeController"}),
            &json!({"kind": "P"}),
            Map::new(),
            Map::new(),
            true,
        );
        let keys: Vec<&str> = req
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            ["controller", "parent", "children", "related", "finalizing"]
        );
        assert_eq!(req["finalizing"], json!(true));
    }

    #[test]
    fn request_bytes() {
        let declared = vec!["Service.v1".to_owned(), "Pod.v1".to_owned()];
        let (b, a) = (pod(Some("ns"), "b"), pod(Some("ns"), "a"));
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let children = object_map(HookVersion::V2, true, &declared, [&b, &cm, &a]);
        let req = sync_request(
            &json!({}),
            &json!({"kind": "P"}),
            children,
            Map::new(),
            false,
        );
        assert_eq!(
            serde_json::to_string(&req).unwrap(),
            concat!(
                r#"{"controller":{},"parent":{"kind":"P"},"children":{"Service.v1":{},"#,
                r#""Pod.v1":{"ns/b":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b","namespace":"ns"}},"#,
                r#""ns/a":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"ns"}}},"#,
                r#""ConfigMap.v1":{"c":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}}},"#,
                r#""related":{},"finalizing":false}"#
            )
        );
        assert_eq!(
            serde_json::to_string(&customize_request(&json!({"k": 1}), &json!(null))).unwrap(),
            r#"{"controller":{"k":1},"parent":null}"#
        );
    }

    #[test]
    fn strict_rejects_unknown_fields_and_non_objects() {
        let e = decode_customize_response(
            br#"{"relatedResources": [], "x": 1}"#,
            ResponseUnmarshallMode::Strict,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("unknown field `x`, expected `relatedResources`"),
            "{e}"
        );
        for body in [&b"[]"[..], b"null"] {
            assert!(decode_sync_response(body, ResponseUnmarshallMode::Strict, "sync").is_err());
        }
        let r = decode_sync_response(
            br#"{"status": null, "children": [null], "resyncAfterSeconds": null, "finalized": null}"#,
            ResponseUnmarshallMode::Strict,
            "finalize",
        )
        .unwrap();
        assert_eq!(r, SyncResponse::default());
    }

    #[test]
    fn decode_full_response() {
        let body = br#"{"status": {"replicas": 1}, "children": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}, null], "resyncAfterSeconds": 0.5, "finalized": true}"#;
        let r = decode_sync_response(body, ResponseUnmarshallMode::Strict, "sync").unwrap();
        assert_eq!(r.status, Some(json!({"replicas": 1})));
        assert_eq!(r.children.len(), 1);
        assert_eq!(r.resync_after_seconds, 0.5);
        assert!(r.finalized);
    }

    #[test]
    fn empty_and_null_fields() {
        let r = decode_sync_response(
            br#"{"status": null, "children": null}"#,
            ResponseUnmarshallMode::Loose,
            "sync",
        )
        .unwrap();
        assert_eq!(r, SyncResponse::default());
        let r = decode_sync_response(b"{}", ResponseUnmarshallMode::Strict, "sync").unwrap();
        assert!(r.children.is_empty() && r.status.is_none());
    }

    #[test]
    fn loose_ignores_unknown_and_duplicate_strict_rejects() {
        let body = br#"{"status": {}, "extra": 1, "finalized": false, "finalized": true}"#;
        let r = decode_sync_response(body, ResponseUnmarshallMode::Loose, "sync").unwrap();
        assert!(r.finalized);
        let e = decode_sync_response(br#"{"extra": 1}"#, ResponseUnmarshallMode::Strict, "sync")
            .unwrap_err();
        assert!(e.to_string().contains("unknown field `extra`"), "{e}");
        let e = decode_sync_response(
            br#"{"finalized": true, "finalized": true}"#,
            ResponseUnmarshallMode::Strict,
            "sync",
        )
        .unwrap_err();
        assert!(e.to_string().contains("duplicate field"), "{e}");
    }

    #[test]
    fn loose_reads_bytes_as_go_would_whichever_path_it_takes() {
        // what Go's reading gives: the JSON value first, then the envelope
        let via_value = |body: &[u8]| {
            let v: Value = serde_json::from_slice(body).ok()?;
            v.is_object()
                .then(|| serde_json::from_value::<SyncResponse>(v).ok())?
        };
        let bodies: [&[u8]; 9] = [
            br#"{"children": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "1", "k": "2"}}], "status": {"n": 1}}"#,
            br#"  {"resyncAfterSeconds": 1.5, "finalized": null, "children": null, "other": [1]}"#,
            br#"{"children": [], "children": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}]}"#,
            br#"{"status": {"a": 1}, "status": null}"#,
            br#"[{"a": 1}, [], 0, false]"#,
            br#"{"resyncAfterSeconds": "5"}"#,
            br#"{"children": {}}"#,
            b"{}",
            b"null",
        ];
        for body in bodies {
            let got = decode_as::<SyncResponse>(body, ResponseUnmarshallMode::Loose, "sync");
            assert_eq!(
                got.ok(),
                via_value(body),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn type_errors_name_the_field_path() {
        for mode in [
            ResponseUnmarshallMode::Loose,
            ResponseUnmarshallMode::Strict,
        ] {
            let e = decode_sync_response(br#"{"children": "none"}"#, mode, "sync")
                .unwrap_err()
                .to_string();
            assert!(e.contains("at `children`"), "{e}");
            let e = decode_sync_response(br#"{"resyncAfterSeconds": "soon"}"#, mode, "sync")
                .unwrap_err()
                .to_string();
            assert!(e.contains("at `resyncAfterSeconds`"), "{e}");
        }
        let e = decode_sync_response(
            br#"{"children": []} trailing"#,
            ResponseUnmarshallMode::Strict,
            "sync",
        );
        assert!(e.is_err());
    }

    #[test]
    fn garbage_is_an_error() {
        for body in [&b"not json"[..], b"[1,2]", b"\"x\"", b""] {
            for mode in [
                ResponseUnmarshallMode::Loose,
                ResponseUnmarshallMode::Strict,
            ] {
                assert!(
                    decode_sync_response(body, mode, "sync").is_err(),
                    "{body:?}"
                );
            }
        }
        let e = decode_sync_response(
            br#"{"children": [{"kind": "Pod"}]}"#,
            ResponseUnmarshallMode::Loose,
            "sync",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "sync hook response: children[0]: missing apiVersion"
        );
        assert!(
            decode_sync_response(br#"{"status": 5}"#, ResponseUnmarshallMode::Loose, "sync")
                .is_err()
        );
        let e = decode_sync_response(
            br#"{"children": [5]}"#,
            ResponseUnmarshallMode::Loose,
            "sync",
        )
        .unwrap_err();
        assert!(e.to_string().contains("not an object"));
    }

    #[test]
    fn modes_default_by_version() {
        let mut h = Hook::default();
        assert_eq!(response_mode(&h), ResponseUnmarshallMode::Loose);
        h.version = Some(HookVersion::V2);
        assert_eq!(response_mode(&h), ResponseUnmarshallMode::Strict);
        h.webhook = Some(crate::api::Webhook {
            response_unmarshall_mode: Some(ResponseUnmarshallMode::Loose),
            ..Default::default()
        });
        assert_eq!(response_mode(&h), ResponseUnmarshallMode::Loose);
    }

    #[test]
    fn decorator_response_nulls_and_bad_attachments() {
        let r = decode_decorator_response(
            br#"{"labels": {"a": "1", "b": null}, "status": null, "attachments": [null, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}]}"#,
            ResponseUnmarshallMode::Strict,
            "sync",
        )
        .unwrap();
        assert_eq!(r.labels.get("a"), Some(&Some("1".to_owned())));
        assert_eq!(r.labels.get("b"), Some(&None));
        assert_eq!((r.status, r.attachments.len()), (None, 1));
        let e = decode_decorator_response(
            br#"{"attachments": [{"kind": "Service"}]}"#,
            ResponseUnmarshallMode::Loose,
            "finalize",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "finalize hook response: attachments[0]: missing apiVersion"
        );
        for body in [&br#"{"status": []}"#[..], br#"{"children": []}"#] {
            assert!(
                decode_decorator_response(body, ResponseUnmarshallMode::Strict, "sync").is_err()
            );
        }
        let req = decorator_request(
            &json!({}),
            &json!({"kind": "P"}),
            Map::new(),
            Map::new(),
            true,
        );
        let keys: Vec<&str> = req
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "controller",
                "object",
                "attachments",
                "related",
                "finalizing"
            ]
        );
    }

    #[test]
    fn customize_response() {
        let body = br#"{"relatedResources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"a": "b"}}}]}"#;
        let r = decode_customize_response(body, ResponseUnmarshallMode::Strict).unwrap();
        assert_eq!(r[0].resource, "configmaps");
        assert!(
            decode_customize_response(br#"{"x": []}"#, ResponseUnmarshallMode::Strict).is_err()
        );
        assert!(
            decode_customize_response(br#"{"x": []}"#, ResponseUnmarshallMode::Loose)
                .unwrap()
                .is_empty()
        );
    }
}
