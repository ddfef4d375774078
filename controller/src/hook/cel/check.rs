//! A graph checked against the instance's schema before it runs: every field an expression
//! selects under `schema.spec` must exist in the spec's OpenAPI schema (generated from the
//! SimpleSchema), so a typo is refused when the RGD is created, naming the resource, the field
//! path and the expression, not when an instance first syncs. Objects that keep unknown fields
//! and maps accept any field. The children's kinds are not checked against their OpenAPI yet
//! (docs/design/cel-hooks.md). Pure.

use serde_json::Value;

use super::graph::{Graph, GraphError, SCHEMA};
use super::template::Expr;

/// The first field of `fields` that `schema` does not have, with the fields it has; `None` when
/// every field is there or the schema accepts any.
fn unknown<'a>(schema: &Value, fields: &'a [String]) -> Option<(&'a str, Vec<String>)> {
    let mut at = schema;
    for f in fields {
        if at.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
            return None;
        }
        if let Some(v) = at.get("additionalProperties").filter(|v| v.is_object()) {
            at = v;
            continue;
        }
        let props = at.get("properties").and_then(Value::as_object)?;
        match props.get(f) {
            Some(next) => at = next,
            None => return Some((f.as_str(), props.keys().cloned().collect())),
        }
    }
    None
}

fn check_expr(e: &Expr, spec: &Value) -> Result<(), GraphError> {
    for sel in e.expression.selections() {
        let [root, first, rest @ ..] = sel.as_slice() else {
            continue;
        };
        if root != SCHEMA || first != "spec" {
            continue;
        }
        if let Some((field, known)) = unknown(spec, rest) {
            return Err(GraphError::Expression {
                path: e.path.clone(),
                expression: e.expression.source().to_owned(),
                message: format!(
                    "{}: the instance's spec has no field {field:?} there (it has: {})",
                    sel.join("."),
                    known.join(", ")
                ),
            });
        }
    }
    Ok(())
}

/// Checks every expression of `graph` against `spec`, the OpenAPI schema of the instance's
/// `spec`.
pub(crate) fn check_instance_fields(graph: &Graph, spec: &Value) -> Result<(), GraphError> {
    for n in &graph.nodes {
        let mut exprs = n.expressions();
        exprs.extend(n.ready_when.iter());
        let in_node = exprs.into_iter().try_for_each(|e| check_expr(e, spec));
        in_node.map_err(|error| GraphError::Resource {
            id: n.id.clone(),
            error: Box::new(error),
        })?;
    }
    if let Some(status) = &graph.status {
        status
            .expressions()
            .into_iter()
            .try_for_each(|e| check_expr(e, spec))?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::hook::cel::graph::parse;
    use serde_json::json;

    fn spec() -> Value {
        json!({"type": "object", "properties": {
            "name": {"type": "string"},
            "service": {"type": "object", "properties": {"enabled": {"type": "boolean"}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}})
    }

    #[test]
    fn a_typo_in_a_spec_field_is_named_with_its_resource_path_and_expression() {
        let g = parse(&json!({"resources": [{"id": "svc",
            "includeWhen": ["${schema.spec.service.enable}"],
            "template": {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "${schema.spec.name}"}}}]}))
        .unwrap();
        let e = check_instance_fields(&g, &spec()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "resource \"svc\": includeWhen[0]: schema.spec.service.enable: schema.spec.service.enable: \
             the instance's spec has no field \"enable\" there (it has: enabled)"
        );
    }

    #[test]
    fn maps_unknown_fields_metadata_and_other_resources_pass() {
        let g = parse(&json!({"resources": [{"id": "cm",
            "template": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "${schema.metadata.name}", "labels": "${schema.spec.labels}"},
                "data": {"a": "${schema.spec.labels.team}", "b": "${schema.spec.extra.x.y}",
                         "c": "${string(has(schema.spec.service.enabled))}"}}}],
            "schema": {"status": {"n": "${cm.data.a}"}}}))
        .unwrap();
        check_instance_fields(&g, &spec()).unwrap();
    }
}
