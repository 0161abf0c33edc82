//! The knowledge base of NCCL's errors: for each message NCCL (or Gloo beside it) prints, the cause, the remedy,
//! what ncclenv does about it, the result code with the versions that return it, and where the message comes
//! from in NCCL's source. One table, used by `check` (to explain a failed `ncclGetUniqueId`), by `explain` (to
//! explain every WARN line of a log) and by the documentation: `docs/nccl-errors.md` (its summary table and its
//! entries) is rendered from it ([`summary_rows`], [`docs_page`]) and a test keeps them equal.
//!
//! Message formats were read in NVIDIA/nccl at tags v2.21.5-1 and v2.27.7-1 (and v2.30.7-1 where said); the
//! file named in each entry's `source` is relative to the repository root. Versions are encoded as
//! `ncclGetVersion` does (X·10000 + Y·100 + Z).

/// A version range `[since, until)`; `0` and `u32::MAX` leave a side open.
pub type Versions = (u32, u32);

/// All versions.
pub const ALL: Versions = (0, u32::MAX);

/// One result code an error returns, and in which versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Code {
    /// `ncclResult_t` value.
    pub code: i32,
    /// Versions that return it.
    pub versions: Versions,
}

/// At what level NCCL prints a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// A `NCCL WARN` line: the failure itself (also `ncclGetLastError`'s text).
    Warn,
    /// A `NCCL INFO` line that explains a silent fallback.
    Info,
}

/// One known message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownError {
    /// Stable identifier, e.g. `no-socket-interface` (in `explain --json`).
    pub id: &'static str,
    /// The message as NCCL prints it (format arguments elided with `…`), for the docs.
    pub message: &'static str,
    /// How it is recognised: any group matches when all its lower-case substrings occur in the line.
    pub patterns: &'static [&'static [&'static str]],
    /// WARN or INFO.
    pub level: Level,
    /// Result codes NCCL returns with it (empty: none, it is not an error return).
    pub codes: &'static [Code],
    /// Where the message is printed (NCCL source file and function, or the library).
    pub source: &'static str,
    /// The cause, short (one table cell).
    pub short: &'static str,
    /// The cause, in full (check and explain reports).
    pub cause: &'static str,
    /// What the user can do.
    pub remedy: &'static str,
    /// What ncclenv does about it.
    pub ncclenv: &'static str,
    /// Printed by another library (Gloo), never with NCCL's prefix: matched in any line of a log.
    pub foreign: bool,
    /// Extra sentences appended to the cause for versions at or above the given one.
    pub version_notes: &'static [(u32, &'static str)],
}

/// `ncclResult_t` (src/nccl.h.in): code, name, first version with it, `ncclGetErrorString` text (2.27.7,
/// src/init.cc), and what it usually means here.
pub const RESULT_CODES: &[(i32, &str, u32, &str, &str)] = &[
    (0, "ncclSuccess", 0, "no error", "no error"),
    (
        1,
        "ncclUnhandledCudaError",
        0,
        "unhandled cuda error",
        "a CUDA call inside NCCL failed (no GPU, no driver, or a driver older than the CUDA NCCL was built for)",
    ),
    (
        2,
        "ncclSystemError",
        0,
        "unhandled system error",
        "a system call inside NCCL failed (socket, bind, shared memory, or RDMA)",
    ),
    (
        3,
        "ncclInternalError",
        0,
        "internal error - please report this issue to the NCCL developers",
        "NCCL reported an internal error, usually environmental",
    ),
    (
        4,
        "ncclInvalidArgument",
        0,
        "invalid argument",
        "NCCL rejected an argument or a setting",
    ),
    (
        5,
        "ncclInvalidUsage",
        0,
        "invalid usage",
        "NCCL rejected a setting or a call",
    ),
    (
        6,
        "ncclRemoteError",
        21300,
        "remote process exited or there was a network error",
        "a remote peer failed or is unreachable",
    ),
    (
        7,
        "ncclInProgress",
        21400,
        "NCCL operation in progress",
        "a non-blocking operation has not finished",
    ),
    (
        8,
        "ncclTimeout",
        23000,
        "",
        "an NCCL operation timed out",
    ),
];

