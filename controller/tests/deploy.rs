//! deploy/: the manifests are accepted by an API server, the Deployment's arguments are valid
//! `kmeta run` flags, and the Helm chart's templates only use values that exist and, rendered by
//! Helm's engine, follow their values and are accepted too.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use kmeta_apiserver::TestServer;
use serde_json::Value;

/// `kmeta run`'s flags and their validation: the binary's own source file, compiled into this
/// test so that the chart's Deployment is parsed exactly as `kmeta run` parses its flags.
#[allow(dead_code, unreachable_pub)]
#[path = "../src/cli/args.rs"]
mod kmeta_run_args;
#[allow(dead_code)] // the async helpers are for the other test files
use crate::support;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn yaml(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    serde_saphyr::from_str(&text).with_context(|| path.display().to_string())
}

/// The files kustomization.yaml lists, in order.
fn kustomize_resources() -> anyhow::Result<Vec<PathBuf>> {
    let k = yaml(&deploy_dir().join("kustomization.yaml"))?;
    let list = k["resources"].as_array().context("resources")?;
    list.iter()
        .map(|r| {
            let r = r.as_str().context("resource entry")?;
            Ok(deploy_dir().join(r))
        })
        .collect()
}

#[tokio::test]
async fn kustomization_is_accepted_by_the_api_server() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client();
    let manifests = kmeta::manifest::order(kmeta::manifest::load(&kustomize_resources()?)?);
    let kinds: Vec<&str> = manifests
        .iter()
        .filter_map(|m| m.object["kind"].as_str())
        .collect();
    for kind in [
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
    ] {
        assert!(kinds.contains(&kind), "deploy/ lacks a {kind}: {kinds:?}");
    }
    kmeta::manifest::apply_all(&client, &manifests, &mut std::io::sink()).await?;

    // The Deployment, as stored, runs `kmeta run` with flags the binary accepts.
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client.clone(), "kmeta");
    let d = deployments.get("kmeta").await?;
    let config = run_config(&serde_json::to_value(&d)?)?;
    let pod = d.spec.template.spec.context("pod spec")?;
    assert_eq!(pod.service_account_name.as_deref(), Some("kmeta"));
    let c = &pod.containers[0];
    assert!(config.leader.is_some(), "two replicas need leader election");
    // Probes and ports point at the endpoints the flags open.
    let ports: Vec<i32> = c.ports.iter().flatten().map(|p| p.container_port).collect();
    for addr in [config.metrics_address, config.health_address] {
        let port = i32::from(addr.context("endpoint enabled")?.port());
        assert!(ports.contains(&port), "port {port} not exposed: {ports:?}");
    }
    let pod_name = c.env.iter().flatten().find(|e| e.name == "POD_NAME");
    assert!(
        pod_name.is_some_and(|e| e.value_from.is_some()),
        "POD_NAME from the downward API names the leader-election identity"
    );
    let sc = c.security_context.as_ref().context("securityContext")?;
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn kubectl_apply_k_deploy_or_skips_without_kubectl() -> anyhow::Result<()> {
    if std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        return support::skip_or_fail("kubectl is not on PATH");
    }
    let server = TestServer::start().await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig)?;
    // tokio's Command: the API server runs on this test's runtime.
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["apply", "--request-timeout=20s", "-k"])
        .arg(deploy_dir())
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl apply -k failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for created in [
        "namespace/kmeta",
        "customresourcedefinition.apiextensions.k8s.io/compositecontrollers.metacontroller.k8s.io",
        "deployment.apps/kmeta",
    ] {
        assert!(stdout.contains(created), "{created} missing in:\n{stdout}");
    }
    server.shutdown().await;
    Ok(())
}

