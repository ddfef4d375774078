//! The example end to end: a Queue with pending messages is deleted; kmeta keeps it (finalizer)
//! while the finalize hook says the queue is not drained; once the workers report 0 pending,
//! the child is deleted and the Queue goes away.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kmeta_hook::SyncRequest;
use kmeta_tests::{Env, TIMEOUT, eventually, install_kmeta_crds};
use kube::api::DeleteParams;
use serde_json::{Value, json};

const FINALIZER: &str = "metacontroller.io/compositecontroller-queue-controller";

fn yaml(file: &str) -> anyhow::Result<Value> {
    let path = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
    Ok(serde_saphyr::from_str(&std::fs::read_to_string(path)?)?)
}

#[tokio::test]
async fn queue_is_kept_until_drained() -> anyhow::Result<()> {
    let mut env = Env::new("drain").await?;
    install_kmeta_crds(&mut env).await?;
    env.create_crd(yaml("crd.yaml")?).await?;

    let finalize_calls = Arc::new(AtomicUsize::new(0));
    let counter = finalize_calls.clone();
    let hooks = kmeta_hook::router()
        .sync(kmeta_example_drain_before_delete::sync)
        .finalize(move |req: SyncRequest| {
            counter.fetch_add(1, Ordering::SeqCst);
            kmeta_example_drain_before_delete::finalize(req)
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let hook_task = tokio::spawn(async move { hooks.serve_listener(listener).await });

    let mut cc = yaml("controller.yaml")?;
    cc["spec"]["hooks"]["sync"]["webhook"]["url"] = json!(format!("http://{addr}/sync"));
    cc["spec"]["hooks"]["finalize"]["webhook"]["url"] = json!(format!("http://{addr}/finalize"));
    cc["metadata"]["labels"] = env.cc_labels();
    env.create("compositecontrollers", cc).await?;
    env.start_controller();

    let ns = env.ns.clone();
    let mut parent = yaml("parent.yaml")?;
    parent["metadata"]["namespace"] = json!(ns);
    env.create("queues", parent).await?;
    let queues = env.api("examples.kmeta.dev/v1alpha1", "Queue", "queues", Some(&ns));
    let configmaps = env.api("v1", "ConfigMap", "configmaps", Some(&ns));
    let (queue, cm) = ("orders", "orders-queue");

    let c = eventually("the queue's ConfigMap", TIMEOUT, || async {
        env.get(&configmaps, cm).await
    })
    .await?;
    assert_eq!(c["data"], json!({"queue": "orders", "capacity": "100"}));
    eventually("kmeta's finalizer on the Queue", TIMEOUT, || async {
        let q = env.get(&queues, queue).await?.unwrap_or_default();
        Ok(q["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
            .then_some(()))
    })
    .await?;

    // a worker reports 3 pending messages; sync reports them and leaves the field alone
    env.merge_patch(&configmaps, cm, json!({"data": {"pending": "3"}}))
        .await?;
    eventually("status.pending = 3", TIMEOUT, || async {
        let q = env.get(&queues, queue).await?.unwrap_or_default();
        Ok((q["status"]["pending"] == 3).then_some(()))
    })
    .await?;

    // delete the Queue: it stays, draining, and its ConfigMap stays untouched
    queues.delete(queue, &DeleteParams::default()).await?;
    let q = eventually("the Queue draining", TIMEOUT, || async {
        let q = env.get(&queues, queue).await?;
        Ok(q.filter(|q| q["status"]["phase"] == "Draining"))
    })
    .await?;
    assert!(q["metadata"]["deletionTimestamp"].is_string(), "{q}");
    assert!(finalize_calls.load(Ordering::SeqCst) > 0);
    let c = env.get(&configmaps, cm).await?.unwrap_or_default();
    assert_eq!(c["data"]["pending"], "3", "the worker's field is kept: {c}");

    // drained: the ConfigMap is deleted and the Queue goes away
    env.merge_patch(&configmaps, cm, json!({"data": {"pending": "0"}}))
        .await?;
    eventually("the Queue gone", TIMEOUT, || async {
        Ok(env.get(&queues, queue).await?.is_none().then_some(()))
    })
    .await?;
    eventually("the ConfigMap gone", TIMEOUT, || async {
        Ok(env.get(&configmaps, cm).await?.is_none().then_some(()))
    })
    .await?;

    hook_task.abort();
    env.finish().await
}
