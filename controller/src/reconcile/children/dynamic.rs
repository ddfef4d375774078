//! Dynamic apply's memory of its writes: the last-applied state a create or replace recorded,
//! and the updates the API server ignored.

use super::*;

/// After a create or update `sent` that the server stored (as the `(uid, resourceVersion)`
/// version given) with the last-applied annotation text `stored_text`: when that is the text
/// sent, keeps what it records for the stored version, so the child's next update does not parse
/// it.
pub(super) fn remember_last_applied(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    sent: &Value,
    (uid, resource_version): (Option<&str>, Option<&str>),
    stored_text: Option<&str>,
) {
    let (Some(uid), Some(rv)) = (uid, resource_version) else {
        return;
    };
    let Some(want) = w.desired.get(&decide::child_key(sent)) else {
        return;
    };
    let sent_text = annotation_text(sent, &rule.options.annotation);
    if sent_text.is_none() || sent_text != stored_text {
        return;
    }
    if let (Ok(last), Ok(mut cache)) = (
        dynapply::recorded_last_applied(want, &rule.options),
        c.memory.last_applied.lock(),
    ) {
        cache.insert_version(uid, rv, last);
    }
}

pub(super) fn annotation_text<'v>(obj: &'v Value, annotation: &str) -> Option<&'v str> {
    crate::object::meta(obj, "annotations")
        .and_then(|a| a.get(annotation))
        .and_then(Value::as_str)
}

/// After an update: remembers (or forgets) it as futile when the server kept the child as it
/// was, and collects the fields it dropped.
pub(super) fn remember_ignored(
    c: &Children<'_>,
    sent: &Value,
    stored: &Value,
    ignored: &mut Vec<(String, Vec<String>)>,
) {
    let ignored_paths = futile::ignored_by_server(sent, stored);
    if let Ok(mut futile) = c.memory.futile_updates.lock() {
        match &ignored_paths {
            Some(_) => futile.record(sent, Instant::now()),
            None => futile.forget(sent),
        }
    }
    if let Some(paths) = ignored_paths.filter(|p| !p.is_empty()) {
        ignored.push((describe(sent), paths));
    }
}
