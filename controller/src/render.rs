//! What a sync hook would make kmeta write for one parent, as a library: [`render`] takes
//! [`RenderOptions`] and returns the [`Rendered`] children, status and [`Write`]s, which
//! [`as_yaml`] and [`as_diff`] print. The `kmeta render` command is a thin shell over it.
//!
//! `kmeta render`: what kmeta would write for one parent, without a cluster. It builds the sync
//! hook request exactly as a running controller does (the same request types, object maps and
//! hook client: headers, timeout, decoding mode), calls the controller's sync hook (or
//! `--hook-url`), checks the answer as a sync does (the same decoder and desired-children
//! validation), and prints the desired children and the parent's new status — or, with `--diff`,
//! per child the write kmeta would make against the observed children given.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::api::CompositeController;
use crate::hook::{HookClient, HookOptions, wire};
use crate::object::meta_str;
use crate::ops::metrics::HookKind;
use crate::reconcile::composite::decide as cdecide;
use crate::reconcile::decide::{self, ChildOp, ChildType};

/// Why `kmeta render` could not render.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A file is not what it should hold.
    #[error("{path}: {message}")]
    Input {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The controller cannot be rendered (no sync hook, an unknown child kind, ...).
    #[error("{0}")]
    Controller(String),
    /// The hook failed or its answer was refused, as a sync would fail.
    #[error("{0}")]
    Sync(String),
}

/// What `kmeta render` renders.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// The CompositeController manifest.
    pub controller: PathBuf,
    /// The parent manifest.
    pub parent: PathBuf,
    /// Manifests of the observed children.
    pub observed: Vec<PathBuf>,
    /// Manifests of related objects (sent in `related`, keyed as the customize hook's).
    pub related: Vec<PathBuf>,
    /// CustomResourceDefinitions of custom child kinds (their kind and scope).
    pub crds: Vec<PathBuf>,
    /// Call this URL instead of the sync hook's (`webhook.url` or its Service).
    pub hook_url: Option<String>,
    /// Objects the hook client reads from the cluster (a Jsonnet hook's ConfigMap, a webhook's
    /// Secrets), served to it from these files instead.
    pub hook_objects: Vec<PathBuf>,
    /// The Jsonnet worker process for Jsonnet hooks; `None`: this executable
    /// (`kmeta jsonnet-worker`).
    pub jsonnet_worker: Option<crate::hook::jsonnet::WorkerCommand>,
    /// Read the parent's children (and the CRDs of custom child kinds, and what the hook client
    /// reads) from this cluster instead of files (`--live`).
    pub live: Option<Live>,
    /// Call the finalize hook (`finalizing: true`).
    pub finalizing: bool,
}

/// A cluster `kmeta render --live` reads from.
#[derive(Clone)]
pub struct Live(pub kube::Client);

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Live(kube::Client)")
    }
}

/// One write kmeta would make to a child, with the body it would send.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// POST this object.
    Create(Value),
    /// PUT this object: the three-way merge of live, its last-applied configuration and the
    /// desired child (it carries live's resourceVersion).
    Update(Value),
    /// Server-side apply (controllers with `kmeta.dev/apply-strategy: server-side-apply`): PATCH
    /// this body as `field_manager`, without force; a body whose subtrees were merged from live
    /// carries live's resourceVersion. (An ownership upgrade kmeta makes first, for fields its
    /// manager set by earlier updates, would move that resourceVersion on.)
    Apply {
        /// The apply body.
        body: Value,
        /// The field manager, one per parent.
        field_manager: String,
    },
    /// DELETE this observed object (with its UID as precondition); `recreate` when an update
    /// strategy replaces it.
    Delete {
        /// The observed object.
        object: Value,
        /// `not desired` or `recreate`.
        reason: &'static str,
    },
}

impl Write {
    /// The child it writes (`Kind.apiVersion namespace/name`).
    pub fn child_key(&self) -> String {
        match self {
            Write::Create(v) | Write::Update(v) | Write::Apply { body: v, .. } => {
                decide::child_key(v)
            }
            Write::Delete { object, .. } => decide::child_key(object),
        }
    }
}

