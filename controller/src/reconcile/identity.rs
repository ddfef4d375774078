//! Who a sync writes children (attachments) and reads related objects as: kmeta's own client,
//! or one impersonating the controller's ServiceAccount (built once per ServiceAccount, then
//! shared), with the memory of what each ServiceAccount may read. The writers ask here for a
//! [`Writer`]; the choice of identity itself is the pure [`decide::impersonation_for`]
//! (`docs/design/per-controller-service-account.md`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::object::meta_str;
use crate::reconcile::decide::{self, IdentityError, ServiceAccountRef, ServiceAccountSpec};

/// How long a ServiceAccount's answer to "may it list this resource here" is kept: a right
/// granted or revoked takes effect within this (30 s, kmeta's).
pub const READ_ACCESS_TTL: Duration = Duration::from_secs(30);

/// The identity a sync writes children (attachments) and reads related objects as, with the
/// client that makes those requests as it.
#[derive(Clone)]
pub struct Writer {
    /// kmeta's client, or one impersonating `identity`.
    pub client: kube::Client,
    /// The ServiceAccount impersonated; `None`: kmeta's own identity.
    pub identity: Option<ServiceAccountRef>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// The identities of a manager's syncs: the impersonating clients and the read-access memory.
pub(crate) struct Identities {
    /// kmeta's own client, which the impersonating clients are built on (its layers: rate
    /// limit, write fence, User-Agent, metrics).
    base: kube::Client,
    /// `--default-service-account`: the ServiceAccount a controller naming none writes as.
    default_service_account: Option<String>,
    /// One impersonating client per ServiceAccount.
    clients: Mutex<HashMap<ServiceAccountRef, kube::Client>>,
    /// Whether a ServiceAccount may list a related resource (watch key) in a namespace, and
    /// when that was asked.
    read_access: Mutex<HashMap<ReadKey, (bool, Instant)>>,
}

/// A ServiceAccount, a resource (watch key) and a namespace (`""`: the cluster scope).
type ReadKey = (ServiceAccountRef, String, String);

impl Identities {
    /// Identities built on `base`, with `--default-service-account`'s name.
    pub(crate) fn new(base: kube::Client, default_service_account: Option<String>) -> Self {
        Identities {
            base,
            default_service_account,
            clients: Mutex::default(),
            read_access: Mutex::default(),
        }
    }

    /// The identity a controller whose spec says `spec` writes the children of `parent` as
    /// ([`decide::impersonation_for`], with `--default-service-account`), and its client.
    pub(crate) fn writer_for(
        &self,
        spec: ServiceAccountSpec<'_>,
        parent: &Value,
    ) -> Result<Writer, IdentityError> {
        let (namespace, default) = (
            meta_str(parent, "namespace"),
            self.default_service_account.as_deref(),
        );
        // the parent is named only in the error of a cluster-scoped one: described for it alone
        let identity = match decide::impersonation_for(spec, "", namespace, default) {
            Err(IdentityError::ClusterScoped { .. }) => {
                let parent = crate::object::describe(parent);
                decide::impersonation_for(spec, &parent, namespace, default)
            }
            found => found,
        }?;
        self.writer(identity)
    }

    /// The client and identity writes as `identity` are made with: kmeta's own client for
    /// `None`, else the impersonating client of that ServiceAccount (built once, then shared).
    pub(crate) fn writer(
        &self,
        identity: Option<ServiceAccountRef>,
    ) -> Result<Writer, IdentityError> {
        let Some(sa) = identity else {
            return Ok(Writer {
                client: self.base.clone(),
                identity: None,
            });
        };
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let client = match clients.get(&sa) {
            Some(c) => c.clone(),
            None => {
                let c = crate::ops::client::impersonating(&self.base, &sa.username())
                    .map_err(|_| IdentityError::Impersonation(sa.to_string()))?;
                clients.insert(sa.clone(), c.clone());
                c
            }
        };
        Ok(Writer {
            client,
            identity: Some(sa),
        })
    }

    /// What `sa` was answered, less than [`READ_ACCESS_TTL`] ago, when it asked whether it may
    /// list `resource` (a watch key) in `namespace`.
    pub(crate) fn known_read_access(
        &self,
        sa: &ServiceAccountRef,
        resource: &str,
        namespace: &str,
    ) -> Option<bool> {
        let key = (sa.clone(), resource.to_owned(), namespace.to_owned());
        self.read_access.lock().ok().and_then(|m| {
            m.get(&key)
                .filter(|(_, at)| at.elapsed() < READ_ACCESS_TTL)
                .map(|(allowed, _)| *allowed)
        })
    }

    /// Remembers the answer to whether `sa` may list `resource` in `namespace`.
    pub(crate) fn remember_read_access(
        &self,
        sa: &ServiceAccountRef,
        resource: &str,
        namespace: &str,
        allowed: bool,
    ) {
        let key = (sa.clone(), resource.to_owned(), namespace.to_owned());
        if let Ok(mut m) = self.read_access.lock() {
            m.insert(key, (allowed, Instant::now()));
        }
    }
}
