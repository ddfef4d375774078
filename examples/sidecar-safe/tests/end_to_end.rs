//! The example end to end: kmeta-apiserver over HTTP, the controller in-process, this crate's
//! hook on 127.0.0.1, the example's own YAML files, and a mutating admission hook that injects
//! a sidecar into Deployments when they are created (as a service-mesh injector does).

use std::sync::{Arc, Mutex};

use kmeta_apiserver::Operation;
use kmeta_hook::SyncRequest;
use kmeta_tests::{Env, HookMode, TIMEOUT, eventually, install_kmeta_crds};
use serde_json::{Value, json};

const CC: &str = "webapp-controller";

fn yaml(file: &str) -> anyhow::Result<Value> {
    let path = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path)?;
    Ok(serde_saphyr::from_str(&text)?)
}

fn containers(obj: &Value) -> Vec<(String, String)> {
    obj.pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (s("name"), s("image"))
        })
        .collect()
}

fn sidecar() -> Value {
    json!({"name": "proxy", "image": "envoy:1.30", "ports": [{"containerPort": 15001}]})
}

#[tokio::test]
async fn image_update_keeps_the_injected_sidecar_and_resync_writes_nothing() -> anyhow::Result<()> {
    sidecar_story(HookMode::Webhook).await
}

/// The same hook function, unchanged, as an in-process hook (`kmeta::embed`): the same story.
#[tokio::test]
async fn the_same_hook_in_process_keeps_the_sidecar_and_resync_writes_nothing() -> anyhow::Result<()>
{
    sidecar_story(HookMode::InProcess).await
}

#[allow(clippy::too_many_lines)] // one end-to-end story, read top to bottom
async fn sidecar_story(mode: HookMode) -> anyhow::Result<()> {
    let mut env = Env::new("sidecar-safe").await?;
    let Some(server) = env.server() else {
        eprintln!("skipped: needs the in-process API server's admission hooks");
        return env.finish().await;
    };
    // the injector: add the sidecar to every Deployment at creation only, so the sidecar
    // survives later updates only if kmeta's apply keeps it
    let _injector = server
        .admission()
        .mutate("apps/v1", "deployments", |obj, op| {
            if op == Operation::Create
                && let Some(cs) = obj
                    .pointer_mut("/spec/template/spec/containers")
                    .and_then(Value::as_array_mut)
                && !cs.iter().any(|c| c["name"] == "proxy")
            {
                cs.push(sidecar());
            }
            Ok(())
        });
    install_kmeta_crds(&mut env).await?;
    env.create_crd(yaml("crd.yaml")?).await?;

    // the hook, recording the annotations of every parent it is asked about
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let record = seen.clone();
    let sync = move |req: SyncRequest| {
        if let Ok(mut s) = record.lock() {
            s.push(req.parent["metadata"]["annotations"].clone());
        }
        kmeta_example_sidecar_safe::sync(req)
    };
    let mut cc = yaml("controller.yaml")?;
    let hook_task = match mode {
        HookMode::Webhook => {
            let hooks = kmeta_hook::router().sync(sync);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            let task = tokio::spawn(async move { hooks.serve_listener(listener).await });
            cc["spec"]["hooks"]["sync"]["webhook"]["url"] = json!(format!("http://{addr}/sync"));
            cc["metadata"]["labels"] = env.cc_labels();
            env.create("compositecontrollers", cc).await?;
            env.start_controller();
            Some(task)
        }
        HookMode::InProcess => {
            let spec = serde_json::from_value(cc["spec"].take())?;
            let composite = kmeta::embed::Composite::builder(env.client.clone(), CC)
                .spec(spec)
                .sync(sync);
            env.start_in_process(composite, kmeta::ManagerConfig::default());
            None
        }
    };

    let ns = env.ns.clone();
    let mut parent = yaml("parent.yaml")?;
    parent["metadata"]["namespace"] = json!(ns);
    let (av, name) = ("examples.kmeta.dev/v1alpha1", "shop");
    env.create("webapps", parent).await?;
    let webapps = env.api(av, "WebApp", "webapps", Some(&ns));
    let deployments = env.api("apps/v1", "Deployment", "deployments", Some(&ns));

    let d = eventually("the Deployment", TIMEOUT, || async {
        env.get(&deployments, name).await
    })
    .await?;
    assert_eq!(
        containers(&d),
        [
            ("app".into(), "nginx:1.27".into()),
            ("proxy".into(), "envoy:1.30".into())
        ],
        "the injector added the sidecar: {d}"
    );
    assert_eq!(d["spec"]["replicas"], 2);

    // the parent's image changes
    env.merge_patch(
        &webapps,
        name,
        json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "nginx:1.28", "ports": [{"containerPort": 80}]}]}}}}),
    )
    .await?;
    let d = eventually("the new image in the Deployment", TIMEOUT, || async {
        Ok(env
            .get(&deployments, name)
            .await?
            .filter(|d| containers(d).first().is_some_and(|c| c.1 == "nginx:1.28")))
    })
    .await?;
    assert_eq!(
        containers(&d),
        [
            ("app".into(), "nginx:1.28".into()),
            ("proxy".into(), "envoy:1.30".into())
        ],
        "the sidecar must survive the image update: {d}"
    );
    // the status reports what the Deployment runs
    eventually("the WebApp status", TIMEOUT, || async {
        let p = env.get(&webapps, name).await?.unwrap_or_default();
        Ok((p.pointer("/status/containers")
            == Some(&json!([
            {"name": "app", "image": "nginx:1.28"}, {"name": "proxy", "image": "envoy:1.30"}])))
        .then_some(()))
    })
    .await?;

    // a sync with nothing new writes nothing: touch the parent, then touch it again; the hook
    // is asked about the second touch only after the first touch's sync has finished
    let rv = d["metadata"]["resourceVersion"].clone();
    for touch in ["1", "2"] {
        env.merge_patch(
            &webapps,
            name,
            json!({"metadata": {"annotations": {"example.kmeta.dev/touch": touch}}}),
        )
        .await?;
        eventually(&format!("a sync of touch {touch}"), TIMEOUT, || async {
            let s = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            Ok(s.iter()
                .any(|a| a["example.kmeta.dev/touch"] == touch)
                .then_some(()))
        })
        .await?;
    }
    let after = env.get(&deployments, name).await?.unwrap_or_default();
    assert_eq!(
        after["metadata"]["resourceVersion"], rv,
        "a resync with nothing new must not write the Deployment: {after}"
    );
    assert!(env.syncs(CC) > 0);

    if let Some(task) = hook_task {
        task.abort();
    }
    env.finish().await
}
