//! `NCCLENV_DEBUG=1` and `ncclenv explain` against the real NCCL: logs written by the pinned `nvidia-nccl-cu12`
//! wheels (2.21.5 and 2.27.7, installed by scripts/install-nccl-wheels.sh; `ncclGetUniqueId` through the
//! `ncclenv-check` helper with `NCCL_DEBUG=INFO`) in network namespaces laid out as field cases (a good bootstrap,
//! `NCCL_SOCKET_IFNAME` matching nothing, IPv6 with a link-local tunnel first, decoy bridges, several "hosts"
//! made with `unshare --uts` so that NCCL logs distinct host names), read back by `ncclenv explain --json`.
//! Lines no machine here can produce (IB, transports: they need GPUs) are unit-tested in `src/explain/tests.rs`,
//! written after NCCL's format strings; here a few are mixed into a combined log of real lines.
//!
//! Needs root, `ip`, `unshare` and the wheels; skips with a message otherwise, except under `CI=true`.

use crate::common;

use common::{require_root, Netns, TempDir};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_ncclenv");
const HELPER: &str = env!("CARGO_BIN_EXE_ncclenv-check");
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// One installed wheel (version, folder, libnccl).
use common::needs::NcclWheel as Wheel;

impl Wheel {
    /// The ≥ 2.24 spelling and subsystem of the bootstrap line.
    fn new_format(&self) -> bool {
        ncclenv::nccl_log::version_code(&self.version)
            .is_some_and(|v| v >= ncclenv::nccl_log::BOOTSTRAP_NO_SPACE_SINCE)
    }
}

/// Every installed wheel, oldest first; `None` (with the reason printed) when the tests cannot run, a panic
/// under `CI=true`.
fn setup() -> Option<Vec<Wheel>> {
    if !require_root() {
        return None;
    }
    let wheels = common::needs::nccl_wheels()?;
    common::needs::program("unshare", &["--version"], "util-linux").then_some(wheels)
}

/// A command run in `ns` (as host `host`, in its own UTS namespace, when given), with exactly `env`.
fn in_ns(ns: &Netns, host: Option<&str>, env: &[(&str, String)], argv: &[&str]) -> Output {
    let mut c = ns.command("unshare");
    c.arg("--uts").arg("sh").arg("-c");
    match host {
        Some(h) => c.arg(format!("hostname {h} && exec \"$0\" \"$@\"")),
        None => c.arg("exec \"$0\" \"$@\""),
    };
    c.args(argv).env_clear().env("PATH", PATH);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run in namespace")
}

