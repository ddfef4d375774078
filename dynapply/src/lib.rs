#![doc = include_str!("../docs/semantics.md")]
#![warn(missing_docs)]

mod annotation;
#[cfg(feature = "yaml")]
mod document;
mod error;
mod fields;
mod merge;
mod openapi;
mod parse;
mod path;
mod rules;
mod ssa;

use std::borrow::Cow;

use serde_json::Value;

pub use annotation::{get_last_applied, set_last_applied};
#[cfg(feature = "yaml")]
pub use document::{parse_document, to_yaml};
pub use error::Error;
pub use fields::{FieldMode, FieldPath, FieldRule, FieldSeg, left_alone, without_withheld};
pub use merge::json_eq;
pub use rules::{ListRule, ListRules};
pub use ssa::{preserve_unknown_subtrees, server_side_apply_body};

use error::type_name;
use merge::{Ctx, merge_value, pruned, short_eq, vget};
use path::Path;

/// The annotation holding the last-applied configuration; the same name Metacontroller uses, so
/// objects it managed are taken over seamlessly.
pub const LAST_APPLIED_ANNOTATION: &str = "metacontroller.k8s.io/last-applied-configuration";

/// The conventional merge keys, in precedence order (Metacontroller's list; see rule 6).
pub const MERGE_KEY_CANDIDATES: [&str; 7] = [
    "containerPort",
    "port",
    "mountPath",
    "name",
    "uid",
    "ip",
    "path",
];

/// Maximum nesting depth of a desired value (256 levels; serde_json's own parser stops at 128, so
/// only programmatically built values can reach it). Deeper input is an [`Error::TooDeep`]
/// instead of a stack overflow.
pub const MAX_DEPTH: usize = 256;

/// Metadata fields owned by the API server: after a merge they are restored from the live object
/// (set when live has them, removed when it does not), as Metacontroller does.
pub const SYSTEM_METADATA_FIELDS: [&str; 8] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "managedFields",
];

/// Order of list-map items after a merge (rule 8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ordering {
    /// kubectl's rule: desired's relative order for its items, live's relative order for items
    /// kept only from live, interleaved so kept items keep their place. The default.
    #[default]
    Desired,
    /// Metacontroller's rule, exactly: live order for every surviving item, then the new desired
    /// items appended in desired order; reorderings in desired are ignored.
    Metacontroller,
}

/// Settings for [`merge_with`], [`apply_update`] and friends.
#[derive(Clone, Debug)]
pub struct Options {
    /// The last-applied annotation name. Default: [`LAST_APPLIED_ANNOTATION`]
    /// (`metacontroller.k8s.io/last-applied-configuration`, Metacontroller's name).
    pub annotation: String,
    /// Explicit list rules, which take precedence over the merge-key convention. Default: empty
    /// (convention only, like Metacontroller).
    pub rules: ListRules,
    /// List-map ordering. Default: [`Ordering::Desired`] (kubectl's order).
    pub ordering: Ordering,
    /// Whether writes record the last-applied configuration in the annotation. Default: `true`.
    /// `false` is for a caller that keeps the record elsewhere (server-side apply, where the API
    /// server's `managedFields` say what was applied): [`prepare_create`] writes no annotation,
    /// and [`apply_update`] and friends write none and remove one the object carries (it was an
    /// earlier record), using it as the merge base when no other is given.
    pub record: bool,
    /// Fields left to other writers ([`FieldRule`]): taken out of desired (a `HandOff` field
    /// once the object or list item holding it exists, an `Ignore` field always) and out of
    /// last-applied before every merge, so kmeta neither sets nor removes them; the
    /// last-applied record still holds the whole desired object. Default: none.
    pub fields: Vec<FieldRule>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            annotation: LAST_APPLIED_ANNOTATION.to_owned(),
            rules: ListRules::default(),
            ordering: Ordering::Desired,
            record: true,
            fields: Vec::new(),
        }
    }
}

