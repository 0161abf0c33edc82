//! Field cases F1–F13 (shared/FIELD-CASES.md) end to end, with the real binary. Each layout is built in a
//! throw-away network namespace; `ncclenv` runs there as the entrypoint (`ncclenv -- COMMAND`) with a cleared
//! environment (PATH, an empty sysfs and devfs so that no RDMA device or GPU node is seen, and the case's own
//! variables), and the test reads:
//!
//! - what COMMAND really received (`env -0`), and whether it ran at all (it touches a marker file);
//! - what `eval "$(ncclenv env)"` exports, which must agree with the command's environment;
//! - the warnings on stderr (found by their `[code]`), and the exit status (78 = refused);
//! - `ip -j` as an independent oracle: the chosen interface exists, is RUNNING, owns `POD_IP`, and is the
//!   one the kernel's routes name.
//!
//! The same cases run with plain data in `tests/decide_core.rs`.

mod common;

use common::{Netns, TempDir, OURS};
use serde_json::Value;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::process::{Command, Output};

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_ncclenv");

/// PATH inside the cleared environment.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The command ncclenv runs: `sh -c DUMP sh MARKER [launcher args…]` touches MARKER, then prints its
/// environment NUL-separated.
const DUMP: &str = "touch \"$1\" && exec /usr/bin/env -0";

/// `sh -c EVAL BIN [ncclenv options…]`: the documented `eval "$(ncclenv env)"`, then the resulting
/// environment NUL-separated.
const EVAL: &str = "eval \"$(\"$0\" \"$@\" env)\" && exec /usr/bin/env -0";

/// One job started in a namespace: the inherited environment, the launcher arguments of the command, and
/// the ncclenv options that say the same to `ncclenv env` (which has no command to read them from).
struct Job<'a> {
    ns: &'a Netns,
    tmp: TempDir,
    vars: BTreeMap<String, String>,
    /// Arguments of the command after the marker, e.g. `--nnodes=2`, `--master=HOST:PORT`.
    launcher: Vec<String>,
    /// Options before `env` in the `ncclenv env` run, e.g. `--nnodes=2`, `--peer=HOST:PORT`.
    env_opts: Vec<String>,
    /// A wrapper before `ip netns exec` (F13: a private mount namespace with a tmpfs).
    wrap: Vec<String>,
    runs: Cell<u32>,
}

/// What one run of `ncclenv -- COMMAND` produced.
#[derive(Debug)]
struct Outcome {
    /// Exit status (`None`: killed by a signal).
    code: Option<i32>,
    /// True when the command ran (its marker exists).
    ran: bool,
    /// The command's environment.
    env: BTreeMap<String, String>,
    stdout: Vec<u8>,
    stderr: String,
}

impl Outcome {
    fn var(&self, k: &str) -> Option<&str> {
        self.env.get(k).map(String::as_str)
    }

    /// The interface ncclenv chose: `GLOO_SOCKET_IFNAME` is always one plain name.
    fn chosen(&self) -> &str {
        self.var("GLOO_SOCKET_IFNAME")
            .unwrap_or_else(|| panic!("no GLOO_SOCKET_IFNAME: {self:#?}"))
    }

    /// The stderr line of the warning `[code]`; panics with stderr when there is none.
    fn warning(&self, code: &str) -> &str {
        let tag = format!("[{code}]");
        self.stderr
            .lines()
            .find(|l| l.starts_with("ncclenv: warning: ") && l.contains(&tag))
            .unwrap_or_else(|| panic!("no warning {tag} on stderr:\n{}", self.stderr))
    }

    fn has_warning(&self, code: &str) -> bool {
        let tag = format!("[{code}]");
        self.stderr.lines().any(|l| l.contains(&tag))
    }

    fn warnings(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| l.starts_with("ncclenv: warning: "))
            .collect()
    }
}

