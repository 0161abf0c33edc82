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

/// `(version folder name, libnccl path)` for every installed wheel, or None when the tests must skip.
fn libraries() -> Option<Vec<(String, PathBuf)>> {
    let root = std::env::var_os("NCCLENV_TEST_NCCL_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/ncclenv"));
    let mut libs: Vec<(String, PathBuf)> = std::fs::read_dir(&root)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().to_string();
                    let lib = e.path().join("nvidia/nccl/lib/libnccl.so.2");
                    (name.starts_with("nccl-") && !name.contains(".partial") && lib.is_file())
                        .then_some((name, lib))
                })
                .collect()
        })
        .unwrap_or_default();
    libs.sort();
    // SAFETY: geteuid has no preconditions.
    let is_root = unsafe { nix::libc::geteuid() } == 0;
    let has_ip = ip_path().is_some();
    let why = if libs.is_empty() {
        Some(format!(
            "no NCCL wheels under {} (run scripts/install-nccl-wheels.sh)",
            root.display()
        ))
    } else if !is_root || !has_ip {
        Some("needs root and the ip command for network namespaces".to_string())
    } else {
        None
    };
    match why {
        Some(w) if std::env::var("CI").as_deref() == Ok("true") => panic!("{w}"),
        Some(w) => {
            eprintln!("SKIP check_real_nccl: {w}");
            None
        }
        None => Some(libs),
    }
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
        std::fs::write(&wrapper, script).expect("write wrapper");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))
            .expect("chmod wrapper");
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
    r.detail["nccl_version"].as_str().unwrap_or("?").to_string()
}

#[test]
fn good_interface_address_is_decoded() {
    let Some(libs) = libraries() else { return };
    let ns = Netns::new("good");
    ns.addr("10.77.0.2/24", &[]);
    let want: IpAddr = "10.77.0.2".parse().expect("ip");
    for (name, lib) in &libs {
        // Warm the page cache, then measure spawn → verdict.
        let _ = bootstrap(&ns, lib, &[], Some(("v0", want)));
        let r = bootstrap(&ns, lib, &[], Some(("v0", want)));
        assert!(r.passed, "{name}: {}", render_check(&r));
        assert_eq!(r.detail["result"]["addr"], "10.77.0.2", "{name}");
        assert_eq!(r.detail["result"]["family"], "AF_INET", "{name}");
        let ms = r.detail["elapsed_ms"].as_u64().unwrap_or(u64::MAX);
        eprintln!(
            "bootstrap check {name} (NCCL {}): {ms} ms from spawn to verdict (incl. ip netns exec)",
            version_of(&r)
        );
        assert!(ms < 3000, "{name}: bootstrap check took {ms} ms");
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
        let e = &r.detail["error"];
        let v = r.detail["result"]["nccl_version"].as_i64().unwrap_or(0);
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
        assert_eq!(r.detail["result"]["family"], "AF_INET6", "{name}");
        assert_eq!(r.detail["result"]["addr"], "fd77::2", "{name}");
    }
}