/// The result of [`apply_update`].
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The live object already is what an update would write: send nothing.
    Unchanged,
    /// The object to write (a full object for PUT, carrying live's `resourceVersion`).
    Changed(Value),
}

fn require_object(v: &Value, what: &'static str) -> Result<(), Error> {
    if v.is_object() {
        Ok(())
    } else {
        Err(Error::NotAnObject {
            what,
            found: type_name(v),
        })
    }
}

/// The three-way merge with default [`Options`]: replays the change from `last_applied` to
/// `desired` onto `observed` and returns the merged object. `observed` is not modified.
pub fn merge(
    observed: &Value,
    last_applied: Option<&Value>,
    desired: &Value,
) -> Result<Value, Error> {
    merge_with(observed, last_applied, desired, &Options::default())
}

/// The three-way merge using `opts.rules` and `opts.ordering` (`opts.annotation` is not used:
/// annotations are merged like any other field). All three inputs must be JSON objects
/// (`last_applied` may be `None`: nothing is removed). `observed` is not modified: this is one
/// clone of it followed by [`merge_into`].
pub fn merge_with(
    observed: &Value,
    last_applied: Option<&Value>,
    desired: &Value,
    opts: &Options,
) -> Result<Value, Error> {
    require_object(observed, "observed")?;
    require_object(desired, "desired")?;
    if let Some(last) = last_applied {
        require_object(last, "last-applied")?;
    }
    let mut out = observed.clone();
    merge_into(&mut out, last_applied, desired, opts)?;
    Ok(out)
}

/// [`merge_with`] in place: merges into `observed` itself, for callers that own the live object
/// (no clone of it). On success `observed` is exactly what [`merge_with`] would have returned,
/// and the errors are the same. The input checks (all three must be JSON objects) run before
/// anything is touched; after a later error (only [`Error::TooDeep`], for a desired value
/// nested deeper than [`MAX_DEPTH`]) `observed` may be partly merged - still valid JSON, but
/// merge a copy if it must survive a failure.
///
/// ```
/// use dynapply::{Options, merge_into};
/// use serde_json::json;
///
/// let mut live = json!({"spec": {"replicas": 1, "paused": true}, "status": {"ready": 1}});
/// let last = json!({"spec": {"replicas": 1, "paused": true}});
/// let desired = json!({"spec": {"replicas": 3}});
/// merge_into(&mut live, Some(&last), &desired, &Options::default())?;
/// assert_eq!(live, json!({"spec": {"replicas": 3}, "status": {"ready": 1}}));
/// # Ok::<(), dynapply::Error>(())
/// ```
pub fn merge_into(
    observed: &mut Value,
    last_applied: Option<&Value>,
    desired: &Value,
    opts: &Options,
) -> Result<(), Error> {
    require_object(observed, "observed")?;
    require_object(desired, "desired")?;
    if let Some(last) = last_applied {
        require_object(last, "last-applied")?;
    }
    let ctx = Ctx {
        ordering: opts.ordering,
        kept: None,
    };
    let (last, desired) = fields::shaped(&opts.fields, observed, last_applied, desired);
    merge_value(
        observed,
        last.as_deref(),
        &desired,
        opts.rules.root(),
        ctx,
        &Path::ROOT,
        0,
    )
}

/// Explains a merge: the paths (e.g. `spec.template.spec.containers[name=sidecar]`) of live
/// fields and list-map items that the merge keeps only because neither `desired` nor
/// `last_applied` mentions them - what other writers own. Outermost paths only, in walk order.
pub fn kept_by_others(
    observed: &Value,
    last_applied: Option<&Value>,
    desired: &Value,
    opts: &Options,
) -> Result<Vec<String>, Error> {
    require_object(observed, "observed")?;
    require_object(desired, "desired")?;
    let kept = std::cell::RefCell::new(Vec::new());
    let mut out = observed.clone();
    let ctx = Ctx {
        ordering: opts.ordering,
        kept: Some(&kept),
    };
    let (last, desired) = fields::shaped(&opts.fields, observed, last_applied, desired);
    merge_value(
        &mut out,
        last.as_deref(),
        &desired,
        opts.rules.root(),
        ctx,
        &Path::ROOT,
        0,
    )?;
    Ok(kept.into_inner())
}

