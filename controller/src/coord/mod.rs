//! Layer 3, coordinating replicas: leader election ([`leader`]), the write [`fence`] that keeps a
//! leader that lost its Lease from writing, [`shard`]ing parents across active replicas with one
//! Lease per bucket, and the work clients whose writes pass the fence or the bucket's check
//! ([`client`]).
//!
//! The reconcile core knows none of this: it asks a [`crate::coord::scope::WorkScope`] whether a
//! key is this process's work and in which write scope to sync it (`docs/design/sharding.md`).

pub mod client;
pub mod fence;
pub mod leader;
pub mod scope;
pub mod shard;
