//! The compact form of a cached child: its JSON text (managedFields dropped; on a child without
//! the last-applied annotation, the entries of kmeta's per-parent field managers are kept beside
//! it, see docs/design/ssa-without-last-applied.md), and parsed only
//! what the caches' indexes, claims, selectors, hook request maps and fingerprints read (name,
//! namespace, uid, resourceVersion, labels, the controller owner reference, deletion). A child
//! held this way costs about its JSON size instead of the 6–13× of a decoded `serde_json::Value`
//! (`cargo bench -p kmeta-tests --bench child_bytes`); the hook request copies the text as it
//! is, and a sync parses a child only when it has to decide about it
//! (docs/design/compact-cache.md).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::object::{ObjectView, OwnerView};
use crate::runtime::resources::Resolved;
use crate::runtime::watched::{Str, Watched, place};

/// A cached object as JSON text plus its parsed identity. The identity's strings are not copied:
/// each is a `Span` of the text, which holds every string byte for byte unless JSON had to
/// escape it (a `"`, a `\\` or a control character, which names, uids and labels rarely have);
/// only those are copied, into `extra`. A child's identity is then one allocation of 8 bytes per
/// string (about 110 bytes for a child with two labels), where a copy of its strings took about
/// 250 bytes in two allocations (heaptrack at 10 000 × 10 ConfigMaps: 21.9 MiB, now 9.2).
#[derive(Debug)]
pub struct Compact {
    text: Box<RawValue>,
    /// Where each identity string is: [`FIELDS`] fixed fields, then each label's key and value.
    spans: Box<[Span]>,
    /// The identity strings the text does not hold byte for byte, one after another (empty, no
    /// allocation, for nearly every object).
    extra: Box<str>,
    has_controller: bool,
    deleting: bool,
    /// The `managedFields` entries of kmeta's per-parent field managers
    /// ([`is_parent_manager`]) as a JSON list, kept for a child without
    /// the last-applied annotation: what its parent applied is read from them. Not part of the
    /// text (the hook sees children without `managedFields`, as before).
    owned: Option<Box<RawValue>>,
    /// The mark of the desired state this very version was found to need no update for (0:
    /// none yet), set by the sync that found it ([`Compact::settle`]). A new version of the
    /// object is a new `Compact`, so the mark never outlives the version it was found for.
    settled: AtomicU64,
}

/// One identity string: bytes `start..end` of the text, or of `extra` when `start` carries
/// [`IN_EXTRA`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

/// The bit of [`Span::start`] and [`Span::end`] that places a span in `extra`.
const IN_EXTRA: u32 = 1 << 31;

impl Span {
    const EMPTY: Span = Span { start: 0, end: 0 };

    /// Where `s` is: any place where `text` has its bytes (the same bytes read the same
    /// string, whichever field they belong to), else appended to `extra`.
    fn locate(s: &str, text: &str, extra: &mut String) -> Span {
        if s.is_empty() {
            return Span::EMPTY;
        }
        if let Some(span) = text.find(s).and_then(|at| Span::of(at, at + s.len(), 0)) {
            return span;
        }
        let start = extra.len();
        extra.push_str(s);
        // an identity string over 2 GiB cannot come from an API server: read as ""
        Span::of(start, extra.len(), IN_EXTRA).unwrap_or(Span::EMPTY)
    }

    fn of(start: usize, end: usize, place: u32) -> Option<Span> {
        let start = u32::try_from(start).ok().filter(|n| n & IN_EXTRA == 0)?;
        let end = u32::try_from(end).ok().filter(|n| n & IN_EXTRA == 0)?;
        Some(Span {
            start: start | place,
            end: end | place,
        })
    }
}

/// apiVersion, kind, name, namespace, uid, resourceVersion, and the controller reference's
/// apiVersion, kind, name and uid ("" when there is none).
const FIELDS: usize = 10;
const API_VERSION: usize = 0;
const KIND: usize = 1;
const NAME: usize = 2;
const NAMESPACE: usize = 3;
const UID: usize = 4;
const RESOURCE_VERSION: usize = 5;
const CONTROLLER: usize = 6;

/// The identity as read from either form, before packing.
struct Identity<'a> {
    fixed: [&'a str; FIELDS],
    labels: Vec<(&'a str, &'a str)>,
    has_controller: bool,
    deleting: bool,
}

