//! The parent one sync reads: the cached version without its sync record (`status.kmeta`, which
//! the cache holds as text beside it, docs/design/detached-record.md), that text, and the parent
//! whole once a step needs it. The steps before the hook call read the parent's metadata and
//! spec only; the hook request encodes the record's text as it is
//! ([`crate::runtime::cache::Attached`]: the same JSON as the parent whole); only a sync that
//! goes on past its hook call (to write, or to compare status) makes the parent whole.

use std::sync::{Arc, OnceLock};

use serde_json::Value;
use serde_json::value::RawValue;

use crate::runtime::cache::{Attached, Form};

/// One version of a parent, as a sync reads it.
pub(super) struct ParentRead {
    /// The parent as cached (its record detached, if it has one), or as a write returned it.
    cached: Arc<Value>,
    /// The text of the record of this very version, when the cache detached one.
    record: Option<Box<RawValue>>,
    /// The parent whole, made by the first step that needs it.
    whole: OnceLock<Arc<Value>>,
    /// Read from the cache: not the answer of a write this sync made.
    cached_version: bool,
}

impl ParentRead {
    /// A cached version and the text of its detached record.
    pub fn cached(cached: Arc<Value>, record: Option<Box<RawValue>>) -> ParentRead {
        ParentRead {
            cached,
            record,
            whole: OnceLock::new(),
            cached_version: true,
        }
    }

    /// The version a write of this sync returned (whole: written objects are not detached).
    pub fn written(parent: Arc<Value>) -> ParentRead {
        ParentRead {
            cached: parent.clone(),
            record: None,
            whole: OnceLock::from(parent),
            cached_version: false,
        }
    }

    /// The parent without its sync record: for the steps that read its metadata and spec.
    pub fn without_record(&self) -> &Value {
        &self.cached
    }

    /// The parent whole, as the API server serves it: for the hook requests other than the
    /// sync hook's, for writes and for the steps after the hook call.
    pub fn whole(&self) -> &Arc<Value> {
        self.whole.get_or_init(|| match &self.record {
            Some(text) => self
                .cached
                .attach(text)
                .map_or_else(|| self.cached.clone(), Arc::new),
            None => self.cached.clone(),
        })
    }

    /// The parent whole for encoding: the same JSON as [`ParentRead::whole`], made without
    /// copying the parent or parsing its record.
    pub fn encoded(&self) -> Attached<'_> {
        Attached {
            obj: &self.cached,
            text: self.record.as_deref(),
        }
    }

    /// Read from the cache, not returned by a write of this sync.
    pub fn is_cached(&self) -> bool {
        self.cached_version
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whole_and_encoded_are_the_parent_with_its_record() {
        let whole = json!({"metadata": {"name": "p"}, "status": {"a": 1, "kmeta": {"r": [1]}}});
        let mut cached = whole.clone();
        let text = cached.detach();
        assert!(text.is_some());
        let read = ParentRead::cached(Arc::new(cached), text);
        assert_eq!(
            read.without_record(),
            &json!({"metadata": {"name": "p"}, "status": {"a": 1}})
        );
        assert_eq!(**read.whole(), whole);
        assert_eq!(
            serde_json::to_string(&read.encoded()).unwrap(),
            serde_json::to_string(&whole).unwrap()
        );
        assert!(read.is_cached());
        let written = ParentRead::written(Arc::new(whole.clone()));
        assert!(!written.is_cached());
        assert_eq!(**written.whole(), whole);
        assert_eq!(serde_json::to_value(written.encoded()).unwrap(), whole);
    }
}
