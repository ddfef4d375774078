//! Server-side sharded watches (KEP-5866 `shardSelector`): the namespace-hash ranges a sharded
//! replica's watches list, and the wait until every such watch has listed them.
//!
//! A [`WatchShards`] holds the [`Selection`]: the ranges of 64-bit FNV-1a over
//! `metadata.namespace` (one per shard bucket held) that this replica's sharded watches ask the
//! API server for; a change is announced to every sharded watch. Each sharded watch
//! ([`crate::runtime::cache::Informers`]) lists and watches each range on its own, so a bucket
//! gained is one range listed and a bucket lost one range dropped, the others untouched; it
//! reports the ranges it has listed ([`Listed`]), and [`WatchShards::wait_listed`] resolves once
//! every sharded watch has listed a range, which is when a newly gained bucket's work may start
//! (its objects are then in the caches). Each range on its own: a bucket gained while others are
//! still being listed does not wait for them.
//!
//! Support is probed, never assumed: a server without the feature ignores the parameter and
//! answers everything, one that applied it echoes it in the list's `metadata.shardInfo.selector`.
//! A watch whose probe sees no echo (or a refusal) watches its resource whole, as without
//! sharded watches: the work queue drops other buckets' keys either way, so this costs memory,
//! never correctness.

use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

/// 64-bit FNV-1a of `bytes` (offset basis 0xcbf29ce484222325, prime 0x100000001b3), the hash
/// KEP-5866 computes for `shardRange`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A `[start, end)` range of the 64-bit hash; `end` is at most 2^64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HashRange {
    /// First hash in the range.
    pub start: u64,
    /// One past the last hash (2^64: the end of the space).
    pub end: u128,
}

impl HashRange {
    /// Whether `h` lies in the range.
    pub fn contains(&self, h: u64) -> bool {
        h >= self.start && u128::from(h) < self.end
    }
}

/// The `shardSelector` parameter of one range: `shardRange(object.metadata.namespace, …)`,
/// bounds as KEP-5866 writes them (`0x` and 16 hex digits, 2^64 as `0x10000000000000000`).
pub fn range_selector(r: HashRange) -> String {
    format!(
        "shardRange(object.metadata.namespace, '0x{:016x}', '0x{:016x}')",
        r.start, r.end
    )
}

/// What a sharded watch has listed: each selected range once its first list completed, or
/// everything (`whole`: the server does not shard it, and its whole list completed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listed {
    /// Watched whole and listed: every range counts as listed.
    pub whole: bool,
    /// The ranges listed.
    pub ranges: std::collections::BTreeSet<HashRange>,
}

/// The ranges this replica's sharded watches list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// Sorted, each once; empty: nothing (the watches hold no object).
    pub ranges: Vec<HashRange>,
}

/// Whether a list answer shows the server applied a `shardSelector`: its
/// `metadata.shardInfo.selector` is set (KEP-5866; a server without the feature sends none).
pub fn echoes_selector(list: &Value) -> bool {
    list.pointer("/metadata/shardInfo/selector")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
}

/// The selection of a sharded replica's watches, and what each has listed. Shared by the bucket
/// Lease loop (which selects) and the watches (which list).
#[derive(Debug)]
pub struct WatchShards {
    selection: watch::Sender<Selection>,
    /// What each sharded watch has listed (closed when the watch stops).
    listed: Mutex<Vec<watch::Receiver<Listed>>>,
    /// Resources watched whole because the server did not apply the selector.
    whole: Mutex<Vec<String>>,
    /// How long the selection must hold still before a watch's streams are merged into one
    /// ([`WatchShards::settle`]).
    settle: Duration,
}

/// How many bucket Lease retry periods a sharded watch's selection must hold still before its
/// streams are merged into one (kmeta's choice: a scale-up or failover hands buckets over one
/// per retry period, and this waits for the hand-overs to end; a merge relists the replica's
/// share): five, 10 s at `kmeta run`'s default `--shard-retry-period` of 2 s.
pub const SETTLE_RETRY_PERIODS: u32 = 5;

