//! `kmeta dev`: a local API server, manifests applied in order, file changes re-applied, the
//! controller running against it; kubectl works with the written kubeconfig.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use tokio_util::sync::CancellationToken;

use crate::support;
use support::{on_path, skip_or_fail, wait_for};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: greetings.dev.example.com
spec:
  group: dev.example.com
  scope: Namespaced
  names: {kind: Greeting, plural: greetings, singular: greeting, listKind: GreetingList}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

const CONTROLLER: &str = r#"
apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata:
  name: greeting
spec:
  generateSelector: true
  parentResource: {apiVersion: dev.example.com/v1, resource: greetings}
  childResources: [{apiVersion: v1, resource: configmaps}]
  hooks:
    sync:
      webhook: {url: "http://127.0.0.1:9/sync"}
"#;

fn parent(text: &str) -> String {
    format!(
        "apiVersion: dev.example.com/v1\nkind: Greeting\nmetadata:\n  name: hello\nspec:\n  text: {text}\n"
    )
}

#[tokio::test]
#[allow(clippy::too_many_lines)] // one end-to-end story, read top to bottom
async fn dev_applies_manifests_and_reapplies_changes_or_skips_kubectl_without_it()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    // Files are named so that directory order is the wrong apply order.
    std::fs::write(dir.path().join("a-parent.yaml"), parent("hi"))?;
    std::fs::write(dir.path().join("b-controller.yaml"), CONTROLLER)?;
    std::fs::write(dir.path().join("c-crd.yml"), CRD)?;
    std::fs::write(dir.path().join("notes.txt"), "not a manifest")?;
    // Wait for the "controller running" line: everything was applied by then.
    let (stop, task, printed, client) = dev_until(
        dir.path(),
        vec![dir.path().to_owned()],
        &["controller running"],
    )
    .await?;
    let kubeconfig = dir.path().join("kc");
    assert!(printed.contains("kubectl --kubeconfig"), "{printed}");
    let crd_at = printed
        .find("CustomResourceDefinition")
        .unwrap_or(usize::MAX);
    let parent_at = printed.find("Greeting hello").unwrap_or(0);
    assert!(
        crd_at < parent_at,
        "CRD applied before its objects:\n{printed}"
    );

    let ar = ApiResource {
        group: "dev.example.com".into(),
        version: "v1".into(),
        api_version: "dev.example.com/v1".into(),
        kind: "Greeting".into(),
        plural: "greetings".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    assert_eq!(api.get("hello").await?.data["spec"]["text"], "hi");

    // Saving a changed file re-applies it.
    std::fs::write(dir.path().join("a-parent.yaml"), parent("bye"))?;
    wait_for("the changed parent to be re-applied", || async {
        api.get("hello")
            .await
            .is_ok_and(|o| o.data["spec"]["text"] == "bye")
    })
    .await?;

    // kubectl works against the printed kubeconfig (that step skips or fails, see skip_or_fail,
    // when kubectl is absent).
    // (tokio's Command: the API server runs on this test's runtime and must keep serving.)
    if !on_path("kubectl") {
        skip_or_fail("kubectl is not on PATH (the kubectl step)")?;
    } else {
        let out = tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args([
                "get",
                "compositecontrollers",
                "-o",
                "name",
                "--request-timeout=10s",
            ])
            .output()
            .await?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            stdout.trim(),
            "compositecontroller.metacontroller.k8s.io/greeting"
        );
    }

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(20), task).await???;
    Ok(())
}

