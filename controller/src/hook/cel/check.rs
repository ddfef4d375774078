//! A graph type-checked before it runs, as kro's builder does with cel-go's checker: every
//! expression is checked ([`kmeta_cel::types`]) with `schema` typed by the instance CRD's
//! OpenAPI schema (generated from the SimpleSchema) and each resource's id by its kind's
//! OpenAPI schema (a CRD's, or the API server's `/openapi/v3`; `dyn` when neither is known),
//! so a field that does not exist, an operator on the wrong types, an `includeWhen`/`readyWhen`
//! that is not a bool, a `forEach` that is not a list, or a standalone `${...}` whose type is
//! not the type of the template field it is placed in is refused when the RGD is created,
//! naming the resource, the field path and the expression, not when an instance first syncs.
//! What the checker does not check: `kmeta_cel::types`' docs. Pure.

use kmeta_cel::{Type, TypeEnv};

use super::graph::{EACH, Graph, GraphError, Node, SCHEMA, Source};
use super::template::{Expr, Part, Template};

fn expr_err(e: &Expr, message: String) -> GraphError {
    GraphError::Expression {
        path: e.path.clone(),
        expression: e.expression.source().to_owned(),
        message,
    }
}

/// Refuses kro's `omit()` outside a resource's template, as kro does (`includeWhen`,
/// `readyWhen`, `forEach`, the instance's status).
fn no_omit(e: &Expr) -> Result<(), GraphError> {
    match e.expression.calls("omit") {
        true => Err(expr_err(
            e,
            "omit() can only be used in resource template expressions".to_owned(),
        )),
        false => Ok(()),
    }
}

/// The type of `e` in `env`, its failure placed.
fn type_of(e: &Expr, env: &TypeEnv) -> Result<Type, GraphError> {
    e.expression
        .check(env)
        .map_err(|err| expr_err(e, err.to_string()))
}

/// Checks that `e` is of a type `want` accepts (`what` says where it is).
fn expect(e: &Expr, env: &TypeEnv, want: &Type, what: &str) -> Result<(), GraphError> {
    let got = type_of(e, env)?;
    if want.accepts(&got) {
        return Ok(());
    }
    Err(expr_err(
        e,
        format!("returns {got}, but {what} must be {want}"),
    ))
}

/// Checks the expressions of template `t`, placed where values of type `want` go.
fn check_template(t: &Template, want: &Type, env: &TypeEnv) -> Result<(), GraphError> {
    match t {
        Template::Literal(_) => Ok(()),
        Template::Standalone(e) => expect(e, env, want, "the field"),
        Template::Interpolated(parts) => {
            for p in parts {
                if let Part::Expr(e) = p {
                    expect(e, env, &Type::String, "an expression inside a string")?;
                }
            }
            if want.accepts(&Type::String) {
                return Ok(());
            }
            let first = parts.iter().find_map(|p| match p {
                Part::Expr(e) => Some(e),
                Part::Text(_) => None,
            });
            match first {
                Some(e) => Err(expr_err(
                    e,
                    format!(
                        "the field must be {want}, a string with text and expressions is a string"
                    ),
                )),
                None => Ok(()),
            }
        }
        Template::Object(fields) => fields
            .iter()
            .try_for_each(|(k, t)| check_template(t, &want.field(k), env)),
        Template::Array(items) => items
            .iter()
            .try_for_each(|t| check_template(t, &want.items(), env)),
    }
}

/// The paths of a template's fields that name its objects: a `forEach` dimension must be
/// used in one of them, so each object of a collection has a name of its own.
const IDENTITY: [&str; 2] = ["template.metadata.name", "template.metadata.namespace"];

/// Refuses a collection whose objects' name (or namespace) does not use every `forEach`
/// dimension, as kro does (its objects would share a name).
fn check_identity(n: &Node) -> Result<(), GraphError> {
    let Source::Template(t) = &n.source else {
        return Ok(());
    };
    let identity: Vec<&Expr> = t
        .expressions()
        .into_iter()
        .filter(|e| IDENTITY.contains(&e.path.as_str()))
        .collect();
    let missing: Vec<&str> = n
        .for_each
        .iter()
        .map(|(var, _)| var.as_str())
        .filter(|var| !identity.iter().any(|e| e.expression.uses(var)))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(GraphError::Spec {
        path: "forEach".to_owned(),
        message: format!(
            "every dimension must be used in metadata.name or metadata.namespace, so each \
             object has a name of its own; not used: {}",
            missing.join(", ")
        ),
    })
}

