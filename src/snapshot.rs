//! The probed world as plain, serialisable data.
//!
//! Probes (`crate::probe`) fill a [`Snapshot`]; the pure decision (`crate::decide`) reads it. A probe that
//! fails records its error here (as `Err(String)` or an `error` field) instead of aborting, so that the rule
//! "never lose the job" lives in one place: the decision turns a missing part into a warning.
//!
//! A snapshot serialises to JSON (`ncclenv doctor --json` embeds it), and a captured snapshot can be replayed
//! in a unit test.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Everything ncclenv knows about the machine, the job and the inherited environment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    /// The network as the kernel reports it over netlink, or the probe's error text.
    pub net: Result<Network, String>,
    /// The job's master (peer), where one was named; see [`Peer`].
    pub peer: Option<Peer>,
    /// The number of nodes the job spans, where the launcher's arguments or the environment say so.
    pub job: JobShape,
    /// Inherited values of the variables ncclenv reads or may set (only those: the rest of the environment
    /// is never recorded, it holds secrets). Keys are variable names; non-UTF-8 values are recorded lossily.
    pub env: BTreeMap<String, String>,
    /// NCCL configuration files that exist, in the order NCCL applies them.
    pub conf_files: Vec<ConfFile>,
    /// RDMA devices, verbs nodes and memlock (filled by `probe::rdma`; empty when not probed).
    pub rdma: Option<RdmaSnapshot>,
    /// `/dev/shm` capacity (filled by `probe::host`).
    pub shm: Option<ShmInfo>,
    /// Local GPUs (filled by `probe::host`).
    pub gpus: Option<GpuInfo>,
    /// libnccl files the command could load (filled by `probe::nccl`).
    pub nccl_installs: Vec<NcclInstall>,
    /// External NCCL net plugins (`libnccl-net*.so`) found on the loader path and in the usual HPC-X folders
    /// (filled by `probe::nccl::find_net_plugins` where RDMA devices exist, and always for `doctor`).
    #[serde(default)]
    pub net_plugins: Vec<NetPlugin>,
    /// Link speeds in Mb/s (sysfs `class/net/<name>/speed`) by interface name, for the links that report a
    /// positive speed (`probe::host::link_speeds`): every link's for `doctor`; on the start path only the
    /// RUNNING links with a usable address, and only when there are two or more and the job is not known to
    /// be single-node (what `decide::faster` reads).
    #[serde(default)]
    pub link_speeds: BTreeMap<String, u64>,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            net: Err("not probed".into()),
            peer: None,
            job: JobShape::default(),
            env: BTreeMap::new(),
            conf_files: Vec::new(),
            rdma: None,
            shm: None,
            gpus: None,
            nccl_installs: Vec::new(),
            net_plugins: Vec::new(),
            link_speeds: BTreeMap::new(),
        }
    }
}

/// Address family, as NCCL names it in `NCCL_SOCKET_FAMILY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Family {
    /// IPv4 (`AF_INET`).
    Inet,
    /// IPv6 (`AF_INET6`).
    Inet6,
}

impl Family {
    /// The family of an address.
    pub fn of(addr: &IpAddr) -> Family {
        match addr {
            IpAddr::V4(_) => Family::Inet,
            IpAddr::V6(_) => Family::Inet6,
        }
    }
    /// The spelling `NCCL_SOCKET_FAMILY` accepts (`AF_INET` / `AF_INET6`; src/misc/socket.cc, `envSocketFamily`).
    pub fn nccl_name(self) -> &'static str {
        match self {
            Family::Inet => "AF_INET",
            Family::Inet6 => "AF_INET6",
        }
    }
}

/// Links, addresses and routes of the current network namespace. (Not "net": in NCCL's words a net is a
/// network transport, `NCCL_NET`.)
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Network {
    /// Links in ascending index order. The full probe (`probe::net::probe_full`, `doctor`) lists every link
    /// (`RTM_GETLINK` dump); the start probe (`probe::net::probe_start`) lists the links that own an address
    /// (the only ones NCCL's `getifaddrs()` walk can pick) plus the output interfaces of the default and peer
    /// routes, and fills `kind`, `mtu`, `master`, `mac`, `link_type` and the exact `oper_state` only for
    /// the links the decision looks at closely (see there).
    pub links: Vec<Link>,
    /// Every address (`RTM_GETADDR` dump), in kernel order: IPv4 entries before IPv6, each by link index.
    /// This is the order `getifaddrs()` returns them in, which is the order NCCL walks.
    pub addrs: Vec<Addr>,
    /// Routes of the main table (254), IPv4 and IPv6 (`RTM_GETROUTE` dump, filtered in code).
    pub routes: Vec<Route>,
    /// The kernel's answer to `ip route get PEER` for each resolved peer address (empty without a peer).
    pub peer_routes: Vec<RouteLookup>,
    /// The kernel's answer to `ip route get` for one off-link destination per family (see
    /// `probe::net::offlink_dest`): the route it would take to a host no connected prefix covers, through
    /// every `ip rule` and table. The decision's default-route step follows it when it came from a table
    /// other than main (policy routing). IPv4 always; IPv6 when [`Network::ipv6_routes_probed`].
    #[serde(default)]
    pub default_lookups: Vec<RouteLookup>,
    /// True when [`Network::routes`] holds the IPv6 routes of table main; false when the IPv6 route dump
    /// was skipped (`probe::net::probe_start` skips it when the decision cannot reach the IPv6 default routes),
    /// so that "no IPv6 route" and "IPv6 routes not probed" can be told apart. The full probe (`doctor`)
    /// always sets it. Captured snapshots without the field read as false.
    #[serde(default)]
    pub ipv6_routes_probed: bool,
}

