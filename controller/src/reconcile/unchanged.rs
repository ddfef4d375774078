//! Syncs known to change nothing. A sync's writes are decided by the parent, its observed
//! children and the hook's answer (the controller's own configuration is fixed for the life of
//! a controller: a changed CompositeController builds a new one). When a sync with those three
//! wrote nothing — no child, no status, no finalizer, nothing reported — a later sync that
//! finds the same parent version, the same child versions and the same answer, byte for byte,
//! would decide the same again; it is skipped after the hook call, before the answer is even
//! decoded. This is what makes a periodic resync of an unchanged parent cheap. See
//! docs/design/unchanged-syncs.md.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};

use foldhash::quality::FixedState;

use serde_json::Value;

use crate::object::ObjectView;

/// What a sync's decisions depend on, hashed: the hook's answer as sent, the parent's uid and
/// resourceVersion, and each observed child's uid and resourceVersion (in any order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint(u64);

impl Fingerprint {
    /// The fingerprint of a sync of `parent` observing `observed` to which the hook answered
    /// `answer` (the sync takes the two steps of it apart).
    #[cfg(test)]
    pub fn of<O: ObjectView>(answer: &[u8], parent: &Value, observed: &[O]) -> Fingerprint {
        Fingerprint::of_answer(answer, Versions::of(parent, observed))
    }

    /// The fingerprint of the sync whose parent and children had `versions` to which the hook
    /// answered `answer`: the versions are read before the hook call, while the sync has its
    /// children at hand.
    pub fn of_answer(answer: &[u8], versions: Versions) -> Fingerprint {
        let mut h = FixedState::default().build_hasher();
        answer.hash(&mut h);
        versions.parent.hash(&mut h);
        versions.children.hash(&mut h);
        Fingerprint(h.finish())
    }
}

/// The versions a sync read, hashed: the parent's uid and resourceVersion, and each observed
/// child's (in any order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions {
    parent: u64,
    children: (usize, u64),
}

impl Versions {
    /// The versions of `parent` and `observed`.
    pub fn of<O: ObjectView>(parent: &Value, observed: &[O]) -> Versions {
        // foldhash: several times faster than SipHash on an answer of kilobytes, and no
        // adversary here (a hook could only make its own parent's resyncs run in full)
        let hasher = FixedState::default();
        let version = |o: &dyn ObjectView| hasher.hash_one((o.uid(), o.resource_version()));
        // a sum: the cache hands children out in no particular order
        let children = observed
            .iter()
            .fold(0u64, |sum, o| sum.wrapping_add(version(o)));
        Versions {
            parent: version(parent),
            children: (observed.len(), children),
        }
    }
}

/// The mark of one desired child as a child rule applies it (`salt`: the rule's
/// [`memo_salt`](crate::reconcile::children::ChildRule::memo_salt)), for the settled children
/// of a [`Compact`](crate::runtime::compact::Compact) version (docs/design/settled-children.md):
/// a digest of the desired object (its maps in their order, so a reordered answer only misses
/// the memo), never 0.
pub fn child_mark(salt: u64, desired: &Value) -> u64 {
    let mut h = FixedState::default().build_hasher();
    salt.hash(&mut h);
    hash_value(desired, &mut h);
    h.finish().max(1)
}

/// Feeds `v` to `h` without allocating (serde_json's own `Hash` sorts each map into a `Vec`).
fn hash_value(v: &Value, h: &mut impl Hasher) {
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => (2u8, n).hash(h),
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(items) => {
            (4u8, items.len()).hash(h);
            items.iter().for_each(|i| hash_value(i, h));
        }
        Value::Object(m) => {
            (5u8, m.len()).hash(h);
            for (k, i) in m {
                k.hash(h);
                hash_value(i, h);
            }
        }
    }
}

/// The last sync of each parent (by uid) that wrote nothing, and the resync it asked for.
#[derive(Debug, Default)]
pub struct UnchangedSyncs {
    by_parent: HashMap<String, (Fingerprint, f64)>,
}

