//! Fields handed off by merge key (issue 51, docs/design/field-handoff.md): a Deployment child
//! whose hook sets `replicas: 3` and `resources` for the container `app`; an HPA-like writer
//! owns `spec.replicas`, a VPA-like writer `containers[name=app].resources`, and a mutating
//! admission hook injects a sidecar **at index 0**. Over 1 000 fast resyncs (the hook asks for a
//! resync every 5 ms), with the owners changing their fields every tenth of them, kmeta writes
//! the child not once, the sidecar and both owners' values stay, and a hook change to `app`'s
//! image still lands. Under dynamic apply and server-side apply, for a CompositeController's
//! child and a DecoratorController's attachment. Switching the rules on for an existing child
//! writes nothing; switching them off takes the fields back. Beside it: the same rule written by
//! position names the sidecar, and kmeta refuses it (and a path naming no field), naming the
//! path.

use kmeta::ManagerConfig;
use kmeta::reconcile::ApplyStrategy;
use kmeta_apiserver::Operation;
use kmeta_tests::*;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

const APP_RESOURCES: &str = "spec.template.spec.containers[name=app].resources";

/// The rules: `spec.replicas` to the HPA, `app`'s resources to the VPA.
fn rules() -> Value {
    json!([{"path": "spec.replicas", "name": "hpa"}, {"path": APP_RESOURCES, "name": "vpa"}])
}

/// The child Deployment the hook wants for a parent `name` with `image`.
fn deployment(name: &str, image: &Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": 3,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image,
                    "resources": {"requests": {"cpu": "100m"}}}]}}}})
}

/// The CompositeController's hook: the Deployment, and a resync every 5 ms.
fn hook(_hook: &str, req: &Value) -> Reply {
    let p = &req["parent"];
    let name = p["metadata"]["name"].as_str().unwrap_or_default();
    Reply::Json(json!({
        "children": [deployment(name, &p["spec"]["image"])],
        "resyncAfterSeconds": 0.005
    }))
}

/// The DecoratorController's hook: the same Deployment as an attachment of the target.
fn decorator_hook(_hook: &str, req: &Value) -> Reply {
    let o = &req["object"];
    let name = o["metadata"]["name"].as_str().unwrap_or_default();
    Reply::Json(json!({
        "attachments": [deployment(name, &o["spec"]["image"])],
        "resyncAfterSeconds": 0.005
    }))
}

fn sidecar() -> Value {
    json!({"name": "istio-proxy", "image": "proxy:1", "resources": {"requests": {"cpu": "10m"}}})
}

/// What a mesh injector does: the sidecar first in the pod template's containers.
fn inject_first(obj: &mut Value) {
    if let Some(cs) = obj
        .pointer_mut("/spec/template/spec/containers")
        .and_then(Value::as_array_mut)
        && !cs.iter().any(|c| c["name"] == "istio-proxy")
    {
        cs.insert(0, sidecar());
    }
}

/// Another writer's update of `name` as field manager `manager` (read, change, replace; read
/// again after a conflict, as a controller does: what kmeta wrote meanwhile is checked apart).
async fn write_as(
    api: &Api<DynamicObject>,
    name: &str,
    manager: &str,
    change: impl Fn(&mut Value),
) -> anyhow::Result<()> {
    let params = PostParams {
        field_manager: Some(manager.to_owned()),
        ..PostParams::default()
    };
    eventually(&format!("{manager}'s write of {name}"), TIMEOUT, || async {
        let mut v = serde_json::to_value(api.get(name).await?)?;
        change(&mut v);
        match api.replace(name, &params, &obj(v)?).await {
            Ok(_) => Ok(Some(())),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
            Err(e) => Err(e.into()),
        }
    })
    .await
}

/// The container `name` of a Deployment.
fn container<'v>(d: &'v Value, name: &str) -> Option<&'v Value> {
    d.pointer("/spec/template/spec/containers")?
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

/// What the owners set last.
#[derive(Clone, Debug)]
struct Owners {
    replicas: i64,
    cpu: String,
}

impl Owners {
    async fn write(&self, api: &Api<DynamicObject>) -> anyhow::Result<()> {
        let replicas = self.replicas;
        write_as(api, "web", "hpa", |d| {
            d["spec"]["replicas"] = json!(replicas)
        })
        .await?;
        let cpu = self.cpu.clone();
        write_as(api, "web", "vpa", |d| {
            if let Some(cs) = d
                .pointer_mut("/spec/template/spec/containers")
                .and_then(Value::as_array_mut)
            {
                for c in cs.iter_mut().filter(|c| c["name"] == "app") {
                    c["resources"] = json!({"requests": {"cpu": cpu}});
                }
            }
        })
        .await
    }
}

