//! JSON as Go's `encoding/json` writes it, where a hash or a string must match what a Go
//! program (Metacontroller, kro) makes byte for byte: Metacontroller's ControllerRevision names
//! hash `json.Marshal` of a patch, and kro's `json.marshal` CEL function returns its text.
//!
//! What differs from `serde_json`: object keys sorted, `<`, `>`, `&`, U+2028 and U+2029 escaped
//! (Go's HTML-safe default), and a double in exponent form (`1e+21`, `1.5e-7`) below 1e-6 and
//! from 1e21 on, shortest digits otherwise.

use std::fmt::Write;

use serde_json::Value;

/// `v` as Go's `json.Marshal` writes a `map[string]interface{}` holding it: keys sorted, no
/// spaces, HTML-safe escapes.
///
/// ```
/// let v = serde_json::json!({"b": "<a>", "a": [1e21, 0.5]});
/// assert_eq!(kmeta_wire::go_json::to_string(&v), r#"{"a":[1e+21,0.5],"b":"\u003ca\u003e"}"#);
/// ```
pub fn to_string(v: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, v);
    out
}

fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => {
                let _ = write!(out, "{i}");
            }
            (None, Some(u)) => {
                let _ = write!(out, "{u}");
            }
            // serde_json numbers are finite
            (None, None) => write_float(out, n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, v);
            }
            out.push('}');
        }
    }
}

/// Appends `s` quoted as Go's `encoding/json` quotes a string: `"`, `\` and control characters
/// escaped (`\n`, `\r`, `\t` by name, the rest `\u00XX`), and HTML-safe: `<`, `>`, `&`, U+2028
/// and U+2029 as `\uXXXX`.
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends a finite double as Go's `encoding/json` writes a `float64`: the shortest digits that
/// read back to it, in exponent form below 1e-6 and from 1e21 on, with the exponent's sign
/// always written and at least two digits (`1e+21`, `1e-07` cleaned to `1e-7` as Go does).
/// Go refuses NaN and the infinities; so does the caller, before this.
pub fn write_float(out: &mut String, f: f64) {
    let abs = f.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        let _ = write!(out, "{f}");
        return;
    }
    let text = format!("{f:e}");
    let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits = exp.unsigned_abs();
    let _ = match (exp < 0, digits < 10) {
        (true, _) => write!(out, "{mantissa}e-{digits}"),
        (false, true) => write!(out, "{mantissa}e+0{digits}"),
        (false, false) => write!(out, "{mantissa}e+{digits}"),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float(f: f64) -> String {
        let mut out = String::new();
        write_float(&mut out, f);
        out
    }

    #[test]
    fn keys_are_sorted_and_html_escaped() {
        let v: Value = serde_json::from_str(
            r#"{"b": "<a>&\n\u2028\u0001", "a": [1.5e-7, 1e21, 0.5, -3, 100000000000000000000.0]}"#,
        )
        .expect("valid JSON");
        assert_eq!(
            to_string(&v),
            r#"{"a":[1.5e-7,1e+21,0.5,-3,100000000000000000000],"b":"\u003ca\u003e\u0026\n\u2028\u0001"}"#
        );
    }

    #[test]
    fn doubles_switch_to_exponents_where_go_does() {
        // the values and texts of Go's strconv.AppendFloat(f, 'e', -1, 64) after encoding/json's
        // clean-up of a negative exponent's padding
        assert_eq!(float(0.0), "0");
        assert_eq!(float(1e-6), "0.000001");
        assert_eq!(float(1e-7), "1e-7");
        assert_eq!(float(-2.5e-10), "-2.5e-10");
        assert_eq!(float(1e20), "100000000000000000000");
        assert_eq!(float(1e21), "1e+21");
        assert_eq!(float(1.25e300), "1.25e+300");
        assert_eq!(float(3.0), "3");
    }
}
