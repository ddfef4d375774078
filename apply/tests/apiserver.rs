//! `dyn_apply` against kmeta-apiserver over HTTP: typed built-in kinds, a derived custom
//! resource with CRD list markers, `DynamicObject`, conflicts, dry run and bad input.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kmeta_apiserver::{FaultSpec, Operation, TestServer};
use kmeta_apply::{Action, DynApply, DynApplyParams, Error};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

fn deployment(image: &str, env: &[(&str, &str)]) -> anyhow::Result<Deployment> {
    let env: Vec<Value> = env
        .iter()
        .map(|(n, v)| json!({"name": n, "value": v}))
        .collect();
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": image, "env": env}]}
            }
        }
    }))?)
}

fn containers(d: &Deployment) -> Vec<(String, String)> {
    let spec = d.spec.template.spec.as_ref();
    spec.into_iter()
        .flat_map(|s| &s.containers)
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect()
}

fn pair(name: &str, image: &str) -> (String, String) {
    (name.to_owned(), image.to_owned())
}

/// A server whose admission injects a sidecar into every Deployment when it is created.
async fn server_with_injector() -> anyhow::Result<TestServer> {
    let server = TestServer::start().await?;
    server
        .admission()
        .mutate("apps/v1", "deployments", |obj, op| {
            if op == Operation::Create
                && let Some(cs) = obj
                    .pointer_mut("/spec/template/spec/containers")
                    .and_then(Value::as_array_mut)
            {
                cs.push(json!({"name": "proxy", "image": "envoy:1", "ports": [{"containerPort": 15001}]}));
            }
            Ok(())
        });
    Ok(server)
}

#[tokio::test]
async fn an_injected_sidecar_survives_every_update_and_a_resync_writes_nothing()
-> anyhow::Result<()> {
    let server = server_with_injector().await?;
    let api: Api<Deployment> = Api::namespaced(server.client(), "default");
    let params = DynApplyParams::default().field_manager("test");

    let created = api.dyn_apply(&deployment("app:1", &[])?, &params).await?;
    assert_eq!(created.action, Action::Created);
    assert_eq!(
        containers(&created.object),
        [pair("app", "app:1"), pair("proxy", "envoy:1")]
    );

    let steps: [(&str, &[(&str, &str)]); 3] = [
        ("app:2", &[]),
        ("app:2", &[("MODE", "fast")]),
        ("app:3", &[]),
    ];
    for (image, env) in steps {
        let desired = deployment(image, env)?;
        let out = api.dyn_apply(&desired, &params).await?;
        assert_eq!(out.action, Action::Updated, "{image} {env:?}");
        assert_eq!(
            containers(&out.object),
            [pair("app", image), pair("proxy", "envoy:1")]
        );
        assert!(out.dropped.is_empty(), "{:?}", out.dropped);
        let app = &out.object.spec.template.spec;
        let env_names: Vec<String> = app
            .iter()
            .flat_map(|s| s.containers[0].env.clone().unwrap_or_default())
            .map(|e| e.name)
            .collect();
        assert_eq!(env_names, env.iter().map(|(n, _)| *n).collect::<Vec<_>>());

        // the resync: same desired, nothing written
        server.reset_counters();
        let again = api.dyn_apply(&desired, &params).await?;
        assert_eq!(again.action, Action::Unchanged);
        assert_eq!(server.counters().writes(), 0);
        assert_eq!(
            again.object.metadata.resource_version,
            out.object.metadata.resource_version
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_conflict_is_read_again_and_retried() -> anyhow::Result<()> {
    let server = server_with_injector().await?;
    let api: Api<Deployment> = Api::namespaced(server.client(), "default");
    let params = DynApplyParams::default();
    let first = api.dyn_apply(&deployment("app:1", &[])?, &params).await?;

    // another writer changes the object: the copy we hold (as a reflector store would) is stale
    let mut other = api.get("web").await?;
    other
        .metadata
        .labels
        .get_or_insert_default()
        .insert("team".into(), "b".into());
    api.replace("web", &PostParams::default(), &other).await?;
    let out = api
        .dyn_apply_from(&deployment("app:2", &[])?, Some(&first.object), &params)
        .await?;
    assert_eq!((out.action, out.attempts), (Action::Updated, 2));
    assert_eq!(
        containers(&out.object),
        [pair("app", "app:2"), pair("proxy", "envoy:1")]
    );
    let labels = out.object.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("team").map(String::as_str), Some("b"));

    // two more conflicts on update, answered by the server itself
    server.faults().inject(
        FaultSpec::error(409)
            .verb("update")
            .resource("deployments")
            .times(2),
    );
    let out = api.dyn_apply(&deployment("app:3", &[])?, &params).await?;
    assert_eq!((out.action, out.attempts), (Action::Updated, 3));
    assert_eq!(
        containers(&out.object),
        [pair("app", "app:3"), pair("proxy", "envoy:1")]
    );
    Ok(())
}

#[tokio::test]
async fn conflicts_beyond_the_bound_are_an_error_and_stop_writing() -> anyhow::Result<()> {
    let server = server_with_injector().await?;
    let api: Api<Deployment> = Api::namespaced(server.client(), "default");
    api.dyn_apply(&deployment("app:1", &[])?, &DynApplyParams::default())
        .await?;
    server
        .faults()
        .inject(FaultSpec::error(409).verb("update").resource("deployments"));
    server.reset_counters();
    let params = DynApplyParams::default().max_conflicts(3);
    let err = api
        .dyn_apply(&deployment("app:2", &[])?, &params)
        .await
        .err()
        .ok_or_else(|| anyhow::anyhow!("an endless conflict must fail"))?;
    assert!(matches!(err, Error::Conflicts { attempts: 3, .. }), "{err}");
    assert!(err.is_conflict());
    assert!(err.to_string().contains("Deployment default/web"), "{err}");
    assert_eq!(server.counters().count("update", "deployments"), 3);
    Ok(())
}

/// A pool of backends; `members` is a list-map keyed by `host` in the CRD's schema.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(group = "apply.kmeta.dev", version = "v1", kind = "Pool", namespaced)]
struct PoolSpec {
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["host"]))]
    members: Vec<Member>,
}