/// Remedies by result code, when no message is known.
const CODE_REMEDIES: &[(i32, &str)] = &[
    (
        1,
        "Check nvidia-smi inside the container and that the NVIDIA container toolkit injected libcuda.so.1",
    ),
    (
        2,
        "Read NCCL's last error above; rerun with NCCLENV_DEBUG=1 for the failing call",
    ),
    (3, "Rerun with NCCLENV_DEBUG=1 and read the WARN lines"),
    (
        4,
        "Check the NCCL_* variables in the environment (and NCCL config files)",
    ),
    (
        5,
        "Check the NCCL_* variables in the environment (and NCCL config files)",
    ),
    (
        6,
        "Check the firewall and the chosen interface between the ranks",
    ),
    (8, "Check connectivity between the ranks"),
];

const UP_TO_2_23: Versions = (0, 22400);
const FROM_2_24: Versions = (22400, u32::MAX);

/// The knowledge base, in the order the README shows it.
pub const KNOWN: &[KnownError] = &[
    KnownError {
        id: "no-socket-interface",
        message: "Bootstrap : no socket interface found",
        patterns: &[&["no socket interface found"]],
        level: Level::Warn,
        codes: &[
            Code { code: 3, versions: UP_TO_2_23 },
            Code { code: 5, versions: FROM_2_24 },
        ],
        source: "src/bootstrap.cc, bootstrapNetInit",
        short: "`NCCL_SOCKET_IFNAME` matches nothing usable, or the automatic chain found nothing",
        cause: "NCCL found no socket interface: NCCL_SOCKET_IFNAME (or NCCL_SOCKET_FAMILY) matches no interface that \
                has an address, or NCCL's automatic search found none",
        remedy: "Set NCCL_SOCKET_IFNAME to an interface that exists in this container (list syntax: prefixes, `^` \
                 excludes, `=` exact; no spaces), or unset it and let ncclenv choose; check NCCL_CONF_FILE, \
                 ~/.nccl.conf and /etc/nccl.conf, which set it silently",
        ncclenv: "repairs the value, or refuses a multi-node job with only `lo`",
        foreign: false,
        version_notes: &[(22800, " (NCCL 2.28+ also skips interfaces that are not RUNNING)")],
    },
    KnownError {
        id: "no-listening-interface",
        message: "NET/Socket : No usable listening interface found",
        patterns: &[
            &["no usable listening interface"],
            &["no interface found in the same subnet"],
        ],
        level: Level::Warn,
        codes: &[Code { code: 2, versions: ALL }],
        source: "src/bootstrap.cc, bootstrapNetInit (2.21.5 also src/misc/socket.cc, ncclFindInterfaceMatchSubnet)",
        short: "`NCCL_COMM_ID` set and no local interface in its subnet",
        cause: "NCCL_COMM_ID is set but no local interface is in the subnet of its address",
        remedy: "Fix NCCL_COMM_ID (ip:port of rank 0, reachable on a local subnet) or unset it",
        ncclenv: "warns (`comm-id-no-subnet`)",
        foreign: false,
        version_notes: &[],
    },
    KnownError {
        id: "comm-id-invalid",
        message: "Invalid NCCL_COMM_ID, please use format: …",
        patterns: &[&["invalid nccl_comm_id"]],
        level: Level::Warn,
        codes: &[Code { code: 4, versions: ALL }],
        source: "src/bootstrap.cc, bootstrapNetInit and bootstrapGetUniqueId",
        short: "`NCCL_COMM_ID` is not `host:port`",
        cause: "NCCL_COMM_ID is not an address and port NCCL can parse",
        remedy: "Write NCCL_COMM_ID as ip:port, [ipv6]:port or host:port, or unset it",
        ncclenv: "hands off (`comm-id`): reports, changes nothing",
        foreign: false,
        version_notes: &[],
    },
    KnownError {
        id: "net-socket-no-interface",
        message: "NET/Socket : no interface found",
        patterns: &[
            &["net/socket : no interface found"],
            &["failed to initialize any net plugin"],
        ],
        level: Level::Warn,
        codes: &[Code { code: 3, versions: ALL }],
        source: "src/transport/net_socket.cc, ncclNetSocketInit; 2.27.7 then src/plugin/net.cc",
        short: "no socket interface at communicator init (NET/Socket)",
        cause: "NET/Socket found no interface when the communicator was created: NCCL_SOCKET_IFNAME matches \
                nothing in this process's environment",
        remedy: "Set NCCL_SOCKET_IFNAME to an interface of this container in every rank's environment, or unset it",
        ncclenv: "repairs the value, as for the bootstrap; with NCCL_COMM_ID set (hands off) it warns \
                  (`comm-id-ifname-unmatched`)",
        foreign: false,
        version_notes: &[],
    },
    KnownError {
        id: "ib-no-device",
        message: "NET/IB : No device found.",
        patterns: &[&["net/ib : no device found"]],
        level: Level::Info,
        codes: &[],
        source: "src/transport/net_ib.cc, ncclIbInit",
        short: "no ACTIVE port passed the filters: Socket is used",
        cause: "NET/IB found no usable RDMA port (none ACTIVE, none matching NCCL_IB_HCA, or no /dev/infiniband \
                nodes in the container): NCCL silently uses sockets",
        remedy: "If the node has InfiniBand or RoCE, run the container with --device=/dev/infiniband \
                 --cap-add=IPC_LOCK --ulimit memlock=-1 and check NCCL_IB_HCA; otherwise nothing to do",
        ncclenv: "sets `NCCL_IB_DISABLE=1` with the reason; `rdma-no-verbs-devices` when the nodes are missing",
        foreign: false,
        version_notes: &[],
    },
    KnownError {
        id: "ib-reg-mr",
        message: "Call to ibv_reg_mr failed with error …",
        patterns: &[&["ibv_reg_mr"]],
        level: Level::Warn,
        codes: &[Code { code: 2, versions: ALL }],
        source: "src/misc/ibvwrap.cc, IBV_PTR_CHECK_ERRNO",
        short: "RLIMIT_MEMLOCK too low",
        cause: "RDMA memory registration failed, usually a low RLIMIT_MEMLOCK",
        remedy: "Run with --ulimit memlock=-1 (Docker) or raise the memlock limit",
        ncclenv: "raises the soft limit; below 1 GiB disables IB with a warning",
        foreign: false,
        version_notes: &[],
    },
    KnownError {
        id: "ib-open-device",
        message: "NET/IB : Unable to open device …",
        patterns: &[&["unable to open device"], &["ibv_open_device"]],
        level: Level::Warn,
        codes: &[],
        source: "src/transport/net_ib.cc, ncclIbInit; src/misc/ibvwrap.cc",
        short: "device node present but not openable",
        cause: "an RDMA device is listed but its verbs device node cannot be opened (permissions, or not mounted \
                into the container): the device is skipped",
        remedy: "Mount the devices with --device=/dev/infiniband (Kubernetes: the RDMA device plugin's resource)",
        ncclenv: "opens each HCA's own node: `NCCL_IB_HCA` without the HCA and `rdma-hca-unusable`, or \
                  `rdma-no-verbs-devices` when none opens",
        foreign: false,
        version_notes: &[],
    },
    KnownError {
        id: "ib-modify-qp",
        message: "Call to ibv_modify_qp failed with …",
        patterns: &[&["ibv_modify_qp"]],
        level: Level::Warn,
        codes: &[Code { code: 2, versions: ALL }],
        source: "src/misc/ibvwrap.cc, wrap_ibv_modify_qp",
        short: "wrong `NCCL_IB_GID_INDEX` (RoCE)",
        cause: "RDMA queue pair setup failed: usually a wrong NCCL_IB_GID_INDEX",
        remedy: "Unset NCCL_IB_GID_INDEX (automatic since NCCL 2.21) or pick the RoCE v2 GID of the right netdev",
        ncclenv: "`rdma-gid-index-unusable` names the index that works (or says to unset it); `ncclenv doctor` \
                  lists each port's GIDs and their netdevs",
        foreign: false,
        version_notes: &[],
    },
    KnownError {
        id: "shm-create",
        message: "Error while creating shared memory segment … (size 9637888)",
        patterns: &[
            &["error while creating shared memory segment"],
            &["failed to create shared memory file"],
        ],
        level: Level::Warn,
        codes: &[Code { code: 2, versions: ALL }],
        source: "src/misc/shmutils.cc, ncclShmOpen",
        short: "`/dev/shm` full (Docker's 64 MiB) or not writable",
        cause: "/dev/shm is too small for NCCL's SHM transport (about 9.2 MiB per channel and peer with the default \
                NCCL_BUFFSIZE), or the job's user cannot create files in it",
        remedy: "Run the container with --shm-size=1g (Kubernetes: an emptyDir with medium Memory on /dev/shm), or \
                 set NCCL_SHM_DISABLE=1",
        ncclenv: "sets `NCCL_SHM_DISABLE=1`, names `--shm-size=1g`/`--ipc=host` and leftover `nccl-*` segments",
        foreign: false,
        version_notes: &[],
    },
    KnownError {
        id: "connect-failed",
        message: "connect to … returned …, exceeded error retry count after … attempts",
        patterns: &[
            &["exceeded error retry count"],
            &["exceeded retries"],
            &["exceeded timeouts"],
            &["connect to", "failed"],
            &["connect to", "returned"],
        ],
        level: Level::Warn,
        codes: &[Code { code: 6, versions: ALL }],
        source: "src/misc/socket.cc, socketConnectCheck (2.27.7); socketStartConnect, socketPollConnect (2.21.5)",
        short: "peer unreachable or firewalled, often the wrong interface",
        cause: "a peer's bootstrap or data socket is unreachable",
        remedy: "Check the firewall between the nodes on the chosen interface and that NCCL_SOCKET_IFNAME names an \
                 interface that routes to the peers",
        ncclenv: "chooses the interface that routes to the peer; `ncclenv check allreduce` proves it",
        foreign: false,
        version_notes: &[],
    },
    KnownError {
        id: "peer-closed",
        message: "socketProgress: Connection closed by remote peer …",
        patterns: &[&["connection closed by remote peer"]],
        level: Level::Warn,
        codes: &[Code { code: 6, versions: ALL }],
        source: "src/misc/socket.cc, socketProgress",
        short: "another rank exited first",
        cause: "another rank closed its socket: it exited or crashed, usually after an error of its own",
        remedy: "Read that rank's log first (ncclenv explain lists every process's WARN lines)",
        ncclenv: "`ncclenv explain` shows every rank's errors side by side",
        foreign: false,
        version_notes: &[],
    },
    KnownError {
        id: "bootstrap-mismatch",
        message: "Bootstrap Root : mismatch in rank count from procs … / Message truncated : received … bytes",
        patterns: &[
            &["bootstrap root : mismatch"],
            &["has already checked in"],
            &["message truncated : received"],
        ],
        level: Level::Warn,
        codes: &[],
        source: "src/bootstrap.cc, bootstrapRoot and bootstrapNetRecv",
        short: "ranks disagree on the job (rank count, rank numbers, NCCL version)",
        cause: "the bootstrap received messages that do not fit one job: ranks with different world sizes or the \
                same rank number, different NCCL versions, or a stranger on the bootstrap port",
        remedy: "Give every rank the same world size and a distinct rank, the same NCCL, and a bootstrap port no \
                 other job uses",
        ncclenv: "`ncclenv explain` compares the NCCL versions of all processes",
        foreign: false,
        version_notes: &[],
    },
    KnownError {
        id: "version-mismatch",
        message: "Mismatched NCCL version detected : rank … version … rank … version …",
        patterns: &[&["mismatched nccl version"], &["nccl version mismatch"]],
        level: Level::Warn,
        codes: &[Code { code: 5, versions: (22300, u32::MAX) }],
        source: "src/init.cc, initTransportsRank (2.23+); src/ras/ras.cc (2.24+)",
        short: "ranks load different NCCL versions",
        cause: "the ranks run different NCCL versions",
        remedy: "Use one NCCL in every image and node (`ncclenv doctor` lists the libnccl files a command could load)",
        ncclenv: "`ncclenv doctor` lists NCCL installations; `ncclenv explain` compares versions",
        foreign: false,
        version_notes: &[],
    },
    KnownError {
        id: "duplicate-gpu",
        message: "Duplicate GPU detected (≤ 2.29) / Multiple Ranks are using the same GPU (2.30)",
        patterns: &[&["duplicate gpu"], &["using the same gpu"]],
        level: Level::Warn,
        codes: &[Code { code: 5, versions: ALL }],
        source: "src/init.cc, initTransportsRank",
        short: "two ranks on one GPU",
        cause: "two ranks use the same GPU",
        remedy: "Give each rank its own GPU (CUDA_VISIBLE_DEVICES / LOCAL_RANK)",
        ncclenv: "the allreduce check runs one rank per GPU",
        foreign: false,
        version_notes: &[],
    },
    KnownError {
        id: "cuda-failure",
        message: "Cuda failure '…'",
        patterns: &[&["cuda failure"]],
        level: Level::Warn,
        codes: &[Code { code: 1, versions: ALL }],
        source: "src/include/checks.h, CUDACHECK; src/include/cudawrap.h, CUCHECK",
        short: "no GPU, no driver, or a driver older than NCCL's CUDA",
        cause: "a CUDA call inside NCCL failed (no GPU, no driver, or a driver older than the CUDA NCCL was built for)",
        remedy: "Check nvidia-smi inside the container and that the NVIDIA container toolkit injected libcuda.so.1",
        ncclenv: "the check reports the CUDA error; nothing to set",
        foreign: false,
        version_notes: &[],
    },
    KnownError {
        id: "gloo-no-address",
        message: "Unable to find address for: ^lo (Gloo)",
        patterns: &[&["unable to find address for"]],
        level: Level::Warn,
        codes: &[],
        source: "Gloo: gloo/transport/tcp/device.cc, lookupAddrForIface (PyTorch and Paddle bundle it)",
        short: "Gloo given NCCL syntax or a missing name",
        cause: "GLOO_SOCKET_IFNAME names no interface with an address: Gloo takes exact interface names, not NCCL's \
                list syntax (^lo, prefixes)",
        remedy: "Set GLOO_SOCKET_IFNAME to one interface name that exists here, or unset it",
        ncclenv: "repairs `GLOO_SOCKET_IFNAME`",
        foreign: true,
        version_notes: &[],
    },
];