/// One network interface (link).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Interface index (`ifi_index`).
    pub index: u32,
    /// Interface name (`IFLA_IFNAME`), e.g. `eth0`. A name that is not UTF-8 is shown with each invalid byte
    /// as `\xNN` (`text::bytes_text`) and [`Link::name_escaped`] is set.
    pub name: String,
    /// True when the kernel's name is not UTF-8: [`Link::name`] is then a display form, not the name, and
    /// ncclenv never writes it into a variable (it fails open instead, `decide::interface::unwritable_choice`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub name_escaped: bool,
    /// `IFF_UP`: administratively up.
    pub up: bool,
    /// `IFF_RUNNING`: up and with carrier. NCCL 2.28+ skips interfaces without it.
    pub running: bool,
    /// `IFF_LOWER_UP`: the driver reports carrier.
    pub lower_up: bool,
    /// `IFF_LOOPBACK`.
    pub loopback: bool,
    /// Operational state (`IFLA_OPERSTATE`), lower case as `ip` prints it: `up`, `down`, `unknown`, `dormant`,
    /// `lowerlayerdown`, `notpresent`, `testing`.
    pub oper_state: String,
    /// MTU in bytes (`IFLA_MTU`).
    pub mtu: Option<u32>,
    /// Link kind from `IFLA_INFO_KIND` (`veth`, `bridge`, `macvlan`, `vxlan`, …); `None` for physical NICs,
    /// VFs and loopback.
    pub kind: Option<String>,
    /// Index of the master device (`IFLA_MASTER`), e.g. the bridge a port belongs to.
    pub master: Option<u32>,
    /// ARPHRD link-layer type (`ifi_type`): 1 Ethernet, 772 loopback, 32 InfiniBand (IPoIB), …
    pub link_type: u16,
    /// Link-layer address as `ip` prints it (`aa:bb:…`), when present.
    pub mac: Option<String>,
}

/// Link-name prefixes of container and virtualisation bridges: Docker (`docker0`, compose `br-<id>`),
/// libvirt (`virbr`), CNI and Kubernetes overlays. NCCL itself de-prioritises `docker` and `virbr`
/// (`ncclFindInterfaces`, src/misc/socket.cc; `docs/nccl-rules.md`).
const BRIDGE_PREFIXES: &[&str] = &["docker", "br-", "virbr", "cni", "flannel", "cali", "kube-"];

impl Link {
    /// True for a container or virtualisation bridge, by link kind or by name (`docker`, `br-`, `virbr`,
    /// `cni`, `flannel`, `cali`, `kube-`).
    pub fn is_bridge_like(&self) -> bool {
        self.kind.as_deref() == Some("bridge")
            || BRIDGE_PREFIXES.iter().any(|p| self.name.starts_with(p))
    }
    /// The link's half of the candidate rule: RUNNING (NCCL 2.28+ skips an interface without carrier), not
    /// loopback, not named in `exclude` (`NCCLENV_EXCLUDE`). A candidate interface is such a link with a
    /// usable address ([`Addr::usable`]).
    pub fn is_candidate(&self, exclude: &[String]) -> bool {
        self.running && !self.loopback && !exclude.iter().any(|e| e == &self.name)
    }
}

/// One interface address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Addr {
    /// Index of the link that holds the address.
    pub index: u32,
    /// The address (`IFA_ADDRESS`, or `IFA_LOCAL` for IPv4 point-to-point where they differ).
    pub addr: IpAddr,
    /// Prefix length in bits.
    pub prefix_len: u8,
    /// Scope: 0 universe (global), 200 site, 253 link, 254 host.
    pub scope: u8,
    /// `IFA_F_TENTATIVE`: IPv6 duplicate-address detection still running; a bind fails.
    pub tentative: bool,
    /// `IFA_F_DEPRECATED`: preferred lifetime expired.
    pub deprecated: bool,
    /// `IFA_F_DADFAILED`: duplicate-address detection failed.
    pub dad_failed: bool,
    /// The IPv4 address's label (`IFA_LABEL`) when it differs from the link's name (`ip addr add … label
    /// eno1:avahi`, `eth0:1` aliases, avahi-autoipd, keepalived). glibc's `getifaddrs` reports an IPv4
    /// address under its label (`ifa_name`), so to NCCL, Gloo and TensorPipe a label is an interface of its
    /// own (`docs/nccl-rules.md`, "Address labels"). `None` for IPv6 (no labels) and for a label equal to the
    /// link's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl Addr {
    /// The family of this address.
    pub fn family(&self) -> Family {
        Family::of(&self.addr)
    }
    /// True for IPv4 169.254/16 and IPv6 fe80::/10 (link-local: unusable to reach another node by routing).
    pub fn is_link_local(&self) -> bool {
        is_link_local_ip(&self.addr)
    }
    /// True for 127/8 and ::1.
    pub fn is_loopback(&self) -> bool {
        self.addr.is_loopback()
    }
    /// True when the prefix `addr/prefix_len` contains `other` (same family only).
    pub fn covers(&self, other: &IpAddr) -> bool {
        prefix_contains(&self.addr, self.prefix_len, other)
    }
    /// True when the address can be bound now: not tentative (IPv6 duplicate-address detection still running
    /// makes `bind` fail with `EADDRNOTAVAIL`, `docs/nccl-rules.md`), not DAD-failed. A deprecated address
    /// (preferred lifetime over, valid lifetime not) is bindable: the kernel still sources from it when
    /// nothing better exists and NCCL binds it (measured with the real library, #26); it only ranks after
    /// a preferred address of the same family on the same link.
    pub fn bindable(&self) -> bool {
        !self.tentative && !self.dad_failed
    }
    /// True for an address NCCL can bind and another node can reach by routing: [`Addr::bindable`], not
    /// link-local, not loopback. With [`Link::is_candidate`] this is what makes an interface a candidate.
    pub fn usable(&self) -> bool {
        self.bindable() && !self.is_link_local() && !self.is_loopback()
    }
    /// True for an IPv4 link-local (169.254/16) address that can be bound ([`Addr::bindable`]): usable only
    /// to reach a peer on the same link (F16, `docs/field-cases.md`).
    pub fn usable_link_local_v4(&self) -> bool {
        self.addr.is_ipv4() && self.is_link_local() && self.bindable()
    }
}