impl From<ChildOp> for Write {
    fn from(op: ChildOp) -> Self {
        match op {
            ChildOp::Create(v) => Write::Create(v),
            ChildOp::Update(v) => Write::Update(v),
            ChildOp::Delete { object, reason } => Write::Delete { object, reason },
        }
    }
}

/// The rendered sync: the answer as kmeta accepts it, and the writes it would make.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The parent, as read.
    pub parent: Value,
    /// The observed children, as read.
    pub observed: Vec<Value>,
    /// The parent's status as kmeta would write it (the hook's, with `observedGeneration`).
    pub status: Value,
    /// The desired children, validated (namespace defaulted, generated selector label added).
    pub desired: Vec<Value>,
    /// The child writes, deletes first, as the controller orders them.
    pub writes: Vec<Write>,
    /// Observed children the answer leaves as they are.
    pub unchanged: Vec<String>,
    /// Observed children left differing from the answer at fields their type's `fieldRules`
    /// leave to others, with the names of those rules.
    pub left_alone: Vec<(String, Vec<String>)>,
    /// The events the hook asked kmeta to publish on the parent (`events`), as it sent them.
    pub events: Vec<Value>,
}

impl Rendered {
    /// Whether kmeta would write anything: a child, or the status.
    pub fn changes(&self) -> bool {
        !self.writes.is_empty() || decide::status_changed(&self.parent, &self.status)
    }
}

fn read_docs(path: &Path) -> Result<Vec<Value>, RenderError> {
    let text = std::fs::read_to_string(path).map_err(|source| RenderError::Read {
        path: path.to_owned(),
        source,
    })?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|e| RenderError::Input {
        path: path.to_owned(),
        message: crate::manifest::yaml_error(&e),
    })?;
    let mut out = Vec::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        // a List (`kubectl get -o yaml`) is its items
        match doc.get("items").and_then(Value::as_array) {
            Some(items) if doc["kind"].as_str().is_some_and(|k| k.ends_with("List")) => {
                out.extend(items.iter().cloned());
            }
            _ => out.push(doc),
        }
    }
    Ok(out)
}

fn read_all(paths: &[PathBuf]) -> Result<Vec<Value>, RenderError> {
    let mut out = Vec::new();
    for p in paths {
        out.extend(read_docs(p)?);
    }
    Ok(out)
}

/// The one object in `path` that `pick` chooses (`what` it is, for the error).
fn read_one(path: &Path, what: &str, pick: impl Fn(&Value) -> bool) -> Result<Value, RenderError> {
    let docs = read_docs(path)?;
    let mut found = docs.into_iter().filter(|d| pick(d));
    match (found.next(), found.next()) {
        (Some(d), None) => Ok(d),
        (None, _) => Err(RenderError::Input {
            path: path.to_owned(),
            message: format!("no {} in it", what),
        }),
        (Some(_), Some(_)) => Err(RenderError::Input {
            path: path.to_owned(),
            message: format!("more than one {}: give one", what),
        }),
    }
}

/// Kind and scope of the built-in kinds children usually are, by `apiVersion` and plural.
const BUILTIN: &[(&str, &str, &str, bool)] = &[
    ("v1", "configmaps", "ConfigMap", true),
    ("v1", "secrets", "Secret", true),
    ("v1", "services", "Service", true),
    ("v1", "serviceaccounts", "ServiceAccount", true),
    ("v1", "pods", "Pod", true),
    (
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        true,
    ),
    ("v1", "namespaces", "Namespace", false),
    ("apps/v1", "deployments", "Deployment", true),
    ("apps/v1", "statefulsets", "StatefulSet", true),
    ("apps/v1", "daemonsets", "DaemonSet", true),
    ("apps/v1", "replicasets", "ReplicaSet", true),
    ("batch/v1", "jobs", "Job", true),
    ("batch/v1", "cronjobs", "CronJob", true),
    ("networking.k8s.io/v1", "ingresses", "Ingress", true),
    (
        "networking.k8s.io/v1",
        "networkpolicies",
        "NetworkPolicy",
        true,
    ),
    (
        "policy/v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
    ),
    (
        "autoscaling/v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        true,
    ),
    ("rbac.authorization.k8s.io/v1", "roles", "Role", true),
    (
        "rbac.authorization.k8s.io/v1",
        "rolebindings",
        "RoleBinding",
        true,
    ),
    (
        "rbac.authorization.k8s.io/v1",
        "clusterroles",
        "ClusterRole",
        false,
    ),
    (
        "rbac.authorization.k8s.io/v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
    ),
];

