//! One sync of a ResourceGraphDefinition's instance, as kro's runtime decides it
//! (`pkg/runtime/`): each resource in the graph's order waits until every resource it reads
//! exists and is ready (`readyWhen`), is left out while an `includeWhen` is false (and so are
//! the resources reading it), expands over its `forEach` lists, and is rendered with the
//! instance (`schema`) and the observed objects it reads. A resource whose data is not there yet
//! waits for a later sync; its objects already made are kept as last written, never deleted
//! for the wait (kro does not prune while the graph is unresolved). Pure: the observed objects
//! come in, the desired children and the instance's status go out.

use std::collections::BTreeMap;

use kmeta_cel::{Bindings, Scope};
use serde_json::{Map, Value, json};

use super::conditions;
use super::graph::{EACH, Graph, Node, SCHEMA, Source};
use super::template::{RenderError, evaluate};

/// The label naming the resource of the graph an object was made for (kro's).
pub(crate) const NODE_ID_LABEL: &str = "kro.run/node-id";
/// The label giving an item's place in its collection (kro's).
pub(crate) const COLLECTION_INDEX_LABEL: &str = "kro.run/collection-index";

/// What a sync found of one resource.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum State {
    /// `includeWhen` is false, or it reads a resource left out.
    Excluded,
    /// Its data is not there yet: why.
    Waiting(String),
    /// Its objects exist and `readyWhen` holds.
    Ready,
    /// Its objects are desired but not ready: why.
    NotReady(String),
}

/// An expression that failed for good, with its resource.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("resource {id:?}: {error}")]
pub struct EvalError {
    /// The resource's id (`status` for the instance's status).
    pub id: String,
    /// Where, which expression, why.
    pub error: String,
}

/// What one sync decides.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Outcome {
    /// The desired children.
    pub children: Vec<Value>,
    /// The instance's status: its expressions' values, `state` and `conditions`.
    pub status: Value,
    /// Each resource's state, in the graph's order.
    pub states: Vec<(String, State)>,
}

/// The objects observed for each resource id (a collection's in index order), and the external
/// objects found, by id.
#[derive(Debug, Clone, Default)]
pub(crate) struct Observed {
    /// Children made for a resource, by the resource's id.
    pub children: BTreeMap<String, Vec<Value>>,
    /// External references found, by the resource's id.
    pub external: BTreeMap<String, Value>,
}

struct Run<'a> {
    /// Each resource's apply order (`teardown::apply_orders`).
    orders: BTreeMap<String, u64>,
    scope: Scope,
    instance: &'a Value,
    observed: &'a Observed,
    states: BTreeMap<String, State>,
    children: Vec<Value>,
}

fn failed(id: &str, e: &RenderError) -> EvalError {
    EvalError {
        id: id.to_owned(),
        error: e.to_string(),
    }
}

/// The sync of `instance` by `graph`, given what is `observed`; `now` (RFC 3339) stamps
/// conditions that change.
pub(crate) fn evaluate_graph(
    graph: &Graph,
    instance: &Value,
    observed: &Observed,
    now: &str,
) -> Result<Outcome, EvalError> {
    let scope = Scope::kro(&Bindings::default().with(SCHEMA, instance.clone()));
    let mut run = Run {
        orders: super::teardown::apply_orders(graph),
        scope,
        instance,
        observed,
        states: BTreeMap::new(),
        children: Vec::new(),
    };
    let mut states = Vec::with_capacity(graph.nodes.len());
    for node in &graph.nodes {
        let state = run.visit(node)?;
        run.states.insert(node.id.clone(), state.clone());
        states.push((node.id.clone(), state));
    }
    let mut status = match &graph.status {
        Some(t) => t
            .render_available(&run.scope)
            .map_err(|e| failed("status", &e))?
            .unwrap_or_else(|| json!({})),
        None => json!({}),
    };
    decorate_status(&mut status, instance, &states, now);
    if !graph.conditions.is_empty() {
        // the author's conditions read kro's own through `runtime.condition(schema, ...)`
        let mut with_kros = instance.clone();
        with_kros["status"]["conditions"] = status["conditions"].clone();
        run.scope.set(SCHEMA, &with_kros);
        let (custom, degraded) = conditions::custom(&graph.conditions, &run.scope, instance, now);
        status["conditions"] = Value::Array(custom);
        if degraded {
            status["state"] = json!("Error");
        }
    }
    Ok(Outcome {
        children: run.children,
        status,
        states,
    })
}

