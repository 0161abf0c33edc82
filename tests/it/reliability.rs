//! "Never lose the job" (docs/reliability.md), through the real binary: each input a review found to stop the
//! command or run it wrong, and its neighbours of the same kind.
//!
//! - kernel data: interface names and address labels that are not UTF-8 (real `ip link`/`ip addr … label`
//!   in a namespace), control bytes in names reaching the terminal (refusal line, `env`, `doctor`, logger);
//! - files: `NCCL_CONF_FILE=/dev/zero`, a FIFO (also as `~/.nccl.conf`), FIFOs and devices in sysfs;
//!   CRLF, NUL and long lines in configuration files, judged as NCCL's `setEnvFile` reads them;
//! - the environment: duplicated variables (first wins), entries without `=`, the check given exactly the
//!   command's environment, an environment just under `ARG_MAX` (E2BIG), `NCCLENV_*` names that are not
//!   options;
//! - the check helper: a child holding stdout after a passing result, `setsid` escapees, output floods;
//! - messages: `lo` down, a missing `#!` or ELF interpreter;
//! - panics: the debug build's `NCCLENV_TEST_PANIC=1`.
//!
//! Tests that build namespaces or mounts need root (`common::require_root`: skipped with a reason outside
//! CI, failing under `CI=true`).

use crate::common;

use common::{require_root, Netns, TempDir};
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ncclenv");
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// PATH, an empty sysfs and devfs under `tmp`, `NCCLENV_SHM_MIN=0`: the controlled base of every run.
fn base(tmp: &TempDir) -> Vec<(OsString, OsString)> {
    for d in ["sys", "dev"] {
        std::fs::create_dir_all(tmp.join(d)).expect("mkdir");
    }
    vec![
        ("PATH".into(), PATH.into()),
        ("NCCLENV_SYSFS".into(), tmp.join("sys").into()),
        ("NCCLENV_DEVFS".into(), tmp.join("dev").into()),
        ("NCCLENV_SHM_MIN".into(), "0".into()),
    ]
}

fn var(k: &str, v: &str) -> (OsString, OsString) {
    (k.into(), v.into())
}

/// `ncclenv ARGS…` with exactly `vars` (Rust's `Command` keeps one value per name, sorted).
fn ncclenv<S: AsRef<OsStr>>(vars: &[(OsString, OsString)], args: &[S]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args).env_clear();
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

/// Runs `c` (in `ns` when given), with a deadline: a run that blocks is a failure, not a hung test.
fn run(ns: Option<&Netns>, mut c: Command, secs: u64) -> Output {
    let mut go = move || {
        let mut child = common::exe::spawn(
            c.stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped()),
        )
        .expect("spawn ncclenv");
        let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
        let t_out = std::thread::spawn(move || {
            let mut b = Vec::new();
            if let Some(o) = out.as_mut() {
                let _ = o.read_to_end(&mut b);
            }
            b
        });
        let t_err = std::thread::spawn(move || {
            let mut b = Vec::new();
            if let Some(e) = err.as_mut() {
                let _ = e.read_to_end(&mut b);
            }
            b
        });
        let deadline = Instant::now() + Duration::from_secs(secs);
        let status = loop {
            if let Some(st) = child.try_wait().expect("wait") {
                break st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("ncclenv did not finish within {secs} s");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        Output {
            status,
            stdout: t_out.join().unwrap_or_default(),
            stderr: t_err.join().unwrap_or_default(),
        }
    };
    match ns {
        Some(ns) => ns.in_netns(go),
        None => go(),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn has_code(o: &Output, code: &str) -> bool {
    common::finding_line(&text(&o.stderr), code).is_some()
}

/// NUL-separated records (`/proc/self/environ`, `env -0`).
fn records(b: &[u8]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = b.split(|c| *c == 0).map(<[u8]>::to_vec).collect();
    if v.last().is_some_and(Vec::is_empty) {
        v.pop();
    }
    v
}

/// The value of the first record `NAME=…`.
fn get<'a>(recs: &'a [Vec<u8>], name: &str) -> Option<&'a [u8]> {
    let p = format!("{name}=");
    recs.iter()
        .find(|r| r.starts_with(p.as_bytes()))
        .map(|r| &r[p.len()..])
}

fn write_exe(path: &Path, body: &str) {
    common::exe::write(path, body, 0o755);
}

/// A namespace with `eth0` (RUNNING, 10.77.0.2/24, default route): ncclenv's choice is eth0.
fn eth0_layout(prefix: &str) -> Netns {
    let ns = Netns::new(prefix);
    ns.plug("eth0");
    ns.addr("eth0", "10.77.0.2/24");
    ns.route("default via 10.77.0.1 dev eth0");
    ns
}

/// A plug named with raw bytes (`ip` takes them as they are).
fn plug_raw(ns: &Netns, name: &[u8]) {
    let peer = format!("pr{}", name.len());
    let st = Command::new("ip")
        .arg("-n")
        .arg(&ns.name)
        .args(["link", "add"])
        .arg(OsStr::from_bytes(name))
        .args(["type", "veth", "peer", "name", &peer, "netns", &ns.peer])
        .status()
        .expect("ip link add");
    assert!(st.success(), "ip link add {name:?}");
    ns.peer_ip(&["link", "set", &peer, "up"]);
    let st = Command::new("ip")
        .arg("-n")
        .arg(&ns.name)
        .args(["link", "set"])
        .arg(OsStr::from_bytes(name))
        .arg("up")
        .status()
        .expect("ip link set up");
    assert!(st.success());
}

fn ip_raw(ns: &Netns, args: &[&[u8]]) {
    let st = Command::new("ip")
        .arg("-n")
        .arg(&ns.name)
        .args(args.iter().map(|a| OsStr::from_bytes(a)))
        .status()
        .expect("ip");
    assert!(st.success(), "ip {args:?}");
}

fn doctor_json(ns: Option<&Netns>, vars: &[(OsString, OsString)]) -> serde_json::Value {
    let o = run(ns, ncclenv(vars, &["doctor", "--json"]), 30);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json: {e}: {}\n{}",
            text(&o.stdout),
            text(&o.stderr)
        )
    })
}

// ---------------------------------------------------------------------------------------------------------
// Kernel data and names

