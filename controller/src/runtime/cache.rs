//! Shared, reference-counted watches per resource (`apiVersion/plural`), each with a store
//! indexed by controller-owner UID and by orphans, and a broadcast of changes.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::{Map, Value};
use tokio::sync::{broadcast, watch};

use crate::object::{controller_uid, meta_str};
use crate::runtime::resources::Resolved;

/// `(namespace, name)`; namespace is "" for cluster-scoped objects.
pub type ObjKey = (String, String);

/// Capacity of each watch's change broadcast (subscribers that fall behind get a `Lagged`
/// and resync everything): 4096 changes.
pub const CHANGE_BUFFER: usize = 4096;

/// One observed change.
#[derive(Debug, Clone)]
pub enum Change {
    /// Added or modified (`old` is the previous cached version).
    Applied {
        /// Previous version.
        old: Option<Arc<Value>>,
        /// New version.
        new: Arc<Value>,
    },
    /// Removed.
    Deleted(Arc<Value>),
}

#[derive(Default)]
struct State {
    objects: HashMap<ObjKey, Arc<Value>>,
    by_owner: HashMap<String, HashSet<ObjKey>>,
    /// Ordered by (namespace, name): one namespace's orphans are a range, not a scan of all.
    orphans: BTreeSet<ObjKey>,
}

impl State {
    fn unindex(&mut self, key: &ObjKey, obj: &Value) {
        match controller_uid(obj) {
            Some(uid) => {
                if let Some(s) = self.by_owner.get_mut(uid) {
                    s.remove(key);
                    if s.is_empty() {
                        self.by_owner.remove(uid);
                    }
                }
            }
            None => {
                self.orphans.remove(key);
            }
        }
    }
    fn insert(&mut self, obj: Arc<Value>) -> Option<Arc<Value>> {
        let key = obj_key(&obj);
        let old = self.remove(&key);
        match controller_uid(&obj) {
            Some(uid) => {
                self.by_owner
                    .entry(uid.to_owned())
                    .or_default()
                    .insert(key.clone());
            }
            None => {
                self.orphans.insert(key.clone());
            }
        }
        self.objects.insert(key, obj);
        old
    }
    /// Orphans in `namespace` (all when `None`): a range of the ordered index, so a parent's
    /// sync costs its own namespace's orphans, not every orphan of the cluster.
    fn orphans_in(&self, namespace: Option<&str>) -> Vec<Arc<Value>> {
        let keys: Box<dyn Iterator<Item = &ObjKey>> = match namespace {
            None => Box::new(self.orphans.iter()),
            Some(n) => Box::new(
                self.orphans
                    .range((n.to_owned(), String::new())..)
                    .take_while(move |(ns, _)| ns == n),
            ),
        };
        keys.filter_map(|k| self.objects.get(k).cloned()).collect()
    }
    fn remove(&mut self, key: &ObjKey) -> Option<Arc<Value>> {
        let old = self.objects.remove(key)?;
        self.unindex(key, &old);
        Some(old)
    }
}

/// The store key of an object.
pub fn obj_key(obj: &Value) -> ObjKey {
    (
        meta_str(obj, "namespace").to_owned(),
        meta_str(obj, "name").to_owned(),
    )
}

/// The watches that have not finished their first list, by watch key (`apiVersion/plural`):
/// what the readiness probe names while the caches are not synced.
#[derive(Debug, Default)]
pub struct PendingWatches(Mutex<BTreeSet<String>>);

impl PendingWatches {
    /// The waiting watches, sorted.
    pub fn list(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn set(&self, key: &str, pending: bool) {
        if let Ok(mut s) = self.0.lock() {
            if pending {
                s.insert(key.to_owned());
            } else {
                s.remove(key);
            }
        }
    }
}

struct Shared {
    resource: Resolved,
    pending: Arc<PendingWatches>,
    state: RwLock<State>,
    tx: broadcast::Sender<Change>,
    synced: watch::Sender<bool>,
    /// Counts completed lists (1 after the first; each relist adds one).
    lists: watch::Sender<u64>,
}

/// A running watch of one resource. Dropping the last `Arc<Informer>` stops it.
pub struct Informer {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Informer {
    fn drop(&mut self) {
        self.task.abort();
        self.shared
            .pending
            .set(&self.shared.resource.watch_key(), false);
    }
}

impl std::fmt::Debug for Informer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer")
            .field("resource", &self.shared.resource.watch_key())
            .finish_non_exhaustive()
    }
}

