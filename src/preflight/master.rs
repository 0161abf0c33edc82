//! The master's side: listen on the master port, meet the nodes, assign the ring, collect the probe results,
//! agree ([`super::agree::agree`]), send the verdict, and close after the workers.
//!
//! One thread and one `epoll` set: the master's work per node is O(1) (an accept, five small frames, one
//! report parsed) and it never waits on one node while others are ready. The master port's listener is
//! closed as soon as the meeting is over, and every connection is closed after its worker closed, with
//! `SO_LINGER` 0 ([`super::net::close_after_peer`]): when the command starts, nothing of the preflight
//! holds the master port.

use super::agree::{agree, ring_target, Meeting, Member};
use super::net::{self, close_after_peer, drain, send, send_frame, slice_ms};
use super::protocol::{FleetVerdict, FrameBuf, Msg, NodeReport, ProbeReport, Target};
use super::Setup;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Epoll tag of the listener (connections are tagged with their index).
const LISTENER: u64 = u64::MAX;
/// Connections beyond the expected nodes that are kept while they say who they are (strays, retries).
const SPARE_CONNS: usize = 64;
/// How long a write to one worker may take.
const WRITE_BOUND: Duration = Duration::from_secs(2);
/// How long the master waits, after sending the verdict, for the workers to close first.
const CLOSE_BOUND: Duration = Duration::from_secs(2);

/// What the master ends with.
#[derive(Debug)]
pub struct MasterEnd {
    /// The verdict every node got.
    pub verdict: FleetVerdict,
    /// From the last node's arrival (or the deadline) to the last verdict sent.
    pub after_last: Duration,
}

/// One connection on the master port.
struct Conn {
    stream: TcpStream,
    buf: FrameBuf,
    from: IpAddr,
    /// Index in the members, once it said Hello.
    member: Option<usize>,
}

/// What one wait produced. Any message but these two ends the connection (`Gone`).
enum Event {
    Accepted(TcpStream, IpAddr),
    Hello(usize, Box<NodeReport>),
    Probe(usize, ProbeReport),
    Gone(usize),
}

struct Hub {
    epoll: Epoll,
    conns: Vec<Option<Conn>>,
}

impl Hub {
    fn add(&mut self, stream: TcpStream, from: IpAddr) -> Option<usize> {
        let id = self.conns.len();
        self.epoll
            .add(&stream, EpollEvent::new(EpollFlags::EPOLLIN, id as u64))
            .ok()?;
        self.conns.push(Some(Conn {
            stream,
            buf: FrameBuf::default(),
            from,
            member: None,
        }));
        Some(id)
    }

    fn take(&mut self, id: usize) -> Option<Conn> {
        let c = self.conns.get_mut(id)?.take()?;
        let _ = self.epoll.delete(&c.stream);
        Some(c)
    }

    fn live(&self) -> usize {
        self.conns.iter().filter(|c| c.is_some()).count()
    }

    /// Wait one slice (≤ 1 s, ≤ `deadline`) and return what happened: new connections on `listener`,
    /// messages, and connections that closed or sent something that is not a message of this meeting.
    fn wait(&mut self, listener: Option<&TcpListener>, key: &str, deadline: Instant) -> Vec<Event> {
        let mut ready = [EpollEvent::empty(); 64];
        let n = match self.epoll.wait(&mut ready, slice_ms(deadline)) {
            Ok(n) => n,
            Err(_) => return Vec::new(),
        };
        let mut out = Vec::new();
        for ev in &ready[..n] {
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
                    Ok(Some(body)) => match super::protocol::decode(&body, key) {
                        Ok(Msg::Hello(r)) => out.push(Event::Hello(id, Box::new(r))),
                        Ok(Msg::ProbeResult(p)) => out.push(Event::Probe(id, p)),
                        Ok(_) | Err(_) => {
                            out.push(Event::Gone(id));
                            break;
                        }
                    },
                    Ok(None) => {
                        if !matches!(eof, Ok(false)) {
                            out.push(Event::Gone(id));
                        }
                        break;
                    }
                    Err(_) => {
                        out.push(Event::Gone(id));
                        break;
                    }
                }
            }
        }
        out
    }
}

