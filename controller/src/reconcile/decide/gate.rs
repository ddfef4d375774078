//! What the child executor does with a planned write before it sends it: send it, hold it back
//! under the child's drift policy, or check first whether it would only undo others' changes
//! (drift, under `Report`) or repeat an update the API server ignored before (futile). The
//! executor gathers the facts a check needs and obeys; it reads no policy itself.

use crate::api::DriftPolicy;
use crate::reconcile::decide::ChildOp;

/// The write a gate is asked about, by what it would do to the child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    /// A create.
    Create,
    /// An update (a replace, or a server-side apply).
    Update,
    /// The delete that starts a recreate (the update method `Recreate`).
    RecreateDelete,
    /// A delete of a child no longer desired.
    Delete,
}

impl WriteKind {
    /// The kind of `op`.
    pub fn of(op: &ChildOp) -> WriteKind {
        match op {
            ChildOp::Create(_) => WriteKind::Create,
            ChildOp::Update(_) => WriteKind::Update,
            ChildOp::Delete {
                reason: "recreate", ..
            } => WriteKind::RecreateDelete,
            ChildOp::Delete { .. } => WriteKind::Delete,
        }
    }
}

/// What to do with a planned write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteGate {
    /// Leave the child as it is: its drift policy (`Ignore`) says so.
    Hold(DriftPolicy),
    /// Send it, unless a check says otherwise.
    Send {
        /// Hold it back (drift policy `Report`) when the only difference is others' changes:
        /// the hook's answer did not change.
        unless_drift: bool,
        /// Skip it when the API server ignored the same update of this child version before.
        unless_futile: bool,
    },
}

/// The gate of a `kind` write of a child whose rule says `drift`, written by server-side apply
/// when `ssa`: `Ignore` holds every update and recreate; `Report` holds those that only undo
/// drift, except a server-side apply update, whose conflicts report drift instead; a replace
/// update is skipped when futile.
pub fn write_gate(kind: WriteKind, drift: DriftPolicy, ssa: bool) -> WriteGate {
    let changes_existing = matches!(kind, WriteKind::Update | WriteKind::RecreateDelete);
    match drift {
        DriftPolicy::Ignore if changes_existing => WriteGate::Hold(drift),
        _ => WriteGate::Send {
            unless_drift: drift == DriftPolicy::Report
                && changes_existing
                && !(ssa && kind == WriteKind::Update),
            unless_futile: kind == WriteKind::Update && !ssa,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(unless_drift: bool, unless_futile: bool) -> WriteGate {
        WriteGate::Send {
            unless_drift,
            unless_futile,
        }
    }

    #[test]
    fn creates_and_deletes_are_always_sent() {
        for drift in [
            DriftPolicy::Enforce,
            DriftPolicy::Report,
            DriftPolicy::Ignore,
        ] {
            for ssa in [false, true] {
                assert_eq!(
                    write_gate(WriteKind::Create, drift, ssa),
                    send(false, false)
                );
                assert_eq!(
                    write_gate(WriteKind::Delete, drift, ssa),
                    send(false, false)
                );
            }
        }
    }

    #[test]
    fn ignore_holds_updates_and_recreates() {
        for ssa in [false, true] {
            for kind in [WriteKind::Update, WriteKind::RecreateDelete] {
                let gate = write_gate(kind, DriftPolicy::Ignore, ssa);
                assert_eq!(gate, WriteGate::Hold(DriftPolicy::Ignore));
            }
        }
    }

    #[test]
    fn report_checks_drift_except_for_an_apply_whose_conflicts_report_it() {
        let report = DriftPolicy::Report;
        assert_eq!(
            write_gate(WriteKind::Update, report, false),
            send(true, true)
        );
        assert_eq!(
            write_gate(WriteKind::Update, report, true),
            send(false, false)
        );
        assert_eq!(
            write_gate(WriteKind::RecreateDelete, report, true),
            send(true, false)
        );
    }

    #[test]
    fn enforce_only_skips_futile_replaces() {
        let enforce = DriftPolicy::Enforce;
        assert_eq!(
            write_gate(WriteKind::Update, enforce, false),
            send(false, true)
        );
        assert_eq!(
            write_gate(WriteKind::Update, enforce, true),
            send(false, false)
        );
        assert_eq!(
            write_gate(WriteKind::RecreateDelete, enforce, false),
            send(false, false)
        );
    }
}
