//! Finalizer and hook choice: which hook a sync calls, whether it may manage children, and what
//! happens to the finalizer before and after the hook (shared by both kinds, as Metacontroller's
//! composite and decorator follow the same rules).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::object::{has_finalizer, is_deleting, meta};

// ---------------------------------------------------------------------------------------------
// finalizer and hook choice

/// The annotation that pauses kmeta, with the value `"true"`: on a parent (or decorator target),
/// for that object; on a CompositeController or DecoratorController, for all of its objects. A
/// paused object gets no hook call, no child write and no finalizer change (kmeta's own
/// extension; Metacontroller has none).
pub const PAUSED_ANNOTATION: &str = "kmeta.dev/paused";

/// Whether a controller object's `annotations` carry `kmeta.dev/paused: "true"`.
pub fn paused(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(PAUSED_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// Why every object of the controller `kind` `name` is left alone, when its `annotations` pause
/// it (read once, when the controller is built: a change restarts it).
pub fn controller_pause(
    kind: &str,
    name: &str,
    annotations: Option<&BTreeMap<String, String>>,
) -> Option<String> {
    paused(annotations).then(|| format!("{PAUSED_ANNOTATION} is \"true\" on its {kind} {name}"))
}

/// Why kmeta leaves `obj` alone, when it does: `kmeta.dev/paused` on the object itself, else
/// its controller's [`controller_pause`].
pub fn pause_reason(obj: &Value, controller_pause: Option<&str>) -> Option<String> {
    let own = obj
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(PAUSED_ANNOTATION))
        .and_then(Value::as_str);
    if own == Some("true") {
        return Some(format!("{PAUSED_ANNOTATION} is \"true\" on this object"));
    }
    controller_pause.map(str::to_owned)
}

/// What to do with our finalizer before calling a hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalizerAction {
    /// Add it (finalize hook, parent alive, not yet present).
    Add,
    /// Remove it (no finalize hook, present).
    Remove,
    /// Leave it.
    Keep,
}

/// Before the hook: add when a finalize hook exists and the parent is alive; remove when there
/// is no finalize hook.
pub fn finalizer_before_hook(
    has_finalize_hook: bool,
    deleting: bool,
    present: bool,
) -> FinalizerAction {
    match (has_finalize_hook, deleting, present) {
        (true, false, false) => FinalizerAction::Add,
        (false, _, true) => FinalizerAction::Remove,
        _ => FinalizerAction::Keep,
    }
}

/// After the hook: remove when the finalize hook said `finalized` and the finalizer is present.
pub fn finalizer_after_hook(finalizing: bool, finalized: bool, present: bool) -> FinalizerAction {
    if finalizing && finalized && present {
        FinalizerAction::Remove
    } else {
        FinalizerAction::Keep
    }
}

/// Which hook a sync calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookChoice {
    /// The sync hook.
    Sync,
    /// The finalize hook (parent being deleted, or no longer selected, with our finalizer).
    Finalize,
    /// Nothing to do for this parent.
    Skip,
}

/// Metacontroller's rule (`syncParentObject`, `shouldCallFinalizeHook` in
/// `pkg/controller/composite`): a parent that is neither selected nor carries our finalizer is
/// skipped; otherwise the finalize hook is called when one exists and the parent is being
/// deleted or no longer matches the labelSelector, else the sync hook — for a parent being
/// deleted too, to report its status (its children are then left alone:
/// [`may_manage_children`]).
pub fn choose_hook(
    has_finalize_hook: bool,
    deleting: bool,
    selected: bool,
    has_our_finalizer: bool,
) -> HookChoice {
    if !selected && !has_our_finalizer {
        HookChoice::Skip
    } else if has_finalize_hook && (deleting || !selected) {
        HookChoice::Finalize
    } else {
        HookChoice::Sync
    }
}

/// Children may be managed while the parent is alive, or while it is being finalized by our
/// finalize hook (no foreground/orphan GC finalizer).
pub fn may_manage_children(parent: &Value, finalizing: bool, our_finalizer: &str) -> bool {
    if !is_deleting(parent) {
        return true;
    }
    finalizing
        && has_finalizer(parent, our_finalizer)
        && !has_finalizer(parent, "foregroundDeletion")
        && !has_finalizer(parent, "orphan")
}

