//! A master whose name appears late (#21, item 7): gang-scheduled workers start before the master's pod is in
//! DNS. A job that may span nodes waits for the name (up to 600 s unless `NCCLENV_RESOLVE_TIMEOUT_MS` says
//! otherwise), saying so at once and every 10 s, then takes the route to the master; SIGTERM ends the wait
//! with 143 and the command never starts. The resolver is the real one (glibc's `getaddrinfo` in the debug
//! binary) asking a DNS stand-in on 127.0.0.1:53 inside the namespace that answers NXDOMAIN until a given
//! time and the master's address after it (`ip netns exec` bind-mounts `/etc/netns/NAME/resolv.conf`).

use crate::common;

use common::{exe, Netns, TempDir};
use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ncclenv");
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The master's name, and the address it gets once it appears (on `eth1`'s network).
const NAME: &str = "late-master.test";
const MASTER: Ipv4Addr = Ipv4Addr::new(10, 62, 0, 9);

/// A DNS server on 127.0.0.1:53 in a namespace (a thread of the test): every query is answered NXDOMAIN until
/// `resolves_at`; after it an A query for [`NAME`] gets [`MASTER`] (TTL 0) and an AAAA query an empty
/// NOERROR answer. Counts the queries answered NXDOMAIN and those answered with the address.
struct LateDns {
    stop: Arc<AtomicBool>,
    nxdomain: Arc<AtomicU32>,
    answered: Arc<AtomicU32>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LateDns {
    fn start(ns: &Netns, resolves_at: Instant) -> LateDns {
        let stop = Arc::new(AtomicBool::new(false));
        let nxdomain = Arc::new(AtomicU32::new(0));
        let answered = Arc::new(AtomicU32::new(0));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let path = format!("/run/netns/{}", ns.name);
        let (stop2, nx2, ans2) = (stop.clone(), nxdomain.clone(), answered.clone());
        let thread = std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).expect("netns");
            nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            let sock = std::net::UdpSocket::bind("127.0.0.1:53").expect("bind 127.0.0.1:53");
            sock.set_read_timeout(Some(Duration::from_millis(50)))
                .expect("timeout");
            ready_tx.send(()).expect("ready");
            let mut buf = [0u8; 1500];
            while !stop2.load(Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let late = Instant::now() >= resolves_at;
                if let Some((reply, has_addr)) = dns_reply(&buf[..n], late) {
                    if has_addr {
                        ans2.fetch_add(1, Ordering::Relaxed);
                    } else if !late {
                        nx2.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = sock.send_to(&reply, from);
                }
            }
        });
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("DNS stand-in did not start");
        LateDns {
            stop,
            nxdomain,
            answered,
            thread: Some(thread),
        }
    }
    /// (queries answered NXDOMAIN, queries answered with the address).
    fn counts(&self) -> (u32, u32) {
        (
            self.nxdomain.load(Ordering::Relaxed),
            self.answered.load(Ordering::Relaxed),
        )
    }
}

impl Drop for LateDns {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The reply to one DNS query (RFC 1035 §4.1): the header with QR and RA set, the question, and before
/// `late` RCODE 3 (NXDOMAIN); after it, for an A query of [`NAME`], one A record. True when it carries the
/// address. `None` for a packet that is not a one-question query.
fn dns_reply(q: &[u8], late: bool) -> Option<(Vec<u8>, bool)> {
    if q.len() < 12 || q[2] & 0x80 != 0 || q[4..6] != [0, 1] {
        return None;
    }
    // QNAME: labels up to the zero byte, then QTYPE and QCLASS.
    let mut i = 12;
    let mut labels: Vec<String> = Vec::new();
    loop {
        let len = usize::from(*q.get(i)?);
        i += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(q.get(i..i + len)?).to_ascii_lowercase());
        i += len;
    }
    let qtype = u16::from_be_bytes([*q.get(i)?, *q.get(i + 1)?]);
    let end = i + 4;
    let mut r = q.get(..end)?.to_vec();
    let a = late && labels.join(".") == NAME && qtype == 1;
    r[2] = 0x80 | (q[2] & 0x01);
    r[3] = 0x80
        | if late && labels.join(".") == NAME {
            0
        } else {
            3
        };
    r[6..12].copy_from_slice(&[0, u8::from(a), 0, 0, 0, 0]);
    if a {
        // Name: a pointer to the question's; TYPE A, CLASS IN, TTL 0, RDLENGTH 4.
        r.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4]);
        r.extend_from_slice(&MASTER.octets());
    }
    Some((r, a))
}

