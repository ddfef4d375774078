//! kro's `externalRef`: an object the graph reads but never writes, found by name (in the
//! instance's namespace unless it names one) or, as a collection, by a label selector. In kmeta
//! an external reference is a related object: the customize hook of the same graph answers one
//! Metacontroller `relatedResources` rule per reference ([`rules`]), kmeta watches what the rules
//! select and hands it to the sync hook as `related`, where [`found`] files each object by the
//! reference it answers. A reference not found yet makes its resource, and those reading it,
//! wait; the related watch syncs the instance again when the object appears. Pure.

use std::collections::BTreeMap;

use kmeta_cel::{Bindings, Scope};
use serde_json::{Value, json};

use super::eval::EvalError;
use super::graph::{Graph, SCHEMA, Source};
use crate::object::meta_str;
use crate::runtime::selector;

/// The field of an `externalRef` holding the resource (plural) of its kind, which
/// `kmeta::kro::translate` writes into the graph it generates from what the API server serves;
/// without it, the English plural of the kind ([`plural`]).
pub(crate) const RESOURCE_FIELD: &str = "resource";

/// What one external reference asks for, rendered for one instance.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reference {
    /// The resource's id.
    pub id: String,
    /// `apiVersion` of the object.
    pub api_version: String,
    /// `kind` of the object.
    pub kind: String,
    /// Its resource (plural).
    pub resource: String,
    /// Its namespace (`None`: a selector across every namespace).
    pub namespace: Option<String>,
    /// By name, or by a label selector (a collection).
    pub target: Target,
}

/// How a reference finds its objects.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Target {
    /// One object of this name.
    Name(String),
    /// Every object these labels select (`metav1.LabelSelector`).
    Selector(Value),
}

/// The external references of `graph`, rendered for `parent` (their `${schema...}` read).
pub(crate) fn references(graph: &Graph, parent: &Value) -> Result<Vec<Reference>, EvalError> {
    let scope = Scope::kro(&Bindings::default().with(SCHEMA, parent.clone()));
    let mut out = Vec::new();
    for node in &graph.nodes {
        let Source::External(t) = &node.source else {
            continue;
        };
        let failed = |error: String| EvalError {
            id: node.id.clone(),
            error,
        };
        let r = t.render(&scope).map_err(|e| failed(e.to_string()))?;
        let meta = r.get("metadata").cloned().unwrap_or_default();
        let target = match (text(meta.get("name")), meta.get("selector")) {
            (Some(name), None) => Target::Name(name.to_owned()),
            (None, Some(sel)) if sel.is_object() => Target::Selector(sel.clone()),
            _ => {
                let why = "externalRef.metadata needs exactly one of name and selector";
                return Err(failed(why.to_owned()));
            }
        };
        let namespace = match (text(meta.get("namespace")), &target) {
            (Some(ns), _) => Some(ns.to_owned()),
            (None, Target::Name(_)) => Some(meta_str(parent, "namespace").to_owned()),
            (None, Target::Selector(_)) => None,
        };
        let resource = text(r.get(RESOURCE_FIELD))
            .map(str::to_owned)
            .unwrap_or_else(|| plural(&node.kind));
        out.push(Reference {
            id: node.id.clone(),
            api_version: node.api_version.clone(),
            kind: node.kind.clone(),
            resource,
            namespace: namespace.filter(|n| !n.is_empty()),
            target,
        });
    }
    Ok(out)
}

/// The plural of `kind` as kro names resources: lowercase, English plural (`-ies` after a
/// consonant and `y`, `-es` after `s`, `x`, `z`, `ch`, `sh`, else `-s`).
pub(crate) fn plural(kind: &str) -> String {
    let k = kind.to_lowercase();
    let consonant_y = k.ends_with('y')
        && !k.ends_with("ay")
        && !k.ends_with("ey")
        && !k.ends_with("oy")
        && !k.ends_with("uy");
    if consonant_y {
        format!("{}ies", &k[..k.len() - 1])
    } else if ["s", "x", "z", "ch", "sh"].iter().any(|e| k.ends_with(e)) {
        format!("{k}es")
    } else {
        format!("{k}s")
    }
}

