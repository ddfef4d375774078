//! What a fleet's plans add up to: parents that would change, per child kind the creates,
//! updates, deletes and writes held back, the field paths that change most, parents whose hook
//! fails; as text for a person and JSON for tools. Pure: built from the plans alone.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use super::{Outcome, ParentPlan};
use crate::reconcile::decide;
use crate::render::{Rendered, Write};

/// Parents named in a list of failures or changes before the rest are only counted: 20.
pub const NAMED: usize = 20;

/// Field paths listed as changing most: 10.
pub const TOP_FIELDS: usize = 10;

/// The writes of one child kind across the fleet.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KindCounts {
    /// Creates.
    pub create: usize,
    /// Updates (a replace or a server-side apply).
    pub update: usize,
    /// Deletes of children no longer desired.
    pub delete: usize,
    /// Deletes that start a recreate (the update method `Recreate`).
    pub recreate: usize,
    /// Writes the child's drift policy holds back.
    pub left_alone: usize,
}

/// What a fleet's plans add up to.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Summary {
    /// Parents planned (every parent listed).
    pub parents: usize,
    /// Parents a sync would write something for (a child or the status).
    pub changed: usize,
    /// The first [`NAMED`] of them.
    pub changed_named: Vec<String>,
    /// Parents whose status a sync would write.
    pub status_writes: usize,
    /// Parents kmeta would not sync (paused), with why.
    pub skipped: Vec<(String, String)>,
    /// Parents whose hook fails or whose answer is refused (the first [`NAMED`]).
    pub failed: Vec<(String, String)>,
    /// How many parents failed in all.
    pub failed_count: usize,
    /// Per child kind (`Kind.apiVersion`).
    pub kinds: BTreeMap<String, KindCounts>,
    /// How many child updates change each field path.
    pub fields: HashMap<String, usize>,
}

impl Summary {
    /// Adds one parent's plan.
    pub fn add(&mut self, p: &ParentPlan) {
        self.parents += 1;
        match &p.outcome {
            Outcome::Planned(r) => self.add_rendered(&p.parent, r),
            Outcome::Skipped(why) => {
                if self.skipped.len() < NAMED {
                    self.skipped.push((p.parent.clone(), why.clone()));
                }
            }
            Outcome::Failed(why) => {
                self.failed_count += 1;
                if self.failed.len() < NAMED {
                    self.failed.push((p.parent.clone(), why.clone()));
                }
            }
        }
    }

    fn add_rendered(&mut self, parent: &str, r: &Rendered) {
        if r.changes() {
            self.changed += 1;
            if self.changed_named.len() < NAMED {
                self.changed_named.push(parent.to_owned());
            }
        }
        self.status_writes += usize::from(r.status_changes());
        for w in &r.writes {
            let key = w.child_key();
            let kind = key.split(' ').next().unwrap_or_default().to_owned();
            let counts = self.kinds.entry(kind).or_default();
            match w {
                Write::Create(_) => counts.create += 1,
                Write::Update(_) | Write::Apply { .. } => counts.update += 1,
                Write::Delete {
                    reason: "recreate", ..
                } => counts.recreate += 1,
                Write::Delete { .. } => counts.delete += 1,
            }
            for path in changed_fields(r, w) {
                *self.fields.entry(path).or_default() += 1;
            }
        }
        for left in &r.left_alone {
            let kind = left.child.split(' ').next().unwrap_or_default().to_owned();
            self.kinds.entry(kind).or_default().left_alone += 1;
        }
    }

    /// Whether a sync of any parent would write: the exit code of `kmeta plan`.
    pub fn writes(&self) -> bool {
        self.changed > 0
    }

    /// The field paths changed most, with how many updates change each, most first.
    pub fn top_fields(&self) -> Vec<(&str, usize)> {
        let mut top: Vec<(&str, usize)> =
            self.fields.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        top.truncate(TOP_FIELDS);
        top
    }

    /// The summary for a person.
    pub fn text(&self, controller: &str) -> String {
        let mut out = format!(
            "plan of compositecontroller/{controller} (read-only: nothing was written)\n\
             parents: {} planned, {} would change, {} hook failures, {} skipped\n",
            self.parents,
            self.changed,
            self.failed_count,
            self.skipped.len()
        );
        for (kind, c) in &self.kinds {
            out.push_str(&format!(
                "  {kind}: {} create, {} update, {} delete, {} recreate, {} left alone\n",
                c.create, c.update, c.delete, c.recreate, c.left_alone
            ));
        }
        out.push_str(&format!("  status: {} updates\n", self.status_writes));
        let top = self.top_fields();
        if !top.is_empty() {
            out.push_str("fields changed most:\n");
            for (path, n) in top {
                out.push_str(&format!("  {path}: {n} children\n"));
            }
        }
        list(
            &mut out,
            "would change",
            self.changed,
            self.changed_named.iter().map(|p| (p.as_str(), "")),
        );
        let failed = self.failed.iter().map(|(p, w)| (p.as_str(), w.as_str()));
        list(&mut out, "hook failures", self.failed_count, failed);
        let skipped = self.skipped.iter().map(|(p, w)| (p.as_str(), w.as_str()));
        list(&mut out, "skipped", self.skipped.len(), skipped);
        out
    }