/// The child as it must be: the sidecar first and untouched, `app` with `image` and the VPA's
/// resources, the HPA's replicas.
fn check(d: &Value, image: &str, owners: &Owners) -> anyhow::Result<()> {
    let names: Vec<&Value> = d
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| cs.iter().map(|c| &c["name"]).collect())
        .unwrap_or_default();
    anyhow::ensure!(
        names == [&json!("istio-proxy"), &json!("app")],
        "containers: {d}"
    );
    anyhow::ensure!(
        container(d, "istio-proxy") == Some(&sidecar()),
        "sidecar: {d}"
    );
    let app = container(d, "app");
    anyhow::ensure!(
        app.is_some_and(|a| a["image"] == image),
        "image {image}: {d}"
    );
    let cpu = app.map(|a| &a["resources"]["requests"]["cpu"]);
    anyhow::ensure!(
        cpu == Some(&json!(owners.cpu)),
        "the VPA's {}: {d}",
        owners.cpu
    );
    anyhow::ensure!(
        d["spec"]["replicas"] == owners.replicas,
        "the HPA's replicas: {d}"
    );
    Ok(())
}

/// How many resyncs each case watches: 1 000 (at a resync every 5 ms plus a sync's own time,
/// seconds on kmeta-apiserver).
const RESYNCS: u64 = 1_000;

/// The proof for one controller `cc` (already created) whose child `web` is a Deployment:
/// the child created with the hook's values and the sidecar first; the owners take their
/// fields; [`RESYNCS`] resyncs with the owners changing their fields ten times, without a write
/// by kmeta; then a new image from the hook lands, the owners' values kept.
async fn prove(s: &Running, cc: &str, parents: &Api<DynamicObject>) -> anyhow::Result<()> {
    let deployments = s
        .env
        .api("apps/v1", "Deployment", "deployments", Some(&s.ns));
    let created = s
        .wait_for(&deployments, "web", "the child, sidecar first", |d| {
            container(d, "istio-proxy").is_some() && container(d, "app").is_some()
        })
        .await?;
    let hooks_values = Owners {
        replicas: 3,
        cpu: "100m".to_owned(),
    };
    check(&created, "app:1", &hooks_values)?;
    // the peers' rule by position names the sidecar here, not `app` (kmeta refuses it:
    // `a_path_by_position_or_naming_no_field_is_refused`)
    assert_eq!(
        created.pointer("/spec/template/spec/containers/0/resources"),
        Some(&sidecar()["resources"]),
        "index 0 is the sidecar"
    );
    // a hook change before the owners wrote: under server-side apply kmeta's manager still owns
    // the fields it created, and leaving them out of the apply must not remove them
    let d = new_image(s, parents, &deployments, "app:2").await?;
    check(&d, "app:2", &hooks_values)?;
    let owners = Owners {
        replicas: 7,
        cpu: "750m".to_owned(),
    };
    owners.write(&deployments).await?;
    let owners = resync_window(s, cc, &deployments, owners).await?;
    // the hook's own change still lands, the owners' values and the sidecar kept
    let d = new_image(s, parents, &deployments, "app:3").await?;
    check(&d, "app:3", &owners)?;
    owned_by_others(cc, &deployments).await
}

