//! The ETag response cache of a hook (Metacontroller's `webhook.etag`): the last response body
//! per root object, sent back as `If-None-Match` and reused on `304 Not Modified`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::api::Webhook;

/// Default ETag cache entry lifetime: 60 s (Metacontroller `etag.cacheTimeoutSeconds` default).
pub const DEFAULT_ETAG_TIMEOUT: Duration = Duration::from_secs(60);
/// Default ETag cache sweep interval: 300 s (Metacontroller `etag.cacheCleanupSeconds` default).
pub const DEFAULT_ETAG_CLEANUP: Duration = Duration::from_secs(300);

#[derive(Default)]
struct Entries {
    /// Root object key → (ETag, body, stored at).
    entries: HashMap<String, (String, Vec<u8>, Instant)>,
    last_cleanup: Option<Instant>,
}

/// One hook's ETag cache.
pub struct EtagCache {
    /// How long an entry is used.
    ttl: Duration,
    /// How often expired entries are swept.
    cleanup: Duration,
    state: Mutex<Entries>,
}

impl EtagCache {
    /// The cache when the webhook enables it (entry lifetime and sweep interval from its
    /// `etag` settings, else the defaults above).
    pub fn for_webhook(w: &Webhook) -> Option<EtagCache> {
        let e = w.etag.as_ref().filter(|e| e.enabled == Some(true))?;
        let secs = |v: Option<i32>, d: Duration| {
            v.filter(|s| *s > 0)
                .map_or(d, |s| Duration::from_secs(u64::from(s.unsigned_abs())))
        };
        Some(EtagCache {
            ttl: secs(e.cache_timeout_seconds, DEFAULT_ETAG_TIMEOUT),
            cleanup: secs(e.cache_cleanup_seconds, DEFAULT_ETAG_CLEANUP),
            state: Mutex::new(Entries::default()),
        })
    }

    /// The unexpired (ETag, body) stored for `key`; sweeps expired entries once per interval.
    pub fn get(&self, key: &str) -> Option<(String, Vec<u8>)> {
        let mut c = self.state.lock().ok()?;
        let now = Instant::now();
        if c.last_cleanup
            .is_none_or(|t| now.duration_since(t) >= self.cleanup)
        {
            let ttl = self.ttl;
            c.entries
                .retain(|_, (_, _, at)| now.duration_since(*at) < ttl);
            c.last_cleanup = Some(now);
        }
        c.entries
            .get(key)
            .filter(|(_, _, at)| now.duration_since(*at) < self.ttl)
            .map(|(e, b, _)| (e.clone(), b.clone()))
    }

    /// Stores the response `body` with its `etag` for `key`.
    pub fn put(&self, key: &str, etag: String, body: &[u8]) {
        if let Ok(mut c) = self.state.lock() {
            c.entries
                .insert(key.to_owned(), (etag, body.to_vec(), Instant::now()));
        }
    }
}
