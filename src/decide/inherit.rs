//! One rule for inherited values (`docs/policy.md`, "Inherited values: one rule"): read the value as its
//! reader reads it ([`Inherited`], from [`effective`]), judge it ([`Verdict`]), then keep it, warn or repair
//! it with one function ([`settle`]). Each rule of `decide` judges its own variable (the table in
//! `docs/policy.md` says which and where; `ROUTED`, in the tests, is the same table in code); what ncclenv
//! does with the judgement is written once, here.

use crate::findings::Finding;
use crate::nccl_rules::{effective, kept_text, Origin};
use crate::plan::Plan;
use crate::snapshot::Snapshot;

/// An inherited value: the variable, the value its reader sees and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inherited<'s> {
    /// The variable, e.g. `NCCL_IB_DISABLE`.
    pub name: &'s str,
    /// The value as inherited (not trimmed).
    pub value: &'s str,
    /// The environment, or the NCCL configuration file that set it.
    pub origin: Origin,
}

impl<'s> Inherited<'s> {
    /// The value NCCL sees for `name`: the environment's, else the first NCCL configuration file's
    /// ([`effective`]). `None` when neither sets it.
    pub fn nccl(name: &'s str, snap: &'s Snapshot) -> Option<Self> {
        effective(name, &snap.env, &snap.conf_files).map(|(value, origin)| Inherited {
            name,
            value,
            origin,
        })
    }

    /// The environment's value of `name`, for a variable only another library reads (NCCL's configuration
    /// files do not reach it). `None` when unset.
    pub fn env(name: &'s str, snap: &'s Snapshot) -> Option<Self> {
        snap.env.get(name).map(|value| Inherited {
            name,
            value,
            origin: Origin::Environment,
        })
    }

    /// A value already read, with its origin.
    pub fn of(name: &'s str, value: &'s str, origin: Origin) -> Self {
        Inherited {
            name,
            value,
            origin,
        }
    }

    /// "inherited NAME=VALUE kept", or "NAME=VALUE (from FILE) kept" ([`kept_text`]).
    pub fn kept(&self) -> String {
        kept_text(self.name, self.value, &self.origin)
    }
}

/// One finding as a rule words it: its code (severity and strict flag come with it), what was found, and
/// what the user can do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    /// The finding's code.
    pub code: Finding,
    /// What was found here.
    pub message: String,
    /// What the user can do.
    pub remedy: String,
}

impl Said {
    /// A finding with its code, message and remedy.
    pub fn new(code: Finding, message: impl Into<String>, remedy: impl Into<String>) -> Self {
        Said {
            code,
            message: message.into(),
            remedy: remedy.into(),
        }
    }

    /// Add this finding to the plan ([`Plan::finding`]).
    pub fn record(self, plan: &mut Plan) {
        plan.finding(self.code, self.message, self.remedy);
    }
}

/// The repair of a value NCCL (or its library) would certainly fail with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    /// The value put in; `None` unsets the variable.
    pub new: Option<String>,
    /// The change's reason (the `Changes` line).
    pub reason: String,
    /// The finding made with it.
    pub said: Said,
}

/// What a rule's reading of an inherited value says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It works: kept, nothing said.
    Works,
    /// It works, with something to say: kept, with these findings in order (each with its code's severity:
    /// a risk warns, a fact worth knowing is an info).
    Risky(Vec<Said>),
    /// It would certainly fail: repaired (only warned under a vendor profile, [`Fix`]).
    Fails(Repair),
    /// Its reader ignores it: warned; the rule decides as if it were unset.
    Ignored(Said),
}

impl Verdict {
    /// Kept with one finding ([`Verdict::Risky`] of one; one place builds the list, to keep the binary small).
    #[inline(never)]
    pub fn risky(said: Said) -> Verdict {
        Verdict::Risky(vec![said])
    }
}

/// How repairs are made. Under a vendor network profile ncclenv repairs nothing (F18, `docs/field-cases.md`:
/// the vendor's variables and the user's are kept, warn only): a repair's finding is then `vendor-value-kept`,
/// naming what ncclenv would have done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fix {
    /// A vendor network profile is present.
    pub vendor: bool,
}

