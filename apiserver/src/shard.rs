//! Shard selectors of server-side sharded LIST and WATCH (KEP-5866, the `shardSelector` query
//! parameter): parsing and matching.
//!
//! A selector is one or more `shardRange(<field>, '<start>', '<end>')` terms joined by `||`.
//! The field is `object.metadata.uid` or `object.metadata.namespace`, the same in every term.
//! An object matches when the 64-bit FNV-1a hash of the field's value (its UTF-8 bytes; an
//! absent field is the empty string, so every cluster-scoped object hashes the empty namespace)
//! lies in one of the ranges, start inclusive, end exclusive. Bounds are single-quoted
//! lowercase hex numbers with a `0x` prefix and exactly 16 digits; the one exception is the end
//! of the whole hash space, 2^64, written `'0x10000000000000000'`.
//!
//! kube-apiserver reads the expression with a CEL parser and then accepts only this shape
//! (`k8s.io/apiserver/pkg/sharding.Parse`). This module reads the same shape by hand: `||`,
//! parentheses around terms, either quote, any whitespace between tokens. Whatever CEL would
//! accept but the shape refuses is refused here too, with a message of the same sense.

use serde_json::Value;
use std::fmt;

/// The end of the hash space: 2^64, one past the largest hash.
const SPACE_END: u128 = 1 << 64;

/// How the end of the hash space is written.
const SPACE_END_HEX: &str = "0x10000000000000000";

/// The 64-bit FNV-1a hash of `bytes` (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h: u64, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Why a shard selector was refused. The HTTP layer answers 400 with
/// `invalid shard selector: <this>`, as kube-apiserver words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ShardSelectorError {
    /// Only whitespace (an empty parameter is no selector at all).
    #[error("empty shard selector is not allowed; omit the parameter for unfiltered lists")]
    Empty,
    /// Not an expression of the grammar.
    #[error("CEL parse error: {what} at offset {at}")]
    Syntax {
        /// Byte offset in the trimmed expression.
        at: usize,
        /// What was found or missing.
        what: String,
    },
    /// A function or operator other than `shardRange` and `||`.
    #[error("unsupported function {0:?}; only shardRange() and || are allowed")]
    Function(String),
    /// A bare field path or literal where a `shardRange()` call belongs.
    #[error("unexpected expression {0:?}; expected shardRange() call or || operator")]
    NotACall(String),
    /// `shardRange` with other than three arguments.
    #[error("shardRange() requires exactly 3 arguments, got {0}")]
    Arity(usize),
    /// A field other than the supported two.
    #[error(
        "unsupported field path {0:?}; supported: object.metadata.uid, object.metadata.namespace"
    )]
    Field(String),
    /// The first argument is not a field path.
    #[error("shardRange() first argument: expected field path (e.g. object.metadata.uid)")]
    NotAPath,
    /// A bound that is not a string literal.
    #[error("{0} must be a string literal (e.g. '0xff')")]
    NotAString(&'static str),
    /// A malformed bound.
    #[error("{arg}: {why}, got {value:?}")]
    Bound {
        /// `hexStart` or `hexEnd`.
        arg: &'static str,
        /// The literal.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// An empty range.
    #[error("shard range start {start} must be less than end {end}")]
    Order {
        /// The start as written.
        start: String,
        /// The end as written.
        end: String,
    },
    /// Terms hashing different fields.
    #[error("all shard ranges must use the same field, got {first:?} and {other:?}")]
    MixedFields {
        /// The field of the first term.
        first: String,
        /// The first different field.
        other: String,
    },
}

/// The field a selector hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShardField {
    /// `object.metadata.uid`.
    Uid,
    /// `object.metadata.namespace` (empty for cluster-scoped objects).
    Namespace,
}

impl ShardField {
    fn path(self) -> &'static str {
        match self {
            ShardField::Uid => "object.metadata.uid",
            ShardField::Namespace => "object.metadata.namespace",
        }
    }

    fn of_path(path: &str) -> Option<Self> {
        match path {
            "object.metadata.uid" => Some(ShardField::Uid),
            "object.metadata.namespace" => Some(ShardField::Namespace),
            _ => None,
        }
    }

    /// The field's value in `obj`; the empty string when it is absent.
    fn value(self, obj: &Value) -> &str {
        let name = match self {
            ShardField::Uid => "uid",
            ShardField::Namespace => "namespace",
        };
        obj.get("metadata")
            .and_then(|m| m.get(name))
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// One `shardRange` term: hashes `h` with `start <= h < end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HashRange {
    start: u64,
    /// At most 2^64.
    end: u128,
}

