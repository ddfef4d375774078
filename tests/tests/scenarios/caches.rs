//! A sync reads only synced caches: at a (re)start the controller waits for every child watch's
//! first list before it syncs a parent, and after creating children a parent's next sync waits
//! until the watch shows them, so the hook never sees fewer children than exist and no child is
//! created again (409 AlreadyExists).

use std::time::{Duration, Instant};

use kmeta_tests::*;
use serde_json::{Value, json};

const CHILDREN: usize = 5;

/// Five ConfigMaps per parent; status counts the observed ones.
fn five_children(_hook: &str, req: &Value) -> Reply {
    let name = req["parent"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let observed = observed_configmaps(req);
    let children: Vec<Value> = (0..CHILDREN)
        .map(|i| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-{i}")}}))
        .collect();
    Reply::Json(json!({"status": {"observed": observed}, "children": children}))
}

/// A scenario whose parent `p` has its five children and has observed them all.
async fn converged(name: &str) -> anyhow::Result<Running> {
    let s = Scenario::new(name)
        .crd("Thing", "things")
        .hook(five_children)
        .controller(Cc::new("things-cc"))
        .parent("p", json!({}))
        .start()
        .await?;
    s.wait_parent("p", "all children observed", |p| {
        p["status"]["observed"] == CHILDREN
    })
    .await?;
    Ok(s)
}

/// Makes every child (ConfigMap) request answer 2 s late, on kmeta-apiserver (a real cluster
/// has no fault injection: `None`): the list, or the watch-list, of the child watch
/// (docs/design/initial-list.md).
fn slow_child_list(s: &Running) -> Option<kmeta_apiserver::HookId> {
    s.server().map(|server| {
        server
            .faults()
            .add_latency(None, Some("configmaps"), Duration::from_secs(2))
    })
}

/// Holds back the events of every child (ConfigMap) watch by `delay`, on kmeta-apiserver (a real
/// cluster has no fault injection: `None`).
fn lagging_child_watch(s: &Running, delay: Duration) -> Option<kmeta_apiserver::HookId> {
    s.server().map(|server| {
        server
            .faults()
            .delay_watch_events(Some("configmaps"), delay)
    })
}

/// Waits for a sync after the first `calls_before` and checks that every sync since saw all the
/// children.
async fn every_sync_since_sees_every_child(
    s: &Running,
    calls_before: usize,
    when: &str,
) -> anyhow::Result<()> {
    until(&format!("a sync {when}"), || {
        s.hooks().count("sync") > calls_before
    })
    .await?;
    let seen: Vec<usize> = s.hooks().calls("sync")[calls_before..]
        .iter()
        .map(observed_configmaps)
        .collect();
    assert!(
        seen.iter().all(|n| *n == CHILDREN),
        "children observed by the hook {when}: {seen:?}, {CHILDREN} exist"
    );
    Ok(())
}

#[tokio::test]
async fn restart_waits_for_child_caches_before_the_first_sync() -> anyhow::Result<()> {
    let mut s = converged("caches").await?;
    s.stop_controller().await?;

    // the child list answers slowly: the parent watch syncs first, as after a leader takeover
    // on a busy cluster (a real cluster has no fault injection: the property is still checked)
    let slow = slow_child_list(&s);
    let before = s.server().map(|server| server.counters());
    let calls_before = s.hooks().count("sync");
    s.start_controller();
    every_sync_since_sees_every_child(&s, calls_before, "after the restart").await?;
    if let (Some(server), Some(before), Some(slow)) = (s.server(), before, slow) {
        let d = server.counters().since(&before);
        assert_eq!(
            d.get("create", "configmaps", 409),
            0,
            "creates answered 409: {d:?}"
        );
        server.faults().remove(slow);
    }
    s.finish().await
}

/// A relist (the watch expired: 410 Gone) keeps the old objects in the cache until the new list
/// replaces them, so a sync during a slow relist still sees every child.
#[tokio::test]
async fn relist_keeps_every_child_visible_until_the_new_list_arrives() -> anyhow::Result<()> {
    let s = converged("relist").await?;
    let (Some(server), Some(slow)) = (s.server(), slow_child_list(&s)) else {
        // a real cluster cannot be made to expire watches on demand
        eprintln!("relist scenario needs kmeta-apiserver's fault injection: checked there");
        return s.finish().await;
    };
    let before = server.counters();
    // every watch is closed and its resumption answered 410: each informer relists
    server.faults().expire_next_watches(10);
    server.faults().close_watches();
    let calls_before = s.hooks().count("sync");
    let touch = json!({"metadata": {"annotations": {"kmeta.test/touch": "1"}}});
    s.merge_patch(&s.parents(), "p", touch).await?;
    every_sync_since_sees_every_child(&s, calls_before, "during the relist").await?;
    // a list, or (the watch-list) a new watch after the resumed one got its 410
    until("the child watch relisted", || {
        let d = server.counters().since(&before);
        d.count("list", "configmaps") > 0 || d.count("watch", "configmaps") >= 2
    })
    .await?;
    server.faults().remove(slow);
    s.finish().await
}

/// A sync after the one that created the children, run before the child watch shows them
/// (the ConfigMap watch trails its writes by 1.5 s on kmeta-apiserver; a real cluster has no
/// fault injection, the property is still checked), waits for them: the hook is never told they
/// are missing, and no child is created twice (409 AlreadyExists).
#[tokio::test]
async fn a_sync_waits_for_the_children_it_created_to_reach_the_cache() -> anyhow::Result<()> {
    let mut s = Scenario::new("lagging")
        .crd("Thing", "things")
        .hook(five_children)
        .controller(Cc::new("things-cc"))
        .start()
        .await?;
    let lag = lagging_child_watch(&s, Duration::from_millis(1500));
    let before = s.server().map(|server| server.counters());
    s.parent("p", json!({})).await?;
    for i in 0..CHILDREN {
        s.wait_child(&format!("p-{i}")).await?;
    }
    // a change to the parent while the children are not in kmeta's cache yet
    let calls_before = s.hooks().count("sync");
    let touch = json!({"metadata": {"annotations": {"kmeta.test/touch": "1"}}});
    s.merge_patch(&s.parents(), "p", touch).await?;
    every_sync_since_sees_every_child(&s, calls_before, "after the children were created").await?;
    s.wait_parent("p", "all children observed", |p| {
        p["status"]["observed"] == CHILDREN
    })
    .await?;
    if let (Some(server), Some(before), Some(lag)) = (s.server(), before, lag) {
        let writes = server.counters().since(&before);
        assert_eq!(
            (
                writes.get("create", "configmaps", 201),
                writes.get("create", "configmaps", 409)
            ),
            (CHILDREN as u64, 0),
            "child creates (201, 409): {writes:?}"
        );
        server.faults().remove(lag);
    }
    s.finish().await
}

/// A created child the watch does not show in time is not waited for forever: after
/// `created_children_wait` (300 ms here, 5 min by default) it is named in a `ChildNotObserved`
/// Warning event on the parent and counted as `op="not_observed"`, and the sync goes on; once the
/// watch catches up every child is observed.
#[tokio::test]
async fn a_created_child_the_watch_never_shows_is_reported() -> anyhow::Result<()> {
    let mut s = Scenario::new("unseen")
        .crd("Thing", "things")
        .hook(five_children)
        .controller(Cc::new("things-cc"))
        .config(kmeta::ManagerConfig::default().created_children_wait(Duration::from_millis(300)))
        .start()
        .await?;
    let Some(lag) = lagging_child_watch(&s, Duration::from_secs(4)) else {
        eprintln!(
            "needs kmeta-apiserver's fault injection to hold back watch events: checked there"
        );
        return s.finish().await;
    };
    s.parent("p", json!({})).await?;
    for i in 0..CHILDREN {
        s.wait_child(&format!("p-{i}")).await?;
    }
    let touch = json!({"metadata": {"annotations": {"kmeta.test/touch": "1"}}});
    s.merge_patch(&s.parents(), "p", touch).await?;
    s.wait_event("a ChildNotObserved warning", Some(&s.ns), |e| {
        e["reason"] == "ChildNotObserved"
            && e["type"] == "Warning"
            && e["regarding"]["name"] == "p"
            && e["note"]
                .as_str()
                .is_some_and(|n| n.contains("ConfigMap.v1"))
    })
    .await?;
    until("the unseen children counted", || {
        s.metrics.child_op_count("things-cc", "not_observed") == CHILDREN as u64
    })
    .await?;
    if let Some(server) = s.server() {
        server.faults().remove(lag);
    }
    s.wait_parent("p", "all children observed", |p| {
        p["status"]["observed"] == CHILDREN
    })
    .await?;
    s.finish().await
}

/// A child kmeta created while its watch was down (events held back), then deleted by someone
/// before the watch came back, is never shown by the watch: the relist that follows (410 Gone),
/// requested after the create, proves it gone, so the parent's next sync stops waiting for it and
/// the child is created again at once — not after `created_children_wait` (5 min).
#[tokio::test]
async fn a_child_deleted_while_its_watch_was_down_is_recreated_after_the_relist()
-> anyhow::Result<()> {
    let mut s = Scenario::new("downwatch")
        .crd("Thing", "things")
        .hook(five_children)
        .controller(Cc::new("things-cc"))
        .start()
        .await?;
    let Some(down) = lagging_child_watch(&s, Duration::from_secs(120)) else {
        eprintln!(
            "needs kmeta-apiserver's fault injection to hold back watch events: checked there"
        );
        return s.finish().await;
    };
    s.parent("p", json!({})).await?;
    let first = s.wait_child("p-0").await?;
    for i in 1..CHILDREN {
        s.wait_child(&format!("p-{i}")).await?;
    }
    // someone deletes a child the watch has not shown yet
    s.configmaps()
        .delete("p-0", &kube::api::DeleteParams::default())
        .await?;
    let server = s.server().expect("checked above");
    // the watch comes back (the events it held never sent): its resumption is answered 410, so
    // it relists
    server.faults().expire_next_watches(10);
    server.faults().drop_watches();
    server.faults().remove(down);
    let back = Instant::now();
    let again = s
        .wait_child_where("p-0", "the child created again", |c| {
            c["metadata"]["uid"] != first["metadata"]["uid"]
        })
        .await?;
    assert!(
        back.elapsed() < Duration::from_secs(15),
        "created again {:?} after the watch came back",
        back.elapsed()
    );
    assert_ne!(again["metadata"]["uid"], first["metadata"]["uid"]);
    assert_eq!(
        s.metrics.child_op_count("things-cc", "not_observed"),
        0,
        "settled by the relist, not given up on"
    );
    s.finish().await
}

/// A child watch that has not listed within the deadline makes the sync a retry (counted as
/// `result="retry"`), not a run on a partial cache; the sync runs once the list arrives.
#[tokio::test]
async fn an_unsynced_child_watch_makes_the_sync_a_retry() -> anyhow::Result<()> {
    let mut s = Scenario::new("unsynced")
        .crd("Thing", "things")
        .hook(five_children)
        .controller(Cc::new("things-cc"))
        .start()
        .await?;
    s.stop_controller().await?;
    let Some(slow) = slow_child_list(&s) else {
        eprintln!("needs kmeta-apiserver's fault injection to slow the child list: checked there");
        return s.finish().await;
    };
    // the restarted controller's child list takes longer than a sync waits for it
    let started = Instant::now();
    s.start_controller_with(
        kmeta::ManagerConfig::default().watch_sync_deadline(Duration::from_millis(300)),
    );
    s.parent("p", json!({})).await?;
    until("a sync retried while the child watch lists", || {
        s.metrics.reconcile_count("things-cc", "retry") > 0
    })
    .await?;
    until("the first hook call", || s.hooks().count("sync") > 0).await?;
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the hook was called before the child list (2 s) completed"
    );
    s.wait_parent("p", "all children observed", |p| {
        p["status"]["observed"] == CHILDREN
    })
    .await?;
    if let Some(server) = s.server() {
        server.faults().remove(slow);
    }
    s.finish().await
}

/// State that changed without an event the controller saw converges within one cache-flush
/// interval: every relist resyncs every parent (as Metacontroller's informer resync), here
/// noticed through a hook whose answer depends on something kmeta does not watch.
#[tokio::test]
async fn a_relist_resyncs_every_parent() -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let wanted = Arc::new(AtomicUsize::new(1));
    let w = wanted.clone();
    let s = Scenario::new("resync")
        .crd("Thing", "things")
        .hook(move |_, req| {
            let name = req["parent"]["metadata"]["name"].as_str().unwrap_or_default();
            let children: Vec<Value> = (0..w.load(Ordering::SeqCst))
                .map(|i| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-{i}")}}))
                .collect();
            Reply::Json(json!({"status": {}, "children": children}))
        })
        .controller(Cc::new("resync-cc"))
        .config(kmeta::ManagerConfig::default().cache_flush_interval(Some(Duration::from_secs(1))))
        .parent("p", json!({}))
        .start()
        .await?;
    s.wait_child("p-0").await?;
    // the sync that observed p-0 is the last one an event triggers (kmeta's own status write
    // triggers none)
    s.wait_call("sync", "a sync observing p-0", |r| {
        r["children"]["ConfigMap.v1"].get("p-0").is_some()
    })
    .await?;
    // nothing kmeta watches changes: only a resync can bring the second child
    wanted.store(2, Ordering::SeqCst);
    s.wait_child("p-1").await?;
    s.finish().await
}
