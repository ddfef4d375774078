//! The RBAC rules a set of controllers needs, as a library: [`load`] the controllers from
//! manifests, derive their [`Grants`] ([`grants`], [`controller_grants`]) and render them as a
//! ClusterRole ([`cluster_role`], [`render`]). The `kmeta rbac` command prints [`render`]'s output.
//!
//! `kmeta rbac`: the least-privilege ClusterRole a set of CompositeControllers and
//! DecoratorControllers needs, derived from their manifests.
//!
//! What kmeta does with each resource decides the verbs: parents and decorator targets are read,
//! get kmeta's finalizer (update) and their status written; children and attachments have their
//! whole lifecycle managed (a Role or ClusterRole child with `escalate`, a binding child with
//! `bind` on the roles it may name); the Secrets and ConfigMaps that hook credentials and CA bundles name
//! are read by name only, and so are (read and watched) the ConfigMaps Jsonnet hooks are read
//! from. kmeta itself needs its controllers (and the decorator release
//! finalizer), ControllerRevisions when a rolling update strategy is used, events, the
//! leader-election Lease and the OpenAPI v3 documents (`get` on the non-resource URLs
//! `/openapi/v3` and `/openapi/v3/*`) it reads the children's list rules from. Related objects are chosen by customize hooks at run time, so they
//! cannot be read from the manifests: name them with `--related`, and the output says when a
//! controller has a customize hook.
//!
//! A controller whose writes are made as a ServiceAccount (`spec.serviceAccountName`, or every
//! controller naming none under `--default-service-account`) leaves kmeta's own identity only the
//! watches of its children, and gives it the `impersonate` verb on that ServiceAccount (by name);
//! `--controller` prints what the ServiceAccount itself needs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::api::{
    CaBundle, ChildUpdateMethod, CompositeControllerSpec, DecoratorControllerSpec, EndpointConfig,
    Hook,
};

/// Errors of `kmeta rbac`.
#[derive(Debug, thiserror::Error)]
pub enum RbacError {
    /// A file or directory could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A manifest is not YAML/JSON, or a controller's spec does not decode.
    #[error("{path}: {message}")]
    Manifest {
        /// The file.
        path: PathBuf,
        /// What is wrong (document and field).
        message: String,
    },
    /// A `--related` value is not `<apiVersion>/<resource>`.
    #[error(
        "--related {0:?}: expected <apiVersion>/<resource>, e.g. v1/secrets or apps/v1/deployments"
    )]
    Related(String),
    /// `--controller` names no controller of the manifests.
    #[error("no CompositeController or DecoratorController named {name:?} in {paths}")]
    NoController {
        /// The name asked for.
        name: String,
        /// The paths read.
        paths: String,
    },
    /// No CompositeController or DecoratorController was found.
    #[error("no CompositeController or DecoratorController in {0}")]
    Empty(String),
    /// The role could not be rendered.
    #[error("rendering the ClusterRole: {0}")]
    Render(String),
    /// A `--service-account` value is not `<namespace>/<name>`.
    #[error("--service-account {0:?}: expected <namespace>/<name>, e.g. kmeta/kmeta")]
    ServiceAccount(String),
    /// `--controller` with `--name` of kmeta's own ClusterRole: applying it would replace
    /// kmeta's grants.
    #[error(
        "--name {0} with --controller: {0} is kmeta's own ClusterRole and ClusterRoleBinding, \
         which this output would replace; leave --name out (the default is \
         kmeta-<kind>-<controller>) or choose another"
    )]
    OwnName(String),
}

/// The name of kmeta's own ClusterRole and ClusterRoleBinding (`deploy/rbac.yaml`, and
/// `kmeta rbac`'s default).
pub const OWN_NAME: &str = "kmeta";

/// A ServiceAccount a printed ClusterRoleBinding binds (`--service-account <namespace>/<name>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAccountRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl ServiceAccountRef {
    /// kmeta's own ServiceAccount as `deploy/` installs it: `kmeta/kmeta`.
    pub fn kmeta() -> Self {
        Self {
            namespace: "kmeta".to_owned(),
            name: "kmeta".to_owned(),
        }
    }
}

impl std::str::FromStr for ServiceAccountRef {
    type Err = RbacError;

    /// Parses `<namespace>/<name>`.
    fn from_str(s: &str) -> Result<Self, RbacError> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(Self {
                    namespace: ns.to_owned(),
                    name: name.to_owned(),
                })
            }
            _ => Err(RbacError::ServiceAccount(s.to_owned())),
        }
    }
}

impl std::fmt::Display for ServiceAccountRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A controller read from a manifest.
#[derive(Debug, Clone)]
pub enum Controller {
    /// A CompositeController.
    Composite(Box<CompositeControllerSpec>),
    /// A DecoratorController.
    Decorator(Box<DecoratorControllerSpec>),
}

/// What kmeta does with a resource, from least to most.
const READ: &[&str] = &["get", "list", "watch"];
const OWN: &[&str] = &["get", "list", "watch", "update", "patch"];
const STATUS: &[&str] = &["get", "update", "patch"];
const MANAGE: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];

/// The grants: verbs per (API group, resource), and names per (group, resource) for objects that
/// are read by name only.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Grants {
    /// Verbs on every object of a resource.
    pub verbs: BTreeMap<(String, String), BTreeSet<&'static str>>,
    /// `get` on these names only.
    pub named: BTreeMap<(String, String), BTreeSet<String>>,
    /// `get`, `list` and `watch` on these names only (a list or watch selecting one by
    /// `metadata.name`): the ConfigMaps Jsonnet hooks are read from, watched for edits.
    pub watched: BTreeMap<(String, String), BTreeSet<String>>,
    /// Controllers with a customize hook (their related resources are not in the manifests).
    pub customized: BTreeSet<String>,
    /// The ServiceAccounts (names) kmeta impersonates: `impersonate` on these names only.
    pub impersonated: BTreeSet<String>,
}

/// The API group of an `apiVersion` (`""` for the core group).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