/// `v` as a string, when it is one and not empty.
fn text(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The customize hook's `relatedResources`: one rule per reference.
pub(crate) fn rules(refs: &[Reference]) -> Value {
    let rules: Vec<Value> = refs
        .iter()
        .map(|r| {
            let mut rule = json!({"apiVersion": r.api_version, "resource": r.resource});
            if let Some(ns) = &r.namespace {
                rule["namespace"] = json!(ns);
            }
            match &r.target {
                Target::Name(n) => rule["names"] = json!([n]),
                Target::Selector(s) => rule["labelSelector"] = s.clone(),
            }
            rule
        })
        .collect();
    json!({ "relatedResources": rules })
}

/// The objects of `related` (a sync request's, `{type: {key: object}}`) filed by the reference
/// they answer: the object of a name reference (absent until it exists), the list of a selector.
pub(crate) fn found(refs: &[Reference], related: &Value) -> BTreeMap<String, Value> {
    let objects: Vec<&Value> = related
        .as_object()
        .into_iter()
        .flat_map(|by_type| by_type.values())
        .filter_map(Value::as_object)
        .flat_map(|by_key| by_key.values())
        .collect();
    let mut out = BTreeMap::new();
    for r in refs {
        let mut of_ref = objects.iter().copied().filter(|o| {
            let f = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or_default();
            let ns = meta_str(o, "namespace");
            let ns_ok = ns.is_empty() || r.namespace.as_deref().is_none_or(|want| want == ns);
            f("apiVersion") == r.api_version && f("kind") == r.kind && ns_ok
        });
        match &r.target {
            Target::Name(name) => {
                if let Some(o) = of_ref.find(|o| meta_str(o, "name") == name) {
                    out.insert(r.id.clone(), o.clone());
                }
            }
            Target::Selector(sel) => {
                let sel = selector::decode(sel, "externalRef.metadata.selector").ok();
                let mut items: Vec<Value> = of_ref
                    .filter(|o| {
                        sel.as_ref().is_some_and(|s| {
                            selector::matches(s, &selector::labels_of(o)).unwrap_or(false)
                        })
                    })
                    .cloned()
                    .collect();
                items.sort_by(|a, b| {
                    let key = |o: &Value| {
                        (
                            meta_str(o, "namespace").to_owned(),
                            meta_str(o, "name").to_owned(),
                        )
                    };
                    key(a).cmp(&key(b))
                });
                out.insert(r.id.clone(), Value::Array(items));
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::hook::cel::graph::parse;

    fn graph() -> Graph {
        parse(&json!({"resources": [
            {"id": "input", "externalRef": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "${schema.spec.name}-in", "namespace": "shared"}}},
            {"id": "mine", "externalRef": {"apiVersion": "v1", "kind": "Secret",
                "resource": "secrets", "metadata": {"name": "token"}}},
            {"id": "peers", "externalRef": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"selector": {"matchLabels": {"team": "${schema.spec.name}"}}}}},
            {"id": "owned", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "out"}, "data": {"v": "${input.data.v}"}}},
        ]}))
        .unwrap()
    }

    fn parent() -> Value {
        json!({"metadata": {"name": "i", "namespace": "apps"}, "spec": {"name": "web"}})
    }

    #[test]
    fn each_reference_becomes_a_related_rule_rendered_for_the_instance() {
        let refs = references(&graph(), &parent()).unwrap();
        assert_eq!(
            rules(&refs),
            json!({"relatedResources": [
                {"apiVersion": "v1", "resource": "configmaps", "namespace": "shared",
                    "names": ["web-in"]},
                {"apiVersion": "v1", "resource": "secrets", "namespace": "apps",
                    "names": ["token"]},
                {"apiVersion": "v1", "resource": "configmaps",
                    "labelSelector": {"matchLabels": {"team": "web"}}},
            ]})
        );
    }

    #[test]
    fn related_objects_are_filed_by_the_reference_they_answer() {
        let refs = references(&graph(), &parent()).unwrap();
        let cm = |ns: &str, name: &str, team: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"namespace": ns, "name": name, "labels": {"team": team}}})
        };
        let related = json!({"ConfigMap.v1": {
            "shared/web-in": cm("shared", "web-in", "x"),
            "apps/web-in": cm("apps", "web-in", "x"),
            "b/peer": cm("b", "peer", "web"),
            "a/peer": cm("a", "peer", "web"),
        }});
        let got = found(&refs, &related);
        assert_eq!(got["input"]["metadata"]["namespace"], "shared");
        assert!(!got.contains_key("mine"), "the Secret does not exist yet");
        let peers: Vec<&str> = got["peers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["metadata"]["namespace"].as_str().unwrap())
            .collect();
        assert_eq!(peers, ["a", "b"]);
    }

    #[test]
    fn a_reference_without_name_or_selector_is_named() {
        let g = parse(
            &json!({"resources": [{"id": "x", "externalRef": {"apiVersion": "v1",
            "kind": "ConfigMap", "metadata": {}}}]}),
        )
        .unwrap();
        let e = references(&g, &parent()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "resource \"x\": externalRef.metadata needs exactly one of name and selector"
        );
    }
}
