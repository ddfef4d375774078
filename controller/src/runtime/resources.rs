//! Resource resolution through discovery, refreshed periodically.

use std::collections::HashMap;
use std::sync::RwLock;

use kube::discovery::{ApiResource, Discovery, Scope};

/// A resolved API resource.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// Group, version, kind, plural.
    pub api: ApiResource,
    /// Namespaced (true) or cluster-scoped.
    pub namespaced: bool,
    /// Whether the `status` subresource exists.
    pub has_status: bool,
}

impl Resolved {
    /// `<Kind>.<apiVersion>`.
    pub fn group_key(&self) -> String {
        kmeta_wire::group_key(&self.api.api_version, &self.api.kind)
    }
    /// `apiVersion/plural`, the identity of a watch.
    pub fn watch_key(&self) -> String {
        format!("{}/{}", self.api.api_version, self.api.plural)
    }
}

/// Discovery errors.
#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    /// The resource is not (yet) served.
    #[error("discovery: can't find resource {resource} in apiVersion {api_version}")]
    NotFound {
        /// apiVersion.
        api_version: String,
        /// Plural name.
        resource: String,
    },
    /// Discovery failed.
    #[error("discovery: {0}")]
    Discovery(#[from] kube::Error),
}

/// The discovered resources: apiVersion → plural → resource.
#[derive(Debug, Default)]
pub struct Resources {
    map: RwLock<HashMap<String, HashMap<String, Resolved>>>,
}

impl Resources {
    /// Runs discovery and replaces the map (kept as is on failure).
    pub async fn refresh(&self, client: &kube::Client) -> Result<(), ResourceError> {
        let d = Discovery::new(client.clone()).run().await?;
        let mut map: HashMap<String, HashMap<String, Resolved>> = HashMap::new();
        for group in d.groups() {
            for version in group.versions() {
                for (api, caps) in group.versioned_resources(version) {
                    let has_status = caps.subresources.iter().any(|(s, _)| s.plural == "status");
                    let r = Resolved {
                        namespaced: caps.scope == Scope::Namespaced,
                        has_status,
                        api: api.clone(),
                    };
                    map.entry(api.api_version.clone())
                        .or_default()
                        .insert(api.plural.clone(), r);
                }
            }
        }
        if let Ok(mut m) = self.map.write() {
            *m = map;
        }
        Ok(())
    }

    /// Looks up `apiVersion` + plural `resource`.
    pub fn get(&self, api_version: &str, resource: &str) -> Result<Resolved, ResourceError> {
        self.map
            .read()
            .ok()
            .and_then(|m| m.get(api_version).and_then(|v| v.get(resource)).cloned())
            .ok_or_else(|| ResourceError::NotFound {
                api_version: api_version.to_owned(),
                resource: resource.to_owned(),
            })
    }
}