/// A read-only dry run of [`merge_with`]: `false` guarantees that the merge would leave
/// `observed` semantically unchanged ([`json_eq`]), without cloning it. May return `true` for a
/// merge that ends up equal (e.g. nulls or number forms); never `false` for one that changes
/// something. Non-object inputs return `true` (the real merge then reports the error).
pub fn would_change(
    observed: &Value,
    last_applied: Option<&Value>,
    desired: &Value,
    opts: &Options,
) -> bool {
    if !observed.is_object() || !desired.is_object() || last_applied.is_some_and(|l| !l.is_object())
    {
        return true;
    }
    let (last, desired) = fields::shaped(&opts.fields, observed, last_applied, desired);
    merge::would_change(
        observed,
        last.as_deref(),
        &desired,
        opts.rules.root(),
        opts.ordering,
        0,
    )
}

fn has_annotation(obj: &Value, annotation: &str) -> bool {
    annotation_of(obj, annotation).is_some()
}

/// `obj.metadata.annotations[annotation]`, looked up without hashing (small maps).
fn annotation_of<'a>(obj: &'a Value, annotation: &str) -> Option<&'a Value> {
    let annotations = vget(vget(obj, "metadata")?, "annotations")?;
    vget(annotations, annotation)
}

fn without_annotation(obj: &Value, annotation: &str) -> Value {
    let mut copy = obj.clone();
    if let Some(a) = copy
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        a.shift_remove(annotation);
    }
    copy
}

/// The child-update step: reads last-applied from `observed`'s annotation, strips that
/// annotation from `desired`, merges, restores [`SYSTEM_METADATA_FIELDS`] and `status` from
/// `observed`, writes the new last-applied annotation (desired, canonical JSON) and compares the
/// result with `observed` ([`json_eq`]: key order ignored, numbers by value).
///
/// Applying the same desired to the returned object gives [`Outcome::Unchanged`].
///
/// A Deployment kmeta created with one container, into which an admission webhook has since
/// injected a sidecar; the hook now wants a new image:
///
/// ```
/// use dynapply::{LAST_APPLIED_ANNOTATION, Options, Outcome, apply_update, set_last_applied};
/// use serde_json::json;
///
/// let opts = Options::default();
/// let created = json!({
///     "apiVersion": "apps/v1", "kind": "Deployment",
///     "metadata": {"name": "web", "namespace": "default"},
///     "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "app:1"}]}}}
/// });
/// // live: what the server holds - our last-applied annotation, server fields, the sidecar,
/// // status
/// let mut live = json!({
///     "apiVersion": "apps/v1", "kind": "Deployment",
///     "metadata": {"name": "web", "namespace": "default", "uid": "u-1", "resourceVersion": "42"},
///     "spec": {"replicas": 1, "template": {"spec": {"containers": [
///         {"name": "app", "image": "app:1"},
///         {"name": "proxy", "image": "proxy:1"}
///     ]}}},
///     "status": {"readyReplicas": 1}
/// });
/// set_last_applied(&mut live, &created, &opts)?;
/// let desired = json!({
///     "apiVersion": "apps/v1", "kind": "Deployment",
///     "metadata": {"name": "web", "namespace": "default"},
///     "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "app:2"}]}}}
/// });
///
/// let Outcome::Changed(updated) = apply_update(&live, &desired, &opts)? else {
///     panic!("the image changed, so the object must be written");
/// };
/// // the image is updated and the injected sidecar survives, in place
/// assert_eq!(
///     updated["spec"]["template"]["spec"]["containers"],
///     json!([{"name": "app", "image": "app:2"}, {"name": "proxy", "image": "proxy:1"}])
/// );
/// // what others own is kept: the defaulted replicas, status and the server's metadata
/// assert_eq!(updated["spec"]["replicas"], 1);
/// assert_eq!(updated["status"], live["status"]);
/// assert_eq!(updated["metadata"]["resourceVersion"], "42");
/// // the annotation now records desired, so the next sync sends nothing
/// let recorded = updated["metadata"]["annotations"][LAST_APPLIED_ANNOTATION].as_str();
/// assert!(recorded.is_some_and(|a| a.contains("app:2")));
/// assert_eq!(apply_update(&updated, &desired, &opts)?, Outcome::Unchanged);
/// # Ok::<(), dynapply::Error>(())
/// ```
pub fn apply_update(observed: &Value, desired: &Value, opts: &Options) -> Result<Outcome, Error> {
    update(observed, Last::Parse, desired, opts)
}

