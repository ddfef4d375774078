//! Shared, reference-counted watches per resource (`apiVersion/plural`) and form (decoded JSON
//! values, or [`Compact`] children), each with a store indexed by controller-owner UID and by
//! orphans, and a broadcast of changes.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use futures::StreamExt;
use kube::api::Api;

use crate::runtime::watched::Watched;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{broadcast, watch};

use crate::object::ObjectView;
use crate::runtime::compact::Compact;
use crate::runtime::resources::Resolved;
mod attached;
mod initial_list;
mod paced;
mod sharded;

use crate::runtime::shard_watch::{HashRange, Listed, Selection, WatchShards};
pub use attached::Attached;
pub use initial_list::WatchListMode;
use initial_list::{Fallback, Stamp, Strategy};
use sharded::Group;

/// A watched object's identity in the cache and the work queue: its namespace ("" when
/// cluster-scoped) and name, ordered by namespace then name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjKey {
    /// The namespace, "" for a cluster-scoped object.
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl ObjKey {
    /// The key of `namespace`/`name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// As logged: `namespace/name`, or `name` for a cluster-scoped object.
impl std::fmt::Display for ObjKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

impl crate::runtime::queue::Tenant for ObjKey {
    fn tenant(&self) -> &str {
        &self.namespace
    }
}

/// Capacity of each watch's change broadcast (subscribers that fall behind get a `Lagged`
/// and resync everything): 4096 changes.
pub const CHANGE_BUFFER: usize = 4096;

/// The form a watch holds its objects in: decoded JSON values (parents, targets, related
/// objects, revisions: read whole by every sync) or [`Compact`] (children: held in numbers,
/// read mostly by their identity). A resource watched in both forms has two watches.
pub trait Form: ObjectView + Send + Sync + Sized + 'static {
    /// Whether the watch indexes its orphans by label: children's watches do (a parent's sync
    /// looks among the orphans carrying a label its selector requires); the others never look
    /// orphans up by label, and would hold the index for nothing (every parent is an orphan).
    const ORPHANS_BY_LABEL: bool;
    /// The cached form of a watched object; `None` (logged) when it cannot be made.
    fn from_watched(obj: Watched, r: &Resolved) -> Option<Self>;
    /// Takes out the part of the object the store holds as JSON text beside it, not decoded
    /// ([`DETACHED_STATUS_FIELD`]); none by default.
    fn detach(&mut self) -> Option<Box<RawValue>> {
        None
    }
    /// The object with `text` (what [`Form::detach`] took out) put back.
    fn attach(&self, text: &RawValue) -> Option<Self>;
}

/// The status field a decoded-value watch holds as JSON text beside the object instead of
/// decoded: `status.kmeta`, kmeta's own record of a parent's syncs (up to five records with
/// their children). Only a sync of that one object reads it ([`Informer::whole`]); decoded, it
/// cost several times its text in every cached parent (a `serde_json::Value` allocates each
/// key and string on its own), 60–70 MiB at 10 000 parents (docs/design/detached-record.md).
pub const DETACHED_STATUS_FIELD: &str = "kmeta";

impl Form for Value {
    const ORPHANS_BY_LABEL: bool = false;
    fn from_watched(obj: Watched, r: &Resolved) -> Option<Self> {
        cached_value(obj, r)
    }
    fn detach(&mut self) -> Option<Box<RawValue>> {
        let status = self.get_mut("status")?.as_object_mut()?;
        let field = status.shift_remove(DETACHED_STATUS_FIELD)?;
        serde_json::value::to_raw_value(&field).ok()
    }
    fn attach(&self, text: &RawValue) -> Option<Self> {
        let field: Value = serde_json::from_str(text.get()).ok()?;
        let mut whole = self.clone();
        let status = whole.get_mut("status")?.as_object_mut()?;
        status.insert(DETACHED_STATUS_FIELD.into(), field);
        Some(whole)
    }
}

impl Form for Compact {
    const ORPHANS_BY_LABEL: bool = true;
    fn from_watched(obj: Watched, r: &Resolved) -> Option<Self> {
        Compact::from_watched(obj, r)
            .map_err(|e| tracing::warn!(resource = %r.watch_key(), error = %e, "watched object not cached"))
            .ok()
    }
    fn attach(&self, _: &RawValue) -> Option<Self> {
        None
    }
}

/// A watched object on its way into the store: its cached form, already in the `Arc` the
/// store keeps (a list's objects are not moved again once listed: at 330 000 objects the
/// buffer of a list held every object a second time at the peak of the initial list), and what
/// [`Form::detach`] took out of it.
struct Held<T> {
    obj: Arc<T>,
    detached: Option<Box<RawValue>>,
}

impl<T: Form> Held<T> {
    fn of(obj: Watched, r: &Resolved) -> Option<Self> {
        let mut obj = T::from_watched(obj, r)?;
        let detached = obj.detach();
        Some(Held {
            obj: Arc::new(obj),
            detached,
        })
    }
}

/// One observed change.
#[derive(Debug)]
pub enum Change<T = Value> {
    /// Added or modified (`old` is the previous cached version).
    Applied {
        /// Previous version.
        old: Option<Arc<T>>,
        /// New version.
        new: Arc<T>,
    },
    /// Removed.
    Deleted(Arc<T>),
}

