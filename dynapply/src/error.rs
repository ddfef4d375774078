//! The crate's error type.

/// Everything that can go wrong in dynapply. Messages are lowercase and name the field path, e.g.
/// `at spec.template.spec.containers[name=app].ports: nesting deeper than 256 levels`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A top-level input (observed, last-applied, desired, object) is not a JSON object.
    #[error("{what} must be a JSON object, found {found}")]
    NotAnObject {
        /// Which input: `observed`, `desired`, `last-applied`, `object`.
        what: &'static str,
        /// The JSON type that was found instead.
        found: &'static str,
    },
    /// A field holds a value of the wrong shape (e.g. `metadata` is a string).
    #[error("at {path}: {message}")]
    InvalidField {
        /// Dotted field path, e.g. `metadata.annotations`.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A field rule's path does not parse, or names no field of the kind
    /// ([`crate::FieldPath::parse`], [`crate::FieldPath::check_openapi_v3`]).
    #[error("field path `{path}`: {message}")]
    InvalidFieldPath {
        /// The path as written.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// The last-applied annotation on the live object is not valid JSON or not a JSON object.
    #[error("at {path}: corrupt last-applied configuration: {message}")]
    CorruptLastApplied {
        /// Path of the annotation, e.g. `metadata.annotations["metacontroller.k8s.io/last-applied-configuration"]`.
        path: String,
        /// The parse error or shape problem.
        message: String,
    },
    /// The input nests deeper than [`crate::MAX_DEPTH`]; refused instead of risking a stack overflow.
    #[error("at {path}: nesting deeper than {limit} levels")]
    TooDeep {
        /// Path of the first value past the limit.
        path: String,
        /// The limit, [`crate::MAX_DEPTH`].
        limit: usize,
    },
    /// An input document could not be parsed as JSON or YAML (only from `parse_document`, feature
    /// `yaml`).
    #[error("{source_name}: {message}")]
    Parse {
        /// File name or other label of the document.
        source_name: String,
        /// The parser's message, with line and column when known.
        message: String,
    },
    /// A value could not be rendered (YAML output; only from `to_yaml`, feature `yaml`).
    #[error("rendering {what}: {message}")]
    Render {
        /// What was being rendered.
        what: String,
        /// The serializer's message.
        message: String,
    },
}

/// Name of a JSON value's type for error messages.
pub(crate) fn type_name(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}