/// A Jsonnet hook in a ConfigMap manifest: saving the file with a new program re-applies the
/// ConfigMap, which restarts the controller, and the child follows the new program.
#[tokio::test]
async fn dev_reloads_a_jsonnet_hook_when_its_configmap_file_changes() -> anyhow::Result<()> {
    let hooks = |greeting: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: hooks, namespace: default}}\ndata:\n  \
             sync.jsonnet: |\n    function(request) {{children: [{{apiVersion: 'v1', kind: 'ConfigMap', \
             metadata: {{name: request.parent.metadata.name + '-out'}}, \
             data: {{text: '{greeting}, ' + request.parent.spec.text}}}}]}}\n"
        )
    };
    let controller = CONTROLLER
        .replace(
            r#"webhook: {url: "http://127.0.0.1:9/sync"}"#,
            "jsonnet: {configMapRef: {namespace: default, name: hooks, key: sync.jsonnet}}",
        )
        .replace(
            "resource: configmaps}",
            "resource: configmaps, updateStrategy: {method: InPlace}}",
        );
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("crd.yaml"), CRD)?;
    std::fs::write(dir.path().join("controller.yaml"), controller)?;
    std::fs::write(dir.path().join("hooks.yaml"), hooks("hello"))?;
    std::fs::write(dir.path().join("parent.yaml"), parent("world"))?;
    // the binary evaluates Jsonnet hooks in workers it starts from itself
    let (stop, task, _, client) = dev_until(
        dir.path(),
        vec![dir.path().to_owned()],
        &["controller running"],
    )
    .await?;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client, "default");
    let text = |cm: &k8s_openapi::api::core::v1::ConfigMap| {
        cm.data
            .as_ref()
            .and_then(|d| d.get("text"))
            .cloned()
            .unwrap_or_default()
    };
    wait_for("the child from the first program", || async {
        cms.get("hello-out")
            .await
            .is_ok_and(|c| text(&c) == "hello, world")
    })
    .await?;
    std::fs::write(dir.path().join("hooks.yaml"), hooks("goodbye"))?;
    wait_for("the child from the saved program", || async {
        cms.get("hello-out")
            .await
            .is_ok_and(|c| text(&c) == "goodbye, world")
    })
    .await?;
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(20), task).await???;
    Ok(())
}

/// Starts the `kmeta dev` binary on `files` and waits until its output (stdout and stderr)
/// contains every one of `wanted`; returns the stop token (cancelling it sends SIGTERM), the
/// task (done when dev has exited, an error unless it exited 0), the output so far and a client
/// for its server.
async fn dev_until(
    dir: &std::path::Path,
    files: Vec<std::path::PathBuf>,
    wanted: &[&str],
) -> anyhow::Result<(CancellationToken, DevTask, String, kube::Client)> {
    let kubeconfig = dir.join("kc");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kmeta"));
    command.arg("dev").arg("--kubeconfig-out").arg(&kubeconfig);
    for file in &files {
        command.arg("-f").arg(file);
    }
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    forward_output(&mut child, &tx);
    let stop = CancellationToken::new();
    let task = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                status = child.wait() => bail!("dev exited before it was stopped: {}", status?),
                () = stop.cancelled() => {}
            }
            let pid = child.id().context("dev's pid")?.to_string();
            let killed = std::process::Command::new("kill")
                .args(["-TERM", &pid])
                .status()?;
            anyhow::ensure!(killed.success(), "kill -TERM {pid}: {killed}");
            let status = child.wait().await?;
            anyhow::ensure!(status.success(), "dev exited with {status}");
            Ok(())
        })
    };
    let mut printed = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !wanted.iter().all(|w| printed.contains(w)) {
        match tokio::time::timeout_at(deadline.into(), rx.recv()).await {
            Ok(Some(s)) => printed.push_str(&s),
            _ => bail!("dev never printed {wanted:?}; output so far:\n{printed}"),
        }
    }
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig)?,
        &Default::default(),
    )
    .await?;
    Ok((stop, task, printed, kube::Client::try_from(config)?))
}

/// Sends what `child` writes to stdout and stderr to `tx`, as it comes.
fn forward_output(
    child: &mut tokio::process::Child,
    tx: &tokio::sync::mpsc::UnboundedSender<String>,
) {
    use tokio::io::AsyncReadExt as _;
    let pipes = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
    ];
    for mut pipe in pipes.into_iter().flatten() {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = pipe.read(&mut buf).await {
                let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        });
    }
}

type DevTask = tokio::task::JoinHandle<anyhow::Result<()>>;

/// A bad manifest at start is reported naming the file, `dev` keeps running, and the fixed file
/// is applied once saved: the same as a bad manifest saved later.
#[tokio::test]
async fn dev_reports_a_bad_manifest_and_applies_it_once_fixed() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "kind: ConfigMap\nmetadata: {name: x}\n")?;
    let line = format!(
        "kmeta dev: {}: document 1: apiVersion is missing (fix it and save the file to apply it)",
        bad.display()
    );
    let (stop, task, _, client) = dev_until(
        dir.path(),
        vec![bad.clone()],
        &[&line, "controller running"],
    )
    .await?;
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
    )?;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client, "default");
    wait_for("the fixed manifest applied", || async {
        cms.get_opt("x").await.ok().flatten().is_some()
    })
    .await?;
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(20), task).await???;
    Ok(())
}

