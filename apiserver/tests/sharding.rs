//! Server-side sharded LIST and WATCH (KEP-5866, `shardSelector`) over real HTTP: raw
//! requests of a `kube::Client` (kube 5 has no field for the parameter) and `kubectl get --raw`.
//! Expectations come from this file's own FNV-1a, not the server's.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

mod common;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kmeta_apiserver::TestServer;
use kube::api::{Api, PostParams};
use kube::core::WatchEvent;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);
const NS: &str = "object.metadata.namespace";
const UID: &str = "object.metadata.uid";
/// Namespaces of the fixture, each with three ConfigMaps.
const NAMESPACES: usize = 20;

async fn within<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(T, f).await.expect("timed out")
}

fn fnv1a64(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn hex(x: u128) -> String {
    if x == 1 << 64 {
        "0x10000000000000000".into()
    } else {
        format!("0x{x:016x}")
    }
}

/// Bucket `b` of `n` (a power of two) as kmeta writes it: the range `[b·2^64/n, (b+1)·2^64/n)`,
/// 16 hex digits, the end of the last bucket `0x10000000000000000` (2^64).
fn bucket(field: &str, b: u128, n: u128) -> String {
    let start = b * (1 << 64) / n;
    let end = (b + 1) * (1 << 64) / n;
    format!("shardRange({field}, '{}', '{}')", hex(start), hex(end))
}

fn in_bucket(value: &str, b: u128, n: u128) -> bool {
    (u128::from(fnv1a64(value)) * n) >> 64 == b
}

/// Percent-encode a query value.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn get(uri: &str) -> http::Request<Vec<u8>> {
    http::Request::get(uri).body(vec![]).unwrap()
}

/// Namespace `i` of the fixture: `ns-` and 8 pseudo-random hex digits.
///
/// Not `ns-0`, `ns-1`, ...: names that differ only in their last characters have FNV-1a hashes
/// that differ only in their low bits, so they all fall in one or two ranges of the top bits
/// (`sequential_names_cluster_in_the_top_bits` in `src/shard.rs`).
fn ns_name(i: usize) -> String {
    let mut z = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    format!("ns-{:08x}", (z ^ (z >> 31)) & 0xffff_ffff)
}

/// A server with ConfigMaps `cm-0..2` (labels `tier: a|b`) in namespaces [`ns_name`]`(0..20)`.
async fn fixture(s: &TestServer) {
    let nss: Api<Namespace> = Api::all(s.client());
    for i in 0..NAMESPACES {
        let ns = ns_name(i);
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        within(nss.create(&PostParams::default(), &n))
            .await
            .unwrap();
        let cms: Api<ConfigMap> = Api::namespaced(s.client(), &ns);
        for j in 0..3 {
            let tier = if j % 2 == 0 { "a" } else { "b" };
            let cm = serde_json::from_value(json!({"metadata": {"name": format!("cm-{j}"),
                "labels": {"tier": tier}}}))
            .unwrap();
            within(cms.create(&PostParams::default(), &cm))
                .await
                .unwrap();
        }
    }
}

/// `GET /api/v1/configmaps` with these query parameters (already encoded).
async fn list(s: &TestServer, query: &str) -> Value {
    within(
        s.client()
            .request::<Value>(get(&format!("/api/v1/configmaps?{query}"))),
    )
    .await
    .unwrap()
}

fn sharded(selector: &str) -> String {
    format!("shardSelector={}", enc(selector))
}

/// `namespace/name` of the items, with the field a selector hashes.
fn items(list: &Value) -> BTreeMap<String, (String, String)> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let md = &o["metadata"];
            let ns = md["namespace"].as_str().unwrap_or("").to_string();
            let key = format!("{ns}/{}", md["name"].as_str().unwrap());
            (key, (ns, md["uid"].as_str().unwrap().to_string()))
        })
        .collect()
}

fn keys(list: &Value) -> BTreeSet<String> {
    items(list).into_keys().collect()
}

