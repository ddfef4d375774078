//! Plan before apply: `kmeta render` exits 0 exactly when a sync would write nothing, and
//! `kmeta plan` predicts, parent by parent and child by child, the writes `kmeta run` then makes
//! under a new hook version — and writes nothing itself.

use std::collections::BTreeMap;

use kmeta::plan::{Outcome, PlanOptions};
use kmeta::render::{self, RenderOptions, Write};
use kmeta_tests::*;
use serde_json::{Map, Value, json};

/// `sync`: ConfigMaps `<parent>-a` and `<parent>-b` with `v` from the parent's spec.
/// `sync-v2` (the new version): `-a` gains a key, `-b` is no longer desired, `-c` is new, and
/// the status says which version answered.
fn two_versions(hook: &str, req: &Value) -> Reply {
    let parent = &req["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let v = &parent["spec"]["v"];
    let cm = |suffix: &str, data: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-{suffix}")}, "data": data})
    };
    match hook {
        "sync-v2" => Reply::Json(json!({
            "status": {"v": v, "hook": "v2"},
            "children": [cm("a", json!({"v": v, "w": "new"})), cm("c", json!({"v": v}))],
        })),
        _ => Reply::Json(json!({
            "status": {"v": v},
            "children": [cm("a", json!({"v": v})), cm("b", json!({"v": v}))],
        })),
    }
}

/// `v` with every object's keys in reverse order: what a file written by another tool may hold.
fn reversed(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            keys.reverse();
            let out: Map<String, Value> = keys
                .into_iter()
                .map(|k| (k.clone(), reversed(&m[k])))
                .collect();
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(reversed).collect()),
        other => other.clone(),
    }
}

/// The writes in the write log since `from` in namespace `ns` (and of its parents' status), as
/// `verb resource name` with their count.
fn logged(s: &Running, from: u64) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let Some(server) = s.server() else {
        return out;
    };
    for w in server.write_log().since(from) {
        if w.namespace.as_deref() != Some(s.ns.as_str()) || w.code >= 400 {
            continue;
        }
        if w.resource == "events" {
            continue;
        }
        let name = w.name.unwrap_or_else(|| "(created)".into());
        *out.entry(format!("{} {} {name}", w.verb, w.resource))
            .or_default() += 1;
    }
    out
}

fn log_position(s: &Running) -> u64 {
    s.server().map_or(0, |server| {
        server.write_log().enable(100_000);
        server.write_log().since(0).last().map_or(0, |w| w.seq + 1)
    })
}

/// On a parent kmeta has synced, render exits 0 (nothing to write, the sync record included),
/// whatever the key order of the files; its diff says so; the hook call carries a traceparent;
/// a parent without a uid is refused unless a placeholder is asked for.
#[tokio::test]
async fn render_says_nothing_to_write_for_a_parent_in_sync() -> anyhow::Result<()> {
    let mut s = Scenario::new("render-in-sync")
        .crd("Thing", "things")
        .hook(two_versions)
        .prepare()
        .await?;
    let cc = s.controller(Cc::new("render-in-sync-cc")).await?;
    s.parent("one", json!({"v": "1"})).await?;
    s.start_controller();
    s.wait_child("one-b").await?;
    let synced = s
        .wait_parent("one", "its sync record", |p| {
            p.pointer("/status/kmeta/lastSync").is_some() && p["status"]["v"] == "1"
        })
        .await?;
    s.stop_controller().await?;
    let parent = s.get(&s.parents(), "one").await?.unwrap_or_default();
    assert_eq!(
        parent["metadata"]["resourceVersion"],
        synced["metadata"]["resourceVersion"]
    );
    let a = s.get(&s.configmaps(), "one-a").await?.unwrap_or_default();
    let b = s.get(&s.configmaps(), "one-b").await?.unwrap_or_default();
    let dir = tempfile::tempdir()?;
    let calls_before = s.hooks().count("sync");
    let opts = RenderOptions {
        controller: manifest_file(dir.path(), "cc.yaml", &[&cc])?,
        parent: manifest_file(dir.path(), "parent.yaml", &[&reversed(&parent)])?,
        observed: vec![manifest_file(
            dir.path(),
            "observed.yaml",
            &[&reversed(&b), &reversed(&a)],
        )?],
        ..RenderOptions::default()
    };
    let rendered = render::render(&opts).await?;
    let diff = render::as_diff(&rendered);
    assert!(!rendered.changes(), "a parent in sync: {diff}");
    assert!(diff.contains("# no write status"), "{diff}");
    assert!(!diff.contains("@@"), "no diff at all: {diff}");
    // the same with the children read from the cluster
    let live = RenderOptions {
        observed: Vec::new(),
        live: Some(render::Live(s.client.clone())),
        ..opts.clone()
    };
    assert!(!render::render(&live).await?.changes(), "--live");
    // the hook was called as a sync calls it: with a W3C traceparent
    let headers = s.hooks().header("sync", "traceparent");
    let ours = &headers[calls_before..];
    assert!(!ours.is_empty());
    for h in ours {
        let h = h.as_deref().unwrap_or_default();
        assert!(h.starts_with("00-") && h.len() == 55, "traceparent {h:?}");
    }
    // a manifest without a uid
    let mut manifest = parent.clone();
    manifest["metadata"].as_object_mut().unwrap().remove("uid");
    let no_uid = RenderOptions {
        parent: manifest_file(dir.path(), "manifest.yaml", &[&manifest])?,
        ..opts.clone()
    };
    let e = render::render(&no_uid).await.unwrap_err().to_string();
    assert!(
        e.contains("no metadata.uid") && e.contains("--placeholder-uid"),
        "{e}"
    );
    let placeholder = RenderOptions {
        placeholder_uid: true,
        ..no_uid
    };
    let r = render::render(&placeholder).await?;
    assert_eq!(r.parent["metadata"]["uid"], render::PLACEHOLDER_UID);
    s.finish().await
}

