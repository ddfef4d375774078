//! The `kmeta` binary: `run` against kmeta-apiserver over real HTTP (endpoints, readiness,
//! a CompositeController end to end, graceful SIGTERM), flag errors, `version`, `--help`.

use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kmeta_apiserver::TestServer;

const KMETA: &str = env!("CARGO_BIN_EXE_kmeta");
use crate::support;
use support::{TIMEOUT, wait_for};

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Kills the child if a test fails before it exits.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn http_get(url: &str) -> Option<(u16, String)> {
    let r = reqwest::get(url).await.ok()?;
    let code = r.status().as_u16();
    Some((code, r.text().await.ok()?))
}

/// Polls without blocking the runtime: the API server runs on this test's runtime.
async fn wait_exit(child: &mut Child) -> anyhow::Result<std::process::ExitStatus> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() > deadline {
            bail!("kmeta did not exit");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn run_serves_endpoints_reconciles_and_stops_on_sigterm() -> anyhow::Result<()> {
    let (server, dir, kubeconfig) = server_with_kmeta_crds().await?;
    let (metrics, health) = (free_port()?, free_port()?);
    let log_path = dir.path().join("kmeta.log");
    let mut proc = Proc(
        Command::new(KMETA)
            .args(["run", "--kubeconfig"])
            .arg(&kubeconfig)
            .arg(format!("--metrics-address=127.0.0.1:{metrics}"))
            .arg(format!("--health-probe-bind-address=127.0.0.1:{health}"))
            .args([
                "--discovery-interval=1s",
                "--log-format=json",
                "--log-level=info",
            ])
            .stdout(Stdio::null())
            // A file, not a pipe: nobody reads a pipe while the test runs, and a full pipe would
            // block the process's logging.
            .stderr(std::fs::File::create(&log_path)?)
            .spawn()?,
    );
    let healthz = format!("http://127.0.0.1:{health}/healthz");
    wait_for("/healthz", || async {
        http_get(&healthz).await.is_some_and(|(c, _)| c == 200)
    })
    .await?;
    let readyz = format!("http://127.0.0.1:{health}/readyz?verbose");
    wait_for("/readyz", || async {
        http_get(&readyz).await.is_some_and(|(c, _)| c == 200)
    })
    .await?;
    let (_, text) = http_get(&readyz).await.context("readyz")?;
    assert!(text.contains("[+]informer-sync ok"), "{text}");

    let (code, body) = http_get(&format!("http://127.0.0.1:{metrics}/metrics"))
        .await
        .context("metrics")?;
    assert_eq!(code, 200);
    // Every API request went through the rate-limited, instrumented client.
    assert!(
        body.contains("kmeta_api_requests_total{verb=\"list\",code=\"200\"}")
            || body.contains("kmeta_api_requests_total{code=\"200\",verb=\"list\"}"),
        "{body}"
    );
    assert!(
        !body.contains("# EOF"),
        "without an Accept for OpenMetrics, text format 0.0.4"
    );

    // A CompositeController reconciles through the binary's rate-limited client.
    reconcile_one(&server).await?;

    // SIGTERM: readiness may flip, then the process exits 0.
    sigterm(&proc.0)?;
    let status = wait_exit(&mut proc.0).await;
    let stderr = std::fs::read_to_string(&log_path)?;
    let status = status.with_context(|| format!("logs:\n{stderr}"))?;
    assert!(status.success(), "exit {status}; logs:\n{stderr}");
    // JSON logs, one object per line.
    let first = stderr.lines().next().context("no logs")?;
    let v: serde_json::Value = serde_json::from_str(first).context(first.to_owned())?;
    assert!(v.get("level").is_some(), "{first}");
    assert!(stderr.contains("shutting down"), "{stderr}");
    server.shutdown().await;
    Ok(())
}

/// A sync hook on 127.0.0.1:0 answering one ConfigMap child per parent.
/// An API server with kmeta's CRDs installed, and a kubeconfig for it in a temporary directory
/// (kept as long as the returned `TempDir`).
async fn server_with_kmeta_crds()
-> anyhow::Result<(TestServer, tempfile::TempDir, std::path::PathBuf)> {
    let server = TestServer::start().await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig)?;
    kmeta::manifest::install_crds(&server.client()).await?;
    Ok((server, dir, kubeconfig))
}

/// Serves `app` on a free local port; returns its `/sync` URL.
async fn serve_hook(app: axum::Router) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/sync", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

