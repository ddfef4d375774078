//! Low-level storage: objects keyed by (resource, namespace, name), one global resourceVersion
//! counter, indexes by uid and by owner uid, and the retained window of watch events.

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

/// A stored object (immutable once stored).
pub type Obj = Arc<Value>;

/// Storage key. `res` is `group/plural`; `ns` is "" for cluster-scoped objects.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// `group/plural`.
    pub res: Arc<str>,
    /// Namespace ("" for cluster scope).
    pub ns: String,
    /// Name.
    pub name: String,
}

/// Watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventType {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change.
#[derive(Debug, Clone)]
pub struct Event {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Type.
    pub ty: EventType,
    /// Key of the object.
    pub key: Key,
    /// Object after the change (for DELETED: its last state, with the deletion's rv).
    pub obj: Obj,
    /// Object before the change (for selector transitions).
    pub prev: Option<Obj>,
    /// `obj` serialized once, shared by all watchers that need it verbatim.
    pub json: std::sync::OnceLock<bytes::Bytes>,
}

impl Event {
    /// The serialized object (computed on first use).
    pub fn obj_json(&self) -> &bytes::Bytes {
        self.json
            .get_or_init(|| bytes::Bytes::from(serde_json::to_vec(&*self.obj).unwrap_or_default()))
    }
}

/// The object table and event log.
#[derive(Debug)]
pub struct Storage {
    rv: u64,
    objects: BTreeMap<Key, Obj>,
    uids: HashMap<String, Key>,
    owners: HashMap<String, BTreeSet<Key>>,
    events: VecDeque<Arc<Event>>,
    window: usize,
    /// Highest rv whose event is no longer retained.
    compacted: u64,
}

/// Return uid of an object.
pub fn uid_of(v: &Value) -> Option<&str> {
    v.get("metadata")?.get("uid")?.as_str()
}