/// The entry whose patterns match `text` (case-insensitive), if any.
pub fn lookup(text: &str) -> Option<&'static KnownError> {
    let lower = text.to_ascii_lowercase();
    KNOWN.iter().find(|k| {
        k.patterns
            .iter()
            .any(|group| group.iter().all(|p| lower.contains(p)))
    })
}

/// The entry with identifier `id`.
pub fn by_id(id: &str) -> Option<&'static KnownError> {
    KNOWN.iter().find(|k| k.id == id)
}

/// Name of an NCCL result code (`ncclResult_t`, src/nccl.h.in), `"unknown"` for others.
pub fn result_name(code: i32) -> &'static str {
    RESULT_CODES
        .iter()
        .find(|r| r.0 == code)
        .map(|r| r.1)
        .unwrap_or("unknown")
}

/// The code entry `k` lists for `version`, if one does.
pub fn expected_code(k: &KnownError, version: u32) -> Option<i32> {
    k.codes
        .iter()
        .find(|c| version >= c.versions.0 && version < c.versions.1)
        .map(|c| c.code)
}

/// `22105` → `2.21.5` (`ncclGetVersion` encoding: X·10000+Y·100+Z since 2.9, X·1000+Y·100+Z before).
pub fn version_string(v: i32) -> String {
    if v >= 10000 {
        format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100)
    } else {
        format!("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100)
    }
}

