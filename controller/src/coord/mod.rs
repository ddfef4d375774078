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

/// Tests: kmeta-apiserver on a runtime of its own (one worker thread), so that a test may block
/// the work's runtime, as a saturated one is, without stopping the server.
#[cfg(all(test, feature = "embedded-apiserver"))]
pub(crate) fn server_apart()
-> anyhow::Result<(tokio::runtime::Runtime, kmeta_apiserver::TestServer)> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let server = runtime.block_on(kmeta_apiserver::TestServer::start())?;
    Ok((runtime, server))
}
