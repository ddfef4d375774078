//! A ResourceGraphDefinition's `spec` read into a graph: each resource's template (or external
//! reference), `includeWhen`, `readyWhen` and `forEach` compiled, its dependencies read from
//! the variables its expressions use, and the resources put in an order where each comes after
//! every resource it reads (kro's topological order: ties in the order written). Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::template::{Expr, Template, standalone};

/// The variable the instance is read through in kro's expressions.
pub(crate) const SCHEMA: &str = "schema";
/// The variable a collection's `readyWhen` reads each item through.
pub(crate) const EACH: &str = "each";

/// Why a ResourceGraphDefinition cannot be run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    /// The spec is not shaped as kro's.
    #[error("{path}: {message}")]
    Spec {
        /// Where.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// An expression does not parse (or is not written as kro requires).
    #[error("{path}: {expression}: {message}")]
    Expression {
        /// Where, inside its resource.
        path: String,
        /// The expression.
        expression: String,
        /// What is wrong.
        message: String,
    },
    /// An error inside one resource.
    #[error("resource {id:?}: {error}")]
    Resource {
        /// The resource's `id`.
        id: String,
        /// The error.
        error: Box<GraphError>,
    },
    /// The resources read each other in a cycle.
    #[error("resources read each other in a cycle: {}", .ids.join(" -> "))]
    Cycle {
        /// The resources of the cycle.
        ids: Vec<String>,
    },
}

/// What a resource is.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// Created from its template.
    Template(Template),
    /// An object that exists already, read, never written (`externalRef`).
    External(Template),
}

/// One resource of the graph.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    /// Its `id`, the variable other expressions read it through.
    pub id: String,
    /// `apiVersion` of its objects.
    pub api_version: String,
    /// `kind` of its objects.
    pub kind: String,
    /// Its template or external reference.
    pub source: Source,
    /// `includeWhen`: all must hold for it to exist.
    pub include_when: Vec<Expr>,
    /// `readyWhen`: all must hold for it to be ready.
    pub ready_when: Vec<Expr>,
    /// `forEach`: one dimension per entry, a variable and the list it ranges over.
    pub for_each: Vec<(String, Expr)>,
    /// The resources its expressions read (not itself).
    pub deps: BTreeSet<String>,
}

impl Node {
    /// Whether it expands into a collection.
    pub fn is_collection(&self) -> bool {
        !self.for_each.is_empty()
    }

    /// Every expression that decides what it is (not `readyWhen`).
    pub fn expressions(&self) -> Vec<&Expr> {
        let t = match &self.source {
            Source::Template(t) | Source::External(t) => t,
        };
        let mut out = t.expressions();
        out.extend(self.include_when.iter());
        out.extend(self.for_each.iter().map(|(_, e)| e));
        out
    }
}

/// A ResourceGraphDefinition ready to evaluate.
#[derive(Debug, Clone)]
pub(crate) struct Graph {
    /// The resources, each after those it reads.
    pub nodes: Vec<Node>,
    /// The instance's `status` expressions (`spec.schema.status`, but its `conditions`).
    pub status: Option<Template>,
    /// The author's status conditions (`spec.schema.status.conditions`, kro's custom status
    /// conditions), each a `runtime.newCondition` (or a list of them); none: kro's own.
    pub conditions: Vec<Expr>,
}

fn spec_err(path: &str, message: impl Into<String>) -> GraphError {
    GraphError::Spec {
        path: path.to_owned(),
        message: message.into(),
    }
}

/// `entry` of a list of standalone expressions at `path`.
fn expr_list(r: &Value, field: &str) -> Result<Vec<Expr>, GraphError> {
    let Some(list) = r.get(field).filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let list = list
        .as_array()
        .ok_or_else(|| spec_err(field, "must be a list of ${...} expressions"))?;
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            let path = format!("{field}[{i}]");
            let s = v
                .as_str()
                .ok_or_else(|| spec_err(&path, "must be a string"))?;
            standalone(s, &path)
        })
        .collect()
}