/// With `ignoreStatusChanges`, a parent update is relevant only when generation, labels or
/// annotations differ, or the parent is being deleted (any update then, as Metacontroller's
/// `updateParentObject`: a status-only change during finalization still syncs).
pub fn parent_update_relevant(old: &Value, new: &Value) -> bool {
    is_deleting(new)
        || ["generation", "labels", "annotations"]
            .iter()
            .any(|f| meta(old, f) != meta(new, f))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::reconcile::decide::fixtures::parent;
    use serde_json::json;

    #[test]
    fn paused_by_the_object_or_its_controller() {
        let mut p = parent();
        assert_eq!(pause_reason(&p, None), None);
        let on =
            std::collections::BTreeMap::from([(PAUSED_ANNOTATION.to_owned(), "true".to_owned())]);
        let by_cc = controller_pause("CompositeController", "cc", Some(&on));
        assert_eq!(
            pause_reason(&p, by_cc.as_deref()).unwrap(),
            "kmeta.dev/paused is \"true\" on its CompositeController cc"
        );
        let off =
            std::collections::BTreeMap::from([(PAUSED_ANNOTATION.to_owned(), "yes".to_owned())]);
        assert_eq!(
            controller_pause("CompositeController", "cc", Some(&off)),
            None
        );
        p["metadata"]["annotations"] = json!({"kmeta.dev/paused": "false"});
        assert_eq!(pause_reason(&p, None), None, "only \"true\" pauses");
        p["metadata"]["annotations"] = json!({"kmeta.dev/paused": "true"});
        assert_eq!(
            pause_reason(&p, None).unwrap(),
            "kmeta.dev/paused is \"true\" on this object"
        );
    }

    #[test]
    fn finalizer_decisions() {
        use FinalizerAction::*;
        assert_eq!(finalizer_before_hook(true, false, false), Add);
        assert_eq!(finalizer_before_hook(true, false, true), Keep);
        assert_eq!(finalizer_before_hook(true, true, false), Keep);
        assert_eq!(finalizer_before_hook(false, false, true), Remove);
        assert_eq!(finalizer_before_hook(false, true, false), Keep);
        assert_eq!(finalizer_after_hook(true, true, true), Remove);
        assert_eq!(finalizer_after_hook(true, false, true), Keep);
        assert_eq!(finalizer_after_hook(false, true, true), Keep);
    }

    #[test]
    fn hook_choice() {
        assert_eq!(choose_hook(false, false, true, false), HookChoice::Sync);
        // deleting without a finalize hook: synced for its status (children left alone)
        assert_eq!(choose_hook(false, true, true, false), HookChoice::Sync);
        assert_eq!(choose_hook(false, false, false, false), HookChoice::Skip);
        assert_eq!(choose_hook(false, true, false, false), HookChoice::Skip);
        assert_eq!(choose_hook(true, true, true, true), HookChoice::Finalize);
        assert_eq!(choose_hook(true, false, false, true), HookChoice::Finalize);
        // our finalizer removed, another one keeps the parent: Metacontroller calls finalize
        // again on each change
        assert_eq!(choose_hook(true, true, true, false), HookChoice::Finalize);
        assert_eq!(choose_hook(true, true, false, false), HookChoice::Skip);
        assert_eq!(choose_hook(true, false, true, true), HookChoice::Sync);
    }

    #[test]
    fn manage_children_while_deleting_only_when_finalizing() {
        let f = "metacontroller.io/compositecontroller-cc";
        let mut p = parent();
        assert!(may_manage_children(&p, false, f));
        p["metadata"]["deletionTimestamp"] = json!("t");
        assert!(!may_manage_children(&p, true, f));
        p["metadata"]["finalizers"] = json!([f]);
        assert!(may_manage_children(&p, true, f));
        p["metadata"]["finalizers"] = json!([f, "foregroundDeletion"]);
        assert!(!may_manage_children(&p, true, f));
    }

    #[test]
    fn status_only_updates_are_irrelevant() {
        let a = parent();
        let mut b = a.clone();
        b["status"] = json!({"x": 1});
        b["metadata"]["resourceVersion"] = json!("9");
        assert!(!parent_update_relevant(&a, &b));
        b["metadata"]["labels"] = json!({"l": "1"});
        assert!(parent_update_relevant(&a, &b));
        // while it is deleted, a status-only change is relevant too (Metacontroller)
        let mut deleting = a.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-11-27T00:00:00Z");
        let mut later = deleting.clone();
        later["status"] = json!({"x": 2});
        assert!(parent_update_relevant(&deleting, &later));
    }
}
