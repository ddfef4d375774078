//! CEL as kube-apiserver evaluates it, on the `cel` crate with the Kubernetes extension libraries
//! of `kube-cel` (strings, lists, sets, regex, urls, ip/cidr, semver, quantity, format, math,
//! base64): an [`Expression`] is compiled once and evaluated with [`Bindings`] (variables as JSON
//! values), each failure a typed [`CelError`].
//!
//! One module for the two users of CEL in the workspace: kmeta's CEL hooks (kro's
//! ResourceGraphDefinitions, `controller/src/hook/cel/`) and kmeta-apiserver (CRD
//! `x-kubernetes-validations`, admission policies), so the controller does not depend on the
//! test server to evaluate the same language. Why these crates and what they do not cover:
//! docs/design/apiserver-admission.md and docs/design/cel-hooks.md.

mod functions;
mod kro;
mod optional;

use kube_cel::KubeCelExt as _;
use kube_cel::cel::common::ast::{EntryExpr, Expr};
use kube_cel::cel::objects::Key;
use kube_cel::cel::parser::Parser;
use kube_cel::cel::{Context, ExecutionError, IdedExpr, Value as CelValue};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

pub mod types;
pub use functions::Functions;
pub use types::{Schema, Type, TypeEnv, TypeError};

/// What went wrong compiling or evaluating an expression.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CelError {
    /// The expression does not parse.
    #[error("compilation failed: {reason}")]
    Compile {
        /// The expression.
        expression: String,
        /// The parser's message.
        reason: String,
    },
    /// Evaluation failed (no such key, a type mismatch, an unsupported function, ...).
    #[error("{reason}")]
    Evaluate {
        /// The expression.
        expression: String,
        /// The failure is a field, key or variable the data does not have (yet): kro waits
        /// for such data instead of failing.
        missing: bool,
        /// What failed, as the evaluator says it.
        reason: String,
    },
    /// The result is not of the type the caller needs.
    #[error("expected a {expected} result, got {got}")]
    Type {
        /// The expression.
        expression: String,
        /// What was needed (`bool`, `string`).
        expected: &'static str,
        /// What came (the JSON of the result).
        got: String,
    },
}

/// A compiled CEL expression (optional syntax, `a.?b` and `[?i]`, enabled as in Kubernetes).
#[derive(Debug, Clone)]
pub struct Expression {
    source: String,
    program: Arc<IdedExpr>,
}

/// The JSON that stands for kro's `omit()` in a result: an object whose one key holds a NUL, so
/// no Kubernetes object's field can be mistaken for it. [`strip_omitted`] removes it.
pub const OMIT_KEY: &str = "\u{0}kro.omit";

/// Whether `v` is kro's `omit()` ([`OMIT_KEY`]).
pub fn is_omitted(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|m| m.len() == 1 && m.contains_key(OMIT_KEY))
}

/// `v` without the fields and list items holding kro's `omit()`, at any depth, as kro's
/// resolver cleans a rendered resource.
pub fn strip_omitted(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !is_omitted(x));
            m.values_mut().for_each(strip_omitted);
        }
        Value::Array(a) => {
            a.retain(|x| !is_omitted(x));
            a.iter_mut().for_each(strip_omitted);
        }
        _ => {}
    }
}

/// The variables an expression is evaluated with (`self`, `object`, `oldObject`, `params`,
/// `request`, ...), as JSON values.
#[derive(Debug, Clone, Default)]
pub struct Bindings {
    vars: BTreeMap<String, Value>,
}

/// Variables converted to CEL once, with every function of the Kubernetes libraries
/// registered: the context many expressions are evaluated in ([`Expression::evaluate_in`]).
pub struct Scope {
    ctx: Context<'static>,
}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope").finish_non_exhaustive()
    }
}

impl Scope {
    /// A scope holding `bindings`' variables, with the Kubernetes libraries.
    pub fn new(bindings: &Bindings) -> Scope {
        Self::with(Context::default().with_all(), bindings)
    }

    /// A scope holding `bindings`' variables, with the Kubernetes libraries and kro's own
    /// (`hash`, `json`, `random`, `lists` index mutation, `merge`/`deepMerge`, `omit()`,
    /// `cel.bind`, two-variable comprehensions): the environment of kro's resource graphs.
    pub fn kro(bindings: &Bindings) -> Scope {
        let mut ctx = Context::default().with_all();
        kro::register(&mut ctx);
        Self::with(ctx, bindings)
    }

    fn with(mut ctx: Context<'static>, bindings: &Bindings) -> Scope {
        optional::register(&mut ctx);
        functions::register(&mut ctx);
        for (name, value) in &bindings.vars {
            ctx.add_variable_from_value(name.as_str(), json_to_cel(value));
        }
        Scope { ctx }
    }

    /// Binds (or rebinds) `name` to `value` in this scope.
    pub fn set(&mut self, name: &str, value: &Value) {
        self.ctx.add_variable_from_value(name, json_to_cel(value));
    }
}

