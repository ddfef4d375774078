//! Structural schemas of custom resources, applied like kube-apiserver applies them on every
//! write of a custom resource: pruning of unknown fields, defaulting, and OpenAPI v3 validation
//! (422 Invalid, worded like apiextensions-apiserver's kube-openapi validator converted to field
//! errors), with validation ratcheting on update (on by default since Kubernetes 1.30: errors in
//! values that did not change are ignored).
//!
//! A CRD version's `openAPIV3Schema` is compiled once into a [`Schema`] (patterns compiled,
//! properties indexed) when the CRD is installed; the functions here are pure over
//! `serde_json::Value`.
//!
//! CEL `x-kubernetes-validations` are compiled with the schema and run after it
//! (`src/cel/crd.rs`).
//!
//! Not covered: `uniqueItems` (forbidden in structural schemas),
//! most string `format`s (only `date-time`, `date`, `uuid`, `ipv4`, `ipv6`, `cidr`, `byte` are
//! checked), embedded-resource metadata validation and ObjectMeta pruning inside embedded
//! resources, and `x-kubernetes-map-type`.

use crate::error::ApiError;
use crate::patch::ListKind;
use regex::Regex;
use serde_json::{Map, Value, json};

/// The JSON types a schema node may require.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl Ty {
    fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "object" => Ty::Object,
            "array" => Ty::Array,
            "string" => Ty::String,
            "integer" => Ty::Integer,
            "number" => Ty::Number,
            "boolean" => Ty::Boolean,
            _ => return None,
        })
    }
    fn name(self) -> &'static str {
        match self {
            Ty::Object => "object",
            Ty::Array => "array",
            Ty::String => "string",
            Ty::Integer => "integer",
            Ty::Number => "number",
            Ty::Boolean => "boolean",
        }
    }
}

/// One compiled schema node.
#[derive(Debug, Clone, Default)]
struct Node {
    ty: Option<Ty>,
    int_or_string: bool,
    nullable: bool,
    /// `properties`, in schema order; `None` when the schema has no `properties`.
    properties: Option<Vec<(String, Node)>>,
    additional: Option<Box<Node>>,
    items: Option<Box<Node>>,
    preserve_unknown: bool,
    embedded: bool,
    default: Option<Value>,
    required: Vec<String>,
    enumeration: Option<Vec<Value>>,
    minimum: Option<f64>,
    exclusive_minimum: bool,
    maximum: Option<f64>,
    exclusive_maximum: bool,
    multiple_of: Option<f64>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    pattern: Option<(String, Regex)>,
    format: Option<String>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    min_properties: Option<u64>,
    max_properties: Option<u64>,
    /// `x-kubernetes-list-type` (a map list keeps its keys as written, even none).
    list_type: Option<ListKind>,
    all_of: Vec<Node>,
    any_of: Vec<Node>,
    one_of: Vec<Node>,
    not: Option<Box<Node>>,
}

impl Node {
    fn property(&self, k: &str) -> Option<&Node> {
        self.properties
            .as_ref()
            .and_then(|p| p.iter().find(|(n, _)| n == k).map(|(_, s)| s))
    }

    /// The schema of a map value under key `k`: its property, else `additionalProperties`.
    fn child(&self, k: &str) -> Option<&Node> {
        self.property(k).or(self.additional.as_deref())
    }

    fn compile(v: &Value, path: &str) -> Result<Node, CompileError> {
        let Some(m) = v.as_object() else {
            return Ok(Node::default());
        };
        let num = |k: &str| m.get(k).and_then(Value::as_f64);
        let count = |k: &str| m.get(k).and_then(Value::as_u64);
        let flag = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
        // compiled in this order, so the first invalid part reported stays the same
        let properties = properties_of(m, path)?;
        let additional = sub_of(m, "additionalProperties", path)?;
        let items = sub_of(m, "items", path)?;
        let pattern = pattern_of(m, path)?;
        let all_of = subs_of(m, "allOf", path)?;
        let any_of = subs_of(m, "anyOf", path)?;
        let one_of = subs_of(m, "oneOf", path)?;
        let not = sub_of(m, "not", path)?;
        Ok(Node {
            ty: m.get("type").and_then(Value::as_str).and_then(Ty::parse),
            int_or_string: flag("x-kubernetes-int-or-string"),
            nullable: flag("nullable"),
            properties,
            additional,
            items,
            preserve_unknown: flag("x-kubernetes-preserve-unknown-fields"),
            embedded: flag("x-kubernetes-embedded-resource"),
            default: m.get("default").cloned(),
            required: strings_of(m, "required"),
            enumeration: m.get("enum").and_then(Value::as_array).cloned(),
            minimum: num("minimum"),
            exclusive_minimum: flag("exclusiveMinimum"),
            maximum: num("maximum"),
            exclusive_maximum: flag("exclusiveMaximum"),
            multiple_of: num("multipleOf"),
            min_length: count("minLength"),
            max_length: count("maxLength"),
            pattern,
            format: m.get("format").and_then(Value::as_str).map(str::to_string),
            min_items: count("minItems"),
            max_items: count("maxItems"),
            min_properties: count("minProperties"),
            max_properties: count("maxProperties"),
            list_type: list_type_of(m),
            all_of,
            any_of,
            one_of,
            not,
        })
    }
}

/// An invalid part of a schema, found by [`Schema::compile`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: Invalid value: {message}")]
pub struct CompileError {
    /// Where: the path of the invalid part, under `openAPIV3Schema`
    /// (`openAPIV3Schema.properties[a].pattern`).
    pub field: String,
    /// Why, as kube-apiserver words it.
    pub message: String,
}

fn strings_of(m: &Map<String, Value>, k: &str) -> Vec<String> {
    m.get(k)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The schemas of a list keyword (`allOf`, `anyOf`, `oneOf`).
fn subs_of(m: &Map<String, Value>, k: &str, path: &str) -> Result<Vec<Node>, CompileError> {
    m.get(k)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .enumerate()
                .map(|(i, s)| Node::compile(s, &format!("{path}.{k}[{i}]")))
                .collect()
        })
        .unwrap_or_else(|| Ok(vec![]))
}