#[tokio::test]
async fn dev_reports_a_field_the_crd_does_not_declare() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let typo = dir.path().join("controller.yaml");
    std::fs::write(
        &typo,
        CONTROLLER.replace("generateSelector: true", "generateSelectr: true"),
    )?;
    // a typo in a CompositeController is an error, not a silently dropped field
    let (stop, task, printed, _) = dev_until(
        dir.path(),
        vec![typo.clone()],
        &[
            "unknown field \"spec.generateSelectr\"",
            "controller running",
        ],
    )
    .await?;
    assert!(printed.contains(&typo.display().to_string()), "{printed}");
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(20), task).await???;
    Ok(())
}

/// A kind the server does not serve gets a "did you mean" naming the served kind.
#[tokio::test]
async fn dev_suggests_the_kind_for_a_typo() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let typo = dir.path().join("cm.yaml");
    std::fs::write(
        &typo,
        "apiVersion: v1\nkind: Configmap\nmetadata: {name: x}\n",
    )?;
    let line = format!(
        "kmeta dev: applying Configmap x from {}: the server does not serve Configmap in \
         v1; did you mean v1 ConfigMap? (fix it and save the file to apply it)",
        typo.display()
    );
    let (stop, task, _, _) = dev_until(
        dir.path(),
        vec![typo.clone()],
        &[&line, "controller running"],
    )
    .await?;
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(20), task).await???;
    Ok(())
}

/// Without `-f`, `dev` says how to add manifests; a path that does not exist stops it.
#[tokio::test]
async fn dev_without_manifests_says_how_to_add_them() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (stop, task, _, _) =
        dev_until(dir.path(), vec![], &["no manifests given: kubectl"]).await?;
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(20), task).await???;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kmeta"))
        .args(["dev", "--kubeconfig-out"])
        .arg(dir.path().join("kc2"))
        .arg("-f")
        .arg(dir.path().join("missing"))
        .output()?;
    assert!(!out.status.success(), "a missing path");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing"), "{err}");
    Ok(())
}

/// Progress lines are for a terminal: `kmeta dev` with its stderr piped (as in scripts) prints
/// none, even while a controller cannot start (its parent's CRD is missing).
#[tokio::test]
async fn dev_with_piped_stderr_prints_no_progress_lines() -> anyhow::Result<()> {
    use tokio::io::AsyncReadExt as _;
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("controller.yaml"), CONTROLLER)?;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kmeta"))
        .args(["dev", "-f"])
        .arg(dir.path())
        .arg("--kubeconfig-out")
        .arg(dir.path().join("kc"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let output = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    for mut pipe in [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
    ]
    .into_iter()
    .flatten()
    {
        let output = output.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = pipe.read(&mut buf).await {
                if let Ok(mut out) = output.lock() {
                    out.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        });
    }
    let text = || output.lock().map(|o| o.clone()).unwrap_or_default();
    wait_for("dev to report the controller that cannot start", || async {
        text().contains("cannot start controller")
    })
    .await?;
    // a progress line would show within QUIET_FOR + TICK (550 ms) of the wait's start; watch
    // four times as long
    // (QUIET_FOR 300 ms and TICK 250 ms in controller/src/cli/progress.rs)
    let window = Instant::now() + 4 * Duration::from_millis(300 + 250);
    while Instant::now() < window {
        let t = text();
        assert!(
            !t.contains("waiting for") && !t.contains('\r'),
            "a progress line on a piped stderr:\n{t}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill().await?;
    Ok(())
}

/// On a terminal (a pseudo-terminal from util-linux `script`), `kmeta dev` says what it waits
/// for: here a controller that cannot start (its parent's CRD is missing).
#[test]
fn dev_on_a_terminal_shows_what_it_waits_for_or_skips_without_script() -> anyhow::Result<()> {
    use std::io::Read as _;
    if !on_path("script") || !on_path("timeout") {
        return skip_or_fail("`script` and `timeout` (util-linux, coreutils) are not on PATH");
    }
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("controller.yaml"), CONTROLLER)?;
    // `timeout` ends dev even if `script` is killed first
    let dev = format!(
        "timeout 30 {} dev -f {} --kubeconfig-out {}",
        env!("CARGO_BIN_EXE_kmeta"),
        dir.path().display(),
        dir.path().join("kc").display()
    );
    let mut child = std::process::Command::new("script")
        .args(["-qec", &dev, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut pipe = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = pipe.read(&mut buf) {
            if tx
                .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                .is_err()
            {
                break;
            }
        }
    });
    let deadline = Instant::now() + support::TIMEOUT;
    let mut seen = String::new();
    let found = loop {
        if seen.contains("… waiting for controller greeting to start") {
            break true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(text) => seen.push_str(&text),
            Err(_) => break false,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(found, "no progress line on a terminal:\n{seen}");
    Ok(())
}
