//! The executor serving ResourceGraphDefinitions: watches them, and for each applies its
//! instance CRD and its CompositeController (server-side apply, field manager
//! [`super::FIELD_MANAGER`]) and writes kro's status on it (`state`, `topologicalOrder`,
//! conditions `GraphAccepted`, `KindReady`, `ControllerReady`, `Ready`). A graph that does not
//! check is `Inactive` with `GraphAccepted=False` naming the resource, the field path and the
//! expression; a kind not served yet, or a failed write, is retried every few seconds.
//! Deleting an RGD deletes its CompositeController (owner reference); its CRD and instances
//! stay, as kro keeps them by default, or go with it under kro's `--allow-crd-deletion`
//! ([`ServeOptions`]; the controller then lives until the CRD is gone, finalizing each
//! instance). A change of a CRD an RGD uses checks the RGD again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use super::{FIELD_MANAGER, KroError, Schema, translate_checked};
use crate::api::CompositeController;
use crate::hook::cel::graph;
use crate::ops::Metrics;
use crate::ops::openapi::OpenApiDocs;

/// How often RGDs that could not be served are tried again.
const RETRY: Duration = Duration::from_secs(3);

fn rgd_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kro.run", "v1alpha1", "ResourceGraphDefinition"),
        "resourcegraphdefinitions",
    )
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> KroError {
    let what = what.into();
    move |source| KroError::Api { what, source }
}

/// Creates the ResourceGraphDefinition CRD ([`super::resource_graph_definition_crd`]) unless
/// one exists (kro's own, or an earlier kmeta's).
pub async fn install_crd(client: &kube::Client) -> Result<(), KroError> {
    let crd: CustomResourceDefinition =
        serde_json::from_value(super::resource_graph_definition_crd()).map_err(|e| {
            KroError::Schema {
                path: "resourcegraphdefinitions.kro.run".into(),
                message: e.to_string(),
            }
        })?;
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let what = "creating customresourcedefinition resourcegraphdefinitions.kro.run";
    match api.create(&kube::api::PostParams::default(), &crd).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(api_err(what)(e)),
    }
}

/// How RGDs are served: the kro controller flags kmeta follows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeOptions {
    /// kro's `--allow-crd-deletion` (`kmeta run --kro-allow-crd-deletion`): an RGD's instance
    /// CRD is deleted with the RGD, and with it every instance and, by garbage collection,
    /// their children. kmeta makes the RGD an owner of the CRD it generates (kro deletes the
    /// CRD it labelled with the RGD's name when the RGD is deleted), and the CRD an owner of the
    /// RGD's CompositeController, which so finalizes every instance before it goes. Off: the
    /// CRD and the instances stay.
    pub allow_crd_deletion: bool,
}

impl ServeOptions {
    /// With kro's `--allow-crd-deletion` on or off.
    pub fn allow_crd_deletion(mut self, allow: bool) -> ServeOptions {
        self.allow_crd_deletion = allow;
        self
    }
}

/// Serves every ResourceGraphDefinition through `client` until the watch ends, with kro's
/// default options ([`serve_with`]): the ResourceGraphDefinition CRD must be installed
/// ([`super::resource_graph_definition_crd`]).
pub async fn serve(client: kube::Client) -> Result<(), KroError> {
    serve_with(client, ServeOptions::default()).await
}

/// Serves every ResourceGraphDefinition through `client` with `options` until a watch ends.
/// CustomResourceDefinitions are watched too: when the CRD of a kind an RGD makes or reads (or
/// its own instance CRD) is created, changes or is deleted, the RGD is checked and served
/// again, so one refused for a missing or ill-fitting child CRD is served once the CRD fits,
/// and one served says `GraphAccepted=False` when a changed child CRD no longer fits.
pub async fn serve_with(client: kube::Client, options: ServeOptions) -> Result<(), KroError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &rgd_resource());
    let mut events = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let mut crd_events = watcher(crds, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut retry = tokio::time::interval(RETRY);
    let mut server = Server {
        client,
        options,
        api,
        schemas: Schemas::default(),
        failed: BTreeSet::new(),
        uses: BTreeMap::new(),
        crds: BTreeMap::new(),
    };
    loop {
        tokio::select! {
            ev = events.next() => match ev {
                Some(Ok(obj)) => {
                    let rgd = serde_json::to_value(&obj).unwrap_or_default();
                    server.serve_one(&rgd).await;
                }
                Some(Err(e)) => tracing::debug!(error = %e, "resourcegraphdefinition watch"),
                None => return Ok(()),
            },
            ev = crd_events.next() => match ev {
                Some(Ok(ev)) => server.crd_event(ev).await,
                Some(Err(e)) => tracing::debug!(error = %e, "customresourcedefinition watch"),
                None => return Ok(()),
            },
            _ = retry.tick() => {
                for name in std::mem::take(&mut server.failed) {
                    server.again(&name).await;
                }
            }
        }
    }
}

