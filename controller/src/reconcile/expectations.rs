//! Child writes a sync made that the watch caches have not shown yet — Kubernetes'
//! "expectations" (its ReplicaSet and Job controllers keep the same record for creates and
//! deletes).
//!
//! A sync decides from the caches. Right after it writes a child, the cache may still hold the
//! state before the write: kube-apiserver acknowledges a write before its watch delivers it. A
//! sync of the same owner in that window would tell the hook a created child does not exist —
//! for a sync a futile create (`AlreadyExists`); for a finalize worse: the hook answers
//! `finalized: true`, the finalizer goes, and — for a DecoratorController target that merely
//! stopped matching, which nothing garbage-collects — the child is left behind for good — and
//! would send updates and deletes based on a version already replaced (409 Conflict).
//!
//! So each write is recorded here under its owner until the cache shows it ([`shown`]: a created
//! child's uid; for an update or delete, any version other than those it replaced, or none)
//! or a watch event of the child arrives ([`WriteExpectations::observed`]), or the watch relists
//! after the write ([`settled_by_relist`]: the new list shows the write or its undoing — a child
//! created while the watch was down and deleted by someone before the relist); while any is
//! unseen, the owner's sync waits ([`crate::reconcile::core::SyncError::AwaitingWatch`]). A
//! record that is never seen (a watch that does not work) expires after
//! [`crate::ManagerConfig::created_children_wait`] (default [`CREATE_EXPECTATION_TTL`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a child write is waited for before a sync goes on without it, by default
/// ([`crate::ManagerConfig::created_children_wait`]): 5 minutes (Kubernetes'
/// `ExpectationsTimeout`, `pkg/controller/controller_utils.go`).
pub const CREATE_EXPECTATION_TTL: Duration = Duration::from_secs(300);

/// A child write one of the owner's syncs made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The child's type as the child rules key it (`<Kind>.<apiVersion>`).
    pub group_kind: String,
    /// Namespace ("" when cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The child's uid (for a create, the one the API server gave it: an older object of the
    /// same name, as in a recreate, is not it).
    pub uid: String,
    /// The resourceVersions an update or delete replaced: the cached one it was based on, then
    /// any kmeta wrote on the way (the ownership upgrade before a first apply). Empty for a
    /// create.
    pub replaced: Vec<String>,
    /// When the API server acknowledged it: a complete list of the child's resource requested
    /// after this shows it, or shows it superseded (created and deleted again).
    pub written_at: Instant,
    /// When to stop waiting for it.
    pub deadline: Instant,
}

/// Whether the cache shows `write`, given what it holds under the child's name now (`(uid,
/// resourceVersion)`, `None` when nothing). A create is shown by an object with its uid. An update
/// or delete is shown once the cache holds anything but the versions it replaced — the first of
/// them was in the cache when the sync read it, the others are kmeta's own on the way, and
/// versions only move forward, so any other one is newer (no resourceVersion is compared for
/// order, as the API conventions ask); a write the server made without a new version is never
/// recorded.
pub fn shown(write: &Written, cached: Option<(&str, &str)>) -> bool {
    match (write.replaced.is_empty(), cached) {
        (true, Some((uid, _))) => uid == write.uid,
        (true, None) => false,
        (false, None) => true,
        (false, Some((uid, rv))) => uid != write.uid || !write.replaced.iter().any(|r| r == rv),
    }
}

/// Whether a complete list of the child's resource, requested at `listed_from` (the latest such
/// list; `None`: none yet), settles `write` although the cache does not show it: a list requested
/// after the write was acknowledged reads a state that includes it, so what the cache holds now
/// is the write's outcome (a created child absent from it was deleted again) and waiting longer
/// would wait for an event that never comes.
pub fn settled_by_relist(write: &Written, listed_from: Option<Instant>) -> bool {
    listed_from.is_some_and(|at| at > write.written_at)
}

/// What an owner's sync found: writes still unseen, and those given up on just now.
#[derive(Debug, Default, PartialEq)]
pub struct Awaited {
    /// Made, not yet shown by the caches, still within their deadline.
    pub unseen: Vec<Written>,
    /// Past their deadline without being seen: dropped, to be reported.
    pub expired: Vec<Written>,
}

/// The unseen child writes of every owner, by owner uid.
#[derive(Debug, Default)]
pub struct WriteExpectations {
    by_owner: HashMap<String, Vec<Written>>,
}

