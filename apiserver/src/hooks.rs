//! Test hooks: admission functions, deterministic fault injection and request counters.

use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// The operation an admission function sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// POST, or server-side apply creating the object.
    Create,
    /// PUT, PATCH (incl. apply), and `/status` writes for `plural/status` hooks.
    Update,
    /// DELETE (validating functions only; they see the existing object).
    Delete,
}

/// Rejection from an admission function.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct AdmissionError {
    /// HTTP code returned to the client (422 Invalid by default; 403 Forbidden is what a denying
    /// webhook returns on a real cluster).
    pub code: u16,
    /// Message included in the Status.
    pub message: String,
}

impl AdmissionError {
    /// 422 Invalid.
    pub fn invalid(msg: impl Into<String>) -> Self {
        AdmissionError {
            code: 422,
            message: msg.into(),
        }
    }
    /// 403 Forbidden (like a webhook denial).
    pub fn forbidden(msg: impl Into<String>) -> Self {
        AdmissionError {
            code: 403,
            message: msg.into(),
        }
    }
}

type MutFn = Arc<dyn Fn(&mut Value, Operation) -> Result<(), AdmissionError> + Send + Sync>;
type ValFn = Arc<dyn Fn(&Value, Operation) -> Result<(), AdmissionError> + Send + Sync>;

enum HookFn {
    Mutating(MutFn),
    Validating(ValFn),
}

struct Hook {
    id: u64,
    group: String,
    version: String,
    plural: String,
    f: HookFn,
}

impl Hook {
    /// Whether this hook is registered for the resource (`*` matches any version).
    fn matches(&self, group: &str, version: &str, plural: &str) -> bool {
        self.group == group
            && (self.version == version || self.version == "*")
            && self.plural == plural
    }
}

/// Identifies a registered hook or fault, for removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookId(pub u64);

/// Admission functions, run like admission webhooks: mutating functions (in registration order)
/// then validating ones, on create and update (including every patch type), before the object
/// is stored. Resources are keyed by group/version (`"v1"`, `"apps/v1"`; use `"apps/*"` for any
/// version) and plural (`"deployments"`); `/status` writes run only hooks registered for
/// `"deployments/status"`, as with webhooks.
#[derive(Default)]
pub struct Admission {
    hooks: RwLock<Vec<Hook>>,
    next: Mutex<u64>,
}

fn split_gv(gv: &str) -> (String, String) {
    match gv.rsplit_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), gv.to_string()),
    }
}

impl Admission {
    fn add(&self, gv: &str, plural: &str, f: HookFn) -> HookId {
        let id = {
            let mut n = self.next.lock().unwrap_or_else(|e| e.into_inner());
            *n += 1;
            *n
        };
        let (group, version) = split_gv(gv);
        self.hooks
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(Hook {
                id,
                group,
                version,
                plural: plural.to_string(),
                f,
            });
        HookId(id)
    }

    /// Register a mutating function.
    pub fn mutate<F>(&self, group_version: &str, plural: &str, f: F) -> HookId
    where
        F: Fn(&mut Value, Operation) -> Result<(), AdmissionError> + Send + Sync + 'static,
    {
        self.add(group_version, plural, HookFn::Mutating(Arc::new(f)))
    }

    /// Register a validating function.
    pub fn validate<F>(&self, group_version: &str, plural: &str, f: F) -> HookId
    where
        F: Fn(&Value, Operation) -> Result<(), AdmissionError> + Send + Sync + 'static,
    {
        self.add(group_version, plural, HookFn::Validating(Arc::new(f)))
    }