impl Grants {
    fn add(&mut self, api_version: &str, resource: &str, verbs: &[&'static str]) {
        self.verbs
            .entry((group_of(api_version).to_owned(), resource.to_owned()))
            .or_default()
            .extend(verbs);
    }

    fn add_named(&mut self, resource: &str, name: &str) {
        self.add_named_in("", resource, name);
    }

    fn add_named_in(&mut self, group: &str, resource: &str, name: &str) {
        self.named
            .entry((group.to_owned(), resource.to_owned()))
            .or_default()
            .insert(name.to_owned());
    }

    /// The owner of children or attachments: kmeta sets `blockOwnerDeletion` on their
    /// ownerReferences, which needs `update` on the owner's `finalizers` subresource where the
    /// OwnerReferencesPermissionEnforcement admission plugin runs (OpenShift, hardened clusters).
    fn owner(&mut self, api_version: &str, resource: &str) {
        self.add(api_version, &format!("{resource}/finalizers"), &["update"]);
    }

    /// A child or attachment type: its whole lifecycle, and when it is a custom resource, `get`
    /// on its CustomResourceDefinition (`<plural>.<group>`), read for the list markers its
    /// merge follows.
    fn managed(&mut self, api_version: &str, resource: &str) {
        self.add(api_version, resource, MANAGE);
        self.list_markers(api_version, resource);
        self.rbac_child(api_version, resource);
    }

    /// A child that is itself RBAC (kro's `core-dns` makes a ClusterRole and its binding): the
    /// API server refuses a role granting more than its writer holds unless it may `escalate`
    /// on that resource, and a binding to a role whose rules its writer does not hold unless it
    /// may `bind` that role (kube-apiserver's escalation check): both are granted, as a
    /// controller's roles and bindings are the hook's to choose.
    fn rbac_child(&mut self, api_version: &str, resource: &str) {
        if group_of(api_version) != "rbac.authorization.k8s.io" {
            return;
        }
        match resource {
            "roles" | "clusterroles" => self.add(api_version, resource, &["escalate"]),
            "rolebindings" => {
                self.add(api_version, "roles", &["bind"]);
                self.add(api_version, "clusterroles", &["bind"]);
            }
            "clusterrolebindings" => self.add(api_version, "clusterroles", &["bind"]),
            _ => {}
        }
    }

    /// `get` on the CustomResourceDefinition of a custom resource (`<plural>.<group>`), read for
    /// the list markers a child's merge follows.
    fn list_markers(&mut self, api_version: &str, resource: &str) {
        let group = group_of(api_version);
        // as kmeta tells a CRD's group: it has a dot and is not a built-in `*.k8s.io` group
        if group.contains('.') && !group.ends_with(".k8s.io") {
            self.add_named_in(
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                &format!("{resource}.{group}"),
            );
        }
    }

    /// What kmeta itself needs, whatever its controllers.
    fn base(&mut self) {
        let mc = "metacontroller.k8s.io/v1alpha1";
        // both kinds are watched whatever the files hold; the DecoratorControllers' writes
        // (the finalizer that releases a deleted one's targets) come with the first one
        self.add(mc, "compositecontrollers", READ);
        self.add(mc, "decoratorcontrollers", READ);
        // the FieldRulesAccepted condition of a controller whose fieldRules are refused
        self.add(mc, "compositecontrollers/status", &["patch"]);
        self.add("v1", "events", &["create", "patch", "update"]);
        self.add("events.k8s.io/v1", "events", &["create", "patch", "update"]);
        // leader election; --sharding also lists its shard set's Leases every round, watches
        // them (a record is sighted when written) and deletes its member Lease at shutdown
        self.add(
            "coordination.k8s.io/v1",
            "leases",
            &["get", "list", "watch", "create", "update", "delete"],
        );
    }

    /// What serving kro's ResourceGraphDefinitions (`kmeta run --serve-kro`) needs besides the
    /// grants of the CompositeControllers it makes: the RGDs read and their status written,
    /// CRDs (the RGD CRD and the instance CRDs) created and applied, and read and watched for
    /// the type checks, CompositeControllers created and applied (and `delete`, which setting their
    /// ownerReference to the RGD needs), and `update` on the RGDs' finalizers for the
    /// `blockOwnerDeletion` of that reference.
    pub fn serve_kro(&mut self) {
        let kro = crate::kro::API_VERSION;
        self.add(kro, "resourcegraphdefinitions", READ);
        self.add(kro, "resourcegraphdefinitions/status", &["patch"]);
        self.owner(kro, "resourcegraphdefinitions");
        let crds = "apiextensions.k8s.io/v1";
        // `list`/`watch`: a change of a child's CRD checks the RGDs using it again
        self.add(
            crds,
            "customresourcedefinitions",
            &["get", "list", "watch", "create", "patch"],
        );
        // `delete` too: setting an ownerReference (to the RGD) needs it on the object written
        // where OwnerReferencesPermissionEnforcement runs
        let mc = "metacontroller.k8s.io/v1alpha1";
        self.add(mc, "compositecontrollers", &["create", "patch", "delete"]);
    }

    /// What `kmeta run --kro-allow-crd-deletion` needs besides [`Grants::serve_kro`]: `delete`
    /// on CRDs, which making an RGD an owner of its instance CRD needs where
    /// OwnerReferencesPermissionEnforcement runs (the garbage collector deletes the CRD).
    pub fn delete_instance_crds(&mut self) {
        let crds = "apiextensions.k8s.io/v1";
        self.add(crds, "customresourcedefinitions", &["delete"]);
    }

    /// The Secrets and ConfigMaps a hook's credentials and CA bundle name.
    fn credentials(&mut self, hooks: &[&Hook], endpoints: &[EndpointConfig]) {
        let bundle = |g: &mut Grants, ca: &CaBundle| {
            if let Some(r) = &ca.secret_ref {
                g.add_named("secrets", &r.name);
            }
            if let Some(r) = &ca.config_map_ref {
                g.add_named("configmaps", &r.name);
            }
        };
        for r in hooks.iter().filter_map(|h| h.jsonnet_config_map()) {
            self.watched
                .entry((String::new(), "configmaps".to_owned()))
                .or_default()
                .insert(r.name.clone());
        }
        for w in hooks.iter().filter_map(|h| h.webhook.as_ref()) {
            if let Some(ca) = &w.ca_bundle {
                bundle(self, ca);
            }
            if let Some(t) = &w.client_tls {
                self.add_named("secrets", &t.secret_ref.name);
            }
            if let Some(a) = &w.authorization {
                self.add_named("secrets", &a.secret_ref.name);
            }
            if let Some(b) = &w.basic_auth {
                self.add_named("secrets", &b.secret_ref.name);
            }
        }
        for e in endpoints {
            if let Some(ca) = &e.ca_bundle {
                bundle(self, ca);
            }
            if let Some(t) = &e.client_tls {
                self.add_named("secrets", &t.secret_ref.name);
            }
            if let Some(a) = &e.authorization {
                self.add_named("secrets", &a.secret_ref.name);
            }
            if let Some(b) = &e.basic_auth {
                self.add_named("secrets", &b.secret_ref.name);
            }
        }
    }

    /// A child or attachment type kmeta manages as `writer` (a ServiceAccount's name), or as
    /// itself (`None`): as itself, [`Grants::managed`]; as a ServiceAccount, only the watch (and
    /// the CRD's list markers) stays kmeta's.
    fn child(&mut self, api_version: &str, resource: &str, writer: Option<&str>) {
        match writer {
            None => self.managed(api_version, resource),
            Some(_) => {
                self.add(api_version, resource, READ);
                self.list_markers(api_version, resource);
            }
        }
    }

    fn composite(&mut self, name: &str, cc: &CompositeControllerSpec, writer: Option<&str>) {
        let p = &cc.parent_resource;
        self.add(&p.api_version, &p.resource, OWN);
        self.add(&p.api_version, &format!("{}/status", p.resource), STATUS);
        let children = cc.child_resources.iter().flatten();
        if children.clone().next().is_some() && writer.is_none() {
            self.owner(&p.api_version, &p.resource);
        }
        self.impersonated.extend(writer.map(str::to_owned));
        let mut rolling = false;
        for c in children {
            self.child(&c.api_version, &c.resource, writer);
            let method = c.update_strategy.as_ref().and_then(|s| s.method);
            rolling |= matches!(
                method,
                Some(ChildUpdateMethod::RollingRecreate | ChildUpdateMethod::RollingInPlace)
            );
        }
        if rolling {
            self.add(
                "metacontroller.k8s.io/v1alpha1",
                "controllerrevisions",
                MANAGE,
            );
        }
        let hooks = cc.hooks.as_ref();
        let list: Vec<&Hook> = hooks
            .map(|h| [&h.sync, &h.finalize, &h.customize, &h.pre_update_child])
            .into_iter()
            .flatten()
            .flatten()
            .collect();
        if hooks.is_some_and(|h| h.customize.is_some()) {
            self.customized
                .insert(format!("CompositeController {name}"));
        }
        self.credentials(&list, cc.endpoint_configs.as_deref().unwrap_or_default());
    }

    fn decorator(&mut self, name: &str, dc: &DecoratorControllerSpec, writer: Option<&str>) {
        // the finalizer that releases a deleted DecoratorController's targets, and the
        // FieldRulesAccepted condition of one whose fieldRules are refused
        let mc = "metacontroller.k8s.io/v1alpha1";
        self.add(mc, "decoratorcontrollers", OWN);
        self.add(mc, "decoratorcontrollers/status", &["patch"]);
        let attaches = dc.attachments.as_ref().is_some_and(|a| !a.is_empty());
        for r in &dc.resources {
            self.add(&r.api_version, &r.resource, OWN);
            self.add(&r.api_version, &format!("{}/status", r.resource), STATUS);
            if attaches && writer.is_none() {
                self.owner(&r.api_version, &r.resource);
            }
        }
        self.impersonated.extend(writer.map(str::to_owned));
        for a in dc.attachments.iter().flatten() {
            self.child(&a.api_version, &a.resource, writer);
        }
        let hooks = dc.hooks.as_ref();
        let list: Vec<&Hook> = hooks
            .map(|h| [&h.sync, &h.finalize, &h.customize])
            .into_iter()
            .flatten()
            .flatten()
            .collect();
        if hooks.is_some_and(|h| h.customize.is_some()) {
            self.customized
                .insert(format!("DecoratorController {name}"));
        }
        self.credentials(&list, dc.endpoint_configs.as_deref().unwrap_or_default());
    }
}

/// The grants `controllers` (with their names) need, plus read access to `related`
/// (`(apiVersion, resource)` pairs the customize hooks select), for kmeta run without
/// `--default-service-account`.
pub fn grants(controllers: &[(String, Controller)], related: &[(String, String)]) -> Grants {
    grants_with(controllers, related, None)
}

/// The ServiceAccount (name) a controller's writes are made as: its `spec.serviceAccountName`,
/// else `default` (`--default-service-account`); `None`: kmeta's own identity.
fn writer_of<'a>(c: &'a Controller, default: Option<&'a str>) -> Option<&'a str> {
    let named = match c {
        Controller::Composite(cc) => cc.service_account_name.as_deref(),
        Controller::Decorator(dc) => dc.service_account_name.as_deref(),
    };
    named.or(default).filter(|n| !n.is_empty())
}

/// As [`grants`], for kmeta run with `--default-service-account default` when given. Children
/// (attachments) of controllers whose writes are made as a ServiceAccount are only watched by
/// kmeta's own identity, which gets `impersonate` on that ServiceAccount's name; a child type
/// another controller writes as kmeta itself keeps its whole lifecycle.
pub fn grants_with(
    controllers: &[(String, Controller)],
    related: &[(String, String)],
    default: Option<&str>,
) -> Grants {
    let mut g = Grants::default();
    g.base();
    for (name, c) in controllers {
        let writer = writer_of(c, default);
        match c {
            Controller::Composite(cc) => g.composite(name, cc, writer),
            Controller::Decorator(dc) => g.decorator(name, dc, writer),
        }
    }
    for (api_version, resource) in related {
        g.add(api_version, resource, READ);
    }
    g
}

/// What one controller needs on its own, for a ServiceAccount its writes are made as: its
/// children (or attachments) over their whole lifecycle, `update` on the finalizers of its
/// parents (or targets) for the `blockOwnerDeletion` of those, and read access to `related`.
/// kmeta's own identity keeps the rest: watching the parents, their status and finalizers, the
/// CRDs' list markers, the hook credentials, events, ControllerRevisions and the Lease.
pub fn controller_grants(c: &Controller, related: &[(String, String)]) -> Grants {
    let mut g = Grants::default();
    match c {
        Controller::Composite(cc) => {
            let p = &cc.parent_resource;
            let children: Vec<_> = cc.child_resources.iter().flatten().collect();
            if !children.is_empty() {
                g.owner(&p.api_version, &p.resource);
            }
            for c in children {
                g.add(&c.api_version, &c.resource, MANAGE);
            }
        }
        Controller::Decorator(dc) => {
            let attachments: Vec<_> = dc.attachments.iter().flatten().collect();
            if !attachments.is_empty() {
                for r in &dc.resources {
                    g.owner(&r.api_version, &r.resource);
                }
            }
            for a in attachments {
                g.add(&a.api_version, &a.resource, MANAGE);
            }
        }
    }
    for (api_version, resource) in related {
        g.add(api_version, resource, READ);
    }
    g
}

/// The non-resource URLs of the OpenAPI v3 documents kmeta reads list rules from.
const OPENAPI_URLS: [&str; 2] = ["/openapi/v3", "/openapi/v3/*"];

/// The ClusterRole named `name` granting `g`: one rule per API group and verb set, resources
/// sorted, so the output is stable.
pub fn cluster_role(name: &str, g: &Grants) -> Value {
    let mut by_verbs: BTreeMap<(String, Vec<&str>), Vec<String>> = BTreeMap::new();
    for ((group, resource), verbs) in &g.verbs {
        let verbs: Vec<&str> = verbs.iter().copied().collect();
        by_verbs
            .entry((group.clone(), verbs))
            .or_default()
            .push(resource.clone());
    }
    let mut rules: Vec<Value> = by_verbs
        .into_iter()
        .map(|((group, verbs), resources)| {
            json!({"apiGroups": [group], "resources": resources, "verbs": verbs})
        })
        .collect();
    for ((group, resource), names) in &g.named {
        rules.push(json!({"apiGroups": [group], "resources": [resource],
                          "resourceNames": names, "verbs": ["get"]}));
    }
    for ((group, resource), names) in &g.watched {
        rules.push(json!({"apiGroups": [group], "resources": [resource],
                          "resourceNames": names, "verbs": READ}));
    }
    if !g.impersonated.is_empty() {
        rules.push(json!({"apiGroups": [""], "resources": ["serviceaccounts"],
                          "resourceNames": g.impersonated, "verbs": ["impersonate"]}));
    }
    // the OpenAPI v3 documents the list rules of child kinds are read from (most clusters grant
    // them to every authenticated user through `system:discovery`; this keeps kmeta working
    // where that role is narrowed)
    rules.push(json!({"nonResourceURLs": OPENAPI_URLS, "verbs": ["get"]}));
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "kmeta"}},
        "rules": rules,
    })
}