/// What serving RGDs keeps between events.
struct Server {
    client: kube::Client,
    options: ServeOptions,
    api: Api<DynamicObject>,
    schemas: Schemas,
    /// RGDs to try again (a kind not served yet, a failed write).
    failed: BTreeSet<String>,
    /// The kinds (group, kind) each RGD makes, reads or is the instance of.
    uses: BTreeMap<String, BTreeSet<(String, String)>>,
    /// What each CRD was when last seen ([`crd_state`]).
    crds: BTreeMap<String, u64>,
}

impl Server {
    /// Serves `rgd` and files it for a retry when that may succeed later.
    async fn serve_one(&mut self, rgd: &Value) {
        let name = rgd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        self.uses.insert(name.clone(), kinds_of(rgd));
        let result = handle(self, rgd).await;
        mark(&mut self.failed, name, result);
    }

    /// Serves the RGD named `name` again, as it is now (forgotten when it is gone).
    async fn again(&mut self, name: &str) {
        match self.api.get_opt(name).await {
            Ok(Some(obj)) => {
                let rgd = serde_json::to_value(&obj).unwrap_or_default();
                self.serve_one(&rgd).await;
            }
            Ok(None) => {
                self.uses.remove(name);
            }
            Err(e) => {
                tracing::debug!(resourcegraphdefinition = name, error = %e, "reading it again");
                self.failed.insert(name.to_owned());
            }
        }
    }

    /// Serves again the RGDs using the kind of a CRD that appeared, changed or went.
    async fn crd_event(&mut self, ev: watcher::Event<CustomResourceDefinition>) {
        let (crd, seen) = match ev {
            watcher::Event::Apply(c) => (c, Seen::Now),
            watcher::Event::InitApply(c) => (c, Seen::Listed),
            watcher::Event::Delete(c) => (c, Seen::Gone),
            watcher::Event::Init | watcher::Event::InitDone => return,
        };
        let Some((name, kind, state)) = crd_state(&serde_json::to_value(&crd).unwrap_or_default())
        else {
            return;
        };
        if note(&mut self.crds, name, state, seen) {
            for rgd in users(&self.uses, &kind) {
                self.again(&rgd).await;
            }
        }
    }
}

/// How a CRD was seen by the watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Created or changed.
    Now,
    /// Listed when the watch (re)started.
    Listed,
    /// Deleted.
    Gone,
}

/// Records CRD `name` in state `state` as `seen`; whether the RGDs using its kind are to be
/// checked again: a CRD created, changed (also while the watch was down: found changed when
/// it lists again) or deleted. The first listing only records: every RGD is served when the
/// RGD watch starts anyway.
fn note(crds: &mut BTreeMap<String, u64>, name: String, state: u64, seen: Seen) -> bool {
    match seen {
        Seen::Gone => crds.remove(&name).is_some(),
        Seen::Now => crds.insert(name, state) != Some(state),
        Seen::Listed => crds.insert(name, state).is_some_and(|was| was != state),
    }
}

