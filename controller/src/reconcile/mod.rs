//! Layer 4, reconciling. The core every controller kind shares: `core` (context, events,
//! workers), `circuit` (the hook circuit), `children` (child management), `status` (finalizer,
//! status and failure writes), `related` (related objects), `expectations` (waits on kmeta's own
//! writes), the memory kept between syncs (`memory`, `last_applied`, `futile`, `unchanged`), and
//! the pure decisions (`decide`, `apply`; `rollout`, the rolling updates of composite children). One folder per controller
//! kind — `composite` (CompositeController), `decorator` (DecoratorController) — holds its own
//! decisions, build, sync and triggers; the [`manager`] runs one controller per
//! CompositeController or DecoratorController object.

pub(crate) mod apply;
pub(crate) mod children;
pub(crate) mod circuit;
pub(crate) mod composite;
pub(crate) mod config;
pub(crate) mod core;
pub(crate) mod decide;
pub(crate) mod decorator;
pub(crate) mod error;
pub(crate) mod expectations;
pub(crate) mod futile;
pub(crate) mod identity;
pub(crate) mod last_applied;
pub mod manager;
pub(crate) mod memory;
pub(crate) mod related;
pub(crate) mod rollout;
pub(crate) mod start;
pub(crate) mod status;
pub(crate) mod triggers;
pub(crate) mod unchanged;

pub use apply::{
    ApplyStrategy, LAST_APPLIED_OPTION, MAX_FIELD_MANAGER, STRATEGY_ANNOTATION, field_manager,
};
pub use expectations::CREATE_EXPECTATION_TTL;
// with the defaults its documentation names
pub use core::{
    CHILD_WRITES_IN_FLIGHT_TOTAL, Context, MIN_RESYNC_AFTER, ManagerConfig, WATCH_SYNC_DEADLINE,
    Wiring,
};
