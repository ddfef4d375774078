//! WATCH: the initial events, the event stream filtered by namespace and selectors (label,
//! field, KEP-5866 shard), BOOKMARK events (periodic, at the timeout, `initial-events-end`) and
//! 410 as an ERROR event.
//!
//! A sharded watch carries no echo of its selector: the KEP speaks of one on the initial sync
//! of a watch, but kube-apiserver's alpha sets `shardInfo` on list responses only, and a watch
//! event has no list metadata to hold it. A client confirms server-side sharding with a list
//! (its informer's first step) and then watches with the same selector.

use super::response::{partial, stream_response};
use crate::engine::{Inner, ListOpts, Req};
use crate::error::{ApiError, ApiResult};
use crate::state::ServerState;
use crate::store::{Event, EventType, Obj, Packed};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::Sender;

fn event_line(ty: &str, obj: &Value) -> Bytes {
    let mut s = Vec::with_capacity(256);
    s.extend_from_slice(b"{\"type\":\"");
    s.extend_from_slice(ty.as_bytes());
    s.extend_from_slice(b"\",\"object\":");
    if serde_json::to_writer(&mut s, obj).is_err() {
        s.extend_from_slice(b"null");
    }
    s.extend_from_slice(b"}\n");
    Bytes::from(s)
}

fn event_line_raw(ty: &str, obj_json: &[u8]) -> Bytes {
    let mut s = Vec::with_capacity(obj_json.len() + 32);
    s.extend_from_slice(b"{\"type\":\"");
    s.extend_from_slice(ty.as_bytes());
    s.extend_from_slice(b"\",\"object\":");
    s.extend_from_slice(obj_json);
    s.extend_from_slice(b"}\n");
    Bytes::from(s)
}

fn bookmark(kind: &str, api_version: &str, rv: u64, initial_end: bool) -> Bytes {
    let mut md = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    event_line(
        "BOOKMARK",
        &json!({"kind": kind, "apiVersion": api_version, "metadata": md}),
    )
}

/// The watch parameters of the query.
struct WatchParams {
    /// `allowWatchBookmarks=true`.
    bookmarks: bool,
    /// `sendInitialEvents`.
    send_initial: Option<bool>,
    /// `timeoutSeconds`, or the configured default.
    timeout: Duration,
    /// `resourceVersion` to resume after (not `"0"`).
    rv: Option<String>,
}

fn watch_params(
    q: &HashMap<String, String>,
    lopts: &ListOpts,
    default_timeout: Duration,
    watch_list: bool,
) -> ApiResult<WatchParams> {
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|b| b == "true");
    let send_initial = q.get("sendInitialEvents").map(|b| b == "true");
    let timeout =
        match q.get("timeoutSeconds") {
            Some(t) => Duration::from_secs(t.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("timeoutSeconds: invalid value {t:?}"))
            })?),
            None => default_timeout,
        };
    let rv = lopts.resource_version.clone().filter(|r| r != "0");
    check_watch_options(send_initial, lopts, watch_list)?;
    if send_initial == Some(true) && !bookmarks {
        return Err(ApiError::new(
            422,
            "Invalid",
            "allowWatchBookmarks: Required value: allowWatchBookmarks must be set to true when sendInitialEvents is set",
        ));
    }
    Ok(WatchParams {
        bookmarks,
        send_initial,
        timeout,
        rv,
    })
}

