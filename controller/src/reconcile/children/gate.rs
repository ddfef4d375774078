//! The executor's side of [`decide::write_gate`]: it gathers the facts a gate's checks need
//! (drift, a futile update) and says whether the write is sent.

use super::*;

/// Whether `obj`'s write only undoes others' changes (drift): the hook's answer for it did not
/// change. Reported in a `ChildDrift` event and condition; true when the write is held back.
pub(super) async fn drift_reported(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    obj: &Value,
    out: &mut Collected,
) -> bool {
    let key = decide::child_key(obj);
    let (Some(want), Some(live)) = (w.desired.get(&key), w.observed.get(&key)) else {
        return false;
    };
    let Some(paths) = decide::drift_only(live, want, &rule.options) else {
        return false;
    };
    let child = describe(obj);
    let fields = if paths.is_empty() {
        "fields the hook sets".to_owned()
    } else {
        paths.join(", ")
    };
    let note = format!(
        "{child} differs from what the hook wants at {fields}; drift policy Report leaves it as it is"
    );
    let report = ChildReport {
        kind: apply::DRIFT_CONDITION,
        reason: "Drifted",
        message: format!("{child}: {fields}"),
    };
    let told = (Reason::ChildDrift, note);
    c.report(w.parent, told, report, &mut out.reports).await;
    true
}

/// Whether the API server ignored the same update of `obj`'s version before.
pub(super) fn futile(c: &Children<'_>, obj: &Value) -> bool {
    c.memory
        .futile_updates
        .lock()
        .is_ok_and(|f| f.is_futile(obj, Instant::now()))
}

/// Passes `op` through its [`decide::write_gate`]: `Some(why)` when the child is left as it is
/// (counted as a skip unless a report says why), `None` when the write is sent.
pub(super) async fn gate(
    c: &Children<'_>,
    rule: &ChildRule,
    w: &Writing<'_>,
    op: &ChildOp,
    out: &mut Collected,
) -> Option<String> {
    let obj = op_object(op);
    let ssa = c.strategy == ApplyStrategy::ServerSideApply;
    match decide::write_gate(decide::WriteKind::of(op), rule.drift, ssa) {
        decide::WriteGate::Hold(policy) => {
            tracing::debug!(child = %describe(obj), "drift policy {policy:?}: the child is not updated");
            c.count(ChildOpLabel::Skip);
            Some(format!("drift policy {policy:?}"))
        }
        decide::WriteGate::Send {
            unless_drift: true, ..
        } if drift_reported(c, rule, w, obj, out).await => {
            Some(format!("drift policy {:?}", rule.drift))
        }
        decide::WriteGate::Send {
            unless_futile: true,
            ..
        } if futile(c, obj) => {
            tracing::debug!(child = %describe(obj), "update skipped: the API server ignored the same update of this child version");
            c.count(ChildOpLabel::Skip);
            Some("the API server ignored the same update of this version before".to_owned())
        }
        decide::WriteGate::Send { .. } => None,
    }
}
