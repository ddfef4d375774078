//! Publishing Kubernetes Events (`events.k8s.io/v1`).
//!
//! **Series.** An Event that repeats — same type, reason, object and note — within
//! `SERIES_TTL` of its last occurrence is one Event whose `series` counts the repeats (a
//! patch, not a new object). The note is part of what makes an Event the same: kube's
//! `Recorder` (and client-go's `tools/events`) leave it out, so a parent whose child write failed
//! for one cause and then for another kept showing the first cause, and two controllers' notes
//! about one object merged into whichever came first. Metacontroller's core/v1 events keep
//! distinct messages apart too.
//!
//! **Retries.** An Event the API server did not take is sent again in the background, after
//! 1, 2, 4, 8 and 16 s (about 31 s in all), unless the answer says a retry cannot help (a 4xx
//! other than 408, 409 and 429). Given up — after the last retry, on such an answer, or when
//! `RETRIES_PENDING` Events already wait — it is logged and counted in
//! `kmeta_events_failed_total`. client-go's recorder retries too (12 tries, 10 s apart); kube's
//! `Recorder` does not. A retry sends the same occurrence: the same Event name and time, so when
//! the first try was created but its answer lost, the retry's `AlreadyExists` ends it instead of
//! making a second Event.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as KEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::ops::metrics::Metrics;
use crate::ops::ratelimit::{RateLimit, TokenBucket};

/// The waits before each retry of an Event: 1 s doubling, five retries.
pub(crate) const RETRY_DELAYS: [Duration; 5] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
    Duration::from_secs(16),
];

/// At most this many Events wait for a retry at once (a long API outage must not pile up tasks
/// and memory); a failed Event beyond that is given up at once: 256.
pub(crate) const RETRIES_PENDING: usize = 256;

/// A repeat within this long of an Event's last occurrence counts in its series: 6 minutes
/// (client-go's and kube's, a little over the 5-minute series heartbeat of the Events KEP).
pub(crate) const SERIES_TTL: Duration = Duration::from_secs(360);

/// Series remembered at most (then the expired ones are dropped, and if none has expired the
/// memory starts over: the next repeat of each is a new Event): 4096, as the events spam filter.
pub(crate) const SERIES_MAX: usize = 4096;

/// One Event to publish.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Event {
    /// `Warning` rather than `Normal`.
    pub warning: bool,
    /// Why (`SyncError`, `ChildWriteFailed`, ...); also the Event's `action`.
    pub reason: String,
    /// What happened, for people (at most 1 kB).
    pub note: String,
}

/// Whether sending an Event again can succeed after `error`: transport failures, timeouts,
/// conflicts, throttling and server errors can; a 4xx about the Event itself (invalid,
/// forbidden, its namespace gone) cannot.
pub(crate) fn retryable(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => {
            matches!(status.code, 408 | 409 | 429) || status.code >= 500 || status.code == 0
        }
        _ => true,
    }
}

/// What makes two Events one series: the object (by uid, or kind, namespace and name), the
/// type, the reason and the note.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    regarding: (String, String, String, String),
    event: Event,
}

impl SeriesKey {
    fn of(event: &Event, regarding: &ObjectReference) -> Self {
        let part = |s: &Option<String>| s.clone().unwrap_or_default();
        SeriesKey {
            regarding: (
                part(&regarding.uid),
                part(&regarding.kind),
                part(&regarding.namespace),
                part(&regarding.name),
            ),
            event: event.clone(),
        }
    }
}

/// The last occurrence of a series.
#[derive(Debug, Clone)]
struct Last {
    /// The Event object's name.
    name: String,
    /// Occurrences so far (1: the Event has no `series` yet).
    count: i32,
    /// When it last occurred.
    at: Instant,
}

/// How to publish an occurrence given its series' last one.
#[derive(Debug, PartialEq)]
enum Publish {
    /// A new Event object.
    Create,
    /// A repeat: the Event `name` gets `series.count = count`.
    Repeat { name: String, count: i32 },
}

/// Pure: a repeat within [`SERIES_TTL`] of the last occurrence patches its series; anything else
/// creates an Event.
fn decide(last: Option<&Last>, now: Instant) -> Publish {
    match last {
        Some(l) if now.saturating_duration_since(l.at) < SERIES_TTL => Publish::Repeat {
            name: l.name.clone(),
            count: l.count.saturating_add(1),
        },
        _ => Publish::Create,
    }
}

