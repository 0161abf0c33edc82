//! The master's side: listen on the master port, meet the nodes, assign the ring, collect the probe results,
//! agree ([`super::agree::agree`]), send the verdict, and close after the workers.
//!
//! One thread and one `epoll` set: the master's work per node is O(1) (an accept, five small frames, one
//! report parsed) and it never waits on one node while others are ready. The master port's listener is
//! closed as soon as the meeting is over, and every connection is closed after its worker closed, with
//! `SO_LINGER` 0 ([`super::net::close_after_peer`]): when the command starts, nothing of the preflight
//! holds the master port.

use super::agree::{agree, ring_target, Heard, Meeting, Member, Misfit};
use super::net::{self, close_after_peer, drain, send, send_frame, slice_ms};
use super::protocol::{DecodeError, FleetVerdict, FrameBuf, Msg, NodeReport, ProbeReport, Target};
use super::Setup;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Epoll tag of the listener (connections are tagged with their index).
const LISTENER: u64 = u64::MAX;
/// Most connections kept at once that have not said hello yet (strays, scanners, health checks, retries);
/// a new one beyond it pushes out the oldest, so that strangers never keep a node out.
const MAX_PENDING: usize = 64;
/// How long a connection may take, after the greeting, to send a whole, valid hello before it is closed
/// and forgotten: a node answers the greeting at once (one round trip).
const HELLO_BOUND: Duration = Duration::from_secs(1);
/// How long a connection whose greeting is still unacknowledged (a lossy link: TCP is retransmitting it)
/// may wait for its hello.
const HELLO_BOUND_UNACKED: Duration = Duration::from_secs(5);
/// How long a write to one worker may take.
const WRITE_BOUND: Duration = Duration::from_secs(2);
/// How long the master waits, after sending the verdict, for the workers to close first.
const CLOSE_BOUND: Duration = Duration::from_secs(2);

/// How the master's side ended.
#[derive(Debug)]
pub enum MasterOutcome {
    /// The meeting was held: its verdict.
    Verdict(MasterEnd),
    /// The master endpoint leads to another node's preflight master: this node is not the master and joins
    /// that meeting as a worker (why, in words).
    Yield(String),
}

/// What the master ends with.
#[derive(Debug)]
pub struct MasterEnd {
    /// The verdict every node got.
    pub verdict: FleetVerdict,
    /// From the last node's arrival (or the deadline) to the last verdict sent.
    pub after_last: Duration,
    /// Every node met (the meeting ended at the last arrival); false: it ended at its deadline, and
    /// [`MasterEnd::after_last`] counts from there.
    pub complete: bool,
}

impl MasterEnd {
    /// `12.3 ms after the last arrival`, or `… after the meeting's deadline` when not every node met.
    pub fn after_words(&self) -> String {
        let from = if self.complete {
            "the last arrival"
        } else {
            "the meeting's deadline"
        };
        format!("{:.1} ms after {from}", self.after_last.as_secs_f64() * 1e3)
    }
}

/// One connection on the master port.
struct Conn {
    stream: TcpStream,
    buf: FrameBuf,
    from: IpAddr,
    /// Index in the members, once it said Hello.
    member: Option<usize>,
    /// When it was accepted (its hello is due [`HELLO_BOUND`] later).
    since: Instant,
    /// Told it is not admitted ([`Msg::NotAdmitted`]): it is waited for to close, nothing more.
    leaving: bool,
    /// A node of this job's master endpoint that says another node count: held for the verdict, not in the
    /// ring.
    misfit: bool,
}

impl Conn {
    /// Neither a member, a misfit nor leaving: a connection that has not said who it is.
    fn pending(&self) -> bool {
        self.member.is_none() && !self.leaving && !self.misfit
    }
}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// It closed (or reset) the connection.
    Closed,
    /// It sent something that is not this protocol (or too much).
    Garbage,
    /// A message of this protocol for another job (another key) or version.
    Foreign,
}

/// What one wait produced. Any message but these ends the connection (`Gone`).
enum Event {
    Accepted(TcpStream, IpAddr),
    Hello(usize, Box<NodeReport>),
    /// A hello from a node of this master endpoint that says the job has another node count.
    Misfit(usize, Box<NodeReport>, u32),
    Probe(usize, ProbeReport),
    /// A worker's measured figures ([`Msg::Measured`]).
    Measured(usize, Vec<super::protocol::Figure>),
    /// A challenge (`Probe`) on the master port: a master's check of where the master endpoint leads
    /// ([`super::endpoint`]); answered with this master's nonce.
    Challenge(usize),
    Gone(usize, Why),
}

/// Connections on the master port that were not nodes of this job, counted for one log line.
#[derive(Debug, Default)]
struct Strangers {
    /// Said nothing valid within [`HELLO_BOUND`] (idle, slow, banner grabbers).
    silent: u32,
    /// Closed before saying hello.
    closed: u32,
    /// Sent something that is not the preflight.
    garbage: u32,
    /// A preflight of another job or version.
    foreign: u32,
    /// Pushed out by newer connections while [`MAX_PENDING`] waited.
    evicted: u32,
    /// Still without a hello when the meeting ended.
    cut: u32,
}

impl Strangers {
    fn total(&self) -> u32 {
        self.silent + self.closed + self.garbage + self.foreign + self.evicted + self.cut
    }

    fn count(&mut self, why: Why) {
        match why {
            Why::Closed => self.closed += 1,
            Why::Garbage => self.garbage += 1,
            Why::Foreign => self.foreign += 1,
        }
    }

    /// What the meeting's verdict says of them ([`Heard`]): connections that never sent a whole hello (silent,
    /// closed, pushed out, cut at the end: a stranger, or a node whose hello a lossy link held back) and
    /// another master endpoint's or version's preflight; those that spoke another protocol are no node.
    fn heard(&self, left: Vec<String>) -> Heard {
        Heard {
            left,
            unheard: self.silent + self.closed + self.evicted + self.cut,
            foreign: self.foreign,
        }
    }