/// Kind and scope of child resource `plural` of `api_version`: built in, from a CRD given, or
/// from an observed object of that apiVersion whose kind's plural it is.
fn child_type(
    api_version: &str,
    plural: &str,
    crds: &[Value],
    observed: &[Value],
) -> Result<(String, bool), RenderError> {
    if let Some((_, _, kind, ns)) = BUILTIN
        .iter()
        .find(|(av, p, _, _)| *av == api_version && *p == plural)
    {
        return Ok(((*kind).to_owned(), *ns));
    }
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    for crd in crds {
        let spec = &crd["spec"];
        let served = spec["versions"]
            .as_array()
            .is_some_and(|vs| vs.iter().any(|v| v["name"] == version));
        if spec["group"] == group && spec["names"]["plural"] == plural && served {
            let kind = spec["names"]["kind"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            return Ok((kind, spec["scope"] != "Cluster"));
        }
    }
    for o in observed {
        let kind = o["kind"].as_str().unwrap_or_default();
        let lower = kind.to_ascii_lowercase();
        if o["apiVersion"] == api_version
            && (plural == format!("{lower}s") || plural == format!("{lower}es"))
        {
            let namespaced = o.pointer("/metadata/namespace").is_some();
            return Ok((kind.to_owned(), namespaced));
        }
    }
    Err(RenderError::Controller(format!(
        "child resource {api_version}/{plural}: its kind and scope are unknown here; give its CustomResourceDefinition with --crd"
    )))
}

/// The dynapply options of a child kind, as a sync uses them: the built-in list rules, and a
/// CRD's list markers when its CRD is given.
fn child_options(api_version: &str, kind: &str, crds: &[Value]) -> dynapply::Options {
    let mut rules = dynapply::ListRules::builtin(api_version, kind);
    let version = api_version.rsplit_once('/').map_or(api_version, |(_, v)| v);
    for crd in crds.iter().filter(|c| c["spec"]["names"]["kind"] == kind) {
        if let Ok(from_schema) = dynapply::ListRules::from_crd(crd, Some(version)) {
            rules = rules.merge(from_schema);
        }
    }
    dynapply::Options {
        rules,
        ..dynapply::Options::default()
    }
}

/// What render read from its files.
struct Inputs {
    cc: CompositeController,
    parent: Value,
    observed: Vec<Value>,
    related: Vec<Value>,
    crds: Vec<Value>,
}

/// The declared child types, as a sync resolves them (kind, scope, update method, list rules).
#[derive(Default)]
struct Declared {
    types: HashMap<String, ChildType>,
    keys: Vec<String>,
    options: HashMap<String, dynapply::Options>,
}

/// Step: the controller, the parent (the one object of the parent resource's apiVersion in its
/// file), the observed children, related objects and CRDs.
fn read_inputs(opts: &RenderOptions) -> Result<Inputs, RenderError> {
    let cc_value = read_one(&opts.controller, "CompositeController", |d| {
        d["kind"] == "CompositeController"
    })?;
    let cc: CompositeController =
        serde_json::from_value(cc_value).map_err(|e| RenderError::Input {
            path: opts.controller.clone(),
            message: format!("not a CompositeController: {e}"),
        })?;
    let parent_av = cc.spec.parent_resource.api_version.clone();
    let parent = read_one(&opts.parent, &format!("{parent_av} object"), |d| {
        d["apiVersion"] == parent_av.as_str()
    })?;
    Ok(Inputs {
        cc,
        parent,
        observed: read_all(&opts.observed)?,
        related: read_all(&opts.related)?,
        crds: read_all(&opts.crds)?,
    })
}

/// Step: the child types the controller declares.
fn declare_children(inputs: &Inputs) -> Result<Declared, RenderError> {
    use crate::reconcile::apply;
    let mut d = Declared::default();
    let annotations = inputs.cc.metadata.annotations.as_ref();
    let choice = apply::last_applied_choice(annotations, Default::default());
    for rule in inputs.cc.spec.child_rules() {
        let (kind, namespaced) = child_type(
            &rule.api_version,
            &rule.resource,
            &inputs.crds,
            &inputs.observed,
        )?;
        let key = wire::group_key(&rule.api_version, &kind);
        let method = rule
            .update_strategy
            .as_ref()
            .and_then(|s| s.method)
            .unwrap_or_default();
        d.types
            .insert(key.clone(), ChildType { namespaced, method });
        let mut options = child_options(&rule.api_version, &kind, &inputs.crds);
        let spec_fields = rule.field_rules.as_deref().unwrap_or_default();
        options.fields =
            crate::reconcile::children::field_rules(spec_fields, None, &rule.api_version, &kind)
                .map_err(|e| RenderError::Controller(format!("{key}: {e}")))?;
        let drift = rule.drift_policy.unwrap_or_default();
        options.record = apply::records_last_applied(choice, &options.rules, drift, method);
        d.options.insert(key.clone(), options);
        d.keys.push(key);
    }
    Ok(d)
}

/// Step: the hook client a sync would use (`--hook-url` replacing its URL), offline: what it
/// reads from the cluster (a Jsonnet hook's ConfigMap, a webhook's Secrets) comes from
/// `--hook-objects`, and anything else is not found, naming the object.
async fn hook_client(
    opts: &RenderOptions,
    cc: &CompositeController,
) -> Result<HookClient, RenderError> {
    let err = |e: String| RenderError::Controller(e);
    let (spec, kind) = if opts.finalizing {
        (cc.spec.finalize_hook(), HookKind::Finalize)
    } else {
        (cc.spec.sync_hook(), HookKind::Sync)
    };
    let mut spec = spec.cloned().ok_or_else(|| {
        err(format!(
            "the CompositeController has no {} hook",
            kind.as_str()
        ))
    })?;
    if let (Some(url), Some(w)) = (&opts.hook_url, spec.webhook.as_mut()) {
        w.url = Some(url.clone());
        w.service = None;
        w.path = None;
    }
    let client = match &opts.live {
        Some(Live(client)) if opts.hook_objects.is_empty() => client.clone(),
        _ => files_client(read_all(&opts.hook_objects)?),
    };
    let endpoints = cc.spec.endpoint_configs.clone().unwrap_or_default();
    let options = HookOptions {
        jsonnet: match &opts.jsonnet_worker {
            Some(w) => crate::hook::jsonnet::JsonnetOptions {
                worker: Some(w.clone()),
                ..Default::default()
            },
            None => crate::hook::jsonnet::this_binary(),
        },
        ..HookOptions::default()
    };
    HookClient::new(&client, kind, &spec, &endpoints, &options)
        .await
        .map_err(|e| err(e.to_string()))
}

/// Step (`--live`): the CRDs of the cluster (for custom child kinds), the parent as it is there
/// with the file's `spec`, labels and annotations (what kmeta would write if the file were
/// applied), and its observed children: the objects of each child resource it controls.
async fn read_live(client: &kube::Client, inputs: &mut Inputs) -> Result<(), RenderError> {
    use kube::api::{Api, ApiResource, DynamicObject, ListParams};
    let api_err = |what: String| move |e: kube::Error| RenderError::Sync(format!("{what}: {e}"));
    let crd = ApiResource::erase::<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    >(&());
    let crds = Api::<DynamicObject>::all_with(client.clone(), &crd)
        .list(&ListParams::default())
        .await
        .map_err(api_err("listing CustomResourceDefinitions".into()))?;
    inputs.crds.extend(
        crds.items
            .iter()
            .filter_map(|o| serde_json::to_value(o).ok()),
    );
    let pr = &inputs.cc.spec.parent_resource;
    let (kind, namespaced) = child_type(&pr.api_version, &pr.resource, &inputs.crds, &[])?;
    let ns = inputs
        .parent
        .pointer("/metadata/namespace")
        .and_then(Value::as_str);
    let name = meta_str(&inputs.parent, "name");
    let parent_api = dynamic_api(
        client,
        &pr.api_version,
        &kind,
        &pr.resource,
        namespaced.then_some(ns).flatten(),
    );
    let live = parent_api
        .get(name)
        .await
        .map_err(api_err(format!("reading the parent {kind} {name}")))?;
    let mut parent = serde_json::to_value(live).unwrap_or(Value::Null);
    overlay_parent(&mut parent, &inputs.parent);
    let uid = meta_str(&parent, "uid").to_owned();
    let mut observed = Vec::new();
    for rule in inputs.cc.spec.child_rules() {
        let (kind, child_namespaced) =
            child_type(&rule.api_version, &rule.resource, &inputs.crds, &[])?;
        let api = dynamic_api(
            client,
            &rule.api_version,
            &kind,
            &rule.resource,
            child_namespaced.then_some(ns).flatten(),
        );
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(api_err(format!("listing {}", rule.resource)))?;
        observed.extend(
            list.items
                .iter()
                .filter_map(|o| serde_json::to_value(o).ok())
                .filter(|o| crate::object::controller_uid(o) == Some(uid.as_str())),
        );
    }
    inputs.parent = parent;
    inputs.observed = observed;
    Ok(())
}

/// A dynamic API of `plural` (`kind`) in `api_version`, in `namespace` or cluster-wide.
fn dynamic_api(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    namespace: Option<&str>,
) -> kube::Api<kube::api::DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
    match namespace {
        Some(ns) => kube::Api::namespaced_with(client.clone(), ns, &ar),
        None => kube::Api::all_with(client.clone(), &ar),
    }
}

