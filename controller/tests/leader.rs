//! Leader election between two instances against kmeta-apiserver over real HTTP.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use kmeta::coord::fence::{Fence, Fenced};
use kmeta::coord::leader::{self, LeaderConfig, LeaderError};
use kube::api::Api;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(30);

/// Short timings: lease 2 s, renew deadline 1.5 s, retry 0.2 s.
fn config(identity: &str) -> LeaderConfig {
    LeaderConfig {
        namespace: "default".into(),
        name: "kmeta-test".into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
        leading: Arc::new(AtomicBool::new(false)),
        metrics: None,
        fence: Fence::new(),
    }
}

/// What the instances' work observed.
#[derive(Default)]
struct Shared {
    /// Works running right now, and the most ever seen at once.
    running: AtomicUsize,
    max_running: AtomicUsize,
}

/// Marks the work stopped when dropped.
struct Stopped {
    shared: Arc<Shared>,
    working: Arc<AtomicBool>,
}

impl Drop for Stopped {
    fn drop(&mut self) {
        self.working.store(false, Ordering::SeqCst);
        self.shared.running.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Instance {
    name: &'static str,
    cfg: LeaderConfig,
    shutdown: CancellationToken,
    /// Set while this instance's work runs.
    working: Arc<AtomicBool>,
    task: JoinHandle<Result<(), LeaderError>>,
}

fn start(client: kube::Client, name: &'static str, shared: Arc<Shared>) -> Instance {
    start_draining(client, name, shared, Duration::ZERO)
}

/// An instance whose work takes `drain` to return once cancelled (in-flight syncs finishing).
fn start_draining(
    client: kube::Client,
    name: &'static str,
    shared: Arc<Shared>,
    drain: Duration,
) -> Instance {
    let cfg = config(name);
    let shutdown = CancellationToken::new();
    let working = Arc::new(AtomicBool::new(false));
    let task = {
        let (cfg, shutdown, working) = (cfg.clone(), shutdown.clone(), working.clone());
        tokio::spawn(async move {
            leader::run_elected(client, cfg, shutdown, move |stop: CancellationToken| {
                let working = working.clone();
                async move {
                    let now = shared.running.fetch_add(1, Ordering::SeqCst) + 1;
                    shared.max_running.fetch_max(now, Ordering::SeqCst);
                    working.store(true, Ordering::SeqCst);
                    // also runs when the work is dropped (its task aborted)
                    let _stopped = Stopped { shared, working };
                    stop.cancelled().await;
                    tokio::time::sleep(drain).await;
                }
            })
            .await
        })
    };
    Instance {
        name,
        cfg,
        shutdown,
        working,
        task,
    }
}

/// Polls `cond` every 20 ms until it holds or `DEADLINE` passes.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !cond() {
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn holder(api: &Api<Lease>) -> anyhow::Result<Option<String>> {
    let lease = api.get_opt("kmeta-test").await?;
    Ok(lease.as_ref().and_then(leader::holder).map(str::to_string))
}

/// Waits until one of the two works, and returns (leader, follower).
async fn elect(a: Instance, b: Instance) -> anyhow::Result<(Instance, Instance)> {
    eventually("a leader", || {
        a.working.load(Ordering::SeqCst) || b.working.load(Ordering::SeqCst)
    })
    .await?;
    Ok(if a.working.load(Ordering::SeqCst) {
        (a, b)
    } else {
        (b, a)
    })
}

#[tokio::test]
async fn released_lease_fails_over_to_the_standby() -> anyhow::Result<()> {
    let server = kmeta_apiserver::TestServer::start().await?;
    let api: Api<Lease> = Api::namespaced(server.client(), "default");
    let shared = Arc::new(Shared::default());
    let a = start(server.client(), "a", shared.clone());
    let b = start(server.client(), "b", shared.clone());

    let (leader, standby) = elect(a, b).await?;
    assert!(leader.cfg.leading.load(Ordering::SeqCst));
    assert_eq!(holder(&api).await?.as_deref(), Some(leader.name));
    // the standby keeps waiting while the leader renews (several renewals, well past the lease
    // duration)
    let renewals_before = server.counters().count("update", "leases");
    eventually("several renewals", || {
        server.counters().count("update", "leases") >= renewals_before + 12
    })
    .await?;
    assert!(!standby.working.load(Ordering::SeqCst));
    assert!(!standby.cfg.leading.load(Ordering::SeqCst));

    // graceful shutdown: the leader stops its work, releases, returns Ok; the standby takes over
    leader.shutdown.cancel();
    tokio::time::timeout(DEADLINE, leader.task)
        .await
        .context("leader did not stop")??
        .context("leader returned an error")?;
    assert!(!leader.working.load(Ordering::SeqCst));
    assert!(!leader.cfg.leading.load(Ordering::SeqCst));
    eventually("the standby to lead", || {
        standby.working.load(Ordering::SeqCst)
    })
    .await?;
    assert_eq!(holder(&api).await?.as_deref(), Some(standby.name));
    let lease = api.get("kmeta-test").await?;
    let spec = lease.spec.context("lease spec")?;
    assert_eq!(spec.lease_transitions, Some(1));
    assert_eq!(spec.lease_duration_seconds, Some(2));

    // the new leader shuts down too and leaves the lease free
    standby.shutdown.cancel();
    tokio::time::timeout(DEADLINE, standby.task)
        .await
        .context("standby did not stop")???;
    assert_eq!(holder(&api).await?, None);
    assert_eq!(shared.max_running.load(Ordering::SeqCst), 1);
    assert_eq!(shared.running.load(Ordering::SeqCst), 0);
    Ok(())
}

#[tokio::test]
async fn crashed_leader_is_replaced_after_the_lease_expires() -> anyhow::Result<()> {
    let server = kmeta_apiserver::TestServer::start().await?;
    let api: Api<Lease> = Api::namespaced(server.client(), "default");
    let shared = Arc::new(Shared::default());
    let a = start(server.client(), "a", shared.clone());
    let b = start(server.client(), "b", shared.clone());
    let (leader, standby) = elect(a, b).await?;

    // the leader dies without releasing: its task (and the work it polls) is dropped
    leader.task.abort();
    let _ = leader.task.await;
    assert!(!leader.working.load(Ordering::SeqCst));
    assert_eq!(shared.running.load(Ordering::SeqCst), 0);
    assert_eq!(holder(&api).await?.as_deref(), Some(leader.name));

    eventually("the standby to lead after expiry", || {
        standby.working.load(Ordering::SeqCst)
    })
    .await?;
    assert_eq!(holder(&api).await?.as_deref(), Some(standby.name));

    standby.shutdown.cancel();
    tokio::time::timeout(DEADLINE, standby.task)
        .await
        .context("standby did not stop")???;
    assert_eq!(holder(&api).await?, None);
    assert_eq!(shared.max_running.load(Ordering::SeqCst), 1);
    Ok(())
}

#[tokio::test]
async fn leader_that_cannot_renew_stops_its_work_and_fails() -> anyhow::Result<()> {
    let server = kmeta_apiserver::TestServer::start().await?;
    let shared = Arc::new(Shared::default());
    let a = start(server.client(), "a", shared.clone());
    eventually("a to lead", || a.working.load(Ordering::SeqCst)).await?;

    // every lease write fails from now on: the leader must give up within its renew deadline
    server.faults().inject(
        kmeta_apiserver::FaultSpec::error(500)
            .verb("update")
            .resource("leases"),
    );
    let result = tokio::time::timeout(DEADLINE, a.task)
        .await
        .context("leader did not give up")??;
    match result {
        Err(LeaderError::Lost { identity, .. }) => assert_eq!(identity, "a"),
        other => anyhow::bail!("expected a lost lease, got {other:?}"),
    }
    assert!(!a.working.load(Ordering::SeqCst));
    assert!(!a.cfg.leading.load(Ordering::SeqCst));
    assert_eq!(shared.running.load(Ordering::SeqCst), 0);
    Ok(())
}

#[tokio::test]
async fn shutdown_before_acquiring_returns_at_once() -> anyhow::Result<()> {
    let server = kmeta_apiserver::TestServer::start().await?;
    let shared = Arc::new(Shared::default());
    let a = start(server.client(), "a", shared.clone());
    eventually("a to lead", || a.working.load(Ordering::SeqCst)).await?;
    let b = start(server.client(), "b", shared.clone());
    // b is a follower (a renews); stopping it returns Ok without touching a's lease
    b.shutdown.cancel();
    tokio::time::timeout(DEADLINE, b.task)
        .await
        .context("follower did not stop")???;
    assert!(!b.working.load(Ordering::SeqCst));
    assert!(a.working.load(Ordering::SeqCst));
    a.shutdown.cancel();
    tokio::time::timeout(DEADLINE, a.task)
        .await
        .context("leader did not stop")???;
    Ok(())
}

#[tokio::test]
async fn leader_keeps_the_lease_while_its_work_drains() -> anyhow::Result<()> {
    let server = kmeta_apiserver::TestServer::start().await?;
    let api: Api<Lease> = Api::namespaced(server.client(), "default");
    let shared = Arc::new(Shared::default());
    // the work needs 3 s to stop, longer than the 2 s lease
    let drain = Duration::from_secs(3);
    let a = start_draining(server.client(), "a", shared.clone(), drain);
    let b = start_draining(server.client(), "b", shared.clone(), drain);
    let (leader, standby) = elect(a, b).await?;

    leader.shutdown.cancel();
    eventually("leadership to end", || {
        !leader.cfg.leading.load(Ordering::SeqCst)
    })
    .await?;
    // still working, still holding the lease
    assert!(leader.working.load(Ordering::SeqCst));
    tokio::time::timeout(DEADLINE, leader.task)
        .await
        .context("leader did not stop")??
        .context("leader returned an error")?;
    eventually("the standby to lead", || {
        standby.working.load(Ordering::SeqCst)
    })
    .await?;
    assert_eq!(holder(&api).await?.as_deref(), Some(standby.name));
    // never two at once, although the drain outlasted the lease duration
    assert_eq!(shared.max_running.load(Ordering::SeqCst), 1);
    standby.shutdown.cancel();
    tokio::time::timeout(DEADLINE, standby.task)
        .await
        .context("standby did not stop")???;
    Ok(())
}

#[tokio::test]
async fn lease_taken_by_another_holder_stops_the_leader() -> anyhow::Result<()> {
    let server = kmeta_apiserver::TestServer::start().await?;
    let api: Api<Lease> = Api::namespaced(server.client(), "default");
    let shared = Arc::new(Shared::default());
    let a = start(server.client(), "a", shared.clone());
    eventually("a to lead", || a.working.load(Ordering::SeqCst)).await?;

    // someone else writes itself into the lease (its write wins; a's next renewal conflicts)
    let mut lease = api.get("kmeta-test").await?;
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = Some("intruder".into());
    }
    api.replace("kmeta-test", &Default::default(), &lease)
        .await?;

    let result = tokio::time::timeout(DEADLINE, a.task)
        .await
        .context("leader did not stop")??;
    match result {
        Err(LeaderError::Lost { reason, .. }) => {
            assert!(reason.contains("intruder"), "{reason}")
        }
        other => anyhow::bail!("expected a lost lease, got {other:?}"),
    }
    assert!(!a.working.load(Ordering::SeqCst));
    // a lost leader does not touch the lease
    assert_eq!(holder(&api).await?.as_deref(), Some("intruder"));
    Ok(())
}

/// Writes ConfigMaps through a client fenced by `fence` every 20 ms until dropped, as a sync
/// that ignores cancellation would; counts the writes sent and the writes the fence refused.
#[derive(Default)]
struct Writes {
    ok: AtomicUsize,
    fenced: AtomicUsize,
    other: AtomicUsize,
}

fn keep_writing(client: kube::Client, writes: Arc<Writes>) -> JoinHandle<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    tokio::spawn(async move {
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        for i in 0.. {
            let mut cm = ConfigMap::default();
            cm.metadata.name = Some(format!("w-{i}"));
            match api.create(&Default::default(), &cm).await {
                Ok(_) => writes.ok.fetch_add(1, Ordering::SeqCst),
                Err(kube::Error::Service(e)) if e.is::<Fenced>() => {
                    writes.fenced.fetch_add(1, Ordering::SeqCst)
                }
                Err(_) => writes.other.fetch_add(1, Ordering::SeqCst),
            };
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// A leader that cannot renew loses the Lease with work that never stops (a sync stuck in a hook
/// call, a task outside the work): `run_elected` returns at once instead of waiting for it, and
/// from then on the fenced client sends no write at all.
#[tokio::test]
async fn a_leader_that_lost_the_lease_sends_no_write() -> anyhow::Result<()> {
    let server = kmeta_apiserver::TestServer::start().await?;
    let cfg = config("a");
    let kube_config =
        kube::Config::from_custom_kubeconfig(server.kubeconfig(), &Default::default()).await?;
    let metrics = Arc::new(kmeta::ops::Metrics::default());
    let limits = kmeta::ops::ratelimit::RateLimit { qps: 0.0, burst: 0 };
    let fenced =
        kmeta::coord::client::build_fenced(kube_config, limits, metrics, cfg.fence.clone())?;
    let writes = Arc::new(Writes::default());
    let writer = keep_writing(fenced, writes.clone());
    let task = {
        let (cfg, leading) = (cfg.clone(), cfg.leading.clone());
        tokio::spawn(leader::run_elected(
            server.client(),
            cfg,
            CancellationToken::new(),
            move |_stop: CancellationToken| async move {
                let _ = leading; // the work ignores its token
                std::future::pending::<()>().await;
            },
        ))
    };
    eventually("writes while leading", || {
        writes.ok.load(Ordering::SeqCst) >= 3
    })
    .await?;
    assert_eq!(writes.other.load(Ordering::SeqCst), 0);

    server.faults().inject(
        kmeta_apiserver::FaultSpec::error(500)
            .verb("update")
            .resource("leases"),
    );
    let result = tokio::time::timeout(DEADLINE, task)
        .await
        .context("the lost leader waited for work that never returns")??;
    assert!(
        matches!(result, Err(LeaderError::Lost { .. })),
        "{result:?}"
    );
    let sent = server.counters().writes_to("configmaps");
    let fenced_before = writes.fenced.load(Ordering::SeqCst);
    eventually("ten more write attempts", || {
        writes.fenced.load(Ordering::SeqCst) >= fenced_before + 10
    })
    .await?;
    writer.abort();
    assert_eq!(
        server.counters().writes_to("configmaps"),
        sent,
        "a write reached the API server after the Lease was lost"
    );
    assert_eq!(writes.other.load(Ordering::SeqCst), 0);
    Ok(())
}

/// Found by the chaos soak (seed 3604): a write that passed the fence and was answered 503 was
/// sent again by kube's built-in retry after its backoff — below the fence, so without passing
/// it again. A leader stopped (SIGSTOP) during that backoff wrote once resumed, while another
/// replica held the Lease. Every attempt must pass the fence.
#[tokio::test]
async fn a_write_retried_after_the_fence_closed_is_refused() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kmeta::ops::ratelimit::RateLimit;
    let server = kmeta_apiserver::TestServer::start().await?;
    let fence = Fence::new();
    fence.open_until(tokio::time::Instant::now() + Duration::from_secs(60));
    let config = kube::Config::new(server.url().parse()?);
    let client = kmeta::coord::client::build_fenced(
        config,
        RateLimit { qps: 0.0, burst: 0 },
        Arc::new(kmeta::ops::metrics::Metrics::default()),
        fence.clone(),
    )?;
    // the first attempt is answered 503 (Retry-After 1 s), as under load
    server.faults().inject(
        kmeta_apiserver::FaultSpec::error(503)
            .verb("create")
            .resource("configmaps")
            .times(1),
    );
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("late".into());
    let create = tokio::spawn(async move { cms.create(&Default::default(), &cm).await });
    eventually("the first attempt answered 503", || {
        server.counters().get("create", "configmaps", 503) == 1
    })
    .await?;
    // the Lease is lost during the retry's backoff
    fence.close();
    let result = tokio::time::timeout(DEADLINE, create).await??;
    assert!(result.is_err(), "the retry was sent: {result:?}");
    assert_eq!(
        server.counters().get("create", "configmaps", 201),
        0,
        "a write reached the server after the fence closed"
    );
    Ok(())
}
