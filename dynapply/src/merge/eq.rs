//! JSON equality (numbers by value, object key order ignored: [`json_eq`], dynapply's public
//! equality), the same with desired's nulls pruned ([`eq_pruned`], the no-op test of both the
//! walk and the dry run), and a hash consistent with it (equal values hash equally), which the
//! list indexes use to find items by key.

use serde_json::{Number, Value};

use super::lookup::{in_step, short_eq};

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

/// `live` equals `desired` with its nulls pruned (numbers by value, key order ignored).
pub(super) fn eq_pruned(live: &Value, desired: &Value) -> bool {
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
pub(super) fn list_eq_pruned(live: &[Value], desired: &[Value]) -> bool {
    let mut items = desired.iter().filter(|v| !v.is_null());
    for lv in live {
        match items.next() {
            Some(dv) if eq_pruned(lv, dv) => {}
            _ => return false,
        }
    }
    items.next().is_none()
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

#[inline]
pub(super) fn mix(h: u64, w: u64) -> u64 {
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
pub(super) fn hash_value(v: &Value) -> u64 {
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
}