/// Splits `env -0` output into a map.
fn parse_env0(out: &[u8]) -> BTreeMap<String, String> {
    out.split(|b| *b == 0)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let s = String::from_utf8_lossy(e);
            let (k, v) = s
                .split_once('=')
                .unwrap_or_else(|| panic!("env entry without '=': {s:?}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// The words of a message: runs of `[A-Za-z0-9._-]`, so that `eth1` is told apart from `eth10`.
fn words(s: &str) -> Vec<&str> {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-'))
        .filter(|w| !w.is_empty())
        .collect()
}

/// True for one plain interface name (what Gloo and TensorPipe accept).
fn plain_name(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 15
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

impl<'a> Job<'a> {
    /// A job on the layout built in `ns`. First the netlink probe is checked against `ip -j` on this very
    /// layout (the doctor's full probe, and the start path against it), so every field case is also an
    /// oracle case for `probe::net`.
    fn new(ns: &'a Netns) -> Job<'a> {
        common::oracle::check(Some(ns), &[]);
        let needs = ncclenv::probe::net::StartNeeds {
            ipv6_family: false,
            exclude: &[],
            names: &[],
        };
        common::oracle::check_start(ns, &[], &needs);
        let tmp = TempDir::new("fc");
        for d in ["sys", "dev"] {
            std::fs::create_dir_all(tmp.join(d)).expect("mkdir");
        }
        let mut vars = BTreeMap::new();
        vars.insert("PATH".to_string(), PATH.to_string());
        vars.insert(
            "NCCLENV_SYSFS".to_string(),
            tmp.join("sys").display().to_string(),
        );
        vars.insert(
            "NCCLENV_DEVFS".to_string(),
            tmp.join("dev").display().to_string(),
        );
        // /dev/shm differs between machines (Docker gives 64 MiB): F1–F12 do not depend on it; F13 unsets this.
        vars.insert("NCCLENV_SHM_MIN".to_string(), "0".to_string());
        Job {
            ns,
            tmp,
            vars,
            launcher: Vec::new(),
            env_opts: Vec::new(),
            wrap: Vec::new(),
            runs: Cell::new(0),
        }
    }

    fn set(&mut self, k: &str, v: &str) -> &mut Self {
        self.vars.insert(k.to_string(), v.to_string());
        self
    }

    fn unset(&mut self, k: &str) -> &mut Self {
        self.vars.remove(k);
        self
    }

    /// The job is `n` nodes: `--nnodes=N` in the command, `--nnodes=N` for `ncclenv env`.
    fn nnodes(&mut self, n: u32) -> &mut Self {
        self.launcher.push(format!("--nnodes={n}"));
        self.env_opts.push(format!("--nnodes={n}"));
        self
    }

    /// `WRAP… ip netns exec NS ARGS…` with the job's environment only.
    fn command(&self, args: &[String]) -> Command {
        let mut full: Vec<String> = self.wrap.clone();
        full.extend(["ip", "netns", "exec", &self.ns.name].map(String::from));
        full.extend(args.iter().cloned());
        let mut c = Command::new(&full[0]);
        c.args(&full[1..]).env_clear().envs(&self.vars);
        c
    }

    fn output(&self, args: &[String]) -> Output {
        let mut c = self.command(args);
        c.output()
            .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"))
    }

    /// `ncclenv -- sh -c DUMP sh MARKER LAUNCHER…`.
    fn exec(&self) -> Outcome {
        let n = self.runs.get();
        self.runs.set(n + 1);
        let marker = self.tmp.join(&format!("ran-{n}"));
        let mut args: Vec<String> = vec![
            BIN.into(),
            "--".into(),
            "/bin/sh".into(),
            "-c".into(),
            DUMP.into(),
            "sh".into(),
            marker.display().to_string(),
        ];
        args.extend(self.launcher.iter().cloned());
        let out = self.output(&args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "ncclenv panicked:\n{stderr}");
        let ran = marker.exists();
        Outcome {
            code: out.status.code(),
            ran,
            env: if ran {
                parse_env0(&out.stdout)
            } else {
                BTreeMap::new()
            },
            stdout: out.stdout,
            stderr,
        }
    }

    /// Raw `ncclenv [OPTS] env`: (exit code, stdout, stderr).
    fn env_raw(&self) -> (Option<i32>, String, String) {
        let mut args = vec![BIN.to_string()];
        args.extend(self.env_opts.iter().cloned());
        args.push("env".into());
        let out = self.output(&args);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `sh -c 'eval "$(ncclenv [OPTS] env)" && exec env -0'`: (exit code, resulting environment, stderr).
    fn env_eval(&self) -> (Option<i32>, BTreeMap<String, String>, String) {
        let mut args: Vec<String> = vec!["/bin/sh".into(), "-c".into(), EVAL.into(), BIN.into()];
        args.extend(self.env_opts.iter().cloned());
        let out = self.output(&args);
        (
            out.status.code(),
            parse_env0(&out.stdout),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs the job and checks: exit 0, the command ran, every `expect`ed variable (`None` = absent), and
    /// by default `NCCL_IB_DISABLE=1` (no RDMA device) and no `NCCL_SHM_DISABLE`; that `ncclenv env` is
    /// eval-able and agrees; that the framework companions are plain names of existing interfaces; and the
    /// `ip -j` oracle for the chosen interface.
    fn check(&self, expect: &[(&str, Option<&str>)]) -> Outcome {
        let o = self.exec();
        assert_eq!(o.code, Some(0), "exit status: {o:#?}");
        assert!(o.ran, "the command did not run: {o:#?}");
        let mut expect: Vec<(&str, Option<&str>)> = expect.to_vec();
        for (k, v) in [("NCCL_IB_DISABLE", Some("1")), ("NCCL_SHM_DISABLE", None)] {
            if !expect.iter().any(|(e, _)| *e == k) {
                expect.push((k, v));
            }
        }
        for (k, v) in &expect {
            assert_eq!(o.var(k), *v, "{k} in the command's environment\n{o:#?}");
        }
        // Everything the job inherited reaches the command unchanged, except ncclenv's own variables.
        for (k, v) in &self.vars {
            if !OURS.contains(&k.as_str()) {
                assert_eq!(o.var(k), Some(v.as_str()), "{k} passes through");
            }
        }
        self.check_env_mode(&o);
        for k in ["GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"] {
            if let Some(v) = o.var(k) {
                assert!(plain_name(v), "{k}={v:?} is not one plain interface name");
                assert!(link(self.ns, v).is_some(), "{k}={v}: no such interface");
            }
        }
        oracle(self.ns, &o);
        o
    }

    /// `ncclenv env` prints only `export NAME='value'` / `unset NAME` lines and, eval'd, gives the same values
    /// of ncclenv's variables as the command received.
    fn check_env_mode(&self, o: &Outcome) {
        let (code, stdout, stderr) = self.env_raw();
        assert_eq!(code, Some(0), "ncclenv env failed:\n{stdout}\n{stderr}");
        for line in stdout.lines() {
            let ok = line
                .strip_prefix("export ")
                .and_then(|r| r.split_once("='"))
                .is_some_and(|(name, rest)| OURS.contains(&name) && rest.ends_with('\''))
                || line
                    .strip_prefix("unset ")
                    .is_some_and(|n| OURS.contains(&n));
            assert!(ok, "unexpected line from ncclenv env: {line:?}\n{stdout}");
        }
        let (code, env, stderr) = self.env_eval();
        assert_eq!(code, Some(0), "eval \"$(ncclenv env)\" failed: {stderr}");
        for k in OURS {
            assert_eq!(
                env.get(*k).map(String::as_str),
                o.var(k),
                "{k}: eval \"$(ncclenv env)\" disagrees with what the command received"
            );
        }
    }

    /// `NCCLENV_STRICT=1`: exit 78, the command does not run, the refusal names strict mode; `ncclenv env`
    /// exits 78 too and its eval stops the shell.
    fn strict_refuses(&mut self) -> Outcome {
        self.set("NCCLENV_STRICT", "1");
        let o = self.exec();
        let (code, env, eval_err) = self.env_eval();
        self.unset("NCCLENV_STRICT");
        assert_eq!(o.code, Some(78), "strict mode must refuse: {o:#?}");
        assert!(!o.ran, "strict refusal ran the command anyway: {o:#?}");
        assert!(o.stdout.is_empty(), "{o:#?}");
        assert!(
            o.stderr.contains("refused (exit 78)") && o.stderr.contains("NCCLENV_STRICT=1"),
            "{}",
            o.stderr
        );
        assert_eq!(code, Some(78), "eval of a strict refusal: {eval_err}");
        assert!(env.is_empty(), "the shell went on after eval: {env:?}");
        assert!(eval_err.contains("refused (exit 78)"), "{eval_err}");
        o
    }
}

// ---------------------------------------------------------------------------------------------------------
// The `ip -j` oracle

fn ip_j(ns: &Netns, args: &[&str]) -> Vec<Value> {
    match ns.ip_json(args) {
        Value::Array(a) => a,
        other => panic!("ip -j {args:?}: not an array: {other}"),
    }
}

/// `ip -j -d link show dev NAME`, or `None` when there is no such interface.
fn link(ns: &Netns, name: &str) -> Option<Value> {
    ip_j(ns, &["-d", "link", "show"])
        .into_iter()
        .find(|l| l["ifname"].as_str() == Some(name))
}

/// The addresses `ip -j addr` shows on `ifname`: (family, local, scope).
fn addrs(ns: &Netns, ifname: &str) -> Vec<(String, String, String)> {
    let v = ip_j(ns, &["addr", "show", "dev", ifname]);
    v.first()
        .and_then(|l| l["addr_info"].as_array())
        .map(|a| {
            a.iter()
                .map(|i| {
                    (
                        i["family"].as_str().unwrap_or("").to_string(),
                        i["local"].as_str().unwrap_or("").to_string(),
                        i["scope"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The device of the default route with the lowest metric that is not `linkdown`, IPv4 first, as
/// `ip -j route show default` lists it.
fn default_dev(ns: &Netns) -> Option<String> {
    for fam in ["-4", "-6"] {
        let mut routes: Vec<Value> = ip_j(ns, &[fam, "route", "show", "default"])
            .into_iter()
            .filter(|r| {
                !r["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "linkdown"))
            })
            .collect();
        routes.sort_by_key(|r| r["metric"].as_u64().unwrap_or(0));
        if let Some(r) = routes.first() {
            return r["dev"].as_str().map(String::from);
        }
    }
    None
}

/// The device of `ip -j route get ADDR`.
fn route_get_dev(ns: &Netns, addr: &str) -> String {
    let v = ip_j(ns, &["route", "get", addr]);
    v.first()
        .and_then(|r| r["dev"].as_str())
        .unwrap_or_else(|| panic!("ip route get {addr}: {v:?}"))
        .to_string()
}

/// The chosen interface exists and is RUNNING (UP without NO-CARRIER); `POD_IP` is one of its global IPv4
/// addresses (the first one `ip` shows when ncclenv set it); `NCCL_SOCKET_FAMILY` matches an address it has.
fn oracle(ns: &Netns, o: &Outcome) {
    let name = o.chosen();
    let l = link(ns, name).unwrap_or_else(|| panic!("chosen {name} does not exist"));
    let flags: Vec<&str> = l["flags"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(
        flags.contains(&"UP") && !flags.contains(&"NO-CARRIER"),
        "chosen {name} is not RUNNING: {flags:?}"
    );
    let a = addrs(ns, name);
    let global4: Vec<&str> = a
        .iter()
        .filter(|(f, _, s)| f == "inet" && s == "global")
        .map(|(_, l, _)| l.as_str())
        .collect();
    match o.var("POD_IP") {
        Some(ip) => {
            assert_eq!(
                global4.first().copied(),
                Some(ip),
                "POD_IP is not {name}'s address per ip -j: {a:?}"
            )
        }
        None => assert!(
            global4.is_empty() || name == "lo",
            "{name} has IPv4 {global4:?} but no POD_IP was set"
        ),
    }
    match o.var("NCCL_SOCKET_FAMILY") {
        Some("AF_INET") => assert!(
            a.iter().any(|(f, _, _)| f == "inet"),
            "AF_INET but {name} has no IPv4 address: {a:?}"
        ),
        Some("AF_INET6") => assert!(
            a.iter().any(|(f, _, s)| f == "inet6" && s == "global"),
            "AF_INET6 but {name} has no global IPv6 address: {a:?}"
        ),
        other => panic!("NCCL_SOCKET_FAMILY={other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------------------
// F1–F12: the network

/// F1: `eth0` 172.17.0.2/16 (plug), default via 172.17.0.1.
#[test]
fn f1_docker_bridge() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f1");
    ns.plug("eth0");
    ns.addr("eth0", "172.17.0.2/16");
    ns.route("default via 172.17.0.1 dev eth0");
    let mut job = Job::new(&ns);
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("NCCL_SOCKET_FAMILY", Some("AF_INET")),
        ("GLOO_SOCKET_IFNAME", Some("eth0")),
        ("TP_SOCKET_IFNAME", Some("eth0")),
        ("POD_IP", Some("172.17.0.2")),
    ]);
    assert_eq!(default_dev(&ns).as_deref(), Some(o.chosen()));
    assert!(o.warnings().is_empty(), "{}", o.stderr);
    // The summary line says what was set.
    assert!(o.stderr.contains("NCCL_SOCKET_IFNAME=eth0"), "{}", o.stderr);
    // Nothing to refuse: strict mode runs the command too.
    job.set("NCCLENV_STRICT", "1");
    let s = job.check(&[("NCCL_SOCKET_IFNAME", Some("eth0"))]);
    assert!(s.warnings().is_empty(), "{}", s.stderr);
}

/// F2: `ens6` 10.1.0.10/16 (plug), default via 10.1.0.1, no `eth0`; inherited `NCCL_SOCKET_IFNAME=eth0`,
/// 2 nodes → repaired to `ens6`; nothing inherited → `ens6`.
#[test]
fn f2_baked_name_missing_on_host() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f2");
    ns.plug("ens6");
    ns.addr("ens6", "10.1.0.10/16");
    ns.route("default via 10.1.0.1 dev ens6");
    assert!(link(&ns, "eth0").is_none());
    let mut job = Job::new(&ns);
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("ens6")),
        ("GLOO_SOCKET_IFNAME", Some("ens6")),
        ("POD_IP", Some("10.1.0.10")),
    ]);
    assert_eq!(default_dev(&ns).as_deref(), Some(o.chosen()));

    job.set("NCCL_SOCKET_IFNAME", "eth0").nnodes(2);
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("ens6")),
        ("NCCL_SOCKET_FAMILY", Some("AF_INET")),
        ("GLOO_SOCKET_IFNAME", Some("ens6")),
        ("POD_IP", Some("10.1.0.10")),
    ]);
    let w = o.warning("inherited-ifname-repaired");
    assert!(
        w.contains("NCCL_SOCKET_IFNAME") && w.contains("\"eth0\"") && w.contains("\"ens6\""),
        "the repair warning names the old and the new value: {w}"
    );
    job.strict_refuses();

    // The same with the job shape from PADDLE_NNODES.
    job.launcher.clear();
    job.env_opts.clear();
    job.set("PADDLE_NNODES", "2");
    let o = job.check(&[("NCCL_SOCKET_IFNAME", Some("ens6"))]);
    o.warning("inherited-ifname-repaired");
}

/// F3: `bond0` 10.10.1.11/24 with the default route; three compose bridges with running ports; four
/// fe80-only host-side veths → `bond0`, and no `br-`/`veth` name in any exported value.
#[test]
fn f3_compose_bridges_and_veths() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f3");
    ns.plug("bond0");
    ns.addr("bond0", "10.10.1.11/24");
    ns.route("default via 10.10.1.1 dev bond0");
    for (br, cidr) in [
        ("br-1a2b3c4d5e6f", "172.19.0.1/16"),
        ("br-7a8b9c0d1e2f", "172.21.0.1/16"),
        ("br-3a4b5c6d7e8f", "172.30.0.1/16"),
    ] {
        ns.bridge(br);
        ns.addr(br, cidr);
    }
    for v in ["veth1a2b3c4", "veth5d6e7f8", "veth9a0b1c2", "veth3d4e5f6"] {
        ns.plug(v);
        ns.wait_link_local(v);
        assert!(
            addrs(&ns, v).iter().all(|(_, a, _)| a.starts_with("fe80:")),
            "{v} is fe80-only"
        );
    }
    let job = Job::new(&ns);
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("bond0")),
        ("GLOO_SOCKET_IFNAME", Some("bond0")),
        ("TP_SOCKET_IFNAME", Some("bond0")),
        ("POD_IP", Some("10.10.1.11")),
    ]);
    assert_eq!(default_dev(&ns).as_deref(), Some("bond0"));
    for k in OURS {
        if let Some(v) = o.var(k) {
            assert!(!v.contains("br-") && !v.contains("veth"), "{k}={v}");
        }
    }
}

/// F4: `ens5` 10.31.0.11/20 with the default route and a RUNNING fe80-only `veth3f2a` → `ens5`.
#[test]
fn f4_fe80_veth_beside_uplink() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f4");
    ns.plug("ens5");
    ns.addr("ens5", "10.31.0.11/20");
    ns.route("default via 10.31.0.1 dev ens5");
    ns.plug("veth3f2a");
    ns.wait_link_local("veth3f2a");
    let job = Job::new(&ns);
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("ens5")),
        ("GLOO_SOCKET_IFNAME", Some("ens5")),
        ("POD_IP", Some("10.31.0.11")),
    ]);
    assert_eq!(default_dev(&ns).as_deref(), Some(o.chosen()));
    assert!(o.warnings().is_empty(), "{}", o.stderr);
}

fn f5(ns: &Netns) {
    ns.plug("eth0");
    ns.addr("eth0", "10.0.0.5/24");
    ns.route("default via 10.0.0.1 dev eth0");
    ns.plug("eth1");
    ns.addr("eth1", "10.0.1.5/24");
    ns.plug("eth10");
    ns.addr("eth10", "10.0.10.5/24");
}

/// F5: `eth0`/`eth1`/`eth10`, default via `eth0`, job shape unknown. Inherited `eth2` → repaired to `eth0`
/// with the usable interfaces listed; inherited `eth1` → kept with a prefix warning; nothing → `eth0`.
#[test]
fn f5_missing_name_and_prefix_matching_two() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f5");
    f5(&ns);
    let mut job = Job::new(&ns);

    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("GLOO_SOCKET_IFNAME", Some("eth0")),
        ("POD_IP", Some("10.0.0.5")),
    ]);
    assert_eq!(default_dev(&ns).as_deref(), Some("eth0"));
    assert!(o.warnings().is_empty(), "{}", o.stderr);

    job.set("NCCL_SOCKET_IFNAME", "eth2");
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("GLOO_SOCKET_IFNAME", Some("eth0")),
        ("POD_IP", Some("10.0.0.5")),
    ]);
    let w = o.warning("inherited-ifname-repaired");
    let ws = words(w);
    for n in ["eth2", "eth0", "eth1", "eth10"] {
        assert!(ws.contains(&n), "the repair warning lacks {n}: {w}");
    }
    job.strict_refuses();

    job.set("NCCL_SOCKET_IFNAME", "eth1");
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("eth1")),
        ("GLOO_SOCKET_IFNAME", Some("eth1")),
        ("TP_SOCKET_IFNAME", Some("eth1")),
        ("POD_IP", Some("10.0.1.5")),
    ]);
    let w = o.warning("inherited-ifname-prefix");
    assert!(
        words(w).contains(&"eth10") && w.contains("=eth1"),
        "the prefix warning names eth10 and the exact form =eth1: {w}"
    );
    assert!(!o.has_warning("inherited-ifname-repaired"), "{}", o.stderr);
    job.strict_refuses();
}

