//! Which parents may claim an orphan, found without visiting every parent.
//!
//! An event on a child with no controller must enqueue every parent whose selector matches it
//! (the parent's sync then adopts it). Visiting every parent and decoding its selector on each
//! such event made adoption quadratic: 1000 parents adopting 10 000 orphans spent over half of
//! the controller's CPU there. Here each parent's selector is decoded once per change of the
//! parent and filed under one `matchLabels` pair it requires, so an orphan is checked only
//! against the parents filed under a label it carries, plus those whose selector has no
//! `matchLabels` (expressions only), which are always checked.

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

use crate::object::{ObjectView, meta_str};
use crate::reconcile::decide;
use crate::runtime::cache::{ObjKey, obj_key};
use crate::runtime::selector;

/// The selectors of one controller's parents, filed by label. Parents are grouped by scope:
/// their namespace when the parent resource is namespaced (an orphan is claimed only by parents
/// of its own namespace), else "".
#[derive(Debug, Default)]
pub struct ParentSelectors {
    entries: HashMap<ObjKey, Entry>,
    /// scope → label key → label value → the parents whose selector requires that label.
    filed: HashMap<String, HashMap<String, HashMap<String, BTreeSet<ObjKey>>>>,
    /// scope → the parents whose selector has no `matchLabels`.
    unfiled: HashMap<String, BTreeSet<ObjKey>>,
}

#[derive(Debug)]
struct Entry {
    scope: String,
    /// What the selector was decoded from: the parent's uid with generateSelector, else its
    /// `spec.selector` (null when absent).
    source: Value,
    /// `None` for an invalid selector, which selects nothing (the parent's sync reports it).
    selector: Option<LabelSelector>,
}

impl Entry {
    /// The label the entry is filed under: one its selector requires.
    fn label(&self) -> Option<(&str, &str)> {
        selector::required_label(self.selector.as_ref()?)
    }
}

impl ParentSelectors {
    /// Files (or refiles) `parent` in `scope`. Its selector is decoded only when what it is
    /// decoded from changed, so the status writes of a busy parent cost one comparison.
    pub fn update(&mut self, parent: &Value, scope: &str, generate_selector: bool) {
        let key = obj_key(parent);
        let source = if generate_selector {
            Value::String(meta_str(parent, "uid").to_owned())
        } else {
            parent
                .pointer("/spec/selector")
                .cloned()
                .unwrap_or(Value::Null)
        };
        if self
            .entries
            .get(&key)
            .is_some_and(|e| e.scope == scope && e.source == source)
        {
            return;
        }
        self.remove(&key);
        let entry = Entry {
            scope: scope.to_owned(),
            source,
            selector: decide::parent_selector(parent, generate_selector).ok(),
        };
        match entry.label() {
            Some((k, v)) => {
                self.filed
                    .entry(entry.scope.clone())
                    .or_default()
                    .entry(k.to_owned())
                    .or_default()
                    .entry(v.to_owned())
                    .or_default()
                    .insert(key.clone());
            }
            None if entry.selector.is_some() => {
                self.unfiled
                    .entry(entry.scope.clone())
                    .or_default()
                    .insert(key.clone());
            }
            None => {}
        }
        self.entries.insert(key, entry);
    }

    /// Forgets the parent `key` (deleted).
    pub fn remove(&mut self, key: &ObjKey) {
        let Some(old) = self.entries.remove(key) else {
            return;
        };
        match old.label() {
            Some((k, v)) => {
                let Some(by_key) = self.filed.get_mut(&old.scope) else {
                    return;
                };
                let Some(by_value) = by_key.get_mut(k) else {
                    return;
                };
                if let Some(parents) = by_value.get_mut(v) {
                    parents.remove(key);
                    if parents.is_empty() {
                        by_value.remove(v);
                    }
                }
                if by_value.is_empty() {
                    by_key.remove(k);
                }
                if by_key.is_empty() {
                    self.filed.remove(&old.scope);
                }
            }
            None => {
                if let Some(parents) = self.unfiled.get_mut(&old.scope) {
                    parents.remove(key);
                    if parents.is_empty() {
                        self.unfiled.remove(&old.scope);
                    }
                }
            }
        }
    }