/// The schema of a keyword holding one (`additionalProperties`, `items`, `not`).
fn sub_of(m: &Map<String, Value>, k: &str, path: &str) -> Result<Option<Box<Node>>, CompileError> {
    match m.get(k) {
        Some(s @ Value::Object(_)) => Ok(Some(Box::new(Node::compile(s, &format!("{path}.{k}"))?))),
        _ => Ok(None),
    }
}

fn properties_of(
    m: &Map<String, Value>,
    path: &str,
) -> Result<Option<Vec<(String, Node)>>, CompileError> {
    let Some(p) = m.get("properties").and_then(Value::as_object) else {
        return Ok(None);
    };
    p.iter()
        .map(|(k, s)| {
            Ok((
                k.clone(),
                Node::compile(s, &format!("{path}.properties[{k}]"))?,
            ))
        })
        .collect::<Result<Vec<_>, CompileError>>()
        .map(Some)
}

/// `pattern`, compiled (an invalid regular expression is a compile error).
fn pattern_of(m: &Map<String, Value>, path: &str) -> Result<Option<(String, Regex)>, CompileError> {
    let Some(p) = m.get("pattern").and_then(Value::as_str) else {
        return Ok(None);
    };
    match Regex::new(p) {
        Ok(re) => Ok(Some((p.to_string(), re))),
        Err(e) => Err(CompileError {
            field: format!("{path}.pattern"),
            message: format!(
                "{}: must be a valid regular expression, but isn't: {e}",
                go_quote(p)
            ),
        }),
    }
}

fn list_type_of(m: &Map<String, Value>) -> Option<ListKind> {
    match m.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => Some(ListKind::Set),
        Some("map") => Some(ListKind::Map(strings_of(m, "x-kubernetes-list-map-keys"))),
        Some("atomic") => Some(ListKind::Atomic),
        _ => None,
    }
}

/// A compiled structural schema of one CRD version.
#[derive(Debug, Clone)]
pub struct Schema {
    root: Node,
    /// The CEL `x-kubernetes-validations` anywhere in the schema, if any.
    rules: Option<crate::cel::crd::CrdRules>,
}

/// One validation failure, as a Kubernetes `field.Error`.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// `details.causes[].reason`, e.g. `FieldValueInvalid`.
    pub reason: &'static str,
    /// Field path, e.g. `spec.replicas`, `spec.ports[0].name`.
    pub field: String,
    /// The error body (`Invalid value: 20: spec.replicas in body should be ...`).
    pub message: String,
}

/// `apiVersion`, `kind` and `metadata` of a resource (root or embedded) are never pruned.
const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

impl Schema {
    /// Compile an `openAPIV3Schema`; fails on an invalid `pattern` with the field (under
    /// `openAPIV3Schema`) and the message.
    pub fn compile(schema: &Value) -> Result<Schema, CompileError> {
        let root = Node::compile(schema, "openAPIV3Schema")?;
        let rules = crate::cel::crd::CrdRules::compile(schema).map_err(|e| CompileError {
            field: e.field,
            message: e.message,
        })?;
        Ok(Schema { root, rules })
    }

    /// Drop fields the schema does not describe. Returns the paths dropped (for warnings).
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut pruned = vec![];
        prune(obj, Some(&self.root), true, &Path::Root, &mut pruned);
        pruned
    }

    /// Apply defaults (and drop non-nullable nulls without a default), after pruning.
    pub fn default(&self, obj: &mut Value) {
        default(obj, &self.root);
    }

    /// Prune then default: what decoding a request body does to a custom resource.
    pub fn coerce(&self, obj: &mut Value) {
        self.prune(obj);
        self.default(obj);
    }

    /// Validate `obj`; on update `old` ratchets: errors inside values equal to the correlated
    /// old value are ignored.
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errs = vec![];
        validate(&self.root, obj, old, &Path::Root, &mut errs);
        errs
    }

    /// [`Schema::validate`], then the CEL `x-kubernetes-validations` (unless a value has the
    /// wrong type, which kube-apiserver reports instead of running them); the failures ratcheted
    /// away on update are returned as `Warning` texts.
    pub fn validate_with_rules(
        &self,
        obj: &Value,
        old: Option<&Value>,
    ) -> (Vec<FieldError>, Vec<String>) {
        let mut errs = self.validate(obj, old);
        let Some(rules) = &self.rules else {
            return (errs, vec![]);
        };
        if errs.iter().any(|e| e.reason == "FieldValueTypeInvalid") {
            return (errs, vec![]);
        }
        let outcome = rules.check(obj, old);
        errs.extend(outcome.errors.into_iter().map(|f| FieldError {
            reason: f.reason,
            field: f.field,
            message: f.message,
        }));
        (errs, outcome.warnings)
    }
}

/// A field path built on the stack while walking; rendered only for errors and pruned fields.
#[derive(Clone, Copy)]
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl Path<'_> {
    /// `spec.ports[0].name`; `""` for the root.
    fn render(&self) -> String {
        match self {
            Path::Root => String::new(),
            Path::Key(p, k) => {
                let mut s = p.render();
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
                s
            }
            Path::Index(p, i) => format!("{}[{i}]", p.render()),
        }
    }
}

/// How kube-openapi names a path in its messages (`.` for the root).
fn body_name(path: &str) -> &str {
    if path.is_empty() { "." } else { path }
}

