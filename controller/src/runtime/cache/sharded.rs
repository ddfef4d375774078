//! The sharded stream groups of a watch split by namespace hash (`--shard-watch=server`,
//! KEP-5866): the ranges selected together are listed and watched in one stream, a range no
//! longer selected is dropped from the store, and once the selection holds still the streams are
//! merged into one. The store itself is the parent module's.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use kube::api::{Api, DynamicObject};
use serde_json::Value;

use super::paced::{PACE_CHUNK, Pace};
use super::{Change, Form, Held, ObjKey, Shared};
use crate::runtime::shard_watch::{
    HashRange, Selection, WatchShards, echoes_selector, fnv1a64, range_selector, with_query,
};
use crate::runtime::watched::Watched;

/// Whether namespace `ns` hashes into one of `ranges`.
fn in_ranges(ranges: &BTreeSet<HashRange>, ns: &str) -> bool {
    let h = fnv1a64(ns.as_bytes());
    ranges.iter().any(|r| r.contains(h))
}

/// One stream of a sharded watch: the ranges its `shardSelector` names, those still selected
/// (`live`; the others' events and listed objects are ignored), and whether it was retired (its
/// events no longer applied). `live` and `retired` change under the write lock, and an event is
/// applied under the read lock, so none lands after a change that excludes it.
#[derive(Debug)]
pub(super) struct Group {
    ranges: Vec<HashRange>,
    state: RwLock<GroupState>,
    /// The stream has listed once: its next list is a relist of the watch (410 Gone).
    listed: AtomicBool,
}

#[derive(Debug)]
pub(super) struct GroupState {
    live: BTreeSet<HashRange>,
    retired: bool,
}

impl Group {
    pub(super) fn new(ranges: Vec<HashRange>) -> Arc<Group> {
        Arc::new(Group {
            state: RwLock::new(GroupState {
                live: ranges.iter().copied().collect(),
                retired: false,
            }),
            ranges,
            listed: AtomicBool::new(false),
        })
    }

    /// Whether this stream listed before (and from now on, that it did).
    pub(super) fn listed_before(&self) -> bool {
        self.listed.swap(true, Ordering::AcqRel)
    }

    /// `shardRange(…) || shardRange(…)`: every range of the stream.
    pub(super) fn selector(&self) -> String {
        let terms: Vec<String> = self.ranges.iter().map(|r| range_selector(*r)).collect();
        terms.join(" || ")
    }

    pub(super) fn read(&self) -> std::sync::RwLockReadGuard<'_, GroupState> {
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn write(&self) -> std::sync::RwLockWriteGuard<'_, GroupState> {
        self.state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// When `o` lies in a live range of a stream not retired: the read lock, to hold while its
    /// event is applied.
    pub(super) fn admit(&self, o: &Watched) -> Option<std::sync::RwLockReadGuard<'_, GroupState>> {
        let st = self.read();
        let ns = o.metadata.namespace.as_deref().unwrap_or("");
        (!st.retired && in_ranges(&st.live, ns)).then_some(st)
    }

    /// Runs `f` on the live ranges unless the stream was retired.
    pub(super) fn while_current(&self, f: impl FnOnce(&BTreeSet<HashRange>)) {
        let st = self.read();
        if !st.retired && !st.live.is_empty() {
            f(&st.live);
        }
    }

    pub(super) fn live(&self) -> BTreeSet<HashRange> {
        self.read().live.clone()
    }

    /// Keeps only the live ranges in `selected`; returns those it dropped.
    pub(super) fn keep_selected(&self, selected: &[HashRange]) -> Vec<HashRange> {
        let mut st = self.write();
        let dropped: Vec<HashRange> = st
            .live
            .iter()
            .filter(|r| !selected.contains(r))
            .copied()
            .collect();
        for r in &dropped {
            st.live.remove(r);
        }
        dropped
    }

    pub(super) fn retire(&self) {
        self.write().retired = true;
    }
}

/// The streams of one sharded watch, and their tasks.
#[derive(Default)]
pub(super) struct Streams {
    running: Vec<(Arc<Group>, tokio::task::AbortHandle)>,
    tasks: tokio::task::JoinSet<()>,
}

