//! Low-level storage: objects keyed by (resource, namespace, name), one global resourceVersion
//! counter, indexes by uid and by owner uid, and the retained window of watch events.
//!
//! The table holds each object as its JSON text ([`Packed`]) and decodes it on read: decoded,
//! a ConfigMap takes eight times its text (docs/design/apiserver-packed-objects.md).

mod packed;

use packed::Ids;
pub(crate) use packed::Packed;
use packed::keeps_decoded;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, OnceLock};

/// An object as read from the store (decoded; immutable once stored).
pub(crate) type Obj = Arc<Value>;

/// Storage key. `res` is `group/plural`; `ns` is "" for cluster-scoped objects.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Key {
    /// `group/plural`.
    pub(crate) res: Arc<str>,
    /// Namespace ("" for cluster scope).
    pub(crate) ns: String,
    /// Name.
    pub(crate) name: String,
}

impl Key {
    /// Whether the key is of resource `res`, in namespace `ns` (`None`: any namespace).
    fn within(&self, res: &str, ns: Option<&str>) -> bool {
        *self.res == *res && ns.is_none_or(|n| n == self.ns)
    }
}

/// Watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

/// One change. The objects are held as text (the window may hold many thousands of events);
/// what watches test on every event, the head ([`Packed::head`]), is kept decoded, small.
#[derive(Debug)]
pub(crate) struct Event {
    /// resourceVersion of the change.
    pub(crate) rv: u64,
    /// Type.
    pub(crate) ty: EventType,
    /// Key of the object.
    pub(crate) key: Key,
    /// Object after the change (for DELETED: its last state, with the deletion's rv), as
    /// stored: its text, shared by all watchers that need it verbatim.
    packed: Packed,
    /// The head of the object after the change.
    head: Obj,
    /// Object before the change, as stored (for selector transitions and snapshots).
    prev: Option<Packed>,
    /// The head of `prev`, decoded on first use.
    prev_head: OnceLock<Option<Obj>>,
}

impl Event {
    /// The event of a change at `rv` to `obj` (stored as `packed`) from `prev`.
    fn new(
        rv: u64,
        ty: EventType,
        key: Key,
        obj: &Value,
        packed: Packed,
        prev: Option<Packed>,
    ) -> Event {
        Event {
            rv,
            ty,
            key,
            packed,
            head: Arc::new(packed::head_of(obj)),
            prev,
            prev_head: OnceLock::new(),
        }
    }

    /// Object after the change, decoded (each call decodes: the window does not hold it).
    pub(crate) fn obj(&self) -> Obj {
        self.packed.value()
    }

    /// Object before the change (`None` for ADDED), decoded (each call decodes).
    pub(crate) fn prev(&self) -> Option<Obj> {
        self.prev.as_ref().map(Packed::value)
    }

    /// apiVersion, kind and the selectable metadata of the object after the change.
    pub(crate) fn head(&self) -> &Obj {
        &self.head
    }

    /// The same of the object before the change, decoded on first use.
    pub(crate) fn prev_head(&self) -> Option<&Obj> {
        self.prev_head
            .get_or_init(|| self.prev.as_ref().map(|p| Arc::new(p.head())))
            .as_ref()
    }

    /// Whether there was an object before the change (without decoding it).
    pub(crate) fn had_prev(&self) -> bool {
        self.prev.is_some()
    }

    /// The serialized object.
    pub(crate) fn obj_json(&self) -> &bytes::Bytes {
        self.packed.json()
    }
}

/// Why [`Storage::snapshot`] cannot read a resourceVersion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtError {
    /// The rv is older than the retained history (`compacted` is the oldest readable rv).
    Compacted {
        /// Highest rv no longer retained.
        compacted: u64,
    },
    /// The rv is newer than the current one.
    TooLarge {
        /// Current rv.
        current: u64,
    },
}

/// The objects of one resource as of a resourceVersion: the live table with the changes made
/// after that rv undone (see [`Storage::snapshot`]).
#[derive(Debug)]
pub(crate) struct Snapshot<'a> {
    store: &'a Storage,
    res: Arc<str>,
    ns: Option<String>,
    /// State at `rv` of each key changed after it (`None`: absent at `rv`).
    undo: BTreeMap<Key, Option<Packed>>,
}

