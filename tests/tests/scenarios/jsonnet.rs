//! Jsonnet hooks evaluated by kmeta (no hook server): service-per-pod's DecoratorControllers
//! with their hooks in a ConfigMap (Jsonnet written here, importing a library key), an inline
//! sync hook, a syntax error reported on the controller with the parents' children kept, a
//! program that never ends failing its parent's sync within its timeout (and one that builds
//! a huge string failing on the memory limit) without changing a child, an edit of the
//! ConfigMap resyncing every parent, and a hook with both `webhook` and `jsonnet` refused.

use kmeta::ManagerConfig;
use kmeta_tests::*;
use serde_json::{Value, json};

/// A hook's `jsonnet` stanza instead of its webhook (merge patch of the spec).
fn jsonnet_hooks(hooks: Value) -> Value {
    let mut out = json!({});
    for (name, jsonnet) in hooks.as_object().into_iter().flatten() {
        out[name] = json!({"webhook": null, "jsonnet": jsonnet});
    }
    json!({"hooks": out})
}

/// A CompositeController whose sync hook is `jsonnet` (a `jsonnet` stanza).
fn jsonnet_cc(name: &str, jsonnet: Value) -> Cc {
    Cc::new(name)
        .sync_url("http://127.0.0.1:9/no-webhook")
        .patch(jsonnet_hooks(json!({"sync": jsonnet})))
}

/// Sync: one ConfigMap child named after the parent, holding the parent's `spec.value` and
/// where the program came from; `spec.loop` makes it recurse for ever (a tail call: no stack
/// limit ends it), `spec.huge` builds a string of a gigabyte.
const SYNC: &str = r#"
local child(parent, version) = {
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name: parent.metadata.name + '-child' },
  data: { value: std.toString(std.get(parent.spec, 'value', '')), version: version },
};
local forever(n) = forever(n + 1) tailstrict;
function(request)
  local spec = std.get(request.parent, 'spec', {});
  if std.get(spec, 'loop', false) then { children: [forever(0)] }
  else if std.get(spec, 'huge', false) then { children: [std.length(std.repeat('x', 1000000000))] }
  else { children: [child(request.parent, 'inline-1')] }
"#;

fn data(cm: &Value, key: &str) -> String {
    cm["data"][key].as_str().unwrap_or_default().to_owned()
}

/// An inline program is a sync hook: children created from its answer, no webhook called.
#[tokio::test]
async fn an_inline_jsonnet_sync_hook_creates_children() -> anyhow::Result<()> {
    let mut s = Scenario::new("jsonnet-inline")
        .crd("Thing", "things")
        .controller(jsonnet_cc("jsonnet-cc", json!({"source": SYNC})))
        .start()
        .await?;
    s.parent("a", json!({"value": 7})).await?;
    let child = s.wait_child("a-child").await?;
    assert_eq!(data(&child, "value"), "7", "{child}");
    assert_eq!(data(&child, "version"), "inline-1", "{child}");
    s.finish().await
}

/// A syntax error stops the controller before it syncs anything with the new program: an event
/// on the CompositeController names the file, line and column, and the children stay.
#[tokio::test]
async fn a_syntax_error_is_reported_and_parents_keep_their_children() -> anyhow::Result<()> {
    let mut s = Scenario::new("jsonnet-syntax")
        .crd("Thing", "things")
        .controller(jsonnet_cc("jsonnet-cc", json!({"source": SYNC})))
        .start()
        .await?;
    s.parent("a", json!({"value": 1})).await?;
    s.wait_child("a-child").await?;
    // the edit: line 3 has a stray `]`
    let broken = "function(request) {\n  children: [],\n  status: ]\n}\n";
    s.merge_patch(
        &s.controllers(),
        "jsonnet-cc",
        json!({"spec": jsonnet_hooks(json!({"sync": {"source": broken}}))}),
    )
    .await?;
    let ev = s
        .wait_event("the syntax error on the CompositeController", None, |e| {
            e["regarding"]["kind"] == "CompositeController"
                && e["reason"] == "CreateError"
                && e["note"]
                    .as_str()
                    .is_some_and(|n| n.contains("source:3:11"))
        })
        .await?;
    assert!(
        ev["note"].as_str().is_some_and(|n| n.contains("sync hook")),
        "{ev}"
    );
    // a parent change now reaches no hook: the child keeps what the last good program wrote
    s.merge_patch(&s.parents(), "a", json!({"spec": {"value": 2}}))
        .await?;
    let child = s.wait_child("a-child").await?;
    assert_eq!(data(&child, "value"), "1", "{child}");
    // fixing the program resumes syncing, with the parent's latest spec
    s.merge_patch(
        &s.controllers(),
        "jsonnet-cc",
        json!({"spec": jsonnet_hooks(json!({"sync": {"source": SYNC}}))}),
    )
    .await?;
    s.wait_child_where("a-child", "the child synced again", |c| {
        data(c, "value") == "2"
    })
    .await?;
    s.finish().await
}