/// [`RESYNCS`] syncs of `cc`, the owners changing their fields every tenth of them
/// (`owners`: what they set last; returned: what they set last then), without a write by
/// kmeta to the child, the fields and the sidecar checked every tenth.
async fn resync_window(
    s: &Running,
    cc: &str,
    deployments: &Api<DynamicObject>,
    mut owners: Owners,
) -> anyhow::Result<Owners> {
    let log_from = log_position(s);
    let from = s.syncs(cc);
    for round in 1..=10u64 {
        let until_syncs = from + RESYNCS * round / 10;
        until(&format!("{cc}: {until_syncs} syncs"), || {
            s.syncs(cc) >= until_syncs
        })
        .await?;
        let d = s.get(deployments, "web").await?;
        check(d.as_ref().unwrap_or(&Value::Null), "app:2", &owners)?;
        if round < 10 {
            owners = Owners {
                replicas: 7 + round as i64,
                cpu: format!("{}m", 700 + 10 * round),
            };
            owners.write(deployments).await?;
        }
    }
    assert_eq!(
        kmeta_writes(s, log_from),
        Vec::<String>::new(),
        "{cc}: kmeta wrote the child during {} syncs",
        s.syncs(cc) - from
    );
    // nor the parent over and over: its sync record says `LeftAlone` once per reason, not per
    // resync. Two reasons at most: a sync may see the HPA's write before the VPA's (`field
    // rules: hpa`, then `hpa, vpa`); every later write changes values only. A record-only status
    // write is not awaited: under watch lag the next resyncs, 5 ms apart, may send it again from
    // the stale parent, refused with 409 until the watch catches up.
    let others: Vec<String> = kmeta_writes_to(s, log_from, |r| r != "deployments" && r != "events")
        .into_iter()
        .filter(|w| !w.ends_with("(409)"))
        .collect();
    assert!(others.len() <= 2, "{cc}: kmeta wrote {others:?}");
    Ok(owners)
}

/// No field manager of kmeta's owns the handed-off `spec.replicas` of the child.
async fn owned_by_others(cc: &str, deployments: &Api<DynamicObject>) -> anyhow::Result<()> {
    let d = serde_json::to_value(deployments.get("web").await?)?;
    let kmeta_owns = |pointer: &str| {
        d.pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|e| {
                e["manager"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("metacontroller/"))
            })
            .any(|e| e["fieldsV1"].pointer(pointer).is_some())
    };
    anyhow::ensure!(
        !kmeta_owns("/f:spec/f:replicas"),
        "{cc}: kmeta owns replicas: {d}"
    );
    Ok(())
}

/// The hook's answer changes: the parent's `image`; waits for the child to have it.
async fn new_image(
    s: &Running,
    parents: &Api<DynamicObject>,
    deployments: &Api<DynamicObject>,
    image: &str,
) -> anyhow::Result<Value> {
    s.merge_patch(parents, "web", json!({"spec": {"image": image}}))
        .await?;
    s.wait_for(deployments, "web", &format!("the image {image}"), |d| {
        container(d, "app").is_some_and(|a| a["image"] == image)
    })
    .await
}

/// The injector as a mutating admission hook of kmeta-apiserver; on a real cluster, a writer
/// that puts the sidecar first after kmeta created the child.
async fn injector(s: &Running) -> anyhow::Result<()> {
    match s.server() {
        Some(server) => {
            server
                .admission()
                .mutate("apps/v1", "deployments", |obj, op| {
                    if matches!(op, Operation::Create | Operation::Update) {
                        inject_first(obj);
                    }
                    Ok(())
                });
            Ok(())
        }
        None => {
            let deployments = s
                .env
                .api("apps/v1", "Deployment", "deployments", Some(&s.ns));
            s.wait_for(&deployments, "web", "the child", |_| true)
                .await?;
            write_as(&deployments, "web", "injector", inject_first).await
        }
    }
}

/// Starts the scenario's controller `controller` (its object already created) under
/// `strategy` with the injector in place, creates the parent `web`, and runs [`prove`].
async fn start_and_prove(
    s: &mut Running,
    controller: &str,
    strategy: ApplyStrategy,
) -> anyhow::Result<()> {
    if s.server().is_some() {
        injector(s).await?;
    }
    s.start_controller_with(ManagerConfig::default().apply_strategy(strategy));
    s.parent("web", json!({"image": "app:1"})).await?;
    if s.server().is_none() {
        injector(s).await?;
    }
    let parents = s.parents();
    prove(s, controller, &parents).await
}

async fn composite(name: &str, strategy: ApplyStrategy) -> anyhow::Result<()> {
    let mut s = Scenario::new(name)
        .crd("App", "apps")
        .hook(hook)
        .prepare()
        .await?;
    let cc = format!("{name}-cc");
    s.controller(Cc::new(&cc).patch(with_rules(rules())))
        .await?;
    start_and_prove(&mut s, &cc, strategy).await?;
    // the parent's sync record says why the child differs from the answer
    s.wait_parent("web", "the child left alone by the field rules", |p| {
        p.pointer("/status/kmeta/lastSync/children")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["action"] == "LeftAlone" && c["reason"] == "field rules: hpa, vpa")
            })
    })
    .await?;
    s.finish().await
}

