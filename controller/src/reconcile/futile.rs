//! Child updates the API server answered without writing, remembered so they are not sent on
//! every sync (state between syncs, kept beside [`crate::reconcile::last_applied`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;

/// After an update of a child: when the API server answered with the resourceVersion the child
/// was sent with, it changed nothing, so whatever the sent object has that the stored one does not
/// was dropped or overridden by the server (fields the child's schema does not declare, values an
/// admission webhook resets). Returns those field paths (`spec.extra`, `spec.ports[1]`); `None`
/// when the server did write. The merge will send them again on every sync.
pub fn ignored_by_server(sent: &Value, stored: &Value) -> Option<Vec<String>> {
    let rv = |o: &Value| o.pointer("/metadata/resourceVersion").cloned();
    if rv(sent).is_none() || rv(sent) != rv(stored) {
        return None;
    }
    let mut paths = Vec::new();
    if let (Some(sent), Some(stored)) = (sent.as_object(), stored.as_object()) {
        for (k, v) in sent {
            // server-owned: status has its own endpoint, metadata's system fields are not ours
            if k == "status" || k == "apiVersion" || k == "kind" {
                continue;
            }
            if k == "metadata" {
                for f in ["labels", "annotations", "finalizers", "ownerReferences"] {
                    let (a, b) = (v.get(f), stored.get("metadata").and_then(|m| m.get(f)));
                    if let Some(a) = a {
                        differences(a, b, &format!("metadata.{f}"), &mut paths);
                    }
                }
                continue;
            }
            differences(v, stored.get(k), k, &mut paths);
        }
    }
    Some(paths)
}

/// Child updates the API server answered without writing (see [`ignored_by_server`]), so the same
/// update of the same child version is not sent again on every sync: keyed by the child's uid,
/// with its resourceVersion and a digest of the object that was sent. Any change to the child
/// (a new resourceVersion) or to what kmeta would send (a new digest) sends it again, and so does
/// the passing of [`FutileUpdates::TTL`] (the server's answer may change without the child
/// changing: a CRD that now declares the field, a webhook removed).
#[derive(Debug, Default)]
pub struct FutileUpdates {
    seen: HashMap<String, (String, u64, Instant)>,
}

impl FutileUpdates {
    /// Entries kept at most; past it the memory is dropped (the cost: one more futile PUT each).
    pub const CAPACITY: usize = 10_000;
    /// How long a futile update is not repeated: 10 minutes (one PUT per child per 10 minutes
    /// instead of one per sync; kmeta's choice, Metacontroller has no such memory).
    pub const TTL: Duration = Duration::from_secs(600);

    fn key(obj: &Value) -> Option<(String, String, u64)> {
        use std::hash::{Hash as _, Hasher as _};
        let uid = obj.pointer("/metadata/uid")?.as_str()?;
        let rv = obj.pointer("/metadata/resourceVersion")?.as_str()?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        obj.to_string().hash(&mut h);
        Some((uid.to_owned(), rv.to_owned(), h.finish()))
    }

    /// Whether sending `obj` (an update) at `now` is known to change nothing.
    pub fn is_futile(&self, obj: &Value, now: Instant) -> bool {
        Self::key(obj).is_some_and(|(uid, rv, digest)| {
            self.seen.get(&uid).is_some_and(|(r, d, at)| {
                *r == rv && *d == digest && now.saturating_duration_since(*at) < Self::TTL
            })
        })
    }

    /// Records that sending `obj` at `now` changed nothing.
    pub fn record(&mut self, obj: &Value, now: Instant) {
        if let Some((uid, rv, digest)) = Self::key(obj) {
            if self.seen.len() >= Self::CAPACITY {
                self.seen.clear();
            }
            self.seen.insert(uid, (rv, digest, now));
        }
    }

    /// Forgets a child (it was written, or deleted).
    pub fn forget(&mut self, obj: &Value) {
        if let Some(uid) = obj.pointer("/metadata/uid").and_then(Value::as_str) {
            self.seen.remove(uid);
        }
    }
}

/// Paths under `path` where `sent` has something `stored` does not (recursing into objects, and
/// into lists of the same length item by item).
fn differences(sent: &Value, stored: Option<&Value>, path: &str, out: &mut Vec<String>) {
    match (sent, stored) {
        (_, None) => out.push(path.to_owned()),
        (Value::Object(a), Some(Value::Object(b))) => {
            for (k, v) in a {
                differences(v, b.get(k), &format!("{path}.{k}"), out);
            }
        }
        (Value::Array(a), Some(Value::Array(b))) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(x, Some(y), &format!("{path}[{i}]"), out);
            }
        }
        (a, Some(b)) if !dynapply::json_eq(a, b) => out.push(path.to_owned()),
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    use serde_json::json;

    #[test]
    fn futile_updates_are_remembered_per_child_version_and_content() {
        let sent = json!({"metadata": {"uid": "u1", "resourceVersion": "7"}, "spec": {"x": 1}});
        let t0 = Instant::now();
        let mut f = FutileUpdates::default();
        assert!(!f.is_futile(&sent, t0));
        f.record(&sent, t0);
        assert!(f.is_futile(&sent, t0 + Duration::from_secs(1)));
        assert!(
            !f.is_futile(&sent, t0 + FutileUpdates::TTL),
            "tried again after the TTL"
        );
        let mut newer = sent.clone();
        newer["metadata"]["resourceVersion"] = json!("8");
        assert!(!f.is_futile(&newer, t0), "the child changed");
        let mut other = sent.clone();
        other["spec"]["x"] = json!(2);
        assert!(!f.is_futile(&other, t0), "kmeta would send something else");
        f.forget(&sent);
        assert!(!f.is_futile(&sent, t0));
        let no_uid = json!({"metadata": {"resourceVersion": "7"}});
        f.record(&no_uid, t0);
        assert!(!f.is_futile(&no_uid, t0));
    }

    #[test]
    fn fields_the_server_ignored_on_a_no_op_update() {
        let sent = json!({"apiVersion": "example.com/v1", "kind": "Gadget",
            "metadata": {"name": "g", "resourceVersion": "7", "labels": {"a": "1"}},
            "spec": {"known": "x", "extra": {"deep": 1}, "ports": [{"port": 80, "name": "web"}],
                     "count": 1},
            "status": {"whatever": true}});
        let stored = json!({"apiVersion": "example.com/v1", "kind": "Gadget",
            "metadata": {"name": "g", "resourceVersion": "7", "labels": {"a": "1"},
                         "uid": "u", "managedFields": []},
            "spec": {"known": "x", "ports": [{"port": 80}], "count": 1.0, "defaulted": 3}});
        assert_eq!(
            ignored_by_server(&sent, &stored),
            Some(vec![
                "spec.extra".to_owned(),
                "spec.ports[0].name".to_owned()
            ])
        );
        let mut written = stored.clone();
        written["metadata"]["resourceVersion"] = json!("8");
        assert_eq!(ignored_by_server(&sent, &written), None, "the server wrote");
        assert_eq!(
            ignored_by_server(&stored, &stored),
            Some(vec![]),
            "nothing ignored"
        );
    }
}
