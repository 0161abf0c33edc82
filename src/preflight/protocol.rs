//! The preflight's wire protocol: typed, versioned and bounded messages (see `docs/preflight.md`).
//!
//! Every message is one frame: a 4-byte big-endian length, then that many bytes of JSON holding an
//! [`Envelope`]: the protocol name [`PROTO`], its version [`VERSION`], the job key and one [`Msg`]. A frame
//! is at most [`MAX_FRAME`] bytes; a longer length prefix is refused before anything is buffered, so a
//! stray client (or a server that is not a preflight: an HTTP server, an SSH banner) costs at most one
//! read. A message of another version or another job is told apart from another server's bytes
//! ([`DecodeError`]), so that each side can say what it met.
//!
//! Conversation on the master port (the master speaks first, so a worker never sends a byte to a server that
//! is not a preflight master, such as the launcher's own store):
//!
//! ```text
//! master → worker   Greeting
//! worker → master   Hello(NodeReport)
//! master → worker   Ring(Option<Target>)        once every node has arrived, or at the deadline
//! worker → master   ProbeResult(ProbeReport)    after connecting to its ring successor's probe port
//! master → worker   Measure(legs)               only with two or more networks every node shares (#23)
//! worker → master   Measured(figures)           after sending to its ring successor on each
//! master → worker   Verdict(FleetVerdict)
//! worker closes, then the master closes (no TIME_WAIT on the master port's side)
//! ```
//!
//! A master on the wildcard address also connects to the master endpoint itself (`super::endpoint`): after
//! the greeting it sends `Probe(its nonce)`, which a master answers on the master port with
//! `ProbeAck(its own nonce)`, so that it can tell whether the endpoint leads to it.
//!
//! On a node's probe port (an ephemeral port on its bootstrap address): the prober sends `Probe` with the
//! nonce it expects, the listener answers `ProbeAck` with its own nonce, the prober closes first.
//!
//! Only `NCCL_*` variables are ever sent ([`NodeReport::nccl_env`]); strings are cut to [`MAX_VALUE`] /
//! [`MAX_TEXT`] bytes and control characters are replaced on receipt ([`NodeReport::sanitize`],
//! [`sanitize_verdict`]) before anything reaches a log.

use crate::plan::Note;
use crate::snapshot::{network_of, prefix_contains, Family};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;

// The interfaces a node's hello lists (#23), as they travel; `networks` groups them into shared networks.

/// Most interfaces a node reports.
pub const MAX_IFACES: usize = 16;
/// Most addresses reported per interface.
pub const MAX_ADDRS: usize = 4;
/// Longest interface name reported, in bytes: Linux's `IFNAMSIZ` (16, with the terminating NUL).
pub const MAX_IFNAME: usize = 15;
/// An address with its prefix length (`10.2.0.5/24`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cidr {
    /// The address.
    pub addr: IpAddr,
    /// The prefix length in bits.
    pub prefix: u8,
}

