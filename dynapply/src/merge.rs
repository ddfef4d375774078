//! The three-way merge walk.
//!
//! `merge_value` works in place on the live object (a clone for [`crate::merge_with`], the
//! caller's own object for [`crate::merge_into`]): subtrees that desired does not mention are
//! never visited, list items are merged where they stand when the list's keys line up with
//! desired's (the common case) and moved (not cloned) when a list-map is rebuilt, and rule/path
//! bookkeeping is a borrowed pointer per level.

use crate::error::Error;
use crate::path::{KeyNames, Path, Seg};
use crate::rules::{ListRule, Node};
use crate::{MAX_DEPTH, MERGE_KEY_CANDIDATES, Ordering};
use serde_json::{Map, Number, Value};
use std::cell::RefCell;

/// Per-merge settings threaded through the walk.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub(crate) ordering: Ordering,
    /// When set, the paths of live fields and list items kept because neither desired nor
    /// last-applied mentions them are recorded here (for explanations; off in the hot path).
    pub(crate) kept: Option<&'a RefCell<Vec<String>>>,
}

/// Maps up to this many entries are searched by a linear scan of the (ordered) entries instead
/// of hashing the key: Kubernetes objects are mostly small maps, and comparing a few short
/// strings is several times cheaper than one SipHash.
const SMALL_MAP: usize = 16;

/// `m.get(k)`, linear for small maps.
#[inline]
pub(crate) fn mget<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a Value> {
    if m.len() <= SMALL_MAP {
        m.iter()
            .find(|(key, _)| short_eq(key.as_bytes(), k.as_bytes()))
            .map(|(_, v)| v)
    } else {
        m.get(k)
    }
}

/// `m.get_mut(k)`, linear for small maps.
#[inline]
fn mget_mut<'a>(m: &'a mut Map<String, Value>, k: &str) -> Option<&'a mut Value> {
    if m.len() <= SMALL_MAP {
        m.iter_mut()
            .find(|(key, _)| short_eq(key.as_bytes(), k.as_bytes()))
            .map(|(_, v)| v)
    } else {
        m.get_mut(k)
    }
}

/// `m.contains_key(k)`, linear for small maps.
#[inline]
fn mhas(m: &Map<String, Value>, k: &str) -> bool {
    mget(m, k).is_some()
}

/// `v.get(k)` for an object value, linear for small maps.
#[inline]
pub(crate) fn vget<'a>(v: &'a Value, k: &str) -> Option<&'a Value> {
    match v {
        Value::Object(m) => mget(m, k),
        _ => None,
    }
}

/// `v.get_mut(k)` for an object value, linear for small maps.
#[inline]
pub(crate) fn vget_mut<'a>(v: &'a mut Value, k: &str) -> Option<&'a mut Value> {
    match v {
        Value::Object(m) => mget_mut(m, k),
        _ => None,
    }
}

fn too_deep(path: &Path<'_>) -> Error {
    Error::TooDeep {
        path: path.render(),
        limit: MAX_DEPTH,
    }
}

/// Merges `desired` (a non-null value) into `live`, replaying the change from `last`.
pub(crate) fn merge_value(
    live: &mut Value,
    last: Option<&Value>,
    desired: &Value,
    rules: Option<&Node>,
    ctx: Ctx<'_>,
    path: &Path<'_>,
    depth: usize,
) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(too_deep(path));
    }
    match (live, desired) {
        (Value::Object(lm), Value::Object(dm)) => {
            let lastm = last.and_then(Value::as_object);
            merge_map(lm, lastm, dm, rules, ctx, path, depth)
        }
        (Value::Array(la), Value::Array(da)) => {
            // Shortcut: when live already equals desired (nulls pruned), the merge keeps live
            // as it is whatever last-applied says (nothing in live is absent from desired, so
            // nothing can be removed or reordered, and every item merges onto itself).
            if ctx.kept.is_none() && list_eq_pruned(la, da) {
                return Ok(());
            }
            let last_items = match last {
                Some(Value::Array(items)) => items.as_slice(),
                _ => &[],
            };
            merge_list(la, last_items, da, rules, ctx, path, depth)
        }
        (Value::String(ls), Value::String(ds)) => {
            // Rule 4 for strings: reuse live's buffer (no allocation when it is large enough).
            if !short_eq(ls.as_bytes(), ds.as_bytes()) {
                ls.clone_from(ds);
            }
            Ok(())
        }
        (lv, dv @ (Value::Bool(_) | Value::Number(_) | Value::String(_))) => {
            // Rule 4: scalars replace (skip the write when nothing changes).
            if lv != dv {
                *lv = dv.clone();
            }
            Ok(())
        }
        (lv, dv) => {
            // Rule 3: a type change replaces the live value with desired.
            *lv = pruned(dv, path, depth)?;
            Ok(())
        }
    }
}