/// Checks `n`'s `readyWhen`: each reads only the resource itself (`each` for a collection),
/// as kro allows, and is a bool; `kind` is the type of its objects.
fn check_ready_when(n: &Node, kind: &Type, env: &TypeEnv) -> Result<(), GraphError> {
    let (own, ty) = match n.is_collection() {
        true => (EACH, kind.clone()),
        false if by_selector(n) => (n.id.as_str(), Type::List(Box::new(kind.clone()))),
        false => (n.id.as_str(), kind.clone()),
    };
    let ready = TypeEnv::kro().with(own, ty);
    for e in &n.ready_when {
        no_omit(e)?;
        let other = e
            .expression
            .variables()
            .into_iter()
            .find(|v| v != own && env.has(v));
        if let Some(other) = other {
            let message =
                format!("readyWhen may read only {own:?} (the resource itself), not {other:?}");
            return Err(expr_err(e, message));
        }
        expect(e, &ready, &Type::Bool, "readyWhen")?;
    }
    Ok(())
}

/// Checks one resource in `env` (where every resource's id is declared); `kind` is the type
/// of its objects.
fn check_node(n: &Node, kind: &Type, env: &TypeEnv) -> Result<(), GraphError> {
    let mut own = env.clone();
    for (var, e) in &n.for_each {
        no_omit(e)?;
        let items = match type_of(e, env)? {
            Type::List(t) => *t,
            Type::Dyn => Type::Dyn,
            other => {
                return Err(expr_err(
                    e,
                    format!("returns {other}, but forEach must return a list"),
                ));
            }
        };
        own.set(var, items);
    }
    for e in &n.include_when {
        no_omit(e)?;
        expect(e, env, &Type::Bool, "includeWhen")?;
    }
    let (Source::Template(t) | Source::External(t)) = &n.source;
    check_template(t, kind, &own)?;
    check_identity(n)?;
    check_ready_when(n, kind, env)
}

/// Checks the instance's status: every field an expression (kro refuses a field without one),
/// every expression reading the instance or a resource (kro: "must refer to a resource or
/// schema"), of the type of its field; the author's conditions with `runtime` declared.
fn check_status(graph: &Graph, instance: &Type, env: &TypeEnv) -> Result<(), GraphError> {
    if let Some(status) = &graph.status {
        if let Some(path) = literal_field(status, "status") {
            return Err(GraphError::Spec {
                path,
                message: "a status field must be an expression (${...})".to_owned(),
            });
        }
        for e in status.expressions() {
            no_omit(e)?;
            let vars = e.expression.variables();
            if !vars.iter().any(|v| env.has(v)) {
                let message = "a status field must read the instance (schema) or a resource";
                return Err(expr_err(e, message.to_owned()));
            }
        }
        check_template(status, &instance.field("status"), env)?;
    }
    // `runtime.newCondition`/`runtime.condition` are functions (kro's `runtime` library)
    graph
        .conditions
        .iter()
        .try_for_each(|e| no_omit(e).and_then(|()| type_of(e, env).map(|_| ())))
}

/// The path of the first field of `t` (at `path`) holding no expression.
fn literal_field(t: &Template, path: &str) -> Option<String> {
    match t {
        Template::Literal(v) => literal_leaf(v, path),
        Template::Standalone(_) | Template::Interpolated(_) => None,
        Template::Object(fields) => fields
            .iter()
            .find_map(|(k, t)| literal_field(t, &format!("{path}.{k}"))),
        Template::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, t)| literal_field(t, &format!("{path}[{i}]"))),
    }
}

/// The path of the first leaf of `v` (at `path`); an empty object or list is none.
fn literal_leaf(v: &serde_json::Value, path: &str) -> Option<String> {
    match v {
        serde_json::Value::Object(m) => m
            .iter()
            .find_map(|(k, v)| literal_leaf(v, &format!("{path}.{k}"))),
        serde_json::Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, v)| literal_leaf(v, &format!("{path}[{i}]"))),
        _ => Some(path.to_owned()),
    }
}

/// Whether `n` is an external reference by a label selector (`externalRef.metadata.selector`):
/// a collection, read as a list.
fn by_selector(n: &Node) -> bool {
    let Source::External(t) = &n.source else {
        return false;
    };
    let metadata = match t {
        Template::Literal(v) => return v.pointer("/metadata/selector").is_some(),
        Template::Object(fields) => fields.iter().find(|(k, _)| k == "metadata").map(|(_, t)| t),
        _ => None,
    };
    match metadata {
        Some(Template::Literal(v)) => v.get("selector").is_some(),
        Some(Template::Object(fields)) => fields.iter().any(|(k, _)| k == "selector"),
        _ => false,
    }
}

