//! Deleting an instance's children as kro does (`pkg/controller/instance/deletion.go`): each
//! child carries its resource's *apply order* (`internal.kro.run/apply-order`: the graph's
//! reverse topological layer, one-based, the resources nothing reads highest, as kro's
//! `applyOrdersForDAG`), and when the instance is deleted the children of the highest order
//! present go first; the next order waits until every one of them is gone (deleted, not merely
//! marked for deletion). A child without a valid positive order goes last. The finalize answer
//! of a CEL resource graph is this decision: the children to keep for now, and `finalized` once
//! none is left. Pure: decided from the observed children alone, not from the graph (which may
//! have changed since they were made), as kro's deletion reads only what the children carry.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::graph::Graph;

/// The annotation carrying a child's apply order (kro's).
pub(crate) const APPLY_ORDER_ANNOTATION: &str = "internal.kro.run/apply-order";

/// The order of a child with none (or an invalid one): deleted after every ordered one.
const FALLBACK_ORDER: u64 = 0;

/// Each resource's apply order: its layer in the reverse topological layering of the graph
/// (layer one holds the resources no other resource reads), numbered from the last layer, so
/// the resources nothing reads have the highest order and the ones read by others lower ones.
pub(crate) fn apply_orders(graph: &Graph) -> BTreeMap<String, u64> {
    // how many resources not yet layered read each resource
    let mut readers: BTreeMap<&str, usize> =
        graph.nodes.iter().map(|n| (n.id.as_str(), 0)).collect();
    for n in &graph.nodes {
        for d in &n.deps {
            if let Some(r) = readers.get_mut(d.as_str()) {
                *r += 1;
            }
        }
    }
    let mut layers: Vec<Vec<&str>> = Vec::new();
    let mut done: BTreeSet<&str> = BTreeSet::new();
    while done.len() < graph.nodes.len() {
        let layer: Vec<&str> = graph
            .nodes
            .iter()
            .map(|n| n.id.as_str())
            .filter(|id| !done.contains(id) && readers.get(id) == Some(&0))
            .collect();
        if layer.is_empty() {
            break; // a cycle: the graph refuses it before this is asked
        }
        for id in &layer {
            done.insert(id);
            let deps = graph
                .nodes
                .iter()
                .filter(|n| n.id == *id)
                .flat_map(|n| &n.deps);
            for d in deps {
                if let Some(r) = readers.get_mut(d.as_str()) {
                    *r = r.saturating_sub(1);
                }
            }
        }
        layers.push(layer);
    }
    let count = layers.len() as u64;
    layers
        .iter()
        .enumerate()
        .flat_map(|(i, layer)| {
            layer
                .iter()
                .map(move |id| ((*id).to_owned(), count - i as u64))
        })
        .collect()
}

/// A child's apply order, from its annotation; [`FALLBACK_ORDER`] when it has none or an
/// invalid one.
fn order_of(child: &Value) -> u64 {
    child
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(APPLY_ORDER_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|o| *o > 0)
        .unwrap_or(FALLBACK_ORDER)
}

/// The finalize answer for the instance whose `children` are observed and whose status is
/// `status`: every child below the highest order present kept as last written (`keep`), the
/// highest order's left out (kmeta deletes them, with a UID precondition, and waits for the
/// ones already being deleted), `finalized` once no child is left; the status kept, its
/// `state` kro's `DELETING`.
pub(crate) fn finalize(
    children: &[Value],
    status: Option<&Value>,
    keep: impl Fn(&Value) -> Value,
) -> Value {
    let mut status = status
        .filter(|s| s.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    status["state"] = json!("DELETING");
    let Some(highest) = children.iter().map(order_of).max() else {
        return json!({"children": [], "finalized": true, "status": status});
    };
    let kept: Vec<Value> = children
        .iter()
        .filter(|c| order_of(c) < highest)
        .map(keep)
        .collect();
    json!({"children": kept, "finalized": false, "status": status})
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::hook::cel::graph;

    fn resource(id: &str, reads: &[&str]) -> Value {
        let data: serde_json::Map<String, Value> = reads
            .iter()
            .map(|r| ((*r).to_owned(), json!(format!("${{{r}.metadata.name}}"))))
            .collect();
        json!({"id": id, "template": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": id}, "data": data}})
    }

    #[test]
    fn the_resources_nothing_reads_have_the_highest_order() {
        // c reads b, b reads a, d reads a: kro's layers dependents first are [c, d], [b], [a]
        let spec = json!({"schema": {"apiVersion": "v1alpha1", "kind": "X"}, "resources": [
            resource("a", &[]), resource("b", &["a"]), resource("c", &["b"]),
            resource("d", &["a"]), resource("e", &[])]});
        let g = graph::parse(&spec).unwrap();
        let orders = apply_orders(&g);
        let want: BTreeMap<String, u64> = [("a", 1), ("b", 2), ("c", 3), ("d", 3), ("e", 3)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        assert_eq!(orders, want);
    }

    fn child(name: &str, order: Option<&str>) -> Value {
        let mut c = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns"}});
        if let Some(o) = order {
            c["metadata"]["annotations"] = json!({APPLY_ORDER_ANNOTATION: o});
        }
        c
    }

    #[test]
    fn the_highest_order_goes_first_and_the_unordered_last() {
        let names = |answer: &Value| -> Vec<String> {
            answer["children"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["metadata"]["name"].as_str().unwrap().to_owned())
                .collect()
        };
        let all = [
            child("a", Some("1")),
            child("c", Some("3")),
            child("d", Some("3")),
            child("b", Some("2")),
            child("x", None),
            child("y", Some("bad")),
        ];
        let kept = |c: &Value| c.clone();
        let answer = finalize(&all, Some(&json!({"state": "ACTIVE", "x": 1})), kept);
        assert_eq!(answer["status"], json!({"state": "DELETING", "x": 1}));
        assert_eq!(names(&answer), ["a", "b", "x", "y"]);
        assert_eq!(answer["finalized"], false);
        // c is gone, d is being deleted: the next order still waits for d
        let mut dying = child("d", Some("3"));
        dying["metadata"]["deletionTimestamp"] = json!("2026-12-07T00:00:00Z");
        let answer = finalize(&[all[0].clone(), dying, all[3].clone()], None, kept);
        assert_eq!(names(&answer), ["a", "b"]);
        let answer = finalize(&[all[0].clone(), all[4].clone()], None, kept);
        assert_eq!(names(&answer), ["x"], "the unordered go last");
        let answer = finalize(&[all[4].clone()], None, kept);
        assert_eq!(names(&answer), Vec::<String>::new());
        assert_eq!(answer["finalized"], false);
        assert_eq!(
            finalize(&[], None, kept),
            json!({"children": [], "finalized": true, "status": {"state": "DELETING"}})
        );
    }
}
