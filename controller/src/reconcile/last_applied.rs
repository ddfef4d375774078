//! The last-applied configuration of each child kmeta wrote, kept per child version (uid and
//! `resourceVersion`) so the child's next update does not parse its annotation again
//! ([`dynapply::apply_update_with`]). Seeded after kmeta's own create or update with what it
//! recorded, dropped when the child leaves the watch cache, bounded in bytes (past the budget the
//! entries are dropped: dynapply reads the annotation again, parsing it only for an update that
//! changes something). A version kmeta did not write is not parsed into it ([`for_update`]). See
//! docs/design/last-applied-cache.md.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::object::meta_str;
use crate::reconcile::decide::KnownLast;

/// One child's entry.
#[derive(Debug)]
struct Entry {
    resource_version: String,
    last: Arc<Value>,
    /// Recorded by kmeta's own write of this version, or parsed from an annotation that is
    /// exactly dynapply's encoding of it ([`dynapply::is_recorded`]).
    recorded: bool,
    bytes: usize,
}

/// Parsed last-applied configurations by child uid.
#[derive(Debug)]
pub struct LastAppliedCache {
    entries: HashMap<String, Entry>,
    bytes: usize,
    budget: usize,
}

impl Default for LastAppliedCache {
    fn default() -> Self {
        LastAppliedCache::with_budget(LastAppliedCache::BUDGET)
    }
}

impl LastAppliedCache {
    /// Default budget: 1 MiB of estimated heap per controller (kmeta's; 64 MiB before children
    /// were cached compact, 4 MiB until a parsed entry could be recognised as kmeta's own
    /// encoding). A parsed configuration is held in about 5× its JSON, and the estimate
    /// undercounts the allocator's own share (a heap profile of the 2000 × 10 sizing bench
    /// measured 26 MB held for a 16 MiB budget). 1 MiB holds about 750 ConfigMap-sized or 40
    /// large (20 containers × 50 env vars) entries; past it a child's no-op check matches the
    /// answer's encoding against the annotation, and an update that changes something parses
    /// the annotation, a few µs for a ConfigMap. The
    /// sizing bench at 1000 × 10 measured a peak RSS of 50 MiB at 1 MiB against 54–55 MiB at
    /// 4 MiB, with the same converge and resync CPU (`cargo bench -p kmeta-tests --bench scale`).
    pub const BUDGET: usize = 1 << 20;

    /// An empty cache holding at most `budget` estimated heap bytes.
    pub fn with_budget(budget: usize) -> Self {
        LastAppliedCache {
            entries: HashMap::new(),
            bytes: 0,
            budget,
        }
    }

    /// The last-applied configuration recorded for `observed` at its `resourceVersion`, if this
    /// very version is known.
    #[cfg(test)]
    pub fn get(&self, observed: &Value) -> Option<Arc<Value>> {
        self.get_known(observed).map(|k| k.value)
    }

    /// The last-applied configuration known for `observed` at its `resourceVersion`, if this
    /// very version is known, and whether it is recorded (see [`KnownLast`]).
    pub fn get_known(&self, observed: &Value) -> Option<KnownLast> {
        let e = self.entries.get(meta_str(observed, "uid"))?;
        (e.resource_version == meta_str(observed, "resourceVersion")).then(|| KnownLast {
            value: e.last.clone(),
            recorded: e.recorded,
        })
    }

    /// Records `last` as the last-applied configuration of the child `stored` (the object the
    /// API server answered a write with: its uid and new `resourceVersion`). An entry larger
    /// than the whole budget is not kept; past the budget every entry is dropped first.
    #[cfg(test)]
    pub fn insert(&mut self, stored: &Value, last: Value) {
        let (uid, rv) = (meta_str(stored, "uid"), meta_str(stored, "resourceVersion"));
        self.insert_version_shared(uid, rv, Arc::new(last), true);
    }