#[tokio::test]
async fn namespace_ranges_one_and_two_terms_and_the_echo() {
    let s = TestServer::start().await.unwrap();
    fixture(&s).await;
    let all = list(&s, "").await;
    assert!(all["metadata"].get("shardInfo").is_none(), "{all}");
    let every = items(&all);
    assert!(every.len() >= NAMESPACES * 3);

    // one term: the lower half
    let low = bucket(NS, 0, 2);
    let got = list(&s, &sharded(&low)).await;
    let want: BTreeSet<_> = every
        .iter()
        .filter(|(_, (ns, _))| in_bucket(ns, 0, 2))
        .map(|(k, _)| k.clone())
        .collect();
    assert!(!want.is_empty() && want.len() < every.len());
    assert_eq!(keys(&got), want);
    assert_eq!(got["metadata"]["shardInfo"]["selector"], low);

    // two ORed terms: quarters 0 and 3
    let two = format!("{} || {}", bucket(NS, 0, 4), bucket(NS, 3, 4));
    let got = list(&s, &sharded(&two)).await;
    let want: BTreeSet<_> = every
        .iter()
        .filter(|(_, (ns, _))| in_bucket(ns, 0, 4) || in_bucket(ns, 3, 4))
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(keys(&got), want);
    assert_eq!(got["metadata"]["shardInfo"]["selector"], two);

    // the echo is the canonical form, whatever the spacing, quotes and parentheses sent
    let loose = format!(
        "( shardRange( {NS},\"0x0000000000000000\",'0x8000000000000000' ) )||{}",
        bucket(NS, 3, 4)
    );
    let got = list(&s, &sharded(&loose)).await;
    assert_eq!(
        got["metadata"]["shardInfo"]["selector"],
        format!("{} || {}", bucket(NS, 0, 2), bucket(NS, 3, 4))
    );

    // a namespaced list is all or nothing with the namespace key
    for i in 0..NAMESPACES {
        let ns = ns_name(i);
        let uri = format!("/api/v1/namespaces/{ns}/configmaps?{}", sharded(&low));
        let got: Value = within(s.client().request(get(&uri))).await.unwrap();
        let n = got["items"].as_array().unwrap().len();
        assert_eq!(n, if in_bucket(&ns, 0, 2) { 3 } else { 0 }, "{ns}");
    }
}

#[tokio::test]
async fn eight_buckets_partition_the_list_by_namespace_and_by_uid() {
    let s = TestServer::start().await.unwrap();
    fixture(&s).await;
    let every = items(&list(&s, "").await);
    // as kmeta writes them, bucket 0 and bucket 7 of 8
    assert_eq!(
        bucket(NS, 0, 8),
        "shardRange(object.metadata.namespace, '0x0000000000000000', '0x2000000000000000')"
    );
    assert_eq!(
        bucket(NS, 7, 8),
        "shardRange(object.metadata.namespace, '0xe000000000000000', '0x10000000000000000')"
    );
    for field in [NS, UID] {
        let mut seen: BTreeMap<String, u128> = BTreeMap::new();
        for b in 0..8 {
            let got = list(&s, &sharded(&bucket(field, b, 8))).await;
            for (k, (ns, uid)) in items(&got) {
                let v = if field == NS { &ns } else { &uid };
                assert!(in_bucket(v, b, 8), "{k} ({field} {v}) is not in bucket {b}");
                if let Some(prev) = seen.insert(k.clone(), b) {
                    panic!("{k} in buckets {prev} and {b} ({field})");
                }
            }
        }
        let union: BTreeSet<_> = seen.into_keys().collect();
        let whole: BTreeSet<_> = every.keys().cloned().collect();
        assert_eq!(union, whole, "{field}");
    }
}

#[tokio::test]
async fn a_malformed_selector_is_a_400() {
    let s = TestServer::start().await.unwrap();
    let r = "'0x0000000000000000', '0x8000000000000000'";
    for bad in [
        format!("shardRange(object.metadata.name, {r})"),
        "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')".to_string(),
        format!("shardRange({UID}, {r}) || shardRange({NS}, {r})"),
        format!("shardRange({UID}, {r}) && shardRange({UID}, {r})"),
        format!("shardRange({UID}, {r}"),
        " ".to_string(),
    ] {
        for watch in ["", "&watch=true"] {
            let uri = format!("/api/v1/configmaps?{}{watch}", sharded(&bad));
            match within(s.client().request::<Value>(get(&uri))).await {
                Err(kube::Error::Api(st)) => {
                    assert_eq!((st.code, st.reason.as_str()), (400, "BadRequest"), "{bad}");
                    assert!(
                        st.message.starts_with("invalid shard selector: "),
                        "{bad}: {}",
                        st.message
                    );
                }
                other => panic!("{bad}: expected 400, got {other:?}"),
            }
        }
    }
    // an empty parameter is no selector
    let got = list(&s, "shardSelector=").await;
    assert!(got["metadata"].get("shardInfo").is_none(), "{got}");
}

