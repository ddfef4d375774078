//! kro's `${...}` templates: a resource template (or the instance's status) with CEL
//! expressions in its strings, compiled once ([`Template::compile`]) and rendered with the data
//! of one sync ([`Template::render`]).
//!
//! As kro (`pkg/graph/parser/cel.go`): an expression runs from `${` to the matching `}`, braces
//! inside double-quoted string literals not counting; a string that is exactly one expression
//! is replaced by the expression's value, whatever its type; a string mixing text and
//! expressions is a string, each expression's value a string spliced into it; `${` inside an
//! expression is allowed only right after a `"`.

use kmeta_cel::{CelError, Expression, Scope};
use serde_json::{Map, Value};

use super::GraphError;

/// One `${...}` of a template, compiled, with where it is.
#[derive(Debug, Clone)]
pub(crate) struct Expr {
    /// The compiled expression.
    pub expression: Expression,
    /// Where it is in its template: `spec.replicas`, `metadata.labels["app"]`.
    pub path: String,
}

/// Part of a string mixing text and expressions.
#[derive(Debug, Clone)]
pub(crate) enum Part {
    /// Text as written.
    Text(String),
    /// An expression whose string value is spliced in.
    Expr(Expr),
}

/// A template compiled: the parts without expressions kept as values.
#[derive(Debug, Clone)]
pub(crate) enum Template {
    /// No expression below here.
    Literal(Value),
    /// A string that is exactly one expression: its value, of any type.
    Standalone(Expr),
    /// A string of text and expressions.
    Interpolated(Vec<Part>),
    /// An object with at least one expression below it.
    Object(Vec<(String, Template)>),
    /// An array with at least one expression below it.
    Array(Vec<Template>),
}

/// Why rendering stopped.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RenderError {
    /// An expression reads data not there yet (a field of a status not written yet): wait.
    Missing {
        /// Where.
        path: String,
        /// The expression.
        expression: String,
        /// The evaluator's words.
        reason: String,
    },
    /// An expression failed for good (a type mismatch, a function misused).
    Failed {
        /// Where.
        path: String,
        /// The expression.
        expression: String,
        /// What failed.
        reason: String,
    },
}

impl std::fmt::Display for RenderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RenderError::Missing {
                path,
                expression,
                reason,
            } => write!(f, "{path}: ${{{expression}}}: waiting for data: {reason}"),
            RenderError::Failed {
                path,
                expression,
                reason,
            } => write!(f, "{path}: ${{{expression}}}: {reason}"),
        }
    }
}

/// The expressions of `s` with their byte ranges (`${` to after `}`), as kro finds them.
pub(crate) fn find_expressions(s: &str) -> Result<Vec<(usize, usize, String)>, String> {
    let bytes = s.as_bytes();
    let mut found = Vec::new();
    let mut start = 0;
    while let Some(i) = s[start..].find("${").map(|i| i + start) {
        let (mut depth, mut j, mut in_str, mut esc) = (1usize, i + 2, false, false);
        while j < bytes.len() {
            let c = bytes[j];
            if esc {
                esc = false;
            } else if in_str && c == b'\\' {
                esc = true;
            } else if c == b'"' {
                in_str = !in_str;
            } else if !in_str && c == b'{' {
                depth += 1;
            } else if !in_str && c == b'}' {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            } else if !in_str && s[j..].starts_with("${") && bytes[j - 1] != b'"' {
                return Err(
                    "nested expressions are not allowed unless inside string literals".to_owned(),
                );
            }
            j += 1;
        }
        if depth != 0 {
            start = i + 1;
            continue;
        }
        found.push((i, j + 1, s[i + 2..j].to_owned()));
        start = j + 1;
    }
    Ok(found)
}

/// `base` and key `k` as a field path: `a.b`, or `a["x.y"]` when `k` is not a plain name.
pub(crate) fn join(base: &str, k: &str) -> String {
    let plain = !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (base.is_empty(), plain) {
        (true, true) => k.to_owned(),
        (false, true) => format!("{base}.{k}"),
        (_, false) => format!("{base}[{k:?}]"),
    }
}

fn compile_expr(source: &str, path: &str) -> Result<Expr, GraphError> {
    let expression = Expression::compile(source).map_err(|e| GraphError::Expression {
        path: path.to_owned(),
        expression: source.to_owned(),
        message: e.to_string(),
    })?;
    Ok(Expr {
        expression,
        path: path.to_owned(),
    })
}

/// The one expression of `s` when `s` is exactly `${...}` (a `readyWhen`, `includeWhen` or
/// `forEach` entry must be).
pub(crate) fn standalone(s: &str, path: &str) -> Result<Expr, GraphError> {
    let bad = |message: String| GraphError::Expression {
        path: path.to_owned(),
        expression: s.to_owned(),
        message,
    };
    match find_expressions(s).map_err(bad)?.as_slice() {
        [(0, end, source)] if *end == s.len() => compile_expr(source, path),
        _ => Err(bad("must be a single expression written as ${...}".into())),
    }
}