/// F6: `ens5` with the default route, a RUNNING fe80-only `eni4c1d`, inherited NCCL syntax in both
/// variables, `MASTER_ADDR=10.0.1.20` → the NCCL value is kept, `GLOO_SOCKET_IFNAME` repaired to `ens5`.
#[test]
fn f6_gloo_given_nccl_syntax() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f6");
    ns.plug("ens5");
    ns.addr("ens5", "10.0.1.10/24");
    ns.route("default via 10.0.1.1 dev ens5");
    ns.plug("eni4c1d");
    ns.wait_link_local("eni4c1d");
    let mut job = Job::new(&ns);
    job.set("NCCL_SOCKET_IFNAME", "^lo,docker,veth,eni")
        .set("GLOO_SOCKET_IFNAME", "^lo,docker,veth,eni")
        .set("MASTER_ADDR", "10.0.1.20");
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("^lo,docker,veth,eni")),
        ("NCCL_SOCKET_FAMILY", Some("AF_INET")),
        ("GLOO_SOCKET_IFNAME", Some("ens5")),
        ("TP_SOCKET_IFNAME", Some("ens5")),
        ("POD_IP", Some("10.0.1.10")),
    ]);
    assert_eq!(route_get_dev(&ns, "10.0.1.20"), "ens5");
    let w = o.warning("gloo-ifname-repaired");
    assert!(
        w.contains("GLOO_SOCKET_IFNAME") && w.contains("^lo,docker,veth,eni") && w.contains("ens5"),
        "{w}"
    );
    assert!(!o.has_warning("inherited-ifname-prefix"), "{}", o.stderr);
    assert!(!o.has_warning("inherited-ifname-repaired"), "{}", o.stderr);
    job.strict_refuses();
}