impl UnchangedSyncs {
    /// The hook's `resyncAfterSeconds` when the last sync of the parent `uid` that wrote
    /// nothing had this fingerprint: this sync would write nothing either.
    pub fn resync_after(&self, uid: &str, fingerprint: Fingerprint) -> Option<f64> {
        let (known, resync) = self.by_parent.get(uid)?;
        (*known == fingerprint).then_some(*resync)
    }

    /// Records that the sync of the parent `uid` with `fingerprint` wrote nothing.
    pub fn remember(&mut self, uid: &str, fingerprint: Fingerprint, resync_after: f64) {
        self.by_parent
            .insert(uid.to_owned(), (fingerprint, resync_after));
    }

    /// Forgets the parent `uid` (its sync wrote something, failed, or the parent is gone).
    pub fn forget(&mut self, uid: &str) {
        self.by_parent.remove(uid);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(uid: &str, rv: &str) -> Value {
        json!({"metadata": {"name": "o", "uid": uid, "resourceVersion": rv}, "data": {"k": "v"}})
    }

    #[test]
    fn the_fingerprint_changes_with_each_input_and_not_with_child_order() {
        let parent = obj("p", "1");
        let children = [obj("a", "1"), obj("b", "1")];
        let base = Fingerprint::of(b"{\"children\":[]}", &parent, &children);
        let reordered = [children[1].clone(), children[0].clone()];
        assert_eq!(
            base,
            Fingerprint::of(b"{\"children\":[]}", &parent, &reordered)
        );
        let others = [
            Fingerprint::of(b"{\"children\": []}", &parent, &children),
            Fingerprint::of(b"{\"children\":[]}", &obj("p", "2"), &children),
            Fingerprint::of(b"{\"children\":[]}", &obj("q", "1"), &children),
            Fingerprint::of(
                b"{\"children\":[]}",
                &parent,
                &[obj("a", "1"), obj("b", "2")],
            ),
            Fingerprint::of(b"{\"children\":[]}", &parent, &children[..1]),
            Fingerprint::of(
                b"{\"children\":[]}",
                &parent,
                &[obj("a", "1"), obj("c", "1")],
            ),
        ];
        for (i, other) in others.iter().enumerate() {
            assert_ne!(base, *other, "case {i}");
        }
    }

    #[test]
    fn a_child_mark_changes_with_the_desired_object_and_the_salt() {
        let want = json!({"kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "1"}});
        let mark = child_mark(1, &want);
        assert_eq!(mark, child_mark(1, &want.clone()));
        assert_ne!(mark, 0);
        let others = [
            child_mark(2, &want),
            child_mark(
                1,
                &json!({"kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "2"}}),
            ),
            child_mark(
                1,
                &json!({"kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": 1}}),
            ),
            child_mark(
                1,
                &json!({"kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": ["1"]}}),
            ),
            child_mark(
                1,
                &json!({"kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "1", "l": null}}),
            ),
            child_mark(
                1,
                &json!({"kind": "ConfigMap", "metadata": {"name": "a"}, "data": {}}),
            ),
        ];
        for (i, other) in others.iter().enumerate() {
            assert_ne!(mark, *other, "case {i}");
        }
    }

    #[test]
    fn only_the_remembered_fingerprint_answers() {
        let mut u = UnchangedSyncs::default();
        let f = Fingerprint::of(b"{}", &obj("p", "1"), &[obj("a", "1")]);
        let g = Fingerprint::of(b"{}", &obj("p", "1"), &[obj("a", "2")]);
        assert_eq!(u.resync_after("p", f), None);
        u.remember("p", f, 30.0);
        assert_eq!(u.resync_after("p", f), Some(30.0));
        assert_eq!(u.resync_after("p", g), None);
        assert_eq!(u.resync_after("q", f), None);
        u.forget("p");
        assert_eq!(u.resync_after("p", f), None);
    }
}