    /// The one line that counts them, or `None` when there were none.
    fn line(&self) -> Option<String> {
        if self.total() == 0 {
            return None;
        }
        let parts: Vec<String> = [
            (
                self.silent,
                "sent no hello in time (1 s; 5 s while TCP retransmitted the greeting)",
            ),
            (self.closed, "closed before a hello"),
            (self.garbage, "spoke another protocol"),
            (
                self.foreign,
                "spoke the preflight of another master endpoint or version (another job on this port, or this \
                 job's master address resolving differently on that node)",
            ),
            (self.evicted, "were pushed out by newer connections"),
            (self.cut, "had said nothing yet when the meeting ended"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, w)| format!("{n} {w}"))
        .collect();
        Some(format!(
            "preflight: {} connection(s) to the master port were not nodes of this job and were closed ({}); they \
             do not count",
            self.total(),
            parts.join(", ")
        ))
    }
}

struct Hub {
    epoll: Epoll,
    conns: Vec<Option<Conn>>,
    /// Slots of `conns` free for reuse, so that churning strangers do not grow it.
    free: Vec<usize>,
}

impl Hub {
    fn add(&mut self, stream: TcpStream, from: IpAddr) -> Option<usize> {
        let id = self.free.pop().unwrap_or(self.conns.len());
        if let Err(_e) = self
            .epoll
            .add(&stream, EpollEvent::new(EpollFlags::EPOLLIN, id as u64))
        {
            if id < self.conns.len() {
                self.free.push(id);
            }
            return None;
        }
        let c = Some(Conn {
            stream,
            buf: FrameBuf::default(),
            from,
            member: None,
            since: Instant::now(),
            leaving: false,
            misfit: false,
        });
        if id == self.conns.len() {
            self.conns.push(c);
        } else {
            self.conns[id] = c;
        }
        Some(id)
    }

    fn take(&mut self, id: usize) -> Option<Conn> {
        let c = self.conns.get_mut(id)?.take()?;
        let _ = self.epoll.delete(&c.stream);
        self.free.push(id);
        Some(c)
    }

    fn live(&self) -> usize {
        self.conns.iter().filter(|c| c.is_some()).count()
    }

    fn pending(&self) -> impl Iterator<Item = (usize, &Conn)> {
        self.conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().filter(|c| c.pending()).map(|c| (i, c)))
    }

    /// When the next pending connection's hello is due (or `None`).
    fn next_due(&self) -> Option<Instant> {
        self.pending().map(|(_, c)| c.since + HELLO_BOUND).min()
    }

    /// Close the pending connections whose hello is overdue (those whose greeting TCP is still
    /// retransmitting get up to [`HELLO_BOUND_UNACKED`]); returns how many.
    fn expire(&mut self, now: Instant) -> u32 {
        let overdue: Vec<usize> = self
            .pending()
            .filter(|(_, c)| {
                let age = now.saturating_duration_since(c.since);
                age >= HELLO_BOUND && (age >= HELLO_BOUND_UNACKED || !net::unacked(&c.stream))
            })
            .map(|(i, _)| i)
            .collect();
        for &id in &overdue {
            if let Some(c) = self.take(id) {
                close_after_peer(c.stream);
            }
        }
        overdue.len() as u32
    }

    /// Make room for one more pending connection: push out the oldest when [`MAX_PENDING`] wait. True when
    /// one was pushed out.
    fn make_room(&mut self) -> bool {
        if self.pending().count() < MAX_PENDING {
            return false;
        }
        let oldest = self.pending().min_by_key(|(_, c)| c.since).map(|(i, _)| i);
        match oldest.and_then(|id| self.take(id)) {
            Some(c) => {
                close_after_peer(c.stream);
                true
            }
            None => false,
        }
    }

    /// Wait one slice (≤ 1 s, ≤ `deadline`) and return what happened: new connections on `listener`,
    /// messages, and connections that closed or sent something that is not a message of this meeting.
    fn wait(&mut self, listener: Option<&TcpListener>, key: &str, deadline: Instant) -> Vec<Event> {
        let mut ready = [EpollEvent::empty(); 64];
        let ready_count = match self.epoll.wait(&mut ready, slice_ms(deadline)) {
            Ok(ready_count) => ready_count,
            Err(_) => return Vec::new(),
        };
        let mut out = Vec::new();
        for ev in &ready[..ready_count] {
            if ev.data() == LISTENER {
                if let Some(l) = listener {
                    while let Ok((s, from)) = l.accept() {
                        out.push(Event::Accepted(s, from.ip().to_canonical()));
                    }
                }
                continue;
            }
            let id = ev.data() as usize;
            let Some(Some(c)) = self.conns.get_mut(id) else {
                continue;
            };
            let eof = drain(&mut c.stream, &mut c.buf);
            loop {
                match c.buf.next_frame() {
                    Ok(Some(body)) => match super::protocol::decode_any(&body, key) {
                        Ok((Msg::Hello(r), None)) => out.push(Event::Hello(id, Box::new(r))),
                        Ok((Msg::Hello(r), Some(ready_count))) => {
                            out.push(Event::Misfit(id, Box::new(r), ready_count))
                        }
                        Ok((Msg::ProbeResult(p), None)) => out.push(Event::Probe(id, p)),
                        Ok((Msg::Measured(f), None)) => out.push(Event::Measured(id, f)),
                        Ok((Msg::Probe(_), _)) => out.push(Event::Challenge(id)),
                        Ok(_) | Err(DecodeError::NotPreflight) => {
                            out.push(Event::Gone(id, Why::Garbage));
                            break;
                        }
                        Err(_) => {
                            out.push(Event::Gone(id, Why::Foreign));
                            break;
                        }
                    },
                    Ok(None) => {
                        if !matches!(eof, Ok(false)) {
                            out.push(Event::Gone(id, Why::Closed));
                        }
                        break;
                    }
                    Err(_) => {
                        out.push(Event::Gone(id, Why::Garbage));
                        break;
                    }
                }
            }
        }
        out
    }
}

