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

use std::path::PathBuf;

use serde_json::Value;

use crate::api::CompositeController;
use crate::object::meta_str;
use crate::reconcile::decide::{self, ChildOp};

mod engine;
mod files;
pub(crate) mod live;
mod show;

pub use engine::LeftAlone;
pub(crate) use engine::{Engine, HookSetup, Observed, Related, RelatedLists, as_cached};
pub(crate) use files::{child_type, files_client};
pub(crate) use files::{read_all, read_one};
pub use show::{as_diff, as_yaml};

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
    /// Render a parent without `metadata.uid` with [`PLACEHOLDER_UID`] instead of refusing it.
    pub placeholder_uid: bool,
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
    /// Children whose write the sync would hold back (their drift policy), with why.
    pub left_alone: Vec<LeftAlone>,
    /// Observed children the answer leaves as they are.
    pub unchanged: Vec<String>,
    /// The events the hook asked kmeta to publish on the parent (`events`), as it sent them.
    pub events: Vec<Value>,
}

impl Rendered {
    /// Whether kmeta would write anything: a child, or the status (kmeta's sync record
    /// included, compared as a sync compares it: a record carried over is no write).
    pub fn changes(&self) -> bool {
        !self.writes.is_empty() || self.status_changes()
    }

    /// Whether kmeta would write the parent's status.
    pub fn status_changes(&self) -> bool {
        decide::status_changed(&self.parent, &self.status)
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

/// The uid a parent without one is given when a placeholder is asked for
/// ([`RenderOptions::placeholder_uid`]).
pub const PLACEHOLDER_UID: &str = "00000000-0000-0000-0000-000000000000";

/// Step: a parent without `metadata.uid` (a manifest, not the live object) is refused, or given
/// [`PLACEHOLDER_UID`] when asked: owner references and the `controller-uid` label carry it, so
/// the writes shown would not be the ones kmeta makes.
fn check_uid(opts: &RenderOptions, parent: &mut Value) -> Result<(), RenderError> {
    if !meta_str(parent, "uid").is_empty() {
        return Ok(());
    }
    if !opts.placeholder_uid {
        return Err(RenderError::Input {
            path: opts.parent.clone(),
            message: "the parent has no metadata.uid, so the owner references and controller-uid \
                      labels kmeta writes cannot be shown: give the live object (`kubectl get -o \
                      yaml`), or use --live, or --placeholder-uid to render with a placeholder uid"
                .into(),
        });
    }
    parent["metadata"]["uid"] = Value::String(PLACEHOLDER_UID.into());
    Ok(())
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
        live::read_live(client, &mut inputs).await?;
    }
    check_uid(opts, &mut inputs.parent)?;
    let client = match &opts.live {
        Some(Live(client)) if opts.hook_objects.is_empty() => client.clone(),
        _ => files::files_client(read_all(&opts.hook_objects)?),
    };
    let setup = HookSetup {
        hook_url: opts.hook_url.clone(),
        client,
        jsonnet_worker: opts.jsonnet_worker.clone(),
        finalizing: opts.finalizing,
    };
    let Inputs {
        cc,
        parent,
        observed,
        related,
        crds,
    } = inputs;
    let engine = Engine::new(cc, &crds, &observed, setup).await?;
    // what a sync reads: the objects as kmeta's watch caches keep them
    let parent = as_cached(parent).0;
    let observed = Observed::from_read(observed);
    let related = match &opts.live {
        // the cluster's related objects, as the customize hook selects them
        Some(Live(client)) if opts.related.is_empty() => {
            let lists = RelatedLists::new(client.clone(), crds);
            engine.related(&parent, &lists).await?
        }
        _ => Related {
            objects: related,
            groups: Vec::new(),
        },
    };
    let response = engine.call(&parent, &observed, &related).await?;
    engine.plan(parent, observed, response)
}
