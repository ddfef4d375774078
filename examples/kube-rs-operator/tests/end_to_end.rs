//! The operator end to end: kmeta-apiserver over HTTP, the kube-rs Controller in-process, and a
//! mutating admission hook that injects a sidecar into Deployments when they are created (as a
//! service-mesh injector does).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kmeta_apiserver::{Operation, TestServer};
use kmeta_example_kube_rs_operator::{Context, Frontend, FrontendSpec, run};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, CustomResourceExt};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(20);

/// Polls `check` until it returns `Some`, failing with `what` after [`DEADLINE`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(found) = check().await {
            return Ok(found);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn containers(d: &Deployment) -> Vec<String> {
    let spec = d.spec.template.spec.as_ref();
    spec.into_iter()
        .flat_map(|s| &s.containers)
        .map(|c| format!("{}={}", c.name, c.image.clone().unwrap_or_default()))
        .collect()
}

/// Waits until the Deployment runs exactly `want` containers and has `replicas`.
async fn deployment_becomes(
    api: &Api<Deployment>,
    want: &[&str],
    replicas: i32,
) -> anyhow::Result<Deployment> {
    eventually(
        &format!("deployment shop with {want:?} x{replicas}"),
        || async {
            let d = api.get_opt("shop").await.ok().flatten()?;
            (containers(&d) == want && d.spec.replicas == Some(replicas)).then_some(d)
        },
    )
    .await
}

#[tokio::test]
async fn the_injected_sidecar_survives_updates_and_a_resync_writes_nothing() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let _injector = server
        .admission()
        .mutate("apps/v1", "deployments", |obj, op| {
            if op == Operation::Create
                && let Some(cs) = obj
                    .pointer_mut("/spec/template/spec/containers")
                    .and_then(Value::as_array_mut)
            {
                cs.push(json!({"name": "proxy", "image": "envoy:1"}));
            }
            Ok(())
        });
    let client = server.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Frontend::crd())
        .await?;
    let frontends: Api<Frontend> = Api::namespaced(client.clone(), "default");
    eventually("frontends served", || async {
        frontends.list(&Default::default()).await.ok()
    })
    .await?;

    let ctx = Arc::new(Context {
        client: client.clone(),
        resync: Duration::from_millis(100),
        reconciles: Default::default(),
    });
    let operator = tokio::spawn(run(ctx.clone()));

    let spec = FrontendSpec {
        image: "shop:1".into(),
        replicas: Some(2),
    };
    frontends
        .create(&PostParams::default(), &Frontend::new("shop", spec))
        .await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployment_becomes(&deployments, &["web=shop:1", "proxy=envoy:1"], 2).await?;

    // a new image and a new replica count: updated in place, the sidecar kept
    let patch = json!({"spec": {"image": "shop:2", "replicas": 3}});
    frontends
        .patch("shop", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let updated = deployment_becomes(&deployments, &["web=shop:2", "proxy=envoy:1"], 3).await?;

    // resyncs (every 100 ms) with nothing new write nothing
    server.reset_counters();
    let before = ctx.reconciles.load(Ordering::SeqCst);
    // four: a reconcile in flight at the reset may have read the Deployment before it, so three
    // whole reconciles (each reading it) end after it
    eventually("four more reconciles", || async {
        (ctx.reconciles.load(Ordering::SeqCst) >= before + 4).then_some(())
    })
    .await?;
    assert_eq!(server.counters().writes(), 0, "{:?}", server.counters());
    assert!(server.counters().count("get", "deployments") >= 3);
    let after = deployments.get("shop").await?;
    assert_eq!(
        after.metadata.resource_version,
        updated.metadata.resource_version
    );

    operator.abort();
    Ok(())
}

#[test]
fn the_binary_prints_the_crd_it_reconciles() -> anyhow::Result<()> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-rs-operator"))
        .arg("crd")
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crd: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(crd["metadata"]["name"], "frontends.examples.kmeta.dev");
    assert_eq!(crd, serde_json::to_value(Frontend::crd())?);
    Ok(())
}
