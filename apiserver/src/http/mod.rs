//! The HTTP layer: routing of Kubernetes API paths, the verbs of resource requests, watch
//! streams with bookmarks, discovery, `Table`s for kubectl and OpenAPI documents. It calls the
//! engine through [`ServerState`]; nothing below it imports from here.

mod admit;
mod auth;
mod discovery;
mod openapi;
mod params;
mod response;
mod route;
mod routing;
mod table;
mod verbs;
mod watch;

use crate::state::ServerState;
use axum::Router;
use std::sync::Arc;

/// Where the server serves its request counters (not a Kubernetes path; not counted itself).
pub const COUNTERS_PATH: &str = "/kmeta-apiserver/counters";

/// The axum router serving the API for a state. Usable in-process:
/// `kube::Client::new(router(state), "default")`. Besides the Kubernetes API it serves the
/// request counters as JSON rows at [`COUNTERS_PATH`], so a benchmark can read them from a
/// server running in another process.
pub fn router(state: Arc<ServerState>) -> Router {
    Router::new()
        .route(COUNTERS_PATH, axum::routing::get(counters))
        .fallback(routing::handle)
        .with_state(state)
}

async fn counters(
    axum::extract::State(state): axum::extract::State<Arc<ServerState>>,
) -> axum::Json<Vec<crate::hooks::CounterRow>> {
    axum::Json(state.counters().rows())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::COUNTERS_PATH;
    use crate::hooks::{CounterRow, Counters};
    use crate::test_server::TestServer;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};

    #[tokio::test]
    async fn counters_are_served_as_rows_and_not_counted() {
        let server = TestServer::start().await.unwrap();
        let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("a".into());
        cms.create(&PostParams::default(), &cm).await.unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap_err();
        let get = || async {
            let req = http::Request::get(COUNTERS_PATH).body(Vec::new()).unwrap();
            let text = server.client().request_text(req).await.unwrap();
            let rows: Vec<CounterRow> = serde_json::from_str(&text).unwrap();
            Counters::from_rows(rows)
        };
        let served = get().await;
        assert_eq!(served, server.counters());
        assert_eq!(served.get("create", "configmaps", 201), 1);
        assert_eq!(served.get("create", "configmaps", 409), 1);
        // reading the counters is not a request to the API
        assert_eq!(get().await, served);
    }
}