impl<T> Clone for Change<T> {
    fn clone(&self) -> Self {
        match self {
            Change::Applied { old, new } => Change::Applied {
                old: old.clone(),
                new: new.clone(),
            },
            Change::Deleted(o) => Change::Deleted(o.clone()),
        }
    }
}

/// The objects by key, and the indexes; the indexes share the key's strings (`Arc`): an
/// object's key is held once, not once per index.
struct State<T> {
    objects: HashMap<Arc<ObjKey>, Arc<T>>,
    /// Each controller's objects, held here too: a parent's children are read without a lookup
    /// of each in `objects` (the no-op resync reads them for every parent).
    by_owner: HashMap<String, HashMap<Arc<ObjKey>, Arc<T>>>,
    /// Ordered by (namespace, name): one namespace's orphans are a range, not a scan of all.
    orphans: BTreeSet<Arc<ObjKey>>,
    /// The orphans by label (key → value → orphans): a parent's sync looks among those that
    /// carry a label its selector requires, not among every orphan of the namespace.
    orphans_by_label: HashMap<String, HashMap<String, BTreeSet<Arc<ObjKey>>>>,
    /// What [`Form::detach`] took out of an object, as text, by its key.
    detached: HashMap<Arc<ObjKey>, Box<RawValue>>,
}

impl<T> Default for State<T> {
    fn default() -> Self {
        State {
            objects: HashMap::new(),
            by_owner: HashMap::new(),
            orphans: BTreeSet::new(),
            orphans_by_label: HashMap::new(),
            detached: HashMap::new(),
        }
    }
}

impl<T: Form> State<T> {
    fn unindex(&mut self, key: &ObjKey, obj: &T) {
        match obj.controller().map(|c| c.uid) {
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
                if !T::ORPHANS_BY_LABEL {
                    return;
                }
                for (k, v) in obj.labels() {
                    let Some(by_value) = self.orphans_by_label.get_mut(k) else {
                        continue;
                    };
                    if let Some(keys) = by_value.get_mut(v) {
                        keys.remove(key);
                        if keys.is_empty() {
                            by_value.remove(v);
                        }
                    }
                    if by_value.is_empty() {
                        self.orphans_by_label.remove(k);
                    }
                }
            }
        }
    }
    fn insert(&mut self, obj: Arc<T>, detached: Option<Box<RawValue>>) -> Option<Arc<T>> {
        let key = obj_key(&*obj);
        let old = self.remove(&key);
        let key = Arc::new(key);
        if let Some(text) = detached {
            self.detached.insert(key.clone(), text);
        }
        match obj.controller().map(|c| c.uid) {
            Some(uid) => {
                self.by_owner
                    .entry(uid.to_owned())
                    .or_default()
                    .insert(key.clone(), obj.clone());
            }
            None => {
                self.orphans.insert(key.clone());
                let labels = if T::ORPHANS_BY_LABEL {
                    obj.labels()
                } else {
                    Vec::new()
                };
                for (k, v) in labels {
                    self.orphans_by_label
                        .entry(k.to_owned())
                        .or_default()
                        .entry(v.to_owned())
                        .or_default()
                        .insert(key.clone());
                }
            }
        }
        self.objects.insert(key, obj);
        old
    }
    /// Orphans in `namespace` (all when `None`): a range of the ordered index, so a parent's
    /// sync costs its own namespace's orphans, not every orphan of the cluster.
    fn orphans_in(&self, namespace: Option<&str>) -> Vec<Arc<T>> {
        self.objects_in(&self.orphans, namespace)
    }
    /// Orphans labelled `key`=`value` (in `namespace` when given).
    fn orphans_labelled(&self, namespace: Option<&str>, key: &str, value: &str) -> Vec<Arc<T>> {
        if !T::ORPHANS_BY_LABEL {
            let mut orphans = self.orphans_in(namespace);
            orphans.retain(|o| o.label(key) == Some(value));
            return orphans;
        }
        match self.orphans_by_label.get(key).and_then(|m| m.get(value)) {
            Some(keys) => self.objects_in(keys, namespace),
            None => Vec::new(),
        }
    }
    /// The objects of `keys` (in `namespace` when given: a range of the ordered set).
    fn objects_in(&self, keys: &BTreeSet<Arc<ObjKey>>, namespace: Option<&str>) -> Vec<Arc<T>> {
        let keys: Box<dyn Iterator<Item = &Arc<ObjKey>>> = match namespace {
            None => Box::new(keys.iter()),
            Some(n) => Box::new(
                keys.range::<ObjKey, _>(ObjKey::new(n, "")..)
                    .take_while(move |k| k.namespace == n),
            ),
        };
        keys.filter_map(|k| self.objects.get(k).cloned()).collect()
    }
    fn remove(&mut self, key: &ObjKey) -> Option<Arc<T>> {
        let old = self.objects.remove(key)?;
        self.detached.remove(key);
        self.unindex(key, &old);
        Some(old)
    }
}

/// The store key of an object.
pub fn obj_key(obj: &impl ObjectView) -> ObjKey {
    ObjKey::new(obj.namespace(), obj.name())
}

