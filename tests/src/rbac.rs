//! `KMETA_TEST_RBAC=1`: the scenarios run kmeta with exactly the rights `kmeta rbac` grants.
//!
//! The in-process API server then authenticates and authorizes every request
//! (`TestServerBuilder::rbac`); the test's own client is a superuser, and the controller's
//! client authenticates as the ServiceAccount `kube-system/kmeta`, whose only binding is to the
//! ClusterRole `kmeta`: the ClusterRole `kmeta rbac` generates (`kmeta::rbac`) for the
//! CompositeControllers and DecoratorControllers stored in the scenario's server, regenerated
//! whenever they change, as an operator re-runs `kmeta rbac` after applying a controller (a
//! CompositeController run in-process, `HookMode::InProcess`, is granted from the object it
//! would have been, and runs with the ServiceAccount's client too); the
//! related resources a customize hook's answer selects are granted before the answer is sent,
//! as `kmeta rbac --related` would. Every 403 the server answers is listed when the scenario
//! ends, and fails it: each is a right kmeta needs that `kmeta rbac` does not grant, or a
//! request kmeta should not make.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use kmeta::rbac::{Controller, cluster_role, grants, grants_with};
use kmeta_apiserver::TestServer;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{ar, obj};

/// The variable that turns the RBAC mode on (`1`).
pub const RBAC_ENV: &str = "KMETA_TEST_RBAC";

/// The namespace of kmeta's ServiceAccount.
pub const SERVICE_ACCOUNT_NAMESPACE: &str = "kube-system";
/// kmeta's ServiceAccount, and the name of its ClusterRole and ClusterRoleBinding.
pub const SERVICE_ACCOUNT: &str = "kmeta";

/// Whether `KMETA_TEST_RBAC=1`.
pub fn rbac_mode() -> bool {
    matches!(std::env::var(RBAC_ENV).as_deref(), Ok("1" | "true"))
}

/// Creates kmeta's ServiceAccount, an empty ClusterRole `kmeta` (with `wildcard`, every verb
/// on everything, as `deploy/rbac.yaml`'s) and the ClusterRoleBinding of the one to the other;
/// returns a token of the ServiceAccount.
pub(crate) async fn service_account(server: &TestServer, wildcard: bool) -> anyhow::Result<String> {
    let client = server.client();
    let create = |api: Api<DynamicObject>, v: Value| async move {
        api.create(&PostParams::default(), &obj(v)?)
            .await
            .context("creating kmeta's RBAC objects")
    };
    create(
        Api::namespaced_with(
            client.clone(),
            SERVICE_ACCOUNT_NAMESPACE,
            &ar("v1", "ServiceAccount", "serviceaccounts"),
        ),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": SERVICE_ACCOUNT, "namespace": SERVICE_ACCOUNT_NAMESPACE}}),
    )
    .await?;
    let mut role = cluster_role(SERVICE_ACCOUNT, &grants(&[], &[]));
    if wildcard {
        role["rules"] = json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]);
    }
    create(cluster_roles(&client), role).await?;
    create(
        Api::all_with(
            client.clone(),
            &ar(
                "rbac.authorization.k8s.io/v1",
                "ClusterRoleBinding",
                "clusterrolebindings",
            ),
        ),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": SERVICE_ACCOUNT},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SERVICE_ACCOUNT},
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": SERVICE_ACCOUNT_NAMESPACE}],
        }),
    )
    .await?;
    Ok(server.service_account_token(SERVICE_ACCOUNT_NAMESPACE, SERVICE_ACCOUNT)?)
}

fn cluster_roles(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ar(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            "clusterroles",
        ),
    )
}

/// The controllers stored now.
async fn stored_controllers(client: &kube::Client) -> anyhow::Result<Vec<(String, Controller)>> {
    let mut out = Vec::new();
    for (kind, plural) in [
        ("CompositeController", "compositecontrollers"),
        ("DecoratorController", "decoratorcontrollers"),
    ] {
        let api: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ar("metacontroller.k8s.io/v1alpha1", kind, plural),
        );
        for o in api.list(&ListParams::default()).await? {
            let mut v = serde_json::to_value(o)?;
            v["kind"] = json!(kind);
            out.push(controller_of(&v)?);
        }
    }
    Ok(out)
}

/// The controller of a CompositeController or DecoratorController object.
fn controller_of(o: &Value) -> anyhow::Result<(String, Controller)> {
    let kind = o.get("kind").and_then(Value::as_str).unwrap_or_default();
    let name = o
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let spec = o.get("spec").cloned().unwrap_or(Value::Null);
    let bad = |e| anyhow::anyhow!("{kind} {name}: spec: {e}");
    let c = if kind == "CompositeController" {
        Controller::Composite(Box::new(serde_json::from_value(spec).map_err(bad)?))
    } else {
        Controller::Decorator(Box::new(serde_json::from_value(spec).map_err(bad)?))
    };
    Ok((name, c))
}