/// The kinds (group, kind) `rgd` makes or reads, and that of its instances: a change of one of
/// their CRDs serves it again.
fn kinds_of(rgd: &Value) -> BTreeSet<(String, String)> {
    let group_kind = |av: Option<&Value>, kind: Option<&Value>| {
        let av = av.and_then(Value::as_str)?;
        let group = av.rsplit_once('/').map_or("", |(g, _)| g);
        Some((group.to_owned(), kind.and_then(Value::as_str)?.to_owned()))
    };
    let mut out = BTreeSet::new();
    let resources = rgd.pointer("/spec/resources").and_then(Value::as_array);
    for r in resources.into_iter().flatten() {
        for source in ["template", "externalRef"] {
            let s = r.get(source);
            out.extend(group_kind(
                s.and_then(|s| s.get("apiVersion")),
                s.and_then(|s| s.get("kind")),
            ));
        }
    }
    let schema = rgd.pointer("/spec/schema");
    let group = schema.and_then(|s| s.get("group")).and_then(Value::as_str);
    let kind = schema.and_then(|s| s.get("kind")).and_then(Value::as_str);
    if let Some(kind) = kind {
        out.insert((
            group.unwrap_or(super::DEFAULT_GROUP).to_owned(),
            kind.to_owned(),
        ));
    }
    out
}

/// A CRD's name, the kind (group, kind) it serves, and a digest of what a check reads of it:
/// its spec and whether it is Established.
fn crd_state(crd: &Value) -> Option<(String, (String, String), u64)> {
    use std::hash::{Hash, Hasher};
    let name = crd.pointer("/metadata/name")?.as_str()?.to_owned();
    let group = crd.pointer("/spec/group")?.as_str()?.to_owned();
    let kind = crd.pointer("/spec/names/kind")?.as_str()?.to_owned();
    let established = crd
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        });
    let mut h = std::collections::hash_map::DefaultHasher::new();
    crd.get("spec").map(Value::to_string).hash(&mut h);
    established.hash(&mut h);
    Some((name, (group, kind), h.finish()))
}

/// The RGDs of `uses` that use `kind`.
fn users(
    uses: &BTreeMap<String, BTreeSet<(String, String)>>,
    kind: &(String, String),
) -> Vec<String> {
    uses.iter()
        .filter(|(_, kinds)| kinds.contains(kind))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Whether the serving task should be started (`Some(true)`), stopped (`Some(false)`) or left
/// as it is (`None`), when this process `holds` the right to serve (no coordination, the
/// leader Lease, or under sharding the cluster bucket) and a task is `serving`.
fn step(holds: bool, serving: bool) -> Option<bool> {
    (holds != serving).then_some(holds)
}

/// The longest wait before serving is started again after failures in a row: 5 minutes
/// (kmeta's; as client-go's backoff managers, minutes at most).
const RESTART_MAX: Duration = Duration::from_secs(300);

/// How long serving that stopped on an error `failures` times in a row waits before it starts
/// again: `every`, doubling with each failure after the first, at most [`RESTART_MAX`].
fn restart_delay(every: Duration, failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    every.saturating_mul(1u32 << exp).min(RESTART_MAX)
}

/// The serving task and when it started.
struct Serving {
    task: tokio::task::JoinHandle<bool>,
    token: tokio_util::sync::CancellationToken,
    started: tokio::time::Instant,
}

/// Serves ResourceGraphDefinitions ([`install_crd`], then [`serve_with`] with `options`) while
/// `holds()` says this
/// process may (checked every `every`): started when it starts holding, stopped when it stops,
/// started again when it ended on an error while still holding, after a backoff (`every`,
/// doubling with each failure in a row, at most 5 minutes; a run that lasted 5 minutes starts the
/// count again); until `stop`.
/// The writes of a stopped task that were already on their way are refused by the client's
/// write fence, as every write of a process that lost its Lease or bucket.
pub async fn serve_while(
    client: kube::Client,
    options: ServeOptions,
    holds: impl Fn() -> bool,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut serving: Option<Serving> = None;
    let (mut failures, mut not_before) = (0u32, tokio::time::Instant::now());
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => break,
        }
        if let Some(s) = serving.take_if(|s| s.task.is_finished()) {
            let lasted = s.started.elapsed();
            failures = match s.task.await.unwrap_or(true) {
                false => 0,
                true if lasted >= RESTART_MAX => 1,
                true => failures.saturating_add(1),
            };
            not_before = tokio::time::Instant::now() + restart_delay(every, failures);
        }
        let may = holds() && (serving.is_some() || tokio::time::Instant::now() >= not_before);
        match step(may, serving.is_some()) {
            Some(true) => {
                let token = stop.child_token();
                let run = serve_until(client.clone(), options, token.clone(), failures);
                let (task, started) = (tokio::spawn(run), tokio::time::Instant::now());
                serving = Some(Serving {
                    task,
                    token,
                    started,
                });
            }
            Some(false) => {
                if let Some(s) = serving.take() {
                    tracing::info!("no longer serving resourcegraphdefinitions here");
                    s.token.cancel();
                }
            }
            None => {}
        }
    }
    if let Some(s) = serving {
        s.token.cancel();
    }
}