/// True for IPv4 169.254/16 and IPv6 fe80::/10 (link-local: unusable to reach another node by routing).
pub fn is_link_local_ip(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => (a.segments()[0] & 0xffc0) == 0xfe80,
    }
}

/// The network address of `a`/`len`: the host bits cleared (`10.2.0.5`/24 → `10.2.0.0`); `len` beyond the
/// family's width counts as the full width.
pub fn network_of(a: &IpAddr, len: u8) -> IpAddr {
    match a {
        IpAddr::V4(v) => {
            let len = u32::from(len.min(32));
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            IpAddr::V4((u32::from(*v) & mask).into())
        }
        IpAddr::V6(v) => {
            let len = u32::from(len.min(128));
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            IpAddr::V6((u128::from(*v) & mask).into())
        }
    }
}

/// True when the prefix `net/len` contains `ip`; false across families.
pub fn prefix_contains(net: &IpAddr, len: u8, ip: &IpAddr) -> bool {
    net.is_ipv4() == ip.is_ipv4() && network_of(net, len) == network_of(ip, len)
}

/// Address blocks container engines hand to their NAT'd bridges by default: Docker's local address pools
/// (moby libnetwork/ipamutils/utils.go `localScopeDefaultNetworks`: 172.17.0.0/16 … 172.28.0.0/14, i.e.
/// 172.17.0.0–172.31.255.255, and 192.168.0.0/16 split into /20s) and Podman's default network
/// (containers/common `default_subnet` 10.88.0.0/16). The one list: `decide::interface` (container-bridge-nat)
/// and `probe::job::order_contact` (the MPI contact URI's addresses) read it.
pub const NAT_BRIDGE_POOLS: &[([u8; 4], u8)] = &[
    ([172, 17, 0, 0], 16),
    ([172, 18, 0, 0], 15),
    ([172, 20, 0, 0], 14),
    ([172, 24, 0, 0], 13),
    ([192, 168, 0, 0], 16),
    ([10, 88, 0, 0], 16),
];

/// True when `ip` lies in one of the [`NAT_BRIDGE_POOLS`] (IPv4 only).
pub fn in_nat_bridge_pool(ip: &IpAddr) -> bool {
    NAT_BRIDGE_POOLS
        .iter()
        .any(|(net, len)| prefix_contains(&IpAddr::from(*net), *len, ip))
}

/// One route of the main table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// Address family of the route.
    pub family: Family,
    /// Destination prefix; `None` for a default route (prefix length 0).
    pub dst: Option<(IpAddr, u8)>,
    /// Metric (`RTA_PRIORITY`); 0 when the kernel omits it (IPv4 metric 0).
    pub metric: u32,
    /// Output interface index (`RTA_OIF`) for a single-path route.
    pub oif: Option<u32>,
    /// Gateway (`RTA_GATEWAY`) for a single-path route.
    pub gateway: Option<IpAddr>,
    /// `RTNH_F_LINKDOWN` on a single-path route: its interface has no carrier.
    pub linkdown: bool,
    /// ECMP next hops (`RTA_MULTIPATH`); empty for single-path routes.
    pub nexthops: Vec<NextHop>,
    /// Route type (`rtm_type`): 1 unicast, 2 local, 3 broadcast, 6 blackhole, 7 unreachable, 8 prohibit.
    pub kind: u8,
    /// Route scope: 0 universe, 253 link, 254 host.
    pub scope: u8,
    /// Preferred source (`RTA_PREFSRC`).
    pub prefsrc: Option<IpAddr>,
}

