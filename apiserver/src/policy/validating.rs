//! `ValidatingAdmissionPolicy` and `ValidatingAdmissionPolicyBinding`: for every binding whose
//! policy matches the request, the policy's `validations` evaluated (once per param), each
//! failure acted on per the binding's `validationActions` (`Deny` refuses, `Warn` answers a
//! `Warning`, `Audit` has no audit log to go to), a failure to evaluate per `failurePolicy`.

use super::{
    ParamQuery, Request, bindings, cel_reason, deny_without_params, fails_closed, match_conditions,
    match_resources, name_of, param_query,
};
use crate::cel::{Bindings, Expression};
use serde_json::Value;

/// A refusal: the first denying decision, as kube-apiserver answers it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Denial {
    /// `ValidatingAdmissionPolicy 'P' with binding 'B' denied request: MESSAGE`.
    pub(crate) message: String,
    /// `Invalid` unless the validation names another reason.
    pub(crate) reason: String,
    /// The code of the reason (422, 403, 401, 413).
    pub(crate) code: u16,
}

/// What the validating policies decided about one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Outcome {
    /// The refusal, if any binding with `Deny` failed.
    pub(crate) deny: Option<Denial>,
    /// The `Warning` texts of bindings with `Warn`.
    pub(crate) warnings: Vec<String>,
}

/// One failed validation (or a failure to evaluate under `failurePolicy: Fail`).
struct Violation {
    message: String,
    reason: Option<String>,
}

/// Evaluates every binding of `bindings_list` whose policy (in `policies`) matches `req`; `params`
/// answers a binding's params.
pub(crate) fn evaluate(
    policies: &[Value],
    bindings_list: &[Value],
    params: &dyn Fn(&ParamQuery) -> Vec<Value>,
    req: &Request<'_>,
) -> Outcome {
    let mut out = Outcome::default();
    for binding in bindings_list {
        let policy_name = binding.pointer("/spec/policyName").and_then(Value::as_str);
        let Some(policy) = policies.iter().find(|p| Some(name_of(p)) == policy_name) else {
            continue;
        };
        if !match_resources(policy.pointer("/spec/matchConstraints"), req, true)
            || !match_resources(binding.pointer("/spec/matchResources"), req, false)
        {
            continue;
        }
        for v in violations(policy, binding, params, req) {
            act(policy, binding, v, &mut out);
        }
    }
    out
}

/// The violations of one binding, over its params.
fn violations(
    policy: &Value,
    binding: &Value,
    params: &dyn Fn(&ParamQuery) -> Vec<Value>,
    req: &Request<'_>,
) -> Vec<Violation> {
    let sets: Vec<Option<Value>> =
        match param_query(policy, binding, req.attrs.namespace.as_deref()) {
            None => vec![None],
            Some(q) => {
                let found = params(&q);
                if found.is_empty() && deny_without_params(binding) {
                    return failure(
                        policy,
                        "no params found for policy binding with `Deny` parameterNotFoundAction"
                            .into(),
                    );
                }
                found.into_iter().map(Some).collect()
            }
        };
    let mut out = Vec::new();
    for p in &sets {
        let b = bindings(policy, req, p.as_ref());
        match match_conditions(policy, &b) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                out.extend(failure(policy, e));
                continue;
            }
        }
        out.extend(validations(policy, &b));
        out.extend(audit_annotations(policy, &b));
    }
    out
}

fn failure(policy: &Value, message: String) -> Vec<Violation> {
    if fails_closed(policy) {
        vec![Violation {
            message,
            reason: None,
        }]
    } else {
        vec![]
    }
}

/// `validations`: each expression must be true; the message of a false one is its
/// `messageExpression`'s (when that gives a non-empty string), its `message`, or
/// `failed expression: EXPRESSION`.
fn validations(policy: &Value, b: &Bindings) -> Vec<Violation> {
    let mut out = Vec::new();
    for v in policy
        .pointer("/spec/validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let src = v["expression"].as_str().unwrap_or_default();
        match Expression::compile(src).and_then(|e| e.evaluate_bool(b)) {
            Ok(true) => {}
            Ok(false) => {
                let from_expression = v["messageExpression"]
                    .as_str()
                    .and_then(|m| {
                        Expression::compile(m)
                            .and_then(|e| e.evaluate_string(b))
                            .ok()
                    })
                    .filter(|m| !m.trim().is_empty());
                let message = from_expression
                    .or_else(|| v["message"].as_str().map(str::to_string))
                    .unwrap_or_else(|| format!("failed expression: {}", src.trim()));
                out.push(Violation {
                    message,
                    reason: v["reason"].as_str().map(str::to_string),
                });
            }
            Err(e) => out.extend(failure(
                policy,
                format!(
                    "expression '{}' resulted in error: {}",
                    src.trim(),
                    cel_reason(&e)
                ),
            )),
        }
    }
    out
}

/// `auditAnnotations`: their values have no audit log to go to, but one that fails to evaluate
/// is the policy's failure.
fn audit_annotations(policy: &Value, b: &Bindings) -> Vec<Violation> {
    let mut out = Vec::new();
    for a in policy
        .pointer("/spec/auditAnnotations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let src = a["valueExpression"].as_str().unwrap_or_default();
        if let Err(e) = Expression::compile(src).and_then(|e| e.evaluate(b)) {
            let key = a["key"].as_str().unwrap_or_default();
            out.extend(failure(
                policy,
                format!(
                    "valueExpression '{src}' resulted in error: {} (audit annotation {key:?})",
                    cel_reason(&e)
                ),
            ));
        }
    }
    out
}

/// A violation acted on per the binding's `validationActions`.
fn act(policy: &Value, binding: &Value, v: Violation, out: &mut Outcome) {
    let (p, b) = (name_of(policy), name_of(binding));
    let actions = binding
        .pointer("/spec/validationActions")
        .and_then(Value::as_array);
    for action in actions.into_iter().flatten().filter_map(Value::as_str) {
        match action {
            "Deny" if out.deny.is_none() => {
                let reason = v.reason.clone().unwrap_or_else(|| "Invalid".into());
                out.deny = Some(Denial {
                    message: format!(
                        "ValidatingAdmissionPolicy '{p}' with binding '{b}' denied request: {}",
                        v.message
                    ),
                    code: reason_code(&reason),
                    reason,
                });
            }
            "Warn" => out.warnings.push(format!(
                "Validation failed for ValidatingAdmissionPolicy '{p}' with binding '{b}': {}",
                v.message
            )),
            _ => {}
        }
    }
}

/// `reasonToCode`.
fn reason_code(reason: &str) -> u16 {
    match reason {
        "Unauthorized" => 401,
        "Forbidden" => 403,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}
