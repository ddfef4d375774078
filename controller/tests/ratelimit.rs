//! The rate-limited client against kmeta-apiserver over real HTTP.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kmeta::ops::client;
use kmeta::ops::metrics::Metrics;
use kmeta::ops::ratelimit::RateLimit;
use kube::api::{Api, ListParams, PostParams, WatchParams};
use kube::core::WatchEvent;

/// The value of the first exposition line starting with `prefix`.
fn value(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn client_for(
    server: &kmeta_apiserver::TestServer,
    limits: RateLimit,
    metrics: Arc<Metrics>,
) -> anyhow::Result<kube::Client> {
    let config = kube::Config::from_custom_kubeconfig(server.kubeconfig(), &Default::default())
        .await
        .context("config from the test server's kubeconfig")?;
    Ok(client::build(config, limits, metrics)?)
}

fn cm(name: &str) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.to_string());
    cm
}

#[tokio::test]
async fn requests_beyond_the_burst_wait_and_are_counted() -> anyhow::Result<()> {
    let server = kmeta_apiserver::TestServer::start().await?;
    let metrics = Arc::new(Metrics::new());
    let limits = RateLimit { qps: 5.0, burst: 2 };
    let client = client_for(&server, limits, metrics.clone()).await?;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let before = server.counters();

    const N: u64 = 8;
    let creates = (0..N).map(|i| {
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &cm(&format!("c{i}")))
                .await
        }
    });
    tokio::time::timeout(
        Duration::from_secs(30),
        futures::future::try_join_all(creates),
    )
    .await
    .context("creates did not finish")??;
    api.get("c0").await?;
    api.list(&ListParams::default()).await?;

    // the server saw every request once
    let seen = server.counters().since(&before);
    assert_eq!(seen.count("create", "configmaps"), N);
    assert_eq!(seen.count("get", "configmaps"), 1);
    assert_eq!(seen.count("list", "configmaps"), 1);

    let text = metrics.encode();
    assert_eq!(
        value(
            &text,
            "kmeta_api_requests_total{verb=\"create\",code=\"201\"}"
        ),
        Some(N as f64),
        "{text}"
    );
    assert_eq!(
        value(&text, "kmeta_api_requests_total{verb=\"get\",code=\"200\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "kmeta_api_requests_total{verb=\"list\",code=\"200\"}"
        ),
        Some(1.0),
        "{text}"
    );
    // 10 requests against a burst of 2: at most 8 waited; the 8 creates were issued at once, so
    // most of them had to wait (a token accrues only every 200 ms)
    let waits = value(&text, "kmeta_client_rate_limiter_wait_seconds_count").unwrap_or(0.0);
    assert!(
        waits >= (N - 2) as f64 / 2.0 && waits <= (N + 2 - 2) as f64,
        "waits {waits}\n{text}"
    );
    Ok(())
}

#[tokio::test]
async fn a_watch_is_one_request_and_disabled_limits_never_wait() -> anyhow::Result<()> {
    let server = kmeta_apiserver::TestServer::start().await?;
    let metrics = Arc::new(Metrics::new());
    let limits = RateLimit { qps: 0.0, burst: 1 };
    let client = client_for(&server, limits, metrics.clone()).await?;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");

    let watch = api.watch(&WatchParams::default(), "0").await?;
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("w{i}")))
            .await?;
    }
    // the watch stream delivers every event over the one request
    use futures::StreamExt as _;
    let mut watch = Box::pin(watch);
    let mut added = 0;
    tokio::time::timeout(Duration::from_secs(30), async {
        while added < 5 {
            match watch.next().await {
                Some(Ok(WatchEvent::Added(_))) => added += 1,
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(anyhow::Error::from(e)),
                None => anyhow::bail!("watch ended"),
            }
        }
        Ok(())
    })
    .await
    .context("watch events did not arrive")??;

    let text = metrics.encode();
    assert_eq!(
        value(
            &text,
            "kmeta_api_requests_total{verb=\"watch\",code=\"200\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "kmeta_api_requests_total{verb=\"create\",code=\"201\"}"
        ),
        Some(5.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "kmeta_client_rate_limiter_wait_seconds_count"),
        Some(0.0),
        "{text}"
    );
    Ok(())
}
