//! The scenario builder: the setup every scenario repeats — an [`Env`], kmeta's CRDs, the
//! scenario's own CRDs, a hook server, CompositeControllers, the controller, parents — stated
//! as data, so a scenario's body says only what is particular to it.
//!
//! [`Scenario::start`] builds everything and starts the controller; [`Scenario::prepare`] stops
//! before the CompositeControllers, for scenarios that must create something in between (a
//! Secret a CompositeController names, an admission hook). Both give a [`Running`] scenario,
//! which is its [`Env`] (through `Deref`) plus the names and waits scenarios keep asking for.

use std::ops::{Deref, DerefMut};

use anyhow::{Context as _, bail};
use kmeta::ManagerConfig;
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};

use crate::{Authz, Env, HookServer, Reply, TIMEOUT, composite_controller, crd, eventually};

type HookFn = Box<dyn Fn(&str, &Value) -> Reply + Send + Sync>;
type CrdEdit = Box<dyn FnOnce(&mut Value)>;

/// Where a scenario's CompositeControllers get their hook answers from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HookMode {
    /// A CompositeController object; kmeta calls the scenario's hook server over HTTP.
    #[default]
    Webhook,
    /// No CompositeController object: the same spec runs with in-process hooks
    /// (`kmeta::embed::Composite`) that the scenario's hook server answers without HTTP.
    InProcess,
}

/// A scenario to build: see the [module documentation](self).
pub struct Scenario {
    name: String,
    mode: HookMode,
    crds: Vec<(String, String, Option<CrdEdit>)>,
    hook: Option<HookFn>,
    objects: Vec<(String, Value)>,
    controllers: Vec<Cc>,
    config: Option<ManagerConfig>,
    parents: Vec<(String, Value)>,
    authz: Authz,
    limits: Option<kmeta::ops::ratelimit::RateLimit>,
}

impl Scenario {
    /// A scenario whose [`Env`] is named `name`.
    pub fn new(name: &str) -> Scenario {
        Scenario {
            name: name.to_owned(),
            mode: HookMode::Webhook,
            crds: Vec::new(),
            hook: None,
            objects: Vec::new(),
            controllers: Vec::new(),
            config: None,
            parents: Vec::new(),
            authz: Authz::FromEnv,
            limits: None,
        }
    }

    /// Who kmeta is to the in-process API server (default [`Authz::FromEnv`]).
    pub fn authz(mut self, authz: Authz) -> Scenario {
        self.authz = authz;
        self
    }

    /// A namespaced CRD `kind`/`plural` in the scenario's group (see [`crd`]), created and
    /// Established before anything else. The first CRD declared is the parent kind (used by
    /// [`Cc`]'s default `parentResource`, [`Running::parent`] and [`Running::parents`]); with
    /// none declared the parent kind is `Thing`/`things`.
    pub fn crd(self, kind: &str, plural: &str) -> Scenario {
        self.crd_edit(kind, plural, None)
    }

    /// Like [`Scenario::crd`], with the CRD changed by `edit` before it is created (a schema, no
    /// status subresource, ...).
    pub fn crd_with(
        self,
        kind: &str,
        plural: &str,
        edit: impl FnOnce(&mut Value) + 'static,
    ) -> Scenario {
        self.crd_edit(kind, plural, Some(Box::new(edit)))
    }

    fn crd_edit(mut self, kind: &str, plural: &str, edit: Option<CrdEdit>) -> Scenario {
        self.crds.push((kind.to_owned(), plural.to_owned(), edit));
        self
    }

    /// The scenario's hook server ([`HookServer::start`] with `handler`); [`Cc`]s call it
    /// unless told otherwise, and [`Running::hooks`] returns it.
    pub fn hook(
        mut self,
        handler: impl Fn(&str, &Value) -> Reply + Send + Sync + 'static,
    ) -> Scenario {
        self.hook = Some(Box::new(handler));
        self
    }

    /// Where the CompositeControllers get their hook answers from (default
    /// [`HookMode::Webhook`]).
    pub fn hook_mode(mut self, mode: HookMode) -> Scenario {
        self.mode = mode;
        self
    }

    /// An object of `plural` created in the scenario's namespace (filled in) before the
    /// CompositeControllers.
    pub fn object(mut self, plural: &str, object: Value) -> Scenario {
        self.objects.push((plural.to_owned(), object));
        self
    }