impl Default for WatchShards {
    /// A selection settled after [`SETTLE_RETRY_PERIODS`] default retry periods (10 s).
    fn default() -> Self {
        WatchShards::settling_after(Duration::from_secs(2) * SETTLE_RETRY_PERIODS)
    }
}

impl WatchShards {
    /// No selection yet; streams merged once a selection has held still for `settle`.
    pub fn settling_after(settle: Duration) -> Self {
        WatchShards {
            selection: watch::channel(Selection::default()).0,
            listed: Mutex::default(),
            whole: Mutex::default(),
            settle,
        }
    }

    /// How long the selection must hold still before a sharded watch's streams (one per
    /// bucket gained apart) are merged into one stream over every selected range.
    pub fn settle(&self) -> Duration {
        self.settle
    }

    /// The current selection.
    #[cfg(test)]
    pub(crate) fn selection(&self) -> Selection {
        self.selection.borrow().clone()
    }

    /// Selects `ranges`; returns whether they differ from the current ones (only then are the
    /// sharded watches told).
    pub fn select(&self, mut ranges: Vec<HashRange>) -> bool {
        ranges.sort();
        ranges.dedup();
        self.selection.send_if_modified(|s| {
            let changed = s.ranges != ranges;
            s.ranges = ranges;
            changed
        })
    }

    /// A receiver of selection changes, for a sharded watch.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Selection> {
        self.selection.subscribe()
    }

    /// Counts a sharded watch: `listed` carries what it has listed.
    pub(crate) fn register(&self, listed: watch::Receiver<Listed>) {
        let mut all = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|rx| rx.has_changed().is_ok());
        all.push(listed);
    }

    /// Notes that `resource` is watched whole (the server ignored or refused the selector).
    pub(crate) fn note_whole(&self, resource: String) {
        let mut whole = self.whole.lock().unwrap_or_else(|p| p.into_inner());
        if !whole.contains(&resource) {
            whole.push(resource);
        }
    }

    /// The resources watched whole although sharded watches were asked for, sorted.
    pub fn whole(&self) -> Vec<String> {
        let mut w = self.whole.lock().unwrap_or_else(|p| p.into_inner()).clone();
        w.sort();
        w
    }

    /// Resolves `true` once every sharded watch has listed `range` (a stopped watch counts as
    /// done), `false` as soon as `range` is no longer selected.
    pub async fn wait_listed(&self, range: HashRange) -> bool {
        let receivers: Vec<watch::Receiver<Listed>> = self
            .listed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut selection = self.selection.subscribe();
        for mut rx in receivers {
            loop {
                if !selection.borrow_and_update().ranges.contains(&range) {
                    return false;
                }
                tokio::select! {
                    _ = rx.wait_for(|l| l.whole || l.ranges.contains(&range)) => break,
                    changed = selection.changed() => if changed.is_err() { return false },
                }
            }
        }
        true
    }
}

/// `client`, but every request it sends carries the query parameter `name`=`value` (percent
/// encoded): how a `kube::runtime::watcher`, whose config has no `shardSelector`, lists and
/// watches a shard of its resource.
pub(crate) fn with_query(client: &kube::Client, name: &'static str, value: &str) -> kube::Client {
    let pair = format!(
        "{name}={}",
        percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC)
    );
    let base = client.clone();
    let service = tower::ServiceBuilder::new()
        .map_request(move |req: http::Request<kube::client::Body>| add_query(req, &pair))
        .service(tower::service_fn(move |req| {
            let base = base.clone();
            async move { base.send(req).await }
        }));
    kube::Client::new(service, client.default_namespace())
}

