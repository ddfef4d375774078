//! `kmeta dev`: a local API server, manifests applied in order, file changes re-applied, the
//! controller running against it; kubectl works with the written kubeconfig.

use std::time::{Duration, Instant};

use anyhow::bail;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use tokio_util::sync::CancellationToken;

mod support;
use support::wait_for;

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
async fn dev_applies_manifests_and_reapplies_changes() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    // Files are named so that directory order is the wrong apply order.
    std::fs::write(dir.path().join("a-parent.yaml"), parent("hi"))?;
    std::fs::write(dir.path().join("b-controller.yaml"), CONTROLLER)?;
    std::fs::write(dir.path().join("c-crd.yml"), CRD)?;
    std::fs::write(dir.path().join("notes.txt"), "not a manifest")?;
    let kubeconfig = dir.path().join("kmeta-dev.kubeconfig");
    let opts = kmeta::cmd::dev::DevOptions {
        kubeconfig_out: kubeconfig.clone(),
        files: vec![dir.path().to_owned()],
        poll_interval: Duration::from_millis(100),
        ..Default::default()
    };
    let stop = CancellationToken::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let task = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut out = ChannelWriter(tx);
            kmeta::cmd::dev::run(opts, stop, &mut out).await
        })
    };
    // Wait for the "controller running" line: everything was applied by then.
    let mut printed = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !printed.contains("controller running") {
        match tokio::time::timeout_at(deadline.into(), rx.recv()).await {
            Ok(Some(s)) => printed.push_str(&s),
            _ => bail!("dev did not start; output so far:\n{printed}"),
        }
    }
    assert!(printed.contains("kubectl --kubeconfig"), "{printed}");
    let crd_at = printed
        .find("CustomResourceDefinition")
        .unwrap_or(usize::MAX);
    let parent_at = printed.find("Greeting hello").unwrap_or(0);
    assert!(
        crd_at < parent_at,
        "CRD applied before its objects:\n{printed}"
    );

    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig)?,
        &Default::default(),
    )
    .await?;
    let client = kube::Client::try_from(config)?;
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

    // kubectl works against the printed kubeconfig (skipped when kubectl is absent).
    // (tokio's Command: the API server runs on this test's runtime and must keep serving.)
    if let Ok(out) = tokio::process::Command::new("kubectl")
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
        .await
    {
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

#[tokio::test]
async fn dev_rejects_a_bad_manifest_naming_the_file() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "kind: ConfigMap\nmetadata: {name: x}\n")?;
    let opts = kmeta::cmd::dev::DevOptions {
        kubeconfig_out: dir.path().join("kc"),
        files: vec![bad.clone()],
        ..Default::default()
    };
    let err = kmeta::cmd::dev::run(opts, CancellationToken::new(), &mut std::io::sink())
        .await
        .expect_err("invalid manifest");
    assert_eq!(
        err.to_string(),
        format!("{}: document 1: apiVersion is missing", bad.display())
    );
    Ok(())
}

#[tokio::test]
async fn dev_rejects_a_field_the_crd_does_not_declare() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let typo = dir.path().join("controller.yaml");
    std::fs::write(
        &typo,
        CONTROLLER.replace("generateSelector: true", "generateSelectr: true"),
    )?;
    let opts = kmeta::cmd::dev::DevOptions {
        kubeconfig_out: dir.path().join("kc"),
        files: vec![typo.clone()],
        ..Default::default()
    };
    let err = kmeta::cmd::dev::run(opts, CancellationToken::new(), &mut std::io::sink())
        .await
        .expect_err("a typo in a CompositeController is an error, not a silently dropped field")
        .to_string();
    assert!(err.contains(&typo.display().to_string()), "{err}");
    assert!(
        err.contains("unknown field \"spec.generateSelectr\""),
        "{err}"
    );
    Ok(())
}

struct ChannelWriter(tokio::sync::mpsc::UnboundedSender<String>);

impl std::io::Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = self.0.send(String::from_utf8_lossy(buf).into_owned());
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