/// NCCL's log of one `ncclGetUniqueId` (the helper's bootstrap check) with `NCCL_DEBUG=INFO`, the subsystems
/// that show the bootstrap on every version, and `extra` (which may override them), written by NCCL into a
/// fresh folder under `tmp`. Returns the one file NCCL wrote.
fn nccl_log(
    ns: &Netns,
    w: &Wheel,
    host: Option<&str>,
    extra: &[(&str, &str)],
    tmp: &TempDir,
) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = tmp.join(&format!(
        "log{}",
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut env: Vec<(&str, String)> = vec![
        ("NCCL_DEBUG", "INFO".into()),
        ("NCCL_DEBUG_SUBSYS", "INIT,ENV,NET,BOOTSTRAP".into()),
        (
            "NCCL_DEBUG_FILE",
            dir.join("nccl.%h.%p.log").display().to_string(),
        ),
        ("NCCLENV_NCCL_LIB", w.lib.display().to_string()),
    ];
    for (k, v) in extra {
        env.retain(|(n, _)| n != k);
        env.push((k, v.to_string()));
    }
    let o = in_ns(ns, host, &env, &[HELPER, "bootstrap"]);
    one_file(&dir, &o)
}

/// The only file in `dir` (NCCL's log), with the run's output in the panic message otherwise.
fn one_file(dir: &Path, o: &Output) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read log dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(
        files.len(),
        1,
        "{}: {files:?}\nstdout: {}\nstderr: {}",
        dir.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    files[0].clone()
}

/// `ncclenv explain --json FILES…` (in `ns` when given, so that the node comparison sees that layout), with
/// an empty sysfs/devfs. Returns the exit status and the JSON.
fn explain(ns: Option<&Netns>, tmp: &TempDir, files: &[PathBuf]) -> (i32, Value) {
    for d in ["sys", "dev"] {
        std::fs::create_dir_all(tmp.join(d)).expect("mkdir");
    }
    let mut c = match ns {
        Some(ns) => ns.command(BIN),
        None => Command::new(BIN),
    };
    c.env_clear()
        .env("PATH", PATH)
        .env("NCCLENV_SYSFS", tmp.join("sys"))
        .env("NCCLENV_DEVFS", tmp.join("dev"))
        .args(["explain", "--json"])
        .args(files);
    let o = c.output().expect("run explain");
    let text = String::from_utf8_lossy(&o.stdout);
    let v: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "explain --json is not JSON ({e}): {text}\n{}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.code().unwrap_or(-1), v)
}

fn codes(v: &Value) -> Vec<String> {
    v["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["code"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// F1's layout: `eth0` 172.17.0.2/16 with the default route.
fn f1() -> Netns {
    let ns = Netns::new("xpf1");
    ns.plug("eth0");
    ns.addr("eth0", "172.17.0.2/16");
    ns.route("default via 172.17.0.1 dev eth0");
    ns
}

#[test]
fn a_good_bootstrap_is_read_back_and_agrees_with_ncclenv() {
    let Some(wheels) = setup() else { return };
    let tmp = TempDir::new("xp-good");
    let ns = f1();
    for w in &wheels {
        let f = nccl_log(&ns, w, None, &[], &tmp);
        let log = read(&f);
        let (code, v) = explain(Some(&ns), &tmp, std::slice::from_ref(&f));
        assert_eq!(code, 0, "{} {log}\n{v:#}", w.version);
        let p = &v["processes"][0];
        assert_eq!(p["bootstrap"]["interface"], "eth0", "{log}");
        assert_eq!(p["bootstrap"]["addr"], "172.17.0.2");
        assert_eq!(p["bootstrap"]["family"], "AF_INET");
        assert_eq!(
            p["nccl_version_hint"],
            if w.new_format() {
                "≥ 2.24"
            } else {
                "≤ 2.23"
            },
            "{}",
            w.version
        );
        // The file name is NCCL's %h.%p: the process in the prefix is the file's.
        let name = f.file_name().map(|n| n.to_string_lossy().to_string());
        assert_eq!(
            name,
            Some(format!(
                "nccl.{}.{}.log",
                p["host"].as_str().unwrap_or("?"),
                p["pid"]
            ))
        );
        assert_eq!(v["local"]["agrees"], true, "{v:#}");
        assert!(codes(&v).iter().all(|c| c != "local-choice-differs"));
    }
}

#[test]
fn an_ifname_matching_nothing_is_explained() {
    let Some(wheels) = setup() else { return };
    let tmp = TempDir::new("xp-noif");
    let ns = f1();
    for w in &wheels {
        let f = nccl_log(&ns, w, None, &[("NCCL_SOCKET_IFNAME", "nomatch0")], &tmp);
        let (code, v) = explain(Some(&ns), &tmp, &[f]);
        assert_eq!(code, 1, "{v:#}");
        let p = &v["processes"][0];
        assert_eq!(p["settings"]["NCCL_SOCKET_IFNAME"], "nomatch0", "{v:#}");
        let warn = &p["warnings"][0];
        assert_eq!(warn["known"]["id"], "no-socket-interface", "{v:#}");
        assert!(
            warn["source"]
                .as_str()
                .unwrap_or("")
                .starts_with("bootstrap.cc:"),
            "{warn}"
        );
        let code_want = if w.new_format() { 5 } else { 3 };
        let listed: Vec<i64> = warn["known"]["codes"]
            .as_array()
            .map(|a| a.iter().filter_map(|c| c["code"].as_i64()).collect())
            .unwrap_or_default();
        assert!(listed.contains(&code_want), "{listed:?}");
        // NCCL's error trail ("init.cc:103 -> 3") ends with what ncclGetUniqueId returned.
        assert_eq!(p["returned"]["code"], code_want, "{v:#}");
        assert!(codes(&v).contains(&"nccl-warn".to_string()), "{v:#}");
        assert!(p["bootstrap"].is_null());
    }
}

#[test]
fn ipv6_with_a_link_local_tunnel_first() {
    let Some(wheels) = setup() else { return };
    let tmp = TempDir::new("xp-v6");
    // F9: the tunnel has the lower index and only an fe80 address.
    let ns = Netns::new("xpf9");
    ns.vxlan("ip6tnl0");
    ns.wait_link_local("ip6tnl0");
    ns.plug("veth0");
    ns.addr("veth0", "fd00:10::5/64");
    ns.route("-6 default via fe80::1 dev veth0");
    for w in &wheels {
        // NCCL alone, asked for IPv6, takes the tunnel's link-local address.
        let f = nccl_log(&ns, w, None, &[("NCCL_SOCKET_FAMILY", "AF_INET6")], &tmp);
        let (code, v) = explain(Some(&ns), &tmp, &[f]);
        assert_eq!(code, 1, "{v:#}");
        let p = &v["processes"][0];
        assert_eq!(p["bootstrap"]["interface"], "ip6tnl0", "{v:#}");
        assert_eq!(p["bootstrap"]["family"], "AF_INET6");
        assert!(p["bootstrap"]["addr"]
            .as_str()
            .unwrap_or("")
            .starts_with("fe80:"));
        let f = v["findings"]
            .as_array()
            .and_then(|a| a.iter().find(|f| f["code"] == "local-choice-differs"))
            .unwrap_or_else(|| panic!("{v:#}"));
        let m = f["message"].as_str().unwrap_or("");
        assert!(m.contains("ip6tnl0") && m.contains("veth0"), "{m}");
        // Through ncclenv (NCCLENV_DEBUG=1 writes the log): veth0, IPv6, nothing wrong.
        let dir = tmp.join(&format!("ep-{}", w.version));
        let o = in_ns(
            &ns,
            None,
            &[
                ("NCCLENV_DEBUG", "1".into()),
                ("NCCLENV_DEBUG_DIR", dir.display().to_string()),
                ("NCCLENV_NCCL_LIB", w.lib.display().to_string()),
                ("NCCLENV_SYSFS", tmp.join("sys").display().to_string()),
                ("NCCLENV_DEVFS", tmp.join("dev").display().to_string()),
            ],
            &[BIN, "--", HELPER, "bootstrap"],
        );
        let f = one_file(&dir, &o);
        let (code, v) = explain(Some(&ns), &tmp, &[f]);
        assert_eq!(code, 0, "{v:#}");
        assert_eq!(v["processes"][0]["bootstrap"]["addr"], "fd00:10::5");
        assert_eq!(v["processes"][0]["bootstrap"]["interface"], "veth0");
    }
}

#[test]
fn decoy_bridges_are_named_against_ncclenvs_choice() {
    let Some(wheels) = setup() else { return };
    let tmp = TempDir::new("xp-f3");
    // F3: a compose bridge created before the uplink (lower index), the uplink with the default route.
    let ns = Netns::new("xpf3");
    ns.bridge("br-1a2b3c");
    ns.addr("br-1a2b3c", "172.19.0.1/16");
    ns.plug("bond0");
    ns.addr("bond0", "10.10.1.11/24");
    ns.route("default via 10.10.1.1 dev bond0");
    for w in &wheels {
        let f = nccl_log(&ns, w, None, &[], &tmp);
        let (code, v) = explain(Some(&ns), &tmp, &[f]);
        assert_eq!(code, 1, "{v:#}");
        assert_eq!(v["processes"][0]["bootstrap"]["interface"], "br-1a2b3c");
        assert_eq!(v["local"]["ncclenv_choice"]["interface"], "bond0", "{v:#}");
        assert!(codes(&v).contains(&"local-choice-differs".to_string()));
        // The same job through ncclenv: bond0, and the comparison agrees.
        let dir = tmp.join(&format!("ep-{}", w.version));
        let o = in_ns(
            &ns,
            None,
            &[
                ("NCCLENV_DEBUG", "1".into()),
                ("NCCLENV_DEBUG_DIR", dir.display().to_string()),
                ("NCCLENV_NCCL_LIB", w.lib.display().to_string()),
            ],
            &[BIN, "--", HELPER, "bootstrap"],
        );
        let f = one_file(&dir, &o);
        let (code, v) = explain(Some(&ns), &tmp, &[f]);
        assert_eq!(code, 0, "{v:#}");
        assert_eq!(v["processes"][0]["bootstrap"]["interface"], "bond0");
        assert!(!codes(&v).contains(&"local-choice-differs".to_string()));
    }
}

/// Several "hosts" (UTS namespaces with their own names) in several network layouts.
#[test]
fn problems_between_hosts_in_real_logs() {
    let Some(wheels) = setup() else { return };
    let tmp = TempDir::new("xp-hosts");
    let oldest = &wheels[0];
    let newest = &wheels[wheels.len() - 1];
    let logs = logs_of_hosts(&tmp, oldest, newest);
    pairs_of_hosts_are_compared(&tmp, &logs, oldest, newest);
    let [log_a, log_b] = [&logs[0], &logs[2]];
    one_job_log_holds_both_processes(&tmp, log_a, log_b);
    explain_reads_stdin(log_a);
}

/// Real NCCL logs (in `tmp`) from six "hosts": node-a and node-a2 on one network with the `newest` wheel,
/// node-b and node-e sharing an address on another with the `oldest`, node-c with only a loopback, and
/// node-d on IPv6 only (NCCL_SOCKET_FAMILY=AF_INET6). Returns them in that order.
fn logs_of_hosts(tmp: &TempDir, oldest: &Wheel, newest: &Wheel) -> [PathBuf; 6] {
    let uplink = |tag: &str, cidr: &str, gw: &str| {
        let ns = Netns::new(tag);
        ns.plug("eth0");
        ns.addr("eth0", cidr);
        ns.route(&format!("default via {gw} dev eth0"));
        ns
    };
    let a = uplink("xpha", "10.1.0.11/24", "10.1.0.1");
    let a2 = uplink("xpha2", "10.1.0.12/24", "10.1.0.1");
    let b = uplink("xphb", "172.17.0.2/16", "172.17.0.1");
    let lo_only = Netns::new("xphc");
    let v6 = Netns::new("xphd");
    v6.plug("eth0");
    v6.addr("eth0", "fd00:20::12/64");
    v6.route("-6 default via fd00:20::1 dev eth0");

    let log_a = nccl_log(&a, newest, Some("node-a"), &[], tmp);
    let log_a2 = nccl_log(&a2, newest, Some("node-a2"), &[], tmp);
    let log_b = nccl_log(&b, oldest, Some("node-b"), &[], tmp);
    let log_b2 = nccl_log(&b, oldest, Some("node-e"), &[], tmp);
    let log_c = nccl_log(&lo_only, newest, Some("node-c"), &[], tmp);
    let log_d = nccl_log(
        &v6,
        newest,
        Some("node-d"),
        &[("NCCL_SOCKET_FAMILY", "AF_INET6")],
        tmp,
    );
    [log_a, log_a2, log_b, log_b2, log_c, log_d]
}

/// explain over pairs of the `logs` of [`logs_of_hosts`] (in `tmp`): nothing wrong between two hosts on one
/// network with one version, and each problem between hosts where its pair shows it (the versions differ
/// only when the `oldest` and `newest` wheels spell the bootstrap line differently).
fn pairs_of_hosts_are_compared(tmp: &TempDir, logs: &[PathBuf; 6], oldest: &Wheel, newest: &Wheel) {
    let [log_a, log_a2, log_b, log_b2, log_c, log_d] = logs;
    let has = |files: &[&PathBuf], code: &str| -> (bool, Value) {
        let files: Vec<PathBuf> = files.iter().map(|p| (*p).clone()).collect();
        let (_, v) = explain(None, tmp, &files);
        (codes(&v).iter().any(|c| c == code), v)
    };
    // Two hosts on one network, same version: nothing wrong.
    let (code, v) = explain(None, tmp, &[log_a.clone(), log_a2.clone()]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["hosts"], serde_json::json!(["node-a", "node-a2"]));
    for c in [
        "bootstrap-networks-differ",
        "bootstrap-address-shared",
        "bootstrap-loopback",
        "bootstrap-family-mixed",
        "nccl-versions-differ",
    ] {
        assert!(!codes(&v).iter().any(|x| x == c), "{c}: {v:#}");
    }
    let (yes, v) = has(&[log_a, log_b], "bootstrap-networks-differ");
    assert!(yes, "{v:#}");
    let (yes, v) = has(&[log_b, log_b2], "bootstrap-address-shared");
    assert!(yes, "{v:#}");
    let (yes, v) = has(&[log_a, log_c], "bootstrap-loopback");
    assert!(yes, "{v:#}");
    assert_eq!(v["processes"][1]["bootstrap"]["interface"], "lo");
    let (yes, v) = has(&[log_a, log_d], "bootstrap-family-mixed");
    assert!(yes, "{v:#}");
    // Different versions show in the bootstrap line's spelling (2.21.5 vs 2.27.7), when both are installed.
    let (yes, v) = has(&[log_a, log_b], "nccl-versions-differ");
    assert_eq!(yes, oldest.new_format() != newest.new_format(), "{v:#}");
}

/// The same two processes (`log_a`, `log_b`, in `tmp`) in one combined job log, with a launcher's tags and
/// other lines, plus lines no machine here produces: explain finds both processes and their networks.
fn one_job_log_holds_both_processes(tmp: &TempDir, log_a: &Path, log_b: &Path) {
    // The same two processes in one combined job log, with a launcher's tags and other lines, plus lines no
    // machine here produces, written after NCCL's format strings (src/init.cc "NCCL version %s", "Using network
    // %s"; src/transport/net_ib.cc "NET/IB : Using%s %s; OOB %s:%s"; "NET/IB : No device found."; 2.21.5 prints
    // the version line without a prefix).
    let pid = |v: &Value, i: usize| v["processes"][i]["pid"].as_u64().unwrap_or(0);
    let (_, sep) = explain(None, tmp, &[log_a.to_path_buf(), log_b.to_path_buf()]);
    let (pa, pb) = (pid(&sep, 0), pid(&sep, 1));
    let mut job = String::from("LAUNCH INFO starting 2 nodes\n");
    for l in read(log_a).lines() {
        job.push_str(&format!("[rank0]:{l}\n"));
    }
    job.push_str(&format!(
        "[rank0]:node-a:{pa}:{pa} [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.1.0.11<0>\n"
    ));
    job.push_str(&format!(
        "[rank0]:node-a:{pa}:{pa} [0] NCCL INFO Using network IB\n"
    ));
    job.push_str("epoch 0 step 0 loss 2.3\n");
    for l in read(log_b).lines() {
        job.push_str(&format!("[rank1]:{l}\n"));
    }
    job.push_str(&format!(
        "[rank1]:node-b:{pb}:{pb} [0] NCCL INFO NET/IB : No device found.\n"
    ));
    job.push_str(&format!(
        "[rank1]:node-b:{pb}:{pb} [0] NCCL INFO Using network Socket\n"
    ));
    let combined = tmp.join("job.log");
    std::fs::write(&combined, job).expect("write job log");
    let (code, v) = explain(None, tmp, &[combined]);
    assert_eq!(code, 1);
    assert_eq!(v["processes"].as_array().map(Vec::len), Some(2), "{v:#}");
    assert_eq!(v["processes"][0]["host"], "node-a");
    assert_eq!(v["processes"][0]["network"], "IB");
    assert_eq!(v["processes"][1]["network"], "Socket");
    for c in [
        "net-transport-mixed",
        "bootstrap-networks-differ",
        "nccl-info",
    ] {
        assert!(codes(&v).iter().any(|x| x == c), "{c}: {v:#}");
    }
}

/// explain reads a log (`log_a`) from stdin as well as from a file.
fn explain_reads_stdin(log_a: &Path) {
    // stdin works as well as a file.
    let mut c = Command::new(BIN);
    c.env_clear()
        .env("PATH", PATH)
        .args(["explain", "--json"])
        .stdin(std::fs::File::open(log_a).expect("open"));
    let o = c.output().expect("explain stdin");
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["processes"][0]["host"], "node-a");
    assert_eq!(v["inputs"][0]["name"], "-");
}

/// What `NCCL_DEBUG_SUBSYS` shows, per wheel: the model in `ncclenv::nccl_log` (which subsystems each version
/// knows, where it logs the bootstrap line, what an unknown name does) against the real library.
#[test]
fn the_subsystem_model_agrees_with_each_wheel() {
    let Some(wheels) = setup() else { return };
    let tmp = TempDir::new("xp-subsys");
    let ns = f1();
    for w in &wheels {
        let v = ncclenv::nccl_log::version_code(&w.version).expect("version");
        for value in [
            "INIT,ENV,NET",
            "INIT,ENV,NET,BOOTSTRAP",
            "BOOTSTRAP",
            "INIT",
            "INIT,ENV,NET,NOSUCH",
            "NOSUCH",
            "^INIT",
            "^BOOTSTRAP",
            "all",
        ] {
            let f = nccl_log(&ns, w, None, &[("NCCL_DEBUG_SUBSYS", value)], &tmp);
            let logged = read(&f).contains("Using eth0:172.17.0.2<");
            let model = ncclenv::nccl_log::subsystem_enabled(
                v,
                Some(value),
                ncclenv::nccl_log::bootstrap_subsystem(v),
            );
            assert_eq!(
                logged, model,
                "NCCL {} with NCCL_DEBUG_SUBSYS={value}",
                w.version
            );
        }
    }
}

/// `NCCLENV_DEBUG=1` through the entrypoint with each wheel: the bootstrap line reaches NCCL's per-process
/// file in a folder ncclenv creates, with the subsystems chosen for the version the command loads: a wheel on
/// `PYTHONPATH` (as pip installs it: ncclenv reads its dist-info, the command finds it there), the library named
/// by `NCCLENV_NCCL_LIB`, or one of unknown version (a link to it on `LD_LIBRARY_PATH`: no version in the name,
/// no wheel around it); the guides' `INIT,ENV,NET` kept from the environment hides it on 2.27.7 and is named.
#[test]
fn debug_through_the_entrypoint_reaches_the_per_process_file() {
    let Some(wheels) = setup() else { return };
    let tmp = TempDir::new("xp-debug");
    let ns = f1();
    for w in &wheels {
        // The same library where nothing tells its version (no version in the name, no wheel around it): a
        // hard link (a copy across file systems).
        let bare = tmp.join(&format!("bare-{}", w.version));
        std::fs::create_dir_all(&bare).expect("mkdir");
        if std::fs::hard_link(&w.lib, bare.join("libnccl.so.2")).is_err() {
            std::fs::copy(&w.lib, bare.join("libnccl.so.2")).expect("copy libnccl");
        }
        let lib_dir = bare.display().to_string();
        let root = w.dir.display().to_string();
        let lib = w.lib.display().to_string();
        for (case, how, subsys) in [
            ("pip", ("PYTHONPATH", root.clone()), None),
            ("explicit", ("NCCLENV_NCCL_LIB", lib.clone()), None),
            ("unknown", ("LD_LIBRARY_PATH", lib_dir.clone()), None),
            (
                "guides",
                ("NCCLENV_NCCL_LIB", lib.clone()),
                Some("INIT,ENV,NET"),
            ),
        ] {
            let dir = tmp.join(&format!("{}-{case}/not/yet", w.version));
            let mut env: Vec<(&str, String)> = vec![
                ("NCCLENV_DEBUG", "1".into()),
                ("NCCLENV_DEBUG_DIR", dir.display().to_string()),
                how,
            ];
            if let Some(s) = subsys {
                env.push(("NCCL_DEBUG_SUBSYS", s.into()));
            }
            let o = in_ns(&ns, None, &env, &[BIN, "--", HELPER, "bootstrap"]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                String::from_utf8_lossy(&o.stdout).contains("\"ok\":true"),
                "{case}: {err}"
            );
            // The summary line says where the files go.
            assert!(err.contains(&dir.display().to_string()), "{err}");
            let f = one_file(&dir, &o);
            let log = read(&f);
            let line = if w.new_format() {
                "NCCL INFO Bootstrap: Using eth0:172.17.0.2<"
            } else {
                "NCCL INFO Bootstrap : Using eth0:172.17.0.2<"
            };
            let hides = case == "guides" && w.new_format();
            assert_eq!(
                log.contains(line),
                !hides,
                "{} {case}: {log}\n{err}",
                w.version
            );
            assert_eq!(err.contains("[debug-hides-bootstrap]"), hides, "{err}");
            // What the command got: `ncclenv env` prints the same decision as `export` lines (the summary line
            // is short and may leave variables out).
            let e = in_ns(&ns, None, &env, &[BIN, "env"]);
            let exports = String::from_utf8_lossy(&e.stdout);
            let chosen_subsys = exports
                .lines()
                .find_map(|l| l.strip_prefix("export NCCL_DEBUG_SUBSYS="))
                .map(|v| v.trim_matches('\'').to_string());
            match case {
                "pip" | "explicit" => assert_eq!(
                    chosen_subsys.as_deref(),
                    Some(if w.new_format() {
                        "INIT,ENV,NET,BOOTSTRAP"
                    } else {
                        "INIT,ENV,NET"
                    }),
                    "{err}"
                ),
                "unknown" => {
                    assert_eq!(
                        chosen_subsys.as_deref(),
                        Some("INIT,ENV,NET,BOOTSTRAP"),
                        "{err}"
                    )
                }
                _ => assert_eq!(chosen_subsys, None, "kept, not set: {err}"),
            }
            if !hides {
                let (code, v) = explain(Some(&ns), &tmp, &[f]);
                assert_eq!(code, 0, "{v:#}");
                assert_eq!(v["processes"][0]["bootstrap"]["interface"], "eth0");
            }
        }
    }
}

#[test]
fn an_unusable_debug_folder_is_named_and_nccl_logs_to_stdout() {
    let tmp = TempDir::new("xp-dir");
    for d in ["sys", "dev"] {
        std::fs::create_dir_all(tmp.join(d)).expect("mkdir");
    }
    let run = |dir: &str| -> Output {
        Command::new(BIN)
            .env_clear()
            .env("PATH", PATH)
            .env("NCCLENV_SYSFS", tmp.join("sys"))
            .env("NCCLENV_DEVFS", tmp.join("dev"))
            .env("NCCLENV_DEBUG", "1")
            .env("NCCLENV_DEBUG_DIR", dir)
            .args([
                "--",
                "sh",
                "-c",
                "echo file=${NCCL_DEBUG_FILE-unset} level=$NCCL_DEBUG",
            ])
            .output()
            .expect("run")
    };
    let o = run("/proc/ncclenv-cannot-be-here");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "file=unset level=INFO"
    );
    assert!(err.contains("[debug-dir-unwritable]"), "{err}");
    let good = tmp.join("logs");
    let o = run(&good.display().to_string());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("file={}/nccl.%h.%p.log level=INFO", good.display())
    );
    assert!(!err.contains("[debug-dir-unwritable]"), "{err}");
    assert!(good.is_dir());
    // Hands off (NCCL_COMM_ID): no network variable changes, the debug ones still apply.
    let o = Command::new(BIN)
        .env_clear()
        .env("PATH", PATH)
        .env("NCCLENV_SYSFS", tmp.join("sys"))
        .env("NCCLENV_DEVFS", tmp.join("dev"))
        .env("NCCLENV_DEBUG", "1")
        .env("NCCLENV_DEBUG_DIR", &good)
        .env("NCCL_COMM_ID", "10.9.9.9:4242")
        .args([
            "--",
            "sh",
            "-c",
            "echo level=$NCCL_DEBUG ifname=${NCCL_SOCKET_IFNAME-unset}",
        ])
        .output()
        .expect("run");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "level=INFO ifname=unset",
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("NCCL debug logs:"));
}

