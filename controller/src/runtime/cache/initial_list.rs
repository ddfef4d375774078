//! How a watch gets its initial state: a watch-list (one watch with `sendInitialEvents=true`
//! whose `k8s.io/initial-events-end` bookmark closes the initial state) where the API server
//! offers it, else a list then a watch (docs/design/initial-list.md).
//!
//! Both read the newest state, which [`super::Informer::listed_from`] relies on. kube's
//! watcher sends its watch-list with `resourceVersion=0`, which kube-apiserver serves from its
//! watch cache at any age ("not older than 0"); [`consistent_watch_list`] takes that pair out
//! of the request, so the watch-list is a consistent read (`resourceVersion` unset), as
//! client-go sends it, and stamps when the request left, which is what `listed_from` reports:
//! kube's watcher hands out its `Init` only once the watch is open.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use kube::runtime::watcher;

/// Whether kmeta's watches try the watch-list (`kmeta run --watch-list`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WatchListMode {
    /// A watch-list where the server offers it; a list then a watch where it does not.
    #[default]
    Auto,
    /// Always a list then a watch.
    Off,
}

/// The strategy of one watch's next initial list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Strategy {
    /// A watch with `sendInitialEvents=true`.
    WatchList,
    /// Pages of a list, then a watch from its resourceVersion.
    ListThenWatch,
}

impl Strategy {
    /// The strategy a watch starts with under `mode`.
    pub(super) fn first(mode: WatchListMode) -> Strategy {
        match mode {
            WatchListMode::Auto => Strategy::WatchList,
            WatchListMode::Off => Strategy::ListThenWatch,
        }
    }

    /// The watcher configuration of this strategy: both read the newest state.
    pub(super) fn config(self) -> watcher::Config {
        let config = watcher::Config::default().list_semantic(watcher::ListSemantic::MostRecent);
        match self {
            Strategy::WatchList => config.streaming_lists(),
            Strategy::ListThenWatch => config,
        }
    }
}

/// Watch-list initial lists that ended without their end bookmark, one after the other, after
/// which a watch falls back to list-then-watch: a server that ignores `sendInitialEvents`
/// sends the current objects as ADDED events but never the bookmark, and kube's watcher would
/// start over for ever. Two, not one: a connection cut in the middle of a long initial list is
/// no sign of it.
pub(super) const UNFINISHED_BEFORE_FALLBACK: u32 = 2;

/// Follows a watch-list's initial lists and says when the server does not offer it.
#[derive(Debug, Default)]
pub(super) struct Fallback {
    /// An initial list has started (`Init`) and not finished (`InitDone`).
    in_progress: bool,
    /// Initial lists that ended unfinished, one after the other.
    unfinished: u32,
}

impl Fallback {
    /// An initial list starts; true when the watch should fall back to list-then-watch (the
    /// one before it ended unfinished, and enough did in a row).
    pub(super) fn on_init(&mut self) -> bool {
        if self.in_progress {
            self.unfinished += 1;
        }
        self.in_progress = true;
        self.unfinished >= UNFINISHED_BEFORE_FALLBACK
    }

    /// The initial list finished: the server offers the watch-list.
    pub(super) fn on_done(&mut self) {
        self.in_progress = false;
        self.unfinished = 0;
    }

    /// A watcher error; true when the watch should fall back ([`refuses_watch_list`]).
    pub(super) fn on_error(&mut self, e: &watcher::Error) -> bool {
        refuses_watch_list(e)
    }
}

/// Whether `e` is the API server refusing the watch-list request itself: kube-apiserver with
/// its `WatchList` feature gate off answers 422 Invalid (`sendInitialEvents is forbidden for
/// watch unless the WatchList feature gate is enabled`), one older than 1.27 422 for the
/// `resourceVersionMatch` the request carries (`resourceVersionMatch is forbidden for watch`),
/// and another server may say 400 Bad Request. Forbidden, Gone, throttling and server errors
/// are no answer about the watch-list (a list would meet them too) and are retried.
pub(super) fn refuses_watch_list(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::WatchStartFailed(kube::Error::Api(s)) => matches!(s.code, 400 | 422),
        _ => false,
    }
}

/// When the last watch-list request left, set by [`consistent_watch_list`].
pub(super) type Stamp = Arc<Mutex<Option<Instant>>>;

/// Takes the stamp (None when no watch-list request left since the last take).
pub(super) fn take(stamp: &Stamp) -> Option<Instant> {
    stamp
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
}

