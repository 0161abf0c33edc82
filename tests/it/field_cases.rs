//! Field cases F1–F13 and F16–F21, F26–F29 (docs/field-cases.md) end to end, with the real binary. Each layout is built in a
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
//! The same cases run with plain data in `tests/it/decide_core.rs`; F1–F13, F16, F18–F20 and F26–F29 read
//! their rows from the one table in `tests/it/common/layouts.rs` ([`run_case`]). After them: every finding code and README
//! claim about the interface choice, produced through the binary from an input (and absent where it must
//! be): config files, name resolution's bound, `NCCLENV_EXCLUDE`, hands-off cases, the NCCL version rule.

use crate::common;

use common::layouts::{self, Case};
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

/// `sh -c EVAL_CMD BIN [ncclenv options…] env -- COMMAND…`: `eval "$(ncclenv … env -- COMMAND…)"` (the job's
/// command read, not run), then the resulting environment NUL-separated.
const EVAL_CMD: &str = "eval \"$(\"$0\" \"$@\")\" && exec /usr/bin/env -0";

/// The launchers a test can run as the job's command: each is a script in the job's own `bin/`, first on
/// PATH, that touches `$FC_MARKER` and prints its environment NUL-separated (ncclenv recognises the launcher
/// by the program's name, so a script with the name stands in for it).
const FAKE_LAUNCHERS: &[&str] = &[
    "torchrun",
    "python",
    "python3",
    "deepspeed",
    "ray",
    "vllm",
    "horovodrun",
    "mpirun",
];

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
    /// ncclenv's own options, before `--` (and before `env`), e.g. `--exclude=eth1`.
    opts: Vec<String>,
    /// The job's command when it is a launcher (one of [`FAKE_LAUNCHERS`] and its arguments); `None` runs
    /// the plain dump command with [`Job::launcher`] after it. `ncclenv env` then reads it after `--`.
    program: Option<Vec<String>>,
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
        common::finding_line(&self.stderr, code).is_some()
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
        for d in ["sys", "dev", "bin"] {
            std::fs::create_dir_all(tmp.join(d)).expect("mkdir");
        }
        for name in FAKE_LAUNCHERS {
            let path = tmp.join("bin").join(name);
            common::exe::write(
                &path,
                "#!/bin/sh\ntouch \"$FC_MARKER\" && exec /usr/bin/env -0\n",
                0o755,
            );
        }
        let mut vars = BTreeMap::new();
        vars.insert(
            "PATH".to_string(),
            format!("{}:{PATH}", tmp.join("bin").display()),
        );
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
            opts: Vec::new(),
            program: None,
            runs: Cell::new(0),
        }
    }

    /// The job's command is `argv` (a launcher of [`FAKE_LAUNCHERS`] and its arguments).
    fn launch(&mut self, argv: &[&str]) -> &mut Self {
        self.program = Some(argv.iter().map(|a| a.to_string()).collect());
        self.launcher.clear();
        self.env_opts.clear();
        self
    }

    fn set(&mut self, k: &str, v: &str) -> &mut Self {
        self.vars.insert(k.to_string(), v.to_string());
        self
    }

    fn unset(&mut self, k: &str) -> &mut Self {
        self.vars.remove(k);
        self
    }

    /// `/dev/shm` for ncclenv is an empty tmpfs of `size` (`NCCLENV_SHM_PATH`, mounted in a private mount
    /// namespace: `unshare -m`, gone with the process), looked at with the default minimum.
    fn shm_tmpfs(&mut self, size: &str) -> &mut Self {
        let dir = self.tmp.join("shm");
        std::fs::create_dir_all(&dir).expect("mkdir shm");
        self.wrap = [
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
        self.unset("NCCLENV_SHM_MIN")
            .set("NCCLENV_SHM_PATH", &dir.display().to_string())
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
        common::exe::output(&mut c).unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"))
    }

    /// `ncclenv -- sh -c DUMP sh MARKER LAUNCHER…`.
    fn exec(&self) -> Outcome {
        let n = self.runs.get();
        self.runs.set(n + 1);
        let marker = self.tmp.join(&format!("ran-{n}"));
        let mut args: Vec<String> = vec![BIN.into()];
        args.extend(self.opts.iter().cloned());
        args.push("--".into());
        match &self.program {
            Some(p) => args.extend(p.iter().cloned()),
            None => {
                args.extend(["/bin/sh", "-c", DUMP, "sh"].map(String::from));
                args.push(marker.display().to_string());
                args.extend(self.launcher.iter().cloned());
            }
        }
        let mut c = self.command(&args);
        c.env("FC_MARKER", &marker);
        // The findings' whole text is at the debug level (the default level shortens each line to 200
        // characters: `check_env_mode` looks at that); the debug-only lines are left out of `stderr`.
        let debug = !self.vars.contains_key("NCCLENV_LOG");
        if debug {
            c.env("NCCLENV_LOG", "debug");
        }
        let out = c
            .output()
            .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"));
        let mut stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "ncclenv panicked:\n{stderr}");
        if debug {
            stderr = stderr
                .lines()
                .filter(|l| !l.starts_with("ncclenv: debug: "))
                .map(|l| format!("{l}\n"))
                .collect();
        }
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

    /// Raw `ncclenv [OPTS] env` (or `ncclenv env -- COMMAND…` for a launcher): (exit code, stdout, stderr).
    fn env_raw(&self) -> (Option<i32>, String, String) {
        let mut args = vec![BIN.to_string()];
        args.extend(self.opts.iter().cloned());
        args.extend(self.env_opts.iter().cloned());
        args.push("env".into());
        if let Some(p) = &self.program {
            args.push("--".into());
            args.extend(p.iter().cloned());
        }
        let out = self.output(&args);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `ncclenv [OPTS] doctor --json`: (exit code, the report).
    fn doctor(&self) -> (Option<i32>, Value) {
        let mut args = vec![BIN.to_string()];
        args.extend(self.opts.iter().cloned());
        args.extend(self.env_opts.iter().cloned());
        args.extend(["doctor".into(), "--json".into()]);
        let out = self.output(&args);
        let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "doctor --json: {e}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code(), v)
    }

    /// `sh -c 'eval "$(ncclenv [OPTS] env)" && exec env -0'`: (exit code, resulting environment, stderr).
    fn env_eval(&self) -> (Option<i32>, BTreeMap<String, String>, String) {
        let mut args: Vec<String> = vec!["/bin/sh".into(), "-c".into()];
        match &self.program {
            Some(p) => {
                args.extend([EVAL_CMD.to_string(), BIN.to_string()]);
                args.extend(self.opts.iter().cloned());
                args.extend(["env".to_string(), "--".to_string()]);
                args.extend(p.iter().cloned());
            }
            None => {
                args.extend([EVAL.to_string(), BIN.to_string()]);
                args.extend(self.opts.iter().cloned());
                args.extend(self.env_opts.iter().cloned());
            }
        }
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
    ///
    /// `ncclenv env` runs at the default level: each of its lines fits in 200 characters (README, "Output")
    /// and names every finding the command's run (at the debug level, whole) named, by its `[code]`.
    fn check_env_mode(&self, o: &Outcome) {
        let (code, stdout, stderr) = self.env_raw();
        assert_eq!(code, Some(0), "ncclenv env failed:\n{stdout}\n{stderr}");
        if !self.vars.contains_key("NCCLENV_LOG") {
            // A refusal is one line whatever its length (README, "What you see"): it is why the job stops.
            for line in stderr
                .lines()
                .filter(|l| !l.starts_with("ncclenv: refused"))
            {
                assert!(
                    line.chars().count() <= 200,
                    "{} characters at the default level: {line}",
                    line.chars().count()
                );
            }
            // The same input only when the launcher's arguments are not the command's (`ncclenv env` does
            // not see them).
            let codes = if self.launcher.is_empty() {
                o.stderr.as_str()
            } else {
                ""
            };
            for tag in codes.split('[').skip(1).filter_map(|t| t.split_once(']')) {
                let tag = format!("[{}]", tag.0);
                // A finding's code: `[a-z][a-z0-9-]*` (not `[0-9]` in a path pattern).
                let code = &tag[1..tag.len() - 1];
                let is_code = code.starts_with(|c: char| c.is_ascii_lowercase())
                    && code
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
                if is_code {
                    assert!(
                        stderr.contains(&tag),
                        "the default level lacks {tag}:\n{stderr}\nwhole:\n{}",
                        o.stderr
                    );
                }
            }
        }
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

    /// `ncclenv doctor [--json] [-- COMMAND…]` with the job's environment: (exit code, stdout, stderr).
    fn doctor_out(&self, json: bool) -> (Option<i32>, String, String) {
        let mut args = vec![BIN.to_string()];
        args.extend(self.opts.iter().cloned());
        args.push("doctor".to_string());
        if json {
            args.push("--json".into());
        }
        match &self.program {
            Some(p) => {
                args.push("--".into());
                args.extend(p.iter().cloned());
            }
            None => {
                // The plain command carries the launcher arguments, as in `exec`.
                if !self.launcher.is_empty() {
                    args.extend(["--", "/bin/sh", "-c", "true", "sh", "x"].map(String::from));
                    args.extend(self.launcher.iter().cloned());
                }
            }
        }
        let out = self.output(&args);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `ncclenv doctor --json [-- COMMAND…]`, parsed.
    fn doctor_json(&self) -> Value {
        let (code, out, err) = self.doctor_out(true);
        assert!(
            matches!(code, Some(0 | 1 | 78)),
            "doctor --json: {code:?} {err}"
        );
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("doctor --json: {e}: {out}\n{err}"))
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
        // Nothing was set: no summary line before the refusal, only findings (warnings, and info lines that
        // end with their `[code]`), the lines of a wait for the master's name (#21) and the refusal itself.
        for line in o.stderr.lines() {
            assert!(
                line.starts_with("ncclenv: warning: ")
                    || line.starts_with("ncclenv: refused")
                    || line.starts_with("ncclenv: waiting up to ")
                    || line.starts_with("ncclenv: still waiting for the master's name ")
                    || line.ends_with(']'),
                "a line other than a warning before a refusal: {line:?}\n{}",
                o.stderr
            );
        }
        assert_eq!(code, Some(78), "eval of a strict refusal: {eval_err}");
        assert!(env.is_empty(), "the shell went on after eval: {env:?}");
        assert_eq!(
            eval_err.matches("refused (exit 78)").count(),
            1,
            "the refusal is said once: {eval_err}"
        );
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
    // Global IPv4 addresses, and IPv4 link-local ones (F16: the peer on a link-local cable).
    let global4: Vec<&str> = a
        .iter()
        .filter(|(f, l, s)| f == "inet" && (s == "global" || l.starts_with("169.254.")))
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

/// Runs the field case `c` (a row of `tests/it/common/layouts.rs`, which `decide_core` decides as plain
/// data too) in `ns`, where its network is built: the inherited values, the command and the node count set,
/// the command's environment checked against the row, the route to the peer, the findings present and
/// absent, the infos, quiet, and strict mode. Returns the job (the row's variables and command still set)
/// and the outcome.
fn run_case<'a>(ns: &'a Netns, c: &Case) -> (Job<'a>, Outcome) {
    let mut job = Job::new(ns);
    for (k, v) in c.env {
        job.set(k, v);
    }
    if !c.command.is_empty() {
        assert!(
            c.nnodes.is_none(),
            "a launcher's command says the node count"
        );
        job.launch(c.command);
    }
    if let Some(n) = c.nnodes {
        job.nnodes(n);
    }
    if let Some(size) = c.shm {
        job.shm_tmpfs(size);
    }
    if let Some((dest, dev)) = c.peer {
        assert_eq!(route_get_dev(ns, dest), dev);
    }
    let o = job.check(c.expect);
    for code in c.warns {
        o.warning(code);
    }
    for code in c.infos {
        let line = common::finding_line(&o.stderr, code)
            .unwrap_or_else(|| panic!("no [{code}] on stderr:\n{}", o.stderr));
        assert!(!line.starts_with("ncclenv: warning: "), "an info: {line}");
    }
    for code in c.not {
        assert!(!o.has_warning(code), "{code}: {}", o.stderr);
    }
    if c.quiet {
        assert!(o.warnings().is_empty(), "{}", o.stderr);
    }
    if c.strict_refuses {
        job.strict_refuses();
    } else {
        job.set("NCCLENV_STRICT", "1");
        let s = job.check(c.expect);
        job.unset("NCCLENV_STRICT");
        assert!(!c.quiet || s.warnings().is_empty(), "{}", s.stderr);
    }
    (job, o)
}

/// F1: `eth0` 172.17.0.2/16 (plug), default via 172.17.0.1.
#[test]
fn f1_docker_bridge() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f1");
    layouts::f1(&ns);
    let (_, o) = run_case(&ns, &layouts::CASE_F1);
    assert_eq!(default_dev(&ns).as_deref(), Some(o.chosen()));
    // The summary line says what was set.
    assert!(o.stderr.contains("NCCL_SOCKET_IFNAME=eth0"), "{}", o.stderr);
}

/// F2: `ens6` 10.1.0.10/16 (plug), default via 10.1.0.1, no `eth0`; inherited `NCCL_SOCKET_IFNAME=eth0`,
/// 2 nodes → repaired to `ens6`; nothing inherited → `ens6`.
#[test]
fn f2_deep_learning_containers_6469_baked_name_missing_on_host() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f2");
    layouts::f2(&ns);
    assert!(link(&ns, "eth0").is_none());
    let (_, o) = run_case(&ns, &layouts::CASE_F2);
    assert_eq!(default_dev(&ns).as_deref(), Some(o.chosen()));

    let (mut job, o) = run_case(&ns, &layouts::CASE_F2_BAKED);
    let w = o.warning("inherited-ifname-repaired");
    assert!(
        w.contains("NCCL_SOCKET_IFNAME") && w.contains("\"eth0\"") && w.contains("\"ens6\""),
        "the repair warning names the old and the new value: {w}"
    );

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
fn f3_nccl_697_compose_bridges_and_veths() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f3");
    layouts::f3(&ns);
    for v in ["veth1a2b3c4", "veth5d6e7f8", "veth9a0b1c2", "veth3d4e5f6"] {
        assert!(
            addrs(&ns, v).iter().all(|(_, a, _)| a.starts_with("fe80:")),
            "{v} is fe80-only"
        );
    }
    let (_, o) = run_case(&ns, &layouts::CASE_F3);
    assert_eq!(default_dev(&ns).as_deref(), Some("bond0"));
    for k in OURS {
        if let Some(v) = o.var(k) {
            assert!(!v.contains("br-") && !v.contains("veth"), "{k}={v}");
        }
    }
}

/// F4: `ens5` 10.31.0.11/20 with the default route and a RUNNING fe80-only `veth3f2a` → `ens5`.
#[test]
fn f4_pytorch_68893_fe80_veth_beside_uplink() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f4");
    layouts::f4(&ns);
    let (_, o) = run_case(&ns, &layouts::CASE_F4);
    assert_eq!(default_dev(&ns).as_deref(), Some(o.chosen()));
}

/// F5: `eth0`/`eth1`/`eth10`, default via `eth0`, job shape unknown. Inherited `eth2` → repaired to `eth0`
/// with the usable interfaces listed; inherited `eth1` → kept with a prefix warning; nothing → `eth0`.
#[test]
fn f5_nccl_1837_missing_name_and_prefix_matching_two() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f5");
    layouts::f5(&ns);
    run_case(&ns, &layouts::CASE_F5);
    assert_eq!(default_dev(&ns).as_deref(), Some("eth0"));

    let (_, o) = run_case(&ns, &layouts::CASE_F5_MISSING);
    let w = o.warning("inherited-ifname-repaired");
    let ws = words(w);
    for n in ["eth2", "eth0", "eth1", "eth10"] {
        assert!(ws.contains(&n), "the repair warning lacks {n}: {w}");
    }

    let (_, o) = run_case(&ns, &layouts::CASE_F5_PREFIX);
    let w = o.warning("inherited-ifname-prefix");
    assert!(
        words(w).contains(&"eth10") && w.contains("=eth1"),
        "the prefix warning names eth10 and the exact form =eth1: {w}"
    );
}

