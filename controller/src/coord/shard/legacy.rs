//! The guard against a leader-elected kmeta (or Metacontroller) beside sharded replicas.
//!
//! A leader-mode process writes for every parent while it holds the leader Lease
//! (`--leader-election-id`, `metacontroller` by default). Sharded replicas therefore work only
//! while a member of their own set holds that same Lease: one member takes it when it is free or
//! expired and renews it every round, so a leader-mode pod started later stays a standby; while a
//! process outside the set holds it (an old leader during a migration), every replica hands its
//! buckets over and takes none. The old leader releases the Lease when it stops (SIGTERM), and a
//! member takes it on its next round.

use std::collections::BTreeSet;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use tokio::time::Instant;

use crate::coord::leader::{self, Action, LeaderConfig};
use crate::runtime::kapi::is_conflict;

/// What a replica makes of the leader Lease in one round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// This replica holds it: renew it; the set may work.
    Renew,
    /// It is free or expired: take it (the set may work once someone of it holds it).
    Acquire,
    /// Another member of the set holds it (alive, or killed and its Lease not expired yet): the
    /// set may work.
    Clear,
    /// A process outside the set holds it: no bucket may be held.
    Blocked(String),
}

/// The verdict for the Lease's `action` as [`leader::decide`] sees it, its `holder`, and the
/// identities of the set's `members`: every replica seen holding a member Lease, expired ones
/// too (a killed member's member Lease can expire a round before its leader Lease does; counted
/// as outside the set, it would make every replica hand every bucket over).
pub(crate) fn verdict(action: Action, holder: Option<&str>, members: &BTreeSet<String>) -> Verdict {
    match action {
        Action::Renew => Verdict::Renew,
        Action::Create | Action::Acquire => Verdict::Acquire,
        Action::Wait { .. } => match holder {
            Some(h) if members.contains(h) => Verdict::Clear,
            Some(h) => Verdict::Blocked(h.to_owned()),
            None => Verdict::Acquire,
        },
    }
}

/// The guard's state across rounds.
pub(crate) struct LegacyGuard {
    /// The leader Lease's settings (its name, this replica's identity and the timings).
    pub cfg: LeaderConfig,
    /// The record last seen and when it was first seen.
    observed: Option<(
        Option<k8s_openapi::api::coordination::v1::LeaseSpec>,
        Instant,
    )>,
    /// The Lease as this replica last wrote it.
    held: Option<Lease>,
}

impl LegacyGuard {
    pub(crate) fn new(cfg: LeaderConfig) -> LegacyGuard {
        LegacyGuard {
            cfg,
            observed: None,
            held: None,
        }
    }

    /// One round: reads the Lease, takes or renews it when this replica should; returns
    /// `Some(None)` when the set may work, `Some(Some(why))` when a holder outside the set blocks
    /// it, and `None` when the Lease could not be read: no news, the last verdict stands (a read
    /// error handing every bucket over would turn each API hiccup into a full rebalance, found
    /// by the sharded chaos soak; the buckets' own Leases and fences keep the writes safe).
    pub(crate) async fn check(
        &mut self,
        api: &Api<Lease>,
        members: &BTreeSet<String>,
    ) -> Option<Option<String>> {
        let current = match api.get_opt(&self.cfg.name).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(lease = %self.cfg.name, error = %e, "reading the leader Lease failed; keeping the last verdict");
                return None;
            }
        };
        let now = Instant::now();
        let record = current.as_ref().and_then(|l| l.spec.clone());
        let seen = match &self.observed {
            Some((r, at)) if *r == record => *at,
            _ => {
                self.observed = Some((record, now));
                now
            }
        };
        let action = leader::decide(current.as_ref(), seen, now, &self.cfg);
        let holder = current.as_ref().and_then(leader::holder);
        Some(match verdict(action, holder, members) {
            Verdict::Clear => None,
            Verdict::Blocked(h) => Some(format!(
                "{h}, outside this shard set, holds the leader Lease {}/{}",
                self.cfg.namespace, self.cfg.name
            )),
            Verdict::Renew | Verdict::Acquire => {
                self.write(api, current, action).await;
                None
            }
        })
    }

    async fn write(&mut self, api: &Api<Lease>, current: Option<Lease>, action: Action) {
        let pp = PostParams::default();
        let written = match current {
            None => {
                let mut lease = Lease::default();
                lease.metadata.name = Some(self.cfg.name.clone());
                lease.metadata.namespace = Some(self.cfg.namespace.clone());
                lease.spec = Some(leader::held_spec(None, Action::Create, &self.cfg));
                api.create(&pp, &lease).await
            }
            Some(mut lease) => {
                lease.spec = Some(leader::held_spec(lease.spec.as_ref(), action, &self.cfg));
                api.replace(&self.cfg.name, &pp, &lease).await
            }
        };
        match written {
            Ok(lease) => self.held = Some(lease),
            Err(e) if is_conflict(&e) => {}
            Err(e) => {
                tracing::warn!(lease = %self.cfg.name, error = %e, "writing the leader Lease failed")
            }
        }
    }

    /// Gives the Lease up if this replica holds it (at shutdown).
    pub(crate) async fn release(&mut self, api: &Api<Lease>) {
        let Some(mut lease) = self.held.take() else {
            return;
        };
        if leader::holder(&lease) != Some(self.cfg.identity.as_str()) {
            return;
        }
        lease.spec = Some(leader::released_spec(lease.spec.as_ref()));
        if let Err(e) = api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            tracing::debug!(lease = %self.cfg.name, error = %e, "releasing the leader Lease failed; it expires");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_works_only_while_one_of_it_holds_the_leader_lease() {
        let members: BTreeSet<String> = ["kmeta-0".to_owned(), "kmeta-1".to_owned()].into();
        let wait = Action::Wait {
            until: Instant::now(),
        };
        assert_eq!(
            verdict(Action::Renew, Some("kmeta-0"), &members),
            Verdict::Renew
        );
        assert_eq!(verdict(Action::Create, None, &members), Verdict::Acquire);
        assert_eq!(
            verdict(Action::Acquire, Some("old"), &members),
            Verdict::Acquire
        );
        assert_eq!(verdict(wait, Some("kmeta-1"), &members), Verdict::Clear);
        assert_eq!(
            verdict(wait, Some("metacontroller-7d9f"), &members),
            Verdict::Blocked("metacontroller-7d9f".into())
        );
    }
}
