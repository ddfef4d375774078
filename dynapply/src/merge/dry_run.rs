//! The dry run: would a merge change the live object? Read-only, no allocation for objects and
//! scalars; used by `apply_update` to answer `Unchanged` without cloning the live object.
//! It may answer `true` when the merge turns out to be a semantic no-op (the caller then runs the
//! real merge); it never answers `false` when the merge would change something.
//!
//! It is a second walk beside the merge's own (`merge_value` in the parent module) and must
//! agree with it: `dry_run_agrees_with_merge` in `dynapply/tests/properties.rs` checks that it
//! never answers "no change" for a merge that changes something, and answers it on fixed points.

use serde_json::Value;

use super::eq::{eq_pruned, list_eq_pruned};
use super::lookup::{in_step, mget, mhas};
use super::{KEPT, KeyMode, REMOVED, all_objects, build_indexes, classify, detect_convention};
use crate::path::KeyNames;
use crate::rules::{ListRule, Node};
use crate::{MAX_DEPTH, Ordering};

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