/// Writes Events with series (see the module doc).
#[derive(Clone)]
pub(crate) struct Recorder {
    client: kube::Client,
    controller: String,
    instance: String,
    series: Arc<Mutex<HashMap<SeriesKey, Last>>>,
}

impl Recorder {
    /// Events reported by `controller` (`reportingController`) from `instance`
    /// (`reportingInstance`, the controller's name when none).
    pub fn new(client: kube::Client, controller: String, instance: Option<String>) -> Self {
        let instance = instance.unwrap_or_else(|| controller.clone());
        Recorder {
            client,
            controller,
            instance,
            series: Arc::default(),
        }
    }

    /// Publishes the occurrence at `stamp` of `event` about `regarding` (in its namespace;
    /// `default` for a cluster-scoped object). Publishing one occurrence again (a retry, with the
    /// same `stamp`) never makes a second Event: a new Event's name comes from the object and
    /// `stamp`, and a create answered `AlreadyExists` is the earlier try whose answer was lost; a
    /// repeat sets the series count, which a second patch sets again.
    pub async fn publish(
        &self,
        event: &Event,
        regarding: &ObjectReference,
        stamp: Timestamp,
    ) -> Result<(), kube::Error> {
        let key = SeriesKey::of(event, regarding);
        let now = Instant::now();
        let last = self.series.lock().ok().and_then(|s| s.get(&key).cloned());
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let api: Api<KEvent> = Api::namespaced(self.client.clone(), &namespace);
        let written = match decide(last.as_ref(), now) {
            Publish::Repeat { name, count } => {
                let patch = serde_json::json!({"series": EventSeries {
                    count,
                    last_observed_time: MicroTime(stamp),
                }});
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => Last {
                        name,
                        count,
                        at: now,
                    },
                    // the Event expired on the server: start again
                    Err(kube::Error::Api(s)) if s.code == 404 => {
                        self.create(&api, event, regarding, &namespace, stamp, now)
                            .await?
                    }
                    Err(e) => return Err(e),
                }
            }
            Publish::Create => {
                self.create(&api, event, regarding, &namespace, stamp, now)
                    .await?
            }
        };
        if let Ok(mut s) = self.series.lock() {
            // expired series are dropped only when the memory is full ([`decide`] ignores them)
            if s.len() >= SERIES_MAX {
                s.retain(|_, l| now.saturating_duration_since(l.at) < SERIES_TTL);
            }
            if s.len() >= SERIES_MAX {
                s.clear();
            }
            s.insert(key, written);
        }
        Ok(())
    }

    async fn create(
        &self,
        api: &Api<KEvent>,
        event: &Event,
        regarding: &ObjectReference,
        namespace: &str,
        stamp: Timestamp,
        now: Instant,
    ) -> Result<Last, kube::Error> {
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(&self.controller),
            stamp.as_nanosecond()
        );
        let object = KEvent {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.to_owned()),
                ..Default::default()
            },
            action: Some(event.reason.clone()),
            reason: Some(event.reason.clone()),
            note: Some(event.note.clone()),
            type_: Some(if event.warning { "Warning" } else { "Normal" }.to_owned()),
            event_time: Some(MicroTime(stamp)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        };
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            // an earlier try of this occurrence was created; its answer was lost
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {}
            Err(e) => return Err(e),
        }
        Ok(Last {
            name,
            count: 1,
            at: now,
        })
    }
}

/// Sends Events, retrying those the API server did not take.
#[derive(Clone)]
pub(crate) struct EventSender {
    recorder: Recorder,
    metrics: Arc<Metrics>,
    pending: Arc<AtomicUsize>,
}