    /// [`LastAppliedCache::insert`] for the child version `(uid, rv)` kmeta wrote, `last` being
    /// [`dynapply::recorded_last_applied`] of what it wrote (the stored annotation is the text
    /// it sent).
    pub fn insert_version(&mut self, uid: &str, rv: &str, last: Value) {
        self.insert_version_shared(uid, rv, Arc::new(last), true);
    }

    fn insert_version_shared(&mut self, uid: &str, rv: &str, last: Arc<Value>, recorded: bool) {
        if uid.is_empty() || rv.is_empty() {
            return;
        }
        self.forget(uid);
        let bytes = heap_bytes(&last) + uid.len() + rv.len() + ENTRY_OVERHEAD;
        if bytes > self.budget {
            return;
        }
        if self.bytes + bytes > self.budget {
            self.entries.clear();
            self.bytes = 0;
        }
        self.bytes += bytes;
        let entry = Entry {
            resource_version: rv.to_owned(),
            last,
            recorded,
            bytes,
        };
        self.entries.insert(uid.to_owned(), entry);
    }

    /// Drops the entry of the child `uid` (it left the cache, or was deleted).
    pub fn forget(&mut self, uid: &str) {
        if let Some(e) = self.entries.remove(uid) {
            self.bytes -= e.bytes;
        }
    }