    /// A CompositeController, created in the order given after the objects.
    pub fn controller(mut self, cc: Cc) -> Scenario {
        self.controllers.push(cc);
        self
    }

    /// The controller's settings (default [`ManagerConfig::default`]).
    pub fn config(mut self, config: ManagerConfig) -> Scenario {
        self.config = Some(config);
        self
    }

    /// A parent `name` of the parent kind with `spec` (see [`Running::parent`]), created once
    /// the controller runs.
    pub fn parent(mut self, name: &str, spec: Value) -> Scenario {
        self.parents.push((name.to_owned(), spec));
        self
    }

    /// The controller's requests limited as `kmeta run` limits them (see
    /// [`Env::limit_controller_requests`]); by default they are not.
    pub fn client_limits(mut self, limits: kmeta::ops::ratelimit::RateLimit) -> Scenario {
        self.limits = Some(limits);
        self
    }

    /// Builds everything declared, in this order: the [`Env`], kmeta's CRDs, the scenario's
    /// CRDs, the hook server, the objects, the CompositeControllers, the running controller, the
    /// parents.
    pub async fn start(mut self) -> anyhow::Result<Running> {
        let controllers = std::mem::take(&mut self.controllers);
        let config = self.config.take().unwrap_or_default();
        let parents = std::mem::take(&mut self.parents);
        let limits = self.limits.take();
        let mut s = self.prepare().await?;
        if let Some(limits) = limits {
            s.env.limit_controller_requests(limits)?;
        }
        s.config = config.clone();
        for cc in controllers {
            s.controller(cc).await?;
        }
        if s.mode == HookMode::Webhook {
            s.env.start_controller_with(config);
        }
        for (name, spec) in parents {
            s.parent(&name, spec).await?;
        }
        Ok(s)
    }

    /// Builds the [`Env`], kmeta's CRDs, the scenario's CRDs, the hook server and the objects;
    /// the scenario then creates its controllers ([`Running::controller`]), starts the controller
    /// ([`Env::start_controller`]) and creates parents itself. Fails when controllers, settings
    /// or parents were declared (only [`Scenario::start`] creates those).
    pub async fn prepare(self) -> anyhow::Result<Running> {
        if !self.controllers.is_empty() || self.config.is_some() || !self.parents.is_empty() {
            bail!(
                "scenario {}: prepare() creates no controllers or parents, use start()",
                self.name
            );
        }
        let builder = kmeta_apiserver::TestServer::builder();
        let mut env = Env::with_authz(&self.name, builder, self.authz).await?;
        crate::install_kmeta_crds(&mut env).await?;
        let group = format!("{}.kmeta.test", env.id);
        let parent_kind = self.crds.first().map_or_else(
            || ("Thing".to_owned(), "things".to_owned()),
            |(kind, plural, _)| (kind.clone(), plural.clone()),
        );
        for (kind, plural, edit) in self.crds {
            let mut c = crd(&group, &kind, &plural, true);
            if let Some(edit) = edit {
                edit(&mut c);
            }
            env.create_crd(c).await?;
        }
        let hooks = match self.hook {
            Some(handler) => {
                let hooks = HookServer::start(handler).await?;
                if let Some(grant) = env.related_granter() {
                    hooks.before_related(grant);
                }
                Some(hooks)
            }
            None => None,
        };
        if let Some(hooks) = &hooks {
            // each hook call records the decided syncs of its controller so far: the sync that
            // made the call is not among them (see `Running::patch_and_sync`)
            let metrics = env.metrics.clone();
            hooks.stamp_calls(move |body| {
                let name = body.pointer("/controller/metadata/name")?.as_str()?;
                Some(crate::decided_syncs(&metrics, name))
            });
        }
        for (plural, mut object) in self.objects {
            object["metadata"]["namespace"] = json!(env.ns);
            env.create(&plural, object).await?;
        }
        Ok(Running {
            mode: self.mode,
            config: ManagerConfig::default(),
            av: format!("{group}/v1"),
            group,
            parent_kind,
            hooks,
            env,
        })
    }
}

/// A CompositeController for a [`Scenario`]. Unless changed, its spec is
///
/// ```text
/// parentResource: {apiVersion: <scenario group>/v1, resource: <parent plural>}
/// childResources: [{apiVersion: v1, resource: configmaps, updateStrategy: {method: InPlace}}]
/// hooks: {sync: {webhook: {url: <scenario hook>/sync}}}
/// generateSelector: true
/// ```
pub struct Cc {
    name: String,
    parent: Option<String>,
    selector: Option<Value>,
    children: Children,
    sync_url: Option<String>,
    webhook: Value,
    hooks: Vec<String>,
    patches: Vec<Value>,
    annotations: Vec<(String, String)>,
}

