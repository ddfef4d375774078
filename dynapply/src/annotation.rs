//! The last-applied annotation: deterministic serialization, reading and writing.
//!
//! The annotation is written the way Metacontroller (Go `encoding/json`) writes it: object keys
//! sorted by byte order, no whitespace, `<`, `>`, `&`, U+2028 and U+2029 escaped as `\u003c`,
//! `\u003e`, `\u0026`, `\u2028`, `\u2029`, and floats formatted like Go (`1e+21`, `1e-7`, `3`).
//! An object Metacontroller applied therefore carries a byte-identical annotation to the one
//! dynapply would write for the same desired object, so a takeover causes no write. Null fields
//! and null list items are left out (they mean "absent").

use crate::Options;
use crate::error::{Error, type_name};
use serde_json::{Number, Value};

fn annotation_path(opts: &Options) -> String {
    format!(
        "metadata.annotations[{}]",
        Value::String(opts.annotation.clone())
    )
}

/// Serializes `v` canonically. When `skip_annotation` is set, the key
/// `metadata.annotations.<skip_annotation>` of the top-level object is left out.
pub(crate) fn canonical_json(v: &Value, skip_annotation: Option<&str>) -> String {
    canonical_json_sized(v, skip_annotation, 256)
}

/// [`canonical_json`] into a buffer of `capacity` bytes to start with.
pub(crate) fn canonical_json_sized(
    v: &Value,
    skip_annotation: Option<&str>,
    capacity: usize,
) -> String {
    let mut out = String::with_capacity(capacity);
    write_value(&mut out, v, Skip::Top(skip_annotation));
    out
}

/// Whether [`canonical_json`] of `v` is `expected`, found without building the encoding: the
/// encoder's output is matched against `expected` piece by piece and stops at the first
/// difference (no allocation).
pub(crate) fn canonical_json_is(v: &Value, skip_annotation: Option<&str>, expected: &str) -> bool {
    let mut m = Matcher {
        rest: expected.as_bytes(),
        ok: true,
    };
    write_value(&mut m, v, Skip::Top(skip_annotation));
    m.ok && m.rest.is_empty()
}

/// Whether `a` and `b` have the same canonical encoding ([`canonical_json`] without a skipped
/// annotation): null fields and items left out, keys in any order, numbers as Go formats them.
/// Walks both values, no encoding (a number is formatted only when the two differ in form).
pub(crate) fn same_encoding(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut n = 0;
            let mut ys = y.iter();
            for (k, v) in x {
                if v.is_null() {
                    continue;
                }
                n += 1;
                match crate::merge::in_step(&mut ys, y, k) {
                    Some(w) if same_encoding(v, w) => {}
                    _ => return false,
                }
            }
            // every key found is a distinct non-null entry of y: counting y's is needed only
            // when y holds more entries than were found
            n == y.len() || n == y.values().filter(|w| !w.is_null()).count()
        }
        (Value::Array(x), Value::Array(y)) => {
            let mut ys = y.iter().filter(|w| !w.is_null());
            x.iter()
                .filter(|v| !v.is_null())
                .all(|v| ys.next().is_some_and(|w| same_encoding(v, w)))
                && ys.next().is_none()
        }
        (Value::String(x), Value::String(y)) => crate::merge::short_eq(x.as_bytes(), y.as_bytes()),
        (Value::Number(x), Value::Number(y)) => {
            x == y || ((x.is_f64() || y.is_f64()) && number_text(x) == number_text(y))
        }
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Null, Value::Null) => true,
        _ => false,
    }
}

/// A number as the canonical encoding writes it.
fn number_text(n: &Number) -> String {
    let mut out = String::new();
    write_number(&mut out, n);
    out
}

/// Where the canonical encoder writes: a `String`, or a [`Matcher`].
trait Sink: std::fmt::Write {
    fn put(&mut self, s: &str);
    /// Nothing more needs writing (a matcher has already found a difference).
    fn settled(&self) -> bool;
}

impl Sink for String {
    #[inline]
    fn put(&mut self, s: &str) {
        self.push_str(s);
    }
    #[inline]
    fn settled(&self) -> bool {
        false
    }
}

/// Compares what is written with the expected text (what is left of it in `rest`).
struct Matcher<'a> {
    rest: &'a [u8],
    ok: bool,
}

