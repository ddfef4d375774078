//! Children a sync created that the watch caches have not shown yet — Kubernetes'
//! "expectations" (its ReplicaSet and Job controllers keep the same record).
//!
//! A sync decides from the caches. Right after it creates a child, the cache may not hold it
//! yet: kube-apiserver acknowledges the create before its watch delivers it. A sync of the same
//! owner in that window would tell the hook the child does not exist. For a sync that costs a
//! futile create (`AlreadyExists`); for a finalize it is worse: the hook answers
//! `finalized: true`, the finalizer goes, and — for a DecoratorController target that merely
//! stopped matching, which nothing garbage-collects — the child is left behind for good.
//!
//! So each create is recorded here under its owner until the child's watch event arrives
//! ([`CreateExpectations::observed`]) or the cache shows it; while any is unseen, the owner's
//! sync waits ([`crate::reconcile::core::SyncError::AwaitingCreates`]). A record that is never
//! seen (the child deleted while the watch was relisting) expires after
//! [`crate::ManagerConfig::created_children_wait`] (default [`CREATE_EXPECTATION_TTL`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a created child is waited for before a sync goes on without it, by default
/// ([`crate::ManagerConfig::created_children_wait`]): 5 minutes (Kubernetes'
/// `ExpectationsTimeout`, `pkg/controller/controller_utils.go`).
pub const CREATE_EXPECTATION_TTL: Duration = Duration::from_secs(300);

/// A child one of the owner's syncs created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    /// The child's type as the child rules key it (`<Kind>.<apiVersion>`).
    pub group_kind: String,
    /// Namespace ("" when cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The uid the API server gave it: an older object of the same name (a recreate) is not it.
    pub uid: String,
    /// When to stop waiting for it.
    pub deadline: Instant,
}

/// What an owner's sync found: children still unseen, and those given up on just now.
#[derive(Debug, Default, PartialEq)]
pub struct Awaited {
    /// Created, not yet shown by the caches, still within their deadline.
    pub unseen: Vec<Created>,
    /// Past their deadline without being seen: dropped, to be reported.
    pub expired: Vec<Created>,
}

/// The unseen creates of every owner, by owner uid.
#[derive(Debug, Default)]
pub struct CreateExpectations {
    by_owner: HashMap<String, Vec<Created>>,
}

impl CreateExpectations {
    /// Records that a sync of `owner` (its uid) created `created`.
    pub fn expect(&mut self, owner: &str, created: Created) {
        let list = self.by_owner.entry(owner.to_owned()).or_default();
        list.retain(|c| c.uid != created.uid);
        list.push(created);
    }

    /// A watch event of the child `child_uid` controlled by `owner` arrived (any event: a child
    /// added then deleted before a sync looked is seen all the same).
    pub fn observed(&mut self, owner: &str, child_uid: &str) {
        let Some(list) = self.by_owner.get_mut(owner) else {
            return;
        };
        list.retain(|c| c.uid != child_uid);
        if list.is_empty() {
            self.by_owner.remove(owner);
        }
    }

    /// The owner is gone: nothing of it is waited for any more.
    pub fn forget_owner(&mut self, owner: &str) {
        self.by_owner.remove(owner);
    }

    /// Before a sync of `owner`: drops the records `in_cache` says the caches show and those past
    /// their deadline at `now`; returns what is still unseen and what expired.
    pub fn settle(
        &mut self,
        owner: &str,
        now: Instant,
        mut in_cache: impl FnMut(&Created) -> bool,
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

    /// Owners with unseen creates.
    #[cfg(test)]
    pub fn owners(&self) -> usize {
        self.by_owner.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created(name: &str, uid: &str, deadline: Instant) -> Created {
        Created {
            group_kind: "ConfigMap.v1".into(),
            namespace: "ns".into(),
            name: name.into(),
            uid: uid.into(),
            deadline,
        }
    }

    #[test]
    fn an_unseen_create_is_waited_for_until_the_cache_shows_it() {
        let now = Instant::now();
        let mut e = CreateExpectations::default();
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
        let mut e = CreateExpectations::default();
        e.expect("p", created("a", "u1", now + CREATE_EXPECTATION_TTL));
        e.expect("p", created("b", "u2", now + CREATE_EXPECTATION_TTL));
        e.observed("p", "u1");
        e.observed("other", "u2");
        let left = e.settle("p", now, |_| false);
        assert_eq!(
            left.unseen
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["b"]
        );
        e.observed("p", "u2");
        assert_eq!(e.owners(), 0);
    }

    #[test]
    fn an_older_object_of_the_same_name_is_not_the_created_one() {
        let now = Instant::now();
        let mut e = CreateExpectations::default();
        e.expect("p", created("a", "new", now + CREATE_EXPECTATION_TTL));
        let cache_uid = "old";
        let awaited = e.settle("p", now, |c| c.uid == cache_uid);
        assert_eq!(awaited.unseen.len(), 1);
    }

    #[test]
    fn a_create_never_seen_expires_once_and_is_reported() {
        let now = Instant::now();
        let mut e = CreateExpectations::default();
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
        let mut e = CreateExpectations::default();
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