#[test]
fn the_launchers_debug_switch_and_explains_usage_errors() {
    let tmp = TempDir::new("xp-fw");
    for d in ["sys", "dev"] {
        std::fs::create_dir_all(tmp.join(d)).expect("mkdir");
    }
    let env_lines = |debug: &str, cmd: &[&str]| -> String {
        let o = Command::new(BIN)
            .env_clear()
            .env("PATH", PATH)
            .env("NCCLENV_SYSFS", tmp.join("sys"))
            .env("NCCLENV_DEVFS", tmp.join("dev"))
            .env("NCCLENV_DEBUG", debug)
            .env("NCCLENV_DEBUG_DIR", tmp.join("d"))
            .arg("env")
            .arg("--")
            .args(cmd)
            .output()
            .expect("ncclenv env");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let t = env_lines("1", &["torchrun", "--nnodes=1", "train.py"]);
    assert!(t.contains("export TORCH_DISTRIBUTED_DEBUG='INFO'"), "{t}");
    assert!(t.contains("export TORCH_CPP_LOG_LEVEL='INFO'"), "{t}");
    assert!(!t.contains("PADDLE_LOG_LEVEL"), "{t}");
    let p = env_lines(
        "1",
        &["python3", "-m", "paddle.distributed.launch", "train.py"],
    );
    assert!(p.contains("export PADDLE_LOG_LEVEL='DEBUG'"), "{p}");
    assert!(!p.contains("TORCH_"), "{p}");
    let off = env_lines("0", &["torchrun", "train.py"]);
    assert!(
        !off.contains("NCCL_DEBUG") && !off.contains("TORCH_"),
        "{off}"
    );

    let o = Command::new(BIN)
        .env_clear()
        .args(["explain", "/nonexistent/nccl.log"])
        .output()
        .expect("explain");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/nccl.log"));
    // A directory is a usage error too (2), said as such, not a log that "stopped".
    let o = Command::new(BIN)
        .env_clear()
        .arg("explain")
        .arg(tmp.join("sys"))
        .output()
        .expect("explain DIR");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("is a directory"), "{err}");
    // explain runs in the helper: without it beside ncclenv, a usage error that says so.
    let alone = tmp.join("alone");
    std::fs::create_dir_all(&alone).expect("mkdir");
    common::exe::copy(Path::new(BIN), &alone.join("ncclenv"));
    let o = common::exe::output(
        Command::new(alone.join("ncclenv"))
            .env_clear()
            .args(["explain", "/dev/null"]),
    )
    .expect("explain without helper");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("ncclenv-check"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Fork, exec `argv[2:]` with stdout to `argv[1]` and stdin and stderr on /dev/null, wait4: prints the exit
/// status and the child's `ru_maxrss` (KiB).
const FORK_WAIT4: &str = r#"import os, sys
pid = os.fork()
if pid == 0:
    null = os.open("/dev/null", os.O_RDWR)
    out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(null, 0); os.dup2(out, 1); os.dup2(null, 2)
    os.execv(sys.argv[2], sys.argv[2:])
_, status, ru = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), ru.ru_maxrss)
"#;

