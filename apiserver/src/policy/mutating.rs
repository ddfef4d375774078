//! `MutatingAdmissionPolicy` and `MutatingAdmissionPolicyBinding`: for every binding whose
//! policy matches the request, the policy's `mutations` applied in order, each on the result of
//! the one before: `ApplyConfiguration` (an `Object{...}` merged into the object, lists by
//! their merge keys) or `JSONPatch` (a list of `JSONPatch{...}` operations); policies with
//! `reinvocationPolicy: IfNeeded` once more when a later policy changed the object.
//!
//! cel-rust has no typed object construction, so `Object{f: v}`, `Object.spec{...}` and
//! `JSONPatch{op: ..}` are read as the maps `{"f": v}` they build ([`desugar`]).

use super::{
    ParamQuery, Request, bindings, cel_reason, deny_without_params, fails_closed, match_conditions,
    match_resources, name_of, param_query,
};
use crate::cel::Expression;
use crate::patch::ListKind;
use serde_json::Value;

/// A mutation that failed under `failurePolicy: Fail`: the request's error message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Failure {
    /// `MutatingAdmissionPolicy 'P' with binding 'B' ...`.
    pub(crate) message: String,
}

/// Applies every matching binding's policy to `object`, in the order of `bindings_list`.
pub(crate) fn mutate(
    policies: &[Value],
    bindings_list: &[Value],
    params: &dyn Fn(&ParamQuery) -> Vec<Value>,
    req: &Request<'_>,
    object: &mut Value,
    kinds: &dyn Fn(&[String]) -> ListKind,
) -> Result<(), Failure> {
    let mut applied: Vec<(&Value, &Value, Value)> = Vec::new();
    for binding in bindings_list {
        let Some(policy) = policy_of(policies, binding) else {
            continue;
        };
        let r = Request {
            object: Some(&*object),
            ..req.clone()
        };
        if !match_resources(policy.pointer("/spec/matchConstraints"), &r, true)
            || !match_resources(binding.pointer("/spec/matchResources"), &r, false)
        {
            continue;
        }
        let mut next = object.clone();
        apply_binding(policy, binding, params, req, &mut next, kinds)?;
        *object = next;
        applied.push((policy, binding, object.clone()));
    }
    // reinvocation: once more for the policies a later one changed the object after
    let last = object.clone();
    for (policy, binding, after) in applied {
        let again = policy
            .pointer("/spec/reinvocationPolicy")
            .and_then(Value::as_str)
            == Some("IfNeeded");
        if again && after != last {
            let mut next = object.clone();
            apply_binding(policy, binding, params, req, &mut next, kinds)?;
            *object = next;
        }
    }
    Ok(())
}

fn policy_of<'a>(policies: &'a [Value], binding: &Value) -> Option<&'a Value> {
    let name = binding
        .pointer("/spec/policyName")
        .and_then(Value::as_str)?;
    policies.iter().find(|p| name_of(p) == name)
}

/// One binding: its params, match conditions and mutations, on `object`.
fn apply_binding(
    policy: &Value,
    binding: &Value,
    params: &dyn Fn(&ParamQuery) -> Vec<Value>,
    req: &Request<'_>,
    object: &mut Value,
    kinds: &dyn Fn(&[String]) -> ListKind,
) -> Result<(), Failure> {
    let fail = |why: String| -> Result<(), Failure> {
        if fails_closed(policy) {
            Err(Failure {
                message: format!(
                    "MutatingAdmissionPolicy '{}' with binding '{}' denied request: {why}",
                    name_of(policy),
                    name_of(binding)
                ),
            })
        } else {
            Ok(())
        }
    };
    let param = match param_query(policy, binding, req.attrs.namespace.as_deref()) {
        None => None,
        Some(q) => match params(&q).into_iter().next() {
            Some(p) => Some(p),
            None if deny_without_params(binding) => {
                return fail(
                    "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
                );
            }
            None => return Ok(()),
        },
    };
    for m in policy
        .pointer("/spec/mutations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let r = Request {
            object: Some(&*object),
            ..req.clone()
        };
        let b = bindings(policy, &r, param.as_ref());
        match match_conditions(policy, &b) {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(e) => return fail(e),
        }
        if let Err(why) = apply_mutation(m, &b, object, kinds) {
            return fail(why);
        }
    }
    Ok(())
}

