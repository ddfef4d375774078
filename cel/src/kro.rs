//! kro's own CEL libraries (kro `pkg/cel/library`), and the cel-go extensions kro's environment
//! adds that the `cel` crate lacks: `hash.fnv64a`/`sha256`/`md5`, `json.marshal`/`unmarshal`,
//! `random.seededString`/`seededInt`, `lists.setAtIndex`/`insertAtIndex`/`removeAtIndex`,
//! `<map>.merge`/`deepMerge`, `omit()`, `runtime.newCondition`/`condition` (custom status
//! conditions), `cel.bind`, and the two-variable comprehensions
//! (`all`/`exists`/`existsOne` with three arguments, `transformList`, `transformMap`,
//! `transformMapEntry`). Registered only in a [`crate::Scope::kro`], never in the Kubernetes
//! environment kmeta-apiserver evaluates CRD rules and policies in. Each function follows kro's
//! Go source: its results, its errors' words (docs/design/cel-hooks.md).

use std::collections::HashMap;
use std::sync::Arc;

use kmeta_wire::go_json;
use kube_cel::cel::extractors::{Identifier, This};
use kube_cel::cel::objects::{Key, Map, Opaque};
use kube_cel::cel::{Context, ExecutionError, FunctionContext, ResolveResult, Value};
use sha2::Digest as _;

/// `omit()`'s value: the field (or list item) holding it is left out of the rendered object.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Omit;

impl Opaque for Omit {
    fn runtime_type_name(&self) -> &str {
        "kro.omit"
    }
}

/// Registers kro's functions in `ctx`.
pub(crate) fn register(ctx: &mut Context<'_>) {
    ctx.add_function("hash.fnv64a", fnv64a);
    ctx.add_function("hash.sha256", |s: Arc<String>| {
        bytes(sha2::Sha256::digest(s.as_bytes()).to_vec())
    });
    ctx.add_function("hash.md5", |s: Arc<String>| {
        bytes(md5::Md5::digest(s.as_bytes()).to_vec())
    });
    ctx.add_function("json.unmarshal", unmarshal);
    ctx.add_function("json.marshal", marshal);
    ctx.add_function("random.seededString", seeded_string);
    ctx.add_function("random.seededInt", seeded_int);
    ctx.add_function("lists.setAtIndex", set_at_index);
    ctx.add_function("lists.insertAtIndex", insert_at_index);
    ctx.add_function("lists.removeAtIndex", remove_at_index);
    ctx.add_function("merge", merge);
    ctx.add_function("deepMerge", deep_merge);
    ctx.add_function("omit", |_: &FunctionContext| -> ResolveResult {
        Ok(Value::Opaque(Arc::new(Omit)))
    });
    ctx.add_function("cel.bind", bind);
    ctx.add_function("runtime.newCondition", new_condition);
    ctx.add_function("runtime.condition", find_condition);
    ctx.add_function("all", |ftx: &FunctionContext| {
        quantifier(ftx, Quantifier::All)
    });
    ctx.add_function("exists", |ftx: &FunctionContext| {
        quantifier(ftx, Quantifier::Exists)
    });
    ctx.add_function("existsOne", |ftx: &FunctionContext| {
        quantifier(ftx, Quantifier::ExistsOne)
    });
    ctx.add_function("transformList", |ftx: &FunctionContext| {
        transform(ftx, Shape::List)
    });
    ctx.add_function("transformMap", |ftx: &FunctionContext| {
        transform(ftx, Shape::Map)
    });
    ctx.add_function("transformMapEntry", |ftx: &FunctionContext| {
        transform(ftx, Shape::MapEntry)
    });
}

fn bytes(b: Vec<u8>) -> ResolveResult {
    Ok(Value::Bytes(Arc::new(b)))
}