impl std::fmt::Debug for EventSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSender")
            .field("pending", &self.pending.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl EventSender {
    /// A sender through `recorder`, counting what it gives up in `metrics`.
    pub fn new(recorder: Recorder, metrics: Arc<Metrics>) -> Self {
        EventSender {
            recorder,
            metrics,
            pending: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Sends `event` about `regarding`; on a failure a retry can mend, sends it again in the
    /// background (see the module doc). Never fails.
    pub async fn send(&self, event: Event, regarding: ObjectReference) {
        let stamp = Timestamp::now();
        let error = match self.recorder.publish(&event, &regarding, stamp).await {
            Ok(()) => return,
            Err(e) => e,
        };
        if !retryable(&error) || !self.reserve() {
            self.give_up(&event.reason, &error);
            return;
        }
        tracing::debug!(reason = event.reason, %error, "publishing event failed; retrying");
        let this = self.clone();
        tokio::spawn(async move {
            this.retry(&event, &regarding, stamp).await;
            this.pending.fetch_sub(1, Ordering::AcqRel);
        });
    }

    /// Takes a retry slot if one is free.
    fn reserve(&self) -> bool {
        self.pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < RETRIES_PENDING).then_some(n + 1)
            })
            .is_ok()
    }

    /// Sends the occurrence at `stamp` again (the same Event: see [`Recorder::publish`]).
    async fn retry(&self, event: &Event, regarding: &ObjectReference, stamp: Timestamp) {
        let mut last = None;
        for delay in RETRY_DELAYS {
            tokio::time::sleep(delay).await;
            match self.recorder.publish(event, regarding, stamp).await {
                Ok(()) => return,
                Err(e) if retryable(&e) => last = Some(e),
                Err(e) => {
                    last = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = last {
            self.give_up(&event.reason, &e);
        }
    }

    fn give_up(&self, reason: &str, error: &kube::Error) {
        self.metrics.event_failed();
        tracing::warn!(reason, %error, "publishing event failed; given up");
    }
}

/// Why kmeta publishes an Event: its `reason` (Metacontroller's where it has one) and its type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// A controller started (Normal).
    Started,
    /// A controller stopped (Normal).
    Stopped,
    /// A deleted DecoratorController's targets were released (Normal).
    Released,
    /// Releasing a deleted DecoratorController's targets failed.
    ReleaseError,
    /// A controller could not be started.
    CreateError,
    /// A sync failed (Metacontroller's reason), or a parent resource cannot be synced at all.
    SyncError,
    /// A child write was never shown by its watch within `created_children_wait`.
    ChildNotObserved,
    /// A child write needs someone to act (a namespace missing, a name held, 422, 403).
    ChildWriteFailed,
    /// Another parent wants the same child (server-side apply).
    ChildContested,
    /// Another field manager holds fields of a child (server-side apply).
    ChildConflict,
    /// Fields kmeta applied were taken by another manager (drift policy `Enforce`).
    ChildFieldsTaken,
    /// A child drifted from what kmeta applied (drift policy `Report`).
    ChildDrift,
    /// The API server dropped fields of a child update (its schema does not declare them).
    ChildFieldsIgnored,
    /// Events a hook asked for were invalid or too many (`events` in its answer).
    HookEventInvalid,
    /// kmeta leaves the object alone: `kmeta.dev/paused` on it or on its controller.
    Paused,
}

impl Reason {
    /// The Event's `reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Started => "Started",
            Reason::Stopped => "Stopped",
            Reason::Released => "Released",
            Reason::ReleaseError => "ReleaseError",
            Reason::CreateError => "CreateError",
            Reason::SyncError => "SyncError",
            Reason::ChildNotObserved => "ChildNotObserved",
            Reason::ChildWriteFailed => "ChildWriteFailed",
            Reason::ChildContested => "ChildContested",
            Reason::ChildConflict => "ChildConflict",
            Reason::ChildFieldsTaken => "ChildFieldsTaken",
            Reason::ChildDrift => "ChildDrift",
            Reason::ChildFieldsIgnored => "ChildFieldsIgnored",
            Reason::HookEventInvalid => "HookEventInvalid",
            Reason::Paused => "Paused",
        }
    }

    /// Whether the Event is a Warning (else Normal): every reason but a controller starting,
    /// stopping or releasing its targets.
    pub fn is_warning(self) -> bool {
        !matches!(
            self,
            Reason::Started | Reason::Stopped | Reason::Released | Reason::Paused
        )
    }
}

/// Keys the event spam filter remembers (client-go's spam filter LRU holds 4096).
pub(crate) const EVENT_FILTER_KEYS: usize = 4096;