enum Children {
    ConfigMaps(Option<String>),
    Own(String),
    None,
}

impl Cc {
    /// The default CompositeController named `name`.
    pub fn new(name: &str) -> Cc {
        Cc {
            name: name.to_owned(),
            parent: None,
            selector: None,
            children: Children::ConfigMaps(Some("InPlace".into())),
            annotations: Vec::new(),
            sync_url: None,
            webhook: json!({}),
            hooks: Vec::new(),
            patches: Vec::new(),
        }
    }

    /// Parents are `plural` of the scenario's group instead of the parent kind's.
    pub fn parent(mut self, plural: &str) -> Cc {
        self.parent = Some(plural.to_owned());
        self
    }

    /// `parentResource.labelSelector`.
    pub fn selector(mut self, selector: Value) -> Cc {
        self.selector = Some(selector);
        self
    }

    /// The ConfigMap children's update strategy `method` (default `InPlace`).
    pub fn strategy(mut self, method: &str) -> Cc {
        self.children = Children::ConfigMaps(Some(method.to_owned()));
        self
    }

    /// ConfigMap children without an `updateStrategy`.
    pub fn no_strategy(mut self) -> Cc {
        self.children = Children::ConfigMaps(None);
        self
    }

    /// Children are `plural` of the scenario's group (`InPlace`) instead of ConfigMaps.
    pub fn child(mut self, plural: &str) -> Cc {
        self.children = Children::Own(plural.to_owned());
        self
    }

    /// No `childResources` at all.
    pub fn no_children(mut self) -> Cc {
        self.children = Children::None;
        self
    }

    /// The sync hook's URL, instead of the scenario hook's `/sync`.
    pub fn sync_url(mut self, url: &str) -> Cc {
        self.sync_url = Some(url.to_owned());
        self
    }

    /// Fields merged into `hooks.sync.webhook` (`timeout`, `etag`, `authorization`, ...).
    pub fn webhook(mut self, fields: Value) -> Cc {
        merge_patch(&mut self.webhook, &fields);
        self
    }

    /// Another hook, `hooks.<name>` (`customize`, `finalize`), served by the scenario hook at
    /// `/<name>`.
    pub fn hook(mut self, name: &str) -> Cc {
        self.hooks.push(name.to_owned());
        self
    }

    /// `generateSelector` left out: parents select their children with `spec.selector`.
    pub fn no_generate_selector(self) -> Cc {
        self.patch(json!({"generateSelector": null}))
    }

    /// An annotation on the CompositeController object.
    pub fn annotate(mut self, key: &str, value: &str) -> Cc {
        self.annotations.push((key.to_owned(), value.to_owned()));
        self
    }

    /// A JSON merge patch (RFC 7386: `null` removes) applied to the finished spec.
    pub fn patch(mut self, patch: Value) -> Cc {
        self.patches.push(patch);
        self
    }

    /// The CompositeController object for scenario `s`.
    fn resolve(self, s: &Running) -> anyhow::Result<Value> {
        let hook_url = |hook: &str| -> anyhow::Result<String> {
            let hooks = s.hooks.as_ref().with_context(|| {
                format!(
                    "CompositeController {}: the scenario has no hook",
                    self.name
                )
            })?;
            Ok(hooks.url(hook))
        };
        let sync_url = match &self.sync_url {
            Some(url) => url.clone(),
            None => hook_url("sync")?,
        };
        let mut webhook = json!({"url": sync_url});
        merge_patch(&mut webhook, &self.webhook);
        let parent = self.parent.as_deref().unwrap_or(&s.parent_kind.1);
        let mut spec = json!({
            "parentResource": {"apiVersion": s.av, "resource": parent},
            "hooks": {"sync": {"webhook": webhook}},
            "generateSelector": true
        });
        if let Some(selector) = &self.selector {
            spec["parentResource"]["labelSelector"] = selector.clone();
        }
        let child = match &self.children {
            Children::ConfigMaps(Some(m)) => {
                Some(json!({"apiVersion": "v1", "resource": "configmaps",
                       "updateStrategy": {"method": m}}))
            }
            Children::ConfigMaps(None) => {
                Some(json!({"apiVersion": "v1", "resource": "configmaps"}))
            }
            Children::Own(plural) => Some(json!({"apiVersion": s.av, "resource": plural,
                       "updateStrategy": {"method": "InPlace"}})),
            Children::None => None,
        };
        if let Some(child) = child {
            spec["childResources"] = json!([child]);
        }
        for hook in &self.hooks {
            spec["hooks"][hook] = json!({"webhook": {"url": hook_url(hook)?}});
        }
        for patch in &self.patches {
            merge_patch(&mut spec, patch);
        }
        let mut cc = composite_controller(&s.env, &self.name, spec);
        for (k, v) in &self.annotations {
            cc["metadata"]["annotations"][k] = json!(v);
        }
        Ok(cc)
    }
}

