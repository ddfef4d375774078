//! Layer 4, reconciling: the core every controller kind shares ([`core`]: context, events,
//! workers), pure decisions ([`decide`]), the CompositeController ([`composite`]) and the
//! [`manager`] that runs one controller per CompositeController object.

pub mod composite;
pub mod core;
pub mod decide;
pub mod manager;

pub use core::{Context, ManagerConfig};
