//! CEL hooks (kmeta): `cel: {resourceGraph}` instead of a webhook, a kro
//! ResourceGraphDefinition's graph evaluated in this process for each parent (an instance of
//! the RGD): the graph is read and its expressions compiled once, when the controller is built
//! ([`graph`], [`template`]); each sync request is answered by [`eval`] on a blocking thread,
//! bounded by the hook's timeout. A failing expression fails that parent's sync, naming the
//! resource, the field path and the expression ([`HookError::Cel`]); never the controller.
//! Design: `docs/design/cel-hooks.md`.

pub(crate) mod check;
pub(crate) mod conditions;
pub(crate) mod eval;
pub(crate) mod external;
pub(crate) mod graph;
pub(crate) mod teardown;
pub(crate) mod template;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::backend::{Answer, BodyForm, Call, HookBackend, RequestBody};
use super::error::HookError;
use crate::api::CelHook;
pub use eval::EvalError;
use eval::{NODE_ID_LABEL, Observed};
use graph::Graph;
pub use graph::GraphError;

/// Default bound of one evaluation, as a webhook's default timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How a CEL hook is shown in errors and the hook metrics' `url` label.
const SHOWN: &str = "cel:resourceGraph";

/// A CEL hook ready to call: its graph compiled.
#[derive(Debug)]
pub(crate) struct CelRunner {
    graph: Arc<Graph>,
    timeout: Duration,
    max_output: usize,
}

impl CelRunner {
    /// The CEL hook `c` (the controller's `hook` hook), its graph compiled now, answering at
    /// most `max_output` bytes.
    pub fn build(hook: &'static str, c: &CelHook, max_output: usize) -> Result<Self, HookError> {
        let cfg = |message: String| HookError::Config {
            hook,
            message: format!("cel: {message}"),
        };
        let timeout = match &c.timeout {
            Some(t) => {
                crate::duration::parse_go_duration(t).map_err(|e| cfg(format!("timeout: {e}")))?
            }
            None => DEFAULT_TIMEOUT,
        };
        let graph = graph::parse(&c.resource_graph).map_err(|e| cfg(e.to_string()))?;
        Ok(CelRunner {
            graph: Arc::new(graph),
            timeout,
            max_output,
        })
    }

    fn failed(&self, hook: &'static str, message: String) -> HookError {
        HookError::Cel {
            hook,
            source_name: SHOWN.to_owned(),
            message,
        }
    }
}

/// The answer of `graph` to a `hook` request (`sync`, `finalize`, `customize`), stamped `now`:
/// the customize hook asks for the graph's external references as related objects, the sync
/// hook finds them in the request's `related` ([`external`]).
pub(crate) fn answer(
    graph: &Graph,
    hook: &str,
    request: &Value,
    now: &str,
) -> Result<Value, EvalError> {
    let parent = request.get("parent").cloned().unwrap_or_default();
    match hook {
        "customize" => Ok(external::rules(&external::references(graph, &parent)?)),
        "finalize" => {
            let status = parent.get("status");
            Ok(teardown::finalize(
                &all_children(request),
                status,
                eval::kept,
            ))
        }
        _ => {
            let mut observed = observed(request);
            let refs = external::references(graph, &parent)?;
            if !refs.is_empty() {
                let related = request.get("related").unwrap_or(&Value::Null);
                observed.external = external::found(&refs, related);
            }
            let out = eval::evaluate_graph(graph, &parent, &observed, now)?;
            Ok(json!({"status": out.status, "children": out.children}))
        }
    }
}

/// Every child of the request, whatever resource it was made for.
fn all_children(request: &Value) -> Vec<Value> {
    children_of(request).cloned().collect()
}

fn children_of(request: &Value) -> impl Iterator<Item = &Value> {
    request
        .get("children")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|by_type| by_type.values())
        .filter_map(Value::as_object)
        .flat_map(|by_name| by_name.values())
}

/// The request's children filed by the resource they were made for (kro's node-id label), a
/// collection's in index order, and its related objects.
pub(crate) fn observed(request: &Value) -> Observed {
    let mut children: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for obj in children_of(request) {
        let labels = obj.pointer("/metadata/labels");
        let id = labels
            .and_then(|l| l.get(NODE_ID_LABEL))
            .and_then(Value::as_str);
        if let Some(id) = id {
            children.entry(id.to_owned()).or_default().push(obj.clone());
        }
    }
    for items in children.values_mut() {
        items.sort_by_key(|o| {
            o.pointer(&format!(
                "/metadata/labels/{}",
                eval::COLLECTION_INDEX_LABEL.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
        });
    }
    Observed {
        children,
        external: BTreeMap::new(),
    }
}

/// A CEL hook as a hook back end: the request evaluated on a blocking thread, bounded by the
/// hook's own timeout.
impl HookBackend for CelRunner {
    fn shown(&self) -> &str {
        SHOWN
    }

    fn timeout(&self) -> Option<Duration> {
        None
    }

    fn timed_out(&self, hook: &'static str, after: Duration) -> HookError {
        self.failed(hook, format!("evaluation did not finish within {after:?}"))
    }

    fn body_form(&self) -> BodyForm {
        BodyForm::Value
    }

    fn call<'a>(&'a self, call: Call<'a>) -> Answer<'a> {
        let hook = call.hook;
        Box::pin(async move {
            let request = call
                .body
                .and_then(RequestBody::into_value)
                .map_err(|e| self.failed(hook, format!("encoding the request: {e}")))?;
            let graph = self.graph.clone();
            let now = jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string();
            let work = tokio::task::spawn_blocking(move || {
                answer(&graph, hook, &request, &now).map(|v| v.to_string())
            });
            let text = match tokio::time::timeout(self.timeout, work).await {
                Err(_) => return Err(self.timed_out(hook, self.timeout)),
                Ok(Err(e)) => return Err(self.failed(hook, format!("evaluation stopped: {e}"))),
                Ok(Ok(Err(e))) => return Err(self.failed(hook, e.to_string())),
                Ok(Ok(Ok(text))) => text,
            };
            if text.len() > self.max_output {
                let limit = self.max_output;
                return Err(self.failed(hook, format!("answer larger than {limit} bytes")));
            }
            Ok(text.into_bytes())
        })
    }
}