fn for_each(r: &Value) -> Result<Vec<(String, Expr)>, GraphError> {
    let Some(list) = r.get("forEach").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let list = list
        .as_array()
        .ok_or_else(|| spec_err("forEach", "must be a list of {variable: ${...}}"))?;
    let mut out = Vec::new();
    for (i, dim) in list.iter().enumerate() {
        let path = format!("forEach[{i}]");
        let one = dim.as_object().filter(|m| m.len() == 1);
        let Some((name, v)) = one.and_then(|m| m.iter().next()) else {
            return Err(spec_err(&path, "must have exactly one variable"));
        };
        let s = v
            .as_str()
            .ok_or_else(|| spec_err(&path, "must be a string"))?;
        out.push((name.clone(), standalone(s, &format!("{path}.{name}"))?));
    }
    Ok(out)
}

/// `apiVersion` and `kind` of `obj`, which must be written out (not expressions).
fn type_of(obj: &Value, at: &str) -> Result<(String, String), GraphError> {
    let field = |f: &str| {
        obj.get(f)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty() && !s.contains("${"))
            .map(str::to_owned)
            .ok_or_else(|| {
                spec_err(
                    &format!("{at}.{f}"),
                    "is required and cannot be an expression",
                )
            })
    };
    Ok((field("apiVersion")?, field("kind")?))
}

fn node(r: &Value) -> Result<Node, GraphError> {
    let id = r
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let (template, external) = (r.get("template"), r.get("externalRef"));
    let (source, (api_version, kind)) = match (template, external) {
        (Some(t), None) => (
            Source::Template(Template::compile(t, "template")?),
            type_of(t, "template")?,
        ),
        (None, Some(x)) => (
            Source::External(Template::compile(x, "externalRef")?),
            type_of(x, "externalRef")?,
        ),
        _ => {
            return Err(spec_err(
                "",
                "exactly one of template or externalRef must be provided",
            ));
        }
    };
    Ok(Node {
        id,
        api_version,
        kind,
        source,
        include_when: expr_list(r, "includeWhen")?,
        ready_when: expr_list(r, "readyWhen")?,
        for_each: for_each(r)?,
        deps: BTreeSet::new(),
    })
}

/// The words kro reserves (`pkg/graph/validation.go`): no resource id or `forEach` variable
/// may be one (CEL's reserved symbols, and kro's own).
const RESERVED: [&str; 53] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
    "apiVersion",
    "context",
    "dependency",
    "dependencies",
    "each",
    "externalRef",
    "externalReference",
    "externalRefs",
    "externalReferences",
    "graph",
    "instance",
    "item",
    "items",
    "kind",
    "kro",
    "metadata",
    "object",
    "resource",
    "resourcegraphdefinition",
    "resourceGraphDefinition",
    "resources",
    "root",
    "runtime",
    "schema",
    "self",
    "serviceAccountName",
    "spec",
    "status",
    "this",
    "variables",
    "vars",
    "version",
];

/// Why `name` cannot name a resource (`what`: `id`) or a `forEach` variable, if it cannot.
fn naming_error(name: &str, what: &str) -> Option<String> {
    if RESERVED.contains(&name) {
        return Some(format!("{name:?} is a word kro reserves"));
    }
    (!valid_id(name)).then(|| format!("{name:?} is not a valid {what} (lowerCamelCase)"))
}

/// Refuses `forEach` variables that kro refuses: not lowerCamelCase, reserved, used twice in
/// one resource, or the id of a resource.
fn check_variables(nodes: &[Node], ids: &BTreeSet<String>) -> Result<(), GraphError> {
    for n in nodes {
        let mut seen = BTreeSet::new();
        for (i, (var, _)) in n.for_each.iter().enumerate() {
            let message = naming_error(var, "variable")
                .or_else(|| (!seen.insert(var)).then(|| format!("{var:?} is used twice")))
                .or_else(|| {
                    ids.contains(var)
                        .then(|| format!("{var:?} is the id of a resource"))
                });
            if let Some(message) = message {
                return Err(GraphError::Resource {
                    id: n.id.clone(),
                    error: Box::new(spec_err(&format!("forEach[{i}]"), message)),
                });
            }
        }
    }
    Ok(())
}