#[tokio::test]
async fn handed_off_fields_survive_resyncs_under_dynamic_apply() -> anyhow::Result<()> {
    composite("handoff", ApplyStrategy::DynamicApply).await
}

#[tokio::test]
async fn handed_off_fields_survive_resyncs_under_server_side_apply() -> anyhow::Result<()> {
    composite("handoff-ssa", ApplyStrategy::ServerSideApply).await
}

/// The same for a DecoratorController's attachment of an `App` target.
async fn attachment(name: &str, strategy: ApplyStrategy) -> anyhow::Result<()> {
    let mut s = Scenario::new(name)
        .crd("App", "apps")
        .hook(decorator_hook)
        .prepare()
        .await?;
    let dc = format!("{name}-{}", s.id);
    let av = s.av.clone();
    s.decorator(
        Dc::new(&dc)
            .resources(json!([{"apiVersion": av, "resource": "apps"}]))
            .attachments(json!([{"apiVersion": "apps/v1", "resource": "deployments",
                "updateStrategy": {"method": "InPlace"}, "fieldRules": rules()}])),
    )
    .await?;
    start_and_prove(&mut s, &dc, strategy).await?;
    s.finish().await
}

#[tokio::test]
async fn handed_off_fields_of_an_attachment_survive_resyncs() -> anyhow::Result<()> {
    attachment("handoff-dec", ApplyStrategy::DynamicApply).await
}

#[tokio::test]
async fn handed_off_fields_of_an_attachment_survive_server_side_apply() -> anyhow::Result<()> {
    attachment("handoff-dec-ssa", ApplyStrategy::ServerSideApply).await
}

/// A rule written by position, as the peers write it, and a path naming no field of the kind,
/// are refused: the controller does not start, its `CreateError` event and its
/// `FieldRulesAccepted=False` condition name the path; fixed, the controller starts and the
/// condition goes.
#[tokio::test]
async fn a_path_by_position_or_naming_no_field_is_refused() -> anyhow::Result<()> {
    let mut s = Scenario::new("handoff-bad")
        .crd("App", "apps")
        .hook(hook)
        .start()
        .await?;
    for (n, path, says) in [
        (
            1,
            "spec.template.spec.containers[0].resources",
            "is a position",
        ),
        (2, "spec.replica", "`replica` is no field"),
    ] {
        let cc = format!("handoff-bad-{n}-{}", s.id);
        s.controller(Cc::new(&cc).patch(json!({"childResources": [{
            "apiVersion": "apps/v1", "resource": "deployments",
            "fieldRules": [{"path": path}]}]})))
            .await?;
        let quoted = format!("`{path}`");
        s.wait_event(&format!("the refusal of {path}"), None, |e| {
            e["regarding"]["name"] == cc.as_str()
                && e["reason"] == "CreateError"
                && e["note"]
                    .as_str()
                    .is_some_and(|n| n.contains(&quoted) && n.contains(says))
        })
        .await?;
        let condition = |cc: &Value| {
            cc.pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| c["type"] == "FieldRulesAccepted"))
                .cloned()
        };
        let controllers = s.controllers();
        s.wait_for(
            &controllers,
            &cc,
            "the FieldRulesAccepted=False condition",
            |o| {
                condition(o).is_some_and(|c| {
                    c["status"] == "False"
                        && c["reason"] == "FieldPathRefused"
                        && c["message"].as_str().is_some_and(|m| m.contains(&quoted))
                })
            },
        )
        .await?;
        // fixed: the controller starts, the condition goes
        let fixed = json!({"spec": {"childResources": [{
            "apiVersion": "apps/v1", "resource": "deployments",
            "fieldRules": [{"path": "spec.replicas"}]}]}});
        s.merge_patch(&controllers, &cc, fixed).await?;
        s.wait_for(&controllers, &cc, "no FieldRulesAccepted condition", |o| {
            condition(o).is_none()
        })
        .await?;
    }
    s.finish().await
}

/// A CompositeController spec (patch) whose Deployment children have `rules` as field rules.
fn with_rules(rules: Value) -> Value {
    json!({"childResources": [{
        "apiVersion": "apps/v1", "resource": "deployments",
        "updateStrategy": {"method": "InPlace"}, "fieldRules": rules}]})
}

/// kmeta's writes to deployments in the scenario's namespace since write-log position `from`.
fn kmeta_writes(s: &Running, from: u64) -> Vec<String> {
    kmeta_writes_to(s, from, |resource| resource == "deployments")
}

