//! The garbage collector, run synchronously inside each write: finalizers, deletion propagation
//! (Background, Foreground, Orphan), dependents whose owners are gone, namespace contents and
//! CRD instances.

use super::inner::Inner;
use super::object::{
    deleting, finalizers, meta, meta_mut, now_rfc3339, ns_spec_finalizers, set_finalizers,
};
use super::request::{Deleted, Propagation};
use crate::store::{Key, Obj, owner_uids, uid_of};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::Arc;

/// Finalizer set by foreground deletion.
pub(super) const FOREGROUND: &str = "foregroundDeletion";

/// Finalizer set by orphan deletion.
pub(super) const ORPHAN: &str = "orphan";

/// Finalizer the apiextensions server puts on CRDs.
pub(super) const CRD_CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Namespace spec finalizer.
pub(super) const NS_FINALIZER: &str = "kubernetes";

pub(super) enum Work {
    Check(Key),
    Removed(Key, Obj),
}

/// Split a storage key `group/plural`.
fn split_res(res: &str) -> (&str, &str) {
    res.rsplit_once('/').unwrap_or(("", res))
}

impl Inner {
    /// If an object's every owner is absent, the garbage collector deletes it.
    pub(super) fn check_orphaned(&mut self, key: &Key, work: &mut VecDeque<Work>) {
        let Some(obj) = self.store.get(key) else {
            return;
        };
        let owners = owner_uids(&obj);
        if owners.is_empty() || deleting(&obj) {
            return;
        }
        let alive: Vec<&String> = owners
            .iter()
            .filter(|u| self.store.key_of_uid(u).is_some())
            .collect();
        if alive.is_empty() {
            self.delete_inner(key, Propagation::Background, work);
        } else if alive.len() < owners.len() {
            let alive: Vec<String> = alive.into_iter().cloned().collect();
            let mut v = Arc::unwrap_or_clone(obj);
            if let Some(refs) = meta_mut(&mut v)
                .get_mut("ownerReferences")
                .and_then(Value::as_array_mut)
            {
                refs.retain(|r| {
                    r.get("uid")
                        .and_then(Value::as_str)
                        .is_some_and(|u| alive.iter().any(|a| a == u))
                });
            }
            self.store.put(key.clone(), v);
        }
    }

    /// Start deletion of an object. Returns `None` when it does not exist.
    pub(super) fn delete_inner(
        &mut self,
        key: &Key,
        policy: Propagation,
        work: &mut VecDeque<Work>,
    ) -> Option<Deleted> {
        let obj = self.store.get(key)?;
        let mut v = (*obj).clone();
        let mut fins = finalizers(&v);
        let want = match policy {
            Propagation::Foreground => Some(FOREGROUND),
            Propagation::Orphan => Some(ORPHAN),
            Propagation::Background => None,
        };
        if deleting(&obj) {
            if let Some(f) = want
                && !fins.iter().any(|x| x == f)
            {
                fins.push(f.into());
                set_finalizers(&mut v, &fins);
                let stored = self.store.put(key.clone(), v);
                work.push_back(Work::Check(key.clone()));
                return Some(Deleted::Pending(stored));
            }
            return Some(Deleted::Pending(obj));
        }
        if let Some(f) = want
            && !fins.iter().any(|x| x == f)
        {
            fins.push(f.into());
        }
        let is_ns = &*key.res == "/namespaces";
        if fins.is_empty() && !is_ns {
            let gone = self.store.remove(key, None)?;
            work.push_back(Work::Removed(key.clone(), gone.clone()));
            return Some(Deleted::Gone(gone));
        }
        set_finalizers(&mut v, &fins);
        let now = now_rfc3339();
        let generation = meta(&v)
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        {
            let m = meta_mut(&mut v);
            m.insert("deletionTimestamp".into(), json!(now));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            m.insert("generation".into(), json!(generation + 1));
        }
        if is_ns {
            v["status"] = json!({"phase": "Terminating"});
        }
        let stored = self.store.put(key.clone(), v);
        work.push_back(Work::Check(key.clone()));
        Some(Deleted::Pending(stored))
    }

    fn put_finalizers(&mut self, key: &Key, fins: &[String]) {
        if let Some(o) = self.store.get(key) {
            let mut v = Arc::unwrap_or_clone(o);
            set_finalizers(&mut v, fins);
            self.store.put(key.clone(), v);
        }
    }

    /// Run garbage collection, namespace and CRD cleanup until nothing changes.
    pub(super) fn settle(&mut self, mut work: VecDeque<Work>) {
        let mut guard = 0usize;
        while let Some(w) = work.pop_front() {
            guard += 1;
            if guard > 1_000_000 {
                tracing::error!("garbage collection did not settle after 1e6 steps");
                break;
            }
            match w {
                Work::Check(key) => self.check_deleting(&key, &mut work),
                Work::Removed(key, obj) => self.on_removed(&key, &obj, &mut work),
            }
        }
    }

    /// Progress the deletion of an object being deleted: run its orphan and foreground
    /// finalizers, namespace and CRD cleanup, and remove it once no finalizer is left.
    fn check_deleting(&mut self, key: &Key, work: &mut VecDeque<Work>) {
        let Some(obj) = self.store.get(key) else {
            return;
        };
        if !deleting(&obj) {
            return;
        }
        let uid = uid_of(&obj).unwrap_or("").to_string();
        let mut fins = finalizers(&obj);
        if fins.iter().any(|f| f == ORPHAN) {
            self.orphan_dependents(&uid);
            fins.retain(|f| f != ORPHAN);
            self.put_finalizers(key, &fins);
        }
        if fins.iter().any(|f| f == FOREGROUND) && !self.delete_dependents_first(&uid, work) {
            fins.retain(|f| f != FOREGROUND);
            self.put_finalizers(key, &fins);
        }
        if &*key.res == "/namespaces" && self.namespace_still_finalizing(key, &obj, work) {
            return;
        }
        if &*key.res == "apiextensions.k8s.io/customresourcedefinitions"
            && fins.iter().any(|f| f == CRD_CLEANUP)
            && self.crd_instances_gone(key, work)
        {
            fins.retain(|f| f != CRD_CLEANUP);
            self.put_finalizers(key, &fins);
        }
        if fins.is_empty()
            && let Some(gone) = self.store.remove(key, None)
        {
            work.push_back(Work::Removed(key.clone(), gone));
        }
    }