impl Streams {
    /// Follows `selected`: drops the ranges no longer in it from every stream (returned, each
    /// once, for their objects to be dropped) and stops streams left with none.
    pub(super) fn follow(&mut self, selected: &[HashRange]) -> Vec<HashRange> {
        let mut dropped = Vec::new();
        self.running.retain(|(g, task)| {
            dropped.extend(g.keep_selected(selected));
            let keep = !g.live().is_empty();
            if !keep {
                g.retire();
                task.abort();
            }
            keep
        });
        while self.tasks.try_join_next().is_some() {}
        dropped.sort();
        dropped.dedup();
        dropped
    }

    /// The ranges of `selected` no stream lists, when there are any.
    pub(super) fn unstreamed(&self, selected: &[HashRange]) -> Option<Vec<HashRange>> {
        let streamed: BTreeSet<HashRange> =
            self.running.iter().flat_map(|(g, _)| g.live()).collect();
        let new: Vec<HashRange> = selected
            .iter()
            .filter(|r| !streamed.contains(r))
            .copied()
            .collect();
        (!new.is_empty()).then_some(new)
    }

    /// Whether merging would save streams: more than one, or one carrying dropped ranges.
    pub(super) fn scattered(&self) -> bool {
        match self.running.as_slice() {
            [] => false,
            [(g, _)] => g.live().len() < g.ranges.len(),
            _ => true,
        }
    }

    pub(super) fn spawn<T: Form>(
        &mut self,
        shared: Arc<Shared<T>>,
        client: &kube::Client,
        ranges: Vec<HashRange>,
    ) {
        let group = Group::new(ranges);
        let task = shared.watch_group(client.clone(), group.clone());
        let handle = self.tasks.spawn(task);
        self.running.push((group, handle));
    }

    /// Retires and stops every stream (a merged one replaces them).
    pub(super) fn retire_all(&mut self) {
        for (g, task) in self.running.drain(..) {
            g.retire();
            task.abort();
        }
        while self.tasks.try_join_next().is_some() {}
    }
}

impl<T: Form> Shared<T> {
    /// Watches a sharded resource until aborted, all its streams feeding this store. Ranges
    /// selected together (a shard bucket each) are listed and watched in one stream whose
    /// `shardSelector` names them all; a range no longer selected has its objects dropped (and
    /// its stream's later events for it ignored; a stream left with none is stopped); the other
    /// streams go on untouched. Once every selected range has listed and the selection has then
    /// held still for [`WatchShards::settle`], several streams (or one carrying dropped ranges)
    /// are replaced by one stream over every selected range: one relist of this replica's share,
    /// then one stream per resource instead of one per bucket gained. Each range listed is
    /// announced ([`WatchShards::wait_listed`]).
    /// When the server does not apply the selector (no echo on a probe list, or a refusal) the
    /// resource is watched whole, as [`Self::run`] does.
    pub(super) async fn run_sharded(
        self: Arc<Self>,
        client: kube::Client,
        shards: Arc<WatchShards>,
    ) {
        let mut selection = shards.subscribe();
        let mut probed = false;
        let mut streams = Streams::default();
        loop {
            let s: Selection = selection.borrow_and_update().clone();
            if let (false, Some(first)) = (probed, s.ranges.first()) {
                if let Err(why) = self.probe(&client, &range_selector(*first)).await {
                    tracing::warn!(resource = %self.resource.watch_key(), reason = %why, "the API server does not shard this watch (KEP-5866 shardSelector); watching it whole, the work queue still drops other buckets' parents");
                    shards.note_whole(self.resource.watch_key());
                    streams.tasks.abort_all();
                    return self.run_whole_for_shards(client).await;
                }
                probed = true;
                self.sharded.store(true, Ordering::Release);
            }
            *self.selected() = s.clone();
            for r in streams.follow(&s.ranges) {
                self.drop_range(r).await;
            }
            if let Some(new) = streams.unstreamed(&s.ranges) {
                streams.spawn(self.clone(), &client, new);
            }
            self.streams.store(streams.running.len(), Ordering::Release);
            self.note_listed(None);
            // until the selection changes; once it has held still and every range has listed,
            // one stream for all of it
            loop {
                let settle = async {
                    match streams.scattered() {
                        true => {
                            self.wait_all_listed(&s.ranges).await;
                            tokio::time::sleep(shards.settle()).await;
                        }
                        false => std::future::pending().await,
                    }
                };
                tokio::select! {
                    changed = selection.changed() => match changed {
                        Ok(()) => break,
                        Err(_) => return,
                    },
                    () = settle => {
                        streams.retire_all();
                        streams.spawn(self.clone(), &client, s.ranges.clone());
                        self.streams.store(streams.running.len(), Ordering::Release);
                    }
                }
            }
        }
    }