/// The sharded variant: `kubectl apply -k deploy/`, then `kubectl patch` with
/// `deploy/sharded-patch.yaml`, as its header says: three replicas running `kmeta run --sharding`
/// (flags the binary accepts, no leader election), spread over nodes and zones.
#[tokio::test]
async fn the_sharded_patch_turns_the_deployment_into_three_sharded_replicas_or_skips_without_kubectl()
-> anyhow::Result<()> {
    if std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        return support::skip_or_fail("kubectl is not on PATH");
    }
    let server = TestServer::start().await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig)?;
    let kubectl = |args: Vec<std::ffi::OsString>| {
        let kubeconfig = kubeconfig.clone();
        async move {
            let out = tokio::process::Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .arg("--request-timeout=20s")
                .args(&args)
                .output()
                .await?;
            anyhow::ensure!(
                out.status.success(),
                "kubectl {args:?} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            anyhow::Ok(())
        }
    };
    kubectl(vec!["apply".into(), "-k".into(), deploy_dir().into()]).await?;
    let patch = deploy_dir().join("sharded-patch.yaml");
    kubectl(vec![
        "-n".into(),
        "kmeta".into(),
        "patch".into(),
        "deployment".into(),
        "kmeta".into(),
        "--patch-file".into(),
        patch.into(),
    ])
    .await?;
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(server.client(), "kmeta");
    let d = deployments.get("kmeta").await?;
    let config = run_config(&serde_json::to_value(&d)?)?;
    let sharding = config.sharding.context("--sharding")?;
    assert_eq!(
        (sharding.namespace.as_str(), sharding.buckets),
        ("kmeta", 32)
    );
    assert!(
        config.leader.is_none(),
        "no leader election beside sharding"
    );
    let spec = d.spec;
    assert_eq!(spec.replicas, Some(3));
    let pod = spec.template.spec.context("pod spec")?;
    let keys: Vec<String> = pod
        .topology_spread_constraints
        .iter()
        .flatten()
        .map(|t| t.topology_key.clone())
        .collect();
    assert_eq!(
        keys,
        ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    );
    let c = &pod.containers[0];
    assert!(
        c.env.iter().flatten().any(|e| e.name == "POD_NAME"),
        "POD_NAME names the replica"
    );
    assert!(c.readiness_probe.is_some(), "the base's probes are kept");
    server.shutdown().await;
    Ok(())
}

/// Looks up a dotted path (`args.workers`) in the chart's values.
fn lookup<'a>(values: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(values, |v, k| v.get(k))
}

/// `.Values.x.y` references in a template.
fn value_refs(template: &str) -> Vec<String> {
    let mut refs = Vec::new();
    let mut rest = template;
    while let Some(i) = rest.find(".Values.") {
        let tail = &rest[i + ".Values.".len()..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
            .unwrap_or(tail.len());
        refs.push(tail[..end].trim_end_matches('.').to_owned());
        rest = &tail[end..];
    }
    refs
}

#[test]
fn helm_chart_templates_use_existing_values_and_valid_flags() -> anyhow::Result<()> {
    let chart_dir = deploy_dir().join("helm/kmeta");
    let chart = yaml(&chart_dir.join("Chart.yaml"))?;
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(chart["name"], "kmeta");
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    let values = yaml(&chart_dir.join("values.yaml"))?;
    let mut templates = 0;
    for entry in std::fs::read_dir(chart_dir.join("templates"))? {
        let path = entry?.path();
        let text = std::fs::read_to_string(&path)?;
        templates += 1;
        for r in value_refs(&text) {
            if lookup(&values, &r).is_none() {
                bail!("{}: .Values.{r} is not in values.yaml", path.display());
            }
        }
    }
    assert!(templates >= 3, "templates/ is nearly empty");

    // Render the Deployment's args with the default values (the lines are plain substitutions
    // or conditionals on values) and check `kmeta run` accepts them.
    let template = std::fs::read_to_string(chart_dir.join("templates/deployment.yaml"))?;
    let start = template.find("args:").context("args")?;
    let mut args = Vec::new();
    let mut skipping = false;
    let mut range: Vec<String> = Vec::new();
    for line in template[start..].lines().skip(1) {
        let t = line.trim();
        if t.starts_with("{{- if ") {
            let cond = value_refs(t).into_iter().next().context("condition")?;
            let v = lookup(&values, &cond);
            skipping = !v.is_some_and(|v| match v {
                Value::Bool(b) => *b,
                Value::String(s) => !s.is_empty(),
                Value::Null => false,
                _ => true,
            });
            continue;
        }
        if t.starts_with("{{- range ") {
            let list = value_refs(t).into_iter().next().context("range")?;
            range = lookup(&values, &list)
                .and_then(Value::as_array)
                .context("range over a list")?
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| v.to_string())
                })
                .collect();
            continue;
        }
        if t.starts_with("{{- end") {
            skipping = false;
            range.clear();
            continue;
        }
        let Some(arg) = t.strip_prefix("- ") else {
            break;
        };
        if skipping {
            continue;
        }
        if arg == "{{ . }}" {
            args.extend(range.iter().cloned());
            continue;
        }
        let mut rendered = arg.to_owned();
        for r in value_refs(arg) {
            let v = lookup(&values, &r).context("value")?;
            let s = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            rendered = rendered.replace(&format!("{{{{ .Values.{r} }}}}"), &s);
        }
        assert!(!rendered.contains("{{"), "unrendered: {rendered}");
        args.push(rendered);
    }
    assert_eq!(args.first().map(String::as_str), Some("run"), "{args:?}");
    kmeta_run_args::parse_run_args(&args[1..]).map_err(anyhow::Error::msg)?;
    Ok(())
}

