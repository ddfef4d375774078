//! Building a [`DecoratorState`] from a DecoratorController object: resolve the target and attachment
//! resources, start (or share) their watches, check the selectors and make the hook clients.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::decide::{self, TargetSelector};
use crate::api::{DecoratorController, Hook};
use crate::hook::{HookClient, HookError};
use crate::ops::metrics::{ControllerType, HookKind};
use crate::reconcile::children::{
    ChildRule, Children, checked_field_rules, list_rules, schema_atomic_lists,
};
use crate::reconcile::core::{Context, SyncError, Writer};
use crate::reconcile::decide::ChildType;
use crate::reconcile::memory::ChildMemory;
use crate::reconcile::related::RelatedSource;
use crate::runtime::cache::Informer;
use crate::runtime::resources::{Resolved, ResourceError};
use crate::runtime::selector;

/// Why a DecoratorController could not be built.
#[derive(Debug, thiserror::Error)]
pub enum DecoratorBuildError {
    /// The `kmeta.dev/apply-strategy` annotation names no strategy.
    #[error(transparent)]
    ApplyStrategy(crate::reconcile::apply::ApplyAnnotationError),
    /// A resource is not served (yet).
    #[error(transparent)]
    Resource(#[from] ResourceError),
    /// A child type's CRD could not be read for its list markers.
    #[error(transparent)]
    Schema(#[from] crate::reconcile::children::SchemaReadError),
    /// An attachment type's field rules are refused, or its schema could not be read for them.
    #[error(transparent)]
    FieldRules(#[from] crate::reconcile::children::FieldRulesError),
    /// A hook is misconfigured or its credentials are unreadable.
    #[error(transparent)]
    Hook(#[from] HookError),
    /// No sync hook.
    #[error("spec.hooks.sync is required")]
    NoSyncHook,
    /// A selector of `spec.resources[]` is invalid.
    #[error("spec.resources[{index}].{field}: {message}")]
    Selector {
        /// Position in `spec.resources`.
        index: usize,
        /// `labelSelector` or `annotationSelector`.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Adding the release finalizer to the DecoratorController failed.
    #[error("adding finalizer {finalizer}: {message}")]
    Finalizer {
        /// The finalizer.
        finalizer: &'static str,
        /// Cause.
        message: String,
    },
}

/// One resource whose objects are decorated, resolved and watched.
pub struct TargetRule {
    /// The resolved resource.
    pub resolved: Resolved,
    /// The shared watch.
    pub informer: Arc<Informer>,
    /// Which objects are targets.
    pub selector: TargetSelector,
    /// `ignoreStatusChanges`.
    pub ignore_status_changes: bool,
}

/// The hook clients of one DecoratorController.
pub struct DecoratorHooks {
    /// The sync hook.
    pub sync: HookClient,
    /// The finalize hook, if declared.
    pub finalize: Option<HookClient>,
    /// The customize hook, if declared.
    pub customize: Option<HookClient>,
}

/// Everything one sync of a target reads, and the state kept between syncs.
pub struct DecoratorState {
    /// Shared context.
    pub ctx: Arc<Context>,
    /// The DecoratorController's name.
    pub name: String,
    /// The DecoratorController as sent in hook requests (`controller`).
    pub dc_json: Value,
    /// The DecoratorController.
    pub dc: DecoratorController,
    /// The target resources, one per group and kind (a later rule for the same kind replaces
    /// an earlier one's selectors, as in Metacontroller).
    pub targets: Vec<TargetRule>,
    /// Attachment rules by `<Kind>.<apiVersion>`.
    pub attachments: HashMap<String, ChildRule>,
    /// Declared attachment types for validation.
    pub declared: HashMap<String, ChildType>,
    /// Declared group keys in spec order.
    pub attachment_keys: Vec<String>,
    /// Hooks.
    pub hooks: DecoratorHooks,
    /// The finalizer on targets (`metacontroller.io/decoratorcontroller-<name>`).
    pub finalizer: String,
    /// Why every target is left alone, when `kmeta.dev/paused` is set on this DecoratorController (read at
    /// build: the manager restarts the controller when that annotation changes).
    pub controller_pause: Option<String>,
    /// What it remembers between syncs about the attachments it manages.
    pub memory: ChildMemory,
}

impl std::fmt::Debug for DecoratorState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecoratorState")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn target_selector(
    index: usize,
    rule: &crate::api::DecoratorControllerResourceRule,
) -> Result<TargetSelector, DecoratorBuildError> {
    let sel = TargetSelector {
        labels: rule.label_selector.clone(),
        annotations: rule
            .annotation_selector
            .as_ref()
            .map(decide::annotation_selector),
    };
    // evaluating against nothing reports an invalid operator or value list now, not per sync
    let nothing = Default::default();
    for (field, s) in [
        ("labelSelector", &sel.labels),
        ("annotationSelector", &sel.annotations),
    ] {
        if let Some(s) = s
            && let Err(e) = selector::matches(s, &nothing)
        {
            return Err(DecoratorBuildError::Selector {
                index,
                field,
                message: e.to_string(),
            });
        }
    }
    Ok(sel)
}

fn resolve_targets(
    ctx: &Context,
    dc: &DecoratorController,
) -> Result<Vec<TargetRule>, DecoratorBuildError> {
    let mut targets: Vec<TargetRule> = Vec::new();
    for (index, rule) in dc.spec.resources.iter().enumerate() {
        let resolved = ctx.resources.get(&rule.api_version, &rule.resource)?;
        let selector = target_selector(index, rule)?;
        let ignore_status_changes = rule.ignore_status_changes.unwrap_or(false);
        let same_kind = |t: &&mut TargetRule| {
            t.resolved.api.group == resolved.api.group && t.resolved.api.kind == resolved.api.kind
        };
        if let Some(t) = targets.iter_mut().find(same_kind) {
            t.selector = selector;
            t.ignore_status_changes = ignore_status_changes;
            continue;
        }
        targets.push(TargetRule {
            informer: ctx.informers.get_split(&resolved),
            resolved,
            selector,
            ignore_status_changes,
        });
    }
    Ok(targets)
}

/// The declared attachment types: rules by group key, types for validation, keys in spec order.
type AttachmentTypes = (
    HashMap<String, ChildRule>,
    HashMap<String, ChildType>,
    Vec<String>,
);

/// `splittable`: every target is namespaced, so attachments are in their target's namespace and
/// their watches may be split by namespace.
async fn resolve_attachments(
    ctx: &Context,
    dc: &DecoratorController,
    record: crate::reconcile::apply::LastApplied,
    splittable: bool,
) -> Result<AttachmentTypes, DecoratorBuildError> {
    let mut rules = HashMap::new();
    let mut declared = HashMap::new();
    let mut keys = Vec::new();
    let schema_atomic = schema_atomic_lists(dc.metadata.annotations.as_ref());
    for rule in dc.spec.attachments.as_deref().unwrap_or_default() {
        let resolved = ctx.resources.get(&rule.api_version, &rule.resource)?;
        let method = rule
            .update_strategy
            .as_ref()
            .and_then(|s| s.method)
            .unwrap_or_default();
        let key = resolved.group_key();
        let namespaced = resolved.namespaced;
        declared.insert(key.clone(), ChildType { namespaced, method });
        let list = list_rules(ctx, &resolved, schema_atomic).await?;
        let spec_fields = rule.field_rules.as_deref().unwrap_or_default();
        let fields = checked_field_rules(ctx, &resolved, spec_fields).await?;
        let drift = crate::api::DriftPolicy::Enforce;
        let options = dynapply::Options {
            record: crate::reconcile::apply::records_last_applied(record, &list, drift, method),
            rules: list,
            fields,
            ..dynapply::Options::default()
        };
        keys.push(key.clone());
        rules.insert(
            key,
            ChildRule {
                informer: ctx.informers.get_or_split(&resolved, splittable),
                resolved,
                method,
                options,
                drift,
                memo_salt: crate::reconcile::children::next_memo_salt(),
            },
        );
    }
    Ok((rules, declared, keys))
}

async fn hook_client(
    ctx: &Context,
    dc: &DecoratorController,
    which: HookKind,
    hook: &Hook,
) -> Result<HookClient, HookError> {
    let eps = dc.spec.endpoint_configs.as_deref().unwrap_or_default();
    let client = HookClient::new(&ctx.client, which, hook, eps, &ctx.config.hook).await?;
    let name = dc.metadata.name.as_deref().unwrap_or_default();
    let metrics = ctx.wiring.metrics.clone();
    Ok(client.with_metrics(metrics, ControllerType::Decorator, name))
}

async fn hook_clients(
    ctx: &Context,
    dc: &DecoratorController,
) -> Result<DecoratorHooks, DecoratorBuildError> {
    let hooks = dc.spec.hooks.clone().unwrap_or_default();
    let sync = match &hooks.sync {
        Some(h) => hook_client(ctx, dc, HookKind::Sync, h).await?,
        None => return Err(DecoratorBuildError::NoSyncHook),
    };
    let finalize = match &hooks.finalize {
        Some(h) => Some(hook_client(ctx, dc, HookKind::Finalize, h).await?),
        None => None,
    };
    let customize = match &hooks.customize {
        Some(h) => Some(hook_client(ctx, dc, HookKind::Customize, h).await?),
        None => None,
    };
    Ok(DecoratorHooks {
        sync,
        finalize,
        customize,
    })
}

impl DecoratorState {
    /// Why kmeta leaves `target` alone, when `kmeta.dev/paused` is set on it or on this
    /// DecoratorController.
    pub fn pause_reason(&self, target: &Value) -> Option<String> {
        crate::reconcile::decide::pause_reason(target, self.controller_pause.as_deref())
    }

    /// Resolves resources, starts (or shares) watches and builds hook clients.
    pub async fn build(
        ctx: Arc<Context>,
        dc: DecoratorController,
    ) -> Result<DecoratorState, DecoratorBuildError> {
        let name = dc.metadata.name.clone().unwrap_or_default();
        let strategy = crate::reconcile::apply::strategy_for(
            dc.metadata.annotations.as_ref(),
            ctx.config.apply_strategy,
        )
        .map_err(DecoratorBuildError::ApplyStrategy)?;
        let record =
            crate::reconcile::apply::last_applied_for(dc.metadata.annotations.as_ref(), strategy)
                .map_err(DecoratorBuildError::ApplyStrategy)?;
        let hooks = hook_clients(&ctx, &dc).await?;
        let targets = resolve_targets(&ctx, &dc)?;
        let splittable = targets.iter().all(|t| t.resolved.namespaced);
        let (attachments, declared, attachment_keys) =
            resolve_attachments(&ctx, &dc, record, splittable).await?;
        let dc_json =
            crate::hook::wire::controller_object(serde_json::to_value(&dc).unwrap_or(Value::Null));
        Ok(DecoratorState {
            controller_pause: crate::reconcile::decide::controller_pause(
                "DecoratorController",
                &name,
                dc.metadata.annotations.as_ref(),
            ),
            finalizer: decide::finalizer_name(&name),
            ctx,
            name,
            dc_json,
            dc,
            targets,
            attachments,
            declared,
            attachment_keys,
            hooks,
            memory: ChildMemory::default(),
        })
    }

    /// The related-object side of target resource `rule`.
    pub fn related_source<'a>(
        &'a self,
        rule: &TargetRule,
        reader: &'a Writer,
    ) -> RelatedSource<'a> {
        RelatedSource {
            ctx: &self.ctx,
            controller: &self.dc_json,
            customize: self.hooks.customize.as_ref(),
            version: self.hooks.sync.version(),
            parent_namespaced: rule.resolved.namespaced,
            cache: &self.memory.customize_cache,
            watches: &self.memory.related,
            reader,
        }
    }

    /// The attachments as the shared child management sees them.
    pub fn child_set(&self, writer: Writer) -> Children<'_> {
        Children {
            writer,
            ctx: &self.ctx,
            controller: &self.name,
            rules: &self.attachments,
            memory: &self.memory,
            strategy: self.strategy(),
        }
    }

    /// How children are written: the controller's `kmeta.dev/apply-strategy`, else the
    /// manager's.
    pub fn strategy(&self) -> crate::reconcile::apply::ApplyStrategy {
        crate::reconcile::apply::strategy_for(
            self.dc.metadata.annotations.as_ref(),
            self.ctx.config.apply_strategy,
        )
        .unwrap_or(self.ctx.config.apply_strategy)
    }

    /// The identity the children of `target` are written as (kmeta's own, or the ServiceAccount
    /// `spec.serviceAccountName` or `--default-service-account` names), and its client.
    pub fn writer(&self, target: &Value) -> Result<Writer, SyncError> {
        let spec = &self.dc.spec;
        let sa = crate::reconcile::decide::ServiceAccountSpec {
            name: spec.service_account_name.as_deref(),
            namespace: spec.service_account_namespace.as_deref(),
        };
        Ok(self.ctx.identities.writer_for(sa, target)?)
    }
}