/// The watches that have not finished their first list, by watch key (`apiVersion/plural`):
/// what the readiness probe names while the caches are not synced.
#[derive(Debug, Default)]
pub struct PendingWatches(Mutex<BTreeMap<String, usize>>);

impl PendingWatches {
    /// The waiting watches, sorted.
    pub fn list(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|s| s.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// One more (`pending`) or one fewer watch of `key` waits (a resource may be watched in
    /// both forms).
    fn set(&self, key: &str, pending: bool) {
        if let Ok(mut s) = self.0.lock() {
            if pending {
                *s.entry(key.to_owned()).or_default() += 1;
            } else if let Some(n) = s.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    s.remove(key);
                }
            }
        }
    }
}

struct Shared<T> {
    resource: Resolved,
    pending: Arc<PendingWatches>,
    /// Still counted in `pending`.
    waiting: std::sync::atomic::AtomicBool,
    state: RwLock<State<T>>,
    tx: broadcast::Sender<Change<T>>,
    synced: watch::Sender<bool>,
    /// Counts completed lists (1 after the first; each relist adds one).
    lists: watch::Sender<u64>,
    /// When the list in progress was started (its request is sent after this), then when the
    /// last completed one was: see [`Informer::listed_from`].
    list_times: std::sync::Mutex<ListTimes>,
    /// A sharded watch: the [`Selection`] it runs, what it has listed (what
    /// [`WatchShards::wait_listed`] waits for), and each range's last list request.
    selection: Mutex<Selection>,
    listed_ranges_tx: watch::Sender<Listed>,
    range_lists: Mutex<HashMap<HashRange, std::time::Instant>>,
    /// The server applies this watch's shard selector (probed).
    sharded: AtomicBool,
    /// The list-and-watch streams it runs (1 when whole; see [`Self::run_sharded`]).
    streams: std::sync::atomic::AtomicUsize,
    /// How its next initial list is made: a watch-list until the server shows it does not
    /// offer one ([`WatchListMode`]).
    strategy: Mutex<Strategy>,
}

/// How one stream of a watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Consumed {
    /// The watcher's stream ended.
    Ended,
    /// The server does not offer the watch-list: start over with list-then-watch.
    FallBack,
}

/// When this watch's lists started.
#[derive(Debug, Default, Clone, Copy)]
struct ListTimes {
    in_progress: Option<std::time::Instant>,
    last_completed: Option<std::time::Instant>,
}

/// A running watch of one resource. Dropping the last `Arc<Informer>` stops it.
pub struct Informer<T = Value> {
    shared: Arc<Shared<T>>,
    task: tokio::task::JoinHandle<()>,
}

impl<T> Drop for Informer<T> {
    fn drop(&mut self) {
        self.task.abort();
        self.shared.listed();
    }
}

impl<T> std::fmt::Debug for Informer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer")
            .field("resource", &self.shared.resource.watch_key())
            .finish_non_exhaustive()
    }
}

/// A watched object as the decoded-value watches hold it (parents, targets, related objects,
/// revisions; children are held [`Compact`]): its text decoded once, without `managedFields`
/// (about 40% of a small child's memory; a PUT without them keeps the server's copy, and kmeta
/// never reads them), `apiVersion`/`kind` defaulting to the watched resource's; `None` (logged)
/// when it is no JSON object.
pub fn cached_value(obj: Watched, r: &Resolved) -> Option<Value> {
    let mut v: Value = match serde_json::from_str(obj.text()) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(resource = %r.watch_key(), error = %e, "watched object not cached");
            return None;
        }
    };
    let m = v.as_object_mut()?;
    if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.shift_remove("managedFields");
    }
    for (key, default) in [("apiVersion", &r.api.api_version), ("kind", &r.api.kind)] {
        let given = m
            .get(key)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
        if !given {
            m.insert(key.into(), Value::String(default.clone()));
        }
    }
    Some(v)
}

impl<T> Shared<T> {
    /// An empty store of `resource`, counted in `pending` until its first list.
    fn new(resource: Resolved, pending: Arc<PendingWatches>, mode: WatchListMode) -> Arc<Self> {
        let (tx, _) = broadcast::channel(CHANGE_BUFFER);
        pending.set(&resource.watch_key(), true);
        Arc::new(Shared {
            resource,
            pending,
            waiting: std::sync::atomic::AtomicBool::new(true),
            state: RwLock::new(State::default()),
            tx,
            synced: watch::channel(false).0,
            lists: watch::channel(0).0,
            list_times: std::sync::Mutex::default(),
            selection: Mutex::default(),
            listed_ranges_tx: watch::channel(Listed::default()).0,
            range_lists: Mutex::default(),
            sharded: AtomicBool::new(false),
            streams: std::sync::atomic::AtomicUsize::new(1),
            strategy: Mutex::new(Strategy::first(mode)),
        })
    }

    /// This watch no longer waits for its first list (listed, or stopped).
    fn listed(&self) {
        if self
            .waiting
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            self.pending.set(&self.resource.watch_key(), false);
        }
    }
}

