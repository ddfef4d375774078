//! A real Prometheus (Debian's `prometheus` package) scraping `kmeta run` against
//! kmeta-apiserver: at rest no alert fires; a hook outage (the hook answers 503) fires
//! `KmetaHookCircuitOpen` and `KmetaHookFailing` for the controller, and both clear once the
//! hook answers again; and every panel of the dashboard returns data. All read through
//! Prometheus' HTTP API.
//!
//! Prometheus scrapes and evaluates every second, and reads a copy of
//! `deploy/monitoring/kmeta.rules.yaml` whose windows (`[5m]`, `[15m]`) are 20 s and whose
//! `for:` are 2 s (the shipped rules are not changed), so the whole test takes about a minute.
//! Without `prometheus` on the PATH it says so, and fails when `CI` or `KMETA_CI` is set.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use crate::support::on_path;

const KMETA: &str = env!("CARGO_BIN_EXE_kmeta");

/// How long each phase may take (warm-up, outage, recovery).
const PHASE: Duration = Duration::from_secs(90);

/// Kills the child when the test ends.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Polls `check` every 250 ms until it returns `Ok(true)`, for [`PHASE`] at most; the error
/// names `what` and the last state `check` reported in `state`.
async fn until<F, Fut>(what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<(bool, String)>>,
{
    let deadline = Instant::now() + PHASE;
    loop {
        let (done, state) = match check().await {
            Ok(r) => r,
            Err(e) => (false, format!("{e:#}")),
        };
        if done {
            eprintln!("{what}: {state}");
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}; last seen: {state}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A sync hook wanting one ConfigMap per parent, answering 503 while `down`.
async fn hook(down: Arc<AtomicBool>) -> anyhow::Result<String> {
    use axum::Json;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let app = axum::Router::new().route(
        "/sync",
        axum::routing::post(move |Json(req): Json<Value>| {
            let down = down.clone();
            async move {
                if down.load(Ordering::SeqCst) {
                    return StatusCode::SERVICE_UNAVAILABLE.into_response();
                }
                let name = req["parent"]["metadata"]["name"].as_str().unwrap_or("x");
                Json(json!({"status": {"ok": true}, "children": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}]}))
                .into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/sync", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

/// The `things` CRD, a CompositeController resyncing every second, and four parents.
async fn controller(client: &kube::Client, url: &str) -> anyhow::Result<()> {
    let ar = |api_version: &str, kind: &str, plural: &str| {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural: plural.into(),
        }
    };
    let pp = PostParams::default();
    let crds = ar(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    );
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.mon.example.com"},
        "spec": {"group": "mon.example.com", "scope": "Namespaced",
            "names": {"kind": "Thing", "plural": "things", "singular": "thing"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    Api::<DynamicObject>::all_with(client.clone(), &crds)
        .create(&pp, &serde_json::from_value(crd)?)
        .await?;
    let cc = json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "things"},
        "spec": {"generateSelector": true, "resyncPeriodSeconds": 1,
            "parentResource": {"apiVersion": "mon.example.com/v1", "resource": "things"},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {"sync": {"webhook": {"url": url}}}}});
    let ccs = ar(
        "metacontroller.k8s.io/v1alpha1",
        "CompositeController",
        "compositecontrollers",
    );
    Api::<DynamicObject>::all_with(client.clone(), &ccs)
        .create(&pp, &serde_json::from_value(cc)?)
        .await?;
    let things: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ar("mon.example.com/v1", "Thing", "things"),
    );
    until("the Thing resource served", || async {
        Ok((
            things.list(&Default::default()).await.is_ok(),
            String::new(),
        ))
    })
    .await?;
    for i in 0..4 {
        let t = json!({"apiVersion": "mon.example.com/v1", "kind": "Thing",
                       "metadata": {"name": format!("t{i}"), "namespace": "default"}});
        things.create(&pp, &serde_json::from_value(t)?).await?;
    }
    Ok(())
}

/// `rules` with every window 20 s and every `for:` 2 s: the shipped alerts, at test speed.
fn fast_rules(rules: &str) -> String {
    let mut out = rules.replace("[5m]", "[20s]").replace("[15m]", "[20s]");
    for minutes in ["2m", "5m", "10m", "15m"] {
        out = out.replace(&format!("for: {minutes}\n"), "for: 2s\n");
    }
    out
}

/// Prometheus scraping `target` every second with the fast rules, on a free port; its base URL.
fn prometheus(dir: &Path, target: &str) -> anyhow::Result<(Proc, String)> {
    let shipped =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/monitoring/kmeta.rules.yaml");
    let rules = fast_rules(&std::fs::read_to_string(shipped)?);
    assert!(
        !rules.contains("m]") && !rules.contains("for: 1"),
        "{rules}"
    );
    std::fs::write(dir.join("rules.yaml"), rules)?;
    let config = json!({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": ["rules.yaml"],
        "scrape_configs": [{"job_name": "kmeta",
            "static_configs": [{"targets": [target], "labels": {"namespace": "kmeta"}}]}],
    });
    std::fs::write(dir.join("prometheus.yml"), config.to_string())?;
    let port = free_port()?;
    let proc = Proc(
        Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log"))?)
            .spawn()?,
    );
    Ok((proc, format!("http://127.0.0.1:{port}")))
}

/// The `data` of a Prometheus HTTP API answer.
async fn api(base: &str, path: &str, query: &[(&str, &str)]) -> anyhow::Result<Value> {
    let r: Value = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .query(query)
        .send()
        .await?
        .json()
        .await?;
    if r["status"] != "success" {
        bail!("{path} {query:?}: {r}");
    }
    Ok(r["data"].clone())
}

/// The alerts Prometheus holds now, as `name{label=value,…} state`.
async fn alerts(base: &str) -> anyhow::Result<Vec<(Value, String)>> {
    let data = api(base, "/api/v1/alerts", &[]).await?;
    Ok(data["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            (
                a["labels"].clone(),
                a["state"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect())
}

fn shown(alerts: &[(Value, String)]) -> String {
    let list: Vec<String> = alerts.iter().map(|(l, s)| format!("{l} {s}")).collect();
    format!("[{}]", list.join(", "))
}

/// Whether `name` fires for the controller `things` (label `label`).
fn firing(alerts: &[(Value, String)], name: &str, label: &str) -> bool {
    alerts
        .iter()
        .any(|(l, s)| l["alertname"] == name && l[label] == "things" && s == "firing")
}

#[tokio::test]
async fn prometheus_alerts_on_a_hook_outage_and_every_panel_has_data_or_skips_without_prometheus()
-> anyhow::Result<()> {
    if !on_path("prometheus") {
        return crate::monitoring::missing(
            "prometheus (apt-get install prometheus) to scrape kmeta",
        );
    }
    let server = kmeta_apiserver::TestServer::start().await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig)?;
    let client = server.client();
    kmeta::manifest::install_crds(&client).await?;
    let down = Arc::new(AtomicBool::new(false));
    controller(&client, &hook(down.clone()).await?).await?;
    let metrics = free_port()?;
    let _kmeta = Proc(
        Command::new(KMETA)
            .args(["run", "--kubeconfig"])
            .arg(&kubeconfig)
            .arg(format!("--metrics-address=127.0.0.1:{metrics}"))
            .args(["--health-probe-bind-address=0", "--discovery-interval=1s"])
            .args(["--leader-election", "--leader-election-namespace=default"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("kmeta.log"))?)
            .spawn()?,
    );
    let (_prometheus, base) = prometheus(dir.path(), &format!("127.0.0.1:{metrics}"))?;
    let logs = || {
        let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap_or_default();
        format!(
            "prometheus.log:\n{}\nkmeta.log (tail):\n{}",
            read("prometheus.log"),
            read("kmeta.log")
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .join("\n")
        )
    };
    let result = phases(&base, &down).await;
    result.with_context(logs)
}

/// At rest, the outage, the recovery, then the dashboard's panels.
async fn phases(base: &str, down: &AtomicBool) -> anyhow::Result<()> {
    let query = |q: String| async move {
        let data = api(base, "/api/v1/query", &[("query", &q)]).await?;
        Ok::<Vec<Value>, anyhow::Error>(data["result"].as_array().cloned().unwrap_or_default())
    };
    until("kmeta scraped, leading and syncing, no alert firing", || async {
        let ok = query(r#"sum(kmeta_reconcile_total{job="kmeta",result="ok"}) > 8 and on() max(kmeta_leader_election_status) == 1"#.into()).await?;
        let a = alerts(base).await?;
        Ok((!ok.is_empty() && a.iter().all(|(_, s)| s != "firing"), shown(&a)))
    })
    .await?;
    down.store(true, Ordering::SeqCst);
    until(
        "KmetaHookCircuitOpen and KmetaHookFailing firing for things",
        || async {
            let a = alerts(base).await?;
            let both = firing(&a, "KmetaHookCircuitOpen", "controller")
                && firing(&a, "KmetaHookFailing", "controller_name");
            Ok((both, shown(&a)))
        },
    )
    .await?;
    down.store(false, Ordering::SeqCst);
    until("the hook alerts cleared", || async {
        let a = alerts(base).await?;
        let hook = |(l, _): &(Value, String)| {
            l["alertname"] == "KmetaHookCircuitOpen" || l["alertname"] == "KmetaHookFailing"
        };
        Ok((!a.iter().any(hook), shown(&a)))
    })
    .await?;
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/monitoring/kmeta-dashboard.json"),
    )?)?;
    let mut empty = Vec::new();
    for (title, expr) in crate::monitoring::panel_queries(&dashboard) {
        let q = expr
            .replace("$controller", ".*")
            .replace("$__rate_interval", "20s");
        if query(q.clone()).await?.is_empty() {
            empty.push(format!("{title}: {q}"));
        }
    }
    eprintln!("dashboard: every panel's queries return data");
    if !empty.is_empty() {
        bail!("dashboard queries returning no data:\n{}", empty.join("\n"));
    }
    Ok(())
}
