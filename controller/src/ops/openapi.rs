//! The API server's OpenAPI v3 documents, read for the list rules of child kinds
//! (`docs/design/list-rules-from-openapi.md`).
//!
//! `/openapi/v3` names each group-version's document with a `serverRelativeURL` carrying a hash
//! of its content. The index is read again on the first look-up after each discovery refresh
//! (the caller passes discovery's generation); a group-version document only when its URL
//! changed, as client-go caches them. Look-ups happen when a controller is built, never on the
//! sync path. Every read is counted in `kmeta_openapi_fetches{document}`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::ops::Metrics;

/// Why a kind's list rules do not come from the API server's OpenAPI v3 document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotServed {
    /// The server answers `/openapi/v3` with 404.
    NoOpenApi,
    /// kmeta may not read it (403).
    Forbidden,
    /// The index names no document for the group-version.
    NoDocument,
    /// The document has no schema for the kind (a CRD the server has not published yet).
    NoSchema,
}

impl NotServed {
    fn describe(&self) -> &'static str {
        match self {
            NotServed::NoOpenApi => "the API server serves no /openapi/v3",
            NotServed::Forbidden => {
                "kmeta may not read /openapi/v3 (grant get on the nonResourceURLs /openapi/v3 and /openapi/v3/*, as `kmeta rbac` does)"
            }
            NotServed::NoDocument => "/openapi/v3 names no document for its group-version",
            NotServed::NoSchema => "its group-version's OpenAPI v3 document has no schema for it",
        }
    }
}

/// The group-version part of OpenAPI v3 paths: `api/v1` for the core group, else
/// `apis/<group>/<version>`.
pub fn group_version_path(api_version: &str) -> String {
    match api_version.split_once('/') {
        Some((group, version)) => format!("apis/{group}/{version}"),
        None => format!("api/{api_version}"),
    }
}

/// The `serverRelativeURL` of each group-version in a `/openapi/v3` answer.
pub fn parse_index(index: &Value) -> HashMap<String, String> {
    index
        .get("paths")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(path, entry)| {
            let url = entry.get("serverRelativeURL")?.as_str()?;
            Some((path.clone(), url.to_owned()))
        })
        .collect()
}

/// The index as last read: discovery's generation then, and the URLs (`None`: not served).
#[derive(Debug)]
struct Index {
    generation: u64,
    urls: Result<HashMap<String, String>, NotServed>,
}

/// The documents read so far, shared by every controller of the process.
#[derive(Debug, Default)]
pub struct OpenApiDocs {
    index: Mutex<Option<Arc<Index>>>,
    /// group-version path → (the URL it was read from, the document).
    docs: Mutex<HashMap<String, (String, Arc<Value>)>>,
    fallback_logged: AtomicBool,
}

impl OpenApiDocs {
    /// The list rules of `kind` of `api_version` from the server's OpenAPI v3 document, or why
    /// there are none (the caller then falls back; [`OpenApiDocs::log_fallback`]). `generation`
    /// is discovery's: a newer one reads the index again. Errors are the server's other answers
    /// (5xx, transport), worth a retry.
    pub async fn list_rules(
        &self,
        client: &kube::Client,
        metrics: &Metrics,
        generation: u64,
        api_version: &str,
        kind: &str,
    ) -> Result<Result<dynapply::ListRules, NotServed>, kube::Error> {
        let doc = match self
            .group_version(client, metrics, generation, api_version)
            .await?
        {
            Ok(doc) => doc,
            Err(why) => return Ok(Err(why)),
        };
        Ok(
            dynapply::ListRules::from_openapi_v3(&doc, api_version, kind)
                .ok_or(NotServed::NoSchema),
        )
    }

    /// The OpenAPI v3 document of `api_version`'s group-version (read once per URL), or why
    /// there is none; as [`OpenApiDocs::list_rules`].
    pub async fn group_version(
        &self,
        client: &kube::Client,
        metrics: &Metrics,
        generation: u64,
        api_version: &str,
    ) -> Result<Result<Arc<Value>, NotServed>, kube::Error> {
        let index = self.index(client, metrics, generation).await?;
        let urls = match &index.urls {
            Ok(urls) => urls,
            Err(why) => return Ok(Err(why.clone())),
        };
        let path = group_version_path(api_version);
        let Some(url) = urls.get(&path) else {
            return Ok(Err(NotServed::NoDocument));
        };
        self.document(client, metrics, &path, url).await
    }

    /// Logs that `resource` uses kmeta's built-in list rules: the first time at `info`, then at
    /// `debug`.
    pub fn log_fallback(&self, resource: &str, why: &NotServed) {
        if self.fallback_logged.swap(true, Ordering::Relaxed) {
            tracing::debug!(
                resource,
                why = why.describe(),
                "list rules: built-in fallback"
            );
        } else {
            tracing::info!(
                resource,
                why = why.describe(),
                "list rules of a child kind from kmeta's built-in table, not the API server's OpenAPI v3 (logged once)"
            );
        }
    }