/// A parsed `shardSelector`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardSelector {
    field: ShardField,
    ranges: Vec<HashRange>,
}

impl ShardSelector {
    /// Parse a `shardSelector` value (not empty: an empty parameter is no selector).
    pub(crate) fn parse(text: &str) -> Result<Self, ShardSelectorError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(ShardSelectorError::Empty);
        }
        let tokens = lex(text)?;
        let mut parser = Parser {
            tokens: &tokens,
            pos: 0,
            end: text.len(),
        };
        let terms = parser.or_expr()?;
        if let Some(t) = parser.tokens.get(parser.pos) {
            return Err(match &t.tok {
                Tok::Op(op) => ShardSelectorError::Function(format!("_{op}_")),
                other => ShardSelectorError::Syntax {
                    at: t.at,
                    what: format!("unexpected {other}"),
                },
            });
        }
        let Some((field, _)) = terms.first() else {
            return Err(ShardSelectorError::Empty);
        };
        let field = *field;
        if let Some((other, _)) = terms.iter().find(|(f, _)| *f != field) {
            return Err(ShardSelectorError::MixedFields {
                first: field.path().into(),
                other: other.path().into(),
            });
        }
        let ranges = terms.into_iter().map(|(_, r)| r).collect();
        Ok(ShardSelector { field, ranges })
    }

    /// Whether `obj` is in one of the ranges.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.holds(self.field.value(obj))
    }

    /// Whether the selector reads the namespace (which an object's key names: no need to read
    /// the object).
    pub(crate) fn reads_namespace(&self) -> bool {
        self.field == ShardField::Namespace
    }

    /// Whether an object in `namespace` is in one of the ranges, for a selector that
    /// [`Self::reads_namespace`].
    pub(crate) fn matches_namespace(&self, namespace: &str) -> bool {
        self.holds(namespace)
    }

    /// Whether the hash of `value` falls in one of the ranges.
    fn holds(&self, value: &str) -> bool {
        let h = u128::from(fnv1a64(value.as_bytes()));
        self.ranges
            .iter()
            .any(|r| u128::from(r.start) <= h && h < r.end)
    }
}

/// The canonical form kube-apiserver echoes in `metadata.shardInfo.selector`: each term as
/// `shardRange(<field>, '<start>', '<end>')`, joined by ` || `.
impl fmt::Display for ShardSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(" || ")?;
            }
            let end = if r.end == SPACE_END {
                SPACE_END_HEX.to_string()
            } else {
                format!("0x{:016x}", r.end)
            };
            write!(
                f,
                "shardRange({}, '0x{:016x}', '{end}')",
                self.field.path(),
                r.start
            )?;
        }
        Ok(())
    }
}

/// A token of the expression.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Str(String),
    /// A number or other literal that is not a string.
    Number(String),
    LParen,
    RParen,
    Comma,
    Dot,
    /// `||`.
    Or,
    /// Another operator (`&&`, `==`, `!`, ...).
    Op(String),
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(s) | Tok::Number(s) | Tok::Op(s) => write!(f, "{s:?}"),
            Tok::Str(s) => write!(f, "string {s:?}"),
            Tok::LParen => f.write_str("'('"),
            Tok::RParen => f.write_str("')'"),
            Tok::Comma => f.write_str("','"),
            Tok::Dot => f.write_str("'.'"),
            Tok::Or => f.write_str("'||'"),
        }
    }
}

/// A token and its byte offset.
#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    at: usize,
}

/// Split the expression into tokens.
fn lex(text: &str) -> Result<Vec<Token>, ShardSelectorError> {
    let bytes = text.as_bytes();
    let mut out = vec![];
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        let tok = match c {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            b'(' | b')' | b',' | b'.' => {
                i += 1;
                match c {
                    b'(' => Tok::LParen,
                    b')' => Tok::RParen,
                    b',' => Tok::Comma,
                    _ => Tok::Dot,
                }
            }
            b'\'' | b'"' => {
                let close =
                    text[i + 1..]
                        .find(c as char)
                        .ok_or_else(|| ShardSelectorError::Syntax {
                            at: start,
                            what: "unterminated string literal".into(),
                        })?;
                let s = text[i + 1..i + 1 + close].to_string();
                i += close + 2;
                Tok::Str(s)
            }
            b'0'..=b'9' => {
                i += bytes[i..]
                    .iter()
                    .take_while(|b| b.is_ascii_alphanumeric() || **b == b'.')
                    .count();
                Tok::Number(text[start..i].to_string())
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let len = bytes[i..]
                    .iter()
                    .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
                    .count();
                i += len;
                Tok::Ident(text[start..i].to_string())
            }
            _ => {
                let op: String = text[i..]
                    .chars()
                    .take_while(|ch| "|&=!<>+-*/%?:".contains(*ch))
                    .collect();
                if op == "||" {
                    i += 2;
                    Tok::Or
                } else if op.is_empty() {
                    let ch = text[i..].chars().next().unwrap_or('?');
                    return Err(ShardSelectorError::Syntax {
                        at: start,
                        what: format!("unexpected character {ch:?}"),
                    });
                } else {
                    i += op.len();
                    Tok::Op(op)
                }
            }
        };
        out.push(Token { tok, at: start });
    }
    Ok(out)
}