fn f7(ns: &Netns) {
    ns.plug("bond0");
    ns.addr("bond0", "10.42.0.11/27");
    ns.route("default via 10.42.0.1 dev bond0");
    ns.macvlan("bond0.2973", "bond0");
    ns.addr("bond0.2973", "10.0.106.11/16");
    ns.macvlan("bond0.2973.1", "bond0");
    ns.wait_running("bond0.2973");
    ns.wait_running("bond0.2973.1");
    ns.wait_link_local("bond0.2973.1");
}

/// F7: `bond0` with macvlan children `bond0.2973` and `bond0.2973.1` (fe80 only). Nothing inherited →
/// `=bond0`; inherited `bond0` → kept with a striping warning; strict → 78.
#[test]
fn f7_prefix_catches_vlan_children() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f7");
    f7(&ns);
    assert!(addrs(&ns, "bond0.2973.1")
        .iter()
        .all(|(_, a, _)| a.starts_with("fe80:")));
    let mut job = Job::new(&ns);
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("=bond0")),
        ("GLOO_SOCKET_IFNAME", Some("bond0")),
        ("TP_SOCKET_IFNAME", Some("bond0")),
        ("POD_IP", Some("10.42.0.11")),
    ]);
    assert_eq!(default_dev(&ns).as_deref(), Some("bond0"));
    assert!(o.warnings().is_empty(), "{}", o.stderr);

    job.set("NCCL_SOCKET_IFNAME", "bond0");
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("bond0")),
        ("GLOO_SOCKET_IFNAME", Some("bond0")),
        ("POD_IP", Some("10.42.0.11")),
    ]);
    let w = o.warning("inherited-ifname-prefix");
    let ws = words(w);
    assert!(
        ws.contains(&"bond0.2973") && ws.contains(&"bond0.2973.1") && w.contains("link-local"),
        "the warning names the children and the fe80-only one: {w}"
    );
    assert!(w.contains("=bond0"), "the remedy is =bond0: {w}");
    let s = job.strict_refuses();
    assert!(s.stderr.contains("=bond0"), "{}", s.stderr);
}