/// A DecoratorController for a [`Scenario`]. Unless changed, its spec is
///
/// ```text
/// resources: [{apiVersion: <scenario group>/v1, resource: <parent plural>}]
/// attachments: [{apiVersion: v1, resource: configmaps, updateStrategy: {method: InPlace}}]
/// hooks: {sync: {webhook: {url: <scenario hook>/sync}}}
/// ```
///
/// and it carries the scenario's label, so the scenario's controller runs it.
pub struct Dc {
    name: String,
    resources: Option<Value>,
    attachments: Option<Value>,
    hooks: Vec<(String, String)>,
    version: Option<String>,
    sync_url: Option<String>,
    patches: Vec<Value>,
    annotations: Value,
}

impl Dc {
    /// The default DecoratorController named `name`.
    pub fn new(name: &str) -> Dc {
        Dc {
            name: name.to_owned(),
            resources: None,
            attachments: None,
            hooks: vec![("sync".into(), "sync".into())],
            version: None,
            sync_url: None,
            patches: Vec::new(),
            annotations: json!({}),
        }
    }

    /// An annotation on the DecoratorController object.
    pub fn annotate(mut self, key: &str, value: &str) -> Dc {
        self.annotations[key] = json!(value);
        self
    }

    /// The sync hook's URL, instead of the scenario hook's `/sync` (a hook served elsewhere).
    pub fn sync_url(mut self, url: &str) -> Dc {
        self.sync_url = Some(url.to_owned());
        self
    }

    /// `spec.resources`, instead of the parent kind.
    pub fn resources(mut self, resources: Value) -> Dc {
        self.resources = Some(resources);
        self
    }

    /// `spec.attachments`, instead of InPlace ConfigMaps (`null`: none).
    pub fn attachments(mut self, attachments: Value) -> Dc {
        self.attachments = Some(attachments);
        self
    }

    /// `hooks.<hook>` served by the scenario hook at `/<path>` (`sync` replaces the default).
    pub fn hook_at(mut self, hook: &str, path: &str) -> Dc {
        self.hooks.retain(|(h, _)| h != hook);
        self.hooks.push((hook.to_owned(), path.to_owned()));
        self
    }

    /// `hooks.<hook>` served by the scenario hook at `/<hook>`.
    pub fn hook(self, hook: &str) -> Dc {
        self.hook_at(hook, hook)
    }

    /// Every hook's `version` (`v1`, `v2`).
    pub fn version(mut self, version: &str) -> Dc {
        self.version = Some(version.to_owned());
        self
    }

    /// A JSON merge patch (RFC 7386: `null` removes) applied to the finished spec.
    pub fn patch(mut self, patch: Value) -> Dc {
        self.patches.push(patch);
        self
    }

    /// The DecoratorController object for scenario `s`.
    fn resolve(self, s: &Running) -> anyhow::Result<Value> {
        let hook_url = |path: &str| -> anyhow::Result<String> {
            let hooks = s.hooks.as_ref().with_context(|| {
                format!(
                    "DecoratorController {}: the scenario has no hook",
                    self.name
                )
            })?;
            Ok(hooks.url(path))
        };
        let resources = self
            .resources
            .clone()
            .unwrap_or_else(|| json!([{"apiVersion": s.av, "resource": s.parent_kind.1}]));
        let mut spec = json!({"resources": resources, "hooks": {}});
        let attachments = self.attachments.clone().unwrap_or_else(|| {
            json!([{"apiVersion": "v1", "resource": "configmaps",
                    "updateStrategy": {"method": "InPlace"}}])
        });
        if !attachments.is_null() {
            spec["attachments"] = attachments;
        }
        for (hook, path) in &self.hooks {
            let url = match (&self.sync_url, hook.as_str()) {
                (Some(url), "sync") => url.clone(),
                _ => hook_url(path)?,
            };
            spec["hooks"][hook] = json!({"webhook": {"url": url}});
            if let Some(v) = &self.version {
                spec["hooks"][hook]["version"] = json!(v);
            }
        }
        for patch in &self.patches {
            merge_patch(&mut spec, patch);
        }
        Ok(json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1",
            "kind": "DecoratorController",
            "metadata": {"name": self.name, "labels": s.env.cc_labels(),
                         "annotations": self.annotations},
            "spec": spec,
        }))
    }
}