/// [`apply_update`] with the last-applied configuration supplied by the caller instead of parsed
/// from `observed`'s annotation: `last_applied` must be what [`get_last_applied`] returns for
/// `observed` (or, after a write, what it would return for the object written). A caller that
/// keeps it per object version (e.g. per child uid and `resourceVersion`) then never parses the
/// same annotation twice. The result is the same as [`apply_update`]'s for that `observed`.
///
/// ```
/// use dynapply::{Options, Outcome, apply_update, apply_update_with, get_last_applied, prepare_create};
/// use serde_json::json;
///
/// let opts = Options::default();
/// let mut live = prepare_create(&json!({"metadata": {"name": "a"}, "data": {"k": "1"}}), &opts)?;
/// live["metadata"]["resourceVersion"] = json!("7");
/// let last = get_last_applied(&live, &opts)?; // parsed once, kept by the caller
/// let desired = json!({"metadata": {"name": "a"}, "data": {"k": "2"}});
/// let with = apply_update_with(&live, last.as_ref(), &desired, &opts)?;
/// assert_eq!(with, apply_update(&live, &desired, &opts)?);
/// assert!(matches!(with, Outcome::Changed(_)));
/// # Ok::<(), dynapply::Error>(())
/// ```
pub fn apply_update_with(
    observed: &Value,
    last_applied: Option<&Value>,
    desired: &Value,
    opts: &Options,
) -> Result<Outcome, Error> {
    update(observed, Last::Given(last_applied), desired, opts)
}

/// [`apply_update_with`] for an object dynapply wrote: `recorded` is [`recorded_last_applied`] of
/// the desired object that was written, and `observed` is the version the API server answered
/// that write with, so its annotation holds the canonical encoding of `recorded`. Whether the
/// annotation needs rewriting is then found by comparing `desired` with `recorded` (as encoded:
/// nulls, key order and number forms aside) instead of encoding `desired`: a no-op update — a
/// controller's usual resync of a child it wrote — costs that comparison and the dry-run merge
/// over `observed`. The result is [`apply_update`]'s for that `observed`;
/// if `recorded` is not what the annotation holds, the result may keep an annotation that
/// [`apply_update`] would have re-encoded. A configuration parsed back from the annotation
/// qualifies when [`is_recorded`] says so.
///
/// ```
/// use dynapply::{Options, Outcome, apply_update, apply_update_recorded, prepare_create, recorded_last_applied};
/// use serde_json::json;
///
/// let opts = Options::default();
/// let desired = json!({"metadata": {"name": "a"}, "data": {"k": "1"}});
/// let mut live = prepare_create(&desired, &opts)?;
/// live["metadata"]["resourceVersion"] = json!("7"); // the server's answer to the create
/// let recorded = recorded_last_applied(&desired, &opts)?; // kept by the caller for version "7"
/// assert_eq!(apply_update_recorded(&live, &recorded, &desired, &opts)?, Outcome::Unchanged);
/// let changed = json!({"metadata": {"name": "a"}, "data": {"k": "2"}});
/// let with = apply_update_recorded(&live, &recorded, &changed, &opts)?;
/// assert_eq!(with, apply_update(&live, &changed, &opts)?);
/// # Ok::<(), dynapply::Error>(())
/// ```
pub fn apply_update_recorded(
    observed: &Value,
    recorded: &Value,
    desired: &Value,
    opts: &Options,
) -> Result<Outcome, Error> {
    update(observed, Last::Recorded(recorded), desired, opts)
}