impl Run<'_> {
    fn visit(&mut self, node: &Node) -> Result<State, EvalError> {
        for dep in &node.deps {
            match self.states.get(dep) {
                Some(State::Excluded) => return Ok(State::Excluded),
                Some(State::Ready) => {}
                Some(State::Waiting(_) | State::NotReady(_)) | None => {
                    return Ok(self.wait(node, format!("waiting for {dep} to be ready")));
                }
            }
        }
        for e in &node.include_when {
            match evaluate(e, &self.scope) {
                Ok(Value::Bool(true)) => {}
                Ok(Value::Bool(false)) => return Ok(State::Excluded),
                Ok(other) => {
                    let why = format!(
                        "{}: ${{{}}}: includeWhen must be a bool, got {other}",
                        e.path,
                        e.expression.source()
                    );
                    return Err(EvalError {
                        id: node.id.clone(),
                        error: why,
                    });
                }
                Err(RenderError::Missing { .. }) => {
                    return Ok(self.wait(node, format!("includeWhen {} waits for data", e.path)));
                }
                Err(err) => return Err(failed(&node.id, &err)),
            }
        }
        match &node.source {
            Source::External(t) => self.external(node, t),
            Source::Template(_) => self.template(node),
        }
    }

    /// `node` waits: its objects already made are kept as they were last written.
    fn wait(&mut self, node: &Node, why: String) -> State {
        if let Some(objs) = self.observed.children.get(&node.id) {
            self.children.extend(objs.iter().map(kept));
            self.bind(node, objs);
        }
        State::Waiting(why)
    }

    fn external(&mut self, node: &Node, t: &super::template::Template) -> Result<State, EvalError> {
        t.render(&self.scope).map_err(|e| failed(&node.id, &e))?;
        let Some(obj) = self.observed.external.get(&node.id) else {
            return Ok(State::Waiting(format!(
                "waiting for the external {} to exist",
                node.kind
            )));
        };
        if obj.is_array() {
            // a collection found by a selector: read as a list, ready once found
            self.scope.set(&node.id, obj);
            return Ok(self.ready_when_holds(node));
        }
        self.bind(node, std::slice::from_ref(obj));
        Ok(self.readiness(node, std::slice::from_ref(obj), 1))
    }

    /// `node`'s `readyWhen`, every one, with the scope as it is.
    fn ready_when_holds(&self, node: &Node) -> State {
        for e in &node.ready_when {
            if !matches!(evaluate(e, &self.scope), Ok(Value::Bool(true))) {
                return State::NotReady(format!("readyWhen {} is not true", e.path));
            }
        }
        State::Ready
    }

    fn template(&mut self, node: &Node) -> Result<State, EvalError> {
        let rendered = match self.render(node) {
            Ok(r) => r,
            Err(RenderError::Missing { path, .. }) => {
                return Ok(self.wait(node, format!("{path} waits for data")));
            }
            Err(e) => return Err(failed(&node.id, &e)),
        };
        let desired = rendered.len();
        for (i, mut obj) in rendered.into_iter().enumerate() {
            label(
                &mut obj,
                node,
                (node.is_collection()).then_some(i),
                self.instance,
            );
            let order = self.orders.get(&node.id).copied().unwrap_or_default();
            annotate_order(&mut obj, order);
            self.children.push(obj);
        }
        let observed = self
            .observed
            .children
            .get(&node.id)
            .cloned()
            .unwrap_or_default();
        self.bind(node, &observed);
        Ok(self.readiness(node, &observed, desired))
    }

    /// The objects of `node`: one, or one per combination of its `forEach` lists.
    fn render(&mut self, node: &Node) -> Result<Vec<Value>, RenderError> {
        let Source::Template(t) = &node.source else {
            return Ok(Vec::new());
        };
        if !node.is_collection() {
            return Ok(vec![t.render(&self.scope)?]);
        }
        let mut dims = Vec::with_capacity(node.for_each.len());
        for (var, e) in &node.for_each {
            match evaluate(e, &self.scope)? {
                Value::Array(items) => dims.push((var.as_str(), items)),
                other => {
                    return Err(RenderError::Failed {
                        path: e.path.clone(),
                        expression: e.expression.source().to_owned(),
                        reason: format!("forEach must be a list, got {other}"),
                    });
                }
            }
        }
        let mut out = Vec::new();
        for combo in product(&dims) {
            for (var, v) in &combo {
                self.scope.set(var, v);
            }
            out.push(t.render(&self.scope)?);
        }
        Ok(out)
    }

    /// Binds `node`'s id to its observed objects: the object, or the list of a collection.
    fn bind(&mut self, node: &Node, objs: &[Value]) {
        if node.is_collection() {
            self.scope.set(&node.id, &Value::Array(objs.to_vec()));
        } else if let Some(o) = objs.first() {
            self.scope.set(&node.id, o);
        }
    }

    fn readiness(&mut self, node: &Node, observed: &[Value], desired: usize) -> State {
        if observed.len() < desired.max(1) && !(node.is_collection() && desired == 0) {
            return State::NotReady(format!("{} not created yet", node.id));
        }
        for obj in observed {
            let var = if node.is_collection() {
                EACH
            } else {
                node.id.as_str()
            };
            self.scope.set(var, obj);
            for e in &node.ready_when {
                match evaluate(e, &self.scope) {
                    Ok(Value::Bool(true)) => {}
                    Ok(_) | Err(_) => {
                        return State::NotReady(format!("readyWhen {} is not true", e.path));
                    }
                }
            }
        }
        if node.is_collection() {
            self.scope.set(&node.id, &Value::Array(observed.to_vec()));
        }
        State::Ready
    }
}

