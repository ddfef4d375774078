//! Monitoring (`deploy/monitoring/`, the chart's `monitoring` values), proved with the real
//! tools: the copies of the rules and the dashboard agree and name only series kmeta exports;
//! `promtool` checks the rules and runs their unit tests; kustomize builds the component; Helm
//! renders the values; and a real Prometheus scraping `kmeta run` against kmeta-apiserver sees a
//! hook outage: the circuit and hook alerts fire and clear, and every dashboard panel's query
//! returns data.
//!
//! The tests needing a program this machine may lack (`promtool`, `prometheus`: Debian's
//! `prometheus` package; `kubectl`; Helm's engine) say SKIPPED without it, and fail when `CI`
//! or `KMETA_CI` is set.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use crate::support::on_path;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| path.display().to_string())
}

fn yaml(path: &Path) -> anyhow::Result<Value> {
    serde_saphyr::from_str(&read(path)?).with_context(|| path.display().to_string())
}

/// A program this test needs is missing: a failure under CI (`CI` or `KMETA_CI` set), else
/// `SKIPPED` on stderr and a pass.
pub(crate) fn missing(what: &str) -> anyhow::Result<()> {
    let ci = ["CI", "KMETA_CI"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|v| !v.is_empty() && v != "0" && v != "false"));
    if ci {
        bail!("required under CI but cannot run: {what}");
    }
    eprintln!("SKIPPED: {what}");
    Ok(())
}

/// The PromQL of every dashboard panel, with its title.
pub(crate) fn panel_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().into_iter().flatten() {
        for t in p["targets"].as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or_default().to_owned();
            out.push((title, t["expr"].as_str().unwrap_or_default().to_owned()));
        }
    }
    out
}

/// Every series name a PromQL expression names (`kmeta_*`, `metacontroller_*`, `process_*`),
/// an alternative in a `__name__` regex (`metacontroller_(sync|finalize)_x`) spelled out.
fn series_names(expr: &str) -> BTreeSet<String> {
    let mut variants = vec![expr.to_owned()];
    while let Some(i) = variants.iter().position(|v| v.contains("_(")) {
        let v = variants.remove(i);
        let start = v.find("_(").unwrap_or_default() + 1;
        let end = start + v[start..].find(')').unwrap_or_default();
        for alt in v[start + 1..end].split('|') {
            variants.push(format!("{}{alt}{}", &v[..start], &v[end + 1..]));
        }
    }
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    variants
        .iter()
        .flat_map(|v| v.split(|c: char| !ident(c)).map(str::to_owned))
        .filter(|t| {
            ["kmeta_", "metacontroller_", "process_"]
                .iter()
                .any(|p| t.starts_with(p))
        })
        .collect()
}

/// The metric families kmeta registers: the string literals naming them in
/// `controller/src/ops/metrics/` (a family without samples is not encoded, so the registry's
/// output would miss the ones nothing has touched yet), `{hook}` spelled out.
fn registered_families() -> anyhow::Result<BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ops/metrics");
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(dir)? {
        let text = read(&entry?.path())?;
        for literal in text.split('"').skip(1).step_by(2) {
            let name_like = literal
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c == '{' || c == '}');
            let ours = ["kmeta_", "metacontroller_", "process_"]
                .iter()
                .any(|p| literal.starts_with(p));
            if !(name_like && ours) {
                continue;
            }
            for hook in ["sync", "finalize", "customize"] {
                out.insert(literal.replace("{hook}", hook));
            }
        }
    }
    Ok(out)
}

/// Whether `series` is a family of `families`, or one with the suffix its type adds
/// (`_total`; `_bucket`, `_sum`, `_count`).
fn exported(families: &BTreeSet<String>, series: &str) -> bool {
    families.contains(series)
        || ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .any(|s| series.strip_suffix(s).is_some_and(|f| families.contains(f)))
}

