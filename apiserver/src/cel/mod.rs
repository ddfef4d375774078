//! CEL as kube-apiserver evaluates it, on the `cel` crate with the Kubernetes extension
//! libraries of `kube-cel` (strings, lists, sets, regex, urls, ip/cidr, semver, quantity,
//! format, math, base64): an [`Expression`] is compiled once and evaluated with
//! [`Bindings`] (variables as JSON values), each failure a typed [`CelError`].
//!
//! [`crd`] applies a CRD's `x-kubernetes-validations` to custom resources. Admission policies
//! (ValidatingAdmissionPolicy, MutatingAdmissionPolicy) and CEL hooks evaluate their expressions
//! through this module's API. Why these crates and what they do not cover:
//! docs/design/apiserver-admission.md.

pub(crate) mod crd;

use kube_cel::KubeCelExt as _;
use kube_cel::cel::objects::Key;
use kube_cel::cel::{Context, Program, Value as CelValue};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What went wrong compiling or evaluating an expression.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum CelError {
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

/// A compiled CEL expression.
#[derive(Debug, Clone)]
pub(crate) struct Expression {
    source: String,
    program: Arc<Program>,
}

/// The variables an expression is evaluated with (`self`, `object`, `oldObject`, `params`,
/// `request`, ...), as JSON values.
#[derive(Debug, Clone, Default)]
pub(crate) struct Bindings {
    vars: BTreeMap<String, Value>,
}

impl Bindings {
    /// Binds `name` to `value`.
    pub(crate) fn with(mut self, name: &str, value: Value) -> Bindings {
        self.vars.insert(name.to_string(), value);
        self
    }
}

impl Expression {
    /// Parses `source`.
    pub(crate) fn compile(source: &str) -> Result<Expression, CelError> {
        let program = Program::compile(source).map_err(|e| CelError::Compile {
            expression: source.to_string(),
            reason: e.to_string(),
        })?;
        Ok(Expression {
            source: source.to_string(),
            program: Arc::new(program),
        })
    }

    /// Whether the expression refers to the variable `name`.
    pub(crate) fn uses(&self, name: &str) -> bool {
        self.program.references().has_variable(name)
    }

    /// Evaluates with `bindings`; the result as JSON.
    pub(crate) fn evaluate(&self, bindings: &Bindings) -> Result<Value, CelError> {
        let mut ctx = Context::default().with_all();
        for (name, value) in &bindings.vars {
            ctx.add_variable_from_value(name.as_str(), json_to_cel(value));
        }
        let fail = |reason: String| CelError::Evaluate {
            expression: self.source.clone(),
            reason,
        };
        let out = self
            .program
            .execute(&ctx)
            .map_err(|e| fail(e.to_string()))?;
        cel_to_json(&out).map_err(fail)
    }

    /// Evaluates to a bool.
    pub(crate) fn evaluate_bool(&self, bindings: &Bindings) -> Result<bool, CelError> {
        match self.evaluate(bindings)? {
            Value::Bool(b) => Ok(b),
            other => Err(self.type_error("bool", &other)),
        }
    }

    /// Evaluates to a string.
    pub(crate) fn evaluate_string(&self, bindings: &Bindings) -> Result<String, CelError> {
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

/// A JSON value as CEL sees it: integers as `int` (or `uint`/`double` when they do not fit),
/// objects as maps with string keys.
pub(crate) fn json_to_cel(v: &Value) -> CelValue {
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

/// A CEL result as JSON (bytes as base64, durations and timestamps as their strings).
pub(crate) fn cel_to_json(v: &CelValue) -> Result<Value, String> {
    Ok(match v {
        CelValue::Null => Value::Null,
        CelValue::Bool(b) => Value::Bool(*b),
        CelValue::Int(i) => Value::from(*i),
        CelValue::UInt(u) => Value::from(*u),
        CelValue::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
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
        other => return Err(format!("a {:?} value has no JSON form", other.type_of())),
    })
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
#[allow(clippy::unwrap_used, clippy::too_many_lines)]
mod tests;