fn fail(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

/// FNV-1a, 64 bits, big-endian bytes (Go's `hash/fnv` `New64a().Sum(nil)`).
fn fnv64a(s: Arc<String>) -> ResolveResult {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    bytes(h.to_be_bytes().to_vec())
}

/// `json.unmarshal`: as Go's `json.Unmarshal` into `interface{}`, every number a double.
fn unmarshal(s: Arc<String>) -> ResolveResult {
    let v: serde_json::Value = serde_json::from_str(&s)
        .map_err(|e| fail("json.unmarshal", format!("failed to parse JSON: {e}")))?;
    Ok(from_json_doubles(&v))
}

fn from_json_doubles(v: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(*b),
        J::Number(n) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        J::String(s) => Value::String(Arc::new(s.clone())),
        J::Array(a) => Value::List(Arc::new(a.iter().map(from_json_doubles).collect())),
        J::Object(m) => {
            let map: HashMap<Key, Value> = m
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), from_json_doubles(v)))
                .collect();
            Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// `json.marshal`: Go's `json.Marshal` of the value (keys sorted, no spaces, `<`, `>`, `&`
/// escaped, bytes as base64, doubles as Go writes them).
fn marshal(v: Value) -> ResolveResult {
    let mut out = String::new();
    go_json(&v, &mut out).map_err(|e| fail("json.marshal", e))?;
    Ok(Value::String(Arc::new(out)))
}

fn go_json(v: &Value, out: &mut String) -> Result<(), String> {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::UInt(u) => out.push_str(&u.to_string()),
        Value::Float(f) if !f.is_finite() => {
            return Err(format!("failed to encode value: unsupported value: {f}"));
        }
        Value::Float(f) => go_json::write_float(out, *f),
        Value::String(s) => go_json::write_string(out, s),
        Value::Bytes(b) => go_json::write_string(
            out,
            &base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b.as_slice()),
        ),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json(item, out)?;
            }
            out.push(']');
        }
        Value::Map(m) => {
            let mut entries: Vec<(String, &Value)> =
                m.map.iter().map(|(k, v)| (key_text(k), v)).collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json::write_string(out, k);
                out.push(':');
                go_json(v, out)?;
            }
            out.push('}');
        }
        other => return Err(format!("failed to convert value: {:?}", other.type_of())),
    }
    Ok(())
}

fn key_text(k: &Key) -> String {
    match k {
        Key::String(s) => s.to_string(),
        Key::Int(i) => i.to_string(),
        Key::Uint(u) => u.to_string(),
        Key::Bool(b) => b.to_string(),
    }
}

const ALPHANUMERIC: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// `random.seededString(n, seed)`: as kro, four bytes of SHA-256(seed) per character, taken in
/// turn (a hash of 32 bytes repeats its characters every eight).
fn seeded_string(n: i64, seed: Arc<String>) -> ResolveResult {
    const F: &str = "random.seededString";
    if n <= 0 {
        return Err(fail(F, "random.seededString length must be positive"));
    }
    let n = usize::try_from(n).map_err(|e| fail(F, e))?;
    let mut hash: Vec<u8> = sha2::Sha256::digest(seed.as_bytes()).to_vec();
    let mut out: Vec<u8> = Vec::with_capacity(n);
    for i in 0..n {
        let mut start = (i * 4) % hash.len();
        if start + 4 > hash.len() {
            let mut next = hash.clone();
            next.extend_from_slice(&out);
            hash = sha2::Sha256::digest(&next).to_vec();
            start = 0;
        }
        let word = u32::from_be_bytes([
            hash[start],
            hash[start + 1],
            hash[start + 2],
            hash[start + 3],
        ]);
        out.push(ALPHANUMERIC[(word % ALPHANUMERIC.len() as u32) as usize]);
    }
    Ok(Value::String(Arc::new(
        String::from_utf8(out).map_err(|e| fail(F, e))?,
    )))
}

/// `random.seededInt(min, max, seed)`: `min` plus the first eight bytes of SHA-256(seed)
/// (big-endian) modulo `max - min`.
fn seeded_int(min: i64, max: i64, seed: Arc<String>) -> ResolveResult {
    const F: &str = "random.seededInt";
    if min >= max {
        return Err(fail(F, "random.seededInt min must be less than max"));
    }
    let hash = sha2::Sha256::digest(seed.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash[..8]);
    let v = u64::from_be_bytes(first);
    let range = max.wrapping_sub(min) as u64;
    Ok(Value::Int(min.wrapping_add((v % range) as i64)))
}

/// `index` as a position in a list of `size`, `inclusive` of the end (insert).
fn position(f: &str, index: i64, size: usize, inclusive: bool) -> Result<usize, ExecutionError> {
    let end = if inclusive { size + 1 } else { size };
    match usize::try_from(index) {
        Ok(i) if i < end => Ok(i),
        _ => {
            let bracket = if inclusive { ']' } else { ')' };
            Err(fail(
                f,
                format!("{f}: index {index} out of bounds [0, {size}{bracket}"),
            ))
        }
    }
}