/// kube-apiserver's `validateWatchOptions`: `sendInitialEvents` needs
/// `resourceVersionMatch=NotOlderThan` and the watch-list (`watch_list`, the `WatchList`
/// feature gate); `resourceVersionMatch` on a watch needs `sendInitialEvents`, is
/// `NotOlderThan` and comes without `continue`. 422 `ListOptions.meta.k8s.io`.
fn check_watch_options(
    send_initial: Option<bool>,
    lopts: &ListOpts,
    watch_list: bool,
) -> ApiResult<()> {
    const NOT_OLDER_THAN: &str = "NotOlderThan";
    let m = lopts.resource_version_match.as_deref().unwrap_or("");
    let mut causes: Vec<(&str, &str, String)> = vec![];
    let forbidden = "FieldValueForbidden";
    if send_initial.is_some() {
        if m != NOT_OLDER_THAN {
            let msg = format!(
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}"
            );
            causes.push((forbidden, "resourceVersionMatch", msg));
        }
        if !watch_list {
            let msg = "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled";
            causes.push((forbidden, "sendInitialEvents", msg.into()));
        }
    }
    if !m.is_empty() {
        if send_initial.is_none() {
            let msg = "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided";
            causes.push((forbidden, "resourceVersionMatch", msg.into()));
        }
        if m != NOT_OLDER_THAN {
            let msg = format!("Unsupported value: {m:?}: supported values: \"{NOT_OLDER_THAN}\"");
            causes.push(("FieldValueNotSupported", "resourceVersionMatch", msg));
        }
        if lopts.continue_token.is_some() {
            let msg = "Forbidden: resourceVersionMatch is forbidden when continue is provided";
            causes.push((forbidden, "resourceVersionMatch", msg.into()));
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid_causes(
        "ListOptions",
        "meta.k8s.io",
        "",
        causes.iter().map(|(r, f, m)| (*r, *f, m.as_str())),
    ))
}

/// kube-apiserver's `ValidateListOptions` of a LIST (not a watch) for `sendInitialEvents`:
/// 422 `sendInitialEvents is forbidden for list`.
pub(super) fn check_list_options(q: &HashMap<String, String>) -> ApiResult<()> {
    match q.contains_key("sendInitialEvents") {
        false => Ok(()),
        true => Err(ApiError::invalid_causes(
            "ListOptions",
            "meta.k8s.io",
            "",
            [(
                "FieldValueForbidden",
                "sendInitialEvents",
                "Forbidden: sendInitialEvents is forbidden for list",
            )],
        )),
    }
}

/// Where a watch starts.
enum Start {
    /// The requested resourceVersion is no longer retained: one 410 ERROR event.
    Expired(Bytes),
    /// These objects (as stored) as ADDED events, then the changes after this resourceVersion.
    From(Vec<Packed>, u64),
}

/// Decide the start of a watch under the state lock: resume after a given resourceVersion, or
/// list the current state as initial events (unless `sendInitialEvents=false`).
fn start_of(state: &ServerState, req: &Req, lopts: &ListOpts, p: &WatchParams) -> ApiResult<Start> {
    let g = state.lock();
    match &p.rv {
        Some(r) if p.send_initial != Some(true) => {
            let n = r.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("resourceVersion: invalid value {r:?}"))
            })?;
            let expired = state.faults.take_watch_expiry() || n < g.store.compacted();
            if expired {
                let status = ApiError::gone(format!(
                    "too old resource version: {n} ({})",
                    g.store.compacted().max(n + 1)
                ))
                .to_status();
                return Ok(Start::Expired(event_line("ERROR", &status)));
            }
            Ok(Start::From(vec![], n))
        }
        _ if p.send_initial == Some(false) => Ok(Start::From(vec![], g.store.rv())),
        _ => {
            let all = ListOpts {
                label: lopts.label.clone(),
                field: lopts.field.clone(),
                shard: lopts.shard.clone(),
                limit: 0,
                ..Default::default()
            };
            let res = g.list_stored(req, &all)?;
            Ok(Start::From(res.items, res.rv))
        }
    }
}