/// A sync hook that wants `per_parent` ConfigMaps `<parent>-<i>` per parent.
async fn many_children_hook(per_parent: usize) -> anyhow::Result<String> {
    use axum::Json;
    use serde_json::{Value, json};
    let app = axum::Router::new().route(
        "/sync",
        axum::routing::post(move |Json(req): Json<Value>| async move {
            let name = req["parent"]["metadata"]["name"]
                .as_str()
                .unwrap_or("x")
                .to_owned();
            let children: Vec<Value> = (0..per_parent)
                .map(|i| {
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": format!("{name}-{i}")}})
                })
                .collect();
            Json(json!({"status": {}, "children": children}))
        }),
    );
    serve_hook(app).await
}

async fn hook() -> anyhow::Result<String> {
    use axum::Json;
    use serde_json::{Value, json};
    let app = axum::Router::new().route(
        "/sync",
        axum::routing::post(|Json(req): Json<Value>| async move {
            let name = req["parent"]["metadata"]["name"]
                .as_str()
                .unwrap_or("x")
                .to_owned();
            Json(json!({
                "status": {"seen": true},
                "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": name}, "data": {"from": "hook"}}]
            }))
        }),
    );
    serve_hook(app).await
}

/// A `notes` CRD and a CompositeController with ConfigMap children calling a local hook; returns
/// the (served) notes API in `default`.
async fn create_notes_controller(
    server: &TestServer,
    url: &str,
) -> anyhow::Result<kube::Api<kube::api::DynamicObject>> {
    use kube::api::{Api, DynamicObject, PostParams};
    use kube::discovery::ApiResource;
    use serde_json::json;
    let client = server.client();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "notes.run.example.com"},
        "spec": {"group": "run.example.com", "scope": "Namespaced",
                 "names": {"kind": "Note", "plural": "notes", "singular": "note"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object",
                                          "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    let cc = json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "notes"},
        "spec": {"generateSelector": true,
                 "parentResource": {"apiVersion": "run.example.com/v1", "resource": "notes"},
                 "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
                 "hooks": {"sync": {"webhook": {"url": url}}}}
    });
    let crds = ApiResource::erase::<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    >(&());
    let ccs = ApiResource {
        group: "metacontroller.k8s.io".into(),
        version: "v1alpha1".into(),
        api_version: "metacontroller.k8s.io/v1alpha1".into(),
        kind: "CompositeController".into(),
        plural: "compositecontrollers".into(),
    };
    let notes = ApiResource {
        group: "run.example.com".into(),
        version: "v1".into(),
        api_version: "run.example.com/v1".into(),
        kind: "Note".into(),
        plural: "notes".into(),
    };
    let pp = PostParams::default();
    Api::<DynamicObject>::all_with(client.clone(), &crds)
        .create(&pp, &serde_json::from_value(crd)?)
        .await?;
    Api::<DynamicObject>::all_with(client.clone(), &ccs)
        .create(&pp, &serde_json::from_value(cc)?)
        .await?;
    let notes: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &notes);
    // The CRD may take a moment to be served.
    wait_for("the Note resource to be served", || async {
        notes.list(&Default::default()).await.is_ok()
    })
    .await?;
    Ok(notes)
}