/// The planned writes of one parent, as `verb resource name` (as the write log names them)
/// with the body each sends.
fn planned_writes(r: &render::Rendered) -> Vec<(String, Option<Value>)> {
    let name = |v: &Value| {
        v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    r.writes
        .iter()
        .map(|w| match w {
            Write::Create(v) => ("create configmaps (created)".to_owned(), Some(v.clone())),
            Write::Update(v) => (format!("update configmaps {}", name(v)), Some(v.clone())),
            Write::Apply { body, .. } => (
                format!("patch configmaps {}", name(body)),
                Some(body.clone()),
            ),
            Write::Delete { object, .. } => (format!("delete configmaps {}", name(object)), None),
        })
        .collect()
}

/// What a fleet's plans predict: the child writes as the write log names them, the bodies (with
/// whether the whole object is compared), and how many status writes.
#[derive(Debug, Default)]
struct Predicted {
    writes: BTreeMap<String, usize>,
    bodies: Vec<(Value, bool)>,
    status_writes: usize,
}

/// The writes the plans predict, a recreate counted as the delete and the create that follow it
/// (the create comes with the next sync, once the delete has landed; its body is the desired
/// child, compared by data and labels: the create adds the owner reference).
fn predicted(plans: &BTreeMap<String, render::Rendered>) -> Predicted {
    let mut p = Predicted::default();
    for r in plans.values() {
        for (what, body) in planned_writes(r) {
            *p.writes.entry(what).or_default() += 1;
            p.bodies.extend(body.map(|b| (b, true)));
        }
        for w in &r.writes {
            if let Write::Delete {
                object,
                reason: "recreate",
            } = w
            {
                let created = "create configmaps (created)".to_owned();
                *p.writes.entry(created).or_default() += 1;
                let name = &object["metadata"]["name"];
                let desired = r.desired.iter().filter(|d| d["metadata"]["name"] == *name);
                p.bodies.extend(desired.map(|d| (d.clone(), false)));
            }
        }
        p.status_writes += usize::from(r.status_changes());
    }
    p
}

/// The summary of a fleet's rendered syncs, as `kmeta plan` prints it.
fn summarize(plans: &BTreeMap<String, render::Rendered>) -> kmeta::plan::Summary {
    let mut summary = kmeta::plan::Summary::default();
    for (parent, r) in plans {
        let outcome = Outcome::Planned(Box::new(r.clone()));
        let parent = parent.clone();
        summary.add(&kmeta::plan::ParentPlan { parent, outcome });
    }
    summary
}

/// Plans `opts` and keeps every parent's rendered sync; checks the plan wrote nothing.
async fn plan_fleet(
    s: &Running,
    opts: &PlanOptions,
) -> anyhow::Result<BTreeMap<String, render::Rendered>> {
    let from = log_position(s);
    let mut plans = BTreeMap::new();
    kmeta::plan::plan(&s.client, opts, |p| {
        if let Outcome::Planned(r) = &p.outcome {
            plans.insert(p.parent.clone(), (**r).clone());
        }
    })
    .await?;
    assert_eq!(logged(s, from), BTreeMap::new(), "the plan wrote");
    Ok(plans)
}

/// The ConfigMap writes logged since `from` (the hooks' ConfigMap aside).
fn child_writes(s: &Running, from: u64) -> BTreeMap<String, usize> {
    logged(s, from)
        .into_iter()
        .filter(|(k, _)| k.contains(" configmaps ") && !k.contains("plan-hooks"))
        .collect()
}

/// Checks that the child writes logged since `from` are the predicted ones, and that each child
/// is now as the plan said it would be written.
async fn made_as_predicted(
    s: &Running,
    from: u64,
    p: &Predicted,
    what: &str,
) -> anyhow::Result<()> {
    assert_eq!(
        child_writes(s, from),
        p.writes,
        "{what}: writes made vs planned"
    );
    for (body, whole) in &p.bodies {
        let child = body["metadata"]["name"].as_str().unwrap_or_default();
        let live = s.get(&s.configmaps(), child).await?.unwrap_or_default();
        if *whole {
            assert_eq!(
                as_written(live),
                as_written(body.clone()),
                "{what}: {child}"
            );
        } else {
            assert_eq!(live["data"], body["data"], "{what}: {child}");
            let labels = &body["metadata"]["labels"];
            assert_eq!(&live["metadata"]["labels"], labels, "{what}: {child}");
        }
    }
    Ok(())
}

/// The plan options of the scenario's controller `name`, in the scenario's namespace.
fn plan_options(s: &Running, name: &str) -> PlanOptions {
    PlanOptions {
        controller: name.to_owned(),
        controller_file: None,
        hook_url: None,
        hook_objects: Vec::new(),
        selector: None,
        namespace: Some(s.ns.clone()),
        concurrency: 4,
        jsonnet_worker: jsonnet_worker(),
    }
}

/// A fleet of `parents` parents of controller `cc`, each synced (its sync record written).
async fn synced_fleet(s: &mut Running, cc: Cc, parents: usize) -> anyhow::Result<Value> {
    let cc = s.controller(cc).await?;
    for i in 0..parents {
        s.parent(&format!("p{i}"), json!({"v": "1"})).await?;
    }
    s.start_controller();
    for i in 0..parents {
        s.wait_parent(&format!("p{i}"), "synced", |p| {
            p.pointer("/status/kmeta/lastSync").is_some()
        })
        .await?;
    }
    Ok(cc)
}

/// The differential proof: a fleet synced by the old hook is planned under the new one while
/// kmeta runs (no write in the cluster), then rolled out; the writes kmeta made equal the
/// planned ones, parent by parent and child by child, body by body, status writes included.
#[tokio::test]
async fn plan_predicts_every_write_of_a_new_hook_version() -> anyhow::Result<()> {
    const PARENTS: usize = 6;
    let mut s = Scenario::new("plan-rollout")
        .crd("Thing", "things")
        .hook(two_versions)
        .prepare()
        .await?;
    let name = "plan-rollout-cc";
    synced_fleet(&mut s, Cc::new(name), PARENTS).await?;
    // the old hook, planned: nothing to write
    let mut opts = plan_options(&s, name);
    let same = summarize(&plan_fleet(&s, &opts).await?);
    assert_eq!((same.parents, same.changed), (PARENTS, 0), "{same:?}");

    // the new hook, planned while kmeta runs: nothing is written
    let url = s.hooks().url("sync-v2");
    opts.hook_url = Some(url.clone());
    let plans = plan_fleet(&s, &opts).await?;
    let summary = summarize(&plans);
    assert_eq!((summary.parents, summary.changed), (PARENTS, PARENTS));
    let counts = &summary.kinds["ConfigMap.v1"];
    let n = PARENTS;
    assert_eq!((counts.create, counts.update, counts.delete), (n, n, n));
    assert!(summary.top_fields().contains(&("data.w", n)), "{summary:?}");
    let p = predicted(&plans);
    assert_eq!(p.status_writes, PARENTS);

    // the rollout: the controller now calls the new hook
    let from = log_position(&s);
    let hooks = json!({"spec": {"hooks": {"sync": {"webhook": {"url": url}}}}});
    s.merge_patch(&s.controllers(), name, hooks).await?;
    for i in 0..PARENTS {
        s.wait_parent(&format!("p{i}"), "synced by v2", |p| {
            p["status"]["hook"] == "v2"
        })
        .await?;
        let b = format!("p{i}-b");
        s.wait_gone(&s.configmaps(), &b, &format!("{b} deleted"))
            .await?;
    }
    made_as_predicted(&s, from, &p, "new hook version").await?;
    let status_writes: usize = logged(&s, from)
        .into_iter()
        .filter(|(k, _)| k.starts_with("update things/status"))
        .map(|(_, n)| n)
        .sum();
    // a lagging or churned watch makes syncs that wait or fail on the way (a Synced=False
    // condition written and cleared): status writes beyond the plan's, which only a quiet
    // watch rules out
    if !requests_disturbed()? && watch_lag()?.is_none() {
        let what = "status writes made vs planned";
        assert_eq!(status_writes, p.status_writes, "{what}");
    }
    s.finish().await
}

/// A Jsonnet sync hook in a ConfigMap: one ConfigMap child per parent, saying which version of
/// the program made it.
fn jsonnet_hooks(ns: &str, version: &str) -> Value {
    let program = format!(
        "function(request) {{ status: {{ from: '{version}' }}, children: [{{ apiVersion: 'v1', kind: 'ConfigMap', \
         metadata: {{ name: request.parent.metadata.name + '-child' }}, data: {{ from: '{version}' }} }}] }}"
    );
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "plan-hooks", "namespace": ns},
        "data": {"sync.jsonnet": program}})
}