/// A program that never ends fails its parent's sync within the hook's timeout, naming the
/// cause, and changes no child; another parent of the same controller is synced meanwhile.
#[tokio::test]
async fn an_endless_program_times_out_and_changes_no_child() -> anyhow::Result<()> {
    let mut s = Scenario::new("jsonnet-loop")
        .crd("Thing", "things")
        .controller(jsonnet_cc(
            "jsonnet-cc",
            json!({"source": SYNC, "timeout": "2s"}),
        ))
        .start()
        .await?;
    s.parent("a", json!({"value": 1})).await?;
    s.wait_child("a-child").await?;
    s.merge_patch(
        &s.parents(),
        "a",
        json!({"spec": {"value": 2, "loop": true}}),
    )
    .await?;
    let ev = s
        .wait_event("the timeout as a SyncError", Some(&s.ns), |e| {
            e["reason"] == "SyncError"
                && e["regarding"]["name"] == "a"
                && e["note"]
                    .as_str()
                    .is_some_and(|n| n.contains("did not finish within 2s"))
        })
        .await?;
    assert!(
        ev["note"]
            .as_str()
            .is_some_and(|n| n.contains("jsonnet:inline")),
        "{ev}"
    );
    killed_and_others_synced(s, "timeout").await
}

/// After parent `a`'s evaluation was killed for `reason`: the kill is counted, another parent is
/// synced while `a` keeps failing, and `a`'s child still holds its first value.
async fn killed_and_others_synced(mut s: Running, reason: &str) -> anyhow::Result<()> {
    let metrics = s.metrics.encode();
    let counted = format!("kmeta_jsonnet_worker_kills_total{{reason=\"{reason}\"}}");
    assert!(metrics.contains(&counted), "the kill is counted: {metrics}");
    s.parent("b", json!({"value": 5})).await?;
    s.wait_child("b-child").await?;
    let child = s.wait_child("a-child").await?;
    assert_eq!(data(&child, "value"), "1", "{child}");
    s.finish().await
}

/// A program building a gigabyte string is killed at the worker memory limit: its parent's
/// sync fails naming the limit, no child changes, and the next parent is synced by a fresh
/// worker.
#[tokio::test]
async fn a_program_past_the_memory_limit_fails_its_sync() -> anyhow::Result<()> {
    let mut config = ManagerConfig::default();
    config.hook.jsonnet.memory_limit_bytes = 256 * 1024 * 1024;
    let mut s = Scenario::new("jsonnet-memory")
        .crd("Thing", "things")
        .controller(jsonnet_cc("jsonnet-cc", json!({"source": SYNC})))
        .config(config)
        .start()
        .await?;
    s.parent("a", json!({"value": 1})).await?;
    s.wait_child("a-child").await?;
    s.merge_patch(
        &s.parents(),
        "a",
        json!({"spec": {"value": 2, "huge": true}}),
    )
    .await?;
    s.wait_event("the memory limit as a SyncError", Some(&s.ns), |e| {
        e["reason"] == "SyncError"
            && e["note"]
                .as_str()
                .is_some_and(|n| n.contains("more than 256 MiB"))
    })
    .await?;
    killed_and_others_synced(s, "memory").await
}

/// The program in a ConfigMap key, importing another key; editing the ConfigMap resyncs every
/// parent with the new program (the parents themselves do not change).
#[tokio::test]
async fn editing_the_configmap_resyncs_every_parent() -> anyhow::Result<()> {
    let program = |version: &str| {
        json!({
            "sync.jsonnet": "local lib = import 'lib.libsonnet';\nfunction(request) { children: [lib.child(request.parent)] }",
            "lib.libsonnet": format!(
                "{{ child(p):: {{ apiVersion: 'v1', kind: 'ConfigMap', metadata: {{ name: p.metadata.name + '-child' }}, data: {{ version: '{version}' }} }} }}"
            ),
        })
    };
    let mut s = Scenario::new("jsonnet-cm")
        .crd("Thing", "things")
        .prepare()
        .await?;
    let ns = s.ns.clone();
    s.create(
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "hooks", "namespace": ns}, "data": program("1")}),
    )
    .await?;
    let cc = jsonnet_cc(
        "jsonnet-cc",
        json!({"configMapRef": {"namespace": ns, "name": "hooks", "key": "sync.jsonnet"}}),
    );
    s.controller(cc).await?;
    s.start_controller();
    for p in ["a", "b", "c"] {
        s.parent(p, json!({})).await?;
    }
    for p in ["a", "b", "c"] {
        let child = s.wait_child(&format!("{p}-child")).await?;
        assert_eq!(data(&child, "version"), "1", "{child}");
    }
    s.merge_patch(&s.configmaps(), "hooks", json!({"data": program("2")}))
        .await?;
    for p in ["a", "b", "c"] {
        s.wait_child_where(&format!("{p}-child"), "resynced with version 2", |c| {
            data(c, "version") == "2"
        })
        .await?;
    }
    s.finish().await
}