    /// Remove a hook.
    pub fn remove(&self, id: HookId) {
        self.hooks
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|h| h.id != id.0);
    }

    /// Remove all hooks.
    pub fn clear(&self) {
        self.hooks
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Whether any mutating function is registered for a resource (so a write may change after
    /// the request body was decoded).
    pub(crate) fn mutates(&self, group: &str, version: &str, plural: &str) -> bool {
        let hooks = self.hooks.read().unwrap_or_else(|e| e.into_inner());
        hooks
            .iter()
            .any(|h| matches!(h.f, HookFn::Mutating(_)) && h.matches(group, version, plural))
    }

    /// Run mutating then validating functions for a resource.
    pub(crate) fn run(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        obj: &mut Value,
        op: Operation,
    ) -> Result<(), AdmissionError> {
        let hooks = self.hooks.read().unwrap_or_else(|e| e.into_inner());
        let matching = |h: &&Hook| h.matches(group, version, plural);
        if op != Operation::Delete {
            for h in hooks.iter().filter(matching) {
                if let HookFn::Mutating(f) = &h.f {
                    f(obj, op)?;
                }
            }
        }
        for h in hooks.iter().filter(matching) {
            if let HookFn::Validating(f) = &h.f {
                f(obj, op)?;
            }
        }
        Ok(())
    }
}

/// A fault to inject: an error response for matching requests.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultSpec {
    /// Verb to match (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`); `None` matches all.
    pub verb: Option<String>,
    /// Resource to match (`configmaps`, `deployments/status`); `None` matches all.
    pub resource: Option<String>,
    /// HTTP code: 409, 429, 500 or 503 (any code is returned with a matching reason).
    pub code: u16,
    /// Retry-After seconds for 429/503 (default 1, the value kube-apiserver's max-in-flight filter sends).
    pub retry_after_seconds: u64,
    /// Fail only the next N matching requests (`None`: unbounded).
    pub times: Option<u64>,
    /// Fraction of matching requests that fail, 0.0..=1.0 (default 1.0), decided by the seeded RNG.
    pub rate: f64,
    /// Only requests whose `User-Agent` starts with this (`kmeta/`: the controller's, not a
    /// test's own client); `None` matches all.
    pub user_agent: Option<String>,
    /// The request is carried out first and only its answer is replaced by the error: a write
    /// that took effect although the client saw it fail (an answer lost on the way, a timeout
    /// after the commit).
    pub after_commit: bool,
}

impl FaultSpec {
    /// A fault returning `code` for every request.
    pub fn error(code: u16) -> Self {
        FaultSpec {
            verb: None,
            resource: None,
            code,
            retry_after_seconds: 1,
            times: None,
            rate: 1.0,
            user_agent: None,
            after_commit: false,
        }
    }
    /// Restrict to a verb.
    pub fn verb(mut self, verb: &str) -> Self {
        self.verb = Some(verb.to_string());
        self
    }
    /// Restrict to a resource (`configmaps`, `deployments/status`).
    pub fn resource(mut self, resource: &str) -> Self {
        self.resource = Some(resource.to_string());
        self
    }
    /// Only the next `n` matching requests.
    pub fn times(mut self, n: u64) -> Self {
        self.times = Some(n);
        self
    }
    /// Fail a fraction of matching requests.
    pub fn rate(mut self, rate: f64) -> Self {
        self.rate = rate.clamp(0.0, 1.0);
        self
    }
    /// Restrict to requests whose `User-Agent` starts with `prefix`.
    pub fn user_agent(mut self, prefix: &str) -> Self {
        self.user_agent = Some(prefix.to_string());
        self
    }
    /// Carry the request out, then answer with the error instead (see
    /// [`FaultSpec::after_commit`]).
    pub fn after_commit(mut self) -> Self {
        self.after_commit = true;
        self
    }
    /// Retry-After seconds.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after_seconds = secs;
        self
    }
}

struct ActiveFault {
    id: u64,
    spec: FaultSpec,
}

struct Latency {
    id: u64,
    verb: Option<String>,
    resource: Option<String>,
    delay: Duration,
}

/// SplitMix64: small deterministic PRNG.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix(u64);

impl SplitMix {
    /// Seeded generator.
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix(seed)
    }
    /// Next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

struct FaultState {
    next_id: u64,
    faults: Vec<ActiveFault>,
    latencies: Vec<Latency>,
    watch_delays: Vec<Latency>,
    expire_watches: u64,
    rng: SplitMix,
}

