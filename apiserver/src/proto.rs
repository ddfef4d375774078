//! Minimal decoding of Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`).
//!
//! kubectl's typed generators (`kubectl create namespace|configmap|secret|serviceaccount|role|
//! clusterrole|rolebinding|clusterrolebinding|token`, `kubectl auth can-i`) send protobuf and do
//! not fall back to JSON. This decodes the envelope and the fields of those kinds
//! into JSON; other kinds are rejected with 415 so the client learns JSON is required.

use serde_json::{Map, Value, json};

/// Errors decoding protobuf.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum ProtoError {
    /// The bytes are not a valid protobuf message.
    #[error("malformed protobuf at byte {0}")]
    Malformed(usize),
    /// The magic prefix `k8s\0` is missing.
    #[error("missing k8s protobuf magic prefix")]
    NoMagic,
    /// The kind has no decoder here.
    #[error("protobuf decoding of kind {0:?} is not supported; send application/json")]
    Unsupported(String),
}

enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or(ProtoError::Malformed(self.pos))?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ProtoError::Malformed(self.pos))
    }

    fn next(&mut self) -> Result<Option<(u64, Field<'a>)>, ProtoError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = key >> 3;
        let f = match key & 7 {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.pos += 8;
                Field::Fixed
            }
            2 => {
                let len =
                    usize::try_from(self.varint()?).map_err(|_| ProtoError::Malformed(self.pos))?;
                let end = self
                    .pos
                    .checked_add(len)
                    .ok_or(ProtoError::Malformed(self.pos))?;
                let s = self
                    .buf
                    .get(self.pos..end)
                    .ok_or(ProtoError::Malformed(self.pos))?;
                self.pos = end;
                Field::Bytes(s)
            }
            5 => {
                self.pos += 4;
                Field::Fixed
            }
            _ => return Err(ProtoError::Malformed(self.pos)),
        };
        if self.pos > self.buf.len() {
            return Err(ProtoError::Malformed(self.pos));
        }
        Ok(Some((field, f)))
    }
}

fn fields(buf: &[u8]) -> Result<Vec<(u64, Field<'_>)>, ProtoError> {
    let mut r = Reader { buf, pos: 0 };
    let mut out = vec![];
    while let Some(f) = r.next()? {
        out.push(f);
    }
    Ok(out)
}

fn string(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Standard base64 with padding.
pub(crate) fn base64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A map entry (key = field 1, value = field 2).
fn map_entry(b: &[u8], bytes_value: bool) -> Result<(String, Value), ProtoError> {
    let mut k = String::new();
    let mut v = Value::String(String::new());
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(s)) => k = string(s),
            (2, Field::Bytes(s)) => {
                v = Value::String(if bytes_value { base64(s) } else { string(s) })
            }
            _ => {}
        }
    }
    Ok((k, v))
}

fn object_meta(b: &[u8]) -> Result<Value, ProtoError> {
    let mut m = Map::new();
    let mut labels = Map::new();
    let mut annotations = Map::new();
    let mut finalizers = vec![];
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(s)) => {
                m.insert("name".into(), json!(string(s)));
            }
            (2, Field::Bytes(s)) => {
                m.insert("generateName".into(), json!(string(s)));
            }
            (3, Field::Bytes(s)) => {
                m.insert("namespace".into(), json!(string(s)));
            }
            (11, Field::Bytes(s)) => {
                let (k, v) = map_entry(s, false)?;
                labels.insert(k, v);
            }
            (12, Field::Bytes(s)) => {
                let (k, v) = map_entry(s, false)?;
                annotations.insert(k, v);
            }
            (14, Field::Bytes(s)) => finalizers.push(json!(string(s))),
            _ => {}
        }
    }
    if !labels.is_empty() {
        m.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        m.insert("annotations".into(), Value::Object(annotations));
    }
    if !finalizers.is_empty() {
        m.insert("finalizers".into(), Value::Array(finalizers));
    }
    Ok(Value::Object(m))
}

/// A message of string fields, by field number and JSON name.
fn strings(b: &[u8], names: &[(u64, &str)]) -> Result<Value, ProtoError> {
    let mut m = Map::new();
    for (n, f) in fields(b)? {
        if let (Some((_, name)), Field::Bytes(s)) = (names.iter().find(|(k, _)| *k == n), f) {
            m.insert((*name).into(), json!(string(s)));
        }
    }
    Ok(Value::Object(m))
}

