//! The rules between the nodes of one job, written once. Two places judge the same disagreements between
//! ranks: the fleet preflight ([`crate::preflight::agree`], from the nodes' reports before NCCL runs) and
//! `ncclenv explain` ([`crate::explain`], from NCCL's logs after it ran). Each [`Rule`] names one such
//! disagreement and owns its remedy; each side keeps its own codes (`preflight-*` in [`crate::findings`],
//! [`crate::explain::Code`]) and its message, which says what it saw. Pure data: imports nothing.
//!
//! | rule | preflight (`docs/preflight.md`) | explain (`docs/explain.md`) |
//! |---|---|---|
//! | [`Rule::NatAddress`] | `preflight-duplicate-address`, `preflight-nat`, `preflight-unreachable` (a NAT'd bridge, no route back, another node answered) | `bootstrap-address-shared` |
//! | [`Rule::FamiliesDiffer`] | `preflight-family-differs` | `bootstrap-family-mixed` |
//! | [`Rule::NcclVersionsDiffer`] | `preflight-nccl-version-differs` | `nccl-versions-differ` |
//! | [`Rule::IbMixed`] | `preflight-ib-disabled` (repaired: disabled on all) | `net-transport-mixed` |
//!
//! A node's own decision uses [`Rule::NatAddress`]'s remedy too, where it sees itself behind NAT before any
//! other node is heard (`container-bridge-nat`, `crate::decide`'s layout warnings).

/// A disagreement between the nodes (ranks) of one job that NCCL cannot bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// A node's address cannot be connected to from the others: several hosts advertise or bootstrap on one
    /// (private) address, or a node's connection arrives from another address than the one it advertises.
    /// Both are NAT, typically a container on a bridge (Docker's default network).
    NatAddress,
    /// Some ranks bootstrap over IPv4, others over IPv6: NCCL cannot connect an IPv4 rank to an IPv6 one.
    FamiliesDiffer,
    /// The ranks load different NCCL versions (NCCL refuses mismatched versions only after init,
    /// NVIDIA/nccl#1267).
    NcclVersionsDiffer,
    /// InfiniBand/RoCE on some ranks, sockets on others (`NCCL_IB_DISABLE` or RDMA access differs): every
    /// rank must use the same network transport.
    IbMixed,
}

impl Rule {
    /// Every rule.
    pub const ALL: &'static [Rule] = &[
        Rule::NatAddress,
        Rule::FamiliesDiffer,
        Rule::NcclVersionsDiffer,
        Rule::IbMixed,
    ];

    /// What to do, one clause for a finding's `remedy` (the same text in the preflight and in explain).
    pub const fn remedy(self) -> &'static str {
        match self {
            Rule::NatAddress => {
                "give every node an address the others can connect to: run the container with \
                 --network=host, or use a routable pod network or a Multus/macvlan interface for NCCL"
            }
            Rule::FamiliesDiffer => {
                "give every node an address of one family and the same NCCL_SOCKET_FAMILY (AF_INET or \
                 AF_INET6) on every rank: an interface with such an address that routes to the master"
            }
            Rule::NcclVersionsDiffer => {
                "install one NCCL version in every node's image (the same nvidia-nccl wheel, torch or paddle \
                 build; ncclenv doctor lists the libnccl files a command can load)"
            }
            Rule::IbMixed => {
                "give every node the same RDMA access (--device=/dev/infiniband --cap-add=IPC_LOCK --ulimit \
                 memlock=-1) to use InfiniBand on all, or set NCCL_IB_DISABLE=1 on all"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each remedy is one clause of plain text: no line break, no table separator, no final full stop (a
    /// finding's remedy follows `What to do: `), distinct from the others.
    #[test]
    fn remedies_are_one_clause_each_and_distinct() {
        let mut seen = std::collections::BTreeSet::new();
        for r in Rule::ALL {
            let t = r.remedy();
            assert!(seen.insert(t), "{r:?}");
            assert!(
                !t.contains('\n') && !t.contains('|') && !t.contains("  "),
                "{r:?}: {t}"
            );
            assert!(!t.ends_with('.'), "{r:?}: {t}");
        }
    }
}