/// A built [`Scenario`]: its [`Env`] (which it derefs to), its group and hook, and the waits
/// scenarios share. End it with [`Running::finish`].
pub struct Running {
    /// The scenario's world.
    pub env: Env,
    /// The group of the scenario's CRDs: `<env id>.kmeta.test`.
    pub group: String,
    /// `<group>/v1`.
    pub av: String,
    parent_kind: (String, String),
    hooks: Option<HookServer>,
    mode: HookMode,
    /// The settings of in-process controllers (those of [`Scenario::config`]).
    config: ManagerConfig,
}

impl Deref for Running {
    type Target = Env;
    fn deref(&self) -> &Env {
        &self.env
    }
}

impl DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Env {
        &mut self.env
    }
}

impl Running {
    /// JSON-merge-patches `name` and waits until `controller` finished the sync whose hook call
    /// showed the patch (a way to make it sync again: patch an annotation). Neither a sync in
    /// flight when the patch landed nor one that only waited for the watch counts.
    pub async fn patch_and_sync(
        &self,
        controller: &str,
        api: &Api<DynamicObject>,
        name: &str,
        patch: Value,
    ) -> anyhow::Result<Value> {
        let Some(hooks) = &self.hooks else {
            return self.env.patch_and_sync(controller, api, name, patch).await;
        };
        let from = hooks.recorded();
        let decided_before = self.env.decided_syncs(controller);
        let patched = self.merge_patch(api, name, patch.clone()).await?;
        let uid = patched["metadata"]["uid"].as_str().unwrap_or_default();
        let stamp = eventually(
            &format!("a hook call of {controller} showing the patch of {name}"),
            TIMEOUT,
            || async {
                Ok(hooks
                    .stamped_since(from)
                    .into_iter()
                    .find(|(body, _)| {
                        let of = body.pointer("/controller/metadata/name");
                        of.is_none_or(|n| n == controller) && crate::shows_patch(body, uid, &patch)
                    })
                    .map(|(_, stamp)| stamp))
            },
        )
        .await?;
        // the stamp: the syncs decided before that call's sync; without one (a request naming no
        // controller), those before the patch
        let before = stamp.unwrap_or(decided_before);
        eventually(
            &format!("the sync of {controller} that saw the patch of {name}"),
            TIMEOUT,
            || async { Ok((self.env.decided_syncs(controller) > before).then_some(())) },
        )
        .await?;
        Ok(patched)
    }

    /// The scenario's hook server.
    ///
    /// # Panics
    /// When the scenario declared no [`Scenario::hook`].
    pub fn hooks(&self) -> &HookServer {
        self.hooks
            .as_ref()
            .expect("the scenario declared no hook (Scenario::hook)")
    }

    /// Creates a CompositeController; with [`HookMode::InProcess`], runs its spec with
    /// in-process hooks instead (answered by the scenario's hook server) and returns the
    /// CompositeController it would have created.
    pub async fn controller(&mut self, cc: Cc) -> anyhow::Result<Value> {
        let cc = cc.resolve(self)?;
        if self.mode == HookMode::Webhook {
            return self.env.create("compositecontrollers", cc).await;
        }
        let name = cc["metadata"]["name"].as_str().unwrap_or_default();
        let spec: kmeta::api::CompositeControllerSpec = serde_json::from_value(cc["spec"].clone())
            .with_context(|| format!("CompositeController {name}: spec"))?;
        let hooks = self
            .hooks
            .as_ref()
            .with_context(|| format!("CompositeController {name}: the scenario has no hook"))?;
        let client = self.env.in_process_client(&cc).await?;
        let mut composite = kmeta::embed::Composite::builder(client, name);
        for hook in ["sync", "finalize", "customize"] {
            if cc["spec"]["hooks"].get(hook).is_some() {
                composite = composite.hook_json(hook, hooks.responder(hook));
            }
        }
        let schema_atomic =
            cc["metadata"]["annotations"]["kmeta.dev/schema-atomic-lists"] == "true";
        let composite = composite.spec(spec).schema_atomic_lists(schema_atomic);
        let config = self.config.clone();
        self.env.start_in_process(composite, config);
        Ok(cc)
    }