impl<T: Form> Shared<T> {
    fn read<R>(&self, f: impl FnOnce(&State<T>) -> R) -> R {
        match self.state.read() {
            Ok(s) => f(&s),
            Err(p) => f(&p.into_inner()),
        }
    }
    fn write<R>(&self, f: impl FnOnce(&mut State<T>) -> R) -> R {
        match self.state.write() {
            Ok(mut s) => f(&mut s),
            Err(p) => f(&mut p.into_inner()),
        }
    }

    fn apply(&self, held: Held<T>) {
        let change = self.store(held);
        let _ = self.tx.send(change);
    }

    /// Stores `held`, returning the change to announce.
    fn store(&self, held: Held<T>) -> Change<T> {
        let new = held.obj;
        let old = self.write(|s| s.insert(new.clone(), held.detached));
        Change::Applied { old, new }
    }

    fn delete(&self, obj: T) {
        let key = obj_key(&obj);
        let old = self.write(|s| s.remove(&key));
        let _ = self
            .tx
            .send(Change::Deleted(old.unwrap_or_else(|| Arc::new(obj))));
    }

    /// Replaces the store after a (re)list, announcing what changed.
    fn replace(&self, objs: Vec<Held<T>>) {
        self.store_where(
            objs,
            |_| true,
            |change| {
                let _ = self.tx.send(change);
            },
        );
        self.synced.send_replace(true);
        self.listed();
        self.lists.send_modify(|n| *n += 1);
    }

    /// Replaces the objects whose key passes `mine` by `objs` in the store, handing each change
    /// to `announce` in order as it is made (a whole watch sends it at once, without holding a
    /// list of them beside the listed objects at the peak of a first list).
    fn store_where(
        &self,
        objs: Vec<Held<T>>,
        mine: impl Fn(&ObjKey) -> bool,
        mut announce: impl FnMut(Change<T>),
    ) {
        for k in self.gone(&objs, mine) {
            if let Some(old) = self.write(|s| s.remove(&k)) {
                announce(Change::Deleted(old));
            }
        }
        for o in objs {
            let key = obj_key(&*o.obj);
            let same = self.read(|s| {
                s.objects
                    .get(&key)
                    .is_some_and(|c| c.resource_version() == o.obj.resource_version())
            });
            if !same {
                announce(self.store(o));
            }
        }
    }

    /// Announces `change` unless it is an object the store no longer holds as announced (a
    /// newer version stored since, or removed: that change announces itself), looked at under
    /// the store's lock so that no later change of the object is announced before it.
    fn announce_if_current(&self, change: Change<T>) {
        self.read(|s| {
            let current = match &change {
                Change::Applied { new, .. } => s
                    .objects
                    .get(&obj_key(&**new))
                    .is_some_and(|c| Arc::ptr_eq(c, new)),
                Change::Deleted(_) => true,
            };
            if current {
                let _ = self.tx.send(change);
            }
        });
    }

    /// The keys `mine` passes that the store holds and `listed` lacks. None from an empty
    /// store (a first list): then no set of the listed keys is built, which at 330 000 objects
    /// was tens of MiB on top of the listed objects at the peak of the initial list.
    fn gone(&self, listed: &[Held<T>], mine: impl Fn(&ObjKey) -> bool) -> Vec<Arc<ObjKey>> {
        if self.read(|s| s.objects.is_empty()) {
            return Vec::new();
        }
        let keep: HashSet<(&str, &str)> = listed
            .iter()
            .map(|o| (o.obj.namespace(), o.obj.name()))
            .collect();
        self.read(|s| {
            s.objects
                .keys()
                .filter(|k| mine(k) && !keep.contains(&(k.namespace.as_str(), k.name.as_str())))
                .cloned()
                .collect()
        })
    }

    fn list_times(&self) -> std::sync::MutexGuard<'_, ListTimes> {
        self.list_times
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Watches until aborted. The watch stays open for as long as the server keeps it: a cache
    /// flush (`--cache-flush-interval`) lists nothing again, it resyncs the controllers' parents
    /// from this store (`reconcile::triggers`), as Metacontroller's informer resync replays its
    /// cache; only a watch that expired (410 Gone) lists again, as client-go's reflector does
    /// (docs/design/own-informers-and-queue.md).
    async fn run(self: Arc<Self>, client: kube::Client) {
        while self.clone().stream_once(&client, None).await {}
    }

    /// Runs one watcher stream (of `group` when sharded) until it ends or the watch falls back
    /// to list-then-watch; true when it fell back (run it again). Its initial list reads the
    /// newest state (no `resourceVersion=0` from the server's watch cache, whichever
    /// [`Strategy`]): a list started after a write then shows it, which settles the write's
    /// expectation ([`Informer::listed_from`]) even when its own event was lost.
    async fn stream_once(
        self: Arc<Self>,
        client: &kube::Client,
        group: Option<Arc<Group>>,
    ) -> bool {
        let strategy = self.strategy();
        let stamp: Option<Stamp> = (strategy == Strategy::WatchList).then(Stamp::default);
        let client = match &stamp {
            Some(s) => initial_list::consistent_watch_list(client, s.clone()),
            None => client.clone(),
        };
        let api: Api<Watched> = Api::all_with(client, &self.resource.api);
        let stream = watcher::watcher(api, strategy.config())
            .default_backoff()
            .boxed();
        self.clone().consume(stream, group, stamp).await == Consumed::FallBack
    }

