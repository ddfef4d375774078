//! A watched object as the API server sent it: its JSON text, kept as received, and the three
//! metadata fields the watcher and a sharded stream read before the cache takes it (name,
//! namespace, resourceVersion).
//!
//! Decoded as a `DynamicObject`, every listed object was built field by field (its
//! `managedFields` too, each entry's `fieldsV1` as a `serde_json::Value`), then encoded again to
//! JSON text for the cache: at a replica's start or a shard takeover that was about 75% of the
//! controller's CPU (perf, 30 000 × 10 cold start: 43% the decoding, 33% the encoding and the
//! identity's search in the text). Kept as text, an object is scanned, not built: the cache
//! takes the pieces it needs from the text ([`crate::runtime::compact::Compact::from_watched`])
//! (docs/design/watched-text.md).

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ApiResource;
use kube::core::{DynamicResourceScope, Resource};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;

/// A watched object: its text as received and the metadata the watch reads.
///
/// Decoded only from JSON text (`serde_json::from_str`, what kube's watcher uses): a
/// `RawValue` cannot be taken from an already decoded value. A watch event whose `object`
/// came before its `type` would be buffered by serde and refused; Kubernetes API servers
/// write `type` first.
#[derive(Clone, Debug)]
pub struct Watched {
    /// `name`, `namespace` and `resourceVersion`; nothing else is read from it.
    pub metadata: ObjectMeta,
    text: Box<RawValue>,
    /// Where each member of the object, and of its `metadata`, lies in `text`: found in the one
    /// scan that read the three fields above, so the cache writes its form from the pieces
    /// without scanning the text again (each scan reads a child's last-applied record, one long
    /// escaped string, character by character).
    places: Places,
}

/// The members of a watched object and of its `metadata`, as places in its text.
#[derive(Clone, Debug, Default)]
struct Places {
    /// The object's members in order; `metadata`'s value is `None` (its members are below).
    top: Vec<(Key, Option<Range>)>,
    metadata: Vec<(Key, Range)>,
}

/// Bytes `start..end` of the text.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Range {
    pub(crate) start: u32,
    pub(crate) end: u32,
}

/// A member's name: where it lies in the text, or decoded when JSON escaped it.
#[derive(Clone, Debug)]
enum Key {
    At(Range),
    Decoded(Box<str>),
}

impl Watched {
    /// The object's JSON text, as received.
    pub fn text(&self) -> &str {
        self.text.get()
    }

    /// `text` as a watched object (`Err` when it is no JSON object).
    pub fn from_text(text: &str) -> Result<Watched, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// `value` encoded, as a watched object (for tests and benchmarks).
    pub fn from_value(value: &serde_json::Value) -> Result<Watched, serde_json::Error> {
        Watched::from_text(&value.to_string())
    }

    /// The object's members in order, each value as its JSON text; `metadata`'s value is
    /// `None`: its members are [`Watched::metadata_members`].
    pub(crate) fn members(&self) -> impl Iterator<Item = (Str<'_>, Option<&str>)> {
        self.places
            .top
            .iter()
            .map(|(k, v)| (self.key(k), v.map(|v| self.at(v))))
    }

    /// The members of `metadata` in order, each value as its JSON text (none when the object
    /// has no `metadata`).
    pub(crate) fn metadata_members(&self) -> impl Iterator<Item = (Str<'_>, &str)> {
        self.places
            .metadata
            .iter()
            .map(|(k, v)| (self.key(k), self.at(*v)))
    }

    fn at(&self, r: Range) -> &str {
        // places are taken from this very text, at character boundaries
        self.text
            .get()
            .get(r.start as usize..r.end as usize)
            .unwrap_or_default()
    }

    fn key<'a>(&'a self, k: &'a Key) -> Str<'a> {
        match k {
            Key::At(r) => Str::Borrowed(self.at(*r)),
            Key::Decoded(s) => Str::Borrowed(s),
        }
    }
}

impl<'de> Deserialize<'de> for Watched {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = Box::<RawValue>::deserialize(d)?;
        let (metadata, places) = read(text.get()).map_err(de::Error::custom)?;
        Ok(Watched {
            metadata,
            text,
            places,
        })
    }
}