/// [`merge_value`] of two objects. Desired's entries are walked in order and paired with
/// live's by a cursor over live (and with last-applied's by [`in_step`]): the maps usually
/// list shared keys in the same order, so a pairing is one comparison. A desired key the
/// cursor does not meet is looked up once the walk is over; desired's keys live lacks are
/// added in desired's order, and live keeps its order.
fn merge_map(
    lm: &mut Map<String, Value>,
    lastm: Option<&Map<String, Value>>,
    dm: &Map<String, Value>,
    rules: Option<&Node>,
    ctx: Ctx<'_>,
    path: &Path<'_>,
    depth: usize,
) -> Result<(), Error> {
    if let Some(lastm) = lastm
        && !std::ptr::eq(lastm, dm)
    {
        // Rule 1: keys in last-applied but no longer in desired are removed from live.
        let mut in_desired = dm.iter();
        let any_removal = lastm
            .keys()
            .any(|k| in_step(&mut in_desired, dm, k).is_none() && mhas(lm, k));
        if any_removal {
            lm.retain(|k, _| mhas(dm, k) || !mhas(lastm, k));
        }
    }
    if let Some(kept) = ctx.kept {
        for k in lm.keys() {
            if !mhas(dm, k) && !lastm.is_some_and(|m| mhas(m, k)) {
                kept.borrow_mut().push(path.child(Seg::Field(k)).render());
            }
        }
    }
    let mut in_last = lastm.map(Map::iter);
    let mut last_of = |k: &str| match (lastm, in_last.as_mut()) {
        (Some(m), Some(cursor)) => in_step(cursor, m, k),
        _ => None,
    };
    let mut later: Vec<(&String, &Value, Option<&Value>)> = Vec::new();
    let mut in_live = lm.iter_mut();
    for (k, dv) in dm {
        let last_v = last_of(k);
        match in_live.next() {
            Some((lk, lv)) if !dv.is_null() && short_eq(lk.as_bytes(), k.as_bytes()) => {
                let p = path.child(Seg::Field(k));
                let sub_rules = rules.and_then(|r| r.child(k));
                merge_value(lv, last_v, dv, sub_rules, ctx, &p, depth + 1)?;
            }
            _ => later.push((k, dv, last_v)),
        }
    }
    for (k, dv, last_v) in later {
        if dv.is_null() {
            // Rule 2: a null in desired removes the key.
            if mhas(lm, k) {
                lm.shift_remove(k);
            }
            continue;
        }
        let p = path.child(Seg::Field(k));
        match mget_mut(lm, k) {
            Some(lv) => {
                let sub_rules = rules.and_then(|r| r.child(k));
                merge_value(lv, last_v, dv, sub_rules, ctx, &p, depth + 1)?;
            }
            None => {
                lm.insert(k.clone(), pruned(dv, &p, depth + 1)?);
            }
        }
    }
    Ok(())
}

/// A deep copy of a desired value with every null object field and null list item dropped.
pub(crate) fn pruned(v: &Value, path: &Path<'_>, depth: usize) -> Result<Value, Error> {
    if depth > MAX_DEPTH {
        return Err(too_deep(path));
    }
    Ok(match v {
        Value::Object(m) => {
            let mut out = Map::with_capacity(m.len());
            for (k, sub) in m {
                if !sub.is_null() {
                    let p = path.child(Seg::Field(k));
                    out.insert(k.clone(), pruned(sub, &p, depth + 1)?);
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, sub) in items.iter().enumerate() {
                if !sub.is_null() {
                    let p = path.child(Seg::Index(i));
                    out.push(pruned(sub, &p, depth + 1)?);
                }
            }
            Value::Array(out)
        }
        other => other.clone(),
    })
}

fn contains_null(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.values().any(contains_null),
        Value::Array(items) => items.iter().any(contains_null),
        _ => false,
    }
}

/// How list items are identified.
#[derive(Clone, Copy)]
enum KeyMode<'a> {
    /// Object items keyed by these fields (with defaults for missing fields).
    Fields {
        names: KeyNames<'a>,
        defaults: &'a [(String, Value)],
    },
    /// Set items: the whole item is the key.
    Whole,
}

impl<'a> KeyMode<'a> {
    #[inline]
    fn part<'v>(&self, item: &'v Value, i: usize) -> Option<&'v Value>
    where
        'a: 'v,
    {
        match self {
            KeyMode::Fields { names, defaults } => {
                let name = names.get(i);
                match vget(item, name) {
                    Some(Value::Null) | None => defaults
                        .iter()
                        .find(|(f, _)| f == name)
                        .map(|(_, default)| default),
                    Some(v) => Some(v),
                }
            }
            KeyMode::Whole => Some(item),
        }
    }

    fn arity(&self) -> usize {
        match self {
            KeyMode::Fields { names, .. } => names.len(),
            KeyMode::Whole => 1,
        }
    }

    /// [`KeyMode::hash`] of an item keyed by one field whose value is `part`.
    #[inline]
    fn hash_of_single(part: &Value) -> u64 {
        mix(0, hash_value(part))
    }

    fn hash(&self, item: &Value) -> u64 {
        let mut h = 0u64;
        for i in 0..self.arity() {
            h = match self.part(item, i) {
                Some(v) => mix(h, hash_value(v)),
                None => mix(h, 0x9e37_79b9_7f4a_7c15),
            };
        }
        h
    }

    fn eq(&self, a: &Value, b: &Value) -> bool {
        (0..self.arity()).all(|i| match (self.part(a, i), self.part(b, i)) {
            (Some(x), Some(y)) => json_eq(x, y),
            (None, None) => true,
            _ => false,
        })
    }
}

/// Lists up to this length are searched linearly (hash compared first); longer ones are sorted
/// by key hash and binary-searched.
const LINEAR_MAX: usize = 32;

/// Key lookup over one list: the key hash of every item by position, plus a hash-sorted copy
/// for lists longer than [`LINEAR_MAX`].
#[derive(Clone)]
struct KeyIndex {
    /// Key hash per position (null items get a hash too but are never matched); empty for an
    /// aligned list.
    hashes: Vec<u64>,
    /// This list's keys equal desired's position by position (see [`aligned`]).
    aligned: bool,
    /// `(key hash, item index)` sorted by hash; empty for short lists.
    sorted: Vec<(u64, u32)>,
}

impl KeyIndex {
    /// The index of a list aligned with desired: empty, never searched (see [`aligned`]).
    const ALIGNED: KeyIndex = KeyIndex {
        hashes: Vec::new(),
        aligned: true,
        sorted: Vec::new(),
    };

    /// The index of an empty list.
    const EMPTY: KeyIndex = KeyIndex {
        hashes: Vec::new(),
        aligned: false,
        sorted: Vec::new(),
    };