/// The live parent with the `spec`, labels and annotations of the file's (those it sets).
fn overlay_parent(live: &mut Value, file: &Value) {
    if let Some(spec) = file.get("spec") {
        live["spec"] = spec.clone();
    }
    for field in ["labels", "annotations"] {
        if let Some(v) = file.pointer(&format!("/metadata/{field}")) {
            live["metadata"][field] = v.clone();
        }
    }
}

/// A client that answers GETs of namespaced objects from `objects` (by namespace, plural of its
/// kind and name) and 404 to everything else: what the hook client reads, without a cluster.
fn files_client(objects: Vec<Value>) -> kube::Client {
    let objects = std::sync::Arc::new(objects);
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let objects = objects.clone();
        async move {
            let (code, body) = answer_get(&objects, req.method(), req.uri().path());
            let mut response =
                http::Response::new(kube::client::Body::from(body.to_string().into_bytes()));
            *response.status_mut() = http::StatusCode::from_u16(code).unwrap_or_default();
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    kube::Client::new(service, "default")
}

/// The answer to `method path` from `objects`: 200 with the object that path names, else a 404
/// Status naming what was asked for and where to give it.
fn answer_get(objects: &[Value], method: &http::Method, path: &str) -> (u16, Value) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let found = match parts.as_slice() {
        [_, .., "namespaces", ns, plural, name] if *method == http::Method::GET => {
            objects.iter().find(|o| {
                o.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns)
                    && o.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
                    && plural_of(o).as_deref() == Some(plural)
            })
        }
        _ => None,
    };
    match found {
        Some(o) => (200, o.clone()),
        None => {
            let message = format!(
                "kmeta render has no cluster: {method} {path} is not among the --hook-objects files"
            );
            let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": message, "reason": "NotFound", "code": 404});
            (404, status)
        }
    }
}

