//! kro's custom status conditions (`spec.schema.status.conditions`, each entry a
//! `runtime.newCondition(...)` or a list of them): when an RGD declares them, they are the
//! instance's `status.conditions` instead of kro's four, which stay readable as
//! `runtime.condition(schema, 'Ready')`. As kro (its docs' "Degraded evaluation"): an entry
//! whose data is not there yet is skipped, one that fails or repeats a type marks the instance's
//! `state` `Error`; in both cases the conditions written before for the types with no output
//! stay as they were, and a fully evaluated block replaces them all. Pure.

use kmeta_cel::Scope;
use serde_json::{Value, json};

use super::template::{Expr, RenderError, evaluate};

/// kro's own condition types an author's block replaces on the wire (not `Ready`, which an
/// author may define).
const KRO_ONLY: [&str; 3] = ["InstanceManaged", "GraphResolved", "ResourcesReady"];

/// The author's conditions evaluated in `scope` (where `schema` carries kro's own), stamped
/// as `instance`'s earlier ones were (`lastTransitionTime` kept while the status holds, else
/// `now`); whether the evaluation degraded (a failure or a repeated type).
pub(crate) fn custom(
    exprs: &[Expr],
    scope: &Scope,
    instance: &Value,
    now: &str,
) -> (Vec<Value>, bool) {
    let mut produced: Vec<Value> = Vec::new();
    let (mut degraded, mut skipped) = (false, false);
    for e in exprs {
        match evaluate(e, scope) {
            Ok(Value::Array(items)) => {
                for c in items {
                    degraded |= !add(&mut produced, c);
                }
            }
            Ok(c) => degraded |= !add(&mut produced, c),
            Err(RenderError::Missing { .. }) => skipped = true,
            Err(RenderError::Failed { .. }) => degraded = true,
        }
    }
    let before: Vec<Value> = instance
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let generation = instance.pointer("/metadata/generation").cloned();
    let mut out: Vec<Value> = produced
        .into_iter()
        .map(|c| stamp(c, &before, generation.as_ref(), now))
        .collect();
    if degraded || skipped {
        let kept: Vec<Value> = before
            .iter()
            .filter(|c| {
                let t = c["type"].as_str().unwrap_or_default();
                !KRO_ONLY.contains(&t)
                    && t != "Synced"
                    && !out.iter().any(|p| p["type"] == c["type"])
            })
            .cloned()
            .collect();
        out.extend(kept);
    }
    (out, degraded)
}

/// Adds condition `c` to `out`; false when it is not a condition or its type is there already.
fn add(out: &mut Vec<Value>, c: Value) -> bool {
    let typed = c
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| !t.is_empty());
    if !typed || out.iter().any(|p| p["type"] == c["type"]) {
        return false;
    }
    out.push(c);
    true
}

/// `c` with `lastTransitionTime` (kept from `before` while its status holds) and
/// `observedGeneration`.
fn stamp(mut c: Value, before: &[Value], generation: Option<&Value>, now: &str) -> Value {
    let since = before
        .iter()
        .find(|b| b["type"] == c["type"] && b["status"] == c["status"])
        .and_then(|b| b.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(now));
    c["lastTransitionTime"] = since;
    if let Some(g) = generation {
        c["observedGeneration"] = g.clone();
    }
    c
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::hook::cel::template::standalone;
    use kmeta_cel::Bindings;

    fn exprs(src: &[&str]) -> Vec<Expr> {
        src.iter()
            .enumerate()
            .map(|(i, s)| standalone(s, &format!("status.conditions[{i}]")).unwrap())
            .collect()
    }

    fn scope() -> Scope {
        Scope::kro(&Bindings::default().with("d", json!({"status": {"ready": 2}})))
    }

    #[test]
    fn conditions_are_built_stamped_and_kept_while_their_status_holds() {
        let e = exprs(&[
            "${runtime.newCondition({type: 'AppReady', status: d.status.ready > 0 ? 'True' : 'False', reason: 'ReplicaCount', message: ''})}",
            "${[1, 2].map(i, runtime.newCondition({type: 'Item' + string(i), status: 'True'}))}",
        ]);
        let before = json!({"metadata": {"generation": 3}, "status": {"conditions": [
            {"type": "AppReady", "status": "True", "lastTransitionTime": "then"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "then"}]}});
        let (out, degraded) = custom(&e, &scope(), &before, "now");
        assert!(!degraded);
        let types: Vec<&str> = out.iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            ["AppReady", "Item1", "Item2"],
            "a full evaluation replaces the wire"
        );
        assert_eq!(out[0]["lastTransitionTime"], "then");
        assert_eq!(out[0]["reason"], "ReplicaCount");
        assert_eq!(out[1]["lastTransitionTime"], "now");
        assert_eq!(out[1]["observedGeneration"], 3);
    }

    #[test]
    fn a_failure_or_a_repeated_type_degrades_and_earlier_conditions_stay() {
        let e = exprs(&[
            "${runtime.newCondition({type: 'A', status: 'True'})}",
            "${runtime.newCondition({type: 'A', status: 'False'})}",
            "${runtime.newCondition({type: 'B', status: 'Maybe'})}",
            "${runtime.newCondition({type: 'C', status: d.status.missing})}",
        ]);
        let before = json!({"status": {"conditions": [
            {"type": "B", "status": "True", "lastTransitionTime": "then"},
            {"type": "C", "status": "False", "lastTransitionTime": "then"},
            {"type": "GraphResolved", "status": "True"}]}});
        let (out, degraded) = custom(&e, &scope(), &before, "now");
        assert!(degraded);
        let types: Vec<&str> = out.iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["A", "B", "C"]);
        assert_eq!(
            out[0]["status"], "True",
            "the first of a repeated type is kept"
        );
        assert_eq!(out[1]["lastTransitionTime"], "then");
    }
}