impl Route {
    /// True for a default route (`0.0.0.0/0`, `::/0`).
    pub fn is_default(&self) -> bool {
        self.dst.is_none()
    }
    /// Every output interface of this route with its gateway and link-down flag: the single path, or each
    /// ECMP next hop.
    pub fn paths(&self) -> Vec<NextHop> {
        if self.nexthops.is_empty() {
            match self.oif {
                Some(oif) => vec![NextHop {
                    oif,
                    gateway: self.gateway,
                    linkdown: self.linkdown,
                }],
                None => vec![],
            }
        } else {
            self.nexthops.clone()
        }
    }
}

/// One next hop of a multipath route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextHop {
    /// Output interface index.
    pub oif: u32,
    /// Gateway, when there is one.
    pub gateway: Option<IpAddr>,
    /// `RTNH_F_LINKDOWN` / `RTNH_F_DEAD`: the interface has no carrier.
    pub linkdown: bool,
}

/// The kernel's route lookup for one destination: what `ip route get DEST` answers (`RTM_GETROUTE` with
/// `RTA_DST`, a real FIB lookup that follows policy rules).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteLookup {
    /// The destination asked about.
    pub dest: IpAddr,
    /// Output interface index (`RTA_OIF`); for a local address, the loopback's index.
    pub oif: Option<u32>,
    /// Preferred source address (`RTA_PREFSRC`).
    pub prefsrc: Option<IpAddr>,
    /// Gateway (`RTA_GATEWAY`), when the destination is not on a connected prefix.
    pub gateway: Option<IpAddr>,
    /// True when the kernel answers with a `local` route: the destination is this host.
    pub local: bool,
    /// The kernel's error (e.g. `ENETUNREACH`), when the lookup failed.
    pub error: Option<String>,
    /// The routing table the answer came from (`RTA_TABLE`: 254 main; another number when an `ip rule`
    /// steered the lookup elsewhere). `None` when the kernel did not say or the lookup failed.
    #[serde(default)]
    pub table: Option<u32>,
}

/// The job's master (peer) as named by the configuration, a launcher argument or the environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    /// Where the peer was found: `NCCLENV_PEER`, a launcher flag as written (`--master`, `--master-addr`,
    /// `--rdzv-endpoint`, `--dist-init-addr`, `--address`, …) or a variable (`PET_RDZV_ENDPOINT`,
    /// `PADDLE_MASTER`, `MASTER_ADDR`, …); see `crate::launcher`.
    pub source: String,
    /// The host as written (name or address), without scheme, user information, port or brackets.
    pub host: String,
    /// Addresses it resolved to (empty when resolution failed or timed out).
    pub addrs: Vec<IpAddr>,
    /// The resolver's last error, when resolution failed or timed out.
    pub error: Option<String>,
    /// The port written with the host, if any (1–65535).
    #[serde(default)]
    pub port: Option<u16>,
    /// Milliseconds spent resolving the host name (0 for an address literal). With a name that does not
    /// resolve (yet), resolution is retried until `NCCLENV_RESOLVE_TIMEOUT_MS`.
    #[serde(default)]
    pub resolve_ms: u64,
    /// Resolver calls made (0 for an address literal).
    #[serde(default)]
    pub resolve_attempts: u32,
}

/// The launcher a job's command is, as `crate::launcher::detect` recognises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Launcher {
    /// `torchrun`, `python -m torch.distributed.run` / `torch.distributed.launch`.
    Torchrun,
    /// `python -m paddle.distributed.launch` (and `paddle.distributed.fleet.launch`).
    Paddle,
    /// `deepspeed` (`deepspeed.launcher.runner`) and `python -m deepspeed.launcher.launch`.
    Deepspeed,
    /// `python -m sglang.launch_server` (any `sglang.` module, or the `sglang` command).
    Sglang,
    /// `vllm serve`, `python -m vllm.…`.
    Vllm,
    /// `ray start`.
    Ray,
    /// `horovodrun`.
    Horovod,
    /// `mpirun`, `mpiexec`, `orterun`, `prterun`.
    Mpi,
    /// HuggingFace Accelerate: `accelerate launch`, `python -m accelerate.commands.launch`.
    Accelerate,
}

impl Launcher {
    /// The launcher's name as users type it (`torchrun`, `paddle.distributed.launch`, `deepspeed`, …).
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Torchrun => "torchrun",
            Launcher::Paddle => "paddle.distributed.launch",
            Launcher::Deepspeed => "deepspeed",
            Launcher::Sglang => "sglang",
            Launcher::Vllm => "vllm",
            Launcher::Ray => "ray start",
            Launcher::Horovod => "horovodrun",
            Launcher::Mpi => "mpirun",
            Launcher::Accelerate => "accelerate launch",
        }
    }
}

/// How a launcher talks to its rendezvous endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RdzvProtocol {
    /// Plain TCP (PyTorch's `TCPStore`: torchrun's static and c10d rendezvous, `env://`, SGLang, DeepSpeed;
    /// Ray's GCS over gRPC): HTTP proxy variables do not apply.
    Tcp,
    /// HTTP (Paddle's HTTP master, etcd endpoints): HTTP proxy variables apply.
    Http,
}