impl Identity<'_> {
    fn pack(self, text: Box<RawValue>, owned: Option<Box<RawValue>>) -> Compact {
        let strings = self
            .fixed
            .iter()
            .copied()
            .chain(self.labels.iter().flat_map(|(k, v)| [*k, *v]));
        let mut extra = String::new();
        let spans = strings
            .map(|s| Span::locate(s, text.get(), &mut extra))
            .collect();
        Compact {
            text,
            spans,
            extra: extra.into_boxed_str(),
            has_controller: self.has_controller,
            deleting: self.deleting,
            owned,
            settled: AtomicU64::new(0),
        }
    }
}

/// A watched object's compact form in the making: its text written member by member from the
/// received text's pieces, and each identity string placed where it was written.
struct Assembly {
    out: String,
    fixed: [Span; FIELDS],
    labels: Vec<Span>,
    extra: String,
    has_controller: bool,
    deleting: bool,
    owned: Option<Box<RawValue>>,
}

/// The fields of an owner reference the identity reads.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct OwnerRef<'a> {
    #[serde(borrow, default)]
    api_version: Option<Str<'a>>,
    #[serde(borrow, default)]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(borrow, default)]
    uid: Option<Str<'a>>,
    #[serde(default)]
    controller: Option<bool>,
}

/// A JSON object of strings (labels) in order, `null` as none.
struct Pairs<'a>(Vec<(Str<'a>, Str<'a>)>);

impl<'de> serde::Deserialize<'de> for Pairs<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Pairs<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of strings")
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Pairs<'de>, E> {
                Ok(Pairs(Vec::new()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Pairs<'de>, A::Error> {
                let mut all = Vec::new();
                while let Some(kv) = m.next_entry::<Str<'de>, Str<'de>>()? {
                    all.push(kv);
                }
                Ok(Pairs(all))
            }
        }
        d.deserialize_any(V)
    }
}

impl Assembly {
    fn new(capacity: usize) -> Assembly {
        Assembly {
            out: String::with_capacity(capacity),
            fixed: [Span::EMPTY; FIELDS],
            labels: Vec::new(),
            extra: String::new(),
            has_controller: false,
            deleting: false,
            owned: None,
        }
    }

    /// Writes `"key":` after a separator when the object already has a member.
    fn key(&mut self, key: &Str<'_>) {
        if !self.out.ends_with('{') {
            self.out.push(',');
        }
        push_string(&mut self.out, key);
        self.out.push(':');
    }

    /// Writes the member `key`: `raw` (JSON text); returns where `raw` starts in the text.
    fn member(&mut self, key: &Str<'_>, raw: &str) -> usize {
        self.key(key);
        let at = self.out.len();
        self.out.push_str(raw);
        at
    }

    /// Writes the member `key`: the string `s`; returns its span.
    fn string_member(&mut self, key: &str, s: &str) -> Span {
        self.key(&Str::Borrowed(key));
        let at = self.out.len();
        push_string(&mut self.out, &Str::Owned(s.to_owned()));
        match self.out.len() - at == s.len() + 2 {
            true => Span::of(at + 1, at + 1 + s.len(), 0).unwrap_or(Span::EMPTY),
            // escaped: the string lies in extra
            false => Span::locate(s, "", &mut self.extra),
        }
    }

    /// The span of `s`, read from `piece` (written at `at`): where its bytes were written when
    /// they lie in the piece as they are, else in `extra`.
    fn span(&mut self, text: &str, at: usize, s: &Str<'_>) -> Span {
        if let Str::Borrowed(b) = s
            && let Some(r) = place(text, b).filter(|_| !b.is_empty())
        {
            let (start, end) = (r.start as usize, r.end as usize);
            return Span::of(at + start, at + end, 0).unwrap_or(Span::EMPTY);
        }
        Span::locate(s.as_str(), "", &mut self.extra)
    }