#[tokio::test]
async fn with_label_selector_and_pages() {
    let s = TestServer::start().await.unwrap();
    fixture(&s).await;
    let sel = format!("{} || {}", bucket(NS, 1, 4), bucket(NS, 2, 4));
    let want: BTreeSet<_> = items(&list(&s, "labelSelector=tier%3Da").await)
        .into_iter()
        .filter(|(_, (ns, _))| in_bucket(ns, 1, 4) || in_bucket(ns, 2, 4))
        .map(|(k, _)| k)
        .collect();
    let q = format!("labelSelector=tier%3Da&{}", sharded(&sel));
    let got = list(&s, &q).await;
    assert_eq!(keys(&got), want);
    assert!(want.len() > 4, "{want:?}");

    // pages of 3 with the same selectors: the same objects, once each, in order
    let mut paged = vec![];
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut q = format!("{q}&limit=3");
        if let Some(t) = &token {
            q.push_str(&format!("&continue={}", enc(t)));
        }
        let page = list(&s, &q).await;
        pages += 1;
        assert_eq!(page["metadata"]["shardInfo"]["selector"], sel.as_str());
        assert!(
            page["metadata"].get("remainingItemCount").is_none(),
            "{page}"
        );
        let n = page["items"].as_array().unwrap().len();
        paged.extend(keys(&page));
        match page["metadata"]["continue"].as_str() {
            Some(t) if !t.is_empty() => {
                assert_eq!(n, 3);
                token = Some(t.to_string());
            }
            _ => break,
        }
    }
    assert_eq!(pages, want.len().div_ceil(3));
    assert_eq!(paged.len(), want.len());
    assert_eq!(paged.into_iter().collect::<BTreeSet<_>>(), want);
}

/// Every event of a watch stream until it ends.
async fn drain(
    stream: impl Stream<Item = kube::Result<WatchEvent<ConfigMap>>>,
) -> Vec<WatchEvent<ConfigMap>> {
    let all: Vec<_> = within(stream.collect::<Vec<_>>()).await;
    all.into_iter().map(Result::unwrap).collect()
}

