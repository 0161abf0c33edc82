//! The measurement of TCP throughput along the ring (#23, item 2): for each candidate network, every node
//! sends to its ring successor at once, for [`WINDOW`] or [`CAP`] bytes, whichever comes first; the
//! receiver counts what arrived and answers with the count and the time it took, so the figure is what
//! crossed the network, not what the sender's socket buffer took. A network's figure is its slowest pair
//! ([`super::networks::Measured::slowest`]). The cost does not grow with the node count: all pairs run at
//! once, one network after the other.
//!
//! Each node's [`Sink`] listens on an ephemeral port of the wildcard address of each family (as NCCL's
//! own listeners take ephemeral ports), so a connection to any of the node's addresses proves that path as
//! the probe of the bootstrap address does.

use super::protocol::{Figure, MeasureLeg};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{
    self, sockopt, AddressFamily, Backlog, SockFlag, SockType, SockaddrStorage,
};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the receiver counts one pair's bytes: 150 ms (TCP leaves slow start within a few round trips
/// on a LAN; a 20 Mbit/s link carries 375 kB in it).
pub const WINDOW: Duration = Duration::from_millis(150);
/// Most bytes counted per pair: 256 MiB (the receiver stops at whichever of this and [`WINDOW`] comes first).
pub const CAP: u64 = 256 * 1024 * 1024;
/// Bound on connecting to a successor's sink.
const CONNECT_BOUND: Duration = Duration::from_secs(1);
/// Bound on one pair, from connecting to the receiver's answer.
pub const LEG_BOUND: Duration = Duration::from_millis(2500);
/// The first bytes of a measurement connection, before the receiver's nonce.
const MAGIC: &[u8; 8] = b"NCCLENVM";
/// Most measurement connections a sink serves at once (each node receives one at a time in the ring).
const MAX_CONNS: usize = 8;

/// A node's measurement listeners (IPv4 and IPv6 wildcard, ephemeral ports) and their thread.
pub struct Sink {
    /// The IPv4 listener's port, when it listens.
    pub port4: Option<u16>,
    /// The IPv6 listener's port, when it listens.
    pub port6: Option<u16>,
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl Sink {
    /// Listen on the wildcard address of each family in `families` (`IPV6_V6ONLY` on the IPv6 one) and
    /// answer measurement connections that name `nonce`, until [`Sink::stop`]. A family that cannot listen
    /// gets no port (the pairs to it fail, and the network is not proven).
    pub fn start(v4: bool, v6: bool, nonce: u64) -> Sink {
        let mut listeners = Vec::new();
        let (mut port4, mut port6) = (None, None);
        if v4 {
            if let Ok(l) = listen_any(false) {
                port4 = l.local_addr().ok().map(|a| a.port());
                listeners.push(l);
            }
        }
        if v6 {
            if let Ok(l) = listen_any(true) {
                port6 = l.local_addr().ok().map(|a| a.port());
                listeners.push(l);
            }
        }
        let none = Sink {
            port4: None,
            port6: None,
            stop: None,
            thread: None,
        };
        if listeners.is_empty() {
            return none;
        }
        let Ok((wake, stop)) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) else {
            return none;
        };
        match std::thread::Builder::new()
            .name("preflight-sink".into())
            .stack_size(64 * 1024)
            .spawn(move || accept_loop(listeners, nonce, wake))
        {
            Ok(t) => Sink {
                port4,
                port6,
                stop: Some(stop),
                thread: Some(t),
            },
            Err(_) => none,
        }
    }