/// `client`, but a watch-list request it sends (`sendInitialEvents=true`) carries no
/// `resourceVersion=0` (a consistent read, not the watch cache's state of any age), and the
/// moment it leaves is put in `stamp`.
pub(super) fn consistent_watch_list(client: &kube::Client, stamp: Stamp) -> kube::Client {
    let base = client.clone();
    let service = tower::ServiceBuilder::new()
        .map_request(move |mut req: http::Request<kube::client::Body>| {
            if let Some(uri) = without_any_version(req.uri()) {
                *req.uri_mut() = uri;
                *stamp
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
            }
            req
        })
        .service(tower::service_fn(move |req| {
            let base = base.clone();
            async move { base.send(req).await }
        }));
    kube::Client::new(service, client.default_namespace())
}

/// A watch-list request's URI without `resourceVersion=0`; None for any other request (or
/// one already without it, then unchanged).
fn without_any_version(uri: &http::Uri) -> Option<http::Uri> {
    let query = uri.query()?;
    let pairs: Vec<&str> = query.split('&').collect();
    if !pairs.contains(&"sendInitialEvents=true") {
        return None;
    }
    let kept: Vec<&str> = pairs
        .iter()
        .copied()
        .filter(|p| *p != "resourceVersion=0")
        .collect();
    let path_and_query = format!("{}?{}", uri.path(), kept.join("&"));
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query.parse().ok()?);
    http::Uri::from_parts(parts).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn status(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("refused", "Invalid")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn a_watch_list_request_loses_only_its_resource_version_zero() {
        // what kube's watcher sends for its first watch-list (kube-core's request tests)
        let sent: http::Uri = "https://k/api/v1/configmaps?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0".parse().unwrap();
        let out = without_any_version(&sent).unwrap();
        assert_eq!(
            out.to_string(),
            "https://k/api/v1/configmaps?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        );
        // a resumed watch, a list and a list page keep their resourceVersion
        for other in [
            "https://k/api/v1/configmaps?&watch=true&allowWatchBookmarks=true&resourceVersion=0",
            "https://k/api/v1/configmaps?&watch=true&allowWatchBookmarks=true&resourceVersion=17",
            "https://k/api/v1/configmaps?&limit=500",
            "https://k/api/v1/configmaps",
        ] {
            assert_eq!(without_any_version(&other.parse().unwrap()), None);
        }
        // a watch-list from a given version keeps it
        let from: http::Uri = "https://k/api/v1/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=17".parse().unwrap();
        assert_eq!(without_any_version(&from).unwrap(), from);
    }

    #[test]
    fn a_refused_watch_list_falls_back_and_other_errors_are_retried() {
        let start = |e| watcher::Error::WatchStartFailed(e);
        let mut f = Fallback::default();
        assert!(f.on_error(&start(status(422))));
        assert!(f.on_error(&start(status(400))));
        for code in [403, 404, 410, 429, 500, 503] {
            assert!(!f.on_error(&start(status(code))), "{code}");
        }
        // an error once the watch is open is no refusal of the watch-list
        assert!(!f.on_error(&watcher::Error::WatchFailed(status(422))));
        assert!(!f.on_error(&watcher::Error::InitialListFailed(status(422))));
    }

    #[test]
    fn initial_lists_that_never_finish_fall_back_after_two() {
        let mut f = Fallback::default();
        assert!(!f.on_init());
        f.on_done();
        // the watch later relists (410 Gone): one unfinished list is a cut connection
        assert!(!f.on_init());
        assert!(!f.on_init());
        f.on_done();
        // a server that ignores sendInitialEvents: the stream ends twice without the bookmark
        let mut old = Fallback::default();
        assert!(!old.on_init());
        assert!(!old.on_init());
        assert!(old.on_init());
    }

    #[test]
    fn the_strategies_ask_kube_for_the_newest_state() {
        assert_eq!(Strategy::first(WatchListMode::Auto), Strategy::WatchList);
        assert_eq!(Strategy::first(WatchListMode::Off), Strategy::ListThenWatch);
        let wl = Strategy::WatchList.config();
        assert_eq!(
            wl.initial_list_strategy,
            watcher::InitialListStrategy::StreamingList
        );
        let lw = Strategy::ListThenWatch.config();
        assert_eq!(
            lw.initial_list_strategy,
            watcher::InitialListStrategy::ListWatch
        );
        assert_eq!(lw.list_semantic, watcher::ListSemantic::MostRecent);
        assert!(wl.bookmarks && lw.bookmarks);
    }
}