/// Serve a watch: a stream of JSON event lines fed by a task.
pub(super) fn watch(
    state: &Arc<ServerState>,
    req: Req,
    q: &HashMap<String, String>,
    lopts: ListOpts,
    meta_only: bool,
) -> ApiResult<Response> {
    lopts
        .field
        .check(|f| req.def.supports_field(f))
        .map_err(|e| ApiError::bad_request(format!("fieldSelector: {e}")))?;
    let p = watch_params(
        q,
        &lopts,
        state.config.default_watch_timeout,
        state.watch_list_served(),
    )?;
    let (initial, start) = match start_of(state, &req, &lopts, &p)? {
        Start::Expired(line) => {
            return Ok(stream_response(futures::stream::once(async move {
                Ok::<_, Infallible>(line)
            })));
        }
        Start::From(initial, start) => (initial, start),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(256);
    let mut close = state.faults.close_signal();
    close.mark_unchanged();
    let mut dropped = state.faults.drop_signal();
    dropped.mark_unchanged();
    let task = WatchTask {
        state: state.clone(),
        notify: state.subscribe(),
        close,
        dropped,
        api_version: req.def.api_version(&req.version),
        kind: req.def.kind.clone(),
        plural: req.def.plural.clone(),
        res: req.def.storage_key(),
        ns: req.ns.clone(),
        lopts,
        meta_only,
        bookmarks: p.bookmarks,
        send_initial: p.send_initial,
        timeout: p.timeout,
        bookmark_every: state.config.bookmark_interval.max(Duration::from_millis(1)),
    };
    tokio::spawn(task.run(tx, initial, start));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    Ok(stream_response(stream))
}

/// The watch type of a stored change for a watcher, from whether the object matches its
/// selectors after (`cur`) and before (`prev`) the change: transitions become ADDED/DELETED.
fn event_type(ty: &EventType, cur: bool, prev: bool) -> Option<&'static str> {
    match ty {
        EventType::Added if cur => Some("ADDED"),
        EventType::Modified if cur && prev => Some("MODIFIED"),
        EventType::Modified if cur => Some("ADDED"),
        EventType::Modified if prev => Some("DELETED"),
        EventType::Deleted if prev || cur => Some("DELETED"),
        _ => None,
    }
}

/// The task feeding one watch stream.
struct WatchTask {
    state: Arc<ServerState>,
    notify: tokio::sync::watch::Receiver<u64>,
    close: tokio::sync::watch::Receiver<u64>,
    dropped: tokio::sync::watch::Receiver<u64>,
    api_version: String,
    kind: String,
    /// The resource as fault injection names it.
    plural: String,
    res: Arc<str>,
    ns: Option<String>,
    lopts: ListOpts,
    meta_only: bool,
    bookmarks: bool,
    send_initial: Option<bool>,
    timeout: Duration,
    bookmark_every: Duration,
}

/// How many bytes of event lines go to the client in one chunk at most (one line may be
/// larger): events already waiting are written together, as kube-apiserver's watch server writes
/// every queued event before it flushes, not one frame and one wake-up per event.
const CHUNK: usize = 64 * 1024;

/// Event lines gathered into chunks of about [`CHUNK`] bytes.
#[derive(Default)]
struct Chunks {
    buf: Vec<u8>,
}

impl Chunks {
    /// Adds `line`; sends the chunk once it is full. False when the client went away.
    async fn push(&mut self, tx: &Sender<Bytes>, line: &[u8]) -> bool {
        self.buf.extend_from_slice(line);
        self.buf.len() < CHUNK || self.flush(tx).await
    }

    /// Sends what is gathered. False when the client went away.
    async fn flush(&mut self, tx: &Sender<Bytes>) -> bool {
        if self.buf.is_empty() {
            return true;
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buf));
        tx.send(chunk).await.is_ok()
    }
}