/// The rendezvous endpoint the launcher connects to, where the job names one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rendezvous {
    /// The protocol spoken to it.
    pub protocol: RdzvProtocol,
    /// Whose rendezvous, in words: `Paddle's HTTP master`, `torchrun's etcd rendezvous`, ….
    pub owner: String,
    /// Where it was named (`--master`, `PET_RDZV_ENDPOINT`, …).
    pub source: String,
    /// The host, without scheme, user information or port.
    pub host: String,
    /// The port, when written.
    pub port: Option<u16>,
    /// True for an `https://` endpoint (then `HTTPS_PROXY` applies instead of `HTTP_PROXY`).
    pub tls: bool,
    /// Proxy variables the launcher removes from its own environment before connecting (Paddle's launcher
    /// clears `http_proxy` and `https_proxy`): they are no risk to this rendezvous.
    pub clears: Vec<String>,
}

/// The job as its launcher describes it: how many nodes, which node this is, where the master listens, and
/// the address this node declares for itself. Filled by `crate::launcher::read` (and `NCCLENV_NNODES`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobShape {
    /// Number of nodes (the largest, for `--nnodes N:M`); `None` when nothing says.
    pub nnodes: Option<u32>,
    /// Where the number came from (`--nnodes`, `--ips`, `PADDLE_NNODES`, `NCCLENV_NNODES`, …).
    pub source: Option<String>,
    /// Hosts the launcher will advertise as the nodes' addresses (Paddle's `--ips`), as written.
    pub ips: Vec<String>,
    /// Launcher arguments that could not be parsed (e.g. `--nnodes=abc`), each one clear sentence (user
    /// information of URLs removed).
    pub problems: Vec<String>,
    /// The launcher recognised in the command, if any.
    #[serde(default)]
    pub launcher: Option<Launcher>,
    /// The master's port (1–65535), when the job names one or the launcher has a default for it.
    #[serde(default)]
    pub master_port: Option<u16>,
    /// Where [`JobShape::master_port`] came from (`--master-port`, `PET_MASTER_PORT`, `MASTER_PORT`,
    /// `--dist-init-addr`, `torchrun's default`, …).
    #[serde(default)]
    pub master_port_source: Option<String>,
    /// This node's rank among the nodes (0 = the master's node), when the job says.
    #[serde(default)]
    pub node_rank: Option<u32>,
    /// Where [`JobShape::node_rank`] came from (`--node-rank`, `PET_NODE_RANK`, `PADDLE_TRAINER_ID`, …).
    #[serde(default)]
    pub node_rank_source: Option<String>,
    /// The address this node declares for itself (`VLLM_HOST_IP`, Ray's `--node-ip-address`, torchrun's
    /// `--local-addr`, Paddle's `POD_IP`/`--host`), as written.
    #[serde(default)]
    pub self_addr: Option<String>,
    /// Where [`JobShape::self_addr`] came from.
    #[serde(default)]
    pub self_addr_source: Option<String>,
    /// The rendezvous endpoint the launcher connects to, when one is named.
    #[serde(default)]
    pub rendezvous: Option<Rendezvous>,
    /// The framework whose launcher runs the job, when the command names one (`torchrun`,
    /// `python -m paddle.distributed.launch`, …; see `probe::job::framework`).
    #[serde(default)]
    pub framework: Option<Framework>,
    /// The value of the launcher's own `--log_level` argument (Paddle), when the command gives one.
    #[serde(default)]
    pub launcher_log_level: Option<String>,
    /// Ranks the launcher starts on this node (torchrun `--nproc-per-node`, Paddle `--devices`, DeepSpeed
    /// `--num_gpus`, …; see `launcher::local_ranks`); `None` when the launcher does not say (then the
    /// visible GPUs count).
    #[serde(default)]
    pub local_ranks: Option<u32>,
    /// Where [`JobShape::local_ranks`] came from (`--nproc-per-node`, `PET_NPROC_PER_NODE`, `--devices`, …).
    #[serde(default)]
    pub local_ranks_source: Option<String>,
    /// What the job's facts were read from when the command is wrapped (`sh -c: torchrun --nnodes=2 …`,
    /// `env: torchrun …`; see `crate::shell`): the wrappers and the command read, user information removed.
    #[serde(default)]
    pub wrapper: Option<String>,
    /// The script file a shell runs (`bash run.sh`), which ncclenv does not read.
    #[serde(default)]
    pub script: Option<String>,
    /// What the command's wrapper removes from the job's environment (`crate::shell`): `["*"]` for
    /// `env -i` (everything but its own assignments), else the names `env -u NAME` removes; `None` when
    /// nothing is removed. `decide` warns when that drops a variable ncclenv sets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_removed: Option<Vec<String>>,
    /// The recorded variables the command's wrapper assigns (`env NAME=VALUE`, leading `NAME=VALUE` and
    /// `export NAME=VALUE;` in `sh -c`), name and value (user information removed), in order: they replace
    /// what ncclenv sets. Empty when none. `decide` warns for each one ncclenv sets (`env-set-by-wrapper`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_assigned: Vec<(String, String)>,
    /// The orchestrator row (`crate::orchestrator::ROWS`) whose variables named the master, the node count or
    /// the node rank, when the launcher's own arguments and variables did not.
    #[serde(default)]
    pub orchestrator: Option<String>,
    /// How the launcher copies the environment to the other nodes, when it is a runner that does (`mpirun`,
    /// DeepSpeed's multinode runner; see `crate::spread`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<Spread>,
    /// The addresses of the master's contact URI, in the URI's order, when an MPI rank's row
    /// (`crate::orchestrator`: Open MPI's `OMPI_MCA_orte_hnp_uri`, PMIx's `PMIX_SERVER_URI*`) named the peer:
    /// mpirun/prterun listens on each, and the peer is the one this host reaches best
    /// (`crate::probe::job::order_contact`). Empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contact_addrs: Vec<IpAddr>,
    /// The interface the platform names outright for the job (`crate::orchestrator::named_interface`:
    /// SageMaker's `SM_NETWORK_INTERFACE_NAME`), read from the job's environment (the inherited one plus a
    /// shell's leading assignments, `sh -c "SM_NETWORK_INTERFACE_NAME=eth1 torchrun …"`): the variable, the
    /// interface's name and the orchestrator row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_interface: Option<(String, String, String)>,
}