    /// The summary for tools.
    pub fn json(&self, controller: &str) -> Value {
        let kinds: serde_json::Map<String, Value> = self
            .kinds
            .iter()
            .map(|(k, c)| {
                let v = json!({"create": c.create, "update": c.update, "delete": c.delete,
                    "recreate": c.recreate, "leftAlone": c.left_alone});
                (k.clone(), v)
            })
            .collect();
        let fields: Vec<Value> = self
            .top_fields()
            .into_iter()
            .map(|(p, n)| json!({"path": p, "children": n}))
            .collect();
        let pairs = |v: &[(String, String)]| -> Vec<Value> {
            v.iter()
                .map(|(p, w)| json!({"parent": p, "reason": w}))
                .collect()
        };
        json!({
            "controller": controller, "readOnly": true,
            "parents": self.parents, "changed": self.changed, "changedParents": self.changed_named,
            "statusWrites": self.status_writes, "kinds": kinds, "fields": fields,
            "failed": self.failed_count, "failures": pairs(&self.failed),
            "skipped": pairs(&self.skipped),
        })
    }
}

/// Appends `title` with up to [`NAMED`] parents and the count of the others.
fn list<'a>(
    out: &mut String,
    title: &str,
    count: usize,
    named: impl Iterator<Item = (&'a str, &'a str)>,
) {
    if count == 0 {
        return;
    }
    out.push_str(&format!("{title}:\n"));
    let mut shown = 0;
    for (parent, why) in named {
        shown += 1;
        match why {
            "" => out.push_str(&format!("  {parent}\n")),
            why => out.push_str(&format!("  {parent}: {why}\n")),
        }
    }
    if count > shown {
        out.push_str(&format!("  and {} more\n", count - shown));
    }
}

/// The field paths an update in `r` changes (against the observed child), as the sync record
/// names them.
fn changed_fields(r: &Rendered, w: &Write) -> Vec<String> {
    let (body, apply) = match w {
        Write::Update(v) => (v, false),
        Write::Apply { body, .. } => (body, true),
        _ => return Vec::new(),
    };
    let key = decide::child_key(body);
    let Some(live) = r.observed.iter().find(|o| decide::child_key(o) == key) else {
        return Vec::new();
    };
    let ignore = [dynapply::LAST_APPLIED_ANNOTATION];
    match apply {
        true => decide::applied_paths(live, body, &ignore),
        false => decide::changed_paths(live, body, &ignore),
    }
}

/// One parent's plan for tools: what it would write, per child with the field paths an update
/// changes.
pub fn parent_json(p: &ParentPlan) -> Value {
    match &p.outcome {
        Outcome::Skipped(why) => json!({"parent": p.parent, "outcome": "skipped", "reason": why}),
        Outcome::Failed(why) => json!({"parent": p.parent, "outcome": "failed", "reason": why}),
        Outcome::Planned(r) => {
            let writes: Vec<Value> = r
                .writes
                .iter()
                .map(|w| json!({"op": op_name(w), "child": w.child_key(), "fields": changed_fields(r, w)}))
                .collect();
            let left: Vec<Value> = r
                .left_alone
                .iter()
                .map(|l| json!({"child": l.child, "reason": l.why}))
                .collect();
            let outcome = if r.changes() { "changes" } else { "no changes" };
            json!({"parent": p.parent, "outcome": outcome, "writes": writes,
                "leftAlone": left, "status": r.status_changes()})
        }
    }
}

/// The name of a write's operation in JSON.
fn op_name(w: &Write) -> &'static str {
    match w {
        Write::Create(_) => "create",
        Write::Update(_) => "update",
        Write::Apply { .. } => "apply",
        Write::Delete {
            reason: "recreate", ..
        } => "recreate",
        Write::Delete { .. } => "delete",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cm(name: &str, v: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "n"}, "data": {"v": v}})
    }

    fn planned(writes: Vec<Write>, observed: Vec<Value>) -> Outcome {
        Outcome::Planned(Box::new(Rendered {
            parent: json!({"metadata": {"name": "p", "namespace": "n"}}),
            observed,
            status: Value::Null,
            desired: vec![],
            writes,
            left_alone: vec![],
            unchanged: vec![],
            events: vec![],
        }))
    }

    #[test]
    fn a_summary_counts_writes_per_kind_the_fields_and_the_failures() {
        let mut s = Summary::default();
        let update = planned(vec![Write::Update(cm("a", "2"))], vec![cm("a", "1")]);
        s.add(&ParentPlan {
            parent: "n/p1".into(),
            outcome: update,
        });
        let create = planned(vec![Write::Create(cm("b", "1"))], vec![]);
        s.add(&ParentPlan {
            parent: "n/p2".into(),
            outcome: create,
        });
        s.add(&ParentPlan {
            parent: "n/p3".into(),
            outcome: Outcome::Failed("503".into()),
        });
        assert_eq!(s.parents, 3);
        assert_eq!(s.changed, 2);
        assert_eq!(s.failed_count, 1);
        let counts = &s.kinds["ConfigMap.v1"];
        assert_eq!((counts.create, counts.update), (1, 1));
        assert_eq!(s.top_fields(), vec![("data.v", 1)]);
        let text = s.text("cc");
        assert!(
            text.contains("3 planned, 2 would change, 1 hook failures"),
            "{text}"
        );
        assert!(text.contains("n/p3: 503"), "{text}");
        assert!(s.writes());
        assert_eq!(s.json("cc")["kinds"]["ConfigMap.v1"]["update"], 1);
    }

    #[test]
    fn a_fleet_in_sync_has_nothing_to_write() {
        let mut s = Summary::default();
        s.add(&ParentPlan {
            parent: "n/p".into(),
            outcome: planned(vec![], vec![cm("a", "1")]),
        });
        assert!(!s.writes());
        assert!(s.text("cc").contains("1 planned, 0 would change"));
    }
}