#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
struct Member {
    host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    weight: Option<i32>,
}

fn member(host: &str, weight: Option<i32>) -> Member {
    Member {
        host: host.to_owned(),
        weight,
    }
}

async fn install_pool_crd(client: kube::Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Pool::crd()).await?;
    // wait (with a deadline) until the new resource is served
    let pools: Api<Pool> = Api::namespaced(client, "default");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while pools.list(&Default::default()).await.is_err() {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "pools never served");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Another writer adds a member; our next apply must keep it only if the list merges by key.
async fn apply_after_another_member(
    params: &DynApplyParams,
    name: &str,
) -> anyhow::Result<Vec<Member>> {
    let server = TestServer::start().await?;
    install_pool_crd(server.client()).await?;
    let api: Api<Pool> = Api::namespaced(server.client(), "default");
    let mut desired = Pool::new(
        name,
        PoolSpec {
            members: vec![member("a", Some(1))],
        },
    );
    desired.metadata.namespace = Some("default".into());
    api.dyn_apply(&desired, params).await?;
    let mut other = api.get(name).await?;
    other.spec.members.push(member("b", Some(5)));
    api.replace(name, &PostParams::default(), &other).await?;

    desired.spec.members = vec![member("a", Some(2))];
    let out = api.dyn_apply(&desired, params).await?;
    assert_eq!(out.action, Action::Updated);
    Ok(out.object.spec.members)
}

#[tokio::test]
async fn crd_list_markers_keep_other_writers_items() -> anyhow::Result<()> {
    let with_markers = DynApplyParams::default().crd(&Pool::crd(), None)?;
    assert_eq!(
        apply_after_another_member(&with_markers, "p").await?,
        [member("a", Some(2)), member("b", Some(5))]
    );
    // without the markers `host` is no merge key: the list is atomic and b is lost
    assert_eq!(
        apply_after_another_member(&DynApplyParams::default(), "p").await?,
        [member("a", Some(2))]
    );
    Ok(())
}

#[tokio::test]
async fn dynamic_objects_apply_and_pruned_fields_are_reported() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    install_pool_crd(server.client()).await?;
    let gvk = GroupVersionKind::gvk("apply.kmeta.dev", "v1", "Pool");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "pools");
    let api: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &ar);
    let mut desired = DynamicObject::new("d", &ar).within("default");
    desired.data = json!({"spec": {"members": [{"host": "a"}], "color": "blue"}});

    let out = api.dyn_apply(&desired, &DynApplyParams::default()).await?;
    assert_eq!(out.action, Action::Created);
    assert_eq!(out.dropped, ["spec.color"]);
    assert_eq!(out.object.data["spec"], json!({"members": [{"host": "a"}]}));

    desired.data = json!({"spec": {"members": [{"host": "a"}]}});
    let out = api.dyn_apply(&desired, &DynApplyParams::default()).await?;
    assert!(out.dropped.is_empty(), "{:?}", out.dropped);

    // built without types, a DynamicObject cannot say what it is
    let mut untyped = desired.clone();
    untyped.types = None;
    let err = api
        .dyn_apply(&untyped, &DynApplyParams::default())
        .await
        .err();
    assert!(matches!(err, Some(Error::InvalidDesired { .. })), "{err:?}");
    Ok(())
}

#[tokio::test]
async fn dry_run_answers_what_would_be_stored_and_stores_nothing() -> anyhow::Result<()> {
    let server = server_with_injector().await?;
    let api: Api<Deployment> = Api::namespaced(server.client(), "default");
    let dry = DynApplyParams::default().dry_run(true);
    let out = api.dyn_apply(&deployment("app:1", &[])?, &dry).await?;
    assert_eq!(out.action, Action::Created);
    assert_eq!(
        containers(&out.object),
        [pair("app", "app:1"), pair("proxy", "envoy:1")]
    );
    assert!(api.get_opt("web").await?.is_none());

    api.dyn_apply(&deployment("app:1", &[])?, &DynApplyParams::default())
        .await?;
    let out = api.dyn_apply(&deployment("app:2", &[])?, &dry).await?;
    assert_eq!(out.action, Action::Updated);
    assert_eq!(
        containers(&api.get("web").await?),
        [pair("app", "app:1"), pair("proxy", "envoy:1")]
    );
    Ok(())
}

#[tokio::test]
async fn bad_desired_objects_are_refused_before_any_request() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let api: Api<Deployment> = Api::namespaced(server.client(), "default");
    let mut unnamed = deployment("app:1", &[])?;
    unnamed.metadata.name = None;
    let mut elsewhere = deployment("app:1", &[])?;
    elsewhere.metadata.namespace = Some("other".into());
    server.reset_counters();
    for (desired, says) in [
        (unnamed, "no metadata.name"),
        (elsewhere, "scoped to namespace default"),
    ] {
        let err = api
            .dyn_apply(&desired, &DynApplyParams::default())
            .await
            .err();
        let text = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains(says), "{text}");
    }
    assert_eq!(server.counters().by_key.len(), 0);
    Ok(())
}