    async fn index(
        &self,
        client: &kube::Client,
        metrics: &Metrics,
        generation: u64,
    ) -> Result<Arc<Index>, kube::Error> {
        let cached = self.index.lock().ok().and_then(|i| i.clone());
        if let Some(index) = cached.filter(|i| i.generation == generation) {
            return Ok(index);
        }
        metrics.openapi_fetch("index");
        let urls = get_json(client, "/openapi/v3")
            .await?
            .map(|v| parse_index(&v));
        let index = Arc::new(Index { generation, urls });
        if let Ok(mut slot) = self.index.lock() {
            *slot = Some(index.clone());
        }
        Ok(index)
    }

    async fn document(
        &self,
        client: &kube::Client,
        metrics: &Metrics,
        path: &str,
        url: &str,
    ) -> Result<Result<Arc<Value>, NotServed>, kube::Error> {
        let cached = self.docs.lock().ok().and_then(|d| {
            d.get(path)
                .filter(|(read_from, _)| read_from == url)
                .map(|(_, doc)| doc.clone())
        });
        if let Some(doc) = cached {
            return Ok(Ok(doc));
        }
        metrics.openapi_fetch("group_version");
        let doc = match get_json(client, url).await? {
            Ok(doc) => Arc::new(doc),
            Err(NotServed::NoOpenApi) => return Ok(Err(NotServed::NoDocument)),
            Err(why) => return Ok(Err(why)),
        };
        if let Ok(mut docs) = self.docs.lock() {
            docs.insert(path.to_owned(), (url.to_owned(), doc.clone()));
        }
        Ok(Ok(doc))
    }
}

/// GETs `url` as JSON: 404 and 403 are answers (not served, forbidden), other errors are errors.
async fn get_json(
    client: &kube::Client,
    url: &str,
) -> Result<Result<Value, NotServed>, kube::Error> {
    let request = http::Request::get(url)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    match client.request::<Value>(request).await {
        Ok(v) => Ok(Ok(v)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Err(NotServed::NoOpenApi)),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Err(NotServed::Forbidden)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_and_index() {
        assert_eq!(group_version_path("v1"), "api/v1");
        assert_eq!(group_version_path("apps/v1"), "apis/apps/v1");
        let index = json!({"paths": {
            "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=AB"},
            "apis/apps/v1": {"serverRelativeURL": "/openapi/v3/apis/apps/v1?hash=CD"},
            "version": {},
        }});
        let urls = parse_index(&index);
        assert_eq!(urls.len(), 2);
        assert_eq!(urls["apis/apps/v1"], "/openapi/v3/apis/apps/v1?hash=CD");
        assert!(parse_index(&json!("nope")).is_empty());
        assert!(NotServed::Forbidden.describe().contains("nonResourceURLs"));
    }
}

#[cfg(all(test, feature = "embedded-apiserver"))]
#[allow(clippy::unwrap_used)]
mod server_tests {
    use super::*;
    use dynapply::ListRule;

    /// Against kmeta-apiserver: the index is read once per discovery generation, a document once
    /// per hash; what the server does not describe is an answer, not an error.
    #[tokio::test]
    async fn documents_are_read_once_per_hash_and_the_index_once_per_discovery() {
        let server = kmeta_apiserver::TestServer::start().await.unwrap();
        let client = server.client();
        let metrics = Metrics::default();
        let docs = OpenApiDocs::default();
        let rules = |generation: u64, api_version: &'static str, kind: &'static str| {
            docs.list_rules(&client, &metrics, generation, api_version, kind)
        };
        let deployment = rules(1, "apps/v1", "Deployment").await.unwrap().unwrap();
        assert_eq!(
            deployment.get("spec.template.spec.containers"),
            Some(&ListRule::Map(vec!["name".to_owned()]))
        );
        assert_eq!(metrics.openapi_fetches(), 2, "the index and apps/v1");
        // same generation, same document: nothing read
        assert!(rules(1, "apps/v1", "StatefulSet").await.unwrap().is_ok());
        assert_eq!(metrics.openapi_fetches(), 2);
        // after a discovery refresh: the index again, the unchanged document not
        assert!(rules(2, "apps/v1", "Deployment").await.unwrap().is_ok());
        assert_eq!(metrics.openapi_fetches(), 3);
        // a group-version served without built-in schemas, and one not served
        let crd = rules(2, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
            .await
            .unwrap();
        assert_eq!(crd.err(), Some(NotServed::NoSchema));
        let nope = rules(2, "nope.example.com/v1", "Thing").await.unwrap();
        assert_eq!(nope.err(), Some(NotServed::NoDocument));
        assert_eq!(metrics.openapi_fetches(), 4, "the apiextensions document");
    }
}