/// Whether `id` can name a variable: kro's ids are lowerCamelCase identifiers.
fn valid_id(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase()) && chars.all(|c| c.is_ascii_alphanumeric())
}

/// Reads `spec` (a ResourceGraphDefinition's) into a graph in topological order.
pub(crate) fn parse(spec: &Value) -> Result<Graph, GraphError> {
    let resources = match spec.get("resources") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => return Err(spec_err("spec.resources", "must be a list")),
    };
    let mut nodes = Vec::with_capacity(resources.len());
    let mut seen = BTreeSet::new();
    for (i, r) in resources.iter().enumerate() {
        let id = r.get("id").and_then(Value::as_str).unwrap_or_default();
        let at = format!("spec.resources[{i}].id");
        if let Some(message) = naming_error(id, "id") {
            return Err(spec_err(&at, message));
        }
        if !seen.insert(id.to_owned()) {
            return Err(spec_err(&at, format!("{id:?} is used twice")));
        }
        let n = node(r).map_err(|error| GraphError::Resource {
            id: id.to_owned(),
            error: Box::new(error),
        })?;
        nodes.push(n);
    }
    check_variables(&nodes, &seen)?;
    let (status, conditions) = status(spec)?;
    refuse_runtime(&nodes, status.as_ref())?;
    link(&mut nodes);
    Ok(Graph {
        nodes: order(nodes)?,
        status,
        conditions,
    })
}

/// The status template (`spec.schema.status` but its `conditions`) and the author's
/// conditions, each a standalone expression.
fn status(spec: &Value) -> Result<(Option<Template>, Vec<Expr>), GraphError> {
    let mut written = match spec.pointer("/schema/status") {
        None | Some(Value::Null) => return Ok((None, Vec::new())),
        Some(s) => s.clone(),
    };
    let conditions = match written.as_object_mut().and_then(|m| m.remove("conditions")) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let path = format!("status.conditions[{i}]");
                let text = v
                    .as_str()
                    .ok_or_else(|| spec_err(&path, "must be a ${...} expression"))?;
                standalone(text, &path)
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(spec_err("status.conditions", "must be a list")),
    };
    Ok((Some(Template::compile(&written, "status")?), conditions))
}

/// The variable of kro's `runtime` library (custom status conditions).
const RUNTIME: &str = "runtime";

/// Refuses an expression using kro's `runtime` library outside the status's `conditions`, as
/// kro does when an RGD is created (it would otherwise read as data not there yet and be left
/// out without a word). A resource named `runtime` is read as that resource.
fn refuse_runtime(nodes: &[Node], status: Option<&Template>) -> Result<(), GraphError> {
    if nodes.iter().any(|n| n.id == RUNTIME) {
        return Ok(());
    }
    let refused = |e: &Expr| GraphError::Expression {
        path: e.path.clone(),
        expression: e.expression.source().to_owned(),
        message: "kro's runtime library is only allowed in the status's conditions".to_owned(),
    };
    for n in nodes {
        let mut all = n.expressions();
        all.extend(n.ready_when.iter());
        if let Some(e) = all.into_iter().find(|e| e.expression.uses(RUNTIME)) {
            return Err(GraphError::Resource {
                id: n.id.clone(),
                error: Box::new(refused(e)),
            });
        }
    }
    let in_status = status.map(Template::expressions).unwrap_or_default();
    match in_status.into_iter().find(|e| e.expression.uses(RUNTIME)) {
        Some(e) => Err(refused(e)),
        None => Ok(()),
    }
}

