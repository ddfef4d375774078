//! The triggers both controller kinds share (`reconcile/triggers.rs`), held to one contract
//! (`docs/design/metacontroller-contract.md`, "Shared triggers"): a CompositeController's parents
//! and a DecoratorController's targets are scheduled the same way by the resync period and by a
//! relist. Each scenario runs both kinds side by side, each in its own namespace and API server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kmeta_tests::*;
use serde_json::{Value, json};

/// The kinds a scenario runs for.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Composite,
    Decorator,
}

/// The name of the object a sync request is about (a composite's parent, a decorator's target).
fn object_name(req: &Value) -> &str {
    req["parent"]["metadata"]["name"]
        .as_str()
        .or_else(|| req["object"]["metadata"]["name"].as_str())
        .unwrap_or_default()
}

/// Sync requests so far, per object name.
fn per_object(s: &Running) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for r in s.hooks().requests("sync") {
        *n.entry(object_name(&r).to_owned()).or_default() += 1;
    }
    n
}

/// Starts a controller of `kind` named `name` over `objects` Things, answered by `hook`, with
/// `spec` merged into the controller's spec and `config` for the manager.
async fn start(
    kind: Kind,
    name: &str,
    objects: &[&str],
    hook: impl Fn(&str, &Value) -> Reply + Send + Sync + 'static,
    spec: Value,
    config: kmeta::ManagerConfig,
) -> anyhow::Result<Running> {
    let mut b = Scenario::new(name)
        .crd("Thing", "things")
        .hook(hook)
        .config(config);
    for o in objects {
        b = b.parent(o, json!({}));
    }
    let controller = format!("{name}-c");
    match kind {
        Kind::Composite => b.controller(Cc::new(&controller).patch(spec)).start().await,
        Kind::Decorator => {
            let mut s = b.start().await?;
            s.decorator(Dc::new(&controller).patch(spec)).await?;
            Ok(s)
        }
    }
}

/// Waits `window` (a deadline twice as long) and returns the sync requests per object made in
/// it.
async fn requests_during(
    s: &Running,
    what: &str,
    window: Duration,
) -> anyhow::Result<BTreeMap<String, usize>> {
    let before = per_object(s);
    let started = tokio::time::Instant::now();
    eventually(what, window * 2, || async {
        Ok((started.elapsed() >= window).then_some(()))
    })
    .await?;
    let after = per_object(s);
    Ok(after
        .into_iter()
        .map(|(k, n)| {
            let was = before.get(&k).copied().unwrap_or(0);
            (k, n - was)
        })
        .filter(|(_, n)| *n > 0)
        .collect())
}

/// The hook is down for every object (503: the endpoint's fault) and the controller resyncs
/// every second: once the circuit has declared it down, a resync is no change, so its parents
/// wait (parked) and only the probe calls the hook.
async fn resyncs_wait_while_the_hook_is_down(kind: Kind) -> anyhow::Result<()> {
    let name = format!("down-{kind:?}").to_lowercase();
    let controller = format!("{name}-c");
    let objects = ["t0", "t1", "t2", "t3", "t4"];
    let hook = |_: &str, _: &Value| Reply::Raw(503, "down for maintenance".into());
    let spec = json!({"resyncPeriodSeconds": 1});
    let s = start(kind, &name, &objects, hook, spec, Default::default()).await?;
    until("the circuit to open", || {
        s.metrics.reconcile_count(&controller, "parked") > 0
    })
    .await?;
    // its first probes come quickly (the backoff starts at 5 ms); the window starts once it has
    // been down for a while
    let settle = requests_during(&s, "the circuit to settle", Duration::from_secs(4)).await?;
    let parked = s.metrics.reconcile_count(&controller, "parked");
    let window = Duration::from_secs(5);
    let calls = requests_during(&s, "five resync periods", window).await?;
    let total: usize = calls.values().sum();
    let parked = s.metrics.reconcile_count(&controller, "parked") - parked;
    anyhow::ensure!(
        parked >= 10,
        "only {parked} parked syncs in {window:?}: the resyncs did not reach the circuit"
    );
    // five objects resynced each second would be 25 calls; the probe makes a few at most
    anyhow::ensure!(
        total <= 5,
        "{total} hook calls in {window:?} while the circuit was open: {calls:?} (before: {settle:?})"
    );
    s.finish().await
}

/// A relist (here every second, `--cache-flush-interval=1s`) resyncs every object, as
/// Metacontroller's informer resync does: one failing for a while (500, its own failure, with a
/// backoff of seconds) is synced again at the relists, not only after its backoff.
async fn a_relist_resyncs_an_object_in_backoff(kind: Kind) -> anyhow::Result<()> {
    let name = format!("relist-{kind:?}").to_lowercase();
    let failing = Arc::new(AtomicBool::new(true));
    let fails = failing.clone();
    let hook = move |_: &str, req: &Value| {
        if object_name(req) == "bad" && fails.load(Ordering::SeqCst) {
            return Reply::Raw(500, "bad input".into());
        }
        match req.get("parent") {
            Some(_) => Reply::Json(json!({"status": {}, "children": []})),
            None => Reply::Json(json!({"attachments": []})),
        }
    };
    let config = kmeta::ManagerConfig::default().cache_flush_interval(Some(Duration::from_secs(1)));
    let s = start(kind, &name, &["bad", "good"], hook, json!({}), config).await?;
    // failing for 6 s: its backoff has grown to seconds (it grows with the time spent failing)
    requests_during(&s, "six seconds of failures", Duration::from_secs(6)).await?;
    let window = Duration::from_secs(6);
    let calls = requests_during(&s, "six relists", window).await?;
    let bad = calls.get("bad").copied().unwrap_or(0);
    anyhow::ensure!(
        bad >= 3,
        "the failing object was synced {bad} times in {window:?} of relists every second: {calls:?}"
    );
    failing.store(false, Ordering::SeqCst);
    s.finish().await
}

/// Runs `case` for both kinds side by side; fails naming each kind that failed.
async fn for_both_kinds<F, Fut>(case: F) -> anyhow::Result<()>
where
    F: Fn(Kind) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let (composite, decorator) = tokio::join!(case(Kind::Composite), case(Kind::Decorator));
    let failed: Vec<String> = [
        ("CompositeController", composite),
        ("DecoratorController", decorator),
    ]
    .into_iter()
    .filter_map(|(kind, r)| r.err().map(|e| format!("{kind}: {e:#}")))
    .collect();
    anyhow::ensure!(failed.is_empty(), "{}", failed.join("\n"));
    Ok(())
}

#[tokio::test]
async fn a_resync_waits_while_the_circuit_has_the_hook_down() -> anyhow::Result<()> {
    for_both_kinds(resyncs_wait_while_the_hook_is_down).await
}

#[tokio::test]
async fn a_relist_resyncs_a_parent_in_backoff() -> anyhow::Result<()> {
    for_both_kinds(a_relist_resyncs_an_object_in_backoff).await
}