impl WriteExpectations {
    /// Records that a sync of `owner` (its uid) made `write` (replacing an earlier record of the
    /// same child).
    pub fn expect(&mut self, owner: &str, write: Written) {
        let list = self.by_owner.entry(owner.to_owned()).or_default();
        list.retain(|c| c.uid != write.uid);
        list.push(write);
    }

    /// A watch event of the child `child_uid` controlled by `owner` arrived, showing it at
    /// `version` (`None`: its deletion). A deletion settles the child's record (a created child
    /// added then deleted before a sync looked is seen all the same); any other event settles it
    /// when [`shown`] would: not an event of a version the write replaced, such as the ownership
    /// upgrade kmeta wrote just before an apply, whose event can arrive after the apply was
    /// recorded.
    pub fn observed(&mut self, owner: &str, child_uid: &str, version: Option<&str>) {
        let Some(list) = self.by_owner.get_mut(owner) else {
            return;
        };
        list.retain(|c| {
            c.uid != child_uid || version.is_some_and(|rv| !shown(c, Some((child_uid, rv))))
        });
        if list.is_empty() {
            self.by_owner.remove(owner);
        }
    }

    /// The owner is gone: nothing of it is waited for any more.
    pub fn forget_owner(&mut self, owner: &str) {
        self.by_owner.remove(owner);
    }

    /// Before a sync of `owner`: drops the records `in_cache` says the caches show (see
    /// [`shown`]) and those past their deadline at `now`; returns what is still unseen and what
    /// expired.
    pub fn settle(
        &mut self,
        owner: &str,
        now: Instant,
        mut in_cache: impl FnMut(&Written) -> bool,
    ) -> Awaited {
        let Some(list) = self.by_owner.get_mut(owner) else {
            return Awaited::default();
        };
        let mut awaited = Awaited::default();
        for c in list.drain(..) {
            if in_cache(&c) {
                continue;
            }
            if now >= c.deadline {
                awaited.expired.push(c);
            } else {
                awaited.unseen.push(c);
            }
        }
        if awaited.unseen.is_empty() {
            self.by_owner.remove(owner);
        } else {
            list.extend(awaited.unseen.iter().cloned());
        }
        awaited
    }