/// Reads the three metadata fields of the object `text` and the places of its members, in one
/// scan.
fn read(text: &str) -> Result<(ObjectMeta, Places), serde_json::Error> {
    let layout: Layout<'_> = serde_json::from_str(text)?;
    let mut meta = ObjectMeta::default();
    for (k, v) in &layout.metadata.0 {
        let field = match k.as_str() {
            "name" => &mut meta.name,
            "namespace" => &mut meta.namespace,
            "resourceVersion" => &mut meta.resource_version,
            _ => continue,
        };
        *field = serde_json::from_str::<Option<Str<'_>>>(v.get())?.map(Str::owned);
    }
    let range = |piece: &str| place(text, piece).ok_or_else(|| de::Error::custom(TOO_LONG));
    let key = |k: &Str<'_>| -> Result<Key, serde_json::Error> {
        Ok(match k {
            Str::Borrowed(b) => Key::At(range(b)?),
            Str::Owned(o) => Key::Decoded(o.as_str().into()),
        })
    };
    let mut places = Places {
        top: Vec::with_capacity(layout.top.len()),
        metadata: Vec::with_capacity(layout.metadata.0.len()),
    };
    for (k, v) in &layout.top {
        let v = v.map(|v| range(v.get())).transpose()?;
        places.top.push((key(k)?, v));
    }
    for (k, v) in &layout.metadata.0 {
        places.metadata.push((key(k)?, range(v.get())?));
    }
    Ok((meta, places))
}

const TOO_LONG: &str = "a watched object of 4 GiB or more";

/// Where `piece`, a slice of `text`, lies in it (`None` past 4 GiB).
pub(crate) fn place(text: &str, piece: &str) -> Option<Range> {
    let start = (piece.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let end = start
        .checked_add(piece.len())
        .filter(|e| *e <= text.len())?;
    Some(Range {
        start: u32::try_from(start).ok()?,
        end: u32::try_from(end).ok()?,
    })
}

impl Serialize for Watched {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.text.serialize(s)
    }
}

impl Resource for Watched {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// An object's members, each value as its text, with `metadata`'s members read in the same
/// scan (a second `metadata` is refused, as a derived struct would).
struct Layout<'a> {
    top: Vec<(Str<'a>, Option<&'a RawValue>)>,
    metadata: Members<'a>,
}

impl<'de> Deserialize<'de> for Layout<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Layout<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Layout<'de>, A::Error> {
                let mut top = Vec::with_capacity(m.size_hint().unwrap_or(6));
                let mut metadata = None;
                while let Some(k) = m.next_key::<Str<'de>>()? {
                    if k.as_str() != "metadata" {
                        top.push((k, Some(m.next_value::<&'de RawValue>()?)));
                        continue;
                    }
                    if metadata.is_some() {
                        return Err(de::Error::duplicate_field("metadata"));
                    }
                    metadata = Some(m.next_value::<Members<'de>>()?);
                    top.push((k, None));
                }
                let metadata = metadata.unwrap_or(Members(Vec::new()));
                Ok(Layout { top, metadata })
            }
        }
        d.deserialize_map(V)
    }
}

/// A JSON string as it lies in the text when JSON did not escape it (borrowed: its place in
/// the text is known), else decoded (owned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Str<'a> {
    /// The string's bytes in the text.
    Borrowed(&'a str),
    /// An escaped string, decoded.
    Owned(String),
}

