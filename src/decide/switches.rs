//! NCCL's transport switches: the `NCCL_*_DISABLE` variables ncclenv reads or sets, one table ([`SWITCHES`],
//! `docs/policy.md`'s "Transport switches" table, held to it by a test) of uniform entries: the variable, the
//! value ncclenv sets, the check's retry with it. One generic step ([`Switch::decide`]) is what every rule
//! does with its switch: an inherited one (the value NCCL sees, environment over its configuration files) is
//! kept through the one rule (`inherit::settle`) with the verdict of the switch's own rule; an unset one is
//! set when that rule turns the transport off. How NCCL reads a switch is a field of its entry
//! ([`Switch::reads`]: any non-zero integer, `nccl_rules::disables`, or exactly 1,
//! `nccl_rules::disables_at_one`); the evidence each rule weighs stays in its own module
//! (`decide::rdma` for IB, `decide::shm` for `/dev/shm`).

use crate::decide::inherit::{settle, Fix, Inherited, Said, Verdict};
use crate::nccl_rules;
use crate::plan::Plan;
use crate::snapshot::Snapshot;

/// One transport switch: a row of `docs/policy.md`'s "Transport switches" table.
#[derive(Debug)]
pub struct Switch {
    /// The variable, e.g. `NCCL_SHM_DISABLE`.
    pub var: &'static str,
    /// The transport's short name in messages: `SHM`, `P2P`, `IB`, `IBext`.
    pub transport: &'static str,
    /// How NCCL reads the value: whether a value turns the transport off (`nccl_rules::disables`, any
    /// non-zero integer, or `nccl_rules::disables_at_one`, exactly 1).
    pub reads: fn(&str) -> bool,
    /// The value `decide` sets to turn the transport off; `None`: `decide` never sets it.
    pub sets: Option<&'static str>,
    /// The check's repair (`NCCLENV_CHECK_REPAIR=1`) retries a failed allreduce with `VAR=1`.
    pub retry: Option<Retry>,
    /// The row's cells after the variable (compared with the table by a test; left out of the binary).
    #[cfg(test)]
    pub doc: Doc,
}

/// A retry of the check's repair: the reason reads "the allreduce check failed and passed with OFF off
/// (CAUSE)".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// What the retry turns off, e.g. "the SHM transport".
    pub off: &'static str,
    /// The failure a pass points to, e.g. "/dev/shm too small or broken".
    pub cause: &'static str,
}

/// The cells of a row of `docs/policy.md`'s "Transport switches" table after the variable.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Doc {
    /// "turns off".
    pub turns_off: &'static str,
    /// "NCCL reads it": the NCCL source file, function and versions, and which values turn it off.
    pub nccl_reads: &'static str,
    /// "ncclenv sets it": to what, where and by which rule.
    pub sets: &'static str,
    /// "findings": the codes an inherited or a set switch can get.
    pub findings: &'static str,
}

/// The switches, in `docs/policy.md`'s order (the check's repair retries them in this order too).
pub const SWITCHES: &[Switch] = &[
    Switch {
        var: "NCCL_SHM_DISABLE",
        transport: "SHM",
        reads: nccl_rules::disables_at_one,
        sets: Some("1"),
        retry: Some(Retry {
            off: "the SHM transport",
            cause: "/dev/shm too small or broken",
        }),
        #[cfg(test)]
        doc: Doc {
            turns_off: "the SHM transport (pairs of local GPUs through `/dev/shm` segments)",
            nccl_reads: "`ncclParamShmDisable() == 1` in `shmCanConnect`, src/transport/shm.cc (2.18–2.30): only 1 turns it off",
            sets: "`1` where `/dev/shm` is missing, read-only, not writable for the job's user or too small for the local ranks (`decide/shm.rs` `disable_on_problem`); the check's repair retries with `1`",
            findings: "`shm-too-small`, `shm-missing`, `shm-read-only`, `shm-not-writable`",
        },
    },
    Switch {
        var: "NCCL_P2P_DISABLE",
        transport: "P2P",
        reads: nccl_rules::disables_at_one,
        sets: None,
        retry: Some(Retry {
            off: "GPU peer-to-peer",
            cause: "PCIe ACS/IOMMU or a broken P2P path",
        }),
        #[cfg(test)]
        doc: Doc {
            turns_off: "GPU peer-to-peer (CUDA P2P over NVLink or PCIe)",
            nccl_reads: "`strtol(value, NULL, 0) == 1` in `ncclGetLevel`, src/graph/paths.cc (2.18–2.30): only 1 turns it off (else `NCCL_P2P_LEVEL` is read)",
            sets: "never by `decide` (judged in `decide/shm.rs` `decide_shm`); the check's repair retries with `1`",
            findings: "`shm-p2p-both-disabled`",
        },
    },
    Switch {
        var: "NCCL_IB_DISABLE",
        transport: "IB",
        reads: nccl_rules::disables,
        sets: Some("1"),
        retry: Some(Retry {
            off: "InfiniBand/RoCE",
            cause: "a broken RDMA setup",
        }),
        #[cfg(test)]
        doc: Doc {
            turns_off: "NCCL's InfiniBand/RoCE transport (NET/IB)",
            nccl_reads: "`if (ncclParamIbDisable())` in `ncclIbInit`, src/transport/net_ib.cc (2.18–2.28), `ncclIbInitDevices`, src/transport/net_ib/init.cc (2.29–2.30): any non-zero integer turns it off",
            sets: "`1` where RDMA cannot work here: no device, no ACTIVE port, no verbs node that opens, RoCE without its netdev, memlock too low (`decide/rdma.rs` `ib_off`); the preflight sets it on every node when some have it; the check's repair retries with `1`",
            findings: "`rdma-ib-disabled-inherited`, `rdma-plugin-ignores-ib-disable`, `rdma-no-verbs-devices`, `rdma-roce-netdev-missing`, `rdma-memlock-low`",
        },
    },
    Switch {
        var: "NCCL_IBEXT_DISABLE",
        transport: "IBext",
        reads: nccl_rules::disables,
        sets: Some("1"),
        retry: None,
        #[cfg(test)]
        doc: Doc {
            turns_off: "an external net plugin's own IB transport (IBext, HPC-X's `libnccl-net.so`), which `NCCL_IB_DISABLE` does not reach",
            nccl_reads: "the plugin's `NCCL_PARAM(IbDisable, \"IBEXT_DISABLE\")` in `ncclIbInit`, src/ib_plugin.c of nccl-rdma-sharp-plugins: any non-zero integer turns it off",
            sets: "`1` where ncclenv turns IB off and a net plugin would load (`decide/rdma.rs` `disable_plugin_ib`)",
            findings: "`rdma-plugin-ignores-ib-disable` (an inherited one that leaves the plugin's IB on)",
        },
    },
];