/// At trace level kmeta logs every hook request and response; a hook URL with a password
/// (`user:password@`) appears inside the request's controller object, and the log must show
/// neither that password nor the basic-auth header derived from it.
#[tokio::test]
async fn trace_logs_mask_a_password_in_the_hook_url() -> anyhow::Result<()> {
    const PASSWORD: &str = "tr4ce-hook-pass";
    let (server, dir, kubeconfig) = server_with_kmeta_crds().await?;
    let url = hook().await?;
    let with_userinfo = url.replacen("://", &format!("://kmeta:{PASSWORD}@"), 1);
    let log_path = dir.path().join("kmeta.log");
    let _proc = Proc(
        Command::new(KMETA)
            .args(["run", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--metrics-address=0", "--health-probe-bind-address=0"])
            .args(["--discovery-interval=1s", "--log-level=kmeta=trace,info"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path)?)
            .spawn()?,
    );
    let notes = create_notes_controller(&server, &with_userinfo).await?;
    let parent = serde_json::json!({"apiVersion": "run.example.com/v1", "kind": "Note",
                                    "metadata": {"name": "n1", "namespace": "default"}});
    notes
        .create(&Default::default(), &serde_json::from_value(parent)?)
        .await?;
    let logged = || std::fs::read_to_string(&log_path).unwrap_or_default();
    wait_for("the hook request and response in the trace log", || async {
        let text = logged();
        text.contains("hook request") && text.contains("hook response")
    })
    .await?;
    let text = logged();
    let request = text
        .lines()
        .find(|l| l.contains("hook request"))
        .context("no request line")?;
    assert!(
        request.contains("kmeta:<redacted>@127.0.0.1"),
        "the controller's URL is shown masked: {request}"
    );
    // the basic-auth header value an HTTP client derives from the userinfo
    let basic = "a21ldGE6dHI0Y2UtaG9vay1wYXNz";
    assert!(
        !text.contains(PASSWORD),
        "the log shows the password:\n{text}"
    );
    assert!(
        !text.contains(basic),
        "the log shows the basic-auth header:\n{text}"
    );
    server.shutdown().await;
    Ok(())
}

/// While a watch a controller reads has not finished its first list, `/readyz` fails and names
/// it; once it has, the instance is ready.
#[tokio::test]
async fn readyz_names_the_watch_it_waits_for() -> anyhow::Result<()> {
    let (server, _dir, kubeconfig) = server_with_kmeta_crds().await?;
    create_notes_controller(&server, &hook().await?).await?;
    // the child resource's initial list (a list, or the watch-list) is slow
    let slow = [Some("list"), Some("watch")].map(|verb| {
        server
            .faults()
            .add_latency(verb, Some("configmaps"), Duration::from_secs(4))
    });
    let health = free_port()?;
    let _proc = Proc(
        Command::new(KMETA)
            .args(["run", "--kubeconfig"])
            .arg(&kubeconfig)
            .arg("--metrics-address=0")
            .arg(format!("--health-probe-bind-address=127.0.0.1:{health}"))
            .args(["--discovery-interval=1s", "--log-level=warn"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let readyz = format!("http://127.0.0.1:{health}/readyz?verbose");
    wait_for("/readyz naming the configmaps watch", || async {
        http_get(&readyz).await.is_some_and(|(code, text)| {
            code == 503 && text.contains("waiting for watches: v1/configmaps")
        })
    })
    .await?;
    wait_for("/readyz ready once the list completed", || async {
        http_get(&readyz).await.is_some_and(|(code, _)| code == 200)
    })
    .await?;
    for id in slow {
        server.faults().remove(id);
    }
    server.shutdown().await;
    Ok(())
}

async fn reconcile_one(server: &TestServer) -> anyhow::Result<()> {
    use kube::api::{Api, PostParams};
    use serde_json::json;
    let client = server.client();
    let notes = create_notes_controller(server, &hook().await?).await?;
    let parent = json!({"apiVersion": "run.example.com/v1", "kind": "Note",
                        "metadata": {"name": "n1", "namespace": "default"}, "spec": {}});
    let pp = PostParams::default();
    notes.create(&pp, &serde_json::from_value(parent)?).await?;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "default");
    wait_for("the hook's ConfigMap child", || async {
        cms.get_opt("n1").await.ok().flatten().is_some_and(|cm| {
            cm.data.and_then(|d| d.get("from").cloned()).as_deref() == Some("hook")
        })
    })
    .await?;
    wait_for("the parent's status from the hook", || async {
        notes
            .get("n1")
            .await
            .is_ok_and(|n| n.data["status"]["seen"] == true)
    })
    .await
}

/// Sends SIGTERM to the child.
fn sigterm(child: &Child) -> anyhow::Result<()> {
    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status()?;
    anyhow::ensure!(killed.success(), "kill -TERM {pid}: {killed}");
    Ok(())
}

fn kmeta(args: &[&str]) -> anyhow::Result<Output> {
    Ok(Command::new(KMETA).args(args).output()?)
}

#[test]
fn bad_flags_fail_at_start_naming_the_flag() -> anyhow::Result<()> {
    let out = kmeta(&["run", "--apply-strategy=client-side"])?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--apply-strategy"), "{err}");
    let out = kmeta(&["run", "--discovery-interval=soon"])?;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--discovery-interval"));
    Ok(())
}

#[test]
fn version_and_help_show_defaults() -> anyhow::Result<()> {
    let out = kmeta(&["version"])?;
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("kmeta {}", env!("CARGO_PKG_VERSION"))
    );
    let out = kmeta(&["run", "--help"])?;
    let help = String::from_utf8_lossy(&out.stdout);
    for default in [
        "[default: 30s]",
        "[default: 30m]",
        "[default: 5]",
        "[default: 10]",
        "[default: :9999]",
        "[default: :8081]",
        "[default: metacontroller]",
        "[default: dynamic-apply]",
        "[default: 25]",
    ] {
        assert!(help.contains(default), "missing {default} in:\n{help}");
    }
    // readable defaults, and every accepted flag listed
    assert!(!help.contains("[default: \"\"]"), "{help}");
    assert!(
        help.contains("[default: 1/300, one per 5 minutes]"),
        "{help}"
    );
    for flag in [
        "--zap-log-level",
        "--zap-encoder",
        "--zap-devel",
        "--zap-time-encoding",
    ] {
        assert!(help.contains(flag), "{flag} not listed:\n{help}");
    }
    Ok(())
}

/// Shell completions for bash, zsh and fish name the subcommands.
#[test]
fn completion_scripts_name_the_subcommands() -> anyhow::Result<()> {
    for shell in ["bash", "zsh", "fish"] {
        let out = kmeta(&["completion", shell])?;
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        for sub in ["run", "dev", "rbac", "crds"] {
            assert!(script.contains(sub), "{shell} script lacks {sub}");
        }
    }
    let out = kmeta(&["completion", "tcsh"])?;
    assert!(!out.status.success());
    Ok(())
}

/// One line per error: what, where, the cause once.
#[test]
fn cli_errors_name_what_and_where_once() -> anyhow::Result<()> {
    let enoent = "No such file or directory (os error 2)";
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = taken.local_addr()?.port().to_string();
    let dir = tempfile::tempdir()?;
    let bad_yaml = dir.path().join("bad.yaml");
    std::fs::write(
        &bad_yaml,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x\n",
    )?;
    let bad_yaml = bad_yaml.display().to_string();
    let kc = dir.path().join("kc").display().to_string();
    for (args, want) in [
        (
            &["run", "--kubeconfig", "/nonexistent/kc"][..],
            format!(
                "error: loading cluster configuration: reading kubeconfig /nonexistent/kc: {enoent}"
            ),
        ),
        (
            &["dev", "-f", "/nonexistent/dir/"][..],
            format!("error: reading /nonexistent/dir/: {enoent}"),
        ),
        (
            &["rbac", "-f", "/nonexistent.yaml"][..],
            format!("error: reading /nonexistent.yaml: {enoent}"),
        ),
        // a YAML syntax error: one line, no `error:` twice, no source snippet
        (
            &["rbac", "-f", &bad_yaml][..],
            format!("error: {bad_yaml}: unclosed bracket '{{' at line 3, column 11"),
        ),
        // a taken port is named
        (
            &["dev", "--port", &port, "--kubeconfig-out", &kc][..],
            format!(
                "error: starting the API server on 127.0.0.1:{port}: \
                 Address already in use (os error 98)"
            ),
        ),
    ] {
        let out = kmeta(args)?;
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end(), want, "{args:?}");
    }
    Ok(())
}

/// Starts `kmeta run --leader-election` against `kubeconfig`; returns the process and its health
/// port.
fn start_candidate(
    kubeconfig: &std::path::Path,
    log: &std::path::Path,
    name: &str,
) -> anyhow::Result<(Proc, u16, u16)> {
    start_candidate_with(kubeconfig, log, name, &[])
}

/// Short leader-election timings: a Lease of 3 s, renewed every 0.3 s, given up after 2 s
/// without renewal (the defaults: 15 s, 2 s, 10 s). For a scenario that waits for a dead
/// leader's Lease to expire; the Lease, not its length, is what it is about.
const SHORT_LEASE: [&str; 3] = [
    "--leader-election-lease-duration=3s",
    "--leader-election-renew-deadline=2s",
    "--leader-election-retry-period=300ms",
];

/// [`start_candidate`] with `extra` flags.
fn start_candidate_with(
    kubeconfig: &std::path::Path,
    log: &std::path::Path,
    name: &str,
    extra: &[&str],
) -> anyhow::Result<(Proc, u16, u16)> {
    let (health, metrics) = (free_port()?, free_port()?);
    let child = Command::new(KMETA)
        .args(["run", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--leader-election", "--leader-election-namespace=default"])
        .args(extra)
        .arg(format!("--health-probe-bind-address=127.0.0.1:{health}"))
        .arg(format!("--metrics-address=127.0.0.1:{metrics}"))
        .env("POD_NAME", name)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log)?)
        .spawn()?;
    Ok((Proc(child), health, metrics))
}

async fn leading(health: u16) -> Option<bool> {
    let (_, text) = http_get(&format!("http://127.0.0.1:{health}/readyz?verbose")).await?;
    Some(text.contains("leader-election leading"))
}

#[tokio::test]
async fn two_instances_one_leads_and_the_other_takes_over_on_sigterm() -> anyhow::Result<()> {
    use k8s_openapi::api::coordination::v1::Lease;
    let (server, dir, kubeconfig) = server_with_kmeta_crds().await?;
    let (mut a, ha, ma) = start_candidate(&kubeconfig, &dir.path().join("a.log"), "kmeta-a")?;
    let (mut b, hb, mb) = start_candidate(&kubeconfig, &dir.path().join("b.log"), "kmeta-b")?;
    let leases: kube::Api<Lease> = kube::Api::namespaced(server.client(), "default");
    let holder = || lease_holder(&leases);
    wait_for("a leader", || async { holder().await.is_some() }).await?;
    wait_for("both instances to answer /readyz", || async {
        leading(ha).await.is_some() && leading(hb).await.is_some()
    })
    .await?;
    let first = holder().await.context("holder")?;
    let (leader, standby, standby_health, standby_name) = if first == "kmeta-a" {
        (&mut a, &mut b, hb, "kmeta-b")
    } else {
        (&mut b, &mut a, ha, "kmeta-a")
    };
    let (leader_metrics, standby_metrics) = if first == "kmeta-a" {
        (ma, mb)
    } else {
        (mb, ma)
    };
    let status = |port: u16| async move {
        http_get(&format!("http://127.0.0.1:{port}/metrics"))
            .await
            .map(|(_, body)| body)
            .unwrap_or_default()
    };
    let series = "kmeta_leader_election_status{name=\"metacontroller\"}";
    // the gauge is set once each instance's election loop runs, which may be just after /readyz
    // answers
    wait_for("the leader's gauge at 1", || async {
        status(leader_metrics)
            .await
            .contains(&format!("{series} 1"))
    })
    .await?;
    wait_for("the standby's gauge at 0", || async {
        status(standby_metrics)
            .await
            .contains(&format!("{series} 0"))
    })
    .await?;
    // Exactly one leads; the standby is ready but not leading.
    assert_eq!(leading(standby_health).await, Some(false));
    let (code, _) = http_get(&format!("http://127.0.0.1:{standby_health}/readyz"))
        .await
        .context("standby readyz")?;
    assert_eq!(code, 200, "a standby is ready");

    sigterm(&leader.0)?;
    let status = wait_exit(&mut leader.0).await?;
    assert!(status.success(), "the leader exits 0 after releasing");
    wait_for("the standby to take over", || async {
        holder().await.as_deref() == Some(standby_name)
            && leading(standby_health).await == Some(true)
    })
    .await?;
    sigterm(&standby.0)?;
    assert!(wait_exit(&mut standby.0).await?.success());
    // the wording of Metacontroller v4.17.2's client-go (v0.36), which its `leader-election`
    // example greps for (`examples/leader-election/test.sh`: case-sensitive)
    for log in ["a.log", "b.log"] {
        let text = std::fs::read_to_string(dir.path().join(log))?;
        let line = |msg: &str| {
            text.lines()
                .any(|l| l.contains(msg) && l.contains("lock=default/metacontroller"))
        };
        assert!(
            line("Attempting to acquire leader lease..."),
            "{log}:\n{text}"
        );
        assert!(line("Successfully acquired lease"), "{log}:\n{text}");
    }
    server.shutdown().await;
    Ok(())
}

/// kill -9 of the leader while it creates children: the standby takes the Lease and its first
/// syncs wait for the child watch's list, so it creates only what is missing (no create answered
/// 409 AlreadyExists) and ends with every child.
#[tokio::test]
async fn takeover_after_kill_9_mid_create_creates_nothing_twice() -> anyhow::Result<()> {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::ConfigMap;
    const PARENTS: usize = 3;
    const PER_PARENT: usize = 20;
    let (server, dir, kubeconfig) = server_with_kmeta_crds().await?;
    let notes = create_notes_controller(&server, &many_children_hook(PER_PARENT).await?).await?;
    // creates take a while, so the leader is killed with some children made and some not
    server.faults().add_latency(
        Some("create"),
        Some("configmaps"),
        Duration::from_millis(200),
    );
    let log = |n: &str| dir.path().join(format!("{n}.log"));
    let (mut a, _, _) = start_candidate_with(&kubeconfig, &log("a"), "kmeta-a", &SHORT_LEASE)?;
    let (mut b, _, _) = start_candidate_with(&kubeconfig, &log("b"), "kmeta-b", &SHORT_LEASE)?;
    let leases: kube::Api<Lease> = kube::Api::namespaced(server.client(), "default");
    let holder = || lease_holder(&leases);
    wait_for("a leader", || async { holder().await.is_some() }).await?;
    for i in 0..PARENTS {
        let parent = serde_json::json!({"apiVersion": "run.example.com/v1", "kind": "Note",
            "metadata": {"name": format!("n{i}"), "namespace": "default"}, "spec": {}});
        notes
            .create(&Default::default(), &serde_json::from_value(parent)?)
            .await?;
    }
    let cms: kube::Api<ConfigMap> = kube::Api::namespaced(server.client(), "default");
    let count = || note_children(&cms);
    wait_for("some children created", || async { count().await >= 5 }).await?;
    let first = holder().await.context("holder")?;
    let (leader, standby_name) = if first == "kmeta-a" {
        (&mut a, "kmeta-b")
    } else {
        (&mut b, "kmeta-a")
    };
    leader.0.kill()?;
    let _ = leader.0.wait();
    let made = count().await;
    assert!(
        made < PARENTS * PER_PARENT,
        "killed after every child was made ({made})"
    );
    // the new leader's child list (or watch-list) is slow: its parent watch syncs first
    for verb in [Some("list"), Some("watch")] {
        server
            .faults()
            .add_latency(verb, Some("configmaps"), Duration::from_secs(2));
    }
    let before = server.counters();
    // the Lease (3 s) must expire before the standby takes over
    let deadline = Instant::now() + Duration::from_secs(60);
    while holder().await.as_deref() != Some(standby_name) || count().await < PARENTS * PER_PARENT {
        if Instant::now() > deadline {
            let (h, n) = (holder().await, count().await);
            bail!("standby did not take over and finish: holder {h:?}, {n} children");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let d = server.counters().since(&before);
    assert_eq!(
        d.get("create", "configmaps", 409),
        0,
        "creates answered 409 after the takeover"
    );
    assert!(
        d.get("create", "configmaps", 201) > 0,
        "the new leader created the missing children"
    );
    server.shutdown().await;
    Ok(())
}

async fn lease_holder(
    leases: &kube::Api<k8s_openapi::api::coordination::v1::Lease>,
) -> Option<String> {
    leases
        .get_opt("metacontroller")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

/// The notes' children (ConfigMaps named after their `n<i>` parent).
async fn note_children(cms: &kube::Api<k8s_openapi::api::core::v1::ConfigMap>) -> usize {
    let names = |l: kube::core::ObjectList<k8s_openapi::api::core::v1::ConfigMap>| {
        l.items
            .iter()
            .filter(|c| {
                c.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with('n'))
            })
            .count()
    };
    cms.list(&Default::default()).await.map(names).unwrap_or(0)
}

/// `/readyz` covers DecoratorControllers too: while a watch a DecoratorController reads has not
/// finished its first list, the instance is not ready and names it.
#[tokio::test]
async fn readyz_waits_for_decorator_watches() -> anyhow::Result<()> {
    use kube::api::{Api, DynamicObject, PostParams};
    use kube::discovery::ApiResource;
    let (server, _dir, kubeconfig) = server_with_kmeta_crds().await?;
    let dcs = ApiResource {
        group: "metacontroller.k8s.io".into(),
        version: "v1alpha1".into(),
        api_version: "metacontroller.k8s.io/v1alpha1".into(),
        kind: "DecoratorController".into(),
        plural: "decoratorcontrollers".into(),
    };
    let dc = serde_json::json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "services"},
        "spec": {"resources": [{"apiVersion": "v1", "resource": "services"}],
                 "hooks": {"sync": {"webhook": {"url": hook().await?}}}}
    });
    Api::<DynamicObject>::all_with(server.client(), &dcs)
        .create(&PostParams::default(), &serde_json::from_value(dc)?)
        .await?;
    // the target resource's initial list (a list, or the watch-list) is slow
    let slow = [Some("list"), Some("watch")].map(|verb| {
        server
            .faults()
            .add_latency(verb, Some("services"), Duration::from_secs(4))
    });
    let health = free_port()?;
    let _proc = Proc(
        Command::new(KMETA)
            .args(["run", "--kubeconfig"])
            .arg(&kubeconfig)
            .arg("--metrics-address=0")
            .arg(format!("--health-probe-bind-address=127.0.0.1:{health}"))
            .args(["--discovery-interval=1s", "--log-level=warn"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let readyz = format!("http://127.0.0.1:{health}/readyz?verbose");
    wait_for("/readyz naming the services watch", || async {
        http_get(&readyz).await.is_some_and(|(code, text)| {
            code == 503 && text.contains("waiting for watches: v1/services")
        })
    })
    .await?;
    wait_for("/readyz ready once the list completed", || async {
        http_get(&readyz).await.is_some_and(|(code, _)| code == 200)
    })
    .await?;
    for id in slow {
        server.faults().remove(id);
    }
    server.shutdown().await;
    Ok(())
}

/// `kmeta run --serve-kro`: the ResourceGraphDefinition CRD is installed, an RGD applied is
/// served (Active, its instance CRD and CompositeController made), and an instance gets its
/// child from the RGD's template through the CEL hook.
#[tokio::test]
async fn run_serve_kro_runs_a_resource_graph_definition() -> anyhow::Result<()> {
    let (server, dir, kubeconfig) = server_with_kmeta_crds().await?;
    let log_path = dir.path().join("kmeta.log");
    let mut proc = Proc(
        Command::new(KMETA)
            .args([
                "run",
                "--serve-kro",
                "--discovery-interval=1s",
                "--kubeconfig",
            ])
            .arg(&kubeconfig)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path)?)
            .spawn()?,
    );
    let client = server.client();
    create_hello_memo(&client).await?;
    let made = wait_for("the Memo's ConfigMap", || {
        memo_text_is(client.clone(), "hi")
    })
    .await;
    let logs = std::fs::read_to_string(&log_path)?;
    made.with_context(|| format!("logs:\n{logs}"))?;
    sigterm(&proc.0)?;
    wait_exit(&mut proc.0).await?;
    server.shutdown().await;
    Ok(())
}

/// Applies an RGD `notes` (kind `Memo`, one ConfigMap holding `spec.text`) once its CRD is
/// served, and waits until the Memo resource is; the Memos of namespace `default`.
pub(crate) async fn apply_memo_rgd(
    client: &kube::Client,
) -> anyhow::Result<kube::Api<kube::api::DynamicObject>> {
    use kube::api::{Api, DynamicObject, PostParams};
    use kube::discovery::ApiResource;
    use serde_json::json;
    let ar = |group: &str, version: &str, kind: &str, plural: &str| ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    };
    let rgds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ar(
            "kro.run",
            "v1alpha1",
            "ResourceGraphDefinition",
            "resourcegraphdefinitions",
        ),
    );
    wait_for("the ResourceGraphDefinition CRD", || async {
        rgds.list(&Default::default()).await.is_ok()
    })
    .await?;
    let rgd = json!({"apiVersion": "kro.run/v1alpha1", "kind": "ResourceGraphDefinition",
        "metadata": {"name": "notes"},
        "spec": {"schema": {"apiVersion": "v1alpha1", "kind": "Memo", "spec": {"text": "string"}},
            "resources": [{"id": "cm", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "${schema.metadata.name}-memo"},
                "data": {"text": "${schema.spec.text}"}}}]}});
    rgds.create(&PostParams::default(), &serde_json::from_value(rgd)?)
        .await?;
    let memos: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ar("kro.run", "v1alpha1", "Memo", "memos"),
    );
    wait_for("the Memo resource to be served", || async {
        memos.list(&Default::default()).await.is_ok()
    })
    .await?;
    Ok(memos)
}