/// F6: `ens5` with the default route, a RUNNING fe80-only `eni4c1d`, inherited NCCL syntax in both
/// variables, `MASTER_ADDR=10.0.1.20` → the NCCL value is kept, `GLOO_SOCKET_IFNAME` repaired to `ens5`.
#[test]
fn f6_aws_do_eks_51_gloo_given_nccl_syntax() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f6");
    layouts::f6(&ns);
    let (_, o) = run_case(&ns, &layouts::CASE_F6);
    let w = o.warning("gloo-ifname-repaired");
    assert!(
        w.contains("GLOO_SOCKET_IFNAME") && w.contains("^lo,docker,veth,eni") && w.contains("ens5"),
        "{w}"
    );
}

/// F7: `bond0` with macvlan children `bond0.2973` and `bond0.2973.1` (fe80 only). Nothing inherited →
/// `=bond0`; inherited `bond0` → kept with a striping warning; strict → 78.
#[test]
fn f7_nccl_177_prefix_catches_vlan_children() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f7");
    layouts::f7(&ns);
    assert!(addrs(&ns, "bond0.2973.1")
        .iter()
        .all(|(_, a, _)| a.starts_with("fe80:")));
    run_case(&ns, &layouts::CASE_F7);
    assert_eq!(default_dev(&ns).as_deref(), Some("bond0"));

    let (mut job, o) = run_case(&ns, &layouts::CASE_F7_PREFIX);
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
fn f8_ray_30333_wifi_uplink_and_whitelist_missing_it() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f8");
    layouts::f8(&ns);
    let enp = link(&ns, "enp3s0").expect("enp3s0");
    assert!(
        enp["flags"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "NO-CARRIER")),
        "enp3s0 must have no carrier: {enp}"
    );
    run_case(&ns, &layouts::CASE_F8);
    assert_eq!(default_dev(&ns).as_deref(), Some("wlp2s0"));

    let (_, o) = run_case(&ns, &layouts::CASE_F8_LIST);
    let w = o.warning("inherited-ifname-repaired");
    assert!(
        w.contains("\"en,eth,bond\"") && w.contains("\"wlp2s0\"") && words(w).contains(&"enp3s0"),
        "{w}"
    );
}