/// `NCCL_SHM_DISABLE` ([`SWITCHES`]).
pub const SHM: &Switch = &SWITCHES[0];
/// `NCCL_P2P_DISABLE` ([`SWITCHES`]).
pub const P2P: &Switch = &SWITCHES[1];
/// `NCCL_IB_DISABLE` ([`SWITCHES`]).
pub const IB: &Switch = &SWITCHES[2];
/// `NCCL_IBEXT_DISABLE` ([`SWITCHES`]).
pub const IBEXT: &Switch = &SWITCHES[3];

/// What a switch's rule does to turn its transport off when the switch is unset: the change's reason, and the
/// finding made after the change, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnOff {
    /// The change's reason (the `Changes` line).
    pub reason: String,
    /// The finding made with it.
    pub said: Option<Said>,
}

/// How a switch came out of [`Switch::decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Inherited and kept; `off` when NCCL reads it as turning the transport off ([`Switch::turns_off`]).
    Kept {
        /// The kept value turns the transport off.
        off: bool,
    },
    /// Unset, and ncclenv set it: the transport is off.
    Set,
    /// Unset, and left unset: NCCL decides.
    Unset,
}

impl Outcome {
    /// Whether the transport ends up off: a kept switch that disables, or one ncclenv set.
    pub fn off(self) -> bool {
        match self {
            Outcome::Kept { off } => off,
            Outcome::Set => true,
            Outcome::Unset => false,
        }
    }
}

impl Switch {
    /// The switch as NCCL sees it: the environment's value, else the first NCCL configuration file's
    /// ([`Inherited::nccl`]; NCCL applies its files under the environment, `initEnv`, src/misc/param.cc).
    /// `None` also for a value NCCL reads as unset: an empty one (or one that overflows), for which
    /// `ncclLoadParam` keeps the parameter's default (`nccl_rules::param_value`), so ncclenv decides as for an
    /// unset switch (break-it finding: `-e NCCL_SHM_DISABLE=` kept a `/dev/shm` too small in use).
    pub fn inherited<'s>(&self, snap: &'s Snapshot) -> Option<Inherited<'s>> {
        Inherited::nccl(self.var, snap).filter(|i| nccl_rules::param_value(i.value).is_some())
    }

    /// How NCCL reads `inh` when its value is not plainly `0` or `1`, for the messages that quote it:
    /// ` (NCCL reads yes as 0: IB stays on)`, ` (NCCL turns SHM off only at 1: 2 leaves it on)`; empty for
    /// `0` and `1`.
    pub fn reading(&self, inh: &Inherited) -> String {
        let value = inh.value;
        if value == "0" || value == "1" {
            return String::new();
        }
        let Some(n) = nccl_rules::param_value(value) else {
            return String::new();
        };
        match (self.turns_off(inh), n) {
            (true, _) => format!(" (NCCL reads {value} as {n}: {} off)", self.transport),
            (false, 0) => format!(" (NCCL reads {value} as 0: {} stays on)", self.transport),
            (false, _) => format!(
                " (NCCL turns {} off only at 1: {value} leaves it on)",
                self.transport
            ),
        }
    }

    /// Whether the inherited switch turns its transport off, as NCCL reads this one ([`Switch::reads`]).
    pub fn disables(&self, snap: &Snapshot) -> bool {
        self.inherited(snap).is_some_and(|i| self.turns_off(&i))
    }

    /// Whether `inh`, this switch's inherited value, turns its transport off as NCCL reads it
    /// ([`Switch::reads`]).
    pub fn turns_off(&self, inh: &Inherited) -> bool {
        (self.reads)(inh.value)
    }

    /// The one step: an inherited switch is kept whatever its value, through [`settle`] with `judge`'s
    /// verdict (a switch is never repaired); an unset one is set to [`Switch::sets`] when `turn_off` gives a
    /// reason, with its finding after the change.
    pub fn decide(
        &self,
        snap: &Snapshot,
        plan: &mut Plan,
        judge: impl FnOnce(&Inherited) -> Verdict,
        turn_off: impl FnOnce() -> Option<TurnOff>,
    ) -> Outcome {
        if let Some(inh) = self.inherited(snap) {
            let verdict = judge(&inh);
            settle(plan, Fix::REPAIRS, &inh, verdict);
            return Outcome::Kept {
                off: self.turns_off(&inh),
            };
        }
        let Some(value) = self.sets else {
            return Outcome::Unset;
        };
        let Some(t) = turn_off() else {
            return Outcome::Unset;
        };
        plan.set(self.var, value, t.reason);
        if let Some(s) = t.said {
            s.record(plan);
        }
        Outcome::Set
    }
}

#[cfg(test)]
mod tests;