/// The meeting so far: the members (the master first) and the connection of each (`None` for the master,
/// and for a member whose connection closed: it no longer counts).
struct Roll {
    members: Vec<Member>,
    conn_of: Vec<Option<usize>>,
    /// Identity of each member ([`NodeReport::identity`] and the connection's source address).
    ids: Vec<(String, IpAddr, Option<u32>, Option<IpAddr>)>,
    last_arrival: Instant,
    strangers: Strangers,
    /// Nodes of this master endpoint that say another node count, with their connection.
    misfits: Vec<(Misfit, usize)>,
    /// What the checks of the master endpoint found ([`super::endpoint`]; only a master on the wildcard
    /// address checks): reached here at least once, and the last failure.
    reached_here: bool,
    nowhere: Option<String>,
    /// How each member whose connection ended before the meeting did left (`connection closed`), by member
    /// index; a hello from it again takes it out.
    left_how: std::collections::BTreeMap<usize, &'static str>,
}

impl Roll {
    /// The meeting at its start: the master `me` alone, since `started`.
    fn new(me: NodeReport, started: Instant) -> Roll {
        let id = me.identity();
        Roll {
            members: vec![Member {
                report: me,
                seen_from: None,
                probe: None,
            }],
            conn_of: vec![None],
            ids: vec![(id.0, id.1, id.2, None)],
            last_arrival: started,
            strangers: Strangers::default(),
            misfits: Vec::new(),
            reached_here: false,
            nowhere: None,
            left_how: Default::default(),
        }
    }

    /// Members that count: the master and those whose connection is open.
    fn present(&self) -> usize {
        1 + self.conn_of.iter().skip(1).filter(|c| c.is_some()).count()
    }

    /// The meeting is complete: every node of the job is present, or, when some nodes say another node
    /// count, the nodes present and those reach the smallest count any of them says (nobody else is
    /// awaited by all).
    fn complete(&self, expected: usize) -> bool {
        let least = self
            .misfits
            .iter()
            .map(|(m, _)| m.nnodes as usize)
            .fold(expected, usize::min);
        self.present() + self.misfits.len() >= least
    }
}

/// Run the master's side of the meeting described by `setup`, with this node's own report `me` (its nonce and
/// probe port already in it). Waits for the other nodes until `deadline`, probes its own ring successor
/// within `probe_timeout`. `Err` (with the reason) only when the master port cannot be listened on: the
/// caller fails open.
pub fn run(
    setup: &Setup,
    me: NodeReport,
    deadline: Instant,
    probe_timeout: Duration,
) -> Result<MasterOutcome, String> {
    let started = Instant::now();
    let expected = setup.nnodes as usize;
    let _nofile = NofileRaise::to(expected + MAX_PENDING + 64);
    let (listener, mut hub) = open(setup)?;
    super::log(format!(
        "preflight: node 1/{expected} {} {} ({}) NCCL {} [master, listening on {} for {} more node(s), up to {} s]",
        me.hostname,
        me.addr,
        me.ifname,
        me.nccl_version.as_deref().unwrap_or("unknown"),
        setup.listen,
        expected.saturating_sub(1),
        setup.timeout_s
    ));
    let mut roll = Roll::new(me, started);

    // 1. Meet; a master on the wildcard address checks where the master endpoint leads.
    let check = setup
        .listen
        .ip()
        .is_unspecified()
        .then(|| {
            super::endpoint::Check::start(setup.master, &setup.key, roll.members[0].report.nonce)
        })
        .flatten();
    let other = meet(
        setup,
        &mut hub,
        &listener,
        &mut roll,
        started,
        deadline,
        check.as_ref(),
    );
    if let Some(c) = check {
        c.stop();
    }
    // The master port is free from here on: nothing more is accepted.
    drop(listener);
    if let Some(why) = other {
        for id in 0..hub.conns.len() {
            if let Some(c) = hub.take(id) {
                close_after_peer(c.stream);
            }
        }
        return Ok(MasterOutcome::Yield(why));
    }
    let complete = roll.complete(expected);
    let end_of_meeting = if complete {
        roll.last_arrival
    } else {
        Instant::now()
    };
    close_strangers(&mut hub, &mut roll);
    let mut met = settle(setup, &mut hub, roll);

    // 2. The ring: each node probes its successor; 3. collect the probe results.
    let mut lost = assign_ring(setup, &mut hub, &mut met, probe_timeout);
    collect_probes(setup, &mut hub, &mut met, &mut lost, probe_timeout);
    let n = met.members.len();
    // 3b. The networks every node shares: measured when there is a choice to make (#23).
    let (cands, measured, skipped) = measure_networks(setup, &mut hub, &met, &lost);

    // 4. Agree and tell everyone; 5. close.
    let mut verdict = agree(&Meeting {
        expected: expected as u32,
        members: met.members.clone(),
        lost: (0..n).filter(|&k| lost[k]).collect(),
        waited_s: setup.timeout_s,
        misfits: met.misfits,
        not_reached: met.not_reached,
        heard: met.heard,
    });
    super::networks::conclude(&mut verdict, &met.members, cands, measured, skipped);
    deliver(setup, &mut hub, &verdict);
    let after_last = end_of_meeting.elapsed();
    close_all(setup, &mut hub);
    Ok(MasterOutcome::Verdict(MasterEnd {
        verdict,
        after_last,
        complete,
    }))
}