impl Bindings {
    /// Binds `name` to `value`.
    pub fn with(mut self, name: &str, value: Value) -> Bindings {
        self.vars.insert(name.to_string(), value);
        self
    }
}

impl Expression {
    /// Parses `source`.
    pub fn compile(source: &str) -> Result<Expression, CelError> {
        let parser = Parser::new().enable_optional_syntax(true);
        let mut program = parser.parse(source).map_err(|e| CelError::Compile {
            expression: source.to_string(),
            reason: e.to_string(),
        })?;
        optional::rewrite(&mut program);
        Ok(Expression {
            source: source.to_string(),
            program: Arc::new(program),
        })
    }

    /// Whether the expression refers to the variable `name`.
    pub fn uses(&self, name: &str) -> bool {
        self.program.references().has_variable(name)
    }

    /// Whether the expression calls the function `name` (as written: `omit`, `random.seededString`
    /// is `seededString` on `random`).
    pub fn calls(&self, name: &str) -> bool {
        self.program.references().has_function(name)
    }

    /// Evaluates with `bindings`; the result as JSON.
    pub fn evaluate(&self, bindings: &Bindings) -> Result<Value, CelError> {
        self.evaluate_in(&Scope::new(bindings))
    }

    /// Evaluates in `scope` (variables converted once for many expressions); the result as
    /// JSON.
    pub fn evaluate_in(&self, scope: &Scope) -> Result<Value, CelError> {
        let out = CelValue::resolve(&self.program, &scope.ctx).map_err(|e| CelError::Evaluate {
            expression: self.source.clone(),
            missing: self.is_missing(&e),
            reason: e.to_string(),
        })?;
        cel_to_json(&out).map_err(|NoJsonForm(reason)| CelError::Evaluate {
            expression: self.source.clone(),
            missing: false,
            reason,
        })
    }

    /// Whether `e` says data is not there (yet): a key or a variable the data lacks, not a
    /// function no scope declares (a misspelt function fails, it does not wait).
    fn is_missing(&self, e: &ExecutionError) -> bool {
        match e {
            ExecutionError::NoSuchKey(_) => true,
            ExecutionError::UndeclaredReference(name) => {
                !self.program.references().has_function(name.as_str())
            }
            _ => false,
        }
    }

    /// The variables the expression reads (those bound by its macros included).
    pub fn variables(&self) -> Vec<String> {
        let refs = self.program.references();
        refs.variables().into_iter().map(str::to_owned).collect()
    }

    /// The field selections the expression makes on its variables, each as the variable's
    /// name followed by the fields selected in turn (`schema.spec.name` gives
    /// `["schema", "spec", "name"]`); a chain ends where an index or a call does.
    pub fn selections(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        walk(&self.program, &mut out);
        out
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates to a bool.
    pub fn evaluate_bool(&self, bindings: &Bindings) -> Result<bool, CelError> {
        match self.evaluate(bindings)? {
            Value::Bool(b) => Ok(b),
            other => Err(self.type_error("bool", &other)),
        }
    }

    /// Evaluates to a string.
    pub fn evaluate_string(&self, bindings: &Bindings) -> Result<String, CelError> {
        match self.evaluate(bindings)? {
            Value::String(s) => Ok(s),
            other => Err(self.type_error("string", &other)),
        }
    }

    fn type_error(&self, expected: &'static str, got: &Value) -> CelError {
        CelError::Type {
            expression: self.source.clone(),
            expected,
            got: got.to_string(),
        }
    }
}

/// The field chain `e` selects when it is `ident.f1.f2...`.
fn chain(e: &IdedExpr) -> Option<Vec<String>> {
    match &e.expr {
        Expr::Ident(name) => Some(vec![name.clone()]),
        Expr::Select(s) => {
            let mut c = chain(&s.operand)?;
            c.push(s.field.clone());
            Some(c)
        }
        _ => None,
    }
}

/// Collects every maximal selection chain of `e` into `out`.
fn walk(e: &IdedExpr, out: &mut Vec<Vec<String>>) {
    if let Some(c) = chain(e).filter(|c| c.len() > 1) {
        out.push(c);
        return;
    }
    match &e.expr {
        Expr::Select(s) => walk(&s.operand, out),
        Expr::Call(c) => {
            c.target.iter().for_each(|t| walk(t, out));
            c.args.iter().for_each(|a| walk(a, out));
        }
        Expr::Comprehension(c) => {
            for part in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                walk(part, out);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|x| walk(x, out)),
        Expr::Map(m) => m.entries.iter().for_each(|x| walk_entry(&x.expr, out)),
        Expr::Struct(st) => st.entries.iter().for_each(|x| walk_entry(&x.expr, out)),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn walk_entry(e: &EntryExpr, out: &mut Vec<Vec<String>>) {
    match e {
        EntryExpr::StructField(f) => walk(&f.value, out),
        EntryExpr::MapEntry(m) => {
            walk(&m.key, out);
            walk(&m.value, out);
        }
    }
}

/// A JSON value as CEL sees it: integers as `int` (or `uint`/`double` when they do not fit),
/// objects as maps with string keys.
fn json_to_cel(v: &Value) -> CelValue {
    match v {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => CelValue::Int(i),
            (None, Some(u)) => CelValue::UInt(u),
            _ => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Array(a) => CelValue::List(Arc::new(a.iter().map(json_to_cel).collect())),
        Value::Object(m) => {
            let map: std::collections::HashMap<Key, CelValue> = m
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), json_to_cel(v)))
                .collect();
            CelValue::Map(kube_cel::cel::objects::Map { map: Arc::new(map) })
        }
    }
}

