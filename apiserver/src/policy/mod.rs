//! Admission policies in CEL as kube-apiserver applies them (`admissionregistration.k8s.io/v1`):
//! which policy bindings a request matches (`matchConstraints` of the policy and
//! `matchResources` of the binding: `resourceRules` with `resourceNames`,
//! `excludeResourceRules`, `namespaceSelector`, `objectSelector`; then `matchConditions`), the
//! params a binding names (`paramRef`), and what a [`ValidatingAdmissionPolicy`](validating)
//! decides, or what a [`MutatingAdmissionPolicy`](mutating) changes.
//!
//! Pure functions on JSON values; the engine reads the policies, bindings, params and
//! namespaces from storage and calls them on every write (`engine/policy.rs`).

pub(crate) mod mutating;
pub(crate) mod validating;

use crate::cel::{Bindings, CelError, Expression};
use crate::selector::{LabelSelector, Requirement};
use crate::webhook::Attributes;
use serde_json::Value;

/// What a policy sees of a request: its attributes, objects and namespace.
#[derive(Debug, Clone)]
pub(crate) struct Request<'a> {
    /// Operation, resource, names, user.
    pub(crate) attrs: &'a Attributes,
    /// Whether the resource is namespaced.
    pub(crate) namespaced: bool,
    /// The object (None on delete).
    pub(crate) object: Option<&'a Value>,
    /// The stored object (update, delete).
    pub(crate) old: Option<&'a Value>,
    /// The object's namespace (None for cluster-scoped objects).
    pub(crate) namespace: Option<&'a Value>,
}

/// Where a binding's params come from: `paramKind` of the policy, `paramRef` of the binding.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ParamQuery {
    /// `paramKind.apiVersion`.
    pub(crate) api_version: String,
    /// `paramKind.kind`.
    pub(crate) kind: String,
    /// `paramRef.name`.
    pub(crate) name: Option<String>,
    /// `paramRef.namespace`, else the request's namespace.
    pub(crate) namespace: Option<String>,
    /// `paramRef.selector`.
    pub(crate) selector: Option<LabelSelector>,
}

/// How a policy's failure to evaluate is handled (`failurePolicy`, `Fail` by default).
pub(crate) fn fails_closed(policy: &Value) -> bool {
    policy
        .pointer("/spec/failurePolicy")
        .and_then(Value::as_str)
        != Some("Ignore")
}

/// The name of an object.
pub(crate) fn name_of(v: &Value) -> &str {
    v.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Whether `rules` (`resourceRules` / `excludeResourceRules`, NamedRuleWithOperations) cover
/// the request.
fn rules_cover(rules: Option<&Value>, req: &Request<'_>) -> bool {
    let listed = |r: &Value, key: &str, v: &str| {
        r[key]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x == "*" || x == v))
    };
    let a = req.attrs;
    rules
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|r| {
            let scope_ok = match r["scope"].as_str() {
                Some("Cluster") => !req.namespaced,
                Some("Namespaced") => req.namespaced,
                _ => true,
            };
            let names = r["resourceNames"].as_array().filter(|n| !n.is_empty());
            let name_ok = names.is_none_or(|n| n.iter().any(|x| x == a.name.as_str()));
            let res_ok = r["resources"].as_array().is_some_and(|l| {
                l.iter()
                    .filter_map(Value::as_str)
                    .any(|p| resource_matches(p, &a.resource, &a.subresource))
            });
            scope_ok
                && name_ok
                && res_ok
                && listed(r, "operations", a.op.as_str())
                && listed(r, "apiGroups", &a.group)
                && listed(r, "apiVersions", &a.version)
        })
}

fn resource_matches(pattern: &str, resource: &str, sub: &str) -> bool {
    let (pr, ps) = pattern.split_once('/').unwrap_or((pattern, ""));
    (pr == "*" || pr == resource) && (ps == "*" || ps == sub)
}

