//! Test harness: throw-away network namespaces built with the `ip` command, for the field-case layouts.
//!
//! ```ignore
//! mod common;
//! if !common::require_root() { return; } // common::needs: skip outside CI, fail under CI=true
//! let ns = common::Netns::new("f1");
//! ns.plug("eth0");
//! ns.addr("eth0", "172.17.0.2/16");
//! ns.route("default via 172.17.0.1 dev eth0");
//! let snap = ns.in_netns(|| ncclenv::probe::net::probe(&[]));
//! ```
//!
//! Conventions (`docs/field-cases.md`): a *plug* is a veth whose peer sits, up, in a second private namespace,
//! so the interface is RUNNING; a *stub* is the same with the peer left down (NO-CARRIER). IPv6 duplicate
//! address detection is switched off in the namespace (`accept_dad=0` for `all` and `default`) so that
//! automatic fe80 addresses are never tentative; turn it back on for one interface with
//! `ns.sysctl("net/ipv6/conf/IF/accept_dad", "1")`.
//!
//! Every helper panics with the command line and its stderr when a command fails. Namespaces are deleted on
//! drop, which also deletes every interface in them.

#![allow(dead_code)]

use std::fs::File;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The name libtest knows the test `name` of module `module` by (pass `module_path!()`): the module path
/// without the crate, e.g. `check_fake::driver_entry`. For tests that run this binary again with `--exact`.
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}

/// The first line of `text` (ncclenv's stderr) that carries the finding code `[code]`, if any: the one way
/// the tests of the built binary find a finding in its output (a plan's findings: `snapshot::warning`).
pub fn finding_line<'a>(text: &'a str, code: &str) -> Option<&'a str> {
    let tag = format!("[{code}]");
    text.lines().find(|l| l.contains(&tag))
}

/// Cargo's output folder: `CARGO_TARGET_DIR` when it is set (relative to the package root), else `target`
/// in the package root. Binaries built outside `cargo test` (the release musl and arm64 builds of
/// scripts/test.sh) are looked for here, so that a stale `./target` is never tested.
pub fn target_dir() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    match std::env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()) {
        Some(d) => root.join(d),
        None => root.join("target"),
    }
}

/// Runs `cmd`, panicking with the command line and stderr when it cannot start or exits non-zero.
/// Returns stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A network namespace `/run/netns/<name>` with `lo` up, plus a private peer namespace `<name>-p` that holds
/// the far ends of plugs and stubs. Both are deleted on drop.
pub struct Netns {
    /// The namespace name (`ip -n NAME`), unique per process and call: `<prefix>-<pid>-<n>`.
    pub name: String,
    /// The peer namespace's name.
    pub peer: String,
    /// Counter for generated names (peer ends, bridge ports).
    next: AtomicU32,
}

impl Netns {
    /// Creates the namespace and its peer namespace, brings `lo` up and switches IPv6 DAD off.
    pub fn new(prefix: &str) -> Netns {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{prefix}-{}-{n}", std::process::id());
        let peer = format!("{name}-p");
        run(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns {
            name,
            peer,
            next: AtomicU32::new(0),
        };
        // Dropping `ns` from here on deletes what was created, also when a step below panics.
        run(Command::new("ip").args(["netns", "add", &ns.peer]));
        ns.ip(&["link", "set", "lo", "up"]);
        ns.sysctl("net/ipv6/conf/all/accept_dad", "0");
        ns.sysctl("net/ipv6/conf/default/accept_dad", "0");
        ns
    }

    fn next_id(&self) -> u32 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// `ip -n NAME ARGS…`; returns stdout.
    pub fn ip(&self, args: &[&str]) -> String {
        run(Command::new("ip").arg("-n").arg(&self.name).args(args))
    }

    /// `ip -n PEER ARGS…` in the peer namespace; returns stdout.
    pub fn peer_ip(&self, args: &[&str]) -> String {
        run(Command::new("ip").arg("-n").arg(&self.peer).args(args))
    }

    /// `ip netns exec NAME sh -c CMD`; returns stdout.
    pub fn sh(&self, cmd: &str) -> String {
        run(Command::new("ip").args(["netns", "exec", &self.name, "sh", "-c", cmd]))
    }

    /// `ip -n NAME -j ARGS…`, parsed.
    pub fn ip_json(&self, args: &[&str]) -> serde_json::Value {
        let out = run(Command::new("ip")
            .arg("-n")
            .arg(&self.name)
            .arg("-j")
            .args(args));
        if out.trim().is_empty() {
            return serde_json::Value::Array(vec![]);
        }
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("ip -j {args:?}: bad JSON ({e}): {out}"))
    }