/// The cache's own form of a watched object: one JSON object whose body (everything but
/// `metadata`) is moved out of the `DynamicObject`, not re-encoded, and whose `managedFields`
/// are dropped (about 40% of a small child's memory; a PUT without them keeps the server's
/// copy, and kmeta never reads them). `apiVersion`/`kind` default to the watched resource's.
pub fn cached_value(mut obj: DynamicObject, r: &Resolved) -> Option<Value> {
    obj.metadata.managed_fields = None;
    let (api_version, kind) = match obj.types.take() {
        Some(t) => (t.api_version, t.kind),
        None => (String::new(), String::new()),
    };
    let or_resource = |s: String, d: &str| if s.is_empty() { d.to_owned() } else { s };
    let mut m = Map::new();
    m.insert(
        "apiVersion".into(),
        Value::String(or_resource(api_version, &r.api.api_version)),
    );
    m.insert("kind".into(), Value::String(or_resource(kind, &r.api.kind)));
    m.insert("metadata".into(), serde_json::to_value(obj.metadata).ok()?);
    match obj.data {
        Value::Object(body) => m.extend(body),
        Value::Null => {}
        _ => return None,
    }
    Some(Value::Object(m))
}

impl Shared {
    fn read<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        match self.state.read() {
            Ok(s) => f(&s),
            Err(p) => f(&p.into_inner()),
        }
    }
    fn write<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        match self.state.write() {
            Ok(mut s) => f(&mut s),
            Err(p) => f(&mut p.into_inner()),
        }
    }

    fn apply(&self, obj: Value) {
        let new = Arc::new(obj);
        let old = self.write(|s| s.insert(new.clone()));
        let _ = self.tx.send(Change::Applied { old, new });
    }

    fn delete(&self, obj: Value) {
        let key = obj_key(&obj);
        let old = self.write(|s| s.remove(&key));
        let _ = self
            .tx
            .send(Change::Deleted(old.unwrap_or_else(|| Arc::new(obj))));
    }

    /// Replaces the store after a (re)list, announcing what changed.
    fn replace(&self, objs: Vec<Value>) {
        let keep: HashSet<ObjKey> = objs.iter().map(obj_key).collect();
        let gone: Vec<ObjKey> = self.read(|s| {
            s.objects
                .keys()
                .filter(|k| !keep.contains(*k))
                .cloned()
                .collect()
        });
        for k in gone {
            if let Some(old) = self.write(|s| s.remove(&k)) {
                let _ = self.tx.send(Change::Deleted(old));
            }
        }
        for o in objs {
            let key = obj_key(&o);
            let same = self.read(|s| {
                s.objects.get(&key).is_some_and(|c| {
                    meta_str(c, "resourceVersion") == meta_str(&o, "resourceVersion")
                })
            });
            if !same {
                self.apply(o);
            }
        }
        self.synced.send_replace(true);
        self.pending.set(&self.resource.watch_key(), false);
        self.lists.send_modify(|n| *n += 1);
    }

    /// Watches until aborted. Every `flush` the watch is restarted with a fresh list (which
    /// corrects the cache should an event ever have been missed), as Metacontroller's
    /// `--cache-flush-interval` does.
    async fn run(self: Arc<Self>, client: kube::Client, flush: Option<Duration>) {
        loop {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &self.resource.api);
            let stream = watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            match flush {
                Some(d) => {
                    let _ = tokio::time::timeout(d, self.clone().consume(stream)).await;
                    tracing::debug!(resource = %self.resource.watch_key(), "cache flush: relisting");
                }
                None => {
                    self.clone().consume(stream).await;
                    return;
                }
            }
        }
    }

    async fn consume(
        self: Arc<Self>,
        mut stream: futures::stream::BoxStream<
            'static,
            Result<Event<DynamicObject>, watcher::Error>,
        >,
    ) {
        let mut buffer: Vec<Value> = Vec::new();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Apply(o)) => {
                    if let Some(v) = cached_value(o, &self.resource) {
                        self.apply(v);
                    }
                }
                Ok(Event::Delete(o)) => {
                    if let Some(v) = cached_value(o, &self.resource) {
                        self.delete(v);
                    }
                }
                Ok(Event::Init) => buffer.clear(),
                Ok(Event::InitApply(o)) => {
                    if let Some(v) = cached_value(o, &self.resource) {
                        buffer.push(v);
                    }
                }
                Ok(Event::InitDone) => self.replace(std::mem::take(&mut buffer)),
                Err(e) => {
                    tracing::warn!(resource = %self.resource.watch_key(), error = %e, "watch error; retrying");
                }
            }
        }
    }
}

impl Informer {
    /// A cached object.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.shared.read(|s| {
            s.objects
                .get(&(namespace.to_owned(), name.to_owned()))
                .cloned()
        })
    }
    /// Every cached object.
    pub fn list(&self) -> Vec<Arc<Value>> {
        self.shared.read(|s| s.objects.values().cloned().collect())
    }
    /// Objects whose controller owner has this UID.
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<Value>> {
        self.shared.read(|s| {
            s.by_owner
                .get(uid)
                .map(|keys| {
                    keys.iter()
                        .filter_map(|k| s.objects.get(k).cloned())
                        .collect()
                })
                .unwrap_or_default()
        })
    }
    /// Objects without a controller owner (in `namespace` when given).
    pub fn orphans(&self, namespace: Option<&str>) -> Vec<Arc<Value>> {
        self.shared.read(|s| s.orphans_in(namespace))
    }
    /// Subscribes to changes from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.shared.tx.subscribe()
    }
    /// The watch key, `apiVersion/plural`.
    pub fn watch_key(&self) -> String {
        self.shared.resource.watch_key()
    }
    /// True once the first list completed.
    pub fn is_synced(&self) -> bool {
        *self.shared.synced.borrow()
    }
    /// A receiver that changes whenever a list completes (the first, and every relist after a
    /// 410 or a cache flush).
    pub fn lists(&self) -> watch::Receiver<u64> {
        self.shared.lists.subscribe()
    }
    /// Waits for the first list.
    pub async fn wait_synced(&self) {
        let mut rx = self.shared.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// The shared watches, created on demand and stopped when unused.
pub struct Informers {
    client: kube::Client,
    flush: Option<Duration>,
    pending: Arc<PendingWatches>,
    map: Mutex<HashMap<String, Weak<Informer>>>,
}

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers").finish_non_exhaustive()
    }
}

