//! The work clients under coordination: as [`crate::ops::client::build`], with every write
//! checked against the leader's write [`crate::coord::fence`] or, on a sharded replica, against
//! the shard bucket the write is made for, once its rate-limit wait is over.

use std::sync::Arc;

use crate::coord::fence::{Fence, FenceLayer};
use crate::coord::shard::Shards;
use crate::ops::metrics::Metrics;
use crate::ops::ratelimit::{RateLimit, RateLimitLayer};
use crate::runtime::kapi::with_user_agent;

/// As [`crate::ops::client::build`], with every write checked against `fence` once its rate-limit wait is over
/// (the fence is the innermost of kmeta's layers, so a write that waited for a token while the
/// Lease was lost is still refused), and at every attempt: kube's built-in retry of 429/503/504
/// sits below any layer added to its client, where a retry sent after a backoff (during which a
/// paused leader lost its Lease) would not pass the fence again, so it is turned off here and
/// the same policy runs above the fence instead (found by the chaos soak).
pub fn build_fenced(
    mut config: kube::Config,
    limits: RateLimit,
    metrics: Arc<Metrics>,
    fence: Fence,
) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    let builder = kube::client::ClientBuilder::try_from(with_user_agent(config))?;
    let retry = kube::client::retry::RetryPolicy::server_retry();
    Ok(builder
        .with_layer(&FenceLayer::new(fence, metrics.clone()))
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&tower::retry::RetryLayer::new(retry))
        .with_layer(&RateLimitLayer::new(limits, metrics))
        .build())
}

/// As [`build_fenced`] for a sharded replica (`--sharding`): every write is checked against the
/// bucket it is made for (`coord::shard::state`). The outermost layer copies the sending
/// task's write scope into the request (kube's buffer runs the inner layers in a task of its
/// own), the innermost checks it once the rate-limit wait is over, at every attempt.
pub fn build_sharded(
    mut config: kube::Config,
    limits: RateLimit,
    metrics: Arc<Metrics>,
    shards: Arc<Shards>,
) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    let builder = kube::client::ClientBuilder::try_from(with_user_agent(config))?;
    let retry = kube::client::retry::RetryPolicy::server_retry();
    Ok(builder
        .with_layer(&FenceLayer::new(shards, metrics.clone()))
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&tower::retry::RetryLayer::new(retry))
        .with_layer(&RateLimitLayer::new(limits, metrics))
        .build())
}

/// Why a Lease loop's own runtime and client could not be made ([`lease_runtime`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LeaseRuntimeError {
    /// The current-thread runtime could not be built.
    #[error("building the runtime: {0}")]
    Runtime(#[from] std::io::Error),
    /// The Lease client could not be made from the kubeconfig.
    #[error("building the Lease client: {0}")]
    Client(#[from] kube::Error),
}

/// A current-thread runtime for a Lease loop on a thread of its own, and the loop's client made
/// on it from `config` (its buffer task runs on that runtime, not the work's):
/// `docs/design/lease-threads.md`.
pub(crate) fn lease_runtime(
    config: kube::Config,
    limits: RateLimit,
    metrics: Arc<Metrics>,
) -> Result<(tokio::runtime::Runtime, kube::Client), LeaseRuntimeError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = {
        let _inside = runtime.enter();
        crate::ops::client::build(config, limits, metrics)?
    };
    Ok((runtime, client))
}

#[cfg(all(test, feature = "embedded-apiserver"))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::PostParams;

    /// A sync's write scope is a task-local, and kube's buffers call the layers in a task of
    /// their own: the sharded fence must still see the scope of the task awaiting the write.
    #[tokio::test]
    async fn a_sharded_write_is_checked_in_the_scope_of_the_sync_that_awaits_it()
    -> anyhow::Result<()> {
        use crate::coord::shard::state::in_scope;
        use crate::coord::shard::{ShardHash, ShardKey};
        use tokio::time::{Duration, Instant};

        let server = kmeta_apiserver::TestServer::start().await?;
        let config = kube::Config::new(server.url().parse()?);
        let limits = RateLimit { qps: 0.0, burst: 0 };
        let metrics = Arc::new(Metrics::default());
        // by uid, a namespaced write outside a scope names no bucket: only the scope admits it
        let shards = Shards::keyed(8, ShardHash::Mixed, ShardKey::Uid, None);
        let client = build_sharded(config, limits, metrics, shards.clone())?;
        let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
        let cm = |name: &str| ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let pp = PostParams::default();
        let uid = "5b0c7e52-parent";
        let b = shards.bucket_of_parent("default", Some(uid)).unwrap();
        shards.renewed(b, Instant::now() + Duration::from_secs(60), true);
        assert!(configmaps.create(&pp, &cm("outside")).await.is_err());
        let claim = shards.begin("default", Some(uid)).unwrap();
        in_scope(claim.scope(), configmaps.create(&pp, &cm("inside"))).await?;
        // lost and regained while the sync ran: its writes are refused (a new epoch)
        shards.give_up(b);
        shards.renewed(b, Instant::now() + Duration::from_secs(60), true);
        let e = in_scope(claim.scope(), configmaps.create(&pp, &cm("stale")))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("shard bucket"), "{e}");
        let names: Vec<String> = configmaps
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect();
        assert_eq!(names, vec!["inside".to_owned()]);
        server.shutdown().await;
        Ok(())
    }

    #[tokio::test]
    async fn an_impersonated_request_is_made_as_the_user_through_the_base_clients_fence()
    -> anyhow::Result<()> {
        let server = kmeta_apiserver::TestServer::builder()
            .rbac(true)
            .start()
            .await?;
        let mut config = kube::Config::new(server.url().parse()?);
        config.auth_info.token = server.admin_token().map(|t| t.to_owned().into());
        let limits = RateLimit { qps: 0.0, burst: 0 };
        let metrics = Arc::new(Metrics::default());
        let fence = Fence::new();
        let base = build_fenced(config, limits, metrics, fence.clone())?;
        let writer = crate::ops::client::impersonating(&base, "system:serviceaccount:team:writer")?;
        let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(writer.clone(), "default");
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some("c".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        // a write as the ServiceAccount still passes the base client's fence: closed, refused
        // before it reaches the server
        let e = configmaps
            .create(&PostParams::default(), &cm)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("leader lease"), "{e}");
        // open: requests reach the server, which sees the ServiceAccount (not the superuser)
        fence.open_until(tokio::time::Instant::now() + std::time::Duration::from_secs(60));
        let review: serde_json::Value = writer
            .request(
                http::Request::post("/apis/authorization.k8s.io/v1/selfsubjectrulesreviews").body(
                    serde_json::to_vec(&serde_json::json!({
                            "apiVersion": "authorization.k8s.io/v1",
                            "kind": "SelfSubjectRulesReview",
                            "spec": {"namespace": "team"}}))?,
                )?,
            )
            .await?;
        // the ServiceAccount's rules (system:basic-user's reviews), not the superuser's `*`
        let rules = review["status"]["resourceRules"].to_string();
        assert!(rules.contains("selfsubjectrulesreviews"), "{review}");
        assert!(!rules.contains("\"*\""), "{review}");
        // and refuses its write
        let e = configmaps
            .create(&PostParams::default(), &cm)
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("\"system:serviceaccount:team:writer\" cannot create"),
            "{e}"
        );
        assert!(crate::ops::client::impersonating(&base, "bad\nname").is_err());
        Ok(())
    }
}