/// A `metav1.LabelSelector` (JSON) as requirements; an absent one selects everything.
pub(crate) fn selector(v: Option<&Value>) -> LabelSelector {
    let Some(v) = v.filter(|v| v.is_object()) else {
        return LabelSelector::default();
    };
    let mut reqs: Vec<Requirement> = v["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| Requirement::Eq(k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    for e in v["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or_default().to_string();
        let values = e["values"]
            .as_array()
            .map(|vs| {
                vs.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        reqs.push(match e["operator"].as_str() {
            Some("In") => Requirement::In(key, values),
            Some("NotIn") => Requirement::NotIn(key, values),
            Some("Exists") => Requirement::Exists(key),
            _ => Requirement::NotExists(key),
        });
    }
    LabelSelector(reqs)
}

/// Whether a `MatchResources` (a policy's `matchConstraints`, a binding's `matchResources`)
/// admits the request. A binding's without `resourceRules` (or none at all) narrows nothing;
/// a policy's without them admits nothing (`required`).
pub(crate) fn match_resources(m: Option<&Value>, req: &Request<'_>, required: bool) -> bool {
    let Some(m) = m.filter(|m| m.is_object()) else {
        return !required;
    };
    let has_rules = m["resourceRules"].as_array().is_some_and(|r| !r.is_empty());
    let rules_ok = if has_rules {
        rules_cover(m.get("resourceRules"), req)
    } else {
        !required
    };
    if !rules_ok || rules_cover(m.get("excludeResourceRules"), req) {
        return false;
    }
    let objects = [req.object, req.old];
    let object_ok = {
        let s = selector(m.get("objectSelector"));
        s.0.is_empty() || objects.into_iter().flatten().any(|o| s.matches(o))
    };
    let ns_ok = match (req.namespaced, req.namespace, req.attrs.resource.as_str()) {
        (false, _, "namespaces") if req.attrs.group.is_empty() => {
            let s = selector(m.get("namespaceSelector"));
            objects.into_iter().flatten().any(|o| s.matches(o)) || s.0.is_empty()
        }
        (false, _, _) => true,
        (true, ns, _) => {
            let s = selector(m.get("namespaceSelector"));
            s.0.is_empty() || ns.is_some_and(|n| s.matches(n))
        }
    };
    object_ok && ns_ok
}

/// The CEL variables of a policy evaluation: `object`, `oldObject`, `request`, `params`,
/// `namespaceObject`, then the policy's `variables` (each may use those before it).
pub(crate) fn bindings(policy: &Value, req: &Request<'_>, params: Option<&Value>) -> Bindings {
    let mut b = Bindings::default()
        .with("object", req.object.cloned().unwrap_or(Value::Null))
        .with("oldObject", req.old.cloned().unwrap_or(Value::Null))
        .with("request", crate::webhook::cel_request(req.attrs))
        .with("params", params.cloned().unwrap_or(Value::Null))
        .with(
            "namespaceObject",
            req.namespace.cloned().unwrap_or(Value::Null),
        );
    let mut vars = serde_json::Map::new();
    for v in policy
        .pointer("/spec/variables")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (Some(name), Some(src)) = (v["name"].as_str(), v["expression"].as_str()) else {
            continue;
        };
        let value = Expression::compile(src)
            .and_then(|e| e.evaluate(&b.clone().with("variables", Value::Object(vars.clone()))));
        if let Ok(value) = value {
            vars.insert(name.to_string(), value);
        }
    }
    b = b.with("variables", Value::Object(vars));
    b
}

/// `matchConditions`: all must hold. `Ok(false)` skips the policy; an error is the policy's
/// failure (its `failurePolicy` decides).
pub(crate) fn match_conditions(policy: &Value, b: &Bindings) -> Result<bool, String> {
    for c in policy
        .pointer("/spec/matchConditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = c["name"].as_str().unwrap_or_default();
        let src = c["expression"].as_str().unwrap_or_default();
        match Expression::compile(src).and_then(|e| e.evaluate_bool(b)) {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(e) => {
                return Err(format!(
                    "failed to evaluate matchCondition {name:?}: {}",
                    cel_reason(&e)
                ));
            }
        }
    }
    Ok(true)
}

/// The reason of a CEL failure without the expression.
pub(crate) fn cel_reason(e: &CelError) -> String {
    match e {
        CelError::Compile { reason, .. } => format!("compilation failed: {reason}"),
        CelError::Evaluate { reason, .. } => reason.clone(),
        CelError::Type { .. } => e.to_string(),
    }
}

/// The params of a binding (`paramKind` of `policy`, `paramRef` of `binding`), as a query; `None`
/// when the policy has no `paramKind` or the binding no `paramRef` (evaluated once, with null
/// `params`).
pub(crate) fn param_query(
    policy: &Value,
    binding: &Value,
    req_ns: Option<&str>,
) -> Option<ParamQuery> {
    let kind = policy.pointer("/spec/paramKind")?;
    let r = binding.pointer("/spec/paramRef")?;
    Some(ParamQuery {
        api_version: kind["apiVersion"].as_str().unwrap_or_default().to_string(),
        kind: kind["kind"].as_str().unwrap_or_default().to_string(),
        name: r["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(str::to_string),
        namespace: r["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .or(req_ns)
            .map(str::to_string),
        selector: r.get("selector").map(|s| selector(Some(s))),
    })
}

/// What a binding does when its params are missing: `parameterNotFoundAction: Deny` refuses.
pub(crate) fn deny_without_params(binding: &Value) -> bool {
    binding
        .pointer("/spec/paramRef/parameterNotFoundAction")
        .and_then(Value::as_str)
        == Some("Deny")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