impl Cidr {
    /// The network: the address with the host bits cleared (`10.2.0.0/24`).
    pub fn network(&self) -> Cidr {
        Cidr {
            addr: network_of(&self.addr, self.prefix),
            prefix: self.prefix,
        }
    }
    /// True when `ip` is in this prefix.
    pub fn contains(&self, ip: &IpAddr) -> bool {
        prefix_contains(&self.addr, self.prefix, ip)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// One usable interface of a node, as its hello reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Iface {
    /// The interface name (`ens5`).
    pub name: String,
    /// Its usable addresses with their prefixes ([`crate::snapshot::Addr::usable`]).
    pub addrs: Vec<Cidr>,
    /// Its MTU in bytes, when known.
    pub mtu: Option<u32>,
    /// Its nominal link speed in Mbit/s (sysfs `class/net/<name>/speed`), when it says something
    /// (`decide::faster::nominal_speed`: not for veths and bridges).
    pub speed_mbps: Option<u64>,
    /// True when it is the netdev of an RDMA device's port (a RoCE or IPoIB interface).
    pub rdma: bool,
}

/// Bound a received list: at most [`MAX_IFACES`] interfaces of at most [`MAX_ADDRS`] addresses, names cut
/// to [`MAX_IFNAME`] bytes with control characters replaced.
pub fn sanitize(ifaces: &mut Vec<Iface>) {
    ifaces.truncate(MAX_IFACES);
    for i in ifaces.iter_mut() {
        i.name = clean(&i.name, MAX_IFNAME);
        i.addrs.truncate(MAX_ADDRS);
    }
}

/// Protocol name carried by every frame.
pub const PROTO: &str = "ncclenv-preflight";
/// Protocol version. Bumped on any incompatible change of a message; nodes of different versions do not
/// meet (each fails open with a warning naming both versions).
pub const VERSION: u32 = 1;
/// Largest frame body in bytes (64 KiB). The largest report ([`MAX_VARS`] variables of [`MAX_VALUE`]-byte
/// names and values, [`MAX_DECIDED`] reasons of [`MAX_TEXT`] bytes, [`MAX_IFACES`] interfaces of
/// [`MAX_ADDRS`] addresses) stays under 60 KiB; a verdict names at most [`MAX_LISTED`] nodes per
/// finding.
pub const MAX_FRAME: usize = 64 * 1024;
/// Largest number of `NCCL_*` variables a node reports.
pub const MAX_VARS: usize = 64;
/// Longest variable value, host name or version reported, in bytes.
pub const MAX_VALUE: usize = 256;
/// Longest free text (a reason, a message), in bytes.
pub const MAX_TEXT: usize = 1024;
/// Most decisions (`NCCL_*` changes with their reasons) a node reports.
pub const MAX_DECIDED: usize = 16;
/// Most nodes named in one finding; the rest are counted ("and 12 more").
pub const MAX_LISTED: usize = 8;

/// One frame's content. Its protocol name, version and job key are checked after parsing, so that another
/// version or job is told apart from another server (a message of another version that does not parse as one
/// of this version's counts as another server's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Always [`PROTO`].
    pub proto: String,
    /// Always [`VERSION`] when sent by this build.
    pub v: u32,
    /// The job key ([`job_key`]): frames of another job are ignored.
    pub key: String,
    /// The message.
    pub msg: Msg,
}

/// The messages. See the module documentation for who sends which, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Msg {
    /// Master → worker, first, on accepting a connection.
    Greeting,
    /// Worker → master: who this node is.
    Hello(NodeReport),
    /// Master → worker: the node to probe (the ring successor), or `None` when there is nothing to connect
    /// to (alone, or the successor could not listen).
    Ring(Option<Target>),
    /// Worker → master: the outcome of its probe.
    ProbeResult(ProbeReport),
    /// Master → worker: the fleet's verdict, the same for every node.
    Verdict(FleetVerdict),
    /// Prober → probe port: the nonce the prober expects to find there (the target's, from the ring).
    Probe(u64),
    /// Probe port → prober: the listening node's own nonce.
    ProbeAck(u64),
    /// Master → worker, instead of the ring: this connection is not admitted to the meeting, and why (the
    /// job's nodes have all arrived). Added in ncclenv 0.2 within version 1: an older worker reads it as
    /// another server's message.
    NotAdmitted(String),
    /// Master → worker, after the probe results: measure these pairs (`super::measure`), one network after
    /// the other, then answer with [`Msg::Measured`]. Only sent when there are networks to compare (#23).
    Measure(Vec<MeasureLeg>),
    /// Worker → master: the figures of its pairs, in the order of the legs.
    Measured(Vec<Figure>),
}

/// One pair a node measures: to its ring successor on one candidate network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeasureLeg {
    /// The candidate network's index (in the master's list).
    pub net: u32,
    /// The successor's address on that network and its measurement port; `None` when it has no listener
    /// of that family.
    pub to: Option<std::net::SocketAddr>,
    /// The successor's nonce (its sink answers only that).
    pub nonce: u64,
}

