//! Choosing and validating the socket interface: `NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY` and the framework
//! companions `GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME`, `POD_IP`. Pure: reads the snapshot, writes the plan.
//!
//! [`decide_interface`] runs small steps with typed results: the inherited family (`InheritedFamily`);
//! ncclenv's own choice (`choose`, one function per step of the order below); the inherited interface list
//! (`InheritedList`: absent, ignored, kept or fatal); the interface used (kept, own, or the loopback
//! fallback or a refusal); the family export; the companions; warnings about the network's layout.
//!
//! The order of the own choice (`docs/policy.md`): the interface the platform names outright (SageMaker's
//! `SM_NETWORK_INTERFACE_NAME`) when it is a candidate here; else the kernel's route to the peer (an IPv4
//! link-local address counts when the peer is on that link); else the interface owning the address this node
//! declares (`VLLM_HOST_IP`, Ray's `--node-ip-address`, …); else the kernel's route to an off-link
//! destination when an `ip rule` takes it out of table main; else the IPv4 default route of table main with
//! the lowest metric whose interface is a candidate; else the same for IPv6; else the only candidate; else
//! the best-ranked candidate (with a warning); else `lo` for a single-node job. What NCCL itself does with an
//! inherited value is asked of `crate::nccl_rules` (`docs/nccl-rules.md`); the field cases cited as `F<n>`
//! are in `docs/field-cases.md`.
//!
//! The files, one concern each: `view` (the network snapshot indexed once, `NetworkView`), `choice`
//! (ncclenv's own choice, `Pick`), `inherited` (the inherited `NCCL_SOCKET_FAMILY` and
//! `NCCL_SOCKET_IFNAME`, read as NCCL reads them), `bind` (the interface used, the loopback fallback or the
//! refusal, the family export), `companions` (the frameworks'
//! and launchers' interface variables and `POD_IP`: one table, one generic step), `advertised` (the
//! addresses the launcher declares or advertises), `layout`
//! (warnings about the network's layout) and `queries` (what doctor, the check's repair and the regime ask
//! without deciding). Repairs of inherited values go through the one rule, `crate::decide::inherit::settle`.

mod advertised;
mod bind;
mod choice;
mod companions;
mod inherited;
mod layout;
mod queries;
mod view;

pub use layout::no_proxy_exempts;
pub use queries::{
    candidate_names, nccl_alone, nccl_model, unwritable_choice, NcclBootstrap, NcclModel,
};

use crate::config::Config;
use crate::decide::inherit::Fix;
use crate::nccl_rules::nccl_target;
use crate::plan::{Choice, Plan};
use crate::snapshot::Snapshot;
use bind::{export_family, loopback_fallback, own_interface, peer_loopback};
use choice::{choose, given};
use companions::companions;
use inherited::{inherited_family, inherited_list, kept_interface, InheritedList};
use layout::layout_warnings;
use std::net::IpAddr;
use view::NetworkView;

/// True when the job is known to span two or more nodes ([`crate::snapshot::JobShape::is_multi_node`]).
fn is_multi(snap: &Snapshot) -> bool {
    snap.job.is_multi_node()
}

/// The interface every library of the job will use: its name, its address (when it has one) and how it was
/// chosen.
struct Bound {
    /// The link's name.
    ifname: String,
    /// The name `getifaddrs` gives the bound address (`ifa_name`): its label when it has one
    /// ([`Addr::label`](crate::snapshot::Addr::label)), else the link's name. Gloo and TensorPipe select by this exact name.
    gname: String,
    addr: Option<IpAddr>,
    how: String,
}

/// Decide `NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY`, `GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME` and `POD_IP`,
/// and warn about what is visible and dangerous. Requires `snap.net` to be `Ok` (the caller handles a failed
/// probe). The steps, in order: the inherited family, ncclenv's own choice (`choose`), the inherited
/// interface list (`InheritedList`), the interface used (kept, own, or the loopback fallback or a
/// refusal), the family export, the companions, then warnings about the network's layout. Field cases
/// F1–F12, F16, F26–F29 (`docs/field-cases.md`).
pub fn decide_interface(snap: &Snapshot, cfg: &Config, plan: &mut Plan, vendor: bool) {
    let Ok(net) = &snap.net else { return };
    let view = NetworkView::new(net, &cfg.exclude).for_job(snap);
    let fix = Fix { vendor };
    let target = nccl_target(snap);

    let family = inherited_family(snap, &view, fix, plan);
    let own = match cfg
        .interface_override
        .as_ref()
        .and_then(|o| given(&view, o))
    {
        Some(p) => Some(p),
        None => choose(snap, &view, family.used, plan),
    };
    let list = inherited_list(snap, &view, family.used, &target, fix, plan);
    let bound = match (&list, &own) {
        (InheritedList::Kept { inh, first }, _) => kept_interface(&view, inh, first),
        (_, Some(p)) => own_interface(snap, &view, p, &list, family.used, fix, plan),
        (_, None) => match loopback_fallback(snap, cfg, &view, &list, family.used, fix, plan) {
            Some(b) => b,
            None => return,
        },
    };
    if let (true, Some(p)) = (is_multi(snap), &snap.peer) {
        peer_loopback(snap, p, bound.addr, plan);
    }
    plan.choice = Some(Choice {
        ifname: bound.ifname.clone(),
        addr: bound.addr,
        how: bound.how.clone(),
    });
    export_family(&family, &bound, fix, plan);
    companions(&view, snap, &bound, fix, plan);
    layout_warnings(&view, snap, &bound, plan);
}
