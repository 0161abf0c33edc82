//! The companions: the frameworks' and launchers' own interface variables and Paddle's `POD_IP`, one table
//! ([`COMPANIONS`], `docs/policy.md`'s "Companions" table, checked against it by a test) of uniform entries
//! (the variable, how its value is read, what it gets, when an unset one is set, whose words its findings
//! use), judged by one generic step ([`companions`], [`Companion::judge`]) against the bound interface; `reads`
//! reads each library's value by its own rule.

mod reads;
#[cfg(test)]
mod tests;

use super::advertised::{declared_differs, ips_differ};
use super::view::NetworkView;
use super::{is_multi, Bound};
use crate::decide::inherit::{settle, Fix, Inherited, Repair, Said, Verdict};
use crate::findings::Finding;
use crate::plan::Plan;
use crate::snapshot::{Launcher, Snapshot};
use reads::OmpiTarget;
use std::net::IpAddr;

/// One companion variable: a row of `docs/policy.md`'s "Companions" table (variables that share a row share
/// its `Doc`) and the rule ncclenv applies to it.
pub(super) struct CompanionVar {
    /// The variable (exact name).
    pub(super) var: &'static str,
    /// How an inherited value is read and judged.
    pub(super) read: Read,
    /// What ncclenv writes: the value set when unset, and the value a repair puts in.
    pub(super) gives: Gives,
    /// When an unset variable is set (and the change's reason).
    pub(super) unset: WhenUnset,
    /// Whose words the findings use: the code of a repair and the wording of a difference.
    pub(super) voice: Voice,
    /// The row of `docs/policy.md`'s table (compared with it by a test; left out of the binary).
    #[cfg(test)]
    pub(super) doc: Doc,
}

/// The cells of a row of `docs/policy.md`'s "Companions" table after the variables.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Doc {
    /// "read by".
    pub(super) read_by: &'static str,
    /// "syntax".
    pub(super) syntax: &'static str,
    /// "when unset".
    pub(super) when_unset: &'static str,
    /// "repaired when inherited".
    pub(super) repaired: &'static str,
}

/// How an inherited value is read, each by its own library's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Read {
    /// Exact names, a comma list: Gloo's lookup of each ([`gloo_name_fails`](reads::gloo_name_fails)); the first failing name fails.
    GlooNames,
    /// One exact name, judged by Gloo's rule (Horovod hands it to Gloo unchanged); a list fails.
    GlooOne,
    /// Open MPI's `*_tcp_if_include`: exact names ([`netdev_unusable`](reads::netdev_unusable)) or CIDR networks.
    OmpiInclude,
    /// UCX's devices: netdevs ([`netdev_unusable`](reads::netdev_unusable)), RDMA `device:port` entries, or `all`.
    UcxDevices,
    /// An address (Paddle's own, IPv4): a loopback one fails in a multi-node job.
    Address,
}

/// The value ncclenv writes for a companion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gives {
    /// The bound address's `getifaddrs` name ([`Bound::gname`]).
    Gname,
    /// The bound link's name ([`Bound::ifname`]).
    Ifname,
    /// [`OmpiTarget::value`]: the interface's network as a CIDR, or its name.
    OmpiValue,
    /// The bound address when it is IPv4 and not loopback; none otherwise (a repair then unsets).
    Ipv4Address,
}

/// When an unset companion is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WhenUnset {
    /// Always, to the same name as NCCL's ("takes exact names").
    Always,
    /// When the job's command is this launcher, with this reason.
    Launcher(Launcher, &'static str),
    /// For `mpirun` ([`OmpiTarget::mpirun`]), and with `rank` also for an Open MPI rank
    /// ([`OmpiTarget::rank`]).
    Mpi {
        /// Also for an Open MPI rank (`btl_tcp_if_include`, read by the rank's `MPI_Init`).
        rank: bool,
    },
    /// When there is an address to give ([`Gives::Ipv4Address`]): Paddle advertises it.
    Address,
    /// Never (UCX: setting it would take UCX off RDMA).
    Never,
}