/// [`install_crd`] then [`serve`] until `stop`; true when it stopped on an error (logged, with
/// how many failures in a row came before it).
async fn serve_until(
    client: kube::Client,
    options: ServeOptions,
    stop: tokio_util::sync::CancellationToken,
    failures: u32,
) -> bool {
    let served = async {
        install_crd(&client).await?;
        tracing::info!("serving kro.run resourcegraphdefinitions");
        serve_with(client, options).await
    };
    tokio::select! {
        r = served => match r {
            Ok(()) => false,
            Err(e) => {
                tracing::error!(error = %e, failures_before = failures, "serving resourcegraphdefinitions stopped; started again after a backoff");
                true
            }
        },
        _ = stop.cancelled() => false,
    }
}

/// Files `name` for a retry when `result` says it may succeed later.
fn mark(failed: &mut BTreeSet<String>, name: String, result: Result<(), KroError>) {
    match result {
        Ok(()) => {}
        Err(e) => {
            tracing::info!(resourcegraphdefinition = %name, error = %e, "not served");
            let for_good = matches!(
                e,
                KroError::Graph(_) | KroError::Schema { .. } | KroError::Unsupported { .. }
            );
            if !for_good {
                failed.insert(name);
            }
        }
    }
}

/// Serves one RGD and writes its status; the error when it is not served.
async fn handle(server: &Server, rgd: &Value) -> Result<(), KroError> {
    if rgd.pointer("/metadata/deletionTimestamp").is_some() {
        return Ok(());
    }
    let outcome = apply(server, rgd).await;
    let status = match &outcome {
        Ok(order) => accepted(rgd, order),
        Err(e) => rejected(rgd, e),
    };
    let name = rgd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if rgd.get("status") != Some(&status) {
        let body = json!({"status": status});
        (server.api)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(api_err(format!(
                "writing the status of resourcegraphdefinition {name}"
            )))?;
    }
    outcome.map(|_| ())
}

/// Applies the RGD's CRD and CompositeController, its graph type-checked against its kinds'
/// schemas; the resources' order.
async fn apply(server: &Server, rgd: &Value) -> Result<Vec<String>, KroError> {
    let client = &server.client;
    let g = graph::parse(rgd.get("spec").unwrap_or(&Value::Null))?;
    let plurals = plurals(client, &g).await?;
    let kinds = server.schemas.read(client, &plurals).await;
    let key = |av: &str, kind: &str| (av.to_owned(), kind.to_owned());
    let mut served = translate_checked(
        rgd,
        &|av, kind| plurals.get(&key(av, kind)).cloned(),
        &|av, kind| kinds.get(&key(av, kind)).cloned(),
    )?;
    if server.options.allow_crd_deletion {
        owned_by(&mut served.crd, rgd);
    }
    let crd = apply_as::<CustomResourceDefinition>(client, &served.crd, "customresourcedefinition")
        .await?;
    if server.options.allow_crd_deletion {
        also_owned_by_crd(&mut served.controller, &crd.metadata);
    }
    apply_as::<CompositeController>(client, &served.controller, "compositecontroller").await?;
    Ok(served.order)
}

/// Makes the instance CRD (`crd`) a second owner of the RGD's CompositeController, so that with
/// `--kro-allow-crd-deletion` the controller outlives its RGD until the CRD is gone: deleting
/// the CRD deletes every instance, and each instance keeps kro's finalizer until the controller
/// has deleted its children, last made first. The garbage collector deletes an object once every
/// owner is gone.
fn also_owned_by_crd(
    controller: &mut Value,
    crd: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) {
    let owner = json!({"apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition", "name": crd.name, "uid": crd.uid});
    if let Some(owners) = controller
        .pointer_mut("/metadata/ownerReferences")
        .and_then(Value::as_array_mut)
    {
        owners.push(owner);
    }
}

