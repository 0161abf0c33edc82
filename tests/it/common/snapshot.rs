//! The one builder of plain-data snapshots ([`SnapshotBuilder`]): a machine written line by line as `ip`
//! would show it, decided without a kernel; and the one way a test finds a finding in a plan or a fleet
//! verdict ([`warning`], [`has_warning`], [`warnings`], [`codes`]).
//!
//! Both test crates compile this file: the integration tests as `common::snapshot`, the library's unit tests
//! as `crate::test_machine` (`src/lib.rs`, where `extern crate self as ncclenv` makes the `ncclenv::` paths
//! below resolve), under the chaining front `src/test_snapshot.rs`.
//!
//! ```ignore
//! let mut l = SnapshotBuilder::new(); // lo only
//! let e = l.plug("eth0", &["172.17.0.2/16"]);
//! l.default_via("172.17.0.1", e, 0, false);
//! l.env("NCCL_SOCKET_IFNAME", "eth1");
//! let plan = l.decide();
//! assert_eq!(warning(&plan, "inherited-ifname-repaired").severity, Severity::Warn);
//! ```

use ncclenv::config::Config;
use ncclenv::decide::decide;
use ncclenv::plan::{Note, Plan};
use ncclenv::preflight::protocol::FleetVerdict;
use ncclenv::snapshot::*;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// `s` as an address (panics when it is not one).
pub fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

/// A hand-built machine for the decision core: a network whose links get indices in creation order, like
/// the kernel, plus the environment, the peer, the job, NCCL, RDMA, `/dev/shm` and the GPUs. The fields are
/// the snapshot's parts, to change directly where no method fits.
#[derive(Clone, Debug, Default)]
pub struct SnapshotBuilder {
    /// Links, addresses, routes and the kernel's route lookups.
    pub net: Network,
    /// The environment the command inherits.
    pub env: BTreeMap<String, String>,
    /// The job's master (the peer), when one is named.
    pub peer: Option<Peer>,
    /// The job's shape (nodes, rendezvous).
    pub job: JobShape,
    /// The NCCL installations found (empty: none, so the version is unknown).
    pub nccl: Vec<NcclInstall>,
    /// The RDMA devices, when probed.
    pub rdma: Option<RdmaSnapshot>,
    /// `/dev/shm`, when probed.
    pub shm: Option<ShmInfo>,
    /// The GPUs the job sees, when known.
    pub gpus: Option<GpuInfo>,
}

