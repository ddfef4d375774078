//! `kmeta plan`: what kmeta would write for every parent of a CompositeController — under its
//! hook as deployed, or under a new controller manifest, hook URL or hook objects (a Jsonnet
//! ConfigMap) — read-only. Each parent is planned as `kmeta render --live` renders one
//! (the same offline sync `kmeta render` runs: request, hook client, decisions and gates), with a
//! bounded number of hook calls in flight, parents read page by page and children namespace by
//! namespace, so a fleet is streamed, never held whole. [`summary`] folds the plans into what
//! would change.

pub mod summary;

use std::collections::HashMap;
use std::path::PathBuf;

use futures::StreamExt as _;
use kube::api::{Api, ListParams};
use serde_json::Value;

use crate::api::CompositeController;
use crate::object::meta_str;
use crate::render::live::{Listing, list_all, list_crds, list_page};
use crate::render::{
    Engine, HookSetup, Observed, RelatedLists, RenderError, Rendered, as_cached, read_all, read_one,
};

pub use summary::Summary;

/// Hook calls in flight at once by default: 8 (kmeta's; `kmeta run`'s default worker count).
pub const DEFAULT_CONCURRENCY: usize = 8;

/// Parents read per list request: 500 (client-go's pager page size).
pub const PAGE: u32 = 500;

/// Why `kmeta plan` could not plan.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The controller or a file could not be read or used.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// A read from the cluster failed.
    #[error("{what}: {source}")]
    Read {
        /// What was read.
        what: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
}

/// What `kmeta plan` plans.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// The CompositeController's name in the cluster.
    pub controller: String,
    /// A new CompositeController manifest to plan with instead of the deployed one.
    pub controller_file: Option<PathBuf>,
    /// Call this URL instead of the hook's own.
    pub hook_url: Option<String>,
    /// Objects the hook client reads, from these files instead of the cluster (a new Jsonnet
    /// ConfigMap, a webhook's Secrets).
    pub hook_objects: Vec<PathBuf>,
    /// Only the parents this label selector selects (besides the controller's own selector).
    pub selector: Option<String>,
    /// Only the parents in this namespace.
    pub namespace: Option<String>,
    /// Hook calls in flight at once ([`DEFAULT_CONCURRENCY`]).
    pub concurrency: usize,
    /// The Jsonnet worker process; `None`: this executable.
    pub jsonnet_worker: Option<crate::hook::jsonnet::WorkerCommand>,
}

/// The plan of one parent.
#[derive(Debug)]
pub struct ParentPlan {
    /// `namespace/name` (or `name`).
    pub parent: String,
    /// What a sync would write, or why the parent is not synced, or why the sync would fail.
    pub outcome: Outcome,
}

/// What planning one parent found.
#[derive(Debug)]
pub enum Outcome {
    /// The sync it would make.
    Planned(Box<Rendered>),
    /// kmeta would not sync it (paused), with why.
    Skipped(String),
    /// The hook failed or its answer was refused, as the sync would fail.
    Failed(String),
}

fn read_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> PlanError {
    let what = what.into();
    move |source| PlanError::Read { what, source }
}

/// The controller to plan with: the file's, else the cluster's.
async fn controller(
    client: &kube::Client,
    opts: &PlanOptions,
) -> Result<CompositeController, PlanError> {
    if let Some(path) = &opts.controller_file {
        let v = read_one(path, "CompositeController", |d| {
            d["kind"] == "CompositeController"
        })?;
        return serde_json::from_value(v).map_err(|e| {
            PlanError::Render(RenderError::Input {
                path: path.clone(),
                message: format!("not a CompositeController: {e}"),
            })
        });
    }
    let api: Api<CompositeController> = Api::all(client.clone());
    api.get(&opts.controller).await.map_err(read_err(format!(
        "reading CompositeController {}",
        opts.controller
    )))
}