/// Makes `rgd` an owner of `crd` (its instance CRD), so deleting the RGD deletes the CRD
/// (kro's `--allow-crd-deletion`); not its controller, and not blocking the RGD's deletion.
fn owned_by(crd: &mut Value, rgd: &Value) {
    let meta = &rgd["metadata"];
    crd["metadata"]["ownerReferences"] = json!([{"apiVersion": super::API_VERSION,
        "kind": "ResourceGraphDefinition", "name": meta["name"], "uid": meta["uid"]}]);
}

/// Applies `object` (cluster-scoped, of type `K`, shown as `what`) server-side as kmeta's
/// field manager for RGDs, taking its fields from any other manager.
async fn apply_as<K>(client: &kube::Client, object: &Value, what: &str) -> Result<K, KroError>
where
    K: kube::Resource<Scope = kube::core::ClusterResourceScope>
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Clone
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let typed: K = serde_json::from_value(object.clone()).map_err(|e| KroError::Schema {
        path: format!("{what} {name}"),
        message: e.to_string(),
    })?;
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    Api::<K>::all(client.clone())
        .patch(name, &pp, &Patch::Apply(&typed))
        .await
        .map_err(api_err(format!("applying {what} {name}")))
}

/// The plural of each kind the graph makes or reads, from the API server's discovery.
async fn plurals(
    client: &kube::Client,
    g: &graph::Graph,
) -> Result<BTreeMap<(String, String), String>, KroError> {
    let mut out = BTreeMap::new();
    // external references too: the CompositeController names their resource, and their
    // schemas type what reads them
    for n in &g.nodes {
        let (group, version) = match n.api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", n.api_version.as_str()),
        };
        let gvk = GroupVersionKind::gvk(group, version, &n.kind);
        let unknown = || KroError::UnknownKind {
            id: n.id.clone(),
            api_version: n.api_version.clone(),
            kind: n.kind.clone(),
        };
        let (ar, _) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|_| unknown())?;
        out.insert((n.api_version.clone(), n.kind.clone()), ar.plural);
    }
    Ok(out)
}

/// One condition, keeping its `lastTransitionTime` from `rgd`'s status while it holds.
fn condition(rgd: &Value, kind: &str, status: &str, reason: &str, message: &str) -> Value {
    let since = rgd
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c["type"] == kind && c["status"] == status)
        })
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| {
            json!(
                jiff::Timestamp::now()
                    .strftime("%Y-%m-%dT%H:%M:%SZ")
                    .to_string()
            )
        });
    let mut c = json!({"type": kind, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": since});
    if let Some(g) = rgd.pointer("/metadata/generation") {
        c["observedGeneration"] = g.clone();
    }
    c
}

fn accepted(rgd: &Value, order: &[String]) -> Value {
    let kind = rgd
        .pointer("/spec/schema/kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    json!({
        "state": "Active",
        "topologicalOrder": order,
        "conditions": [
            condition(rgd, "GraphAccepted", "True", "Valid", "resource graph and schema are valid"),
            condition(rgd, "KindReady", "True", "Ready", &format!("kind {kind} has been accepted and ready")),
            condition(rgd, "ControllerReady", "True", "Running", "served by kmeta as a CompositeController with a CEL hook"),
            condition(rgd, "Ready", "True", "Ready", ""),
        ],
    })
}

fn rejected(rgd: &Value, e: &KroError) -> Value {
    let message = e.to_string();
    let graph_error = matches!(
        e,
        KroError::Graph(_)
            | KroError::Schema { .. }
            | KroError::UnknownKind { .. }
            | KroError::Unsupported { .. }
    );
    let first = if graph_error {
        condition(
            rgd,
            "GraphAccepted",
            "False",
            "InvalidResourceGraph",
            &message,
        )
    } else {
        condition(rgd, "ControllerReady", "False", "Failed", &message)
    };
    json!({
        "state": "Inactive",
        "conditions": [first, condition(rgd, "Ready", "False", "NotReady", &message)],
    })
}

/// The OpenAPI schemas of the kinds RGDs make, read for their type checks: a custom resource's
/// from its CRD (the object itself, so a CRD just created or changed is read as it is now, not
/// as the API server's OpenAPI document last published it), a built-in kind's (and a custom
/// resource's without a readable CRD) from the API server's `/openapi/v3`; a kind neither
/// describes is checked as `dyn`. Documents are read again only when their hash changes
/// (`ops::openapi`).
#[derive(Default)]
struct Schemas {
    docs: OpenApiDocs,
    metrics: Metrics,
    /// Bumped for each RGD served, so the `/openapi/v3` index is read again (new CRDs).
    generation: std::sync::atomic::AtomicU64,
}