impl Informers {
    /// No watches yet; each watch relists every `flush` (None: never); watches that have not
    /// listed yet are kept in `pending`.
    pub fn new(
        client: kube::Client,
        flush: Option<Duration>,
        pending: Arc<PendingWatches>,
    ) -> Self {
        Informers {
            client,
            flush,
            pending,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The shared watch of `r`, started if not running.
    pub fn get(&self, r: &Resolved) -> Arc<Informer> {
        let key = r.watch_key();
        let mut map = match self.map.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        if let Some(i) = map.get(&key).and_then(Weak::upgrade) {
            return i;
        }
        map.retain(|_, w| w.strong_count() > 0);
        let (synced, _) = watch::channel(false);
        let (lists, _) = watch::channel(0);
        let (tx, _) = broadcast::channel(CHANGE_BUFFER);
        self.pending.set(&key, true);
        let shared = Arc::new(Shared {
            resource: r.clone(),
            pending: self.pending.clone(),
            state: RwLock::new(State::default()),
            tx,
            synced,
            lists,
        });
        let task = tokio::spawn(shared.clone().run(self.client.clone(), self.flush));
        let inf = Arc::new(Informer { shared, task });
        map.insert(key, Arc::downgrade(&inf));
        inf
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(name: &str, owner: Option<&str>) -> Arc<Value> {
        let mut v = json!({"metadata": {"name": name, "namespace": "ns"}});
        if let Some(uid) = owner {
            v["metadata"]["ownerReferences"] = json!([{"uid": uid, "controller": true}]);
        }
        Arc::new(v)
    }

    #[test]
    fn watched_objects_are_cached_without_managed_fields() {
        let r = Resolved {
            api: kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            namespaced: true,
            has_status: false,
        };
        let wire = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7",
                "labels": {"x": "1"},
                "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}}]},
            "data": {"k": "v"}, "immutable": false});
        let cached = cached_value(serde_json::from_value(wire.clone()).unwrap(), &r).unwrap();
        let mut want = wire;
        want["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        assert_eq!(cached, want);
        let keys: Vec<&String> = cached.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["apiVersion", "kind", "metadata", "data", "immutable"]
        );
        // a watch event without apiVersion/kind gets the watched resource's
        let bare = json!({"metadata": {"name": "b"}, "data": {}});
        let cached = cached_value(serde_json::from_value(bare).unwrap(), &r).unwrap();
        assert_eq!(cached["apiVersion"], "v1");
        assert_eq!(cached["kind"], "ConfigMap");
    }

    #[test]
    fn indexes_follow_ownership_changes() {
        let mut s = State::default();
        s.insert(obj("a", None));
        s.insert(obj("b", Some("u1")));
        assert!(s.orphans.contains(&("ns".into(), "a".into())));
        assert_eq!(s.by_owner["u1"].len(), 1);
        // adoption moves a from orphans to u1
        let old = s.insert(obj("a", Some("u1")));
        assert!(old.is_some());
        assert!(s.orphans.is_empty());
        assert_eq!(s.by_owner["u1"].len(), 2);
        // release and delete
        s.insert(obj("a", None));
        s.remove(&("ns".into(), "b".into()));
        assert!(!s.by_owner.contains_key("u1"));
        assert_eq!(s.orphans.len(), 1);
    }

    #[test]
    fn orphans_are_listed_per_namespace() {
        let mut s = State::default();
        let in_ns = |ns: &str, name: &str| json!({"metadata": {"namespace": ns, "name": name, "uid": format!("{ns}-{name}")}});
        for (ns, name) in [("a", "x"), ("ab", "y"), ("b", "z"), ("a", "w")] {
            s.insert(Arc::new(in_ns(ns, name)));
        }
        let names = |ns| {
            let mut v: Vec<String> = s
                .orphans_in(ns)
                .iter()
                .map(|o| {
                    format!(
                        "{}/{}",
                        o["metadata"]["namespace"].as_str().unwrap(),
                        o["metadata"]["name"].as_str().unwrap()
                    )
                })
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(Some("a")), ["a/w", "a/x"]);
        assert_eq!(names(Some("ab")), ["ab/y"]);
        assert_eq!(names(Some("c")), Vec::<String>::new());
        assert_eq!(names(None).len(), 4);
    }
}