/// F8: Wi-Fi uplink `wlp2s0` (default route metric 600), `enp3s0` without carrier. Nothing → `wlp2s0`;
/// inherited `en,eth,bond` (matches only the dead `enp3s0`) → repaired to `wlp2s0`.
#[test]
fn f8_wifi_uplink_and_whitelist_missing_it() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f8");
    ns.plug("wlp2s0");
    ns.addr("wlp2s0", "10.0.8.19/24");
    ns.route("default via 10.0.8.1 dev wlp2s0 metric 600");
    ns.stub("enp3s0");
    ns.addr("enp3s0", "10.0.9.19/24");
    let enp = link(&ns, "enp3s0").expect("enp3s0");
    assert!(
        enp["flags"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "NO-CARRIER")),
        "enp3s0 must have no carrier: {enp}"
    );
    let mut job = Job::new(&ns);
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("wlp2s0")),
        ("GLOO_SOCKET_IFNAME", Some("wlp2s0")),
        ("POD_IP", Some("10.0.8.19")),
    ]);
    assert_eq!(default_dev(&ns).as_deref(), Some("wlp2s0"));

    job.set("NCCL_SOCKET_IFNAME", "en,eth,bond");
    let o2 = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("wlp2s0")),
        ("GLOO_SOCKET_IFNAME", Some("wlp2s0")),
        ("POD_IP", Some("10.0.8.19")),
    ]);
    let w = o2.warning("inherited-ifname-repaired");
    assert!(
        w.contains("\"en,eth,bond\"") && w.contains("\"wlp2s0\"") && words(w).contains(&"enp3s0"),
        "{w}"
    );
    assert!(o.warnings().is_empty(), "{}", o.stderr);
    job.strict_refuses();
}