/// F9: no IPv4 but lo; a vxlan `ip6tnl0` (fe80 only, lower index) and `veth0` fd00:10::5/64 with
/// `default via fe80::1` → `veth0`, `AF_INET6`, no `POD_IP`.
#[test]
fn f9_nccl_529_ipv6_only_with_link_local_tunnel_first() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f9");
    layouts::f9(&ns);
    let idx = |n: &str| link(&ns, n).expect(n)["ifindex"].as_u64().expect("ifindex");
    assert!(idx("ip6tnl0") < idx("veth0"));
    assert!(ip_j(&ns, &["-4", "addr", "show"])
        .iter()
        .all(|l| l["ifname"] == "lo"));
    run_case(&ns, &layouts::CASE_F9);
    assert_eq!(default_dev(&ns).as_deref(), Some("veth0"));
    assert!(
        addrs(&ns, "veth0")
            .iter()
            .any(|(f, a, _)| f == "inet6" && a == "fd00:10::5"),
        "oracle: veth0 owns fd00:10::5"
    );
}

/// F10: only `lo`. Single node (or shape unknown) → `lo` with a single-node warning; 2 nodes (`--nnodes=2`,
/// `PADDLE_NNODES=2`, `NCCLENV_NNODES=2`, `--ips` with two hosts) → exit 78 saying what the container lacks.
#[test]
fn f10_no_network() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f10");
    layouts::f10(&ns);
    assert_eq!(ip_j(&ns, &["link", "show"]).len(), 1, "only lo");
    let (mut job, o) = run_case(&ns, &layouts::CASE_F10);
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
    // env mode: the eval'd lines stop the shell with 78; the reason is on stderr, once.
    let (code, stdout, stderr) = multi.env_raw();
    assert_eq!(code, Some(78), "{stdout}\n{stderr}");
    assert_eq!(stdout, "exit 78\n", "{stderr}");
    assert!(
        stderr.contains("no interface can reach another node"),
        "{stderr}"
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
    layouts::f11(&ns);
    // Oracle: the preferred default route is eth0's, and the kernel marks it linkdown.
    let mut defaults = ip_j(&ns, &["-4", "route", "show", "default"]);
    defaults.sort_by_key(|r| r["metric"].as_u64().unwrap_or(0));
    assert_eq!(defaults[0]["dev"], "eth0");
    assert!(defaults[0]["flags"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == "linkdown")));
    // Not a strict refusal: the choice is sound (the row says so).
    let (_, o) = run_case(&ns, &layouts::CASE_F11);
    assert_eq!(default_dev(&ns).as_deref(), Some("eth1"));
    let w = o.warning("default-route-down");
    let ws = words(w);
    assert!(ws.contains(&"eth0") && ws.contains(&"eth1"), "{w}");
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
    layouts::f12(&ns);
    let net1 = layouts::F12_NET1;

    // Control: without a peer the default route decides.
    run_case(&ns, &layouts::CASE_F12);

    let (_, o) = run_case(&ns, &layouts::CASE_F12_PEER);
    assert!(o.stderr.contains("10.100.0.12"), "{}", o.stderr);

    let mut job = Job::new(&ns);
    job.launcher.push("--master=10.100.0.12:8090".into());
    job.env_opts.push("--peer=10.100.0.12:8090".into());
    job.check(net1);
    // `--master HOST:PORT` as two words, and a script argument after the .py that must not count.
    let mut job = Job::new(&ns);
    job.launcher
        .extend(["--master", "10.100.0.12:8090", "train.py"].map(String::from));
    job.env_opts.push("--peer=10.100.0.12:8090".into());
    job.check(net1);
    let mut job = Job::new(&ns);
    job.launcher
        .extend(["train.py", "--master=10.100.0.12:8090"].map(String::from));
    job.check(&[("NCCL_SOCKET_IFNAME", Some("eth0"))]);

    // This pod is the master: the kernel answers its address from `lo` (the row's peer, an oracle).
    run_case(&ns, &layouts::CASE_F12_LOCAL);
}

// ---------------------------------------------------------------------------------------------------------
// F13: /dev/shm

/// F13, NVIDIA/nccl#342 and PaddlePaddle/Paddle#29331: F1's network, `CUDA_VISIBLE_DEVICES=0,1,2,3`,
/// `/dev/shm` a 64 MiB tmpfs → `NCCL_SHM_DISABLE=1` with a warning naming Docker's flags; an inherited value
/// is kept; 1 GiB → unset.
#[test]
fn f13_nccl_342_docker_64m_dev_shm() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f13");
    layouts::f1(&ns);
    let (small, o) = run_case(&ns, &layouts::CASE_F13);
    let w = o.warning("shm-too-small");
    assert!(w.contains("--shm-size"), "{w}");
    assert!(w.contains("--ipc=host"), "{w}");
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
    // Inherited values are kept, whatever they say.
    run_case(&ns, &layouts::CASE_F13_KEPT);
    let (_, o) = run_case(&ns, &layouts::CASE_F13_KEPT_ON);
    assert!(o.warning("shm-too-small").contains("--shm-size"));
    run_case(&ns, &layouts::CASE_F13_ROOM);
}

// ---------------------------------------------------------------------------------------------------------
// Finding codes and README claims, through the binary: each code produced from an input, and absent where
// it must not be.

/// The finding codes of a `doctor --json` report (`decision.warnings[].code`, info and warnings).
fn doctor_codes(v: &Value) -> Vec<String> {
    v["decision"]["warnings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|w| w["code"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// `POD_IP` or the launcher's `--ips` advertise another address than the one NCCL binds:
/// `advertised-address-differs`; the same values naming this node's address: no warning.
#[test]
fn advertised_address_differs() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("adv");
    common::layouts::f1(&ns);
    let mut job = Job::new(&ns);
    job.set("POD_IP", "172.17.0.99");
    // (Not `check`: its oracle wants POD_IP on the chosen interface, which is the point here.)
    let o = job.exec();
    assert_eq!((o.code, o.ran), (Some(0), true), "{o:#?}");
    assert_eq!(o.var("NCCL_SOCKET_IFNAME"), Some("eth0"));
    assert_eq!(
        o.var("POD_IP"),
        Some("172.17.0.99"),
        "an inherited POD_IP is kept"
    );
    let w = o.warning("advertised-address-differs");
    assert!(w.contains("172.17.0.99") && w.contains("172.17.0.2"), "{w}");
    job.set("POD_IP", "172.17.0.2");
    let o = job.check(&[("POD_IP", Some("172.17.0.2"))]);
    assert!(!o.has_warning("advertised-address-differs"), "{}", o.stderr);

    // Paddle's --ips: this node is not in the list, then it is.
    let mut job = Job::new(&ns);
    job.launcher.push("--ips=10.9.0.1,10.9.0.2".into());
    job.env_opts.push("--peer=10.9.0.1".into());
    let o = job.check(&[("NCCL_SOCKET_IFNAME", Some("eth0"))]);
    let w = o.warning("advertised-address-differs");
    assert!(
        w.contains("10.9.0.1,10.9.0.2") && w.contains("172.17.0.2"),
        "{w}"
    );
    let mut job = Job::new(&ns);
    job.launcher.push("--ips=10.9.0.1,172.17.0.2".into());
    job.env_opts.push("--peer=10.9.0.1".into());
    let o = job.check(&[("NCCL_SOCKET_IFNAME", Some("eth0"))]);
    assert!(!o.has_warning("advertised-address-differs"), "{}", o.stderr);
}

/// `GLOO_SOCKET_IFNAME` naming another existing interface than NCCL's: kept, `companion-differs`; naming a
/// missing one (and `TP_SOCKET_IFNAME` too): repaired to NCCL's interface, `gloo-ifname-repaired`; naming
/// NCCL's: neither.
#[test]
fn gloo_companions_differ_or_name_a_missing_interface() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("gloo");
    common::layouts::f5(&ns);
    let mut job = Job::new(&ns);
    job.set("GLOO_SOCKET_IFNAME", "eth1");
    // (Not `check`: its oracle takes GLOO_SOCKET_IFNAME for the chosen interface, which is the point here.)
    let o = job.exec();
    assert_eq!((o.code, o.ran), (Some(0), true), "{o:#?}");
    for (k, v) in [
        ("NCCL_SOCKET_IFNAME", "eth0"),
        ("GLOO_SOCKET_IFNAME", "eth1"),
        ("TP_SOCKET_IFNAME", "eth0"),
        ("POD_IP", "10.0.0.5"),
    ] {
        assert_eq!(o.var(k), Some(v), "{k}: {o:#?}");
    }
    let w = o.warning("companion-differs");
    assert!(
        w.contains("GLOO_SOCKET_IFNAME") && words(w).contains(&"eth1"),
        "{w}"
    );
    assert!(!o.has_warning("gloo-ifname-repaired"), "{}", o.stderr);

    job.set("GLOO_SOCKET_IFNAME", "eth7")
        .set("TP_SOCKET_IFNAME", "ens9");
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("GLOO_SOCKET_IFNAME", Some("eth0")),
        ("TP_SOCKET_IFNAME", Some("eth0")),
    ]);
    let repairs: Vec<&str> = o
        .warnings()
        .into_iter()
        .filter(|l| l.contains("[gloo-ifname-repaired]"))
        .collect();
    assert_eq!(repairs.len(), 2, "{}", o.stderr);
    assert!(
        repairs.iter().any(|w| w.contains("\"eth7\"")),
        "{repairs:?}"
    );
    assert!(
        repairs.iter().any(|w| w.contains("\"ens9\"")),
        "{repairs:?}"
    );
    assert!(!o.has_warning("companion-differs"), "{}", o.stderr);
    job.strict_refuses();

    job.set("GLOO_SOCKET_IFNAME", "eth0")
        .unset("TP_SOCKET_IFNAME");
    let o = job.check(&[("GLOO_SOCKET_IFNAME", Some("eth0"))]);
    assert!(o.warnings().is_empty(), "{}", o.stderr);
}