/// The ADDED events of a watch until it times out.
async fn watch_added(s: &TestServer, query: &str) -> BTreeSet<String> {
    let uri = format!("/api/v1/configmaps?watch=true&timeoutSeconds=2&{query}");
    let stream = within(s.client().request_events::<ConfigMap>(get(&uri)))
        .await
        .unwrap();
    let events = drain(stream).await;
    events
        .into_iter()
        .filter_map(|e| match e {
            WatchEvent::Added(cm) => Some(format!(
                "{}/{}",
                cm.metadata.namespace.unwrap(),
                cm.metadata.name.unwrap()
            )),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn watch_initial_events_and_changes_are_sharded() {
    let s = TestServer::start().await.unwrap();
    fixture(&s).await;
    let every = items(&list(&s, "").await);
    let sel = format!("{} || {}", bucket(NS, 0, 4), bucket(NS, 3, 4));
    let wanted = |ns: &str| in_bucket(ns, 0, 4) || in_bucket(ns, 3, 4);

    // initial events: the current state of the range
    let initial = watch_added(&s, &sharded(&sel)).await;
    let want: BTreeSet<_> = every
        .iter()
        .filter(|(_, (ns, _))| wanted(ns))
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(initial, want);

    // changes after a resourceVersion: creates in every namespace, only the range's seen
    let rv = list(&s, "").await["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let q = format!("resourceVersion={rv}&{}", sharded(&sel));
    let watching = {
        let uri = format!("/api/v1/configmaps?watch=true&timeoutSeconds=5&{q}");
        within(s.client().request_events::<ConfigMap>(get(&uri)))
            .await
            .unwrap()
    };
    let mut want = BTreeSet::new();
    for i in 0..NAMESPACES {
        let ns = ns_name(i);
        let cms: Api<ConfigMap> = Api::namespaced(s.client(), &ns);
        let cm = serde_json::from_value(json!({"metadata": {"name": "late"}})).unwrap();
        within(cms.create(&PostParams::default(), &cm))
            .await
            .unwrap();
        if wanted(&ns) {
            want.insert(format!("{ns}/late"));
        }
    }
    let events = drain(watching).await;
    let added: BTreeSet<_> = events
        .into_iter()
        .filter_map(|e| match e {
            WatchEvent::Added(cm) => Some(format!(
                "{}/{}",
                cm.metadata.namespace.unwrap(),
                cm.metadata.name.unwrap()
            )),
            WatchEvent::Bookmark(_) => None,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert!(!want.is_empty());
    assert_eq!(added, want);

    // by uid: the initial events of bucket 1 of 2
    let by_uid = watch_added(&s, &sharded(&bucket(UID, 1, 2))).await;
    let want: BTreeSet<_> = items(&list(&s, "").await)
        .into_iter()
        .filter(|(_, (_, uid))| in_bucket(uid, 1, 2))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(by_uid, want);
}

#[tokio::test]
async fn switched_off_the_parameter_is_ignored_like_an_old_server() {
    let s = TestServer::builder()
        .shard_selector(false)
        .start()
        .await
        .unwrap();
    fixture(&s).await;
    let every = keys(&list(&s, "").await);
    let low = bucket(NS, 0, 2);
    let check_off = |got: &Value| {
        assert!(got["metadata"].get("shardInfo").is_none(), "{got}");
        assert_eq!(keys(got), every);
    };
    check_off(&list(&s, &sharded(&low)).await);
    // not even parsed
    check_off(&list(&s, &sharded("shardRange(nonsense")).await);
    assert_eq!(watch_added(&s, &sharded(&low)).await, every);

    // switched on at run time
    s.set_shard_selector(true);
    assert!(s.state().shard_selector_served());
    let got = list(&s, &sharded(&low)).await;
    assert_eq!(got["metadata"]["shardInfo"]["selector"], low);
    assert!(keys(&got).len() < every.len());
    s.set_shard_selector(false);
    check_off(&list(&s, &sharded(&low)).await);
}

#[test]
fn kubectl_get_raw_sharded_or_skips_without_kubectl() {
    use common::{have_kubectl, ok, start_with};
    if !have_kubectl() {
        return;
    }
    let mut yaml = String::new();
    for i in 0..8 {
        let ns = ns_name(i);
        yaml.push_str(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm, namespace: {ns}}}\n---\n"
        ));
    }
    let sel = format!("{} || {}", bucket(NS, 0, 4), bucket(NS, 2, 4));
    let path = format!("/api/v1/configmaps?{}", sharded(&sel));
    for served in ["true", "false"] {
        let s = start_with(&["--shard-selector", served]);
        let kc = s.kubeconfig.as_path();
        ok(kc, &["apply", "-f", "-"], Some(&yaml));
        let got: Value = serde_json::from_str(&ok(kc, &["get", "--raw", &path], None)).unwrap();
        let names: BTreeSet<String> = keys(&got)
            .into_iter()
            .filter(|k| k.starts_with("ns-"))
            .collect();
        let all: BTreeSet<String> = (0..8).map(|i| format!("{}/cm", ns_name(i))).collect();
        if served == "true" {
            assert_eq!(got["metadata"]["shardInfo"]["selector"], sel.as_str());
            let want: BTreeSet<String> = all
                .iter()
                .filter(|k| {
                    let ns = k.split('/').next().unwrap();
                    in_bucket(ns, 0, 4) || in_bucket(ns, 2, 4)
                })
                .cloned()
                .collect();
            assert!(!want.is_empty() && want.len() < all.len(), "{want:?}");
            assert_eq!(names, want);
        } else {
            assert!(got["metadata"].get("shardInfo").is_none(), "{got}");
            assert_eq!(names, all);
        }
    }
}