/// Applies the `notes` RGD ([`apply_memo_rgd`]) and creates its Memo `default/hello` with
/// `spec.text: hi`.
async fn create_hello_memo(client: &kube::Client) -> anyhow::Result<()> {
    let memos = apply_memo_rgd(client).await?;
    let memo = serde_json::json!({"apiVersion": "kro.run/v1alpha1", "kind": "Memo",
        "metadata": {"name": "hello", "namespace": "default"}, "spec": {"text": "hi"}});
    memos
        .create(&Default::default(), &serde_json::from_value(memo)?)
        .await?;
    Ok(())
}

/// Whether the Memo `hello`'s ConfigMap holds `text: want`.
async fn memo_text_is(client: kube::Client, want: &str) -> bool {
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client, "default");
    let cm = cms.get_opt("hello-memo").await.ok().flatten();
    cm.and_then(|c| c.data)
        .is_some_and(|d| d.get("text").map(String::as_str) == Some(want))
}

/// The identity in a kmeta User-Agent, `kmeta/<version> (<identity>)`.
pub(crate) fn identity_of(user_agent: &str) -> Option<&str> {
    let rest = user_agent.strip_prefix("kmeta/")?;
    let open = rest.find(" (")?;
    rest[open + 2..].strip_suffix(')')
}