/// The `spec` of an access review, a rules review or a TokenRequest
/// (`authorization/v1` and `authentication/v1` `generated.proto`).
fn review_spec(kind: &str, b: &[u8]) -> Result<Value, ProtoError> {
    const RESOURCE: &[(u64, &str)] = &[
        (1, "namespace"),
        (2, "verb"),
        (3, "group"),
        (4, "version"),
        (5, "resource"),
        (6, "subresource"),
        (7, "name"),
    ];
    const NON_RESOURCE: &[(u64, &str)] = &[(1, "path"), (2, "verb")];
    let mut spec = Map::new();
    let list = |spec: &mut Map<String, Value>, key: &str, s: &[u8]| {
        let entry = spec.entry(key).or_insert_with(|| json!([]));
        if let Some(a) = entry.as_array_mut() {
            a.push(json!(string(s)));
        }
    };
    for (n, f) in fields(b)? {
        match (kind, n, f) {
            ("SelfSubjectRulesReview", 1, Field::Bytes(s)) => {
                spec.insert("namespace".into(), json!(string(s)));
            }
            ("TokenRequest", 1, Field::Bytes(s)) => list(&mut spec, "audiences", s),
            ("TokenRequest", 4, Field::Varint(v)) => {
                spec.insert("expirationSeconds".into(), json!(v));
            }
            ("SelfSubjectRulesReview" | "TokenRequest", _, _) => {}
            (_, 1, Field::Bytes(s)) => {
                spec.insert("resourceAttributes".into(), strings(s, RESOURCE)?);
            }
            (_, 2, Field::Bytes(s)) => {
                spec.insert("nonResourceAttributes".into(), strings(s, NON_RESOURCE)?);
            }
            (_, 3, Field::Bytes(s)) => {
                spec.insert("user".into(), json!(string(s)));
            }
            (_, 4, Field::Bytes(s)) => list(&mut spec, "groups", s),
            (_, 6, Field::Bytes(s)) => {
                spec.insert("uid".into(), json!(string(s)));
            }
            _ => {}
        }
    }
    Ok(Value::Object(spec))
}

/// The fields of one message that are strings or lists of strings, by field number and JSON
/// name (`true`: repeated).
fn string_fields(b: &[u8], names: &[(u64, &str, bool)]) -> Result<Value, ProtoError> {
    let mut m = Map::new();
    for (n, f) in fields(b)? {
        let (Some((_, name, repeated)), Field::Bytes(s)) =
            (names.iter().find(|(k, _, _)| *k == n), f)
        else {
            continue;
        };
        if *repeated {
            let list = m.entry(*name).or_insert_with(|| json!([]));
            if let Some(a) = list.as_array_mut() {
                a.push(json!(string(s)));
            }
        } else {
            m.insert((*name).into(), json!(string(s)));
        }
    }
    Ok(Value::Object(m))
}

/// A `LabelSelector` (`matchLabels` = 1, `matchExpressions` = 2).
fn label_selector(b: &[u8]) -> Result<Value, ProtoError> {
    let mut labels = Map::new();
    let mut exprs = vec![];
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(s)) => {
                let (k, v) = map_entry(s, false)?;
                labels.insert(k, v);
            }
            (2, Field::Bytes(s)) => exprs.push(string_fields(
                s,
                &[
                    (1, "key", false),
                    (2, "operator", false),
                    (3, "values", true),
                ],
            )?),
            _ => {}
        }
    }
    let mut sel = Map::new();
    if !labels.is_empty() {
        sel.insert("matchLabels".into(), Value::Object(labels));
    }
    if !exprs.is_empty() {
        sel.insert("matchExpressions".into(), Value::Array(exprs));
    }
    Ok(Value::Object(sel))
}