/// An argument of a call.
enum Arg {
    Path(String),
    Str(String),
    Other,
}

/// Recursive descent over the tokens: `or := primary ('||' primary)*`,
/// `primary := '(' or ')' | path '(' args ')'`.
struct Parser<'a> {
    tokens: &'a [Token],
    pos: usize,
    /// Length of the text (the offset of "end of input").
    end: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos).map(|t| &t.tok)
    }

    fn syntax(&self, what: impl Into<String>) -> ShardSelectorError {
        let at = self.tokens.get(self.pos).map_or(self.end, |t| t.at);
        let found = self
            .peek()
            .map_or("end of input".to_string(), ToString::to_string);
        ShardSelectorError::Syntax {
            at,
            what: format!("expected {}, found {found}", what.into()),
        }
    }

    fn expect(&mut self, tok: &Tok, what: &str) -> Result<(), ShardSelectorError> {
        if self.peek() == Some(tok) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.syntax(what))
        }
    }

    fn or_expr(&mut self) -> Result<Vec<(ShardField, HashRange)>, ShardSelectorError> {
        let mut terms = self.primary()?;
        while self.peek() == Some(&Tok::Or) {
            self.pos += 1;
            terms.extend(self.primary()?);
        }
        Ok(terms)
    }

    fn primary(&mut self) -> Result<Vec<(ShardField, HashRange)>, ShardSelectorError> {
        match self.peek() {
            Some(Tok::LParen) => {
                self.pos += 1;
                let terms = self.or_expr()?;
                self.expect(&Tok::RParen, "')'")?;
                Ok(terms)
            }
            Some(Tok::Ident(_)) => {
                let name = self.path()?;
                if self.peek() != Some(&Tok::LParen) {
                    return Err(ShardSelectorError::NotACall(name));
                }
                self.pos += 1;
                let args = self.args()?;
                if name != "shardRange" {
                    return Err(ShardSelectorError::Function(name));
                }
                shard_range(args).map(|t| vec![t])
            }
            Some(Tok::Str(s) | Tok::Number(s)) => Err(ShardSelectorError::NotACall(s.clone())),
            Some(Tok::Op(op)) => Err(ShardSelectorError::Function(format!("{op}_"))),
            _ => Err(self.syntax("shardRange(...)")),
        }
    }

    /// `ident ('.' ident)*`.
    fn path(&mut self) -> Result<String, ShardSelectorError> {
        let mut parts = vec![];
        loop {
            match self.peek() {
                Some(Tok::Ident(s)) => parts.push(s.clone()),
                _ => return Err(self.syntax("an identifier")),
            }
            self.pos += 1;
            if self.peek() != Some(&Tok::Dot) {
                return Ok(parts.join("."));
            }
            self.pos += 1;
        }
    }

    /// The arguments after `(`, through `)`.
    fn args(&mut self) -> Result<Vec<Arg>, ShardSelectorError> {
        let mut args = vec![];
        if self.peek() == Some(&Tok::RParen) {
            self.pos += 1;
            return Ok(args);
        }
        loop {
            let arg = match self.peek() {
                Some(Tok::Ident(_)) => Arg::Path(self.path()?),
                Some(Tok::Str(s)) => {
                    let s = s.clone();
                    self.pos += 1;
                    Arg::Str(s)
                }
                Some(Tok::Number(_)) => {
                    self.pos += 1;
                    Arg::Other
                }
                _ => return Err(self.syntax("an argument")),
            };
            args.push(arg);
            match self.peek() {
                Some(Tok::Comma) => self.pos += 1,
                Some(Tok::RParen) => {
                    self.pos += 1;
                    return Ok(args);
                }
                _ => return Err(self.syntax("',' or ')'")),
            }
        }
    }
}