    /// Writes the `metadata` member (`meta`, its members) without `managedFields`, reading the
    /// identity from it.
    fn metadata<'a>(
        &mut self,
        key: &Str<'_>,
        meta: impl Iterator<Item = (Str<'a>, &'a str)>,
    ) -> Result<(), serde_json::Error> {
        self.key(key);
        self.out.push('{');
        let mut managed = None;
        let mut annotated = false;
        for (k, piece) in meta {
            let field = match k.as_str() {
                "managedFields" => {
                    managed = Some(piece);
                    continue;
                }
                "name" => Some(NAME),
                "namespace" => Some(NAMESPACE),
                "uid" => Some(UID),
                "resourceVersion" => Some(RESOURCE_VERSION),
                _ => None,
            };
            let at = self.member(&k, piece);
            match (field, k.as_str()) {
                (Some(f), _) => {
                    if let Some(s) = serde_json::from_str::<Option<Str<'_>>>(piece)? {
                        self.fixed[f] = self.span(piece, at, &s);
                    }
                }
                (None, "labels") => {
                    let labels: Pairs<'_> = serde_json::from_str(piece)?;
                    for (lk, lv) in &labels.0 {
                        let (ks, vs) = (self.span(piece, at, lk), self.span(piece, at, lv));
                        self.labels.extend([ks, vs]);
                    }
                }
                (None, "ownerReferences") => self.controller(piece, at)?,
                (None, "annotations") => {
                    annotated = has_key(piece, dynapply::LAST_APPLIED_ANNOTATION);
                }
                (None, "deletionTimestamp") => self.deleting = piece != "null",
                _ => {}
            }
        }
        self.out.push('}');
        if let (false, Some(managed)) = (annotated, managed) {
            let entries: Option<Vec<Value>> = serde_json::from_str(managed)?;
            self.owned = parent_entries(&entries.unwrap_or_default(), false);
        }
        Ok(())
    }

    /// Reads the controller reference from the `ownerReferences` `piece` written at `at`.
    fn controller(&mut self, piece: &str, at: usize) -> Result<(), serde_json::Error> {
        let refs: Option<Vec<OwnerRef<'_>>> = serde_json::from_str(piece)?;
        let Some(c) = refs
            .into_iter()
            .flatten()
            .find(|r| r.controller == Some(true))
        else {
            return Ok(());
        };
        self.has_controller = true;
        for (i, s) in [c.api_version, c.kind, c.name, c.uid].iter().enumerate() {
            if let Some(s) = s {
                self.fixed[CONTROLLER + i] = self.span(piece, at, s);
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<Compact, serde_json::Error> {
        let text = RawValue::from_string(self.out)?;
        let spans: Box<[Span]> = self.fixed.into_iter().chain(self.labels).collect();
        Ok(Compact {
            text,
            spans,
            extra: self.extra.into_boxed_str(),
            has_controller: self.has_controller,
            deleting: self.deleting,
            owned: self.owned,
            settled: AtomicU64::new(0),
        })
    }
}

/// Whether the JSON object `text` has the member `key` (written unescaped, between quotes),
/// found by search rather than by a scan of every value: the annotations of a
/// child carry its last-applied record, one long escaped string that a scan reads character
/// by character (perf: most of a takeover's list time went to such scans). Inside a string
/// every quote is escaped, so an unescaped quote, the key, an unescaped quote and then a colon
/// is a member name and nothing else. A server escaping the key otherwise (`\/`) is not
/// matched: the child is then read as one without the record, which only keeps its per-parent
/// `managedFields` entries, if any.
fn has_key(text: &str, key: &str) -> bool {
    text.match_indices(key).any(|(at, k)| {
        let (before, after) = (&text[..at], &text[at + k.len()..]);
        let opened = before.strip_suffix('"').is_some_and(|b| !b.ends_with('\\'));
        let closed = after
            .strip_prefix('"')
            .is_some_and(|a| a.trim_start().starts_with(':'));
        opened && closed
    })
}

/// Writes `s` as a JSON string: a borrowed one as it lay in the text (JSON did not escape
/// it), an owned one escaped.
fn push_string(out: &mut String, s: &Str<'_>) {
    match s {
        Str::Borrowed(b) => {
            out.push('"');
            out.push_str(b);
            out.push('"');
        }
        Str::Owned(o) => {
            // encoding a string into a String cannot fail
            if let Ok(quoted) = serde_json::to_string(o) {
                out.push_str(&quoted);
            }
        }
    }
}

/// Hex digits of the parent-uid hash that ends each per-parent field manager
/// (`reconcile::apply::field_manager`).
pub(crate) const UID_HASH_LEN: usize = 10;

/// Whether `manager` has the shape of a per-parent field manager (`reconcile::apply`'s
/// `field_manager`): `<prefix>/<controller>/<10 hex digits>` (the caches keep these managers'
/// `managedFields` entries of children without the last-applied annotation).
pub fn is_parent_manager(manager: &str) -> bool {
    let mut parts = manager.rsplitn(3, '/');
    let hash = parts.next().unwrap_or_default();
    let controller = parts.next().unwrap_or_default();
    let prefix = parts.next().unwrap_or_default();
    hash.len() == UID_HASH_LEN
        && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        && !controller.is_empty()
        && !prefix.is_empty()
}

/// [`parent_entries`] as a JSON list, for a child read from the API rather than watched.
pub(crate) fn owned_entries(managed: &[Value], annotated: bool) -> Option<Value> {
    serde_json::from_str(parent_entries(managed, annotated)?.get()).ok()
}

/// The entries of `managed` (a `managedFields` list) by kmeta's per-parent field managers, when
/// the object carries no last-applied annotation and there are any; only what is read of them
/// (manager, operation, subresource, fieldsV1).
fn parent_entries(managed: &[Value], annotated: bool) -> Option<Box<RawValue>> {
    if annotated {
        return None;
    }
    let kept: Vec<Value> = managed
        .iter()
        .filter(|e| {
            e.get("manager")
                .and_then(Value::as_str)
                .is_some_and(is_parent_manager)
        })
        .map(|e| {
            let mut m = serde_json::Map::new();
            for k in ["manager", "operation", "subresource", "fieldsV1"] {
                if let Some(v) = e.get(k) {
                    m.insert(k.to_owned(), v.clone());
                }
            }
            Value::Object(m)
        })
        .collect();
    if kept.is_empty() {
        return None;
    }
    serde_json::value::to_raw_value(&kept).ok()
}

/// An object could not be encoded, or its text not parsed.
#[derive(Debug, thiserror::Error)]
#[error("cached object {name}: {source}")]
pub struct CompactError {
    /// `namespace/name` of the object.
    pub name: String,
    /// Cause.
    pub source: serde_json::Error,
}

impl Compact {
    /// A watched object in compact form: `managedFields` dropped (a PUT without them keeps the
    /// server's copy, and kmeta never reads them), `apiVersion`/`kind` defaulting to the watched
    /// resource's. The text is the received text with those changes, members in their order:
    /// the object is scanned, never built, and each identity string's place in the text is
    /// known from the scan, not searched for ([`Assembly`]).
    pub fn from_watched(w: Watched, r: &Resolved) -> Result<Compact, CompactError> {
        let failed = |source| CompactError {
            name: described(&w.metadata),
            source,
        };
        let mut a = Assembly::new(w.text().len());
        a.out.push('{');
        // apiVersion and kind: as given, or the resource's when absent or empty
        let mut given = [None, None];
        for (field, key, default) in [
            (API_VERSION, "apiVersion", &r.api.api_version),
            (KIND, "kind", &r.api.kind),
        ] {
            let member = w.members().find(|(k, _)| k.as_str() == key);
            let value = match member {
                Some((_, Some(v))) => serde_json::from_str::<Option<Str<'_>>>(v).map_err(failed)?,
                _ => None,
            };
            match value.filter(|s| !s.as_str().is_empty()) {
                Some(s) => given[field] = Some(s),
                None => a.fixed[field] = a.string_member(key, default),
            }
        }
        for (k, v) in w.members() {
            let Some(v) = v else {
                a.metadata(&k, w.metadata_members()).map_err(failed)?;
                continue;
            };
            match k.as_str() {
                "apiVersion" | "kind" => {
                    let field = if k.as_str() == "kind" {
                        KIND
                    } else {
                        API_VERSION
                    };
                    if let Some(s) = &given[field] {
                        let at = a.member(&k, v);
                        a.fixed[field] = a.span(v, at, s);
                    }
                }
                _ => {
                    a.member(&k, v);
                }
            }
        }
        a.out.push('}');
        a.finish().map_err(failed)
    }

    /// `obj` (as read from the API) in compact form, `managedFields` dropped.
    pub fn from_value(mut obj: Value) -> Result<Compact, CompactError> {
        let mut owned = None;
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            let annotated = m
                .get("annotations")
                .and_then(|a| a.get(dynapply::LAST_APPLIED_ANNOTATION))
                .is_some();
            if let Some(Value::Array(managed)) = m.shift_remove("managedFields") {
                owned = parent_entries(&managed, annotated);
            }
        }
        let text = serde_json::value::to_raw_value(&obj).map_err(|source| CompactError {
            name: format!("{}/{}", obj.namespace(), obj.name()),
            source,
        })?;
        let labels = obj.labels();
        let controller = obj.controller();
        let owner = |f: fn(OwnerView<'_>) -> &str| controller.map(f).unwrap_or_default();
        let identity = Identity {
            fixed: [
                obj.api_version(),
                obj.kind(),
                obj.name(),
                obj.namespace(),
                obj.uid(),
                obj.resource_version(),
                owner(|r| r.api_version),
                owner(|r| r.kind),
                owner(|r| r.name),
                owner(|r| r.uid),
            ],
            labels,
            has_controller: controller.is_some(),
            deleting: obj.deleting(),
        };
        Ok(identity.pack(text, owned))
    }

    /// The `i`th identity string.
    fn string(&self, i: usize) -> &str {
        let Some(&Span { start, end }) = self.spans.get(i) else {
            return "";
        };
        let (from, start, end) = match start & IN_EXTRA {
            0 => (self.text.get(), start, end),
            _ => (&*self.extra, start & !IN_EXTRA, end & !IN_EXTRA),
        };
        from.get(start as usize..end as usize).unwrap_or_default()
    }

    /// The `managedFields` entries of kmeta's per-parent field managers, kept for a child without
    /// the last-applied annotation (a JSON list), if any.
    pub fn parent_entries(&self) -> Option<Value> {
        serde_json::from_str(self.owned.as_deref()?.get()).ok()
    }

    /// Whether this version was found to need no update for the desired state marked `mark`
    /// (a caller's digest of that state and of how it is applied; 0 marks nothing).
    pub fn is_settled(&self, mark: u64) -> bool {
        mark != 0 && self.settled.load(Ordering::Relaxed) == mark
    }

    /// Records that this version needs no update for the desired state marked `mark` (the
    /// last one recorded is kept).
    pub fn settle(&self, mark: u64) {
        self.settled.store(mark, Ordering::Relaxed);
    }

    /// The whole object, parsed from its text.
    pub fn value(&self) -> Result<Value, CompactError> {
        serde_json::from_str(self.text.get()).map_err(|source| CompactError {
            name: format!("{}/{}", self.namespace(), self.name()),
            source,
        })
    }
}

fn described(m: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default()
    )
}

/// Encodes as the object's JSON text, unchanged.
impl Serialize for Compact {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.text.serialize(s)
    }
}