/// Run the master's side of the meeting described by `s`, with this node's own report `me` (its nonce and
/// probe port already in it). Waits for the other nodes until `deadline`, probes its own ring successor
/// within `probe_timeout`. `Err` (with the reason) only when the master port cannot be listened on: the
/// caller fails open.
pub fn run(
    s: &Setup,
    me: NodeReport,
    deadline: Instant,
    probe_timeout: Duration,
) -> Result<MasterEnd, String> {
    let started = Instant::now();
    let expected = s.nnodes as usize;
    let _nofile = NofileRaise::to(expected + SPARE_CONNS + 64);
    let failed =
        |e: &dyn std::fmt::Display| format!("cannot listen on the master port {}: {e}", s.listen);
    let listener = net::listen(s.listen).map_err(|e| failed(&e))?;
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|e| failed(&e))?;
    epoll
        .add(&listener, EpollEvent::new(EpollFlags::EPOLLIN, LISTENER))
        .map_err(|e| failed(&e))?;
    let mut hub = Hub {
        epoll,
        conns: Vec::new(),
    };
    super::log(format!(
        "preflight: node 1/{expected} {} {} ({}) NCCL {} [master, listening on {} for {} more node(s), up to {} s]",
        me.hostname,
        me.addr,
        me.ifname,
        me.nccl_version.as_deref().unwrap_or("unknown"),
        s.listen,
        expected.saturating_sub(1),
        s.timeout_s
    ));
    let mut members = vec![Member {
        report: me,
        seen_from: None,
        probe: None,
    }];
    // Connection of each member (none for the master itself).
    let mut conn_of: Vec<Option<usize>> = vec![None];
    let mut last_arrival = started;

    // 1. Meet.
    while members.len() < expected && Instant::now() < deadline {
        for ev in hub.wait(Some(&listener), &s.key, deadline) {
            match ev {
                Event::Accepted(mut stream, from) => {
                    if hub.live() >= expected + SPARE_CONNS {
                        close_after_peer(stream);
                        continue;
                    }
                    let _ = stream.set_nonblocking(true);
                    let _ = stream.set_nodelay(true);
                    let bound = Instant::now() + WRITE_BOUND;
                    if send(&mut stream, &s.key, &Msg::Greeting, bound).is_ok() {
                        // When the epoll set refuses it, the connection is closed and the worker retries.
                        let _ = hub.add(stream, from);
                    } else {
                        close_after_peer(stream);
                    }
                }
                Event::Hello(id, mut report) => {
                    let Some(Some(c)) = hub.conns.get_mut(id) else {
                        continue;
                    };
                    if c.member.is_some() || members.len() >= expected {
                        continue;
                    }
                    report.sanitize();
                    let k = members.len();
                    c.member = Some(k);
                    last_arrival = Instant::now();
                    super::log(format!(
                        "preflight: node {}/{expected} {} {} ({}) NCCL {} [from {}, after {:.2} s]",
                        k + 1,
                        report.hostname,
                        report.addr,
                        report.ifname,
                        report.nccl_version.as_deref().unwrap_or("unknown"),
                        c.from,
                        started.elapsed().as_secs_f64()
                    ));
                    members.push(Member {
                        report: *report,
                        seen_from: Some(c.from),
                        probe: None,
                    });
                    conn_of.push(Some(id));
                }
                Event::Probe(id, _) | Event::Gone(id) => {
                    // A stray, a protocol error, or a node that left: it is no longer in the meeting.
                    if let Some(c) = hub.take(id) {
                        if let Some(k) = c.member {
                            conn_of[k] = None;
                        }
                        close_after_peer(c.stream);
                    }
                }
            }
        }
    }
    // The master port is free from here on: nothing more is accepted.
    drop(listener);
    let arrived_all = members.len() >= expected;
    let end_of_meeting = if arrived_all {
        last_arrival
    } else {
        Instant::now()
    };
    // Nodes that left before the ring was drawn are not in it.
    let mut kept = Vec::new();
    let mut kept_conns = Vec::new();
    for (k, m) in members.into_iter().enumerate() {
        if k == 0 || conn_of[k].is_some() {
            kept.push(m);
            kept_conns.push(conn_of[k]);
        }
    }
    let mut members = kept;
    let conn_of = kept_conns;
    for (k, id) in conn_of.iter().enumerate() {
        if let Some(Some(c)) = id.and_then(|id| hub.conns.get_mut(id)) {
            c.member = Some(k);
        }
    }
    // Connections that never said who they are leave now.
    for id in 0..hub.conns.len() {
        if hub.conns[id].as_ref().is_some_and(|c| c.member.is_none()) {
            if let Some(c) = hub.take(id) {
                close_after_peer(c.stream);
            }
        }
    }

    // 2. The ring: each node probes its successor.
    let n = members.len();
    let target = |j: usize| {
        let r = &members[j].report;
        r.probe_port.map(|port| Target {
            index: j as u32,
            name: r.name(),
            addr: r.addr,
            port,
            nonce: r.nonce,
        })
    };
    // A target that cannot listen needs no connection: its outcome is known.
    let no_listener = |j: usize| ProbeReport {
        target: j as u32,
        outcome: super::protocol::Outcome::NoListener,
        error: None,
        ms: 0,
    };
    // Members lost after arriving (connection closed or silent), by index.
    let mut lost = vec![false; n];
    let mut known: Vec<(usize, ProbeReport)> = Vec::new();
    for (k, id) in conn_of.iter().enumerate().skip(1) {
        let Some(id) = *id else { continue };
        let j = ring_target(k, n);
        let t = j.and_then(target);
        if let (Some(j), None) = (j, &t) {
            known.push((k, no_listener(j)));
        }
        let msg = Msg::Ring(t);
        let ok = match hub.conns.get_mut(id) {
            Some(Some(c)) => {
                send(&mut c.stream, &s.key, &msg, Instant::now() + WRITE_BOUND).is_ok()
            }
            _ => false,
        };
        if !ok {
            lost[k] = true;
        }
    }
    // The master's own probe, while the workers' run: their results wait in the socket buffers.
    members[0].probe = ring_target(0, n).map(|j| match target(j) {
        Some(t) => net::probe(&t, &s.key, probe_timeout),
        None => no_listener(j),
    });
    for (k, p) in known {
        members[k].probe = Some(p);
    }

    // 3. Collect the probe results.
    let collect_until = Instant::now() + probe_timeout + Duration::from_secs(3);
    // Members still expected to report (a count, so that each wait is O(1) to test).
    let mut pending = (1..n)
        .filter(|&k| !lost[k] && conn_of[k].is_some() && members[k].probe.is_none())
        .count();
    while pending > 0 && Instant::now() < collect_until {
        for ev in hub.wait(None, &s.key, collect_until) {
            match ev {
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
                }
                Event::Hello(id, _) | Event::Gone(id) => {
                    if let Some(c) = hub.take(id) {
                        if let Some(k) = c.member {
                            if members[k].probe.is_none() && !lost[k] {
                                lost[k] = true;
                                pending -= 1;
                            }
                        }
                        close_after_peer(c.stream);
                    }
                }
                Event::Accepted(stream, _) => close_after_peer(stream),
            }
        }
    }
    for (k, m) in members.iter().enumerate().skip(1) {
        if m.probe.is_none() {
            lost[k] = true;
        }
    }

    // 4. Agree and tell everyone.
    let verdict = agree(&Meeting {
        expected: expected as u32,
        members,
        lost: (0..n).filter(|&k| lost[k]).collect(),
        waited_s: s.timeout_s,
    });
    // Encoded once: the same bytes go to every node.
    let frame = super::protocol::encode(&s.key, &Msg::Verdict(verdict.clone()));
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
    let after_last = end_of_meeting.elapsed();

    // 5. The workers close first; then the master's side goes without TIME_WAIT.
    let close_until = Instant::now() + CLOSE_BOUND;
    while hub.live() > 0 && Instant::now() < close_until {
        for ev in hub.wait(None, &s.key, close_until) {
            if let Event::Gone(id) = ev {
                if let Some(c) = hub.take(id) {
                    close_after_peer(c.stream);
                }
            }
        }
    }
    for id in 0..hub.conns.len() {
        if let Some(c) = hub.take(id) {
            close_after_peer(c.stream);
        }
    }
    Ok(MasterEnd {
        verdict,
        after_last,
    })
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