#[test]
fn names_and_labels_that_are_not_utf8_never_shrink_the_world() {
    if !require_root() {
        return;
    }
    let tmp = TempDir::new("rel-utf8");
    let mut vars = base(&tmp);
    vars.push(var("NCCLENV_NNODES", "2"));

    // The only NIC is named \xff\xfe: ncclenv must see it (never "only lo", never exit 78), cannot write its
    // name into NCCL_SOCKET_IFNAME, so it fails open.
    let ns = Netns::new("rel-ff");
    plug_raw(&ns, b"\xff\xfe");
    ip_raw(
        &ns,
        &[b"addr", b"add", b"10.78.0.2/24", b"dev", b"\xff\xfe"],
    );
    ip_raw(&ns, &[b"route", b"add", b"default", b"via", b"10.78.0.1"]);
    let o = run(
        Some(&ns),
        ncclenv(&vars, &["--", "/bin/cat", "/proc/self/environ"]),
        30,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(has_code(&o, "probe-failed"), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("\\xff\\xfe"),
        "{}",
        text(&o.stderr)
    );
    let recs = records(&o.stdout);
    assert_eq!(get(&recs, "NCCL_SOCKET_IFNAME"), None, "fail open");
    // doctor (the full link dump) lists it, escaped.
    let d = doctor_json(Some(&ns), &vars);
    let names: Vec<&str> = d["interfaces"]
        .as_array()
        .expect("interfaces")
        .iter()
        .filter_map(|i| i["name"].as_str())
        .collect();
    assert!(names.contains(&"\\xff\\xfe"), "{names:?}");
    // Control: the same layout with a UTF-8 name is chosen and exported.
    let ok = Netns::new("rel-ffok");
    plug_raw(&ok, b"nic0");
    ok.addr("nic0", "10.78.0.2/24");
    ok.route("default via 10.78.0.1");
    let o = run(
        Some(&ok),
        ncclenv(&vars, &["--", "/bin/cat", "/proc/self/environ"]),
        30,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!has_code(&o, "probe-failed"), "{}", text(&o.stderr));
    assert_eq!(
        get(&records(&o.stdout), "NCCL_SOCKET_IFNAME"),
        Some(&b"nic0"[..])
    );

    // eth0's address carries a label that is not UTF-8, and eth0 an alias that is not UTF-8 (both used to
    // make the parser drop the whole message): the address and the link stay, ncclenv chooses eth0.
    let ns = Netns::new("rel-lbl");
    ns.plug("eth0");
    ip_raw(
        &ns,
        &[
            b"addr",
            b"add",
            b"10.77.0.9/24",
            b"dev",
            b"eth0",
            b"label",
            b"eth0\xff",
        ],
    );
    ns.route("default via 10.77.0.1 dev eth0");
    ip_raw(
        &ns,
        &[b"link", b"set", b"eth0", b"alias", b"\xff\xfe alias"],
    );
    let o = run(
        Some(&ns),
        ncclenv(&vars, &["--", "/bin/cat", "/proc/self/environ"]),
        30,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let recs = records(&o.stdout);
    assert_eq!(get(&recs, "NCCL_SOCKET_IFNAME"), Some(&b"eth0"[..]));
    assert_eq!(get(&recs, "POD_IP"), Some(&b"10.77.0.9"[..]));
    let d = doctor_json(Some(&ns), &vars);
    let eth0 = d["interfaces"]
        .as_array()
        .expect("interfaces")
        .iter()
        .find(|i| i["name"] == "eth0")
        .cloned()
        .unwrap_or_else(|| panic!("doctor lost eth0: {d}"));
    assert!(eth0.to_string().contains("10.77.0.9"), "{eth0}");
}

/// An interface name with ESC, a CSI sequence and `\c` (dash's echo stops at it).
const HOSTILE: &[u8] = b"e\x1b[31m\\cx";

#[test]
fn control_bytes_never_reach_the_terminal() {
    if !require_root() {
        return;
    }
    let tmp = TempDir::new("rel-esc");
    let ns = Netns::new("rel-esc");
    plug_raw(&ns, HOSTILE);
    ip_raw(&ns, &[b"addr", b"add", b"10.79.0.2/24", b"dev", HOSTILE]);
    // A second candidate and no route: ncclenv ranks (the lower index, the hostile name) and warns
    // `no-route-decided` naming it, a strict finding.
    ns.plug("nic1");
    ns.addr("nic1", "10.80.0.2/24");
    let mut vars = base(&tmp);
    // The logger (no route decided: a warning naming the interface), and the exact name to the command.
    let o = run(
        Some(&ns),
        ncclenv(&vars, &["--", "/bin/cat", "/proc/self/environ"]),
        30,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_clean("the log", &o.stderr);
    assert_eq!(
        get(&records(&o.stdout), "NCCL_SOCKET_IFNAME"),
        Some(HOSTILE)
    );
    env_exports_the_exact_name_safely(&ns, &vars, &tmp);
    doctor_escapes_the_name(&ns, &vars);
    vars.push(var("NCCLENV_STRICT", "1"));
    the_refusal_is_escaped_alike_on_both_paths(&ns, &vars);
}

/// `b` (what `what` printed) carries no control byte (but newlines) and names the hostile interface
/// escaped.
fn assert_clean(what: &str, b: &[u8]) {
    let bad: Vec<u8> = b
        .iter()
        .copied()
        .filter(|c| (*c < 0x20 && *c != b'\n') || *c == 0x7f)
        .collect();
    assert!(
        bad.is_empty(),
        "{what} carries control bytes {bad:?}: {}",
        text(b)
    );
    assert!(
        text(b).contains("\\x1b[31m"),
        "{what} does not name the interface escaped: {}",
        text(b)
    );
}

/// env (in `ns`, with `vars`): the export line is printf-safe and eval (by sh, writing into `tmp`) gives the
/// exact name.
fn env_exports_the_exact_name_safely(ns: &Netns, vars: &[(OsString, OsString)], tmp: &TempDir) {
    let o = run(Some(ns), ncclenv(vars, &["env"]), 30);
    let lines = text(&o.stdout);
    assert!(
        !o.stdout.iter().any(|c| *c < 0x20 && *c != b'\n'),
        "{lines}"
    );
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(format!(
            "{lines}\nprintf '%s' \"$NCCL_SOCKET_IFNAME\" > {}",
            tmp.join("got").display()
        ))
        .env_clear()
        .env("PATH", PATH);
    let st = sh.status().expect("sh");
    assert!(st.success());
    assert_eq!(std::fs::read(tmp.join("got")).expect("got"), HOSTILE);
}

/// doctor's text (in `ns`, with `vars`) is clean; doctor --json has no raw control byte either, and the name
/// itself inside.
fn doctor_escapes_the_name(ns: &Netns, vars: &[(OsString, OsString)]) {
    let o = run(Some(ns), ncclenv(vars, &["doctor"]), 30);
    assert_clean("doctor", &o.stdout);
    // doctor --json: no raw control byte either, and the name itself inside.
    let o = run(Some(ns), ncclenv(vars, &["doctor", "--json"]), 30);
    assert!(!o
        .stdout
        .iter()
        .any(|c| (*c < 0x20 && *c != b'\n') || *c == 0x7f));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(v.to_string().contains("\\u001b[31m"), "{v}");
}

/// The refusal line (`vars` strict: no route decided, in `ns`), on stderr and as env's printf line evaluated
/// by dash: the same line once, on stderr, escaped; env's script only stops the shell.
fn the_refusal_is_escaped_alike_on_both_paths(ns: &Netns, vars: &[(OsString, OsString)]) {
    let o = run(Some(ns), ncclenv(vars, &["--", "true"]), 30);
    assert_eq!(o.status.code(), Some(78), "{}", text(&o.stderr));
    assert_clean("the refusal", &o.stderr);
    let refusal = text(&o.stderr)
        .lines()
        .find(|l| l.starts_with("ncclenv: refused"))
        .expect("refusal line")
        .to_string();
    // env: the same line once, on stderr, escaped; the script only stops the shell.
    let o = run(Some(ns), ncclenv(vars, &["env"]), 30);
    assert_eq!(o.status.code(), Some(78));
    assert_eq!(text(&o.stdout), "exit 78\n");
    assert_clean("env's refusal", &o.stderr);
    let err = text(&o.stderr);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("ncclenv: refused"))
        .collect();
    assert_eq!(
        lines,
        vec![refusal.as_str()],
        "env says the refusal as the entrypoint does"
    );
}

// ---------------------------------------------------------------------------------------------------------
// Files

#[test]
fn files_that_never_end_or_never_open_fail_open() {
    let tmp = TempDir::new("rel-files");
    conf_files_that_are_not_regular_or_too_large_fail_open(&tmp);
    odd_sysfs_files_fail_open(&tmp);
    a_home_conf_that_is_a_fifo_fails_open(&tmp);
}

/// NCCL_CONF_FILE as /dev/zero, a FIFO (made in `tmp`) and a directory: the job runs, `probe-failed` says
/// "not a regular file" and the inherited value passes untouched; a regular file larger than the bound is
/// not read either.
fn conf_files_that_are_not_regular_or_too_large_fail_open(tmp: &TempDir) {
    let fifo = tmp.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    for conf in [Path::new("/dev/zero"), fifo.as_path(), Path::new("/")] {
        let mut vars = base(tmp);
        vars.push(("NCCL_CONF_FILE".into(), conf.as_os_str().to_os_string()));
        vars.push(var("NCCL_SOCKET_IFNAME", "ncclenv-none0"));
        let o = run(
            None,
            ncclenv(&vars, &["--", "/bin/cat", "/proc/self/environ"]),
            20,
        );
        assert_eq!(o.status.code(), Some(0), "{conf:?}: {}", text(&o.stderr));
        assert!(
            has_code(&o, "probe-failed"),
            "{conf:?}: {}",
            text(&o.stderr)
        );
        assert!(
            text(&o.stderr).contains("not a regular file"),
            "{}",
            text(&o.stderr)
        );
        // Fail open: the inherited value passes untouched.
        assert_eq!(
            get(&records(&o.stdout), "NCCL_SOCKET_IFNAME"),
            Some(&b"ncclenv-none0"[..])
        );
    }
    // A regular file larger than the bound.
    let big = tmp.join("big.conf");
    std::fs::write(&big, vec![b'#'; (1 << 20) + 1]).expect("write");
    let mut vars = base(tmp);
    vars.push(("NCCL_CONF_FILE".into(), big.into()));
    let o = run(None, ncclenv(&vars, &["--", "true"]), 20);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        text(&o.stderr).contains("larger than"),
        "{}",
        text(&o.stderr)
    );
}

/// sysfs (under `tmp`): an RDMA port whose attributes are a FIFO and /dev/zero, and a link speed that is a
/// FIFO: the job runs and doctor names both kinds; without the odd files, no RDMA error.
fn odd_sysfs_files_fail_open(tmp: &TempDir) {
    let port = tmp.join("sys/class/infiniband/mlx5_0/ports/1");
    std::fs::create_dir_all(&port).expect("mkdir");
    nix::unistd::mkfifo(
        &port.join("state"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .expect("mkfifo");
    std::os::unix::fs::symlink("/dev/zero", port.join("rate")).expect("symlink");
    std::fs::write(port.join("link_layer"), "Ethernet\n").expect("write");
    let lo_speed = tmp.join("sys/class/net/lo");
    std::fs::create_dir_all(&lo_speed).expect("mkdir");
    nix::unistd::mkfifo(
        &lo_speed.join("speed"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .expect("mkfifo");
    let vars = base(tmp);
    let o = run(None, ncclenv(&vars, &["--", "true"]), 20);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = run(None, ncclenv(&vars, &["doctor", "--json"]), 20);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("doctor json");
    let err = v["rdma"]["error"].as_str().unwrap_or_default().to_string();
    assert!(
        err.contains("a FIFO") && err.contains("a character device"),
        "{v}"
    );
    // Control: without the odd files no RDMA error.
    std::fs::remove_dir_all(tmp.join("sys/class")).expect("rm");
    let v = doctor_json(None, &vars);
    assert!(v["rdma"]["error"].is_null(), "{v}");
}

/// ~/.nccl.conf as a FIFO, in a private mount namespace with a tmpfs over the home directory (as root;
/// skipped otherwise): the job runs and `probe-failed` names the file.
fn a_home_conf_that_is_a_fifo_fails_open(tmp: &TempDir) {
    if !require_root() {
        return;
    }
    let home = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.dir)
        .unwrap_or_else(|| PathBuf::from("/root"));
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs none \"$1\" && mkfifo \"$1/.nccl.conf\" && shift && exec \"$@\"")
        .arg("sh")
        .arg(&home)
        .arg(BIN)
        .args(["--", "/bin/cat", "/proc/self/environ"])
        .env_clear();
    for (k, v) in base(tmp) {
        c.env(k, v);
    }
    let o = run(None, c, 20);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(".nccl.conf"),
        "{}",
        text(&o.stderr)
    );
    assert!(has_code(&o, "probe-failed"), "{}", text(&o.stderr));
}

#[test]
fn config_lines_are_judged_as_nccl_reads_them() {
    if !require_root() {
        return;
    }
    let tmp = TempDir::new("rel-conf");
    let ns = eth0_layout("rel-conf");
    let judge = |conf: &[u8]| -> Output {
        let f = tmp.join("nccl.conf");
        std::fs::write(&f, conf).expect("write");
        let mut vars = base(&tmp);
        vars.push(("NCCL_CONF_FILE".into(), f.into()));
        run(
            Some(&ns),
            ncclenv(&vars, &["--", "/bin/cat", "/proc/self/environ"]),
            30,
        )
    };
    // CRLF: NCCL looks for an interface named "eth0\r" and finds none: ncclenv repairs in the environment
    // (which wins over the file).
    let o = judge(b"NCCL_SOCKET_IFNAME=eth0\r\n");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        has_code(&o, "inherited-ifname-repaired"),
        "{}",
        text(&o.stderr)
    );
    assert!(text(&o.stderr).contains("eth0\\r"), "{}", text(&o.stderr));
    assert_eq!(
        get(&records(&o.stdout), "NCCL_SOCKET_IFNAME"),
        Some(&b"eth0"[..])
    );
    // LF: the same value is kept.
    let o = judge(b"NCCL_SOCKET_IFNAME=eth0\n");
    assert!(
        !has_code(&o, "inherited-ifname-repaired"),
        "{}",
        text(&o.stderr)
    );
    // A NUL ends NCCL's C string: "eth0\0junk" is eth0, kept; a NUL before '=' skips the line.
    let o = judge(b"NCCL_SOCKET_IFNAME=eth0\0junk\n");
    assert!(
        !has_code(&o, "inherited-ifname-repaired"),
        "{}",
        text(&o.stderr)
    );
    let o = judge(b"NCCL_SOCKET\0_IFNAME=bogus\n");
    assert!(
        !has_code(&o, "inherited-ifname-repaired"),
        "{}",
        text(&o.stderr)
    );
    // NCCL keeps 1023 bytes of a value: a valid name pushed past them by a long first entry is cut off.
    let mut long = b"NCCL_SOCKET_IFNAME=".to_vec();
    long.extend(std::iter::repeat_n(b'x', 1022));
    long.extend(b",eth0\n");
    let o = judge(&long);
    assert!(
        has_code(&o, "inherited-ifname-repaired"),
        "{}",
        text(&o.stderr)
    );
    // The first line of a name wins (setenv(…, 0)).
    let o = judge(b"NCCL_SOCKET_IFNAME=eth0\nNCCL_SOCKET_IFNAME=bogus\n");
    assert!(
        !has_code(&o, "inherited-ifname-repaired"),
        "{}",
        text(&o.stderr)
    );
}

/// Every installed `nvidia-nccl-cu12` wheel's libnccl (scripts/install-nccl-wheels.sh); under `CI=true` none
/// is a failure.
fn nccl_libs() -> Vec<PathBuf> {
    common::needs::nccl_wheels()
        .unwrap_or_default()
        .into_iter()
        .map(|w| w.lib)
        .collect()
}

/// The CRLF case with the real NCCL: `~/.nccl.conf` (read by 2.21.5 and 2.27.7 alike) says
/// `NCCL_SOCKET_IFNAME=eth0\r\n`. NCCL alone fails ("no socket interface found") before 2.30 (2.30.7 strips
/// the carriage return); through ncclenv, which
/// judges `eth0\r` and repairs it in the environment, the bootstrap check passes.
#[test]
fn a_crlf_config_file_fails_the_real_nccl_and_ncclenv_repairs_it() {
    if !require_root() {
        return;
    }
    let helper = env!("CARGO_BIN_EXE_ncclenv-check");
    let home = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.dir)
        .unwrap_or_else(|| PathBuf::from("/root"));
    for lib in nccl_libs() {
        let ns = eth0_layout("rel-crlf");
        let with_conf = |prog: &str, args: &[&str]| -> Output {
            let mut c = ns.command("unshare");
            c.args(["--mount", "--propagation", "private", "sh", "-c"])
                .arg(
                    "mount -t tmpfs none \"$1\" && printf 'NCCL_SOCKET_IFNAME=eth0\\r\\n' > \"$1/.nccl.conf\" \
                     && shift && exec \"$@\"",
                )
                .arg("sh")
                .arg(&home)
                .arg(prog)
                .args(args)
                .env_clear()
                .env("PATH", PATH)
                .env("NCCLENV_NCCL_LIB", &lib)
                .env("NCCLENV_SHM_MIN", "0");
            run(None, c, 60)
        };
        let alone = with_conf(helper, &["bootstrap"]);
        let out = text(&alone.stdout).to_ascii_lowercase();
        // NCCL 2.30 strips the carriage return itself (measured with the 2.30.7 wheel, #26): alone it
        // works there; before 2.30 it fails.
        let v2_30 = lib.to_string_lossy().contains("nccl-2.3");
        assert_eq!(
            out.contains("no socket interface found"),
            !v2_30,
            "{lib:?}: NCCL alone on eth0\\r: {out}\n{}",
            text(&alone.stderr)
        );
        let o = with_conf(BIN, &["check", "bootstrap", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{lib:?}: {e}: {}\n{}", text(&o.stdout), text(&o.stderr)));
        assert_eq!(v["passed"], true, "{lib:?}: {v}\n{}", text(&o.stderr));
        assert!(v.to_string().contains("10.77.0.2"), "{v}");
    }
}

// ---------------------------------------------------------------------------------------------------------
// The environment

/// Runs `argv` with exactly the environment entries `envp` (duplicates and entries without `=` too), from
/// the calling thread (so inside `ns` when called from `Netns::in_netns`), with a deadline of 30 s.
fn spawn_raw(argv: &[&[u8]], envp: &[&[u8]]) -> Output {
    use nix::spawn::{posix_spawn, PosixSpawnAttr, PosixSpawnFileActions};
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    let cs = |b: &[u8]| CString::new(b).expect("no NUL");
    let argv: Vec<CString> = argv.iter().map(|a| cs(a)).collect();
    let envp: Vec<CString> = envp.iter().map(|e| cs(e)).collect();
    // Close-on-exec (dup2 onto 1 and 2 clears it there): a child another test starts meanwhile must not
    // hold a write end, or the readers below wait for that child (all tests share one process).
    let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
    let (out_r, out_w) = nix::unistd::pipe2(cloexec).expect("pipe");
    let (err_r, err_w) = nix::unistd::pipe2(cloexec).expect("pipe");
    let mut fa = PosixSpawnFileActions::init().expect("fa");
    fa.add_dup2(out_w.as_raw_fd(), 1).expect("dup2");
    fa.add_dup2(err_w.as_raw_fd(), 2).expect("dup2");
    let attr = PosixSpawnAttr::init().expect("attr");
    let pid = posix_spawn(argv[0].as_c_str(), &fa, &attr, &argv, &envp).expect("posix_spawn");
    drop((out_w, err_w));
    let reader = |fd: std::os::fd::OwnedFd| {
        std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = std::fs::File::from(fd).read_to_end(&mut b);
            b
        })
    };
    let (to, te) = (reader(out_r), reader(err_r));
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        match nix::sys::wait::waitpid(pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
            Ok(nix::sys::wait::WaitStatus::Exited(_, c)) => break c,
            Ok(nix::sys::wait::WaitStatus::Signaled(_, s, _)) => break 128 + s as i32,
            _ if Instant::now() > deadline => {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                panic!("no exit within 30 s");
            }
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    use std::os::unix::process::ExitStatusExt;
    Output {
        status: std::process::ExitStatus::from_raw(status << 8),
        stdout: to.join().unwrap_or_default(),
        stderr: te.join().unwrap_or_default(),
    }
}

#[test]
fn duplicated_and_odd_entries_are_judged_as_getenv_and_pass_byte_for_byte() {
    if !require_root() {
        return;
    }
    let tmp = TempDir::new("rel-dup");
    let ns = eth0_layout("rel-dup");
    let dump = tmp.join("helper-env");
    let helper = tmp.join("helper.sh");
    write_exe(
        &helper,
        "#!/bin/sh\ncat /proc/$$/environ > \"$DUMP\"\necho '{\"ev\":\"result\",\"mode\":\"bootstrap\",\"ok\":true}'\n",
    );
    let owned: Vec<Vec<u8>> = base(&tmp)
        .into_iter()
        .map(|(k, v)| [k.into_vec(), b"=".to_vec(), v.into_vec()].concat())
        .chain([
            [b"DUMP=".to_vec(), dump.as_os_str().as_bytes().to_vec()].concat(),
            [
                b"NCCLENV_CHECK_HELPER=".to_vec(),
                helper.as_os_str().as_bytes().to_vec(),
            ]
            .concat(),
            b"NCCLENV_CHECK=bootstrap".to_vec(),
        ])
        .collect();
    let cat: [&[u8]; 4] = [BIN.as_bytes(), b"--", b"/bin/cat", b"/proc/self/environ"];

    // `bogus` first: getenv (and NCCL) read bogus, so ncclenv repairs it; the entry without '=', the
    // duplicated X and the bytes that are not UTF-8 pass as they are, where they are.
    let mut envp: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
    envp.extend([
        &b"JUSTANAME"[..],
        b"NCCL_SOCKET_IFNAME=bogus",
        b"X=1",
        b"NCCL_SOCKET_IFNAME=eth0",
        b"X=2",
        b"ODD=\xff\xfe",
    ]);
    let o = ns.in_netns(|| spawn_raw(&cat, &envp));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        has_code(&o, "inherited-ifname-repaired"),
        "{}",
        text(&o.stderr)
    );
    let got = records(&o.stdout);
    let tail: Vec<&[u8]> = got
        .iter()
        .map(Vec::as_slice)
        .skip_while(|r| *r != b"JUSTANAME")
        .take(5)
        .collect();
    assert_eq!(
        tail,
        vec![
            &b"JUSTANAME"[..],
            b"NCCL_SOCKET_IFNAME=eth0",
            b"X=1",
            b"X=2",
            b"ODD=\xff\xfe"
        ],
        "{got:?}"
    );
    // The check ran with exactly the command's environment.
    let helper_env = records(&std::fs::read(&dump).expect("helper dump"));
    assert_eq!(helper_env, got, "the check's environment is the command's");

    // eth0 first: getenv reads eth0, which works: nothing to repair, both entries stay.
    let mut envp: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
    envp.extend([&b"NCCL_SOCKET_IFNAME=eth0"[..], b"NCCL_SOCKET_IFNAME=bogus"]);
    let o = ns.in_netns(|| spawn_raw(&cat, &envp));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        !has_code(&o, "inherited-ifname-repaired"),
        "{}",
        text(&o.stderr)
    );
    let got = records(&o.stdout);
    let ifn: Vec<&Vec<u8>> = got
        .iter()
        .filter(|r| r.starts_with(b"NCCL_SOCKET_IFNAME="))
        .collect();
    assert_eq!(
        ifn,
        vec![
            &b"NCCL_SOCKET_IFNAME=eth0".to_vec(),
            &b"NCCL_SOCKET_IFNAME=bogus".to_vec()
        ]
    );
}