fn prune(
    v: &mut Value,
    s: Option<&Node>,
    resource_root: bool,
    path: &Path<'_>,
    pruned: &mut Vec<String>,
) {
    let keep_meta = resource_root || s.is_some_and(|s| s.embedded);
    match v {
        Value::Object(m) => {
            m.retain(|k, _| {
                let keep = (keep_meta && META_FIELDS.contains(&k.as_str()))
                    || s.is_some_and(|s| s.preserve_unknown || s.child(k).is_some());
                if !keep {
                    pruned.push(Path::Key(path, k).render());
                }
                keep
            });
            let Some(s) = s else {
                return;
            };
            for (k, x) in m.iter_mut() {
                if keep_meta && META_FIELDS.contains(&k.as_str()) {
                    // a resource's metadata follows the server's metadata rules
                    continue;
                }
                if let Some(c) = s.child(k) {
                    prune(x, Some(c), false, &Path::Key(path, k), pruned);
                }
            }
        }
        Value::Array(a) => {
            let items = match s {
                Some(s) if s.items.is_none() && s.preserve_unknown => return,
                Some(s) => s.items.as_deref(),
                None => None,
            };
            for (i, x) in a.iter_mut().enumerate() {
                prune(x, items, false, &Path::Index(path, i), pruned);
            }
        }
        _ => {}
    }
}

fn non_nullable_null(v: &Value, s: &Node) -> bool {
    v.is_null() && !s.nullable
}

fn default(v: &mut Value, s: &Node) {
    match v {
        Value::Object(m) => {
            if let Some(props) = &s.properties {
                for (k, p) in props {
                    match m.get(k) {
                        None => {
                            if let Some(d) = &p.default {
                                m.insert(k.clone(), d.clone());
                            }
                        }
                        Some(x) if non_nullable_null(x, p) => match &p.default {
                            Some(d) => {
                                m.insert(k.clone(), d.clone());
                            }
                            None => {
                                m.remove(k);
                            }
                        },
                        Some(_) => {}
                    }
                }
            }
            if let Some(ap) = &s.additional {
                m.retain(|k, x| {
                    s.property(k).is_some() || !non_nullable_null(x, ap) || ap.default.is_some()
                });
            }
            for (k, x) in m.iter_mut() {
                if let Some(p) = s.property(k) {
                    default(x, p);
                } else if let Some(ap) = s.additional.as_deref() {
                    if non_nullable_null(x, ap)
                        && let Some(d) = &ap.default
                    {
                        *x = d.clone();
                    }
                    default(x, ap);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                for x in a.iter_mut() {
                    if non_nullable_null(x, items)
                        && let Some(d) = &items.default
                    {
                        *x = d.clone();
                    }
                    default(x, items);
                }
            }
        }
        _ => {}
    }
}

/// The name kube-openapi gives a value's JSON type.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_ok(v: &Value, s: &Node) -> bool {
    if s.int_or_string {
        return v.is_string() || is_integer(v);
    }
    match s.ty {
        None => true,
        Some(Ty::Object) => v.is_object(),
        Some(Ty::Array) => v.is_array(),
        Some(Ty::String) => v.is_string(),
        Some(Ty::Boolean) => v.is_boolean(),
        Some(Ty::Number) => v.is_number(),
        Some(Ty::Integer) => is_integer(v),
    }
}

/// Integers, and floats with an integral value (as kube-openapi accepts them).
fn is_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) if n.is_f64() => n.as_f64().is_some_and(|f| f.fract() == 0.0),
        Value::Number(_) => true,
        _ => false,
    }
}

fn type_label(s: &Node) -> String {
    if s.int_or_string {
        "integer,string".into()
    } else {
        s.ty.map(Ty::name).unwrap_or_default().into()
    }
}

/// Go's `%v` of a float64 (as it appears in kube-openapi messages).
fn go_float(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e21 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

/// A value as `field.Error` prints it: `%v` for numbers and booleans, `%q` for strings, `%#v`
/// for the rest.
fn go_value(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        // `%v` and `%#v` agree on the rest
        other => go_sharp(other),
    }
}

/// Go's `%q` (close enough: JSON escaping).
fn go_quote(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// Go's `%#v` of a decoded JSON value.
fn go_sharp(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => go_float(f),
            _ => n.to_string(),
        },
        Value::String(s) => go_quote(s),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(go_sharp).collect();
            format!("[]interface {{}}{{{}}}", items.join(", "))
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", go_quote(k), go_sharp(&m[k.as_str()])))
                .collect();
            format!("map[string]interface {{}}{{{}}}", items.join(", "))
        }
    }
}

fn invalid(errs: &mut Vec<FieldError>, path: &str, value: &Value, detail: String) {
    errs.push(FieldError {
        reason: "FieldValueInvalid",
        field: path.to_string(),
        message: format!("Invalid value: {}: {detail}", go_value(value)),
    });
}

/// JSON equality for the `enum` check and the duplicate check of `x-kubernetes-list-type: set`:
/// object key order ignored, numbers by value (as `f64`).
///
/// Deliberately not `dynapply::json_eq`, which does the same job: this server is the oracle the
/// workspace's merge and apply code is tested against, so it shares no code with that code
/// (`kmeta-apiserver` does not depend on `dynapply`), and a bug in one equality cannot hide
/// itself in both.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, a)| y.get(k).is_some_and(|b| json_eq(a, b)))
        }
        _ => a == b,
    }
}

/// The values of a map list item's keys, for correlation and duplicate detection.
fn map_key(item: &Value, keys: &[String]) -> Option<Map<String, Value>> {
    let m = item.as_object()?;
    let mut out = Map::new();
    for k in keys {
        out.insert(k.clone(), m.get(k).cloned().unwrap_or(Value::Null));
    }
    Some(out)
}

/// `<path> in body must be of type <ty>`, quoting `actual` (a JSON type name, or a string that
/// fails a `format`).
fn type_error(errs: &mut Vec<FieldError>, path: &Path<'_>, ty: &str, actual: &str) {
    let p = path.render();
    let actual = go_quote(actual);
    let message = format!(
        "Invalid value: {actual}: {} in body must be of type {ty}: {actual}",
        body_name(&p)
    );
    errs.push(FieldError {
        reason: "FieldValueTypeInvalid",
        field: p,
        message,
    });
}

