//! GET and LIST: which state a read asks for (`resourceVersion`, `resourceVersionMatch`,
//! `limit`, `continue`), selectors (label, field and KEP-5866 shard), paging and continue
//! tokens.

use super::inner::Inner;
use super::request::Req;
use crate::error::{ApiError, ApiResult};
use crate::selector::{FieldSelector, LabelSelector};
use crate::shard::ShardSelector;
use crate::store::{AtError, Key, Obj, Packed, Snapshot};
use serde_json::{Value, json};
use std::sync::Arc;

/// List parameters.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListOpts {
    /// labelSelector.
    pub label: LabelSelector,
    /// fieldSelector.
    pub field: FieldSelector,
    /// shardSelector (KEP-5866), when given and served.
    pub shard: Option<ShardSelector>,
    /// limit (0 = none).
    pub limit: usize,
    /// continue token.
    pub continue_token: Option<String>,
    /// resourceVersion.
    pub resource_version: Option<String>,
    /// resourceVersionMatch.
    pub resource_version_match: Option<String>,
}

/// `Retry-After` of the 504 for a resourceVersion the server has not reached after waiting
/// (kube-apiserver's watch cache: `resourceVersionTooHighRetrySeconds`).
pub(crate) const RV_TOO_LARGE_RETRY_SECONDS: u64 = 1;

/// 410 for an exact list older than the retained history (etcd3 store `expiredList`).
const LIST_EXPIRED: &str = "The resourceVersion for the provided list is too old.";

/// 410 for a continue token older than the retained history (etcd3 store `inconsistentContinue`).
const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// Which state a list reads, from `resourceVersion`, `resourceVersionMatch` and `limit`
/// (<https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list>).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListRead {
    /// `resourceVersion` unset (most recent) or `"0"` (any; this server has no stale cache, so
    /// any is the current state).
    Current,
    /// Not older than this rv: the current state once the server has reached it.
    NotOlderThan(u64),
    /// Exactly this rv (`resourceVersionMatch=Exact`, a continue token, or the legacy case of
    /// `limit` with `resourceVersion=N` and no match), read from the retained history.
    Exact(u64),
}

impl ListOpts {
    /// `ValidateListOptions` of kube-apiserver (422 `ListOptions.meta.k8s.io`).
    fn validate(&self) -> ApiResult<()> {
        let Some(m) = self.resource_version_match.as_deref() else {
            return Ok(());
        };
        let mut errs = vec![];
        if self.resource_version.is_none() {
            errs.push((
                "FieldValueForbidden",
                "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
                    .to_string(),
            ));
        }
        if self.continue_token.is_some() {
            errs.push((
                "FieldValueForbidden",
                "Forbidden: resourceVersionMatch is forbidden when continue is provided".into(),
            ));
        }
        if m != "Exact" && m != "NotOlderThan" {
            errs.push((
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: {m:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""
                ),
            ));
        }
        if m == "Exact" && self.resource_version.as_deref() == Some("0") {
            errs.push((
                "FieldValueForbidden",
                "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
                    .into(),
            ));
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid_fields(
                "ListOptions",
                "meta.k8s.io",
                "",
                "resourceVersionMatch",
                &errs,
            ))
        }
    }

    /// The read these options ask for (validated; the continue token is not looked at).
    pub(crate) fn read(&self) -> ApiResult<ListRead> {
        self.validate()?;
        let n = match self.resource_version.as_deref() {
            None | Some("0") => return Ok(ListRead::Current),
            Some(r) => r
                .parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {r:?}")))?,
        };
        Ok(match self.resource_version_match.as_deref() {
            Some("Exact") => ListRead::Exact(n),
            None if self.limit > 0 => ListRead::Exact(n),
            _ => ListRead::NotOlderThan(n),
        })
    }

    /// The rv a list must wait for before it is served (NotOlderThan a future rv).
    pub(crate) fn not_older_than(&self) -> Option<u64> {
        match self.read() {
            Ok(ListRead::NotOlderThan(n)) if self.continue_token.is_none() => Some(n),
            _ => None,
        }
    }
}