/// A CEL value that has no JSON form (a type, a function, an optional), named by its type.
struct NoJsonForm(String);

/// A CEL result as JSON (bytes as base64, durations and timestamps as their strings).
fn cel_to_json(v: &CelValue) -> Result<Value, NoJsonForm> {
    Ok(match v {
        CelValue::Null => Value::Null,
        CelValue::Bool(b) => Value::Bool(*b),
        CelValue::Int(i) => Value::from(*i),
        CelValue::UInt(u) => Value::from(*u),
        CelValue::Float(f) => double_to_json(*f),
        CelValue::String(s) => Value::String(s.to_string()),
        CelValue::Bytes(b) => Value::String(base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            b.as_slice(),
        )),
        CelValue::List(l) => Value::Array(l.iter().map(cel_to_json).collect::<Result<_, _>>()?),
        CelValue::Map(m) => {
            let mut out = serde_json::Map::new();
            let mut entries: Vec<_> = m.map.iter().collect();
            entries.sort_by_key(|(k, _)| key_string(k));
            for (k, v) in entries {
                out.insert(key_string(k), cel_to_json(v)?);
            }
            Value::Object(out)
        }
        CelValue::Duration(d) => {
            Value::String(format!("{}s", d.num_milliseconds() as f64 / 1000.0))
        }
        CelValue::Timestamp(t) => Value::String(t.to_rfc3339()),
        CelValue::Opaque(o) if o.downcast_ref::<kro::Omit>().is_some() => {
            serde_json::json!({ OMIT_KEY: true })
        }
        other => {
            return Err(NoJsonForm(format!(
                "a {:?} value has no JSON form",
                other.type_of()
            )));
        }
    })
}

/// A double as Go's JSON encoding writes it: a whole number without a fraction (`3`, not `3.0`),
/// so a double written to an integer field (`json.unmarshal` reads numbers as doubles) decodes
/// as the API server's Go types expect; not finite: null.
fn double_to_json(f: f64) -> Value {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53: every whole double below is exact
    if f.fract() == 0.0 && f.abs() < EXACT {
        return Value::from(f as i64);
    }
    serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
}

fn key_string(k: &Key) -> String {
    match k {
        Key::String(s) => s.to_string(),
        Key::Int(i) => i.to_string(),
        Key::Uint(u) => u.to_string(),
        Key::Bool(b) => b.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_scope_serves_many_expressions_and_missing_data_is_told_apart() {
        let mut scope = Scope::new(&Bindings::default().with("a", json!({"b": 1})));
        let one = Expression::compile("a.b + 1").unwrap();
        assert_eq!(one.evaluate_in(&scope).unwrap(), json!(2));
        let missing = Expression::compile("a.c").unwrap();
        assert!(matches!(
            missing.evaluate_in(&scope),
            Err(CelError::Evaluate { missing: true, .. })
        ));
        let unbound = Expression::compile("z.c").unwrap();
        assert!(matches!(
            unbound.evaluate_in(&scope),
            Err(CelError::Evaluate { missing: true, .. })
        ));
        let misspelt = Expression::compile("a.b.lowerAsci()").unwrap();
        assert!(matches!(
            misspelt.evaluate_in(&scope),
            Err(CelError::Evaluate { missing: false, .. })
        ));
        let wrong = Expression::compile("a.b + 'x'").unwrap();
        assert!(matches!(
            wrong.evaluate_in(&scope),
            Err(CelError::Evaluate { missing: false, .. })
        ));
        scope.set("z", &json!({"c": "here"}));
        assert_eq!(unbound.evaluate_in(&scope).unwrap(), json!("here"));
        let mut vars = Expression::compile("[1].map(x, x + a.b) == y")
            .unwrap()
            .variables();
        vars.sort();
        assert_eq!(vars, ["a", "x", "y"]);
        let e = Expression::compile("a.b.c[0].d + size(x.y) > 1 ? {'k': m.n} : [z.w.v]").unwrap();
        let mut sel = e.selections();
        sel.sort();
        assert_eq!(
            sel,
            [
                vec!["a", "b", "c"],
                vec!["m", "n"],
                vec!["x", "y"],
                vec!["z", "w", "v"]
            ]
        );
    }
}