    /// Owners with unseen writes.
    #[cfg(test)]
    pub fn owners(&self) -> usize {
        self.by_owner.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created(name: &str, uid: &str, deadline: Instant) -> Written {
        Written {
            group_kind: "ConfigMap.v1".into(),
            namespace: "ns".into(),
            name: name.into(),
            uid: uid.into(),
            replaced: Vec::new(),
            written_at: Instant::now(),
            deadline,
        }
    }

    fn updated(uid: &str, replaced: &[&str]) -> Written {
        Written {
            replaced: replaced.iter().map(|r| (*r).to_owned()).collect(),
            ..created("a", uid, Instant::now() + CREATE_EXPECTATION_TTL)
        }
    }

    #[test]
    fn a_list_requested_after_the_write_settles_it() {
        let w = created("a", "u1", Instant::now() + CREATE_EXPECTATION_TTL);
        assert!(!settled_by_relist(&w, None), "never listed");
        let before = w.written_at - Duration::from_millis(1);
        assert!(
            !settled_by_relist(&w, Some(before)),
            "a list requested before the write may not show it"
        );
        let after = w.written_at + Duration::from_millis(1);
        assert!(settled_by_relist(&w, Some(after)));
    }

    #[test]
    fn a_create_is_shown_by_its_uid_only() {
        let w = created("a", "u1", Instant::now());
        assert!(shown(&w, Some(("u1", "5"))));
        assert!(
            !shown(&w, Some(("u0", "4"))),
            "the older object of a recreate"
        );
        assert!(!shown(&w, None));
    }

    #[test]
    fn an_update_or_delete_is_shown_by_any_other_version_or_none() {
        let w = updated("u1", &["7"]);
        assert!(!shown(&w, Some(("u1", "7"))), "the version it replaced");
        assert!(shown(&w, Some(("u1", "8"))));
        assert!(
            shown(&w, Some(("u1", "12"))),
            "a later write by someone else"
        );
        assert!(shown(&w, None), "deleted");
        assert!(shown(&w, Some(("u2", "7"))), "deleted and created again");
    }

    #[test]
    fn a_version_kmeta_wrote_on_the_way_is_not_the_write() {
        // read at 7, ownership upgraded at 8, applied at 9
        let w = updated("u1", &["7", "8"]);
        assert!(!shown(&w, Some(("u1", "7"))));
        assert!(!shown(&w, Some(("u1", "8"))), "the upgrade, not the apply");
        assert!(shown(&w, Some(("u1", "9"))));
    }

    #[test]
    fn an_unseen_create_is_waited_for_until_the_cache_shows_it() {
        let now = Instant::now();
        let mut e = WriteExpectations::default();
        e.expect("p", created("a", "u1", now + CREATE_EXPECTATION_TTL));
        let first = e.settle("p", now, |_| false);
        assert_eq!(first.unseen.len(), 1);
        assert!(first.expired.is_empty());
        // still waited for: settling does not consume it
        assert_eq!(e.settle("p", now, |_| false).unseen.len(), 1);
        let seen = e.settle("p", now, |c| c.uid == "u1");
        assert_eq!(seen, Awaited::default());
        assert_eq!(e.owners(), 0);
    }

    #[test]
    fn a_watch_event_of_the_child_settles_it_even_when_the_cache_lost_it_again() {
        let now = Instant::now();
        let mut e = WriteExpectations::default();
        e.expect("p", created("a", "u1", now + CREATE_EXPECTATION_TTL));
        e.expect("p", created("b", "u2", now + CREATE_EXPECTATION_TTL));
        e.observed("p", "u1", Some("3"));
        e.observed("other", "u2", Some("4"));
        let left = e.settle("p", now, |_| false);
        assert_eq!(
            left.unseen
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["b"]
        );
        e.observed("p", "u2", None);
        assert_eq!(e.owners(), 0);
    }

    #[test]
    fn an_event_of_a_version_the_write_replaced_does_not_settle_it() {
        // read at 7, ownership upgraded at 8, applied at 9: the upgrade's event arrives after
        // the apply was recorded (the churn of watches delays it past the apply's answer)
        let mut e = WriteExpectations::default();
        e.expect("p", updated("u1", &["7", "8"]));
        e.observed("p", "u1", Some("8"));
        assert_eq!(e.settle("p", Instant::now(), |_| false).unseen.len(), 1);
        e.observed("p", "u1", Some("9"));
        assert_eq!(e.owners(), 0);
        // a deletion settles it whatever version it last had
        e.expect("p", updated("u1", &["9"]));
        e.observed("p", "u1", None);
        assert_eq!(e.owners(), 0);
    }

    #[test]
    fn an_older_object_of_the_same_name_is_not_the_created_one() {
        let now = Instant::now();
        let mut e = WriteExpectations::default();
        e.expect("p", created("a", "new", now + CREATE_EXPECTATION_TTL));
        let cache_uid = "old";
        let awaited = e.settle("p", now, |c| c.uid == cache_uid);
        assert_eq!(awaited.unseen.len(), 1);
    }

    #[test]
    fn a_create_never_seen_expires_once_and_is_reported() {
        let now = Instant::now();
        let mut e = WriteExpectations::default();
        e.expect("p", created("a", "u1", now + Duration::from_secs(1)));
        e.expect("p", created("b", "u2", now + Duration::from_secs(10)));
        let later = now + Duration::from_secs(2);
        let awaited = e.settle("p", later, |_| false);
        assert_eq!(awaited.expired.len(), 1);
        assert_eq!(awaited.expired[0].name, "a");
        assert_eq!(awaited.unseen.len(), 1);
        let again = e.settle("p", later, |_| false);
        assert!(again.expired.is_empty(), "reported once");
        let all_late = e.settle("p", now + Duration::from_secs(11), |_| false);
        assert_eq!(all_late.expired.len(), 1);
        assert_eq!(e.owners(), 0);
    }

    #[test]
    fn owners_are_kept_apart_and_forgotten_whole() {
        let now = Instant::now();
        let mut e = WriteExpectations::default();
        let deadline = now + CREATE_EXPECTATION_TTL;
        e.expect("p", created("a", "u1", deadline));
        e.expect("q", created("a", "u2", deadline));
        // the same create recorded twice (a retried write) is one record
        e.expect("q", created("a", "u2", deadline));
        assert_eq!(e.settle("q", now, |_| false).unseen.len(), 1);
        e.forget_owner("p");
        assert_eq!(e.settle("p", now, |_| false), Awaited::default());
        assert_eq!(e.owners(), 1);
    }
}