/// Whether `api_version`'s group is one CRDs may serve: it has a dot and is not a built-in
/// `*.k8s.io` group (as kmeta tells a CRD's group for list markers).
fn custom_group(api_version: &str) -> bool {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    group.contains('.') && !group.ends_with(".k8s.io")
}

impl Schemas {
    /// The schema of each kind of `plurals` (apiVersion and kind to resource) that is known.
    async fn read(
        &self,
        client: &kube::Client,
        plurals: &BTreeMap<(String, String), String>,
    ) -> BTreeMap<(String, String), Schema> {
        use std::sync::atomic::Ordering;
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let mut out = BTreeMap::new();
        for ((av, kind), plural) in plurals {
            let from_crd = match custom_group(av) {
                true => crd_schema(client, av, plural).await,
                false => None,
            };
            let schema = match from_crd {
                Some(s) => Some(s),
                None => self.in_openapi(client, generation, av, kind).await,
            };
            match schema {
                Some(s) => {
                    out.insert((av.clone(), kind.clone()), s);
                }
                None => tracing::debug!(api_version = %av, kind, "no OpenAPI schema: read as dyn"),
            }
        }
        out
    }

    /// The schema of `kind` in the API server's `/openapi/v3` document of `api_version`.
    async fn in_openapi(
        &self,
        client: &kube::Client,
        generation: u64,
        api_version: &str,
        kind: &str,
    ) -> Option<Schema> {
        let doc = self
            .docs
            .group_version(client, &self.metrics, generation, api_version)
            .await;
        match doc {
            Ok(Ok(doc)) => Schema::of_kind(doc, api_version, kind),
            _ => None,
        }
    }
}