#[test]
fn an_environment_just_under_arg_max_still_runs_the_command() {
    if !require_root() {
        return;
    }
    let tmp = TempDir::new("rel-e2big");
    let ns = eth0_layout("rel-e2big");
    // With a 1 MiB stack limit the kernel allows 256 KiB of arguments and environment (fs/exec.c: a
    // quarter of RLIMIT_STACK, at least 128 KiB).
    let env_for = |pad: usize, disable: &str| -> Vec<(OsString, OsString)> {
        let mut v = base(&tmp);
        v.push(var("NCCLENV_DISABLE", disable));
        let mut left = pad;
        let mut i = 0;
        while left > 0 {
            let n = left.min(32 << 10);
            v.push((format!("PAD{i:02}").into(), "x".repeat(n).into()));
            left -= n;
            i += 1;
        }
        v
    };
    let go = |pad: usize, disable: &str| -> Option<Output> {
        let mut c = ncclenv(&env_for(pad, disable), &["--", "/usr/bin/env", "-0"]);
        // SAFETY: setrlimit is async-signal-safe.
        unsafe {
            c.pre_exec(|| {
                nix::sys::resource::setrlimit(
                    nix::sys::resource::Resource::RLIMIT_STACK,
                    1 << 20,
                    nix::sys::resource::RLIM_INFINITY,
                )
                .map_err(std::io::Error::from)
            });
        }
        ns.in_netns(|| c.output().ok())
    };
    // The largest padding with which ncclenv itself starts and (disabled, adding nothing) runs the command.
    let (mut lo, mut hi) = (0usize, 300 << 10);
    assert!(go(lo, "1").is_some_and(|o| o.status.success()));
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if go(mid, "1").is_some_and(|o| o.status.success()) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    // Some room: what ncclenv adds, in a run that fits.
    let room = go(lo - 4096, "0").expect("run");
    assert!(room.status.success(), "{}", text(&room.stderr));
    let added: usize = records(&room.stdout)
        .iter()
        .filter(|r| {
            common::OURS
                .iter()
                .any(|o| r.starts_with(format!("{o}=").as_bytes()))
        })
        .map(|r| r.len() + 1 + 8)
        .sum();
    // ncclenv's own argv is longer than the command's by its path and "--" (and their pointers): what it
    // adds must be more than that for the limit to bite.
    let slack = BIN.len() + 1 + 3 + 16;
    assert!(
        added > slack,
        "ncclenv adds {added} bytes, not more than the {slack} it frees: the test cannot reach E2BIG"
    );
    let o = go(lo, "0").expect("ncclenv starts at the limit");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(has_code(&o, "exec-e2big"), "{}", text(&o.stderr));
    let line = text(&o.stderr)
        .lines()
        .find(|l| l.contains("[exec-e2big]"))
        .map(str::to_string)
        .unwrap_or_default();
    assert!(!line.contains("  "), "doubled spaces: {line}");
    let mut got: Vec<Vec<u8>> = records(&o.stdout);
    let mut want: Vec<Vec<u8>> = env_for(lo, "0")
        .into_iter()
        .map(|(k, v)| [k.into_vec(), b"=".to_vec(), v.into_vec()].concat())
        .collect();
    got.sort();
    want.sort();
    assert!(got == want, "the inherited environment, untouched");
    assert!(!has_code(&room, "exec-e2big"));
}

