//! The work queue is fair across namespaces: one namespace's burst of parents does not delay a
//! parent in another namespace behind the whole backlog.

use std::time::Duration;

use kmeta_tests::*;
use serde_json::{Value, json};

/// Parents created in one burst in the busy namespace.
const BUSY: usize = 300;

/// Each sync takes 50 ms, so 5 workers need at least 3 s for the busy backlog.
fn slow_hook(_hook: &str, req: &Value) -> Reply {
    let name = req["parent"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let child =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-c")}});
    Reply::Delay(
        Duration::from_millis(50),
        Box::new(Reply::Json(json!({"children": [child]}))),
    )
}

fn parent_name(call: &Value) -> (String, String) {
    let meta = &call["parent"]["metadata"];
    let s = |k: &str| meta[k].as_str().unwrap_or_default().to_owned();
    (s("namespace"), s("name"))
}

#[tokio::test]
async fn a_burst_in_one_namespace_does_not_delay_another_namespace() -> anyhow::Result<()> {
    let mut s = Scenario::new("fair")
        .crd("Thing", "things")
        .hook(slow_hook)
        .prepare()
        .await?;
    // the burst is there before the controller starts, so its first list queues all of it
    for i in 0..BUSY {
        s.parent(&format!("busy-{i}"), json!({})).await?;
    }
    let quiet_ns = format!("{}-quiet", s.ns);
    s.create(
        "namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": quiet_ns}}),
    )
    .await?;
    s.controller(Cc::new("fair-cc")).await?;
    s.start_controller();
    s.wait_call("sync", "the first busy sync", |_| true).await?;
    let calls_before = s.hooks().count("sync");
    let av = s.av.clone();
    s.create(
        "things",
        json!({"apiVersion": av, "kind": "Thing",
               "metadata": {"name": "quiet", "namespace": quiet_ns}}),
    )
    .await?;
    let quiet = s.api("v1", "ConfigMap", "configmaps", Some(&quiet_ns));
    s.wait_for(&quiet, "quiet-c", "the quiet namespace's child", |_| true)
        .await?;
    let calls = s.hooks().calls("sync");
    let busy_left = BUSY.saturating_sub(calls_before);
    assert!(
        busy_left >= 100,
        "inconclusive: the busy backlog ({busy_left} left) drained before the quiet parent came"
    );
    let quiet_at = calls
        .iter()
        .position(|c| parent_name(c) == (quiet_ns.clone(), "quiet".to_owned()))
        .expect("the quiet parent's sync call");
    // workers busy when the quiet parent arrived, plus the watch event's way to the queue
    let busy_in_between = quiet_at - calls_before;
    assert!(
        busy_in_between <= 15,
        "{busy_in_between} busy parents were synced before the quiet one ({busy_left} were waiting)"
    );
    s.finish().await
}
