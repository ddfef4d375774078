//! Resource resolution through discovery, refreshed periodically.

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

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
    #[error("discovery: can't find resource {resource} in apiVersion {api_version}{}",
        .suggestion.as_ref().map(|s| format!("; did you mean {s}?")).unwrap_or_default())]
    NotFound {
        /// apiVersion.
        api_version: String,
        /// Plural name.
        resource: String,
        /// A close served resource (`apps/v1 deployments`), if any.
        suggestion: Option<String>,
    },
    /// Discovery failed.
    #[error("discovery: {}", crate::runtime::api_error::describe(.0))]
    Discovery(#[from] kube::Error),
}

/// The discovered resources: apiVersion → plural → resource.
#[derive(Debug, Default)]
pub struct Resources {
    map: RwLock<HashMap<String, HashMap<String, Resolved>>>,
    /// Successful refreshes so far (what was read after discovery, as the OpenAPI v3 index, is
    /// read again after the next one).
    generation: AtomicU64,
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
        self.generation.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Successful refreshes so far.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// Looks up `apiVersion` + plural `resource`.
    pub fn get(&self, api_version: &str, resource: &str) -> Result<Resolved, ResourceError> {
        let map = self.map.read().ok();
        let found = map
            .as_ref()
            .and_then(|m| m.get(api_version).and_then(|v| v.get(resource)).cloned());
        found.ok_or_else(|| ResourceError::NotFound {
            api_version: api_version.to_owned(),
            resource: resource.to_owned(),
            suggestion: map.as_ref().and_then(|m| suggest(m, api_version, resource)),
        })
    }
}

/// A served resource close to `api_version` + `resource` that was not found: the plural of a
/// kind or singular name given instead (`ConfigMap`, `deployment`), a plural with a typo (at most
/// two edits), or the same plural in another apiVersion. Shown as `apiVersion plural`.
pub fn suggest(
    served: &HashMap<String, HashMap<String, Resolved>>,
    api_version: &str,
    resource: &str,
) -> Option<String> {
    let wanted = resource.to_ascii_lowercase();
    let show = |r: &Resolved| format!("{} {}", r.api.api_version, r.api.plural);
    if let Some(group) = served.get(api_version) {
        let by_name = group.values().find(|r| {
            r.api.kind.eq_ignore_ascii_case(&wanted) || r.api.plural.eq_ignore_ascii_case(&wanted)
        });
        if let Some(r) = by_name {
            return Some(show(r));
        }
        let close = group
            .values()
            .map(|r| (strsim::levenshtein(&wanted, &r.api.plural), r))
            .filter(|(d, _)| *d <= 2)
            .min_by(|a, b| {
                a.0.cmp(&b.0)
                    .then_with(|| a.1.api.plural.cmp(&b.1.api.plural))
            });
        if let Some((_, r)) = close {
            return Some(show(r));
        }
    }
    let mut elsewhere: Vec<&Resolved> = served.values().filter_map(|g| g.get(resource)).collect();
    elsewhere.sort_by(|a, b| a.api.api_version.cmp(&b.api.api_version));
    elsewhere.first().map(|r| show(r))
}

#[cfg(test)]
mod suggest_tests {
    use super::*;
    use kube::core::{ApiResource, GroupVersionKind};

    fn served(list: &[(&str, &str, &str)]) -> HashMap<String, HashMap<String, Resolved>> {
        let mut m: HashMap<String, HashMap<String, Resolved>> = HashMap::new();
        for (av, kind, plural) in list {
            let (g, v) = av.rsplit_once('/').unwrap_or(("", av));
            let r = Resolved {
                api: ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, kind), plural),
                namespaced: true,
                has_status: false,
            };
            m.entry((*av).to_owned())
                .or_default()
                .insert((*plural).to_owned(), r);
        }
        m
    }

    #[test]
    fn suggests_the_plural_a_typo_or_another_api_version() {
        let m = served(&[
            ("v1", "ConfigMap", "configmaps"),
            ("v1", "Secret", "secrets"),
            ("apps/v1", "Deployment", "deployments"),
        ]);
        let s = |av: &str, r: &str| suggest(&m, av, r);
        assert_eq!(s("v1", "ConfigMap").as_deref(), Some("v1 configmaps"));
        assert_eq!(s("v1", "configmap").as_deref(), Some("v1 configmaps"));
        assert_eq!(
            s("apps/v1", "deploymnets").as_deref(),
            Some("apps/v1 deployments")
        );
        assert_eq!(
            s("v1", "deployments").as_deref(),
            Some("apps/v1 deployments")
        );
        assert_eq!(s("v1", "widgets"), None);
        let e = ResourceError::NotFound {
            api_version: "v1".into(),
            resource: "configmap".into(),
            suggestion: s("v1", "configmap"),
        };
        assert_eq!(
            e.to_string(),
            "discovery: can't find resource configmap in apiVersion v1; did you mean v1 configmaps?"
        );
    }
}