/// A computed list (serialized outside the lock).
#[derive(Debug)]
pub(crate) struct ListResult<T = Obj> {
    /// Items: decoded and converted to the requested version ([`Inner::list`]), or as stored
    /// ([`Inner::list_stored`]).
    pub items: Vec<T>,
    /// List resourceVersion.
    pub rv: u64,
    /// Continue token if more items remain.
    pub continue_token: Option<String>,
    /// Items left after this page.
    pub remaining: Option<u64>,
    /// The applied shard selector in canonical form (`metadata.shardInfo.selector`).
    pub shard: Option<String>,
}

impl ListOpts {
    /// Whether `o` matches the label, field and shard selectors. The shard key (uid,
    /// namespace) never changes, so an object stays in or out of a shard for its whole life.
    pub(crate) fn matches(&self, o: &serde_json::Value) -> bool {
        self.label.matches(o)
            && self.field.matches(o)
            && self.shard.as_ref().is_none_or(|s| s.matches(o))
    }

    /// Whether no selector is given (every object matches).
    pub(crate) fn selects_all(&self) -> bool {
        self.label.is_empty() && self.field.0.is_empty() && self.shard.is_none()
    }

    /// Whether the selectors read only an object's head (`store::Packed::head`): label and
    /// shard selectors do, and field selectors on `metadata.name` and `metadata.namespace`.
    pub(crate) fn reads_only_head(&self) -> bool {
        self.field.0.iter().all(|r| {
            matches!(
                r.path.unwrap_or(r.label.as_str()),
                "metadata.name" | "metadata.namespace"
            )
        })
    }

    /// Whether an object matches, reading no more of it than the selectors need: nothing, its
    /// `head`, or the `whole` object (`None`: there is no object, which matches nothing).
    pub(crate) fn matches_with(
        &self,
        head: impl FnOnce() -> Option<Obj>,
        whole: impl FnOnce() -> Option<Obj>,
    ) -> bool {
        let read = match (self.selects_all(), self.reads_only_head()) {
            (true, _) => return true,
            (false, true) => head(),
            (false, false) => whole(),
        };
        read.is_some_and(|o| self.matches(&o))
    }

    /// Whether a stored object matches, decoding it only when a selector needs to read it.
    pub(crate) fn matches_packed(&self, o: &Packed) -> bool {
        self.matches_with(|| Some(Arc::new(o.head())), || Some(o.value()))
    }

    /// A test of stored objects by their keys alone, when the only selector is a shard
    /// selector on the namespace (a sharded watch's list): each key's namespace is hashed
    /// once per run of keys in the same namespace, and no object is read. `None` when another
    /// selector needs the objects.
    pub(crate) fn by_key_namespace(&self) -> Option<impl FnMut(&Key) -> bool + '_> {
        let shard = self.shard.as_ref()?;
        if !self.label.is_empty() || !self.field.0.is_empty() {
            return None;
        }
        if !shard.reads_namespace() {
            return None;
        }
        let mut last: Option<(String, bool)> = None;
        Some(move |k: &Key| match &last {
            Some((ns, hit)) if *ns == k.ns => *hit,
            _ => {
                let hit = shard.matches_namespace(&k.ns);
                last = Some((k.ns.clone(), hit));
                hit
            }
        })
    }
}

impl Inner {
    /// GET one object.
    pub(crate) fn get(&self, req: &Req) -> ApiResult<Obj> {
        let name = req.name.as_deref().unwrap_or("");
        self.store
            .get(&req.key(name))
            .map(|o| Self::present(&o, &req.api_version()))
            .ok_or_else(|| ApiError::not_found(req.target()))
    }

