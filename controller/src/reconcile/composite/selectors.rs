//! Which parents may claim an orphan, found without visiting every parent.
//!
//! An event on a child with no controller must enqueue every parent whose selector matches it
//! (the parent's sync then adopts it). Visiting every parent and decoding its selector on each
//! such event made adoption quadratic: 1000 parents adopting 10 000 orphans spent over half of
//! the controller's CPU there. Here each parent is filed under one label its selector requires
//! (its first `matchLabels` pair, or `controller-uid` with generateSelector), so an orphan is
//! checked only against the parents filed under a label it carries, plus those whose selector
//! has expressions only. The index holds keys alone (about half a kilobyte per parent: peak RSS
//! 210 against 205 MiB at 10 000 parents); the caller checks each candidate's current selector.

use std::collections::HashMap;

use serde_json::Value;

use super::decide;
use crate::object::{ObjectView, meta_str};
use crate::runtime::cache::{ObjKey, obj_key};
use crate::runtime::selector;

/// The parents of one controller filed by a label their selector requires. Parents are grouped
/// by scope: their namespace when the parent resource is namespaced (an orphan is claimed only
/// by parents of its own namespace), else "".
#[derive(Debug, Default)]
pub struct ParentSelectors {
    /// scope → label key → label value → the parents whose selector requires that label.
    filed: HashMap<String, HashMap<String, HashMap<String, Vec<ObjKey>>>>,
    /// scope → the parents whose selector has no `matchLabels`.
    unfiled: HashMap<String, Vec<ObjKey>>,
}

/// Where a parent is filed.
#[derive(Debug, PartialEq, Eq)]
enum Filing {
    /// Under a label every child it selects carries.
    Label(String, String),
    /// With the parents checked for every orphan (expressions only).
    Unfiled,
    /// Nowhere: its selector is missing or invalid and selects nothing (its sync reports it).
    Nowhere,
}

fn filing(parent: &Value, generate_selector: bool) -> Filing {
    match decide::parent_selector(parent, generate_selector) {
        Ok(sel) => match selector::required_label(&sel) {
            Some((k, v)) => Filing::Label(k.to_owned(), v.to_owned()),
            None => Filing::Unfiled,
        },
        Err(_) => Filing::Nowhere,
    }
}

/// True when `old` and `new` are filed alike whatever their selectors say: same uid (for
/// generateSelector) and the same `spec.selector`, compared without decoding either.
fn filed_alike(old: &Value, new: &Value) -> bool {
    meta_str(old, "uid") == meta_str(new, "uid")
        && old.pointer("/spec/selector") == new.pointer("/spec/selector")
}

/// Adds `key` to `keys` unless it is there.
fn add(keys: &mut Vec<ObjKey>, key: ObjKey) {
    if !keys.contains(&key) {
        keys.push(key);
    }
}

impl ParentSelectors {
    /// Follows a change of a parent from `old` (in `old_scope`; `None` when new) to `new`. A
    /// status write (same uid and selector) costs one comparison.
    pub fn change(
        &mut self,
        old: Option<(&str, &Value)>,
        scope: &str,
        new: &Value,
        generate_selector: bool,
    ) {
        if let Some((old_scope, old)) = old {
            if old_scope == scope && filed_alike(old, new) {
                return;
            }
            self.remove(old_scope, old, generate_selector);
        }
        let key = obj_key(new);
        match filing(new, generate_selector) {
            Filing::Label(k, v) => add(
                self.filed
                    .entry(scope.to_owned())
                    .or_default()
                    .entry(k)
                    .or_default()
                    .entry(v)
                    .or_default(),
                key,
            ),
            Filing::Unfiled => add(self.unfiled.entry(scope.to_owned()).or_default(), key),
            Filing::Nowhere => {}
        }
    }