    /// Returns once every range of `ranges` has listed. The streams are merged only then: a
    /// merge retires a stream still listing a gained bucket's range and lists the replica's
    /// whole share instead, which the bucket's work then waits for (at 30 000 × 10, 9.5–12 s
    /// instead of 2–3 s when a survivor's list outlasted the bench's 2.5 s settle).
    async fn wait_all_listed(&self, ranges: &[HashRange]) {
        let mut listed = self.listed_ranges_tx.subscribe();
        let _ = listed
            .wait_for(|l| l.whole || ranges.iter().all(|r| l.ranges.contains(r)))
            .await;
    }

    pub(super) fn selected(&self) -> std::sync::MutexGuard<'_, Selection> {
        self.selection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Lists and watches one stream's ranges until aborted (listing again only when its watch
    /// expires, 410 Gone).
    pub(super) async fn watch_group(self: Arc<Self>, client: kube::Client, group: Arc<Group>) {
        let client = with_query(&client, "shardSelector", &group.selector());
        while self.clone().stream_once(&client, Some(group.clone())).await {}
    }

    /// Drops every object of `range` (no longer selected) from the store, then announces each
    /// as deleted, paced ([`Self::announce_paced`]).
    pub(super) async fn drop_range(&self, range: HashRange) {
        self.listed_ranges().remove(&range);
        self.listed_ranges_tx
            .send_if_modified(|l| l.ranges.remove(&range));
        let gone: Vec<Arc<ObjKey>> = self.read(|s| {
            s.objects
                .keys()
                .filter(|k| range.contains(fnv1a64(k.namespace.as_bytes())))
                .cloned()
                .collect()
        });
        let removed: Vec<Change<T>> = gone
            .iter()
            .filter_map(|k| self.write(|s| s.remove(k)))
            .map(Change::Deleted)
            .collect();
        self.announce_paced(removed).await;
    }

    /// After a stream's (re)list: replaces the objects of its live ranges by those of `objs`
    /// in them, and announces each range listed (requested at `requested`), at once, as before;
    /// then, once the watch has listed everything once (a gain, a relist), announces what
    /// changed, paced to the subscribers ([`Pace`]), before the stream's next event; before
    /// that (the replica's start), at once and before the ranges are noted listed, as before.
    /// Only the stream's own second list (its watch expired, 410 Gone) is a relist of the watch,
    /// which resyncs every parent as Metacontroller's informer does. Its first list is not: of a
    /// bucket gained, which the gain announces; or of ranges other streams listed before (the
    /// streams merged into one once the selection settled, kmeta's own relist, which
    /// Metacontroller never makes), whose objects differing from the store are announced as any
    /// change is, and which resynced every parent of the replica at each membership change when
    /// counted as a relist.
    ///
    /// The announcement runs as a task of its own, awaited: a stream retired meanwhile (its
    /// task aborted, its ranges listed again by the stream replacing it, which announces only
    /// what differs) does not cut it short. A change whose object was replaced or removed since
    /// is not announced ([`Shared::announce_if_current`]): the newer change announces itself.
    pub(super) async fn replace_group(
        self: &Arc<Self>,
        group: &Group,
        objs: Vec<Held<T>>,
        requested: std::time::Instant,
    ) {
        // before the watch's first complete list the changes go out at once, before the ranges
        // are noted listed: the controllers' start counts what waits in their receivers when the
        // watch is synced as the start's ([`crate::reconcile::start`])
        let starting = !*self.synced.borrow();
        let mut changes = Vec::new();
        group.while_current(|live| {
            let mut objs = objs;
            objs.retain(|o| in_ranges(live, o.obj.namespace()));
            let again = group.listed_before();
            self.store_where(
                objs,
                |k| in_ranges(live, &k.namespace),
                |c| match starting {
                    true => {
                        let _ = self.tx.send(c);
                    }
                    false => changes.push(c),
                },
            );
            if again {
                self.lists.send_modify(|n| *n += 1);
            }
            for r in live {
                self.note_listed(Some((*r, requested)));
            }
        });
        if changes.is_empty() {
            return;
        }
        let shared = self.clone();
        let _ = tokio::spawn(async move { shared.announce_paced(changes).await }).await;
    }