/// The resource name of a built-in object's kind (`ConfigMap` → `configmaps`).
fn plural_of(obj: &Value) -> Option<String> {
    let kind = obj.get("kind")?.as_str()?;
    Some(format!("{}s", kind.to_ascii_lowercase()))
}

/// Step: the request a sync sends (the same types and object maps), its answer decoded as a sync
/// decodes it.
async fn call_hook(
    opts: &RenderOptions,
    inputs: &Inputs,
    declared: &Declared,
) -> Result<wire::SyncResponse, RenderError> {
    let hook = hook_client(opts, &inputs.cc).await?;
    let cc_json = wire::controller_object(serde_json::to_value(&inputs.cc).unwrap_or(Value::Null));
    let cc_raw = serde_json::value::to_raw_value(&cc_json)
        .map_err(|e| RenderError::Controller(e.to_string()))?;
    let namespaced = inputs.parent.pointer("/metadata/namespace").is_some();
    // keyed as a sync keys them (`reconcile::related`); no customize rules declare groups here
    let related = wire::object_map(hook.version(), namespaced, &[], inputs.related.iter());
    let request = wire::SyncRequestRef {
        controller: &cc_raw,
        parent: &inputs.parent,
        children: wire::object_map_ref(
            hook.version(),
            namespaced,
            &declared.keys,
            inputs.observed.iter(),
        ),
        related: &related,
        finalizing: opts.finalizing,
    };
    let sync = |e: crate::hook::HookError| RenderError::Sync(e.to_string());
    let body = hook.call("", &request).await.map_err(sync)?;
    hook.decode_sync(&body).map_err(sync)
}