/// Parses `--related` values: `<apiVersion>/<resource>` (`v1/secrets`, `apps/v1/deployments`).
fn parse_related(values: &[String]) -> Result<Vec<(String, String)>, RbacError> {
    values
        .iter()
        .map(|v| {
            let (api_version, resource) = v
                .rsplit_once('/')
                .filter(|(a, r)| !a.is_empty() && !r.is_empty() && a.split('/').count() <= 2)
                .ok_or_else(|| RbacError::Related(v.clone()))?;
            Ok((api_version.to_owned(), resource.to_owned()))
        })
        .collect()
}

/// The CompositeController kmeta makes of a ResourceGraphDefinition `rgd` (the kinds' plurals
/// by English rules, as no API server is asked): its name and spec.
fn rgd_controller(rgd: &Value) -> Result<(String, Value), String> {
    let plural = |_: &str, kind: &str| Some(crate::kro::plural(kind));
    let served = crate::kro::translate(rgd, &plural).map_err(|e| e.to_string())?;
    let name = served.controller.pointer("/metadata/name").cloned();
    let name = name.and_then(|n| n.as_str().map(str::to_owned));
    Ok((name.unwrap_or_default(), served.controller["spec"].clone()))
}

/// The controllers in the YAML/JSON documents of `text` (other kinds are skipped), a
/// ResourceGraphDefinition as the CompositeController `kmeta run --serve-kro` makes of it;
/// whether there was one.
fn controllers_in(path: &Path, text: &str) -> Result<(Vec<(String, Controller)>, bool), RbacError> {
    let bad = |message: String| RbacError::Manifest {
        path: path.to_owned(),
        message,
    };
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| bad(crate::manifest::yaml_error(&e)))?;
    let mut out = Vec::new();
    let mut rgds = false;
    for (i, doc) in docs.into_iter().enumerate() {
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
        if kind == "ResourceGraphDefinition" {
            let (name, spec) = rgd_controller(&doc)
                .map_err(|e| bad(format!("document {} (ResourceGraphDefinition): {e}", i + 1)))?;
            let spec = serde_json::from_value(spec).map_err(|e| bad(e.to_string()))?;
            out.push((name, Controller::Composite(Box::new(spec))));
            rgds = true;
            continue;
        }
        if !matches!(kind, "CompositeController" | "DecoratorController") {
            continue;
        }
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let spec = doc.get("spec").cloned().unwrap_or(Value::Null);
        let at =
            |e: serde_json::Error| bad(format!("document {} ({kind} {name}): spec: {e}", i + 1));
        let c = if kind == "CompositeController" {
            Controller::Composite(Box::new(serde_json::from_value(spec).map_err(at)?))
        } else {
            Controller::Decorator(Box::new(serde_json::from_value(spec).map_err(at)?))
        };
        out.push((name, c));
    }
    Ok((out, rgds))
}