impl SnapshotBuilder {
    /// A machine with only `lo` (127.0.0.1/8, ::1/128), index 1.
    pub fn new() -> SnapshotBuilder {
        let mut l = SnapshotBuilder::bare();
        let i = l.link("lo", true, None);
        l.net.links[0].loopback = true;
        l.addr(i, "127.0.0.1/8");
        l.addr(i, "::1/128");
        l
    }
    /// A machine with no link at all (not even `lo`) and nothing else.
    pub fn bare() -> SnapshotBuilder {
        SnapshotBuilder::default()
    }
    /// A link `name` (up; RUNNING with carrier when `running`; MTU 1500, Ethernet; `kind` as `ip -d` says
    /// it, e.g. `veth`); returns its index.
    pub fn link(&mut self, name: &str, running: bool, kind: Option<&str>) -> u32 {
        let index = self.net.links.len() as u32 + 1;
        self.net.links.push(Link {
            index,
            name: name.into(),
            up: true,
            running,
            lower_up: running,
            oper_state: if running { "up" } else { "down" }.into(),
            kind: kind.map(String::from),
            mtu: Some(1500),
            link_type: 1,
            ..Default::default()
        });
        index
    }
    /// Address `cidr` (e.g. `10.0.0.2/24`) on link `index`, scope as the kernel gives it.
    pub fn addr(&mut self, index: u32, cidr: &str) {
        let (a, p) = cidr.split_once('/').expect("cidr");
        let addr = ip(a);
        let scope = if addr.is_loopback() {
            254
        } else if is_link_local_ip(&addr) {
            253
        } else {
            0
        };
        self.net.addrs.push(Addr {
            index,
            addr,
            prefix_len: p.parse().expect("prefix"),
            scope,
            tentative: false,
            deprecated: false,
            dad_failed: false,
            label: None,
        });
        self.net.addrs.sort_by_key(|a| (a.family(), a.index));
        self.connected_route(index, addr, p.parse().expect("prefix"));
    }
    /// The connected route the kernel adds for an IPv4 address `addr/len` (none for a host prefix /32 or
    /// loopback; `fib_add_ifaddr`, net/ipv4/fib_frontend.c).
    fn connected_route(&mut self, index: u32, addr: IpAddr, len: u8) {
        let IpAddr::V4(a) = addr else { return };
        if len == 0 || len >= 32 || a.is_loopback() {
            return;
        }
        let net = IpAddr::V4((u32::from(a) & (u32::MAX << (32 - u32::from(len)))).into());
        self.net.routes.push(Route {
            family: Family::Inet,
            dst: Some((net, len)),
            metric: 0,
            oif: Some(index),
            gateway: None,
            linkdown: false,
            nexthops: vec![],
            kind: 1,
            scope: 253,
            prefsrc: Some(addr),
        });
    }
    /// Address `cidr` on link `index` with the label `label` (`ip addr add … label eno1:avahi`).
    pub fn labelled(&mut self, index: u32, cidr: &str, label: &str) {
        self.addr(index, cidr);
        let a = ip(cidr.split_once('/').expect("cidr").0);
        if let Some(x) = self.net.addrs.iter_mut().find(|x| x.addr == a) {
            x.label = Some(label.into());
        }
    }
    /// Marks the address `a` deprecated (`preferred_lft 0`).
    pub fn deprecate(&mut self, a: &str) {
        let a = ip(a);
        if let Some(x) = self.net.addrs.iter_mut().find(|x| x.addr == a) {
            x.deprecated = true;
        }
    }
    /// A RUNNING veth `name` with the addresses `cidrs`; returns its index.
    pub fn plug(&mut self, name: &str, cidrs: &[&str]) -> u32 {
        let i = self.link(name, true, Some("veth"));
        for c in cidrs {
            self.addr(i, c);
        }
        i
    }
    /// A veth `name` without carrier (NO-CARRIER) with the addresses `cidrs`; returns its index.
    pub fn stub(&mut self, name: &str, cidrs: &[&str]) -> u32 {
        let i = self.link(name, false, Some("veth"));
        for c in cidrs {
            self.addr(i, c);
        }
        i
    }
    /// A default route via `gw` out of `oif` with `metric` (`linkdown` as the kernel flags it).
    pub fn default_via(&mut self, gw: &str, oif: u32, metric: u32, linkdown: bool) {
        self.net.routes.push(Route {
            family: Family::of(&ip(gw)),
            dst: None,
            metric,
            oif: Some(oif),
            gateway: Some(ip(gw)),
            linkdown,
            nexthops: vec![],
            kind: 1,
            scope: 0,
            prefsrc: None,
        });
    }
    /// The job's master `dest` (an address), named by `source` (e.g. `MASTER_ADDR`), and the kernel's
    /// route to it: out of `oif`, or `local` (an address of this machine).
    pub fn peer(&mut self, source: &str, dest: &str, oif: Option<u32>, local: bool) {
        self.peer = Some(Peer {
            source: source.into(),
            host: dest.into(),
            addrs: vec![ip(dest)],
            error: None,
            port: None,
            resolve_ms: 0,
            resolve_attempts: 0,
        });
        self.net.peer_routes.push(RouteLookup {
            dest: ip(dest),
            oif,
            prefsrc: None,
            gateway: None,
            local,
            error: None,
            table: Some(254),
        });
    }
    /// The peer is reached through `oif` via the gateway `gw` (another subnet).
    pub fn peer_via(&mut self, source: &str, dest: &str, oif: u32, gw: &str) {
        self.peer(source, dest, Some(oif), false);
        if let Some(l) = self.net.peer_routes.last_mut() {
            l.gateway = Some(ip(gw));
        }
    }
    /// A peer name that did not resolve: tried for `ms` milliseconds.
    pub fn unresolved(&mut self, source: &str, host: &str, ms: u64) {
        self.peer = Some(Peer {
            source: source.into(),
            host: host.into(),
            addrs: vec![],
            error: Some("cannot resolve: failed to lookup address information".into()),
            port: None,
            resolve_ms: ms,
            resolve_attempts: 7,
        });
    }
    /// The kernel's lookup of an off-link destination answered from `table` through `oif` via `gw`.
    pub fn offlink(&mut self, dest: &str, oif: u32, gw: &str, table: u32) {
        self.net.default_lookups.push(RouteLookup {
            dest: ip(dest),
            oif: Some(oif),
            prefsrc: None,
            gateway: Some(ip(gw)),
            local: false,
            error: None,
            table: Some(table),
        });
    }
    /// The launcher's rendezvous: `protocol` to `host`, by `owner` (e.g. `torchrun`), named by `source`.
    pub fn rendezvous(&mut self, protocol: RdzvProtocol, owner: &str, source: &str, host: &str) {
        self.job.rendezvous = Some(Rendezvous {
            protocol,
            owner: owner.into(),
            source: source.into(),
            host: host.into(),
            port: None,
            tls: false,
            clears: if owner.starts_with("Paddle") {
                vec!["http_proxy".into(), "https_proxy".into()]
            } else {
                vec![]
            },
        });
    }
    /// Sets the inherited variable `k` to `v`.
    pub fn env(&mut self, k: &str, v: &str) {
        self.env.insert(k.into(), v.into());
    }
    /// The command will load this NCCL (`NCCLENV_NCCL_LIB`, so it alone counts).
    pub fn nccl(&mut self, version: &str) {
        self.nccl = vec![NcclInstall {
            path: format!("/opt/nccl/libnccl.so.{version}"),
            version: Some(version.into()),
            source: ncclenv::probe::nccl::EXPLICIT_SOURCE.into(),
        }];
    }
    /// One more NCCL installation found at `path`, of `version` when known (source `test`: found, not
    /// named by `NCCLENV_NCCL_LIB`).
    pub fn found_nccl(&mut self, path: &str, version: Option<&str>) {
        self.nccl.push(NcclInstall {
            path: path.into(),
            version: version.map(String::from),
            source: "test".into(),
        });
    }
    /// A job of `n` nodes (as `--nnodes` said).
    pub fn nnodes(&mut self, n: u32) {
        self.job.nnodes = Some(n);
        self.job.source = Some("--nnodes".into());
    }
    /// The decision on [`Self::snapshot`] with `cfg`.
    pub fn decide_with(&self, cfg: &Config) -> Plan {
        decide(&self.snapshot(), cfg)
    }
    /// The snapshot: what the probes would have read on this machine.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            net: Ok(self.net.clone()),
            peer: self.peer.clone(),
            job: self.job.clone(),
            env: self.env.clone(),
            nccl_installs: self.nccl.clone(),
            rdma: self.rdma.clone(),
            shm: self.shm.clone(),
            gpus: self.gpus.clone(),
            ..Snapshot::default()
        }
    }
    /// The decision with the default configuration.
    pub fn decide(&self) -> Plan {
        self.decide_with(&Config::default())
    }
    /// The decision under `NCCLENV_STRICT=1`.
    pub fn strict(&self) -> Plan {
        self.decide_with(&Config {
            strict: true,
            ..Config::default()
        })
    }
}

