//! Pure decisions every controller kind shares, one family per file: [`owner`] references,
//! [`lifecycle`] (finalizer and hook choice), [`desired`] children (validation), the child
//! [`plan`], the parent's [`status`], [`write_failure`]s and the [`hook_events`] a hook asks for. No I/O here; the executors
//! ([`crate::reconcile::children`], [`crate::reconcile::status`], each kind's `sync`) act on them.
//! Decisions of one kind only live in its folder (`composite/decide.rs`, `decorator/decide.rs`).

mod desired;
mod hook_events;
mod lifecycle;
mod owner;
mod plan;
mod status;
mod write_failure;

pub use desired::*;
pub use hook_events::*;
pub use lifecycle::*;
pub use owner::*;
pub use plan::*;
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