/// `NCCLENV_DISABLE=1` asks ncclenv to change nothing: a malformed `NCCLENV_*` value beside it is a warning
/// and the command runs with the environment untouched. Control: without it the same value is a usage
/// error (exit 2), and a switch's error lists every word it takes.
#[test]
fn a_malformed_variable_beside_disable_never_stops_the_job() {
    let tmp = TempDir::new("rel-disable");
    let mut vars = base(&tmp);
    vars.push(var("NCCLENV_CHECK_TIMEOUT", "abc"));
    vars.push(var("NCCL_SOCKET_IFNAME", "kept-as-is"));
    let mut off = vars.clone();
    off.push(var("NCCLENV_DISABLE", "yes"));
    let o = run(
        None,
        ncclenv(&off, &["--", "sh", "-c", "echo ran:$NCCL_SOCKET_IFNAME"]),
        20,
    );
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert_eq!(text(&o.stdout).trim(), "ran:kept-as-is", "{e}");
    assert!(
        e.contains("NCCLENV_CHECK_TIMEOUT")
            && e.contains("NCCLENV_DISABLE=yes")
            && e.contains("warning"),
        "{e}"
    );
    let o = run(None, ncclenv(&vars, &["--", "sh", "-c", "echo ran"]), 20);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stdout).is_empty());
    // `eval "$(ncclenv env)"` stops on a usage error as on a refusal: stdout is `exit 2`.
    let o = run(None, ncclenv(&vars, &["env"]), 20);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "exit 2\n");
    vars.push(var("NCCLENV_STRICT", "maybe"));
    vars.retain(|(k, _)| k != "NCCLENV_CHECK_TIMEOUT");
    let o = run(None, ncclenv(&vars, &["--", "true"]), 20);
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("1, true, yes, on or 0, false, no, off, empty"),
        "{e}"
    );
}