/// Fault injection. All faults are bounded (`times`) or removable (`remove`, `clear`).
pub struct Faults {
    state: Mutex<FaultState>,
    close: tokio::sync::watch::Sender<u64>,
    /// Bumped by [`Faults::drop_watches`].
    drop: tokio::sync::watch::Sender<u64>,
}

fn matches(want: &Option<String>, got: &str) -> bool {
    want.as_deref().is_none_or(|w| w == got)
}

/// The sum of the `latencies` matching `verb` on `resource`.
fn total_delay(latencies: &[Latency], verb: &str, resource: &str) -> Duration {
    latencies
        .iter()
        .filter(|l| matches(&l.verb, verb) && matches(&l.resource, resource))
        .map(|l| l.delay)
        .sum()
}

impl Faults {
    pub(crate) fn new(seed: u64) -> Self {
        Faults {
            state: Mutex::new(FaultState {
                next_id: 0,
                faults: vec![],
                latencies: vec![],
                watch_delays: vec![],
                expire_watches: 0,
                rng: SplitMix::new(seed),
            }),
            close: tokio::sync::watch::channel(0).0,
            drop: tokio::sync::watch::channel(0).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Inject an error fault.
    pub fn inject(&self, spec: FaultSpec) -> HookId {
        let mut s = self.lock();
        s.next_id += 1;
        let id = s.next_id;
        s.faults.push(ActiveFault { id, spec });
        HookId(id)
    }

    /// Add latency to matching requests ("make a resource slow").
    pub fn add_latency(
        &self,
        verb: Option<&str>,
        resource: Option<&str>,
        delay: Duration,
    ) -> HookId {
        self.push_latency(|s| &mut s.latencies, verb, resource, delay)
    }

    /// Delay the events of matching resources on every open and future watch stream by at least
    /// `delay` ("a lagging watch cache": kube-apiserver serves watches from a cache that can
    /// trail the writes it has acknowledged). Events keep their order; a write's response is
    /// not delayed, so a client can see its create succeed before its watch shows the object.
    pub fn delay_watch_events(&self, resource: Option<&str>, delay: Duration) -> HookId {
        self.push_latency(|s| &mut s.watch_delays, None, resource, delay)
    }

    /// Adds a [`Latency`] to the list `to` picks; its id.
    fn push_latency(
        &self,
        to: fn(&mut FaultState) -> &mut Vec<Latency>,
        verb: Option<&str>,
        resource: Option<&str>,
        delay: Duration,
    ) -> HookId {
        let mut s = self.lock();
        s.next_id += 1;
        let id = s.next_id;
        to(&mut s).push(Latency {
            id,
            verb: verb.map(str::to_string),
            resource: resource.map(str::to_string),
            delay,
        });
        HookId(id)
    }

    /// Remove a fault, latency or watch delay.
    pub fn remove(&self, id: HookId) {
        let mut s = self.lock();
        s.faults.retain(|f| f.id != id.0);
        s.latencies.retain(|l| l.id != id.0);
        s.watch_delays.retain(|l| l.id != id.0);
    }

    /// Remove all faults, latencies, watch delays and pending watch expiries.
    pub fn clear(&self) {
        let mut s = self.lock();
        s.faults.clear();
        s.latencies.clear();
        s.watch_delays.clear();
        s.expire_watches = 0;
    }

    /// How late the events of `resource` (a plural) are sent to watchers now.
    pub(crate) fn watch_event_delay(&self, resource: &str) -> Duration {
        total_delay(&self.lock().watch_delays, "watch", resource)
    }

    /// End every open watch stream (clients see the stream close and re-watch); a stream whose
    /// events are held back by [`Faults::delay_watch_events`] sends them first.
    pub fn close_watches(&self) {
        self.close.send_modify(|g| *g += 1);
    }

    /// End every open watch stream now, dropping the events [`Faults::delay_watch_events`] holds
    /// back (never sent): a watch that was down while objects changed, whose client resumes from
    /// the last event it got.
    pub fn drop_watches(&self) {
        self.drop.send_modify(|g| *g += 1);
    }

    /// The next `n` watch requests that give a resourceVersion get 410 Expired.
    pub fn expire_next_watches(&self, n: u64) {
        self.lock().expire_watches += n;
    }

    pub(crate) fn close_signal(&self) -> tokio::sync::watch::Receiver<u64> {
        self.close.subscribe()
    }

    pub(crate) fn drop_signal(&self) -> tokio::sync::watch::Receiver<u64> {
        self.drop.subscribe()
    }

    pub(crate) fn take_watch_expiry(&self) -> bool {
        let mut s = self.lock();
        if s.expire_watches > 0 {
            s.expire_watches -= 1;
            true
        } else {
            false
        }
    }

    /// Decide the fault (if any) and latency for a request.
    pub(crate) fn check(
        &self,
        verb: &str,
        resource: &str,
        user_agent: &str,
    ) -> (Option<FaultSpec>, Duration) {
        let mut s = self.lock();
        let delay = total_delay(&s.latencies, verb, resource);
        let mut hit = None;
        let mut exhausted = None;
        let FaultState { faults, rng, .. } = &mut *s;
        for f in faults.iter_mut() {
            if !(matches(&f.spec.verb, verb) && matches(&f.spec.resource, resource))
                || f.spec
                    .user_agent
                    .as_deref()
                    .is_some_and(|p| !user_agent.starts_with(p))
            {
                continue;
            }
            if f.spec.rate < 1.0 && rng.next_f64() >= f.spec.rate {
                continue;
            }
            if let Some(t) = f.spec.times.as_mut() {
                *t = t.saturating_sub(1);
                if *t == 0 {
                    exhausted = Some(f.id);
                }
            }
            hit = Some(f.spec.clone());
            break;
        }
        if let Some(id) = exhausted {
            s.faults.retain(|f| f.id != id);
        }
        (hit, delay)
    }
}

/// A snapshot of request counts by (verb, resource, code).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    /// Counts keyed by (verb, resource, HTTP code).
    pub by_key: BTreeMap<(String, String, u16), u64>,
}

const WRITE_VERBS: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];