impl Fix {
    /// Repairs are made: no vendor network profile. For the rules that run only outside one (RDMA) or whose
    /// verdicts never repair (the `NCCL_SHM_DISABLE` and `NCCL_P2P_DISABLE` switches, the `NCCL_COMM_ID`
    /// check of `NCCL_SOCKET_IFNAME`, `NCCLENV_DEBUG`'s variables).
    pub const REPAIRS: Fix = Fix { vendor: false };
}

/// The one rule: keep `inh` (with the verdict's findings), or repair it, or warn that its reader ignores it.
/// A repair sets the new value (`replaced` records the old one) or unsets the variable, then makes its
/// finding; under a vendor profile it only makes `vendor-value-kept`.
pub fn settle(plan: &mut Plan, fix: Fix, inh: &Inherited, verdict: Verdict) {
    match verdict {
        Verdict::Works => {}
        Verdict::Risky(said) => {
            for s in said {
                s.record(plan);
            }
        }
        Verdict::Ignored(s) => s.record(plan),
        Verdict::Fails(r) => repair(plan, fix, inh, r),
    }
}

/// [`Verdict::Fails`] in [`settle`].
fn repair(plan: &mut Plan, fix: Fix, inh: &Inherited, r: Repair) {
    let Said {
        code,
        message,
        remedy,
    } = r.said;
    if fix.vendor {
        plan.finding(
            Finding::VendorValueKept,
            format!(
                "{message}; a vendor network profile is present, so ncclenv keeps {}={:?}{}",
                inh.name,
                inh.value,
                match &r.new {
                    Some(n) => format!(" (it would set {n:?})"),
                    None => " (it would unset it)".to_string(),
                }
            ),
            remedy,
        );
        return;
    }
    match r.new {
        Some(n) => plan.repair(inh.name, inh.value, n, r.reason),
        None => {
            plan.unset(inh.name, r.reason);
            if let Some(c) = plan.changes.last_mut() {
                c.replaced = Some(inh.value.to_string());
            }
        }
    }
    plan.finding(code, message, remedy);
}

/// One row of `docs/policy.md`'s table of the inherited variables that go through [`settle`] ("Inherited
/// values"): the variables, where they are judged, and the verdicts they can get. Kept out of the binary: a
/// test compares it with the table, another with the companions table (`COMPANIONS`) in its module.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The variables of the row, as the table writes them.
    pub vars: &'static [&'static str],
    /// "judged in": the file and function.
    pub judged: &'static str,
    /// "verdicts": each possible one, with its finding codes.
    pub verdicts: &'static str,
}