/// Fills each node's `deps`: the ids its expressions use.
fn link(nodes: &mut [Node]) {
    let ids: Vec<String> = nodes.iter().map(|n| n.id.clone()).collect();
    for n in nodes.iter_mut() {
        let own_vars: BTreeSet<&str> = n.for_each.iter().map(|(v, _)| v.as_str()).collect();
        let deps: BTreeSet<String> = ids
            .iter()
            .filter(|id| **id != n.id && !own_vars.contains(id.as_str()))
            .filter(|id| n.expressions().iter().any(|e| e.expression.uses(id)))
            .cloned()
            .collect();
        n.deps = deps;
    }
}

/// `nodes` with each after its dependencies, ties in the written order; a cycle is an error.
fn order(nodes: Vec<Node>) -> Result<Vec<Node>, GraphError> {
    let mut left: BTreeMap<usize, Node> = nodes.into_iter().enumerate().collect();
    let mut done: BTreeSet<String> = BTreeSet::new();
    let mut out = Vec::with_capacity(left.len());
    while !left.is_empty() {
        let next = left
            .iter()
            .find(|(_, n)| n.deps.iter().all(|d| done.contains(d)))
            .map(|(i, _)| *i);
        let Some(i) = next else {
            return Err(GraphError::Cycle {
                ids: cycle(&left.into_values().collect::<Vec<_>>()),
            });
        };
        if let Some(n) = left.remove(&i) {
            done.insert(n.id.clone());
            out.push(n);
        }
    }
    Ok(out)
}