/// Whether `observed`'s last-applied annotation is exactly what dynapply writes for `last` (its
/// canonical encoding): true for an object dynapply wrote when `last` is what
/// [`get_last_applied`] parsed from it, so `last` may then be given to [`apply_update_recorded`]
/// (whose no-op check needs no re-encoding). False for an annotation another tool wrote in
/// another form (key order, spacing, escapes), or when there is none. Costs one encoding of
/// `last`: for a caller that keeps the parsed configuration per object version, once per version.
///
/// ```
/// use dynapply::{Options, get_last_applied, is_recorded, prepare_create};
/// use serde_json::json;
///
/// let opts = Options::default();
/// let live = prepare_create(&json!({"metadata": {"name": "a"}, "data": {"k": "1"}}), &opts)?;
/// let last = get_last_applied(&live, &opts)?.expect("written by dynapply");
/// assert!(is_recorded(&live, &last, &opts));
/// assert!(!is_recorded(&live, &json!({"data": {"k": "1"}}), &opts));
/// # Ok::<(), dynapply::Error>(())
/// ```
pub fn is_recorded(observed: &Value, last: &Value, opts: &Options) -> bool {
    let Some(text) = annotation_of(observed, &opts.annotation).and_then(Value::as_str) else {
        return false;
    };
    // (a configuration holding the annotation itself is never taken as recorded: the encoding
    // leaves that out, so comparing values would not be comparing encodings)
    last.is_object()
        && annotation_of(last, &opts.annotation).is_none()
        && annotation::canonical_json_is(last, Some(&opts.annotation), text)
}

/// The last-applied configuration recorded by writing `desired` (what [`prepare_create`] and
/// [`apply_update`] put in the annotation), without encoding and parsing it: `desired` with null
/// fields and null list items removed and without the annotation. It can differ from what
/// [`get_last_applied`] parses back only in the form of numbers (`1.0` stays `1.0` where the
/// annotation reads `1`), which merges compare by value. For [`apply_update_with`] after a
/// write: the written object's next update then needs no parse.
pub fn recorded_last_applied(desired: &Value, opts: &Options) -> Result<Value, Error> {
    require_object(desired, "desired")?;
    let mut out = pruned(desired, &Path::ROOT, 0)?;
    if let Some(a) = out
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        a.shift_remove(opts.annotation.as_str());
    }
    Ok(out)
}