fn validate(s: &Node, v: &Value, old: Option<&Value>, path: &Path<'_>, errs: &mut Vec<FieldError>) {
    // ratcheting: an unchanged value keeps whatever errors it had
    if old.is_some_and(|o| o == v) {
        return;
    }
    if v.is_null() {
        if !s.nullable && (s.ty.is_some() || s.int_or_string) {
            type_error(errs, path, &type_label(s), "null");
        }
        return;
    }
    if !type_ok(v, s) {
        type_error(errs, path, &type_label(s), type_name(v));
        return;
    }
    validate_composition(s, v, old, path, errs);
    match v {
        Value::String(st) => validate_string(s, st, v, path, errs),
        Value::Number(_) => validate_number(s, v, path, errs),
        Value::Array(a) => validate_array(s, a, old, path, errs),
        _ => {}
    }
    if let Some(allowed) = &s.enumeration
        && !allowed.iter().any(|a| json_eq(a, v))
    {
        let values: Vec<String> = allowed
            .iter()
            .map(|a| match a {
                Value::String(x) => go_quote(x),
                other => go_quote(&other.to_string()),
            })
            .collect();
        errs.push(FieldError {
            reason: "FieldValueNotSupported",
            field: path.render(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                go_value(v),
                values.join(", ")
            ),
        });
    }
    if let Value::Object(m) = v {
        validate_object(s, m, old, path, errs);
    }
}

/// An `Invalid value` error whose detail names the path (`<path> in body should ...`).
fn invalid_at(
    errs: &mut Vec<FieldError>,
    path: &Path<'_>,
    value: &Value,
    detail: impl FnOnce(&str) -> String,
) {
    let p = path.render();
    let d = detail(body_name(&p));
    invalid(errs, &p, value, d);
}

fn validate_string(s: &Node, st: &str, v: &Value, path: &Path<'_>, errs: &mut Vec<FieldError>) {
    let len = st.chars().count() as u64;
    if let Some(max) = s.max_length
        && len > max
    {
        errs.push(FieldError {
            reason: "FieldValueTooLong",
            field: path.render(),
            message: format!("Too long: may not be longer than {max}"),
        });
    }
    if let Some(min) = s.min_length
        && len < min
    {
        invalid_at(errs, path, v, |n| {
            format!("{n} in body should be at least {min} chars long")
        });
    }
    if let Some((p, re)) = &s.pattern
        && !re.is_match(st)
    {
        invalid_at(errs, path, v, |n| format!("{n} in body should match '{p}'"));
    }
    if let Some(f) = &s.format
        && !format_ok(f, st)
    {
        type_error(errs, path, f, st);
    }
}

/// The few `format`s checked; every other format passes.
fn format_ok(format: &str, s: &str) -> bool {
    match format {
        "date-time" | "datetime" => s.parse::<jiff::Timestamp>().is_ok(),
        "date" => s.len() == 10 && s.parse::<jiff::civil::Date>().is_ok(),
        "uuid" => {
            let b = s.as_bytes();
            b.len() == 36
                && b.iter().enumerate().all(|(i, c)| match i {
                    8 | 13 | 18 | 23 => *c == b'-',
                    _ => c.is_ascii_hexdigit(),
                })
        }
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => s.split_once('/').is_some_and(|(ip, bits)| {
            let max = if ip.parse::<std::net::Ipv4Addr>().is_ok() {
                32
            } else if ip.parse::<std::net::Ipv6Addr>().is_ok() {
                128
            } else {
                return false;
            };
            bits.parse::<u8>().is_ok_and(|b| b <= max)
        }),
        "byte" => base64_ok(s),
        _ => true,
    }
}

fn base64_ok(s: &str) -> bool {
    use base64::Engine as _;
    use base64::engine::{GeneralPurpose, GeneralPurposeConfig};
    // Go's StdEncoding, which the `byte` format check uses, accepts non-zero trailing bits
    const STD_LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
    );
    STD_LENIENT.decode(s).is_ok()
}

fn validate_number(s: &Node, v: &Value, path: &Path<'_>, errs: &mut Vec<FieldError>) {
    let Some(x) = v.as_f64() else {
        return;
    };
    if let Some(m) = s.multiple_of
        && m > 0.0
        && (x / m).fract() != 0.0
    {
        invalid_at(errs, path, v, |n| {
            format!("{n} in body should be a multiple of {}", go_float(m))
        });
    }
    if let Some(max) = s.maximum {
        let (bad, rel) = if s.exclusive_maximum {
            (x >= max, "less than")
        } else {
            (x > max, "less than or equal to")
        };
        if bad {
            invalid_at(errs, path, v, |n| {
                format!("{n} in body should be {rel} {}", go_float(max))
            });
        }
    }
    if let Some(min) = s.minimum {
        let (bad, rel) = if s.exclusive_minimum {
            (x <= min, "greater than")
        } else {
            (x < min, "greater than or equal to")
        };
        if bad {
            invalid_at(errs, path, v, |n| {
                format!("{n} in body should be {rel} {}", go_float(min))
            });
        }
    }
}

fn validate_array(
    s: &Node,
    a: &[Value],
    old: Option<&Value>,
    path: &Path<'_>,
    errs: &mut Vec<FieldError>,
) {
    let old_items = old.and_then(Value::as_array);
    if let Some(items) = s.items.as_deref() {
        for (i, x) in a.iter().enumerate() {
            // correlate with the old list only where list items have an identity
            let o = match (&s.list_type, old_items) {
                (Some(ListKind::Map(keys)), Some(olds)) => map_key(x, keys)
                    .and_then(|k| olds.iter().find(|o| map_key(o, keys).as_ref() == Some(&k))),
                (Some(ListKind::Set), Some(olds)) => olds.iter().find(|o| *o == x),
                _ => None,
            };
            validate(items, x, o, &Path::Index(path, i), errs);
        }
    }
    let n = a.len() as u64;
    if let Some(min) = s.min_items
        && n < min
    {
        invalid_at(errs, path, &json!(n), |p| {
            format!("{p} in body should have at least {min} items")
        });
    }
    if let Some(max) = s.max_items
        && n > max
    {
        errs.push(FieldError {
            reason: "FieldValueTooMany",
            field: path.render(),
            message: format!("Too many: {n}: must have at most {max} items"),
        });
    }
    match &s.list_type {
        Some(ListKind::Set) => {
            for (i, x) in a.iter().enumerate() {
                if a[..i].iter().any(|y| json_eq(x, y)) {
                    errs.push(FieldError {
                        reason: "FieldValueDuplicate",
                        field: Path::Index(path, i).render(),
                        message: format!("Duplicate value: {}", go_value(x)),
                    });
                }
            }
        }
        Some(ListKind::Map(keys)) => {
            let ks: Vec<Option<Map<String, Value>>> = a.iter().map(|x| map_key(x, keys)).collect();
            for (i, k) in ks.iter().enumerate() {
                if let Some(k) = k
                    && ks[..i].iter().any(|y| y.as_ref() == Some(k))
                {
                    errs.push(FieldError {
                        reason: "FieldValueDuplicate",
                        field: Path::Index(path, i).render(),
                        message: format!(
                            "Duplicate value: {}",
                            go_sharp(&Value::Object(k.clone()))
                        ),
                    });
                }
            }
        }
        _ => {}
    }
}

