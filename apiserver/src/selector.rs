//! Label and field selectors in their query-string form.

use serde_json::Value;

/// Errors parsing a selector.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SelectorError {
    /// The selector string could not be parsed.
    #[error("unable to parse requirement: {0}")]
    Parse(String),
    /// A field selector names an unsupported field.
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

/// One label requirement.
#[derive(Debug, Clone, PartialEq)]
pub enum Requirement {
    /// `key=value` / `key==value`
    Eq(String, String),
    /// `key!=value`
    NotEq(String, String),
    /// `key in (a,b)`
    In(String, Vec<String>),
    /// `key notin (a,b)`
    NotIn(String, Vec<String>),
    /// `key`
    Exists(String),
    /// `!key`
    NotExists(String),
}

/// A parsed label selector: all requirements must hold.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabelSelector(pub Vec<Requirement>);

fn split_top_level(s: &str) -> Vec<String> {
    let mut out = vec![];
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c)
            }
            ')' => {
                depth -= 1;
                cur.push(c)
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn parse_set(key: &str, rest: &str, orig: &str) -> Result<Vec<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            SelectorError::Parse(format!("{orig}: expected a parenthesized set for {key}"))
        })?;
    let vals: Vec<String> = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    if let Some(bad) = vals.iter().find(|v| !valid_value(v)) {
        return Err(SelectorError::Parse(format!(
            "{orig}: invalid label value {bad:?}"
        )));
    }
    Ok(vals)
}