/// Values NCCL ignores: `NCCL_SOCKET_FAMILY=inet` (`family-ignored`, kept as it is) and a one-character
/// `NCCL_SOCKET_IFNAME` (`ifname-ignored`, replaced by ncclenv's choice); the spellings NCCL reads: neither.
#[test]
fn values_nccl_ignores_are_pointed_out() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("ign");
    common::layouts::f1(&ns);
    let mut job = Job::new(&ns);
    job.set("NCCL_SOCKET_FAMILY", "inet");
    let o = job.exec();
    assert_eq!((o.code, o.ran), (Some(0), true), "{o:#?}");
    assert_eq!(o.var("NCCL_SOCKET_FAMILY"), Some("inet"));
    assert_eq!(o.var("NCCL_SOCKET_IFNAME"), Some("eth0"));
    assert!(o.warning("family-ignored").contains("inet"));
    job.set("NCCL_SOCKET_FAMILY", "AF_INET");
    let o = job.check(&[("NCCL_SOCKET_FAMILY", Some("AF_INET"))]);
    assert!(!o.has_warning("family-ignored"), "{}", o.stderr);

    let mut job = Job::new(&ns);
    job.set("NCCL_SOCKET_IFNAME", "e");
    let o = job.check(&[("NCCL_SOCKET_IFNAME", Some("eth0"))]);
    assert!(
        o.warning("ifname-ignored").contains("\"e\""),
        "{}",
        o.stderr
    );
    job.set("NCCL_SOCKET_IFNAME", "eth0");
    let o = job.check(&[("NCCL_SOCKET_IFNAME", Some("eth0"))]);
    assert!(!o.has_warning("ifname-ignored"), "{}", o.stderr);
}

/// Not even `lo` has an address (it was never brought up): `no-interface`, nothing set, the command runs; a
/// 2-node job is refused. With `lo` up: `loopback-only` instead.
#[test]
fn no_interface_at_all() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("noif");
    ns.ip(&["link", "set", "lo", "down"]);
    ns.ip(&["addr", "flush", "dev", "lo"]);
    assert!(
        ip_j(&ns, &["addr", "show"])
            .iter()
            .all(|l| l["addr_info"].as_array().is_none_or(|a| a.is_empty())),
        "oracle: no address at all"
    );
    let mut job = Job::new(&ns);
    let o = job.exec();
    assert_eq!((o.code, o.ran), (Some(0), true), "{o:#?}");
    assert!(o.warning("no-interface").contains("lo"), "{}", o.stderr);
    assert_eq!(o.var("NCCL_SOCKET_IFNAME"), None);
    assert_eq!(o.var("GLOO_SOCKET_IFNAME"), None);
    assert!(!o.has_warning("loopback-only"), "{}", o.stderr);
    job.nnodes(2);
    let o = job.exec();
    assert_eq!((o.code, o.ran), (Some(78), false), "{o:#?}");

    let up = Netns::new("noif");
    let job = Job::new(&up);
    let o = job.check(&[("NCCL_SOCKET_IFNAME", Some("lo"))]);
    assert!(o.has_warning("loopback-only") && !o.has_warning("no-interface"));
}

/// The peer has no route (`peer-unreachable`), or its route leaves through an interface without carrier
/// (`peer-route-unusable`): ncclenv falls back to what remains; a peer on the live interface: neither.
#[test]
fn peer_unreachable_or_behind_an_unusable_route() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("peer");
    ns.plug("eth0");
    ns.addr("eth0", "10.0.0.2/24");
    ns.stub("eth1");
    ns.addr("eth1", "10.50.0.2/24");
    // Oracle: no route to 192.0.2.1; the route to 10.50.0.9 leaves through eth1.
    assert!(Command::new("ip")
        .args(["-n", &ns.name, "route", "get", "192.0.2.1"])
        .output()
        .is_ok_and(|o| !o.status.success()));
    assert_eq!(route_get_dev(&ns, "10.50.0.9"), "eth1");
    let want = [
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("POD_IP", Some("10.0.0.2")),
    ];

    let mut job = Job::new(&ns);
    job.set("MASTER_ADDR", "192.0.2.1");
    let o = job.check(&want);
    assert!(o.warning("peer-unreachable").contains("192.0.2.1"));
    assert!(!o.has_warning("peer-route-unusable"), "{}", o.stderr);

    job.set("MASTER_ADDR", "10.50.0.9");
    let o = job.check(&want);
    let w = o.warning("peer-route-unusable");
    assert!(words(w).contains(&"eth1") && w.contains("RUNNING"), "{w}");
    assert!(!o.has_warning("peer-unreachable"), "{}", o.stderr);

    job.set("MASTER_ADDR", "10.0.0.9");
    let o = job.check(&want);
    assert!(
        !o.has_warning("peer-unreachable") && !o.has_warning("peer-route-unusable"),
        "{}",
        o.stderr
    );
}

/// `NCCL_COMM_ID`: hands off (`comm-id`, nothing set); an address in no local subnet: `comm-id-no-subnet`;
/// without it: neither code.
#[test]
fn comm_id_is_hands_off_and_its_subnet_is_checked() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("commid");
    common::layouts::f1(&ns);
    let mut job = Job::new(&ns);
    job.set("NCCL_COMM_ID", "172.17.0.5:29500");
    let o = job.exec();
    assert_eq!((o.code, o.ran), (Some(0), true), "{o:#?}");
    for k in OURS {
        assert_eq!(o.var(k), None, "{k} set although NCCL_COMM_ID is");
    }
    let (code, v) = job.doctor();
    let codes = doctor_codes(&v);
    assert!(codes.contains(&"comm-id".to_string()), "{codes:?}");
    assert!(
        !codes.contains(&"comm-id-no-subnet".to_string()),
        "{codes:?}"
    );
    assert_eq!(code, Some(0), "{v}");

    job.set("NCCL_COMM_ID", "10.99.0.1:29500");
    let o = job.exec();
    assert_eq!((o.code, o.ran), (Some(0), true), "{o:#?}");
    assert!(o.warning("comm-id-no-subnet").contains("10.99.0.1"));
    let (code, v) = job.doctor();
    assert!(doctor_codes(&v).contains(&"comm-id-no-subnet".to_string()));
    assert_eq!(code, Some(1));

    job.unset("NCCL_COMM_ID");
    let (_, v) = job.doctor();
    let codes = doctor_codes(&v);
    assert!(!codes.iter().any(|c| c.starts_with("comm-id")), "{codes:?}");
}

/// F18: a vendor network profile (`FI_PROVIDER=efa`, `NCCL_NET_PLUGIN=ofi`): `vendor-profile`, and NCCL's
/// transport variables stay untouched; without it: no such code, and `NCCL_IB_DISABLE=1` (no RDMA device).
#[test]
fn f18_vendor_profile_leaves_the_transport_alone() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("vendor");
    common::layouts::f18(&ns);
    let mut job = Job::new(&ns);
    job.set("FI_PROVIDER", "efa").set("NCCL_NET_PLUGIN", "ofi");
    let o = job.exec();
    assert_eq!((o.code, o.ran), (Some(0), true), "{o:#?}");
    for k in ["NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_SHM_DISABLE"] {
        assert_eq!(o.var(k), None, "{k}: {o:#?}");
    }
    assert_eq!(o.var("NCCL_NET_PLUGIN"), Some("ofi"));
    assert_eq!(o.var("FI_PROVIDER"), Some("efa"));
    let (_, v) = job.doctor();
    assert!(
        doctor_codes(&v).contains(&"vendor-profile".to_string()),
        "{v}"
    );

    job.unset("FI_PROVIDER").unset("NCCL_NET_PLUGIN");
    let o = job.check(&[("NCCL_SOCKET_IFNAME", Some("enp73s0"))]);
    assert_eq!(o.var("NCCL_IB_DISABLE"), Some("1"));
    let (_, v) = job.doctor();
    assert!(!doctor_codes(&v).contains(&"vendor-profile".to_string()));
}

/// `NCCLENV_EXCLUDE` and `--exclude` (also `--exclude=`, and for `ncclenv env`): exact names. With the
/// peer behind `eth10`, excluding `eth1` leaves `eth10` (no prefix match); excluding `eth10` falls back to
/// the default route's `eth0`, saying why.
#[test]
fn exclude_by_variable_and_flag_takes_exact_names() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("excl");
    common::layouts::f5(&ns);
    assert_eq!(route_get_dev(&ns, "10.0.10.9"), "eth10");
    let by_peer = [
        ("NCCL_SOCKET_IFNAME", Some("eth10")),
        ("GLOO_SOCKET_IFNAME", Some("eth10")),
        ("POD_IP", Some("10.0.10.5")),
    ];
    let fallback = [
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("GLOO_SOCKET_IFNAME", Some("eth0")),
        ("POD_IP", Some("10.0.0.5")),
    ];
    // Control: no exclusion, the peer's route decides.
    let mut job = Job::new(&ns);
    job.set("MASTER_ADDR", "10.0.10.9");
    job.env_opts.push("--peer=10.0.10.9".into());
    job.check(&by_peer);

    job.set("NCCLENV_EXCLUDE", "eth1");
    job.check(&by_peer);
    job.set("NCCLENV_EXCLUDE", "eth10");
    let o = job.check(&fallback);
    assert!(
        o.warning("peer-route-unusable").contains("NCCLENV_EXCLUDE"),
        "{}",
        o.stderr
    );
    job.unset("NCCLENV_EXCLUDE");
    for opts in [
        vec!["--exclude", "eth10"],
        vec!["--exclude=eth10"],
        vec!["--exclude=lo,eth10"],
    ] {
        job.opts = opts.iter().map(|s| s.to_string()).collect();
        job.check(&fallback);
    }
    job.opts = vec!["--exclude=eth1".into()];
    job.check(&by_peer);
    // The flag wins over the variable.
    job.set("NCCLENV_EXCLUDE", "eth10");
    job.check(&by_peer);
}

