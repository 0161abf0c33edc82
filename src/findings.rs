//! Every finding ncclenv can make, named once: [`Finding`] knows its stable code (the `[code]` of a warning
//! line, `code` in JSON logs and in `doctor --json`), its severity, whether `NCCLENV_STRICT=1` turns it into a
//! refusal, and a one-line summary. The findings table of `docs/findings.md` is generated from
//! [`Finding::ALL`] (`NCCLENV_BLESS=1 cargo test --lib findings` rewrites it), and the `code` enum of
//! `docs/doctor.schema.json` is checked against it.
//!
//! Rules push findings with [`crate::plan::Plan::finding`], which takes the severity and the strict flag from
//! here. Two codes are log lines, not findings of a plan ([`Finding::is_log_line`]): `exec-e2big` and
//! `panic`.

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; nothing is wrong.
    Info,
    /// NCCL may fail or run slowly; the job still runs.
    Warn,
}

/// Declares [`Finding`] and its table (with [`crate::code_table`]'s one macro, which `explain`'s codes share):
/// `Variant = "code", severity, strict, "summary"`.
macro_rules! findings {
    ($($entries:tt)*) => {
        crate::code_table::code_table! {
            enum Finding = "One finding (or, for [`Finding::ExecE2big`] and [`Finding::Panic`], one log line with a code).";
            all = "Every finding, in the order of `docs/findings.md`.";
            code = "The stable code, e.g. `inherited-ifname-repaired`.";
            severity = "Info (worth knowing; nothing is wrong) or warn (NCCL may fail or run slowly; `doctor` exits 1).\nA rule may make a warning an info where it is harmless (`Plan::finding_as`).";
            summary = "What the finding means, in one line (the table of `docs/findings.md`).";
            strict = "True when `NCCLENV_STRICT=1` turns this finding into a refusal (exit 78).";
            strict;
            $($entries)*
        }
    };
}