/// The controllers in the files and directories (`*.yaml`, `*.yml`, `*.json`, not recursive)
/// named by `paths`; a ResourceGraphDefinition as the CompositeController kmeta makes of it.
pub fn load(paths: &[PathBuf]) -> Result<Vec<(String, Controller)>, RbacError> {
    Ok(load_all(paths)?.0)
}

/// As [`load`], and whether the files hold a ResourceGraphDefinition.
fn load_all(paths: &[PathBuf]) -> Result<(Vec<(String, Controller)>, bool), RbacError> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|source| RbacError::Read {
            path: path.to_owned(),
            source,
        })
    };
    let mut out = Vec::new();
    let mut any_rgd = false;
    for p in paths {
        let dir = std::fs::read_dir(p);
        let files: Vec<PathBuf> = match dir {
            Ok(entries) => {
                let mut f: Vec<PathBuf> = entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|f| {
                        matches!(
                            f.extension().and_then(|e| e.to_str()),
                            Some("yaml" | "yml" | "json")
                        )
                    })
                    .collect();
                f.sort();
                f
            }
            Err(_) => vec![p.clone()],
        };
        for f in files {
            let (controllers, rgds) = controllers_in(&f, &read(&f)?)?;
            out.extend(controllers);
            any_rgd |= rgds;
        }
    }
    Ok((out, any_rgd))
}

/// `kmeta rbac`: kmeta's ClusterRole `name` and its ClusterRoleBinding to `service_account`, as
/// YAML, with a comment naming the controllers whose related resources were not given; with
/// `kro_allow_crd_deletion` and RGDs among the files, `delete` on CRDs for `kmeta run
/// --kro-allow-crd-deletion`.
pub fn render(
    paths: &[PathBuf],
    related: &[String],
    name: &str,
    default_service_account: Option<&str>,
    service_account: &ServiceAccountRef,
    kro_allow_crd_deletion: bool,
) -> Result<String, RbacError> {
    let (controllers, rgds) = load_all(paths)?;
    if controllers.is_empty() {
        return Err(RbacError::Empty(shown(paths)));
    }
    let mut g = grants_with(
        &controllers,
        &parse_related(related)?,
        default_service_account,
    );
    if rgds {
        g.serve_kro();
        if kro_allow_crd_deletion {
            g.delete_instance_crds();
        }
    }
    let role = cluster_role(name, &g);
    let mut text = format!(
        "# The ClusterRole kmeta needs for these controllers (kmeta rbac), bound to kmeta's\n\
         # ServiceAccount {service_account}: applied, it replaces deploy/rbac.yaml's wildcard role.\n"
    );
    if rgds {
        text.push_str(
            "# With ResourceGraphDefinitions: what kmeta run --serve-kro needs to serve them, and\n\
             # what the CompositeControllers it makes of them need.\n",
        );
    }
    if !g.customized.is_empty() && related.is_empty() {
        let list: Vec<&str> = g.customized.iter().map(String::as_str).collect();
        text.push_str(&format!(
            "# These have a customize hook; add read access to the related resources it selects\n\
             # with --related <apiVersion>/<resource>: {}\n",
            list.join(", ")
        ));
    }
    if !g.impersonated.is_empty() {
        text.push_str(
            "# Controllers with a ServiceAccount have their children written as it: kmeta only\n\
             # watches them and may impersonate these ServiceAccounts (kmeta rbac --controller\n\
             # NAME prints what each needs).\n",
        );
    }
    text.push_str(&yaml(&role)?);
    let binding = service_account_binding(name, &service_account.namespace, &service_account.name);
    text.push_str(&format!("---\n{}", yaml(&binding)?));
    Ok(text)
}

/// The paths, comma-separated, for a message.
fn shown(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shown.join(", ")
}

/// A manifest as YAML.
fn yaml(v: &Value) -> Result<String, RbacError> {
    serde_saphyr::to_string(v).map_err(|e| RbacError::Render(e.to_string()))
}

/// The ClusterRoleBinding of ClusterRole `role` to the ServiceAccount `namespace/name`, named
/// as the role.
pub fn service_account_binding(role: &str, namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": role, "labels": {"app.kubernetes.io/name": "kmeta"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    })
}