/// `/etc/netns/NAME/resolv.conf` (bind-mounted over /etc/resolv.conf by `ip netns exec`): the resolver asks
/// 127.0.0.1 only. Removed on drop.
struct Resolv(std::path::PathBuf);

impl Resolv {
    fn new(ns: &Netns) -> Resolv {
        let dir = std::path::PathBuf::from(format!("/etc/netns/{}", ns.name));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        std::fs::write(
            dir.join("resolv.conf"),
            "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
        )
        .expect("resolv.conf");
        Resolv(dir)
    }
}

impl Drop for Resolv {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Two NICs: `eth0` carries the default route (10.61.0.0/24), `eth1` is the job's network (10.62.0.0/24)
/// where the master's address is.
fn two_nics() -> Netns {
    let ns = Netns::new("late");
    ns.plug("eth0");
    ns.addr("eth0", "10.61.0.2/24");
    ns.route("default via 10.61.0.1 dev eth0");
    ns.plug("eth1");
    ns.addr("eth1", "10.62.0.2/24");
    ns
}

/// A job directory: a `bin/torchrun` stand-in that prints `GLOO_SOCKET_IFNAME=…`, an empty sysfs and devfs.
fn job_dir() -> TempDir {
    let tmp = TempDir::new("late");
    for d in ["bin", "sys", "dev"] {
        std::fs::create_dir_all(tmp.join(d)).unwrap_or_else(|e| panic!("mkdir {d}: {e}"));
    }
    exe::write(
        &tmp.join("bin/torchrun"),
        "#!/bin/sh\necho \"GLOO_SOCKET_IFNAME=$GLOO_SOCKET_IFNAME\"\n",
        0o755,
    );
    tmp
}

/// `ncclenv -- ARGV…` in `ns`, environment cleared but for the job directory's and `vars`.
fn command(ns: &Netns, tmp: &TempDir, argv: &[&str], vars: &[(&str, &str)]) -> Command {
    let mut c = ns.command(BIN);
    c.env_clear()
        .env("PATH", format!("{}:{PATH}", tmp.join("bin").display()))
        .env("NCCLENV_SYSFS", tmp.join("sys"))
        .env("NCCLENV_DEVFS", tmp.join("dev"))
        .env("NCCLENV_SHM_MIN", "0")
        .envs(vars.iter().copied())
        .arg("--")
        .args(argv);
    c
}

/// What one run gave: exit status, the interface the job was given, stderr, and how long it took.
struct Run {
    code: Option<i32>,
    ifname: Option<String>,
    stderr: String,
    took: Duration,
}

fn run(ns: &Netns, tmp: &TempDir, argv: &[&str], vars: &[(&str, &str)]) -> Run {
    let t = Instant::now();
    let mut c = command(ns, tmp, argv, vars);
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "ncclenv panicked:\n{stderr}");
    Run {
        code: out.status.code(),
        ifname: stdout
            .lines()
            .find_map(|l| l.strip_prefix("GLOO_SOCKET_IFNAME="))
            .map(str::to_string),
        stderr,
        took: t.elapsed(),
    }
}

const TWO_NODES: [&str; 4] = [
    "torchrun",
    "--nnodes=2",
    "--master_addr=late-master.test",
    "t.py",
];