/// Who wrote the leader Lease `metacontroller`: the identities in the server's write log.
fn lease_writers(server: &TestServer) -> std::collections::BTreeSet<String> {
    server
        .write_log()
        .since(0)
        .iter()
        .filter(|w| w.resource == "leases" && w.code < 300)
        .filter(|w| w.name.as_deref() == Some("metacontroller"))
        .filter_map(|w| identity_of(&w.user_agent).map(str::to_owned))
        .collect()
}

/// Who wrote ResourceGraphDefinitions, CRDs and CompositeControllers (what serving RGDs
/// writes): the identities in the server's write log.
pub(crate) fn rgd_writers(server: &TestServer) -> std::collections::BTreeSet<String> {
    let served = [
        "resourcegraphdefinitions",
        "resourcegraphdefinitions/status",
        "customresourcedefinitions",
        "compositecontrollers",
    ];
    server
        .write_log()
        .since(0)
        .iter()
        .filter(|w| served.contains(&w.resource.as_str()))
        .filter_map(|w| identity_of(&w.user_agent).map(str::to_owned))
        .collect()
}

/// `kmeta run --serve-kro --leader-election`, two candidates: only the leader serves RGDs
/// (every write of the RGD, its CRD and its CompositeController is by a holder of the Lease,
/// the standby writes none), and after
/// the leader stops the standby takes over serving: an edit of the RGD reaches the instance's
/// child, written by the new leader.
#[tokio::test]
async fn serve_kro_follows_the_leader_lease() -> anyhow::Result<()> {
    use kube::api::{Api, Patch, PatchParams};
    use serde_json::json;
    let (server, dir, kubeconfig) = server_with_kmeta_crds().await?;
    server.write_log().enable(100_000);
    let extra: Vec<&str> = SHORT_LEASE
        .iter()
        .copied()
        .chain(["--serve-kro", "--discovery-interval=1s"])
        .collect();
    let log = |n: &str| dir.path().join(format!("{n}.log"));
    let (mut a, _, _) = start_candidate_with(&kubeconfig, &log("a"), "kmeta-a", &extra)?;
    let (mut b, _, _) = start_candidate_with(&kubeconfig, &log("b"), "kmeta-b", &extra)?;
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(server.client(), "default");
    wait_for("a leader", || async {
        lease_holder(&leases).await.is_some()
    })
    .await?;
    let leader = lease_holder(&leases).await.context("holder")?;
    let client = server.client();
    create_hello_memo(&client).await?;
    let text_is = |want: &'static str| memo_text_is(client.clone(), want);
    wait_for("the Memo's ConfigMap", || text_is("hi")).await?;
    let writers = rgd_writers(&server);
    // the Lease's writers: normally the first leader alone (on a starved machine the Lease may
    // move; a standby that never held it has written nothing)
    let held = lease_writers(&server);
    assert!(
        !writers.is_empty() && writers.is_subset(&held),
        "RGDs served by {writers:?}, the Lease held by {held:?}"
    );

    let (stopped, standby) = if leader == "kmeta-a" {
        (&mut a, "kmeta-b")
    } else {
        (&mut b, "kmeta-a")
    };
    sigterm(&stopped.0)?;
    assert!(wait_exit(&mut stopped.0).await?.success());
    wait_for("the standby to lead", || async {
        lease_holder(&leases).await.as_deref() == Some(standby)
    })
    .await?;
    let rgds: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("kro.run", "v1alpha1", "ResourceGraphDefinition"),
            "resourcegraphdefinitions",
        ),
    );
    let mut rgd = serde_json::to_value(rgds.get("notes").await?)?;
    rgd["spec"]["resources"][0]["template"]["data"]["text"] = json!("${schema.spec.text + '!'}");
    let patch = json!({"spec": rgd["spec"]});
    rgds.patch("notes", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let edited = wait_for("the edited RGD served by the new leader", || text_is("hi!")).await;
    let logs = || std::fs::read_to_string(log(&standby[6..])).unwrap_or_default();
    edited.with_context(|| format!("{standby}'s log:\n{}", logs()))?;
    let writers = rgd_writers(&server);
    assert!(
        writers.contains(standby),
        "the new leader serves RGDs: {writers:?}"
    );
    assert!(writers.is_subset(&lease_writers(&server)), "{writers:?}");
    sigterm(&a.0).ok();
    sigterm(&b.0).ok();
    server.shutdown().await;
    Ok(())
}