/// The `openAPIV3Schema` of version `api_version` of the CRD serving `plural`, when there is
/// one and kmeta may read it.
async fn crd_schema(client: &kube::Client, api_version: &str, plural: &str) -> Option<Schema> {
    let (group, version) = api_version.split_once('/')?;
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let crd = api.get_opt(&format!("{plural}.{group}")).await.ok()??;
    let crd = serde_json::to_value(crd).ok()?;
    let versions = crd.pointer("/spec/versions")?.as_array()?;
    let v = versions.iter().find(|v| v["name"] == version)?;
    Some(Schema::new(v.pointer("/schema/openAPIV3Schema")?.clone()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {

    #[test]
    fn serving_that_keeps_failing_starts_again_after_a_doubling_wait() {
        let every = Duration::from_secs(2);
        assert_eq!(restart_delay(every, 0), every);
        assert_eq!(restart_delay(every, 1), every);
        assert_eq!(restart_delay(every, 2), Duration::from_secs(4));
        assert_eq!(restart_delay(every, 4), Duration::from_secs(16));
        assert_eq!(restart_delay(every, 9), RESTART_MAX);
        assert_eq!(restart_delay(every, u32::MAX), RESTART_MAX);
    }
    use super::{RESTART_MAX, custom_group, restart_delay, step};
    use std::time::Duration;

    #[test]
    fn a_crd_change_serves_again_the_rgds_using_its_kind() {
        use super::{crd_state, kinds_of, users};
        use serde_json::json;
        use std::collections::BTreeMap;
        let rgd = json!({"metadata": {"name": "app"}, "spec": {
            "schema": {"kind": "App", "apiVersion": "v1alpha1"},
            "resources": [
                {"id": "db", "template": {"apiVersion": "db.example.com/v1", "kind": "Database"}},
                {"id": "cm", "template": {"apiVersion": "v1", "kind": "ConfigMap"}},
                {"id": "peer", "externalRef": {"apiVersion": "apps/v1", "kind": "Deployment"}},
                {"id": "broken", "template": "not an object"}]}});
        let kinds = kinds_of(&rgd);
        let gk = |g: &str, k: &str| (g.to_owned(), k.to_owned());
        assert_eq!(
            kinds.into_iter().collect::<Vec<_>>(),
            [
                gk("", "ConfigMap"),
                gk("apps", "Deployment"),
                gk("db.example.com", "Database"),
                gk("kro.run", "App")
            ]
        );
        let uses = BTreeMap::from([("app".to_owned(), kinds_of(&rgd))]);
        assert_eq!(users(&uses, &gk("db.example.com", "Database")), ["app"]);
        assert!(users(&uses, &gk("db.example.com", "Table")).is_empty());

        let crd = json!({"metadata": {"name": "databases.db.example.com"},
            "spec": {"group": "db.example.com", "names": {"kind": "Database"}, "versions": []}});
        let (name, kind, state) = crd_state(&crd).unwrap();
        assert_eq!(
            (name.as_str(), kind),
            ("databases.db.example.com", gk("db.example.com", "Database"))
        );
        let mut established = crd.clone();
        established["status"] = json!({"conditions": [{"type": "Established", "status": "True"}]});
        assert_ne!(crd_state(&established).unwrap().2, state);
        let mut relabelled = crd.clone();
        relabelled["metadata"]["labels"] = json!({"a": "b"});
        assert_eq!(
            crd_state(&relabelled).unwrap().2,
            state,
            "only the spec and Established count"
        );
        let mut changed = crd.clone();
        changed["spec"]["versions"] = json!([{"name": "v1"}]);
        assert_ne!(crd_state(&changed).unwrap().2, state);
        assert!(crd_state(&json!({"metadata": {"name": "x"}})).is_none());
    }

    #[test]
    fn a_crd_is_news_when_created_changed_or_deleted_not_when_first_listed() {
        use super::{Seen, note};
        let mut crds = std::collections::BTreeMap::new();
        let n = || "a.example.com".to_owned();
        assert!(
            !note(&mut crds, n(), 1, Seen::Listed),
            "the first listing records"
        );
        assert!(
            !note(&mut crds, n(), 1, Seen::Listed),
            "listed again, unchanged"
        );
        assert!(
            note(&mut crds, n(), 2, Seen::Listed),
            "changed while the watch was down"
        );
        assert!(
            !note(&mut crds, n(), 2, Seen::Now),
            "an event that changed nothing read"
        );
        assert!(note(&mut crds, n(), 3, Seen::Now));
        assert!(note(&mut crds, n(), 3, Seen::Gone));
        assert!(!note(&mut crds, n(), 3, Seen::Gone), "gone already");
        assert!(note(&mut crds, n(), 3, Seen::Now), "created");
    }

    #[test]
    fn with_crd_deletion_allowed_the_rgd_owns_its_instance_crd() {
        let rgd = serde_json::json!({"metadata": {"name": "web", "uid": "u-1"}});
        let mut crd = serde_json::json!({"metadata": {"name": "webapps.kro.run"}});
        super::owned_by(&mut crd, &rgd);
        assert_eq!(
            crd["metadata"]["ownerReferences"],
            serde_json::json!([{"apiVersion": "kro.run/v1alpha1",
                "kind": "ResourceGraphDefinition", "name": "web", "uid": "u-1"}])
        );
        let mut controller = serde_json::json!({"metadata": {"ownerReferences": [
            {"kind": "ResourceGraphDefinition", "uid": "u-1", "controller": true}]}});
        let meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("webapps.kro.run".into()),
            uid: Some("u-crd".into()),
            ..Default::default()
        };
        super::also_owned_by_crd(&mut controller, &meta);
        assert_eq!(
            controller["metadata"]["ownerReferences"][1],
            serde_json::json!({"apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition", "name": "webapps.kro.run", "uid": "u-crd"}),
            "the controller lives until the CRD (and every instance) is gone"
        );
        let options = super::ServeOptions::default();
        assert!(!options.allow_crd_deletion, "kro's default: CRDs stay");
        assert!(options.allow_crd_deletion(true).allow_crd_deletion);
    }

    #[test]
    fn custom_resources_are_read_from_their_crds() {
        assert!(custom_group("example.com/v1"));
        assert!(!custom_group("apps/v1"));
        assert!(!custom_group("v1"));
        assert!(!custom_group("networking.k8s.io/v1"));
    }

    #[test]
    fn serving_follows_what_the_process_holds() {
        assert_eq!(step(true, false), Some(true));
        assert_eq!(step(false, true), Some(false));
        assert_eq!(step(true, true), None);
        assert_eq!(step(false, false), None);
    }
}