#[test]
fn f17_a_late_master_name_is_waited_for_then_routed_to() {
    if !common::require_root() {
        return;
    }
    let ns = two_nics();
    let _resolv = Resolv::new(&ns);
    let tmp = job_dir();
    // The oracle: the kernel's route to the master's address leaves through eth1.
    assert!(ns
        .ip(&["route", "get", &MASTER.to_string()])
        .contains("dev eth1"));
    // The name appears after 11.5 s: past the first 10-second line.
    let dns = LateDns::start(&ns, Instant::now() + Duration::from_millis(11_500));
    let r = run(&ns, &tmp, &TWO_NODES, &[]);
    let (nx, answered) = dns.counts();
    // The resolver really failed first, then got the address.
    assert!(
        nx >= 2 && answered >= 1,
        "NXDOMAIN {nx}, answered {answered}"
    );
    assert_eq!(
        (r.code, r.ifname.as_deref()),
        (Some(0), Some("eth1")),
        "{}",
        r.stderr
    );
    assert!(
        r.took >= Duration::from_millis(11_500) && r.took < Duration::from_secs(60),
        "took {:?}",
        r.took
    );
    let lines: Vec<&str> = r.stderr.lines().collect();
    let first = "ncclenv: waiting up to 600 s for the master's name late-master.test (from --master_addr) to resolve (a launcher's usual wait; NCCLENV_RESOLVE_TIMEOUT_MS sets it); last: Name or service not known";
    assert!(lines.iter().any(|l| l == &first), "{}", r.stderr);
    assert!(
        lines
            .iter()
            .filter(|l| l.contains("master's name"))
            .all(|l| l.chars().count() <= 200),
        "{}",
        r.stderr
    );
    let still = lines
        .iter()
        .filter(|l| l.starts_with("ncclenv: still waiting for the master's name late-master.test (from --master_addr) to resolve: 10 s of 600 s"))
        .count();
    assert_eq!(still, 1, "{}", r.stderr);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ncclenv: the master's name late-master.test resolved after 1")),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("peer-unresolved"), "{}", r.stderr);
}

#[test]
fn f17_sigterm_ends_the_wait_for_a_late_master_and_bounds_and_shapes_that_never_wait() {
    if !common::require_root() {
        return;
    }
    let ns = two_nics();
    let _resolv = Resolv::new(&ns);
    let tmp = job_dir();
    // The name never appears.
    let dns = LateDns::start(&ns, Instant::now() + Duration::from_secs(3600));
    let mut c = command(&ns, &tmp, &TWO_NODES, &[]);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = exe::spawn(&mut c).unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"));
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("for the master's name late-master.test") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let waiting = rx.recv_timeout(Duration::from_secs(30));
    // `ip netns exec` execs the program: the child's pid is ncclenv's.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let t = Instant::now();
    let status = child.wait().expect("wait");
    let ended_in = t.elapsed();
    let mut stdout = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut o, &mut stdout);
    }
    let text = reader.join().expect("reader");
    assert!(waiting.is_ok(), "no wait line:\n{text}");
    assert_eq!(status.code(), Some(143), "{text}");
    assert!(
        ended_in < Duration::from_secs(5),
        "SIGTERM took {ended_in:?}"
    );
    assert!(stdout.is_empty(), "the command ran: {stdout}");
    assert!(
        text.contains("interrupted by signal 15 (SIGTERM) while resolving the master's name: the command was not started"),
        "{text}"
    );
    assert!(dns.counts().0 >= 1, "the resolver never asked the stand-in");

    // NCCLENV_RESOLVE_TIMEOUT_MS keeps its meaning and wins: 300 ms, then the default route.
    let r = run(
        &ns,
        &tmp,
        &TWO_NODES,
        &[("NCCLENV_RESOLVE_TIMEOUT_MS", "300")],
    );
    assert_eq!(r.ifname.as_deref(), Some("eth0"), "{}", r.stderr);
    assert!(r.stderr.contains("peer-unresolved"), "{}", r.stderr);
    assert!(r.took < Duration::from_secs(10), "took {:?}", r.took);
    // A single-node job keeps the 2 s bound.
    let r = run(
        &ns,
        &tmp,
        &[
            "torchrun",
            "--nnodes=1",
            "--master_addr=late-master.test",
            "t.py",
        ],
        &[],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.took >= Duration::from_secs(2) && r.took < Duration::from_secs(10),
        "took {:?}: {}",
        r.took,
        r.stderr
    );
    assert!(r.stderr.contains("waiting up to 2 s for the master's name late-master.test (from --master_addr) to resolve (the default for one node"), "{}", r.stderr);
    // A job that names no master, and a master given as an address, never wait.
    for argv in [
        &["torchrun", "--nnodes=2", "t.py"][..],
        &["torchrun", "--nnodes=2", "--master_addr=10.62.0.9", "t.py"][..],
    ] {
        let r = run(&ns, &tmp, argv, &[]);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        assert!(
            !r.stderr.contains("waiting up to"),
            "{argv:?}: {}",
            r.stderr
        );
        assert!(
            r.took < Duration::from_secs(5),
            "{argv:?} took {:?}",
            r.took
        );
    }
}