/// The default name of the ClusterRole and ClusterRoleBinding of one controller's
/// ServiceAccount: `kmeta-compositecontroller-<name>` or `kmeta-decoratorcontroller-<name>`,
/// never kmeta's own, and distinct for a CompositeController and a DecoratorController of the
/// same name.
pub fn controller_role_name(c: &Controller, name: &str) -> String {
    let kind = match c {
        Controller::Composite(_) => "compositecontroller",
        Controller::Decorator(_) => "decoratorcontroller",
    };
    format!("kmeta-{kind}-{name}")
}

/// How `--controller`'s output binds its role: a ClusterRoleBinding document to
/// `service_account`, else to the controller's `spec.serviceAccountName` in its
/// `spec.serviceAccountNamespace`, else a comment saying what to bind.
fn binding_text(
    c: &Controller,
    role: &str,
    service_account: Option<&ServiceAccountRef>,
) -> Result<String, RbacError> {
    let (name, namespace) = match c {
        Controller::Composite(cc) => (&cc.service_account_name, &cc.service_account_namespace),
        Controller::Decorator(dc) => (&dc.service_account_name, &dc.service_account_namespace),
    };
    let set = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
    let named = match (set(name), set(namespace)) {
        (Some(name), Some(namespace)) => Some(ServiceAccountRef { namespace, name }),
        _ => None,
    };
    Ok(match (service_account.cloned().or(named), set(name)) {
        (Some(sa), _) => {
            let binding = service_account_binding(role, &sa.namespace, &sa.name);
            format!("---\n{}", yaml(&binding)?)
        }
        (None, Some(name)) => format!(
            "# Bind it to the ServiceAccount {name} of each namespace its parents are in (its\n\
             # spec.serviceAccountNamespace is not set): a subject per namespace, or pass\n\
             # --service-account <namespace>/{name} for one.\n"
        ),
        (None, None) => {
            "# It names no spec.serviceAccountName: under kmeta run --default-service-account\n\
             # NAME, bind it to the ServiceAccount NAME of each namespace its parents are in, or\n\
             # pass --service-account <namespace>/NAME for one.\n"
                .to_owned()
        }
    })
}

/// The controller named `controller` in the files `paths` (a CompositeController only, when
/// `composite`), for a role of its own named `name` (kmeta's own name refused).
fn named_controller(
    paths: &[PathBuf],
    name: Option<&str>,
    controller: &str,
    composite: bool,
) -> Result<Controller, RbacError> {
    if let Some(own) = name.filter(|n| *n == OWN_NAME) {
        return Err(RbacError::OwnName(own.to_owned()));
    }
    let found = load(paths)?
        .into_iter()
        .find(|(n, c)| n == controller && (!composite || matches!(c, Controller::Composite(_))));
    found
        .map(|(_, c)| c)
        .ok_or_else(|| RbacError::NoController {
            name: match composite {
                true => format!("CompositeController {controller}"),
                false => controller.to_owned(),
            },
            paths: shown(paths),
        })
}

/// `kmeta rbac --controller NAME`: the ClusterRole of what that one controller needs on its own
/// ([`controller_grants`]), and its ClusterRoleBinding (or a comment saying what to bind), as YAML. Both are named `name`,
/// by default [`controller_role_name`]; kmeta's own name ([`OWN_NAME`]) is refused.
pub fn render_controller(
    paths: &[PathBuf],
    related: &[String],
    name: Option<&str>,
    controller: &str,
    service_account: Option<&ServiceAccountRef>,
) -> Result<String, RbacError> {
    let c = &named_controller(paths, name, controller, false)?;
    let role_name = name.map_or_else(|| controller_role_name(c, controller), str::to_owned);
    let g = controller_grants(c, &parse_related(related)?);
    let role = cluster_role(&role_name, &g);
    let mut text = format!(
        "# What {controller} needs on its own (kmeta rbac --controller): its children or\n\
         # attachments and its parents' finalizers, for the ServiceAccount its writes are made\n\
         # as; kmeta's own ClusterRole (kmeta rbac without --controller) keeps the rest.\n"
    );
    let customize = match c {
        Controller::Composite(cc) => cc.hooks.as_ref().is_some_and(|h| h.customize.is_some()),
        Controller::Decorator(dc) => dc.hooks.as_ref().is_some_and(|h| h.customize.is_some()),
    };
    if customize && related.is_empty() {
        text.push_str(
            "# It has a customize hook; add read access to the related resources it selects\n\
             # with --related <apiVersion>/<resource>.\n",
        );
    }
    text.push_str(&yaml(&role)?);
    text.push_str(&binding_text(c, &role_name, service_account)?);
    Ok(text)
}

/// What `kmeta plan compositecontroller/NAME` reads, read-only: the controller by name, the
/// CustomResourceDefinitions (custom child kinds), its parents, children and ControllerRevisions,
/// what its hook clients read (a Jsonnet ConfigMap, a webhook's Secrets, by name) and its related
/// resources (`related`): kmeta's grants for that controller with every verb but `get` and
/// `list` taken away, nothing to write, impersonate or watch.
pub fn plan_grants(name: &str, c: &Controller, related: &[(String, String)]) -> Grants {
    let full = grants_with(&[(name.to_owned(), c.clone())], related, None);
    let mut g = Grants::default();
    let mc = "metacontroller.k8s.io/v1alpha1";
    let own = [
        ("metacontroller.k8s.io", "compositecontrollers"),
        ("metacontroller.k8s.io", "decoratorcontrollers"),
    ];
    for ((group, resource), verbs) in full.verbs {
        let is_controller = own.contains(&(group.as_str(), resource.as_str()));
        let read: BTreeSet<&'static str> = verbs
            .into_iter()
            .filter(|v| matches!(*v, "get" | "list"))
            .collect();
        if !read.is_empty() && !is_controller && !resource.ends_with("/finalizers") {
            g.verbs.insert((group, resource), read);
        }
    }
    g.add(
        "apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        &["list"],
    );
    g.named = full.named;
    for (key, names) in full.watched {
        g.named.entry(key).or_default().extend(names);
    }
    g.add_named_in(group_of(mc), "compositecontrollers", name);
    g
}

/// The ClusterRole a plan runs with: `get` and `list` rules only, names read with `get`.
fn plan_role(name: &str, g: &Grants) -> Value {
    let mut role = cluster_role(name, g);
    if let Some(rules) = role.get_mut("rules").and_then(Value::as_array_mut) {
        // `get` only: the named rules keep their names, and no watch
        for r in rules.iter_mut() {
            if r.get("resourceNames").is_some() {
                r["verbs"] = json!(["get"]);
            }
        }
    }
    role
}