impl ObjectView for Compact {
    fn api_version(&self) -> &str {
        self.string(API_VERSION)
    }
    fn kind(&self) -> &str {
        self.string(KIND)
    }
    fn name(&self) -> &str {
        self.string(NAME)
    }
    fn namespace(&self) -> &str {
        self.string(NAMESPACE)
    }
    fn uid(&self) -> &str {
        self.string(UID)
    }
    fn resource_version(&self) -> &str {
        self.string(RESOURCE_VERSION)
    }
    fn label(&self, key: &str) -> Option<&str> {
        (FIELDS..self.spans.len())
            .step_by(2)
            .find(|&i| self.string(i) == key)
            .map(|i| self.string(i + 1))
    }
    fn labels(&self) -> Vec<(&str, &str)> {
        (FIELDS..self.spans.len())
            .step_by(2)
            .map(|i| (self.string(i), self.string(i + 1)))
            .collect()
    }
    fn controller(&self) -> Option<OwnerView<'_>> {
        self.has_controller.then(|| OwnerView {
            api_version: self.string(CONTROLLER),
            kind: self.string(CONTROLLER + 1),
            name: self.string(CONTROLLER + 2),
            uid: self.string(CONTROLLER + 3),
        })
    }
    fn deleting(&self) -> bool {
        self.deleting
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn configmaps() -> Resolved {
        Resolved {
            api: kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            namespaced: true,
            has_status: false,
        }
    }

    fn wire() -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u-a", "resourceVersion": "7",
                "labels": {"app": "x", "tier": "web"},
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u-s"},
                    {"apiVersion": "ctl.example/v1", "kind": "Parent", "name": "p", "uid": "u-p",
                     "controller": true, "blockOwnerDeletion": true}],
                "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}}]},
            "data": {"k": "v"}, "immutable": false})
    }

    /// A version is settled only for the mark recorded last; a new version starts unsettled.
    #[test]
    fn a_settled_mark_belongs_to_its_version() {
        let c = Compact::from_value(wire()).unwrap();
        assert!(!c.is_settled(0) && !c.is_settled(5));
        c.settle(5);
        assert!(c.is_settled(5) && !c.is_settled(6));
        c.settle(0);
        assert!(!c.is_settled(0), "0 marks nothing");
        c.settle(6);
        assert!(c.is_settled(6) && !c.is_settled(5));
        assert!(!Compact::from_value(wire()).unwrap().is_settled(6));
    }

    /// Both ways in give the same text (without managedFields, keys in the server's order)
    /// and the same view as the decoded value.
    #[test]
    fn watched_and_read_objects_keep_the_json_and_read_like_the_value() {
        let watched =
            Compact::from_watched(Watched::from_value(&wire()).unwrap(), &configmaps()).unwrap();
        let read = Compact::from_value(wire()).unwrap();
        let mut want = wire();
        want["metadata"]
            .as_object_mut()
            .unwrap()
            .shift_remove("managedFields");
        for c in [&watched, &read] {
            assert_eq!(c.value().unwrap(), want);
            let keys: Vec<String> = c
                .value()
                .unwrap()
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            assert_eq!(
                keys,
                ["apiVersion", "kind", "metadata", "data", "immutable"]
            );
            assert_eq!(serde_json::to_value(c).unwrap(), want);
            assert_eq!(c.api_version(), want.api_version());
            assert_eq!(c.kind(), want.kind());
            assert_eq!(c.name(), "a");
            assert_eq!(c.namespace(), "ns");
            assert_eq!(c.uid(), "u-a");
            assert_eq!(c.resource_version(), "7");
            assert_eq!(c.label("app"), Some("x"));
            assert_eq!(c.label("tier"), want.label("tier"));
            assert_eq!(c.label("none"), None);
            assert_eq!(c.controller(), want.controller());
            assert_eq!(c.controller().unwrap().uid, "u-p");
            assert!(c.deleting());
        }
    }

    /// The identity points into the text, and only a string JSON escapes is copied: a label
    /// value with a quote and a newline reads back as it was, from `extra`.
    #[test]
    fn identity_strings_are_spans_of_the_text_unless_escaped() {
        let mut obj = wire();
        obj["metadata"]["labels"]["note"] = json!("say \"hi\"\n");
        for c in [
            Compact::from_watched(Watched::from_value(&obj).unwrap(), &configmaps()).unwrap(),
            Compact::from_value(obj.clone()).unwrap(),
        ] {
            assert_eq!(c.label("note"), Some("say \"hi\"\n"));
            assert_eq!(
                &*c.extra, "say \"hi\"\n",
                "only the escaped string is copied"
            );
            assert_eq!(c.name(), "a");
            assert_eq!(c.label("app"), Some("x"));
            assert_eq!(c.controller().unwrap().name, "p");
            let in_text = c.spans.iter().filter(|s| s.start & IN_EXTRA == 0).count();
            assert_eq!(in_text, c.spans.len() - 1);
        }
        let mut extra = String::new();
        assert_eq!(Span::locate("", "{}", &mut extra), Span::EMPTY);
        let at = Span::locate("b", r#"{"a":"b"}"#, &mut extra);
        assert_eq!((at.start, at.end), (6, 7));
        assert!(extra.is_empty());
    }

    /// Without the last-applied annotation, the entries of kmeta's per-parent managers are kept
    /// beside the text (not in it); with it, none are.
    #[test]
    fn a_child_without_the_record_keeps_its_parents_entries() {
        let mine = "metacontroller/cc/0123456789";
        let mut obj = wire();
        obj["metadata"]["managedFields"] = json!([
            {"manager": mine, "operation": "Apply", "apiVersion": "v1", "time": "2026-01-01T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:k": {}}}},
            {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:data": {}}}]);
        let want = json!([{"manager": mine, "operation": "Apply",
            "fieldsV1": {"f:data": {"f:k": {}}}}]);
        let watched =
            Compact::from_watched(Watched::from_value(&obj).unwrap(), &configmaps()).unwrap();
        for c in [watched, Compact::from_value(obj.clone()).unwrap()] {
            assert_eq!(c.parent_entries(), Some(want.clone()));
            assert!(
                c.value().unwrap()["metadata"]
                    .get("managedFields")
                    .is_none()
            );
        }
        obj["metadata"]["annotations"] = json!({dynapply::LAST_APPLIED_ANNOTATION: "{}"});
        let watched =
            Compact::from_watched(Watched::from_value(&obj).unwrap(), &configmaps()).unwrap();
        assert_eq!(watched.parent_entries(), None);
        assert_eq!(Compact::from_value(obj).unwrap().parent_entries(), None);
        assert_eq!(Compact::from_value(wire()).unwrap().parent_entries(), None);
    }

    /// The watched text is the received text without `managedFields`, byte for byte (as the
    /// server spaced and ordered it), an empty `apiVersion` replaced; escaped keys and strings
    /// read back decoded.
    #[test]
    fn watched_text_is_the_received_text_without_managed_fields() {
        let received = r#"{ "apiVersion": "", "metadata": {"managedFields": [{"manager": "m"}], "name": "a\"b", "labels": {"k\u0041": "v", "x": "\n"}, "namespace": "ns"},
            "data": {"k": "v"} }"#;
        let c =
            Compact::from_watched(Watched::from_text(received).unwrap(), &configmaps()).unwrap();
        assert_eq!(
            c.text.get(),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a\"b","labels":{"k\u0041": "v", "x": "\n"},"namespace":"ns"},"data":{"k": "v"}}"#
        );
        assert_eq!((c.name(), c.namespace()), ("a\"b", "ns"));
        assert_eq!(c.labels(), [("kA", "v"), ("x", "\n")]);
        assert_eq!((c.api_version(), c.kind()), ("v1", "ConfigMap"));
        assert!(Watched::from_text(r#"{"metadata":{"name":1}}"#).is_err());
        for bad in [r#"{"metadata":{"labels":{"a":1}}}"#, r#"{"kind":7}"#] {
            let w = Watched::from_text(bad).unwrap();
            let err = Compact::from_watched(w, &configmaps()).unwrap_err();
            assert!(err.to_string().contains("invalid type"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_member_is_found_by_its_quoted_key_and_a_value_never_is() {
        let k = dynapply::LAST_APPLIED_ANNOTATION;
        assert!(has_key(&format!(r#"{{"a":"b","{k}":"{{\"x\":1}}"}}"#), k));
        assert!(has_key(&format!(r#"{{ "{k}" : "v" }}"#), k));
        assert!(!has_key(r#"{"a":"b"}"#, k));
        // the key's text inside a value: its quotes are escaped
        assert!(!has_key(&format!(r#"{{"a":"\"{k}\":x"}}"#), k));
        // the key as a value: followed by a comma or a brace, not a colon
        assert!(!has_key(&format!(r#"{{"a":"{k}","b":"{k}"}}"#), k));
        // a longer key containing it
        assert!(!has_key(&format!(r#"{{"x{k}":"v","{k}x":"v"}}"#), k));
    }

    /// A borrowed string found elsewhere than in the piece it is said to come from is copied,
    /// never given a span out of the piece's bounds.
    #[test]
    fn a_string_outside_its_piece_lies_in_extra() {
        let piece = String::from(r#""abc""#);
        let mut a = Assembly::new(0);
        let inside = &piece[1..4];
        assert_eq!(
            a.span(&piece, 10, &Str::Borrowed(inside)),
            Span { start: 11, end: 14 }
        );
        let elsewhere = String::from("abc");
        let s = a.span(&piece, 10, &Str::Borrowed(&elsewhere));
        assert_eq!(s.start & IN_EXTRA, IN_EXTRA);
        assert_eq!(&*a.extra, "abc");
    }

    #[test]
    fn a_watch_event_without_types_gets_the_resources() {
        let bare = json!({"metadata": {"name": "b"}, "data": {}});
        let c = Compact::from_watched(Watched::from_value(&bare).unwrap(), &configmaps()).unwrap();
        let v = c.value().unwrap();
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "ConfigMap");
        assert_eq!(c.kind(), "ConfigMap");
        assert_eq!(c.controller(), None);
        assert!(!c.deleting());
        assert_eq!(c.namespace(), "");
    }

    /// A map holding compact children encodes byte for byte as one holding their values.
    #[test]
    fn encodes_inside_a_map_as_the_value_does() {
        let c = Compact::from_value(wire()).unwrap();
        let v = c.value().unwrap();
        let mut m = std::collections::BTreeMap::new();
        m.insert("a", &c);
        let raw = serde_json::to_string(&m).unwrap();
        assert_eq!(raw, serde_json::to_string(&json!({"a": v})).unwrap());
    }
}