/// Type-checks every expression of `graph`: `instance` is the type of the instance (its CRD's
/// schema), `kind_of` gives the type of a kind's objects (`dyn` when its schema is not known).
pub(crate) fn check_types(
    graph: &Graph,
    instance: &Type,
    kind_of: &dyn Fn(&str, &str) -> Type,
) -> Result<(), GraphError> {
    let mut env = TypeEnv::kro().with(SCHEMA, instance.clone());
    for n in &graph.nodes {
        let kind = kind_of(&n.api_version, &n.kind);
        let ty = if n.is_collection() || by_selector(n) {
            Type::List(Box::new(kind))
        } else {
            kind
        };
        env.set(&n.id, ty);
    }
    for n in &graph.nodes {
        let kind = kind_of(&n.api_version, &n.kind);
        check_node(n, &kind, &env).map_err(|error| GraphError::Resource {
            id: n.id.clone(),
            error: Box::new(error),
        })?;
    }
    check_status(graph, instance, &env)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::hook::cel::graph::parse;
    use kmeta_cel::Schema;
    use serde_json::{Value, json};

    fn instance() -> Type {
        Schema::new(json!({"type": "object", "properties": {
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "name": {"type": "string"},
                "replicas": {"type": "integer"},
                "names": {"type": "array", "items": {"type": "string"}},
                "service": {"type": "object", "properties": {"enabled": {"type": "boolean"}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                "properties": {"state": {"type": "string"}}}}}))
        .to_type()
    }

    fn kinds(_: &str, kind: &str) -> Type {
        let schema = match kind {
            "Deployment" => json!({"type": "object", "properties": {
                "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
                "spec": {"type": "object", "properties": {"replicas": {"type": "integer"},
                    "paused": {"type": "boolean"}}},
                "status": {"type": "object", "properties": {"availableReplicas": {"type": "integer"}}}}}),
            _ => return Type::Dyn,
        };
        Schema::new(schema).to_type()
    }

    fn check(resources: Value, status: Value) -> Result<(), GraphError> {
        let g = parse(&json!({"resources": resources, "schema": {"status": status}})).unwrap();
        check_types(&g, &instance(), &kinds)
    }

    fn deployment(spec: Value) -> Value {
        json!([{"id": "deployment", "template": {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "${schema.spec.name}"}, "spec": spec}}])
    }

    #[test]
    fn a_graph_of_well_typed_expressions_passes() {
        let mut resources = deployment(json!({"replicas": "${schema.spec.replicas * 2}"}));
        resources.as_array_mut().unwrap().extend([
            json!({"id": "cm", "includeWhen": ["${schema.spec.service.enabled}"],
                "readyWhen": ["${has(cm.data)}"],
                "template": {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "${deployment.metadata.name}-cm", "labels": "${schema.spec.labels}"},
                    "data": {"a": "${schema.spec.labels.team}", "b": "${schema.spec.extra.x.y}",
                        "n": "${string(deployment.status.availableReplicas)}"}}}),
            json!({"id": "pods", "forEach": [{"name": "${schema.spec.names}"}],
                "readyWhen": ["${each.status.availableReplicas > 0}"],
                "template": {"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "${name + '-x'}"}}}),
        ]);
        let status = json!({"available": "${deployment.status.availableReplicas}",
            "names": "${pods.map(p, p.metadata.name)}", "state": "${schema.spec.name + 'x'}"});
        check(resources, status).unwrap();
    }

    #[test]
    fn each_kind_of_type_error_names_its_resource_path_and_expression() {
        let cases = [
            (
                deployment(json!({"replicas": "${schema.spec.name}"})),
                json!({}),
                "resource \"deployment\": template.spec.replicas: schema.spec.name: returns string, but the field must be int",
            ),
            (
                deployment(json!({"replicas": "${schema.spec.replicas + \"x\"}"})),
                json!({}),
                "resource \"deployment\": template.spec.replicas: schema.spec.replicas + \"x\": found no matching overload for \"_+_\" applied to (int, string)",
            ),
            (
                deployment(json!({"replicas": "n-${schema.spec.name}"})),
                json!({}),
                "resource \"deployment\": template.spec.replicas: schema.spec.name: the field must be int, a string with text and expressions is a string",
            ),
            (
                deployment(json!({"paused": "${schema.spec.service.enable}"})),
                json!({}),
                "resource \"deployment\": template.spec.paused: schema.spec.service.enable: schema.spec.service has no field \"enable\" (it has: enabled)",
            ),
            (
                deployment(json!({})),
                json!({"n": "${deployment.status.availableReplica}"}),
                "status.n: deployment.status.availableReplica: deployment.status has no field \"availableReplica\" (it has: availableReplicas)",
            ),
            (
                json!([{"id": "cm", "includeWhen": ["${schema.spec.name}"],
                    "template": {"apiVersion": "v1", "kind": "ConfigMap"}}]),
                json!({}),
                "resource \"cm\": includeWhen[0]: schema.spec.name: returns string, but includeWhen must be bool",
            ),
            (
                json!([{"id": "cm", "forEach": [{"n": "${schema.spec.name}"}],
                    "template": {"apiVersion": "v1", "kind": "ConfigMap"}}]),
                json!({}),
                "resource \"cm\": forEach[0].n: schema.spec.name: returns string, but forEach must return a list",
            ),
            (
                json!([{"id": "cm", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                    "data": {"a": "${nope.x}"}}}]),
                json!({}),
                "resource \"cm\": template.data.a: nope.x: undeclared reference to \"nope\" (declared: cm, schema)",
            ),
        ];
        for (resources, status, want) in cases {
            assert_eq!(check(resources, status).unwrap_err().to_string(), want);
        }
    }

    #[test]
    fn what_kro_refuses_when_an_rgd_is_created_is_refused_with_its_place() {
        let cm = |extra: Value| {
            let mut r = json!({"id": "cm", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "x"}}});
            r.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            r
        };
        let cases = [
            (
                deployment(json!({"replicas": "${size(schema.spec.name.lowerAsci())}"})),
                json!({}),
                "resource \"deployment\": template.spec.replicas: size(schema.spec.name.lowerAsci()): undeclared reference to function \"lowerAsci\"",
            ),
            (
                json!([cm(
                    json!({"template": {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "${random.seedString(5, schema.spec.name)}"}}})
                )]),
                json!({}),
                "resource \"cm\": template.metadata.name: random.seedString(5, schema.spec.name): undeclared reference to function \"random.seedString\"",
            ),
            (
                json!([cm(json!({"readyWhen": ["${schema.spec.replicas > 0}"]}))]),
                json!({}),
                "resource \"cm\": readyWhen[0]: schema.spec.replicas > 0: readyWhen may read only \"cm\" (the resource itself), not \"schema\"",
            ),
            (
                json!([
                    deployment(json!({}))[0].clone(),
                    cm(json!({"readyWhen": ["${deployment.status.availableReplicas > 0}"]}))
                ]),
                json!({}),
                "resource \"cm\": readyWhen[0]: deployment.status.availableReplicas > 0: readyWhen may read only \"cm\" (the resource itself), not \"deployment\"",
            ),
            (
                json!([cm(json!({"forEach": [{"n": "${schema.spec.names}"}],
                    "readyWhen": ["${cm.size() > 0}"],
                    "template": {"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "${n}"}}}))]),
                json!({}),
                "resource \"cm\": readyWhen[0]: cm.size() > 0: readyWhen may read only \"each\" (the resource itself), not \"cm\"",
            ),
            (
                json!([cm(json!({"forEach": [{"n": "${schema.spec.names}"}],
                    "template": {"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "fixed"}, "data": {"n": "${n}"}}}))]),
                json!({}),
                "resource \"cm\": forEach: every dimension must be used in metadata.name or metadata.namespace, so each object has a name of its own; not used: n",
            ),
            (
                json!([cm(json!({"includeWhen": ["${omit() == null}"]}))]),
                json!({}),
                "resource \"cm\": includeWhen[0]: omit() == null: omit() can only be used in resource template expressions",
            ),
            (
                json!([cm(json!({}))]),
                json!({"phase": "${'Ready'}"}),
                "status.phase: 'Ready': a status field must read the instance (schema) or a resource",
            ),
            (
                json!([cm(json!({}))]),
                json!({"phase": "Ready", "n": "${schema.spec.name}"}),
                "status.phase: a status field must be an expression (${...})",
            ),
            (
                json!([cm(json!({}))]),
                json!({"conditions": ["${runtime.newCondition({type: 'A', status: cms.data.x})}"]}),
                "status.conditions[0]: runtime.newCondition({type: 'A', status: cms.data.x}): undeclared reference to \"cms\" (declared: cm, schema)",
            ),
        ];
        for (resources, status, want) in cases {
            assert_eq!(check(resources, status).unwrap_err().to_string(), want);
        }
    }

    #[test]
    fn an_external_reference_by_selector_is_a_list() {
        let resources = json!([
            {"id": "peers", "externalRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"selector": {"matchLabels": {"team": "${schema.spec.name}"}}}},
             "readyWhen": ["${size(peers) > 0}"]},
            {"id": "one", "externalRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "${schema.spec.name}"}},
             "readyWhen": ["${one.status.availableReplicas > 0}"]},
            {"id": "cm", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                "data": {"names": "${peers.map(p, p.metadata.name).join(',')}",
                         "one": "${one.metadata.name}"}}}]);
        check(resources, json!({"n": "${size(peers)}"})).unwrap();
    }

    #[test]
    fn ready_when_reads_the_resource_itself_typed() {
        let mut r = deployment(json!({}));
        r[0]["readyWhen"] = json!(["${deployment.status.availableReplicas}"]);
        let e = check(r, json!({})).unwrap_err().to_string();
        assert!(
            e.ends_with("returns int, but readyWhen must be bool"),
            "{e}"
        );
    }
}