    /// LIST, reading the state [`ListOpts::read`] asks for.
    ///
    /// Exact reads (`resourceVersionMatch=Exact`, continue tokens, legacy `limit` + N) come from
    /// [`crate::store::Storage::snapshot`] at that rv and carry it as the list's
    /// resourceVersion: 410 once it is compacted; a future rv is a 504
    /// `ResourceVersionTooLarge` at once, without a retry hint, because kube-apiserver serves
    /// these from etcd, which refuses a future revision immediately (etcd3 store `GetList`,
    /// `NewTooLargeResourceVersionError(rev, current, 0)`). A not-older-than read of a future
    /// rv is a 504 with `Retry-After: 1`; the HTTP layer first waits for the rv as the watch
    /// cache does ([`crate::ServerState`]), this function does not wait (it runs under the
    /// state lock).
    pub(crate) fn list(&self, req: &Req, opts: &ListOpts) -> ApiResult<ListResult> {
        let stored = self.list_stored(req, opts)?;
        let api_version = req.api_version();
        Ok(ListResult {
            items: stored
                .items
                .iter()
                .map(|o| Self::present(&o.value(), &api_version))
                .collect(),
            rv: stored.rv,
            continue_token: stored.continue_token,
            remaining: stored.remaining,
            shard: stored.shard,
        })
    }

    /// LIST as [`Inner::list`], the items as stored (nothing decoded but what selectors read):
    /// a watch's initial events are sent from their text.
    pub(crate) fn list_stored(&self, req: &Req, opts: &ListOpts) -> ApiResult<ListResult<Packed>> {
        opts.field
            .check(|f| req.def.supports_field(f))
            .map_err(|e| ApiError::bad_request(format!("fieldSelector: {e}")))?;
        let res = req.def.storage_key();
        let (read, after, carried) = read_of(opts, &res)?;
        let list_rv = list_rv(read, self.store.rv())?;
        let snap = self
            .store
            .snapshot(&res, req.ns.as_deref(), list_rv)
            .map_err(|e| snapshot_error(e, after.is_some(), list_rv))?;
        let shard = opts.shard.as_ref().map(ToString::to_string);
        if let Some(name) = opts.field.exact_name() {
            return Ok(ListResult {
                items: named(&snap, req, &res, name, opts)
                    .into_iter()
                    .cloned()
                    .collect(),
                rv: list_rv,
                continue_token: None,
                remaining: None,
                shard,
            });
        }
        let mut by_key = opts.by_key_namespace();
        let matching = snap
            .range(after.as_ref())
            .filter(|(k, o)| match &mut by_key {
                Some(in_shard) => in_shard(k),
                None => opts.matches_packed(o),
            });
        // kube-apiserver counts the rest only without a shard selector (storage
        // `PrepareContinueToken` sets it when the predicate is empty, and a shard selector
        // makes it non-empty)
        let (items, last, remaining) = page(matching, opts.limit, opts.shard.is_none(), carried);
        // the token names the last key returned, so the next page starts after it whatever
        // the selectors skipped; they are not in the token: the client repeats them
        Ok(ListResult {
            items: items.into_iter().cloned().collect(),
            rv: list_rv,
            continue_token: last.map(|(k, rest)| encode_continue(list_rv, &k.ns, &k.name, rest)),
            remaining,
            shard,
        })
    }
}

/// The error of a list at `list_rv` the store cannot serve: a compacted rv is 410 Gone (its
/// message says whether a continue token or the list's rv expired), a future one is etcd's
/// immediate `ResourceVersionTooLarge` (no wait, no retry hint).
fn snapshot_error(e: AtError, continuing: bool, list_rv: u64) -> ApiError {
    match e {
        AtError::Compacted { .. } if continuing => ApiError::gone(CONTINUE_EXPIRED),
        AtError::Compacted { .. } => ApiError::gone(LIST_EXPIRED),
        AtError::TooLarge { current } => ApiError::resource_version_too_large(list_rv, current, 0),
    }
}