/// A wrapper (for `Job::wrap`) that runs the rest of the command line in a private mount namespace after
/// `script` (`sh -c`), which gets `args` as `$1…` and must `shift` them away before `exec "$@"`.
fn mount_wrap(script: &str, args: &[&str]) -> Vec<String> {
    let mut w: Vec<String> = ["unshare", "-m", "--propagation", "private", "/bin/sh", "-c"]
        .map(String::from)
        .to_vec();
    w.push(script.to_string());
    w.push("sh".into());
    w.extend(args.iter().map(|a| a.to_string()));
    w
}

/// NCCL's configuration files through the binary (`docs/policy.md`, step 4):
/// `NCCL_CONF_FILE`, else `~/.nccl.conf` (the home of the user's password entry), then `/etc/nccl.conf`,
/// the first that sets a variable wins and the environment wins over all; a value NCCL would fail with is
/// repaired (the warning names the file), one it works with is kept (ncclenv sets nothing over it and the
/// companions follow it); a file that cannot be read fails open. `~` and `/etc` are replaced in a private
/// mount namespace (a bind mount, an overlay), so the machine's own files are never touched.
#[test]
fn nccl_config_files_are_read_as_nccl_reads_them() {
    if !common::require_root() {
        return;
    }
    let etc_had_one = std::path::Path::new("/etc/nccl.conf").exists();
    let ns = Netns::new("conf");
    common::layouts::f5(&ns);
    let repaired = [
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("GLOO_SOCKET_IFNAME", Some("eth0")),
        ("POD_IP", Some("10.0.0.5")),
    ];
    let kept_eth1 = [
        ("NCCL_SOCKET_IFNAME", None),
        ("GLOO_SOCKET_IFNAME", Some("eth1")),
        ("POD_IP", Some("10.0.1.5")),
    ];
    let mut job = Job::new(&ns);
    let conf = job.tmp.join("nccl.conf");
    conf_file_is_read(&mut job, &conf, &repaired, &kept_eth1);
    home_and_etc_files_are_read(&mut job, &conf, &repaired, &kept_eth1, etc_had_one);
    unreadable_conf_file_fails_open(&ns);
}

/// `NCCL_CONF_FILE` (pointed by `job` at `conf`): a value NCCL would fail with is repaired (`repaired`: the
/// variables then; the warning names the file), one it works with is kept (`kept_eth1`), and the environment
/// wins over the file.
fn conf_file_is_read(
    job: &mut Job,
    conf: &std::path::Path,
    repaired: &[(&str, Option<&str>)],
    kept_eth1: &[(&str, Option<&str>)],
) {
    let conf_s = conf.display().to_string();
    std::fs::write(conf, "NCCL_DEBUG=WARN\nNCCL_SOCKET_IFNAME=eth2\n").expect("write conf");
    job.set("NCCL_CONF_FILE", &conf_s);
    let o = job.check(repaired);
    let w = o.warning("inherited-ifname-repaired");
    assert!(w.contains(&conf_s) && w.contains("\"eth2\""), "{w}");
    std::fs::write(conf, "NCCL_SOCKET_IFNAME=eth1\n").expect("write conf");
    let o = job.check(kept_eth1);
    assert!(o.warning("inherited-ifname-prefix").contains(&conf_s));
    // The environment wins over the file.
    job.set("NCCL_SOCKET_IFNAME", "eth0");
    let o = job.check(&[("NCCL_SOCKET_IFNAME", Some("eth0"))]);
    assert!(o.warnings().is_empty(), "{}", o.stderr);
    job.unset("NCCL_SOCKET_IFNAME");
}

/// `~/.nccl.conf` (the home of the user's password entry) and `/etc/nccl.conf`, replaced in a private mount
/// namespace that `job`'s command runs in: each is read, `NCCL_CONF_FILE` (`conf`) replaces the home file,
/// the first file that sets a variable wins (`repaired`, `kept_eth1`: the variables then), and the machine's
/// own files are not touched (`etc_had_one`: whether /etc/nccl.conf existed before the test).
fn home_and_etc_files_are_read(
    job: &mut Job,
    conf: &std::path::Path,
    repaired: &[(&str, Option<&str>)],
    kept_eth1: &[(&str, Option<&str>)],
    etc_had_one: bool,
) {
    let home = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.dir)
        .expect("the password entry of the test's user");
    let fake_home = job.tmp.join("home");
    let etc_conf = job.tmp.join("etc-nccl.conf");
    let ovl = job.tmp.join("ovl");
    for d in [&fake_home, &ovl] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let (home_s, fake_s, etc_s, ovl_s) = (
        home.display().to_string(),
        fake_home.display().to_string(),
        etc_conf.display().to_string(),
        ovl.display().to_string(),
    );
    job.wrap = mount_wrap(
        "mount --bind \"$2\" \"$1\" && mount -t tmpfs ncclenv-test \"$4\" && mkdir \"$4/u\" \"$4/w\" && \
         mount -t overlay ncclenv-test -o lowerdir=/etc,upperdir=\"$4/u\",workdir=\"$4/w\" /etc && \
         { [ ! -e \"$3\" ] || cp \"$3\" /etc/nccl.conf; } && shift 4 && exec \"$@\"",
        &[&home_s, &fake_s, &etc_s, &ovl_s],
    );
    job.unset("NCCL_CONF_FILE");
    let home_conf = fake_home.join(".nccl.conf");
    std::fs::write(&home_conf, "NCCL_SOCKET_IFNAME=eth2\n").expect("write");
    let o = job.check(repaired);
    let w = o.warning("inherited-ifname-repaired");
    assert!(w.contains(".nccl.conf") && w.contains("\"eth2\""), "{w}");
    // NCCL_CONF_FILE replaces ~/.nccl.conf: the home file is then not read.
    std::fs::write(conf, "NCCL_DEBUG=WARN\n").expect("write conf");
    job.set("NCCL_CONF_FILE", &conf.display().to_string());
    let o = job.check(repaired);
    assert!(o.warnings().is_empty(), "{}", o.stderr);
    job.unset("NCCL_CONF_FILE");
    // /etc/nccl.conf alone, then behind ~/.nccl.conf (the first file that sets a variable wins).
    std::fs::remove_file(&home_conf).expect("rm");
    std::fs::write(&etc_conf, "NCCL_SOCKET_IFNAME=eth2\n").expect("write");
    let o = job.check(repaired);
    let w = o.warning("inherited-ifname-repaired");
    assert!(
        w.contains("/etc/nccl.conf") && w.contains("\"eth2\""),
        "{w}"
    );
    std::fs::write(&home_conf, "NCCL_SOCKET_IFNAME=eth1\n").expect("write");
    let o = job.check(kept_eth1);
    assert!(o.warning("inherited-ifname-prefix").contains(".nccl.conf"));
    assert!(!o.has_warning("inherited-ifname-repaired"), "{}", o.stderr);
    // The machine's own /etc and home were not touched.
    assert_eq!(
        std::path::Path::new("/etc/nccl.conf").exists(),
        etc_had_one,
        "/etc/nccl.conf of the machine changed"
    );
    assert!(
        !home.join(".nccl.conf").exists(),
        "{home:?}/.nccl.conf appeared"
    );
}

/// A config file that cannot be read (a directory as `NCCL_CONF_FILE`, in `ns`): fail open, the environment
/// untouched; strict refuses.
fn unreadable_conf_file_fails_open(ns: &Netns) {
    let mut job = Job::new(ns);
    let dir = job.tmp.join("conf.d");
    std::fs::create_dir_all(&dir).expect("mkdir");
    job.set("NCCL_CONF_FILE", &dir.display().to_string());
    let o = job.exec();
    assert_eq!((o.code, o.ran), (Some(0), true), "{o:#?}");
    for k in OURS {
        assert_eq!(
            o.var(k),
            None,
            "{k} set although a config file is unreadable"
        );
    }
    assert!(
        o.warning("probe-failed")
            .contains(&dir.display().to_string()),
        "{}",
        o.stderr
    );
    job.strict_refuses();
}

