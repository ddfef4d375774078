//! The sharded mode (`KMETA_SOAK_SHARDING=1`): the parents' namespaces, the bucket Leases
//! created released before any replica starts, and the per-bucket self-test of the Lease check.

use kmeta::coord::shard::{Bucket, ShardHash, bucket_by};
use kmeta_apiserver::TestServer;
use kmeta_tests::{ar, obj};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;

use super::Soak;
use super::checks::LeaseCheck;
use super::replicas::SHARD_PREFIX;

/// Buckets (`--shard-buckets`).
pub(crate) const BUCKETS: u32 = 8;
/// The parents' namespaces, `soak-0` … `soak-29` (`0-soak` … `29-soak` with
/// `KMETA_SOAK_SHARD_WATCH=server`, whose plain FNV-1a would put `soak-*` in 2 buckets).
pub(crate) const NAMESPACES: usize = 30;

/// `KMETA_SOAK_SHARD_WATCH` (`client`, the default, or `server`): the replicas' `--shard-watch`.
pub(crate) fn watch_mode() -> String {
    std::env::var("KMETA_SOAK_SHARD_WATCH").unwrap_or_else(|_| "client".into())
}

/// The bucket of `namespace` as the replicas place it.
pub(crate) fn bucket_of(namespace: &str, buckets: u32) -> Bucket {
    let hash = match watch_mode().as_str() {
        "server" => ShardHash::Fnv1a,
        _ => ShardHash::Mixed,
    };
    bucket_by(namespace, buckets, hash)
}
/// The sharded replicas.
pub(crate) const REPLICAS: &[&str] = &["kmeta-a", "kmeta-b", "kmeta-c"];

pub(crate) fn namespace(k: usize) -> String {
    match watch_mode().as_str() {
        "server" => format!("{}-soak", k % NAMESPACES),
        _ => format!("soak-{}", k % NAMESPACES),
    }
}

async fn create_namespace(server: &TestServer, name: &str) -> anyhow::Result<()> {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    Api::<DynamicObject>::all_with(server.client(), &ar("v1", "Namespace", "namespaces"))
        .create(&PostParams::default(), &obj(ns)?)
        .await?;
    Ok(())
}

/// The namespaces, and every bucket Lease, released: each acquisition is then an update, which
/// the write log names (a create names its object only in its body).
pub(crate) async fn prepare(server: &TestServer) -> anyhow::Result<()> {
    for k in 0..NAMESPACES {
        create_namespace(server, &namespace(k)).await?;
    }
    let leases = Api::<DynamicObject>::namespaced_with(
        server.client(),
        "default",
        &ar("coordination.k8s.io/v1", "Lease", "leases"),
    );
    for b in Bucket::all(BUCKETS) {
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": format!("{SHARD_PREFIX}-{b}"),
                "labels": {"kmeta.dev/shard-set": SHARD_PREFIX, "kmeta.dev/shard-role": "bucket"},
                "annotations": {"kmeta.dev/shard-buckets": BUCKETS.to_string(),
                    "kmeta.dev/shard-hash": match watch_mode().as_str() {
                        "server" => "fnv-1a", _ => "mixed" }}},
            "spec": {"leaseDurationSeconds": 1}});
        leases.create(&PostParams::default(), &obj(lease)?).await?;
    }
    let spread: std::collections::BTreeSet<String> = (0..NAMESPACES)
        .map(|k| bucket_of(&namespace(k), BUCKETS).to_string())
        .collect();
    println!(
        "soak: {NAMESPACES} namespaces in buckets {spread:?} (of {BUCKETS}); bucket Leases created released"
    );
    Ok(())
}

/// A namespace of bucket `b`: one of the parents', else a new one.
async fn namespace_of(server: &TestServer, b: Bucket) -> anyhow::Result<String> {
    if let Some(ns) = (0..NAMESPACES)
        .map(namespace)
        .find(|ns| bucket_of(ns, BUCKETS) == b)
    {
        return Ok(ns);
    }
    let ns = (0..10_000)
        .map(|k| format!("soak-self-test-{k}"))
        .find(|ns| bucket_of(ns, BUCKETS) == b)
        .ok_or_else(|| anyhow::anyhow!("no namespace of bucket {b} found"))?;
    create_namespace(server, &ns).await?;
    Ok(ns)
}

/// The check can fail, bucket by bucket: after the replicas stopped, in a namespace of each
/// bucket, a replica that was not the last to write that bucket's Lease (it may hold others)
/// writes a ConfigMap; each such write, and nothing else, must be reported.
pub(crate) async fn self_test(soak: &Soak, lease: &mut LeaseCheck) -> anyhow::Result<()> {
    let mut expected = Vec::new();
    for b in Bucket::all(BUCKETS).filter(|b| *b != Bucket::Cluster) {
        let name = format!("{SHARD_PREFIX}-{b}");
        let last = lease.last_holder(&name).map(str::to_owned);
        let writer = REPLICAS
            .iter()
            .find(|r| last.as_deref() != Some(**r))
            .copied()
            .unwrap_or("kmeta-a");
        let ns = namespace_of(&soak.server, b).await?;
        let mut config = kube::Config::new(soak.server.url().parse()?);
        config.auth_info.token = soak.server.admin_token().map(|t| t.to_owned().into());
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_str(&format!("kmeta/self-test ({writer})"))?,
        ));
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("intruder-{b}")}});
        Api::<DynamicObject>::namespaced_with(
            kube::Client::try_from(config)?,
            &ns,
            &ar("v1", "ConfigMap", "configmaps"),
        )
        .create(&PostParams::default(), &obj(cm)?)
        .await?;
        expected.push(format!("by {writer} while Lease {name} was held by"));
    }
    let records = soak.server.write_log().since(lease.next_seq);
    let found = lease.feed(records, std::time::Duration::ZERO, true);
    let all_found = expected.iter().all(|e| found.iter().any(|f| f.contains(e)));
    anyhow::ensure!(
        found.len() == expected.len() && all_found,
        "the per-bucket Lease check's self-test: writes by non-holders {expected:?} gave {found:?}"
    );
    println!(
        "  self-test: the Lease check reports a write by a non-holder in each of the {} buckets, e.g. {}",
        expected.len(),
        found[0]
    );
    Ok(())
}