/// The matching objects a `metadata.name=` field selector names: one key in the request's
/// namespace (or of a cluster-scoped resource), else that name in every namespace.
fn named<'s>(
    snap: &'s Snapshot<'_>,
    req: &Req,
    res: &Arc<str>,
    name: &str,
    opts: &ListOpts,
) -> Vec<&'s Packed> {
    if req.ns.is_some() || !req.def.namespaced {
        let key = Key {
            res: res.clone(),
            ns: req.ns.clone().unwrap_or_default(),
            name: name.to_string(),
        };
        snap.get(&key)
            .filter(|o| opts.matches_packed(o))
            .into_iter()
            .collect()
    } else {
        snap.range(None)
            .map(|(_, o)| o)
            .filter(|o| opts.matches_packed(o))
            .collect()
    }
}

/// One page of at most `limit` objects (0: all) from `matching`: the objects, the key of the
/// last one when more match after it, and how many more (when `count_rest`).
/// One page of `matching`: its items, the key it ends at with how many follow (when more
/// do), and that count as `remainingItemCount` when `count_rest`. `known_rest`, carried in the
/// continue token, is how many followed the previous page of the same snapshot: a later page
/// then costs its own items, not a count of everything after it (which made a list of 330 000
/// objects in pages of 500 take minutes).
fn page<'s>(
    mut matching: impl Iterator<Item = (&'s Key, &'s Packed)>,
    limit: usize,
    count_rest: bool,
    known_rest: Option<u64>,
) -> (Vec<&'s Packed>, Option<(Key, u64)>, Option<u64>) {
    let mut items = vec![];
    let mut cont = None;
    for (k, o) in matching.by_ref() {
        items.push(o);
        if limit > 0 && items.len() >= limit {
            cont = Some(k.clone());
            break;
        }
    }
    let Some(last) = cont else {
        return (items, None, None);
    };
    let rest = match known_rest {
        Some(n) => n.saturating_sub(items.len() as u64),
        None => matching.count() as u64,
    };
    match rest {
        0 => (items, None, None),
        rest => (items, Some((last, rest)), count_rest.then_some(rest)),
    }
}

/// The read a list asks for, and with a continue token the key it continues after and how
/// many objects followed it.
fn read_of(opts: &ListOpts, res: &Arc<str>) -> ApiResult<(ListRead, Option<Key>, Option<u64>)> {
    let Some(tok) = &opts.continue_token else {
        return Ok((opts.read()?, None, None));
    };
    opts.read()?;
    if opts.resource_version.as_deref().is_some_and(|r| r != "0") {
        return Err(ApiError::bad_request(
            "specifying resource version is not allowed when using continue",
        ));
    }
    let (rv, ns, name, rest) = decode_continue(tok)
        .ok_or_else(|| ApiError::bad_request(format!("invalid continue token {tok:?}")))?;
    let after = Key {
        res: res.clone(),
        ns,
        name,
    };
    Ok((ListRead::Exact(rv), Some(after), rest))
}

/// The resourceVersion a list reads at, given the current one (504 for a not-older-than read
/// of a future rv; the HTTP layer waited for it already).
fn list_rv(read: ListRead, current: u64) -> ApiResult<u64> {
    match read {
        ListRead::Current => Ok(current),
        ListRead::NotOlderThan(n) if n > current => Err(ApiError::resource_version_too_large(
            n,
            current,
            RV_TOO_LARGE_RETRY_SECONDS,
        )),
        ListRead::NotOlderThan(_) => Ok(current),
        ListRead::Exact(n) => Ok(n),
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// Encode a continue token (opaque to clients).
fn encode_continue(rv: u64, ns: &str, name: &str, rest: u64) -> String {
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "ns": ns, "start": name, "rest": rest});
    hex(&token.to_string())
}