/// The cause of `k` for NCCL `version` (0: unknown), with the version's notes.
pub fn cause_for(k: &KnownError, version: u32) -> String {
    let mut s = k.cause.to_string();
    for (since, note) in k.version_notes {
        if version >= *since {
            s.push_str(note);
        }
    }
    s
}

/// ncclenv's explanation and remedy for an NCCL failure, from the result code, the library version (0 when
/// unknown) and the `ncclGetLastError` text: the known message's cause (noting a code other than the one this
/// version returns for it), else the meaning of the code. Returns `(explanation, remedy)`.
pub fn explain_failure(code: i32, version: u32, last_error: &str) -> (String, String) {
    if let Some(k) = lookup(last_error) {
        let mut cause = cause_for(k, version);
        if version > 0 {
            if let Some(want) = expected_code(k, version) {
                if want != code {
                    cause.push_str(&format!(
                        " (NCCL {} usually returns {want} here)",
                        version_string(version as i32)
                    ));
                }
            }
        }
        return (cause, k.remedy.to_string());
    }
    let meaning = RESULT_CODES
        .iter()
        .find(|r| r.0 == code)
        .map(|r| r.4)
        .unwrap_or("NCCL failed");
    let remedy = CODE_REMEDIES
        .iter()
        .find(|r| r.0 == code)
        .map(|r| r.1)
        .unwrap_or("Rerun with NCCLENV_DEBUG=1 and read the WARN lines");
    (meaning.to_string(), remedy.to_string())
}

