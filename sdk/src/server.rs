//! The axum adapter: `POST /sync`, `/finalize`, `/customize` call the user's functions.

use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Serialize;
use serde::de::DeserializeOwned;

use kmeta_wire::{CustomizeRequest, CustomizeResponse, SyncRequest, SyncResponse};

type Reply<Resp> = Pin<Box<dyn Future<Output = Result<Resp, HookError>> + Send>>;
type Handler<Req, Resp> = Arc<dyn Fn(Req) -> Reply<Resp> + Send + Sync>;

/// The hooks of one controller; build with [`router`], then [`Hooks::into_router`] or
/// [`Hooks::serve`].
///
/// Each registered hook answers `POST /sync`, `/finalize` or `/customize`: the body is decoded
/// into the request type (a malformed one answers 400 naming the field), the function's `Ok`
/// is encoded as the response, its `Err` answers 500 `{"error": "<hook> hook failed: .."}`.
///
/// ```
/// use kmeta_hook::{SyncRequest, SyncResponse, child};
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let app = kmeta_hook::router()
///     .sync(|req: SyncRequest| {
///         let cm = child("v1", "ConfigMap", req.parent_name()).build();
///         Ok::<_, String>(SyncResponse::new().child(cm))
///     })
///     .into_router();
/// let request = axum::http::Request::post("/sync")
///     .header("content-type", "application/json")
///     .body(axum::body::Body::from(r#"{"parent": {"metadata": {"name": "p"}}}"#))
///     .unwrap();
/// let response = app.oneshot(request).await.unwrap();
/// assert_eq!(response.status(), 200);
/// let body = http_body_util::BodyExt::collect(response.into_body())
///     .await
///     .unwrap()
///     .to_bytes();
/// assert_eq!(
///     &body[..],
///     br#"{"children":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"p"}}]}"#
/// );
/// # }
/// ```
///
/// A hook server binds an address and serves until the process ends:
///
/// ```no_run
/// # use kmeta_hook::{SyncRequest, SyncResponse};
/// # async fn run() -> std::io::Result<()> {
/// kmeta_hook::router()
///     .sync(|_req: SyncRequest| Ok::<_, String>(SyncResponse::new()))
///     .serve("0.0.0.0:8080")
///     .await
/// # }
/// ```
#[derive(Clone, Default)]
pub struct Hooks {
    sync: Option<Handler<SyncRequest, SyncResponse>>,
    finalize: Option<Handler<SyncRequest, SyncResponse>>,
    customize: Option<Handler<CustomizeRequest, CustomizeResponse>>,
}

/// Starts a set of hooks: `router().sync(f).finalize(g).customize(h)`.
pub fn router() -> Hooks {
    Hooks::default()
}