/// kmeta's writes to the resources `which` selects in the scenario's namespace since write-log
/// position `from` (none on a real cluster, where there is no log).
fn kmeta_writes_to(s: &Running, from: u64, which: impl Fn(&str) -> bool) -> Vec<String> {
    let Some(server) = s.server() else {
        return Vec::new();
    };
    server
        .write_log()
        .since(from)
        .into_iter()
        .filter(|w| w.namespace.as_deref() == Some(s.ns.as_str()))
        .filter(|w| which(&w.resource) && w.user_agent.starts_with("kmeta/"))
        .map(|w| format!("{} {} {:?} ({})", w.verb, w.resource, w.name, w.code))
        .collect()
}

/// The next write-log position (0 on a real cluster, where there is no log).
fn log_position(s: &Running) -> u64 {
    s.server().map_or(0, |server| {
        server.write_log().enable(100_000);
        server.write_log().since(0).last().map_or(0, |w| w.seq + 1)
    })
}

/// Restarts the controller with `rules` on its child rule (a spec change restarts a controller
/// in a running kmeta the same way) and waits for 100 of its syncs.
async fn restart_with(
    s: &mut Running,
    cc: &str,
    strategy: ApplyStrategy,
    rules: Value,
) -> anyhow::Result<()> {
    s.stop_controller().await?;
    let spec = json!({"spec": with_rules(rules)});
    s.merge_patch(&s.controllers(), cc, spec).await?;
    let before = s.syncs(cc);
    s.start_controller_with(ManagerConfig::default().apply_strategy(strategy));
    until(&format!("{cc}: 100 syncs after the restart"), || {
        s.syncs(cc) >= before + 100
    })
    .await
}

/// Switching the rules on for an existing child writes nothing, not even once, and the owners'
/// values then stay; switching them off takes the fields back at the next sync.
async fn switching(name: &str, strategy: ApplyStrategy) -> anyhow::Result<()> {
    let mut s = Scenario::new(name)
        .crd("App", "apps")
        .hook(hook)
        .prepare()
        .await?;
    let cc = format!("{name}-cc");
    s.controller(Cc::new(&cc).patch(with_rules(json!([]))))
        .await?;
    if s.server().is_some() {
        injector(&s).await?;
    }
    s.start_controller_with(ManagerConfig::default().apply_strategy(strategy));
    s.parent("web", json!({"image": "app:1"})).await?;
    if s.server().is_none() {
        injector(&s).await?;
    }
    let deployments = s
        .env
        .api("apps/v1", "Deployment", "deployments", Some(&s.ns));
    s.wait_for(&deployments, "web", "the child, sidecar first", |d| {
        container(d, "istio-proxy").is_some() && container(d, "app").is_some()
    })
    .await?;
    let from = log_position(&s);
    restart_with(&mut s, &cc, strategy, rules()).await?;
    let owners = Owners {
        replicas: 5,
        cpu: "500m".to_owned(),
    };
    owners.write(&deployments).await?;
    let after = s.syncs(&cc);
    until(&format!("{cc}: 200 syncs with the rules"), || {
        s.syncs(&cc) >= after + 200
    })
    .await?;
    let d = s.get(&deployments, "web").await?;
    check(d.as_ref().unwrap_or(&Value::Null), "app:1", &owners)?;
    assert_eq!(
        kmeta_writes(&s, from),
        Vec::<String>::new(),
        "{cc}: switched on"
    );
    // switched off: the hook's values again, at the next sync
    restart_with(&mut s, &cc, strategy, json!([])).await?;
    let hooks_values = Owners {
        replicas: 3,
        cpu: "100m".to_owned(),
    };
    let d = s
        .wait_for(&deployments, "web", "the hook's values back", |d| {
            check(d, "app:1", &hooks_values).is_ok()
        })
        .await?;
    check(&d, "app:1", &hooks_values)?;
    s.finish().await
}

#[tokio::test]
async fn switching_rules_on_writes_nothing_and_off_takes_the_fields_back() -> anyhow::Result<()> {
    switching("handoff-switch", ApplyStrategy::DynamicApply).await
}

#[tokio::test]
async fn switching_rules_under_server_side_apply() -> anyhow::Result<()> {
    switching("handoff-switch-ssa", ApplyStrategy::ServerSideApply).await
}