/// The event spam filter (Metacontroller's `--events-qps`/`--events-burst`, client-go's spam
/// filter): one token bucket per (object, reason). It remembers at most [`EVENT_FILTER_KEYS`]
/// keys and starts afresh beyond that.
#[derive(Debug)]
pub(crate) struct SpamFilter {
    limits: RateLimit,
    buckets: Mutex<HashMap<(String, String), TokenBucket>>,
}

impl SpamFilter {
    /// A filter with these limits (`qps <= 0`: everything passes).
    pub fn new(limits: RateLimit) -> Self {
        SpamFilter {
            limits,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Whether an event with `reason` about `object` (its uid, else `namespace/name`) passes at
    /// `now`; a dropped event reserves nothing.
    pub fn allow(&self, object: &str, reason: &str, now: tokio::time::Instant) -> bool {
        if !self.limits.enabled() {
            return true;
        }
        let Ok(mut buckets) = self.buckets.lock() else {
            return true;
        };
        if buckets.len() >= EVENT_FILTER_KEYS {
            buckets.clear();
        }
        let limits = self.limits;
        buckets
            .entry((object.to_owned(), reason.to_owned()))
            .or_insert_with(|| TokenBucket::new(limits, now))
            .allow(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..Default::default()
        }))
    }

    #[test]
    fn only_failures_a_retry_can_mend_are_retried() {
        for code in [408, 409, 429, 500, 503, 504] {
            assert!(retryable(&api(code)), "{code}");
        }
        for code in [400, 403, 404, 410, 422] {
            assert!(!retryable(&api(code)), "{code}");
        }
    }

    #[test]
    fn retries_back_off_and_end_within_a_minute() {
        assert!(RETRY_DELAYS.windows(2).all(|w| w[1] == w[0] * 2));
        let total: Duration = RETRY_DELAYS.iter().sum();
        assert_eq!(total, Duration::from_secs(31));
    }

    fn regarding(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Thing".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        }
    }

    fn event(reason: &str, note: &str) -> Event {
        Event {
            warning: true,
            reason: reason.into(),
            note: note.into(),
        }
    }

    #[test]
    fn a_different_note_or_object_is_another_series() {
        let failed = event("ChildWriteFailed", "creating a: AlreadyExists");
        let key = SeriesKey::of(&failed, &regarding("p"));
        assert_eq!(key, SeriesKey::of(&failed.clone(), &regarding("p")));
        let other_cause = event("ChildWriteFailed", "creating a: quota exceeded");
        assert_ne!(key, SeriesKey::of(&other_cause, &regarding("p")));
        assert_ne!(key, SeriesKey::of(&failed, &regarding("q")));
        let normal = Event {
            warning: false,
            ..failed.clone()
        };
        assert_ne!(key, SeriesKey::of(&normal, &regarding("p")));
    }

    #[test]
    fn a_repeat_within_the_ttl_counts_in_the_series() {
        let now = Instant::now();
        assert_eq!(decide(None, now), Publish::Create);
        let last = Last {
            name: "p.1".into(),
            count: 1,
            at: now,
        };
        assert_eq!(
            decide(Some(&last), now + Duration::from_secs(5)),
            Publish::Repeat {
                name: "p.1".into(),
                count: 2
            }
        );
        assert_eq!(decide(Some(&last), now + SERIES_TTL), Publish::Create);
    }

    #[test]
    fn the_spam_filter_spends_a_burst_per_object_and_reason() {
        let f = SpamFilter::new(RateLimit {
            qps: 1.0 / 300.0,
            burst: 2,
        });
        let now = tokio::time::Instant::now();
        assert!(f.allow("u1", "SyncError", now));
        assert!(f.allow("u1", "SyncError", now));
        assert!(!f.allow("u1", "SyncError", now), "the burst is spent");
        assert!(f.allow("u1", "Started", now), "another reason");
        assert!(f.allow("u2", "SyncError", now), "another object");
        assert!(
            f.allow("u1", "SyncError", now + Duration::from_secs(300)),
            "one more after 1/qps"
        );
        let off = SpamFilter::new(RateLimit { qps: 0.0, burst: 0 });
        assert!((0..100).all(|_| off.allow("u1", "SyncError", now)));
    }
}
