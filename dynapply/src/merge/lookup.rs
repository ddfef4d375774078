//! Small-map lookups. Kubernetes objects are mostly small maps with short keys: a linear scan
//! comparing keys with [`short_eq`] (no `memcmp` call) is several times cheaper than hashing the
//! key, and two maps built from one another list their keys in the same order, so a lookup
//! walked in step with the other map ([`in_step`]) is usually one comparison.

use serde_json::{Map, Value};

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
pub(super) fn mget_mut<'a>(m: &'a mut Map<String, Value>, k: &str) -> Option<&'a mut Value> {
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
pub(super) fn mhas(m: &Map<String, Value>, k: &str) -> bool {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
}