    /// Forgets every parent (before filing them all again).
    pub fn clear(&mut self) {
        *self = ParentSelectors::default();
    }

    /// The parents in `scope` whose selector matches `child`'s labels, in no particular order.
    pub fn selecting(&self, scope: &str, child: &impl ObjectView) -> Vec<ObjKey> {
        let filed = self.filed.get(scope).into_iter().flat_map(|by_key| {
            by_key.iter().flat_map(|(k, by_value)| {
                child
                    .label(k)
                    .and_then(|v| by_value.get(v))
                    .into_iter()
                    .flatten()
            })
        });
        let unfiled = self.unfiled.get(scope).into_iter().flatten();
        filed
            .chain(unfiled)
            .filter(|key| {
                self.entries
                    .get(*key)
                    .and_then(|e| e.selector.as_ref())
                    .is_some_and(|sel| selector::matches_object(sel, child).unwrap_or(false))
            })
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use serde_json::json;

    fn parent(ns: &str, name: &str, selector: Value) -> Value {
        json!({
            "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{ns}-{name}")},
            "spec": {"selector": selector},
        })
    }

    fn child(ns: &str, labels: Value) -> Value {
        json!({"metadata": {"namespace": ns, "name": "c", "labels": labels}})
    }

    fn sorted(mut keys: Vec<ObjKey>) -> Vec<ObjKey> {
        keys.sort();
        keys
    }

    fn key(ns: &str, name: &str) -> ObjKey {
        (ns.to_owned(), name.to_owned())
    }

    #[test]
    fn an_orphan_finds_the_parents_whose_selector_it_matches() {
        let mut s = ParentSelectors::default();
        s.update(
            &parent("a", "p1", json!({"matchLabels": {"app": "x"}})),
            "a",
            false,
        );
        s.update(
            &parent(
                "a",
                "p2",
                json!({"matchLabels": {"app": "x", "tier": "db"}}),
            ),
            "a",
            false,
        );
        s.update(
            &parent("a", "p3", json!({"matchLabels": {"app": "y"}})),
            "a",
            false,
        );
        let expr = json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]});
        s.update(&parent("a", "p4", expr), "a", false);
        s.update(
            &parent("b", "p5", json!({"matchLabels": {"app": "x"}})),
            "b",
            false,
        );
        let found = |labels| sorted(s.selecting("a", &child("a", labels)));
        assert_eq!(found(json!({"app": "x"})), [key("a", "p1")]);
        assert_eq!(
            found(json!({"app": "x", "tier": "db"})),
            [key("a", "p1"), key("a", "p2"), key("a", "p4")]
        );
        assert_eq!(found(json!({"tier": "web"})), [key("a", "p4")]);
        assert_eq!(found(json!({"other": "x"})), Vec::<ObjKey>::new());
        assert_eq!(
            sorted(s.selecting("b", &child("b", json!({"app": "x"})))),
            [key("b", "p5")]
        );
        assert!(
            s.selecting("c", &child("c", json!({"app": "x"})))
                .is_empty()
        );
    }

    #[test]
    fn a_changed_selector_is_refiled_and_a_removed_parent_forgotten() {
        let mut s = ParentSelectors::default();
        let p = parent("a", "p", json!({"matchLabels": {"app": "x"}}));
        s.update(&p, "a", false);
        let x = child("a", json!({"app": "x"}));
        let y = child("a", json!({"app": "y"}));
        assert_eq!(s.selecting("a", &x), [key("a", "p")]);
        s.update(
            &parent("a", "p", json!({"matchLabels": {"app": "y"}})),
            "a",
            false,
        );
        assert!(s.selecting("a", &x).is_empty());
        assert_eq!(s.selecting("a", &y), [key("a", "p")]);
        let expr = json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]});
        s.update(&parent("a", "p", expr), "a", false);
        assert_eq!(s.selecting("a", &x), [key("a", "p")]);
        assert!(s.selecting("a", &y).is_empty());
        s.remove(&key("a", "p"));
        assert!(s.selecting("a", &x).is_empty());
        assert!(s.entries.is_empty());
        assert!(s.filed.is_empty() && s.unfiled.is_empty());
    }

    #[test]
    fn invalid_and_generated_selectors() {
        let mut s = ParentSelectors::default();
        s.update(&parent("a", "empty", json!({})), "a", false);
        s.update(
            &json!({"metadata": {"namespace": "a", "name": "none"}}),
            "a",
            false,
        );
        let bad = json!({"matchExpressions": [{"key": "app", "operator": "Near"}]});
        s.update(&parent("a", "bad", bad), "a", false);
        assert_eq!(s.entries.len(), 3);
        assert!(
            s.selecting("a", &child("a", json!({"app": "x"})))
                .is_empty()
        );
        let p = parent("a", "gen", json!({"matchLabels": {"app": "x"}}));
        s.update(&p, "a", true);
        let ours = child("a", json!({"controller-uid": "uid-a-gen", "app": "y"}));
        assert_eq!(s.selecting("a", &ours), [key("a", "gen")]);
        assert!(
            s.selecting("a", &child("a", json!({"app": "x"})))
                .is_empty()
        );
    }

    /// Against the scan it replaces (every parent in scope, its selector decoded and matched),
    /// over random parents, selector changes, removals and children.
    #[test]
    fn selecting_equals_a_scan_of_every_parent() {
        let mut rng = StdRng::seed_from_u64(15);
        let keys = ["app", "tier", "zone"];
        let values = ["a", "b", "c"];
        let ops = ["In", "NotIn", "Exists", "DoesNotExist"];
        let pick = |rng: &mut StdRng, from: &[&'static str]| from[rng.random_range(0..from.len())];
        let random_selector = |rng: &mut StdRng| {
            let mut ml = serde_json::Map::new();
            for _ in 0..rng.random_range(0..3) {
                ml.insert(pick(rng, &keys).into(), pick(rng, &values).into());
            }
            let mut exprs = Vec::new();
            for _ in 0..rng.random_range(0..3) {
                let op = pick(rng, &ops);
                let mut e = json!({"key": pick(rng, &keys), "operator": op});
                if matches!(op, "In" | "NotIn") {
                    e["values"] = json!([pick(rng, &values), pick(rng, &values)]);
                }
                exprs.push(e);
            }
            json!({"matchLabels": ml, "matchExpressions": exprs})
        };
        let mut s = ParentSelectors::default();
        let mut parents: HashMap<ObjKey, (Value, bool)> = HashMap::new();
        let mut hits = 0;
        for round in 0..2000 {
            let ns = pick(&mut rng, &["a", "b"]);
            let name = format!("p{}", rng.random_range(0..40));
            match rng.random_range(0..10) {
                0 => {
                    s.remove(&key(ns, &name));
                    parents.remove(&key(ns, &name));
                }
                _ => {
                    let p = parent(ns, &name, random_selector(&mut rng));
                    let generate = rng.random_range(0..8) == 0;
                    s.update(&p, ns, generate);
                    parents.insert(key(ns, &name), (p, generate));
                }
            }
            let mut labels = serde_json::Map::new();
            for k in keys {
                if rng.random_range(0..3) > 0 {
                    labels.insert(k.into(), pick(&mut rng, &values).into());
                }
            }
            if rng.random_range(0..4) == 0 {
                let target = format!("uid-{ns}-p{}", rng.random_range(0..40));
                labels.insert("controller-uid".into(), target.into());
            }
            let c = child(ns, Value::Object(labels));
            let scan: Vec<ObjKey> = parents
                .iter()
                .filter(|(k, (p, generate))| {
                    k.0 == ns
                        && decide::parent_selector(p, *generate)
                            .is_ok_and(|sel| selector::matches_object(&sel, &c).unwrap_or(false))
                })
                .map(|(k, _)| k.clone())
                .collect();
            hits += scan.len();
            assert_eq!(
                sorted(s.selecting(ns, &c)),
                sorted(scan),
                "round {round}: child {c}"
            );
        }
        assert_eq!(s.entries.len(), parents.len());
        // the cases are not trivial: children matched many parents, filed and unfiled ones
        assert!(hits > 2000, "{hits} matches in all");
        assert!(!s.filed.is_empty() && !s.unfiled.is_empty());
    }
}