impl Counters {
    /// Requests with this verb on this resource (any code).
    pub fn count(&self, verb: &str, resource: &str) -> u64 {
        self.by_key
            .iter()
            .filter(|((v, r, _), _)| v == verb && r == resource)
            .map(|(_, n)| n)
            .sum()
    }
    /// Requests with this verb, resource and code.
    pub fn get(&self, verb: &str, resource: &str, code: u16) -> u64 {
        self.by_key
            .get(&(verb.to_string(), resource.to_string(), code))
            .copied()
            .unwrap_or(0)
    }
    /// All write requests (create/update/patch/delete/deletecollection), any resource, any code.
    pub fn writes(&self) -> u64 {
        self.by_key
            .iter()
            .filter(|((v, _, _), _)| WRITE_VERBS.contains(&v.as_str()))
            .map(|(_, n)| n)
            .sum()
    }
    /// Write requests to one resource.
    pub fn writes_to(&self, resource: &str) -> u64 {
        self.by_key
            .iter()
            .filter(|((v, r, _), _)| WRITE_VERBS.contains(&v.as_str()) && r == resource)
            .map(|(_, n)| n)
            .sum()
    }
    /// Requests answered with this code.
    pub fn with_code(&self, code: u16) -> u64 {
        self.by_key
            .iter()
            .filter(|((_, _, c), _)| *c == code)
            .map(|(_, n)| n)
            .sum()
    }
    /// All requests.
    pub fn total(&self) -> u64 {
        self.by_key.values().sum()
    }
    /// Counts accumulated since an earlier snapshot.
    pub fn since(&self, earlier: &Counters) -> Counters {
        let mut by_key = BTreeMap::new();
        for (k, n) in &self.by_key {
            let d = n - earlier.by_key.get(k).copied().unwrap_or(0).min(*n);
            if d > 0 {
                by_key.insert(k.clone(), d);
            }
        }
        Counters { by_key }
    }
    /// The counts as rows, the form `GET /kmeta-apiserver/counters` serves them in.
    pub fn rows(&self) -> Vec<CounterRow> {
        self.by_key
            .iter()
            .map(|((verb, resource, code), count)| CounterRow {
                verb: verb.clone(),
                resource: resource.clone(),
                code: *code,
                count: *count,
            })
            .collect()
    }
    /// Counters from rows (a client reading `GET /kmeta-apiserver/counters` of a server in
    /// another process); rows with the same key add up.
    pub fn from_rows(rows: impl IntoIterator<Item = CounterRow>) -> Counters {
        let mut by_key = BTreeMap::new();
        for r in rows {
            *by_key.entry((r.verb, r.resource, r.code)).or_insert(0) += r.count;
        }
        Counters { by_key }
    }
}