    /// Indexes `items`; `None` when two items share a key (the list is not a valid map).
    fn build(items: &[Value], mode: KeyMode<'_>) -> Option<KeyIndex> {
        let hashes: Vec<u64> = items.iter().map(|item| mode.hash(item)).collect();
        KeyIndex::from_hashes(items, hashes, mode)
    }

    /// [`KeyIndex::build`] given the key hash of every item (`mode.hash`, by position).
    fn from_hashes(items: &[Value], hashes: Vec<u64>, mode: KeyMode<'_>) -> Option<KeyIndex> {
        u32::try_from(items.len()).ok()?;
        let dup = |a: usize, b: usize| {
            !items[a].is_null() && !items[b].is_null() && mode.eq(&items[a], &items[b])
        };
        let mut sorted = Vec::new();
        if items.len() > LINEAR_MAX {
            sorted = hashes
                .iter()
                .enumerate()
                .map(|(i, h)| (*h, i as u32))
                .collect::<Vec<_>>();
            sorted.sort_unstable_by_key(|e| e.0);
            let mut start = 0;
            while start < sorted.len() {
                let mut end = start + 1;
                while end < sorted.len() && sorted[end].0 == sorted[start].0 {
                    end += 1;
                }
                for a in start..end {
                    for b in a + 1..end {
                        if dup(sorted[a].1 as usize, sorted[b].1 as usize) {
                            return None;
                        }
                    }
                }
                start = end;
            }
        } else {
            for a in 0..hashes.len() {
                for b in a + 1..hashes.len() {
                    if hashes[a] == hashes[b] && dup(a, b) {
                        return None;
                    }
                }
            }
        }
        Some(KeyIndex {
            hashes,
            aligned: false,
            sorted,
        })
    }

    /// Position in `items` (the indexed list) of the item whose key equals `probe`'s, given
    /// `probe`'s key hash. `hint` is tried first (lists are usually aligned).
    fn find(
        &self,
        items: &[Value],
        hash: u64,
        probe: &Value,
        mode: KeyMode<'_>,
        hint: usize,
    ) -> Option<usize> {
        let hit =
            |i: usize| self.hashes[i] == hash && !items[i].is_null() && mode.eq(&items[i], probe);
        if hint < self.hashes.len() && hit(hint) {
            return Some(hint);
        }
        if self.sorted.is_empty() {
            (0..self.hashes.len()).find(|&i| hit(i))
        } else {
            let start = self.sorted.partition_point(|e| e.0 < hash);
            self.sorted[start..]
                .iter()
                .take_while(|e| e.0 == hash)
                .map(|e| e.1 as usize)
                .find(|&i| hit(i))
        }
    }
}

/// Same length and, position by position, the same key (or both null).
fn aligned(items: &[Value], desired: &[Value], mode: KeyMode<'_>) -> bool {
    items.len() == desired.len()
        && items
            .iter()
            .zip(desired)
            .all(|(x, d)| match (x.is_null(), d.is_null()) {
                (true, true) => true,
                (false, false) => mode.eq(x, d),
                _ => false,
            })
}

#[inline]
fn same_slice(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len() && std::ptr::eq(a.as_ptr(), b.as_ptr())
}

fn all_objects(items: &[Value]) -> bool {
    items.iter().all(|v| v.is_object() || v.is_null())
}

/// Rule 6: the first conventional merge key present (non-null) in every item of the three lists
/// and unique within each of them.
fn detect_convention(
    live: &[Value],
    last: &[Value],
    desired: &[Value],
) -> Option<(KeyMode<'static>, [KeyIndex; 3])> {
    if !(all_objects(live) && all_objects(last) && all_objects(desired)) {
        return None;
    }
    if live.is_empty() && last.is_empty() && desired.iter().all(Value::is_null) {
        return None;
    }
    aligned_convention(live, last, desired).or_else(|| convention_by_masks(live, last, desired))
}

/// [`detect_convention`]'s general path: the candidates every item of the three lists has, by
/// one pass over each item's keys, tried in order.
fn convention_by_masks(
    live: &[Value],
    last: &[Value],
    desired: &[Value],
) -> Option<(KeyMode<'static>, [KeyIndex; 3])> {
    let mut mask = candidate_mask(live) & candidate_mask(desired);
    if !same_slice(last, desired) {
        mask &= candidate_mask(last);
    }
    for i in 0..MERGE_KEY_CANDIDATES.len() {
        if mask & (1 << i) == 0 {
            continue;
        }
        let mode = KeyMode::Fields {
            names: KeyNames::Static(&MERGE_KEY_CANDIDATES[i..=i]),
            defaults: &[],
        };
        if let Some(indexes) = build_indexes(live, last, desired, mode) {
            return Some((mode, indexes));
        }
    }
    None
}

/// [`detect_convention`] for its common case, without scanning every item's keys: live and
/// last-applied (or an empty last-applied) hold desired's items in desired's order. The
/// candidate is the first one desired's first item has; it is the convention when every
/// desired item has it (non-null), live's and last's items carry equal values at the same
/// positions, and desired's values are unique. That is what the general path would choose:
/// an earlier candidate is missing from desired's first item, and live and last then have
/// the candidate in every item, unique (they are desired's keys). `None` when any of this
/// fails (the general path decides then, from scratch).
fn aligned_convention(
    live: &[Value],
    last: &[Value],
    desired: &[Value],
) -> Option<(KeyMode<'static>, [KeyIndex; 3])> {
    let n = desired.len();
    if n == 0 || live.len() != n || !(last.is_empty() || last.len() == n) {
        return None;
    }
    let first = candidate_mask(&desired[..1]);
    if first == 0 {
        return None;
    }
    let i = first.trailing_zeros() as usize;
    let name = MERGE_KEY_CANDIDATES[i];
    fn key_of<'v>(item: &'v Value, name: &str) -> Option<&'v Value> {
        vget(item, name).filter(|v| !v.is_null())
    }
    let mut hashes = Vec::with_capacity(n);
    for (j, d) in desired.iter().enumerate() {
        let kd = key_of(d, name)?;
        if !key_of(&live[j], name).is_some_and(|kl| json_eq(kl, kd)) {
            return None;
        }
        if !last.is_empty() && !key_of(&last[j], name).is_some_and(|ka| json_eq(ka, kd)) {
            return None;
        }
        hashes.push(KeyMode::hash_of_single(kd));
    }
    let mode = KeyMode::Fields {
        names: KeyNames::Static(&MERGE_KEY_CANDIDATES[i..=i]),
        defaults: &[],
    };
    let d = KeyIndex::from_hashes(desired, hashes, mode)?;
    let a = if last.is_empty() {
        KeyIndex::EMPTY
    } else {
        KeyIndex::ALIGNED
    };
    Some((mode, [KeyIndex::ALIGNED, a, d]))
}