/// Renders one sync of the parent (see the module docs).
pub async fn render(opts: &RenderOptions) -> Result<Rendered, RenderError> {
    let mut inputs = read_inputs(opts)?;
    if let Some(Live(client)) = &opts.live {
        if !opts.observed.is_empty() {
            return Err(RenderError::Controller(
                "--observed and --live both give the observed children: use one".into(),
            ));
        }
        read_live(client, &mut inputs).await?;
    }
    let declared = declare_children(&inputs)?;
    let response = call_hook(opts, &inputs, &declared).await?;
    let Inputs {
        cc,
        parent,
        observed,
        ..
    } = inputs;
    let sync = |e: decide::DecideError| RenderError::Sync(e.to_string());
    let generate = cc.spec.generate_selector.unwrap_or(false);
    let selector = cdecide::parent_selector(&parent, generate).map_err(sync)?;
    let namespaced = parent.pointer("/metadata/namespace").is_some();
    let children = response.children;
    let desired = decide::validate_desired(
        &parent,
        namespaced,
        &declared.types,
        &selector,
        generate,
        children,
    )
    .map_err(sync)?;
    let generation = parent
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    let status = decide::desired_status(
        decide::with_handled_request(response.status, &parent).as_ref(),
        generation,
    );
    let fallback = dynapply::Options::default();
    let ops = decide::plan_children(
        &parent,
        &observed,
        &desired,
        |k| declared.types.get(k).map(|t| t.method).unwrap_or_default(),
        |k| declared.options.get(k).unwrap_or(&fallback),
        |_, _| None,
    )
    .map_err(sync)?;
    let (first, then) = decide::write_phases(ops);
    let ssa =
        crate::reconcile::apply::strategy_for(cc.metadata.annotations.as_ref(), Default::default())
            .is_ok_and(|s| s == crate::reconcile::ApplyStrategy::ServerSideApply);
    let writes = first
        .into_iter()
        .chain(then)
        .map(|op| match op {
            ChildOp::Update(merged) if ssa => {
                apply_write(&cc, &parent, &observed, &desired, &declared, &merged)
            }
            op => Ok(Write::from(op)),
        })
        .collect::<Result<Vec<Write>, RenderError>>()?;
    let written: std::collections::HashSet<String> = writes.iter().map(Write::child_key).collect();
    let unchanged = observed
        .iter()
        .map(decide::child_key)
        .filter(|k| !written.contains(k))
        .collect();
    Ok(Rendered {
        left_alone: left_to_others(&observed, &desired, &declared),
        parent,
        observed,
        status,
        desired: desired.into_values().collect(),
        writes,
        unchanged,
        events: response.events,
    })
}