/// Listen on the master port and make the epoll set with the listener in it; `Err` with the reason.
fn open(setup: &Setup) -> Result<(TcpListener, Hub), String> {
    let failed = |e: &dyn std::fmt::Display| {
        format!("cannot listen on the master port {}: {e}", setup.listen)
    };
    let listener = net::listen(setup.listen).map_err(|e| failed(&e))?;
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|e| failed(&e))?;
    epoll
        .add(&listener, EpollEvent::new(EpollFlags::EPOLLIN, LISTENER))
        .map_err(|e| failed(&e))?;
    let hub = Hub {
        epoll,
        conns: Vec::new(),
        free: Vec::new(),
    };
    Ok((listener, hub))
}

/// The meeting's nodes once it is over: the members still present (the master first), the connection of
/// each, the nodes that say another node count, and, when nobody came and the master endpoint never led
/// here, that in words.
struct Met {
    members: Vec<Member>,
    conn_of: Vec<Option<usize>>,
    misfits: Vec<Misfit>,
    not_reached: Option<String>,
    heard: Heard,
}

/// Connections that never said who they are leave now (counted as strangers, in one line); those told they
/// are not admitted keep their message (closed after it is acknowledged).
fn close_strangers(hub: &mut Hub, roll: &mut Roll) {
    for id in 0..hub.conns.len() {
        let Some(c) = hub.conns[id].as_ref() else {
            continue;
        };
        if c.member.is_some() || c.misfit {
            continue;
        }
        let pending = c.pending();
        if let Some(c) = hub.take(id) {
            if pending {
                roll.strangers.cut += 1;
            }
            close_when_delivered(c.stream);
        }
    }
    if let Some(line) = roll.strangers.line() {
        super::log(line);
    }
}

/// The nodes that stay for the ring: members that left before it was drawn are not in it; each
/// connection learns its member's new index.
fn settle(setup: &Setup, hub: &mut Hub, roll: Roll) -> Met {
    let mut members = Vec::new();
    let mut conn_of = Vec::new();
    // Members whose connection closed and that did not say hello again: they said hello and left.
    let mut left = Vec::new();
    for (k, m) in roll.members.into_iter().enumerate() {
        if k == 0 || roll.conn_of[k].is_some() {
            members.push(m);
            conn_of.push(roll.conn_of[k]);
        } else {
            let how = roll
                .left_how
                .get(&k)
                .copied()
                .unwrap_or("connection closed");
            left.push(format!("{} ({how})", m.report.name()));
        }
    }
    let heard = roll.strangers.heard(left);
    let misfits: Vec<Misfit> = roll.misfits.into_iter().map(|(m, _)| m).collect();
    // Nobody came, and the master endpoint never led here: say so (the others cannot reach it either).
    let not_reached = roll
        .nowhere
        .filter(|_| !roll.reached_here && members.len() == 1 && misfits.is_empty())
        .map(|why| {
            format!(
                "node {} listens as the master ({}), but its own connection to the master endpoint {} did not \
                 reach it ({why})",
                members[0].report.name(),
                setup.role_reason,
                setup.master
            )
        });
    for (k, id) in conn_of.iter().enumerate() {
        if let Some(Some(c)) = id.and_then(|id| hub.conns.get_mut(id)) {
            c.member = Some(k);
        }
    }
    Met {
        members,
        conn_of,
        misfits,
        not_reached,
        heard,
    }
}

/// Member `j` as a probe target, or `None` when it could not listen.
fn target_of(members: &[Member], j: usize) -> Option<Target> {
    let r = &members[j].report;
    r.probe_port.map(|port| Target {
        index: j as u32,
        name: r.name(),
        addr: r.addr,
        port,
        nonce: r.nonce,
    })
}

/// The outcome of probing a target that cannot listen: known without a connection.
fn no_listener(j: usize) -> ProbeReport {
    ProbeReport {
        target: j as u32,
        outcome: super::protocol::ProbeOutcome::NoListener,
        error: None,
        ms: 0,
    }
}

/// Send every worker its ring successor, then probe the master's own (while the workers' run: their results
/// wait in the socket buffers). Returns, by member index, those lost (the ring could not be sent).
fn assign_ring(setup: &Setup, hub: &mut Hub, met: &mut Met, probe_timeout: Duration) -> Vec<bool> {
    let member_count = met.members.len();
    let mut lost = vec![false; member_count];
    let mut known: Vec<(usize, ProbeReport)> = Vec::new();
    for (k, id) in met.conn_of.iter().enumerate().skip(1) {
        let Some(id) = *id else { continue };
        let j = ring_target(k, member_count);
        let t = j.and_then(|j| target_of(&met.members, j));
        if let (Some(j), None) = (j, &t) {
            known.push((k, no_listener(j)));
        }
        let msg = Msg::Ring(t);
        let ok = match hub.conns.get_mut(id) {
            Some(Some(c)) => send(
                &mut c.stream,
                &setup.key,
                &msg,
                Instant::now() + WRITE_BOUND,
            )
            .is_ok(),
            _ => false,
        };
        if !ok {
            lost[k] = true;
        }
    }
    met.members[0].probe = ring_target(0, member_count).map(|j| match target_of(&met.members, j) {
        Some(t) => net::probe(&t, &setup.key, probe_timeout),
        None => no_listener(j),
    });
    for (k, p) in known {
        met.members[k].probe = Some(p);
    }
    lost
}

/// How long after the probe time a worker's report is still awaited: on a lossy link the report itself may
/// need TCP retransmissions (Linux: the first after 1 s, then doubling, RFC 6298), and with 3 s a node on a
/// link that drops 20% of its packets was now and then lost although it reported (CI, 2026-12-04, seen in
/// `preflight::a_lossy_link_never_refuses_and_never_splits_the_fleet`). A fleet whose nodes all report does
/// not wait for it.
const REPORT_SLACK: Duration = Duration::from_secs(7);