/// Where [`update`] gets the last-applied configuration from.
#[derive(Clone, Copy)]
enum Last<'a> {
    /// Parsed from the observed object's annotation (only when needed).
    Parse,
    /// Supplied by the caller (what parsing would give).
    Given(Option<&'a Value>),
    /// Supplied by the caller, who wrote it: the annotation is its canonical encoding.
    Recorded(&'a Value),
}

fn update(
    observed: &Value,
    last: Last<'_>,
    desired: &Value,
    opts: &Options,
) -> Result<Outcome, Error> {
    require_object(observed, "observed")?;
    require_object(desired, "desired")?;
    let desired: Cow<'_, Value> = if has_annotation(desired, &opts.annotation) {
        Cow::Owned(without_annotation(desired, &opts.annotation))
    } else {
        Cow::Borrowed(desired)
    };
    if !opts.record {
        return update_unrecorded(observed, last, &desired, opts);
    }
    let recorded = annotation_of(observed, &opts.annotation).and_then(Value::as_str);
    // the new annotation is usually about as long as the one recorded
    let capacity = recorded.map_or(256, |r| r.len() + 64);
    let encode = || annotation::canonical_json_sized(&desired, Some(&opts.annotation), capacity);
    // Whether the annotation already encodes desired. For a configuration the caller recorded
    // (the annotation is its encoding) comparing the two values answers it; else the encoding
    // of desired is matched against the annotation without being built (it is built only to be
    // written).
    let unchanged_record = recorded.is_some_and(|r| match last {
        Last::Recorded(l) => annotation::same_encoding(l, &desired),
        Last::Given(_) | Last::Parse => {
            annotation::canonical_json_is(&desired, Some(&opts.annotation), r)
        }
    });
    let parsed;
    let last: Option<&Value> = if unchanged_record {
        // Steady state: last-applied is exactly desired. If a dry-run merge changes nothing,
        // the update is a no-op - answered without cloning the live object.
        // (with field rules, over desired without the fields left to others)
        let (_, merged_desired) = fields::shaped(&opts.fields, observed, None, &desired);
        if !merge::would_change(
            observed,
            Some(&merged_desired),
            &merged_desired,
            opts.rules.root(),
            opts.ordering,
            0,
        ) {
            return Ok(Outcome::Unchanged);
        }
        Some(&desired)
    } else {
        match last {
            Last::Given(given) => given,
            Last::Recorded(recorded) => Some(recorded),
            Last::Parse => {
                parsed = get_last_applied(observed, opts)?;
                parsed.as_ref()
            }
        }
    };
    // (a plain clone: copying the old annotation text costs less than rebuilding the maps on
    // its path without it, measured up to an 80 KB annotation)
    let mut merged = observed.clone();
    merge_into(&mut merged, last, &desired, opts)?;
    restore_server_fields(&mut merged, observed)?;
    annotation::write_annotation(&mut merged, encode(), opts)?;
    // A new annotation text alone makes the result differ from observed: compare only when the
    // record is unchanged.
    if unchanged_record && json_eq(&merged, observed) {
        Ok(Outcome::Unchanged)
    } else {
        Ok(Outcome::Changed(merged))
    }
}

/// [`update`] without the annotation ([`Options::record`] off): the three-way merge over
/// `observed` with the base given (or parsed from an annotation `observed` still carries), the
/// server's fields restored, and that annotation removed.
fn update_unrecorded(
    observed: &Value,
    last: Last<'_>,
    desired: &Value,
    opts: &Options,
) -> Result<Outcome, Error> {
    let parsed;
    let last: Option<&Value> = match last {
        Last::Given(given) => given,
        Last::Recorded(recorded) => Some(recorded),
        Last::Parse => {
            parsed = get_last_applied(observed, opts)?;
            parsed.as_ref()
        }
    };
    let annotated = has_annotation(observed, &opts.annotation);
    // the usual resync: nothing to change, answered without cloning the live object
    if !annotated && !would_change(observed, last, desired, opts) {
        return Ok(Outcome::Unchanged);
    }
    let mut merged = observed.clone();
    merge_into(&mut merged, last, desired, opts)?;
    restore_server_fields(&mut merged, observed)?;
    if let Some(a) = merged
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        a.shift_remove(opts.annotation.as_str());
    }
    if json_eq(&merged, observed) {
        Ok(Outcome::Unchanged)
    } else {
        Ok(Outcome::Changed(merged))
    }
}

/// `a == b` (numbers in the same form, maps in any order), fast when maps list their keys in the
/// same order, without hashing every key as `Map`'s equality does.
fn identical(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            if x.len() != y.len() {
                return false;
            }
            for (i, ((ka, va), (kb, vb))) in x.iter().zip(y.iter()).enumerate() {
                if !short_eq(ka.as_bytes(), kb.as_bytes()) {
                    // another order from here on: look the rest up (the keys before matched)
                    return x
                        .iter()
                        .skip(i)
                        .all(|(k, v)| merge::mget(y, k).is_some_and(|w| identical(v, w)));
                }
                if !identical(va, vb) {
                    return false;
                }
            }
            true
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| identical(v, w))
        }
        (Value::String(x), Value::String(y)) => short_eq(x.as_bytes(), y.as_bytes()),
        (Value::Number(x), Value::Number(y)) => x == y,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Null, Value::Null) => true,
        _ => false,
    }
}