impl Sink for Matcher<'_> {
    #[inline]
    fn put(&mut self, s: &str) {
        match self.rest.split_at_checked(s.len()) {
            Some((head, tail)) if self.ok && crate::merge::short_eq(head, s.as_bytes()) => {
                self.rest = tail;
            }
            _ => self.ok = false,
        }
    }
    #[inline]
    fn settled(&self) -> bool {
        !self.ok
    }
}

impl std::fmt::Write for Matcher<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.put(s);
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Skip<'a> {
    None,
    Top(Option<&'a str>),
    Metadata(&'a str),
    Annotations(&'a str),
}

fn write_value<S: Sink>(out: &mut S, v: &Value, skip: Skip<'_>) {
    if out.settled() {
        return;
    }
    match v {
        Value::Null => out.put("null"),
        Value::Bool(b) => out.put(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.put("[");
            let mut first = true;
            for item in items.iter().filter(|i| !i.is_null()) {
                if !first {
                    out.put(",");
                }
                first = false;
                write_value(out, item, Skip::None);
            }
            out.put("]");
        }
        Value::Object(m) => {
            let keep = |k: &String, v: &Value| {
                !v.is_null() && !matches!(skip, Skip::Annotations(a) if a == k.as_str())
            };
            // a map already in key order (as many small ones are) is written as it stands
            if m.keys().zip(m.keys().skip(1)).all(|(a, b)| a < b) {
                write_entries(out, m.iter().filter(|(k, v)| keep(k, v)), skip);
                return;
            }
            // sort (key, value) pairs; small maps sort on the stack
            let mut small: [(&str, &Value); SMALL_OBJECT] = [("", &NULL); SMALL_OBJECT];
            let mut large: Vec<(&str, &Value)> = Vec::new();
            let entries: &mut [(&str, &Value)] = if m.len() <= SMALL_OBJECT {
                let mut n = 0;
                for (k, v) in m {
                    if keep(k, v) {
                        small[n] = (k.as_str(), v);
                        n += 1;
                    }
                }
                &mut small[..n]
            } else {
                large.extend(
                    m.iter()
                        .filter(|(k, v)| keep(k, v))
                        .map(|(k, v)| (k.as_str(), v)),
                );
                &mut large
            };
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            write_entries(out, entries.iter().map(|(k, v)| (*k, *v)), skip);
        }
    }
}

/// An object's entries, in the order given, as `{"key":value,...}`; `skip` is the object's.
fn write_entries<'v, S: Sink, K: AsRef<str> + 'v>(
    out: &mut S,
    entries: impl Iterator<Item = (K, &'v Value)>,
    skip: Skip<'_>,
) {
    out.put("{");
    for (n, (k, sub)) in entries.enumerate() {
        if n > 0 {
            out.put(",");
        }
        let k = k.as_ref();
        write_string(out, k);
        out.put(":");
        let child_skip = match (skip, k) {
            (Skip::Top(Some(a)), "metadata") => Skip::Metadata(a),
            (Skip::Metadata(a), "annotations") => Skip::Annotations(a),
            _ => Skip::None,
        };
        write_value(out, sub, child_skip);
    }
    out.put("}");
}

/// Objects up to this many keys are sorted in a stack buffer.
const SMALL_OBJECT: usize = 16;
static NULL: Value = Value::Null;

fn write_number<S: Sink>(out: &mut S, n: &Number) {
    if n.is_i64() || n.is_u64() {
        let _ = write!(out, "{n}");
        return;
    }
    let Some(f) = n.as_f64() else {
        let _ = write!(out, "{n}");
        return;
    };
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Go: 'e' format with the shortest digits, exponent with a sign and at least one digit.
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => {
                let _ = write!(out, "{mantissa}e+{exp}");
            }
            _ => out.put(&s),
        }
    } else {
        // Go: 'f' format with the shortest digits; Rust's Display prints 3.0 as "3".
        let _ = write!(out, "{f}");
    }
}

/// True for bytes that start a sequence Go's encoder escapes (`"`, `\\`, controls, `<>&`, and
/// 0xE2, the lead byte of U+2028/U+2029).
#[inline]
fn needs_escape(b: u8) -> bool {
    ESCAPES[usize::from(b)]
}

/// [`needs_escape`] as a table (one load per byte).
static ESCAPES: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = b < 0x20 || matches!(b as u8, b'"' | b'\\' | b'<' | b'>' | b'&' | 0xE2);
        b += 1;
    }
    t
};