/// `ncclenv explain ARGS` (no root, no namespace), stdout to a file: its exit status, stdout, and the peak RSS
/// of exactly this child in KiB (`wait4`'s `ru_maxrss`; `ncclenv explain` execs the helper in place, so the
/// helper's peak is in it). The child is forked by a small Python parent: one that this test process starts
/// itself (posix_spawn, sharing this process's memory until its exec) carries this process's own peak into its
/// `ru_maxrss` (the kernel keeps the larger of the old memory's peak at exec: `setmax_mm_hiwater_rss` in
/// fs/exec.c), which in CI, with the other tests running here, read 163 MB for an explain of 11 MB.
fn explain_rss(tmp: &TempDir, args: &[&str], files: &[PathBuf]) -> (i32, String, i64) {
    for d in ["sys", "dev"] {
        std::fs::create_dir_all(tmp.join(d)).expect("mkdir");
    }
    let out = tmp.join("stdout");
    let o = Command::new("python3")
        .env_clear()
        .env("PATH", PATH)
        .env("NCCLENV_SYSFS", tmp.join("sys"))
        .env("NCCLENV_DEVFS", tmp.join("dev"))
        .arg("-c")
        .arg(FORK_WAIT4)
        .arg(&out)
        .arg(BIN)
        .arg("explain")
        .args(args)
        .args(files)
        .output()
        .expect("python3 (fork, exec, wait4)");
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut words = said.split_whitespace().map(|w| w.parse::<i64>().ok());
    let (Some(Some(code)), Some(Some(rss))) = (words.next(), words.next()) else {
        panic!(
            "python3 said {said:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    (i32::try_from(code).unwrap_or(-1), read(&out), rss)
}

/// Issue 22, item 8: whatever the log, `explain`'s memory stays bounded (peak RSS under 128 MiB), counting
/// what it does not keep and saying how much it left out. 100,000 processes in one log (took 1.1 GB with
/// `--json`): the first 2,048 are listed, the rest counted; 100 MB of repeated bare `NCCL version` lines
/// (took 416 MB): one version kept.
#[test]
fn explain_memory_stays_bounded_whatever_the_log() {
    use std::io::Write;
    const LIMIT_KIB: i64 = 128 * 1024;
    let tmp = TempDir::new("explain-rss");
    let procs = tmp.join("procs.log");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&procs).expect("create"));
    let n = 100_000u32;
    for i in 0..n {
        let (h, pid) = (format!("node-{}", i % 1000), 10_000 + i);
        let _ = writeln!(
            w,
            "{h}:{pid}:{pid} [0] NCCL INFO NCCL version 2.21.5+cuda12.4"
        );
        let _ = writeln!(
            w,
            "{h}:{pid}:{pid} [0] NCCL INFO Bootstrap : Using eth0:10.{}.{}.{}<0>",
            (i >> 16) & 255,
            (i >> 8) & 255,
            i & 255
        );
        let _ = writeln!(
            w,
            "{h}:{pid}:{pid} [0] misc/socket.cc:484 NCCL WARN socketProgress: Connection closed by remote peer {i}"
        );
    }
    w.flush().expect("write procs.log");
    drop(w);
    let left = u64::from(n) - 2048;
    for json in [false, true] {
        let args: &[&str] = if json { &["--json"] } else { &[] };
        let (code, out, rss) = explain_rss(&tmp, args, std::slice::from_ref(&procs));
        assert!(
            code == 0 || code == 1,
            "exit {code}: {}",
            &out[..out.len().min(2000)]
        );
        assert!(rss < LIMIT_KIB, "json {json}: peak RSS {rss} KiB");
        eprintln!(
            "100,000 processes, json {json}: peak RSS {} MiB",
            rss / 1024
        );
        if json {
            let v: Value = serde_json::from_str(out.trim()).expect("json");
            assert_eq!(v["processes"].as_array().map(Vec::len), Some(2048));
            assert_eq!(v["left_out"]["processes"], left, "{}", v["left_out"]);
            assert_eq!(v["left_out"]["lines"], left * 3, "{}", v["left_out"]);
            assert_eq!(v["left_out"]["processes_at_least"], false);
        } else {
            assert!(
                out.contains(&format!(
                    "left out to stay bounded: {left} more process(es) ({} NCCL line(s)) beyond the first 2048",
                    left * 3
                )),
                "{}",
                &out[..out.len().min(2000)]
            );
        }
    }

    let versions = tmp.join("versions.log");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&versions).expect("create"));
    let line = "NCCL version 2.21.5+cuda12.4\n";
    let lines = 100 * 1024 * 1024 / line.len();
    for _ in 0..lines {
        let _ = w.write_all(line.as_bytes());
    }
    w.flush().expect("write versions.log");
    drop(w);
    let (code, out, rss) = explain_rss(&tmp, &["--json"], std::slice::from_ref(&versions));
    eprintln!("100 MB of version lines: peak RSS {} MiB", rss / 1024);
    assert!(rss < LIMIT_KIB, "peak RSS {rss} KiB");
    let v: Value = serde_json::from_str(out.trim()).expect("json");
    assert!(code == 0 || code == 1, "exit {code}: {v:#}");
    assert_eq!(v["inputs"][0]["lines"], lines, "{}", v["inputs"]);
    assert_eq!(
        v["versions_unattributed"],
        serde_json::json!(["2.21.5"]),
        "{v:#}"
    );
}