findings! {
    /// The inherited `NCCL_SOCKET_IFNAME` would fail; replaced.
    InheritedIfnameRepaired = "inherited-ifname-repaired", Warn, true,
        "the inherited `NCCL_SOCKET_IFNAME` would fail; replaced";
    /// The inherited `NCCL_SOCKET_IFNAME` works but selects a risky interface.
    InheritedIfnameRisky = "inherited-ifname-risky", Warn, true,
        "the inherited `NCCL_SOCKET_IFNAME` works but selects loopback, a link-local-only interface (not on the master's link) or a container bridge (not the host's uplink)";
    /// A prefix entry of the inherited list also matches other interfaces.
    InheritedIfnamePrefix = "inherited-ifname-prefix", Warn, true,
        "a prefix entry also matches other interfaces (NET/Socket stripes over all)";
    /// The inherited `NCCL_SOCKET_FAMILY` names a family no interface has; replaced.
    InheritedFamilyRepaired = "inherited-family-repaired", Warn, true,
        "the inherited `NCCL_SOCKET_FAMILY` names a family no interface has a usable address of; replaced";
    /// An entry of a kept `NCCL_SOCKET_IFNAME` can match no interface on any node (it holds whitespace).
    InheritedIfnameEntryUnmatched = "inherited-ifname-entry-unmatched", Warn, false,
        "an entry of a kept `NCCL_SOCKET_IFNAME` can match no interface on any node (a space NCCL does not trim); plain names that match nothing here may be another node's and are not reported";
    /// `GLOO_SOCKET_IFNAME`/`TP_SOCKET_IFNAME` repaired.
    GlooIfnameRepaired = "gloo-ifname-repaired", Warn, true,
        "`GLOO_SOCKET_IFNAME`/`TP_SOCKET_IFNAME` held NCCL syntax, a name without an address, or (multi-node) one whose first address is loopback/link-local";
    /// Several candidates and no route named one.
    NoRouteDecided = "no-route-decided", Warn, true,
        "several candidates and no route named one";
    /// Only `lo` is usable.
    LoopbackOnly = "loopback-only", Warn, true,
        "only `lo` is usable: single-node only";
    /// No interface at all.
    NoInterface = "no-interface", Warn, false,
        "no interface, and `lo` missing or down: nothing is set; give the container a network (or bring `lo` up)";
    /// (A refusal's code) a multi-node job and no interface but `lo`.
    NoInterfaceMultiNode = "no-interface-multi-node", Warn, false,
        "(a refusal's code) a multi-node job and no interface but `lo`: refused (exit 78)";
    /// (A refusal's code) `NCCLENV_STRICT=1` and the entrypoint's check failed.
    CheckFailed = "check-failed", Warn, false,
        "(a refusal's code) `NCCLENV_STRICT=1` and the entrypoint's check failed: refused (exit 78)";
    /// An `NCCLENV_*` name that is not an option.
    UnknownVariable = "unknown-variable", Warn, false,
        "an `NCCLENV_*` name that is not an option (another case, a typo, bytes that are not UTF-8): ignored, the nearest known name given (also for a known name with a word added, `NCCLENV_LOG_LEVEL` → `NCCLENV_LOG`, with its values where they are a short list)";
    /// (A log line) the environment with ncclenv's variables was too big for the kernel.
    ExecE2big = "exec-e2big", Warn, false,
        "(a log line, not a finding) the command's environment with ncclenv's variables exceeded the kernel's limit (`E2BIG`): it runs with the inherited environment, untouched";
    /// (A log line) an internal error.
    Panic = "panic", Warn, false,
        "(a log line, not a finding) ncclenv hit an internal error: the entrypoint runs the command with the environment it received; `env`, `doctor`, `check` exit 70";
    /// A probe failed; hands off.
    ProbeFailed = "probe-failed", Warn, true,
        "a probe failed; environment untouched";
    /// The master's name did not resolve in time.
    PeerUnresolved = "peer-unresolved", Warn, true,
        "the master's name did not resolve within `NCCLENV_RESOLVE_TIMEOUT_MS` (the time is said); decided without it";
    /// The master is an IPv6 link-local address.
    PeerLinkLocal = "peer-link-local", Warn, false,
        "the master is an IPv6 link-local address (a scope means nothing on other nodes): the route to it does not choose the interface, with or without a `%zone`";
    /// `POD_IP` was a loopback address in a multi-node job; replaced.
    PodIpRepaired = "pod-ip-repaired", Warn, true,
        "`POD_IP` was a loopback address in a multi-node job; replaced by the chosen address";
    /// A launcher's interface variable named an interface its library cannot use; replaced.
    LauncherIfnameRepaired = "launcher-ifname-repaired", Warn, true,
        "`HOROVOD_GLOO_IFACE`, `OMPI_MCA_*_if_include` or `UCX_NET_DEVICES` named a missing interface, one without an address, or (multi-node) one with only loopback/link-local addresses; replaced";
    /// Under a vendor profile a failing inherited value is kept.
    VendorValueKept = "vendor-value-kept", Warn, true,
        "under a vendor profile an inherited value that would fail is kept (ncclenv repairs nothing there)";
    /// The job's address is a container bridge behind NAT.
    ContainerBridgeNat = "container-bridge-nat", Warn, false,
        "a multi-node job's address is a container bridge behind NAT: other nodes cannot connect back";
    /// NCCL ignores the inherited `NCCL_SOCKET_IFNAME`.
    IfnameIgnored = "ifname-ignored", Warn, false,
        "NCCL ignores the inherited `NCCL_SOCKET_IFNAME` (one character)";
    /// NCCL ignores the inherited `NCCL_SOCKET_FAMILY`.
    FamilyIgnored = "family-ignored", Warn, false,
        "NCCL ignores the inherited `NCCL_SOCKET_FAMILY` (not `AF_INET`/`AF_INET6`)";
    /// The preferred default route's interface is down.
    DefaultRouteDown = "default-route-down", Warn, false,
        "the preferred default route's interface is down; another was taken";
    /// The master is a loopback address in a multi-node job.
    PeerIsLoopback = "peer-is-loopback", Warn, false,
        "the master resolves to a loopback address here in a multi-node job: on the master (node rank 0, or the owner of another address the name resolves to) an info (the master reaches itself; the other nodes need its routable address), elsewhere a warning (a node that is not the master connects to itself; a host name may be the master's own `/etc/hosts` entry)";
    /// No route to the peer.
    PeerUnreachable = "peer-unreachable", Warn, false,
        "no route to the peer";
    /// The route to the peer leaves through an unusable interface.
    PeerRouteUnusable = "peer-route-unusable", Warn, false,
        "the route to the peer leaves through an unusable interface";
    /// Two interfaces with overlapping connected prefixes.
    OverlappingPrefixes = "overlapping-prefixes", Warn, false,
        "two interfaces with overlapping connected prefixes";
    /// An address failed duplicate-address detection.
    AddressDadFailed = "address-dad-failed", Warn, false,
        "an IPv6 address failed duplicate-address detection (`dadfailed`): another host on that network has it; the kernel never uses it";
    /// The interface's IPv6 address was still in duplicate-address detection after waiting.
    AddressTentative = "address-tentative", Warn, false,
        "the address the master's route (or the only usable address) needs was still in duplicate-address detection after waiting the interface's own DAD time";
    /// A known defect of the NCCL version the command loads applies (`src/nccl_defects.rs`).
    NcclVersionDefect = "nccl-version-defect", Warn, true,
        "a known defect of the NCCL version the command loads applies here (the table in docs/nccl-rules.md)";
    /// An advertised address differs from the one NCCL binds.
    AdvertisedAddressDiffers = "advertised-address-differs", Warn, false,
        "`POD_IP`, `--ips`, `VLLM_HOST_IP` or `--node-ip-address` name another address than NCCL binds";
    /// A companion variable names another interface than NCCL's.
    CompanionDiffers = "companion-differs", Warn, false,
        "`GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME` or another launcher's interface variable names another interface than NCCL's";
    /// A proxy variable would catch an HTTP rendezvous.
    ProxyCatchesPeer = "proxy-catches-peer", Warn, false,
        "a proxy variable an HTTP rendezvous (Paddle's master, etcd) would use, without `NO_PROXY` for it; says whose";
    /// `CUDA_VISIBLE_DEVICES`/`NVIDIA_VISIBLE_DEVICES` holds an entry that stops the list.
    GpuListInvalid = "gpu-list-invalid", Warn, false,
        "`CUDA_VISIBLE_DEVICES` or `NVIDIA_VISIBLE_DEVICES` holds an entry CUDA or the container toolkit stops at or ignores: the job sees fewer GPUs than listed";
    /// NCCL libraries of more than one version were found.
    NcclSeveralVersions = "nccl-several-versions", Warn, false,
        "NCCL libraries of more than one version were found (`doctor`, or a start that looked for them); which one loads depends on `LD_LIBRARY_PATH` and the framework (`NCCL_DEBUG=VERSION` prints it)";
    /// What ncclenv forwarded to, or withheld from, a runner that copies the environment to every node.
    RunnerCopiesEnv = "runner-copies-env", Info, false,
        "a runner copies the environment to every node (`mpirun`, DeepSpeed's multinode runner): what ncclenv forwarded by name or left to each node, and how to run ncclenv on every node";
    /// ncclenv cannot forward its interface variables through `mpirun` (`-x` or `--mca mca_base_env_list` given).
    RunnerForwardBlocked = "runner-forward-blocked", Warn, false,
        "`mpirun -x` or `--mca mca_base_env_list` is given, so ncclenv cannot forward its interface variables to the ranks on other nodes";
    /// The command's wrapper (`env -i`, `env -u NAME`) drops variables ncclenv sets.
    EnvRemovedByWrapper = "env-removed-by-wrapper", Warn, false,
        "the command's wrapper (`env -i …`, `env -u NAME …`, also inside `sh -c`) removes variables ncclenv sets: the job does not see them";
    /// The command's wrapper (`env NAME=…`, `sh -c "NAME=… torchrun"`, `export NAME=…;`) assigns a variable
    /// ncclenv sets: the job gets the wrapper's value, unchecked.
    EnvSetByWrapper = "env-set-by-wrapper", Warn, false,
        "the command's wrapper (`env NAME=VALUE …`, `sh -c \"NAME=VALUE …\"`, `export NAME=VALUE;`) assigns a variable ncclenv sets: the job gets the wrapper's value, which ncclenv did not check";
    /// An Open MPI exclude list (`*_tcp_if_exclude`) is given: ncclenv leaves the include list unset.
    OmpiExcludeKept = "ompi-exclude-kept", Info, false,
        "an Open MPI `btl_tcp_if_exclude`/`oob_tcp_if_exclude` list is given (`OMPI_MCA_*` or `mpirun --mca`): Open MPI takes an include or an exclude list, not both, so ncclenv sets no `*_tcp_if_include`";
    /// A launcher argument or variable could not be parsed.
    LauncherArgument = "launcher-argument", Warn, false,
        "a launcher argument or variable (`--nnodes 2:1`, `MASTER_ADDR='a b'`) could not be parsed and was ignored";
    /// `NCCL_COMM_ID` is set: hands off.
    CommId = "comm-id", Info, false,
        "`NCCL_COMM_ID` is set: hands off (bootstrap is the user's)";
    /// `NCCL_COMM_ID` with no local interface in its subnet.
    CommIdNoSubnet = "comm-id-no-subnet", Warn, false,
        "`NCCL_COMM_ID` with no local interface in its subnet";
    /// `NCCL_COMM_ID` set and an inherited `NCCL_SOCKET_IFNAME` that matches nothing.
    CommIdIfnameUnmatched = "comm-id-ifname-unmatched", Warn, true,
        "`NCCL_COMM_ID` is set (hands off) but an inherited `NCCL_SOCKET_IFNAME` matches no usable interface: bootstrap ignores it, NET/Socket and NET/IB still fail on it; nothing changed (not under a vendor profile: its plugin carries the traffic)";
    /// A vendor network profile: the transport is the vendor's.
    VendorProfile = "vendor-profile", Info, false,
        "a vendor network profile: hands off the transport";
    /// `NCCLENV_DISABLE=1`.
    Disabled = "disabled", Info, false,
        "`NCCLENV_DISABLE=1`: ncclenv changes nothing";
    /// ACTIVE RDMA ports but no verbs device nodes.
    RdmaNoVerbsDevices = "rdma-no-verbs-devices", Warn, true,
        "ACTIVE RDMA ports but no `/dev/infiniband/uverbsN`: add `--device=/dev/infiniband --cap-add=IPC_LOCK --ulimit memlock=-1`";
    /// RoCE GIDs bound to no netdev in this namespace.
    RdmaRoceNetdevMissing = "rdma-roce-netdev-missing", Warn, true,
        "RoCE GIDs bound to no netdev in this namespace (missing Multus/SR-IOV interface)";
    /// RLIMIT_MEMLOCK below 1 GiB and no `CAP_IPC_LOCK`.
    RdmaMemlockLow = "rdma-memlock-low", Warn, true,
        "RLIMIT_MEMLOCK below 1 GiB and no `CAP_IPC_LOCK`: `--ulimit memlock=-1`";
    /// An HCA with an ACTIVE port cannot be used.
    RdmaHcaUnusable = "rdma-hca-unusable", Warn, false,
        "an HCA with an ACTIVE port has no verbs node, or it does not open (named, with the error); `NCCL_IB_HCA` lists the others";
    /// An inherited `NCCL_IB_GID_INDEX` names an unusable GID.
    RdmaGidIndexUnusable = "rdma-gid-index-unusable", Warn, true,
        "an inherited `NCCL_IB_GID_INDEX` names an empty, RoCE v1 or foreign-netdev GID; kept; says which index works, or to unset it";
    /// `NCCL_IB_DISABLE=1` inherited, but a net plugin would use IB.
    RdmaPluginIgnoresIbDisable = "rdma-plugin-ignores-ib-disable", Warn, false,
        "`NCCL_IB_DISABLE=1` inherited, but a net plugin would load and use IB: add `NCCL_IBEXT_DISABLE=1` or `NCCL_NET_PLUGIN=none`";
    /// The soft memlock limit is raised before exec.
    RdmaMemlockRaised = "rdma-memlock-raised", Info, false,
        "the soft RLIMIT_MEMLOCK is raised to the hard limit before exec";
    /// `CAP_IPC_LOCK` lifts a low memlock limit.
    RdmaMemlockIpcLock = "rdma-memlock-ipc-lock", Info, false,
        "`CAP_IPC_LOCK` lifts a low memlock limit";
    /// RDMA is usable.
    RdmaUsable = "rdma-usable", Info, false,
        "RDMA is usable: NCCL's IB transport is left on";
    /// An inherited `NCCL_IB_HCA` is kept.
    RdmaHcaInherited = "rdma-hca-inherited", Info, false,
        "an inherited `NCCL_IB_HCA` is kept";
    /// More usable HCAs than an exact list can name.
    RdmaHcaTooMany = "rdma-hca-too-many", Info, false,
        "more usable HCAs than `NCCL_IB_HCA` can list: left unset";
    /// An inherited `NCCL_IB_DISABLE` is kept.
    RdmaIbDisabledInherited = "rdma-ib-disabled-inherited", Info, false,
        "an inherited `NCCL_IB_DISABLE` is kept";
    /// `NCCL_NET=IB` forces NCCL's IB network where IB cannot work: no socket fallback, init fails.
    RdmaNetIbForced = "rdma-net-ib-forced", Warn, true,
        "`NCCL_NET=IB` forces NCCL's IB network, which cannot work here: NCCL finds no network and init fails";
    /// A vendor net plugin owns the transport: RDMA is left alone.
    RdmaVendorPlugin = "rdma-vendor-plugin", Info, false,
        "a vendor network profile's plugin owns the transport: RDMA is left alone";
    /// The RDMA probe reported an error.
    RdmaProbeError = "rdma-probe-error", Info, false,
        "the RDMA probe reported an error (sysfs unreadable): decided from what was read";
    /// `/dev/shm` has less free space than NCCL needs.
    ShmTooSmall = "shm-too-small", Warn, false,
        "`NCCL_SHM_DISABLE=1` set: `/dev/shm` has less free space than NCCL needs for the local ranks (leftover `nccl-*` segments are named); give the container `--shm-size=1g` or `--ipc=host`";
    /// `/dev/shm` is missing.
    ShmMissing = "shm-missing", Warn, false,
        "`NCCL_SHM_DISABLE=1` set: `/dev/shm` is missing (or its free space unknown)";
    /// `/dev/shm` is read-only.
    ShmReadOnly = "shm-read-only", Warn, false,
        "`NCCL_SHM_DISABLE=1` set: `/dev/shm` is read-only";
    /// `/dev/shm` is not writable for the job's user.
    ShmNotWritable = "shm-not-writable", Warn, false,
        "`NCCL_SHM_DISABLE=1` set: `/dev/shm` is not writable for the job's user";
    /// SHM and P2P both disabled.
    ShmP2pBothDisabled = "shm-p2p-both-disabled", Warn, false,
        "SHM and P2P both disabled: intra-node traffic crosses the network transport";
    /// One GPU needs no SHM.
    ShmSingleGpu = "shm-single-gpu", Info, false,
        "one GPU: NCCL needs no SHM";
    /// No GPU needs no SHM.
    ShmNoGpu = "shm-no-gpu", Info, false,
        "no GPU: NCCL needs no SHM";
    /// `NCCLENV_DEBUG=1` kept a `NCCL_DEBUG`/`NCCL_DEBUG_SUBSYS` that hides the bootstrap line.
    DebugHidesBootstrap = "debug-hides-bootstrap", Warn, false,
        "`NCCLENV_DEBUG=1` kept an inherited `NCCL_DEBUG`/`NCCL_DEBUG_SUBSYS` that hides NCCL's bootstrap line";
    /// `NCCLENV_DEBUG_DIR` cannot be created or written.
    DebugDirUnwritable = "debug-dir-unwritable", Warn, false,
        "`NCCLENV_DEBUG_DIR` cannot be created or written: `NCCL_DEBUG_FILE` not set, NCCL logs to stdout";
    /// The fleet preflight refuses: a node cannot be reached.
    PreflightUnreachable = "preflight-unreachable", Warn, false,
        "the fleet preflight refuses (exit 78 on every node, `docs/preflight.md`): a node cannot be reached where NCCL will listen";
    /// The fleet preflight refuses: an address is not unique.
    PreflightDuplicateAddress = "preflight-duplicate-address", Warn, false,
        "the fleet preflight refuses: two nodes advertise the same address";
    /// The fleet preflight refuses: NCCL versions differ.
    PreflightNcclVersionDiffers = "preflight-nccl-version-differs", Warn, false,
        "the fleet preflight refuses: the nodes load different NCCL versions";
    /// The fleet preflight refuses: address families differ.
    PreflightFamilyDiffers = "preflight-family-differs", Warn, false,
        "the fleet preflight refuses: the nodes bootstrap on different address families";
    /// The fleet preflight refuses: a node refused on its own.
    PreflightNodeRefused = "preflight-node-refused", Warn, false,
        "the fleet preflight refuses: a node refused on its own";
    /// IB disabled on every node because some had it off.
    PreflightIbDisabled = "preflight-ib-disabled", Warn, true,
        "IB disabled on every node because some had it off";
    /// Fewer nodes met than the job has.
    PreflightAbsent = "preflight-absent", Warn, true,
        "fewer nodes met than the job has (the command runs)";
    /// Nodes of one master endpoint say different node counts.
    PreflightNnodesDiffers = "preflight-nnodes-differs", Warn, true,
        "nodes of one master endpoint say different node counts (`--nnodes`): each named with its count; they cannot meet";
    /// Two nodes say one node rank, or a rank is missing or out of range.
    PreflightNodeRanks = "preflight-node-ranks", Warn, true,
        "two nodes say one node rank, or a rank is missing or out of range: the ranks and the nodes named";
    /// A master on the wildcard address met nobody, and the master endpoint never led to it.
    PreflightMasterUnreachable = "preflight-master-unreachable", Warn, true,
        "this node listens as the master (node rank 0) but the master endpoint does not lead to it, and nobody came";
    /// This node got no verdict from the master.
    PreflightNoMaster = "preflight-no-master", Warn, true,
        "this node got no verdict from the master (the command runs)";
    /// The preflight could not listen.
    PreflightListenFailed = "preflight-listen-failed", Warn, true,
        "the preflight could not listen on its port (the command runs)";
    /// A node behind NAT that its neighbour reached.
    PreflightNat = "preflight-nat", Warn, false,
        "a node behind NAT its neighbour reached";
    /// MTUs differ across the nodes.
    PreflightMtuDiffers = "preflight-mtu-differs", Warn, false,
        "the nodes' interfaces have different MTUs";
    /// `NCCL_*` values differ across the nodes.
    PreflightNcclEnvDiffers = "preflight-nccl-env-differs", Warn, false,
        "the nodes' `NCCL_*` values differ";
    /// ncclenv versions differ across the nodes.
    PreflightNcclenvVersionDiffers = "preflight-ncclenv-version-differs", Warn, false,
        "the nodes run different ncclenv versions";
    /// The networks every node shares were measured (each network's figure), or why not.
    PreflightNetwork = "preflight-network", Info, false,
        "the preflight measured the networks every node shares (each one's slowest pair): the fleet moves to one at least twice as fast as the current choice, or keeps an inherited `NCCL_SOCKET_IFNAME` and names the faster network, or says why it did not measure";
    /// A node far slower than the others on the network the fleet uses.
    PreflightSlowLink = "preflight-slow-link", Warn, true,
        "a node measured under a quarter of the fleet's median pair on the network the fleet uses, or its link speed as sysfs says it (negotiated, not measured) is below the others' there: node, interface, the measured figure (or `not measured`) and the sysfs link speeds named";
    /// The fleet agrees.
    PreflightPassed = "preflight-passed", Info, false,
        "every node met and the fleet agrees";
    /// Not a multi-node job with a known master and port.
    PreflightSkipped = "preflight-skipped", Info, false,
        "not a multi-node job with a known master and port: no preflight";
    /// No master is known and ncclenv's choice is not the interface NCCL alone would bind.
    NoMasterNcclDiffers = "no-master-nccl-differs", Info, false,
        "no master named (or it did not resolve): ncclenv's choice differs from the interface NCCL alone would use (both named)";
    /// Without the preflight: another usable interface is clearly faster by its nominal link speed.
    FasterInterface = "faster-interface", Info, false,
        "another usable interface of the chosen family is at least twice as fast by its nominal link speed (both named); the choice stays the route to the master";
    /// This node met the master, but the verdict did not arrive (a lossy or broken link).
    PreflightVerdictLost = "preflight-verdict-lost", Warn, false,
        "this node met the master but its verdict did not arrive (the command runs, also under strict)";
}