/// Every combination of one item of each list, in order (the cartesian product).
fn product<'a>(dims: &[(&'a str, Vec<Value>)]) -> Vec<Vec<(&'a str, Value)>> {
    let mut out: Vec<Vec<(&str, Value)>> = vec![Vec::new()];
    for (var, items) in dims {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                items.iter().map(move |it| {
                    let mut c = prefix.clone();
                    c.push((*var, it.clone()));
                    c
                })
            })
            .collect();
    }
    out
}

/// kro's labels on an object made for `node` (item `index` of a collection) of `instance`.
fn label(obj: &mut Value, node: &Node, index: Option<usize>, instance: &Value) {
    let Some(m) = obj.as_object_mut() else { return };
    let meta = m.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if !labels.is_object() {
        *labels = json!({});
    }
    let Some(labels) = labels.as_object_mut() else {
        return;
    };
    let name = instance
        .pointer("/metadata/name")
        .cloned()
        .unwrap_or(Value::Null);
    labels.insert("kro.run/owned".into(), json!("true"));
    labels.insert(NODE_ID_LABEL.into(), json!(node.id));
    labels.insert("kro.run/instance-name".into(), name);
    labels.insert("app.kubernetes.io/managed-by".into(), json!("kro"));
    let meta = |f: &str| {
        instance
            .pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
    };
    labels.insert(
        "kro.run/instance-id".into(),
        json!(meta("uid").unwrap_or_default()),
    );
    if let Some(ns) = meta("namespace").filter(|n| !n.is_empty()) {
        labels.insert("kro.run/instance-namespace".into(), json!(ns));
    }
    let av = instance
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (group, version) = av.rsplit_once('/').unwrap_or(("", av));
    let kind = instance
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    labels.insert("kro.run/instance-group".into(), json!(group));
    labels.insert("kro.run/instance-version".into(), json!(version));
    labels.insert("kro.run/instance-kind".into(), json!(kind));
    if let Some(i) = index {
        labels.insert(COLLECTION_INDEX_LABEL.into(), json!(i.to_string()));
    }
}