/// Writes the ClusterRole `kmeta rbac --related …` generates for the controllers stored now
/// (and `new`, one about to be created), when it differs from the stored one.
pub(crate) async fn sync_role(
    client: &kube::Client,
    new: Option<&Value>,
    related: &Related,
) -> anyhow::Result<()> {
    // one writer at a time, each writing what is granted when it holds the lock
    let _writing = related.1.lock().await;
    let in_process: Vec<Value> = related.2.lock().map(|v| v.clone()).unwrap_or_default();
    let pairs = related.get();
    let related_pairs = pairs.as_slice();
    let mut controllers = stored_controllers(client).await?;
    for cc in &in_process {
        controllers.push(controller_of(cc)?);
    }
    if let Some(o) = new {
        controllers.push(controller_of(o)?);
    }
    let default = related.default_service_account();
    let mut grants = grants_with(&controllers, related_pairs, default.as_deref());
    if related.4.load(std::sync::atomic::Ordering::Acquire) {
        grants.serve_kro();
        if related.5.load(std::sync::atomic::Ordering::Acquire) {
            grants.delete_instance_crds();
        }
    }
    let role = cluster_role(SERVICE_ACCOUNT, &grants);
    let api = cluster_roles(client);
    let stored = api.get(SERVICE_ACCOUNT).await?;
    if stored.data.get("rules") != role.get("rules") {
        api.patch(
            SERVICE_ACCOUNT,
            &PatchParams::default(),
            &Patch::Merge(json!({"rules": role["rules"]})),
        )
        .await
        .context("updating ClusterRole kmeta")?;
    }
    Ok(())
}

/// Keeps the ClusterRole in step with the stored controllers (every 100 ms) until `stop`.
pub(crate) fn keep_role(
    client: kube::Client,
    related: Related,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Err(e) = sync_role(&client, None, &related).await {
                eprintln!("{RBAC_ENV}: {e:#}");
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    })
}

