//! The HTTP layer: routing of Kubernetes API paths, the verbs of resource requests, watch
//! streams with bookmarks, discovery, `Table`s for kubectl and OpenAPI documents. It calls the
//! engine through [`ServerState`]; nothing below it imports from here.

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

/// The axum router serving the API for a state. Usable in-process:
/// `kube::Client::new(router(state), "default")`.
pub fn router(state: Arc<ServerState>) -> Router {
    Router::new().fallback(routing::handle).with_state(state)
}