    /// Estimated heap bytes held.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Entries held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The last-applied configuration an update of `observed` is given: the one known for its
/// version (kmeta wrote that version). An unknown version of a type written with the annotation
/// is not parsed here: `None` lets dynapply's update read the annotation itself, which it parses
/// only when the hook's answer differs from it (a no-op is found by matching the answer's
/// encoding against the annotation's text), so a child that needs no update is never parsed.
/// With the record off ([`dynapply::Options::record`]) an annotation the child still carries is
/// parsed: it is the base, where its absence sends the caller to `managedFields`.
pub fn for_update(
    cache: &Mutex<LastAppliedCache>,
    observed: &Value,
    opts: &dynapply::Options,
) -> Option<KnownLast> {
    if let Some(known) = cache.lock().ok()?.get_known(observed) {
        return Some(known);
    }
    if opts.record {
        return None;
    }
    let parsed = dynapply::get_last_applied(observed, opts).ok()??;
    let recorded = dynapply::is_recorded(observed, &parsed, opts);
    Some(KnownLast {
        value: Arc::new(parsed),
        recorded,
    })
}

/// Per-entry bookkeeping besides the value: the map slot, the `Arc` and the key strings' headers.
const ENTRY_OVERHEAD: usize = 128;

/// An estimate of the heap bytes a `Value` tree holds: strings' bytes, and per map entry or list
/// item the size of a `Value` plus the order-preserving map's index (about 3 words).
fn heap_bytes(v: &Value) -> usize {
    const SLOT: usize = std::mem::size_of::<Value>();
    match v {
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(|i| SLOT + heap_bytes(i)).sum(),
        Value::Object(m) => m
            .iter()
            .map(|(k, i)| k.len() + SLOT + 3 * 8 + std::mem::size_of::<String>() + heap_bytes(i))
            .sum(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn child(uid: &str, rv: &str) -> Value {
        json!({"metadata": {"name": "c", "uid": uid, "resourceVersion": rv}})
    }

    #[test]
    fn an_entry_answers_only_for_its_child_version() {
        let mut c = LastAppliedCache::default();
        c.insert(&child("u1", "5"), json!({"data": {"k": "v"}}));
        assert_eq!(
            *c.get(&child("u1", "5")).unwrap(),
            json!({"data": {"k": "v"}})
        );
        assert!(
            c.get(&child("u1", "6")).is_none(),
            "a newer version is unknown"
        );
        assert!(
            c.get(&child("u2", "5")).is_none(),
            "another child is unknown"
        );
        // a new write replaces the entry, with its accounting
        let before = c.bytes();
        c.insert(&child("u1", "7"), json!({"data": {"k": "v2"}}));
        assert_eq!(c.len(), 1);
        assert_eq!(c.bytes(), before + 1);
        assert!(c.get(&child("u1", "5")).is_none());
        assert!(c.get(&child("u1", "7")).is_some());
    }

    #[test]
    fn forget_and_objects_without_identity() {
        let mut c = LastAppliedCache::default();
        c.insert(&child("u1", "5"), json!({}));
        c.insert(&child("", "5"), json!({}));
        c.insert(&child("u3", ""), json!({}));
        assert_eq!(c.len(), 1);
        c.forget("u1");
        c.forget("unknown");
        assert_eq!((c.len(), c.bytes()), (0, 0));
    }

    #[test]
    fn the_budget_bounds_the_bytes_held() {
        let last = json!({"data": {"key": "x".repeat(1000)}});
        let one = heap_bytes(&last) + "u0".len() + "1".len() + ENTRY_OVERHEAD;
        let mut c = LastAppliedCache::with_budget(3 * one);
        for i in 0..10 {
            c.insert(&child(&format!("u{i}"), "1"), last.clone());
            assert!(c.bytes() <= 3 * one, "{} over {}", c.bytes(), 3 * one);
        }
        assert!(c.len() >= 1, "the newest entry is kept");
        assert!(c.get(&child("u9", "1")).is_some());
        // larger than the whole budget: not kept
        let mut small = LastAppliedCache::with_budget(10);
        small.insert(&child("u1", "1"), last);
        assert_eq!(small.len(), 0);
    }

    /// An unknown version is not parsed (dynapply's update reads its annotation, and finds a
    /// no-op without parsing it); a version kmeta wrote is known, as recorded.
    #[test]
    fn an_unknown_child_version_is_left_to_dynapply_and_a_written_one_is_known() {
        let opts = dynapply::Options::default();
        let want = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c"}, "data": {"k": "v"}});
        let mut live = dynapply::prepare_create(&want, &opts).unwrap();
        live["metadata"]["uid"] = json!("u1");
        live["metadata"]["resourceVersion"] = json!("4");
        let cache = Mutex::new(LastAppliedCache::default());
        assert!(for_update(&cache, &live, &opts).is_none());
        assert_eq!(
            cache.lock().unwrap().len(),
            0,
            "nothing parsed, nothing kept"
        );
        // left to dynapply, the update is what the parsed configuration gives
        let parsed = dynapply::get_last_applied(&live, &opts).unwrap();
        let mut changed = want.clone();
        changed["data"]["k"] = json!("w");
        for w in [&want, &changed] {
            assert_eq!(
                dynapply::apply_update(&live, w, &opts).unwrap(),
                dynapply::apply_update_with(&live, parsed.as_ref(), w, &opts).unwrap()
            );
        }
        // a version kmeta wrote is known as recorded
        let recorded = dynapply::recorded_last_applied(&want, &opts).unwrap();
        cache
            .lock()
            .unwrap()
            .insert_version("u1", "5", recorded.clone());
        live["metadata"]["resourceVersion"] = json!("5");
        let known_last = for_update(&cache, &live, &opts).unwrap();
        assert!(known_last.recorded && *known_last.value == recorded);
        // with the record off, an annotation still there is the base: parsed, not kept
        let off = dynapply::Options {
            record: false,
            ..dynapply::Options::default()
        };
        live["metadata"]["resourceVersion"] = json!("6");
        let base = for_update(&cache, &live, &off).unwrap();
        assert_eq!(Some(&*base.value), parsed.as_ref());
        assert_eq!(cache.lock().unwrap().len(), 1);
    }

    #[test]
    fn heap_bytes_grows_with_content() {
        assert_eq!(heap_bytes(&json!(1)), 0);
        let small = heap_bytes(&json!({"a": "b"}));
        let large = heap_bytes(&json!({"a": "b", "c": ["d", "e"]}));
        assert!(small > 2 && large > small);
    }
}
