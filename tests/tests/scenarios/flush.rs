//! `--cache-flush-interval` is Metacontroller's informer resync period: at each interval every
//! cached parent is synced again from the cache while the watches stay open, so the API server
//! sees no list after the first one and an edit made during the flush's syncs reaches the hook
//! through its own event (docs/design/own-informers-and-queue.md, "The cache flush").

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kmeta_tests::*;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// Parents: enough that a flush's syncs take a while to drain (60 × 100 ms over 5 workers).
const PARENTS: usize = 60;
/// How long the hook takes to answer.
const HOOK_DELAY: Duration = Duration::from_millis(100);
/// The flush interval: longer than one flush's drain (about 1.2 s), so flushes do not overlap.
const FLUSH: Duration = Duration::from_secs(3);
/// The parent edited during a flush.
const EDITED: &str = "p7";

/// Sync calls per parent name among `calls`.
fn per_parent(calls: &[Value]) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for c in calls {
        let name = c["parent"]["metadata"]["name"].as_str().unwrap_or_default();
        *n.entry(name.to_owned()).or_default() += 1;
    }
    n
}

/// Whether every parent has at least `more` calls beyond `before`.
fn each_synced(
    now: &BTreeMap<String, usize>,
    before: &BTreeMap<String, usize>,
    more: usize,
) -> bool {
    now.len() == PARENTS
        && now
            .iter()
            .all(|(k, n)| *n >= before.get(k).copied().unwrap_or(0) + more)
}

#[tokio::test]
async fn a_cache_flush_syncs_every_parent_again_with_the_watches_kept_open() -> anyhow::Result<()> {
    // once armed, the first sync call (a flush's first) wakes the test
    let armed = Arc::new(AtomicBool::new(false));
    let flush_began = Arc::new(Notify::new());
    let (arm, began) = (armed.clone(), flush_began.clone());
    let hook = move |_: &str, _: &Value| {
        if arm.swap(false, Ordering::SeqCst) {
            began.notify_one();
        }
        Reply::Delay(
            HOOK_DELAY,
            Box::new(Reply::Json(json!({"status": {}, "children": []}))),
        )
    };
    let config = kmeta::ManagerConfig::default()
        .cache_flush_interval(Some(FLUSH))
        .watch_list(kmeta::WatchListMode::Off);
    let mut scenario = Scenario::new("flush")
        .crd("Thing", "things")
        .hook(hook)
        .controller(Cc::new("flush-cc"))
        .config(config);
    for i in 0..PARENTS {
        scenario = scenario.parent(&format!("p{i}"), json!({}));
    }
    let s = scenario.start().await?;
    until("every parent synced once", || {
        per_parent(&s.hooks().calls("sync")).len() == PARENTS
    })
    .await?;
    let lists = s.server().map(|server| server.counters());
    // (a) nothing changes, and every parent is synced again at each flush: twice more
    let before = per_parent(&s.hooks().calls("sync"));
    until("every parent synced at two flushes", || {
        each_synced(&per_parent(&s.hooks().calls("sync")), &before, 2)
    })
    .await?;
    edit_during_a_flush(&s, &armed, &flush_began).await?;
    lists_stayed(&s, lists)?;
    s.finish().await
}

/// (c) An edit made while a flush's syncs drain is synced before that drain ends: the flush's
/// keys are low, the edit's event normal. `armed` set, the hook wakes `flush_began` at the next
/// flush's first sync.
async fn edit_during_a_flush(
    s: &Running,
    armed: &AtomicBool,
    flush_began: &Notify,
) -> anyhow::Result<()> {
    let round = per_parent(&s.hooks().calls("sync"));
    armed.store(true, Ordering::SeqCst);
    tokio::time::timeout(FLUSH * 4, flush_began.notified())
        .await
        .map_err(|_| anyhow::anyhow!("no flush began within {:?}", FLUSH * 4))?;
    let edit_from = s.hooks().calls("sync").len();
    s.merge_patch(
        &s.parents(),
        EDITED,
        json!({"spec": {"edit": "during-the-flush"}}),
    )
    .await?;
    until(
        "every parent synced by the flush, and the edit seen",
        || {
            let calls = s.hooks().calls("sync");
            each_synced(&per_parent(&calls), &round, 1)
                && calls[edit_from..]
                    .iter()
                    .any(|c| c["parent"]["spec"]["edit"] == "during-the-flush")
        },
    )
    .await?;
    let calls = s.hooks().calls("sync");
    let after_edit = &calls[edit_from..];
    let edit_at = after_edit
        .iter()
        .position(|c| c["parent"]["spec"]["edit"] == "during-the-flush")
        .unwrap_or_default();
    // the flush's syncs of the parents not synced yet when the edit was written
    let synced_first = per_parent(&calls[..edit_from]);
    let flushed_after: Vec<&str> = after_edit[edit_at + 1..]
        .iter()
        .filter_map(|c| c["parent"]["metadata"]["name"].as_str())
        .filter(|n| *n != EDITED && synced_first.get(*n) == round.get(*n))
        .collect();
    anyhow::ensure!(
        !flushed_after.is_empty(),
        "the edit reached the hook only after the flush had synced every parent ({} calls after \
         it was written)",
        edit_at
    );
    Ok(())
}

/// (b) The watches stayed open: no list of the parents or children after the first (`lists`:
/// the server's counts after the start; none on a real cluster).
fn lists_stayed(s: &Running, lists: Option<kmeta_apiserver::Counters>) -> anyhow::Result<()> {
    if let (Some(server), Some(lists)) = (s.server(), lists) {
        if requests_disturbed()? {
            eprintln!("watch churn or request faults relist on their own: list counts not checked");
        } else {
            let d = server.counters().since(&lists);
            anyhow::ensure!(
                d.count("list", "things") == 0 && d.count("list", "configmaps") == 0,
                "a flush listed again: {d:?}"
            );
            anyhow::ensure!(
                lists.count("list", "things") == 1,
                "the parents were listed {} times before the flushes",
                lists.count("list", "things")
            );
        }
    } else {
        eprintln!("a real cluster's API server counts no requests for the test: lists not checked");
    }
    Ok(())
}