    /// Announces `changes` in order, a chunk at a time, paced to the subscribers.
    async fn announce_paced(&self, changes: Vec<Change<T>>) {
        let what = self.resource.watch_key();
        let mut pace = Pace::default();
        let mut changes = changes.into_iter().peekable();
        while changes.peek().is_some() {
            for c in changes.by_ref().take(PACE_CHUNK) {
                self.announce_if_current(c);
            }
            pace.room(&self.tx, &what).await;
        }
    }

    pub(super) fn listed_ranges(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<HashRange, std::time::Instant>> {
        self.range_lists
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records that `listed` (a range, with when its list was requested) has listed, and
    /// announces it; once every selected range has, the watch is synced and
    /// [`Informer::listed_from`] is the oldest of the ranges' last lists.
    pub(super) fn note_listed(&self, listed: Option<(HashRange, std::time::Instant)>) {
        let sel = self.selected().clone();
        let mut ranges = self.listed_ranges();
        if let Some((r, at)) = listed {
            ranges.insert(r, at);
            self.listed_ranges_tx
                .send_if_modified(|l| l.ranges.insert(r));
        }
        let mut oldest: Option<std::time::Instant> = None;
        for r in &sel.ranges {
            let Some(at) = ranges.get(r) else { return };
            oldest = Some(oldest.map_or(*at, |o| o.min(*at)));
        }
        drop(ranges);
        self.list_times().last_completed = oldest;
        if !*self.synced.borrow() {
            // the first complete list (what [`Informer::lists`] counts as 1)
            self.lists.send_modify(|n| *n += 1);
        }
        self.synced.send_replace(true);
        self.listed();
    }

    /// A sharded resource the server does not shard, watched whole: every range counts as
    /// listed once its first whole list is done.
    pub(super) async fn run_whole_for_shards(self: Arc<Self>, client: kube::Client) {
        let mut lists = self.lists.subscribe();
        let start = *lists.borrow_and_update();
        let listed = async {
            let _ = lists.wait_for(|n| *n > start).await;
            self.listed_ranges_tx.send_modify(|l| l.whole = true);
            std::future::pending::<()>().await
        };
        tokio::join!(self.clone().run(client), listed);
    }

    /// Whether the server applies `selector` to this resource: one list of at most one object
    /// must echo it (`metadata.shardInfo.selector`). `Err` says why not; transient failures are
    /// retried here with backoff (1 s doubling to 30 s).
    pub(super) async fn probe(
        &self,
        client: &kube::Client,
        selector: &str,
    ) -> Result<(), NotSharded> {
        let mut backoff = Duration::from_secs(1);
        loop {
            let api: Api<DynamicObject> = Api::all_with(
                with_query(client, "shardSelector", selector),
                &self.resource.api,
            );
            let req = kube::core::Request::new(api.resource_url())
                .list(&kube::api::ListParams::default().limit(1))
                .map_err(NotSharded::Request)?;
            match api.into_client().request::<Value>(req).await {
                Ok(list) if echoes_selector(&list) => return Ok(()),
                Ok(_) => return Err(NotSharded::NoEcho),
                Err(kube::Error::Api(s))
                    if matches!(s.code, 400 | 422) || s.message.contains("shard selector") =>
                {
                    return Err(NotSharded::Refused(s.message.clone()));
                }
                Err(e) => {
                    tracing::warn!(resource = %self.resource.watch_key(), error = %e, "probing server-side sharded watches failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
    }
}

/// Why the API server does not shard a watch (KEP-5866 `shardSelector`): it is watched whole.
#[derive(Debug, thiserror::Error)]
pub(super) enum NotSharded {
    /// The probe list could not be built.
    #[error("the probe list could not be built: {0}")]
    Request(kube::core::request::Error),
    /// The list answer carries no `metadata.shardInfo`.
    #[error("its list answer echoes no metadata.shardInfo")]
    NoEcho,
    /// The server refused the selector.
    #[error("it refused the selector: {0}")]
    Refused(String),
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokio::sync::broadcast;

    fn sixteenth(i: u64) -> HashRange {
        HashRange {
            start: i << 60,
            end: u128::from(i + 1) << 60,
        }
    }

    fn in_namespace(ns: &str) -> Watched {
        Watched::from_value(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": ns}}))
        .unwrap()
    }

    /// A namespace whose hash lies in `r`.
    fn namespace_in(r: HashRange) -> String {
        (0..)
            .map(|i| format!("ns-{i}"))
            .find(|n| r.contains(fnv1a64(n.as_bytes())))
            .unwrap()
    }

    #[test]
    fn a_stream_names_all_its_ranges_and_admits_only_live_ones_until_retired() {
        let (a, b) = (sixteenth(1), sixteenth(2));
        let g = Group::new(vec![a, b]);
        assert_eq!(
            g.selector(),
            format!("{} || {}", range_selector(a), range_selector(b))
        );
        let (in_a, in_b) = (
            in_namespace(&namespace_in(a)),
            in_namespace(&namespace_in(b)),
        );
        let elsewhere = in_namespace(&namespace_in(sixteenth(9)));
        assert!(g.admit(&in_a).is_some() && g.admit(&in_b).is_some());
        assert!(g.admit(&elsewhere).is_none());
        // b no longer selected: its events are ignored, a's still applied
        assert_eq!(g.keep_selected(&[a]), vec![b]);
        assert!(g.admit(&in_b).is_none() && g.admit(&in_a).is_some());
        let mut listed = None;
        g.while_current(|live| listed = Some(live.clone()));
        assert_eq!(listed, Some(BTreeSet::from([a])));
        // retired: nothing more is applied, and its list replaces nothing
        g.retire();
        assert!(g.admit(&in_a).is_none());
        let mut after = false;
        g.while_current(|_| after = true);
        assert!(!after);
    }

    #[tokio::test]
    async fn streams_follow_the_selection_and_are_worth_merging_once_scattered() {
        let r = sixteenth;
        let mut st = Streams::default();
        let push = |st: &mut Streams, ranges: Vec<HashRange>| {
            let handle = st.tasks.spawn(std::future::pending());
            st.running.push((Group::new(ranges), handle));
        };
        assert!(!st.scattered());
        assert_eq!(st.unstreamed(&[r(1), r(2)]), Some(vec![r(1), r(2)]));
        // ranges gained together share one stream: nothing to merge
        push(&mut st, vec![r(1), r(2)]);
        assert!(!st.scattered());
        assert_eq!(st.unstreamed(&[r(1), r(2)]), None);
        // a range gained later gets its own stream: two streams are worth merging
        assert_eq!(st.unstreamed(&[r(1), r(2), r(3)]), Some(vec![r(3)]));
        push(&mut st, vec![r(3)]);
        assert!(st.scattered());
        // a range lost leaves its stream, which goes on for the others
        assert_eq!(st.follow(&[r(1), r(3)]), vec![r(2)]);
        assert_eq!(st.running.len(), 2);
        // a stream left with no range stops
        let stopped = st.running[1].0.clone();
        assert_eq!(st.follow(&[r(1)]), vec![r(3)]);
        assert_eq!(st.running.len(), 1);
        assert!(stopped.admit(&in_namespace(&namespace_in(r(3)))).is_none());
        // one stream still carrying a dropped range is worth replacing
        assert!(st.scattered());
        // a range lost and selected again is streamed anew
        assert_eq!(st.unstreamed(&[r(1), r(2)]), Some(vec![r(2)]));
        let merged_away: Vec<Arc<Group>> = st.running.iter().map(|(g, _)| g.clone()).collect();
        st.retire_all();
        assert!(st.running.is_empty() && !st.scattered());
        assert!(
            merged_away
                .iter()
                .all(|g| g.admit(&in_namespace(&namespace_in(r(1)))).is_none())
        );
    }

    fn configmaps() -> crate::runtime::resources::Resolved {
        crate::runtime::resources::Resolved {
            api: kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            namespaced: true,
            has_status: false,
        }
    }

    /// A store of ConfigMaps whose watch selects only `range`.
    fn store_selecting(range: HashRange) -> Arc<Shared<Value>> {
        let shared = Shared::new(
            configmaps(),
            Arc::default(),
            super::super::WatchListMode::default(),
        );
        *shared.selected() = Selection {
            ranges: vec![range],
        };
        shared
    }

    /// ConfigMap `name` in `ns` at resourceVersion `rv`, as a list brings it.
    fn listed(shared: &Shared<Value>, ns: &str, name: &str, rv: &str) -> Held<Value> {
        let o = Watched::from_value(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": rv}}))
        .unwrap();
        Held::of(o, &shared.resource).unwrap()
    }

    /// Takes `want` changes (a 30 s deadline): how many were applied and deleted, and whether
    /// it fell behind.
    async fn take_changes(
        mut rx: broadcast::Receiver<Change<Value>>,
        want: usize,
    ) -> (usize, usize, bool) {
        let (mut applied, mut deleted) = (0, 0);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while applied + deleted < want {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Ok(Change::Applied { .. })) => applied += 1,
                Ok(Ok(Change::Deleted(_))) => deleted += 1,
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => return (applied, deleted, true),
                Ok(Err(broadcast::error::RecvError::Closed)) | Err(_) => break,
            }
        }
        (applied, deleted, false)
    }

    /// On a current-thread runtime the subscriber runs only while the store waits: sent in one
    /// go, a range's 12 288 objects would overflow the 4 096 changes the broadcast holds.
    /// Announced from the stream's own task, they would stop with it.
    #[tokio::test]
    async fn a_ranges_first_list_and_its_drop_reach_a_subscriber_whole() {
        let range = sixteenth(5);
        let shared = store_selecting(range);
        let ns = namespace_in(range);
        let n = 3 * super::super::CHANGE_BUFFER;
        let objs: Vec<Held<Value>> = (0..n)
            .map(|i| listed(&shared, &ns, &format!("c-{i}"), "1"))
            .collect();
        let group = Group::new(vec![range]);
        // past its start (a bucket gained later): before it, changes go out unpaced
        shared.synced.send_replace(true);
        let taker = tokio::spawn(take_changes(shared.tx.subscribe(), n));
        let lister = tokio::spawn({
            let shared = shared.clone();
            async move {
                shared
                    .replace_group(&group, objs, std::time::Instant::now())
                    .await;
            }
        });
        // the range is in the store and listed before its changes are all announced; the
        // stream retired then (its task aborted) still announces every one
        let listed = || shared.listed_ranges().contains_key(&range);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !listed() && tokio::time::Instant::now() < deadline {
            tokio::task::yield_now().await;
        }
        assert!(listed(), "the range listed");
        assert_eq!(shared.read(|s| s.objects.len()), n);
        lister.abort();
        assert_eq!(taker.await.unwrap(), (n, 0, false), "first list");
        let taker = tokio::spawn(take_changes(shared.tx.subscribe(), n));
        shared.drop_range(range).await;
        assert_eq!(taker.await.unwrap(), (0, n, false), "range dropped");
        assert_eq!(shared.read(|s| s.objects.len()), 0);
    }

    /// A stream merging ranges other streams listed is no relist (no resync of every parent);
    /// the same stream listing again (its watch expired) is.
    #[tokio::test]
    async fn only_a_streams_own_second_list_is_a_relist() {
        let range = sixteenth(9);
        let shared = store_selecting(range);
        let ns = namespace_in(range);
        let list = |rv: &str| vec![listed(&shared, &ns, "c", rv)];
        let lists = || *shared.lists.borrow();
        let now = std::time::Instant::now();
        let gained = Group::new(vec![range]);
        shared.replace_group(&gained, list("1"), now).await;
        assert_eq!(lists(), 1, "the first complete list");
        gained.retire();
        let merged = Group::new(vec![range]);
        let mut rx = shared.tx.subscribe();
        shared.replace_group(&merged, list("2"), now).await;
        assert_eq!(lists(), 1, "a merge is no relist");
        assert!(
            matches!(rx.try_recv(), Ok(Change::Applied { old: Some(_), .. })),
            "what differs is announced as a change"
        );
        shared.replace_group(&merged, list("2"), now).await;
        assert_eq!(lists(), 2, "the stream's own second list is a relist");
    }
}