/// What holds findings: a [`Plan`]'s `warnings`, a fleet [`FleetVerdict`]'s `findings`.
pub trait Findings {
    /// The findings, in the order they were made.
    fn findings(&self) -> &[Note];
}

impl Findings for Plan {
    fn findings(&self) -> &[Note] {
        &self.warnings
    }
}

impl Findings for FleetVerdict {
    fn findings(&self) -> &[Note] {
        &self.findings
    }
}

/// The findings of `of` (infos and warnings) with the code `code`, in the order they were made.
pub fn warnings<'a, F: Findings + ?Sized>(
    of: &'a F,
    code: &'a str,
) -> impl Iterator<Item = &'a Note> + 'a {
    of.findings().iter().filter(move |w| w.code == code)
}

/// Whether `of` holds a finding with the code `code`.
pub fn has_warning<F: Findings + ?Sized>(of: &F, code: &str) -> bool {
    of.findings().iter().any(|w| w.code == code)
}

/// The first finding of `of` with the code `code`; panics, listing every finding, when there is none.
pub fn warning<'a, F: Findings + ?Sized>(of: &'a F, code: &str) -> &'a Note {
    match of.findings().iter().find(|w| w.code == code) {
        Some(w) => w,
        None => panic!("no {code} finding in {:#?}", of.findings()),
    }
}

/// The codes of `of`'s findings, in the order they were made.
pub fn codes<F: Findings + ?Sized>(of: &F) -> Vec<&str> {
    of.findings().iter().map(|w| w.code.as_str()).collect()
}