#[test]
fn ncclenv_names_that_are_not_options_warn_and_never_stop_the_job() {
    let tmp = TempDir::new("rel-names");
    let mut vars = base(&tmp);
    vars.push(("NCCLENV_FOO".into(), OsString::from_vec(vec![0xff, 0xfe])));
    vars.push(var("NCCLENV_Peer", "10.1.2.3"));
    vars.push(var("NCCLENV_CHECK_TIMEOUTS", "5"));
    vars.push(var("NCCLENV_log", "bogus"));
    vars.push(var("NCCLENV_LOG_LEVEL", "verbose"));
    // The default level: one line each, at most 200 characters, the name meant kept on it.
    let mut info = vars.clone();
    info.push(var("NCCLENV_LOG", "info"));
    let o = run(None, ncclenv(&info, &["--", "true"]), 20);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let e = text(&o.stderr);
    let unknown: Vec<&str> = e
        .lines()
        .filter(|l| l.contains("[unknown-variable]"))
        .collect();
    assert_eq!(unknown.len(), 5, "{e}");
    for l in &unknown {
        assert!(l.chars().count() <= 200, "{l}");
    }
    for near in ["NCCLENV_PEER", "NCCLENV_CHECK_TIMEOUT?", "NCCLENV_LOG?"] {
        assert!(e.contains(near), "{near}: {e}");
    }
    // The whole text (the remedy too) at the debug level.
    vars.push(var("NCCLENV_LOG", "debug"));
    let o = run(None, ncclenv(&vars, &["--", "true"]), 20);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let e = text(&o.stderr);
    let unknown: Vec<&str> = e
        .lines()
        .filter(|l| l.contains("[unknown-variable]"))
        .collect();
    assert_eq!(unknown.len(), 5, "{e}");
    // NCCLENV_LOG_LEVEL: the variable meant, and the values it takes.
    assert!(
        unknown.iter().any(|l| l.contains("NCCLENV_LOG_LEVEL ")
            && l.contains("rename it to NCCLENV_LOG (values: off, error, warn, info or debug)")),
        "{e}"
    );
    for (name, near) in [
        ("NCCLENV_FOO", None),
        ("NCCLENV_Peer", Some("NCCLENV_PEER")),
        ("NCCLENV_CHECK_TIMEOUTS", Some("NCCLENV_CHECK_TIMEOUT")),
        ("NCCLENV_log", Some("NCCLENV_LOG")),
    ] {
        let l = unknown
            .iter()
            .find(|l| l.contains(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no warning for {name}: {e}"));
        if let Some(n) = near {
            assert!(l.contains(n), "{l}");
        }
    }
    // NCCLENV_Peer is not the peer.
    let d = doctor_json(None, &vars);
    assert!(d["peer"].is_null(), "{}", d["peer"]);
    // Control: only known names, no finding.
    let o = run(None, ncclenv(&base(&tmp), &["--", "true"]), 20);
    assert!(!has_code(&o, "unknown-variable"), "{}", text(&o.stderr));
    // With NCCLENV_DISABLE=1 too.
    vars.push(var("NCCLENV_DISABLE", "1"));
    let o = run(None, ncclenv(&vars, &["--", "true"]), 20);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        text(&o.stderr).contains("NCCLENV_Peer"),
        "{}",
        text(&o.stderr)
    );
}

// ---------------------------------------------------------------------------------------------------------
// The check helper

/// `ncclenv check bootstrap --json` with `helper` as the check helper and `secs` as its deadline, in the
/// test's own namespace. Returns the output, the parsed JSON, and the peak RSS of ncclenv in KiB. The child
/// is reaped with `wait4` (for its rusage), not `Child::wait`.
#[allow(clippy::zombie_processes)]
fn check_with(
    tmp: &TempDir,
    helper: &Path,
    secs: u32,
    extra: &[(&str, &str)],
) -> (Output, serde_json::Value, i64) {
    let mut vars = base(tmp);
    vars.push(("NCCLENV_CHECK_HELPER".into(), helper.into()));
    vars.push(var("NCCLENV_CHECK_TIMEOUT", &secs.to_string()));
    for (k, v) in extra {
        vars.push(var(k, v));
    }
    // The peak RSS comes from a small parent: ru_maxrss of a child spawned by this test process starts at
    // this process's own peak (the kernel keeps the old mm's high-water mark across execve, and a vfork'd
    // child's old mm is ours), which in the whole suite is over 200 MiB. Python forks ncclenv, reaps it with
    // wait4 and writes its ru_maxrss (KiB) to a file; ncclenv alone stays under 10 MiB here.
    let rss_file = tmp.join("check.maxrss");
    let mut c = Command::new("/usr/bin/python3");
    c.args([
        "-c",
        "import os,sys\npid=os.fork()\nif pid==0:\n    os.execv(sys.argv[2],sys.argv[2:])\n_,st,ru=os.wait4(pid,0)\nopen(sys.argv[1],'w').write(str(ru.ru_maxrss))\nsys.exit(os.waitstatus_to_exitcode(st)%256)",
    ])
    .arg(&rss_file)
    .arg(BIN)
    .args(["check", "bootstrap", "--json"])
    .env_clear();
    for (k, v) in &vars {
        c.env(k, v);
    }
    let mut child = c
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let (mut out, mut err) = (
        child.stdout.take().expect("out"),
        child.stderr.take().expect("err"),
    );
    let to = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let te = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    // wait4 for the peak RSS of exactly this child.
    let mut status: i32 = 0;
    // SAFETY: rusage is plain data written by the kernel.
    let mut ru: nix::libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as i32;
    // SAFETY: waits for our own child; status and rusage are valid pointers.
    let r = unsafe { nix::libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "wait4");
    use std::os::unix::process::ExitStatusExt;
    let o = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: to.join().unwrap_or_default(),
        stderr: te.join().unwrap_or_default(),
    };
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "check --json: {e}: {}\n{}",
            text(&o.stdout),
            text(&o.stderr)
        )
    });
    let rss = std::fs::read_to_string(&rss_file)
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok())
        .unwrap_or_else(|| panic!("no peak RSS from the python parent\n{}", text(&o.stderr)));
    (o, v, rss)
}