/// Bit `i` is set when every (non-null) item has a non-null field `MERGE_KEY_CANDIDATES[i]`;
/// one pass over each item's keys.
fn candidate_mask(items: &[Value]) -> u8 {
    let mut mask: u8 = (1 << MERGE_KEY_CANDIDATES.len()) - 1;
    for item in items {
        let Value::Object(m) = item else {
            continue;
        };
        let mut present = 0u8;
        for (k, v) in m {
            if !v.is_null() {
                present |= candidate_bit(k);
            }
        }
        mask &= present;
        if mask == 0 {
            break;
        }
    }
    mask
}

/// The bit of `MERGE_KEY_CANDIDATES` position for a field name (0 if it is not a candidate);
/// dispatches on length first so non-candidate keys cost one comparison.
#[inline]
fn candidate_bit(k: &str) -> u8 {
    const fn word(s: &[u8; 4]) -> u32 {
        u32::from_le_bytes(*s)
    }
    let b = k.as_bytes();
    match *b {
        [b0, b1, b2, b3] => match u32::from_le_bytes([b0, b1, b2, b3]) {
            w if w == word(b"port") => 1 << 1,
            w if w == word(b"name") => 1 << 3,
            w if w == word(b"path") => 1 << 6,
            _ => 0,
        },
        [b'u', b'i', b'd'] => 1 << 4,
        [b'i', b'p'] => 1 << 5,
        _ if b.len() == 13 && short_eq(b, b"containerPort") => 1,
        _ if b.len() == 9 && short_eq(b, b"mountPath") => 1 << 2,
        _ => 0,
    }
}

/// Byte equality without a `memcmp` call for the short keys and values Kubernetes objects use:
/// up to 32 bytes in at most two overlapping loads per side.
#[inline]
pub(crate) fn short_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    #[inline(always)]
    fn word<const W: usize>(s: &[u8], at: usize) -> [u8; W] {
        let mut w = [0u8; W];
        w.copy_from_slice(&s[at..at + W]);
        w
    }
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4),
        8..=16 => word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8),
        17..=32 => {
            word::<16>(a, 0) == word::<16>(b, 0) && word::<16>(a, n - 16) == word::<16>(b, n - 16)
        }
        _ => a == b,
    }
}

fn build_indexes(
    live: &[Value],
    last: &[Value],
    desired: &[Value],
    mode: KeyMode<'_>,
) -> Option<[KeyIndex; 3]> {
    let d = KeyIndex::build(desired, mode)?;
    // Lists whose keys line up with desired's position by position (the common case: live and
    // last-applied hold the same items in the same order) need no index of their own: item i
    // is desired item i (desired's keys are unique), and nothing is ever looked up in them.
    let reuse = |items: &[Value]| -> Option<KeyIndex> {
        if same_slice(items, desired) || aligned(items, desired, mode) {
            Some(KeyIndex::ALIGNED)
        } else {
            KeyIndex::build(items, mode)
        }
    };
    let l = reuse(live)?;
    let a = reuse(last)?;
    Some([l, a, d])
}

fn replace_list(
    la: &mut Vec<Value>,
    da: &[Value],
    path: &Path<'_>,
    depth: usize,
) -> Result<(), Error> {
    // Rule 5: atomic lists are replaced by desired (skip the write when already equal).
    if la.as_slice() == da && !da.iter().any(contains_null) {
        return Ok(());
    }
    let mut out = Vec::with_capacity(da.len());
    for (i, item) in da.iter().enumerate() {
        if !item.is_null() {
            let p = path.child(Seg::Index(i));
            out.push(pruned(item, &p, depth + 1)?);
        }
    }
    *la = out;
    Ok(())
}

fn merge_list(
    la: &mut Vec<Value>,
    last: &[Value],
    da: &[Value],
    rules: Option<&Node>,
    ctx: Ctx<'_>,
    path: &Path<'_>,
    depth: usize,
) -> Result<(), Error> {
    let (mode, indexes) = match rules.and_then(|n| n.rule.as_ref()) {
        Some(ListRule::Atomic) => return replace_list(la, da, path, depth),
        Some(ListRule::Set) => {
            let mode = KeyMode::Whole;
            match build_indexes(la, last, da, mode) {
                Some(indexes) => (mode, indexes),
                None => return replace_list(la, da, path, depth),
            }
        }
        Some(ListRule::Map(keys)) => {
            let mode = KeyMode::Fields {
                names: KeyNames::Owned(keys),
                defaults: rules.map(|n| n.key_defaults.as_slice()).unwrap_or(&[]),
            };
            let indexes = if all_objects(la) && all_objects(last) && all_objects(da) {
                build_indexes(la, last, da, mode)
            } else {
                None
            };
            match indexes {
                Some(indexes) => (mode, indexes),
                None => return replace_list(la, da, path, depth),
            }
        }
        None => match detect_convention(la, last, da) {
            Some((mode, indexes)) => (mode, indexes),
            None => return replace_list(la, da, path, depth),
        },
    };
    merge_list_map(la, last, da, mode, &indexes, rules, ctx, path, depth)
}

