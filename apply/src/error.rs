//! The one error type of this crate.

/// Why a [`dyn_apply`](crate::DynApply::dyn_apply) failed. Every variant names the object
/// (`kind namespace/name`) it was applying.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The desired object cannot be applied as it is: no `metadata.name`, no `apiVersion`/`kind`
    /// (a `DynamicObject` built without `types`), or a namespace the `Api` is not scoped to.
    #[error("cannot apply {object}: {reason}")]
    InvalidDesired {
        /// The object, as far as it could be named.
        object: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The desired or live object cannot be turned into JSON, or the server's answer into `K`.
    #[error("cannot {what} {object}: {source}")]
    Json {
        /// `encode` (to JSON) or `decode` (the server's answer into the Rust type).
        what: &'static str,
        /// The object.
        object: String,
        /// serde's error, naming the field.
        source: serde_json::Error,
    },
    /// The three-way merge failed (e.g. a last-applied annotation that is not JSON, or a field of
    /// the wrong type where the merge needs an object).
    #[error("cannot merge {object}: {source}")]
    Merge {
        /// The object.
        object: String,
        /// dynapply's error, naming the path.
        source: dynapply::Error,
    },
    /// The request could not be built (an invalid name or parameters).
    #[error("cannot build the {verb} request for {object}: {source}")]
    Request {
        /// `get`, `create` or `update`.
        verb: &'static str,
        /// The object.
        object: String,
        /// kube's error.
        source: kube::core::request::Error,
    },
    /// The API server refused a request or could not be reached. A 409 Conflict is retried
    /// (see [`DynApplyParams::max_conflicts`](crate::DynApplyParams::max_conflicts)) and only
    /// ends up here as [`Error::Conflicts`].
    #[error("{verb} {object}: {source}")]
    Api {
        /// `get`, `create` or `update`.
        verb: &'static str,
        /// The object.
        object: String,
        /// kube's error (boxed: it is large): [`kube::Error::Api`] carries the server's status
        /// (code, reason, message).
        source: Box<kube::Error>,
    },
    /// Every attempt met a 409 Conflict: another writer changed the object between each read
    /// and write (or kept re-creating it).
    #[error("{object} kept changing under us: {attempts} attempts ended in 409 Conflict")]
    Conflicts {
        /// The object.
        object: String,
        /// How many writes were tried.
        attempts: u32,
    },
}

impl Error {
    /// True for a 409 Conflict from the API server (an answer [`DynApply`](crate::DynApply)
    /// itself retries; a caller never sees one unless it retries on its own).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Api { source, .. } if matches!(&**source, kube::Error::Api(s) if s.code == 409))
            || matches!(self, Error::Conflicts { .. })
    }
}