impl Finding {
    /// The finding of a code, when this ncclenv knows it (a fleet verdict may carry codes of another version).
    pub fn from_code(code: &str) -> Option<Finding> {
        Finding::ALL.iter().copied().find(|f| f.code() == code)
    }

    /// True for the codes that only ever appear on a log line, never in a plan: `exec-e2big`, `panic`.
    pub const fn is_log_line(self) -> bool {
        matches!(self, Finding::ExecE2big | Finding::Panic)
    }

    /// True for the codes that only name a refusal (`Verdict::Refuse`'s code), never a finding of a plan:
    /// `no-interface-multi-node`, `check-failed`.
    pub const fn is_refusal(self) -> bool {
        matches!(self, Finding::NoInterfaceMultiNode | Finding::CheckFailed)
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_well_formed() {
        let mut seen = std::collections::BTreeSet::new();
        for f in Finding::ALL {
            assert!(seen.insert(f.code()), "duplicate {f}");
            assert!(
                f.code()
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{f}"
            );
            assert_eq!(Finding::from_code(f.code()), Some(*f));
            assert!(
                !f.summary().contains('|') && !f.summary().contains('\n'),
                "{f}"
            );
            // A strict finding is a warning.
            assert!(!f.strict_refuses() || f.severity() == Severity::Warn, "{f}");
        }
        assert_eq!(Finding::from_code("no-such-code"), None);
    }

    const BEGIN: &str = "<!-- findings:begin (generated from src/findings.rs) -->\n";
    const END: &str = "<!-- findings:end -->";

    /// The table of `docs/findings.md`, one row per code.
    fn table() -> String {
        let mut t = String::from("| code | severity | strict | meaning |\n|---|---|---|---|\n");
        for f in Finding::ALL {
            let sev = match (f.is_log_line(), f.is_refusal(), f.severity()) {
                (true, _, _) => "log",
                (_, true, _) => "refusal",
                (_, _, Severity::Info) => "info",
                (_, _, Severity::Warn) => "warn",
            };
            t.push_str(&format!(
                "| `{}` | {sev} | {} | {} |\n",
                f.code(),
                if f.strict_refuses() { "yes" } else { "" },
                f.summary()
            ));
        }
        t
    }

    /// `docs/findings.md`'s table is [`Finding::ALL`]; with `NCCLENV_BLESS=1` this test rewrites it instead of
    /// failing.
    #[test]
    fn docs_findings_table_is_the_enum() {
        crate::doc_table::check_or_bless(
            "docs/findings.md",
            BEGIN,
            END,
            &table(),
            "docs/findings.md's table differs from src/findings.rs; run NCCLENV_BLESS=1 cargo test --lib findings",
        );
    }

    /// `doctor --json`'s schema lists exactly the codes a plan can carry (every finding but the log lines).
    #[test]
    fn doctor_schema_names_every_finding_code() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../docs/doctor.schema.json")).expect("schema");
        let codes = &schema["properties"]["decision"]["properties"]["warnings"]["items"]
            ["properties"]["code"]["enum"];
        let mut got: Vec<&str> = codes
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        let mut want: Vec<&str> = Finding::ALL
            .iter()
            .filter(|f| !f.is_log_line() && !f.is_refusal())
            .map(|f| f.code())
            .collect();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(
            got, want,
            "docs/doctor.schema.json: decision.warnings[].code enum"
        );
    }
}