fn apply_mutation(
    m: &Value,
    b: &crate::cel::Bindings,
    object: &mut Value,
    kinds: &dyn Fn(&[String]) -> ListKind,
) -> Result<(), String> {
    let (src, apply) = match m["patchType"].as_str() {
        Some("ApplyConfiguration") => (m.pointer("/applyConfiguration/expression"), true),
        Some("JSONPatch") => (m.pointer("/jsonPatch/expression"), false),
        other => return Err(format!("unsupported patchType {other:?}")),
    };
    let src = src.and_then(Value::as_str).unwrap_or_default();
    let value = Expression::compile(&desugar(src))
        .and_then(|e| e.evaluate(b))
        .map_err(|e| {
            format!(
                "expression '{}' resulted in error: {}",
                src.trim(),
                cel_reason(&e)
            )
        })?;
    if apply {
        *object =
            crate::patch::strategic_merge(object, &value, kinds).map_err(|e| e.to_string())?;
    } else {
        crate::patch::json_patch(object, &value).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// What a stack frame of [`desugar`] is inside.
#[derive(Clone, Copy, PartialEq)]
enum Frame {
    Struct,
    Other,
}

/// `Object{a: 1, b: Object.b{c: 'x'}}` → `{"a": 1, "b": {"c": 'x'}}`, and `JSONPatch{op: ..}`
/// likewise; everything else (strings included) as written.
pub(crate) fn desugar(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len() + 16);
    let mut stack: Vec<Frame> = Vec::new();
    let mut expect_field = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' {
            i = copy_string(&chars, i, &mut out);
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '.')
            {
                i += 1;
            }
            let ident: String = chars[start..i].iter().collect();
            let next = chars[i..]
                .iter()
                .position(|c| !c.is_whitespace())
                .map(|p| i + p);
            let next_char = next.map(|n| chars[n]);
            let is_type = ident == "JSONPatch" || ident == "Object" || ident.starts_with("Object.");
            if is_type && next_char == Some('{') {
                i = next.unwrap_or(i) + 1;
                out.push('{');
                stack.push(Frame::Struct);
                expect_field = true;
            } else if expect_field && stack.last() == Some(&Frame::Struct) && next_char == Some(':')
            {
                out.push('"');
                out.push_str(&ident);
                out.push('"');
                expect_field = false;
            } else {
                out.push_str(&ident);
                expect_field = false;
            }
            continue;
        }
        match c {
            '{' | '(' | '[' => stack.push(Frame::Other),
            '}' | ')' | ']' => {
                stack.pop();
            }
            ',' => expect_field = stack.last() == Some(&Frame::Struct),
            _ => {}
        }
        if !c.is_whitespace() && c != ',' {
            expect_field = false;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// Copies the string literal starting at `i` (single, double or triple quoted) to `out`;
/// returns the index after it.
fn copy_string(chars: &[char], mut i: usize, out: &mut String) -> usize {
    let q = chars[i];
    let triple = chars.get(i + 1) == Some(&q) && chars.get(i + 2) == Some(&q);
    let width = if triple { 3 } else { 1 };
    for _ in 0..width {
        out.push(q);
    }
    i += width;
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' {
            out.push(c);
            if let Some(n) = chars.get(i + 1) {
                out.push(*n);
            }
            i += 2;
            continue;
        }
        let closes = if triple {
            c == q && chars.get(i + 1) == Some(&q) && chars.get(i + 2) == Some(&q)
        } else {
            c == q
        };
        if closes {
            for _ in 0..width {
                out.push(q);
            }
            return i + width;
        }
        out.push(c);
        i += 1;
    }
    i
}