/// Rule 7: pairs desired items with live items (`live_of[i]`) and classifies every live item as
/// matched by desired, removed (in last-applied, not desired) or kept (only in live).
fn classify(
    la: &[Value],
    last: &[Value],
    da: &[Value],
    mode: KeyMode<'_>,
    indexes: &[KeyIndex; 3],
) -> (Vec<u8>, Vec<Option<usize>>) {
    let [live_idx, last_idx, desired_idx] = indexes;
    let mut state = vec![KEPT; la.len()];
    let mut live_of: Vec<Option<usize>> = Vec::with_capacity(da.len());
    if live_idx.aligned {
        // same keys at the same positions: item i is desired item i; nothing kept or removed
        // (null positions are null in both lists and stay where they are)
        for (i, d) in da.iter().enumerate() {
            if d.is_null() {
                live_of.push(None);
            } else {
                state[i] = MATCHED;
                live_of.push(Some(i));
            }
        }
        return (state, live_of);
    }
    let mut hint = 0;
    for (i, d) in da.iter().enumerate() {
        if d.is_null() {
            live_of.push(None);
            continue;
        }
        let j = live_idx.find(la, desired_idx.hashes[i], d, mode, hint);
        if let Some(j) = j {
            state[j] = MATCHED;
            hint = j + 1;
        }
        live_of.push(j);
    }
    let mut hint = 0;
    for (j, item) in la.iter().enumerate() {
        // a literal null item in live has no key: it is kept where it is. (An aligned last
        // has desired's keys, so an unmatched live item is never in it: its empty index finds
        // nothing, correctly.)
        if state[j] == KEPT
            && !item.is_null()
            && let Some(k) = last_idx.find(last, live_idx.hashes[j], item, mode, hint)
        {
            state[j] = REMOVED;
            hint = k + 1;
        }
    }
    (state, live_of)
}

const KEPT: u8 = 0;
const MATCHED: u8 = 1;
const REMOVED: u8 = 2;

#[allow(clippy::too_many_arguments)]
fn merge_list_map(
    la: &mut Vec<Value>,
    last: &[Value],
    da: &[Value],
    mode: KeyMode<'_>,
    indexes: &[KeyIndex; 3],
    rules: Option<&Node>,
    ctx: Ctx<'_>,
    path: &Path<'_>,
    depth: usize,
) -> Result<(), Error> {
    let [live_idx, last_idx, desired_idx] = indexes;
    let last_item_of = |i: usize, d: &Value| -> Option<&Value> {
        if last_idx.aligned {
            Some(&last[i])
        } else {
            last_idx
                .find(last, desired_idx.hashes[i], d, mode, i)
                .map(|k| &last[k])
        }
    };
    if live_idx.aligned {
        // Live's keys line up with desired's: item i merges with desired item i where it
        // stands. Nothing is removed or kept only from live (null positions are null in both
        // lists and stay), so both orderings leave every item in place - no rebuild.
        for (i, d) in da.iter().enumerate() {
            if d.is_null() {
                continue;
            }
            let seg = match mode {
                KeyMode::Fields { names, .. } => Seg::Keyed(names, d),
                KeyMode::Whole => Seg::Index(i),
            };
            let p = path.child(seg);
            merge_value(&mut la[i], last_item_of(i, d), d, rules, ctx, &p, depth + 1)?;
        }
        return Ok(());
    }
    let (state, live_of) = classify(la, last, da, mode, indexes);
    if let Some(kept) = ctx.kept {
        for (j, item) in la.iter().enumerate() {
            if state[j] == KEPT && !item.is_null() {
                let seg = match mode {
                    KeyMode::Fields { names, .. } => Seg::Keyed(names, item),
                    KeyMode::Whole => Seg::Index(j),
                };
                kept.borrow_mut().push(path.child(seg).render());
            }
        }
    }
    let mut old = std::mem::take(la);
    let mut out: Vec<Value> = Vec::with_capacity(old.len() + da.len());
    let merged_item = |old: &mut Vec<Value>, i: usize| -> Result<Value, Error> {
        let d = &da[i];
        let seg = match mode {
            KeyMode::Fields { names, .. } => Seg::Keyed(names, d),
            KeyMode::Whole => Seg::Index(i),
        };
        let p = path.child(seg);
        let last_item = last_item_of(i, d);
        match live_of[i] {
            Some(j) => {
                let mut v = std::mem::take(&mut old[j]);
                merge_value(&mut v, last_item, d, rules, ctx, &p, depth + 1)?;
                Ok(v)
            }
            None => pruned(d, &p, depth + 1),
        }
    };
    match ctx.ordering {
        Ordering::Desired => {
            rebuild_in_desired_order(&mut old, da, &state, &live_of, &mut out, merged_item)?;
        }
        Ordering::Metacontroller => {
            rebuild_in_live_order(&mut old, da, &state, &live_of, &mut out, merged_item)?;
        }
    }
    *la = out;
    Ok(())
}

/// Rule 8, [`Ordering::Desired`]: the merged desired items in desired order, interleaved with
/// the kept live items in live order (a kept item goes out just before the first desired item
/// whose live position is after it). `merged_item(old, i)` merges desired item `i` with its
/// live item, taking that item out of `old`.
fn rebuild_in_desired_order(
    old: &mut Vec<Value>,
    da: &[Value],
    state: &[u8],
    live_of: &[Option<usize>],
    out: &mut Vec<Value>,
    merged_item: impl Fn(&mut Vec<Value>, usize) -> Result<Value, Error>,
) -> Result<(), Error> {
    let kept: Vec<usize> = (0..old.len()).filter(|&j| state[j] == KEPT).collect();
    let mut next_kept = 0;
    for i in 0..da.len() {
        if da[i].is_null() {
            continue;
        }
        if let Some(pos) = live_of[i] {
            while next_kept < kept.len() && kept[next_kept] < pos {
                out.push(std::mem::take(&mut old[kept[next_kept]]));
                next_kept += 1;
            }
        }
        let v = merged_item(old, i)?;
        out.push(v);
    }
    for &j in &kept[next_kept..] {
        out.push(std::mem::take(&mut old[j]));
    }
    Ok(())
}