/// The label selector of the list of parents: the controller's own, and the one asked for.
fn parent_selector(cc: &CompositeController, asked: Option<&str>) -> Option<String> {
    let own = cc
        .spec
        .parent_resource
        .label_selector
        .as_ref()
        .map(crate::runtime::selector::to_query)
        .filter(|q| !q.is_empty());
    match (own, asked) {
        (Some(a), Some(b)) => Some(format!("{a},{b}")),
        (a, b) => a.or(b.map(str::to_owned)),
    }
}

/// The children of `cc`'s child resources in `namespace` (every namespace: `None`), grouped by
/// their controller's uid.
async fn children_by_owner(
    client: &kube::Client,
    cc: &CompositeController,
    crds: &[Value],
    namespace: Option<&str>,
) -> Result<HashMap<String, Vec<Value>>, PlanError> {
    let mut by_owner: HashMap<String, Vec<Value>> = HashMap::new();
    for rule in cc.spec.child_rules() {
        let (kind, namespaced) =
            crate::render::child_type(&rule.api_version, &rule.resource, crds, &[])?;
        let listing = Listing {
            api_version: &rule.api_version,
            kind: &kind,
            plural: &rule.resource,
            namespace: namespaced.then_some(namespace).flatten(),
        };
        let what = format!(
            "listing {} in {}",
            rule.resource,
            namespace.unwrap_or("every namespace")
        );
        for v in list_all(client, &listing).await.map_err(read_err(what))? {
            if let Some(uid) = crate::object::controller_uid(&v) {
                by_owner.entry(uid.to_owned()).or_default().push(v);
            }
        }
    }
    Ok(by_owner)
}

/// Plans every parent of the controller `opts` names, handing each parent's plan to `each` in
/// the order the parents are listed; returns the summary. Nothing is written.
pub async fn plan(
    client: &kube::Client,
    opts: &PlanOptions,
    mut each: impl FnMut(&ParentPlan),
) -> Result<Summary, PlanError> {
    let cc = controller(client, opts).await?;
    let crds = list_crds(client)
        .await
        .map_err(read_err("listing CustomResourceDefinitions"))?;
    let setup = HookSetup {
        hook_url: opts.hook_url.clone(),
        client: match opts.hook_objects.is_empty() {
            true => client.clone(),
            false => crate::render::files_client(read_all(&opts.hook_objects)?),
        },
        jsonnet_worker: opts.jsonnet_worker.clone(),
        finalizing: false,
    };
    let engine = Engine::new(cc, &crds, &[], setup).await?;
    let mut summary = Summary::default();
    let mut pages = Pages::new(client, &engine, &crds, opts)?;
    let related = RelatedLists::new(client.clone(), crds.clone());
    let cc = engine.controller();
    let paused = crate::reconcile::decide::controller_pause(
        "CompositeController",
        cc.metadata.name.as_deref().unwrap_or_default(),
        cc.metadata.annotations.as_ref(),
    );
    let fleet = Fleet {
        client,
        engine: &engine,
        crds: &crds,
        related: &related,
        paused,
    };
    while let Some(parents) = pages.next().await? {
        let plans = plan_page(&fleet, opts, parents).await?;
        for p in &plans {
            summary.add(p);
            each(p);
        }
    }
    Ok(summary)
}

/// The parents of the controller, page by page.
struct Pages {
    client: kube::Client,
    api_version: String,
    kind: String,
    plural: String,
    namespace: Option<String>,
    params: ListParams,
    next: Option<Option<String>>,
}

impl Pages {
    fn new(
        client: &kube::Client,
        engine: &Engine,
        crds: &[Value],
        opts: &PlanOptions,
    ) -> Result<Pages, PlanError> {
        let pr = &engine.controller().spec.parent_resource;
        let (kind, namespaced) =
            crate::render::child_type(&pr.api_version, &pr.resource, crds, &[])?;
        let mut params = ListParams::default().limit(PAGE);
        if let Some(sel) = parent_selector(engine.controller(), opts.selector.as_deref()) {
            params = params.labels(&sel);
        }
        Ok(Pages {
            client: client.clone(),
            api_version: pr.api_version.clone(),
            kind,
            plural: pr.resource.clone(),
            namespace: opts.namespace.clone().filter(|_| namespaced),
            params,
            next: Some(None),
        })
    }

