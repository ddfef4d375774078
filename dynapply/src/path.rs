//! Lazily formatted field paths.
//!
//! The merge walks the object tree with a [`Path`] frame on the stack for every level: a parent
//! pointer plus a borrowed segment. Nothing is allocated while walking; the dotted string is only
//! built by [`Path::render`] when an error is reported.

use serde_json::Value;
use std::fmt::Write as _;

/// One step of a field path.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Seg<'a> {
    /// The top of the object.
    Root,
    /// An object field.
    Field(&'a str),
    /// A list item addressed by position (atomic lists, sets).
    Index(usize),
    /// A list-map item addressed by its key fields, rendered `[name=app]`.
    Keyed(KeyNames<'a>, &'a Value),
}

/// The key field names of a list-map, borrowed either from the convention's static list or from
/// an explicit rule.
#[derive(Clone, Copy, Debug)]
pub(crate) enum KeyNames<'a> {
    Static(&'static [&'static str]),
    Owned(&'a [String]),
}

impl<'a> KeyNames<'a> {
    pub(crate) fn len(&self) -> usize {
        match self {
            KeyNames::Static(s) => s.len(),
            KeyNames::Owned(s) => s.len(),
        }
    }

    pub(crate) fn get(&self, i: usize) -> &'a str {
        match self {
            KeyNames::Static(s) => s[i],
            KeyNames::Owned(s) => s[i].as_str(),
        }
    }
}

/// A path frame: a segment and the frame of its parent.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    seg: Seg<'a>,
}

impl<'a> Path<'a> {
    pub(crate) const ROOT: Path<'static> = Path {
        parent: None,
        seg: Seg::Root,
    };

    pub(crate) fn child(&'a self, seg: Seg<'a>) -> Path<'a> {
        Path {
            parent: Some(self),
            seg,
        }
    }

    /// Formats the path, e.g. `spec.template.spec.containers[name=app].ports`; `<root>` for the
    /// top of the object.
    pub(crate) fn render(&self) -> String {
        let mut segs: Vec<Seg<'_>> = Vec::new();
        let mut cur = Some(self);
        while let Some(p) = cur {
            segs.push(p.seg);
            cur = p.parent;
        }
        let mut out = String::new();
        for seg in segs.iter().rev() {
            match seg {
                Seg::Root => {}
                Seg::Field(name) => {
                    if name.is_empty()
                        || name.contains(|c: char| {
                            !(c.is_ascii_alphanumeric() || c == '_' || c == '-')
                        })
                    {
                        let _ = write!(out, "[{}]", Value::String((*name).to_owned()));
                    } else {
                        if !out.is_empty() {
                            out.push('.');
                        }
                        out.push_str(name);
                    }
                }
                Seg::Index(i) => {
                    let _ = write!(out, "[{i}]");
                }
                Seg::Keyed(fields, item) => {
                    out.push('[');
                    for n in 0..fields.len() {
                        let field = fields.get(n);
                        if n > 0 {
                            out.push(',');
                        }
                        out.push_str(field);
                        out.push('=');
                        match item.get(field) {
                            Some(Value::String(s)) => out.push_str(s),
                            Some(other) => {
                                let _ = write!(out, "{other}");
                            }
                            None => out.push_str("<unset>"),
                        }
                    }
                    out.push(']');
                }
            }
        }
        if out.is_empty() {
            out.push_str("<root>");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_fields_indexes_and_keys() {
        let item = json!({"name": "app", "containerPort": 80});
        let fields = KeyNames::Static(&["name"]);
        let owned = vec!["containerPort".to_owned(), "protocol".to_owned()];
        let multi = KeyNames::Owned(&owned);
        let root = Path::ROOT;
        let spec = root.child(Seg::Field("spec"));
        let containers = spec.child(Seg::Field("containers"));
        let app = containers.child(Seg::Keyed(fields, &item));
        let ports = app.child(Seg::Field("ports"));
        assert_eq!(ports.render(), "spec.containers[name=app].ports");
        let port = ports.child(Seg::Keyed(multi, &item));
        assert_eq!(
            port.render(),
            "spec.containers[name=app].ports[containerPort=80,protocol=<unset>]"
        );
        let args = app.child(Seg::Field("args"));
        assert_eq!(
            args.child(Seg::Index(2)).render(),
            "spec.containers[name=app].args[2]"
        );
        assert_eq!(Path::ROOT.render(), "<root>");
        let meta = root.child(Seg::Field("metadata"));
        let ann = meta.child(Seg::Field("annotations"));
        let key = ann.child(Seg::Field("example.com/x"));
        assert_eq!(key.render(), "metadata.annotations[\"example.com/x\"]");
    }
}