/// What `support/helm_render.py` prints.
#[derive(serde::Deserialize)]
pub(crate) struct Rendered {
    pub(crate) lint_errors: Vec<Value>,
    manifests: std::collections::BTreeMap<String, String>,
    crds: std::collections::BTreeMap<String, String>,
}

/// Renders the chart with Helm's engine (helm-python-sdk, which `.ci/run` installs; its
/// directory may be given in `KMETA_HELM_PYTHONPATH`). `None` when the SDK is not installed
/// here, unless `KMETA_REQUIRE_HELM=1` or `KMETA_CI=1` (CI), where that is an error.
pub(crate) fn helm_render(values: &Value) -> anyhow::Result<Option<Rendered>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/helm_render.py");
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(&script)
        .arg(deploy_dir().join("helm/kmeta"))
        .args(["kmeta", "kmeta"])
        .arg(values.to_string());
    if let Some(dir) = std::env::var_os("KMETA_HELM_PYTHONPATH") {
        cmd.env("PYTHONPATH", dir);
    }
    let out = cmd.output().context("running python3")?;
    let required = ["KMETA_REQUIRE_HELM", "KMETA_CI"]
        .iter()
        .any(|var| std::env::var(var).is_ok_and(|v| v == "1"));
    match out.status.code() {
        Some(0) => Ok(Some(serde_json::from_slice(&out.stdout)?)),
        Some(3) if !required => {
            println!(
                "SKIPPED: Helm rendering needs `python3 -m pip install helm-python-sdk` (.ci/run installs it)"
            );
            Ok(None)
        }
        _ => bail!(
            "helm_render.py failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The rendered objects (CRDs from crds/ first, as Helm installs them), keyed by kind.
pub(crate) fn rendered_objects(r: &Rendered) -> anyhow::Result<Vec<kmeta::manifest::Manifest>> {
    let mut out = Vec::new();
    for (name, text) in r.crds.iter().chain(r.manifests.iter()) {
        out.extend(kmeta::manifest::parse_manifest(Path::new(name), text)?);
    }
    Ok(kmeta::manifest::order(out))
}

pub(crate) fn of_kind<'a>(objects: &'a [kmeta::manifest::Manifest], kind: &str) -> Vec<&'a Value> {
    objects
        .iter()
        .map(|m| &m.object)
        .filter(|o| o["kind"] == kind)
        .collect()
}