/// Decode a continue token: its rv, where it starts, and how many objects followed (none in
/// a token without the count).
fn decode_continue(tok: &str) -> Option<(u64, String, String, Option<u64>)> {
    let v: Value = serde_json::from_str(&unhex(tok)?).ok()?;
    Some((
        v.get("rv")?.as_u64()?,
        v.get("ns")?.as_str()?.to_string(),
        v.get("start")?.as_str()?.to_string(),
        v.get("rest").and_then(Value::as_u64),
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A sharded watch's list tests keys, not objects: the same verdict as reading each
    /// object, and only for a namespace shard selector alone.
    #[test]
    fn a_namespace_shard_selector_is_tested_on_the_keys() {
        let shard = |field: &str| {
            let sel = format!("shardRange({field}, '0x0000000000000000', '0x8000000000000000')");
            Some(ShardSelector::parse(&sel).unwrap())
        };
        let opts = ListOpts {
            shard: shard("object.metadata.namespace"),
            ..Default::default()
        };
        let mut by_key = opts.by_key_namespace().unwrap();
        let (mut inside, mut outside) = (0, 0);
        for i in 0..200 {
            let ns = format!("team-{}", i / 3);
            let o = json!({"metadata": {"namespace": ns, "name": format!("o{i}")}});
            let key = Key {
                res: Arc::from("configmaps"),
                ns: ns.clone(),
                name: format!("o{i}"),
            };
            let packed = Packed::pack(&Arc::new(o), false);
            let hit = by_key(&key);
            assert_eq!(hit, opts.matches_packed(&packed), "{ns}");
            if hit { inside += 1 } else { outside += 1 }
        }
        assert!(inside > 0 && outside > 0, "{inside} in, {outside} out");
        let by_uid = ListOpts {
            shard: shard("object.metadata.uid"),
            ..Default::default()
        };
        assert!(by_uid.by_key_namespace().is_none());
        drop(by_key);
        let with_labels = ListOpts {
            label: LabelSelector::parse("app=x").unwrap(),
            ..opts
        };
        assert!(with_labels.by_key_namespace().is_none());
        assert!(ListOpts::default().by_key_namespace().is_none());
    }

    #[test]
    fn continue_roundtrip() {
        let t = encode_continue(5, "a", "b:c", 7);
        assert_eq!(
            decode_continue(&t),
            Some((5, "a".into(), "b:c".into(), Some(7)))
        );
        assert_eq!(decode_continue("zz"), None);
    }

    /// Pages continued with the count their token carries end where counting would end them,
    /// and say the same `remainingItemCount`.
    #[test]
    fn a_carried_count_pages_as_counting_does() {
        let objs: Vec<(Key, Packed)> = (0..7)
            .map(|i| {
                let k = Key {
                    res: Arc::from("r"),
                    ns: "n".into(),
                    name: format!("o{i}"),
                };
                (k, Packed::pack(&Arc::new(json!({"i": i})), false))
            })
            .collect();
        let from = |i: usize| objs[i..].iter().map(|(k, o)| (k, o));
        let sizes = |p: (Vec<&Packed>, Option<(Key, u64)>, Option<u64>)| {
            (p.0.len(), p.1.map(|(_, n)| n), p.2)
        };
        for known in [None, Some(7)] {
            assert_eq!(sizes(page(from(0), 3, true, known)), (3, Some(4), Some(4)));
        }
        for known in [None, Some(4)] {
            assert_eq!(sizes(page(from(3), 3, true, known)), (3, Some(1), Some(1)));
            // a page ending at the last object has no continue
            assert_eq!(sizes(page(from(3), 4, true, known)), (4, None, None));
        }
        for known in [None, Some(1)] {
            assert_eq!(sizes(page(from(6), 3, true, known)), (1, None, None));
        }
        // a sharded page says no remainingItemCount, and still continues
        assert_eq!(sizes(page(from(0), 3, false, None)), (3, Some(4), None));
    }
}