    fn strategy(&self) -> Strategy {
        *self
            .strategy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The server does not offer the watch-list (`why`): this watch lists then watches from now.
    fn fall_back(&self, why: &str) {
        let mut s = self
            .strategy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *s == Strategy::WatchList {
            tracing::warn!(resource = %self.resource.watch_key(), reason = why, "the API server does not offer the watch-list (sendInitialEvents); listing then watching");
        }
        *s = Strategy::ListThenWatch;
    }

    fn apply_watched(&self, o: Watched) {
        if let Some(v) = Held::of(o, &self.resource) {
            self.apply(v);
        }
    }

    fn delete_watched(&self, o: Watched) {
        if let Some(v) = T::from_watched(o, &self.resource) {
            self.delete(v);
        }
    }

    /// Applies a watch's events to the store: the whole resource (`group` `None`), or one
    /// stream of a sharded watch, whose events count only for its ranges still selected and
    /// whose (re)list replaces only their objects. `stamp` is set for a watch-list: when its
    /// request left, and the cue to fall back when the server shows it offers none.
    async fn consume(
        self: Arc<Self>,
        mut stream: futures::stream::BoxStream<'static, Result<Event<Watched>, watcher::Error>>,
        group: Option<Arc<Group>>,
        stamp: Option<Stamp>,
    ) -> Consumed {
        let mut requested = std::time::Instant::now();
        let mut buffer: Vec<Held<T>> = Vec::new();
        let mut fallback = Fallback::default();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Apply(o)) => {
                    let admitted = group.as_ref().map(|g| g.admit(&o));
                    if let None | Some(Some(_)) = admitted {
                        self.apply_watched(o);
                    }
                }
                Ok(Event::Delete(o)) => {
                    let admitted = group.as_ref().map(|g| g.admit(&o));
                    if let None | Some(Some(_)) = admitted {
                        self.delete_watched(o);
                    }
                }
                Ok(Event::Init) => {
                    // a list's request is sent after `Init`; a watch-list's before (stamped)
                    requested = std::time::Instant::now();
                    if let Some(s) = &stamp {
                        if fallback.on_init() {
                            self.fall_back("its initial events never ended with a bookmark");
                            return Consumed::FallBack;
                        }
                        requested = initial_list::take(s).map_or(requested, |t| t.min(requested));
                    }
                    if group.is_none() {
                        self.list_times().in_progress = Some(requested);
                    }
                    buffer.clear();
                }
                Ok(Event::InitApply(o)) => {
                    if let Some(v) = Held::of(o, &self.resource) {
                        buffer.push(v);
                    }
                }
                Ok(Event::InitDone) => {
                    fallback.on_done();
                    self.listed_whole_or(&group, std::mem::take(&mut buffer), requested)
                        .await;
                }
                Err(e) => {
                    if stamp.is_some() && fallback.on_error(&e) {
                        self.fall_back(&e.to_string());
                        return Consumed::FallBack;
                    }
                    tracing::warn!(resource = %self.resource.watch_key(), error = %e, "watch error; retrying");
                }
            }
        }
        Consumed::Ended
    }

    /// An initial list (requested at `requested`) is complete: it replaces the store, or the
    /// live ranges of a sharded stream's `group` (its changes announced paced, [`paced`]).
    async fn listed_whole_or(
        self: &Arc<Self>,
        group: &Option<Arc<Group>>,
        objs: Vec<Held<T>>,
        requested: std::time::Instant,
    ) {
        match group {
            None => {
                self.replace(objs);
                let mut t = self.list_times();
                t.last_completed = t.in_progress.take().or(t.last_completed);
            }
            Some(g) => self.replace_group(g, objs, requested).await,
        }
    }
}