/// Rule 8, [`Ordering::Metacontroller`]: every surviving live item in live order (matched ones
/// merged where they stand), then the new desired items in desired order.
fn rebuild_in_live_order(
    old: &mut Vec<Value>,
    da: &[Value],
    state: &[u8],
    live_of: &[Option<usize>],
    out: &mut Vec<Value>,
    merged_item: impl Fn(&mut Vec<Value>, usize) -> Result<Value, Error>,
) -> Result<(), Error> {
    let mut desired_of: Vec<Option<usize>> = vec![None; old.len()];
    for (i, j) in live_of.iter().enumerate() {
        if let Some(j) = j {
            desired_of[*j] = Some(i);
        }
    }
    for j in 0..old.len() {
        match (state[j], desired_of[j]) {
            (MATCHED, Some(i)) => {
                let v = merged_item(old, i)?;
                out.push(v);
            }
            (KEPT, _) => out.push(std::mem::take(&mut old[j])),
            _ => {}
        }
    }
    for i in 0..da.len() {
        if !da[i].is_null() && live_of[i].is_none() {
            let v = merged_item(old, i)?;
            out.push(v);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Dry run: would a merge change the live object? Read-only, no allocation for objects and
// scalars; used by `apply_update` to answer `Unchanged` without cloning the live object.
// It may answer `true` when the merge turns out to be a semantic no-op (the caller then runs the
// real merge); it never answers `false` when the merge would change something.

/// `live` equals `desired` with its nulls pruned (numbers by value, key order ignored).
fn eq_pruned(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (Value::Object(l), Value::Object(d)) => {
            let mut n = 0;
            let mut ls = l.iter();
            for (k, dv) in d {
                if dv.is_null() {
                    continue;
                }
                n += 1;
                if !in_step(&mut ls, l, k).is_some_and(|lv| eq_pruned(lv, dv)) {
                    return false;
                }
            }
            n == l.len()
        }
        (Value::Array(l), Value::Array(d)) => list_eq_pruned(l, d),
        (l, d) => json_eq(l, d),
    }
}

/// `live` equals the list `desired` with null items (and null fields) pruned.
fn list_eq_pruned(live: &[Value], desired: &[Value]) -> bool {
    let mut items = desired.iter().filter(|v| !v.is_null());
    for lv in live {
        match items.next() {
            Some(dv) if eq_pruned(lv, dv) => {}
            _ => return false,
        }
    }
    items.next().is_none()
}

pub(crate) fn would_change(
    live: &Value,
    last: Option<&Value>,
    desired: &Value,
    rules: Option<&Node>,
    ordering: Ordering,
    depth: usize,
) -> bool {
    if depth > MAX_DEPTH {
        return true;
    }
    match (live, desired) {
        (Value::Object(lm), Value::Object(dm)) => {
            let lastm = last.and_then(Value::as_object);
            if let Some(lastm) = lastm
                && !std::ptr::eq(lastm, dm)
                && lastm.keys().any(|k| !mhas(dm, k) && mhas(lm, k))
            {
                return true;
            }
            let mut ls = lm.iter();
            for (k, dv) in dm {
                let lv = in_step(&mut ls, lm, k);
                if dv.is_null() {
                    if lv.is_some() {
                        return true;
                    }
                    continue;
                }
                let Some(lv) = lv else { return true };
                let sub_rules = rules.and_then(|r| r.child(k));
                if would_change(
                    lv,
                    lastm.and_then(|m| mget(m, k)),
                    dv,
                    sub_rules,
                    ordering,
                    depth + 1,
                ) {
                    return true;
                }
            }
            false
        }
        (Value::Array(la), Value::Array(da)) => {
            let last_items = match last {
                Some(Value::Array(items)) => items.as_slice(),
                _ => &[],
            };
            list_would_change(la, last_items, da, rules, ordering, depth)
        }
        (lv, dv) => !eq_pruned(lv, dv),
    }
}

fn list_would_change(
    la: &[Value],
    last: &[Value],
    da: &[Value],
    rules: Option<&Node>,
    ordering: Ordering,
    depth: usize,
) -> bool {
    if list_eq_pruned(la, da) {
        return false;
    }
    let atomic = |la: &[Value], da: &[Value]| {
        let mut items = da.iter().filter(|v| !v.is_null());
        la.iter()
            .any(|lv| !items.next().is_some_and(|dv| eq_pruned(lv, dv)))
            || items.next().is_some()
    };
    let (mode, indexes) = match rules.and_then(|n| n.rule.as_ref()) {
        Some(ListRule::Atomic) => return atomic(la, da),
        Some(ListRule::Set) => match build_indexes(la, last, da, KeyMode::Whole) {
            Some(indexes) => (KeyMode::Whole, indexes),
            None => return atomic(la, da),
        },
        Some(ListRule::Map(keys)) => {
            let mode = KeyMode::Fields {
                names: KeyNames::Owned(keys),
                defaults: rules.map(|n| n.key_defaults.as_slice()).unwrap_or(&[]),
            };
            let indexes = if all_objects(la) && all_objects(last) && all_objects(da) {
                build_indexes(la, last, da, mode)
            } else {
                None
            };
            match indexes {
                Some(indexes) => (mode, indexes),
                None => return atomic(la, da),
            }
        }
        None => match detect_convention(la, last, da) {
            Some(found) => found,
            None => return atomic(la, da),
        },
    };
    let (state, live_of) = classify(la, last, da, mode, &indexes);
    if state.contains(&REMOVED) {
        return true;
    }
    let [_, last_idx, desired_idx] = &indexes;
    // every desired item must already be in live, unchanged by its merge
    for (i, d) in da.iter().enumerate() {
        if d.is_null() {
            continue;
        }
        let Some(j) = live_of[i] else { return true };
        let last_item = if last_idx.aligned {
            Some(&last[i])
        } else {
            last_idx
                .find(last, desired_idx.hashes[i], d, mode, i)
                .map(|k| &last[k])
        };
        if would_change(&la[j], last_item, d, rules, ordering, depth + 1) {
            return true;
        }
    }
    match ordering {
        // live order is kept and nothing is appended: no reordering possible
        Ordering::Metacontroller => false,
        Ordering::Desired => desired_order_would_move(la.len(), da, &state, &live_of),
    }
}

/// Whether rule 8's interleave ([`Ordering::Desired`]) would reorder a live list whose desired
/// items are all present (`live_of[i]` is desired item `i`'s live position): it keeps live's
/// order exactly when the emitted live positions strictly increase.
fn desired_order_would_move(
    live_len: usize,
    da: &[Value],
    state: &[u8],
    live_of: &[Option<usize>],
) -> bool {
    let mut next_kept = 0;
    let mut last_pos: Option<usize> = None;
    let mut emit = |pos: usize| {
        let ok = last_pos.is_none_or(|p| pos > p);
        last_pos = Some(pos);
        ok
    };
    for (i, d) in da.iter().enumerate() {
        if d.is_null() {
            continue;
        }
        let Some(pos) = live_of[i] else { return true };
        while next_kept < live_len {
            if state[next_kept] != KEPT {
                next_kept += 1;
                continue;
            }
            if next_kept < pos {
                if !emit(next_kept) {
                    return true;
                }
                next_kept += 1;
            } else {
                break;
            }
        }
        if !emit(pos) {
            return true;
        }
    }
    while next_kept < live_len {
        if state[next_kept] == KEPT && !emit(next_kept) {
            return true;
        }
        next_kept += 1;
    }
    false
}

// ---------------------------------------------------------------------------------------------
// JSON equality (numbers by value) and hashing consistent with it.

fn int_of(n: &Number) -> Option<i128> {
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

fn num_eq(a: &Number, b: &Number) -> bool {
    match (int_of(a), int_of(b)) {
        (Some(x), Some(y)) => x == y,
        _ => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
    }
}

/// Semantic JSON equality: object key order is ignored and numbers compare by value
/// (`1` equals `1.0`).
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Number(x), Value::Number(y)) => num_eq(x, y),
        (Value::String(x), Value::String(y)) => short_eq(x.as_bytes(), y.as_bytes()),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            if x.len() != y.len() {
                return false;
            }
            // same length, unique keys: every key of x found in y with an equal value
            let mut ys = y.iter();
            x.iter()
                .all(|(k, v)| in_step(&mut ys, y, k).is_some_and(|w| json_eq(v, w)))
        }
        _ => false,
    }
}