impl WatchTask {
    async fn run(mut self, tx: Sender<Bytes>, initial: Vec<Packed>, start: u64) {
        let mut chunks = Chunks::default();
        for o in &initial {
            if !chunks.push(&tx, &self.initial_line(o)).await {
                return;
            }
        }
        drop(initial);
        if !chunks.flush(&tx).await {
            return;
        }
        if self.send_initial == Some(true)
            && self.bookmarks
            && tx.send(self.bookmark(start, true)).await.is_err()
        {
            return;
        }
        let far = Duration::from_secs(365 * 24 * 3600);
        let deadline = tokio::time::Instant::now() + self.timeout.min(far);
        let every = self.bookmark_every;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        let mut last = start;
        loop {
            if !self.send_changes(&tx, &mut last).await {
                return;
            }
            tokio::select! {
                r = self.notify.changed() => { if r.is_err() { return; } }
                _ = tokio::time::sleep_until(deadline) => {
                    if self.bookmarks {
                        let _ = tx.send(self.bookmark(last, false)).await;
                    }
                    return;
                }
                _ = self.close.changed() => return,
                _ = self.dropped.changed() => return,
                _ = tick.tick(), if self.bookmarks => {
                    if tx.send(self.bookmark(last, false)).await.is_err() {
                        return;
                    }
                }
                _ = tx.closed() => return,
            }
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        bookmark(&self.kind, &self.api_version, rv, initial_end)
    }

    /// Send the events after `last` that concern this watch; false when the watch ends (the
    /// client went away, or `last` is no longer retained: a 410 ERROR event).
    async fn send_changes(&mut self, tx: &Sender<Bytes>, last: &mut u64) -> bool {
        let fetched = tokio::time::Instant::now();
        let evs = self.state.lock().store.events_since(*last);
        let evs = match evs {
            Ok(evs) => evs,
            Err(compacted) => {
                let status =
                    ApiError::gone(format!("too old resource version: {last} ({compacted})"))
                        .to_status();
                let _ = tx.send(event_line("ERROR", &status)).await;
                return false;
            }
        };
        let lag = self.state.faults.watch_event_delay(&self.plural);
        if !lag.is_zero() && evs.iter().any(|e| self.line_of(e).is_some()) {
            // held back; a dropped watch ends now (`Faults::drop_watches`), its held events
            // never sent: the client resumes from the last event it got
            tokio::select! {
                () = tokio::time::sleep_until(fetched + lag) => {}
                _ = self.dropped.changed() => return false,
            }
        }
        let mut chunks = Chunks::default();
        for e in evs {
            *last = e.rv;
            if let Some(line) = self.line_of(&e)
                && !chunks.push(tx, &line).await
            {
                return false;
            }
        }
        chunks.flush(tx).await
    }

    /// The ADDED line of an initial object: its stored text when it is in the watch's version,
    /// else decoded and converted (or its metadata only, for a metadata-only watch).
    fn initial_line(&self, o: &Packed) -> Bytes {
        if self.meta_only {
            return event_line("ADDED", &partial(&o.value()));
        }
        let head = o.head();
        if head.get("apiVersion").and_then(Value::as_str) == Some(self.api_version.as_str()) {
            event_line_raw("ADDED", o.json())
        } else {
            event_line("ADDED", &Inner::present(&o.value(), &self.api_version))
        }
    }

    /// The event line of a stored change for this watch, if it concerns it.
    fn line_of(&self, e: &Event) -> Option<Bytes> {
        if e.key.res != self.res || self.ns.as_ref().is_some_and(|n| *n != e.key.ns) {
            return None;
        }
        // the selectors read the objects' heads, which the event holds decoded; only a field
        // selector on another field needs the objects whole
        let cur = self
            .lopts
            .matches_with(|| Some(e.head().clone()), || Some(e.obj()));
        let prev = e.had_prev()
            && self
                .lopts
                .matches_with(|| e.prev_head().cloned(), || e.prev());
        let ty = event_type(&e.ty, cur, prev)?;
        let same_version =
            e.head().get("apiVersion").and_then(Value::as_str) == Some(self.api_version.as_str());
        Some(if self.meta_only {
            event_line(ty, &partial(&e.obj()))
        } else if same_version {
            event_line_raw(ty, e.obj_json())
        } else {
            let obj: Obj = Inner::present(&e.obj(), &self.api_version);
            event_line(ty, &obj)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Lines gathered into chunks reach the client whole and in order, a chunk at a time once
    /// it holds [`CHUNK`] bytes, the rest at the flush.
    #[tokio::test]
    async fn event_lines_go_out_in_chunks_in_order() {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(16);
        let mut chunks = Chunks::default();
        let lines: Vec<Vec<u8>> = (0..5)
            .map(|i| {
                let mut l = vec![b'a' + i; CHUNK / 3];
                l.push(b'\n');
                l
            })
            .collect();
        for l in &lines {
            assert!(chunks.push(&tx, l).await);
        }
        assert!(chunks.flush(&tx).await);
        assert!(chunks.flush(&tx).await, "nothing left: nothing sent");
        drop(tx);
        let mut got = vec![];
        while let Some(chunk) = rx.recv().await {
            got.push(chunk);
        }
        assert_eq!(got.len(), 2, "three lines fill a chunk, two are flushed");
        assert_eq!(got.concat(), lines.concat());
    }
}