/// `NCCLENV_RESOLVE_TIMEOUT_MS` bounds the resolution of the master's host name (F17, `docs/field-cases.md`): the
/// resolver is a UDP socket that takes every query and never answers (`options timeout:30 attempts:5`: the
/// C library alone would wait minutes). ncclenv gives up after the bound, warns naming the host, and runs the
/// command; a larger bound is waited out (a lower bound, which load cannot break). Times have wide margins.
#[test]
fn f17_peer_name_resolution_is_bounded() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("resolve");
    common::layouts::f1(&ns);
    let mut job = Job::new(&ns);
    // The silent resolver, inside the namespace, on 127.0.0.53:53; it says "ready" once bound.
    let mut dns = ns
        .command("python3")
        .args([
            "-c",
            "import socket,sys,time\n\
             s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(('127.0.0.53',53))\n\
             print('ready',flush=True)\n\
             while True: s.recvfrom(4096)\n",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut line = String::new();
    {
        use std::io::BufRead;
        let out = dns.stdout.take().expect("stdout");
        std::io::BufReader::new(out)
            .read_line(&mut line)
            .expect("read");
    }
    let _dns = Kill(dns);
    assert_eq!(line.trim(), "ready");
    for (name, text) in [
        (
            "resolv.conf",
            "nameserver 127.0.0.53\noptions timeout:30 attempts:5\n",
        ),
        ("nsswitch.conf", "hosts: files dns\n"),
        ("hosts", "127.0.0.1 localhost\n"),
    ] {
        std::fs::write(job.tmp.join(name), text).expect("write");
    }
    let dir = job.tmp.path.display().to_string();
    job.wrap = mount_wrap(
        "for f in resolv.conf nsswitch.conf hosts; do mount --bind \"$1/$f\" \"/etc/$f\" || exit 1; done; \
         shift; exec \"$@\"",
        &[&dir],
    );
    // Oracle: the C library's own lookup gets no answer within 5 s.
    let o = job.output(&["timeout", "5", "getent", "hosts", "job-master-0"].map(String::from));
    assert_eq!(o.status.code(), Some(124), "the resolver answered: {o:?}");

    job.set("MASTER_ADDR", "job-master-0")
        .set("NCCLENV_RESOLVE_TIMEOUT_MS", "500");
    let t = std::time::Instant::now();
    let o = job.exec();
    let took = t.elapsed();
    assert_eq!((o.code, o.ran), (Some(0), true), "{o:#?}");
    assert!(
        took < std::time::Duration::from_secs(20),
        "a 500 ms bound took {took:?}"
    );
    let w = o
        .warnings()
        .into_iter()
        .find(|l| l.contains("job-master-0"))
        .unwrap_or_else(|| panic!("no warning names the master:\n{}", o.stderr))
        .to_string();
    let waited = tried_ms(&w);
    assert!((500..20_000).contains(&waited), "{w}");

    job.set("NCCLENV_RESOLVE_TIMEOUT_MS", "3000");
    let t = std::time::Instant::now();
    let o = job.exec();
    let took = t.elapsed();
    assert_eq!((o.code, o.ran), (Some(0), true), "{o:#?}");
    assert!(
        took >= std::time::Duration::from_secs(3) && took < std::time::Duration::from_secs(30),
        "a 3000 ms bound took {took:?}"
    );
    let waited = tried_ms(&o.stderr);
    assert!((3000..30_000).contains(&waited), "{}", o.stderr);
}

/// The milliseconds in a `peer-unresolved` warning's "tried for N ms": the time ncclenv really waited,
/// which a loaded machine makes a little longer than the bound.
fn tried_ms(text: &str) -> u64 {
    text.split("tried for ")
        .nth(1)
        .and_then(|rest| rest.split(" ms").next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no \"tried for N ms\" in:\n{text}"))
}