/// Restores `status` and the server-owned metadata fields of `merged` from `observed`.
fn restore_server_fields(merged: &mut Value, observed: &Value) -> Result<(), Error> {
    let Some(top) = merged.as_object_mut() else {
        return Err(Error::NotAnObject {
            what: "object",
            found: type_name(merged),
        });
    };
    match vget(observed, "status") {
        Some(status) => {
            if !merge::mget(top, "status").is_some_and(|have| identical(have, status)) {
                top.insert("status".to_owned(), status.clone());
            }
        }
        None => {
            top.shift_remove("status");
        }
    }
    let observed_meta = vget(observed, "metadata");
    for field in SYSTEM_METADATA_FIELDS {
        let want = observed_meta.and_then(|m| vget(m, field));
        let have = merge::mget(top, "metadata").and_then(|m| vget(m, field));
        let same = match (want, have) {
            (Some(w), Some(h)) => identical(w, h),
            (None, None) => true,
            _ => false,
        };
        if same {
            continue;
        }
        let meta = top
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()));
        if meta.is_null() {
            *meta = Value::Object(Default::default());
        }
        let found = type_name(meta);
        let Some(meta) = meta.as_object_mut() else {
            return Err(Error::InvalidField {
                path: "metadata".to_owned(),
                message: format!("expected an object, found {found}"),
            });
        };
        match want {
            Some(v) => {
                meta.insert(field.to_owned(), v.clone());
            }
            None => {
                meta.shift_remove(field);
            }
        }
    }
    Ok(())
}

