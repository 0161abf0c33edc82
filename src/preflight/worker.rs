//! A worker's side: connect to the master port (retrying until the deadline), wait for the master's
//! greeting before saying anything, report, probe the ring successor, receive the verdict, and close first.
//!
//! The worker never sends a byte before the master has greeted it: a worker that arrives after the master
//! has exec'd its launcher meets the launcher's own server on that port (Paddle's HTTP master, torch's
//! TCPStore), which waits for the client to speak; the worker sees no greeting within [`GREETING_BOUND`],
//! says so and fails open, and the launcher never receives a stray byte.

use super::net::{self, recv, send, RecvError};
use super::protocol::{sanitize_verdict, DecodeError, FleetVerdict, FrameBuf, Msg, NodeReport};
use super::Setup;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How long a worker waits for the master's greeting after connecting.
pub const GREETING_BOUND: Duration = Duration::from_secs(3);
/// First pause between connection attempts; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(10);
/// Longest pause between connection attempts: a worker meets a late master at most this long after it
/// listens. 10,000 workers waiting for a late master send its host at most 40,000 SYNs a second, each
/// answered by a reset (about 2.5 MB/s).
const RETRY_MAX: Duration = Duration::from_millis(250);

/// How the worker's side ended.
#[derive(Debug)]
pub enum WorkerEnd {
    /// The master's verdict (sanitised).
    Verdict(FleetVerdict),
    /// No verdict: why (the caller fails open, or refuses under strict mode).
    NoVerdict(String),
}

/// Run the worker's side of the meeting `s` with this node's report `me` until `deadline` (for reaching
/// the master; once connected, the master's own deadline bounds the wait), probing within `probe_timeout`.
pub fn run(s: &Setup, me: NodeReport, deadline: Instant, probe_timeout: Duration) -> WorkerEnd {
    let master = s.master;
    let (mut stream, mut buf) = match connect(s, deadline, me.nonce) {
        Ok(x) => x,
        Err(why) => return WorkerEnd::NoVerdict(why),
    };
    let bound = Instant::now() + Duration::from_secs(5);
    if let Err(e) = send(&mut stream, &s.key, &Msg::Hello(me), bound) {
        return WorkerEnd::NoVerdict(format!("cannot report to the master {master}: {e}"));
    }
    // The master waits at most its own timeout for the others (it started before this connection).
    let ring_until = Instant::now() + Duration::from_secs(s.timeout_s) + Duration::from_secs(5);
    let target = match recv(&mut stream, &mut buf, &s.key, ring_until) {
        Ok(Msg::Ring(t)) => t,
        Ok(_) => {
            return WorkerEnd::NoVerdict("unexpected message from the master".to_string())
        }
        Err(RecvError::Closed) => {
            return WorkerEnd::NoVerdict(format!(
                "the master {master} closed the preflight before the ring (more nodes arrived than the job has?)"
            ))
        }
        Err(e) => return WorkerEnd::NoVerdict(format!("no ring assignment from the master {master}: {e}")),
    };
    if let Some(t) = &target {
        let p = net::probe(t, &s.key, probe_timeout);
        if let Err(e) = send(
            &mut stream,
            &s.key,
            &Msg::ProbeResult(p),
            Instant::now() + Duration::from_secs(5),
        ) {
            return WorkerEnd::NoVerdict(format!(
                "cannot report the probe to the master {master}: {e}"
            ));
        }
    }
    let verdict_until = Instant::now() + probe_timeout + Duration::from_secs(10);
    let end = match recv(&mut stream, &mut buf, &s.key, verdict_until) {
        Ok(Msg::Verdict(mut v)) => {
            sanitize_verdict(&mut v);
            WorkerEnd::Verdict(v)
        }
        Ok(_) => WorkerEnd::NoVerdict("unexpected message from the master".to_string()),
        Err(e) => WorkerEnd::NoVerdict(format!("no verdict from the master {master}: {e}")),
    };
    // The client closes first: the TIME_WAIT stays here, on an ephemeral port, not on the master port.
    drop(stream);
    end
}

/// Connect to the master and read its greeting, retrying until `deadline`. A server that is not a preflight
/// master (no greeting, or something else) ends the attempts: the preflight there is over.
fn connect(s: &Setup, deadline: Instant, seed: u64) -> Result<(TcpStream, FrameBuf), String> {
    let mut pause = RETRY_FIRST;
    let mut last = String::from("no attempt");
    let mut attempt: u64 = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "no preflight master answered at {} within {} s (last: {last})",
                s.master, s.timeout_s
            ));
        }
        attempt += 1;
        match TcpStream::connect_timeout(&s.master, left.min(Duration::from_secs(2))) {
            Ok(mut stream) => {
                let _ = stream.set_nonblocking(true);
                let _ = stream.set_nodelay(true);
                let mut buf = FrameBuf::default();
                match recv(&mut stream, &mut buf, &s.key, Instant::now() + GREETING_BOUND) {
                    Ok(Msg::Greeting) => return Ok((stream, buf)),
                    Err(RecvError::Decode(DecodeError::ForeignJob)) => {
                        last = "the preflight of another job answered".into();
                    }
                    Err(RecvError::Decode(DecodeError::Version(v))) => {
                        return Err(format!(
                            "the master at {} speaks preflight protocol version {v}, this ncclenv {}: \
                             the nodes run different ncclenv versions",
                            s.master,
                            super::protocol::VERSION
                        ))
                    }
                    Err(RecvError::Closed) | Err(RecvError::Io(_)) => {
                        last = "the master closed the connection".into();
                    }
                    Err(RecvError::Timeout) | Err(RecvError::Decode(_)) | Ok(_) => {
                        return Err(format!(
                            "something other than a preflight master serves {} (the master's launcher has \
                             started: its preflight is over)",
                            s.master
                        ))
                    }
                }
            }
            Err(e) => last = e.to_string(),
        }
        // Jitter of up to a quarter of the pause, so that many workers do not retry in step.
        let jitter =
            pause.as_millis() as u64 * ((attempt.wrapping_mul(0x9e37_79b9) ^ seed) % 25) / 100;
        let sleep = (pause + Duration::from_millis(jitter))
            .min(deadline.saturating_duration_since(Instant::now()));
        std::thread::sleep(sleep);
        pause = (pause * 2).min(RETRY_MAX);
    }
}