/// The outcome of one pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figure {
    /// The candidate network's index.
    pub net: u32,
    /// What crossed, in kbit/s; `None` when it failed.
    pub kbps: Option<u64>,
    /// Why it failed.
    pub error: Option<String>,
}

/// The network the fleet moves to (#23): each node takes its own interface holding an address in `net`
/// (the node listed that interface in its hello), so the verdict stays one message of bounded size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetChoice {
    /// The network (`10.2.0.0/24`).
    pub net: Cidr,
    /// How it was chosen, for the plan's choice (`every pair proven: slowest 11.0 Gbit/s vs eth0
    /// 19.8 Mbit/s (…)`).
    pub how: String,
}

/// What one node tells the master about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    /// Host name (`/proc/sys/kernel/hostname`).
    pub hostname: String,
    /// The interface NCCL will bootstrap on (ncclenv's choice).
    pub ifname: String,
    /// Its address: where NCCL will listen and what the node advertises.
    pub addr: IpAddr,
    /// The address family (`NCCL_SOCKET_FAMILY`).
    pub family: Family,
    /// The interface's MTU in bytes, when known.
    pub mtu: Option<u32>,
    /// The MTUs of every network NCCL uses here (RDMA netdevs, NET/Socket interfaces), each in the wire
    /// form of `super::mtu::NetMtu::wire`. Absent from older nodes' reports.
    #[serde(default)]
    pub data_mtus: Vec<String>,
    /// The ephemeral port this node's probe listener got on `addr`; `None` when it could not listen.
    pub probe_port: Option<u16>,
    /// Why the probe listener could not listen on `addr` (the bind error), when it could not.
    pub listen_error: Option<String>,
    /// A random number identifying this run of ncclenv: a probe that reaches another listener is told apart.
    pub nonce: u64,
    /// The NCCL version the command will load (`X.Y.Z`), when exactly one is visible.
    pub nccl_version: Option<String>,
    /// ncclenv's own version.
    pub ncclenv_version: String,
    /// The `NCCL_*` variables the command will get, names and values (nothing else is ever sent).
    pub nccl_env: BTreeMap<String, String>,
    /// The `NCCL_*` variables ncclenv itself set or repaired here: name → its reason.
    pub decided: BTreeMap<String, String>,
    /// True when a vendor network profile (EFA, TCPX, …) owns NCCL's transport variables on this node.
    pub vendor_profile: bool,
    /// The node's `NCCLENV_STRICT`: the fleet is strict when any node is.
    pub strict: bool,
    /// The node's own refusal (exit 78 on its own), when it refuses.
    pub refused: Option<String>,
    /// The node's rank among the nodes, when its launcher says (`--node-rank`, `NODE_RANK`, …): with the host
    /// name and the addresses it tells a restarted ncclenv on the same node from another node. Absent in
    /// reports of older builds.
    #[serde(default)]
    pub node_rank: Option<u32>,
    /// The node's usable interfaces (the preflight's `networks::local`), for the networks every node shares.
    #[serde(default)]
    pub ifaces: Vec<Iface>,
    /// The ports of its measurement listeners (`super::measure::Sink`), IPv4 and IPv6.
    #[serde(default)]
    pub sink_ports: (Option<u16>, Option<u16>),
    /// False when the node runs with `NCCLENV_PREFLIGHT_MEASURE=0`: then nothing is measured.
    #[serde(default = "yes")]
    pub measure: bool,
    /// True when NCCL's data will go over InfiniBand/RoCE here: an ACTIVE RDMA port and IB not disabled.
    #[serde(default)]
    pub ib_usable: bool,
    /// True when ncclenv chose the interface itself (it sets `NCCL_SOCKET_IFNAME`); false when an inherited
    /// value that works is kept: then the fleet keeps it.
    #[serde(default)]
    pub own_ifname: bool,
}

fn yes() -> bool {
    true
}