/// `req` with `pair` appended to its query.
fn add_query<B>(mut req: http::Request<B>, pair: &str) -> http::Request<B> {
    let uri = req.uri();
    let path_and_query = match uri.query() {
        Some(q) if !q.is_empty() => format!("{}?{q}&{pair}", uri.path()),
        _ => format!("{}?{pair}", uri.path()),
    };
    let mut parts = uri.clone().into_parts();
    match path_and_query.parse() {
        Ok(pq) => parts.path_and_query = Some(pq),
        Err(e) => {
            tracing::warn!(error = %e, "could not add a query parameter; request sent without it");
            return req;
        }
    }
    if let Ok(u) = http::Uri::from_parts(parts) {
        *req.uri_mut() = u;
    }
    req
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r(start: u64, end: u128) -> HashRange {
        HashRange { start, end }
    }

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_selector_is_written_as_kep_5866_writes_it() {
        assert_eq!(
            range_selector(r(0, 1 << 61)),
            "shardRange(object.metadata.namespace, '0x0000000000000000', '0x2000000000000000')"
        );
        assert_eq!(
            range_selector(r(7 << 61, 1 << 64)),
            "shardRange(object.metadata.namespace, '0xe000000000000000', '0x10000000000000000')"
        );
        let last = r(7 << 61, 1 << 64);
        assert!(last.contains(u64::MAX) && last.contains(7 << 61) && !last.contains((7 << 61) - 1));
    }

    #[test]
    fn selecting_the_same_ranges_is_no_change() {
        let w = WatchShards::default();
        assert!(w.select(vec![r(1 << 62, 1 << 63), r(0, 1 << 62)]));
        assert!(!w.select(vec![r(0, 1 << 62), r(1 << 62, 1 << 63), r(0, 1 << 62)]));
        assert_eq!(
            w.selection().ranges,
            vec![r(0, 1 << 62), r(1 << 62, 1 << 63)]
        );
        assert!(w.select(vec![]));
        assert_eq!(w.selection().ranges, vec![]);
    }

    #[tokio::test]
    async fn waiting_ends_when_every_watch_has_listed_the_range() {
        let w = std::sync::Arc::new(WatchShards::default());
        let (a, rx_a) = watch::channel(Listed::default());
        let (b, rx_b) = watch::channel(Listed::default());
        let (c, rx_c) = watch::channel(Listed::default());
        w.register(rx_a);
        w.register(rx_b);
        w.register(rx_c);
        let (mine, other) = (r(0, 1 << 63), r(1 << 63, 1 << 64));
        w.select(vec![mine, other]);
        let waiter = tokio::spawn({
            let w = w.clone();
            async move { w.wait_listed(mine).await }
        });
        // another range listed is not this one
        a.send_modify(|l| {
            l.ranges.insert(other);
        });
        a.send_modify(|l| {
            l.ranges.insert(mine);
        });
        c.send_modify(|l| l.whole = true); // watched whole and listed: every range
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(b); // a stopped watch does not hold the wait
        let listed = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert!(listed);
        // a range dropped from the selection ends its wait
        let (_d, rx_d) = watch::channel(Listed::default());
        w.register(rx_d);
        let waiter = tokio::spawn({
            let w = w.clone();
            async move { w.wait_listed(other).await }
        });
        w.select(vec![mine]);
        let listed = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert!(!listed);
    }

    #[test]
    fn the_echo_is_what_shows_support() {
        assert!(echoes_selector(
            &json!({"metadata": {"shardInfo": {"selector": "shardRange(object.metadata.namespace, '0x0000000000000000', '0x10000000000000000')"}}})
        ));
        assert!(!echoes_selector(
            &json!({"metadata": {"resourceVersion": "5"}})
        ));
        assert!(!echoes_selector(
            &json!({"metadata": {"shardInfo": {"selector": ""}}})
        ));
    }

    #[test]
    fn the_parameter_is_appended_to_any_query() {
        let req = |u: &str| http::Request::get(u).body(()).unwrap();
        let got = add_query(
            req("/api/v1/configmaps?watch=true&resourceVersion=5"),
            "a=b%20c",
        );
        assert_eq!(
            got.uri().to_string(),
            "/api/v1/configmaps?watch=true&resourceVersion=5&a=b%20c"
        );
        let got = add_query(req("https://h:6443/api/v1/configmaps"), "a=b");
        assert_eq!(
            got.uri().to_string(),
            "https://h:6443/api/v1/configmaps?a=b"
        );
    }
}