fn set_at_index(list: Arc<Vec<Value>>, index: i64, value: Value) -> ResolveResult {
    let i = position("lists.setAtIndex", index, list.len(), false)?;
    let mut out = list.as_ref().clone();
    out[i] = value;
    Ok(Value::List(Arc::new(out)))
}

fn insert_at_index(list: Arc<Vec<Value>>, index: i64, value: Value) -> ResolveResult {
    let i = position("lists.insertAtIndex", index, list.len(), true)?;
    let mut out = list.as_ref().clone();
    out.insert(i, value);
    Ok(Value::List(Arc::new(out)))
}

fn remove_at_index(list: Arc<Vec<Value>>, index: i64) -> ResolveResult {
    let i = position("lists.removeAtIndex", index, list.len(), false)?;
    let mut out = list.as_ref().clone();
    out.remove(i);
    Ok(Value::List(Arc::new(out)))
}

fn as_map<'a>(f: &str, v: &'a Value) -> Result<&'a Map, ExecutionError> {
    match v {
        Value::Map(m) => Ok(m),
        other => Err(fail(
            f,
            format!("no such overload: {:?}.{f}", other.type_of()),
        )),
    }
}

/// `a.merge(b)`: `b`'s entries over `a`'s.
fn merge(This(this): This<Value>, other: Value) -> ResolveResult {
    let (a, b) = (as_map("merge", &this)?, as_map("merge", &other)?);
    let mut out = a.map.as_ref().clone();
    out.extend(b.map.iter().map(|(k, v)| (k.clone(), v.clone())));
    Ok(Value::Map(Map { map: Arc::new(out) }))
}

/// `a.deepMerge(b)`: as merge, maps under the same key merged in turn.
fn deep_merge(This(this): This<Value>, other: Value) -> ResolveResult {
    as_map("deepMerge", &this)?;
    as_map("deepMerge", &other)?;
    Ok(deep(&this, &other))
}

fn deep(a: &Value, b: &Value) -> Value {
    let (Value::Map(am), Value::Map(bm)) = (a, b) else {
        return b.clone();
    };
    if bm.map.is_empty() {
        return a.clone();
    }
    if am.map.is_empty() {
        return b.clone();
    }
    let mut out = am.map.as_ref().clone();
    for (k, v) in bm.map.iter() {
        let merged = match out.get(k) {
            Some(mine @ Value::Map(_)) if matches!(v, Value::Map(_)) => deep(mine, v),
            _ => v.clone(),
        };
        out.insert(k.clone(), merged);
    }
    Value::Map(Map { map: Arc::new(out) })
}

/// The four fields of kro's `Condition`.
const CONDITION_KEYS: [&str; 4] = ["type", "status", "reason", "message"];

/// A condition as a map of its four fields.
fn condition_value(fields: [String; 4]) -> Value {
    let map: HashMap<Key, Value> = CONDITION_KEYS
        .iter()
        .zip(fields)
        .map(|(k, v)| {
            (
                Key::String(Arc::new((*k).to_owned())),
                Value::String(Arc::new(v)),
            )
        })
        .collect();
    Value::Map(Map { map: Arc::new(map) })
}

/// `runtime.newCondition({type, status, reason, message})` (its bare keys made strings when
/// compiled): `type` and `status` required, `status` one of True, False, Unknown.
fn new_condition(arg: Value) -> ResolveResult {
    const F: &str = "runtime.newCondition";
    let Value::Map(m) = arg else {
        return Err(fail(F, "runtime.newCondition: argument must be a map"));
    };
    let mut fields: [String; 4] = Default::default();
    for (k, v) in m.map.iter() {
        let key = key_text(k);
        let Some(i) = CONDITION_KEYS.iter().position(|c| *c == key) else {
            let why = format!(
                "runtime.newCondition: unknown key {key:?} (allowed: type, status, reason, message)"
            );
            return Err(fail(F, why));
        };
        let Value::String(text) = v else {
            return Err(fail(
                F,
                format!("runtime.newCondition: {key} must be a string"),
            ));
        };
        fields[i] = text.to_string();
    }
    if fields[0].is_empty() {
        return Err(fail(
            F,
            "runtime.newCondition: 'type' is required and must not be empty",
        ));
    }
    if !["True", "False", "Unknown"].contains(&fields[1].as_str()) {
        let why = format!(
            "runtime.newCondition: status must be one of True, False, Unknown (got {:?})",
            fields[1]
        );
        return Err(fail(F, why));
    }
    Ok(condition_value(fields))
}

