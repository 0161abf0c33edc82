//! The preflight's sockets: listeners, framed reads and writes with deadlines, the probe port's responder
//! and the prober. Plain `std::net` sockets (close-on-exec, as std opens every socket) driven by `poll`; no
//! async runtime.
//!
//! Every socket is non-blocking; a read or write waits with `poll(2)` until its deadline. A connection the
//! other side has closed is closed here with `SO_LINGER` 0 ([`close_after_peer`]): the peer closed first, so
//! all data has been exchanged, and the reset leaves no `TIME_WAIT` or `LAST_ACK` socket behind on this side
//! (the master port is free for the launcher at once).

use super::protocol::{
    decode, decode_any, encode, DecodeError, FrameBuf, Msg, ProbeOutcome, ProbeReport, Target,
};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{
    self, sockopt, AddressFamily, Backlog, SockFlag, SockType, SockaddrStorage,
};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A listening TCP socket on `addr` (port 0: an ephemeral port, as NCCL's bootstrap takes): close-on-exec,
/// `SO_REUSEADDR` (a previous run's `TIME_WAIT` does not block it), non-blocking, with the largest backlog
/// the kernel allows (`SOMAXCONN`; every node of a large job connects to the master at once).
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd: OwnedFd = socket::socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    socket::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    socket::bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrStorage::from(addr),
    )?;
    socket::listen(&fd, Backlog::MAXCONN)?;
    let l = TcpListener::from(fd);
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Wait until `fd` is readable (or writable, with `write`) or `deadline` passes; false on timeout. Waits in
/// slices of at most 1 s so that a far deadline never overflows `poll`'s timeout.
pub fn wait(fd: impl AsFd, write: bool, deadline: Instant) -> io::Result<bool> {
    let flags = if write {
        PollFlags::POLLOUT
    } else {
        PollFlags::POLLIN
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        let ms = left.as_millis().clamp(1, 1000) as u16;
        let mut fds = [PollFd::new(fd.as_fd(), flags)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) => continue,
            Ok(_) => return Ok(true),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Milliseconds until `deadline`, at least 1 and at most 1000 (one `poll`/`epoll_wait` slice).
pub fn slice_ms(deadline: Instant) -> u16 {
    deadline
        .saturating_duration_since(Instant::now())
        .as_millis()
        .clamp(1, 1000) as u16
}

/// Write one message as a frame before `deadline`.
pub fn send(stream: &mut TcpStream, key: &str, msg: &Msg, deadline: Instant) -> io::Result<()> {
    send_frame(stream, &encode(key, msg), deadline)
}

/// Write an encoded frame ([`encode`]) before `deadline`.
pub fn send_frame(stream: &mut TcpStream, bytes: &[u8], deadline: Instant) -> io::Result<()> {
    let mut off = 0;
    while off < bytes.len() {
        match stream.write(&bytes[off..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if !wait(&*stream, true, deadline)? {
                    return Err(io::ErrorKind::TimedOut.into());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Why no message was received.
#[derive(Debug)]
pub enum RecvError {
    /// Nothing (complete) arrived before the deadline.
    Timeout,
    /// The other side closed the connection.
    Closed,
    /// A frame arrived that is not a message of this meeting.
    Decode(DecodeError),
    /// The socket failed.
    Io(io::Error),
}

impl std::fmt::Display for RecvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecvError::Timeout => write!(f, "no answer in time"),
            RecvError::Closed => write!(f, "the connection was closed"),
            RecvError::Decode(e) => write!(f, "{e}"),
            RecvError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Read what is available without blocking into `buf`. `Ok(true)` when the peer closed the connection
/// (end of file), `Ok(false)` when it would block.
pub fn drain(stream: &mut TcpStream, buf: &mut FrameBuf) -> io::Result<bool> {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(true),
            Ok(n) => {
                buf.push(&chunk[..n]);
                // Never buffer far past one frame: a peer that streams garbage is cut off by next_frame.
                if buf.pending() > super::protocol::MAX_FRAME + 8 {
                    return Ok(false);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Read the next message of meeting `key` before `deadline`.
pub fn recv(
    stream: &mut TcpStream,
    buf: &mut FrameBuf,
    key: &str,
    deadline: Instant,
) -> Result<Msg, RecvError> {
    recv_with(stream, buf, deadline, |body| decode(body, key))
}

/// Read the next message of this job's master endpoint before `deadline`, whatever node count its sender
/// says ([`decode_any`]): the message and the sender's count when it differs from `key`'s.
pub fn recv_any(
    stream: &mut TcpStream,
    buf: &mut FrameBuf,
    key: &str,
    deadline: Instant,
) -> Result<(Msg, Option<u32>), RecvError> {
    recv_with(stream, buf, deadline, |body| decode_any(body, key))
}

/// Read the next frame before `deadline` and decode it with `decode`.
fn recv_with<T>(
    stream: &mut TcpStream,
    buf: &mut FrameBuf,
    deadline: Instant,
    decode: impl Fn(&[u8]) -> Result<T, DecodeError>,
) -> Result<T, RecvError> {
    loop {
        match buf.next_frame() {
            Ok(Some(body)) => return decode(&body).map_err(RecvError::Decode),
            Ok(None) => {}
            Err(e) => return Err(RecvError::Decode(e)),
        }
        match wait(&*stream, false, deadline) {
            Ok(true) => {}
            Ok(false) => return Err(RecvError::Timeout),
            Err(e) => return Err(RecvError::Io(e)),
        }
        match drain(stream, buf) {
            Ok(true) => {
                // Closed: a frame that arrived with the FIN is still returned.
                return match buf.next_frame() {
                    Ok(Some(body)) => decode(&body).map_err(RecvError::Decode),
                    Ok(None) => Err(RecvError::Closed),
                    Err(e) => Err(RecvError::Decode(e)),
                };
            }
            Ok(false) => {}
            // A reset after the last frame: the frame counts (it was delivered before the reset).
            Err(e) => {
                return match buf.next_frame() {
                    Ok(Some(body)) => decode(&body).map_err(RecvError::Decode),
                    _ => Err(RecvError::Io(e)),
                }
            }
        }
    }
}

/// True when bytes written to `stream` are not yet acknowledged by the peer (`SIOCOUTQ`, tcp(7): the
/// unsent and unacknowledged bytes of the send queue); false when all were, or the kernel cannot say.
pub fn unacked(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut n: nix::libc::c_int = 0;
    // SAFETY: TIOCOUTQ (= SIOCOUTQ) writes one int into `n`, a valid, owned location.
    let rc = unsafe { nix::libc::ioctl(stream.as_raw_fd(), nix::libc::TIOCOUTQ, &mut n) };
    rc == 0 && n > 0
}

/// Close a connection whose peer has closed (or must be cut off) with `SO_LINGER` 0: no `TIME_WAIT` or
/// `LAST_ACK` socket stays on this side.
pub fn close_after_peer(stream: TcpStream) {
    let _ = socket::setsockopt(
        &stream,
        sockopt::Linger,
        &nix::libc::linger {
            l_onoff: 1,
            l_linger: 0,
        },
    );
    drop(stream);
}

/// Wait (until `deadline`) for the peer to close, discarding anything it sends, then
/// [`close_after_peer`].
pub fn await_close(mut stream: TcpStream, deadline: Instant) {
    let mut sink = FrameBuf::default();
    while let Ok(true) = wait(&stream, false, deadline) {
        match drain(&mut stream, &mut sink) {
            Ok(false) if sink.pending() <= super::protocol::MAX_FRAME => {}
            _ => break,
        }
    }
    close_after_peer(stream);
}

/// The outcome a failed connect stands for: refused, timed out, no route, or another failure.
pub fn classify(e: &io::Error) -> ProbeOutcome {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => ProbeOutcome::Refused,
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ProbeOutcome::TimedOut,
        _ => match e.raw_os_error() {
            Some(nix::libc::EHOSTUNREACH) | Some(nix::libc::ENETUNREACH) => ProbeOutcome::NoRoute,
            _ => ProbeOutcome::Failed,
        },
    }
}

/// A failed connect or socket error in the words of what was observed: `connection refused` (a reset answered
/// the SYN), `connection timed out` (nothing answered), `no route to host` (`EHOSTUNREACH`: no ARP/ND
/// answer, or an ICMP host unreachable), `network unreachable`, `connection reset`; any other error as the
/// system says it (connect(2), tcp(7)).
pub fn connect_words(e: &io::Error) -> String {
    let words = match e.raw_os_error() {
        Some(nix::libc::EHOSTUNREACH) => "no route to host",
        Some(nix::libc::ENETUNREACH) => "network unreachable",
        Some(nix::libc::ECONNREFUSED) => "connection refused",
        Some(nix::libc::ETIMEDOUT) => "connection timed out",
        Some(nix::libc::ECONNRESET) => "connection reset",
        _ => match e.kind() {
            io::ErrorKind::ConnectionRefused => "connection refused",
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => "connection timed out",
            io::ErrorKind::ConnectionReset => "connection reset",
            io::ErrorKind::ConnectionAborted => "connection aborted",
            _ => return e.to_string(),
        },
    };
    words.to_string()
}

/// How long a prober waits for the answer on one connection before it tries a new one (within its timeout).
const ANSWER_BOUND: Duration = Duration::from_secs(2);
/// Pause between two probe connections that got no answer.
const PROBE_RETRY: Duration = Duration::from_millis(50);

/// Connect to `target`'s probe port within `timeout`, say the nonce expected, read the listener's, and close
/// first (the prober's side keeps the `TIME_WAIT`, on an ephemeral port). A connection on which no answer
/// comes (the responder busy with strangers, a lost segment) is tried again while `timeout` lasts: the
/// outcome is then [`ProbeOutcome::Unanswered`], never [`ProbeOutcome::WrongNode`], which is only for an answer that
/// came and is not the node's (another nonce, another job, another protocol).
pub fn probe(target: &Target, key: &str, timeout: Duration) -> ProbeReport {
    let start = Instant::now();
    let deadline = start + timeout.max(Duration::from_millis(1));
    let addr = SocketAddr::new(target.addr, target.port);
    let mut error = None;
    let mut connected_once = false;
    let outcome = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break if connected_once {
                ProbeOutcome::Unanswered
            } else {
                ProbeOutcome::TimedOut
            };
        }
        match TcpStream::connect_timeout(&addr, left) {
            Err(e) => {
                let o = classify(&e);
                if connected_once && o == ProbeOutcome::TimedOut {
                    break ProbeOutcome::Unanswered;
                }
                if matches!(o, ProbeOutcome::NoRoute | ProbeOutcome::Failed) {
                    error = Some(connect_words(&e));
                }
                break o;
            }
            Ok(mut s) => {
                connected_once = true;
                let until = (Instant::now() + ANSWER_BOUND).min(deadline);
                let _ = s.set_nonblocking(true);
                let _ = s.set_nodelay(true);
                let mut buf = FrameBuf::default();
                let answer = send(&mut s, key, &Msg::Probe(target.nonce), until)
                    .map_err(RecvError::Io)
                    .and_then(|()| recv(&mut s, &mut buf, key, until));
                drop(s);
                match answer {
                    Ok(Msg::ProbeAck(nonce)) if nonce == target.nonce => {
                        break ProbeOutcome::Connected
                    }
                    // An answer, and not the node's.
                    Ok(_) | Err(RecvError::Decode(_)) => break ProbeOutcome::WrongNode,
                    Err(RecvError::Timeout | RecvError::Closed | RecvError::Io(_)) => {
                        std::thread::sleep(
                            PROBE_RETRY.min(deadline.saturating_duration_since(Instant::now())),
                        );
                    }
                }
            }
        }
    };
    ProbeReport {
        target: target.index,
        outcome,
        error,
        ms: start.elapsed().as_millis().min(u128::from(u32::MAX)) as u32,
    }
}

/// The probe port: a listener on the node's bootstrap address (port 0) and a thread that answers the probes
/// (several at once, bounded) with the node's nonce, until [`Responder::stop`].
pub struct Responder {
    /// The port the listener got, or `None` when it could not listen.
    pub port: Option<u16>,
    /// The bind error, when it could not listen.
    pub error: Option<String>,
    /// Dropping the write end of this pipe wakes the thread at once (its `poll` sees the hang-up).
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl Responder {
    /// Listen on `addr` port 0 and answer probes of meeting `key` with `nonce`. Never fails: a bind error is
    /// recorded (the node reports it, and the fleet refuses: NCCL's bootstrap would fail the same way).
    pub fn start(addr: IpAddr, key: &str, nonce: u64) -> Responder {
        let failed = |e: String| Responder {
            port: None,
            error: Some(e),
            stop: None,
            thread: None,
        };
        let listener = match listen(SocketAddr::new(addr, 0)) {
            Ok(l) => l,
            Err(e) => return failed(e.to_string()),
        };
        let (wake, stop) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
            Ok(p) => p,
            Err(e) => return failed(format!("cannot create a pipe: {e}")),
        };
        let port = listener.local_addr().map(|a| a.port()).ok();
        let key = key.to_string();
        match std::thread::Builder::new()
            .name("preflight-probe-port".into())
            .stack_size(64 * 1024)
            .spawn(move || answer_probes(listener, &key, nonce, wake))
        {
            Ok(t) => Responder {
                port,
                error: None,
                stop: Some(stop),
                thread: Some(t),
            },
            Err(e) => failed(format!("cannot start the probe thread: {e}")),
        }
    }

    /// Stop answering, close the listener and its connections, and join the thread (at once).
    pub fn stop(mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Most probe connections the responder serves at once; a new one beyond it pushes out the oldest, so that
/// a scanner holding connections never keeps the ring neighbour's probe out.
const MAX_PROBE_CONNS: usize = 16;
/// How long a probe connection may take to send its challenge (a prober sends it at once).
const CHALLENGE_BOUND: Duration = Duration::from_secs(1);
/// How long, after the answer, the responder waits for the prober to close first.
const AFTER_ANSWER: Duration = Duration::from_secs(2);

/// One connection to the probe port.
struct ProbeConn {
    stream: TcpStream,
    buf: FrameBuf,
    /// When it must have sent its challenge (or, once answered, closed).
    due: Instant,
    answered: bool,
}

/// Serve the probe port until `wake` hangs up: every connection at once (at most [`MAX_PROBE_CONNS`]),
/// each answered when its challenge comes (of this job or another: the prober tells them apart by the key
/// and nonce), closed when it sends nothing within [`CHALLENGE_BOUND`].
fn answer_probes(listener: TcpListener, key: &str, nonce: u64, wake: OwnedFd) {
    let mut conns: Vec<ProbeConn> = Vec::new();
    loop {
        let now = Instant::now();
        // Overdue connections go (a silent stranger; a prober that did not close).
        let (keep, overdue): (Vec<ProbeConn>, Vec<ProbeConn>) =
            conns.into_iter().partition(|c| c.due > now);
        conns = keep;
        overdue.into_iter().for_each(|c| close_after_peer(c.stream));
        let timeout = conns
            .iter()
            .map(|c| c.due)
            .min()
            .map(|d| PollTimeout::from(slice_ms(d)))
            .unwrap_or(PollTimeout::NONE);
        let ready: Vec<bool> = {
            let mut fds = vec![
                PollFd::new(listener.as_fd(), PollFlags::POLLIN),
                PollFd::new(wake.as_fd(), PollFlags::POLLIN),
            ];
            fds.extend(
                conns
                    .iter()
                    .map(|c| PollFd::new(c.stream.as_fd(), PollFlags::POLLIN)),
            );
            match poll(&mut fds, timeout) {
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return,
                Ok(_) => {}
            }
            fds.iter().map(|f| f.any().unwrap_or(true)).collect()
        };
        if ready[1] {
            conns.into_iter().for_each(|c| close_after_peer(c.stream));
            return;
        }
        let mut gone = Vec::new();
        for (i, c) in conns.iter_mut().enumerate() {
            if ready[i + 2] && !serve(c, key, nonce) {
                gone.push(i);
            }
        }
        for i in gone.into_iter().rev() {
            close_after_peer(conns.swap_remove(i).stream);
        }
        if ready[0] {
            while let Ok((s, _)) = listener.accept() {
                if conns.len() >= MAX_PROBE_CONNS {
                    if let Some(i) = (0..conns.len()).min_by_key(|&i| conns[i].due) {
                        close_after_peer(conns.swap_remove(i).stream);
                    }
                }
                let _ = s.set_nonblocking(true);
                let _ = s.set_nodelay(true);
                conns.push(ProbeConn {
                    stream: s,
                    buf: FrameBuf::default(),
                    due: Instant::now() + CHALLENGE_BOUND,
                    answered: false,
                });
            }
        }
    }
}

/// Read what came on a probe connection and answer a challenge; false when the connection is over (the
/// prober closed, or sent something else).
fn serve(c: &mut ProbeConn, key: &str, nonce: u64) -> bool {
    let eof = drain(&mut c.stream, &mut c.buf);
    if c.answered {
        // Anything after the answer is discarded; the prober's close ends it.
        return matches!(eof, Ok(false)) && c.buf.pending() <= super::protocol::MAX_FRAME;
    }
    match c.buf.next_frame() {
        Ok(Some(body)) => match decode(&body, key) {
            Ok(Msg::Probe(_)) | Err(DecodeError::ForeignJob | DecodeError::OtherShape { .. }) => {
                // A small frame into an empty send buffer: it does not block.
                let deadline = Instant::now() + Duration::from_millis(100);
                let _ = send(&mut c.stream, key, &Msg::ProbeAck(nonce), deadline);
                c.answered = true;
                c.due = Instant::now() + AFTER_ANSWER;
                matches!(eof, Ok(false))
            }
            _ => false,
        },
        Ok(None) => matches!(eof, Ok(false)),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lo() -> IpAddr {
        "127.0.0.1".parse().expect("ip")
    }

    #[test]
    fn a_probe_reaches_the_node_expected_and_only_it() {
        let r = Responder::start(lo(), "k", 42);
        let port = r.port.expect("listening");
        let t = |nonce| Target {
            index: 1,
            name: "x".into(),
            addr: lo(),
            port,
            nonce,
        };
        assert_eq!(
            probe(&t(42), "k", Duration::from_secs(2)).outcome,
            ProbeOutcome::Connected
        );
        // Another node's nonce: the listener that answered is not the node expected.
        assert_eq!(
            probe(&t(7), "k", Duration::from_secs(2)).outcome,
            ProbeOutcome::WrongNode
        );
        // Another job's key: no answer the prober accepts.
        assert_eq!(
            probe(&t(42), "other", Duration::from_secs(2)).outcome,
            ProbeOutcome::WrongNode
        );
        r.stop();
        // Stopped: nothing listens any more.
        assert_eq!(
            probe(&t(42), "k", Duration::from_secs(2)).outcome,
            ProbeOutcome::Refused
        );
    }

    #[test]
    fn a_listener_that_never_answers_is_unanswered_not_another_node() {
        let l = listen(SocketAddr::new(lo(), 0)).expect("listen");
        let port = l.local_addr().expect("addr").port();
        let t = Target {
            index: 1,
            name: "x".into(),
            addr: lo(),
            port,
            nonce: 1,
        };
        assert_eq!(
            probe(&t, "k", Duration::from_secs(1)).outcome,
            ProbeOutcome::Unanswered
        );
    }

    /// Silent strangers holding more connections than the responder serves at once do not keep a probe out.
    #[test]
    fn strangers_on_the_probe_port_do_not_keep_the_prober_out() {
        let r = Responder::start(lo(), "k", 42);
        let port = r.port.expect("listening");
        let addr = SocketAddr::new(lo(), port);
        let strangers: Vec<TcpStream> = (0..MAX_PROBE_CONNS + 4)
            .map(|_| TcpStream::connect(addr).expect("connect"))
            .collect();
        let t = Target {
            index: 1,
            name: "x".into(),
            addr: lo(),
            port,
            nonce: 42,
        };
        let p = probe(&t, "k", Duration::from_secs(3));
        assert_eq!(p.outcome, ProbeOutcome::Connected, "{p:?}");
        assert!(p.ms < 1500, "{p:?}");
        // Another job's prober gets an answer, and sees it is not its node.
        let mut other = t.clone();
        other.nonce = 42;
        assert_eq!(
            probe(&other, "other", Duration::from_secs(2)).outcome,
            ProbeOutcome::WrongNode
        );
        drop(strangers);
        r.stop();
    }

    #[test]
    fn listeners_are_close_on_exec_and_free_the_port_when_closed() {
        use std::os::fd::AsRawFd;
        let l = listen(SocketAddr::new(lo(), 0)).expect("listen");
        let flags = nix::fcntl::fcntl(&l, nix::fcntl::FcntlArg::F_GETFD).expect("fcntl");
        assert!(flags & nix::libc::FD_CLOEXEC != 0);
        let addr = l.local_addr().expect("addr");
        // A connection closed by the client first, then reset here: the port can be bound again without
        // SO_REUSEADDR (std's bind sets it, so use nix).
        let mut c = TcpStream::connect(addr).expect("connect");
        let (s, _) = loop {
            match l.accept() {
                Ok(x) => break x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        let _ = s.set_nonblocking(true);
        let _ = c.write_all(b"x");
        drop(c);
        drop(l);
        await_close(s, Instant::now() + Duration::from_secs(2));
        let fd = socket::socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .expect("socket");
        socket::bind(fd.as_raw_fd(), &SockaddrStorage::from(addr)).expect("the port is free again");
    }

    #[test]
    fn connect_errors_are_said_as_observed() {
        for (e, want) in [
            (
                io::Error::from_raw_os_error(nix::libc::ECONNREFUSED),
                "connection refused",
            ),
            (
                io::Error::from(io::ErrorKind::ConnectionRefused),
                "connection refused",
            ),
            // std's connect_timeout says a timeout so.
            (
                io::Error::new(io::ErrorKind::TimedOut, "connection timed out"),
                "connection timed out",
            ),
            (
                io::Error::from_raw_os_error(nix::libc::ETIMEDOUT),
                "connection timed out",
            ),
            (
                io::Error::from_raw_os_error(nix::libc::EHOSTUNREACH),
                "no route to host",
            ),
            (
                io::Error::from_raw_os_error(nix::libc::ENETUNREACH),
                "network unreachable",
            ),
            (
                io::Error::from_raw_os_error(nix::libc::ECONNRESET),
                "connection reset",
            ),
        ] {
            assert_eq!(connect_words(&e), want, "{e:?}");
        }
        // Anything else as the system says it.
        let other = io::Error::from_raw_os_error(nix::libc::EACCES);
        assert_eq!(connect_words(&other), other.to_string());
        // A real refusal: nothing listens on a port just freed.
        let l = listen(SocketAddr::new(lo(), 0)).expect("listen");
        let addr = l.local_addr().expect("addr");
        drop(l);
        let e = TcpStream::connect(addr).expect_err("refused");
        assert_eq!(connect_words(&e), "connection refused");
    }

    #[test]
    fn connect_errors_are_classified() {
        assert_eq!(
            classify(&io::Error::from(io::ErrorKind::ConnectionRefused)),
            ProbeOutcome::Refused
        );
        assert_eq!(
            classify(&io::Error::from(io::ErrorKind::TimedOut)),
            ProbeOutcome::TimedOut
        );
        assert_eq!(
            classify(&io::Error::from_raw_os_error(nix::libc::ENETUNREACH)),
            ProbeOutcome::NoRoute
        );
        assert_eq!(
            classify(&io::Error::from_raw_os_error(nix::libc::EACCES)),
            ProbeOutcome::Failed
        );
    }
}