/// One cycle among `stuck` (nodes none of which can come first), as ids, its first repeated
/// at its end.
fn cycle(stuck: &[Node]) -> Vec<String> {
    let by_id: BTreeMap<&str, &Node> = stuck.iter().map(|n| (n.id.as_str(), n)).collect();
    let mut path: Vec<String> = Vec::new();
    let mut at = stuck.first().map(|n| n.id.as_str());
    while let Some(id) = at {
        if let Some(p) = path.iter().position(|x| x == id) {
            let mut c = path[p..].to_vec();
            c.push(id.to_owned());
            return c;
        }
        path.push(id.to_owned());
        at = by_id
            .get(id)
            .and_then(|n| n.deps.iter().find(|d| by_id.contains_key(d.as_str())))
            .map(String::as_str);
    }
    path
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ids(g: &Graph) -> Vec<&str> {
        g.nodes.iter().map(|n| n.id.as_str()).collect()
    }

    #[test]
    fn kros_runtime_library_is_read_in_the_status_conditions_only() {
        let spec = json!({"schema": {"status": {"ready": "${runtime.condition(schema, 'Ready')}",
            "conditions": ["${runtime.newCondition({type: 'AppReady', status: 'True'})}"]}},
            "resources": []});
        let e = parse(&spec).unwrap_err().to_string();
        assert!(
            e.starts_with("status.ready: runtime.condition(")
                && e.ends_with("kro's runtime library is only allowed in the status's conditions"),
            "{e}"
        );
        let spec = json!({"schema": {"status": {"n": "${schema.spec.n}",
            "conditions": ["${runtime.newCondition({type: 'AppReady', status: 'True'})}"]}},
            "resources": []});
        let g = parse(&spec).unwrap();
        assert_eq!(g.conditions.len(), 1);
        assert_eq!(g.conditions[0].path, "status.conditions[0]");
        assert_eq!(
            g.status.unwrap().expressions().len(),
            1,
            "conditions are not status fields"
        );
        let own = json!({"resources": [{"id": "runtime", "template": {"apiVersion": "v1",
            "kind": "ConfigMap", "metadata": {"name": "rt"}}},
            {"id": "reader", "template": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "${runtime.metadata.name}-r"}}}]});
        assert_eq!(
            parse(&own).unwrap_err().to_string(),
            "spec.resources[0].id: \"runtime\" is a word kro reserves",
            "kro reserves runtime"
        );
    }

    #[test]
    fn ids_and_for_each_variables_follow_kros_naming() {
        let cm = |id: &str, for_each: Value| {
            json!({"id": id, "forEach": for_each, "template": {"apiVersion": "v1",
                "kind": "ConfigMap", "metadata": {"name": "x"}}})
        };
        let cases = [
            (
                vec![cm("self", json!(null))],
                "spec.resources[0].id: \"self\" is a word kro reserves",
            ),
            (
                vec![cm("in", json!(null))],
                "spec.resources[0].id: \"in\" is a word kro reserves",
            ),
            (
                vec![cm("Web", json!(null))],
                "spec.resources[0].id: \"Web\" is not a valid id (lowerCamelCase)",
            ),
            (
                vec![cm("a", json!([{"item": "${[1]}"}]))],
                "resource \"a\": forEach[0]: \"item\" is a word kro reserves",
            ),
            (
                vec![cm("a", json!([{"Name": "${[1]}"}]))],
                "resource \"a\": forEach[0]: \"Name\" is not a valid variable (lowerCamelCase)",
            ),
            (
                vec![cm("a", json!([{"n": "${[1]}"}, {"n": "${[2]}"}]))],
                "resource \"a\": forEach[1]: \"n\" is used twice",
            ),
            (
                vec![cm("a", json!([{"b": "${[1]}"}])), cm("b", json!(null))],
                "resource \"a\": forEach[0]: \"b\" is the id of a resource",
            ),
        ];
        for (resources, want) in cases {
            let e = parse(&json!({"resources": resources})).unwrap_err();
            assert_eq!(e.to_string(), want);
        }
    }

    #[test]
    fn resources_are_ordered_by_what_they_read() {
        let spec = json!({"resources": [
            {"id": "ingress", "template": {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": "${service.metadata.name}"}}},
            {"id": "service", "template": {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "${deployment.metadata.name}"}}},
            {"id": "deployment", "template": {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "${schema.spec.name}"}}},
            {"id": "config", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c"}}},
        ]});
        let g = parse(&spec).unwrap();
        assert_eq!(ids(&g), ["deployment", "service", "ingress", "config"]);
        assert_eq!(g.nodes[1].deps.iter().collect::<Vec<_>>(), ["deployment"]);
    }

    #[test]
    fn a_cycle_is_named() {
        let spec = json!({"resources": [
            {"id": "a", "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "${b.metadata.name}"}}},
            {"id": "b", "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "${a.metadata.name}"}}},
        ]});
        let e = parse(&spec).unwrap_err();
        assert_eq!(
            e.to_string(),
            "resources read each other in a cycle: a -> b -> a"
        );
    }

    #[test]
    fn a_bad_expression_names_its_resource_and_path() {
        let spec = json!({"resources": [
            {"id": "web", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                "data": {"k": "${schema.spec.}"}}},
        ]});
        let e = parse(&spec).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("resource \"web\": template.data.k: schema.spec.:"),
            "{text}"
        );
        let spec = json!({"resources": [{"id": "Web", "template": {}}]});
        assert!(
            parse(&spec)
                .unwrap_err()
                .to_string()
                .contains("not a valid id")
        );
        let spec = json!({"resources": [{"id": "web", "template": {"apiVersion": "v1", "kind": "ConfigMap"},
            "readyWhen": ["ready"]}]});
        assert!(
            parse(&spec)
                .unwrap_err()
                .to_string()
                .contains("readyWhen[0]")
        );
    }

    #[test]
    fn for_each_variables_are_not_dependencies() {
        let spec = json!({"resources": [
            {"id": "pods", "forEach": [{"name": "${schema.spec.names}"}],
             "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "${name}"}}},
        ]});
        let g = parse(&spec).unwrap();
        assert!(g.nodes[0].is_collection() && g.nodes[0].deps.is_empty());
    }
}
