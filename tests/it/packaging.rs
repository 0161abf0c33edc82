//! Getting ncclenv, as a new user does:
//!
//! - the README's first block, run as written in a `git clone` of this repository (committed state), builds
//!   both binaries side by side in `dist/`, adds the musl target itself when rustup says it is missing, runs
//!   the entrypoint, and `dist/ncclenv check` finds its helper;
//! - `scripts/build-wheel.sh` builds one wheel per architecture, each carrying the static musl `ncclenv` and
//!   the glibc `ncclenv-check` (byte for byte the cargo builds), tagged `manylinux_2_N` for the newest
//!   GLIBC_2.N the helper needs (readelf) and `musllinux_1_1`, with the README, license and URLs as metadata;
//!   the x86_64 one installs offline (`pip install --no-index`) into a fresh venv where every subcommand and
//!   `python -m ncclenv` give the result they must here (check: passes with a real NCCL wheel, 69 without
//!   libnccl, "needs glibc" in a root without the glibc loader); the aarch64 one's binaries run under
//!   qemu-user and pip refuses it here;
//! - `ncclenv install DIR` copies both binaries (mode 755), says what it copied, leaves identical files alone,
//!   and fails with exit 1 and a reason when DIR cannot be made.
//!
//! Needs git, cargo with rustup, binutils, python3 with venv, gcc-aarch64-linux-gnu (and network access to
//! PyPI for maturin once, unless scripts/tools.sh already installed it); skips without them, fails under
//! `CI=true`.

use crate::common;

use common::TempDir;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Prints why a test cannot run and returns false; under CI panics instead (`common::skip`).
fn cannot(why: &str) -> bool {
    common::skip(why)
}