/// An inherited prefix whose first match has an address but no carrier (F8's trap, `eth0` dead before the
/// live `eth1`): the NCCL the command will load decides. Before 2.28 NCCL bootstraps on the dead `eth0`, so
/// ncclenv repairs the value; from 2.28 it skips it and the value is kept. The library is named by
/// `NCCLENV_NCCL_LIB` (a stand-in file: only its versioned name is read, nothing is loaded).
#[test]
fn a_dead_first_match_follows_the_nccl_version() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("era");
    common::layouts::dead_first(&ns);
    for (version, repaired) in [("2.21.5", true), ("2.27.7", true), ("2.28.3", false)] {
        let mut job = Job::new(&ns);
        let lib = job.tmp.join(&format!("libnccl.so.{version}"));
        std::fs::write(&lib, b"").expect("write stand-in");
        job.set("NCCLENV_NCCL_LIB", &lib.display().to_string())
            .set("NCCL_SOCKET_IFNAME", "eth");
        let (_, v) = job.doctor();
        let model = &v["decision"]["nccl_model"];
        assert_eq!(
            model["nccl_versions"],
            serde_json::json!([version]),
            "{model}"
        );
        if repaired {
            assert_eq!(model["bootstrap"]["ifname"], "eth0", "{model}");
            let o = job.check(&[
                ("NCCL_SOCKET_IFNAME", Some("eth1")),
                ("GLOO_SOCKET_IFNAME", Some("eth1")),
                ("POD_IP", Some("10.0.1.2")),
            ]);
            let w = o.warning("inherited-ifname-repaired");
            assert!(
                w.contains(version) && words(w).contains(&"eth0") && w.contains("no carrier"),
                "{w}"
            );
            job.strict_refuses();
        } else {
            assert_eq!(model["bootstrap"]["ifname"], "eth1", "{model}");
            let o = job.check(&[
                ("NCCL_SOCKET_IFNAME", Some("eth")),
                ("GLOO_SOCKET_IFNAME", Some("eth1")),
                ("POD_IP", Some("10.0.1.2")),
            ]);
            assert!(!o.has_warning("inherited-ifname-repaired"), "{}", o.stderr);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// F16–F21, F26–F29: the peer decides

/// F16, PaddlePaddle/Paddle#47130: node B's `enp3s0` 169.254.94.75/16 (scope link, as link-local
/// autoconfiguration adds it) on a direct cable to the master 169.254.60.61 (the cable's far end), Paddle's
/// launcher naming the master; then with `eno1` holding the default route beside the cable.
#[test]
fn f16_paddle_47130_direct_cable_with_link_local_addresses() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f16");
    layouts::F16.build(&ns);
    for c in [
        &layouts::CASE_F16,
        &layouts::CASE_F16_MASTER,
        &layouts::CASE_F16_KEPT,
    ] {
        run_case(&ns, c);
    }
    // Control: the same 2-node job without the master has no usable interface but lo.
    let mut bare = Job::new(&ns);
    bare.launch(&[
        "python",
        "-m",
        "paddle.distributed.launch",
        "--nnodes=2",
        "t.py",
    ]);
    assert_eq!(bare.exec().code, Some(78));

    let up = Netns::new("f16up");
    layouts::F16_UPLINK.build(&up);
    assert_eq!(default_dev(&up).as_deref(), Some("eno1"));
    for c in [
        &layouts::CASE_F16_UPLINK,
        &layouts::CASE_F16_UPLINK_KEPT,
        &layouts::CASE_F16_UPLINK_NO_PEER,
        &layouts::CASE_F16_UPLINK_REPAIRED,
    ] {
        run_case(&up, c);
    }
}

/// A DNS server on 127.0.0.1:53 inside a namespace, run by a thread of the test: `answer` false reads
/// queries and never answers; true answers each with NXDOMAIN (RCODE 3). Counts the queries it saw.
struct Dns {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    seen: std::sync::Arc<std::sync::atomic::AtomicU32>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Dns {
    fn start(ns: &Netns, answer: bool) -> Dns {
        use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
        use std::sync::Arc;
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(AtomicU32::new(0));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let path = format!("/run/netns/{}", ns.name);
        let (stop2, seen2) = (stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).expect("netns");
            nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            // Stop 31's CI once found the port taken inside this fresh namespace (cause not found): try
            // again for up to 3 s and, if it stays taken, say who holds it (`ss` in the namespace).
            let t0 = std::time::Instant::now();
            let sock = loop {
                match std::net::UdpSocket::bind("127.0.0.1:53") {
                    Ok(s) => break s,
                    Err(_) if t0.elapsed() < std::time::Duration::from_secs(3) => {
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                    Err(e) => {
                        let ss = Command::new("ss").args(["-uapn"]).output();
                        let ss = ss.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
                        panic!("bind 127.0.0.1:53: {e}; ss -uapn in the namespace: {ss:?}");
                    }
                }
            };
            sock.set_read_timeout(Some(std::time::Duration::from_millis(50)))
                .expect("timeout");
            ready_tx.send(()).expect("ready");
            let mut buf = [0u8; 1500];
            while !stop2.load(Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                if n < 12 {
                    continue;
                }
                seen2.fetch_add(1, Ordering::Relaxed);
                if answer {
                    // The query itself as the answer: QR set, RA set, RCODE 3 (NXDOMAIN), no answers.
                    let mut r = buf[..n].to_vec();
                    r[2] |= 0x80;
                    r[3] = 0x83;
                    r[6..10].fill(0);
                    let _ = sock.send_to(&r, from);
                }
            }
        });
        ready_rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("DNS responder did not start");
        Dns {
            stop,
            seen,
            thread: Some(thread),
        }
    }
    fn queries(&self) -> u32 {
        self.seen.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Dns {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// F17: the master's name does not resolve (yet). The job runs in a private mount namespace whose
/// `/etc/resolv.conf` is empty (so the resolver asks 127.0.0.1), with nothing, a silent server or an
/// NXDOMAIN server on 127.0.0.1:53. ncclenv retries until NCCLENV_RESOLVE_TIMEOUT_MS, warns
/// `peer-unresolved` with the time waited, and decides by the default route.
#[test]
fn f17_master_name_does_not_resolve_yet() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f17");
    ns.plug("eth0");
    ns.addr("eth0", "10.244.1.7/24");
    ns.route("default via 10.244.1.1 dev eth0");
    let eth0 = [
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("GLOO_SOCKET_IFNAME", Some("eth0")),
        ("TP_SOCKET_IFNAME", Some("eth0")),
        ("POD_IP", Some("10.244.1.7")),
    ];
    let mut job = f17_job(&ns);
    for (what, dns) in [
        ("no server", None),
        ("a silent server", Some(false)),
        ("an NXDOMAIN server", Some(true)),
    ] {
        f17_waits_then_decides_by_the_default_route(&job, &ns, what, dns, &eth0);
    }

    // The image's broken Gloo value is repaired as usual; strict mode refuses.
    job.set("GLOO_SOCKET_IFNAME", "^lo,docker");
    let o = job.check(&eth0);
    assert!(o.warning("gloo-ifname-repaired").contains("^lo,docker"));
    job.unset("GLOO_SOCKET_IFNAME");
    let s = job.strict_refuses();
    assert!(s.stderr.contains("peer-unresolved"), "{}", s.stderr);
    // A name that resolves (/etc/hosts is read first): no warning.
    job.set("MASTER_ADDR", "localhost");
    let o = job.check(&[("NCCL_SOCKET_IFNAME", Some("eth0"))]);
    assert!(!o.has_warning("peer-unresolved"), "{}", o.stderr);
}

/// F17's resolve timeout (NCCLENV_RESOLVE_TIMEOUT_MS), in milliseconds.
const F17_TIMEOUT_MS: u64 = 1500;

/// F17's job in `ns`: torchrun for two nodes with MASTER_ADDR=job-master-0, NCCLENV_RESOLVE_TIMEOUT_MS set,
/// run in a private mount namespace whose `/etc/resolv.conf` is empty (so the resolver asks 127.0.0.1).
fn f17_job(ns: &Netns) -> Job<'_> {
    let mut job = Job::new(ns);
    let resolv = job.tmp.join("resolv.conf");
    std::fs::write(&resolv, "").expect("empty resolv.conf");
    job.wrap = [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "/bin/sh",
        "-c",
        "mount --bind \"$1\" /etc/resolv.conf && shift && exec \"$@\"",
        "sh",
        &resolv.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    job.set("MASTER_ADDR", "job-master-0")
        .set("NCCLENV_RESOLVE_TIMEOUT_MS", &F17_TIMEOUT_MS.to_string())
        .launch(&["torchrun", "--nnodes=2", "--nproc-per-node=8", "train.py"]);
    job
}

/// One F17 scenario, `what`: `job` (in `ns`) run with nothing (`dns` None), a silent server (`Some(false)`)
/// or an NXDOMAIN server (`Some(true)`) on 127.0.0.1:53. ncclenv sets `eth0` (the variables by the default
/// route), warns `peer-unresolved` with the time waited, which is the timeout and not much more, and doctor
/// reports the name, its source and the resolver's attempts.
fn f17_waits_then_decides_by_the_default_route(
    job: &Job,
    ns: &Netns,
    what: &str,
    dns: Option<bool>,
    eth0: &[(&str, Option<&str>)],
) {
    let server = dns.map(|answer| Dns::start(ns, answer));
    let t0 = std::time::Instant::now();
    let o = job.exec();
    let waited = t0.elapsed().as_millis() as u64;
    assert_eq!((o.code, o.ran), (Some(0), true), "{what}: {o:#?}");
    for &(k, v) in eth0 {
        assert_eq!(o.var(k), v, "{what}: {k}");
    }
    if dns.is_none() {
        // Once, the whole check: `ncclenv env` agrees and the ip -j oracle holds.
        job.check(eth0);
    }
    let w = o.warning("peer-unresolved");
    assert!(
        w.contains("job-master-0") && w.contains("MASTER_ADDR") && w.contains(" ms"),
        "{what}: {w}"
    );
    assert!(!o.has_warning("probe-failed") && !o.has_warning("no-route-decided"));
    // The time waited: at least the timeout, and not much more (the process and namespace start).
    assert!(
        (F17_TIMEOUT_MS..F17_TIMEOUT_MS + 3000).contains(&waited),
        "{what}: the run took {waited} ms"
    );
    let d = job.doctor_json();
    let peer = &d["peer"];
    assert_eq!(peer["host"], "job-master-0", "{what}: {peer}");
    assert_eq!(peer["source"], "MASTER_ADDR");
    assert!(peer["addrs"].as_array().is_some_and(Vec::is_empty));
    let ms = peer["resolve_ms"].as_u64().expect("resolve_ms");
    let attempts = peer["resolve_attempts"].as_u64().expect("attempts");
    assert!(
        (F17_TIMEOUT_MS..F17_TIMEOUT_MS + 1000).contains(&ms),
        "{what}: {peer}"
    );
    match dns {
        // The resolver's call blocks past the deadline: one call, abandoned.
        Some(false) => assert_eq!(attempts, 1, "{what}: {peer}"),
        // Each call fails at once: retried until the deadline.
        _ => assert!(attempts >= 2, "{what}: {peer}"),
    }
    if let Some(s) = &server {
        assert!(
            s.queries() > 0,
            "{what}: the resolver never asked 127.0.0.1:53"
        );
    }
    let (_, text, _) = job.doctor_out(false);
    assert!(text.contains("tried for"), "{what}: {text}");
}

/// F18, aws-samples/aws-do-eks#69: an EFA profile: the bootstrap interface is set, the transport left alone.
#[test]
fn f18_aws_do_eks_69_efa_vendor_profile() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f18");
    layouts::f18(&ns);
    // Control: without the profile ncclenv disables IB (no RDMA device).
    run_case(&ns, &layouts::CASE_F18_NO_PROFILE);
    let (job, o) = run_case(&ns, &layouts::CASE_F18);
    for k in o.env.keys() {
        if k.starts_with("NCCL_IB_") || k.starts_with("NCCL_NET") {
            assert!(job.vars.contains_key(k), "{k} was added: {:?}", o.env);
        }
    }
    // An inherited value that would fail is kept, warned, never repaired; strict refuses (the row says so).
    let (_, o) = run_case(&ns, &layouts::CASE_F18_KEPT);
    assert!(o.warning("vendor-value-kept").contains("eth9"));
}

/// F19: Kubeflow's PyTorchJob: `torchrun train.py` with PET_* variables only.
#[test]
fn f19_kubeflow_pytorchjob_pet_variables() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f19");
    layouts::F19.build(&ns);
    let (job, _) = run_case(&ns, &layouts::CASE_F19);
    let d = job.doctor_json();
    assert_eq!(d["peer"]["source"], "PET_RDZV_ENDPOINT", "{}", d["peer"]);
    assert_eq!(d["peer"]["port"], 29400);
    let j = &d["job"];
    assert_eq!(
        (
            &j["launcher"],
            &j["nnodes"],
            &j["source"],
            &j["node_rank"],
            &j["node_rank_source"],
            &j["master_port"]
        ),
        (
            &Value::from("torchrun"),
            &Value::from(2),
            &Value::from("PET_NNODES"),
            &Value::from(1),
            &Value::from("PET_NODE_RANK"),
            &Value::from(29400)
        ),
        "{j}"
    );
    let (_, text, _) = job.doctor_out(false);
    assert!(text.contains("from PET_RDZV_ENDPOINT (torchrun)"), "{text}");

    // The same with PET_MASTER_ADDR and PET_MASTER_PORT.
    let (job, _) = run_case(&ns, &layouts::CASE_F19_MASTER_ADDR);
    assert_eq!(job.doctor_json()["job"]["master_port"], 23456);
    // A flag wins over its PET_ variable, as in torchrun: the master on eth0's network.
    run_case(&ns, &layouts::CASE_F19_FLAG_WINS);

    // PET_NNODES makes it a 2-node job: with only lo, refused.
    let lo = Netns::new("f19lo");
    let mut job = Job::new(&lo);
    job.set("PET_NNODES", "2").launch(&["torchrun", "train.py"]);
    let o = job.exec();
    assert_eq!(o.code, Some(78), "{o:#?}");
    assert!(o.stderr.contains("PET_NNODES"), "{}", o.stderr);
}

/// F20: proxies matter to HTTP rendezvous only (Paddle's HTTP master), not to torchrun's raw TCP.
#[test]
fn f20_proxies_and_raw_tcp_rendezvous() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f20");
    layouts::F19.build(&ns);
    run_case(&ns, &layouts::CASE_F20_TORCHRUN);
    let (_, o) = run_case(&ns, &layouts::CASE_F20_PADDLE);
    let w = o.warning("proxy-catches-peer");
    assert!(
        w.contains("Paddle's HTTP master") && w.contains("HTTP_PROXY") && w.contains("10.100.0.5"),
        "{w}"
    );
    for c in [
        &layouts::CASE_F20_NO_PROXY,
        &layouts::CASE_F20_LOWER_CASE,
        &layouts::CASE_F20_IPS,
    ] {
        run_case(&ns, c);
    }
}