impl Template {
    /// Compiles `value` found at `path`.
    pub(crate) fn compile(value: &Value, path: &str) -> Result<Template, GraphError> {
        Ok(match value {
            Value::String(s) => compile_string(s, path)?,
            Value::Object(m) => {
                let mut fields = Vec::with_capacity(m.len());
                for (k, v) in m {
                    fields.push((k.clone(), Template::compile(v, &join(path, k))?));
                }
                if fields
                    .iter()
                    .all(|(_, t)| matches!(t, Template::Literal(_)))
                {
                    Template::Literal(value.clone())
                } else {
                    Template::Object(fields)
                }
            }
            Value::Array(a) => {
                let mut items = Vec::with_capacity(a.len());
                for (i, v) in a.iter().enumerate() {
                    items.push(Template::compile(v, &format!("{path}[{i}]"))?);
                }
                if items.iter().all(|t| matches!(t, Template::Literal(_))) {
                    Template::Literal(value.clone())
                } else {
                    Template::Array(items)
                }
            }
            other => Template::Literal(other.clone()),
        })
    }

    /// Every expression of the template.
    pub(crate) fn expressions(&self) -> Vec<&Expr> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a Expr>) {
        match self {
            Template::Literal(_) => {}
            Template::Standalone(e) => out.push(e),
            Template::Interpolated(parts) => out.extend(parts.iter().filter_map(|p| match p {
                Part::Expr(e) => Some(e),
                Part::Text(_) => None,
            })),
            Template::Object(fields) => fields.iter().for_each(|(_, t)| t.collect(out)),
            Template::Array(items) => items.iter().for_each(|t| t.collect(out)),
        }
    }

    /// The template with every expression evaluated in `scope`; a field or list item whose
    /// value is kro's `omit()` is left out.
    pub(crate) fn render(&self, scope: &Scope) -> Result<Value, RenderError> {
        Ok(match self {
            Template::Literal(v) => v.clone(),
            Template::Standalone(e) => {
                let mut v = evaluate(e, scope)?;
                kmeta_cel::strip_omitted(&mut v);
                v
            }
            Template::Interpolated(parts) => Value::String(interpolate(parts, scope)?),
            Template::Object(fields) => {
                let mut m = Map::with_capacity(fields.len());
                for (k, t) in fields {
                    let v = t.render(scope)?;
                    if !kmeta_cel::is_omitted(&v) {
                        m.insert(k.clone(), v);
                    }
                }
                Value::Object(m)
            }
            Template::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for t in items {
                    let v = t.render(scope)?;
                    if !kmeta_cel::is_omitted(&v) {
                        out.push(v);
                    }
                }
                Value::Array(out)
            }
        })
    }

    /// As [`Template::render`], leaving out the fields whose expressions read data not there
    /// yet (kro's instance status: a field appears once its data does).
    pub(crate) fn render_available(&self, scope: &Scope) -> Result<Option<Value>, RenderError> {
        match self {
            Template::Object(fields) => {
                let mut m = Map::with_capacity(fields.len());
                for (k, t) in fields {
                    if let Some(v) = t.render_available(scope)? {
                        m.insert(k.clone(), v);
                    }
                }
                Ok(Some(Value::Object(m)))
            }
            other => match other.render(scope) {
                Ok(v) => Ok(Some(v)),
                Err(RenderError::Missing { .. }) => Ok(None),
                Err(e) => Err(e),
            },
        }
    }
}

fn compile_string(s: &str, path: &str) -> Result<Template, GraphError> {
    let found = find_expressions(s).map_err(|message| GraphError::Expression {
        path: path.to_owned(),
        expression: s.to_owned(),
        message,
    })?;
    match found.as_slice() {
        [] => Ok(Template::Literal(Value::String(s.to_owned()))),
        [(0, end, source)] if *end == s.len() => {
            Ok(Template::Standalone(compile_expr(source, path)?))
        }
        _ => {
            let mut parts = Vec::new();
            let mut at = 0;
            for (start, end, source) in &found {
                if *start > at {
                    parts.push(Part::Text(s[at..*start].to_owned()));
                }
                parts.push(Part::Expr(compile_expr(source, path)?));
                at = *end;
            }
            if at < s.len() {
                parts.push(Part::Text(s[at..].to_owned()));
            }
            Ok(Template::Interpolated(parts))
        }
    }
}

