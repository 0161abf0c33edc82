//! The bootstrap check against the real libnccl of each wheel installed by `scripts/install-nccl-wheels.sh`
//! (`$NCCLENV_TEST_NCCL_ROOT`, default /opt/ncclenv, folders `nccl-<version>`), inside throwaway network
//! namespaces (veth pairs): the decoded bootstrap address, "no socket interface found" with the version's code
//! (3 up to 2.23, 5 from 2.24), and IPv6-only with `NCCL_SOCKET_FAMILY=AF_INET6`.
//!
//! Needs root and `ip`. Without the wheels (or root) the tests skip with a message, except under `CI=true`,
//! where they fail.

use ncclenv::check::{render_check, run_check, CheckReport};
use ncclenv::config::{CheckMode, Config};
use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// `(version folder name, libnccl path)` for every installed wheel, oldest first, or None when the tests
/// must skip (no wheel, not root, no `ip`; a failure under CI).
fn libraries() -> Option<Vec<(String, PathBuf)>> {
    let wheels = common::needs::nccl_wheels()?;
    if !common::needs::root("check_real_nccl: network namespaces") {
        return None;
    }
    if ip_path().is_none() {
        return common::needs::missing("check_real_nccl: no ip command (apt-get install iproute2)");
    }
    Some(
        wheels
            .into_iter()
            .map(|w| (format!("nccl-{}", w.version), w.lib))
            .collect(),
    )
}