impl<'a> Str<'a> {
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Str::Borrowed(s) => s,
            Str::Owned(s) => s,
        }
    }

    fn owned(self) -> String {
        match self {
            Str::Borrowed(s) => s.to_owned(),
            Str::Owned(s) => s,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Str<'a>, E> {
                Ok(Str::Borrowed(s))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Str<'a>, E> {
                Ok(Str::Owned(s.to_owned()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Str<'a>, E> {
                Ok(Str::Owned(s))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

/// The members of a JSON object in their order, each value as its text (nothing decoded).
pub(crate) struct Members<'a>(pub(crate) Vec<(Str<'a>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Members<'de>, A::Error> {
                let mut all = Vec::with_capacity(m.size_hint().unwrap_or(8));
                while let Some(k) = m.next_key::<Str<'de>>()? {
                    all.push((k, m.next_value::<&'de RawValue>()?));
                }
                Ok(Members(all))
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_watched_object_keeps_its_text_and_reads_three_metadata_fields() {
        let text = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns-\"1\"","resourceVersion":"7","uid":"u","managedFields":[{"manager":"m","fieldsV1":{"f:data":{}}}]},"data":{"k":"v"}}"#;
        let w = Watched::from_text(text).unwrap();
        assert_eq!(w.text(), text);
        assert_eq!(w.metadata.name.as_deref(), Some("a"));
        assert_eq!(w.metadata.namespace.as_deref(), Some("ns-\"1\""));
        assert_eq!(w.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(w.metadata.uid, None);
        assert_eq!(w.metadata.managed_fields, None);
    }

    #[test]
    fn a_watch_event_and_a_list_decode_their_objects_as_text() {
        let line = r#"{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"9"},"data":{}}}"#;
        let ev: kube::core::WatchEvent<Watched> = serde_json::from_str(line).unwrap();
        let kube::core::WatchEvent::Modified(w) = ev else {
            panic!("not a modification")
        };
        assert_eq!(
            w.text(),
            r#"{"metadata":{"name":"a","resourceVersion":"9"},"data":{}}"#
        );
        let list = json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "3"},
            "items": [{"metadata": {"name": "b"}}]});
        let l: kube::core::ObjectList<Watched> = serde_json::from_str(&list.to_string()).unwrap();
        assert_eq!(l.items[0].metadata.name.as_deref(), Some("b"));
    }

    #[test]
    fn what_is_no_object_is_refused_with_the_reason() {
        for bad in [r#""a string""#, r#"{"metadata":{"name":5}}"#, "{"] {
            assert!(Watched::from_text(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_members_and_metadata_members_are_placed_in_order_in_one_scan() {
        let text = r#"{"kind": "ConfigMap" , "metadata":{"name":"a","k\"":[1], "annotations" :{"x":"y"}},"data\"":{"k":"v"}}"#;
        let w = Watched::from_text(text).unwrap();
        let top: Vec<(String, Option<&str>)> = w
            .members()
            .map(|(k, v)| (k.as_str().to_owned(), v))
            .collect();
        let want_top = [
            ("kind", Some(r#""ConfigMap""#)),
            ("metadata", None),
            ("data\"", Some(r#"{"k":"v"}"#)),
        ];
        assert_eq!(top, want_top.map(|(k, v)| (k.to_owned(), v)));
        let meta: Vec<(String, &str)> = w
            .metadata_members()
            .map(|(k, v)| (k.as_str().to_owned(), v))
            .collect();
        let want_meta = [
            ("name", r#""a""#),
            ("k\"", "[1]"),
            ("annotations", r#"{"x":"y"}"#),
        ];
        assert_eq!(meta, want_meta.map(|(k, v)| (k.to_owned(), v)));
        assert_eq!(w.metadata.name.as_deref(), Some("a"));
    }

    #[test]
    fn an_object_without_metadata_has_no_metadata_members() {
        let w = Watched::from_text(r#"{"data":{}}"#).unwrap();
        assert_eq!(w.metadata_members().count(), 0);
        assert_eq!(w.members().count(), 1);
        assert_eq!(w.metadata.name, None);
    }

    #[test]
    fn a_second_or_a_null_metadata_is_refused() {
        for bad in [
            r#"{"metadata":{"name":"a"},"metadata":{"name":"b"}}"#,
            r#"{"metadata":null}"#,
            r#"{"metadata":[]}"#,
        ] {
            let e = Watched::from_text(bad).unwrap_err().to_string();
            assert!(
                e.contains("metadata") || e.contains("invalid type"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn members_keep_their_order_and_borrow_unescaped_strings() {
        let text = r#"{"b":1,"a\"":{"x":[1]},"c":"s"}"#;
        let m: Members<'_> = serde_json::from_str(text).unwrap();
        let keys: Vec<&str> = m.0.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["b", "a\"", "c"]);
        assert!(matches!(m.0[0].0, Str::Borrowed("b")));
        assert!(matches!(m.0[1].0, Str::Owned(_)));
        assert_eq!(m.0[1].1.get(), r#"{"x":[1]}"#);
    }
}