/// One count of [`Counters`]: requests with this verb on this resource answered with this code.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CounterRow {
    /// Verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`).
    pub verb: String,
    /// Plural, with `/subresource` when there is one (`things/status`).
    pub resource: String,
    /// HTTP status code.
    pub code: u16,
    /// Number of requests.
    pub count: u64,
}

/// Live counters.
#[derive(Default)]
pub(crate) struct CounterStore(Mutex<BTreeMap<(String, String, u16), u64>>);

impl CounterStore {
    pub(crate) fn record(&self, verb: &str, resource: &str, code: u16) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((verb.to_string(), resource.to_string(), code))
            .or_insert(0) += 1;
    }
    pub(crate) fn snapshot(&self) -> Counters {
        Counters {
            by_key: self.0.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
    pub(crate) fn reset(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// One mutating request as [`WriteLog`] keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRecord {
    /// Position in the log (0, 1, 2, … in the order the answers were made).
    pub seq: u64,
    /// When the answer was made (wall clock of the server).
    pub at: std::time::SystemTime,
    /// `create`, `update`, `patch`, `delete` or `deletecollection`.
    pub verb: String,
    /// Plural, with `/subresource` when there is one (`things/status`).
    pub resource: String,
    /// Namespace from the URL.
    pub namespace: Option<String>,
    /// Name from the URL (a create names its object in the body: `None`).
    pub name: Option<String>,
    /// The request's `User-Agent` (empty when it sent none).
    pub user_agent: String,
    /// HTTP status code of the answer.
    pub code: u16,
    /// The server's resourceVersion when the request started to be carried out (after any
    /// injected latency): whatever it changed has a resourceVersion above this …
    pub rv_before: u64,
    /// … and at most this one, the server's resourceVersion when it was answered.
    pub rv_after: u64,
}

/// An opt-in log of mutating requests (off by default; [`WriteLog::enable`]): who wrote what,
/// when, and where in the server's order of changes, for a test to check writes against, e.g.,
/// a Lease holder's timeline. Bounded: beyond its capacity the oldest records are dropped.
#[derive(Default)]
pub struct WriteLog {
    on: std::sync::atomic::AtomicBool,
    inner: Mutex<WriteLogInner>,
}

#[derive(Default)]
struct WriteLogInner {
    capacity: usize,
    next: u64,
    records: std::collections::VecDeque<WriteRecord>,
}

impl WriteLog {
    /// Starts logging, keeping at most the `capacity` newest records.
    pub fn enable(&self, capacity: usize) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.capacity = capacity.max(1);
        while g.records.len() > g.capacity {
            g.records.pop_front();
        }
        self.on.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether the log is on (the request path skips it otherwise).
    pub fn enabled(&self) -> bool {
        self.on.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The kept records with `seq >= from`, oldest first.
    pub fn since(&self, from: u64) -> Vec<WriteRecord> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let start = g.records.partition_point(|r| r.seq < from);
        g.records.iter().skip(start).cloned().collect()
    }

    /// Appends a record of a `verb` request (only writes are kept, only while enabled); `seq`
    /// and `at` are set here.
    pub(crate) fn record(&self, mut r: WriteRecord) {
        if !self.enabled() || !WRITE_VERBS.contains(&r.verb.as_str()) {
            return;
        }
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        r.seq = g.next;
        r.at = std::time::SystemTime::now();
        g.next += 1;
        g.records.push_back(r);
        while g.records.len() > g.capacity {
            g.records.pop_front();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rec(verb: &str, name: &str) -> WriteRecord {
        WriteRecord {
            seq: 0,
            at: std::time::UNIX_EPOCH,
            verb: verb.into(),
            resource: "configmaps".into(),
            namespace: Some("default".into()),
            name: Some(name.into()),
            user_agent: "kmeta/0.1.0 (a)".into(),
            code: 200,
            rv_before: 1,
            rv_after: 2,
        }
    }

    #[test]
    fn write_log_is_opt_in_keeps_writes_only_and_is_bounded() {
        let log = WriteLog::default();
        log.record(rec("update", "off"));
        assert!(log.since(0).is_empty(), "off by default");
        log.enable(2);
        log.record(rec("get", "read"));
        for n in ["a", "b", "c"] {
            log.record(rec("update", n));
        }
        let kept = log.since(0);
        let names: Vec<_> = kept.iter().map(|r| r.name.as_deref().unwrap()).collect();
        assert_eq!(names, ["b", "c"], "reads skipped, the oldest write dropped");
        assert_eq!(kept.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(log.since(2).len(), 1);
        assert!(kept[0].at > std::time::UNIX_EPOCH);
    }

    #[test]
    fn a_fault_for_one_user_agent_spares_the_others() {
        let f = Faults::new(7);
        f.inject(FaultSpec::error(500).verb("create").user_agent("kmeta/"));
        assert!(f.check("create", "configmaps", "kmeta/0.1.0").0.is_some());
        assert!(f.check("create", "configmaps", "kubectl/v1.32").0.is_none());
        assert!(f.check("create", "configmaps", "").0.is_none());
    }

    #[test]
    fn fault_times_and_rate_deterministic() {
        let f = Faults::new(7);
        f.inject(
            FaultSpec::error(503)
                .verb("update")
                .resource("configmaps")
                .times(2),
        );
        assert!(f.check("get", "configmaps", "").0.is_none());
        assert_eq!(
            f.check("update", "configmaps", "").0.map(|s| s.code),
            Some(503)
        );
        assert!(f.check("update", "configmaps", "").0.is_some());
        assert!(f.check("update", "configmaps", "").0.is_none());
        let run = |seed| {
            let f = Faults::new(seed);
            f.inject(FaultSpec::error(500).rate(0.5));
            (0..64)
                .map(|_| f.check("get", "pods", "").0.is_some())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        let hits = run(1).iter().filter(|h| **h).count();
        assert!(hits > 10 && hits < 54, "{hits}");
    }

    #[test]
    fn admission_order_and_match() {
        let a = Admission::default();
        a.mutate("apps/v1", "deployments", |o, _| {
            o["x"] = json!(1);
            Ok(())
        });
        a.validate("apps/*", "deployments", |o, _| {
            if o["x"] == 1 {
                Err(AdmissionError::invalid("no"))
            } else {
                Ok(())
            }
        });
        let mut o = json!({});
        assert!(
            a.run("apps", "v1", "deployments", &mut o, Operation::Create)
                .is_err()
        );
        let mut o = json!({});
        assert!(
            a.run("", "v1", "deployments", &mut o, Operation::Create)
                .is_ok()
        );
        assert_eq!(o, json!({}));
    }

    #[test]
    fn counters_math() {
        let c = CounterStore::default();
        c.record("create", "configmaps", 201);
        c.record("get", "configmaps", 200);
        let a = c.snapshot();
        c.record("patch", "configmaps", 200);
        let b = c.snapshot();
        assert_eq!(a.writes(), 1);
        assert_eq!(b.since(&a).writes(), 1);
        assert_eq!(b.count("get", "configmaps"), 1);
    }
}