    /// Stop accepting and join the thread (connections being served end within [`LEG_BOUND`]).
    pub fn stop(mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A close-on-exec, non-blocking listener on the wildcard address of one family, port 0.
fn listen_any(v6: bool) -> io::Result<TcpListener> {
    let (family, addr) = if v6 {
        (
            AddressFamily::Inet6,
            SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
        )
    } else {
        (
            AddressFamily::Inet,
            SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        )
    };
    let fd: OwnedFd = socket::socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    if v6 {
        socket::setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
    }
    socket::bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrStorage::from(addr),
    )?;
    socket::listen(&fd, Backlog::new(64).unwrap_or(Backlog::MAXCONN))?;
    let l = TcpListener::from(fd);
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Accept on `listeners` until `wake` hangs up; each connection is served on a thread of its own (at most
/// [`MAX_CONNS`] at once; more are closed).
fn accept_loop(listeners: Vec<TcpListener>, nonce: u64, wake: OwnedFd) {
    let live = Arc::new(AtomicUsize::new(0));
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    loop {
        let mut fds: Vec<PollFd> = listeners
            .iter()
            .map(|l| PollFd::new(l.as_fd(), PollFlags::POLLIN))
            .collect();
        fds.push(PollFd::new(wake.as_fd(), PollFlags::POLLIN));
        match poll(&mut fds, PollTimeout::from(1000u16)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => break,
        }
        if fds
            .last()
            .and_then(|f| f.revents())
            .is_some_and(|r| !r.is_empty())
        {
            break;
        }
        drop(fds);
        for l in &listeners {
            while let Ok((s, _)) = l.accept() {
                if live.load(Ordering::SeqCst) >= MAX_CONNS {
                    continue;
                }
                live.fetch_add(1, Ordering::SeqCst);
                let live = Arc::clone(&live);
                let spawned = std::thread::Builder::new()
                    .name("preflight-sink-conn".into())
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        serve(s, nonce);
                        live.fetch_sub(1, Ordering::SeqCst);
                    });
                if let Ok(t) = spawned {
                    threads.push(t);
                }
            }
        }
        threads.retain(|t| !t.is_finished());
    }
    for t in threads {
        let _ = t.join();
    }
}

/// Serve one measurement connection: the header (magic and this node's nonce) within 1 s, then count the
/// bytes for [`WINDOW`] or up to [`CAP`], answer with the count and the microseconds (16 bytes, big endian),
/// and read on until the sender closes (bounded), so that the answer is never reset away.
fn serve(mut stream: TcpStream, nonce: u64) {
    if stream.set_nonblocking(false).is_err()
        || stream
            .set_read_timeout(Some(Duration::from_secs(1)))
            .is_err()
    {
        return;
    }
    let mut head = [0u8; 16];
    if stream.read_exact(&mut head).is_err() || &head[..8] != MAGIC {
        return;
    }
    if u64::from_be_bytes([
        head[8], head[9], head[10], head[11], head[12], head[13], head[14], head[15],
    ]) != nonce
    {
        return;
    }
    let start = Instant::now();
    let end = start + WINDOW;
    let mut buf = vec![0u8; 256 * 1024];
    let mut bytes: u64 = 0;
    while bytes < CAP {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let us = start.elapsed().as_micros().max(1) as u64;
    let mut answer = [0u8; 16];
    answer[..8].copy_from_slice(&bytes.to_be_bytes());
    answer[8..].copy_from_slice(&us.to_be_bytes());
    if stream.write_all(&answer).is_err() {
        return;
    }
    // Read on until the sender closes: closing with unread data would reset the connection.
    let until = Instant::now() + LEG_BOUND;
    while Instant::now() < until {
        if stream
            .set_read_timeout(Some(
                until
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            ))
            .is_err()
        {
            break;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

/// Run this node's pairs, one network after the other: each figure (kbit/s) or why it failed.
pub fn run_legs(legs: &[MeasureLeg]) -> Vec<Figure> {
    legs.iter()
        .map(|l| {
            let r = match l.to {
                Some(to) => send_to(to, l.nonce),
                None => Err("the successor has no measurement listener for this family".into()),
            };
            Figure {
                net: l.net,
                kbps: r.as_ref().ok().copied(),
                error: r.err(),
            }
        })
        .collect()
}

/// Send to a sink at `to` (whose node has `nonce`) until it answers; the figure in kbit/s.
pub fn send_to(to: SocketAddr, nonce: u64) -> Result<u64, String> {
    let started = Instant::now();
    let mut stream = TcpStream::connect_timeout(&to, CONNECT_BOUND)
        .map_err(|e| format!("cannot connect to {to}: {e}"))?;
    let deadline = started + LEG_BOUND;
    let mut head = [0u8; 16];
    head[..8].copy_from_slice(MAGIC);
    head[8..].copy_from_slice(&nonce.to_be_bytes());
    stream
        .set_write_timeout(Some(CONNECT_BOUND))
        .and_then(|_| stream.write_all(&head))
        .and_then(|_| stream.set_nonblocking(true))
        .map_err(|e| format!("{to}: {e}"))?;
    let chunk = vec![0u8; 1024 * 1024];
    let mut sent: u64 = 0;
    let mut answer = Vec::with_capacity(16);
    while answer.len() < 16 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "no answer from {to} within {} ms",
                LEG_BOUND.as_millis()
            ));
        }
        let mut flags = PollFlags::POLLIN;
        if sent < CAP + (8 << 20) {
            flags |= PollFlags::POLLOUT;
        }
        let mut fds = [PollFd::new(stream.as_fd(), flags)];
        let ms = left.as_millis().clamp(1, 1000) as u16;
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(format!("{to}: {e}")),
        }
        let ready = fds[0].revents().unwrap_or(PollFlags::empty());
        if ready.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
            let mut b = [0u8; 16];
            match stream.read(&mut b[..16 - answer.len()]) {
                Ok(0) => return Err(format!("{to} closed before answering")),
                Ok(n) => answer.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(format!("{to}: {e}")),
            }
        }
        if ready.contains(PollFlags::POLLOUT) && answer.is_empty() {
            match stream.write(&chunk) {
                Ok(n) => sent += n as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(format!("{to}: {e}")),
            }
        }
    }
    // Reset, not close: what the socket still holds is dropped at once instead of filling the link (a slow
    // network would carry it for seconds, in the way of the verdict).
    super::net::close_after_peer(stream);
    let bytes = u64::from_be_bytes(answer[..8].try_into().unwrap_or([0; 8]));
    let us = u64::from_be_bytes(answer[8..16].try_into().unwrap_or([0; 8])).max(1);
    // bits per microsecond = Mbit/s; ×1000 = kbit/s.
    Ok(bytes.saturating_mul(8_000) / us)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over loopback: a figure comes back, the wrong nonce gets no answer, and nothing listens after stop.
    #[test]
    fn a_pair_measures_over_loopback_and_only_the_node_expected_answers() {
        let sink = Sink::start(true, false, 42);
        let port = sink.port4.expect("listens");
        let to = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
        let t = Instant::now();
        let k = send_to(to, 42).expect("measured");
        assert!(k > 1_000, "{k} kbit/s over loopback");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(send_to(to, 7).is_err());
        let legs = [MeasureLeg {
            net: 3,
            to: None,
            nonce: 1,
        }];
        let f = run_legs(&legs);
        assert_eq!((f[0].net, f[0].kbps), (3, None));
        sink.stop();
        assert!(send_to(to, 42).is_err());
    }

    /// The IPv6 listener is IPv6 only: an IPv4 connection to its port finds nothing (where the host has
    /// IPv6 at all).
    #[test]
    fn the_ipv6_sink_measures_over_ipv6_only() {
        let sink = Sink::start(false, true, 5);
        let Some(port) = sink.port6 else {
            eprintln!("no IPv6 here: skipped");
            return;
        };
        assert_eq!(sink.port4, None);
        let k =
            send_to(SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port), 5).expect("measured");
        assert!(k > 1_000, "{k} kbit/s");
        let v4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
        assert!(send_to(v4, 5).is_err());
        sink.stop();
    }
}
