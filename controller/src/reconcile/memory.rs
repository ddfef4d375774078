//! What a controller remembers between syncs about the children it manages, one `Mutex` per
//! concern, the same for every controller kind: a composite parent's children and a decorator
//! target's attachments alike.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::object::ObjectView;
use crate::reconcile::apply::ChildReports;
use crate::reconcile::expectations::WriteExpectations;
use crate::reconcile::futile::FutileUpdates;
use crate::reconcile::last_applied::LastAppliedCache;
use crate::reconcile::related::CustomizeCache;
use crate::runtime::cache::Informer;
use crate::runtime::compact::Compact;

/// The memory of one controller (one CompositeController or DecoratorController object).
#[derive(Default)]
pub struct ChildMemory {
    /// The customize hook's answers, by owner UID and generation.
    pub customize_cache: Mutex<CustomizeCache>,
    /// Related watches this controller listens to, by watch key.
    pub related: Mutex<HashMap<String, Arc<Informer>>>,
    /// Child updates the API server answered without writing, not to be sent again.
    pub futile_updates: Mutex<FutileUpdates>,
    /// The last-applied configuration of the children it wrote, per child version.
    pub last_applied: Mutex<LastAppliedCache>,
    /// Drift, conflicts and contests of each owner's last sync.
    pub child_reports: Mutex<ChildReports>,
    /// Child writes of its syncs the watch caches have not shown yet, by owner UID.
    pub expected_writes: Mutex<WriteExpectations>,
}

impl std::fmt::Debug for ChildMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildMemory").finish_non_exhaustive()
    }
}

impl ChildMemory {
    /// An owner (a parent, a decorator's target) is gone: forgets its reports, its customize
    /// answer and the writes its syncs expected.
    pub fn forget_owner(&self, uid: &str) {
        if let Ok(mut r) = self.child_reports.lock() {
            r.set(uid, Vec::new());
        }
        if let Ok(mut c) = self.customize_cache.lock() {
            c.remove(uid);
        }
        if let Ok(mut e) = self.expected_writes.lock() {
            e.forget_owner(uid);
        }
    }

    /// A child's watch event arrived (`deleted`: its deletion): its owner no longer waits for
    /// the writes it shows ([`WriteExpectations::observed`]); a deleted child's last-applied
    /// record is dropped.
    pub fn child_seen(&self, child: &Compact, deleted: bool) {
        if deleted && let Ok(mut l) = self.last_applied.lock() {
            l.forget(child.uid());
        }
        let Some(owner) = child.controller() else {
            return;
        };
        if let Ok(mut e) = self.expected_writes.lock() {
            let version = (!deleted).then(|| child.resource_version());
            e.observed(owner.uid, child.uid(), version);
        }
    }
}