/// What a runner that carries the launching node's environment to every node (`mpirun`, DeepSpeed's
/// multinode runner) says on its command line (`crate::spread`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spread {
    /// The program the runner starts on every node is ncclenv (`mpirun … ncclenv -- PROG`, `deepspeed
    /// --no_python … ncclenv -- PROG`): each rank decides on its own node.
    pub ranks_through_ncclenv: bool,
    /// The names mpirun's `-x NAME[=VALUE]` copies to every rank, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exports: Vec<String>,
    /// The MCA parameters given with `--mca NAME VALUE` on mpirun's command line (they win over `OMPI_MCA_*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mca: Vec<String>,
    /// `NCCL_SOCKET_IFNAME` as a DeepSpeed environment file sets it for every node (`~/.deepspeed_env`, then
    /// `./.deepspeed_env`, the later winning; `crate::spread::deepspeed_env_ifname`): the file's path and the
    /// value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_file_ifname: Option<(String, String)>,
}

/// A training framework, as its launcher identifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Framework {
    /// PyTorch (`torchrun`, `python -m torch.distributed.run|launch`, and launchers built on it: `deepspeed`,
    /// `accelerate launch`).
    PyTorch,
    /// PaddlePaddle (`python -m paddle.distributed.launch`, `fleetrun`).
    Paddle,
}

impl JobShape {
    /// True when the job is known to span two or more nodes.
    pub fn is_multi_node(&self) -> bool {
        matches!(self.nnodes, Some(n) if n > 1)
    }
    /// True when the job is known to run on one node.
    pub fn is_single_node(&self) -> bool {
        self.nnodes == Some(1)
    }
}

/// An NCCL configuration file (`NCCL_CONF_FILE` or `~/.nccl.conf`, then `/etc/nccl.conf`;
/// src/misc/param.cc, `initEnv`/`setEnvFile`, applied with `setenv(name, value, 0)`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfFile {
    /// Path of the file.
    pub path: String,
    /// `NAME=value` pairs it sets, in file order (comments and blank lines dropped).
    pub values: Vec<(String, String)>,
    /// Read or parse error, when the file exists but could not be used.
    pub error: Option<String>,
}

/// RDMA devices, verbs device nodes and the memlock limit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaSnapshot {
    /// Devices under `<sysfs>/class/infiniband`, sorted by name.
    pub devices: Vec<RdmaDevice>,
    /// Names of `uverbsN` character devices present under `<devfs>/infiniband`.
    pub uverbs: Vec<String>,
    /// Whether `<devfs>/infiniband/rdma_cm` exists.
    pub rdma_cm: bool,
    /// RLIMIT_MEMLOCK soft limit in bytes; `None` = unlimited.
    pub memlock_soft: Option<u64>,
    /// RLIMIT_MEMLOCK hard limit in bytes; `None` = unlimited.
    pub memlock_hard: Option<u64>,
    /// Probe error (unreadable sysfs, …), if any.
    pub error: Option<String>,
    /// Whether the command will hold `CAP_IPC_LOCK`, which lifts RLIMIT_MEMLOCK for memory registration
    /// (mlock(2)): this process has it in its effective set (`/proc/self/status` `CapEff`, bit 14) and keeps it
    /// across `execve` (root: in the bounding set; another user: in the ambient set). `None` when not read
    /// (no RDMA device) or unreadable.
    #[serde(default)]
    pub cap_ipc_lock: Option<bool>,
}

/// One RDMA device (HCA), e.g. `mlx5_0`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaDevice {
    /// Device name under `class/infiniband`.
    pub name: String,
    /// Its ports.
    pub ports: Vec<RdmaPort>,
    /// Its verbs character device, found through `class/infiniband_verbs/uverbsN/ibdev`; `None` when sysfs
    /// names none for it (no `class/infiniband_verbs` entry).
    #[serde(default)]
    pub verbs: Option<VerbsNode>,
}

/// The verbs node (`/dev/infiniband/uverbsN`) of one HCA, and whether it opens read-write as libibverbs
/// opens it (`ibv_open_device`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerbsNode {
    /// `uverbsN`, as named in `class/infiniband_verbs`.
    pub name: String,
    /// The node's path under the dev root.
    pub path: String,
    /// A character device exists at `path` (a missing node makes libibverbs drop the HCA silently).
    pub present: bool,
    /// Why opening it read-write failed (`Permission denied`, `No such device or address`, or "not a character
    /// device"); `None` when it opened (and was closed at once) or is missing.
    pub open_error: Option<String>,
}