/// The field and range of `shardRange(field, start, end)`.
fn shard_range(args: Vec<Arg>) -> Result<(ShardField, HashRange), ShardSelectorError> {
    let [field, start, end]: [Arg; 3] = args
        .try_into()
        .map_err(|a: Vec<Arg>| ShardSelectorError::Arity(a.len()))?;
    let field = match field {
        Arg::Path(p) => ShardField::of_path(&p).ok_or(ShardSelectorError::Field(p))?,
        _ => return Err(ShardSelectorError::NotAPath),
    };
    let (start_text, start) = bound("hexStart", start)?;
    let (end_text, end) = bound("hexEnd", end)?;
    if start >= end {
        return Err(ShardSelectorError::Order {
            start: start_text,
            end: end_text,
        });
    }
    // start < end <= 2^64, so start fits
    let start = u64::try_from(start).unwrap_or(u64::MAX);
    Ok((field, HashRange { start, end }))
}

/// A bound: a string literal `0x` + 16 lowercase hex digits, or `0x10000000000000000`.
fn bound(arg: &'static str, a: Arg) -> Result<(String, u128), ShardSelectorError> {
    let Arg::Str(value) = a else {
        return Err(ShardSelectorError::NotAString(arg));
    };
    let bad = |why: String| ShardSelectorError::Bound {
        arg,
        value: value.clone(),
        why,
    };
    let Some(digits) = value.strip_prefix("0x") else {
        return Err(bad("the value must start with '0x'".into()));
    };
    if digits.is_empty() {
        return Err(bad("hex digits are required after '0x'".into()));
    }
    if digits.len() > 17 {
        return Err(bad(format!("{} hex digits, at most 17", digits.len())));
    }
    if let Some(c) = digits.chars().find(|c| !matches!(c, '0'..='9' | 'a'..='f')) {
        return Err(bad(format!("{c:?} is not a lowercase hex digit")));
    }
    if digits.len() == 17 && value != SPACE_END_HEX {
        return Err(bad(format!(
            "the only 17-digit value is '{SPACE_END_HEX}' (2^64)"
        )));
    }
    if digits.len() < 16 {
        return Err(bad(format!(
            "write exactly 16 hex digits ('0x{digits:0>16}')"
        )));
    }
    let n = u128::from_str_radix(digits, 16).map_err(|e| bad(e.to_string()))?;
    Ok((value, n))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Bucket `b` of `n` (a power of two), as kmeta writes it: `[b·2^64/n, (b+1)·2^64/n)`.
    fn bucket(field: &str, b: u128, n: u128) -> String {
        let hex = |x: u128| {
            if x == SPACE_END {
                SPACE_END_HEX.to_string()
            } else {
                format!("0x{x:016x}")
            }
        };
        format!(
            "shardRange({field}, '{}', '{}')",
            hex(b * SPACE_END / n),
            hex((b + 1) * SPACE_END / n)
        )
    }

    fn ns(n: &str) -> Value {
        json!({"metadata": {"name": "x", "namespace": n}})
    }

    #[test]
    fn fnv1a64_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn whole_space_and_halves() {
        let all = ShardSelector::parse(&bucket("object.metadata.namespace", 0, 1)).unwrap();
        assert_eq!(
            all.to_string(),
            "shardRange(object.metadata.namespace, '0x0000000000000000', '0x10000000000000000')"
        );
        // "a" hashes to 0xaf63…: upper half
        let low = ShardSelector::parse(&bucket("object.metadata.namespace", 0, 2)).unwrap();
        let high = ShardSelector::parse(&bucket("object.metadata.namespace", 1, 2)).unwrap();
        assert!(all.matches(&ns("a")) && !low.matches(&ns("a")) && high.matches(&ns("a")));
        // a bound is inclusive at the start, exclusive at the end
        let at =
            "shardRange(object.metadata.namespace, '0xaf63dc4c8601ec8c', '0xaf63dc4c8601ec8d')";
        assert!(ShardSelector::parse(at).unwrap().matches(&ns("a")));
        let before =
            "shardRange(object.metadata.namespace, '0x0000000000000000', '0xaf63dc4c8601ec8c')";
        assert!(!ShardSelector::parse(before).unwrap().matches(&ns("a")));
    }

    #[test]
    fn buckets_partition_namespaces_uids_and_cluster_scoped_objects() {
        for n in [1u128, 2, 8, 32, 1024] {
            for i in 0..200 {
                let obj = json!({"metadata": {"namespace": format!("ns-{i}"),
                    "uid": format!("00000000-0000-0000-0000-{i:012}")}});
                for field in ["object.metadata.namespace", "object.metadata.uid"] {
                    let hits = (0..n)
                        .filter(|b| {
                            ShardSelector::parse(&bucket(field, *b, n))
                                .unwrap()
                                .matches(&obj)
                        })
                        .count();
                    assert_eq!(hits, 1, "{field} of {obj} in {hits} of {n} buckets");
                }
            }
        }
        // no namespace: the hash of "" (0xcbf2…), bucket 6 of 8
        let cluster = json!({"metadata": {"name": "node-1"}});
        let hits: Vec<u128> = (0..8)
            .filter(|b| {
                ShardSelector::parse(&bucket("object.metadata.namespace", *b, 8))
                    .unwrap()
                    .matches(&cluster)
            })
            .collect();
        assert_eq!(hits, [6]);
    }

    /// A property of FNV-1a that sharding by namespace inherits: names that differ only in
    /// their last characters differ only in the low bits of their hashes (the last step
    /// multiplies a small difference by the prime), so equal ranges of the top bits split them
    /// badly. Random uids spread.
    #[test]
    fn sequential_names_cluster_in_the_top_bits() {
        let top3 = |s: String| fnv1a64(s.as_bytes()) >> 61;
        let buckets: std::collections::BTreeSet<u64> =
            (0..20).map(|i| top3(format!("shard-{i:02}"))).collect();
        assert_eq!(buckets.len(), 1, "{buckets:?}");
        let buckets: std::collections::BTreeSet<u64> =
            (0..100).map(|i| top3(format!("team-{i}"))).collect();
        assert_eq!(buckets.len(), 2, "{buckets:?}");
    }

    #[test]
    fn ored_ranges_parentheses_quotes_and_whitespace() {
        let s = ShardSelector::parse(
            "  ( shardRange( object.metadata.uid ,\"0x0000000000000000\",'0x4000000000000000') )\
             ||shardRange(object.metadata.uid, '0xc000000000000000', '0x10000000000000000')",
        )
        .unwrap();
        assert_eq!(
            s.to_string(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000') || \
             shardRange(object.metadata.uid, '0xc000000000000000', '0x10000000000000000')"
        );
        let uid = |u: &str| json!({"metadata": {"uid": u}});
        // "" hashes to 0xcbf2… (in the second range), "a" to 0xaf63… (in neither)
        assert!(s.matches(&uid("")) && !s.matches(&uid("a")));
    }

    fn refused(text: &str, want: &str) {
        let err = ShardSelector::parse(text).unwrap_err().to_string();
        assert!(err.contains(want), "{text:?}: {err:?} lacks {want:?}");
    }

    /// `$U` stands for `shardRange(object.metadata.uid, `, `$R` for two valid bounds.
    fn expand(text: &str) -> String {
        text.replace("$U", "shardRange(object.metadata.uid, ")
            .replace("$R", "'0x0000000000000000', '0x8000000000000000'")
    }

    #[test]
    fn malformed_expressions_are_refused() {
        for (text, want) in [
            ("   ", "empty shard selector"),
            (
                "shardRange(object.metadata.name, $R)",
                "unsupported field path",
            ),
            ("shardRange(metadata.uid, $R)", "unsupported field path"),
            ("hashRange(object.metadata.uid, $R)", "unsupported function"),
            ("$U$R) && $U$R)", "unsupported function \"_&&_\""),
            ("$U'0x0000000000000000')", "exactly 3 arguments, got 2"),
            (
                "$U$R) || shardRange(object.metadata.namespace, $R)",
                "same field",
            ),
            ("$U$R", "CEL parse error"),
            ("$U$R) ||", "CEL parse error"),
            (
                "$U'0x0000000000000000, '0x8000000000000000')",
                "CEL parse error",
            ),
            ("object.metadata.uid", "expected shardRange() call"),
            ("shardRange('object.metadata.uid', $R)", "field path"),
        ] {
            refused(&expand(text), want);
        }
    }

    #[test]
    fn malformed_bounds_are_refused() {
        for (text, want) in [
            ("$U'0x0', '0x8000000000000000')", "exactly 16 hex digits"),
            (
                "$U'0x0000000000000000', '0x800000000000000000')",
                "at most 17",
            ),
            (
                "$U'0x0000000000000000', '0x800000000000000A')",
                "lowercase hex digit",
            ),
            ("$U'0000000000000000', '0x8000000000000000')", "'0x'"),
            ("$U'0x0000000000000000', '0x20000000000000000')", "17-digit"),
            ("$U0x0, '0x8000000000000000')", "string literal"),
            (
                "$U'0x8000000000000000', '0x8000000000000000')",
                "must be less than end",
            ),
            ("$U'0x', '0x8000000000000000')", "required after '0x'"),
        ] {
            refused(&expand(text), want);
        }
    }
}