/// `runtime.condition(obj, type)`: the condition of that type in `obj.status.conditions`, or an
/// empty one.
fn find_condition(obj: Value, wanted: Arc<String>) -> ResolveResult {
    const F: &str = "runtime.condition";
    let field = |v: &Value, k: &str| match v {
        Value::Map(m) => m.map.get(&Key::String(Arc::new(k.to_owned()))).cloned(),
        _ => None,
    };
    if !matches!(obj, Value::Map(_)) {
        return Err(fail(F, "runtime.condition: obj must be an object"));
    }
    let list = field(&obj, "status").and_then(|s| field(&s, "conditions"));
    let items = match list {
        Some(Value::List(items)) => items,
        _ => Arc::new(Vec::new()),
    };
    let text = |c: &Value, k: &str| match field(c, k) {
        Some(Value::String(s)) => s.to_string(),
        _ => String::new(),
    };
    let found = items.iter().find(|c| text(c, "type") == wanted.as_str());
    Ok(condition_value(match found {
        Some(c) => CONDITION_KEYS.map(|k| text(c, k)),
        None => Default::default(),
    }))
}

/// `cel.bind(name, init, body)`: `body` with `name` bound to `init`'s value.
fn bind(ftx: &FunctionContext, name: Identifier) -> ResolveResult {
    let [_, init, body] = ftx.args else {
        return Err(ftx.error("cel.bind takes a name, a value and an expression"));
    };
    let value = ftx.ptx.resolve(init)?;
    let mut inner = ftx.ptx.new_inner_scope();
    inner.add_variable_from_value(name.0.as_str(), value);
    inner.resolve(body)
}

/// The entries a two-variable comprehension ranges over: a list's (index, item), a map's
/// (key, value).
fn entries(ftx: &FunctionContext) -> Result<Vec<(Value, Value)>, ExecutionError> {
    match &ftx.this {
        Some(Value::List(items)) => Ok(items
            .iter()
            .enumerate()
            .map(|(i, v)| (Value::Int(i as i64), v.clone()))
            .collect()),
        Some(Value::Map(m)) => Ok(m
            .map
            .iter()
            .map(|(k, v)| (Value::from(k), v.clone()))
            .collect()),
        _ => Err(ftx.error(format!("{} applies to a list or a map", ftx.name))),
    }
}

/// The two variable names of a two-variable comprehension.
fn two_vars(ftx: &FunctionContext) -> Result<(Arc<String>, Arc<String>), ExecutionError> {
    use kube_cel::cel::common::ast::Expr;
    let name = |i: usize| match ftx.args.get(i).map(|a| &a.expr) {
        Some(Expr::Ident(n)) => Ok(Arc::new(n.clone())),
        _ => Err(ftx.error(format!(
            "{}: argument {i} must be a variable name",
            ftx.name
        ))),
    };
    Ok((name(0)?, name(1)?))
}

/// `e` evaluated with `k` and `v` bound.
fn with_vars(
    ftx: &FunctionContext,
    names: &(Arc<String>, Arc<String>),
    (k, v): &(Value, Value),
    e: &kube_cel::cel::IdedExpr,
) -> ResolveResult {
    let mut inner = ftx.ptx.new_inner_scope();
    inner.add_variable_from_value(names.0.as_str(), k.clone());
    inner.add_variable_from_value(names.1.as_str(), v.clone());
    inner.resolve(e)
}

#[derive(Clone, Copy)]
enum Quantifier {
    All,
    Exists,
    ExistsOne,
}