fn write_string<S: Sink>(out: &mut S, s: &str) {
    out.put("\"");
    if !s.bytes().any(needs_escape) {
        out.put(s);
        out.put("\"");
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.put("\\\""),
            '\\' => out.put("\\\\"),
            '\n' => out.put("\\n"),
            '\r' => out.put("\\r"),
            '\t' => out.put("\\t"),
            '\u{8}' => out.put("\\b"),
            '\u{c}' => out.put("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let mut buf = [0u8; 4];
                out.put(c.encode_utf8(&mut buf));
            }
        }
    }
    out.put("\"");
}

/// Reads the last-applied configuration from `obj`'s annotation `opts.annotation`.
///
/// A missing `metadata`, missing annotations, a missing or empty annotation, or the JSON `null`
/// give `Ok(None)`: there is no last-applied, and a merge then removes nothing. An annotation
/// that is not a string, not JSON, or not a JSON object is an error naming the annotation.
pub fn get_last_applied(obj: &Value, opts: &Options) -> Result<Option<Value>, Error> {
    let Value::Object(top) = obj else {
        return Err(Error::NotAnObject {
            what: "object",
            found: type_name(obj),
        });
    };
    let annotations = match top.get("metadata") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(meta)) => match meta.get("annotations") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(a)) => a,
            Some(other) => {
                return Err(Error::InvalidField {
                    path: "metadata.annotations".to_owned(),
                    message: format!("expected an object, found {}", type_name(other)),
                });
            }
        },
        Some(other) => {
            return Err(Error::InvalidField {
                path: "metadata".to_owned(),
                message: format!("expected an object, found {}", type_name(other)),
            });
        }
    };
    let text = match annotations.get(opts.annotation.as_str()) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(Error::CorruptLastApplied {
                path: annotation_path(opts),
                message: format!("expected a string, found {}", type_name(other)),
            });
        }
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    let parsed: Value = crate::parse::parse_value(text).map_err(|e| Error::CorruptLastApplied {
        path: annotation_path(opts),
        message: format!("invalid JSON: {e}"),
    })?;
    match parsed {
        Value::Null => Ok(None),
        v @ Value::Object(_) => Ok(Some(v)),
        other => Err(Error::CorruptLastApplied {
            path: annotation_path(opts),
            message: format!("expected a JSON object, found {}", type_name(&other)),
        }),
    }
}

/// Writes `last_applied`, serialized canonically (see the module docs), into `obj`'s
/// annotation `opts.annotation`, creating `metadata` and `metadata.annotations` when absent
/// (or null). Any copy of the annotation nested inside `last_applied` itself is left out.
pub fn set_last_applied(
    obj: &mut Value,
    last_applied: &Value,
    opts: &Options,
) -> Result<(), Error> {
    let text = canonical_json(last_applied, Some(&opts.annotation));
    write_annotation(obj, text, opts)
}