impl<T: Form> Informer<T> {
    /// A cached object.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<T>> {
        self.shared
            .read(|s| s.objects.get(&ObjKey::new(namespace, name)).cloned())
    }
    /// `obj` (as this watch handed it out) whole: with what the store holds as text beside it
    /// put back ([`Form::detach`], [`DETACHED_STATUS_FIELD`]) while the store still holds that
    /// version; else `obj` as it is (a newer version is cached: a write based on `obj` is
    /// refused by its resourceVersion anyway).
    pub fn whole(&self, obj: Arc<T>) -> Arc<T> {
        self.attached(&obj).map_or(obj, Arc::new)
    }
    /// `obj` with what the store holds as text beside it put back, when there is any for its
    /// version ([`Informer::whole`]).
    pub fn attached(&self, obj: &T) -> Option<T> {
        let key = obj_key(obj);
        self.shared.read(|s| {
            let cached = s.objects.get(&key)?;
            if cached.resource_version() != obj.resource_version() {
                return None;
            }
            obj.attach(s.detached.get(&key)?)
        })
    }
    /// A cached object as cached, and a copy of the text the store holds beside it for that
    /// very version ([`Form::detach`]), read together: [`Attached`] encodes the two as the
    /// object whole, and [`Form::attach`] makes it whole, without a second look at the store.
    pub fn get_detached(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<(Arc<T>, Option<Box<RawValue>>)> {
        let key = ObjKey::new(namespace, name);
        self.shared.read(|s| {
            let obj = s.objects.get(&key)?.clone();
            Some((obj, s.detached.get(&key).cloned()))
        })
    }
    /// A cached object whole ([`Informer::whole`]): as a sync that writes it reads it.
    pub fn get_whole(&self, namespace: &str, name: &str) -> Option<Arc<T>> {
        self.get(namespace, name).map(|o| self.whole(o))
    }
    /// Every cached object.
    pub fn list(&self) -> Vec<Arc<T>> {
        self.shared.read(|s| s.objects.values().cloned().collect())
    }
    /// How many cached objects `test` accepts, counted in place (no copy of the list).
    pub fn count(&self, test: impl Fn(&T) -> bool) -> usize {
        self.shared
            .read(|s| s.objects.values().filter(|o| test(o)).count())
    }
    /// Objects whose controller owner has this UID.
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<T>> {
        self.shared.read(|s| {
            s.by_owner
                .get(uid)
                .map(|objects| objects.values().cloned().collect())
                .unwrap_or_default()
        })
    }
    /// Objects without a controller owner (in `namespace` when given).
    pub fn orphans(&self, namespace: Option<&str>) -> Vec<Arc<T>> {
        self.shared.read(|s| s.orphans_in(namespace))
    }
    /// Objects without a controller owner labelled `key`=`value` (in `namespace` when given).
    pub fn orphans_labelled(&self, namespace: Option<&str>, key: &str, value: &str) -> Vec<Arc<T>> {
        self.shared
            .read(|s| s.orphans_labelled(namespace, key, value))
    }
    /// Subscribes to changes from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Change<T>> {
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
    /// 410: the cache flush lists nothing; a sharded watch's streams merged into one, kmeta's
    /// own relist, is not counted).
    pub fn lists(&self) -> watch::Receiver<u64> {
        self.shared.lists.subscribe()
    }
    /// When the request of the last complete list (the first, or a relist) was sent: with the
    /// newest-state list semantic, the cache shows every write the API server acknowledged
    /// before then (a write undone meanwhile by its absence). On this process's clock, not by
    /// resourceVersion: the API conventions make those opaque.
    pub fn listed_from(&self) -> Option<std::time::Instant> {
        self.shared.list_times().last_completed
    }
    /// Waits for the first list.
    pub async fn wait_synced(&self) {
        let mut rx = self.shared.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// What a controller's loop reads of each watch it depends on, whichever form the watch holds
/// its objects in.
pub trait Watch: Send + Sync {
    /// The watch key, `apiVersion/plural`.
    fn watch_key(&self) -> String;
    /// True once the first list completed.
    fn is_synced(&self) -> bool;
    /// A receiver that changes whenever a list completes.
    fn lists(&self) -> watch::Receiver<u64>;
    /// Waits for the first list.
    fn wait_synced(&self) -> futures::future::BoxFuture<'_, ()>;
}

impl<T: Form> Watch for Informer<T> {
    fn watch_key(&self) -> String {
        Informer::watch_key(self)
    }
    fn is_synced(&self) -> bool {
        Informer::is_synced(self)
    }
    fn lists(&self) -> watch::Receiver<u64> {
        Informer::lists(self)
    }
    fn wait_synced(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(Informer::wait_synced(self))
    }
}

/// The shared watches, created on demand and stopped when unused.
pub struct Informers {
    client: kube::Client,
    pending: Arc<PendingWatches>,
    /// Under `--shard-watch=server`, the selection sharded watches list.
    shards: Option<Arc<WatchShards>>,
    /// By watch key, form (`std::any::type_name` of it) and whether sharded.
    map: Mutex<HashMap<(String, &'static str, bool), AnyInformer>>,
    /// Every watch started, by watch key, for [`Informers::sizes`].
    counted: Mutex<Vec<(String, Weak<dyn Counted>)>>,
    /// Whether watches try the watch-list first.
    watch_list: WatchListMode,
}

/// How many objects a watch holds.
trait Counted: Send + Sync {
    fn len(&self) -> usize;
    fn sharded(&self) -> bool;
    fn streams(&self) -> usize;
}

impl<T: Form> Counted for Shared<T> {
    fn len(&self) -> usize {
        self.read(|s| s.objects.len())
    }
    fn sharded(&self) -> bool {
        self.sharded.load(Ordering::Acquire)
    }
    fn streams(&self) -> usize {
        self.streams.load(Ordering::Acquire)
    }
}

/// How many objects one running watch holds, and over how many streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchSize {
    /// The watch key, `apiVersion/plural`.
    pub resource: String,
    /// Whether the watch lists only this replica's shard buckets (`--shard-watch=server`).
    pub sharded: bool,
    /// Objects held.
    pub objects: usize,
    /// List-and-watch streams run (1 for a whole watch).
    pub streams: usize,
}

/// A running [`Informer`] of some form, not kept alive by the map.
type AnyInformer = Weak<dyn Any + Send + Sync>;

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers").finish_non_exhaustive()
    }
}

impl Informers {
    /// No watches yet; watches that have not listed yet are kept in `pending`.
    pub fn new(client: kube::Client, pending: Arc<PendingWatches>) -> Self {
        Informers {
            client,
            pending,
            shards: None,
            map: Mutex::new(HashMap::new()),
            counted: Mutex::default(),
            watch_list: WatchListMode::default(),
        }
    }