fn validate_object(
    s: &Node,
    m: &Map<String, Value>,
    old: Option<&Value>,
    path: &Path<'_>,
    errs: &mut Vec<FieldError>,
) {
    let n = m.len() as u64;
    if let Some(min) = s.min_properties
        && n < min
    {
        invalid_at(errs, path, &json!(n), |p| {
            format!("{p} in body should have at least {min} properties")
        });
        return;
    }
    if let Some(max) = s.max_properties
        && n > max
    {
        errs.push(FieldError {
            reason: "FieldValueTooMany",
            field: path.render(),
            message: format!("Too many: {n}: must have at most {max} items"),
        });
        return;
    }
    let old = old.and_then(Value::as_object);
    for (k, x) in m {
        if let Some(c) = s.child(k) {
            validate(c, x, old.and_then(|o| o.get(k)), &Path::Key(path, k), errs);
        }
    }
    for k in &s.required {
        if !m.contains_key(k) {
            errs.push(FieldError {
                reason: "FieldValueRequired",
                field: Path::Key(path, k).render(),
                message: "Required value".into(),
            });
        }
    }
}

fn composite(errs: &mut Vec<FieldError>, path: &Path<'_>, what: &str) {
    // not a kube-openapi *Validation: apiextensions reports it on a nil field path
    errs.push(FieldError {
        reason: "FieldValueInvalid",
        field: "<nil>".into(),
        message: format!(
            "Invalid value: \"\": {} must {what}",
            go_quote(&path.render())
        ),
    });
}

fn validate_composition(
    s: &Node,
    v: &Value,
    old: Option<&Value>,
    path: &Path<'_>,
    errs: &mut Vec<FieldError>,
) {
    let run = |sub: &Node| {
        let mut e = vec![];
        validate(sub, v, old, path, &mut e);
        e
    };
    if !s.any_of.is_empty() {
        let results: Vec<Vec<FieldError>> = s.any_of.iter().map(run).collect();
        if !results.iter().any(Vec::is_empty) {
            composite(errs, path, "validate at least one schema (anyOf)");
            if let Some(best) = results.into_iter().min_by_key(Vec::len) {
                errs.extend(best);
            }
        }
    }
    if !s.one_of.is_empty() {
        let results: Vec<Vec<FieldError>> = s.one_of.iter().map(run).collect();
        let valid = results.iter().filter(|r| r.is_empty()).count();
        if valid != 1 {
            let more = if valid == 0 {
                "Found none valid".to_string()
            } else {
                format!("Found {valid} valid alternatives")
            };
            composite(
                errs,
                path,
                &format!("validate one and only one schema (oneOf). {more}"),
            );
            if valid == 0
                && let Some(best) = results.into_iter().min_by_key(Vec::len)
            {
                errs.extend(best);
            }
        }
    }
    if !s.all_of.is_empty() {
        let mut valid = 0;
        for sub in &s.all_of {
            let e = run(sub);
            if e.is_empty() {
                valid += 1;
            }
            errs.extend(e);
        }
        if valid != s.all_of.len() {
            let more = if valid == 0 { ". None validated" } else { "" };
            composite(
                errs,
                path,
                &format!("validate all the schemas (allOf){more}"),
            );
        }
    }
    if let Some(not) = &s.not
        && run(not).is_empty()
    {
        composite(errs, path, "not validate the schema (not)");
    }
}

/// 422 Invalid for schema errors, worded like `errors.NewInvalid` (duplicate messages folded,
/// several errors listed in brackets).
pub fn invalid_error(kind: &str, group: &str, name: &str, errs: &[FieldError]) -> ApiError {
    ApiError::invalid_causes(
        kind,
        group,
        name,
        errs.iter()
            .map(|e| (e.reason, e.field.as_str(), e.message.as_str())),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::too_many_lines)]
mod tests {
    use super::*;

    fn schema(v: Value) -> Schema {
        Schema::compile(&v).unwrap()
    }

    fn cr(spec: Value) -> Value {
        json!({"apiVersion": "x.io/v1", "kind": "Foo", "metadata": {"name": "a", "zz": 1}, "spec": spec})
    }

    fn spec_schema(spec: Value) -> Schema {
        schema(json!({"type": "object", "properties": {"spec": spec}}))
    }