pub(crate) fn write_annotation(obj: &mut Value, text: String, opts: &Options) -> Result<(), Error> {
    // the usual case, an annotation already there: found without hashing the keys on its path
    if let Some(Value::String(existing)) = crate::merge::vget_mut(obj, "metadata")
        .and_then(|m| crate::merge::vget_mut(m, "annotations"))
        .and_then(|a| crate::merge::vget_mut(a, &opts.annotation))
    {
        *existing = text;
        return Ok(());
    }
    let found = type_name(obj);
    let Value::Object(top) = obj else {
        return Err(Error::NotAnObject {
            what: "object",
            found,
        });
    };
    let meta = top
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    if meta.is_null() {
        *meta = Value::Object(Default::default());
    }
    let found = type_name(meta);
    let Value::Object(meta) = meta else {
        return Err(Error::InvalidField {
            path: "metadata".to_owned(),
            message: format!("expected an object, found {found}"),
        });
    };
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Default::default()));
    if annotations.is_null() {
        *annotations = Value::Object(Default::default());
    }
    let found = type_name(annotations);
    let Value::Object(annotations) = annotations else {
        return Err(Error::InvalidField {
            path: "metadata.annotations".to_owned(),
            message: format!("expected an object, found {found}"),
        });
    };
    match annotations.get_mut(opts.annotation.as_str()) {
        Some(Value::String(existing)) if *existing == text => {}
        Some(slot) => *slot = Value::String(text),
        None => {
            annotations.insert(opts.annotation.clone(), Value::String(text));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn same_encoding_is_equal_canonical_json() {
        let cases = [
            (
                json!({"a": 1, "b": [1, null, "x"]}),
                json!({"b": [1, "x"], "a": 1, "c": null}),
            ),
            (json!({"a": 1.0}), json!({"a": 1})),
            (json!({"a": 1.5}), json!({"a": 1.5})),
            (json!({"a": 1e21}), json!({"a": 1e21})),
            (json!({"a": 1.5}), json!({"a": 2.5})),
            (json!({"a": 1}), json!({"a": 2})),
            (json!({"a": 1}), json!({"a": "1"})),
            (json!({"a": {}}), json!({"a": {"b": null}})),
            (json!({"a": {}}), json!({"a": {"b": 0}})),
            (json!({"a": [null]}), json!({"a": []})),
            (json!({"a": [1]}), json!({"a": [1, 1]})),
            (json!({"a": "<"}), json!({"a": "<"})),
            (json!({"a": true}), json!({"a": false})),
            (json!({"a": null}), json!({})),
            (json!({"x": 1, "y": 2}), json!({"y": 2, "x": 1, "z": 3})),
        ];
        for (a, b) in cases {
            let want = canonical_json(&a, None) == canonical_json(&b, None);
            assert_eq!(same_encoding(&a, &b), want, "{a} vs {b}");
            assert_eq!(same_encoding(&b, &a), want, "{b} vs {a}");
        }
    }

    #[test]
    fn matching_the_encoding_is_comparing_with_it() {
        let v = json!({"b": 1, "a": {"z": "<x> & y", "y": null}, "c": [1.5, 3.0, 1e21, null, "\u{2028}é"],
            "metadata": {"annotations": {"skip": "me", "keep": "me"}}});
        for skip in [None, Some("skip")] {
            let text = canonical_json(&v, skip);
            assert!(canonical_json_is(&v, skip, &text));
            assert!(
                !canonical_json_is(&v, skip, &text[..text.len() - 1]),
                "a prefix"
            );
            assert!(!canonical_json_is(&v, skip, &format!("{text} ")), "longer");
            for at in 0..text.len() {
                let mut other = text.clone().into_bytes();
                other[at] = if other[at] == b'x' { b'y' } else { b'x' };
                if let Ok(other) = String::from_utf8(other) {
                    assert!(!canonical_json_is(&v, skip, &other), "changed at {at}");
                }
            }
        }
        assert!(!canonical_json_is(
            &v,
            Some("skip"),
            &canonical_json(&v, None)
        ));
    }

    #[test]
    fn canonical_matches_go_encoding() {
        let v = json!({"b": 1, "a": {"z": "<x> & y", "y": null}, "c": [1.5, 3.0, 1e21, 1e-7, null, "\u{2028}\n\u{1}"], "d": -0.000001});
        assert_eq!(
            canonical_json(&v, None),
            r#"{"a":{"z":"\u003cx\u003e \u0026 y"},"b":1,"c":[1.5,3,1e+21,1e-7,"\u2028\n\u0001"],"d":-0.000001}"#
        );
    }

    /// Keys come out in byte order (Go's `encoding/json` sorts map keys so) whatever their
    /// first 8 bytes share: ties, prefixes, zero bytes, non-ASCII, maps small and large, in
    /// every rotation of their input order and already sorted.
    #[test]
    fn canonical_orders_keys_as_bytes() {
        let mut keys: Vec<String> = [
            "",
            "a",
            "ab",
            "a\u{0}",
            "a\u{0}\u{0}",
            "abcdefgh",
            "abcdefghi",
            "abcdefgg",
            "abcdefgh\u{0}",
            "abcdefgha",
            "Z",
            "é",
            "éa",
            "\u{7f}",
            "zzzzzzzzz",
            "zzzzzzzz",
        ]
        .iter()
        .map(|k| k.to_string())
        .collect();
        for extra in 0..12 {
            keys.push(format!("k{extra:02}"));
            let mut want_keys = keys.clone();
            want_keys.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            let want: Vec<String> = want_keys
                .iter()
                .enumerate()
                .map(|(i, k)| format!("{}:{i}", serde_json::to_string(k).unwrap()))
                .collect();
            let want = format!("{{{}}}", want.join(","));
            // every rotation of the input order, and the sorted order itself
            let orders = (0..keys.len())
                .map(|shift| {
                    let mut order = keys.clone();
                    order.rotate_left(shift);
                    order
                })
                .chain([want_keys.clone()]);
            for order in orders {
                let map: serde_json::Map<String, Value> = order
                    .iter()
                    .map(|k| {
                        let rank = want_keys.iter().position(|w| w == k).unwrap();
                        (k.clone(), json!(rank))
                    })
                    .collect();
                assert_eq!(
                    canonical_json(&Value::Object(map), None),
                    want,
                    "{} keys",
                    keys.len()
                );
            }
        }
    }

    #[test]
    fn canonical_skips_only_the_named_annotation_at_the_top() {
        let v = json!({"metadata": {"annotations": {"keep": "1", "la": "x"}},
                       "spec": {"metadata": {"annotations": {"la": "nested"}}}});
        assert_eq!(
            canonical_json(&v, Some("la")),
            r#"{"metadata":{"annotations":{"keep":"1"}},"spec":{"metadata":{"annotations":{"la":"nested"}}}}"#
        );
    }

    #[test]
    fn round_trip() {
        // upstream TestLastAppliedAnnotation
        let opts = Options::default();
        let mut obj = json!({});
        let last = json!({"testing": "123"});
        set_last_applied(&mut obj, &last, &opts).unwrap();
        assert_eq!(get_last_applied(&obj, &opts).unwrap(), Some(last));
    }

    #[test]
    fn recorded_last_applied_is_what_the_written_annotation_parses_to() {
        let opts = Options::default();
        let desired = json!({
            "metadata": {"name": "a", "annotations": {
                "metacontroller.k8s.io/last-applied-configuration": "{\"stale\":1}",
                "keep": "me", "gone": null
            }},
            "spec": {"n": 3, "x": null, "list": [1, null, {"name": "a", "v": null}], "s": "<&>"}
        });
        let written = crate::prepare_create(&desired, &opts).unwrap();
        let parsed = get_last_applied(&written, &opts).unwrap().unwrap();
        let recorded = crate::recorded_last_applied(&desired, &opts).unwrap();
        assert_eq!(recorded, parsed);
        assert!(crate::recorded_last_applied(&json!([]), &opts).is_err());
    }

    #[test]
    fn missing_empty_null_and_corrupt() {
        let opts = Options::default();
        let key = crate::LAST_APPLIED_ANNOTATION;
        assert_eq!(get_last_applied(&json!({}), &opts).unwrap(), None);
        assert_eq!(
            get_last_applied(&json!({"metadata": {"annotations": {key: ""}}}), &opts).unwrap(),
            None
        );
        assert_eq!(
            get_last_applied(&json!({"metadata": {"annotations": {key: "null"}}}), &opts).unwrap(),
            None
        );
        let err = get_last_applied(&json!({"metadata": {"annotations": {key: "{oops"}}}), &opts)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "at metadata.annotations[\"metacontroller.k8s.io/last-applied-configuration\"]: corrupt last-applied configuration: invalid JSON"
            ),
            "{err}"
        );
        let err = get_last_applied(&json!({"metadata": {"annotations": {key: "[1]"}}}), &opts)
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with("expected a JSON object, found a list"),
            "{err}"
        );
        let err = get_last_applied(&json!({"metadata": "x"}), &opts)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "at metadata: expected an object, found a string");
        let err = set_last_applied(
            &mut json!({"metadata": {"annotations": 3}}),
            &json!({}),
            &opts,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "at metadata.annotations: expected an object, found a number"
        );
        let err = get_last_applied(&json!([]), &opts).unwrap_err().to_string();
        assert_eq!(err, "object must be a JSON object, found a list");
    }

    #[test]
    fn custom_annotation_name() {
        let opts = Options {
            annotation: "example.com/applied".to_owned(),
            ..Options::default()
        };
        let mut obj = json!({"metadata": {"annotations": null}});
        set_last_applied(&mut obj, &json!({"a": 1}), &opts).unwrap();
        assert_eq!(
            obj["metadata"]["annotations"]["example.com/applied"],
            json!("{\"a\":1}")
        );
    }
}
