//! Repairs of inherited values ([`Fix`], [`Repair`]): a change and its finding, or under a vendor network
//! profile only the finding `vendor-value-kept` (F18, `docs/field-cases.md`).

use crate::findings::Finding;
use crate::plan::Plan;

/// One replacement of an inherited value (see [`Fix`]).
pub(super) struct Repair<'a> {
    /// The variable.
    pub(super) name: &'a str,
    /// Its inherited value.
    pub(super) old: &'a str,
    /// The new value; `None` unsets the variable.
    pub(super) new: Option<String>,
    /// The change's reason (the `Changes` line).
    pub(super) reason: String,
    /// The finding's code.
    pub(super) code: Finding,
    /// The finding's message.
    pub(super) message: String,
    /// What the user can do.
    pub(super) remedy: String,
}

/// Repairs of inherited values. Under a vendor network profile ncclenv repairs nothing (F18: the vendor's
/// variables and the user's are kept, warn only): the finding is then `vendor-value-kept`, naming what
/// ncclenv would have done.
pub(super) struct Fix {
    pub(super) vendor: bool,
}

impl Fix {
    pub(super) fn apply(&self, plan: &mut Plan, r: Repair) {
        if self.vendor {
            plan.finding(
                Finding::VendorValueKept,
                format!(
                    "{}; a vendor network profile is present, so ncclenv keeps {}={:?}{}",
                    r.message,
                    r.name,
                    r.old,
                    match &r.new {
                        Some(n) => format!(" (it would set {n:?})"),
                        None => " (it would unset it)".to_string(),
                    }
                ),
                r.remedy,
            );
            return;
        }
        match &r.new {
            Some(n) => plan.repair(r.name, r.old, n.clone(), r.reason),
            None => {
                plan.unset(r.name, r.reason);
                if let Some(c) = plan.changes.last_mut() {
                    c.replaced = Some(r.old.to_string());
                }
            }
        }
        plan.finding(r.code, r.message, r.remedy);
    }
}