    #[test]
    fn pruning() {
        // (case, spec schema, spec in, spec out)
        let cases = [
            (
                "unknown fields dropped",
                json!({"type": "object", "properties": {"a": {"type": "string"}}}),
                json!({"a": "x", "b": 1}),
                json!({"a": "x"}),
            ),
            (
                "object without properties keeps nothing",
                json!({"type": "object"}),
                json!({"a": {"b": 1}}),
                json!({}),
            ),
            (
                "preserve-unknown keeps unknown, prunes inside specified",
                json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                       "properties": {"k": {"type": "object", "properties": {"a": {"type": "string"}}}}}),
                json!({"free": {"deep": [1, {"x": 2}]}, "k": {"a": "x", "junk": 1}}),
                json!({"free": {"deep": [1, {"x": 2}]}, "k": {"a": "x"}}),
            ),
            (
                "additionalProperties applies to every value",
                json!({"type": "object", "additionalProperties": {"type": "object", "properties": {"a": {"type": "integer"}}}}),
                json!({"m1": {"a": 1, "b": 2}, "m2": {"c": 3}}),
                json!({"m1": {"a": 1}, "m2": {}}),
            ),
            (
                "items apply to every list item",
                json!({"type": "object", "properties": {"l": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "string"}}}}}}),
                json!({"l": [{"n": "a", "x": 1}, {"y": 2}]}),
                json!({"l": [{"n": "a"}, {}]}),
            ),
            (
                "embedded resource keeps apiVersion/kind/metadata",
                json!({"type": "object", "properties": {"t": {"type": "object", "x-kubernetes-embedded-resource": true,
                       "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}),
                json!({"t": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"c": 1}, "status": {}}}),
                json!({"t": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"c": 1}}}),
            ),
            (
                "scalars where objects are expected are left for validation",
                json!({"type": "object", "properties": {"o": {"type": "object", "properties": {}}}}),
                json!({"o": "str"}),
                json!({"o": "str"}),
            ),
        ];
        for (name, spec, input, want) in cases {
            let s = spec_schema(spec);
            let mut obj = cr(input);
            s.prune(&mut obj);
            assert_eq!(obj["spec"], want, "{name}");
            assert_eq!(
                obj["metadata"],
                json!({"name": "a", "zz": 1}),
                "{name}: root metadata kept"
            );
            assert_eq!(obj["apiVersion"], "x.io/v1", "{name}");
        }
    }

    #[test]
    fn resource_metadata_is_never_pruned_by_the_schema() {
        // `metadata: {type: object}` (what generators write) must not empty the metadata
        let s = schema(json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
            "t": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {
                "metadata": {"type": "object"}}}}}));
        let mut obj = json!({"apiVersion": "x/v1", "kind": "K",
            "metadata": {"name": "a", "labels": {"l": "v"}},
            "t": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}});
        let before = obj.clone();
        assert_eq!(s.prune(&mut obj), vec!["t.spec"]);
        assert_eq!(obj["metadata"], before["metadata"]);
        assert_eq!(obj["t"]["metadata"], before["t"]["metadata"]);
    }

    #[test]
    fn pruning_reports_paths_and_root_unknowns() {
        let s = spec_schema(
            json!({"type": "object", "properties": {"l": {"type": "array", "items": {"type": "object"}}}}),
        );
        let mut obj = cr(json!({"x": 1, "l": [{"y": 1}]}));
        obj["top"] = json!(1);
        let pruned = s.prune(&mut obj);
        assert_eq!(pruned, vec!["top", "spec.x", "spec.l[0].y"]);
        assert!(obj.get("top").is_none());
    }

    #[test]
    fn defaulting() {
        let cases = [
            (
                "missing property defaulted",
                json!({"type": "object", "properties": {"r": {"type": "integer", "default": 1}}}),
                json!({}),
                json!({"r": 1}),
            ),
            (
                "present property kept",
                json!({"type": "object", "properties": {"r": {"type": "integer", "default": 1}}}),
                json!({"r": 3}),
                json!({"r": 3}),
            ),
            (
                "defaults inside defaults",
                json!({"type": "object", "properties": {"o": {"type": "object", "default": {},
                       "properties": {"a": {"type": "string", "default": "x"}}}}}),
                json!({}),
                json!({"o": {"a": "x"}}),
            ),
            (
                "non-nullable null defaulted",
                json!({"type": "object", "properties": {"r": {"type": "integer", "default": 1}}}),
                json!({"r": null}),
                json!({"r": 1}),
            ),
            (
                "non-nullable null without default pruned",
                json!({"type": "object", "properties": {"r": {"type": "integer"}}}),
                json!({"r": null}),
                json!({}),
            ),
            (
                "nullable null kept",
                json!({"type": "object", "properties": {"r": {"type": "integer", "nullable": true, "default": 1}}}),
                json!({"r": null}),
                json!({"r": null}),
            ),
            (
                "list items and map values",
                json!({"type": "object", "properties": {
                    "l": {"type": "array", "items": {"type": "object", "properties": {"p": {"type": "integer", "default": 80}}}},
                    "m": {"type": "object", "additionalProperties": {"type": "object", "properties": {"on": {"type": "boolean", "default": true}}}}}}),
                json!({"l": [{}, {"p": 1}], "m": {"a": {}, "b": null}}),
                json!({"l": [{"p": 80}, {"p": 1}], "m": {"a": {"on": true}}}),
            ),
        ];
        for (name, spec, input, want) in cases {
            let s = spec_schema(spec);
            let mut obj = cr(input);
            s.coerce(&mut obj);
            assert_eq!(obj["spec"], want, "{name}");
        }
    }

    /// `(field, reason, message)` of each error.
    type Errs = Vec<(String, &'static str, String)>;

    fn errors(spec: Value, value: Value) -> Errs {
        let s = spec_schema(spec);
        s.validate(&cr(value), None)
            .into_iter()
            .map(|e| (e.field, e.reason, e.message))
            .collect()
    }

    fn one(field: &str, reason: &'static str, msg: &str) -> Errs {
        vec![(field.to_string(), reason, msg.to_string())]
    }

    #[test]
    fn validation() {
        let obj = |p: Value| json!({"type": "object", "properties": {"f": p}});
        let cases: Vec<(&str, Value, Value, Errs)> = vec![
            ("valid", obj(json!({"type": "integer"})), json!({"f": 3}), vec![]),
            (
                "type",
                obj(json!({"type": "integer"})),
                json!({"f": "3"}),
                one("spec.f", "FieldValueTypeInvalid", "Invalid value: \"string\": spec.f in body must be of type integer: \"string\""),
            ),
            ("integral float is an integer", obj(json!({"type": "integer"})), json!({"f": 3.0}), vec![]),
            ("integer is a number", obj(json!({"type": "number"})), json!({"f": 3}), vec![]),
            (
                "boolean",
                obj(json!({"type": "boolean"})),
                json!({"f": 1}),
                one("spec.f", "FieldValueTypeInvalid", "Invalid value: \"integer\": spec.f in body must be of type boolean: \"integer\""),
            ),
            (
                "object",
                obj(json!({"type": "object"})),
                json!({"f": []}),
                one("spec.f", "FieldValueTypeInvalid", "Invalid value: \"array\": spec.f in body must be of type object: \"array\""),
            ),
            ("int-or-string int", obj(json!({"x-kubernetes-int-or-string": true})), json!({"f": 8080}), vec![]),
            ("int-or-string string", obj(json!({"x-kubernetes-int-or-string": true})), json!({"f": "http"}), vec![]),
            (
                "int-or-string bool",
                obj(json!({"x-kubernetes-int-or-string": true})),
                json!({"f": true}),
                one("spec.f", "FieldValueTypeInvalid", "Invalid value: \"boolean\": spec.f in body must be of type integer,string: \"boolean\""),
            ),
            ("nullable", obj(json!({"type": "string", "nullable": true})), json!({"f": null}), vec![]),
            (
                "null list item",
                obj(json!({"type": "array", "items": {"type": "string"}})),
                json!({"f": [null]}),
                one("spec.f[0]", "FieldValueTypeInvalid", "Invalid value: \"null\": spec.f[0] in body must be of type string: \"null\""),
            ),
            (
                "required",
                json!({"type": "object", "required": ["a", "b"], "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}),
                json!({"a": "x"}),
                one("spec.b", "FieldValueRequired", "Required value"),
            ),
            (
                "enum",
                obj(json!({"type": "string", "enum": ["a", "b"]})),
                json!({"f": "c"}),
                one("spec.f", "FieldValueNotSupported", "Unsupported value: \"c\": supported values: \"a\", \"b\""),
            ),
            (
                "enum of integers",
                obj(json!({"type": "integer", "enum": [1, 2]})),
                json!({"f": 3}),
                one("spec.f", "FieldValueNotSupported", "Unsupported value: 3: supported values: \"1\", \"2\""),
            ),
            (
                "maximum",
                obj(json!({"type": "integer", "maximum": 10})),
                json!({"f": 20}),
                one("spec.f", "FieldValueInvalid", "Invalid value: 20: spec.f in body should be less than or equal to 10"),
            ),
            (
                "exclusiveMaximum",
                obj(json!({"type": "integer", "maximum": 10, "exclusiveMaximum": true})),
                json!({"f": 10}),
                one("spec.f", "FieldValueInvalid", "Invalid value: 10: spec.f in body should be less than 10"),
            ),
            (
                "minimum",
                obj(json!({"type": "number", "minimum": 1.5})),
                json!({"f": 1}),
                one("spec.f", "FieldValueInvalid", "Invalid value: 1: spec.f in body should be greater than or equal to 1.5"),
            ),
            (
                "exclusiveMinimum",
                obj(json!({"type": "integer", "minimum": 0, "exclusiveMinimum": true})),
                json!({"f": 0}),
                one("spec.f", "FieldValueInvalid", "Invalid value: 0: spec.f in body should be greater than 0"),
            ),
            (
                "multipleOf",
                obj(json!({"type": "integer", "multipleOf": 5})),
                json!({"f": 7}),
                one("spec.f", "FieldValueInvalid", "Invalid value: 7: spec.f in body should be a multiple of 5"),
            ),
            (
                "maxLength",
                obj(json!({"type": "string", "maxLength": 3})),
                json!({"f": "abcd"}),
                one("spec.f", "FieldValueTooLong", "Too long: may not be longer than 3"),
            ),
            ("maxLength counts characters", obj(json!({"type": "string", "maxLength": 3})), json!({"f": "äöü"}), vec![]),
            (
                "minLength",
                obj(json!({"type": "string", "minLength": 2})),
                json!({"f": "a"}),
                one("spec.f", "FieldValueInvalid", "Invalid value: \"a\": spec.f in body should be at least 2 chars long"),
            ),
            (
                "pattern",
                obj(json!({"type": "string", "pattern": "^[a-z]+$"})),
                json!({"f": "A1"}),
                one("spec.f", "FieldValueInvalid", "Invalid value: \"A1\": spec.f in body should match '^[a-z]+$'"),
            ),
            (
                "format",
                obj(json!({"type": "string", "format": "ipv4"})),
                json!({"f": "300.1.1.1"}),
                one("spec.f", "FieldValueTypeInvalid", "Invalid value: \"300.1.1.1\": spec.f in body must be of type ipv4: \"300.1.1.1\""),
            ),
            ("unknown format passes", obj(json!({"type": "string", "format": "k8s-whatever"})), json!({"f": "?"}), vec![]),
            (
                "minItems",
                obj(json!({"type": "array", "items": {"type": "string"}, "minItems": 2})),
                json!({"f": ["a"]}),
                one("spec.f", "FieldValueInvalid", "Invalid value: 1: spec.f in body should have at least 2 items"),
            ),
            (
                "maxItems",
                obj(json!({"type": "array", "items": {"type": "string"}, "maxItems": 1})),
                json!({"f": ["a", "b"]}),
                one("spec.f", "FieldValueTooMany", "Too many: 2: must have at most 1 items"),
            ),
            (
                "minProperties",
                obj(json!({"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1})),
                json!({"f": {}}),
                one("spec.f", "FieldValueInvalid", "Invalid value: 0: spec.f in body should have at least 1 properties"),
            ),
            (
                "maxProperties",
                obj(json!({"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 1})),
                json!({"f": {"a": "1", "b": "2"}}),
                one("spec.f", "FieldValueTooMany", "Too many: 2: must have at most 1 items"),
            ),
            (
                "additionalProperties value",
                obj(json!({"type": "object", "additionalProperties": {"type": "string"}})),
                json!({"f": {"k": 1}}),
                one("spec.f.k", "FieldValueTypeInvalid", "Invalid value: \"integer\": spec.f.k in body must be of type string: \"integer\""),
            ),
            (
                "list-type set duplicates",
                obj(json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}})),
                json!({"f": ["a", "b", "a"]}),
                one("spec.f[2]", "FieldValueDuplicate", "Duplicate value: \"a\""),
            ),
            (
                "list-type map duplicates by keys",
                obj(json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                           "items": {"type": "object", "properties": {"name": {"type": "string"}, "v": {"type": "integer"}}}})),
                json!({"f": [{"name": "a", "v": 1}, {"name": "b"}, {"name": "a", "v": 2}]}),
                one("spec.f[2]", "FieldValueDuplicate", "Duplicate value: map[string]interface {}{\"name\":\"a\"}"),
            ),
            (
                "atomic list may repeat",
                obj(json!({"type": "array", "items": {"type": "string"}})),
                json!({"f": ["a", "a"]}),
                vec![],
            ),
            (
                "anyOf",
                obj(json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^[0-9]+%$"}]})),
                json!({"f": "x"}),
                vec![
                    ("<nil>".into(), "FieldValueInvalid", "Invalid value: \"\": \"spec.f\" must validate at least one schema (anyOf)".into()),
                    ("spec.f".into(), "FieldValueTypeInvalid", "Invalid value: \"string\": spec.f in body must be of type integer: \"string\"".into()),
                ],
            ),
            ("anyOf ok", obj(json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]})), json!({"f": "5%"}), vec![]),
            (
                "oneOf two valid",
                json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                       "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}),
                json!({"a": "x", "b": "y"}),
                one("<nil>", "FieldValueInvalid", "Invalid value: \"\": \"spec\" must validate one and only one schema (oneOf). Found 2 valid alternatives"),
            ),
            (
                "allOf",
                obj(json!({"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 5}]})),
                json!({"f": 9}),
                vec![
                    ("spec.f".into(), "FieldValueInvalid", "Invalid value: 9: spec.f in body should be less than or equal to 5".into()),
                    ("<nil>".into(), "FieldValueInvalid", "Invalid value: \"\": \"spec.f\" must validate all the schemas (allOf)".into()),
                ],
            ),
            (
                "not",
                obj(json!({"type": "string", "not": {"enum": ["root"]}})),
                json!({"f": "root"}),
                one("<nil>", "FieldValueInvalid", "Invalid value: \"\": \"spec.f\" must not validate the schema (not)"),
            ),
            (
                "all errors collected",
                json!({"type": "object", "required": ["c"], "properties": {
                    "a": {"type": "integer", "maximum": 1}, "b": {"type": "string", "enum": ["x"]}, "c": {"type": "string"}}}),
                json!({"a": 2, "b": "y"}),
                vec![
                    ("spec.a".into(), "FieldValueInvalid", "Invalid value: 2: spec.a in body should be less than or equal to 1".into()),
                    ("spec.b".into(), "FieldValueNotSupported", "Unsupported value: \"y\": supported values: \"x\"".into()),
                    ("spec.c".into(), "FieldValueRequired", "Required value".into()),
                ],
            ),
        ];
        for (name, spec, value, want) in cases {
            assert_eq!(errors(spec, value), want, "{name}");
        }
    }

    #[test]
    fn root_required_and_paths() {
        let s = schema(
            json!({"type": "object", "required": ["spec"], "properties": {"spec": {"type": "object"}}}),
        );
        let errs = s.validate(
            &json!({"apiVersion": "x/v1", "kind": "K", "metadata": {}}),
            None,
        );
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec");
        assert_eq!(errs[0].message, "Required value");
    }

    #[test]
    fn ratcheting() {
        let s = spec_schema(json!({"type": "object", "properties": {
            "a": {"type": "integer", "maximum": 1},
            "b": {"type": "integer", "maximum": 1},
            "l": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["n"],
                  "items": {"type": "object", "properties": {"n": {"type": "string"}, "v": {"type": "integer", "maximum": 1}}}}}}));
        let old = cr(json!({"a": 5, "b": 0, "l": [{"n": "x", "v": 9}]}));
        // a unchanged (still invalid): ignored; b changed to invalid: reported; the map list item
        // "x" moved but unchanged: ignored
        let new = cr(json!({"a": 5, "b": 7, "l": [{"n": "y", "v": 0}, {"n": "x", "v": 9}]}));
        let errs = s.validate(&new, Some(&old));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field, "spec.b");
        // without old, everything is reported
        assert_eq!(s.validate(&new, None).len(), 3);
    }

    #[test]
    fn bad_pattern_fails_compile() {
        let CompileError {
            field,
            message: msg,
        } = Schema::compile(
            &json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}),
        )
        .unwrap_err();
        assert_eq!(field, "openAPIV3Schema.properties[a].pattern");
        assert!(
            msg.starts_with("\"(\": must be a valid regular expression"),
            "{msg}"
        );
    }

    #[test]
    fn invalid_status_shape() {
        let errs = vec![
            FieldError {
                reason: "FieldValueInvalid",
                field: "spec.replicas".into(),
                message:
                    "Invalid value: 20: spec.replicas in body should be less than or equal to 10"
                        .into(),
            },
            FieldError {
                reason: "FieldValueRequired",
                field: "spec.image".into(),
                message: "Required value".into(),
            },
        ];
        let e = invalid_error("Foo", "x.io", "a", &errs);
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "Foo.x.io \"a\" is invalid: [spec.replicas: Invalid value: 20: spec.replicas in body should be less than or equal to 10, spec.image: Required value]"
        );
        let s = e.to_status();
        assert_eq!(s["reason"], "Invalid");
        assert_eq!(s["details"]["kind"], "Foo");
        assert_eq!(s["details"]["group"], "x.io");
        assert_eq!(s["details"]["causes"][1]["reason"], "FieldValueRequired");
        assert_eq!(s["details"]["causes"][1]["field"], "spec.image");
        let one = invalid_error("Foo", "x.io", "a", &errs[1..]);
        assert_eq!(
            one.message,
            "Foo.x.io \"a\" is invalid: spec.image: Required value"
        );
    }
}