    /// Writes `value` to `/proc/sys/<key>` inside the namespace (`key` with slashes, e.g.
    /// `net/ipv6/conf/eth0/accept_dad`).
    pub fn sysctl(&self, key: &str, value: &str) {
        let path = format!("/proc/sys/{key}");
        self.in_netns(|| std::fs::write(&path, value))
            .unwrap_or_else(|e| panic!("{}: cannot write {value} to {path}: {e}", self.name));
    }

    /// A plug: veth `name` (up) whose peer sits, up, in the peer namespace, so `name` is RUNNING. Waits
    /// until the kernel reports it RUNNING. Returns the far end's name (in the peer namespace).
    pub fn plug(&self, name: &str) -> String {
        let peer = self.veth(name);
        self.peer_ip(&["link", "set", &peer, "up"]);
        self.up(name);
        self.wait_running(name);
        peer
    }

    /// A stub: veth `name` (up) whose peer is left down in the peer namespace: NO-CARRIER, not RUNNING.
    pub fn stub(&self, name: &str) {
        self.veth(name);
        self.up(name);
    }

    /// Creates veth `name` with its far end `pN` in the peer namespace (both down); returns the far end's name.
    fn veth(&self, name: &str) -> String {
        let peer = format!("p{}", self.next_id());
        self.ip(&[
            "link", "add", name, "type", "veth", "peer", "name", &peer, "netns", &self.peer,
        ]);
        peer
    }

    /// A bridge `name` (STP off, forward delay 0), up, with one plug as port; waits until the bridge is
    /// RUNNING. Returns the port's name (`vethbN`).
    pub fn bridge(&self, name: &str) -> String {
        self.ip(&["link", "add", name, "type", "bridge", "forward_delay", "0"]);
        let port = format!("vethb{}", self.next_id());
        self.plug(&port);
        self.ip(&["link", "set", &port, "master", name]);
        self.up(name);
        self.wait_running(name);
        port
    }

    /// A macvlan `name` (mode bridge) on `parent`, up. RUNNING when the parent has carrier.
    pub fn macvlan(&self, name: &str, parent: &str) {
        self.ip(&[
            "link", "add", name, "link", parent, "type", "macvlan", "mode", "bridge",
        ]);
        self.up(name);
    }

    /// A vxlan `name` (VNI from the counter, UDP port 4789, no underlay), up: RUNNING, operstate unknown.
    pub fn vxlan(&self, name: &str) {
        let id = (100 + self.next_id()).to_string();
        self.ip(&[
            "link", "add", name, "type", "vxlan", "id", &id, "dstport", "4789",
        ]);
        self.up(name);
    }

    /// `ip link set IFNAME up`.
    pub fn up(&self, ifname: &str) {
        self.ip(&["link", "set", ifname, "up"]);
    }

    /// `ip addr add CIDR dev IFNAME`, with `nodad` for IPv6.
    pub fn addr(&self, ifname: &str, cidr: &str) {
        let mut args = vec!["addr", "add", cidr, "dev", ifname];
        if cidr.contains(':') {
            args.push("nodad");
        }
        self.ip(&args);
    }

    /// `ip addr add CIDR dev IFNAME EXTRA…`: an address with attributes of its own, e.g.
    /// `addr_with("eno1", "169.254.8.223/16", &["scope", "link", "label", "eno1:avahi"])` (avahi-autoipd's
    /// labelled link-scope address) or `addr_with("eth0", "10.20.0.7/24", &["label", "eth0:1"])` (an alias).
    pub fn addr_with(&self, ifname: &str, cidr: &str, extra: &[&str]) {
        let mut args = vec!["addr", "add", cidr, "dev", ifname];
        args.extend_from_slice(extra);
        self.ip(&args);
    }

    /// `ip [-4|-6] route add ARGS` (whitespace-separated; a leading `-6` or `-4` selects the family), e.g.
    /// `route("default via 10.0.0.1 dev eth0 metric 100")`, `route("-6 default via fe80::1 dev veth0")`.
    pub fn route(&self, args: &str) {
        let mut words: Vec<&str> = args.split_whitespace().collect();
        let family = match words.first() {
            Some(&f) if f == "-6" || f == "-4" => Some(words.remove(0)),
            _ => None,
        };
        let mut full: Vec<&str> = family.into_iter().collect();
        full.extend(["route", "add"]);
        full.extend(words);
        self.ip(&full);
    }