    /// Where this scenario's CompositeControllers get their hook answers from.
    pub fn hook_mode(&self) -> HookMode {
        self.mode
    }

    /// Creates a DecoratorController.
    pub async fn decorator(&mut self, dc: Dc) -> anyhow::Result<Value> {
        let dc = dc.resolve(self)?;
        self.env.create("decoratorcontrollers", dc).await
    }

    /// The DecoratorControllers (cluster-scoped).
    pub fn decorators(&self) -> Api<DynamicObject> {
        self.env.api(
            "metacontroller.k8s.io/v1alpha1",
            "DecoratorController",
            "decoratorcontrollers",
            None,
        )
    }

    /// The CompositeControllers (cluster-scoped).
    pub fn controllers(&self) -> Api<DynamicObject> {
        self.env.api(
            "metacontroller.k8s.io/v1alpha1",
            "CompositeController",
            "compositecontrollers",
            None,
        )
    }

    /// `kind`/`plural` of the scenario's group in its namespace.
    pub fn resource(&self, kind: &str, plural: &str) -> Api<DynamicObject> {
        self.env.api(&self.av, kind, plural, Some(&self.env.ns))
    }

    /// The parent kind in the scenario's namespace.
    pub fn parents(&self) -> Api<DynamicObject> {
        self.resource(&self.parent_kind.0, &self.parent_kind.1)
    }

    /// ConfigMaps in the scenario's namespace.
    pub fn configmaps(&self) -> Api<DynamicObject> {
        self.env
            .api("v1", "ConfigMap", "configmaps", Some(&self.env.ns))
    }

    /// Creates a parent `name` of the parent kind in the scenario's namespace with `spec` (none
    /// when `spec` is null).
    pub async fn parent(&mut self, name: &str, spec: Value) -> anyhow::Result<Value> {
        self.parent_labeled(name, Value::Null, spec).await
    }

    /// Like [`Running::parent`], with `labels` (none when null).
    pub async fn parent_labeled(
        &mut self,
        name: &str,
        labels: Value,
        spec: Value,
    ) -> anyhow::Result<Value> {
        let (kind, plural) = self.parent_kind.clone();
        let mut parent = json!({"apiVersion": self.av, "kind": kind,
                                "metadata": {"name": name, "namespace": self.env.ns}});
        if !labels.is_null() {
            parent["metadata"]["labels"] = labels;
        }
        if !spec.is_null() {
            parent["spec"] = spec;
        }
        self.env.create(&plural, parent).await
    }

    /// Waits until ConfigMap `name` exists in the scenario's namespace, and returns it.
    pub async fn wait_child(&self, name: &str) -> anyhow::Result<Value> {
        let what = format!("child ConfigMap {name}");
        self.env
            .wait_for(&self.configmaps(), name, &what, |_| true)
            .await
    }

    /// Waits until ConfigMap `name` exists and `ok` holds for it (`what` names the condition).
    pub async fn wait_child_where(
        &self,
        name: &str,
        what: &str,
        ok: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        self.env.wait_for(&self.configmaps(), name, what, ok).await
    }

    /// Waits until parent `name` exists and `ok` holds for it (its status, its finalizers, ...).
    pub async fn wait_parent(
        &self,
        name: &str,
        what: &str,
        ok: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        self.env.wait_for(&self.parents(), name, what, ok).await
    }

    /// Waits until the scenario hook received a request at `hook` for which `ok` holds, and
    /// returns the first such request.
    pub async fn wait_call(
        &self,
        hook: &str,
        what: &str,
        ok: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        eventually(what, TIMEOUT, || async {
            Ok(self.hooks().calls(hook).into_iter().find(|r| ok(r)))
        })
        .await
    }

    /// Stops the controller and cleans up (see [`Env::finish`]); the hook server stops after.
    pub async fn finish(self) -> anyhow::Result<()> {
        let Running { env, hooks, .. } = self;
        env.finish().await?;
        drop(hooks);
        Ok(())
    }
}

/// Applies JSON merge patch `patch` to `target` (RFC 7386: objects merge, `null` removes,
/// anything else replaces).
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Value::Object(t) = target {
        for (k, v) in fields {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}
