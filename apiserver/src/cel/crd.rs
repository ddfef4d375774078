//! A CRD version's `x-kubernetes-validations`, applied to custom resources as
//! apiextensions-apiserver applies them: `rule` evaluated with `self` (and `oldSelf` on update,
//! transition rules only then unless `optionalOldSelf`), `message`/`messageExpression`,
//! `reason`, `fieldPath`, errors worded as kube-apiserver words them, ratcheting of rules
//! without `oldSelf` on unchanged values (a warning instead), and a time limit standing in for
//! the cost budget.
//!
//! The walk of the schema and the evaluation are `kube-cel`'s (`compile_schema`,
//! `validate_compiled`); this module compiles once per CRD version, checks the rules parse when
//! the CRD is written, and turns `kube-cel`'s results into kube-apiserver's field errors.

use super::Expression;
use kube_cel::{CompiledSchema, ErrorKind, ValidationError};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// How long the rules of one write may run. kube-apiserver bounds them by an estimated cost
/// (`RuntimeCELCostBudget`); the `cel` crate counts none, so a wall-clock limit stands in.
pub(crate) const TIME_LIMIT: Duration = Duration::from_secs(2);

/// kube-apiserver's words when a write's rules run out of budget.
pub(crate) const OUT_OF_BUDGET: &str =
    "validation failed due to running out of cost budget, no further validation rules will be run";

/// The compiled rules of one CRD version's schema.
#[derive(Debug, Clone)]
pub(crate) struct CrdRules {
    compiled: Arc<CompiledSchema>,
    schema: Arc<Value>,
}

/// A rule of the CRD that does not compile: where (under `openAPIV3Schema`) and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RuleCompileError {
    /// `openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule`.
    pub(crate) field: String,
    /// `Invalid value: "RULE": compilation failed: ...`.
    pub(crate) message: String,
}

/// One failed rule, as a `field.Error`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RuleFailure {
    /// `FieldValueInvalid`, `FieldValueForbidden`, `FieldValueRequired`, `FieldValueDuplicate`.
    pub(crate) reason: &'static str,
    /// The field path (`spec`, `spec.replicas`).
    pub(crate) field: String,
    /// `Invalid value: "object": MESSAGE`, `Forbidden: MESSAGE`, ...
    pub(crate) message: String,
}

/// What the rules made of one write: errors refuse it, warnings (ratcheted errors) are answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RuleOutcome {
    /// The failures that refuse the write.
    pub(crate) errors: Vec<RuleFailure>,
    /// The failures ratcheted away (unchanged values), as `Warning` texts.
    pub(crate) warnings: Vec<String>,
}

impl CrdRules {
    /// Compiles the rules of an `openAPIV3Schema`: `None` when it has none; an error naming
    /// the first rule (or `messageExpression`) that does not parse.
    pub(crate) fn compile(schema: &Value) -> Result<Option<CrdRules>, RuleCompileError> {
        let mut found = false;
        check_rules(schema, "openAPIV3Schema", &mut found)?;
        if !found {
            return Ok(None);
        }
        Ok(Some(CrdRules {
            compiled: Arc::new(kube_cel::compile_schema(schema)),
            schema: Arc::new(schema.clone()),
        }))
    }

    /// Runs the rules on `obj` (`old` on update), within [`TIME_LIMIT`].
    pub(crate) fn check(&self, obj: &Value, old: Option<&Value>) -> RuleOutcome {
        let (compiled, o, old_o) = (self.compiled.clone(), obj.clone(), old.cloned());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(kube_cel::validate_compiled(&compiled, &o, old_o.as_ref()));
        });
        let errors = match rx.recv_timeout(TIME_LIMIT) {
            Ok(Ok(())) => return RuleOutcome::default(),
            Ok(Err(errs)) => errs.into_vec(),
            Err(_) => {
                let failure = RuleFailure {
                    reason: "FieldValueInvalid",
                    field: "<nil>".into(),
                    message: format!("Invalid value: \"object\": {OUT_OF_BUDGET}"),
                };
                return RuleOutcome {
                    errors: vec![failure],
                    warnings: vec![],
                };
            }
        };
        let mut out = RuleOutcome::default();
        for e in &errors {
            let failure = self.failure(e);
            if ratchets(e, obj, old) {
                out.warnings
                    .push(format!("{}: {}", failure.field, failure.message));
            } else {
                out.errors.push(failure);
            }
        }
        out
    }

    fn failure(&self, e: &ValidationError) -> RuleFailure {
        let ty = type_at(&self.schema, &e.field_path);
        let field = if e.field_path.is_empty() {
            "<nil>".to_string()
        } else {
            e.field_path.clone()
        };
        let (reason, message) = match e.kind {
            ErrorKind::ValidationFailure => by_reason(e.reason.as_deref(), &ty, &e.message),
            ErrorKind::EvaluationError => {
                let cause = std::error::Error::source(e)
                    .map(|c| go_style(&c.to_string()))
                    .unwrap_or_else(|| e.message.clone());
                let rule = e.rule.trim();
                (
                    "FieldValueInvalid",
                    format!("Invalid value: \"{ty}\": {cause} evaluating rule: {rule}"),
                )
            }
            _ => (
                "FieldValueInvalid",
                format!("Invalid value: \"{ty}\": {}", e.message),
            ),
        };
        RuleFailure {
            reason,
            field,
            message,
        }
    }
}