/// Collect the workers' probe results until each reported or was lost, or the probe time and
/// [`REPORT_SLACK`] more have passed; a member that did not report is lost.
fn collect_probes(
    setup: &Setup,
    hub: &mut Hub,
    met: &mut Met,
    lost: &mut [bool],
    probe_timeout: Duration,
) {
    let members = &mut met.members;
    let n = members.len();
    let collect_until = Instant::now() + probe_timeout + REPORT_SLACK;
    // Members still expected to report (a count, so that each wait is O(1) to test).
    let mut pending = (1..n)
        .filter(|&k| !lost[k] && met.conn_of[k].is_some() && members[k].probe.is_none())
        .count();
    while pending > 0 && Instant::now() < collect_until {
        for ev in hub.wait(None, &setup.key, collect_until) {
            let gone = match ev {
                Event::Probe(id, mut p) => {
                    let Some(k) = hub
                        .conns
                        .get(id)
                        .and_then(|c| c.as_ref())
                        .and_then(|c| c.member)
                    else {
                        continue;
                    };
                    let Some(j) = ring_target(k, n) else { continue };
                    if members[j].report.probe_port.is_none() {
                        p = no_listener(j);
                    }
                    p.target = j as u32;
                    p.error = p
                        .error
                        .map(|e| super::protocol::clean(&e, super::protocol::MAX_VALUE));
                    if members[k].probe.is_none() && !lost[k] {
                        pending -= 1;
                    }
                    members[k].probe = Some(p);
                    continue;
                }
                Event::Accepted(stream, _) => {
                    close_after_peer(stream);
                    continue;
                }
                Event::Hello(id, _)
                | Event::Misfit(id, _, _)
                | Event::Gone(id, _)
                | Event::Measured(id, _)
                | Event::Challenge(id) => id,
            };
            if let Some(c) = hub.take(gone) {
                if let Some(k) = c.member {
                    if members[k].probe.is_none() && !lost[k] {
                        lost[k] = true;
                        pending -= 1;
                    }
                }
                close_after_peer(c.stream);
            }
        }
    }
    for (k, m) in members.iter().enumerate().skip(1) {
        if m.probe.is_none() {
            lost[k] = true;
        }
    }
}

/// The candidate networks of the meeting ([`super::networks::candidates`]), their measurement when there
/// is a choice to make (every worker measures its pairs, [`Msg::Measure`], while the master measures its
/// own on a thread; the figures come back as [`Msg::Measured`] within the legs' bound), and why nothing was
/// measured, when nothing was.
#[allow(clippy::type_complexity)]
fn measure_networks(
    setup: &Setup,
    hub: &mut Hub,
    met: &Met,
    lost: &[bool],
) -> (
    Vec<super::networks::Candidate>,
    Vec<super::networks::Measured>,
    Option<(String, bool)>,
) {
    use super::networks;
    let current: Vec<(String, IpAddr)> = met
        .members
        .iter()
        .map(|m| (m.report.ifname.clone(), m.report.addr))
        .collect();
    let ifaces: Vec<&[networks::Iface]> = met
        .members
        .iter()
        .map(|m| m.report.ifaces.as_slice())
        .collect();
    let cands = networks::candidates(&current, &ifaces);
    // A node that says another node count gets the verdict too, but did not measure: as if lost.
    let lost_n = lost.iter().filter(|l| **l).count() + met.misfits.len();
    let skipped = networks::skip(&met.members, setup.nnodes, lost_n, cands.len());
    if let Some((why, _)) = &skipped {
        super::log(format!("preflight: no network measurement: {why}"));
        return (cands, Vec::new(), skipped);
    }
    let started = Instant::now();
    let plans = networks::legs(&cands, &met.members);
    let n = met.members.len();
    let mut figures: Vec<Option<Vec<super::protocol::Figure>>> = vec![None; n];
    let mut pending = 0;
    for (k, id) in met.conn_of.iter().enumerate().skip(1) {
        let Some(Some(c)) = id.and_then(|id| hub.conns.get_mut(id)) else {
            continue;
        };
        let msg = Msg::Measure(plans[k].clone());
        if send(
            &mut c.stream,
            &setup.key,
            &msg,
            Instant::now() + WRITE_BOUND,
        )
        .is_ok()
        {
            pending += 1;
        }
    }
    let own = plans[0].clone();
    let mine = std::thread::Builder::new()
        .name("preflight-measure".into())
        .spawn(move || super::measure::run_legs(&own));
    let until =
        Instant::now() + super::measure::LEG_BOUND * cands.len() as u32 + Duration::from_secs(2);
    while pending > 0 && Instant::now() < until {
        for ev in hub.wait(None, &setup.key, until) {
            let (id, f) = match ev {
                Event::Measured(id, f) => (id, Some(f)),
                Event::Gone(id, _) => (id, None),
                Event::Accepted(stream, _) => {
                    close_after_peer(stream);
                    continue;
                }
                _ => continue,
            };
            let k = hub
                .conns
                .get(id)
                .and_then(|c| c.as_ref())
                .and_then(|c| c.member);
            let gone = f.is_none();
            if let Some(k) = k.filter(|&k| figures[k].is_none()) {
                // A worker that went away sent no figure: its pairs fail, and nothing moves.
                figures[k] = Some(f.unwrap_or_default());
                pending -= 1;
            }
            if gone {
                if let Some(c) = hub.take(id) {
                    close_after_peer(c.stream);
                }
            }
        }
    }
    figures[0] = mine.ok().and_then(|t| t.join().ok());
    let measured = networks::assemble(cands.clone(), &figures);
    let texts: Vec<String> = measured.iter().map(networks::figure_text).collect();
    super::log(format!(
        "preflight: measured {} network(s) in {:.0} ms: {}",
        measured.len(),
        started.elapsed().as_secs_f64() * 1e3,
        texts.join("; ")
    ));
    (cands, measured, None)
}