/// A hook with both `webhook` and `jsonnet` is refused with an event on the controller.
#[tokio::test]
async fn a_hook_with_both_webhook_and_jsonnet_is_refused() -> anyhow::Result<()> {
    let s = Scenario::new("jsonnet-both")
        .crd("Thing", "things")
        .controller(
            Cc::new("both-cc")
                .sync_url("http://127.0.0.1:9/no-webhook")
                .patch(json!({"hooks": {"sync": {"jsonnet": {"source": SYNC}}}})),
        )
        .start()
        .await?;
    s.wait_event("the refusal on the CompositeController", None, |e| {
        e["regarding"]["name"] == "both-cc"
            && e["note"]
                .as_str()
                .is_some_and(|n| n.contains("webhook and jsonnet are both set"))
    })
    .await?;
    s.finish().await
}

/// service-per-pod (Metacontroller's examples service-per-pod, with v1 hooks, and
/// service-per-pod-v2) with its three hooks as Jsonnet in a ConfigMap, sharing a library key: a
/// Service per Pod, the pod-name label, and finalize removing the Services when the StatefulSet
/// is deleted.
#[tokio::test]
async fn service_per_pod_runs_from_a_configmap() -> anyhow::Result<()> {
    service_per_pod("v1").await
}

#[tokio::test]
async fn service_per_pod_v2_runs_from_a_configmap() -> anyhow::Result<()> {
    service_per_pod("v2").await
}

/// service-per-pod's two DecoratorControllers, their hooks (wire `version`) the keys of
/// ConfigMap `spp-hooks` in `ns`.
fn spp_decorators(ns: &str, version: &str) -> [Dc; 2] {
    let hook =
        |key: &str| json!({"configMapRef": {"namespace": ns, "name": "spp-hooks", "key": key}});
    let versions =
        json!({"hooks": {"sync": {"version": version}, "finalize": {"version": version}}});
    let services = Dc::new("service-per-pod")
        .sync_url("http://127.0.0.1:9/no-webhook")
        .resources(json!([{"apiVersion": "apps/v1", "resource": "statefulsets",
            "annotationSelector": {"matchExpressions": [
                {"key": "service-per-pod-label", "operator": "Exists"},
                {"key": "service-per-pod-ports", "operator": "Exists"}]}}]))
        .attachments(json!([{"apiVersion": "v1", "resource": "services"}]))
        .patch(jsonnet_hooks(json!({"sync": hook("sync-services.jsonnet"),
                                    "finalize": hook("finalize-services.jsonnet")})))
        .patch(versions);
    let labels = Dc::new("pod-name-label")
        .sync_url("http://127.0.0.1:9/no-webhook")
        .resources(json!([{"apiVersion": "v1", "resource": "pods",
            "annotationSelector": {"matchExpressions": [{"key": "pod-name-label", "operator": "Exists"}]}}]))
        .attachments(Value::Null)
        .patch(jsonnet_hooks(json!({"sync": hook("sync-label.jsonnet")})))
        .patch(json!({"hooks": {"sync": {"version": version}}}));
    [services, labels]
}

async fn service_per_pod(version: &str) -> anyhow::Result<()> {
    let mut s = Scenario::new(&format!("jsonnet-spp-{version}"))
        .prepare()
        .await?;
    let ns = s.ns.clone();
    s.create(
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "spp-hooks", "namespace": ns},
        "data": {
            "util.libsonnet": SPP_LIB,
            "sync-services.jsonnet": SPP_SYNC,
            "finalize-services.jsonnet": SPP_FINALIZE,
            "sync-label.jsonnet": SPP_LABEL,
        }}),
    )
    .await?;
    let [services, labels] = spp_decorators(&ns, version);
    s.decorator(services).await?;
    s.decorator(labels).await?;
    s.start_controller();
    s.create(
        "statefulsets",
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": ns, "annotations": {
            "service-per-pod-label": "pod-name", "service-per-pod-ports": "80:8080,81:8081"}},
        "spec": {"replicas": 2, "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}),
    )
    .await?;
    let svcs = s.api("v1", "Service", "services", Some(&ns));
    for i in 0..2 {
        let svc = s
            .wait_for(&svcs, &format!("web-{i}"), "a Service per Pod", |_| true)
            .await?;
        assert_eq!(
            svc["spec"]["selector"],
            json!({"pod-name": format!("web-{i}")})
        );
        assert_eq!(svc["spec"]["ports"][1]["targetPort"], json!(8081), "{svc}");
    }
    let pods = s.api("v1", "Pod", "pods", Some(&ns));
    s.create("pods", json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": ns, "annotations": {"pod-name-label": "pod-name"}},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}}))
        .await?;
    s.wait_for(&pods, "web-0", "the pod-name label", |p| {
        p["metadata"]["labels"]["pod-name"] == "web-0"
    })
    .await?;
    let statefulsets = s.api("apps/v1", "StatefulSet", "statefulsets", Some(&ns));
    statefulsets.delete("web", &Default::default()).await?;
    for i in 0..2 {
        s.wait_gone(&svcs, &format!("web-{i}"), "Services deleted by finalize")
            .await?;
    }
    s.wait_gone(&statefulsets, "web", "the StatefulSet released")
        .await?;
    s.finish().await
}