    /// The next page of parents, `None` after the last.
    async fn next(&mut self) -> Result<Option<Vec<Value>>, PlanError> {
        let Some(token) = self.next.take() else {
            return Ok(None);
        };
        let mut params = self.params.clone();
        if let Some(t) = token {
            params = params.continue_token(&t);
        }
        let listing = Listing {
            api_version: &self.api_version,
            kind: &self.kind,
            plural: &self.plural,
            namespace: self.namespace.as_deref(),
        };
        let (parents, next) = list_page(&self.client, &listing, &params)
            .await
            .map_err(read_err("listing the parents"))?;
        self.next = next.map(Some);
        Ok(Some(parents))
    }
}

/// Plans one page of parents: their children read namespace by namespace, their hook called
/// with at most `opts.concurrency` calls in flight; the plans in the page's order.
/// What every parent's plan reads from: the cluster, the engine, the CRDs, the related objects.
struct Fleet<'a> {
    client: &'a kube::Client,
    engine: &'a Engine,
    crds: &'a [Value],
    related: &'a RelatedLists,
    /// Why the controller itself is paused, if it is (decided once for the fleet).
    paused: Option<String>,
}

async fn plan_page(
    fleet: &Fleet<'_>,
    opts: &PlanOptions,
    parents: Vec<Value>,
) -> Result<Vec<ParentPlan>, PlanError> {
    let Fleet {
        client,
        engine,
        crds,
        ..
    } = *fleet;
    let mut by_namespace: Vec<(String, Vec<Value>)> = Vec::new();
    for p in parents {
        let ns = meta_str(&p, "namespace").to_owned();
        match by_namespace.last_mut() {
            Some((last, group)) if *last == ns => group.push(p),
            _ => by_namespace.push((ns, vec![p])),
        }
    }
    let mut out = Vec::new();
    for (ns, parents) in by_namespace {
        let scope = (!ns.is_empty()).then_some(ns.as_str());
        let mut children = children_by_owner(client, engine.controller(), crds, scope).await?;
        let work = parents.into_iter().map(|p| {
            let observed = children.remove(meta_str(&p, "uid")).unwrap_or_default();
            plan_parent(fleet, as_cached(p).0, Observed::from_read(observed))
        });
        let plans: Vec<ParentPlan> = futures::stream::iter(work)
            .buffered(opts.concurrency.max(1))
            .collect()
            .await;
        out.extend(plans);
    }
    Ok(out)
}

/// Plans one parent (see [`Outcome`]).
async fn plan_parent(fleet: &Fleet<'_>, parent: Value, observed: Observed) -> ParentPlan {
    let engine = fleet.engine;
    let name = match meta_str(&parent, "namespace") {
        "" => meta_str(&parent, "name").to_owned(),
        ns => format!("{ns}/{}", meta_str(&parent, "name")),
    };
    if crate::object::is_deleting(&parent) {
        let why = "being deleted: its finalize hook is planned by `kmeta render --finalizing`";
        return ParentPlan {
            parent: name,
            outcome: Outcome::Skipped(why.into()),
        };
    }
    if let Some(why) = crate::reconcile::decide::pause_reason(&parent, fleet.paused.as_deref()) {
        return ParentPlan {
            parent: name,
            outcome: Outcome::Skipped(format!("paused: {why}")),
        };
    }
    let outcome = match sync_offline(engine, fleet.related, parent, observed).await {
        Ok(r) => Outcome::Planned(Box::new(r)),
        Err(e) => Outcome::Failed(e.to_string()),
    };
    ParentPlan {
        parent: name,
        outcome,
    }
}

/// The related objects, the hook's answer and the writes of one parent.
async fn sync_offline(
    engine: &Engine,
    related: &RelatedLists,
    parent: Value,
    observed: Observed,
) -> Result<Rendered, RenderError> {
    let related = engine.related(&parent, related).await?;
    let response = engine.call(&parent, &observed, &related).await?;
    engine.plan(parent, observed, response)
}