/// Send the verdict, encoded once (the same bytes to every node), to every connection still open.
fn deliver(setup: &Setup, hub: &mut Hub, verdict: &FleetVerdict) {
    let frame = super::protocol::encode(&setup.key, &Msg::Verdict(verdict.clone()));
    for id in 0..hub.conns.len() {
        let sent = match hub.conns.get_mut(id) {
            Some(Some(c)) => {
                send_frame(&mut c.stream, &frame, Instant::now() + WRITE_BOUND).is_ok()
            }
            _ => continue,
        };
        if !sent {
            if let Some(c) = hub.take(id) {
                close_after_peer(c.stream);
            }
        }
    }
}

/// The workers close first (up to [`CLOSE_BOUND`]); then the master's side goes without TIME_WAIT, and a
/// worker that did not close in time is reset only where the verdict was acknowledged.
fn close_all(setup: &Setup, hub: &mut Hub) {
    let close_until = Instant::now() + CLOSE_BOUND;
    while hub.live() > 0 && Instant::now() < close_until {
        for ev in hub.wait(None, &setup.key, close_until) {
            if let Event::Gone(id, _) = ev {
                if let Some(c) = hub.take(id) {
                    close_after_peer(c.stream);
                }
            }
        }
    }
    for id in 0..hub.conns.len() {
        if let Some(c) = hub.take(id) {
            close_when_delivered(c.stream);
        }
    }
}

/// Phase 1: accept, greet and admit nodes until every node of the job is present (a member whose connection
/// closed no longer counts) or `deadline`. Strangers are closed when their hello is overdue or when newer
/// connections need the room; a second hello from the same node (a restarted ncclenv) replaces the first.
/// With `check` (a master on the wildcard address), returns why this node is not the master when the master
/// endpoint leads to another master.
fn meet(
    setup: &Setup,
    hub: &mut Hub,
    listener: &TcpListener,
    roll: &mut Roll,
    started: Instant,
    deadline: Instant,
    check: Option<&super::endpoint::Check>,
) -> Option<String> {
    let expected = setup.nnodes as usize;
    while !roll.complete(expected) && Instant::now() < deadline {
        if let Some(why) = check.and_then(|c| checked(setup, roll, c)) {
            return Some(why);
        }
        let mut until = hub.next_due().map_or(deadline, |d| d.min(deadline));
        if check.is_some() {
            until = until.min(Instant::now() + Duration::from_millis(100));
        }
        for ev in hub.wait(Some(listener), &setup.key, until) {
            match ev {
                Event::Accepted(mut stream, from) => {
                    if hub.make_room() {
                        roll.strangers.evicted += 1;
                    }
                    let _ = stream.set_nonblocking(true);
                    let _ = stream.set_nodelay(true);
                    let bound = Instant::now() + WRITE_BOUND;
                    if send(&mut stream, &setup.key, &Msg::Greeting, bound).is_ok() {
                        // When the epoll set refuses it, the connection is closed and the worker retries.
                        let _ = hub.add(stream, from);
                    } else {
                        close_after_peer(stream);
                    }
                }
                Event::Hello(id, report) => admit(setup, hub, roll, id, report, started),
                Event::Misfit(id, report, n) => misfit(setup, hub, roll, id, report, n),
                Event::Challenge(id) => {
                    if let Some(Some(c)) = hub.conns.get_mut(id) {
                        let ack = Msg::ProbeAck(roll.members[0].report.nonce);
                        let _ = send(
                            &mut c.stream,
                            &setup.key,
                            &ack,
                            Instant::now() + WRITE_BOUND,
                        );
                        // Not a stranger: a master's check; it closes first.
                        c.leaving = true;
                    }
                }
                Event::Probe(id, _) | Event::Measured(id, _) => {
                    if let Some(c) = hub.take(id) {
                        leave(roll, id, &c, Why::Garbage, expected);
                        close_after_peer(c.stream);
                    }
                }
                Event::Gone(id, why) => {
                    // A stray, a protocol error, or a node that left: it is no longer in the meeting.
                    if let Some(c) = hub.take(id) {
                        leave(roll, id, &c, why, expected);
                        close_after_peer(c.stream);
                    }
                }
            }
        }
        roll.strangers.silent += hub.expire(Instant::now());
    }
    None
}

/// Take in what the checks of the master endpoint found: another master there (this node yields, unless the
/// endpoint also led here and this node's nonce is the larger: a Service that forwards to both, where the
/// smaller yields) returns why this node is not the master.
fn checked(setup: &Setup, roll: &mut Roll, check: &super::endpoint::Check) -> Option<String> {
    use super::endpoint::Found;
    let own = roll.members[0].report.nonce;
    for f in check.found() {
        match f {
            Found::Here => roll.reached_here = true,
            Found::Nowhere(why) => roll.nowhere = Some(why),
            Found::Other(n, how) if !(roll.reached_here && own > n) => {
                return Some(format!(
                    "this node believes it is the master ({}), but the master endpoint {} leads to {how} on \
                     another node: this node joins it as a worker",
                    setup.role_reason, setup.master
                ));
            }
            Found::Other(..) => {}
        }
    }
    None
}

