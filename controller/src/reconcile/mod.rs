//! Layer 4, reconciling: the core every controller kind shares (`core`: context, events,
//! workers; `children`: child management; `status`: finalizer, status and failure writes; `circuit`: the hook circuit), pure decisions (`decide`), the CompositeController (`composite`) and the
//! [`manager`] that runs one controller per CompositeController object.

pub(crate) mod children;
pub(crate) mod circuit;
pub(crate) mod composite;
pub(crate) mod core;
pub(crate) mod decide;
pub mod manager;
pub(crate) mod rollout;
pub(crate) mod status;

pub use core::{Context, ManagerConfig};