/// The `kmeta run` flags of the rendered Deployment, parsed by the binary's own parser.
fn run_config(deployment: &Value) -> anyhow::Result<kmeta_run_args::RunConfig> {
    let args: Vec<String> = serde_json::from_value(
        deployment["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
    )?;
    assert_eq!(args.first().map(String::as_str), Some("run"), "{args:?}");
    kmeta_run_args::parse_run_args(&args[1..]).map_err(anyhow::Error::msg)
}

#[tokio::test]
#[allow(clippy::too_many_lines)] // one render per values case, read top to bottom
async fn helm_chart_rendered_by_helm_is_accepted_and_follows_its_values_or_skips_without_helm()
-> anyhow::Result<()> {
    let Some(defaults) = helm_render(&serde_json::json!({}))? else {
        return Ok(());
    };
    assert!(
        defaults.lint_errors.is_empty(),
        "helm lint: {:?}",
        defaults.lint_errors
    );
    let objects = rendered_objects(&defaults)?;
    for kind in [
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
    ] {
        assert!(!of_kind(&objects, kind).is_empty(), "no {kind} rendered");
    }
    let deployment = of_kind(&objects, "Deployment")[0];
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert!(run_config(deployment)?.leader.is_none());
    assert!(
        of_kind(&objects, "PodDisruptionBudget").is_empty(),
        "a PDB for one replica"
    );
    assert!(of_kind(&objects, "NetworkPolicy").is_empty());
    let limits = &deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"];
    assert_eq!(limits["cpu"], "1", "{limits}");

    // Everything Helm renders is accepted by the API server (into the release namespace).
    let server = TestServer::start().await?;
    let client = server.client();
    let ns: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    ns.create(
        &kube::api::PostParams::default(),
        &serde_json::from_value(serde_json::json!({"metadata": {"name": "kmeta"}}))?,
    )
    .await?;
    kmeta::manifest::apply_all(&client, &objects, &mut std::io::sink()).await?;
    let stored: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client.clone(), "kmeta");
    let d = stored.get("kmeta").await?;
    let pod = d.spec.template.spec.context("pod spec")?;
    assert_eq!(pod.service_account_name.as_deref(), Some("kmeta"));
    server.shutdown().await;

    // High availability, no RBAC, an existing service account, extra flags.
    let Some(ha) = helm_render(&serde_json::json!({
        "replicaCount": 2,
        "leaderElection": {"enabled": true},
        "rbac": {"create": false},
        "serviceAccount": {"create": false, "name": "ops-kmeta"},
        "args": {"workers": 9, "targetLabelSelector": "team=a", "extra": ["--events-burst=7"]},
    }))?
    else {
        return Ok(());
    };
    let objects = rendered_objects(&ha)?;
    for kind in ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"] {
        assert!(
            of_kind(&objects, kind).is_empty(),
            "{kind} rendered without being asked for"
        );
    }
    let pdb = of_kind(&objects, "PodDisruptionBudget");
    assert_eq!(pdb.len(), 1, "two replicas get a PDB");
    assert_eq!(pdb[0]["spec"]["maxUnavailable"], 1);
    let deployment = of_kind(&objects, "Deployment")[0];
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        "ops-kmeta"
    );
    let config = run_config(deployment)?;
    let leader = config.leader.context("leader election enabled")?;
    assert_eq!(leader.namespace, "kmeta");
    assert_eq!(leader.name, "metacontroller");
    assert_eq!(config.workers, 9);
    assert_eq!(config.events_burst, 7);
    assert_eq!(config.target_label_selector.as_deref(), Some("team=a"));

    // Sharded: every replica works on its share of the buckets.
    let spread = serde_json::json!([{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "kmeta"}}}]);
    let Some(sharded) = helm_render(&serde_json::json!({
        "replicaCount": 3,
        "sharding": {"enabled": true, "buckets": 64, "key": "uid"},
        "topologySpreadConstraints": spread,
    }))?
    else {
        return Ok(());
    };
    let objects = rendered_objects(&sharded)?;
    let deployment = of_kind(&objects, "Deployment")[0];
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["topologySpreadConstraints"],
        spread
    );
    let config = run_config(deployment)?;
    let sharding = config.sharding.context("sharding enabled")?;
    assert_eq!(
        (sharding.namespace.as_str(), sharding.buckets),
        ("kmeta", 64)
    );
    assert_eq!(sharding.key, kmeta_run_args::ShardKey::Uid);
    assert!(config.leader.is_none());
    assert_eq!(of_kind(&objects, "PodDisruptionBudget").len(), 1);

    // Least-privilege rules replace the wildcard role.
    let rules = serde_json::json!([{"apiGroups": ["metacontroller.k8s.io"],
        "resources": ["compositecontrollers"], "verbs": ["get", "list", "watch"]}]);
    let Some(scoped) = helm_render(&serde_json::json!({"rbac": {"rules": rules}}))? else {
        return Ok(());
    };
    let objects = rendered_objects(&scoped)?;
    assert_eq!(of_kind(&objects, "ClusterRole")[0]["rules"], rules);

    // The optional NetworkPolicy admits the metrics and health ports only.
    let Some(fenced) = helm_render(&serde_json::json!({"networkPolicy": {"enabled": true}}))?
    else {
        return Ok(());
    };
    let objects = rendered_objects(&fenced)?;
    let np = of_kind(&objects, "NetworkPolicy");
    assert_eq!(np.len(), 1);
    let ports: Vec<&Value> = np[0]["spec"]["ingress"][0]["ports"]
        .as_array()
        .context("ports")?
        .iter()
        .map(|p| &p["port"])
        .collect();
    assert_eq!(ports, [&serde_json::json!(9999), &serde_json::json!(8081)]);
    Ok(())
}