    /// These informers, their watches started after this getting their initial state as
    /// `mode` says (default [`WatchListMode::Auto`]).
    pub fn with_watch_list(self, mode: WatchListMode) -> Self {
        Informers {
            watch_list: mode,
            ..self
        }
    }

    /// The objects each running watch holds (a resource watched in two forms, or both sharded
    /// and whole, adds up under one key and mode).
    pub fn sizes(&self) -> Vec<WatchSize> {
        let mut counted = self.counted.lock().unwrap_or_else(|p| p.into_inner());
        counted.retain(|(_, w)| w.strong_count() > 0);
        let mut sizes: BTreeMap<(String, bool), (usize, usize)> = BTreeMap::new();
        for (key, w) in counted.iter() {
            if let Some(c) = w.upgrade() {
                let size = sizes.entry((key.clone(), c.sharded())).or_default();
                size.0 += c.len();
                size.1 += c.streams();
            }
        }
        sizes
            .into_iter()
            .map(|((resource, sharded), (objects, streams))| WatchSize {
                resource,
                sharded,
                objects,
                streams,
            })
            .collect()
    }

    /// These informers, with the watches asked for by [`Informers::get_split`] listing only
    /// `split`'s selection of namespaces (the share of a replica under server-sharded watches).
    pub fn with_split(self, split: Option<Arc<WatchShards>>) -> Self {
        Informers {
            shards: split,
            ..self
        }
    }

    /// The shared watch of `r` in the form `T`, holding only the objects of the namespaces this
    /// replica's shard buckets cover when server-side sharded watches are on
    /// (`--shard-watch=server`) and `r` is namespaced; else the whole watch ([`Self::get`]).
    /// Callers ask for it only where every object a sync reads lies in its parent's namespace.
    pub fn get_split<T: Form>(&self, r: &Resolved) -> Arc<Informer<T>> {
        match &self.shards {
            Some(s) if r.namespaced => self.get_in(r, Some(s.clone())),
            _ => self.get(r),
        }
    }

    /// [`Self::get_split`] when `splittable` (every object a sync reads from this watch lies in
    /// its parent's namespace), else [`Self::get`].
    pub fn get_or_split<T: Form>(&self, r: &Resolved, splittable: bool) -> Arc<Informer<T>> {
        match splittable {
            true => self.get_split(r),
            false => self.get(r),
        }
    }

    /// The shared watch of `r` in the form `T`, started if not running.
    pub fn get<T: Form>(&self, r: &Resolved) -> Arc<Informer<T>> {
        self.get_in(r, None)
    }

    fn get_in<T: Form>(&self, r: &Resolved, shards: Option<Arc<WatchShards>>) -> Arc<Informer<T>> {
        let key = r.watch_key();
        let mut map = match self.map.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        let map_key = (key.clone(), std::any::type_name::<T>(), shards.is_some());
        if let Some(i) = map
            .get(&map_key)
            .and_then(Weak::upgrade)
            .and_then(|i| i.downcast::<Informer<T>>().ok())
        {
            return i;
        }
        map.retain(|_, w| w.strong_count() > 0);
        let shared = Shared::new(r.clone(), self.pending.clone(), self.watch_list);
        let counted: Weak<dyn Counted> = Arc::downgrade(&shared) as Weak<_>;
        self.counted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((key.clone(), counted));
        let task = match shards {
            Some(s) => {
                s.register(shared.listed_ranges_tx.subscribe());
                tokio::spawn(shared.clone().run_sharded(self.client.clone(), s))
            }
            None => tokio::spawn(shared.clone().run(self.client.clone())),
        };
        let inf = Arc::new(Informer { shared, task });
        let weak: Weak<dyn Any + Send + Sync> = Arc::downgrade(&inf) as Weak<_>;
        map.insert(map_key, weak);
        inf
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The `i`th sixteenth of the hash space.
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
        let cached = cached_value(Watched::from_value(&wire).unwrap(), &r).unwrap();
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
        let cached = cached_value(Watched::from_value(&bare).unwrap(), &r).unwrap();
        assert_eq!(cached["apiVersion"], "v1");
        assert_eq!(cached["kind"], "ConfigMap");
    }

    /// A resource watched in both forms is pending until both have listed (or stopped).
    #[test]
    fn a_watch_in_two_forms_is_pending_until_both_listed() {
        let p = PendingWatches::default();
        p.set("v1/configmaps", true);
        p.set("v1/configmaps", true);
        p.set("v1/secrets", true);
        p.set("v1/configmaps", false);
        assert_eq!(p.list(), ["v1/configmaps", "v1/secrets"]);
        p.set("v1/configmaps", false);
        p.set("v1/configmaps", false); // a stray decrement is no underflow
        assert_eq!(p.list(), ["v1/secrets"]);
    }

    #[test]
    fn compact_children_are_indexed_by_their_controller() {
        let mut s: State<Compact> = State::default();
        let child = |name: &str, owner: Option<&str>| {
            let v = obj(name, owner);
            Arc::new(Compact::from_value((*v).clone()).unwrap())
        };
        s.insert(child("a", None), None);
        s.insert(child("b", Some("u1")), None);
        assert_eq!(s.orphans_in(Some("ns")).len(), 1);
        assert_eq!(s.by_owner["u1"].len(), 1);
        s.insert(child("a", Some("u1")), None);
        assert!(s.orphans.is_empty());
        assert_eq!(s.by_owner["u1"].len(), 2);
    }

