//! What a sync's child writes report: the refusals' hints, the fields the server dropped, the
//! contests and drift kept for the parent's status conditions.

use super::*;

/// For a write an authorizer refused (403, not admission's 403s): the identity it was made as,
/// with the verb and resource to grant it (RBAC's names: `patch` for an update by server-side
/// apply).
pub(super) fn forbidden(
    c: &Children<'_>,
    rule: &ChildRule,
    op: ChildOpLabel,
    e: &kube::Error,
) -> Option<String> {
    match e {
        kube::Error::Api(s) if s.code == 403 && decide::is_authorization_refusal(&s.message) => {}
        _ => return None,
    }
    let verb = match op {
        ChildOpLabel::Create => "create",
        ChildOpLabel::Delete => "delete",
        _ if c.strategy == ApplyStrategy::ServerSideApply => "patch",
        _ => "update",
    };
    let api = &rule.resolved.api;
    let resource = match api.group.as_str() {
        "" => api.plural.clone(),
        group => format!("{}.{group}", api.plural),
    };
    Some(decide::forbidden_hint(
        verb,
        &resource,
        c.writer.identity.as_ref(),
    ))
}

/// After a sync's child writes: reports the fields the server dropped, records its contests and
/// keeps its reports (with the contests of children it holds); true when anything was reported.
pub(super) async fn report_collected(c: &Children<'_>, parent: &Value, mut out: Collected) -> bool {
    for (child, paths) in &out.ignored {
        report_ignored_fields(c, parent, child, paths).await;
    }
    remember_contests(c, parent, out.contests, &mut out.reports).await;
    let reported = !out.ignored.is_empty() || !out.reports.is_empty();
    remember_reports(c, parent, out.reports);
    reported
}

/// Keeps a parent's reports for its status write and sets its share of `kmeta_child_drift`.
pub(super) fn remember_reports(c: &Children<'_>, parent: &Value, reports: Vec<ChildReport>) {
    let uid = meta_str(parent, "uid");
    c.ctx
        .wiring
        .metrics
        .child_drift(c.controller, uid, reports.len());
    if let Ok(mut r) = c.memory.child_reports.lock() {
        r.set(uid, reports);
    }
}

/// The hook's status of `parent` with the child conditions of its last child management.
pub fn status_with_reports(
    c: &Children<'_>,
    parent: &Value,
    status: Option<&Value>,
) -> Option<Value> {
    let reports = c
        .memory
        .child_reports
        .lock()
        .map(|r| r.get(meta_str(parent, "uid")))
        .unwrap_or_default();
    let now = crate::reconcile::status::now_to_the_second();
    apply::with_child_conditions(status, parent, &reports, &now)
}

/// A child update the API server answered without writing: the fields it dropped or overrode
/// would come back on every sync (the update is remembered and not repeated). Says so in a Warning event on the parent (rate-limited per parent)
/// and in the log, naming the fields.
pub(super) async fn report_ignored_fields(
    c: &Children<'_>,
    parent: &Value,
    child: &str,
    paths: &[String],
) {
    const SHOWN: usize = 5;
    let mut fields = paths
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if paths.len() > SHOWN {
        fields.push_str(&format!(" and {} more", paths.len() - SHOWN));
    }
    tracing::warn!(child, fields = %fields, "the API server dropped or overrode fields the hook sets");
    let note = format!(
        "the API server kept {child} unchanged: it drops or overrides {fields}, which the hook sets \
         (undeclared in the child's schema, or reset by admission); kmeta sends this update again \
         only when the child or the hook's answer changes"
    );
    c.ctx.event(parent, Reason::ChildFieldsIgnored, note).await;
}