#[test]
fn the_rules_and_dashboard_copies_agree_and_name_only_exported_series() -> anyhow::Result<()> {
    let mon = deploy_dir().join("monitoring");
    let chart = deploy_dir().join("helm/kmeta/files");
    let rules = yaml(&mon.join("kmeta.rules.yaml"))?;
    let wrapped = yaml(&mon.join("prometheusrule.yaml"))?;
    assert_eq!(
        wrapped["spec"], rules,
        "prometheusrule.yaml's spec is kmeta.rules.yaml"
    );
    for file in ["kmeta.rules.yaml", "kmeta-dashboard.json"] {
        assert_eq!(
            read(&mon.join(file))?,
            read(&chart.join(file))?,
            "deploy/helm/kmeta/files/{file} is a copy of deploy/monitoring/{file}"
        );
    }
    let dashboard: Value = serde_json::from_str(&read(&mon.join("kmeta-dashboard.json"))?)?;
    let families = registered_families()?;
    for f in [
        "process_cpu_seconds",
        "kmeta_watches_pending",
        "metacontroller_finalize_requests",
    ] {
        assert!(families.contains(f), "{f}: {families:?}");
    }
    let mut exprs: Vec<(String, String)> = panel_queries(&dashboard);
    assert!(exprs.len() >= 15, "{exprs:?}");
    for rule in rules["groups"][0]["rules"].as_array().context("rules")? {
        let name = rule["alert"].as_str().context("alert")?.to_owned();
        let anchor = format!("#{}", name.to_lowercase());
        let runbook = rule["annotations"]["runbook_url"].as_str().unwrap_or("");
        assert!(runbook.ends_with(&anchor), "{name}: {runbook}");
        for field in ["summary", "description"] {
            assert!(rule["annotations"][field].is_string(), "{name}: {field}");
        }
        exprs.push((name, rule["expr"].as_str().context("expr")?.to_owned()));
    }
    for (what, expr) in &exprs {
        for series in series_names(expr) {
            assert!(
                exported(&families, &series),
                "{what}: {series} is not a series kmeta exports"
            );
        }
    }
    // every runbook anchor is a heading of docs/operating.md
    let operating = read(&deploy_dir().join("../docs/operating.md"))?;
    for rule in rules["groups"][0]["rules"].as_array().into_iter().flatten() {
        let name = rule["alert"].as_str().unwrap_or_default();
        assert!(
            operating.contains(&format!("\n### {name}\n")),
            "docs/operating.md has no runbook section ### {name}"
        );
    }
    Ok(())
}