/// An evaluator's message as cel-go starts it (lower case: `no such key: a`).
fn go_style(msg: &str) -> String {
    let mut chars = msg.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// `fieldErrorForReason`: the error a failed rule makes, by its `reason`.
fn by_reason(reason: Option<&str>, ty: &str, detail: &str) -> (&'static str, String) {
    match reason {
        Some("FieldValueForbidden") => ("FieldValueForbidden", format!("Forbidden: {detail}")),
        Some("FieldValueRequired") => ("FieldValueRequired", format!("Required value: {detail}")),
        Some("FieldValueDuplicate") => {
            ("FieldValueDuplicate", format!("Duplicate value: \"{ty}\""))
        }
        _ => (
            "FieldValueInvalid",
            format!("Invalid value: \"{ty}\": {detail}"),
        ),
    }
}

/// Ratcheting (kube-apiserver 1.30+): a rule without `oldSelf` failing on a value equal to the
/// old one does not refuse the update.
fn ratchets(e: &ValidationError, obj: &Value, old: Option<&Value>) -> bool {
    let Some(old) = old else {
        return false;
    };
    let uses_old_self = Expression::compile(&e.rule).map_or(true, |x| x.uses("oldSelf"));
    if uses_old_self {
        return false;
    }
    match (value_at(obj, &e.field_path), value_at(old, &e.field_path)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// The path's segments: `spec.items[1].name` → `spec`, `items`, `[1]`, `name`.
fn segments(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let mut rest = part;
        if let Some(i) = rest.find('[') {
            if i > 0 {
                out.push(rest[..i].to_string());
            }
            rest = &rest[i..];
            while let Some(end) = rest.find(']') {
                out.push(rest[..=end].to_string());
                rest = &rest[end + 1..];
            }
        } else {
            out.push(rest.to_string());
        }
    }
    out
}

fn value_at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    segments(path)
        .iter()
        .try_fold(v, |v, s| match s.strip_prefix('[') {
            Some(i) => v.get(i.trim_end_matches(']').parse::<usize>().ok()?),
            None => v.get(s.as_str()),
        })
}

/// The schema `type` of the node at `path` (`object` when it cannot be told).
fn type_at(schema: &Value, path: &str) -> String {
    let node = segments(path).iter().try_fold(schema, |s, seg| {
        if seg.starts_with('[') {
            s.get("items")
        } else {
            s.pointer(&format!(
                "/properties/{}",
                seg.replace('~', "~0").replace('/', "~1")
            ))
            .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
        }
    });
    node.and_then(|n| n.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("object")
        .to_string()
}

/// Checks every rule and `messageExpression` under `schema` parses; records whether any rule
/// exists.
fn check_rules(schema: &Value, path: &str, found: &mut bool) -> Result<(), RuleCompileError> {
    let Some(m) = schema.as_object() else {
        return Ok(());
    };
    if let Some(rules) = m.get("x-kubernetes-validations").and_then(Value::as_array) {
        for (i, r) in rules.iter().enumerate() {
            *found = true;
            for key in ["rule", "messageExpression"] {
                let Some(src) = r.get(key).and_then(Value::as_str) else {
                    continue;
                };
                if let Err(e) = Expression::compile(src) {
                    return Err(RuleCompileError {
                        field: format!("{path}.x-kubernetes-validations[{i}].{key}"),
                        message: format!("Invalid value: {src:?}: {e}"),
                    });
                }
            }
        }
    }
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            check_rules(v, &format!("{path}.properties[{k}]"), found)?;
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(v) = m.get(key) {
            check_rules(v, &format!("{path}.{key}"), found)?;
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for (i, v) in m
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            check_rules(v, &format!("{path}.{key}[{i}]"), found)?;
        }
    }
    Ok(())
}