impl VerbsNode {
    /// True when the node exists and opened read-write.
    pub fn opens(&self) -> bool {
        self.present && self.open_error.is_none()
    }
}

/// One port of an RDMA device (`class/infiniband/<dev>/ports/<n>/`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaPort {
    /// Port number (1-based).
    pub port: u32,
    /// `state` number: 4 = ACTIVE.
    pub state: u32,
    /// `phys_state` number: 5 = LinkUp.
    pub phys_state: u32,
    /// `link_layer`: `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: String,
    /// `rate` as written, e.g. `200 Gb/sec (4X HDR)`.
    pub rate: String,
    /// Non-zero GIDs (RoCE: with their type and netdev).
    pub gids: Vec<RdmaGid>,
    /// Entries of the GID table (files in `gids/`, the zero ones included): NCCL's `gid_tbl_len`.
    #[serde(default)]
    pub gid_tbl_len: u32,
}

impl RdmaPort {
    /// The port's logical state ([`RdmaPort::state`] as a [`PortState`]).
    pub fn port_state(&self) -> PortState {
        PortState(self.state)
    }
    /// The port's physical state ([`RdmaPort::phys_state`] as a [`PhysState`]).
    pub fn phys_port_state(&self) -> PhysState {
        PhysState(self.phys_state)
    }
}

/// An IB port's logical state, the number in sysfs `ports/<n>/state` (`enum ib_port_state` in the kernel's
/// include/rdma/ib_verbs.h): 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER. NCCL uses a port only when
/// it is ACTIVE (`ncclIbInitDevices`, src/transport/net_ib.cc). Displays as the kernel's name, another
/// number as `state N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortState(pub u32);

impl PortState {
    /// `IB_PORT_ACTIVE`.
    pub const ACTIVE: PortState = PortState(4);
}

impl std::fmt::Display for PortState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            1 => f.write_str("DOWN"),
            2 => f.write_str("INIT"),
            3 => f.write_str("ARMED"),
            4 => f.write_str("ACTIVE"),
            5 => f.write_str("ACTIVE_DEFER"),
            n => write!(f, "state {n}"),
        }
    }
}

/// An IB port's physical state, the number in sysfs `ports/<n>/phys_state` (IBTA port physical states, as
/// `ibstat` names them): 1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining, 5 LinkUp,
/// 6 LinkErrorRecovery, 7 PhyTest. Displays as that name, another number as the number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhysState(pub u32);

impl std::fmt::Display for PhysState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.0 {
            1 => "Sleep",
            2 => "Polling",
            3 => "Disabled",
            4 => "PortConfigurationTraining",
            5 => "LinkUp",
            6 => "LinkErrorRecovery",
            7 => "PhyTest",
            n => return write!(f, "{n}"),
        };
        f.write_str(name)
    }
}

/// A byte count shown in MiB for messages (memlock limits, `/dev/shm` sizes): `8 MiB`, or
/// `0.06 MiB (65536 B)` when it is not a whole number of MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mib(pub u64);

impl std::fmt::Display for Mib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MIB: u64 = 1 << 20;
        let bytes = self.0;
        if bytes.is_multiple_of(MIB) {
            write!(f, "{} MiB", bytes / MIB)
        } else {
            write!(f, "{:.2} MiB ({bytes} B)", bytes as f64 / MIB as f64)
        }
    }
}

/// One GID table entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaGid {
    /// GID index.
    pub index: u32,
    /// The GID as written in `gids/<i>`.
    pub gid: String,
    /// `gid_attrs/types/<i>`, e.g. `RoCE v2`.
    pub kind: Option<String>,
    /// `gid_attrs/ndevs/<i>`: the netdev the GID belongs to.
    pub ndev: Option<String>,
}

/// `/dev/shm` capacity.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShmInfo {
    /// Path probed (normally `/dev/shm`).
    pub path: String,
    /// Total size in bytes (statvfs).
    pub total_bytes: Option<u64>,
    /// Free bytes available to an unprivileged writer (statvfs `f_bavail × f_frsize`).
    pub free_bytes: Option<u64>,
    /// Mounted read-only.
    pub read_only: bool,
    /// Missing or unreadable: the error text.
    pub error: Option<String>,
    /// Whether this process (and so the command it execs, as the same user) may create files there
    /// (`access(W_OK|X_OK)`); `None` when not checked (the path is missing).
    #[serde(default)]
    pub writable: Option<bool>,
    /// Why it is not writable: the error, the directory's owner and mode, and the user asking.
    #[serde(default)]
    pub write_error: Option<String>,
    /// `nccl-*` files found there (NCCL's segments, left behind by a job that died before unlinking them),
    /// largest first; listed only when part of the filesystem is in use.
    #[serde(default)]
    pub nccl_segments: Vec<ShmSegment>,
}

/// One `nccl-*` file in `/dev/shm`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShmSegment {
    /// File name (`nccl-AbC123`).
    pub name: String,
    /// Bytes it occupies (allocated blocks × 512).
    pub bytes: u64,
}