/// `22400` → `2.24` (a release series).
fn series(v: u32) -> String {
    format!("{}.{}", v / 10000, (v % 10000) / 100)
}

/// The code column of a table: `3 ≤ 2.23, 5 ≥ 2.24`, `2`, or empty.
fn codes_text(k: &KnownError) -> String {
    k.codes
        .iter()
        .map(|c| match c.versions {
            (0, u32::MAX) => c.code.to_string(),
            (0, until) => format!("{} ≤ {}", c.code, series(until - 100)),
            (since, u32::MAX) => format!("{} ≥ {}", c.code, series(since)),
            (since, until) => format!("{} in {}–{}", c.code, series(since), series(until - 100)),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The rows of the summary table at the top of `docs/nccl-errors.md` (header included), one per entry:
/// `| message (codes) | short cause | what ncclenv does |`.
pub fn summary_rows() -> String {
    let mut s = String::from("| NCCL says | cause | what ncclenv does |\n|---|---|---|\n");
    for k in KNOWN {
        let codes = codes_text(k);
        let codes = if codes.is_empty() {
            String::new()
        } else {
            format!(" ({codes})")
        };
        s.push_str(&format!(
            "| `{}`{codes} | {} | {} |\n",
            k.message, k.short, k.ncclenv
        ));
    }
    s
}

/// The hand-written part of `docs/nccl-errors.md`: what the same messages usually mean in a multi-node job,
/// where the cause lives between nodes (docs/policy.md, docs/preflight.md).
const BETWEEN_NODES: &str = r#"## Between nodes

In a multi-node job the same messages often have these causes (written by hand, not generated):

| NCCL (or the launcher) says | cause | what ncclenv does |
|---|---|---|
| `connect to 169.254.60.61<36011> failed` / `no socket interface found` on a direct cable | the cable has only link-local addresses; the job went to the default-route NIC or was refused | takes the cable when the master is on it |
| `connect to 127.0.1.1<…>` on the other nodes (Paddle) | `POD_IP` (or the host name) is a loopback address | repairs `POD_IP` (`pod-ip-repaired`) |
| `connect to 172.17.0.2<…> … exceeded error retry count` (6) from the other nodes | this node sits on a NAT'd container bridge | warns `container-bridge-nat`: `--network=host` |
| `Name or service not known` for the master at the rendezvous | the master's Service does not exist yet | retries until `NCCLENV_RESOLVE_TIMEOUT_MS`, warns, still sets the interface |
"#;

/// The page `docs/nccl-errors.md`: every entry in full, then the result codes.
pub fn docs_page() -> String {
    let mut out = String::from(
        "# What NCCL's errors mean\n\n\
         Generated from `src/nccl_errors.rs` (the one table `ncclenv check`, `ncclenv explain` and these docs use);\n\
         `cargo test --lib nccl_errors` fails when this page differs from it, and\n\
         `NCCLENV_BLESS=1 cargo test --lib nccl_errors` rewrites it. Messages were read in NVIDIA/nccl at the tags\n\
         v2.21.5-1 and v2.27.7-1; paths are relative to that repository.\n\n",
    );
    out.push_str("## In short\n\n");
    out.push_str(&summary_rows());
    out.push('\n');
    out.push_str(BETWEEN_NODES);
    out.push('\n');
    for k in KNOWN {
        out.push_str(&format!("## `{}`\n\n", k.message));
        out.push_str(&format!(
            "- id: `{}`; printed as NCCL {}",
            k.id,
            match k.level {
                Level::Warn => "WARN",
                Level::Info => "INFO (not an error: a silent fallback)",
            }
        ));
        if k.foreign {
            out.push_str(" (by Gloo, without NCCL's prefix)");
        }
        out.push('\n');
        out.push_str(&format!("- source: {}\n", k.source));
        let codes = codes_text(k);
        if !codes.is_empty() {
            let names: Vec<String> = k
                .codes
                .iter()
                .map(|c| format!("{} = {}", c.code, result_name(c.code)))
                .collect();
            out.push_str(&format!("- result code: {codes} ({})\n", names.join(", ")));
        }
        out.push_str(&format!("- cause: {}", k.cause));
        for (_, note) in k.version_notes {
            out.push_str(note);
        }
        out.push('\n');
        out.push_str(&format!("- what to do: {}\n", k.remedy));
        out.push_str(&format!("- ncclenv: {}\n\n", k.ncclenv));
    }
    out.push_str("## Result codes (`ncclResult_t`, src/nccl.h.in)\n\n| code | name | since | `ncclGetErrorString` | usual meaning |\n|---|---|---|---|---|\n");
    for (code, name, since, text, meaning) in RESULT_CODES {
        let since = if *since == 0 {
            "2.x".to_string()
        } else {
            series(*since)
        };
        out.push_str(&format!(
            "| {code} | `{name}` | {since} | {text} | {meaning} |\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn every_entry_is_found_by_its_own_message_and_ids_are_unique() {
        let mut ids: Vec<&str> = KNOWN.iter().map(|k| k.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), KNOWN.len());
        for k in KNOWN {
            let first = k.message.split(" / ").next().unwrap_or(k.message);
            let text = first.replace('…', "x");
            assert_eq!(lookup(&text).map(|e| e.id), Some(k.id), "{}", k.message);
            assert!(k
                .patterns
                .iter()
                .all(|g| g.iter().all(|p| *p == p.to_ascii_lowercase())));
        }
        assert!(lookup("all is well").is_none());
    }

    #[test]
    fn failures_are_explained_with_the_versions_code() {
        let (e3, _) = explain_failure(3, 22105, "Bootstrap : no socket interface found");
        let (e5, _) = explain_failure(5, 22707, "Bootstrap : no socket interface found");
        assert!(e3.contains("no socket interface") && e5.contains("no socket interface"));
        assert!(!e3.contains("usually returns") && !e5.contains("usually returns"));
        let (odd, _) = explain_failure(3, 22707, "Bootstrap : no socket interface found");
        assert!(odd.contains("usually returns 5"), "{odd}");
        let (late, _) = explain_failure(5, 22803, "Bootstrap : no socket interface found");
        assert!(late.contains("RUNNING"), "{late}");
        let (c2, _) = explain_failure(2, 22707, "NET/Socket : No usable listening interface found");
        assert!(c2.contains("NCCL_COMM_ID"));
        let (generic, r) = explain_failure(6, 0, "");
        assert!(generic.contains("remote") && r.contains("firewall"));
        assert_eq!(result_name(5), "ncclInvalidUsage");
        assert_eq!(result_name(42), "unknown");
        assert_eq!(version_string(22105), "2.21.5");
        assert_eq!(version_string(2708), "2.7.8");
    }

    /// docs/nccl-errors.md is rendered from [`KNOWN`]; with `NCCLENV_BLESS=1` this test rewrites it instead of
    /// failing.
    #[test]
    fn docs_match_the_knowledge_base() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let bless = std::env::var("NCCLENV_BLESS").as_deref() == Ok("1");
        let docs_path = root.join("docs/nccl-errors.md");
        let docs = std::fs::read_to_string(&docs_path).unwrap_or_default();
        let want = docs_page();
        if docs != want {
            if bless {
                std::fs::write(&docs_path, &want).expect("write docs/nccl-errors.md");
            } else {
                panic!("docs/nccl-errors.md differs from src/nccl_errors.rs; run NCCLENV_BLESS=1 cargo test --lib nccl_errors");
            }
        }
    }
}