fn ip_path() -> Option<PathBuf> {
    ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

fn ip(args: &[&str]) {
    let ip = ip_path().expect("ip");
    let out = Command::new(ip).args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace with a veth pair `v0`/`v1` (both up, so both are RUNNING); deleted on drop. The
/// helper runs in it through a wrapper script `ip netns exec NAME ncclenv-check "$@"`.
struct Netns {
    name: String,
    wrapper: PathBuf,
}

impl Netns {
    fn new(tag: &str) -> Netns {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "ncclenv-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        ip(&["netns", "add", &name]);
        ip(&[
            "-n", &name, "link", "add", "v0", "type", "veth", "peer", "name", "v1",
        ]);
        // No IPv6 link-local addresses: only the addresses a test adds exist.
        ip(&["-n", &name, "link", "set", "v0", "addrgenmode", "none"]);
        ip(&["-n", &name, "link", "set", "v1", "addrgenmode", "none"]);
        ip(&["-n", &name, "link", "set", "v0", "up"]);
        ip(&["-n", &name, "link", "set", "v1", "up"]);
        let wrapper = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.sh"));
        let script = format!(
            "#!/bin/sh\nexec {} netns exec {name} {} \"$@\"\n",
            ip_path().expect("ip").display(),
            env!("CARGO_BIN_EXE_ncclenv-check")
        );
        common::exe::write(&wrapper, script, 0o755);
        Netns { name, wrapper }
    }

    fn addr(&self, cidr: &str, extra: &[&str]) {
        let mut a = vec!["-n", &self.name, "addr", "add", cidr, "dev", "v0"];
        a.extend_from_slice(extra);
        ip(&a);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new(ip_path().unwrap_or_else(|| PathBuf::from("ip")))
            .args(["netns", "del", &self.name])
            .output();
        let _ = std::fs::remove_file(&self.wrapper);
    }
}

fn bootstrap(
    ns: &Netns,
    lib: &Path,
    extra: &[(&str, &str)],
    expected: Option<(&str, IpAddr)>,
) -> CheckReport {
    let cfg = Config {
        check_helper: Some(ns.wrapper.clone()),
        nccl_lib: Some(lib.to_path_buf()),
        check_timeout_s: 20,
        ..Config::default()
    };
    let mut env: Vec<(OsString, OsString)> =
        vec![("PATH".into(), "/usr/sbin:/usr/bin:/sbin:/bin".into())];
    for (k, v) in extra {
        env.push(((*k).into(), (*v).into()));
    }
    run_check(&cfg, CheckMode::Bootstrap, &env, expected, &[])
}

fn version_of(r: &CheckReport) -> String {
    r.detail.nccl_version.clone().unwrap_or_else(|| "?".into())
}

#[test]
fn good_interface_address_is_decoded() {
    let Some(libs) = libraries() else { return };
    let ns = Netns::new("good");
    ns.addr("10.77.0.2/24", &[]);
    let want: IpAddr = "10.77.0.2".parse().expect("ip");
    for (name, lib) in &libs {
        // Warm the page cache, then time spawn → verdict.
        let _ = bootstrap(&ns, lib, &[], Some(("v0", want)));
        let r = bootstrap(&ns, lib, &[], Some(("v0", want)));
        assert!(r.passed, "{name}: {}", render_check(&r));
        assert_eq!(r.to_json()["result"]["addr"], "10.77.0.2", "{name}");
        assert_eq!(r.to_json()["result"]["family"], "AF_INET", "{name}");
        let ms = r.detail.elapsed_ms.unwrap_or(u64::MAX);
        // Printed, not asserted: scripts/bench.sh measures it side by side.
        eprintln!(
            "bootstrap check {name} (NCCL {}): {ms} ms from spawn to verdict (incl. ip netns exec)",
            version_of(&r)
        );
        // The same with NCCL_SOCKET_IFNAME naming the interface, and a wrong expectation is caught.
        let r = bootstrap(
            &ns,
            lib,
            &[("NCCL_SOCKET_IFNAME", "=v0")],
            Some(("v0", want)),
        );
        assert!(r.passed, "{name}: {}", render_check(&r));
        let other: IpAddr = "10.77.0.9".parse().expect("ip");
        let r = bootstrap(&ns, lib, &[], Some(("v1", other)));
        assert!(!r.passed, "{name}: {}", render_check(&r));
    }
}

#[test]
fn ifname_matching_nothing_is_explained_with_the_versions_code() {
    let Some(libs) = libraries() else { return };
    let ns = Netns::new("noif");
    ns.addr("10.78.0.2/24", &[]);
    for (name, lib) in &libs {
        let r = bootstrap(&ns, lib, &[("NCCL_SOCKET_IFNAME", "nomatch0")], None);
        assert!(!r.passed, "{name}: {}", render_check(&r));
        let j = r.to_json();
        let e = &j["error"];
        let v = j["result"]["nccl_version"].as_i64().unwrap_or(0);
        let want = if v >= 22400 { 5 } else { 3 };
        assert_eq!(e["code"], want, "{name}: {}", render_check(&r));
        assert!(
            e["last_error"]
                .as_str()
                .unwrap_or("")
                .contains("no socket interface found"),
            "{name}: {e}"
        );
        assert!(
            e["explanation"]
                .as_str()
                .unwrap_or("")
                .contains("NCCL_SOCKET_IFNAME"),
            "{name}: {e}"
        );
        assert!(
            r.summary.contains(&format!("({want})")),
            "{name}: {}",
            r.summary
        );
        eprintln!("{name}: {}", r.summary);
    }
}

#[test]
fn ipv6_only_with_socket_family_inet6() {
    let Some(libs) = libraries() else { return };
    let ns = Netns::new("v6");
    ns.addr("fd77::2/64", &["nodad"]);
    let want: IpAddr = "fd77::2".parse().expect("ip");
    for (name, lib) in &libs {
        let r = bootstrap(
            &ns,
            lib,
            &[("NCCL_SOCKET_FAMILY", "AF_INET6")],
            Some(("v0", want)),
        );
        assert!(r.passed, "{name}: {}", render_check(&r));
        assert_eq!(r.to_json()["result"]["family"], "AF_INET6", "{name}");
        assert_eq!(r.to_json()["result"]["addr"], "fd77::2", "{name}");
    }
}

// ---------------------------------------------------------------------------------------------------------
// Agreement: ncclenv's model of NCCL ("NCCL alone" in doctor) against what the real library binds

use crate::common;

use common::layouts;

/// What NCCL does at bootstrap with one environment: binds an address on an interface, finds no socket
/// interface, or fails in another way (the text says how).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bootstrap {
    Bound { ifname: String, addr: IpAddr },
    NoInterface,
    Other(String),
}

/// The inherited values tried on a layout whose interfaces with an address are `names` (index order):
/// `(NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY)`, `None` = unset. Unset; the families (and one NCCL ignores);
/// every name as a prefix; `=name`, `^name`, `^=name`, a leading space; prefixes of two and three
/// characters; a list, a list with a space after the comma; `lo`, `^lo`, `^docker,lo`, a missing name,
/// `=^x`; the values NCCL ignores (one character, empty).
fn inherited_values(names: &[String]) -> Vec<(Option<String>, Option<&'static str>)> {
    let non_lo: Vec<&String> = names.iter().filter(|n| *n != "lo").collect();
    let mut v: Vec<(Option<String>, Option<&'static str>)> = vec![
        (None, None),
        (None, Some("AF_INET")),
        (None, Some("AF_INET6")),
        (None, Some("inet")),
    ];
    let mut ifn = |s: String| v.push((Some(s), None));
    for n in &non_lo {
        ifn(n.to_string());
    }
    for n in non_lo.iter().take(2) {
        ifn(format!("={n}"));
    }
    if let Some(first) = non_lo.first() {
        ifn(format!("^{first}"));
        ifn(format!("^={first}"));
        ifn(format!(" {first}"));
        ifn(first.chars().take(1).collect());
    }
    for n in &non_lo {
        for len in [2, 3] {
            if n.len() > len {
                ifn(n[..len].to_string());
            }
        }
    }
    if non_lo.len() >= 2 {
        ifn(non_lo
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(","));
        ifn(format!("{}, {}", non_lo[0], non_lo[1]));
    }
    for s in [
        "lo",
        "=lo",
        "^lo",
        "^docker,lo",
        "nomatch0",
        "=^x",
        "^",
        "=",
        "",
    ] {
        ifn(s.to_string());
    }
    if let Some(first) = non_lo.first() {
        v.push((Some(first.to_string()), Some("AF_INET6")));
        v.push((Some(first.to_string()), Some("AF_INET")));
    }
    let mut seen = std::collections::BTreeSet::new();
    v.retain(|e| seen.insert(e.clone()));
    v
}

/// The environment of one case, as `(name, value)` pairs.
fn case_env(ifname: &Option<String>, family: Option<&str>) -> Vec<(&'static str, String)> {
    let mut e = Vec::new();
    if let Some(v) = ifname {
        e.push(("NCCL_SOCKET_IFNAME", v.clone()));
    }
    if let Some(f) = family {
        e.push(("NCCL_SOCKET_FAMILY", f.to_string()));
    }
    e
}

/// `ncclenv doctor --json` in the namespace with `lib` named (so the model follows its version) and the
/// case's variables: the model's bootstrap and the version it followed.
fn model(
    ns: &common::Netns,
    lib: &Path,
    empty: &Path,
    env: &[(&str, String)],
) -> (Bootstrap, serde_json::Value) {
    let mut c = ns.command(env!("CARGO_BIN_EXE_ncclenv"));
    c.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("NCCLENV_NCCL_LIB", lib)
        .env("NCCLENV_SYSFS", empty)
        .env("NCCLENV_DEVFS", empty)
        .env("NCCLENV_SHM_MIN", "0")
        .args(["doctor", "--json"]);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("run ncclenv doctor");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json ({env:?}): {e}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    let m = v["decision"]["nccl_model"].clone();
    let b = match &m["bootstrap"] {
        serde_json::Value::Null => Bootstrap::NoInterface,
        b => Bootstrap::Bound {
            ifname: b["ifname"].as_str().unwrap_or("?").to_string(),
            addr: b["addr"]
                .as_str()
                .and_then(|a| a.parse().ok())
                .unwrap_or_else(|| panic!("nccl_model.bootstrap.addr: {m}")),
        },
    };
    (b, m)
}

/// `ncclenv-check bootstrap` (the real `ncclGetUniqueId`) in the namespace with exactly the case's
/// variables: the address bound, mapped to its interface with `ip -j addr` (`owners`).
fn real(
    ns: &common::Netns,
    lib: &Path,
    env: &[(&str, String)],
    owners: &[(IpAddr, String)],
) -> Bootstrap {
    let mut c = ns.command("timeout");
    c.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("NCCLENV_NCCL_LIB", lib)
        .args(["60", env!("CARGO_BIN_EXE_ncclenv-check"), "bootstrap"]);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("run ncclenv-check");
    let out = String::from_utf8_lossy(&o.stdout);
    let Some(r) = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["ev"] == "result")
    else {
        return Bootstrap::Other(format!(
            "no result line ({}): {out}{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ));
    };
    if r["ok"] == true {
        let addr: IpAddr = r["addr"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("result without addr: {r}"));
        // A bridge shares its first port's MAC, so both hold the same fe80 address: every owner is named.
        let names: Vec<&str> = owners
            .iter()
            .filter(|(a, _)| *a == addr)
            .map(|(_, n)| n.as_str())
            .collect();
        let ifname = if names.is_empty() {
            format!("(no interface owns {addr})")
        } else {
            names.join("|")
        };
        return Bootstrap::Bound { ifname, addr };
    }
    let e = &r["error"];
    if e["last_error"]
        .as_str()
        .unwrap_or("")
        .contains("no socket interface found")
    {
        Bootstrap::NoInterface
    } else {
        Bootstrap::Other(e.to_string())
    }
}

/// Every address of the namespace with the interface that owns it, per `ip -j addr` (the oracle), and
/// the names of the interfaces that have one, in index order.
fn owners(ns: &common::Netns) -> (Vec<(IpAddr, String)>, Vec<String>) {
    let v = ns.ip_json(&["addr", "show"]);
    let mut owners = Vec::new();
    let mut names = Vec::new();
    for l in v.as_array().map(|a| a.as_slice()).unwrap_or(&[]) {
        let name = l["ifname"].as_str().unwrap_or("").to_string();
        // An IPv4 address's label is the name getifaddrs (and so NCCL) gives it (#26).
        let addrs: Vec<(IpAddr, String)> = l["addr_info"]
            .as_array()
            .map(|a| a.as_slice())
            .unwrap_or(&[])
            .iter()
            .filter_map(|i| {
                let a = i["local"].as_str()?.parse().ok()?;
                Some((a, i["label"].as_str().unwrap_or(&name).to_string()))
            })
            .collect();
        if !addrs.is_empty() {
            names.push(name.clone());
        }
        owners.extend(addrs);
    }
    (owners, names)
}

/// The model agrees with NCCL: the same address on an interface NCCL's address belongs to (`ifname` of
/// [`real`] names every owner, `a|b`), or both find no socket interface.
fn agrees(model: &Bootstrap, real: &Bootstrap) -> bool {
    match (model, real) {
        (
            Bootstrap::Bound { ifname: m, addr: a },
            Bootstrap::Bound {
                ifname: owners,
                addr: b,
            },
        ) => a == b && owners.split('|').any(|o| o == m),
        (Bootstrap::NoInterface, Bootstrap::NoInterface) => true,
        _ => false,
    }
}

/// The agreement figure `docs/policy.md` states, for the versions measured.
fn readme_sentence(versions: &[String], layouts: (usize, usize), cases: (usize, usize)) -> String {
    let names = match versions.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => versions.join(""),
    };
    format!(
        "the model agrees with NCCL {} on {}/{} layouts ({}/{} cases of a layout and an inherited value)",
        names,
        layouts.0,
        layouts.1,
        cases.0,
        cases.1
    )
}

/// `doctor`'s model of NCCL's own choice ("NCCL alone", `decision.nccl_model`) against what the real
/// `ncclGetUniqueId` of each pinned wheel binds, with the environment as given, on every field-case layout
/// (`tests/it/common/layouts.rs`) and with every inherited value of [`inherited_values`]. The model follows the
/// version named by `NCCLENV_NCCL_LIB`. Every case must agree; the figure is printed and must be the one
/// `docs/policy.md` states.
#[test]
fn nccl_alone_model_agrees_with_the_real_nccl() {
    let Some(libs) = libraries() else { return };
    let empty = common::TempDir::new("agree");
    let mut cases = 0usize;
    let mut misses: Vec<String> = Vec::new();
    let mut layouts_ok = 0usize;
    let started = std::time::Instant::now();
    for layout in layouts::ALL {
        let ns = common::Netns::new("agree");
        (layout.build)(&ns);
        let (owners, names) = owners(&ns);
        let before = misses.len();
        for (ifname, family) in inherited_values(&names) {
            let env = case_env(&ifname, family);
            for (name, lib) in &libs {
                cases += 1;
                let (m, raw) = model(&ns, lib, &empty.path, &env);
                let r = real(&ns, lib, &env, &owners);
                let want_version = name.trim_start_matches("nccl-");
                assert_eq!(
                    raw["nccl_versions"],
                    serde_json::json!([want_version]),
                    "the model follows the version of NCCLENV_NCCL_LIB: {raw}"
                );
                if !agrees(&m, &r) {
                    misses.push(format!(
                        "{} {name} {env:?}: model {m:?}, NCCL {r:?}",
                        layout.name
                    ));
                }
            }
        }
        if misses.len() == before {
            layouts_ok += 1;
        }
    }
    let versions: Vec<String> = libs
        .iter()
        .map(|(n, _)| n.trim_start_matches("nccl-").to_string())
        .collect();
    let agree = cases - misses.len();
    let sentence = readme_sentence(&versions, (layouts_ok, layouts::ALL.len()), (agree, cases));
    eprintln!("{sentence} (in {:?})", started.elapsed());
    assert!(
        misses.is_empty(),
        "{} of {cases} cases disagree:\n{}",
        misses.len(),
        misses.join("\n")
    );
    // The wheels scripts/install-nccl-wheels.sh pins.
    if versions == ["2.21.5", "2.27.7", "2.29.7", "2.30.7"] {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/policy.md"))
            .expect("docs/policy.md");
        // Compared with the document's line breaks and indentation folded to single spaces.
        let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            doc.contains(&sentence),
            "docs/policy.md must state the measured figure: \"{sentence}\""
        );
    }
}