    /// Waits (up to 30 s: the kernel needs milliseconds, a loaded machine more) until `ifname` is RUNNING (up
    /// and not NO-CARRIER); panics otherwise.
    pub fn wait_running(&self, ifname: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v = self.ip_json(&["link", "show", "dev", ifname]);
            let flags: Vec<&str> = v[0]["flags"]
                .as_array()
                .map(|a| a.iter().filter_map(|f| f.as_str()).collect())
                .unwrap_or_default();
            if flags.contains(&"UP") && !flags.contains(&"NO-CARRIER") {
                return;
            }
            if Instant::now() > deadline {
                panic!("{}: {ifname} is not RUNNING after 30 s: {v}", self.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (up to 30 s) until `ifname` has an IPv6 link-local (fe80::/10) address, which the kernel adds
    /// asynchronously once the interface is up with carrier; panics otherwise. Returns the address.
    pub fn wait_link_local(&self, ifname: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v = self.ip_json(&["-6", "addr", "show", "dev", ifname]);
            let found = v[0]["addr_info"].as_array().and_then(|a| {
                a.iter()
                    .filter_map(|i| i["local"].as_str())
                    .find(|l| l.starts_with("fe80:"))
                    .map(String::from)
            });
            if let Some(a) = found {
                return a;
            }
            if Instant::now() > deadline {
                panic!(
                    "{}: {ifname} has no fe80 address after 30 s: {v}",
                    self.name
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A `Command` for `program` that runs inside the namespace (`ip netns exec NAME program`, which also
    /// mounts the namespace's `/sys`). Add arguments and environment to it as usual.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Runs `cmd` inside the namespace through `ip netns exec NAME`, keeping its program, arguments,
    /// environment changes (`env`, `env_remove`) and working directory. (`env_clear` cannot be read back
    /// from a `Command`: build with [`Netns::command`] for that.) Returns the output, whatever the exit status.
    pub fn run_in(&self, cmd: &mut Command) -> Output {
        let mut c = self.command(&cmd.get_program().to_string_lossy());
        c.args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        if let Some(dir) = cmd.get_current_dir() {
            c.current_dir(dir);
        }
        c.output()
            .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"))
    }

    /// Runs `f` on a fresh thread that has entered the namespace (`setns(CLONE_NEWNET)` on
    /// `/run/netns/NAME`; a network namespace belongs to a thread), and returns its result. A panic in `f`
    /// propagates.
    pub fn in_netns<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::scope(|s| {
            let worker = s.spawn(move || {
                let fd = File::open(&path).unwrap_or_else(|e| panic!("cannot open {path}: {e}"));
                nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET)
                    .unwrap_or_else(|e| panic!("setns({path}): {e}"));
                f()
            });
            match worker.join() {
                Ok(v) => v,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for ns in [&self.name, &self.peer] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// A fresh temporary directory `<tmp>/ncclenv-<prefix>-<pid>-<n>`, removed with its contents on drop.
pub struct TempDir {
    /// The directory.
    pub path: std::path::PathBuf,
}

impl TempDir {
    /// Creates the directory (panics when it cannot).
    pub fn new(prefix: &str) -> TempDir {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("ncclenv-{prefix}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        TempDir { path }
    }

    /// `self.path.join(name)`.
    pub fn join(&self, name: &str) -> std::path::PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
pub mod exe;
pub mod fake_rdma;
pub mod layouts;
pub mod needs;
pub mod oracle;
pub mod snapshot;

// The skip rule under its older names (common::skip, common::require_root, …): see `needs`.
#[allow(unused_imports)]
pub use needs::{ci, require_root, skip, truthy};

/// The variables ncclenv decides; everything else must reach the command untouched.
pub const OURS: &[&str] = &[
    "NCCL_SOCKET_IFNAME",
    "NCCL_SOCKET_FAMILY",
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "POD_IP",
    "HOROVOD_GLOO_IFACE",
    "OMPI_MCA_btl_tcp_if_include",
    "OMPI_MCA_oob_tcp_if_include",
    "OMPI_MCA_mca_base_env_list",
    "UCX_NET_DEVICES",
    "NCCL_IB_DISABLE",
    "NCCL_IB_HCA",
    "NCCL_IBEXT_DISABLE",
    "NCCL_SHM_DISABLE",
];

/// Checks a `ncclenv --version` line: `ncclenv VERSION (commit C)`, C being the 12-digit commit (with
/// `-dirty` when the tree had changes) or `unknown` (build.rs). When this checkout is a git repository, C is
/// its HEAD: a binary built before the last commit names the old one, and fails here.
pub fn assert_version(line: &str) {
    let line = line.trim_end_matches('\n');
    let prefix = format!("ncclenv {} (commit ", env!("CARGO_PKG_VERSION"));
    let commit = line
        .strip_prefix(&prefix)
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not `{prefix}C)`: {line:?}"));
    let hex = commit.strip_suffix("-dirty").unwrap_or(commit);
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match head {
        Some(h) => assert_eq!(hex, h, "the binary names another commit than HEAD: {line}"),
        None => assert!(
            commit == "unknown" || (hex.len() == 12 && hex.bytes().all(|b| b.is_ascii_hexdigit())),
            "{line}"
        ),
    }
}