fn alive(pid: i32) -> bool {
    // A zombie (reaped by nobody) counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

fn pid_in(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(p) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return p;
        }
        assert!(Instant::now() < deadline, "no pid in {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_passing_helper_whose_child_holds_stdout_is_judged_when_it_exits() {
    let tmp = TempDir::new("rel-hold");
    let pidf = tmp.join("pid");
    let helper = tmp.join("helper.sh");
    write_exe(
        &helper,
        &format!(
            "#!/bin/sh\nsleep 300 &\necho $! > {}\necho '{{\"ev\":\"result\",\"mode\":\"bootstrap\",\"ok\":true}}'\nexit 0\n",
            pidf.display()
        ),
    );
    let t = Instant::now();
    let (o, v, _) = check_with(&tmp, &helper, 60, &[]);
    assert_eq!(o.status.code(), Some(0), "{v}");
    assert_eq!(v["passed"], true, "{v}");
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "judged at the deadline, not at the helper's exit: {:?}",
        t.elapsed()
    );
    assert_eq!(v["processes_left"], false, "{v}");
    assert!(
        !alive(pid_in(&pidf)),
        "the child holding stdout outlived the check"
    );
}

#[test]
fn processes_that_escape_the_helper_with_setsid_do_not_outlive_the_check() {
    let tmp = TempDir::new("rel-setsid");
    let pidf = tmp.join("pid");
    let helper = tmp.join("helper.sh");
    // The escapee starts a child of its own, then the helper exits: both are adopted by ncclenv.
    write_exe(
        &helper,
        &format!(
            "#!/bin/sh\nsetsid sh -c 'sleep 300 & echo $! > {p}; wait' </dev/null >/dev/null 2>&1 &\n\
             while [ ! -s {p} ]; do sleep 0.01; done\n\
             echo '{{\"ev\":\"result\",\"mode\":\"bootstrap\",\"ok\":true}}'\n",
            p = pidf.display()
        ),
    );
    let (o, v, _) = check_with(&tmp, &helper, 60, &[]);
    assert_eq!(o.status.code(), Some(0), "{v}");
    let pid = pid_in(&pidf);
    assert!(
        !alive(pid),
        "the setsid escapee's child {pid} outlived `ncclenv check`"
    );
    assert_eq!(v["processes_left"], false, "{v}");

    // As the entrypoint: the command must not inherit it either.
    std::fs::remove_file(&pidf).expect("rm");
    let mut vars = base(&tmp);
    vars.push(("NCCLENV_CHECK_HELPER".into(), helper.clone().into()));
    vars.push(var("NCCLENV_CHECK", "bootstrap"));
    let probe = format!(
        "p=$(cat {}); if [ -e /proc/$p ] && ! grep -q '^[0-9]* ([^)]*) Z' /proc/$p/stat; then echo ALIVE; else echo GONE; fi",
        pidf.display()
    );
    let o = run(None, ncclenv(&vars, &["--", "sh", "-c", &probe]), 60);
    assert_eq!(text(&o.stdout).trim(), "GONE", "{}", text(&o.stderr));
}

