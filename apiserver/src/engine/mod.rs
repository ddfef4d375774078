//! API semantics over [`crate::store::Storage`]: create/update/patch/delete with Kubernetes
//! rules, status and scale subresources, generation, finalizers, garbage collection, namespaces
//! and CRDs.
//!
//! Every operation runs under one lock and settles all consequences (garbage collection,
//! namespace and CRD cleanup) before returning, so results are deterministic. The operations are
//! methods of [`Inner`], one module per question: how an object is created ([`create`]), how an
//! update is committed ([`commit`], reached from [`update`] and [`scale`]), how deletion starts
//! ([`delete`]) and settles ([`gc`]), how a list is read ([`list`]).

mod body;
mod commit;
mod create;
mod delete;
mod gc;
mod inner;
mod list;
mod object;
mod policy;
mod request;
mod scale;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::too_many_lines)]
mod tests;
mod update;

pub(crate) use inner::Inner;
pub(crate) use list::{ListOpts, ListResult, RV_TOO_LARGE_RETRY_SECONDS};
pub(crate) use request::{
    DeleteOpts, Deleted, External, FieldValidation, Propagation, Req, WriteCheck, WriteOpts,
};