/// `ncclenv env` in the namespace for a 2-node job whose master is `master`, with `lib` named and the
/// inherited `env`: the `NCCL_SOCKET_IFNAME` and `NCCL_SOCKET_FAMILY` the command would get (the inherited
/// value where ncclenv keeps it).
fn exported(
    ns: &common::Netns,
    lib: &Path,
    empty: &Path,
    master: &str,
    env: &[(&'static str, String)],
) -> Vec<(&'static str, String)> {
    let mut c = ns.command(env!("CARGO_BIN_EXE_ncclenv"));
    c.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("NCCLENV_NCCL_LIB", lib)
        .env("NCCLENV_SYSFS", empty)
        .env("NCCLENV_DEVFS", empty)
        .env("NCCLENV_SHM_MIN", "0")
        .env("NCCLENV_PEER", master)
        .env("NCCLENV_NNODES", "2")
        .arg("env");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("run ncclenv env");
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let mut got: Vec<(&'static str, String)> = env.to_vec();
    for name in ["NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY"] {
        let prefix = format!("export {name}='");
        if let Some(v) = out.lines().find_map(|l| l.strip_prefix(&prefix)) {
            got.retain(|(k, _)| *k != name);
            got.push((name, v.trim_end_matches('\'').to_string()));
        }
    }
    got
}

/// #26, item 1, with the real library as the oracle: an IPv4 address label is an interface of its own to
/// NCCL. On `eno1` holding 169.254.8.223 (label `eno1:avahi`) and 10.10.3.5, the prefix `eno1` binds the
/// label's link-local address (model and NCCL agree), and ncclenv's export for a job whose master is
/// 10.10.3.1 (unset, or repairing the inherited `eno1`) makes NCCL bind 10.10.3.5. With the alias
/// `eth0:1` 10.20.0.7 on the master's network beside 192.168.50.2, the export makes NCCL bind the alias.
/// A deprecated address (item 7) is bound by NCCL and chosen by ncclenv.
#[test]
fn labels_and_deprecated_addresses_with_the_real_nccl() {
    let Some(libs) = libraries() else { return };
    let empty = common::TempDir::new("label");
    let ns = common::Netns::new("label");
    ns.plug("eno1");
    ns.addr_with(
        "eno1",
        "169.254.8.223/16",
        &["scope", "link", "label", "eno1:avahi"],
    );
    ns.addr("eno1", "10.10.3.5/24");
    let alias = common::Netns::new("alias");
    alias.plug("eth0");
    alias.addr("eth0", "192.168.50.2/24");
    alias.addr_with("eth0", "10.20.0.7/24", &["label", "eth0:1"]);
    let dep = common::Netns::new("deprecated");
    dep.plug("eth0");
    dep.addr_with(
        "eth0",
        "10.30.0.4/24",
        &["preferred_lft", "0", "valid_lft", "forever"],
    );
    let v = dep.ip_json(&["addr", "show", "dev", "eth0"]);
    assert_eq!(v[0]["addr_info"][0]["deprecated"], true, "ip -j: {v}");
    let mut cases = 0;
    for (name, lib) in &libs {
        let (owners_l, _) = owners(&ns);
        // The model and NCCL agree on the plain prefix and the exact name.
        for (val, want) in [("eno1", "169.254.8.223"), ("=eno1", "10.10.3.5")] {
            let env = vec![("NCCL_SOCKET_IFNAME", val.to_string())];
            let (m, _) = model(&ns, lib, &empty.path, &env);
            let r = real(&ns, lib, &env, &owners_l);
            assert!(agrees(&m, &r), "{name} {val}: model {m:?}, NCCL {r:?}");
            assert!(
                matches!(&r, Bootstrap::Bound { addr, .. } if *addr == want.parse::<IpAddr>().unwrap()),
                "{name} {val}: {r:?}"
            );
            cases += 1;
        }
        // ncclenv's export, unset and repairing the inherited prefix.
        for inherited in [vec![], vec![("NCCL_SOCKET_IFNAME", "eno1".to_string())]] {
            let env = exported(&ns, lib, &empty.path, "10.10.3.1", &inherited);
            let r = real(&ns, lib, &env, &owners_l);
            assert!(
                matches!(&r, Bootstrap::Bound { addr, .. } if *addr == "10.10.3.5".parse::<IpAddr>().unwrap()),
                "{name} {env:?}: {r:?}"
            );
            cases += 1;
        }
        let (owners_a, _) = owners(&alias);
        let env = exported(&alias, lib, &empty.path, "10.20.0.1", &[]);
        let r = real(&alias, lib, &env, &owners_a);
        assert!(
            matches!(&r, Bootstrap::Bound { addr, ifname } if *addr == "10.20.0.7".parse::<IpAddr>().unwrap() && ifname == "eth0:1"),
            "{name} {env:?}: {r:?}"
        );
        let (owners_d, _) = owners(&dep);
        let env = exported(&dep, lib, &empty.path, "10.30.0.1", &[]);
        assert!(
            env.iter()
                .any(|(k, v)| *k == "NCCL_SOCKET_IFNAME" && v == "eth0"),
            "{env:?}"
        );
        let r = real(&dep, lib, &env, &owners_d);
        assert!(
            matches!(&r, Bootstrap::Bound { addr, .. } if *addr == "10.30.0.4".parse::<IpAddr>().unwrap()),
            "{name} {env:?}: {r:?}"
        );
        cases += 2;
    }
    eprintln!("labels and deprecated addresses: {cases} cases agree with the real NCCL");
}

/// #26, item 2, with the real library as the oracle: every row of the known-defects table
/// (`ncclenv::nccl_defects::DEFECTS`) that can be measured without a GPU agrees with each installed wheel.
/// `comm-id-binds-lo`: with `NCCL_COMM_ID` set to this node's address, NCCL's bootstrap network logs
/// `Bootstrap: Using lo:…` exactly on the versions the row names (2.29.x binds lo; 2.27.7 and 2.30.7 bind the
/// NIC), and `ncclenv doctor` warns `nccl-version-defect` exactly there.
#[test]
fn version_defect_rows_agree_with_the_real_nccl() {
    let Some(libs) = libraries() else { return };
    let Some(python) = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .iter()
        .find(|p| std::path::Path::new(p).is_file())
        .map(|p| p.to_string())
    else {
        common::needs::missing::<()>("version_defect_rows: no python3 (apt-get install python3)");
        return;
    };
    let empty = common::TempDir::new("defect");
    let ns = common::Netns::new("defect");
    ns.plug("eth0");
    ns.addr("eth0", "10.77.0.2/24");
    let row = ncclenv::nccl_defects::DEFECTS
        .iter()
        .find(|d| d.id == "comm-id-binds-lo")
        .expect("row");
    let mut seen = Vec::new();
    for (name, lib) in &libs {
        let version = name.trim_start_matches("nccl-");
        // ncclGetUniqueId from a plain process (python's ctypes): the check helper removes NCCL_COMM_ID
        // and keeps NCCL's log to itself, this needs both.
        let script = format!(
            "import ctypes\nl = ctypes.CDLL({:?})\nb = ctypes.create_string_buffer(128)\nprint('rc', l.ncclGetUniqueId(b))\n",
            lib.display().to_string()
        );
        let mut c = ns.command("timeout");
        c.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/bin")
            .env("NCCL_COMM_ID", "10.77.0.2:29600")
            .env("NCCL_DEBUG", "INFO")
            .env("NCCL_DEBUG_SUBSYS", "INIT,ENV,NET,BOOTSTRAP")
            .args(["60", &python, "-c", &script]);
        let o = c.output().expect("run python3");
        let out = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let using = out
            .lines()
            .find_map(|l| l.split_once("Using ").map(|(_, r)| r.to_string()))
            .unwrap_or_else(|| panic!("{name}: no bootstrap line: {out}"));
        let on_lo = using.starts_with("lo:");
        let listed = ncclenv::nccl_defects::parse_version(version).is_some_and(|v| row.affects(v));
        assert_eq!(
            on_lo, listed,
            "{name}: NCCL bootstraps on {using}; the table says {listed}"
        );
        let mut d = ns.command(env!("CARGO_BIN_EXE_ncclenv"));
        d.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("NCCLENV_NCCL_LIB", lib)
            .env("NCCLENV_SYSFS", &empty.path)
            .env("NCCLENV_DEVFS", &empty.path)
            .env("NCCLENV_SHM_MIN", "0")
            .env("NCCL_COMM_ID", "10.77.0.2:29600")
            .args(["doctor", "--json"]);
        let o = d.output().expect("run ncclenv doctor");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("doctor json");
        let warned = v["decision"]["warnings"]
            .as_array()
            .is_some_and(|w| w.iter().any(|w| w["code"] == "nccl-version-defect"));
        assert_eq!(
            warned, listed,
            "{name}: doctor {}",
            v["decision"]["warnings"]
        );
        seen.push(format!("{version}: {}", if on_lo { "lo" } else { "NIC" }));
    }
    eprintln!("NCCL_COMM_ID bootstrap by version: {}", seen.join(", "));
}