impl NodeReport {
    /// Cut every string to its bound and replace control characters: run on every report before it is sent
    /// and on every report received before anything from it is logged or compared. Variables not named
    /// `NCCL_*` are dropped, as are variables past [`MAX_VARS`] and decisions past [`MAX_DECIDED`].
    pub fn sanitize(&mut self) {
        self.hostname = clean(&self.hostname, MAX_VALUE);
        self.ifname = clean(&self.ifname, MAX_VALUE);
        self.listen_error = self.listen_error.as_deref().map(|e| clean(e, MAX_TEXT));
        self.nccl_version = self.nccl_version.as_deref().map(|v| clean(v, MAX_VALUE));
        self.ncclenv_version = clean(&self.ncclenv_version, MAX_VALUE);
        // Inserted one by one: collecting into a map would add a sort to the static binary.
        let mut env = BTreeMap::new();
        for (k, v) in std::mem::take(&mut self.nccl_env)
            .into_iter()
            .filter(|(k, _)| k.starts_with("NCCL_"))
            .take(MAX_VARS)
        {
            env.insert(clean(&k, MAX_VALUE), clean(&v, MAX_VALUE));
        }
        self.nccl_env = env;
        let mut decided = BTreeMap::new();
        for (k, r) in std::mem::take(&mut self.decided)
            .into_iter()
            .take(MAX_DECIDED)
        {
            decided.insert(clean(&k, MAX_VALUE), clean(&r, MAX_TEXT));
        }
        self.decided = decided;
        self.refused = self.refused.as_deref().map(|r| clean(r, MAX_TEXT));
        sanitize(&mut self.ifaces);
    }

    /// What makes two hellos the same node: host name, advertised address and node rank (the master adds
    /// the connection's source address). A restarted ncclenv on the same node says the same.
    pub fn identity(&self) -> (String, IpAddr, Option<u32>) {
        (self.hostname.clone(), self.addr, self.node_rank)
    }

    /// `host (addr)`: how messages name a node.
    pub fn name(&self) -> String {
        format!("{} ({})", self.hostname, self.addr)
    }
}

/// A node to probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// Its index.
    pub index: u32,
    /// Its `host (addr)` name, for messages.
    pub name: String,
    /// Its bootstrap address.
    pub addr: IpAddr,
    /// Its probe port.
    pub port: u16,
    /// Its nonce.
    pub nonce: u64,
}

/// How a probe of a ring successor went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeOutcome {
    /// Connected, and the node expected answered.
    Connected,
    /// `ECONNREFUSED`: nothing listens at that address and port (or a firewall rejects).
    Refused,
    /// No answer within the probe timeout: SYNs dropped (a firewall) or sent where nobody is.
    TimedOut,
    /// `ENETUNREACH`/`EHOSTUNREACH`: no route.
    NoRoute,
    /// Something answered, but not the node expected (another node's listener, another process).
    WrongNode,
    /// The target could not listen on its bootstrap address (nothing to connect to).
    NoListener,
    /// Any other error.
    Failed,
    /// Connected (the path is open), but no answer came on any connection within the probe's time: the
    /// node's responder was busy or the link lost what was sent. Not a refusal: nothing was seen to fail.
    Unanswered,
}

/// A worker's (or the master's own) probe result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// Index of the node probed.
    pub target: u32,
    /// What happened.
    pub outcome: ProbeOutcome,
    /// The kernel's error text, for `NoRoute` and `Failed`.
    pub error: Option<String>,
    /// How long it took, in milliseconds.
    pub ms: u32,
}

/// The fleet's verdict, sent by the master to every node and applied by each the same way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetVerdict {
    /// Nodes that met (and reported their probe).
    pub present: u32,
    /// Nodes the job has (`--nnodes`).
    pub expected: u32,
    /// `None`: proceed; else the refusal every node prints: the refusing finding's code, the reason
    /// (`message`) and what to do (`remedy`).
    pub refuse: Option<Note>,
    /// Variables every node sets (a repair of a difference).
    pub repairs: Vec<FleetRepair>,
    /// Findings every node logs.
    pub findings: Vec<Note>,
    /// The network every node moves to, when a measured one won (#23); `None`: the choice stays.
    #[serde(default)]
    pub network: Option<NetChoice>,
}