/// A Role, ClusterRole, RoleBinding or ClusterRoleBinding (`rbac/v1` `generated.proto`), as
/// `kubectl create role|clusterrole|rolebinding|clusterrolebinding` sends them.
fn decode_rbac(kind: &str, raw: &[u8], mut obj: Value) -> Result<Value, ProtoError> {
    const RULE: &[(u64, &str, bool)] = &[
        (1, "verbs", true),
        (2, "apiGroups", true),
        (3, "resources", true),
        (4, "resourceNames", true),
        (5, "nonResourceURLs", true),
    ];
    const SUBJECT: &[(u64, &str, bool)] = &[
        (1, "kind", false),
        (2, "apiGroup", false),
        (3, "name", false),
        (4, "namespace", false),
    ];
    const ROLE_REF: &[(u64, &str, bool)] = &[
        (1, "apiGroup", false),
        (2, "kind", false),
        (3, "name", false),
    ];
    if !matches!(
        kind,
        "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding"
    ) {
        return Err(ProtoError::Unsupported(kind.to_string()));
    }
    let binding = kind.ends_with("Binding");
    let mut list = vec![];
    for (n, f) in fields(raw)? {
        match (n, f, binding) {
            (1, Field::Bytes(s), _) => obj["metadata"] = object_meta(s)?,
            (2, Field::Bytes(s), false) => list.push(string_fields(s, RULE)?),
            (2, Field::Bytes(s), true) => list.push(string_fields(s, SUBJECT)?),
            (3, Field::Bytes(s), true) => obj["roleRef"] = string_fields(s, ROLE_REF)?,
            (3, Field::Bytes(s), false) => {
                let mut selectors = vec![];
                for (n, f) in fields(s)? {
                    if let (1, Field::Bytes(sel)) = (n, f) {
                        selectors.push(label_selector(sel)?);
                    }
                }
                obj["aggregationRule"] = json!({"clusterRoleSelectors": selectors});
            }
            _ => {}
        }
    }
    obj[if binding { "subjects" } else { "rules" }] = Value::Array(list);
    Ok(obj)
}

/// Whether a kind is an access or rules review or a TokenRequest (decoded by [`decode_review`]).
fn is_review(api_version: &str, kind: &str) -> bool {
    matches!(
        (api_version, kind),
        (
            "authorization.k8s.io/v1",
            "SelfSubjectAccessReview"
                | "SubjectAccessReview"
                | "LocalSubjectAccessReview"
                | "SelfSubjectRulesReview"
        ) | ("authentication.k8s.io/v1", "TokenRequest")
    )
}

/// The metadata and `spec` of a review or TokenRequest into `obj`.
fn decode_review(kind: &str, raw: &[u8], mut obj: Value) -> Result<Value, ProtoError> {
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(s)) => obj["metadata"] = object_meta(s)?,
            (2, Field::Bytes(s)) => obj["spec"] = review_spec(kind, s)?,
            _ => {}
        }
    }
    Ok(obj)
}