#[test]
fn promtool_checks_and_tests_the_rules_or_skips_without_promtool() -> anyhow::Result<()> {
    if !on_path("promtool") {
        return missing("promtool (apt-get install prometheus) to check the alert rules");
    }
    let mon = deploy_dir().join("monitoring");
    for args in [
        ["check", "rules", "kmeta.rules.yaml"],
        ["test", "rules", "kmeta.rules.test.yaml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&mon)
            .output()?;
        assert!(
            out.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The kinds and names `kubectl kustomize` builds from an overlay of `deploy/` with `components`.
fn kustomize(components: &[&str]) -> anyhow::Result<Vec<Value>> {
    let dir = tempfile::tempdir()?;
    // kustomize takes relative paths only: from the overlay up to `/`, then down to deploy/
    let up = "../".repeat(dir.path().components().count() - 1);
    let deploy = std::fs::canonicalize(deploy_dir())?;
    let deploy = format!(
        "{up}{}",
        deploy.display().to_string().trim_start_matches('/')
    );
    let comps: Vec<String> = components.iter().map(|c| format!("{deploy}/{c}")).collect();
    let k = json!({"resources": [deploy], "components": comps});
    std::fs::write(dir.path().join("kustomization.yaml"), k.to_string())?;
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir.path())
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    anyhow::ensure!(out.status.success(), "kubectl kustomize: {stderr}");
    Ok(serde_saphyr::from_multiple(&String::from_utf8(
        out.stdout,
    )?)?)
}

fn kinds(objects: &[Value]) -> BTreeSet<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{} {}",
                o["kind"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[test]
fn the_kustomize_component_adds_monitoring_or_skips_without_kubectl() -> anyhow::Result<()> {
    if !on_path("kubectl") {
        return missing("kubectl, whose kustomize builds deploy/monitoring");
    }
    let plain = kinds(&kustomize(&[])?);
    assert!(
        !plain.iter().any(|k| k.starts_with("ServiceMonitor")),
        "off by default"
    );
    let with = kustomize(&["monitoring"])?;
    let added: BTreeSet<String> = kinds(&with).difference(&plain).cloned().collect();
    let want = [
        "ConfigMap kmeta-grafana-dashboard",
        "PrometheusRule kmeta",
        "Service kmeta-metrics",
        "ServiceMonitor kmeta",
    ];
    assert_eq!(added, want.iter().map(|s| (*s).to_owned()).collect());
    let cm = with
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .context("ConfigMap")?;
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: Value =
        serde_json::from_str(cm["data"]["kmeta-dashboard.json"].as_str().unwrap_or(""))?;
    assert_eq!(json["uid"], "kmeta-overview");
    let pods = kinds(&kustomize(&["monitoring", "monitoring/podmonitor"])?);
    let added: BTreeSet<String> = pods.difference(&plain).cloned().collect();
    let want = [
        "ConfigMap kmeta-grafana-dashboard",
        "PodMonitor kmeta",
        "PrometheusRule kmeta",
    ];
    assert_eq!(added, want.iter().map(|s| (*s).to_owned()).collect());
    Ok(())
}

#[test]
fn the_chart_renders_monitoring_only_when_asked_or_skips_without_helm() -> anyhow::Result<()> {
    use crate::deploy::{helm_render, of_kind, rendered_objects};
    let Some(defaults) = helm_render(&json!({}))? else {
        return Ok(());
    };
    let objects = rendered_objects(&defaults)?;
    for kind in [
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "Service",
        "ConfigMap",
    ] {
        assert!(
            of_kind(&objects, kind).is_empty(),
            "{kind} rendered by default"
        );
    }
    let all = json!({"monitoring": {
        "serviceMonitor": {"enabled": true, "labels": {"release": "prom"}},
        "prometheusRule": {"enabled": true},
        "grafanaDashboard": {"enabled": true}}});
    let Some(on) = helm_render(&all)? else {
        return Ok(());
    };
    assert!(on.lint_errors.is_empty(), "helm lint: {:?}", on.lint_errors);
    let objects = rendered_objects(&on)?;
    let sm = of_kind(&objects, "ServiceMonitor");
    assert_eq!(sm.len(), 1);
    assert_eq!(sm[0]["metadata"]["labels"]["release"], "prom");
    assert_eq!(sm[0]["spec"]["jobLabel"], "app.kubernetes.io/name");
    let svc = of_kind(&objects, "Service");
    assert_eq!(svc[0]["spec"]["ports"][0]["targetPort"], "metrics");
    let rule = of_kind(&objects, "PrometheusRule");
    let rules = yaml(&deploy_dir().join("monitoring/kmeta.rules.yaml"))?;
    assert_eq!(rule[0]["spec"], rules);
    let cm = of_kind(&objects, "ConfigMap");
    let text = cm[0]["data"]["kmeta-dashboard.json"]
        .as_str()
        .context("dashboard")?;
    let file = read(&deploy_dir().join("monitoring/kmeta-dashboard.json"))?;
    assert_eq!(
        serde_json::from_str::<Value>(text)?,
        serde_json::from_str::<Value>(&file)?
    );
    let Some(pods) = helm_render(&json!({"monitoring": {"podMonitor": {"enabled": true}}}))? else {
        return Ok(());
    };
    let objects = rendered_objects(&pods)?;
    assert_eq!(of_kind(&objects, "PodMonitor").len(), 1);
    assert!(of_kind(&objects, "Service").is_empty());
    Ok(())
}
