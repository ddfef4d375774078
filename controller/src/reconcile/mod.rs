//! Layer 4, reconciling: the core every controller kind shares (`core`: context, events,
//! workers; `children`: child management; `status`: finalizer, status and failure writes; `circuit`: the hook circuit; `rollout`: rolling
//! updates; `related`: related objects; `unchanged`: syncs known to write nothing), pure decisions (`decide`), the CompositeController (`composite`), the
//! DecoratorController (`decorator`) and the [`manager`] that runs one controller per
//! CompositeController or DecoratorController object.

pub mod apply;
pub(crate) mod children;
pub(crate) mod circuit;
pub(crate) mod composite;
pub(crate) mod core;
pub(crate) mod decide;
pub(crate) mod decorator;
pub(crate) mod expectations;
pub(crate) mod last_applied;
pub mod manager;
pub(crate) mod related;
pub(crate) mod rollout;
pub(crate) mod status;
pub(crate) mod unchanged;

pub use apply::ApplyStrategy;
pub use expectations::CREATE_EXPECTATION_TTL;
// with the defaults its documentation names
pub use core::{
    CHILD_WRITES_IN_FLIGHT_TOTAL, Context, DiscoveryClient, MIN_RESYNC_AFTER, ManagerConfig,
    WATCH_SYNC_DEADLINE,
};
