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
    // requests, not calls: under KMETA_TEST_HOOK_FAULT_PCT the quiet parent's first request
    // may fail before the hook, and its retry waits for the watch to show the failure's status
    // write (the queue's order is what is measured)
    let calls_before = s.hooks().requests("sync").len();
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
    let calls = s.hooks().requests("sync");
    let busy_left = BUSY.saturating_sub(calls_before);
    assert!(
        busy_left >= 100,
        "inconclusive: the busy backlog ({busy_left} left) drained before the quiet parent came"
    );
    let quiet_at = calls
        .iter()
        .position(|c| parent_name(c) == (quiet_ns.clone(), "quiet".to_owned()))
        .expect("the quiet parent's sync call");
    // workers busy when the quiet parent arrived, plus the watch event's way to the queue (and,
    // under KMETA_TEST_WATCH_LAG_MS, what 5 workers sync while the event is held back)
    let lagged = watch_lag()?.map_or(0, |lag| lag.as_millis() as usize / 50 * 5);
    let busy_in_between = quiet_at - calls_before;
    assert!(
        busy_in_between <= 15 + lagged,
        "{busy_in_between} busy parents were synced before the quiet one ({busy_left} were waiting)"
    );
    s.finish().await
}

/// Child writes in flight are bounded across every sync of the manager
/// (`ManagerConfig::child_writes_in_flight`), whatever the workers: each create answers 300 ms
/// late, so with 2 permits the creates enter the server at least 300 ms apart two by two.
#[tokio::test]
async fn child_writes_in_flight_are_bounded_across_workers() -> anyhow::Result<()> {
    use std::sync::{Arc, Mutex};
    use std::time::Instant;
    const PARENTS: usize = 4;
    const CHILDREN: usize = 3;
    const PERMITS: usize = 2;
    const LATENCY: Duration = Duration::from_millis(300);
    let mut s = Scenario::new("bounded")
        .crd("Thing", "things")
        .hook(|_, req: &Value| {
            let name = req["parent"]["metadata"]["name"].as_str().unwrap_or_default();
            let children: Vec<Value> = (0..CHILDREN)
                .map(|i| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-{i}")}}))
                .collect();
            Reply::Json(json!({"children": children}))
        })
        .prepare()
        .await?;
    // when each create reaches admission: after the injected latency, so two creates admitted
    // less than the latency apart were in flight together
    let admitted: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let seen = admitted.clone();
    let Some((hook, slow)) = s.server().map(|server| {
        let hook = server
            .admission()
            .validate("v1", "configmaps", move |_, op| {
                if op == kmeta_apiserver::Operation::Create {
                    seen.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(Instant::now());
                }
                Ok(())
            });
        let slow = server
            .faults()
            .add_latency(Some("create"), Some("configmaps"), LATENCY);
        (hook, slow)
    }) else {
        eprintln!("needs kmeta-apiserver's latency injection and admission hooks: checked there");
        return s.finish().await;
    };
    for i in 0..PARENTS {
        s.parent(&format!("p{i}"), json!({})).await?;
    }
    s.controller(Cc::new("bounded-cc")).await?;
    s.start_controller_with(
        kmeta::ManagerConfig::default()
            .workers(PARENTS)
            .child_writes_in_flight(PERMITS),
    );
    for i in 0..PARENTS {
        for c in 0..CHILDREN {
            s.wait_child(&format!("p{i}-{c}")).await?;
        }
    }
    if let Some(server) = s.server() {
        server.faults().remove(slow);
        server.admission().remove(hook);
    }
    let mut at = admitted.lock().unwrap_or_else(|e| e.into_inner()).clone();
    at.sort();
    assert_eq!(at.len(), PARENTS * CHILDREN, "one create per child");
    // any PERMITS + 1 consecutive admissions span at least one latency (minus timer slack)
    for w in at.windows(PERMITS + 1) {
        let span = w[PERMITS] - w[0];
        assert!(
            span >= LATENCY - Duration::from_millis(30),
            "{} creates admitted within {span:?}: more than {PERMITS} in flight",
            PERMITS + 1
        );
    }
    s.finish().await
}