impl<'a> Snapshot<'a> {
    /// Whether this is the live state (nothing undone).
    #[cfg(test)]
    pub(crate) fn is_live(&self) -> bool {
        self.undo.is_empty()
    }

    /// Object by key as of the snapshot's rv (the key must be in the snapshot's range).
    pub(crate) fn get(&self, key: &Key) -> Option<&Packed> {
        match self.undo.get(key) {
            Some(before) => before.as_ref(),
            None => self.store.get_packed(key),
        }
    }

    /// Objects in key order as of the snapshot's rv, starting after `after` (exclusive) if
    /// given: the live range merged with the undone keys.
    pub(crate) fn range<'s>(
        &'s self,
        after: Option<&Key>,
    ) -> impl Iterator<Item = (&'s Key, &'s Packed)> + 's {
        let store: &'s Storage = self.store;
        let live = store.range(&self.res, self.ns.as_deref(), after);
        let lower = match after {
            Some(a) => std::ops::Bound::Excluded(a.clone()),
            None => std::ops::Bound::Unbounded,
        };
        let undo = self.undo.range((lower, std::ops::Bound::Unbounded));
        Merge {
            live: live.peekable(),
            undo: undo.peekable(),
        }
    }
}

/// Merge of the live range with the undone keys (both in key order); an undone key replaces
/// the live entry, and `None` hides it.
struct Merge<L: Iterator, U: Iterator> {
    live: std::iter::Peekable<L>,
    undo: std::iter::Peekable<U>,
}

impl<'a, L, U> Iterator for Merge<L, U>
where
    L: Iterator<Item = (&'a Key, &'a Packed)>,
    U: Iterator<Item = (&'a Key, &'a Option<Packed>)>,
{
    type Item = (&'a Key, &'a Packed);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let Some((uk, _)) = self.undo.peek() else {
                return self.live.next();
            };
            let order = match self.live.peek() {
                Some((lk, _)) => (*lk).cmp(*uk),
                None => std::cmp::Ordering::Greater,
            };
            match order {
                std::cmp::Ordering::Less => return self.live.next(),
                std::cmp::Ordering::Equal => {
                    self.live.next();
                }
                std::cmp::Ordering::Greater => {}
            }
            if let Some((k, Some(o))) = self.undo.next() {
                return Some((k, o));
            }
        }
    }
}

/// The object table and event log.
#[derive(Debug)]
pub(crate) struct Storage {
    rv: u64,
    objects: BTreeMap<Key, Packed>,
    uids: HashMap<String, Key>,
    owners: HashMap<String, BTreeSet<Key>>,
    events: VecDeque<Arc<Event>>,
    window: usize,
    /// Highest rv whose event is no longer retained.
    compacted: u64,
}

/// Return uid of an object.
pub(crate) fn uid_of(v: &Value) -> Option<&str> {
    v.get("metadata")?.get("uid")?.as_str()
}