/// The value under `k` in `m`, trying first the next entry of `cursor` (an iterator over `m`
/// walked in step with another map): maps built from one another list their keys in the same
/// order, and then every lookup is one comparison. Falls back to [`mget`] (the cursor still
/// moves on, so a later key can line up again).
#[inline(always)]
pub(crate) fn in_step<'a>(
    cursor: &mut serde_json::map::Iter<'a>,
    m: &'a Map<String, Value>,
    k: &str,
) -> Option<&'a Value> {
    match cursor.next() {
        Some((key, v)) if short_eq(key.as_bytes(), k.as_bytes()) => Some(v),
        _ => mget(m, k),
    }
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

#[inline]
fn mix(h: u64, w: u64) -> u64 {
    (h.rotate_left(5) ^ w).wrapping_mul(SEED)
}

fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = mix(0, bytes.len() as u64);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(c);
        h = mix(h, u64::from_le_bytes(buf));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut buf = [0u8; 8];
        buf[..rest.len()].copy_from_slice(rest);
        h = mix(h, u64::from_le_bytes(buf));
    }
    h
}

/// A hash consistent with [`json_eq`]: equal values hash equally.
fn hash_value(v: &Value) -> u64 {
    match v {
        Value::Null => 1,
        Value::Bool(b) => 2 + u64::from(*b),
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0);
            let f = if f == 0.0 { 0.0 } else { f };
            mix(4, f.to_bits())
        }
        Value::String(s) => mix(5, hash_bytes(s.as_bytes())),
        Value::Array(items) => items.iter().fold(mix(6, items.len() as u64), |h, item| {
            mix(h, hash_value(item))
        }),
        Value::Object(m) => {
            let sum = m.iter().fold(0u64, |acc, (k, v)| {
                acc.wrapping_add(mix(hash_bytes(k.as_bytes()), hash_value(v)))
            });
            mix(7, sum)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn short_eq_is_byte_equality_at_every_length_and_position() {
        for n in 0..72usize {
            let a: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(short_eq(&a, &a.clone()), "equal, length {n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!short_eq(&a, &b), "length {n}, differing at {at}");
            }
            let mut longer = a.clone();
            longer.push(b'z');
            assert!(!short_eq(&a, &longer), "lengths {n} and {}", n + 1);
        }
    }

    #[test]
    fn json_eq_pairs_keys_in_any_order() {
        // in step, out of step, and out of step after a common prefix
        let a = json!({"a": 1, "b": {"x": [1, 2]}, "c": "s"});
        assert!(json_eq(&a, &json!({"a": 1, "b": {"x": [1, 2]}, "c": "s"})));
        assert!(json_eq(&a, &json!({"c": "s", "b": {"x": [1, 2]}, "a": 1})));
        assert!(json_eq(&a, &json!({"a": 1, "c": "s", "b": {"x": [1, 2]}})));
        assert!(!json_eq(&a, &json!({"a": 1, "c": "s", "b": {"x": [2, 1]}})));
        assert!(!json_eq(&a, &json!({"a": 1, "b": {"x": [1, 2]}, "d": "s"})));
    }

    #[test]
    fn json_eq_numbers_by_value_and_key_order() {
        assert!(json_eq(&json!(1), &json!(1.0)));
        assert!(!json_eq(&json!(80), &json!("80")));
        assert!(json_eq(
            &json!({"a": 1, "b": 2}),
            &json!({"b": 2, "a": 1.0})
        ));
        assert!(!json_eq(&json!([1, 2]), &json!([2, 1])));
        assert!(json_eq(&json!(u64::MAX), &json!(u64::MAX)));
        assert!(!json_eq(&json!(-1), &json!(u64::MAX)));
    }

    #[test]
    fn hash_is_consistent_with_eq() {
        let pairs = [
            (json!(1), json!(1.0)),
            (json!(0.0), json!(-0.0)),
            (
                json!({"a": 1, "b": [1, "x"]}),
                json!({"b": [1.0, "x"], "a": 1}),
            ),
        ];
        for (a, b) in pairs {
            assert!(json_eq(&a, &b));
            assert_eq!(hash_value(&a), hash_value(&b), "{a} vs {b}");
        }
        assert_ne!(hash_value(&json!("80")), hash_value(&json!(80)));
    }

    #[test]
    fn candidate_bits_follow_the_candidate_list() {
        for (i, c) in MERGE_KEY_CANDIDATES.iter().enumerate() {
            assert_eq!(candidate_bit(c), 1 << i, "{c}");
        }
        for other in ["Name", "names", "value", "", "protocol", "hostPort"] {
            assert_eq!(candidate_bit(other), 0, "{other}");
        }
    }

    /// Per list: aligned, key hashes by position, hash-sorted positions.
    type IndexParts = (bool, Vec<u64>, Vec<(u64, u32)>);

    /// What a detected convention decides: the key field, and per list (live, last, desired)
    /// its index.
    fn decision(
        found: Option<(KeyMode<'static>, [KeyIndex; 3])>,
    ) -> Option<(String, Vec<IndexParts>)> {
        let (mode, indexes) = found?;
        let KeyMode::Fields { names, .. } = mode else {
            panic!("a convention keys by fields");
        };
        let indexes = indexes
            .iter()
            .map(|i| (i.aligned, i.hashes.clone(), i.sorted.clone()))
            .collect();
        Some((names.get(0).to_string(), indexes))
    }

    #[test]
    fn aligned_convention_decides_as_the_general_path() {
        // lists of items drawn from a few shapes: candidates in several orders, missing,
        // null, duplicated; live and last built from desired (aligned) or varied
        let shapes = [
            json!({"name": "a", "image": "x"}),
            json!({"name": "b", "port": 80}),
            json!({"port": 80, "name": "c"}),
            json!({"containerPort": 80, "name": "d"}),
            json!({"containerPort": 81, "name": "d"}),
            json!({"name": null, "uid": "u1"}),
            json!({"mountPath": "/a", "name": "e"}),
            json!({"name": "a", "value": "y"}),
            json!(null),
            json!("scalar"),
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % m as u64) as usize
        };
        let mut agreed_fast = 0;
        for _ in 0..20_000 {
            let n = 1 + next(6);
            let desired: Vec<Value> = (0..n).map(|_| shapes[next(shapes.len())].clone()).collect();
            let vary = |list: &[Value], pick: &mut dyn FnMut(usize) -> usize| -> Vec<Value> {
                match pick(4) {
                    0 => list.to_vec(),
                    1 => list
                        .iter()
                        .map(|v| {
                            let mut v = v.clone();
                            if let Value::Object(m) = &mut v {
                                m.insert("extra".into(), json!(1));
                            }
                            v
                        })
                        .collect(),
                    2 => Vec::new(),
                    _ => {
                        let mut l = list.to_vec();
                        let at = pick(l.len());
                        l[at] = shapes[pick(shapes.len())].clone();
                        l
                    }
                }
            };
            let live = vary(&desired, &mut next);
            let last = vary(&desired, &mut next);
            let fast = aligned_convention(&live, &last, &desired);
            if fast.is_some() {
                agreed_fast += 1;
                assert_eq!(
                    decision(fast),
                    decision(convention_by_masks(&live, &last, &desired)),
                    "live {live:?} last {last:?} desired {desired:?}"
                );
            }
        }
        assert!(agreed_fast > 1_000, "fast path taken {agreed_fast} times");
    }

    #[test]
    fn key_index_detects_duplicates_small_and_large() {
        let mode = KeyMode::Fields {
            names: KeyNames::Static(&["name"]),
            defaults: &[],
        };
        for n in [3usize, 40] {
            let mut items: Vec<Value> = (0..n).map(|i| json!({"name": format!("n{i}")})).collect();
            let idx = KeyIndex::build(&items, mode).unwrap();
            for (i, item) in items.iter().enumerate() {
                assert_eq!(idx.find(&items, mode.hash(item), item, mode, 0), Some(i));
                assert_eq!(idx.find(&items, mode.hash(item), item, mode, i), Some(i));
            }
            let zz = json!({"name": "zz"});
            assert_eq!(idx.find(&items, mode.hash(&zz), &zz, mode, 1), None);
            items.push(json!({"name": "n1", "other": true}));
            assert!(KeyIndex::build(&items, mode).is_none());
        }
    }
}
