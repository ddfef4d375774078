//! A resync that has no news writes nothing, also while kmeta leaves a child alone
//! (`docs/design/sync-record.md`): for each reason a child is left alone today — drift policy
//! `Report` and `Ignore`, an update the API server ignored before, a child contested under
//! server-side apply, a paused parent — a CompositeController resyncing every second for 30 s
//! after the child was left alone once writes neither the parent nor the child (checked by
//! resourceVersion, and on kmeta-apiserver by its write log: not one write request, Events
//! included), and the parent still says which child is left alone and why.
//!
//! The five cases run side by side, each in its own namespace and API server, so the 30 s are
//! spent once.

use kmeta::ManagerConfig;
use kmeta::reconcile::ApplyStrategy;
use kmeta_tests::*;
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};

use crate::schema::{declare_size, hook as gadget_hook};
use crate::ssa::{hook as message_hook, shared_hook};

/// How long each case is watched resyncing.
const WINDOW: std::time::Duration = std::time::Duration::from_secs(30);

/// Resyncs (one a second) a case must see at least in [`WINDOW`]: most of them, so that a case
/// cannot pass by not syncing.
const MIN_RESYNCS: u64 = 20;

/// A CompositeController resyncing every second, its ConfigMap children under `drift`.
fn resyncing(cc: &str, drift: &str) -> Cc {
    Cc::new(cc).patch(json!({"resyncPeriodSeconds": 1, "childResources": [{
        "apiVersion": "v1", "resource": "configmaps",
        "updateStrategy": {"method": "InPlace"}, "driftPolicy": drift}]}))
}

/// The entries of the parent's sync record for children left alone, as `(name, reason)`.
fn left_alone(parent: &Value) -> Vec<(String, String)> {
    parent
        .pointer("/status/kmeta/lastSync/children")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c["action"] == "LeftAlone")
        .map(|c| {
            let text = |f: &str| c[f].as_str().unwrap_or_default().to_owned();
            (text("name"), text("reason"))
        })
        .collect()
}