const SPP_LIB: &str = r#"
{
  // "80:8080,81:8081" -> Service ports
  ports(spec)::
    [
      local pair = std.split(p, ':');
      { name: 'port-' + pair[0], port: std.parseInt(pair[0]), targetPort: std.parseInt(pair[1]) }
      for p in std.split(spec, ',')
    ],
  annotation(obj, key):: obj.metadata.annotations[key],
}
"#;

const SPP_SYNC: &str = r#"
local util = import 'util.libsonnet';
function(request)
  local sts = request.object;
  local label = util.annotation(sts, 'service-per-pod-label');
  {
    attachments: [
      {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: '%s-%d' % [sts.metadata.name, i], labels: { app: 'service-per-pod' } },
        spec: {
          selector: { [label]: '%s-%d' % [sts.metadata.name, i] },
          ports: util.ports(util.annotation(sts, 'service-per-pod-ports')),
        },
      }
      for i in std.range(0, sts.spec.replicas - 1)
    ],
  }
"#;

const SPP_FINALIZE: &str = r#"
function(request) {
  attachments: [],
  finalized: std.length(std.objectFields(std.get(request.attachments, 'Service.v1', {}))) == 0,
}
"#;

const SPP_LABEL: &str = r#"
local util = import 'util.libsonnet';
function(request) {
  labels: { [util.annotation(request.object, 'pod-name-label')]: request.object.metadata.name },
}
"#;

/// `kmeta render` evaluates a Jsonnet hook kept in a ConfigMap, read from `--hook-objects`
/// instead of a cluster (its library key imported), and its create body is the child the
/// controller then creates; without the ConfigMap's file it says which object it lacks.
#[tokio::test]
async fn render_evaluates_a_configmap_jsonnet_hook_as_the_controller_does() -> anyhow::Result<()> {
    use kmeta::render::{self, RenderOptions, Write};
    let mut s = Scenario::new("jsonnet-render")
        .crd("Thing", "things")
        .prepare()
        .await?;
    let ns = s.ns.clone();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
    "metadata": {"name": "render-hooks", "namespace": ns},
    "data": {
        "sync.jsonnet": "local lib = import 'lib.libsonnet';\nfunction(request) { children: [lib.child(request.parent)] }",
        "lib.libsonnet": "{ child(p):: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: p.metadata.name + '-child' }, data: { from: 'library' } } }",
    }});
    s.create("configmaps", cm.clone()).await?;
    let r =
        json!({"configMapRef": {"namespace": ns, "name": "render-hooks", "key": "sync.jsonnet"}});
    let cc = s.controller(jsonnet_cc("render-cc", r)).await?;
    let parent = s.parent("one", json!({})).await?;
    let dir = tempfile::tempdir()?;
    let file = |name: &str, v: &Value| manifest_file(dir.path(), name, &[v]);
    let without = RenderOptions {
        controller: file("cc.yaml", &cc)?,
        parent: file("parent.yaml", &parent)?,
        jsonnet_worker: jsonnet_worker(),
        ..RenderOptions::default()
    };
    let e = render::render(&without)
        .await
        .expect_err("no ConfigMap given");
    assert!(
        e.to_string().contains("render-hooks") && e.to_string().contains("--hook-objects"),
        "{e}"
    );
    let opts = RenderOptions {
        hook_objects: vec![file("cm.yaml", &cm)?],
        ..without
    };
    let rendered = render::render(&opts).await?;
    let [Write::Create(body)] = rendered.writes.as_slice() else {
        panic!("expected one create: {:?}", rendered.writes)
    };
    assert_eq!(body["data"]["from"], "library", "{body}");
    s.start_controller();
    let made = s.wait_child("one-child").await?;
    assert_eq!(made["data"], body["data"]);
    assert_eq!(made["metadata"]["labels"], body["metadata"]["labels"]);
    assert_eq!(
        made["metadata"]["ownerReferences"],
        body["metadata"]["ownerReferences"]
    );
    s.finish().await
}