/// Whose words a companion's findings use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Voice {
    /// Gloo's variables: `gloo-ifname-repaired`; a difference "names another interface than NCCL's" gname.
    Gloo,
    /// Another launcher's: `launcher-ifname-repaired`; a difference "selects another interface than NCCL's".
    Launcher,
    /// Paddle's `POD_IP`: `pod-ip-repaired`; a difference is `advertised-address-differs`.
    Paddle,
}

#[cfg(test)]
const GLOO_DOC: Doc = Doc {
    read_by: "PyTorch's Gloo and TensorPipe, Paddle's Gloo",
    syntax: "exact names (PyTorch: a list; Paddle: one)",
    when_unset: "set",
    repaired: "Gloo's: a name with no address; multi-node: first address loopback or link-local",
};

#[cfg(test)]
const OMPI_DOC: Doc = Doc {
    read_by: "Open MPI's TCP transports",
    syntax: "exact names or CIDR networks (no `^`: exclusions are `*_if_exclude`'s)",
    when_unset: "set for `mpirun` (both) and for an Open MPI rank (`btl`); the interface's network as a CIDR unless the job is known to be single-node; not beside a given `*_if_exclude` (Open MPI takes one list or the other: `ompi-exclude-kept`)",
    repaired: "empty; a missing name or one with no address; a network holding no address here; multi-node: a name with only loopback or link-local addresses",
};

/// The companions, in the order they are judged (F26; #26 item 4; `docs/policy.md`, "Companions"):
///
/// * `GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME`: exact interface names only (PyTorch: a comma list; Paddle: one
///   name), each resolved as Gloo resolves it ([`gloo_name_fails`](reads::gloo_name_fails)). Set when unset, to the name of the bound
///   address ([`Bound::gname`]); repaired when it holds NCCL syntax, a name with no address, or, in a
///   multi-node job, a name whose first address is loopback or link-local (not on a link-local master's
///   link): the same grounds as NCCL's (`fatal_reason`). Warned when it names another interface than NCCL's.
/// * `HOROVOD_GLOO_IFACE`: one exact name (horovod/common/utils/env_parser.cc `ParseGlooIface`; horovodrun
///   sets it to the first of its NICs, horovod/runner/gloo_run.py), which Horovod hands to Gloo unchanged
///   (`attr.iface` of `gloo::transport::tcp::CreateDevice`, horovod/common/gloo/gloo_context.cc
///   `GlooContext::Initialize`), so Gloo's own rule judges it; a list is repaired too. Repaired to the bound
///   address's `getifaddrs` name; unset, it is set for `horovodrun`.
/// * `OMPI_MCA_btl_tcp_if_include`, `OMPI_MCA_oob_tcp_if_include`: comma-separated exact names or CIDR
///   networks (Open MPI's `btl_tcp_if_include`/`oob_tcp_if_include` MCA parameters; no `^` exclusions:
///   those are `*_if_exclude`'s, and `^eth0` here is a name that does not exist). Set for `mpirun` (both)
///   and for an Open MPI rank (`btl`), [`OmpiTarget`]. Open MPI forwards `OMPI_MCA_*` to every node: the
///   name must be the same there.
/// * `UCX_NET_DEVICES`: comma-separated devices: netdev names, RDMA `device:port` entries, or `all`. Only
///   evaluated (never set: it would take UCX off RDMA); a value with RDMA entries is warned, not repaired.
/// * `POD_IP`, Paddle's node address (IPv4 only): set when unset; a loopback value in a multi-node job is a
///   certain failure (Paddle advertises it and the other nodes connect to their own loopback): repaired to
///   the chosen address, or unset when that is not IPv4 (`pod-ip-repaired`); any other difference is warned.
pub(super) const COMPANIONS: &[CompanionVar] = &[
    CompanionVar {
        var: "GLOO_SOCKET_IFNAME",
        read: Read::GlooNames,
        gives: Gives::Gname,
        unset: WhenUnset::Always,
        voice: Voice::Gloo,
        #[cfg(test)]
        doc: GLOO_DOC,
    },
    CompanionVar {
        var: "TP_SOCKET_IFNAME",
        read: Read::GlooNames,
        gives: Gives::Gname,
        unset: WhenUnset::Always,
        voice: Voice::Gloo,
        #[cfg(test)]
        doc: GLOO_DOC,
    },
    CompanionVar {
        var: "HOROVOD_GLOO_IFACE",
        read: Read::GlooOne,
        gives: Gives::Gname,
        unset: WhenUnset::Launcher(
            Launcher::Horovod,
            "the same interface as NCCL, for horovodrun's Gloo (one exact name)",
        ),
        voice: Voice::Launcher,
        #[cfg(test)]
        doc: Doc {
            read_by: "Horovod's Gloo (`ParseGlooIface`, horovod/common/utils/env_parser.cc; handed unchanged to Gloo's `tcp::CreateDevice`, horovod/common/gloo/gloo_context.cc)",
            syntax: "one exact name",
            when_unset: "set for `horovodrun`",
            repaired: "Gloo's (as above); a list",
        },
    },
    CompanionVar {
        var: "OMPI_MCA_btl_tcp_if_include",
        read: Read::OmpiInclude,
        gives: Gives::OmpiValue,
        unset: WhenUnset::Mpi { rank: true },
        voice: Voice::Launcher,
        #[cfg(test)]
        doc: OMPI_DOC,
    },
    CompanionVar {
        var: "OMPI_MCA_oob_tcp_if_include",
        read: Read::OmpiInclude,
        gives: Gives::OmpiValue,
        unset: WhenUnset::Mpi { rank: false },
        voice: Voice::Launcher,
        #[cfg(test)]
        doc: OMPI_DOC,
    },
    CompanionVar {
        var: "UCX_NET_DEVICES",
        read: Read::UcxDevices,
        gives: Gives::Ifname,
        unset: WhenUnset::Never,
        voice: Voice::Launcher,
        #[cfg(test)]
        doc: Doc {
            read_by: "UCX",
            syntax: "netdev names, RDMA `device:port`, or `all`",
            when_unset: "never (it would take UCX off RDMA)",
            repaired: "netdevs as Open MPI's names (`all` always kept); beside RDMA entries only warned",
        },
    },
    CompanionVar {
        var: "POD_IP",
        read: Read::Address,
        gives: Gives::Ipv4Address,
        unset: WhenUnset::Address,
        voice: Voice::Paddle,
        #[cfg(test)]
        doc: Doc {
            read_by: "Paddle (its own address, IPv4)",
            syntax: "an address",
            when_unset: "set (IPv4, not loopback)",
            repaired: "multi-node: loopback",
        },
    },
];