/// The resourceVersion of `name` in `api`.
async fn version(s: &Running, api: &Api<DynamicObject>, name: &str) -> anyhow::Result<String> {
    let obj = s.get(api, name).await?;
    let obj = obj.ok_or_else(|| anyhow::anyhow!("{name} is gone"))?;
    Ok(obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

/// Watches controller `cc` resync for [`WINDOW`] (at least [`MIN_RESYNCS`] syncs) and checks
/// that none of `watched` (an API, a name) changed and, on kmeta-apiserver, that the window's
/// write log has no write in the scenario's namespace (parents, their status, children, Events).
async fn quiet_for_a_while(
    case: &str,
    s: &Running,
    cc: &str,
    watched: &[(Api<DynamicObject>, &str)],
) -> anyhow::Result<()> {
    let mut before = Vec::new();
    for (api, name) in watched {
        before.push(version(s, api, name).await?);
    }
    let from = s.server().map(|server| {
        server.write_log().enable(100_000);
        server.write_log().since(0).last().map_or(0, |w| w.seq + 1)
    });
    let syncs = s.syncs(cc);
    let started = tokio::time::Instant::now();
    eventually(
        &format!("{case}: {WINDOW:?} of resyncs of {cc}, at least {MIN_RESYNCS}"),
        WINDOW * 3,
        || async {
            let enough = s.syncs(cc) >= syncs + MIN_RESYNCS && started.elapsed() >= WINDOW;
            Ok(enough.then_some(()))
        },
    )
    .await?;
    let mut problems = Vec::new();
    for ((api, name), was) in watched.iter().zip(&before) {
        let now = version(s, api, name).await?;
        if &now != was {
            problems.push(format!("{name} written (resourceVersion {was} → {now})"));
        }
    }
    let churned = watch_churn()?.is_some();
    if let (Some(server), Some(from)) = (s.server(), from) {
        let writes: Vec<String> = server
            .write_log()
            .since(from)
            .into_iter()
            .filter(|w| w.namespace.as_deref() == Some(s.ns.as_str()))
            // a churned watch relists with an empty cache for a moment: a create sent then is
            // refused (409) and changes nothing; a write the server carried out still counts
            .filter(|w| !churned || w.code < 400)
            .map(|w| format!("{} {} {:?} ({})", w.verb, w.resource, w.name, w.code))
            .collect();
        if !writes.is_empty() {
            let n = writes.len();
            let shown = &writes[..n.min(6)];
            problems.push(format!("{n} write requests, first {shown:?}"));
        }
    }
    anyhow::ensure!(
        problems.is_empty(),
        "during {} resyncs: {}",
        s.syncs(cc) - syncs,
        problems.join("; ")
    );
    Ok(())
}

/// A person edits the child of a parent whose children are under drift policy `drift`
/// (`Report` or `Ignore`); afterwards every resync leaves it alone and writes nothing.
async fn drifted_child(drift: &'static str) -> anyhow::Result<()> {
    let case = format!("drift policy {drift}");
    let name = format!("quiet-{}", drift.to_lowercase());
    let cc = format!("{name}-cc");
    let s = Scenario::new(&name)
        .crd("Thing", "things")
        .hook(message_hook)
        .controller(resyncing(&cc, drift))
        .parent("p", json!({"message": "hello"}))
        .start()
        .await?;
    s.wait_child("p-cm").await?;
    s.merge_patch(
        &s.configmaps(),
        "p-cm",
        json!({"data": {"message": "edited"}}),
    )
    .await?;
    let why = format!("drift policy {drift}");
    let parent = s
        .wait_parent("p", &format!("{case}: p-cm left alone"), |p| {
            left_alone(p) == [("p-cm".to_owned(), why.clone())]
        })
        .await?;
    if drift == "Report" {
        assert!(condition(&parent, "ChildDrift").is_some(), "{parent}");
    }
    let watched = [(s.parents(), "p"), (s.configmaps(), "p-cm")];
    quiet_for_a_while(&case, &s, &cc, &watched).await?;
    let parent = s.get(&s.parents(), "p").await?.unwrap();
    assert_eq!(left_alone(&parent), [("p-cm".to_owned(), why)], "{case}");
    let cm = s.get(&s.configmaps(), "p-cm").await?.unwrap();
    assert_eq!(cm["data"]["message"], "edited", "{case}: {cm}");
    s.finish().await
}

/// An update the API server ignored before (`ChildFieldsIgnored`) is left alone on every resync.
async fn ignored_update() -> anyhow::Result<()> {
    let case = "an update the API server ignored";
    let s = Scenario::new("quiet-ignored")
        .crd("Box", "boxes")
        .crd_with("Gadget", "gadgets", declare_size)
        .hook(gadget_hook)
        .controller(
            Cc::new("quiet-ignored-cc")
                .child("gadgets")
                .patch(json!({"resyncPeriodSeconds": 1})),
        )
        .parent("b", json!({"size": 3}))
        .start()
        .await?;
    let gadgets = s.resource("Gadget", "gadgets");
    s.wait_for(&gadgets, "b-gadget", "child Gadget", |_| true)
        .await?;
    let ignored = |p: &Value| {
        left_alone(p)
            .iter()
            .any(|(n, why)| n == "b-gadget" && why.contains("ignored the same update"))
    };
    s.wait_parent("b", &format!("{case}: b-gadget left alone"), ignored)
        .await?;
    let watched = [(s.parents(), "b"), (gadgets.clone(), "b-gadget")];
    quiet_for_a_while(case, &s, "quiet-ignored-cc", &watched).await?;
    let parent = s.get(&s.parents(), "b").await?.unwrap();
    assert!(ignored(&parent), "{case}: {parent}");
    s.finish().await
}

/// Under server-side apply, a child another parent holds is left alone by the parent that
/// wants it too, on every resync of both.
async fn contested_child() -> anyhow::Result<()> {
    let case = "a child contested under server-side apply";
    let cc = "quiet-contest-cc";
    let mut s = Scenario::new("quiet-contest")
        .crd("Thing", "things")
        .hook(shared_hook)
        .controller(resyncing(cc, "Enforce"))
        .config(ManagerConfig::default().apply_strategy(ApplyStrategy::ServerSideApply))
        .parent("first", json!({}))
        .start()
        .await?;
    s.wait_child("shared").await?;
    s.parent("second", json!({})).await?;
    let held = |p: &Value| {
        left_alone(p)
            .iter()
            .any(|(n, why)| n == "shared" && why.starts_with("held by"))
    };
    let second = s
        .wait_parent("second", &format!("{case}: shared left alone"), held)
        .await?;
    assert!(condition(&second, "ChildContested").is_some(), "{second}");
    s.wait_parent("first", "the holder told of the contest", |p| {
        condition(p, "ChildContested").is_some()
    })
    .await?;
    let watched = [
        (s.parents(), "first"),
        (s.parents(), "second"),
        (s.configmaps(), "shared"),
    ];
    quiet_for_a_while(case, &s, cc, &watched).await?;
    let second = s.get(&s.parents(), "second").await?.unwrap();
    assert!(held(&second), "{case}: {second}");
    s.finish().await
}

/// A paused parent whose child a person edited: every resync leaves both alone, and the
/// `Paused` condition says why.
async fn paused_parent() -> anyhow::Result<()> {
    let case = "a paused parent";
    let cc = "quiet-paused-cc";
    let s = Scenario::new("quiet-paused")
        .crd("Thing", "things")
        .hook(message_hook)
        .controller(resyncing(cc, "Enforce"))
        .parent("p", json!({"message": "hello"}))
        .start()
        .await?;
    s.wait_child("p-cm").await?;
    let pause = json!({"metadata": {"annotations": {"kmeta.dev/paused": "true"}}});
    s.merge_patch(&s.parents(), "p", pause).await?;
    s.wait_parent("p", &format!("{case}: Paused condition"), |p| {
        condition(p, "Paused").is_some()
    })
    .await?;
    s.merge_patch(
        &s.configmaps(),
        "p-cm",
        json!({"data": {"message": "edited"}}),
    )
    .await?;
    let watched = [(s.parents(), "p"), (s.configmaps(), "p-cm")];
    quiet_for_a_while(case, &s, cc, &watched).await?;
    let parent = s.get(&s.parents(), "p").await?.unwrap();
    let paused = condition(&parent, "Paused").cloned().unwrap_or_default();
    assert_eq!(paused["status"], "True", "{case}: {parent}");
    let cm = s.get(&s.configmaps(), "p-cm").await?.unwrap();
    assert_eq!(cm["data"]["message"], "edited", "{case}: {cm}");
    s.finish().await
}

#[tokio::test]
async fn a_resync_that_leaves_children_alone_writes_nothing() -> anyhow::Result<()> {
    let (report, ignore, ignored, contested, paused) = tokio::join!(
        drifted_child("Report"),
        drifted_child("Ignore"),
        ignored_update(),
        contested_child(),
        paused_parent(),
    );
    let results = [
        ("drift policy Report", report),
        ("drift policy Ignore", ignore),
        ("an update the API server ignored", ignored),
        ("a child contested under server-side apply", contested),
        ("a paused parent", paused),
    ];
    let failed: Vec<String> = results
        .into_iter()
        .filter_map(|(case, r)| r.err().map(|e| format!("{case}: {e:#}")))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    Ok(())
}