    /// Takes `parent` (in `scope`), as it was filed, out of the index (it was deleted).
    pub fn remove(&mut self, scope: &str, parent: &Value, generate_selector: bool) {
        let key = obj_key(parent);
        match filing(parent, generate_selector) {
            Filing::Label(k, v) => {
                let Some(by_key) = self.filed.get_mut(scope) else {
                    return;
                };
                let Some(by_value) = by_key.get_mut(&k) else {
                    return;
                };
                if let Some(keys) = by_value.get_mut(&v) {
                    keys.retain(|x| *x != key);
                    if keys.is_empty() {
                        by_value.remove(&v);
                    }
                }
                if by_value.is_empty() {
                    by_key.remove(&k);
                }
                if by_key.is_empty() {
                    self.filed.remove(scope);
                }
            }
            Filing::Unfiled => {
                if let Some(keys) = self.unfiled.get_mut(scope) {
                    keys.retain(|x| *x != key);
                    if keys.is_empty() {
                        self.unfiled.remove(scope);
                    }
                }
            }
            Filing::Nowhere => {}
        }
    }

    /// Forgets every parent (before filing them all again).
    pub fn clear(&mut self) {
        *self = ParentSelectors::default();
    }

    /// The parents in `scope` that may select `child`: those filed under a label it carries and
    /// those filed with expressions only. A superset of the parents whose selector matches it;
    /// the caller checks each.
    pub fn candidates(&self, scope: &str, child: &impl ObjectView) -> Vec<ObjKey> {
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
        filed.chain(unfiled).cloned().collect()
    }
}