/// Local GPUs as visible to the command.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// Number of GPUs the command will see; `None` when unknown.
    pub count: Option<u32>,
    /// Where the count came from (`CUDA_VISIBLE_DEVICES`, `NVIDIA_VISIBLE_DEVICES`, `/dev/nvidiaN`, …).
    pub source: String,
    /// A parse problem worth reporting (a malformed list), if any.
    pub warning: Option<String>,
}

/// One libnccl the command could load.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NcclInstall {
    /// Path of the library file.
    pub path: String,
    /// Version as `X.Y.Z`, from the file name or package metadata, when known.
    pub version: Option<String>,
    /// Where it was found (`LD_LIBRARY_PATH`, `ld.so.cache`, `site-packages`, …).
    pub source: String,
}

/// [`NcclInstall::source`] of the library named by `NCCLENV_NCCL_LIB` / `--nccl-lib` (listed first, alone
/// in what the job loads).
pub const EXPLICIT_NCCL_SOURCE: &str = "NCCLENV_NCCL_LIB";

/// The distinct versions among `installs` (sorted); more than one means the loaded NCCL depends on paths.
pub fn distinct_versions(installs: &[NcclInstall]) -> Vec<String> {
    installs
        .iter()
        .filter_map(|i| i.version.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// One external NCCL net plugin library.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetPlugin {
    /// Path of the library file.
    pub path: String,
    /// Where it was found (`LD_LIBRARY_PATH`, `ld.so.cache`, `system library directory`, `NCCL_NET_PLUGIN`,
    /// `HPC-X folder`).
    pub source: String,
    /// True for the one NCCL would `dlopen` (the first name it tries that the loader finds); an HPC-X folder
    /// that is not on the loader path does not load.
    pub loads: bool,
}

impl Snapshot {
    /// An inherited variable's value, if set in the environment (not config files).
    pub fn var(&self, name: &str) -> Option<&str> {
        self.env.get(name).map(|s| s.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_states_display_as_the_kernel_names_them() {
        let names: Vec<String> = (0..=6).map(|n| PortState(n).to_string()).collect();
        assert_eq!(
            names,
            [
                "state 0",
                "DOWN",
                "INIT",
                "ARMED",
                "ACTIVE",
                "ACTIVE_DEFER",
                "state 6"
            ]
        );
        assert_eq!(PhysState(5).to_string(), "LinkUp");
        assert_eq!(PhysState(3).to_string(), "Disabled");
        assert_eq!(PhysState(9).to_string(), "9");
        let p = RdmaPort {
            state: 4,
            phys_state: 5,
            ..RdmaPort::default()
        };
        assert_eq!(p.port_state(), PortState::ACTIVE);
        assert_eq!(p.phys_port_state().to_string(), "LinkUp");
    }

    #[test]
    fn mib_shows_whole_mib_plainly_and_parts_with_bytes() {
        assert_eq!(Mib(8 << 20).to_string(), "8 MiB");
        assert_eq!(Mib(0).to_string(), "0 MiB");
        assert_eq!(Mib(65536).to_string(), "0.06 MiB (65536 B)");
    }

    #[test]
    fn usable_addresses_are_bindable_routable_and_not_loopback() {
        let a = |addr: &str| Addr {
            index: 2,
            addr: addr.parse().expect("address"),
            prefix_len: 24,
            scope: 0,
            tentative: false,
            deprecated: false,
            dad_failed: false,
            label: None,
        };
        assert!(a("10.0.0.2").usable());
        assert!(a("fd00::2").usable());
        assert!(!a("127.0.0.1").usable());
        assert!(!a("::1").usable());
        assert!(!a("169.254.1.2").usable());
        assert!(!a("fe80::1").usable());
        assert!(a("169.254.1.2").usable_link_local_v4());
        assert!(!a("fe80::1").usable_link_local_v4());
        // Deprecated (preferred lifetime over) is still bindable and usable (#26).
        let mut d = a("10.0.0.2");
        d.deprecated = true;
        assert!(d.bindable() && d.usable());
        for f in [
            |x: &mut Addr| x.tentative = true,
            |x: &mut Addr| x.dad_failed = true,
        ] {
            let mut x = a("10.0.0.2");
            f(&mut x);
            assert!(!x.bindable() && !x.usable());
            let mut y = a("169.254.1.2");
            f(&mut y);
            assert!(!y.usable_link_local_v4());
        }
    }

    #[test]
    fn candidate_links_run_are_not_loopback_nor_excluded() {
        let l = Link {
            index: 2,
            name: "eth0".into(),
            up: true,
            running: true,
            ..Link::default()
        };
        assert!(l.is_candidate(&[]));
        assert!(!l.is_candidate(&["eth0".to_string()]));
        assert!(l.is_candidate(&["eth".to_string()]));
        assert!(!Link {
            running: false,
            ..l.clone()
        }
        .is_candidate(&[]));
        assert!(!Link {
            loopback: true,
            ..l.clone()
        }
        .is_candidate(&[]));
        assert!(!l.is_bridge_like());
        assert!(Link {
            name: "br-1a2b".into(),
            ..l.clone()
        }
        .is_bridge_like());
        assert!(Link {
            kind: Some("bridge".into()),
            ..l
        }
        .is_bridge_like());
    }
}