    #[test]
    fn kmetas_status_field_is_held_as_text_and_put_back_whole() {
        let whole = json!({"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7"},
            "status": {"children": 10, "kmeta": {"lastSync": {"time": "t", "children": [
                {"kind": "ConfigMap", "name": "p-0", "action": "Created"}]}}}});
        let mut held = whole.clone();
        let text = held.detach().unwrap();
        assert_eq!(held["status"], json!({"children": 10}));
        assert_eq!(
            serde_json::from_str::<Value>(text.get()).unwrap(),
            whole["status"]["kmeta"]
        );
        assert_eq!(held.attach(&text).unwrap(), whole);
        // nothing to take out: no status, or no record in it
        let mut plain = json!({"metadata": {"name": "q"}, "status": {"children": 1}});
        assert!(plain.detach().is_none());
        assert!(json!({"metadata": {"name": "r"}}).detach().is_none());
        // the store keeps the text with its object and drops it with it
        let mut s = State::default();
        s.insert(Arc::new(held), Some(text));
        assert_eq!(s.detached.len(), 1);
        s.insert(Arc::new(plain.take()), None);
        assert_eq!(s.detached.len(), 1);
        s.remove(&ObjKey::new("ns", "p"));
        assert!(s.detached.is_empty());
    }

    #[test]
    fn indexes_follow_ownership_changes() {
        let mut s = State::default();
        s.insert(obj("a", None), None);
        s.insert(obj("b", Some("u1")), None);
        assert!(s.orphans.contains(&ObjKey::new("ns", "a")));
        assert_eq!(s.by_owner["u1"].len(), 1);
        // adoption moves a from orphans to u1
        let old = s.insert(obj("a", Some("u1")), None);
        assert!(old.is_some());
        assert!(s.orphans.is_empty());
        assert_eq!(s.by_owner["u1"].len(), 2);
        // release and delete
        s.insert(obj("a", None), None);
        s.remove(&ObjKey::new("ns", "b"));
        assert!(!s.by_owner.contains_key("u1"));
        assert_eq!(s.orphans.len(), 1);
    }

    /// The label index against a scan of every orphan, in both cached forms, while objects are
    /// created, relabelled, adopted, released and deleted.
    #[test]
    fn orphans_by_label_follow_every_change() {
        fn check<T: Form>(form: impl Fn(Value) -> T) {
            let mut s: State<T> = State::default();
            let mut state = 7u64;
            let mut next = |n: u64| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (state >> 33) % n
            };
            let names = |ks: &[Arc<T>]| {
                let mut v: Vec<String> = ks
                    .iter()
                    .map(|o| format!("{}/{}", o.namespace(), o.name()))
                    .collect();
                v.sort();
                v
            };
            let mut seen = 0;
            for _ in 0..3000 {
                let (ns, name) = (["a", "b"][next(2) as usize], format!("o{}", next(30)));
                if next(8) == 0 {
                    s.remove(&ObjKey::new(ns.to_owned(), name.clone()));
                } else {
                    let mut v = json!({"metadata": {"name": name, "namespace": ns, "labels": {}}});
                    for k in ["app", "tier"] {
                        if next(3) > 0 {
                            v["metadata"]["labels"][k] = json!(format!("v{}", next(3)));
                        }
                    }
                    if next(3) == 0 {
                        v["metadata"]["ownerReferences"] =
                            json!([{"uid": "u", "controller": true}]);
                    }
                    s.insert(Arc::new(form(v)), None);
                }
                assert!(T::ORPHANS_BY_LABEL || s.orphans_by_label.is_empty());
                for ns in [Some("a"), Some("b"), None] {
                    for (k, val) in [("app", "v0"), ("tier", "v2"), ("app", "none")] {
                        let scan: Vec<Arc<T>> = s
                            .orphans_in(ns)
                            .into_iter()
                            .filter(|o| o.label(k) == Some(val))
                            .collect();
                        seen += scan.len();
                        assert_eq!(names(&s.orphans_labelled(ns, k, val)), names(&scan));
                    }
                }
            }
            assert!(seen > 3000, "only {seen} labelled orphans seen");
            // emptied entries are dropped: after removing everything, nothing is left
            let keys: Vec<Arc<ObjKey>> = s.objects.keys().cloned().collect();
            for k in keys {
                s.remove(&k);
            }
            assert!(s.orphans.is_empty() && s.orphans_by_label.is_empty());
        }
        // the decoded form (parents, related objects) scans instead of indexing
        check(|v| v);
        check(|v| Compact::from_value(v).unwrap());
    }

    #[test]
    fn orphans_are_listed_per_namespace() {
        let mut s = State::default();
        let in_ns = |ns: &str, name: &str| json!({"metadata": {"namespace": ns, "name": name, "uid": format!("{ns}-{name}")}});
        for (ns, name) in [("a", "x"), ("ab", "y"), ("b", "z"), ("a", "w")] {
            s.insert(Arc::new(in_ns(ns, name)), None);
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