/// kro's apply order (`teardown`) on an object made for a resource of that order.
fn annotate_order(obj: &mut Value, order: u64) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    if !annotations.is_object() {
        *annotations = json!({});
    }
    if let Some(a) = annotations.as_object_mut() {
        let key = super::teardown::APPLY_ORDER_ANNOTATION;
        a.insert(key.into(), json!(order.to_string()));
    }
}

/// An observed object kept while its resource waits: as kmeta last wrote it (its last-applied
/// annotation), else its identity, labels and spec-like fields without status.
pub(crate) fn kept(observed: &Value) -> Value {
    let last = observed
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(dynapply::LAST_APPLIED_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<Value>(s).ok());
    if let Some(last) = last.filter(Value::is_object) {
        return last;
    }
    let mut out = observed.clone();
    if let Some(m) = out.as_object_mut() {
        m.remove("status");
        let meta = m.get("metadata").cloned().unwrap_or_default();
        let keep = ["name", "namespace", "labels", "annotations"];
        let slim: Map<String, Value> = keep
            .iter()
            .filter_map(|k| meta.get(*k).map(|v| ((*k).to_owned(), v.clone())))
            .collect();
        m.insert("metadata".into(), Value::Object(slim));
    }
    out
}

/// kro's instance `state` and conditions (`InstanceManaged`, `GraphResolved`,
/// `ResourcesReady`, `Ready`), each keeping its `lastTransitionTime` while its status holds.
fn decorate_status(status: &mut Value, instance: &Value, states: &[(String, State)], now: &str) {
    let not_ready: Vec<String> = states
        .iter()
        .filter_map(|(id, s)| match s {
            State::Waiting(why) | State::NotReady(why) => Some(format!("{id}: {why}")),
            State::Ready | State::Excluded => None,
        })
        .collect();
    let ready = not_ready.is_empty();
    let resources = if ready {
        (
            "True",
            "AllResourcesReady",
            "all resources are created and ready".to_owned(),
        )
    } else {
        ("False", "NotReady", not_ready.join("; "))
    };
    let managed = ("True", "Managed", "instance is managed by kmeta".to_owned());
    let resolved = (
        "True",
        "Resolved",
        "runtime graph created and all resources resolved".to_owned(),
    );
    let top = if ready {
        ("True", "Ready", String::new())
    } else {
        ("False", "NotReady", "ResourcesReady is not true".to_owned())
    };
    let generation = instance.pointer("/metadata/generation").cloned();
    let before = instance
        .pointer("/status/conditions")
        .and_then(Value::as_array);
    let conditions: Vec<Value> = [
        ("InstanceManaged", managed),
        ("GraphResolved", resolved),
        ("ResourcesReady", resources),
        ("Ready", top),
    ]
    .into_iter()
    .map(|(kind, (st, reason, message))| {
        let since = before
            .and_then(|b| b.iter().find(|c| c["type"] == kind && c["status"] == st))
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now));
        let mut c = json!({"type": kind, "status": st, "reason": reason, "message": message,
            "lastTransitionTime": since});
        if let Some(g) = &generation {
            c["observedGeneration"] = g.clone();
        }
        c
    })
    .collect();
    if let Some(m) = status.as_object_mut() {
        m.insert(
            "state".into(),
            json!(if ready { "ACTIVE" } else { "IN_PROGRESS" }),
        );
        m.insert("conditions".into(), Value::Array(conditions));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