/// Owner uids of an object.
pub(crate) fn owner_uids(v: &Value) -> Vec<String> {
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
    pub(crate) fn new(window: usize) -> Self {
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
    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    /// Highest rv no longer in the event window (a watch must start at or after it).
    pub(crate) fn compacted(&self) -> u64 {
        self.compacted
    }

    /// Drop all retained events (as if compaction ran): watches from older rvs get 410.
    pub(crate) fn compact_all(&mut self) {
        self.events.clear();
        self.compacted = self.rv;
    }

    /// Object by key, decoded.
    pub(crate) fn get(&self, key: &Key) -> Option<Obj> {
        self.objects.get(key).map(Packed::value)
    }

    /// Object by key as stored (nothing decoded).
    pub(crate) fn get_packed(&self, key: &Key) -> Option<&Packed> {
        self.objects.get(key)
    }

    /// Whether an object is stored under `key`.
    pub(crate) fn contains(&self, key: &Key) -> bool {
        self.objects.contains_key(key)
    }

    /// Key of the object with a uid.
    pub(crate) fn key_of_uid(&self, uid: &str) -> Option<&Key> {
        self.uids.get(uid)
    }

    /// Keys of the objects that list `uid` as an owner.
    pub(crate) fn dependents(&self, uid: &str) -> Vec<Key> {
        self.owners
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Objects of a resource, in one namespace (`Some`) or all, in key order, starting after
    /// `after` (exclusive) if given.
    pub(crate) fn range<'a>(
        &'a self,
        res: &Arc<str>,
        ns: Option<&str>,
        after: Option<&Key>,
    ) -> impl Iterator<Item = (&'a Key, &'a Packed)> + 'a {
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
            .take_while(move |(k, _)| k.within(&res, ns.as_deref()))
    }

    /// Whether any object lives in the namespace (any resource).
    pub(crate) fn namespace_keys(&self, ns: &str) -> Vec<Key> {
        self.objects
            .keys()
            .filter(|k| k.ns == ns)
            .cloned()
            .collect()
    }

    fn index_remove(&mut self, key: &Key, ids: Ids) {
        if let Some(uid) = &ids.uid {
            self.uids.remove(uid);
        }
        for o in ids.owners {
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
    pub(crate) fn put(&mut self, key: Key, obj: Value) -> Obj {
        let obj = Arc::new(self.stamp(obj));
        let packed = Packed::pack(&obj, keeps_decoded(&key.res));
        let prev = self.objects.insert(key.clone(), packed.clone());
        if let Some(p) = &prev {
            self.index_remove(&key, p.ids());
        }
        self.index_add(&key, &obj);
        let ty = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.push_event(Event::new(self.rv, ty, key, &obj, packed, prev));
        obj
    }

    /// Remove an object, emitting a DELETED event carrying `last` (the final state) stamped with
    /// a new resourceVersion. Returns that final object.
    pub(crate) fn remove(&mut self, key: &Key, last: Option<Value>) -> Option<Obj> {
        let prev = self.objects.remove(key)?;
        self.index_remove(key, prev.ids());
        let last = last.unwrap_or_else(|| Arc::unwrap_or_clone(prev.value()));
        let obj = Arc::new(self.stamp(last));
        let packed = Packed::pack(&obj, false);
        self.push_event(Event::new(
            self.rv,
            EventType::Deleted,
            key.clone(),
            &obj,
            packed,
            Some(prev),
        ));
        Some(obj)
    }

    /// The objects of resource `res` (in namespace `ns`, or all namespaces) as they were at
    /// resourceVersion `rv`, read from the live table plus the retained event window used as
    /// MVCC history.
    ///
    /// Starts from the current objects and undoes, newest first, every retained event with an
    /// rv above `rv` in the range: ADDED makes the key absent, MODIFIED and DELETED restore the
    /// event's `prev`. Only the keys changed after `rv` are held (as `Arc` clones); the rest are
    /// borrowed from the live table, so at the current rv nothing is copied at all.
    ///
    /// Fails with [`AtError::Compacted`] when `rv` is below the compacted rv (some of the
    /// events needed are gone) and [`AtError::TooLarge`] when `rv` is newer than the current one.
    pub(crate) fn snapshot(
        &self,
        res: &Arc<str>,
        ns: Option<&str>,
        rv: u64,
    ) -> Result<Snapshot<'_>, AtError> {
        if rv > self.rv {
            return Err(AtError::TooLarge { current: self.rv });
        }
        if rv < self.compacted {
            return Err(AtError::Compacted {
                compacted: self.compacted,
            });
        }
        let mut undo = BTreeMap::new();
        for e in self.events.iter().rev().take_while(|e| e.rv > rv) {
            if !e.key.within(res, ns) {
                continue;
            }
            // Newest first: the last write for a key is the state before its oldest change
            // after `rv`, which is its state at `rv` (`prev` is `None` exactly for ADDED).
            undo.insert(e.key.clone(), e.prev.clone());
        }
        Ok(Snapshot {
            store: self,
            res: res.clone(),
            ns: ns.map(str::to_string),
            undo,
        })
    }

    /// Events with rv greater than `since`, or `Err(compacted)` when some were already dropped.
    pub(crate) fn events_since(&self, since: u64) -> Result<Vec<Arc<Event>>, u64> {
        if since < self.compacted {
            return Err(self.compacted);
        }
        let start = self.events.partition_point(|e| e.rv <= since);
        Ok(self.events.range(start..).cloned().collect())
    }

    /// Number of stored objects.
    pub(crate) fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether nothing is stored.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
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

    /// Names and `data.v` of a snapshot, in key order.
    fn view(s: &Storage, res: &str, ns: Option<&str>, rv: u64) -> Vec<(String, String)> {
        let res: Arc<str> = Arc::from(res);
        let snap = s.snapshot(&res, ns, rv).unwrap();
        snap.range(None)
            .map(|(k, o)| {
                (
                    format!("{}/{}", k.ns, k.name),
                    o.value()["data"]["v"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    fn obj(v: &str) -> Value {
        json!({"metadata": {}, "data": {"v": v}})
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn snapshot_undoes_add_modify_delete_and_recreate() {
        let mut s = Storage::new(100);
        let cms = "/configmaps";
        s.put(key(cms, "a", "x"), obj("x1")); // rv 1
        s.put(key(cms, "a", "y"), obj("y1")); // rv 2
        s.put(key(cms, "a", "x"), obj("x2")); // rv 3
        s.remove(&key(cms, "a", "y"), None); // rv 4
        s.put(key(cms, "a", "y"), obj("y2")); // rv 5: same name re-created
        s.put(key(cms, "b", "z"), obj("z1")); // rv 6
        s.put(key("/secrets", "a", "s"), obj("s1")); // rv 7
        s.put(key(cms, "a", "x"), obj("x3")); // rv 8
        s.remove(&key(cms, "a", "x"), None); // rv 9
        assert_eq!(s.rv(), 9);
        assert_eq!(view(&s, cms, None, 0), pairs(&[]));
        assert_eq!(view(&s, cms, None, 1), pairs(&[("a/x", "x1")]));
        assert_eq!(
            view(&s, cms, None, 2),
            pairs(&[("a/x", "x1"), ("a/y", "y1")])
        );
        assert_eq!(
            view(&s, cms, None, 3),
            pairs(&[("a/x", "x2"), ("a/y", "y1")])
        );
        assert_eq!(view(&s, cms, None, 4), pairs(&[("a/x", "x2")]));
        assert_eq!(
            view(&s, cms, None, 5),
            pairs(&[("a/x", "x2"), ("a/y", "y2")])
        );
        let at6 = pairs(&[("a/x", "x2"), ("a/y", "y2"), ("b/z", "z1")]);
        assert_eq!(view(&s, cms, None, 6), at6);
        assert_eq!(view(&s, cms, None, 7), at6, "other resources do not show");
        assert_eq!(
            view(&s, cms, None, 8),
            pairs(&[("a/x", "x3"), ("a/y", "y2"), ("b/z", "z1")])
        );
        assert_eq!(
            view(&s, cms, None, 9),
            pairs(&[("a/y", "y2"), ("b/z", "z1")])
        );
        // one namespace
        assert_eq!(
            view(&s, cms, Some("a"), 6),
            pairs(&[("a/x", "x2"), ("a/y", "y2")])
        );
        assert_eq!(view(&s, cms, Some("b"), 5), pairs(&[]));
        assert_eq!(view(&s, "/secrets", None, 6), pairs(&[]));
        assert_eq!(view(&s, "/secrets", None, 9), pairs(&[("a/s", "s1")]));
        // the past object keeps its own resourceVersion
        let res: Arc<str> = Arc::from(cms);
        let snap = s.snapshot(&res, None, 3).unwrap();
        let x = snap.get(&key(cms, "a", "x")).unwrap();
        assert_eq!(x.value()["metadata"]["resourceVersion"], "3");
        assert!(snap.get(&key(cms, "b", "z")).is_none());
        assert!(!snap.is_live());
        // resuming after a key (pagination) in a past snapshot, over live and undone keys
        let snap = s.snapshot(&res, None, 8).unwrap();
        let after: Vec<_> = snap
            .range(Some(&key(cms, "a", "x")))
            .map(|(k, _)| k.name.clone())
            .collect();
        assert_eq!(after, vec!["y", "z"]);
        let after: Vec<_> = snap
            .range(Some(&key(cms, "a", "w")))
            .map(|(k, _)| k.name.clone())
            .collect();
        assert_eq!(after, vec!["x", "y", "z"]);
    }

    #[test]
    fn snapshot_at_current_borrows_the_live_table() {
        let mut s = Storage::new(100);
        for i in 0..5 {
            s.put(key("/configmaps", "a", &format!("n{i}")), obj("v"));
        }
        let res: Arc<str> = Arc::from("/configmaps");
        let snap = s.snapshot(&res, None, s.rv()).unwrap();
        assert!(snap.is_live());
        let live: Vec<_> = s.range(&res, None, None).map(|(_, o)| o.clone()).collect();
        let seen: Vec<_> = snap.range(None).map(|(_, o)| o.clone()).collect();
        assert_eq!(live.len(), 5);
        for (a, b) in live.iter().zip(&seen) {
            assert_eq!(
                a.json().as_ptr(),
                b.json().as_ptr(),
                "same text, not a copy"
            );
        }
    }

    #[test]
    fn snapshot_bounds() {
        let mut s = Storage::new(2);
        let res: Arc<str> = Arc::from("/configmaps");
        for i in 0..4 {
            s.put(key("/configmaps", "a", "x"), obj(&i.to_string()));
        }
        // window of 2 keeps rv 3 and 4: states at 2, 3, 4 are readable
        assert_eq!(s.compacted(), 2);
        assert_eq!(
            s.snapshot(&res, None, 1).err(),
            Some(AtError::Compacted { compacted: 2 })
        );
        assert_eq!(view(&s, "/configmaps", None, 2), pairs(&[("a/x", "1")]));
        assert_eq!(view(&s, "/configmaps", None, 3), pairs(&[("a/x", "2")]));
        assert_eq!(
            s.snapshot(&res, None, 5).err(),
            Some(AtError::TooLarge { current: 4 })
        );
        s.compact_all();
        assert!(s.snapshot(&res, None, 3).is_err());
        assert_eq!(view(&s, "/configmaps", None, 4), pairs(&[("a/x", "3")]));
    }

    /// Random writes over a few keys: the snapshot at every retained rv equals the state
    /// recorded right after that rv was written.
    #[test]
    fn snapshot_matches_recorded_states() {
        let mut s = Storage::new(1000);
        let res: Arc<str> = Arc::from("/configmaps");
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut recorded = vec![(0, vec![])];
        for step in 0..400 {
            let ns = ["a", "b"][(next() % 2) as usize];
            let k = key(
                if next() % 5 == 0 {
                    "/secrets"
                } else {
                    "/configmaps"
                },
                ns,
                &format!("k{}", next() % 6),
            );
            if next() % 3 == 0 {
                if s.remove(&k, None).is_none() {
                    continue;
                }
            } else {
                s.put(k, obj(&step.to_string()));
            }
            let now: Vec<(Key, Packed)> = s
                .range(&res, None, None)
                .map(|(k, o)| (k.clone(), o.clone()))
                .collect();
            recorded.push((s.rv(), now));
        }
        for (rv, want) in &recorded {
            let snap = s.snapshot(&res, None, *rv).unwrap();
            let got: Vec<(Key, Packed)> = snap
                .range(None)
                .map(|(k, o)| (k.clone(), o.clone()))
                .collect();
            assert_eq!(&got, want, "at rv {rv}");
            let in_b: Vec<(Key, Packed)> = s
                .snapshot(&res, Some("b"), *rv)
                .unwrap()
                .range(None)
                .map(|(k, o)| (k.clone(), o.clone()))
                .collect();
            let want_b: Vec<(Key, Packed)> =
                want.iter().filter(|(k, _)| k.ns == "b").cloned().collect();
            assert_eq!(in_b, want_b, "namespace b at rv {rv}");
        }
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