/// Runs `c` (stdin from /dev/null); a start that meets "Text file busy" is retried (`common::exe`).
fn output(c: &mut Command) -> Output {
    common::exe::output(c.stdin(Stdio::null())).unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `c`, panicking with its output unless it succeeds; returns stdout.
fn ok(c: &mut Command) -> String {
    let o = output(c);
    assert!(
        o.status.success(),
        "{c:?} failed ({}):\n{}{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
    text(&o.stdout)
}

fn which(cmd: &str) -> Option<PathBuf> {
    let o = Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .ok()?;
    let p = text(&o.stdout).trim().to_string();
    (o.status.success() && !p.is_empty()).then(|| PathBuf::from(p))
}

/// The target directory cargo uses for this repository.
fn target_dir() -> PathBuf {
    let o = ok(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(root())
            .args(["metadata", "--no-deps", "--format-version", "1"]),
    );
    let v: serde_json::Value = serde_json::from_str(&o).expect("cargo metadata JSON");
    PathBuf::from(v["target_directory"].as_str().expect("target_directory"))
}

/// The fenced ```sh blocks of a Markdown text, in order.
fn sh_blocks(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in md.lines() {
        match (&mut cur, line.trim_start()) {
            (None, "```sh") => cur = Some(String::new()),
            (Some(_), "```") => out.extend(cur.take()),
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    out
}

fn machine_arch() -> String {
    ok(Command::new("uname").arg("-m")).trim().to_string()
}

#[test]
fn the_readme_quick_start_runs_on_a_clean_clone() {
    let (Some(_), Some(rustup)) = (which("git"), which("rustup")) else {
        cannot("git and rustup are needed");
        return;
    };
    let tmp = TempDir::new("quickstart");
    let clone = tmp.join("ncclenv");
    ok(Command::new("git")
        .args(["clone", "--quiet"])
        .arg(root())
        .arg(&clone));
    let readme = std::fs::read_to_string(clone.join("README.md")).expect("README.md in the clone");
    let blocks = sh_blocks(&readme);
    assert!(blocks.len() >= 2, "the README has no quick start blocks");
    // The test command says how to run it as root where sudo does not exist.
    assert!(
        blocks[1].contains("bash scripts/test.sh") && readme.contains("without sudo"),
        "{}",
        blocks[1]
    );

    // A rustup that says no target is installed (as on a fresh machine) and records what it is asked; it
    // hands `target add` to the real rustup.
    let stub = tmp.join("stub");
    std::fs::create_dir_all(&stub).expect("mkdir");
    let log = tmp.join("rustup.log");
    common::exe::write(
        &stub.join("rustup"),
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\ncase \"$*\" in 'target list --installed') exit 0 ;; esac\nexec '{}' \"$@\"\n",
            log.display(),
            rustup.display()
        ),
        0o755,
    );
    let path = format!(
        "{}:{}",
        stub.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Its own target directory, kept between runs (a build from scratch the first time).
    let target = target_dir().join("quickstart");
    let o = output(
        Command::new("bash")
            .args(["-e", "-c", &blocks[0]])
            .current_dir(&clone)
            .env("PATH", &path)
            .env("CARGO_TARGET_DIR", &target)
            .env_remove("NCCLENV_CHECK_HELPER")
            .env_remove("RUSTFLAGS"),
    );
    let out = text(&o.stdout);
    assert!(
        o.status.success(),
        "the quick start failed ({}):\n{out}\n{}",
        o.status,
        text(&o.stderr)
    );
    assert!(
        out.lines().any(|l| l.starts_with("NCCL_SOCKET_IFNAME=")),
        "the command did not get NCCL_SOCKET_IFNAME:\n{out}"
    );
    let asked = std::fs::read_to_string(&log).unwrap_or_default();
    let musl = format!("{}-unknown-linux-musl", machine_arch());
    assert!(
        asked.lines().any(|l| l == format!("target add {musl}")),
        "the quick start did not add the musl target: {asked}"
    );
    for f in ["dist/ncclenv", "dist/ncclenv-check"] {
        let m = std::fs::metadata(clone.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!(m.permissions().mode() & 0o777, 0o755, "{f}");
    }
    let desc = ok(Command::new("file").arg(clone.join("dist/ncclenv")));
    assert!(desc.contains("statically linked"), "{desc}");

    // `ncclenv check` finds its helper beside it (whatever NCCL then says on this machine).
    let o = output(
        Command::new(clone.join("dist/ncclenv"))
            .args(["check", "--json"])
            .env_remove("NCCLENV_CHECK_HELPER")
            .env("NCCLENV_CHECK_TIMEOUT", "30")
            .env("NCCLENV_LOG", "off"),
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("check --json: {e}: {}{}", text(&o.stdout), text(&o.stderr)));
    assert_ne!(v["error"]["stage"], "helper", "{v}");
    assert_eq!(
        v["helper"].as_str().map(PathBuf::from),
        Some(clone.join("dist/ncclenv-check")),
        "{v}"
    );
}

/// The ELF machine of a file (`e_machine`): 62 x86_64, 183 aarch64.
fn elf_machine(bytes: &[u8]) -> Option<u16> {
    (bytes.len() > 20 && bytes.starts_with(b"\x7fELF"))
        .then(|| u16::from_le_bytes([bytes[18], bytes[19]]))
}

/// True when the ELF file has no program interpreter (`PT_INTERP`): a static executable.
fn elf_is_static(bytes: &[u8]) -> bool {
    // 64-bit little-endian: e_phoff at 32, e_phentsize at 54, e_phnum at 56; PT_INTERP = 3.
    let rd = |o: usize, n: usize| -> u64 {
        bytes.get(o..o + n).map_or(0, |b| {
            b.iter().rev().fold(0u64, |a, x| (a << 8) | u64::from(*x))
        })
    };
    let (off, size, num) = (rd(32, 8) as usize, rd(54, 2) as usize, rd(56, 2) as usize);
    num > 0 && (0..num).all(|i| rd(off + i * size, 4) != 3)
}

/// The dynamic loader an ELF file names (`PT_INTERP`), if any.
fn elf_interp(bytes: &[u8]) -> Option<String> {
    let rd = |o: usize, n: usize| -> usize {
        bytes.get(o..o + n).map_or(0, |b| {
            b.iter()
                .rev()
                .fold(0usize, |a, x| (a << 8) | usize::from(*x))
        })
    };
    let (off, size, num) = (rd(32, 8), rd(54, 2), rd(56, 2));
    (0..num).find_map(|i| {
        let ph = off + i * size;
        (rd(ph, 4) == 3).then(|| {
            let (o, n) = (rd(ph + 8, 8), rd(ph + 32, 8));
            text(bytes.get(o..o + n).unwrap_or_default())
                .trim_end_matches('\0')
                .to_string()
        })
    })
}

/// The newest `GLIBC_2.N` version the file needs, as N (`readelf -V`, binutils).
fn glibc_minor(file: &Path) -> u32 {
    let o = ok(Command::new("readelf").args(["-V", "-W"]).arg(file));
    o.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .filter_map(|w| w.strip_prefix("GLIBC_2."))
        .filter_map(|m| m.parse::<u32>().ok())
        .max()
        .unwrap_or_else(|| panic!("{} needs no GLIBC_2.x version: {o}", file.display()))
}

/// The wheel of `arch` among `wheels`: `ncclenv-VERSION-py3-none-manylinux_2_N_ARCH.musllinux_1_1_ARCH.whl`.
fn wheel_of(wheels: &[PathBuf], arch: &str) -> PathBuf {
    wheels
        .iter()
        .find(|w| {
            let n = w.file_name().unwrap_or_default().to_string_lossy();
            n.starts_with(&format!("ncclenv-{VERSION}-py3-none-manylinux_2_"))
                && n.ends_with(&format!("_{arch}.musllinux_1_1_{arch}.whl"))
        })
        .cloned()
        .unwrap_or_else(|| panic!("no {arch} wheel: {wheels:?}"))
}

/// One unpacked wheel of `arch`: both binaries are the cargo builds (the static musl `ncclenv`, the glibc
/// `ncclenv-check` with its loader), and the wheel's tags are the glibc version the helper needs and
/// musllinux_1_1. Returns the unpacked folder.
fn unpack_and_check(python: &Path, wheel: &Path, arch: &str, dir: &Path) -> PathBuf {
    ok(Command::new(python)
        .args(["-m", "zipfile", "-e"])
        .arg(wheel)
        .arg(dir));
    let scripts = dir.join(format!("ncclenv-{VERSION}.data/scripts"));
    let target = target_dir();
    let machine = if arch == "x86_64" { 62 } else { 183 };
    let bin = std::fs::read(scripts.join("ncclenv")).expect("the wheel's ncclenv");
    assert_eq!(elf_machine(&bin), Some(machine), "{arch}");
    assert!(elf_is_static(&bin), "{arch} ncclenv is not static");
    let built = std::fs::read(target.join(format!("{arch}-unknown-linux-musl/release/ncclenv")));
    assert!(
        built.ok() == Some(bin),
        "the {arch} wheel's ncclenv is not the musl build"
    );
    let helper = std::fs::read(scripts.join("ncclenv-check")).expect("the wheel's ncclenv-check");
    assert_eq!(elf_machine(&helper), Some(machine), "{arch}");
    let loader = elf_interp(&helper).unwrap_or_default();
    assert!(
        loader.contains("ld-linux"),
        "{arch} helper loader {loader:?}"
    );
    let built =
        std::fs::read(target.join(format!("{arch}-unknown-linux-gnu/release/ncclenv-check")));
    assert!(
        built.ok() == Some(helper),
        "the {arch} wheel's helper is not the gnu build"
    );
    // The tag is the glibc the helper needs (2.34 when linked on glibc 2.34 or later).
    let n = glibc_minor(&scripts.join("ncclenv-check"));
    let tags: Vec<String> =
        std::fs::read_to_string(dir.join(format!("ncclenv-{VERSION}.dist-info/WHEEL")))
            .expect("WHEEL")
            .lines()
            .filter_map(|l| l.strip_prefix("Tag: ").map(str::to_string))
            .collect();
    assert_eq!(
        tags,
        [
            format!("py3-none-manylinux_2_{}_{arch}", n.max(17)),
            format!("py3-none-musllinux_1_1_{arch}")
        ]
    );
    dir.to_path_buf()
}

/// METADATA: the README as the long description (Markdown), the license expression, the project URLs.
fn check_metadata(unpacked: &Path) {
    let meta =
        std::fs::read_to_string(unpacked.join(format!("ncclenv-{VERSION}.dist-info/METADATA")))
            .expect("METADATA");
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    for line in [
        "Name: ncclenv",
        "License-Expression: Apache-2.0",
        "Description-Content-Type: text/markdown; charset=UTF-8; variant=GFM",
        "Project-URL: Homepage, ",
        "Project-URL: Repository, ",
        "Project-URL: Documentation, ",
        "Project-URL: Issues, ",
    ] {
        assert!(
            meta.lines().any(|l| l.starts_with(line)),
            "{line} missing:\n{meta}"
        );
    }
    let (_, body) = meta.split_once("\n\n").expect("METADATA's body");
    assert_eq!(
        body.trim_end(),
        readme.trim_end(),
        "the long description is not the README"
    );
}

/// A sample NCCL log with one WARN a user meets (a peer that closed its socket).
const SAMPLE_LOG: &str = "h1:10:10 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n\
h1:10:10 [0] misc/socket.cc:484 NCCL WARN socketProgress: Connection closed by remote peer 10.0.0.2<1234>\n";

/// Every subcommand of the venv's ncclenv, and `python -m ncclenv`, each with the result it must give here.
fn run_every_subcommand(venv: &Path, tmp: &TempDir) {
    let bin = venv.join("bin/ncclenv");
    let run = |args: &[&str], env: &[(&str, &OsStr)]| {
        output(
            Command::new(&bin)
                .args(args)
                .env_remove("NCCLENV_CHECK_HELPER")
                .env_remove("NCCLENV_NCCL_LIB")
                .env("NCCLENV_LOG", "off")
                .envs(env.iter().copied()),
        )
    };
    let code = |o: &Output| o.status.code();
    let o = run(&["--help"], &[]);
    assert_eq!(code(&o), Some(0));
    let page = text(&o.stdout);
    for sub in ncclenv::cli::subcommand_names() {
        assert!(page.contains(&format!(" {sub} ")), "--help names no {sub}");
        let o = run(&["help", sub], &[]);
        assert_eq!(code(&o), Some(0), "help {sub}");
        assert!(text(&o.stdout).starts_with("usage: ncclenv "), "{sub}");
    }
    common::assert_version(&text(&run(&["--version"], &[]).stdout));
    let py = venv.join("bin/python");
    common::assert_version(&ok(Command::new(&py).args(["-m", "ncclenv", "--version"])));
    // python -m ncclenv is the entrypoint too: the command runs with NCCL's variables, its exit status is ours.
    let o = output(
        Command::new(&py)
            .args([
                "-m",
                "ncclenv",
                "--",
                "sh",
                "-c",
                "echo \"$NCCL_SOCKET_FAMILY\"; exit 3",
            ])
            .env("NCCLENV_LOG", "off"),
    );
    assert_eq!(code(&o), Some(3), "{o:?}");
    assert!(text(&o.stdout).starts_with("AF_INET"), "{o:?}");
    let o = run(&["env"], &[]);
    assert_eq!(code(&o), Some(0), "{o:?}");
    assert!(
        text(&o.stdout).contains("export NCCL_SOCKET_IFNAME="),
        "{}",
        text(&o.stdout)
    );
    let o = run(&["doctor", "--json"], &[]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("doctor --json");
    assert!(matches!(code(&o), Some(0 | 1)), "{o:?}");
    assert!(v.is_object(), "{v}");
    run_check_and_explain(venv, &run);
    // install copies both binaries out of the venv.
    let dir = tmp.join("installed");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let o = run(&["install", &dir.to_string_lossy()], &[]);
    assert_eq!(code(&o), Some(0), "{o:?}");
    for name in ["ncclenv", "ncclenv-check"] {
        assert_eq!(
            std::fs::read(dir.join(name)).ok(),
            std::fs::read(venv.join("bin").join(name)).ok(),
            "{name}"
        );
    }
    let o = run(&["completions", "bash"], &[]);
    assert_eq!(code(&o), Some(0));
    let golden =
        std::fs::read(root().join("tests/golden/completions/ncclenv.bash")).expect("golden");
    assert!(
        o.stdout == golden,
        "completions bash is not the golden file"
    );
}

type Run<'a> = dyn Fn(&[&str], &[(&str, &OsStr)]) -> Output + 'a;

/// `check` and `explain` from the venv run in its ncclenv-check: the check passes with a real NCCL wheel
/// (exit 0), cannot run without libnccl (69, not 1); explain finds the sample's WARN (exit 1); and without a
/// glibc loader (a musl or scratch image: a chroot holding the two binaries) check says it needs glibc.
fn run_check_and_explain(venv: &Path, run: &Run<'_>) {
    let helper = venv.join("bin/ncclenv-check");
    let none = OsStr::new("/nonexistent/libnccl.so.2");
    let o = run(&["check", "--json"], &[("NCCLENV_NCCL_LIB", none)]);
    assert_eq!(o.status.code(), Some(69), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("check --json");
    assert_eq!(
        v["helper"].as_str().map(PathBuf::from),
        Some(helper.clone()),
        "{v}"
    );
    assert_ne!(v["error"]["stage"], "helper", "{v}");
    if let Some(w) = common::needs::nccl_wheels() {
        let lib = w.last().expect("a wheel").lib.clone();
        let o = run(
            &["check", "--json"],
            &[("NCCLENV_NCCL_LIB", lib.as_os_str())],
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("check --json");
        assert_eq!(o.status.code(), Some(0), "{v}");
    }
    let log = venv.join("sample.log");
    std::fs::write(&log, SAMPLE_LOG).expect("write the log");
    let o = run(&["explain", "--json", &log.to_string_lossy()], &[]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("explain --json");
    assert!(
        v["findings"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f["known"] == "peer-closed")),
        "{v}"
    );
    // No glibc loader: the two binaries alone in a root with /proc (as root, in a mount namespace).
    if !common::needs::is_root() {
        common::skip("chroot needs root");
        return;
    }
    let jail = venv.join("jail");
    std::fs::create_dir_all(jail.join("proc")).expect("mkdir");
    for name in ["ncclenv", "ncclenv-check"] {
        common::exe::copy(&venv.join("bin").join(name), &jail.join(name));
    }
    let o = output(
        Command::new("unshare")
            .args([
                "-m",
                "sh",
                "-c",
                "mount -t proc proc \"$1/proc\" && exec chroot \"$1\" /ncclenv check",
                "sh",
            ])
            .arg(&jail)
            .env("NCCLENV_LOG", "off"),
    );
    assert_eq!(o.status.code(), Some(69), "{o:?}");
    assert!(
        text(&o.stdout).contains("ncclenv-check needs glibc"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn the_wheels_install_offline_and_give_every_command() {
    let Some(python) = which("python3") else {
        cannot("no python3");
        return;
    };
    if ok(Command::new(&python).args(["-c", "import venv, zipfile; print('ok')"])).trim() != "ok" {
        cannot("python3 without venv");
        return;
    }
    if which("readelf").is_none() {
        cannot("no readelf (apt-get install binutils)");
        return;
    }
    let tmp = TempDir::new("wheel");
    let wheels = build_both_wheels(&tmp);
    let (x86, arm) = (wheel_of(&wheels, "x86_64"), wheel_of(&wheels, "aarch64"));
    let x86_dir = unpack_and_check(&python, &x86, "x86_64", &tmp.join("x86"));
    let arm_dir = unpack_and_check(&python, &arm, "aarch64", &tmp.join("arm"));
    check_metadata(&x86_dir);
    docs_name_the_wheel(&x86);
    pip_installs_offline_for_this_machine_only(&python, &tmp, &x86, &arm);
    aarch64_binaries_run_under_qemu(&arm_dir);
}

/// Runs scripts/build-wheel.sh for x86_64 and aarch64 into `tmp`/dist (once: it builds both targets).
/// Returns the two wheels.
fn build_both_wheels(tmp: &TempDir) -> Vec<PathBuf> {
    let dist = tmp.join("dist");
    let target = target_dir();
    let o = output(
        Command::new("bash")
            .arg(root().join("scripts/build-wheel.sh"))
            .args(["x86_64", "aarch64"])
            .current_dir(root())
            .env("OUT", &dist)
            .env("CARGO_TARGET_DIR", &target),
    );
    assert!(
        o.status.success(),
        "build-wheel.sh failed:\n{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let wheels: Vec<PathBuf> = std::fs::read_dir(&dist)
        .expect("dist")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    assert_eq!(wheels.len(), 2, "{wheels:?}");
    wheels
}

/// The README's and docs/images.md's Dockerfile name the wheel (`wheel`) as it is built.
fn docs_name_the_wheel(wheel: &Path) {
    let name = wheel
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    for doc in ["README.md", "docs/images.md"] {
        let t = std::fs::read_to_string(root().join(doc)).expect("doc");
        assert!(
            t.contains(&format!("COPY dist/{name} /tmp/")),
            "{doc} does not name {name}"
        );
    }
}

/// Offline, into a fresh venv (in `tmp`, made by `python`): on an x86_64 machine pip installs the `x86`
/// wheel, every subcommand runs from it, and the `arm` wheel is refused.
fn pip_installs_offline_for_this_machine_only(
    python: &Path,
    tmp: &TempDir,
    x86: &Path,
    arm: &Path,
) {
    let venv = tmp.join("venv");
    ok(Command::new(python).args(["-m", "venv"]).arg(&venv));
    let pip = |w: &Path| {
        output(
            Command::new(venv.join("bin/python"))
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--no-index",
                    "--no-cache-dir",
                    "--disable-pip-version-check",
                ])
                .arg(w),
        )
    };
    if machine_arch() == "x86_64" {
        let o = pip(x86);
        assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
        run_every_subcommand(&venv, tmp);
        // The other architecture's wheel is refused here.
        let o = pip(arm);
        assert!(
            !o.status.success(),
            "pip installed an aarch64 wheel on x86_64"
        );
        assert!(
            text(&o.stderr).contains("not a supported wheel"),
            "{}",
            text(&o.stderr)
        );
    }
}

/// The aarch64 binaries of the unpacked wheel (`arm_dir`) run under qemu-user (the helper with the cross
/// glibc of libc6-arm64-cross) and print the version.
fn aarch64_binaries_run_under_qemu(arm_dir: &Path) {
    let Some(q) = which("qemu-aarch64") else {
        cannot("no qemu-aarch64 (apt-get install qemu-user)");
        return;
    };
    let scripts = arm_dir.join(format!("ncclenv-{VERSION}.data/scripts"));
    for (name, pre) in [
        ("ncclenv", vec![]),
        ("ncclenv-check", vec!["-L", "/usr/aarch64-linux-gnu"]),
    ] {
        let f = scripts.join(name);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let v = ok(Command::new(&q).args(&pre).arg(&f).arg("--version"));
        assert!(v.contains(VERSION), "{name}: {v}");
    }
}

/// `ncclenv install DIR` on a read-only volume that already holds identical copies (prepared once, mounted
/// read-only into every pod) succeeds and says they are up to date; a missing parent is an error that creates
/// nothing (#24 item 7). The read-only volume is a real tmpfs remounted read-only in a private mount
/// namespace (`unshare -m`, as root).
#[test]
fn install_accepts_a_read_only_volume_and_refuses_a_missing_parent() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_ncclenv"));
    let tmp = TempDir::new("install-ro");
    let o = output(
        Command::new(&bin)
            .arg("install")
            .arg(tmp.join("no/such/bin")),
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        text(&o.stderr).contains("does not exist"),
        "{}",
        text(&o.stderr)
    );
    assert!(
        !tmp.join("no").exists(),
        "a missing parent must not be created"
    );
    if !common::needs::root("install on a read-only volume (mount in a private mount namespace)") {
        return;
    }
    let vol = tmp.join("vol");
    std::fs::create_dir_all(&vol).expect("mkdir");
    // Prepare the volume once (read-write), then remount it read-only and install again.
    let script = "set -e; mount -t tmpfs none \"$2\"; \"$1\" install \"$2\" >/dev/null;                   chmod 555 \"$2\"/ncclenv*; mount -o remount,ro \"$2\"; exec \"$1\" install \"$2\"";
    let o = output(
        Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", script, "sh"])
            .arg(&bin)
            .arg(&vol),
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(
        text(&o.stdout).matches("already up to date: ").count(),
        2,
        "{}",
        text(&o.stdout)
    );
}

/// `ncclenv install DIR` with the binary cargo built (`ncclenv-check` sits beside it in the same folder).
#[test]
fn install_copies_both_binaries_and_says_so() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_ncclenv"));
    let helper = PathBuf::from(env!("CARGO_BIN_EXE_ncclenv-check"));
    assert_eq!(
        bin.parent(),
        helper.parent(),
        "cargo puts both binaries in one folder"
    );
    let tmp = TempDir::new("install");
    let dir = tmp.join("emptydir/bin");
    std::fs::create_dir_all(tmp.join("emptydir")).expect("mkdir");
    install_copies_both_into_a_new_dir(&bin, &helper, &dir);
    install_again_copies_only_what_differs(&bin, &helper, &dir);
    install_refuses_a_dir_it_cannot_make_and_bad_usage(&bin, &tmp);
    install_without_a_helper_copies_ncclenv_alone(&bin, &tmp);
}

/// `bin install dir` (`dir` not there yet) copies `bin` and `helper` there, mode 755, names each copy and
/// the command to run; the installed ncclenv runs and finds its helper beside it.
fn install_copies_both_into_a_new_dir(bin: &Path, helper: &Path, dir: &Path) {
    let o = output(Command::new(bin).arg("install").arg(dir));
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let out = text(&o.stdout);
    for (name, src) in [("ncclenv", bin), ("ncclenv-check", helper)] {
        let dest = dir.join(name);
        let line = format!("copied {} to {} (", src.display(), dest.display());
        assert!(out.contains(&line), "{line} missing:\n{out}");
        assert_eq!(std::fs::read(&dest).ok(), std::fs::read(src).ok(), "{name}");
        let mode = std::fs::metadata(&dest).map(|m| m.permissions().mode() & 0o7777);
        assert_eq!(mode.ok(), Some(0o755), "{name}");
    }
    assert!(
        out.contains(&format!(
            "run: {} -- COMMAND",
            dir.join("ncclenv").display()
        )),
        "{out}"
    );
    // The installed ncclenv runs, and finds its helper beside it.
    let o = output(
        Command::new(dir.join("ncclenv"))
            .args(["--", "sh", "-c", "exit 5"])
            .env("NCCLENV_LOG", "off"),
    );
    assert_eq!(o.status.code(), Some(5));
}

/// `bin install dir` again (`dir` holds the copies of `bin` and `helper`): nothing to copy; a different
/// older file is replaced (through a rename: a running copy is never written in place).
fn install_again_copies_only_what_differs(bin: &Path, helper: &Path, dir: &Path) {
    let o = output(Command::new(bin).arg("install").arg(dir));
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        text(&o.stdout).matches("already up to date: ").count(),
        2,
        "{}",
        text(&o.stdout)
    );
    // A different older file is replaced (through a rename: a running copy is never written in place).
    std::fs::write(dir.join("ncclenv-check"), b"old").expect("write");
    let o = output(Command::new(bin).arg("install").arg(dir));
    assert!(text(&o.stdout).contains("copied "), "{}", text(&o.stdout));
    assert_eq!(
        std::fs::read(dir.join("ncclenv-check")).ok(),
        std::fs::read(helper).ok()
    );
}

/// `bin install` where DIR cannot be made (a file, in `tmp`, is in the way): exit 1, the reason, nothing on
/// stdout; and usage errors (exit 2): one directory, no command.
fn install_refuses_a_dir_it_cannot_make_and_bad_usage(bin: &Path, tmp: &TempDir) {
    // DIR cannot be made (a file is in the way): exit 1, the reason, nothing on stdout.
    let file = tmp.join("a-file");
    std::fs::write(&file, b"x").expect("write");
    let o = output(Command::new(bin).arg("install").arg(file.join("sub")));
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(o.stdout.is_empty());
    assert!(
        text(&o.stderr).starts_with("ncclenv: install: cannot create "),
        "{}",
        text(&o.stderr)
    );

    // Usage: one directory, no command.
    for args in [
        &["install"][..],
        &["install", "a", "b"][..],
        &["install", "a", "--", "true"][..],
    ] {
        let o = output(Command::new(bin).args(args));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
    }
}

/// A copy of `bin` without a helper beside it (in `tmp`) installs only ncclenv and says so; and `ncclenv
/// check` there says exactly how to get the helper (exit 69).
fn install_without_a_helper_copies_ncclenv_alone(bin: &Path, tmp: &TempDir) {
    let lone = tmp.join("lone");
    std::fs::create_dir_all(&lone).expect("mkdir");
    common::exe::copy(bin, &lone.join("ncclenv"));
    let o = output(
        Command::new(lone.join("ncclenv"))
            .arg("install")
            .arg(tmp.join("out2")),
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        text(&o.stdout).contains("no ncclenv-check beside"),
        "{}",
        text(&o.stdout)
    );
    assert!(!tmp.join("out2/ncclenv-check").exists());
    // And `ncclenv check` there says exactly how to get the helper.
    let o = output(
        Command::new(lone.join("ncclenv"))
            .args(["check", "--json"])
            .env_remove("NCCLENV_CHECK_HELPER")
            .env("NCCLENV_LOG", "off"),
    );
    // 69, not 1: the check could not run (README, exit codes), which a CI gate tells from NCCL failing.
    assert_eq!(o.status.code(), Some(69), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("check --json");
    assert_eq!(v["error"]["stage"], "helper", "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    for how in [
        "scripts/build.sh",
        "cargo build --release --bin ncclenv-check",
        "NCCLENV_CHECK_HELPER",
    ] {
        assert!(msg.contains(how), "{how} missing: {msg}");
    }
}

/// A version `1.88` / `1.88.0` as (major, minor, patch).
fn rust_version(v: &str) -> (u64, u64, u64) {
    let mut n = v.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    (
        n.next().unwrap_or(0),
        n.next().unwrap_or(0),
        n.next().unwrap_or(0),
    )
}

/// Cargo.toml's `rust-version` is the true minimum: at least every dependency's own `rust-version`, as
/// `cargo metadata` reports them for the Linux targets (libloading 0.9 needs 1.88).
#[test]
fn declared_rust_version_covers_every_dependency() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let o = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--filter-platform",
            "x86_64-unknown-linux-gnu",
            "--manifest-path",
            concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"),
        ])
        .stderr(Stdio::inherit())
        .output()
        .expect("cargo metadata");
    assert!(o.status.success(), "cargo metadata failed");
    let meta: serde_json::Value = serde_json::from_slice(&o.stdout).expect("metadata JSON");
    let ours = rust_version(env!("CARGO_PKG_RUST_VERSION"));
    let packages = meta["packages"].as_array().expect("packages");
    assert!(packages.len() > 10, "{} packages", packages.len());
    for p in packages {
        if let Some(v) = p["rust_version"].as_str() {
            assert!(
                rust_version(v) <= ours,
                "{} {} needs Rust {v}; Cargo.toml says {}",
                p["name"],
                p["version"],
                env!("CARGO_PKG_RUST_VERSION")
            );
        }
    }
}

/// build.rs, compiled alone and run as cargo runs it (`CARGO_MANIFEST_DIR`, the package as its directory),
/// in `dir` with `env`: its `NCCLENV_GIT_COMMIT=` value.
fn build_script_commit(bin: &Path, dir: &Path, env: &[(&str, &str)]) -> String {
    let out = ok(Command::new(bin)
        .current_dir(dir)
        .env("CARGO_MANIFEST_DIR", dir)
        .env_remove("NCCLENV_GIT_COMMIT")
        .envs(env.iter().copied()));
    out.lines()
        .find_map(|l| l.strip_prefix("cargo:rustc-env=NCCLENV_GIT_COMMIT="))
        .unwrap_or_else(|| panic!("build.rs printed no commit: {out}"))
        .to_string()
}

/// The commit `--version` names comes from build.rs: this checkout's HEAD; `NCCLENV_GIT_COMMIT` over it (the
/// Docker build, whose context has no `.git`); `unknown` in a source tree without `.git`, also when that tree
/// lies inside another repository (a vendored copy must not name its host's commit). A checkout also names
/// the git files a commit changes, so that cargo reruns it after the next commit.
#[test]
fn the_build_script_names_the_commit_or_unknown() {
    let Some(git) = which("git") else {
        cannot("git is needed");
        return;
    };
    let tmp = TempDir::new("buildrs");
    let bin = tmp.join("build-script");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    ok(Command::new(rustc)
        .args(["--edition", "2021", "-O", "-o"])
        .arg(&bin)
        .arg(root().join("build.rs")));
    let head = ok(Command::new(&git)
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(root()));
    let here = build_script_commit(&bin, root(), &[]);
    assert_eq!(
        here.strip_suffix("-dirty").unwrap_or(&here),
        head.trim(),
        "{here}"
    );
    let watched = ok(Command::new(&bin)
        .current_dir(root())
        .env("CARGO_MANIFEST_DIR", root())
        .env_remove("NCCLENV_GIT_COMMIT"));
    assert!(
        watched
            .lines()
            .any(|l| l.starts_with("cargo:rerun-if-changed=") && l.ends_with("/HEAD")),
        "{watched}"
    );
    assert_eq!(
        build_script_commit(&bin, root(), &[("NCCLENV_GIT_COMMIT", "0123456789ab")]),
        "0123456789ab"
    );
    // A tree without .git (as `docker build` copies it), alone and inside another repository.
    let host = tmp.join("host");
    let tree = host.join("vendor/ncclenv");
    std::fs::create_dir_all(&tree).expect("mkdir");
    std::fs::copy(root().join("Cargo.toml"), tree.join("Cargo.toml")).expect("copy");
    assert_eq!(build_script_commit(&bin, &tree, &[]), "unknown");
    ok(Command::new(&git).args(["init", "-q"]).arg(&host));
    ok(Command::new(&git)
        .args(["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q"])
        .args(["--allow-empty", "-m", "host"])
        .current_dir(&host));
    assert_eq!(build_script_commit(&bin, &tree, &[]), "unknown");
}