/// `all`, `exists`, `existsOne` with two variables (`list.all(i, v, p)`, `map.exists(k, v, p)`);
/// the one-variable forms are the `cel` crate's macros, never called here.
fn quantifier(ftx: &FunctionContext, q: Quantifier) -> ResolveResult {
    if ftx.args.len() != 3 {
        return Err(ftx.error(format!("{} takes two variables and a predicate", ftx.name)));
    }
    let names = two_vars(ftx)?;
    let mut held = 0usize;
    for entry in entries(ftx)? {
        match with_vars(ftx, &names, &entry, &ftx.args[2])? {
            Value::Bool(true) => held += 1,
            Value::Bool(false) => {}
            other => {
                return Err(ftx.error(format!(
                    "{}: the predicate must be a bool, got {:?}",
                    ftx.name,
                    other.type_of()
                )));
            }
        }
        match q {
            Quantifier::All if held == 0 => return Ok(Value::Bool(false)),
            Quantifier::All => held = 0,
            Quantifier::Exists if held > 0 => return Ok(Value::Bool(true)),
            _ => {}
        }
    }
    Ok(Value::Bool(match q {
        Quantifier::All => true,
        Quantifier::Exists => false,
        Quantifier::ExistsOne => held == 1,
    }))
}

#[derive(Clone, Copy)]
enum Shape {
    List,
    Map,
    MapEntry,
}

/// `transformList`, `transformMap`, `transformMapEntry` (`(k, v, [filter,] transform)`).
fn transform(ftx: &FunctionContext, shape: Shape) -> ResolveResult {
    let (filter, expr) = match ftx.args {
        [_, _, t] => (None, t),
        [_, _, f, t] => (Some(f), t),
        _ => {
            return Err(ftx.error(format!(
                "{} takes two variables, an optional filter and a transform",
                ftx.name
            )));
        }
    };
    let names = two_vars(ftx)?;
    let mut list = Vec::new();
    let mut map: HashMap<Key, Value> = HashMap::new();
    for entry in entries(ftx)? {
        if let Some(f) = filter
            && with_vars(ftx, &names, &entry, f)? != Value::Bool(true)
        {
            continue;
        }
        let out = with_vars(ftx, &names, &entry, expr)?;
        match shape {
            Shape::List => list.push(out),
            Shape::Map => {
                map.insert(to_key(ftx, &entry.0)?, out);
            }
            Shape::MapEntry => map_entry(ftx, &mut map, out)?,
        }
    }
    Ok(match shape {
        Shape::List => Value::List(Arc::new(list)),
        Shape::Map | Shape::MapEntry => Value::Map(Map { map: Arc::new(map) }),
    })
}

fn to_key(ftx: &FunctionContext, v: &Value) -> Result<Key, ExecutionError> {
    match v {
        Value::String(s) => Ok(Key::String(s.clone())),
        Value::Int(i) => Ok(Key::Int(*i)),
        Value::UInt(u) => Ok(Key::Uint(*u)),
        Value::Bool(b) => Ok(Key::Bool(*b)),
        other => Err(ftx.error(format!("{:?} cannot be a map key", other.type_of()))),
    }
}

/// `out` (a map of one entry) added to `map`; a key seen before is an error, as in cel-go.
fn map_entry(
    ftx: &FunctionContext,
    map: &mut HashMap<Key, Value>,
    out: Value,
) -> Result<(), ExecutionError> {
    let Value::Map(m) = out else {
        return Err(ftx.error("transformMapEntry: the transform must make a map"));
    };
    for (k, v) in m.map.iter() {
        if map.insert(k.clone(), v.clone()).is_some() {
            return Err(ftx.error(format!(
                "transformMapEntry: insert failed: key {} already exists",
                key_text(k)
            )));
        }
    }
    Ok(())
}

/// `runtime.newCondition({type: x})` as kro's macro rewrites it: each bare key a string.
pub(crate) fn name_condition_keys(c: &mut kube_cel::cel::common::ast::CallExpr) {
    use kube_cel::cel::common::ast::{EntryExpr, Expr, LiteralValue};
    let on_runtime = matches!(c.target.as_deref(), Some(t) if matches!(&t.expr, Expr::Ident(n) if n == "runtime"));
    if c.func_name != "newCondition" || !on_runtime {
        return;
    }
    let Some(Expr::Map(m)) = c.args.first_mut().map(|a| &mut a.expr) else {
        return;
    };
    for entry in &mut m.entries {
        if let EntryExpr::MapEntry(me) = &mut entry.expr
            && let Expr::Ident(name) = &me.key.expr
        {
            me.key.expr = Expr::Literal(LiteralValue::String(name.as_str().into()));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