/// Waits until every parent's child was made by program `version`.
async fn wait_children_from(s: &Running, parents: usize, version: &str) -> anyhow::Result<()> {
    for i in 0..parents {
        let what = format!("made by {version}");
        s.wait_child_where(&format!("p{i}-child"), &what, |c| {
            c["data"]["from"] == version
        })
        .await?;
    }
    Ok(())
}

/// The differential proof for a Jsonnet hook edited in its ConfigMap, then for a new
/// CompositeController (`updateStrategy` Recreate, the program inline): planned from the files
/// before they are applied, the writes kmeta then makes are the planned ones.
#[tokio::test]
async fn plan_predicts_a_jsonnet_edit_and_a_new_update_strategy() -> anyhow::Result<()> {
    const PARENTS: usize = 4;
    let mut s = Scenario::new("plan-jsonnet")
        .crd("Thing", "things")
        .prepare()
        .await?;
    let ns = s.ns.clone();
    s.create("configmaps", jsonnet_hooks(&ns, "v1")).await?;
    let r = json!({"configMapRef": {"namespace": ns, "name": "plan-hooks", "key": "sync.jsonnet"}});
    let name = "plan-jsonnet-cc";
    let cc = Cc::new(name)
        .sync_url("http://127.0.0.1:9/no-webhook")
        .patch(json!({"hooks": {"sync": {"webhook": null, "jsonnet": r}}}));
    let cc = synced_fleet(&mut s, cc, PARENTS).await?;
    let dir = tempfile::tempdir()?;
    // the Jsonnet edit, planned from the file, then applied
    let v2 = jsonnet_hooks(&ns, "v2");
    let opts = PlanOptions {
        hook_objects: vec![manifest_file(dir.path(), "hooks-v2.yaml", &[&v2])?],
        ..plan_options(&s, name)
    };
    let p = predicted(&plan_fleet(&s, &opts).await?);
    assert_eq!(p.writes.values().sum::<usize>(), PARENTS, "{p:?}");
    let from = log_position(&s);
    let edit = json!({"data": v2["data"]});
    s.merge_patch(&s.configmaps(), "plan-hooks", edit).await?;
    wait_children_from(&s, PARENTS, "v2").await?;
    made_as_predicted(&s, from, &p, "Jsonnet edit").await?;

    // a new CompositeController: updateStrategy Recreate and the program inline, planned from
    // its manifest, then applied as one edit
    let mut recreate = cc.clone();
    recreate["spec"]["childResources"][0]["updateStrategy"] = json!({"method": "Recreate"});
    let v3 = jsonnet_hooks(&ns, "v3");
    let source = v3["data"]["sync.jsonnet"].clone();
    recreate["spec"]["hooks"]["sync"]["jsonnet"] = json!({"source": source});
    let opts = PlanOptions {
        controller_file: Some(manifest_file(dir.path(), "cc.yaml", &[&recreate])?),
        hook_objects: Vec::new(),
        ..opts
    };
    let p = predicted(&plan_fleet(&s, &opts).await?);
    let created = p.writes.get("create configmaps (created)");
    assert_eq!(created, Some(&PARENTS), "{p:?}");
    let from = log_position(&s);
    let edit = json!({"spec": {
        "childResources": recreate["spec"]["childResources"],
        "hooks": {"sync": {"jsonnet": {"configMapRef": null, "source": source}}}}});
    s.merge_patch(&s.controllers(), name, edit).await?;
    wait_children_from(&s, PARENTS, "v3").await?;
    made_as_predicted(&s, from, &p, "Recreate").await?;
    s.finish().await
}