/// Why a hook request is not answered 200: the answer's status and its
/// `{"error": "<this error>"}` body.
#[derive(Debug, thiserror::Error)]
enum HookError {
    /// The body does not decode into the hook's request type (400).
    #[error("malformed {hook} request: {source}")]
    Malformed {
        hook: &'static str,
        source: serde_json::Error,
    },
    /// A field of the body does not decode (400).
    #[error("malformed {hook} request at `{path}`: {source}")]
    MalformedField {
        hook: &'static str,
        path: String,
        source: serde_json::Error,
    },
    /// The user's function answered `Err` (500); `message` is that error, displayed.
    #[error("{hook} hook failed: {message}")]
    Failed { hook: &'static str, message: String },
}

impl HookError {
    fn failed(hook: &'static str, e: impl Display) -> Self {
        HookError::Failed {
            hook,
            message: e.to_string(),
        }
    }
}

impl IntoResponse for HookError {
    fn into_response(self) -> Response {
        let code = match self {
            HookError::Malformed { .. } | HookError::MalformedField { .. } => {
                StatusCode::BAD_REQUEST
            }
            HookError::Failed { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let body = serde_json::json!({ "error": self.to_string() });
        (code, axum::Json(body)).into_response()
    }
}

fn boxed<Req, Resp, E, F>(hook: &'static str, f: F) -> Handler<Req, Resp>
where
    F: Fn(Req) -> Result<Resp, E> + Send + Sync + 'static,
    Resp: Send + 'static,
    E: Display,
{
    Arc::new(move |req| {
        let out = f(req).map_err(|e| HookError::failed(hook, e));
        Box::pin(std::future::ready(out))
    })
}

fn boxed_async<Req, Resp, E, F, Fut>(hook: &'static str, f: F) -> Handler<Req, Resp>
where
    F: Fn(Req) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Resp, E>> + Send + 'static,
    Resp: Send + 'static,
    E: Display,
{
    Arc::new(move |req| {
        let fut = f(req);
        Box::pin(async move { fut.await.map_err(|e| HookError::failed(hook, e)) })
    })
}

impl Hooks {
    /// Serves the sync hook at `POST /sync`. An `Err` answers 500 with `{"error": "..."}`.
    pub fn sync<F, E>(mut self, f: F) -> Self
    where
        F: Fn(SyncRequest) -> Result<SyncResponse, E> + Send + Sync + 'static,
        E: Display,
    {
        self.sync = Some(boxed("sync", f));
        self
    }

    /// Serves the finalize hook at `POST /finalize` (requests have `finalizing: true`).
    pub fn finalize<F, E>(mut self, f: F) -> Self
    where
        F: Fn(SyncRequest) -> Result<SyncResponse, E> + Send + Sync + 'static,
        E: Display,
    {
        self.finalize = Some(boxed("finalize", f));
        self
    }

    /// Serves the customize hook at `POST /customize`.
    pub fn customize<F, E>(mut self, f: F) -> Self
    where
        F: Fn(CustomizeRequest) -> Result<CustomizeResponse, E> + Send + Sync + 'static,
        E: Display,
    {
        self.customize = Some(boxed("customize", f));
        self
    }

    /// Like [`Hooks::sync`], for an async function (one that calls other services).
    pub fn sync_async<F, Fut, E>(mut self, f: F) -> Self
    where
        F: Fn(SyncRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<SyncResponse, E>> + Send + 'static,
        E: Display,
    {
        self.sync = Some(boxed_async("sync", f));
        self
    }

    /// Like [`Hooks::finalize`], for an async function.
    pub fn finalize_async<F, Fut, E>(mut self, f: F) -> Self
    where
        F: Fn(SyncRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<SyncResponse, E>> + Send + 'static,
        E: Display,
    {
        self.finalize = Some(boxed_async("finalize", f));
        self
    }

    /// Like [`Hooks::customize`], for an async function.
    pub fn customize_async<F, Fut, E>(mut self, f: F) -> Self
    where
        F: Fn(CustomizeRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<CustomizeResponse, E>> + Send + 'static,
        E: Display,
    {
        self.customize = Some(boxed_async("customize", f));
        self
    }

    /// The axum router with one `POST` route per registered hook.
    pub fn into_router(self) -> Router {
        let mut r = Router::new();
        if let Some(h) = self.sync {
            r = r.route("/sync", post(move |body: Bytes| call(h, "sync", body)));
        }
        if let Some(h) = self.finalize {
            r = r.route(
                "/finalize",
                post(move |body: Bytes| call(h, "finalize", body)),
            );
        }
        if let Some(h) = self.customize {
            r = r.route(
                "/customize",
                post(move |body: Bytes| call(h, "customize", body)),
            );
        }
        r
    }

    /// Binds `addr` (`0.0.0.0:8080`) and serves until the process ends.
    pub async fn serve(self, addr: &str) -> std::io::Result<()> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        self.serve_listener(listener).await
    }

    /// Serves on a bound listener (bind `127.0.0.1:0` to get a free port, e.g. in tests).
    pub async fn serve_listener(self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        axum::serve(listener, self.into_router()).await
    }
}

async fn call<Req, Resp>(h: Handler<Req, Resp>, hook: &'static str, body: Bytes) -> Response
where
    Req: DeserializeOwned,
    Resp: Serialize,
{
    let answer = match decode(hook, &body) {
        Ok(req) => h(req).await,
        Err(e) => Err(e),
    };
    match answer {
        Ok(resp) => axum::Json(resp).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The `hook`'s request in `body`, or the field that does not decode.
fn decode<Req: DeserializeOwned>(hook: &'static str, body: &[u8]) -> Result<Req, HookError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let req = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let source = e.into_inner();
        if path.is_empty() || path == "." {
            HookError::Malformed { hook, source }
        } else {
            HookError::MalformedField { hook, path, source }
        }
    })?;
    de.end()
        .map_err(|source| HookError::Malformed { hook, source })?;
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::child;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use kmeta_wire::RelatedResourceRule;
    use serde_json::{Value, json};
    use tower::ServiceExt;

    fn hooks() -> Router {
        router()
            .sync(|req: SyncRequest| {
                if req.parent_name() == "bad" {
                    return Err("parent is bad".to_owned());
                }
                Ok(SyncResponse::new()
                    .child(child("v1", "ConfigMap", req.parent_name()).build())
                    .status(json!({"seen": req.children.len()})))
            })
            .finalize(|req: SyncRequest| {
                Ok::<_, String>(SyncResponse::new().finalized(req.children.is_empty()))
            })
            .customize(|_req: CustomizeRequest| {
                Ok::<_, String>(CustomizeResponse {
                    related_resources: vec![RelatedResourceRule::new("v1", "configmaps")],
                })
            })
            .into_router()
    }

    async fn post(path: &str, body: &str) -> (StatusCode, Value) {
        let resp = hooks()
            .oneshot(
                Request::post(path)
                    .header("content-type", "application/json")
                    .body(Body::from(body.to_owned()))
                    .expect("request"),
            )
            .await
            .expect("infallible");
        let code = resp.status();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        (code, serde_json::from_slice(&bytes).expect("json body"))
    }

    #[tokio::test]
    async fn sync_ok() {
        let (code, body) = post(
            "/sync",
            r#"{"controller":{},"parent":{"metadata":{"name":"p","namespace":"d"}},
                "children":{"ConfigMap.v1":{"p":{"metadata":{"name":"p"}}}},"related":{},
                "finalizing":false}"#,
        )
        .await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(
            body,
            json!({"status": {"seen": 1}, "children": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p"}}]})
        );
    }

    #[tokio::test]
    async fn user_error_is_500_with_json() {
        let (code, body) = post("/sync", r#"{"parent":{"metadata":{"name":"bad"}}}"#).await;
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body, json!({"error": "sync hook failed: parent is bad"}));
    }

    #[tokio::test]
    async fn malformed_request_names_the_field() {
        let (code, body) = post(
            "/sync",
            r#"{"parent":{},"children":{"Pod.v1":[1,2]},"finalizing":false}"#,
        )
        .await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        let msg = body["error"].as_str().expect("error message");
        assert!(msg.contains("children.Pod.v1"), "{msg}");

        let (code, body) = post("/sync", r#"{"children":{}}"#).await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        let msg = body["error"].as_str().expect("error message");
        assert!(msg.contains("missing field `parent`"), "{msg}");

        let (code, body) = post("/customize", "not json").await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(body["error"].as_str().is_some());

        let (code, body) = post("/finalize", r#"{"parent":{},"finalizing":"yes"}"#).await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        let msg = body["error"].as_str().expect("error message");
        assert!(msg.contains("finalizing"), "{msg}");
    }

    #[tokio::test]
    async fn async_handlers_over_a_real_listener() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(
            router()
                .sync_async(|req: SyncRequest| async move {
                    tokio::task::yield_now().await;
                    Ok::<_, String>(SyncResponse::new().status(json!({"name": req.parent_name()})))
                })
                .customize_async(|_req: CustomizeRequest| async {
                    Err::<CustomizeResponse, _>("no rules today")
                })
                .serve_listener(listener),
        );
        let (code, body) = raw_post(addr, "/sync", r#"{"parent":{"metadata":{"name":"p"}}}"#).await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(body, json!({"status": {"name": "p"}, "children": []}));
        let (code, body) = raw_post(addr, "/customize", r#"{"parent":{}}"#).await;
        assert_eq!(code, 500);
        assert_eq!(
            body,
            json!({"error": "customize hook failed: no rules today"})
        );
        server.abort();
    }

    /// A minimal HTTP/1.1 client over a TCP socket (no extra dependency).
    async fn raw_post(addr: std::net::SocketAddr, path: &str, body: &str) -> (u16, Value) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let req = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        let code = out
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("status line");
        let (_, payload) = out.split_once("\r\n\r\n").expect("headers end");
        (code, serde_json::from_str(payload).expect("json body"))
    }

    #[tokio::test]
    async fn finalize_and_customize() {
        let (code, body) = post(
            "/finalize",
            r#"{"parent":{"metadata":{"name":"p"}},"children":{},"finalizing":true}"#,
        )
        .await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(body, json!({"children": [], "finalized": true}));
        let (code, body) = post("/customize", r#"{"controller":{},"parent":{}}"#).await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(
            body,
            json!({"relatedResources": [{"apiVersion": "v1", "resource": "configmaps"}]})
        );
    }
}