/// What the controller POSTs to create a child: `desired` with null fields and null list items
/// removed (at every depth) and the last-applied annotation written (the same canonical JSON
/// [`apply_update`] writes, so the first update after creation is `Unchanged`). With
/// [`Options::record`] off, no annotation is written (and one `desired` carries is left out).
///
/// With [`Options::fields`], an `Ignore` field is left out of the object (the annotation still
/// records it, as [`apply_update`] does).
pub fn prepare_create(desired: &Value, opts: &Options) -> Result<Value, Error> {
    let recorded = recorded_last_applied(desired, opts)?;
    let text = opts
        .record
        .then(|| annotation::canonical_json(&recorded, Some(&opts.annotation)));
    // without an `Ignore` rule the object is the recorded configuration itself: moved, not copied
    let shaped = match fields::for_create(&opts.fields, &recorded) {
        Cow::Owned(shaped) => Some(shaped),
        Cow::Borrowed(_) => None,
    };
    let mut out = shaped.unwrap_or(recorded);
    if let Some(text) = text {
        annotation::write_annotation(&mut out, text, opts)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{
        LAST_APPLIED_ANNOTATION, Options, Outcome, apply_update, apply_update_with,
        get_last_applied, identical, is_recorded, prepare_create,
    };
    use serde_json::json;

    /// With the record off nothing writes the annotation; the base comes from the caller, and
    /// an annotation an object still carries is the base and is removed.
    #[test]
    fn without_a_record_no_annotation_is_written_and_an_old_one_goes() {
        let opts = Options {
            record: false,
            ..Options::default()
        };
        let desired = json!({"metadata": {"name": "a"}, "data": {"k": "1", "gone": null}});
        let created = prepare_create(&desired, &opts).expect("an object");
        assert_eq!(
            created,
            json!({"metadata": {"name": "a"}, "data": {"k": "1"}})
        );
        let mut live = created.clone();
        live["metadata"]["resourceVersion"] = json!("3");
        live["data"]["theirs"] = json!("t");
        // the base given: what was applied (here `k` and `old`)
        live["data"]["old"] = json!("o");
        let base = json!({"metadata": {"name": "a"}, "data": {"k": "1", "old": "o"}});
        let want = json!({"metadata": {"name": "a"}, "data": {"k": "1"}});
        let Outcome::Changed(merged) =
            apply_update_with(&live, Some(&base), &want, &opts).expect("merged")
        else {
            panic!("`old` was applied and is no longer wanted")
        };
        assert_eq!(merged["data"], json!({"k": "1", "theirs": "t"}));
        assert!(merged["metadata"].get("annotations").is_none());
        assert_eq!(merged["metadata"]["resourceVersion"], "3");
        // nothing to change: unchanged, whatever others added
        let mut steady = merged.clone();
        steady["status"] = json!({"ready": true});
        let base = json!({"metadata": {"name": "a"}, "data": {"k": "1"}});
        assert_eq!(
            apply_update_with(&steady, Some(&base), &want, &opts).expect("merged"),
            Outcome::Unchanged
        );
        // no base: nothing is removed
        assert_eq!(
            apply_update_with(&live, None, &want, &opts).expect("merged"),
            Outcome::Unchanged
        );
        // a child recorded before: its annotation is the base, and goes
        let recorded = prepare_create(
            &json!({"metadata": {"name": "a"}, "data": {"k": "1", "old": "o"}}),
            &Options::default(),
        )
        .expect("an object");
        let Outcome::Changed(merged) = apply_update(&recorded, &want, &opts).expect("merged")
        else {
            panic!("the annotation goes")
        };
        assert_eq!(merged["data"], json!({"k": "1"}));
        assert!(
            merged["metadata"]["annotations"]
                .get(LAST_APPLIED_ANNOTATION)
                .is_none(),
            "{merged}"
        );
    }

    #[test]
    fn is_recorded_only_for_the_canonical_encoding() {
        let opts = Options::default();
        let mut live = prepare_create(
            &json!({"metadata": {"name": "a"}, "data": {"b": "<1>", "a": 2}}),
            &opts,
        )
        .expect("an object");
        let last = get_last_applied(&live, &opts)
            .expect("readable")
            .expect("present");
        assert!(is_recorded(&live, &last, &opts));
        // the same configuration written by another tool: other spacing, key order, escapes
        for other in [
            serde_json::to_string_pretty(&last).expect("json"),
            r#"{"data":{"b":"<1>","a":2},"metadata":{"name":"a"}}"#.to_owned(),
            r#"{"data":{"a":2,"b":"<1>"},"metadata":{"name":"a"}}"#.to_owned(),
        ] {
            live["metadata"]["annotations"][opts.annotation.as_str()] = json!(other);
            let parsed = get_last_applied(&live, &opts)
                .expect("readable")
                .expect("present");
            assert!(!is_recorded(&live, &parsed, &opts), "{other}");
        }
        live["metadata"]["annotations"] = json!({});
        assert!(!is_recorded(&live, &last, &opts));
    }

    #[test]
    fn identical_is_strict_equality_in_any_key_order() {
        let a = json!({"a": 1, "b": [{"x": "y", "z": 2.5}], "c": null});
        assert!(identical(&a, &a.clone()));
        // the same maps with keys in another order, from the first key or a later one
        let reordered = json!({"c": null, "b": [{"z": 2.5, "x": "y"}], "a": 1});
        assert!(identical(&a, &reordered) && identical(&reordered, &a));
        let late = json!({"a": 1, "c": null, "b": [{"x": "y", "z": 2.5}]});
        assert!(identical(&a, &late));
        // numbers in another form, a value, a key, a length, list order
        for other in [
            json!({"a": 1.0, "b": [{"x": "y", "z": 2.5}], "c": null}),
            json!({"a": 1, "b": [{"x": "y", "z": 2.6}], "c": null}),
            json!({"a": 1, "b": [{"x": "y", "w": 2.5}], "c": null}),
            json!({"a": 1, "b": [{"x": "y", "z": 2.5}]}),
            json!({"a": 1, "b": [{"x": "y", "z": 2.5}], "d": null}),
            json!({"a": 1, "b": [{"x": "y", "z": 2.5}, 3], "c": null}),
        ] {
            assert!(!identical(&a, &other), "{other}");
            assert_eq!(identical(&a, &other), a == other, "{other}");
        }
        let list = json!([1, 2]);
        assert!(!identical(&list, &json!([2, 1])));
    }
}