/// F9: no IPv4 but lo; a vxlan `ip6tnl0` (fe80 only, lower index) and `veth0` fd00:10::5/64 with
/// `default via fe80::1` → `veth0`, `AF_INET6`, no `POD_IP`.
#[test]
fn f9_ipv6_only_with_link_local_tunnel_first() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f9");
    ns.vxlan("ip6tnl0");
    ns.plug("veth0");
    ns.addr("veth0", "fd00:10::5/64");
    ns.route("-6 default via fe80::1 dev veth0");
    ns.wait_link_local("ip6tnl0");
    let idx = |n: &str| link(&ns, n).expect(n)["ifindex"].as_u64().expect("ifindex");
    assert!(idx("ip6tnl0") < idx("veth0"));
    assert!(ip_j(&ns, &["-4", "addr", "show"])
        .iter()
        .all(|l| l["ifname"] == "lo"));
    let job = Job::new(&ns);
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("veth0")),
        ("NCCL_SOCKET_FAMILY", Some("AF_INET6")),
        ("GLOO_SOCKET_IFNAME", Some("veth0")),
        ("TP_SOCKET_IFNAME", Some("veth0")),
        ("POD_IP", None),
    ]);
    assert_eq!(default_dev(&ns).as_deref(), Some("veth0"));
    assert!(
        addrs(&ns, "veth0")
            .iter()
            .any(|(f, a, _)| f == "inet6" && a == "fd00:10::5"),
        "oracle: veth0 owns fd00:10::5"
    );
    assert!(o.warnings().is_empty(), "{}", o.stderr);
}