impl LabelSelector {
    /// Parse the string form (`a=b,c in (x,y),!d`).
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut reqs = vec![];
        for part in split_top_level(s) {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            let req = if let Some(k) = p.strip_prefix('!') {
                let k = k.trim();
                if !valid_key(k) {
                    return Err(SelectorError::Parse(format!("{p}: invalid label key")));
                }
                Requirement::NotExists(k.to_string())
            } else if let Some((k, v)) = p.split_once("!=") {
                Requirement::NotEq(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = p.split_once("==") {
                Requirement::Eq(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = p.split_once('=') {
                Requirement::Eq(k.trim().to_string(), v.trim().to_string())
            } else if let Some(idx) = p.find(" notin ").or_else(|| p.find(" notin(")) {
                let key = p[..idx].trim();
                Requirement::NotIn(key.to_string(), parse_set(key, &p[idx + 6..], p)?)
            } else if let Some(idx) = p.find(" in ").or_else(|| p.find(" in(")) {
                let key = p[..idx].trim();
                Requirement::In(key.to_string(), parse_set(key, &p[idx + 3..], p)?)
            } else {
                Requirement::Exists(p.to_string())
            };
            let key = match &req {
                Requirement::Eq(k, _)
                | Requirement::NotEq(k, _)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::NotExists(k) => k,
            };
            if !valid_key(key) {
                return Err(SelectorError::Parse(format!(
                    "{p}: invalid label key {key:?}"
                )));
            }
            if let Requirement::Eq(_, v) | Requirement::NotEq(_, v) = &req
                && !valid_value(v)
            {
                return Err(SelectorError::Parse(format!(
                    "{p}: invalid label value {v:?}"
                )));
            }
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Match against an object's `metadata.labels`.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.get("metadata").and_then(|m| m.get("labels"));
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Eq(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEq(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// One requirement of a field selector: `label=value` or `label!=value`.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldRequirement {
    /// The field label as the client wrote it (`metadata.name`, `regarding.name`).
    pub label: String,
    /// `=`/`==` (true) or `!=` (false).
    pub equals: bool,
    /// The value compared with.
    pub value: String,
    /// The field path in the stored object, when it differs from the label (labels of a
    /// version whose objects are stored in another version's form).
    pub path: Option<&'static str>,
}

/// A parsed field selector.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldSelector(pub Vec<FieldRequirement>);

impl FieldSelector {
    /// Parse `metadata.name=foo,metadata.namespace!=bar`.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut out = vec![];
        for part in s.split(',') {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            let (k, eq, v) = if let Some((k, v)) = p.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = p.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = p.split_once('=') {
                (k, true, v)
            } else {
                return Err(SelectorError::Parse(format!("{p}: invalid field selector")));
            };
            let k = k.trim();
            if k.is_empty() {
                return Err(SelectorError::Parse(format!("{p}: empty field name")));
            }
            out.push(FieldRequirement {
                label: k.to_string(),
                equals: eq,
                value: v.trim().to_string(),
                path: None,
            });
        }
        Ok(FieldSelector(out))
    }

    /// The name this selector pins, if it has `metadata.name=x`.
    pub fn exact_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|r| r.equals && r.label == "metadata.name")
            .map(|r| r.value.as_str())
    }

    /// Check every field against the fields a resource supports.
    pub fn check(&self, supported: impl Fn(&str) -> bool) -> Result<(), SelectorError> {
        match self.0.iter().find(|r| !supported(&r.label)) {
            Some(r) => Err(SelectorError::UnsupportedField(r.label.clone())),
            None => Ok(()),
        }
    }

    /// Resolves each label to the field it selects in the stored form (`stored` gives the path
    /// for labels that are not the path itself).
    pub fn resolve(mut self, stored: impl Fn(&str) -> Option<&'static str>) -> Self {
        for r in &mut self.0 {
            r.path = stored(&r.label);
        }
        self
    }

    /// Match against an object (missing fields compare as "").
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|r| {
            let path = r.path.unwrap_or(r.label.as_str());
            (field_value(obj, path) == r.value) == r.equals
        })
    }
}

/// The value a field selector compares for `path` (missing → ""). An Event's `source` label is
/// its source component, or its reporting component when that is empty (as kube-apiserver).
fn field_value(obj: &Value, path: &str) -> String {
    if path == "source"
        && let Some(source) = obj.get("source").filter(|s| s.is_object())
    {
        let component = source.get("component").and_then(Value::as_str);
        return match component.filter(|c| !c.is_empty()) {
            Some(c) => c.to_owned(),
            None => obj
                .get("reportingComponent")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        };
    }
    let mut cur = Some(obj);
    for part in path.split('.') {
        cur = cur.and_then(|c| c.get(part));
    }
    match cur {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn all_operators() {
        let o = obj(json!({"app": "web", "tier": "fe"}));
        let t = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(t("app=web"));
        assert!(t("app==web"));
        assert!(!t("app!=web"));
        assert!(t("app!=db"));
        assert!(t("app in (web,db)"));
        assert!(!t("app notin (web,db)"));
        assert!(t("missing notin (x)"));
        assert!(t("tier"));
        assert!(!t("!tier"));
        assert!(t("!missing"));
        assert!(t("app=web,tier in (fe)"));
        assert!(!t("app=web,tier in (be)"));
        assert!(t(""));
    }

    #[test]
    fn bad_selectors() {
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b=c").is_err());
        let f = FieldSelector::parse("spec.x=1").unwrap();
        assert!(f.check(|k| k.starts_with("metadata.")).is_err());
        assert!(f.matches(&json!({"spec": {"x": 1}})));
    }

    #[test]
    fn field_selector() {
        let o = obj(json!({}));
        assert!(FieldSelector::parse("metadata.name=a").unwrap().matches(&o));
        assert!(
            !FieldSelector::parse("metadata.name!=a")
                .unwrap()
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("metadata.namespace==ns")
                .unwrap()
                .matches(&o)
        );
    }

    #[test]
    fn resolved_labels_and_event_source() {
        let core = json!({"kind": "Event", "involvedObject": {"name": "w"},
            "source": {"component": ""}, "reportingComponent": "kmeta"});
        let f = FieldSelector::parse("regarding.name=w,source=kmeta")
            .unwrap()
            .resolve(|l| (l == "regarding.name").then_some("involvedObject.name"));
        assert!(f.matches(&core));
        let unresolved = FieldSelector::parse("regarding.name=w").unwrap();
        assert!(!unresolved.matches(&core));
        let with_component = json!({"source": {"component": "kubelet"}, "reportingComponent": "x"});
        assert!(
            FieldSelector::parse("source=kubelet")
                .unwrap()
                .matches(&with_component)
        );
    }
}