/// `e` evaluated in `scope`, its failure placed.
pub(crate) fn evaluate(e: &Expr, scope: &Scope) -> Result<Value, RenderError> {
    e.expression
        .evaluate_in(scope)
        .map_err(|err| placed(e, err))
}

/// `e`'s failure `err` as a render error at `e`'s path.
pub(crate) fn placed(e: &Expr, err: CelError) -> RenderError {
    let (path, expression) = (e.path.clone(), e.expression.source().to_owned());
    match err {
        CelError::Evaluate {
            missing: true,
            reason,
            ..
        } => RenderError::Missing {
            path,
            expression,
            reason,
        },
        other => RenderError::Failed {
            path,
            expression,
            reason: other.to_string(),
        },
    }
}

fn interpolate(parts: &[Part], scope: &Scope) -> Result<String, RenderError> {
    let mut out = String::new();
    for p in parts {
        match p {
            Part::Text(t) => out.push_str(t),
            Part::Expr(e) => match evaluate(e, scope)? {
                Value::String(s) => out.push_str(&s),
                other => {
                    return Err(RenderError::Failed {
                        path: e.path.clone(),
                        expression: e.expression.source().to_owned(),
                        reason: format!(
                            "an expression inside a string must be a string, got {other}"
                        ),
                    });
                }
            },
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kmeta_cel::Bindings;
    use serde_json::json;

    fn scope() -> Scope {
        Scope::new(&Bindings::default().with(
            "schema",
            json!({"spec": {"name": "web", "replicas": 3, "labels": {"a": "b"}}}),
        ))
    }

    #[test]
    fn expressions_are_found_as_kro_finds_them() {
        let f = find_expressions(r#"a-${x.y}-${ {"k": "}"}.k }"#).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].2, "x.y");
        assert_eq!(f[1].2, r#" {"k": "}"}.k "#);
        assert!(find_expressions("${a(${b})}").is_err());
        assert_eq!(find_expressions(r#"${a("${b}")}"#).unwrap().len(), 1);
        assert!(find_expressions("no ${ end").unwrap().is_empty());
    }

    #[test]
    fn a_standalone_expression_keeps_its_type_and_text_makes_a_string() {
        let t = Template::compile(
            &json!({
                "replicas": "${schema.spec.replicas}",
                "labels": "${schema.spec.labels}",
                "name": "${schema.spec.name}-svc",
                "port": 80,
            }),
            "",
        )
        .unwrap();
        let out = t.render(&scope()).unwrap();
        assert_eq!(
            out,
            json!({"replicas": 3, "labels": {"a": "b"}, "name": "web-svc", "port": 80})
        );
        assert_eq!(t.expressions().len(), 3);
    }

    #[test]
    fn omit_leaves_out_the_field_or_item_and_kros_libraries_are_there() {
        let kro = Scope::kro(&Bindings::default().with("schema", json!({"spec": {"pin": false}})));
        let t = Template::compile(
            &json!({
                "nodeSelector": "${schema.spec.pin ? {'host': 'a'} : omit()}",
                "args": ["a", "${omit()}", "b"],
                "labels": "${{'keep': 'x', 'drop': omit()}}",
                "hash": "${'%x'.format([hash.fnv64a('')])}",
            }),
            "",
        )
        .unwrap();
        assert_eq!(
            t.render(&kro).unwrap(),
            json!({"args": ["a", "b"], "labels": {"keep": "x"}, "hash": "cbf29ce484222325"})
        );
    }

    #[test]
    fn a_non_string_inside_text_fails_with_its_path() {
        let t =
            Template::compile(&json!({"spec": {"x": ["n-${schema.spec.replicas}"]}}), "").unwrap();
        let e = t.render(&scope()).unwrap_err();
        assert!(
            matches!(&e, RenderError::Failed { path, .. } if path == "spec.x[0]"),
            "{e:?}"
        );
    }

    #[test]
    fn missing_data_is_told_apart_and_status_leaves_it_out() {
        let t = Template::compile(
            &json!({"ready": "${schema.status.ready}", "name": "${schema.spec.name}"}),
            "status",
        )
        .unwrap();
        assert!(matches!(
            t.render(&scope()),
            Err(RenderError::Missing { path, .. }) if path == "status.ready"
        ));
        assert_eq!(
            t.render_available(&scope()).unwrap(),
            Some(json!({"name": "web"}))
        );
    }

    #[test]
    fn paths_quote_keys_that_are_not_plain_names() {
        assert_eq!(
            join("metadata.labels", "app.kubernetes.io/name"),
            r#"metadata.labels["app.kubernetes.io/name"]"#
        );
        assert_eq!(join("", "spec"), "spec");
        assert!(standalone("x ${a}", "readyWhen[0]").is_err());
        assert!(standalone("${a == 1}", "readyWhen[0]").is_ok());
    }
}