/// What grants kmeta read access to related resources, awaited before a hook's answer selecting
/// them is sent.
pub type RelatedGrant =
    Arc<dyn Fn(Vec<(String, String)>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The related resources (`(apiVersion, resource)`) granted so far: what an operator passes to
/// `kmeta rbac --related` after reading the customize hooks.
#[derive(Clone, Default)]
pub struct Related(
    Arc<Mutex<BTreeSet<(String, String)>>>,
    Arc<tokio::sync::Mutex<()>>,
    /// CompositeControllers run in-process: no object is stored, so their specs are kept here.
    Arc<Mutex<Vec<Value>>>,
    /// The `--default-service-account` kmeta runs with (`kmeta rbac --default-service-account`).
    Arc<Mutex<Option<String>>>,
    /// kmeta serves ResourceGraphDefinitions (`kmeta rbac -f` given RGDs grants that).
    Arc<std::sync::atomic::AtomicBool>,
    /// ... with `--kro-allow-crd-deletion` (`kmeta rbac --kro-allow-crd-deletion`).
    Arc<std::sync::atomic::AtomicBool>,
);

impl Related {
    /// Grants an in-process CompositeController (`cc`, the object it would have been) from now
    /// on, and writes the role.
    pub(crate) async fn add_in_process(
        &self,
        client: &kube::Client,
        cc: &Value,
    ) -> anyhow::Result<()> {
        if let Ok(mut v) = self.2.lock() {
            v.push(cc.clone());
        }
        sync_role(client, None, self).await
    }

    /// Grants serving ResourceGraphDefinitions from now on (deleting their instance CRDs with
    /// them when `delete_crds`), and writes the role.
    pub(crate) async fn serve_kro(
        &self,
        client: &kube::Client,
        delete_crds: bool,
    ) -> anyhow::Result<()> {
        self.4.store(true, std::sync::atomic::Ordering::Release);
        if delete_crds {
            self.5.store(true, std::sync::atomic::Ordering::Release);
        }
        sync_role(client, None, self).await
    }

    /// Grants the CompositeController kmeta will make of the ResourceGraphDefinition `rgd`
    /// from now on (as `kmeta rbac -f` given the RGD), and writes the role; an RGD kmeta will
    /// refuse makes none.
    pub(crate) async fn add_rgd(&self, client: &kube::Client, rgd: &Value) -> anyhow::Result<()> {
        let plural = |_: &str, kind: &str| Some(kmeta::kro::plural(kind));
        if let Ok(served) = kmeta::kro::translate(rgd, &plural)
            && let Ok(mut v) = self.2.lock()
        {
            v.push(served.controller);
        }
        sync_role(client, None, self).await
    }

    /// Grants as for kmeta run with `--default-service-account sa` from now on.
    pub(crate) fn set_default_service_account(&self, sa: Option<String>) {
        if let Ok(mut d) = self.3.lock() {
            *d = sa;
        }
    }

    /// The `--default-service-account` granted for.
    fn default_service_account(&self) -> Option<String> {
        self.3.lock().ok().and_then(|d| d.clone())
    }

    /// The pairs granted so far.
    pub fn get(&self) -> Vec<(String, String)> {
        self.0
            .lock()
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// A grant adding pairs and writing the role when one is new.
    pub(crate) fn granter(&self, client: kube::Client) -> RelatedGrant {
        let related = self.clone();
        Arc::new(move |pairs: Vec<(String, String)>| {
            let related = related.clone();
            let client = client.clone();
            Box::pin(async move {
                let added = related
                    .0
                    .lock()
                    .map(|mut s| pairs.into_iter().fold(false, |a, p| s.insert(p) | a))
                    .unwrap_or(false);
                if added && let Err(e) = sync_role(&client, None, &related).await {
                    eprintln!("{RBAC_ENV}: {e:#}");
                }
            })
        })
    }
}

/// The `(apiVersion, resource)` pairs of a customize answer's `relatedResources`.
pub fn related_in(answer: &Value) -> Vec<(String, String)> {
    answer
        .get("relatedResources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let s = |f: &str| r.get(f).and_then(Value::as_str).map(str::to_owned);
            Some((s("apiVersion")?, s("resource")?))
        })
        .collect()
}

/// The 403s a scenario's server answered kmeta's own identity, one line each, for the end of
/// the scenario. Those answered a ServiceAccount kmeta impersonated for a controller are that
/// controller's (its hook asked for more than its ServiceAccount may do): a scenario checks
/// them itself.
pub(crate) fn report(id: &str, server: &TestServer) -> Vec<String> {
    let kmeta = format!("system:serviceaccount:{SERVICE_ACCOUNT_NAMESPACE}:{SERVICE_ACCOUNT}");
    server
        .state()
        .denials()
        .into_iter()
        .filter(|d| !d.contains("system:serviceaccount:") || d.contains(&kmeta))
        .map(|d| format!("{RBAC_ENV}: scenario {id}: 403 {d}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ListParams;

    /// kmeta's CRDs, so the harness can list the controllers.
    async fn install_crds(client: &kube::Client) -> anyhow::Result<()> {
        let api: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ar(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "customresourcedefinitions",
            ),
        );
        for crd in kmeta::api::crds::all()? {
            api.create(&PostParams::default(), &obj(serde_json::to_value(crd)?)?)
                .await?;
        }
        Ok(())
    }

    #[tokio::test]
    async fn the_service_account_holds_what_kmeta_rbac_grants_and_nothing_else()
    -> anyhow::Result<()> {
        let server = TestServer::builder().rbac(true).start().await?;
        install_crds(&server.client()).await?;
        let token = service_account(&server, false).await?;
        let kmeta = server.client_with_token(&token)?;
        let configmaps: Api<DynamicObject> =
            Api::all_with(kmeta.clone(), &ar("v1", "ConfigMap", "configmaps"));
        // kmeta's own rights only: its controllers, not ConfigMaps
        let controllers: Api<DynamicObject> = Api::all_with(
            kmeta.clone(),
            &ar(
                "metacontroller.k8s.io/v1alpha1",
                "CompositeController",
                "compositecontrollers",
            ),
        );
        controllers.list(&ListParams::default()).await?;
        assert!(configmaps.list(&ListParams::default()).await.is_err());
        // a controller with ConfigMap children, as Env::create grants it before creating it
        let cc = json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "c"},
            "spec": {"parentResource": {"apiVersion": "x.example.com/v1", "resource": "things"},
                     "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
                     "hooks": {"sync": {"webhook": {"url": "http://hook/sync"}}}}});
        let related = Related::default();
        sync_role(&server.client(), Some(&cc), &related).await?;
        configmaps.list(&ListParams::default()).await?;
        // a related resource a customize answer selects
        let secrets: Api<DynamicObject> = Api::all_with(kmeta, &ar("v1", "Secret", "secrets"));
        assert!(secrets.list(&ListParams::default()).await.is_err());
        let answer = json!({"relatedResources": [{"apiVersion": "v1", "resource": "secrets"}]});
        (related.granter(server.client()))(related_in(&answer)).await;
        secrets.list(&ListParams::default()).await?;
        // the two refusals, and only them, are reported
        let report = report("t", &server);
        assert_eq!(report.len(), 2, "{report:?}");
        assert!(
            report[0].contains(
                r#"cannot list resource "configmaps" in API group "" at the cluster scope"#
            ),
            "{report:?}"
        );
        assert!(
            report[1].contains(r#"cannot list resource "secrets""#),
            "{report:?}"
        );
        Ok(())
    }
}