/// Decode a protobuf request body into a JSON object.
pub(crate) fn decode(body: &[u8]) -> Result<Value, ProtoError> {
    let rest = body.strip_prefix(b"k8s\x00").ok_or(ProtoError::NoMagic)?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for (n, f) in fields(rest)? {
        match (n, f) {
            (1, Field::Bytes(tm)) => {
                for (tn, tf) in fields(tm)? {
                    match (tn, tf) {
                        (1, Field::Bytes(s)) => api_version = string(s),
                        (2, Field::Bytes(s)) => kind = string(s),
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(r)) => raw = r,
            _ => {}
        }
    }
    let mut obj = json!({"apiVersion": api_version, "kind": kind});
    let supported = matches!(
        (api_version.as_str(), kind.as_str()),
        (
            "v1",
            "Namespace" | "ConfigMap" | "Secret" | "ServiceAccount"
        )
    );
    let review = is_review(&api_version, &kind);
    if review {
        return decode_review(&kind, raw, obj);
    }
    if api_version == "rbac.authorization.k8s.io/v1" {
        return decode_rbac(&kind, raw, obj);
    }
    if !supported {
        return Err(ProtoError::Unsupported(kind));
    }
    let mut data = Map::new();
    let mut binary = Map::new();
    let mut string_data = Map::new();
    for (n, f) in fields(raw)? {
        match (kind.as_str(), n, f) {
            (_, 1, Field::Bytes(s)) => obj["metadata"] = object_meta(s)?,
            ("ConfigMap", 2, Field::Bytes(s)) => {
                let (k, v) = map_entry(s, false)?;
                data.insert(k, v);
            }
            ("ConfigMap", 3, Field::Bytes(s)) => {
                let (k, v) = map_entry(s, true)?;
                binary.insert(k, v);
            }
            ("ConfigMap", 4, Field::Varint(v)) | ("Secret", 5, Field::Varint(v)) => {
                obj["immutable"] = json!(v != 0)
            }
            ("Secret", 2, Field::Bytes(s)) => {
                let (k, v) = map_entry(s, true)?;
                data.insert(k, v);
            }
            ("Secret", 3, Field::Bytes(s)) => obj["type"] = json!(string(s)),
            ("Secret", 4, Field::Bytes(s)) => {
                let (k, v) = map_entry(s, false)?;
                string_data.insert(k, v);
            }
            _ => {}
        }
    }
    if !data.is_empty() {
        obj["data"] = Value::Object(data);
    }
    if !binary.is_empty() {
        obj["binaryData"] = Value::Object(binary);
    }
    if !string_data.is_empty() {
        obj["stringData"] = Value::Object(string_data);
    }
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ld(field: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![(field << 3) | 2, payload.len() as u8];
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn decodes_configmap() {
        let meta = [ld(1, b"cm"), ld(11, &[ld(1, b"a"), ld(2, b"b")].concat())].concat();
        let raw = [ld(1, &meta), ld(2, &[ld(1, b"k"), ld(2, b"v")].concat())].concat();
        let tm = [ld(1, b"v1"), ld(2, b"ConfigMap")].concat();
        let body = [b"k8s\x00".to_vec(), ld(1, &tm), ld(2, &raw)].concat();
        let v = decode(&body).unwrap_or_default();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm", "labels": {"a": "b"}}, "data": {"k": "v"}})
        );
        assert_eq!(base64(b"hello"), "aGVsbG8=");
        assert_eq!(decode(b"nope"), Err(ProtoError::NoMagic));
        assert!(decode(b"k8s\x00\x0a\x50").is_err());
    }

    fn envelope(api_version: &[u8], kind: &[u8], raw: &[u8]) -> Vec<u8> {
        let tm = [ld(1, api_version), ld(2, kind)].concat();
        [b"k8s\x00".to_vec(), ld(1, &tm), ld(2, raw)].concat()
    }

    #[test]
    fn decodes_rbac_kinds_and_reviews() {
        // kubectl create rolebinding b --clusterrole=view --user=jane
        let subject = [
            ld(1, b"User"),
            ld(2, b"rbac.authorization.k8s.io"),
            ld(3, b"jane"),
        ]
        .concat();
        let role_ref = [
            ld(1, b"rbac.authorization.k8s.io"),
            ld(2, b"ClusterRole"),
            ld(3, b"view"),
        ]
        .concat();
        let raw = [ld(1, &ld(1, b"b")), ld(2, &subject), ld(3, &role_ref)].concat();
        let v = decode(&envelope(
            b"rbac.authorization.k8s.io/v1",
            b"RoleBinding",
            &raw,
        ))
        .unwrap_or_default();
        assert_eq!(
            v["subjects"],
            json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "jane"}])
        );
        assert_eq!(
            v["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"})
        );
        // a rule with the core group (an empty string) and two verbs; an aggregation rule
        let rule = [ld(1, b"get"), ld(1, b"list"), ld(2, b""), ld(3, b"pods")].concat();
        let selector = ld(1, &[ld(1, b"k"), ld(2, b"v")].concat());
        let raw = [ld(1, &ld(1, b"r")), ld(2, &rule), ld(3, &ld(1, &selector))].concat();
        let v = decode(&envelope(
            b"rbac.authorization.k8s.io/v1",
            b"ClusterRole",
            &raw,
        ))
        .unwrap_or_default();
        assert_eq!(
            v["rules"],
            json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}])
        );
        assert_eq!(
            v["aggregationRule"],
            json!({"clusterRoleSelectors": [{"matchLabels": {"k": "v"}}]})
        );
        // kubectl auth can-i list pods -n ns
        let attrs = [ld(1, b"ns"), ld(2, b"list"), ld(5, b"pods")].concat();
        let v = decode(&envelope(
            b"authorization.k8s.io/v1",
            b"SelfSubjectAccessReview",
            &ld(2, &ld(1, &attrs)),
        ))
        .unwrap_or_default();
        assert_eq!(
            v["spec"],
            json!({"resourceAttributes": {"namespace": "ns", "verb": "list", "resource": "pods"}})
        );
        assert_eq!(
            decode(&envelope(b"rbac.authorization.k8s.io/v1", b"Other", b"")),
            Err(ProtoError::Unsupported("Other".into()))
        );
    }
}