/// Owner uids of an object.
pub fn owner_uids(v: &Value) -> Vec<String> {
    v.get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|o| o.get("uid").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

impl Storage {
    /// Empty storage retaining `window` events.
    pub fn new(window: usize) -> Self {
        Storage {
            rv: 0,
            objects: BTreeMap::new(),
            uids: HashMap::new(),
            owners: HashMap::new(),
            events: VecDeque::new(),
            window: window.max(1),
            compacted: 0,
        }
    }

    /// Current resourceVersion.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// Highest rv no longer in the event window (a watch must start at or after it).
    pub fn compacted(&self) -> u64 {
        self.compacted
    }

    /// Drop all retained events (as if compaction ran): watches from older rvs get 410.
    pub fn compact_all(&mut self) {
        self.events.clear();
        self.compacted = self.rv;
    }

    /// Object by key.
    pub fn get(&self, key: &Key) -> Option<&Obj> {
        self.objects.get(key)
    }

    /// Key of the object with a uid.
    pub fn key_of_uid(&self, uid: &str) -> Option<&Key> {
        self.uids.get(uid)
    }

    /// Keys of the objects that list `uid` as an owner.
    pub fn dependents(&self, uid: &str) -> Vec<Key> {
        self.owners
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Objects of a resource, in one namespace (`Some`) or all, in key order, starting after
    /// `after` (exclusive) if given.
    pub fn range<'a>(
        &'a self,
        res: &Arc<str>,
        ns: Option<&str>,
        after: Option<&Key>,
    ) -> impl Iterator<Item = (&'a Key, &'a Obj)> + 'a {
        let start = Key {
            res: res.clone(),
            ns: ns.unwrap_or("").to_string(),
            name: String::new(),
        };
        let lower = match after {
            Some(a) if *a >= start => std::ops::Bound::Excluded(a.clone()),
            _ => std::ops::Bound::Included(start),
        };
        let res = res.clone();
        let ns = ns.map(str::to_string);
        self.objects
            .range((lower, std::ops::Bound::Unbounded))
            .take_while(move |(k, _)| k.res == res && ns.as_ref().is_none_or(|n| *n == k.ns))
    }

    /// Whether any object lives in the namespace (any resource).
    pub fn namespace_keys(&self, ns: &str) -> Vec<Key> {
        self.objects
            .keys()
            .filter(|k| k.ns == ns)
            .cloned()
            .collect()
    }

    fn index_remove(&mut self, key: &Key, obj: &Value) {
        if let Some(uid) = uid_of(obj) {
            self.uids.remove(uid);
        }
        for o in owner_uids(obj) {
            if let Some(s) = self.owners.get_mut(&o) {
                s.remove(key);
                if s.is_empty() {
                    self.owners.remove(&o);
                }
            }
        }
    }

    fn index_add(&mut self, key: &Key, obj: &Value) {
        if let Some(uid) = uid_of(obj) {
            self.uids.insert(uid.to_string(), key.clone());
        }
        for o in owner_uids(obj) {
            self.owners.entry(o).or_default().insert(key.clone());
        }
    }

    fn push_event(&mut self, ev: Event) {
        self.events.push_back(Arc::new(ev));
        while self.events.len() > self.window {
            if let Some(old) = self.events.pop_front() {
                self.compacted = old.rv;
            }
        }
    }

    fn stamp(&mut self, mut obj: Value) -> Value {
        self.rv += 1;
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".into(), json!(self.rv.to_string()));
        }
        obj
    }

    /// Store (create or replace) an object, assigning a new resourceVersion and emitting one
    /// event. Returns the stored object.
    pub fn put(&mut self, key: Key, obj: Value) -> Obj {
        let obj = Arc::new(self.stamp(obj));
        let prev = self.objects.insert(key.clone(), obj.clone());
        if let Some(p) = &prev {
            self.index_remove(&key, p);
        }
        self.index_add(&key, &obj);
        let ty = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.push_event(Event {
            rv: self.rv,
            ty,
            key,
            obj: obj.clone(),
            prev,
            json: std::sync::OnceLock::new(),
        });
        obj
    }

    /// Remove an object, emitting a DELETED event carrying `last` (the final state) stamped with
    /// a new resourceVersion. Returns that final object.
    pub fn remove(&mut self, key: &Key, last: Option<Value>) -> Option<Obj> {
        let prev = self.objects.remove(key)?;
        self.index_remove(key, &prev);
        let last = last.unwrap_or_else(|| (*prev).clone());
        let obj = Arc::new(self.stamp(last));
        self.push_event(Event {
            rv: self.rv,
            ty: EventType::Deleted,
            key: key.clone(),
            obj: obj.clone(),
            prev: Some(prev),
            json: std::sync::OnceLock::new(),
        });
        Some(obj)
    }

    /// Events with rv greater than `since`, or `Err(compacted)` when some were already dropped.
    pub fn events_since(&self, since: u64) -> Result<Vec<Arc<Event>>, u64> {
        if since < self.compacted {
            return Err(self.compacted);
        }
        let start = self.events.partition_point(|e| e.rv <= since);
        Ok(self.events.range(start..).cloned().collect())
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key(res: &str, ns: &str, name: &str) -> Key {
        Key {
            res: Arc::from(res),
            ns: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn rv_monotonic_and_events() {
        let mut s = Storage::new(3);
        let a = s.put(
            key("/configmaps", "ns", "a"),
            json!({"metadata": {"uid": "u1"}}),
        );
        assert_eq!(a["metadata"]["resourceVersion"], "1");
        s.put(
            key("/configmaps", "ns", "b"),
            json!({"metadata": {"uid": "u2", "ownerReferences": [{"uid": "u1"}]}}),
        );
        assert_eq!(s.dependents("u1"), vec![key("/configmaps", "ns", "b")]);
        s.remove(&key("/configmaps", "ns", "a"), None);
        assert_eq!(s.rv(), 3);
        let ev = s.events_since(1).unwrap();
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[1].ty, EventType::Deleted);
        s.put(key("/configmaps", "ns", "c"), json!({"metadata": {}}));
        // window of 3 dropped rv 1
        assert_eq!(s.events_since(0).err(), Some(1));
        assert!(s.events_since(1).is_ok());
    }

    #[test]
    fn range_by_namespace() {
        let mut s = Storage::new(10);
        s.put(key("/configmaps", "a", "x"), json!({"metadata": {}}));
        s.put(key("/configmaps", "b", "y"), json!({"metadata": {}}));
        s.put(key("/secrets", "a", "z"), json!({"metadata": {}}));
        let r: Arc<str> = Arc::from("/configmaps");
        assert_eq!(s.range(&r, Some("a"), None).count(), 1);
        assert_eq!(s.range(&r, None, None).count(), 2);
        let first = key("/configmaps", "a", "x");
        assert_eq!(s.range(&r, None, Some(&first)).count(), 1);
    }
}