/// Step "companions": every entry of [`COMPANIONS`] in order, then the addresses the launcher declares or
/// advertises ([`declared_differs`], [`ips_differ`]), checked against the bound interface.
pub(super) fn companions(
    view: &NetworkView,
    snap: &Snapshot,
    bound: &Bound,
    fix: Fix,
    plan: &mut Plan,
) {
    let (ifname, addr) = (bound.ifname.as_str(), bound.addr);
    let c = Companion {
        view,
        snap,
        ifname,
        gname: &bound.gname,
        addr,
        multi: is_multi(snap),
        fix,
        ompi: OmpiTarget::of(view, ifname, snap, addr),
    };
    for e in COMPANIONS {
        c.judge(e, plan);
    }
    declared_differs(view, snap, ifname, addr, plan);
    ips_differ(snap, ifname, addr, plan);
}

/// What the companions' checks share: the network, the job, the bound interface and how to repair.
struct Companion<'a, 'n> {
    view: &'a NetworkView<'n>,
    snap: &'a Snapshot,
    /// The bound link's name ([`Bound::ifname`]).
    ifname: &'a str,
    /// The bound address's `getifaddrs` name ([`Bound::gname`]), for the variables Gloo resolves.
    gname: &'a str,
    /// The bound address ([`Bound::addr`]).
    addr: Option<IpAddr>,
    /// The job may span nodes ([`is_multi`]): a loopback or link-local-only interface is a failure.
    multi: bool,
    fix: Fix,
    /// What Open MPI's variables get.
    ompi: OmpiTarget,
}

