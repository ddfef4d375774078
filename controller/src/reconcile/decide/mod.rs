//! Pure decisions every controller kind shares, one family per file: [`owner`] references,
//! [`lifecycle`] (finalizer and hook choice), [`desired`] children (validation), the child
//! [`plan`] and the [`gate`] each planned write passes, the parent's [`status`] and the [`record`] of its last sync, [`write_failure`]s, the
//! [`hook_events`] a hook asks for, the ServiceAccount a controller's writes are made as
//! ([`identity`]), what a parent applied to a child by its `managedFields` ([`owned`]) and children
//! owned by labels where an owner reference cannot hold them ([`label_owned`]). No I/O here; the executors
//! ([`crate::reconcile::children`], [`crate::reconcile::status`], each kind's `sync`) act on them.
//! Decisions of one kind only live in its folder (`composite/decide.rs`, `decorator/decide.rs`).

mod desired;
mod field_rules;
mod gate;
mod hook_events;
mod identity;
mod label_owned;
mod lifecycle;
mod owned;
mod owner;
mod plan;
mod record;
mod status;
mod write_failure;

pub use desired::*;
pub use field_rules::*;
pub use gate::*;
pub use hook_events::*;
pub use identity::*;
pub use label_owned::*;
pub use lifecycle::*;
pub use owned::*;
pub use owner::*;
pub use plan::*;
pub use record::*;
pub use status::*;
pub use write_failure::*;

use crate::runtime::selector::SelectorError;

/// Errors found while deciding.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// The parent's selector is missing/empty or invalid.
    #[error("parent {parent}: {message}")]
    Selector {
        /// `namespace/name` of the parent.
        parent: String,
        /// What is wrong.
        message: String,
    },
    /// A desired child breaks a rule; nothing is written.
    #[error("desired child {child}: {message}")]
    InvalidChild {
        /// `Kind.apiVersion namespace/name`.
        child: String,
        /// The rule it breaks.
        message: String,
    },
    /// A label selector failed to evaluate.
    #[error(transparent)]
    BadSelector(#[from] SelectorError),
    /// dynapply refused an object.
    #[error("applying {child}: {source}")]
    Apply {
        /// The child.
        child: String,
        /// Cause.
        source: dynapply::Error,
    },
}

/// Objects the decision tests share: a namespaced parent `p` (uid `u1`, generation 3, selector
/// `app=p`) and a ConfigMap child.
#[cfg(test)]
pub(crate) mod fixtures {
    use serde_json::{Value, json};

    pub(crate) fn parent() -> Value {
        json!({"apiVersion": "ctl.example.com/v1", "kind": "Thing",
               "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "generation": 3},
               "spec": {"selector": {"matchLabels": {"app": "p"}}}})
    }

    /// ConfigMap `name` in `ns` with `labels`, controlled by `owner` (a uid) when given.
    pub(crate) fn child(name: &str, labels: Value, owner: Option<&str>) -> Value {
        let mut c = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "labels": labels}});
        if let Some(uid) = owner {
            c["metadata"]["ownerReferences"] = json!([{"apiVersion": "x/v1", "kind": "X", "name": "o",
                "uid": uid, "controller": true}]);
        }
        c
    }
}