/// The rows of `docs/policy.md`'s table, in its order.
#[cfg(test)]
pub const ROUTED: &[Route] = &[
    Route {
        vars: &["NCCL_SOCKET_FAMILY"],
        judged: "`decide/interface/inherited.rs` `inherited_family`; the repair in `bind.rs` `export_family`",
        verdicts: "works; ignored (`family-ignored`); fails: no candidate has that family (`inherited-family-repaired`)",
    },
    Route {
        vars: &["NCCL_SOCKET_IFNAME"],
        judged: "`decide/interface/inherited.rs` `inherited_list`; the repair in `bind.rs` `own_interface`, `loopback_fallback`; with `NCCL_COMM_ID` set, `decide/mod.rs` `comm_id_ifname_check`",
        verdicts: "works; risky (`inherited-ifname-risky`, `inherited-ifname-prefix`, `inherited-ifname-entry-unmatched`; with `NCCL_COMM_ID`, hands off, a value that matches nothing: `comm-id-ifname-unmatched`); fails (`inherited-ifname-repaired`); ignored (`ifname-ignored`)",
    },
    Route {
        vars: &[
            "GLOO_SOCKET_IFNAME",
            "TP_SOCKET_IFNAME",
            "HOROVOD_GLOO_IFACE",
            "OMPI_MCA_btl_tcp_if_include",
            "OMPI_MCA_oob_tcp_if_include",
            "UCX_NET_DEVICES",
            "POD_IP",
        ],
        judged: "`decide/interface/companions/` `Companion::judge`, one step for the `COMPANIONS` table",
        verdicts: "works; risky (`companion-differs`, `advertised-address-differs`); fails (`gloo-ifname-repaired`, `launcher-ifname-repaired`, `pod-ip-repaired`)",
    },
    Route {
        vars: &["NCCL_IB_DISABLE"],
        judged: "`decide/rdma.rs` `judge_ib_disable`, through `decide/switches.rs` `Switch::decide`",
        verdicts: "works; risky: one that disables where RDMA looks usable (`rdma-ib-disabled-inherited`, an info) or where a net plugin that ignores it would load (`rdma-plugin-ignores-ib-disable`), one that enables where RDMA cannot work (`rdma-no-verbs-devices`, `rdma-roce-netdev-missing`, `rdma-memlock-low`) or where there is none (`rdma-ib-disabled-inherited`); never repaired",
    },
    Route {
        vars: &["NCCL_IBEXT_DISABLE"],
        judged: "`decide/rdma.rs` `disable_plugin_ib`, where ncclenv disables IB and a net plugin would load, through `decide/switches.rs` `Switch::decide`",
        verdicts: "works where it turns the plugin's IB off; risky where it leaves it on (0, yes): `rdma-plugin-ignores-ib-disable`; never repaired (an empty one is unset: ncclenv sets it)",
    },
    Route {
        vars: &["NCCL_IB_HCA"],
        judged: "`decide/rdma.rs` `hca_list`, where IB stays on",
        verdicts: "works; risky: some HCAs or ports are not usable here (`rdma-hca-inherited`, an info); never repaired",
    },
    Route {
        vars: &["NCCL_IB_GID_INDEX"],
        judged: "`decide/rdma.rs` `judge_gid_index`, where IB stays on",
        verdicts: "works (negative: NCCL chooses); risky: the index fails on a usable RoCE port (`rdma-gid-index-unusable`); never repaired",
    },
    Route {
        vars: &["NCCL_DEBUG", "NCCL_DEBUG_SUBSYS"],
        judged: "`decide/debug.rs` `debug_level`, `debug_subsystems`, under `NCCLENV_DEBUG=1`",
        verdicts: "works; risky: it hides the line naming the bootstrap interface (`debug-hides-bootstrap`); never repaired",
    },
    Route {
        vars: &["NCCL_DEBUG_FILE"],
        judged: "`decide/debug.rs` `debug_file`, under `NCCLENV_DEBUG=1`",
        verdicts: "works (kept, and named as where NCCL's lines go)",
    },
    Route {
        vars: &["TORCH_CPP_LOG_LEVEL", "TORCH_DISTRIBUTED_DEBUG", "PADDLE_LOG_LEVEL"],
        judged: "`decide/debug.rs` `framework_debug`, under `NCCLENV_DEBUG=1`",
        verdicts: "works (kept; set only when unset)",
    },
    Route {
        vars: &["NCCL_SHM_DISABLE"],
        judged: "`decide/shm.rs` `disable_on_problem`, through `decide/switches.rs` `Switch::decide`",
        verdicts: "works (a value NCCL reads as disabling, exactly 1, or no problem); risky: it leaves SHM on where `/dev/shm` fails (`shm-too-small`, `shm-missing`, `shm-read-only`, `shm-not-writable`); never repaired",
    },
    Route {
        vars: &["NCCL_P2P_DISABLE"],
        judged: "`decide/shm.rs` `decide_shm`, through `decide/switches.rs` `Switch::decide`",
        verdicts: "works; risky: it disables P2P while SHM is disabled too (`shm-p2p-both-disabled`); never repaired",
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Action;

    fn inh() -> Inherited<'static> {
        Inherited::of("NCCL_X", "bad", Origin::ConfigFile("/etc/nccl.conf".into()))
    }

    fn fails(new: Option<&str>) -> Verdict {
        Verdict::Fails(Repair {
            new: new.map(str::to_string),
            reason: "why".into(),
            said: Said::new(Finding::InheritedIfnameRepaired, "message", "remedy"),
        })
    }

    #[test]
    fn works_keeps_and_says_nothing() {
        let mut plan = Plan::default();
        settle(&mut plan, Fix::REPAIRS, &inh(), Verdict::Works);
        assert!(plan.changes.is_empty() && plan.warnings.is_empty());
    }

    #[test]
    fn risky_and_ignored_keep_with_their_findings_in_order() {
        let mut plan = Plan::default();
        let said = vec![
            Said::new(Finding::InheritedIfnameRisky, "one", "r1"),
            Said::new(Finding::InheritedIfnamePrefix, "two", "r2"),
        ];
        settle(&mut plan, Fix::REPAIRS, &inh(), Verdict::Risky(said));
        let ignored = Said::new(Finding::IfnameIgnored, "three", "r3");
        settle(&mut plan, Fix::REPAIRS, &inh(), Verdict::Ignored(ignored));
        assert!(plan.changes.is_empty());
        let msgs: Vec<&str> = plan.warnings.iter().map(|w| w.message.as_str()).collect();
        assert_eq!(msgs, ["one", "two", "three"]);
        assert_eq!(plan.warnings[0].code, "inherited-ifname-risky");
    }

    #[test]
    fn fails_repairs_or_unsets_and_records_the_old_value() {
        let mut plan = Plan::default();
        settle(&mut plan, Fix::REPAIRS, &inh(), fails(Some("good")));
        assert_eq!(plan.value_of("NCCL_X"), Some("good"));
        assert_eq!(plan.changes[0].replaced.as_deref(), Some("bad"));
        assert_eq!(plan.warnings[0].code, "inherited-ifname-repaired");
        let mut plan = Plan::default();
        settle(&mut plan, Fix::REPAIRS, &inh(), fails(None));
        assert_eq!(plan.changes[0].action, Action::Unset);
        assert_eq!(plan.changes[0].replaced.as_deref(), Some("bad"));
    }

    #[test]
    fn a_vendor_profile_keeps_what_fails_and_says_what_it_would_do() {
        let mut plan = Plan::default();
        settle(&mut plan, Fix { vendor: true }, &inh(), fails(Some("good")));
        assert!(plan.changes.is_empty());
        assert_eq!(plan.warnings[0].code, "vendor-value-kept");
        assert_eq!(
            plan.warnings[0].message,
            "message; a vendor network profile is present, so ncclenv keeps NCCL_X=\"bad\" (it would set \"good\")"
        );
    }

    /// [`ROUTED`] is `docs/policy.md`'s table under "Inherited values: one rule", row by row, and every code
    /// its verdicts name (a quoted word of lower-case letters and `-`) is a finding code.
    #[test]
    fn routed_is_the_policy_docs_table() {
        let policy = include_str!("../../docs/policy.md");
        let section = policy
            .split("\n## Inherited values: one rule\n")
            .nth(1)
            .expect("docs/policy.md has the section");
        let rows: Vec<Route> = ROUTED.to_vec();
        let mut seen = Vec::new();
        for row in section
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
        {
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
            assert_eq!(cells.len(), 3, "{row}");
            let vars: Vec<&str> = cells[0].split(", ").map(|v| v.trim_matches('`')).collect();
            seen.push((vars, cells[1].to_string(), cells[2].to_string()));
        }
        let code: Vec<(Vec<&str>, String, String)> = rows
            .iter()
            .map(|r| {
                (
                    r.vars.to_vec(),
                    r.judged.to_string(),
                    r.verdicts.to_string(),
                )
            })
            .collect();
        assert_eq!(seen, code);
        for r in ROUTED {
            let words = r.verdicts.split('`').skip(1).step_by(2);
            for c in words.filter(|w| w.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')) {
                assert!(Finding::from_code(c).is_some(), "{c} in {:?}", r.vars);
            }
        }
    }

    #[test]
    fn kept_names_the_value_and_its_origin() {
        let i = inh();
        assert_eq!(i.kept(), "NCCL_X=bad (from /etc/nccl.conf) kept");
        let on = Inherited::of("NCCL_IB_DISABLE", "0x1", Origin::Environment);
        assert_eq!(on.kept(), "inherited NCCL_IB_DISABLE=0x1 kept");
    }
}