/// What a library's reading of an inherited value says, in its own terms; [`Companion::judge`] turns it into
/// the one rule's [`Verdict`].
enum Reading {
    /// It works and selects the bound interface: kept, nothing said.
    Works,
    /// It works but selects another interface: kept, warned.
    Differs,
    /// It would fail (why): repaired ([`settle`]).
    Fails(String),
    /// Part of it fails but the rest must be kept (UCX's RDMA devices): `companion-differs` with this message
    /// and remedy.
    Warned(String, String),
}

impl Companion<'_, '_> {
    /// One entry: set when unset (if [`CompanionVar::unset`] says so), else read ([`CompanionVar::read`])
    /// and kept, warned or repaired.
    fn judge(&self, e: &CompanionVar, plan: &mut Plan) {
        let new = self.gives(e.gives);
        let Some(inh) = Inherited::env(e.var, self.snap) else {
            if let (Some(value), Some(reason)) = (new, self.set_reason(e)) {
                if !self.exclude_list_kept(e, plan) {
                    plan.set(e.var, value, reason);
                }
            }
            return;
        };
        let val = inh.value;
        let verdict = match self.read(e.read, e.var, val) {
            Reading::Works => Verdict::Works,
            Reading::Differs => self.differs(e, val).map_or(Verdict::Works, Verdict::risky),
            Reading::Fails(why) => Verdict::Fails(self.repair(e, val, new, why)),
            Reading::Warned(message, remedy) => {
                Verdict::risky(Said::new(Finding::CompanionDiffers, message, remedy))
            }
        };
        settle(plan, self.fix, &inh, verdict);
    }

    /// For Open MPI's include lists: whether the matching exclude list is given (`OMPI_MCA_*_if_exclude`,
    /// or `--mca *_if_exclude` on mpirun's command line) and is kept; when it is, this records the info
    /// `ompi-exclude-kept`. Open MPI
    /// refuses both ("Both TCP interface include and exclude lists were specified", opal/mca/btl/tcp and
    /// orte/mca/oob/tcp, Open MPI 4.1): setting the include list beside a user's exclude list made mpirun
    /// fail where it ran without ncclenv (break-it, stop 32).
    fn exclude_list_kept(&self, e: &CompanionVar, plan: &mut Plan) -> bool {
        if e.read != Read::OmpiInclude {
            return false;
        }
        let var = e.var.replace("_if_include", "_if_exclude");
        let mca = var.trim_start_matches("OMPI_MCA_");
        let on_mpirun = self
            .snap
            .job
            .spread
            .as_ref()
            .is_some_and(|s| s.mca.iter().any(|m| m == mca));
        let given = match self.snap.env.get(&var) {
            _ if on_mpirun => format!("mpirun --mca {mca}"),
            Some(v) => format!("{var}={v}"),
            None => return false,
        };
        plan.finding(
            Finding::OmpiExcludeKept,
            format!(
                "{given} is given: Open MPI takes an include or an exclude list, not both, so ncclenv leaves {} unset \
                 (NCCL's interface is {})",
                e.var, self.ifname
            ),
            format!(
                "to pin Open MPI to NCCL's interface, give {}={} instead of the exclude list",
                e.var, self.ompi.value
            ),
        );
        true
    }

    /// The value [`Gives`] names here.
    fn gives(&self, g: Gives) -> Option<String> {
        match g {
            Gives::Gname => Some(self.gname.to_string()),
            Gives::Ifname => Some(self.ifname.to_string()),
            Gives::OmpiValue => Some(self.ompi.value.clone()),
            Gives::Ipv4Address => self
                .addr
                .filter(|a| a.is_ipv4() && !a.is_loopback())
                .map(|a| a.to_string()),
        }
    }