    /// The `orphan` finalizer: strip the owner reference to `uid` from every dependent.
    fn orphan_dependents(&mut self, uid: &str) {
        for dep in self.store.dependents(uid) {
            if let Some(d) = self.store.get(&dep) {
                let mut v = Arc::unwrap_or_clone(d);
                if let Some(refs) = meta_mut(&mut v)
                    .get_mut("ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
                    if refs.is_empty() {
                        meta_mut(&mut v).remove("ownerReferences");
                    }
                }
                self.store.put(dep, v);
            }
        }
    }

    /// The `foregroundDeletion` finalizer: delete the dependents of `uid` (foreground again
    /// for those with dependents of their own); true while one that blocks owner deletion is
    /// still there.
    fn delete_dependents_first(&mut self, uid: &str, work: &mut VecDeque<Work>) -> bool {
        for dep in self.store.dependents(uid) {
            let has_own = self
                .store
                .get(&dep)
                .and_then(|d| uid_of(&d).map(|u| !self.store.dependents(u).is_empty()))
                .unwrap_or(false);
            let p = if has_own {
                Propagation::Foreground
            } else {
                Propagation::Background
            };
            self.delete_inner(&dep, p, work);
        }
        self.store.dependents(uid).iter().any(|dep| {
            self.store
                .get(dep)
                .is_some_and(|d| blocks_owner_deletion(&d, uid))
        })
    }

    /// The `kubernetes` spec finalizer of a namespace: delete its contents, and drop the
    /// finalizer once they are gone. True while the namespace keeps a spec finalizer.
    fn namespace_still_finalizing(
        &mut self,
        key: &Key,
        obj: &Value,
        work: &mut VecDeque<Work>,
    ) -> bool {
        let mut nsf = ns_spec_finalizers(obj);
        if nsf.iter().any(|f| f == NS_FINALIZER) {
            for k in self.store.namespace_keys(&key.name) {
                self.delete_inner(&k, Propagation::Background, work);
            }
            if self.store.namespace_keys(&key.name).is_empty() {
                nsf.retain(|f| f != NS_FINALIZER);
                if let Some(o) = self.store.get(key) {
                    let mut v = Arc::unwrap_or_clone(o);
                    v["spec"]["finalizers"] = json!(nsf);
                    self.store.put(key.clone(), v);
                }
            }
        }
        !ns_spec_finalizers(&self.store.get(key).unwrap_or_else(|| Arc::new(json!({})))).is_empty()
    }

    /// The CRD cleanup finalizer: delete every instance of the CRD's resource; once none is
    /// left (or the CRD serves nothing), stop serving it. True when the finalizer can go.
    fn crd_instances_gone(&mut self, key: &Key, work: &mut VecDeque<Work>) -> bool {
        let Some(def) = self
            .registry
            .all()
            .iter()
            .find(|d| d.crd.as_deref() == Some(key.name.as_str()))
            .cloned()
        else {
            return true;
        };
        let res = def.storage_key();
        let keys: Vec<Key> = self
            .store
            .range(&res, None, None)
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            self.delete_inner(&k, Propagation::Background, work);
        }
        if self.store.range(&res, None, None).next().is_none() {
            self.registry.uninstall_crd(&key.name);
            return true;
        }
        false
    }

    fn on_removed(&mut self, key: &Key, obj: &Obj, work: &mut VecDeque<Work>) {
        if let Some(uid) = uid_of(obj) {
            for dep in self.store.dependents(uid) {
                self.check_orphaned(&dep, work);
            }
        }
        for owner in owner_uids(obj) {
            if let Some(k) = self.store.key_of_uid(&owner).cloned()
                && self.store.get(&k).is_some_and(|o| deleting(&o))
            {
                work.push_back(Work::Check(k));
            }
        }
        if !key.ns.is_empty() {
            let nk = Key {
                res: Arc::from("/namespaces"),
                ns: String::new(),
                name: key.ns.clone(),
            };
            if self.store.get(&nk).is_some_and(|o| deleting(&o)) {
                work.push_back(Work::Check(nk));
            }
        }
        let (group, plural) = split_res(&key.res);
        if let Some(crd) = self
            .registry
            .lookup_group_resource(group, plural)
            .and_then(|d| d.crd.clone())
        {
            let ck = Key {
                res: Arc::from("apiextensions.k8s.io/customresourcedefinitions"),
                ns: String::new(),
                name: crd,
            };
            if self.store.get(&ck).is_some_and(|o| deleting(&o)) {
                work.push_back(Work::Check(ck));
            }
        }
        if &*key.res == "apiextensions.k8s.io/customresourcedefinitions" {
            self.registry.uninstall_crd(&key.name);
        }
    }
}

/// Whether `dependent` has an owner reference to `owner_uid` with `blockOwnerDeletion: true`.
fn blocks_owner_deletion(dependent: &Value, owner_uid: &str) -> bool {
    meta(dependent)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter().any(|r| {
                r.get("uid").and_then(Value::as_str) == Some(owner_uid)
                    && r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
            })
        })
}