/// F21: credentials in a rendezvous endpoint appear nowhere.
#[test]
fn f21_credentials_in_a_rendezvous_endpoint() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f21");
    layouts::F19.build(&ns);
    let mut job = Job::new(&ns);
    job.set("NCCLENV_LOG", "debug").launch(&[
        "torchrun",
        "--nnodes=2",
        "--rdzv-endpoint=etcd://root:S3CR3T@10.100.0.5:2379",
        "train.py",
    ]);
    let o = job.check(&[("NCCL_SOCKET_IFNAME", Some("net1"))]);
    assert!(o.stderr.contains("10.100.0.5"), "{}", o.stderr);
    let mut seen = vec![("exec stderr", o.stderr.clone())];
    let (_, out, err) = job.env_raw();
    seen.push(("env stdout", out));
    seen.push(("env stderr", err));
    for json in [false, true] {
        let (_, out, err) = job.doctor_out(json);
        seen.push(("doctor", out));
        seen.push(("doctor stderr", err));
    }
    let d = job.doctor_json();
    assert_eq!(d["peer"]["host"], "10.100.0.5");
    assert_eq!(d["job"]["rendezvous"]["protocol"], "http");
    // The same secret in PET_RDZV_ENDPOINT, and in an endpoint whose port is wrong (a launcher-argument
    // warning quotes the value).
    let mut bad = Job::new(&ns);
    bad.set("NCCLENV_LOG", "debug")
        .set("PET_RDZV_ENDPOINT", "etcd://root:S3CR3T@10.100.0.5:2379")
        .launch(&[
            "torchrun",
            "--nnodes=2",
            "--rdzv-endpoint=etcd://root:S3CR3T@10.100.0.5:99999",
            "train.py",
        ]);
    let o = bad.exec();
    assert!(o.has_warning("launcher-argument"), "{}", o.stderr);
    seen.push(("bad exec stderr", o.stderr.clone()));
    for json in [false, true] {
        let (_, out, err) = bad.doctor_out(json);
        seen.push(("bad doctor", out));
        seen.push(("bad doctor stderr", err));
    }
    for (what, text) in &seen {
        assert!(
            !text.contains("S3CR3T"),
            "{what} shows the password:\n{text}"
        );
    }
}

/// #26 item 4 in a namespace: a manifest pins every companion to `net1`, a Multus network whose IPAM has
/// not delivered (`net1` UP with only the kernel's fe80). In a two-node job each is repaired, by its own
/// library's rule (Gloo's for `GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME` and `HOROVOD_GLOO_IFACE`; Open MPI's
/// and UCX's names), to the interface NCCL gets; on one node the inherited values are kept.
#[test]
fn companions_pinned_to_a_multus_net1_with_only_fe80() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("i26c");
    ns.plug("eth0");
    ns.addr("eth0", "10.244.1.7/24");
    ns.route("default via 10.244.1.1 dev eth0");
    ns.plug("net1");
    ns.wait_link_local("net1");
    let pinned = [
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "TP_SOCKET_IFNAME",
        "HOROVOD_GLOO_IFACE",
        "OMPI_MCA_btl_tcp_if_include",
        "OMPI_MCA_oob_tcp_if_include",
        "UCX_NET_DEVICES",
    ];
    let mut job = Job::new(&ns);
    for var in pinned {
        job.set(var, "net1");
    }
    job.nnodes(2);
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("GLOO_SOCKET_IFNAME", Some("eth0")),
        ("TP_SOCKET_IFNAME", Some("eth0")),
        ("HOROVOD_GLOO_IFACE", Some("eth0")),
        ("OMPI_MCA_btl_tcp_if_include", Some("10.244.1.0/24")),
        ("OMPI_MCA_oob_tcp_if_include", Some("10.244.1.0/24")),
        ("UCX_NET_DEVICES", Some("eth0")),
    ]);
    assert!(
        o.warning("launcher-ifname-repaired").contains("link-local"),
        "{}",
        o.stderr
    );
    // One node: Gloo, Open MPI and UCX on fe80 serve the node itself; the companions are kept.
    let mut one = Job::new(&ns);
    for var in pinned {
        one.set(var, "net1");
    }
    one.nnodes(1);
    let o = one.exec();
    for var in &pinned[1..] {
        assert_eq!(
            o.env.get(*var).map(String::as_str),
            Some("net1"),
            "{var}: {}",
            o.stderr
        );
    }
}

/// F26, horovod/horovod#1341: Horovod's own interface variable, and Open MPI's.
#[test]
fn f26_horovod_1341_horovod_gloo_iface() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f26");
    layouts::F26.build(&ns);
    for c in [&layouts::CASE_F26, &layouts::CASE_F26_LIST] {
        let (_, o) = run_case(&ns, c);
        let bad = c.inherited("HOROVOD_GLOO_IFACE").expect("the row's value");
        assert!(
            o.warning("launcher-ifname-repaired").contains(bad),
            "{}",
            o.stderr
        );
    }
    // Unset: horovodrun gets NCCL's interface; another command does not.
    let (mut job, _) = run_case(&ns, &layouts::CASE_F26_UNSET);
    job.launch(&["torchrun", "train.py"]);
    job.check(&[("HOROVOD_GLOO_IFACE", None)]);
    // Open MPI: a missing name is repaired, a CIDR covering em2 is kept; mpirun gets both when unset. A job
    // that may span nodes gets em1's network as a CIDR (another node's NIC may have another name, #21), a
    // single-node one the name.
    let (_, o) = run_case(&ns, &layouts::CASE_F26_MPI);
    assert!(o.warning("launcher-ifname-repaired").contains("eth9"));
    assert!(o.warning("companion-differs").contains("10.5.2.0/24"));
    run_case(&ns, &layouts::CASE_F26_MPI_UNSET);
    run_case(&ns, &layouts::CASE_F26_MPI_ONE_NODE);
}

/// F27, THUDM/slime#2151: SGLang's `--dist-init-addr [fd00:20::11]:5000` on an IPv6-only secondary network.
#[test]
fn f27_slime_2151_sglang_ipv6_init_address() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f27");
    layouts::f27(&ns);
    let (job, _) = run_case(&ns, &layouts::CASE_F27);
    let j = &job.doctor_json()["job"];
    assert_eq!(
        (&j["node_rank"], &j["master_port"], &j["launcher"]),
        (&Value::from(1), &Value::from(5000), &Value::from("sglang")),
        "{j}"
    );
}

/// F28, aws/aws-parallelcluster-cookbook#2766: the default route lives in table 300, reached by `ip rule add
/// from all lookup 300`.
#[test]
fn f28_parallelcluster_cookbook_2766_default_route_in_another_table() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f28");
    layouts::f28(&ns);
    assert_eq!(default_dev(&ns), None, "table main has no default route");
    assert_eq!(route_get_dev(&ns, layouts::OFFLINK_PROBE), "ens6");
    let (job, _) = run_case(&ns, &layouts::CASE_F28);
    let d = job.doctor_json();
    let lookups = d["routes"]["lookups"].as_array().expect("lookups");
    assert!(lookups.iter().any(|l| l["table"] == 300), "{lookups:?}");
    // Control: without the rule nothing tells ens5 and ens6 apart.
    ns.ip(&["rule", "del", "pref", "1000"]);
    let o = Job::new(&ns).exec();
    assert!(o.has_warning("no-route-decided"), "{}", o.stderr);
}

/// F29, vllm-project/vllm#15071: vLLM (or Ray) names this node's address; the interface owning it is the
/// choice.
#[test]
fn f29_vllm_15071_vllm_host_ip_names_this_nodes_address() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("f29");
    layouts::F29.build(&ns);
    run_case(&ns, &layouts::CASE_F29);
    let (ray, _) = run_case(&ns, &layouts::CASE_F29_RAY_HEAD);
    assert_eq!(
        ray.doctor_json()["job"]["self_addr_source"],
        "--node-ip-address"
    );
    // A Ray worker whose head is reached through eth1: the route decides, the disagreement is said.
    let (_, o) = run_case(&ns, &layouts::CASE_F29_RAY_WORKER);
    assert!(
        o.warning("advertised-address-differs")
            .contains("--node-ip-address"),
        "{}",
        o.stderr
    );
    // Control: no declared address → the default route.
    run_case(&ns, &layouts::CASE_F29_NO_ADDRESS);
}

/// A bridged container (Docker's default bridge, NAT'd by the host with nftables) in a multi-node job whose
/// master is on another host: `container-bridge-nat`. A loopback POD_IP in a multi-node job: repaired.
#[test]
fn nat_bridge_and_loopback_pod_ip() {
    if !common::require_root() {
        return;
    }
    let ns = Netns::new("nat");
    let far = ns.plug("eth0");
    ns.addr("eth0", "172.17.0.2/16");
    ns.route("default via 172.17.0.1 dev eth0");
    // The "host": docker0 with the container's veth, masquerading what leaves elsewhere.
    ns.peer_ip(&["link", "add", "docker0", "type", "bridge"]);
    ns.peer_ip(&["link", "set", &far, "master", "docker0"]);
    ns.peer_ip(&["addr", "add", "172.17.0.1/16", "dev", "docker0"]);
    ns.peer_ip(&["link", "set", "docker0", "up"]);
    common::run(Command::new("ip").args([
        "netns",
        "exec",
        &ns.peer,
        "nft",
        "add table ip nat; add chain ip nat post { type nat hook postrouting priority 100; }; \
         add rule ip nat post ip saddr 172.17.0.0/16 oifname != \"docker0\" masquerade",
    ]));
    let mut job = Job::new(&ns);
    job.set("MASTER_ADDR", "10.100.0.5").nnodes(2);
    let o = job.check(&[
        ("NCCL_SOCKET_IFNAME", Some("eth0")),
        ("POD_IP", Some("172.17.0.2")),
    ]);
    let w = o.warning("container-bridge-nat");
    assert!(
        w.contains("172.17.0.2") && w.contains("--network=host"),
        "{w}"
    );
    // One node: nobody needs to connect back.
    let mut one = Job::new(&ns);
    one.set("MASTER_ADDR", "10.100.0.5")
        .set("NCCLENV_NNODES", "1");
    assert!(!one.check(&[]).has_warning("container-bridge-nat"));

    // Paddle's POD_IP from `gethostbyname(getfqdn())` under host networking: 127.0.1.1.
    job.set("POD_IP", "127.0.1.1");
    let o = job.check(&[("POD_IP", Some("172.17.0.2"))]);
    assert!(o.warning("pod-ip-repaired").contains("127.0.1.1"));
    job.strict_refuses();
}