/// One variable every node sets, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetRepair {
    /// The variable, e.g. `NCCL_IB_DISABLE`.
    pub name: String,
    /// Its value on every node.
    pub value: String,
    /// Why, naming the nodes that differed.
    pub reason: String,
}

/// Cut `s` to at most `max` bytes (on a character boundary) and replace control characters (newlines, ESC)
/// with `?`, so that text from another node cannot forge log lines or colour a terminal.
pub fn clean(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max));
    for c in s.chars() {
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(if c.is_control() { '?' } else { c });
    }
    out
}

/// [`clean`] every text of a verdict received from the master.
pub fn sanitize_verdict(v: &mut FleetVerdict) {
    if let Some(r) = &mut v.refuse {
        r.code = clean(&r.code, MAX_VALUE);
        r.message = clean(&r.message, MAX_TEXT * 2);
        r.remedy = clean(&r.remedy, MAX_TEXT);
    }
    v.repairs.truncate(MAX_VARS);
    for r in &mut v.repairs {
        r.name = clean(&r.name, MAX_VALUE);
        r.value = clean(&r.value, MAX_VALUE);
        r.reason = clean(&r.reason, MAX_TEXT * 2);
    }
    if let Some(n) = &mut v.network {
        n.how = clean(&n.how, MAX_TEXT);
    }
    v.findings.truncate(MAX_VARS);
    for w in &mut v.findings {
        w.code = clean(&w.code, MAX_VALUE);
        w.message = clean(&w.message, MAX_TEXT * 2);
        w.remedy = clean(&w.remedy, MAX_TEXT);
    }
}

/// The job key: `PLACE-N`, 16 hex digits of FNV-1a (64-bit) over the protocol and the master's endpoint as the
/// nodes reach it (the resolved address and the port, `10.0.0.1:29500`, `[fd00::1]:29500`, so that
/// `localhost`, `127.0.0.1` and the address written on different nodes meet; see `preflight::setup` for the
/// master's own side), then `-` and the node count (`3f2a…-3`). Not a secret: it keeps a stray connection from
/// another job out of this meeting, and tells a node of this job started with another node count (the same
/// place, another count: [`DecodeError::OtherShape`]) from another job.
pub fn job_key(master: std::net::SocketAddr, nnodes: u32) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("{PROTO}/{VERSION}|{master}").bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}-{nnodes}")
}

/// The place (the master endpoint's hash) and the node count of a job key; `None` for a key of another form.
pub fn key_parts(key: &str) -> Option<(&str, u32)> {
    let (place, n) = key.split_once('-')?;
    Some((place, n.parse().ok()?))
}

/// Why a frame was not a message of this meeting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Not this protocol (another server answered: the launcher's store, an HTTP server), or a message this
    /// build cannot read.
    NotPreflight,
    /// This protocol, another version (the version seen).
    Version(u32),
    /// This protocol and version, another job's key.
    ForeignJob,
    /// This protocol, version and master endpoint, another node count: a node of this job started with
    /// another `--nnodes` (its count, and its whole key).
    OtherShape {
        /// The node count the sender says the job has.
        nnodes: u32,
        /// The sender's job key (cut to [`MAX_VALUE`] bytes), to read what it sends next.
        key: String,
    },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::NotPreflight => write!(f, "not an ncclenv preflight message"),
            DecodeError::Version(v) => {
                write!(
                    f,
                    "preflight protocol version {v} (this ncclenv speaks {VERSION})"
                )
            }
            DecodeError::ForeignJob => write!(
                f,
                "a preflight of another master endpoint (the job key differs: another job on this port, or this \
                 job's master address resolving differently there)"
            ),
            DecodeError::OtherShape { nnodes, .. } => write!(
                f,
                "a preflight of this job's master endpoint with another node count ({nnodes} nodes)"
            ),
        }
    }
}

/// The envelope as sent: borrowed, so that encoding clones nothing.
#[derive(Serialize)]
struct EnvelopeRef<'a> {
    proto: &'a str,
    v: u32,
    key: &'a str,
    msg: &'a Msg,
}