    /// The reason of setting the unset `e`, when it is set for this job.
    fn set_reason(&self, e: &CompanionVar) -> Option<String> {
        let var = e.var;
        match e.unset {
            WhenUnset::Always => Some(format!(
                "the same interface as NCCL ({var} takes exact names)"
            )),
            WhenUnset::Launcher(l, reason) if self.snap.job.launcher == Some(l) => {
                Some(reason.to_string())
            }
            WhenUnset::Mpi { rank } => {
                let how = if self.ompi.value == self.ifname {
                    self.ifname.to_string()
                } else {
                    format!("{}'s network", self.ifname)
                };
                if self.ompi.mpirun {
                    Some(format!("the same interface as NCCL ({how}), for Open MPI's TCP transport (Open MPI forwards it to every node)"))
                } else if self.ompi.rank && rank {
                    Some(format!("the same interface as NCCL ({how}), for this Open MPI rank's TCP transport (read by MPI_Init)"))
                } else {
                    None
                }
            }
            WhenUnset::Address => Some(format!(
                "Paddle advertises POD_IP as this node's address: {}'s address",
                self.ifname
            )),
            WhenUnset::Launcher(..) | WhenUnset::Never => None,
        }
    }

    /// The inherited `val` of `var` read by `read`'s rule.
    fn read(&self, read: Read, var: &str, val: &str) -> Reading {
        match read {
            Read::GlooNames => self.gloo_names(var, val),
            Read::GlooOne => self.gloo_one(var, val),
            Read::OmpiInclude => self.ompi_if_include(val),
            Read::UcxDevices => self.ucx_net_devices(val),
            Read::Address => self.address(val),
        }
    }

    /// `companion-differs` (`advertised-address-differs` for Paddle's address, when there is a bound
    /// address to compare): `val` works but selects another interface than NCCL's.
    fn differs(&self, e: &CompanionVar, val: &str) -> Option<Said> {
        let (var, ifname, gname) = (e.var, self.ifname, self.gname);
        match e.voice {
            Voice::Gloo => Some(Said::new(
                Finding::CompanionDiffers,
                format!("{var}={val} names another interface than NCCL's {gname}"),
                format!("set {var}={gname} so that every library of the job uses one interface"),
            )),
            Voice::Launcher => Some(Said::new(
                Finding::CompanionDiffers,
                format!("{var}={val} selects another interface than NCCL's {ifname}"),
                format!(
                    "set {var} to {ifname} so that every library of the job uses one interface"
                ),
            )),
            Voice::Paddle => self.addr.map(|a| {
                Said::new(
                    Finding::AdvertisedAddressDiffers,
                    format!(
                        "{var}={val} is what Paddle advertises, but NCCL binds {a} on {ifname}"
                    ),
                    format!("unset {var} or make it the address of the chosen interface"),
                )
            }),
        }
    }

    /// The inherited `val` would fail (`why`): the repair to `new` ([`CompanionVar::gives`]), or an unset
    /// when there is none, with the code and words of [`CompanionVar::voice`] ([`settle`] makes it).
    fn repair(&self, e: &CompanionVar, val: &str, new: Option<String>, why: String) -> Repair {
        let var = e.var;
        let to = new.clone().unwrap_or_default();
        let (reason, code, message, remedy) = match e.voice {
            Voice::Gloo => (
                format!("inherited {var}={val:?} would fail: {why}"),
                Finding::GlooIfnameRepaired,
                format!("{var}={val:?} replaced by {to:?}: {why}"),
                format!("set {var} to one plain interface name, e.g. {to}"),
            ),
            Voice::Launcher => (
                format!("inherited {var}={val:?} would fail: {why}"),
                Finding::LauncherIfnameRepaired,
                format!("{var}={val:?} replaced by {to:?}: {why}"),
                format!("set {var} to an interface that exists here, e.g. {to}"),
            ),
            Voice::Paddle => {
                let nodes = self.snap.job.nnodes.unwrap_or(2);
                (
                    format!("inherited {var}={val} is {why} in a {nodes}-node job: Paddle would advertise it to the other nodes"),
                    Finding::PodIpRepaired,
                    format!(
                        "{var}={val} is {why}, which Paddle advertises as this node's address in a {nodes}-node job: the other nodes would connect to themselves; {}",
                        match &new {
                            Some(a) => format!("replaced by {}'s address {a}", self.ifname),
                            None => "unset (the chosen address is not IPv4)".to_string(),
                        }
                    ),
                    format!("do not set {var} to a loopback address (Kubernetes: status.podIP; under host networking, give the host name its real address in /etc/hosts)"),
                )
            }
        };
        Repair {
            new,
            reason,
            said: Said::new(code, message, remedy),
        }
    }
}