/// F10: only `lo`. Single node (or shape unknown) → `lo` with a single-node warning; 2 nodes (`--nnodes=2`,
/// `PADDLE_NNODES=2`, `NCCLENV_NNODES=2`, `--ips` with two hosts) → exit 78 saying what the container lacks.
#[test]
fn f10_no_network() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f10");
    assert_eq!(ip_j(&ns, &["link", "show"]).len(), 1, "only lo");
    let mut job = Job::new(&ns);
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("lo")),
        ("NCCL_SOCKET_FAMILY", Some("AF_INET")),
        ("GLOO_SOCKET_IFNAME", Some("lo")),
        ("TP_SOCKET_IFNAME", Some("lo")),
        ("POD_IP", None),
    ]);
    let w = o.warning("loopback-only");
    assert!(w.contains("single-node"), "{w}");
    // Only a single-node job can work: strict mode refuses rather than guess.
    let s = job.strict_refuses();
    assert!(s.stderr.contains("single-node"), "{}", s.stderr);
    job.set("NCCLENV_NNODES", "1");
    job.check(&[("NCCL_SOCKET_IFNAME", Some("lo"))])
        .warning("loopback-only");
    job.unset("NCCLENV_NNODES");

    let refused = |job: &Job, how: &str| {
        let o = job.exec();
        assert_eq!(o.code, Some(78), "{how}: {o:#?}");
        assert!(!o.ran, "{how}: the command ran: {o:#?}");
        let line = o
            .stderr
            .lines()
            .find(|l| l.starts_with("ncclenv: refused (exit 78): "))
            .unwrap_or_else(|| panic!("{how}: no refusal line:\n{}", o.stderr));
        for part in [
            "no interface can reach another node",
            "2-node",
            "--network=none",
        ] {
            assert!(line.contains(part), "{how}: refusal lacks {part:?}: {line}");
        }
        line.to_string()
    };
    let mut multi = Job::new(&ns);
    multi.nnodes(2);
    assert!(refused(&multi, "--nnodes=2").contains("--nnodes"));
    // env mode: the eval'd lines stop the shell with 78 and the reason.
    let (code, stdout, stderr) = multi.env_raw();
    assert_eq!(code, Some(78), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("echo ") && stdout.trim_end().ends_with("exit 78"),
        "{stdout}"
    );
    assert!(!stdout.contains("export "), "{stdout}");
    let (code, env, stderr) = multi.env_eval();
    assert_eq!(code, Some(78), "{stderr}");
    assert!(env.is_empty());
    assert!(
        stderr.contains("no interface can reach another node"),
        "{stderr}"
    );
    // A refusal prints even with logging off.
    multi.set("NCCLENV_LOG", "off");
    let line = refused(&multi, "--nnodes=2, NCCLENV_LOG=off");
    let o = multi.exec();
    assert_eq!(o.stderr.trim_end(), line, "only the refusal line");

    let mut paddle = Job::new(&ns);
    paddle.set("PADDLE_NNODES", "2");
    assert!(refused(&paddle, "PADDLE_NNODES=2").contains("PADDLE_NNODES"));
    let mut ours = Job::new(&ns);
    ours.set("NCCLENV_NNODES", "2");
    assert!(refused(&ours, "NCCLENV_NNODES=2").contains("NCCLENV_NNODES"));
    let mut ips = Job::new(&ns);
    ips.launcher.push("--ips=10.0.0.1,10.0.0.2".into());
    refused(&ips, "--ips with two hosts");
}

/// F11: the default route with the lower metric leaves over `eth0`, which has no carrier; `eth1` carries
/// the second default route → `eth1`, with a warning naming `eth0`.
#[test]
fn f11_default_route_over_dead_link() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f11");
    ns.stub("eth0");
    ns.addr("eth0", "10.0.0.2/24");
    ns.route("default via 10.0.0.1 dev eth0 metric 100");
    ns.plug("eth1");
    ns.addr("eth1", "10.0.1.2/24");
    ns.route("default via 10.0.1.1 dev eth1 metric 200");
    // Oracle: the preferred default route is eth0's, and the kernel marks it linkdown.
    let mut defaults = ip_j(&ns, &["-4", "route", "show", "default"]);
    defaults.sort_by_key(|r| r["metric"].as_u64().unwrap_or(0));
    assert_eq!(defaults[0]["dev"], "eth0");
    assert!(defaults[0]["flags"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == "linkdown")));
    let mut job = Job::new(&ns);
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("eth1")),
        ("GLOO_SOCKET_IFNAME", Some("eth1")),
        ("POD_IP", Some("10.0.1.2")),
    ]);
    assert_eq!(default_dev(&ns).as_deref(), Some("eth1"));
    let w = o.warning("default-route-down");
    let ws = words(w);
    assert!(ws.contains(&"eth0") && ws.contains(&"eth1"), "{w}");
    // Not a strict refusal: the choice is sound.
    job.set("NCCLENV_STRICT", "1");
    job.check(&[("NCCL_SOCKET_IFNAME", Some("eth1"))]);
}