/// A connection taken out of the meeting: a member's stops counting at once (logged), anything else is a
/// stranger.
fn leave(roll: &mut Roll, id: usize, c: &Conn, why: Why, expected: usize) {
    match c.member {
        Some(k) => {
            roll.conn_of[k] = None;
            let (how, its) = if why == Why::Closed {
                ("connection closed", "closed")
            } else {
                ("it sent something unexpected", "sent something unexpected")
            };
            roll.left_how.insert(k, how);
            super::log(format!(
                "preflight: node {} left the meeting before it ended (its connection {its}); {} of {expected} \
                 present",
                roll.members[k].report.name(),
                roll.present()
            ));
        }
        None if c.misfit => roll.misfits.retain(|(_, conn)| *conn != id),
        None if !c.leaving => roll.strangers.count(why),
        None => {}
    }
}

/// A hello on connection `id` from a node of this master endpoint that says the job has `n` nodes: held
/// for the verdict (whose finding names it), not in the ring; the same node again replaces itself.
fn misfit(
    setup: &Setup,
    hub: &mut Hub,
    roll: &mut Roll,
    id: usize,
    mut report: Box<NodeReport>,
    nnodes: u32,
) {
    let from = match hub.conns.get_mut(id) {
        Some(Some(c)) if c.pending() => {
            c.misfit = true;
            c.from
        }
        _ => return,
    };
    report.sanitize();
    let ident = report.identity();
    let again: Vec<usize> = roll
        .misfits
        .iter()
        .filter(|(m, _)| m.report.identity() == ident && m.seen_from == from)
        .map(|(_, conn)| *conn)
        .collect();
    for old in again {
        roll.misfits.retain(|(_, conn)| *conn != old);
        if let Some(c) = hub.take(old) {
            close_after_peer(c.stream);
        }
    }
    super::log(format!(
        "preflight: node {} (from {from}) says the job has {nnodes} nodes, this master {}: held for the verdict, \
         not counted as a node of this meeting",
        report.name(),
        setup.nnodes
    ));
    roll.last_arrival = Instant::now();
    roll.misfits.push((
        Misfit {
            report: *report,
            seen_from: from,
            nnodes,
        },
        id,
    ));
}

/// A hello on connection `id`: a new member, the same node again (its new connection replaces the old), or
/// one node too many (told so, [`Msg::NotAdmitted`]).
fn admit(
    setup: &Setup,
    hub: &mut Hub,
    roll: &mut Roll,
    id: usize,
    mut report: Box<NodeReport>,
    started: Instant,
) {
    let expected = setup.nnodes as usize;
    let from = match hub.conns.get(id) {
        Some(Some(c)) if c.pending() => c.from,
        _ => return,
    };
    report.sanitize();
    let (h, a, r) = report.identity();
    let ident = (h, a, r, Some(from));
    let again = roll
        .ids
        .iter()
        .skip(1)
        .position(|x| *x == ident)
        .map(|k| k + 1);
    let member = match again {
        Some(member) => {
            let old = roll.conn_of[member].replace(id);
            if let Some(Some(c)) = hub.conns.get_mut(id) {
                c.member = Some(member);
            }
            if let Some(old) = old.and_then(|old| hub.take(old)) {
                close_after_peer(old.stream);
            }
            super::log(format!(
                "preflight: node {} said hello again (a restarted ncclenv): its new connection replaces the old; {} \
                 of {expected} present",
                report.name(),
                roll.present()
            ));
            roll.members[member].report = *report;
            roll.members[member].seen_from = Some(from);
            roll.left_how.remove(&member);
            roll.last_arrival = Instant::now();
            return;
        }
        None if roll.present() >= expected => {
            let why = format!(
                "the job has {expected} nodes and all {expected} have met ({} is one too many: more replicas \
                 run than the node count says?)",
                report.name()
            );
            if let Some(Some(c)) = hub.conns.get_mut(id) {
                let _ = send(
                    &mut c.stream,
                    &setup.key,
                    &Msg::NotAdmitted(why.clone()),
                    Instant::now() + WRITE_BOUND,
                );
                c.leaving = true;
            }
            super::log(format!("preflight: not admitted: {why}"));
            return;
        }
        None => roll.members.len(),
    };
    if let Some(Some(c)) = hub.conns.get_mut(id) {
        c.member = Some(member);
    }
    roll.last_arrival = Instant::now();
    roll.conn_of.push(Some(id));
    roll.ids.push(ident);
    super::log(format!(
        "preflight: node {}/{expected} {} {} ({}) NCCL {} [from {}, after {:.2} s]",
        roll.present(),
        report.hostname,
        report.addr,
        report.ifname,
        report.nccl_version.as_deref().unwrap_or("unknown"),
        from,
        started.elapsed().as_secs_f64()
    ));
    roll.members.push(Member {
        report: *report,
        seen_from: Some(from),
        probe: None,
    });
}

/// Close a connection: with `SO_LINGER` 0 when everything written was acknowledged (no `TIME_WAIT` on the
/// master port), else normally, so that the kernel keeps retransmitting what the peer has not got (a
/// verdict on a lossy link is never reset away).
fn close_when_delivered(stream: TcpStream) {
    if net::unacked(&stream) {
        drop(stream);
    } else {
        close_after_peer(stream);
    }
}

/// Raises the soft `RLIMIT_NOFILE` (one descriptor per node on the master; many containers start with a
/// soft limit of 1024) towards what the meeting needs, at most to the hard limit, and restores it on drop, so
/// that the command starts with the limit it would have had.
struct NofileRaise {
    saved: Option<(u64, u64)>,
}

impl NofileRaise {
    fn to(need: usize) -> NofileRaise {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        let need = need as u64;
        let saved = match getrlimit(Resource::RLIMIT_NOFILE) {
            Ok((soft, hard)) if soft < need => {
                let want = need.min(hard);
                (want > soft && setrlimit(Resource::RLIMIT_NOFILE, want, hard).is_ok())
                    .then_some((soft, hard))
            }
            _ => None,
        };
        NofileRaise { saved }
    }
}