/// One frame: the length prefix and the JSON of the envelope. A verdict is encoded once and the same bytes
/// are written to every node.
pub fn encode(key: &str, msg: &Msg) -> Vec<u8> {
    let env = EnvelopeRef {
        proto: PROTO,
        v: VERSION,
        key,
        msg,
    };
    // Serialising plain data to a Vec cannot fail; an empty body would be rejected by the peer.
    let body = serde_json::to_vec(&env).unwrap_or_default();
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Decode one frame body (without its length prefix) of the meeting with job key `key`.
pub fn decode(body: &[u8], key: &str) -> Result<Msg, DecodeError> {
    // Not a message this build can read: another server answered, or another version whose messages differ.
    let env: Envelope = serde_json::from_slice(body).map_err(|_| DecodeError::NotPreflight)?;
    if env.proto != PROTO {
        return Err(DecodeError::NotPreflight);
    }
    if env.v != VERSION {
        return Err(DecodeError::Version(env.v));
    }
    if env.key != key {
        return Err(match (key_parts(&env.key), key_parts(key)) {
            (Some((place, nnodes)), Some((ours, _))) if place == ours => DecodeError::OtherShape {
                nnodes,
                key: clean(&env.key, MAX_VALUE),
            },
            _ => DecodeError::ForeignJob,
        });
    }
    Ok(env.msg)
}

/// Decode one frame body of this job's master endpoint, whatever node count its sender has: the message and,
/// when the sender's count differs from `key`'s, that count. Other jobs, versions and protocols are errors as
/// for [`decode`].
pub fn decode_any(body: &[u8], key: &str) -> Result<(Msg, Option<u32>), DecodeError> {
    match decode(body, key) {
        Ok(m) => Ok((m, None)),
        Err(DecodeError::OtherShape { nnodes, key }) => {
            decode(body, &key).map(|m| (m, Some(nnodes)))
        }
        Err(e) => Err(e),
    }
}

/// Bytes received on one connection, cut into frames.
#[derive(Debug, Default)]
pub struct FrameBuf {
    buf: Vec<u8>,
}

impl FrameBuf {
    /// Append bytes read from the socket.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete frame body, `Ok(None)` when more bytes are needed, or
    /// [`DecodeError::NotPreflight`] when the length prefix announces more than [`MAX_FRAME`] bytes (or
    /// zero): nothing of this protocol is that large, so the peer is something else.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, DecodeError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len == 0 || len > MAX_FRAME {
            return Err(DecodeError::NotPreflight);
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let body = self.buf[4..4 + len].to_vec();
        self.buf.drain(..4 + len);
        Ok(Some(body))
    }

    /// Bytes buffered and not yet returned as a frame.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Severity;

    fn report() -> NodeReport {
        NodeReport {
            hostname: "node-a".into(),
            ifname: "eth0".into(),
            addr: "10.0.0.1".parse().expect("ip"),
            family: Family::Inet,
            mtu: Some(1500),
            data_mtus: Vec::new(),
            probe_port: Some(40000),
            listen_error: None,
            nonce: u64::MAX - 3,
            nccl_version: Some("2.21.5".into()),
            ncclenv_version: "0.1.0".into(),
            nccl_env: [("NCCL_SOCKET_IFNAME".to_string(), "eth0".to_string())].into(),
            decided: [("NCCL_IB_DISABLE".to_string(), "no RDMA device".to_string())].into(),
            vendor_profile: false,
            strict: false,
            refused: None,
            node_rank: Some(1),
            ifaces: vec![super::Iface {
                name: "ens5".into(),
                addrs: vec![super::Cidr {
                    addr: "10.2.0.1".parse().expect("ip"),
                    prefix: 24,
                }],
                mtu: Some(9000),
                speed_mbps: Some(25_000),
                rdma: false,
            }],
            sink_ports: (Some(40001), None),
            measure: true,
            ib_usable: false,
            own_ifname: true,
        }
    }

    fn roundtrip(msg: Msg) {
        let f = encode("k", &msg);
        let mut b = FrameBuf::default();
        // Byte by byte: a frame is only returned once complete.
        for (i, byte) in f.iter().enumerate() {
            b.push(&[*byte]);
            let got = b.next_frame().expect("frame");
            if i + 1 < f.len() {
                assert!(got.is_none());
            } else {
                let body = got.expect("complete frame");
                assert_eq!(decode(&body, "k"), Ok(msg.clone()));
            }
        }
        assert_eq!(b.pending(), 0);
    }

    #[test]
    fn every_message_round_trips() {
        roundtrip(Msg::Greeting);
        roundtrip(Msg::Hello(report()));
        roundtrip(Msg::Ring(Some(Target {
            index: 0,
            name: "a (10.0.0.1)".into(),
            addr: "fd00::1".parse().expect("ip"),
            port: 1,
            nonce: 7,
        })));
        roundtrip(Msg::Ring(None));
        roundtrip(Msg::ProbeResult(ProbeReport {
            target: 1,
            outcome: ProbeOutcome::NoRoute,
            error: Some("No route to host".into()),
            ms: 3,
        }));
        roundtrip(Msg::Verdict(FleetVerdict {
            present: 2,
            expected: 3,
            refuse: Some(Note {
                code: "preflight-unreachable".into(),
                severity: Severity::Warn,
                message: "r".into(),
                remedy: "m".into(),
                strict_refuses: false,
            }),
            repairs: vec![FleetRepair {
                name: "NCCL_IB_DISABLE".into(),
                value: "1".into(),
                reason: "why".into(),
            }],
            findings: vec![Note {
                code: "preflight-absent".into(),
                severity: Severity::Warn,
                message: "m".into(),
                remedy: "r".into(),
                strict_refuses: true,
            }],
            network: Some(NetChoice {
                net: super::Cidr {
                    addr: "10.2.0.0".parse().expect("ip"),
                    prefix: 24,
                },
                how: "fastest".into(),
            }),
        }));
        roundtrip(Msg::Measure(vec![MeasureLeg {
            net: 1,
            to: Some("10.2.0.2:4000".parse().expect("sa")),
            nonce: 9,
        }]));
        roundtrip(Msg::Measured(vec![Figure {
            net: 1,
            kbps: Some(11_000_000),
            error: None,
        }]));
        roundtrip(Msg::Probe(u64::MAX));
        roundtrip(Msg::ProbeAck(0));
        roundtrip(Msg::NotAdmitted("full".into()));
    }

    #[test]
    fn other_jobs_versions_and_protocols_are_told_apart() {
        let f = encode("k1", &Msg::Greeting);
        assert_eq!(decode(&f[4..], "k2"), Err(DecodeError::ForeignJob));
        // The same master endpoint with another node count: this job's node, misconfigured.
        let sa = "10.0.0.1:29500".parse().expect("sa");
        let (k3, k4) = (job_key(sa, 3), job_key(sa, 4));
        let f = encode(&k4, &Msg::Greeting);
        assert_eq!(
            decode(&f[4..], &k3),
            Err(DecodeError::OtherShape {
                nnodes: 4,
                key: k4.clone()
            })
        );
        assert_eq!(decode_any(&f[4..], &k3), Ok((Msg::Greeting, Some(4))));
        assert_eq!(decode_any(&f[4..], &k4), Ok((Msg::Greeting, None)));
        let other = job_key("10.0.0.2:29500".parse().expect("sa"), 4);
        assert_eq!(decode_any(&f[4..], &other), Err(DecodeError::ForeignJob));
        let v2 = br#"{"proto":"ncclenv-preflight","v":2,"key":"k","msg":"greeting"}"#;
        assert_eq!(decode(v2, "k"), Err(DecodeError::Version(2)));
        assert_eq!(
            decode(b"HTTP/1.1 400 Bad", "k"),
            Err(DecodeError::NotPreflight)
        );
        let other = br#"{"proto":"x","v":1,"key":"k","msg":"greeting"}"#;
        assert_eq!(decode(other, "k"), Err(DecodeError::NotPreflight));
        let bad = br#"{"proto":"ncclenv-preflight","v":1,"key":"k","msg":"launch"}"#;
        assert_eq!(decode(bad, "k"), Err(DecodeError::NotPreflight));
        // Unknown extra fields are ignored (a compatible addition).
        let extra = br#"{"proto":"ncclenv-preflight","v":1,"key":"k","msg":"greeting","more":1}"#;
        assert_eq!(decode(extra, "k"), Ok(Msg::Greeting));
    }

    #[test]
    fn frames_are_bounded() {
        let mut b = FrameBuf::default();
        b.push(&((MAX_FRAME as u32) + 1).to_be_bytes());
        assert_eq!(b.next_frame(), Err(DecodeError::NotPreflight));
        // An SSH banner or an HTTP reply reads as a huge length.
        let mut b = FrameBuf::default();
        b.push(b"SSH-2.0-OpenSSH");
        assert_eq!(b.next_frame(), Err(DecodeError::NotPreflight));
        let mut b = FrameBuf::default();
        b.push(&[0, 0, 0, 0]);
        assert_eq!(b.next_frame(), Err(DecodeError::NotPreflight));
        // The largest report fits in one frame.
        let mut r = report();
        r.hostname = "h".repeat(MAX_VALUE);
        r.nccl_env = (0..MAX_VARS)
            .map(|i| (format!("NCCL_{i:0>250}"), "v".repeat(MAX_VALUE)))
            .collect();
        r.decided = (0..MAX_VARS)
            .map(|i| (format!("NCCL_{i}"), "r".repeat(MAX_TEXT)))
            .collect();
        let v6: std::net::IpAddr = "fd00:1234:5678:9abc:def0:1234:5678:9abc"
            .parse()
            .expect("ip");
        r.ifaces = (0..super::MAX_IFACES * 2)
            .map(|i| super::Iface {
                name: format!("{i:x>40}"),
                addrs: vec![
                    super::Cidr {
                        addr: v6,
                        prefix: 128
                    };
                    9
                ],
                mtu: Some(u32::MAX),
                speed_mbps: Some(u64::MAX),
                rdma: true,
            })
            .collect();
        r.sanitize();
        assert!(encode("k", &Msg::Hello(r)).len() <= MAX_FRAME + 4);
    }

    #[test]
    fn sanitize_keeps_only_nccl_variables_and_clean_text() {
        let mut r = report();
        r.nccl_env
            .insert("AWS_SECRET_ACCESS_KEY".into(), "s".into());
        r.nccl_env
            .insert("NCCL_DEBUG".into(), "INFO\n\x1b[31mfake".into());
        r.hostname = "a\nncclenv: refused".into();
        r.sanitize();
        assert!(!r.nccl_env.contains_key("AWS_SECRET_ACCESS_KEY"));
        assert_eq!(r.nccl_env["NCCL_DEBUG"], "INFO??[31mfake");
        assert_eq!(r.hostname, "a?ncclenv: refused");
        assert_eq!(clean("héllo", 2), "h");
        assert_eq!(clean("héllo", 3), "hé");
    }

    #[test]
    fn job_key_depends_on_master_port_and_count() {
        let sa = |s: &str| s.parse::<std::net::SocketAddr>().expect("sa");
        let k = job_key(sa("10.0.0.1:29500"), 3);
        assert_eq!(k.len(), 18);
        assert_eq!(
            key_parts(&k).map(|(p, n)| (p.len(), n)),
            Some((16, 3)),
            "{k}"
        );
        assert_eq!(k, job_key(sa("10.0.0.1:29500"), 3));
        assert_ne!(k, job_key(sa("10.0.0.2:29500"), 3));
        assert_ne!(k, job_key(sa("10.0.0.1:29501"), 3));
        assert_ne!(k, job_key(sa("10.0.0.1:29500"), 4));
    }
}
