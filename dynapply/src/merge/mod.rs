//! The three-way merge walk.
//!
//! `merge_value` works in place on the live object (a clone for [`crate::merge_with`], the
//! caller's own object for [`crate::merge_into`]): subtrees that desired does not mention are
//! never visited, list items are merged where they stand when the list's keys line up with
//! desired's (the common case) and moved (not cloned) when a list-map is rebuilt, and rule/path
//! bookkeeping is a borrowed pointer per level.
//!
//! Beside the walk: the dry run that must agree with it (`dry_run.rs`), JSON equality and the
//! hash consistent with it (`eq.rs`), and the small-map lookups both walks use (`lookup.rs`).

use crate::error::Error;
use crate::path::{KeyNames, Path, Seg};
use crate::rules::{ListRule, Node};
use crate::{MAX_DEPTH, MERGE_KEY_CANDIDATES, Ordering};
use serde_json::{Map, Value};
use std::cell::RefCell;

mod dry_run;
mod eq;
mod lookup;

pub(crate) use dry_run::would_change;
pub use eq::json_eq;
use eq::{hash_value, list_eq_pruned, mix};
pub(crate) use lookup::{in_step, mget, short_eq, vget, vget_mut};
use lookup::{mget_mut, mhas};

/// Per-merge settings threaded through the walk.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub(crate) ordering: Ordering,
    /// When set, the paths of live fields and list items kept because neither desired nor
    /// last-applied mentions them are recorded here (for explanations; off in the hot path).
    pub(crate) kept: Option<&'a RefCell<Vec<String>>>,
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
    let lists = Keyed {
        last,
        da,
        mode,
        indexes: &indexes,
    };
    merge_list_map(la, lists, rules, ctx, path, depth)
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

/// A keyed list merge's inputs besides live: last-applied and desired items, how items are
/// keyed, and the key indexes of live, last-applied and desired (in that order).
#[derive(Clone, Copy)]
struct Keyed<'a> {
    last: &'a [Value],
    da: &'a [Value],
    mode: KeyMode<'a>,
    indexes: &'a [KeyIndex; 3],
}

impl<'a> Keyed<'a> {
    /// The path segment of `item` at position `i`: its key fields, or its index in a set.
    fn seg<'v>(&self, i: usize, item: &'v Value) -> Seg<'v>
    where
        'a: 'v,
    {
        match self.mode {
            KeyMode::Fields { names, .. } => Seg::Keyed(names, item),
            KeyMode::Whole => Seg::Index(i),
        }
    }

    /// The last-applied item with the key of desired item `i` (`d`), if any.
    fn last_item_of(&self, i: usize, d: &Value) -> Option<&'a Value> {
        let [_, last_idx, desired_idx] = self.indexes;
        if last_idx.aligned {
            Some(&self.last[i])
        } else {
            last_idx
                .find(self.last, desired_idx.hashes[i], d, self.mode, i)
                .map(|k| &self.last[k])
        }
    }
}

fn merge_list_map(
    la: &mut Vec<Value>,
    lists: Keyed<'_>,
    rules: Option<&Node>,
    ctx: Ctx<'_>,
    path: &Path<'_>,
    depth: usize,
) -> Result<(), Error> {
    if lists.indexes[0].aligned {
        // Live's keys line up with desired's: item i merges with desired item i where it
        // stands. Nothing is removed or kept only from live (null positions are null in both
        // lists and stay), so both orderings leave every item in place - no rebuild.
        for (i, d) in lists.da.iter().enumerate() {
            if d.is_null() {
                continue;
            }
            let p = path.child(lists.seg(i, d));
            let last_item = lists.last_item_of(i, d);
            merge_value(&mut la[i], last_item, d, rules, ctx, &p, depth + 1)?;
        }
        return Ok(());
    }
    let (state, live_of) = classify(la, lists.last, lists.da, lists.mode, lists.indexes);
    if let Some(kept) = ctx.kept {
        for (j, item) in la.iter().enumerate() {
            if state[j] == KEPT && !item.is_null() {
                kept.borrow_mut()
                    .push(path.child(lists.seg(j, item)).render());
            }
        }
    }
    let mut old = std::mem::take(la);
    let mut out: Vec<Value> = Vec::with_capacity(old.len() + lists.da.len());
    let merged_item = |old: &mut Vec<Value>, i: usize| -> Result<Value, Error> {
        let d = &lists.da[i];
        let p = path.child(lists.seg(i, d));
        match live_of[i] {
            Some(j) => {
                let mut v = std::mem::take(&mut old[j]);
                let last_item = lists.last_item_of(i, d);
                merge_value(&mut v, last_item, d, rules, ctx, &p, depth + 1)?;
                Ok(v)
            }
            None => pruned(d, &p, depth + 1),
        }
    };
    let da = lists.da;
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

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