/// `kmeta rbac --plan NAME`: the read-only ClusterRole (`kmeta-plan-<NAME>` unless `name`) a
/// `kmeta plan compositecontroller/NAME` Job runs with ([`plan_grants`]), and its
/// ClusterRoleBinding to `service_account` (or a comment saying what to bind), as YAML.
pub fn render_plan(
    paths: &[PathBuf],
    related: &[String],
    name: Option<&str>,
    controller: &str,
    service_account: Option<&ServiceAccountRef>,
) -> Result<String, RbacError> {
    let c = &named_controller(paths, name, controller, true)?;
    let role_name = name.map_or_else(|| format!("kmeta-plan-{controller}"), str::to_owned);
    let role = plan_role(
        &role_name,
        &plan_grants(controller, c, &parse_related(related)?),
    );
    let mut text = format!(
        "# What kmeta plan compositecontroller/{controller} reads (kmeta rbac --plan): read-only,\n\
         # for a Job or a person planning a hook change; nothing it grants writes.\n"
    );
    text.push_str(&yaml(&role)?);
    match service_account {
        Some(sa) => {
            let binding = service_account_binding(&role_name, &sa.namespace, &sa.name);
            text.push_str(&format!("---\n{}", yaml(&binding)?));
        }
        None => text.push_str(
            "# Bind it to the ServiceAccount the plan runs as: --service-account <namespace>/<name>.\n",
        ),
    }
    Ok(text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn composite(yaml: &str) -> Vec<(String, Controller)> {
        controllers_in(Path::new("t.yaml"), yaml).unwrap().0
    }

    #[test]
    fn a_resource_graph_definition_is_granted_as_serve_kro_serves_it() {
        let yaml = r#"
apiVersion: kro.run/v1alpha1
kind: ResourceGraphDefinition
metadata: {name: notes}
spec:
  schema: {apiVersion: v1alpha1, kind: Memo, group: example.com, spec: {text: string}}
  resources:
    - id: cm
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "${schema.metadata.name}-memo"}
        data: {text: "${schema.spec.text}"}
"#;
        let (controllers, rgds) = controllers_in(Path::new("r.yaml"), yaml).unwrap();
        assert!(rgds);
        assert_eq!(controllers[0].0, "notes");
        let mut g = grants(&controllers, &[]);
        assert_eq!(
            verbs(&g, "example.com", "memos/status"),
            ["get", "patch", "update"]
        );
        assert_eq!(verbs(&g, "", "configmaps").len(), MANAGE.len());
        assert!(verbs(&g, "kro.run", "resourcegraphdefinitions").is_empty());
        g.serve_kro();
        assert_eq!(
            verbs(&g, "kro.run", "resourcegraphdefinitions"),
            ["get", "list", "watch"]
        );
        assert_eq!(
            verbs(&g, "kro.run", "resourcegraphdefinitions/status"),
            ["patch"]
        );
        assert_eq!(
            verbs(&g, "kro.run", "resourcegraphdefinitions/finalizers"),
            ["update"]
        );
        assert_eq!(
            verbs(&g, "apiextensions.k8s.io", "customresourcedefinitions"),
            ["create", "get", "list", "patch", "watch"]
        );
        let cc = verbs(&g, "metacontroller.k8s.io", "compositecontrollers");
        assert!(
            ["create", "patch", "delete"].iter().all(|v| cc.contains(v)),
            "{cc:?}"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rgd.yaml");
        std::fs::write(&file, yaml).unwrap();
        let sa = ServiceAccountRef::kmeta();
        let text = render(std::slice::from_ref(&file), &[], OWN_NAME, None, &sa, false).unwrap();
        assert!(text.contains("# With ResourceGraphDefinitions"), "{text}");
        assert!(text.contains("resourcegraphdefinitions/status"), "{text}");
        g.delete_instance_crds();
        assert_eq!(
            verbs(&g, "apiextensions.k8s.io", "customresourcedefinitions"),
            ["create", "delete", "get", "list", "patch", "watch"]
        );
        let deleting = render(&[file], &[], OWN_NAME, None, &sa, true).unwrap();
        assert!(deleting.len() > text.len(), "{deleting}");
        let bad = yaml.replace("schema.spec.text}", "schema.spec.txt}");
        let e = controllers_in(Path::new("r.yaml"), &bad)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("r.yaml: document 1 (ResourceGraphDefinition): resource \"cm\""),
            "{e}"
        );
    }

    fn verbs(g: &Grants, group: &str, resource: &str) -> Vec<&'static str> {
        g.verbs
            .get(&(group.to_owned(), resource.to_owned()))
            .map(|v| v.iter().copied().collect())
            .unwrap_or_default()
    }

    const CC: &str = r"
apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: cats}
spec:
  parentResource: {apiVersion: ctl.example.com/v1, resource: catsets}
  childResources:
  - {apiVersion: v1, resource: pods, updateStrategy: {method: RollingRecreate}}
  - {apiVersion: v1, resource: persistentvolumeclaims}
  hooks:
    sync:
      webhook:
        url: https://hook/sync
        caBundle: {configMapRef: {name: hook-ca, namespace: kmeta}}
        clientTLS: {secretRef: {name: hook-client, namespace: kmeta}}
    customize: {webhook: {url: https://hook/customize}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
";

    #[test]
    fn a_composite_controller_gets_its_parent_children_revisions_and_credentials() {
        let g = grants(&composite(CC), &[]);
        assert_eq!(
            verbs(&g, "ctl.example.com", "catsets"),
            ["get", "list", "patch", "update", "watch"]
        );
        assert_eq!(
            verbs(&g, "ctl.example.com", "catsets/status"),
            ["get", "patch", "update"]
        );
        assert_eq!(
            verbs(&g, "", "pods"),
            [
                "create", "delete", "get", "list", "patch", "update", "watch"
            ]
        );
        assert_eq!(verbs(&g, "", "persistentvolumeclaims").len(), 7);
        // a rolling strategy needs ControllerRevisions
        assert_eq!(
            verbs(&g, "metacontroller.k8s.io", "controllerrevisions").len(),
            7
        );
        // credentials by name only, no blanket Secret access
        assert!(verbs(&g, "", "secrets").is_empty());
        assert_eq!(
            g.named[&(String::new(), "secrets".to_owned())],
            BTreeSet::from(["hook-client".to_owned()])
        );
        assert_eq!(
            g.named[&(String::new(), "configmaps".to_owned())],
            BTreeSet::from(["hook-ca".to_owned()])
        );
        assert!(g.customized.contains("CompositeController cats"));
        // children carry blockOwnerDeletion: update on the parent's finalizers
        assert_eq!(
            verbs(&g, "ctl.example.com", "catsets/finalizers"),
            ["update"]
        );
        // built-in children have no CRD to read
        assert!(!g.named.contains_key(&(
            "apiextensions.k8s.io".to_owned(),
            "customresourcedefinitions".to_owned()
        )));
    }

    #[test]
    fn a_custom_resource_child_gets_its_crd_read_by_name() {
        let cc = r"
kind: CompositeController
metadata: {name: chain}
spec:
  parentResource: {apiVersion: a.example.com/v1, resource: foos}
  childResources:
  - {apiVersion: b.example.com/v1, resource: bars}
  - {apiVersion: apps/v1, resource: deployments}
  - {apiVersion: snapshot.storage.k8s.io/v1, resource: volumesnapshots}
  hooks: {sync: {webhook: {url: http://hook/sync}}}
";
        let g = grants(&composite(cc), &[]);
        assert_eq!(
            g.named[&(
                "apiextensions.k8s.io".to_owned(),
                "customresourcedefinitions".to_owned()
            )],
            BTreeSet::from(["bars.b.example.com".to_owned()])
        );
        let role = cluster_role("kmeta", &g);
        assert!(
            role["rules"].as_array().unwrap().contains(&json!({
                "apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                "resourceNames": ["bars.b.example.com"], "verbs": ["get"]})),
            "{role}"
        );
        // a controller without children sets no ownerReference
        let lone = cc.replace(
            "  childResources:\n  - {apiVersion: b.example.com/v1, resource: bars}\n  - {apiVersion: apps/v1, resource: deployments}\n  - {apiVersion: snapshot.storage.k8s.io/v1, resource: volumesnapshots}\n",
            "",
        );
        let g = grants(&composite(&lone), &[]);
        assert!(verbs(&g, "a.example.com", "foos/finalizers").is_empty());
    }

    #[test]
    fn a_jsonnet_hooks_configmap_is_read_and_watched_by_name_only() {
        let cc = "
apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: j}
spec:
  parentResource: {apiVersion: ctl.example.com/v1, resource: things}
  hooks:
    sync: {jsonnet: {configMapRef: {namespace: kmeta, name: hooks, key: sync.jsonnet}}}
    finalize: {jsonnet: {source: '{}'}}
";
        let g = grants(&composite(cc), &[]);
        assert!(verbs(&g, "", "configmaps").is_empty());
        assert_eq!(
            g.watched[&(String::new(), "configmaps".to_owned())],
            BTreeSet::from(["hooks".to_owned()])
        );
        let role = cluster_role("kmeta", &g);
        let rule = role["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["resourceNames"] == json!(["hooks"]));
        assert_eq!(
            rule.map(|r| r["verbs"].clone()),
            Some(json!(["get", "list", "watch"]))
        );
    }

    #[test]
    fn without_rolling_updates_no_revisions_and_related_resources_are_read_only() {
        let cc = CC.replace("RollingRecreate", "InPlace");
        let related = parse_related(&["v1/secrets".into(), "apps/v1/deployments".into()]).unwrap();
        let g = grants(&composite(&cc), &related);
        assert!(verbs(&g, "metacontroller.k8s.io", "controllerrevisions").is_empty());
        assert_eq!(verbs(&g, "", "secrets"), ["get", "list", "watch"]);
        assert_eq!(verbs(&g, "apps", "deployments"), ["get", "list", "watch"]);
        assert!(parse_related(&["secrets".into()]).is_err());
        assert!(parse_related(&["a/b/c/d".into()]).is_err());
    }

    #[test]
    fn a_decorator_controller_gets_its_targets_and_attachments() {
        let dc = r"
apiVersion: metacontroller.k8s.io/v1alpha1
kind: DecoratorController
metadata: {name: service-per-pod}
spec:
  resources: [{apiVersion: apps/v1, resource: statefulsets}]
  attachments: [{apiVersion: v1, resource: services}]
  hooks: {sync: {webhook: {url: http://hook/sync}}}
";
        let g = grants(&composite(dc), &[]);
        assert_eq!(verbs(&g, "apps", "statefulsets").len(), 5);
        assert_eq!(verbs(&g, "apps", "statefulsets/status").len(), 3);
        assert_eq!(verbs(&g, "", "services").len(), 7);
        assert_eq!(verbs(&g, "apps", "statefulsets/finalizers"), ["update"]);
        assert!(g.customized.is_empty());
    }

    #[test]
    fn the_role_is_stable_and_groups_rules_by_verbs() {
        let g = grants(&composite(CC), &[]);
        let role = cluster_role("kmeta", &g);
        assert_eq!(role, cluster_role("kmeta", &g.clone()));
        let rules = role["rules"].as_array().unwrap();
        let core_manage = rules
            .iter()
            .find(|r| r["apiGroups"] == json!([""]) && r["verbs"].as_array().unwrap().len() == 7)
            .unwrap();
        assert_eq!(
            core_manage["resources"],
            json!(["persistentvolumeclaims", "pods"])
        );
        let named = rules
            .iter()
            .filter(|r| r.get("resourceNames").is_some())
            .count();
        assert_eq!(named, 2);
        let urls = rules
            .iter()
            .find(|r| r.get("nonResourceURLs").is_some())
            .unwrap();
        assert_eq!(
            urls,
            &json!({"nonResourceURLs": ["/openapi/v3", "/openapi/v3/*"], "verbs": ["get"]})
        );
    }

    #[test]
    fn rbac_children_may_be_written_past_the_escalation_check() {
        let mut g = Grants::default();
        let rbac = "rbac.authorization.k8s.io/v1";
        g.managed(rbac, "clusterroles");
        g.managed(rbac, "clusterrolebindings");
        g.managed("v1", "configmaps");
        let group = "rbac.authorization.k8s.io";
        assert!(verbs(&g, group, "clusterroles").contains(&"escalate"));
        assert!(verbs(&g, group, "clusterroles").contains(&"bind"));
        assert!(!verbs(&g, group, "clusterrolebindings").contains(&"bind"));
        assert!(!verbs(&g, "", "configmaps").contains(&"escalate"));
        let mut r = Grants::default();
        r.managed(rbac, "rolebindings");
        assert_eq!(verbs(&r, group, "roles"), ["bind"]);
        assert_eq!(verbs(&r, group, "clusterroles"), ["bind"]);
    }

    #[test]
    fn one_controller_on_its_own_needs_its_children_and_parent_finalizers_only() {
        let two = format!(
            "{CC}---\nkind: DecoratorController\nmetadata: {{name: svc}}\nspec:\n  resources: [{{apiVersion: apps/v1, resource: statefulsets}}]\n  attachments: [{{apiVersion: v1, resource: services}}]\n"
        );
        let controllers = composite(&two);
        let cats = &controllers[0].1;
        let g = controller_grants(cats, &[("v1".into(), "configmaps".into())]);
        let all: Vec<(String, String)> = g.verbs.keys().cloned().collect();
        let pair = |g: &str, r: &str| (g.to_owned(), r.to_owned());
        assert_eq!(
            all,
            [
                pair("", "configmaps"),
                pair("", "persistentvolumeclaims"),
                pair("", "pods"),
                pair("ctl.example.com", "catsets/finalizers"),
            ]
        );
        assert_eq!(verbs(&g, "", "configmaps"), ["get", "list", "watch"]);
        assert!(g.named.is_empty(), "credentials stay kmeta's");
        let svc = controller_grants(&controllers[1].1, &[]);
        assert_eq!(verbs(&svc, "apps", "statefulsets/finalizers"), ["update"]);
        assert_eq!(verbs(&svc, "", "services").len(), 7);
        assert_eq!(svc.verbs.len(), 2);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, &two).unwrap();
        let text = render_controller(std::slice::from_ref(&file), &[], None, "cats", None).unwrap();
        assert!(text.contains("catsets/finalizers"), "{text}");
        assert!(text.contains("customize hook"), "{text}");
        assert!(!text.contains("leases"), "{text}");
        let e = render_controller(&[file], &[], Some("x"), "nope", None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("no CompositeController or DecoratorController named \"nope\"")
        );
    }

    #[test]
    fn a_bad_spec_names_the_file_document_and_controller() {
        let bad = "kind: CompositeController\nmetadata: {name: x}\nspec: {parentResource: 3}\n";
        let e = controllers_in(Path::new("c.yaml"), bad)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("c.yaml: document 1 (CompositeController x): spec:"),
            "{e}"
        );
    }

    #[test]
    fn kmeta_only_watches_the_children_of_a_controller_with_a_service_account() {
        let with_sa = CC.replace(
            "  hooks:\n",
            "  serviceAccountName: cat-writer\n  serviceAccountNamespace: pets\n  hooks:\n",
        );
        let g = grants(&composite(&with_sa), &[]);
        assert_eq!(verbs(&g, "", "pods"), ["get", "list", "watch"]);
        assert_eq!(
            verbs(&g, "", "persistentvolumeclaims"),
            ["get", "list", "watch"]
        );
        assert!(verbs(&g, "ctl.example.com", "catsets/finalizers").is_empty());
        assert_eq!(g.impersonated, BTreeSet::from(["cat-writer".to_owned()]));
        let role = cluster_role("kmeta", &g);
        let rules = role["rules"].as_array().unwrap();
        assert!(
            rules.contains(&json!({"apiGroups": [""], "resources": ["serviceaccounts"],
                                   "resourceNames": ["cat-writer"], "verbs": ["impersonate"]})),
            "{role}"
        );
        // without one, kmeta writes them itself; --default-service-account makes it one
        let own = grants(&composite(CC), &[]);
        assert_eq!(verbs(&own, "", "pods").len(), 7);
        assert!(own.impersonated.is_empty());
        let locked = grants_with(&composite(CC), &[], Some("writer"));
        assert_eq!(verbs(&locked, "", "pods"), ["get", "list", "watch"]);
        assert_eq!(locked.impersonated, BTreeSet::from(["writer".to_owned()]));
        // the ServiceAccount's own role, and its binding when the namespace is named
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, &with_sa).unwrap();
        let text = render_controller(
            std::slice::from_ref(&file),
            &[],
            Some("cat-writer"),
            "cats",
            None,
        )
        .unwrap();
        assert!(text.contains("kind: ClusterRoleBinding"), "{text}");
        assert!(text.contains("namespace: pets"), "{text}");
        let kmeta = render(
            &[file],
            &[],
            "kmeta",
            None,
            &ServiceAccountRef::kmeta(),
            false,
        )
        .unwrap();
        assert!(kmeta.contains("impersonate"), "{kmeta}");
    }

    #[test]
    fn decorator_controllers_are_only_watched_when_the_files_hold_none() {
        let mc = "metacontroller.k8s.io";
        let g = grants(&composite(CC), &[]);
        assert_eq!(
            verbs(&g, mc, "decoratorcontrollers"),
            ["get", "list", "watch"]
        );
        assert_eq!(
            verbs(&g, mc, "compositecontrollers"),
            ["get", "list", "watch"]
        );
        let dc = "kind: DecoratorController\nmetadata: {name: d}\nspec:\n  resources: [{apiVersion: v1, resource: pods}]\n";
        let g = grants(&composite(dc), &[]);
        assert_eq!(
            verbs(&g, mc, "decoratorcontrollers"),
            ["get", "list", "patch", "update", "watch"]
        );
    }

    #[test]
    fn the_printed_names_and_bindings_never_take_kmetas_own() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, CC).unwrap();
        let files = std::slice::from_ref(&file);
        let own = render(
            files,
            &[],
            OWN_NAME,
            None,
            &ServiceAccountRef::kmeta(),
            false,
        )
        .unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&own).unwrap();
        assert_eq!(docs[1]["kind"], "ClusterRoleBinding");
        assert_eq!(
            docs[1]["subjects"],
            json!([{"kind": "ServiceAccount", "name": "kmeta", "namespace": "kmeta"}])
        );
        let one = render_controller(files, &[], None, "cats", None).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&one).unwrap();
        assert_eq!(
            docs[0]["metadata"]["name"],
            "kmeta-compositecontroller-cats"
        );
        assert_eq!(
            docs.len(),
            1,
            "no ServiceAccount named: a comment, no binding"
        );
        assert!(one.contains("--service-account <namespace>/NAME"), "{one}");
        let sa: ServiceAccountRef = "pets/writer".parse().unwrap();
        let one = render_controller(files, &[], None, "cats", Some(&sa)).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&one).unwrap();
        assert_eq!(
            docs[1]["metadata"]["name"],
            "kmeta-compositecontroller-cats"
        );
        assert_eq!(docs[1]["roleRef"]["name"], "kmeta-compositecontroller-cats");
        assert_eq!(docs[1]["subjects"][0]["namespace"], "pets");
        let e = render_controller(files, &[], Some("kmeta"), "cats", None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--name kmeta with --controller: "),
            "{e}"
        );
        for bad in ["kmeta", "/x", "x/", "a/b/c", ""] {
            let e = bad.parse::<ServiceAccountRef>().unwrap_err().to_string();
            assert!(e.contains("expected <namespace>/<name>"), "{e}");
        }
    }

    #[test]
    fn a_plans_role_reads_what_plan_reads_and_writes_nothing() {
        let yaml = r#"
apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: web}
spec:
  parentResource: {apiVersion: example.com/v1, resource: webapps}
  childResources:
  - {apiVersion: apps/v1, resource: deployments}
  hooks:
    sync:
      jsonnet: {configMapRef: {namespace: hooks, name: web-hooks, key: sync.jsonnet}}
"#;
        let cs = composite(yaml);
        let (name, c) = &cs[0];
        let g = plan_grants(name, c, &[]);
        for verbs in g.verbs.values() {
            assert!(
                verbs.iter().all(|v| *v == "get" || *v == "list"),
                "{verbs:?}"
            );
        }
        assert!(verbs(&g, "apps", "deployments").contains(&"list"));
        assert!(verbs(&g, "example.com", "webapps").contains(&"list"));
        assert!(verbs(&g, "apiextensions.k8s.io", "customresourcedefinitions").contains(&"list"));
        let cm = g
            .named
            .get(&(String::new(), "configmaps".to_owned()))
            .unwrap();
        assert!(cm.contains("web-hooks"));
        let cc = (
            "metacontroller.k8s.io".to_owned(),
            "compositecontrollers".to_owned(),
        );
        assert!(g.named[&cc].contains("web"));
        assert!(g.impersonated.is_empty());
        let role = plan_role("kmeta-plan-web", &g);
        let text = serde_json::to_string(&role).unwrap();
        for write in [
            "create",
            "update",
            "patch",
            "delete",
            "watch",
            "impersonate",
        ] {
            assert!(!text.contains(&format!("\"{write}\"")), "{write}: {text}");
        }
    }
}