/// F12: the default route on `eth0`, the peer on the Multus network `net1` (a macvlan on another plug).
/// `MASTER_ADDR=10.100.0.12` or `--master=10.100.0.12:8090` → `net1`; this pod is the master
/// (`MASTER_ADDR=10.100.0.11`) → `net1`; no peer → `eth0`.
#[test]
fn f12_peer_on_secondary_network() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f12");
    ns.plug("eth0");
    ns.addr("eth0", "10.244.1.11/24");
    ns.route("default via 10.244.1.1 dev eth0");
    ns.plug("ext0");
    ns.macvlan("net1", "ext0");
    ns.addr("net1", "10.100.0.11/24");
    ns.wait_running("net1");
    assert_eq!(route_get_dev(&ns, "10.100.0.12"), "net1");
    let net1 = [
        ("NCCL_SOCKET_IFNAME", Some("net1")),
        ("NCCL_SOCKET_FAMILY", Some("AF_INET")),
        ("GLOO_SOCKET_IFNAME", Some("net1")),
        ("TP_SOCKET_IFNAME", Some("net1")),
        ("POD_IP", Some("10.100.0.11")),
    ];

    // Control: without a peer the default route decides.
    let job = Job::new(&ns);
    job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("POD_IP", Some("10.244.1.11")),
    ]);

    let mut job = Job::new(&ns);
    job.set("MASTER_ADDR", "10.100.0.12");
    let o = job.check(&net1);
    assert!(o.warnings().is_empty(), "{}", o.stderr);
    assert!(o.stderr.contains("10.100.0.12"), "{}", o.stderr);

    let mut job = Job::new(&ns);
    job.launcher.push("--master=10.100.0.12:8090".into());
    job.env_opts.push("--peer=10.100.0.12:8090".into());
    job.check(&net1);
    // `--master HOST:PORT` as two words, and a script argument after the .py that must not count.
    let mut job = Job::new(&ns);
    job.launcher
        .extend(["--master", "10.100.0.12:8090", "train.py"].map(String::from));
    job.env_opts.push("--peer=10.100.0.12:8090".into());
    job.check(&net1);
    let mut job = Job::new(&ns);
    job.launcher
        .extend(["train.py", "--master=10.100.0.12:8090"].map(String::from));
    job.check(&[("NCCL_SOCKET_IFNAME", Some("eth0"))]);

    let mut job = Job::new(&ns);
    job.set("MASTER_ADDR", "10.100.0.11");
    let o = job.check(&net1);
    assert_eq!(
        route_get_dev(&ns, "10.100.0.11"),
        "lo",
        "oracle: a local address"
    );
    assert!(o.warnings().is_empty(), "{}", o.stderr);
}

// ---------------------------------------------------------------------------------------------------------
// F13: /dev/shm

/// F13: F1's network, `CUDA_VISIBLE_DEVICES=0,1,2,3`, `NCCLENV_SHM_PATH` on a tmpfs of `size` mounted in a
/// private mount namespace (`unshare -m`, gone with the process).
fn f13_job<'a>(ns: &'a Netns, size: &str) -> Job<'a> {
    let mut job = Job::new(ns);
    let dir = job.tmp.join("shm");
    std::fs::create_dir_all(&dir).expect("mkdir shm");
    job.wrap = [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "/bin/sh",
        "-c",
        "mount -t tmpfs -o size=\"$1\" tmpfs \"$2\" && shift 2 && exec \"$@\"",
        "sh",
        size,
        &dir.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    job.unset("NCCLENV_SHM_MIN")
        .set("NCCLENV_SHM_PATH", &dir.display().to_string())
        .set("CUDA_VISIBLE_DEVICES", "0,1,2,3");
    job
}

#[test]
fn f13_docker_64m_dev_shm() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f13");
    ns.plug("eth0");
    ns.addr("eth0", "172.17.0.2/16");
    ns.route("default via 172.17.0.1 dev eth0");

    let mut small = f13_job(&ns, "64m");
    // Oracle: the tmpfs really is 64 MiB where ncclenv runs.
    let df = small.output(&[
        "/bin/sh".into(),
        "-c".into(),
        "stat -f -c '%S %b' \"$NCCLENV_SHM_PATH\"".into(),
    ]);
    let blocks: Vec<u64> = String::from_utf8_lossy(&df.stdout)
        .split_whitespace()
        .map(|w| w.parse().expect("stat -f"))
        .collect();
    assert_eq!(blocks.iter().product::<u64>(), 64 << 20, "{df:?}");

    let o = small.check(&[
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("NCCL_SHM_DISABLE", Some("1")),
    ]);
    let w = o.warning("shm-too-small");
    assert!(w.contains("--shm-size"), "{w}");
    assert!(w.contains("--ipc=host"), "{w}");

    // Inherited values are kept, whatever they say.
    small.set("NCCL_SHM_DISABLE", "1");
    let o = small.check(&[("NCCL_SHM_DISABLE", Some("1"))]);
    assert!(!o.has_warning("shm-too-small"), "{}", o.stderr);
    small.set("NCCL_SHM_DISABLE", "0");
    let o = small.check(&[("NCCL_SHM_DISABLE", Some("0"))]);
    assert!(o.warning("shm-too-small").contains("--shm-size"));

    let big = f13_job(&ns, "1g");
    let o = big.check(&[
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("NCCL_SHM_DISABLE", None),
    ]);
    assert!(o.warnings().is_empty(), "{}", o.stderr);
}