#[test]
fn a_flooding_helper_is_bounded_and_the_deadline_holds() {
    let tmp = TempDir::new("rel-flood");
    for (what, body) in [
        ("one endless line", "exec cat /dev/zero".to_string()),
        (
            "endless valid lines",
            "while :; do echo '{\"ev\":\"step\",\"step\":\"load\",\"note\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}'; done".to_string(),
        ),
        (
            "endless long lines",
            // A message with free text (the helper's `nogpu` note), so that each 900 KB line is an event.
            "head -c 900000 /dev/zero | tr '\\0' x > line; while :; do printf '{\"ev\":\"nogpu\",\"note\":\"'; cat line; echo '\"}'; done".to_string(),
        ),
    ] {
        let helper = tmp.join("helper.sh");
        write_exe(&helper, &format!("#!/bin/sh\ncd {}\n{body}\n", tmp.path.display()));
        let t = Instant::now();
        let (o, v, rss_kib) = check_with(&tmp, &helper, 3, &[]);
        let took = t.elapsed();
        assert_eq!(o.status.code(), Some(1), "{what}: {v}");
        assert_eq!(v["passed"], false, "{what}");
        assert!(v["hang"].is_object(), "{what}: judged a hang: {v}");
        assert!(took < Duration::from_secs(12), "{what}: the 3 s deadline took {took:?}");
        assert!(rss_kib < 200 << 10, "{what}: ncclenv grew to {rss_kib} KiB");
        if what == "one endless line" {
            assert!(v["lines_too_long"].as_u64().unwrap_or(0) <= 1, "{v}");
        }
        if what == "endless valid lines" {
            assert!(v["events"].as_array().is_some_and(|e| e.len() <= 4096), "{what}");
        }
        if what == "endless long lines" {
            // Kept as protocol events (within their byte bound), not as stray output.
            assert!(v["events"].as_array().is_some_and(|e| !e.is_empty()), "{what}");
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Messages

#[test]
fn loopback_down_is_said_as_such() {
    if !require_root() {
        return;
    }
    let tmp = TempDir::new("rel-lo");
    let ns = Netns::new("rel-lo");
    ns.ip(&["link", "set", "lo", "down"]);
    let vars = base(&tmp);
    for flush in [false, true] {
        if flush {
            // No address left at all: the start probe finds lo by its index.
            ns.ip(&["addr", "flush", "dev", "lo"]);
        }
        let o = run(Some(&ns), ncclenv(&vars, &["--", "true"]), 20);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert!(has_code(&o, "no-interface"), "{}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("lo itself is down"),
            "{}",
            text(&o.stderr)
        );
        assert!(!text(&o.stderr).contains("not even lo is present"));
        let mut multi = vars.clone();
        multi.push(var("NCCLENV_NNODES", "2"));
        let o = run(Some(&ns), ncclenv(&multi, &["--", "true"]), 20);
        assert_eq!(o.status.code(), Some(78));
        assert!(
            text(&o.stderr).contains("lo itself is down"),
            "{}",
            text(&o.stderr)
        );
    }
    // Control: lo up.
    ns.ip(&["link", "set", "lo", "up"]);
    let o = run(Some(&ns), ncclenv(&vars, &["--", "true"]), 20);
    assert!(has_code(&o, "loopback-only"), "{}", text(&o.stderr));
    assert!(!has_code(&o, "no-interface"), "{}", text(&o.stderr));
}

#[test]
fn a_missing_interpreter_is_named() {
    let tmp = TempDir::new("rel-interp");
    let vars = base(&tmp);
    let script = tmp.join("train.sh");
    write_exe(&script, "#!/nonexistent/python3 -u\nprint(1)\n");
    let o = run(
        None,
        ncclenv(&vars, &[OsStr::new("--"), script.as_os_str()]),
        20,
    );
    assert_eq!(o.status.code(), Some(127), "{}", text(&o.stderr));
    let e = text(&o.stderr);
    assert!(
        e.contains("/nonexistent/python3") && e.contains("#! line"),
        "{e}"
    );
    // Found through PATH.
    let mut path_vars = vars.clone();
    path_vars[0] = (
        "PATH".into(),
        format!("/nonexistent:{}", tmp.path.display()).into(),
    );
    let o = run(None, ncclenv(&path_vars, &["--", "train.sh"]), 20);
    assert_eq!(o.status.code(), Some(127));
    assert!(
        text(&o.stderr).contains("/nonexistent/python3"),
        "{}",
        text(&o.stderr)
    );
    // An ELF binary whose dynamic loader does not exist: a copy of /bin/true with its PT_INTERP changed.
    let mut elf = std::fs::read("/bin/true").expect("/bin/true");
    let at = elf
        .windows(5)
        .position(|w| w == b"/lib6" || w == b"/lib/")
        .filter(|i| *i < 4096)
        .expect("/bin/true is dynamically linked (PT_INTERP)");
    elf[at + 1..at + 4].copy_from_slice(b"XXX");
    let bad = tmp.join("badelf");
    common::exe::write(&bad, &elf, 0o755);
    let o = run(
        None,
        ncclenv(&vars, &[OsStr::new("--"), bad.as_os_str()]),
        20,
    );
    assert_eq!(o.status.code(), Some(127));
    let e = text(&o.stderr);
    assert!(e.contains("ELF interpreter") && e.contains("/XXX"), "{e}");
    // Control: a file that is not there is just not there.
    let o = run(None, ncclenv(&vars, &["--", "/nonexistent/train.sh"]), 20);
    assert_eq!(o.status.code(), Some(127));
    assert!(text(&o.stderr).contains("No such file or directory"));
    let o = run(None, ncclenv(&vars, &["--", "ncclenv-no-such-command"]), 20);
    assert!(text(&o.stderr).contains("command not found"));
}

// ---------------------------------------------------------------------------------------------------------
// Panics

#[test]
fn a_panic_runs_the_command_with_the_environment_it_was_given() {
    let tmp = TempDir::new("rel-panic");
    let mut vars = base(&tmp);
    // Values ncclenv would change.
    vars.push(var("NCCL_SOCKET_IFNAME", "ncclenv-none0"));
    vars.push(var("GLOO_SOCKET_IFNAME", "^lo"));
    vars.push(("ODD".into(), OsString::from_vec(vec![0xff])));
    vars.push(var("NCCLENV_TEST_PANIC", "1"));
    let mut c = Command::new("/usr/bin/env");
    c.env_clear().arg("-i");
    for (k, v) in &vars {
        let mut kv = k.clone();
        kv.push("=");
        kv.push(v);
        c.arg(kv);
    }
    c.arg(BIN).args(["--", "/bin/cat", "/proc/self/environ"]);
    let o = run(None, c, 20);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let want: Vec<Vec<u8>> = vars
        .iter()
        .map(|(k, v)| [k.as_bytes(), b"=", v.as_bytes()].concat())
        .collect();
    assert_eq!(
        records(&o.stdout),
        want,
        "exactly the environment ncclenv got"
    );
    let panics = text(&o.stderr).matches("[panic]").count();
    assert_eq!(panics, 1, "{}", text(&o.stderr));
    // Not the entrypoint: 70, nothing on stdout.
    let o = run(None, ncclenv(&vars, &["env"]), 20);
    assert_eq!(o.status.code(), Some(70));
    assert!(o.stdout.is_empty());
    // Control: without the variable, the values are repaired and no panic.
    vars.pop();
    let o = run(
        None,
        ncclenv(&vars, &["--", "/bin/cat", "/proc/self/environ"]),
        20,
    );
    assert!(!has_code(&o, "panic"));
    assert_ne!(
        get(&records(&o.stdout), "GLOO_SOCKET_IFNAME"),
        Some(&b"^lo"[..])
    );
    // The release build has no such switch: the name is unknown there.
    let release = common::target_dir().join("x86_64-unknown-linux-musl/release/ncclenv");
    if !release.is_file() {
        common::skip(&format!(
            "the release part: {} is missing (cargo build --release --target x86_64-unknown-linux-musl)",
            release.display()
        ));
        return;
    }
    vars.push(var("NCCLENV_TEST_PANIC", "1"));
    let mut c = Command::new(&release);
    c.args(["--", "/bin/cat", "/proc/self/environ"]).env_clear();
    for (k, v) in &vars {
        c.env(k, v);
    }
    let o = run(None, c, 20);
    assert_eq!(o.status.code(), Some(0));
    assert!(!has_code(&o, "panic"), "{}", text(&o.stderr));
    assert!(has_code(&o, "unknown-variable"), "{}", text(&o.stderr));
}

/// Break-it (stop 32): an NCCL config file the job's user may not read (`EACCES`: a home the user cannot
/// read, a root-only `NCCL_CONF_FILE`) is skipped, as NCCL's `setEnvFile` skips a file `fopen` cannot open;
/// it made every start fail open (`probe-failed`, the environment untouched). Run as uid 65534; a FIFO still
/// fails open (NCCL's `fopen` would block on it).
#[test]
fn an_nccl_config_file_the_user_may_not_read_is_skipped_as_nccl_skips_it() {
    if !require_root() {
        return;
    }
    let tmp = TempDir::new("rel-eacces");
    let conf = tmp.join("nccl.conf");
    std::fs::write(&conf, "NCCL_SOCKET_IFNAME=eth0\n").expect("write conf");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
    std::fs::set_permissions(&tmp.path, std::fs::Permissions::from_mode(0o755)).expect("chmod 755");
    for d in ["sys", "dev"] {
        std::fs::create_dir_all(tmp.join(d)).expect("mkdir");
        std::fs::set_permissions(tmp.join(d), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    }
    let mut vars = base(&tmp);
    vars.push(var("NCCL_CONF_FILE", &conf.display().to_string()));
    let mut c = ncclenv(&vars, &["env"]);
    c.uid(65534).gid(65534);
    let o = run(None, c, 30);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!has_code(&o, "probe-failed"), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("export NCCL_SOCKET_FAMILY="),
        "the decision runs: {}\n{}",
        text(&o.stdout),
        text(&o.stderr)
    );
}