impl Drop for NofileRaise {
    fn drop(&mut self) {
        if let Some((soft, hard)) = self.saved {
            let _ = nix::sys::resource::setrlimit(
                nix::sys::resource::Resource::RLIMIT_NOFILE,
                soft,
                hard,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preflight::{Role, Setup};
    use crate::snapshot::Family;
    use crate::test_machine::warnings;
    use std::collections::BTreeMap;
    use std::net::SocketAddr;

    fn report(host: &str, addr: &str, rank: u32) -> NodeReport {
        NodeReport {
            hostname: host.into(),
            ifname: "lo".into(),
            addr: addr.parse().expect("ip"),
            family: Family::Inet,
            mtu: Some(65536),
            data_mtus: Vec::new(),
            probe_port: None,
            listen_error: None,
            nonce: u64::from(rank) + 7,
            nccl_version: None,
            ncclenv_version: "0.1.0".into(),
            nccl_env: BTreeMap::new(),
            decided: BTreeMap::new(),
            vendor_profile: false,
            strict: false,
            refused: None,
            node_rank: Some(rank),
            ifaces: Vec::new(),
            sink_ports: (None, None),
            measure: false,
            ib_usable: false,
            own_ifname: true,
        }
    }

    fn setup(master: SocketAddr, nnodes: u32) -> Setup {
        Setup {
            role: Role::Master,
            role_reason: "this node owns the master address 127.0.0.1".into(),
            master_host: "127.0.0.1".into(),
            master,
            listen: master,
            port_source: "test".into(),
            nnodes,
            node_rank: Some(0),
            key: super::super::protocol::job_key(master, nnodes),
            ifname: "lo".into(),
            bootstrap: master.ip(),
            timeout_s: 1,
        }
    }

    /// A connection to `at` that got the master's greeting (retried until the master listens).
    fn greeted(at: SocketAddr, key: &str) -> TcpStream {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(mut c) = TcpStream::connect(at) {
                let _ = c.set_nonblocking(true);
                let mut buf = FrameBuf::default();
                let got = net::recv(
                    &mut c,
                    &mut buf,
                    key,
                    Instant::now() + Duration::from_secs(2),
                );
                assert!(matches!(got, Ok(Msg::Greeting)), "{got:?}");
                return c;
            }
            assert!(Instant::now() < until, "the master never listened");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Issue 22 item 5, on real sockets: of a 3-node job, one node says hello and closes, one connection is
    /// greeted and says nothing, the third node never comes. The verdict names the node that left, counts
    /// the silent connection apart, and does not claim that nothing came; the meeting ended at its deadline.
    #[test]
    fn a_node_that_left_and_a_silent_connection_are_not_called_missing() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let at = SocketAddr::new("127.0.0.1".parse().expect("ip"), port);
        let s = setup(at, 3);
        let key = s.key.clone();
        let deadline = Instant::now() + Duration::from_millis(1500);
        let master = std::thread::spawn(move || {
            run(
                &s,
                report("m", "127.0.0.1", 0),
                deadline,
                Duration::from_millis(200),
            )
        });
        let mut w = greeted(at, &key);
        let hello = Msg::Hello(report("w1", "127.0.0.2", 1));
        net::send(
            &mut w,
            &key,
            &hello,
            Instant::now() + Duration::from_secs(2),
        )
        .expect("hello");
        std::thread::sleep(Duration::from_millis(100));
        drop(w);
        let silent = greeted(at, &key);
        let end = match master.join().expect("master thread") {
            Ok(MasterOutcome::Verdict(m)) => m,
            other => panic!("{other:?}"),
        };
        drop(silent);
        let absent = warnings(&end.verdict, "preflight-absent")
            .next()
            .map(|w| w.message.clone())
            .unwrap_or_else(|| panic!("{:?}", end.verdict));
        assert!(
            absent.starts_with(
                "1 of 3 nodes met within 1 s (1 missing: no hello came from it; said hello and left before the \
                 meeting ended: w1 (127.0.0.2) (connection closed); 1 connection(s) to the master port sent no \
                 whole hello"
            ),
            "{absent}"
        );
        assert!(!absent.contains("nothing came"), "{absent}");
        assert!(!end.complete);
        assert!(
            end.after_words()
                .ends_with("ms after the meeting's deadline"),
            "{}",
            end.after_words()
        );
    }

    #[test]
    fn the_verdict_counts_from_the_last_arrival_only_when_every_node_met() {
        let mut end = MasterEnd {
            verdict: FleetVerdict {
                present: 3,
                expected: 3,
                refuse: None,
                repairs: Vec::new(),
                findings: Vec::new(),
                network: None,
            },
            after_last: Duration::from_micros(1500),
            complete: true,
        };
        assert_eq!(end.after_words(), "1.5 ms after the last arrival");
        end.complete = false;
        assert_eq!(end.after_words(), "1.5 ms after the meeting's deadline");
    }

    /// What the strangers' counts give the verdict: connections without a whole hello (a node may be among
    /// them) and another master endpoint's preflight; another protocol's bytes are no node.
    #[test]
    fn strangers_are_counted_for_the_verdict_as_observed() {
        let st = Strangers {
            silent: 1,
            closed: 2,
            garbage: 5,
            foreign: 3,
            evicted: 4,
            cut: 1,
        };
        let h = st.heard(vec!["n3 (10.0.0.3) (connection closed)".into()]);
        assert_eq!((h.unheard, h.foreign, h.left.len()), (8, 3, 1));
        let line = st.line().expect("a line");
        assert!(
            line.contains("3 spoke the preflight of another master endpoint or version (another job on this port, or this job's master address resolving differently on that node)"),
            "{line}"
        );
        assert_eq!(Strangers::default().heard(Vec::new()), Heard::default());
        assert_eq!(Strangers::default().line(), None);
    }
}
