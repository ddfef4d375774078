//! kmeta: Metacontroller-compatible lambda controllers for Kubernetes.
//!
//! A `CompositeController` names a parent resource, child resources and webhooks; kmeta watches
//! parents and children, POSTs each parent with its observed children to the sync hook, and
//! applies the desired children it returns with [`dynapply`].

pub mod api;
pub mod cache;
pub mod cli;
pub mod controller;
pub mod crds;
pub mod decide;
pub mod demo;
pub mod dev;
pub mod health;
pub mod hook;
pub mod kapi;
pub mod leader;
pub mod logging;
pub mod manager;
pub mod metrics;
pub mod queue;
pub mod ratelimit;
pub mod resources;
pub mod run;
pub mod selector;
pub mod sync;
pub mod wire;

pub use controller::{Context, ManagerConfig};
