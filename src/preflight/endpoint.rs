//! Whether the master endpoint leads to this master: a master that listens on the wildcard address (node
//! rank 0, no address of this node is the master address: a Service address forwards to it, or should)
//! connects to the master endpoint as a worker would, waits for the greeting, and sends a challenge
//! (`Probe` with its nonce) that every master of this build answers with its own nonce (`ProbeAck`). Its own
//! nonce: the endpoint leads here. Another master's nonce: another node listens as the master there (a second
//! node rank 0, a copy-pasted replica spec), and this node joins that meeting as a worker, so that the master
//! the others reach names the duplicate rank. Nothing: the endpoint does not lead here, which the meeting
//! reports when nobody came.
//!
//! The check runs on its own thread (the master's thread keeps greeting, so that the check can reach it) and
//! repeats while the meeting lasts: a Service that forwards to two masters is seen on a later try.

use super::net::{recv_any, send, RecvError};
use super::protocol::{FrameBuf, Msg};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Pause before the first check: a healthy fleet that starts at once has met by then, and never sees one.
const FIRST: Duration = Duration::from_millis(200);
/// Pause between checks.
const EVERY: Duration = Duration::from_secs(1);
/// Bound on connecting, and on each answer.
const STEP: Duration = Duration::from_millis(500);

/// What one check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The endpoint leads to this master.
    Here,
    /// Another master answers at the endpoint: its nonce, and how it answered (`another preflight master`,
    /// `a preflight master that says 4 nodes`).
    Other(u64, String),
    /// The endpoint did not lead to a master: why (the connect error, no greeting, another job).
    Nowhere(String),
}

/// A running check; [`Check::stop`] ends it.
pub struct Check {
    /// What the checks found and the caller has not taken yet (a mutex, not a channel: smaller code).
    found: Arc<Mutex<Vec<Found>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Check {
    /// Start checking `endpoint` for the master with job key `key` and nonce `nonce`.
    pub fn start(endpoint: SocketAddr, key: &str, nonce: u64) -> Option<Check> {
        let found = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, out) = (Arc::clone(&stop), Arc::clone(&found));
        let key = key.to_string();
        let thread = std::thread::Builder::new()
            .name("preflight-endpoint".into())
            .spawn(move || run(endpoint, &key, nonce, &flag, &out))
            .ok()?;
        Some(Check {
            found,
            stop,
            thread: Some(thread),
        })
    }

    /// The checks finished since the last call, oldest first.
    pub fn found(&self) -> Vec<Found> {
        self.found
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }

    /// End the check. A check still waiting on a connection is left to end on its own (within about a second;
    /// its socket is close-on-exec), so that a meeting never waits for it.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

fn run(endpoint: SocketAddr, key: &str, nonce: u64, stop: &AtomicBool, out: &Mutex<Vec<Found>>) {
    let mut pause = FIRST;
    loop {
        let until = Instant::now() + pause;
        while Instant::now() < until {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let f = once(endpoint, key, nonce);
        match out.lock() {
            // Bounded: the caller takes them every 100 ms; a check every second.
            Ok(mut v) if v.len() < 64 => v.push(f),
            Ok(_) => {}
            Err(_) => return,
        }
        pause = EVERY;
    }
}

/// One check: connect, read the greeting, challenge, read the answer.
fn once(endpoint: SocketAddr, key: &str, nonce: u64) -> Found {
    let mut stream = match TcpStream::connect_timeout(&endpoint, STEP) {
        Ok(stream) => stream,
        Err(e) => return Found::Nowhere(super::net::connect_words(&e)),
    };
    let _ = stream.set_nonblocking(true);
    let _ = stream.set_nodelay(true);
    let mut buf = FrameBuf::default();
    // The greeting of this job's endpoint, whatever node count the master there says.
    match next(&mut stream, &mut buf, key) {
        Ok((Msg::Greeting, _)) => {}
        Ok(_) => return Found::Nowhere("it sent something else than a greeting".into()),
        Err(why) => return Found::Nowhere(why),
    }
    if send(&mut stream, key, &Msg::Probe(nonce), Instant::now() + STEP).is_err() {
        return Found::Nowhere("it closed the connection".into());
    }
    let found = match next(&mut stream, &mut buf, key) {
        Ok((Msg::ProbeAck(n), _)) if n == nonce => Found::Here,
        Ok((Msg::ProbeAck(n), None)) => Found::Other(n, "another preflight master".into()),
        Ok((Msg::ProbeAck(n), Some(c))) => {
            Found::Other(n, format!("a preflight master that says {c} nodes"))
        }
        // An older master, or a Service that forwards to something else after the greeting.
        Ok(_) => Found::Nowhere("a master that does not answer the challenge".into()),
        Err(why) => Found::Nowhere(why),
    };
    // The checker closes first: the master's side goes without TIME_WAIT.
    drop(stream);
    found
}

/// The next message of this job's endpoint (any node count), or why none came, in words.
fn next(s: &mut TcpStream, buf: &mut FrameBuf, key: &str) -> Result<(Msg, Option<u32>), String> {
    match recv_any(s, buf, key, Instant::now() + STEP) {
        Ok(x) => Ok(x),
        Err(RecvError::Timeout) => Err(format!("nothing spoke within {} ms", STEP.as_millis())),
        Err(RecvError::Io(e)) => Err(super::net::connect_words(&e)),
        Err(e) => Err(e.to_string()),
    }
}