/// The observed children whose field rules leave fields differing from `desired`, with the
/// rules' names (as the sync records them `LeftAlone`).
fn left_to_others(
    observed: &[Value],
    desired: &BTreeMap<String, Value>,
    declared: &Declared,
) -> Vec<(String, Vec<String>)> {
    observed
        .iter()
        .filter_map(|o| {
            let key = decide::child_key(o);
            let opts = declared.options.get(key.split(' ').next()?)?;
            let names = dynapply::left_alone(&opts.fields, o, desired.get(&key)?);
            let names: Vec<String> = names.into_iter().map(str::to_owned).collect();
            (!names.is_empty()).then_some((key, names))
        })
        .collect()
}

/// Under server-side apply, the apply kmeta sends instead of the update of `merged`: its body
/// built as a sync builds it, and the parent's field manager.
fn apply_write(
    cc: &CompositeController,
    parent: &Value,
    observed: &[Value],
    desired: &BTreeMap<String, Value>,
    declared: &Declared,
    merged: &Value,
) -> Result<Write, RenderError> {
    let key = decide::child_key(merged);
    let live = observed
        .iter()
        .find(|o| decide::child_key(o) == key)
        .unwrap_or(merged);
    let want = desired.get(&key).unwrap_or(merged);
    let group_kind = key.split(' ').next().unwrap_or_default();
    let fallback = dynapply::Options::default();
    let opts = declared.options.get(group_kind).unwrap_or(&fallback);
    // as the sync: the observed version (an empty one guards nothing)
    let version = Some(meta_str(live, "resourceVersion"));
    let body = decide::server_side_apply_request(live, want, opts, parent, version)
        .map_err(|e| RenderError::Sync(format!("{key}: {e}")))?;
    let name = cc.metadata.name.as_deref().unwrap_or_default();
    let uid = meta_str(parent, "uid");
    let manager = crate::ManagerConfig::default().ssa_field_manager;
    Ok(Write::Apply {
        body,
        field_manager: crate::reconcile::apply::field_manager(&manager, name, uid),
    })
}

/// The YAML of `v`, or its JSON when YAML cannot be written.
fn yaml(v: &Value) -> String {
    serde_saphyr::to_string(v).unwrap_or_else(|_| v.to_string())
}

/// The desired children and the status as YAML documents.
pub fn as_yaml(r: &Rendered) -> String {
    let mut out = String::new();
    for child in &r.desired {
        out.push_str("---\n");
        out.push_str(&yaml(child));
    }
    out.push_str("---\n");
    out.push_str(&yaml(&json!({"status": r.status})));
    if !r.events.is_empty() {
        out.push_str("---\n");
        out.push_str(&yaml(&json!({"events": r.events})));
    }
    out
}