/// Whether `parent`'s selector matches `child` (false for a missing or invalid selector).
pub fn selects(parent: &Value, generate_selector: bool, child: &impl ObjectView) -> bool {
    decide::parent_selector(parent, generate_selector)
        .is_ok_and(|sel| selector::matches_object(&sel, child).unwrap_or(false))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use serde_json::json;
    use std::collections::BTreeMap;

    fn parent(ns: &str, name: &str, selector: Value) -> Value {
        json!({
            "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{ns}-{name}")},
            "spec": {"selector": selector},
        })
    }

    fn child(ns: &str, labels: Value) -> Value {
        json!({"metadata": {"namespace": ns, "name": "c", "labels": labels}})
    }

    fn key(ns: &str, name: &str) -> ObjKey {
        ObjKey::new(ns, name)
    }

    /// What an orphan's event enqueues: the candidates whose current selector matches.
    fn selecting(
        s: &ParentSelectors,
        parents: &BTreeMap<ObjKey, Value>,
        generate: bool,
        scope: &str,
        c: &Value,
    ) -> Vec<ObjKey> {
        let mut keys: Vec<ObjKey> = s
            .candidates(scope, c)
            .into_iter()
            .filter(|k| parents.get(k).is_some_and(|p| selects(p, generate, c)))
            .collect();
        keys.sort();
        keys
    }

    /// Files `p` as an event would, keeping `parents` as the cache would.
    fn apply(s: &mut ParentSelectors, parents: &mut BTreeMap<ObjKey, Value>, p: Value, gen_: bool) {
        let k = obj_key(&p);
        let old = parents.get(&k).cloned();
        s.change(
            old.as_ref().map(|o| (k.namespace.as_str(), o)),
            &k.namespace,
            &p,
            gen_,
        );
        parents.insert(k, p);
    }

    #[test]
    fn an_orphan_finds_the_parents_whose_selector_it_matches() {
        let (mut s, mut ps) = (ParentSelectors::default(), BTreeMap::new());
        for (ns, name, sel) in [
            ("a", "p1", json!({"matchLabels": {"app": "x"}})),
            (
                "a",
                "p2",
                json!({"matchLabels": {"app": "x", "tier": "db"}}),
            ),
            ("a", "p3", json!({"matchLabels": {"app": "y"}})),
            (
                "a",
                "p4",
                json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
            ),
            ("b", "p5", json!({"matchLabels": {"app": "x"}})),
        ] {
            apply(&mut s, &mut ps, parent(ns, name, sel), false);
        }
        let found = |labels| selecting(&s, &ps, false, "a", &child("a", labels));
        assert_eq!(found(json!({"app": "x"})), [key("a", "p1")]);
        assert_eq!(
            found(json!({"app": "x", "tier": "db"})),
            [key("a", "p1"), key("a", "p2"), key("a", "p4")]
        );
        assert_eq!(found(json!({"tier": "web"})), [key("a", "p4")]);
        assert_eq!(found(json!({"other": "x"})), Vec::<ObjKey>::new());
        let in_b = selecting(&s, &ps, false, "b", &child("b", json!({"app": "x"})));
        assert_eq!(in_b, [key("b", "p5")]);
        assert!(
            s.candidates("c", &child("c", json!({"app": "x"})))
                .is_empty()
        );
    }

    #[test]
    fn a_changed_selector_is_refiled_and_a_removed_parent_forgotten() {
        let (mut s, mut ps) = (ParentSelectors::default(), BTreeMap::new());
        let x = child("a", json!({"app": "x"}));
        let y = child("a", json!({"app": "y"}));
        let p = |sel| parent("a", "p", sel);
        apply(
            &mut s,
            &mut ps,
            p(json!({"matchLabels": {"app": "x"}})),
            false,
        );
        assert_eq!(s.candidates("a", &x), [key("a", "p")]);
        apply(
            &mut s,
            &mut ps,
            p(json!({"matchLabels": {"app": "y"}})),
            false,
        );
        assert!(s.candidates("a", &x).is_empty());
        assert_eq!(s.candidates("a", &y), [key("a", "p")]);
        let expr = json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]});
        apply(&mut s, &mut ps, p(expr), false);
        assert_eq!(selecting(&s, &ps, false, "a", &x), [key("a", "p")]);
        assert!(selecting(&s, &ps, false, "a", &y).is_empty());
        let gone = ps.remove(&key("a", "p")).unwrap();
        s.remove("a", &gone, false);
        assert!(s.filed.is_empty() && s.unfiled.is_empty());
    }

    #[test]
    fn invalid_and_generated_selectors() {
        let (mut s, mut ps) = (ParentSelectors::default(), BTreeMap::new());
        apply(&mut s, &mut ps, parent("a", "empty", json!({})), false);
        let none = json!({"metadata": {"namespace": "a", "name": "none", "uid": "u"}});
        apply(&mut s, &mut ps, none, false);
        let bad = json!({"matchExpressions": [{"key": "app", "operator": "Near"}]});
        apply(&mut s, &mut ps, parent("a", "bad", bad), false);
        // no selector, an empty one: filed nowhere; an unknown operator fails only at match
        assert!(s.filed.is_empty());
        assert_eq!(s.unfiled["a"], [key("a", "bad")]);
        assert!(selecting(&s, &ps, false, "a", &child("a", json!({"app": "x"}))).is_empty());
        let (mut s, mut ps) = (ParentSelectors::default(), BTreeMap::new());
        let gen_ = parent("a", "gen", json!({"matchLabels": {"app": "x"}}));
        apply(&mut s, &mut ps, gen_, true);
        let ours = child("a", json!({"controller-uid": "uid-a-gen", "app": "y"}));
        assert_eq!(selecting(&s, &ps, true, "a", &ours), [key("a", "gen")]);
        assert!(
            s.candidates("a", &child("a", json!({"app": "x"})))
                .is_empty()
        );
    }

    const KEYS: [&str; 3] = ["app", "tier", "zone"];
    const VALUES: [&str; 3] = ["a", "b", "c"];

    fn pick(rng: &mut StdRng, from: &[&'static str]) -> &'static str {
        from[rng.random_range(0..from.len())]
    }

    /// 0–2 matchLabels and 0–2 expressions over a few keys and values.
    fn random_selector(rng: &mut StdRng) -> Value {
        let mut ml = serde_json::Map::new();
        for _ in 0..rng.random_range(0..3) {
            ml.insert(pick(rng, &KEYS).into(), pick(rng, &VALUES).into());
        }
        let mut exprs = Vec::new();
        for _ in 0..rng.random_range(0..3) {
            let op = pick(rng, &["In", "NotIn", "Exists", "DoesNotExist"]);
            let mut e = json!({"key": pick(rng, &KEYS), "operator": op});
            if matches!(op, "In" | "NotIn") {
                e["values"] = json!([pick(rng, &VALUES), pick(rng, &VALUES)]);
            }
            exprs.push(e);
        }
        json!({"matchLabels": ml, "matchExpressions": exprs})
    }

    /// A child in `ns` with random labels, often one parent's controller-uid.
    fn random_child(rng: &mut StdRng, ns: &str, ps: &BTreeMap<ObjKey, Value>) -> Value {
        let mut labels = serde_json::Map::new();
        for k in KEYS {
            if rng.random_range(0..3) > 0 {
                labels.insert(k.into(), pick(rng, &VALUES).into());
            }
        }
        if let Some(p) = ps.values().nth(rng.random_range(0..ps.len().max(1))) {
            labels.insert("controller-uid".into(), p["metadata"]["uid"].clone());
        }
        child(ns, Value::Object(labels))
    }

    /// Against the scan it replaces (every parent in scope, its selector decoded and matched),
    /// over random parents, selector changes, recreations, deletions, refilings and children.
    #[test]
    fn candidates_hold_every_parent_a_scan_finds() {
        let mut rng = StdRng::seed_from_u64(15);
        for generate in [false, true] {
            let (mut s, mut ps) = (ParentSelectors::default(), BTreeMap::new());
            let mut hits = 0;
            for round in 0..2000 {
                let ns = pick(&mut rng, &["a", "b"]);
                let name = format!("p{}", rng.random_range(0..40));
                match rng.random_range(0..20) {
                    0 | 1 => {
                        if let Some(gone) = ps.remove(&key(ns, &name)) {
                            s.remove(ns, &gone, generate);
                        }
                    }
                    2 => {
                        // a lost event: filed again from the cache
                        s.clear();
                        for p in ps.values() {
                            s.change(None, meta_str(p, "namespace"), p, generate);
                        }
                    }
                    3 => {
                        // recreated under the same name: a new uid
                        let mut p = parent(ns, &name, random_selector(&mut rng));
                        p["metadata"]["uid"] = json!(format!("uid-{round}"));
                        apply(&mut s, &mut ps, p, generate);
                    }
                    4..=9 => {
                        // a status write
                        if let Some(mut p) = ps.get(&key(ns, &name)).cloned() {
                            p["status"] = json!({"round": round});
                            apply(&mut s, &mut ps, p, generate);
                        }
                    }
                    _ => {
                        let mut p = parent(ns, &name, random_selector(&mut rng));
                        if let Some(old) = ps.get(&key(ns, &name)) {
                            p["metadata"]["uid"] = old["metadata"]["uid"].clone();
                        }
                        apply(&mut s, &mut ps, p, generate);
                    }
                }
                let c = random_child(&mut rng, ns, &ps);
                let mut scan: Vec<ObjKey> = ps
                    .iter()
                    .filter(|(k, p)| k.namespace == ns && selects(p, generate, &c))
                    .map(|(k, _)| k.clone())
                    .collect();
                scan.sort();
                hits += scan.len();
                assert_eq!(
                    selecting(&s, &ps, generate, ns, &c),
                    scan,
                    "round {round}: child {c}"
                );
                // nothing is filed twice
                let mut all = s.candidates(ns, &child(ns, json!({})));
                for by_key in s.filed.get(ns).into_iter().flat_map(HashMap::values) {
                    all.extend(by_key.values().flatten().cloned());
                }
                let n = all.len();
                all.sort();
                all.dedup();
                assert_eq!(all.len(), n, "round {round}: a parent filed twice");
            }
            // the cases are not trivial: children matched parents
            // (with generateSelector a child matches at most its one parent)
            let least = if generate { 500 } else { 4000 };
            assert!(hits > least, "{hits} matches in all");
        }
    }
}