/// Per child, the write kmeta would make, as a unified diff against the observed object (empty
/// for a create or a delete), then the children left alone, then the status when it changes.
pub fn as_diff(r: &Rendered) -> String {
    let (parent, observed) = (&r.parent, &r.observed);
    let by_key: HashMap<String, &Value> =
        observed.iter().map(|o| (decide::child_key(o), o)).collect();
    let mut out = String::new();
    for op in &r.writes {
        let (what, key, before, after) = match op {
            Write::Create(v) => ("create", decide::child_key(v), String::new(), yaml(v)),
            Write::Update(v) => {
                let key = decide::child_key(v);
                let before = by_key.get(&key).map(|o| yaml(o)).unwrap_or_default();
                ("update", key, before, yaml(v))
            }
            Write::Apply { body, .. } => {
                let key = decide::child_key(body);
                let before = by_key.get(&key).map(|o| yaml(o)).unwrap_or_default();
                ("server-side apply", key, before, yaml(body))
            }
            Write::Delete { object, reason } => {
                let what = if *reason == "recreate" {
                    "delete (to recreate)"
                } else {
                    "delete"
                };
                (what, decide::child_key(object), yaml(object), String::new())
            }
        };
        out.push_str(&format!("# {what} {key}\n"));
        let diff = similar::TextDiff::from_lines(&before, &after);
        out.push_str(
            &diff
                .unified_diff()
                .header(&format!("observed {key}"), &format!("written {key}"))
                .to_string(),
        );
    }
    for key in &r.unchanged {
        out.push_str(&format!("# no write {key}\n"));
    }
    for (key, rules) in &r.left_alone {
        out.push_str(&format!(
            "# left alone {key}: field rules {}\n",
            rules.join(", ")
        ));
    }
    if decide::status_changed(parent, &r.status) {
        let before = yaml(&json!({"status": parent.get("status")}));
        let after = yaml(&json!({"status": r.status}));
        out.push_str("# update status\n");
        let diff = similar::TextDiff::from_lines(&before, &after);
        out.push_str(
            &diff
                .unified_diff()
                .header("observed status", "written status")
                .to_string(),
        );
    } else {
        out.push_str("# no write status\n");
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn children_left_to_others_are_named_with_their_rules() {
        let mut declared = Declared::default();
        let mut opts = child_options("apps/v1", "Deployment", &[]);
        let rule = crate::api::FieldRule {
            path: "spec.replicas".into(),
            mode: None,
            name: Some("hpa".into()),
        };
        opts.fields =
            crate::reconcile::children::field_rules(&[rule], None, "apps/v1", "Deployment")
                .unwrap();
        declared.options.insert("Deployment.apps/v1".into(), opts);
        let want = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns"}, "spec": {"replicas": 3}});
        let mut live = want.clone();
        live["spec"]["replicas"] = json!(7);
        let desired = BTreeMap::from([(decide::child_key(&want), want)]);
        let left = left_to_others(&[live.clone()], &desired, &declared);
        assert_eq!(
            left,
            [(
                "Deployment.apps/v1 ns/web".to_owned(),
                vec!["hpa".to_owned()]
            )]
        );
        let r = Rendered {
            parent: json!({"status": {}}),
            observed: vec![live],
            status: json!({}),
            desired: Vec::new(),
            writes: Vec::new(),
            unchanged: vec!["Deployment.apps/v1 ns/web".to_owned()],
            left_alone: left,
            events: Vec::new(),
        };
        assert!(
            as_diff(&r).contains("# left alone Deployment.apps/v1 ns/web: field rules hpa\n"),
            "{}",
            as_diff(&r)
        );
    }

    #[test]
    fn a_child_kind_is_built_in_from_a_crd_or_from_an_observed_object() {
        assert_eq!(
            child_type("apps/v1", "deployments", &[], &[]).unwrap(),
            ("Deployment".to_owned(), true)
        );
        let crd = json!({"spec": {"group": "example.com", "scope": "Cluster",
            "names": {"plural": "gadgets", "kind": "Gadget"}, "versions": [{"name": "v1"}]}});
        assert_eq!(
            child_type("example.com/v1", "gadgets", std::slice::from_ref(&crd), &[]).unwrap(),
            ("Gadget".to_owned(), false)
        );
        assert!(
            child_type("example.com/v2", "gadgets", &[crd], &[]).is_err(),
            "a version the CRD does not serve"
        );
        let seen = json!({"apiVersion": "example.com/v1", "kind": "Box",
            "metadata": {"name": "b", "namespace": "n"}});
        assert_eq!(
            child_type("example.com/v1", "boxes", &[], &[seen]).unwrap(),
            ("Box".to_owned(), true)
        );
        let e = child_type("example.com/v1", "widgets", &[], &[]).unwrap_err();
        assert!(e.to_string().contains("--crd"), "{e}");
    }

    #[test]
    fn manifests_may_be_several_documents_or_a_list() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.yaml");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n",
        )
        .unwrap();
        let docs = read_docs(&path).unwrap();
        let names: Vec<&str> = docs
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        let one = read_one(&path, "ConfigMap b", |d| d["metadata"]["name"] == "b").unwrap();
        assert_eq!(one["metadata"]["name"], "b");
        let e = read_one(&path, "ConfigMap", |d| d["kind"] == "ConfigMap").unwrap_err();
        assert!(e.to_string().contains("more than one ConfigMap"), "{e}");
    }
}
