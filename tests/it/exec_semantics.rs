//! How the real `ncclenv` binary hands over to the command: exit codes (2 usage, 126, 127, the command's own),
//! argv and the environment byte for byte, the PATH search, scripts without `#!`, inherited file
//! descriptors (and none of ncclenv's own leaking), signal dispositions and mask, `NCCLENV_DISABLE`,
//! `NCCLENV_LOG=off`, `NO_COLOR`, and that no other variable (a secret) is ever printed.
//!
//! These run in the test's own network namespace and need no root: what ncclenv decides there does not
//! matter, only how it passes everything else on. Every run has a controlled environment: PATH, an empty
//! sysfs and devfs (no RDMA device, no GPU node) and `NCCLENV_SHM_MIN=0`, plus the test's own variables.

use crate::common;

use common::{TempDir, OURS};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_ncclenv");
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

type Vars = Vec<(OsString, OsString)>;

fn os(s: &str) -> OsString {
    OsString::from(s)
}

fn var(k: &str, v: &str) -> (OsString, OsString) {
    (os(k), os(v))
}

/// PATH, an empty sysfs and devfs under `tmp`, and `NCCLENV_SHM_MIN=0`.
fn base(tmp: &TempDir) -> Vars {
    for d in ["sys", "dev"] {
        std::fs::create_dir_all(tmp.join(d)).expect("mkdir");
    }
    vec![
        var("PATH", PATH),
        (os("NCCLENV_SYSFS"), tmp.join("sys").into_os_string()),
        (os("NCCLENV_DEVFS"), tmp.join("dev").into_os_string()),
        var("NCCLENV_SHM_MIN", "0"),
    ]
}

/// `ncclenv ARGS…` with exactly `vars` as its environment.
fn ncclenv<S: AsRef<OsStr>>(vars: &[(OsString, OsString)], args: &[S]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args).env_clear();
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

/// `/usr/bin/env -i K=V… ncclenv ARGS…`: the environment in exactly this order (Rust's `Command` sorts it).
fn ncclenv_ordered<S: AsRef<OsStr>>(vars: &[(OsString, OsString)], args: &[S]) -> Command {
    let mut c = Command::new("/usr/bin/env");
    c.env_clear().arg("-i");
    for (k, v) in vars {
        let mut kv = k.clone();
        kv.push("=");
        kv.push(v);
        c.arg(kv);
    }
    c.arg(BIN).args(args);
    c
}

fn output(c: &mut Command) -> Output {
    let out = common::exe::output(c).unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "panic text on stderr of {c:?}:\n{err}"
    );
    out
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write_exe(path: &Path, text: &str, mode: u32) {
    common::exe::write(path, text, mode);
}

/// Splits NUL-terminated records.
fn nul_split(b: &[u8]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = b.split(|c| *c == 0).map(<[u8]>::to_vec).collect();
    assert_eq!(v.pop(), Some(vec![]), "not NUL-terminated: {b:?}");
    v
}

/// `NAME=value` records → pairs, split at the first `=`.
fn env_pairs(b: &[u8]) -> Vars {
    nul_split(b)
        .into_iter()
        .map(|e| {
            let i = e.iter().position(|c| *c == b'=').expect("NAME=value");
            (
                OsString::from_vec(e[..i].to_vec()),
                OsString::from_vec(e[i + 1..].to_vec()),
            )
        })
        .collect()
}

fn is_ours(k: &OsStr) -> bool {
    OURS.iter().any(|o| OsStr::new(o) == k)
}

/// The `export NAME='value'` lines of `ncclenv env`, in order.
fn exports(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter_map(|l| {
            let (k, v) = l.strip_prefix("export ")?.split_once('=')?;
            let v = v
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .expect("single-quoted")
                .replace("'\\''", "'");
            Some((k.to_string(), v))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------------------
// Exit codes

#[test]
fn exit_127_when_the_command_is_not_found() {
    let tmp = TempDir::new("ex127");
    let mut vars = base(&tmp);
    vars.push(var("NCCLENV_LOG", "off"));
    let o = output(&mut ncclenv(&vars, &["--", "ncclenv-no-such-command"]));
    assert_eq!(o.status.code(), Some(127));
    assert_eq!(
        stderr(&o),
        "ncclenv: ncclenv-no-such-command: command not found\n"
    );
    assert!(o.stdout.is_empty());

    let missing = tmp.join("no-such-dir/cmd");
    let o = output(&mut ncclenv(&vars, &[os("--"), missing.clone().into()]));
    assert_eq!(o.status.code(), Some(127));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains(&missing.display().to_string()), "{e}");

    // With the default log level there is the summary too, but one line names the command.
    vars.pop();
    let o = output(&mut ncclenv(&vars, &["--", "ncclenv-no-such-command"]));
    assert_eq!(o.status.code(), Some(127));
    let e = stderr(&o);
    let naming: Vec<&str> = e
        .lines()
        .filter(|l| l.contains("ncclenv-no-such-command"))
        .collect();
    assert_eq!(
        naming,
        vec!["ncclenv: ncclenv-no-such-command: command not found"],
        "{e}"
    );
}

/// On a musl, scratch or distroless image the helper's glibc loader is missing: `explain` says that the helper
/// needs glibc (exit 2), not a bare "required file not found" (127). The helper here is the real
/// ncclenv-check with the loader's name in its PT_INTERP changed to one that does not exist.
#[test]
fn explain_without_the_glibc_loader_says_the_helper_needs_glibc() {
    let tmp = TempDir::new("explain-noloader");
    let mut elf = std::fs::read(env!("CARGO_BIN_EXE_ncclenv-check")).expect("the helper");
    let at = elf
        .windows(8)
        .position(|w| w == b"ld-linux")
        .expect("a glibc ELF names its loader ld-linux-*.so.N");
    let end = at
        + elf[at..]
            .iter()
            .position(|b| *b == 0)
            .expect("NUL-terminated");
    elf[end - 1] = b'9';
    let helper = tmp.join("ncclenv-check");
    common::exe::write(&helper, &elf, 0o755);
    let mut vars = base(&tmp);
    vars.push(var("NCCLENV_CHECK_HELPER", &helper.display().to_string()));
    let log = tmp.join("rank0.log");
    std::fs::write(
        &log,
        "host:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n",
    )
    .expect("log");
    let o = output(&mut ncclenv(&vars, &[os("explain"), log.into()]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("ncclenv-check needs glibc"), "{e}");
    assert!(
        e.contains("does not exist") || e.contains("not found"),
        "{e}"
    );
}

/// `docker run IMAGE doctor` with `ENTRYPOINT ["ncclenv", "--"]` runs `doctor` as the job's command: 127, and
/// the line says how to run ncclenv's own subcommand (#24 item 7). Any other missing name gets no hint.
#[test]
fn a_subcommand_name_as_the_command_says_how_to_run_it() {
    let tmp = TempDir::new("ex127sub");
    let mut vars = base(&tmp);
    vars.push(var("NCCLENV_LOG", "off"));
    for sub in ["doctor", "check", "explain"] {
        let o = output(&mut ncclenv(&vars, &["--", sub]));
        assert_eq!(o.status.code(), Some(127), "{sub}");
        let e = stderr(&o);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(
            e.starts_with(&format!("ncclenv: {sub}: command not found (")),
            "{e}"
        );
        assert!(
            e.contains(&format!("--entrypoint ncclenv IMAGE {sub}")),
            "{e}"
        );
        assert!(
            e.contains(&format!("kubectl exec POD -- ncclenv {sub} -- COMMAND")),
            "{e}"
        );
        assert!(e.trim_end().chars().count() <= 200, "{}: {e}", e.len());
    }
    let o = output(&mut ncclenv(&vars, &["--", "doctorr"]));
    assert_eq!(stderr(&o), "ncclenv: doctorr: command not found\n");
}

#[test]
fn exit_126_when_the_command_cannot_be_executed() {
    let tmp = TempDir::new("ex126");
    let mut vars = base(&tmp);
    vars.push(var("NCCLENV_LOG", "off"));
    let marker = tmp.join("ran");
    let file = tmp.join("not-executable");
    write_exe(
        &file,
        &format!("#!/bin/sh\ntouch '{}'\n", marker.display()),
        0o644,
    );
    let o = output(&mut ncclenv(&vars, &[os("--"), file.clone().into()]));
    assert_eq!(o.status.code(), Some(126), "{}", stderr(&o));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.starts_with(&format!("ncclenv: {}: ", file.display())),
        "{e}"
    );
    assert!(!marker.exists());

    // A directory.
    let o = output(&mut ncclenv(&vars, &[os("--"), tmp.path.clone().into()]));
    assert_eq!(o.status.code(), Some(126), "{}", stderr(&o));

    // Found by the PATH search but not executable: 126, not 127.
    let bin = tmp.join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    write_exe(&bin.join("ncclenv-t-noexec"), "#!/bin/sh\n", 0o644);
    let mut v = vars.clone();
    v[0] = (os("PATH"), format!("{}:{PATH}", bin.display()).into());
    let o = output(&mut ncclenv(&v, &["--", "ncclenv-t-noexec"]));
    assert_eq!(o.status.code(), Some(126), "{}", stderr(&o));
    assert!(stderr(&o).contains("ncclenv-t-noexec"));
}

#[test]
fn the_commands_exit_status_passes_through() {
    let tmp = TempDir::new("exst");
    let vars = base(&tmp);
    for n in [0, 1, 42, 77, 78, 126, 127, 255] {
        let o = output(&mut ncclenv(
            &vars,
            &["--", "sh", "-c", &format!("exit {n}")],
        ));
        assert_eq!(o.status.code(), Some(n), "exit {n}");
    }
    // ncclenv is replaced by the command: a signal that kills the command is the process's own status.
    let o = output(&mut ncclenv(&vars, &["--", "sh", "-c", "kill -TERM $$"]));
    assert_eq!(o.status.signal(), Some(15), "{:?}", o.status);
    // Same process: the command's pid is the one that was spawned.
    let child = ncclenv(&vars, &["--", "sh", "-c", "echo $$"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let o = child.wait_with_output().expect("wait");
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), pid.to_string());
}

/// Arguments, an extra variable, and what the message must name.
type UsageCase<'a> = (Vec<String>, Option<(&'a str, &'a str)>, &'a str);

#[test]
fn usage_errors_exit_2_naming_the_culprit() {
    let tmp = TempDir::new("exus");
    let marker = tmp.join("ran");
    let touch = ["touch".to_string(), marker.display().to_string()];
    let cases: Vec<UsageCase> = vec![
        (vec!["--".into()], None, "no command after --"),
        (vec![], None, "nothing to do"),
        (
            [&["--bogus".to_string(), "--".into()], &touch[..]].concat(),
            None,
            "--bogus",
        ),
        (
            [&["--nnodes=abc".to_string(), "--".into()], &touch[..]].concat(),
            None,
            "--nnodes",
        ),
        (
            [&["--".to_string()], &touch[..]].concat(),
            Some(("NCCLENV_NNODES", "abc")),
            "NCCLENV_NNODES",
        ),
        (
            [&["--".to_string()], &touch[..]].concat(),
            Some(("NCCLENV_LOG", "loud")),
            "NCCLENV_LOG",
        ),
        (
            [&["--".to_string()], &touch[..]].concat(),
            Some(("NCCLENV_STRICT", "maybe")),
            "NCCLENV_STRICT",
        ),
        (
            vec!["env".into()],
            Some(("NCCLENV_STRICT", "maybe")),
            "NCCLENV_STRICT",
        ),
    ];
    for (args, extra, names) in cases {
        let mut vars = base(&tmp);
        if let Some((k, v)) = extra {
            vars.push(var(k, v));
        }
        let o = output(&mut ncclenv(&vars, &args));
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?} {extra:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{args:?} {extra:?}: one line: {e}");
        assert!(
            e.starts_with("ncclenv: ") && e.contains(names),
            "{args:?} {extra:?}: the message names {names}: {e}"
        );
        if let Some((_, v)) = extra {
            assert!(e.contains(v), "the message shows the value {v}: {e}");
        }
        // `env` prints `exit 2` for the shell that evals it; nothing else prints on stdout.
        let want = if args.iter().take_while(|a| **a != "--").any(|a| *a == "env") {
            "exit 2\n"
        } else {
            ""
        };
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            want,
            "{args:?} {extra:?}"
        );
        assert!(!marker.exists(), "{args:?} {extra:?}: the command ran");
    }
}

// ---------------------------------------------------------------------------------------------------------
// argv, environment, PATH

/// Arguments that a shell or a lossy conversion would mangle.
fn odd_args() -> Vec<OsString> {
    vec![
        os("a b"),
        os("it's \"quoted\""),
        os(""),
        OsString::from_vec(vec![0xff, 0xfe, b'x', 0x80]),
        os("--nnodes=2"),
        os("*"),
        os("$HOME `id`"),
        os("line\nbreak\ttab"),
        os("--"),
        os("é ✓"),
    ]
}

#[test]
fn argv_passes_byte_for_byte_with_argv0_as_written() {
    let tmp = TempDir::new("exargv");
    let vars = base(&tmp);
    // The kernel's record of the command's argv: argv[0] is "sh" as written, not the resolved path.
    let out = tmp.join("cmdline");
    // `; exit 0`: keeps sh from exec-ing cat in its place.
    let script = "cat /proc/$$/cmdline > \"$1\"; exit 0";
    let mut args: Vec<OsString> = vec![
        os("--"),
        os("sh"),
        os("-c"),
        os(script),
        os("argv0"),
        out.clone().into(),
    ];
    args.extend(odd_args());
    let o = output(&mut ncclenv(&vars, &args));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let got = nul_split(&std::fs::read(&out).expect("cmdline"));
    let want: Vec<Vec<u8>> = args[1..].iter().map(|a| a.as_bytes().to_vec()).collect();
    assert_eq!(got, want);

    // A script that writes its arguments NUL-separated, run by absolute path and by a relative path.
    let dump = tmp.join("argdump");
    let file = tmp.join("args");
    write_exe(
        &dump,
        &format!("#!/bin/sh\nprintf '%s\\0' \"$@\" > '{}'\n", file.display()),
        0o755,
    );
    for prog in [dump.clone().into_os_string(), os("./argdump")] {
        let mut args = vec![os("--"), prog.clone()];
        args.extend(odd_args());
        let o = output(ncclenv(&vars, &args).current_dir(&tmp.path));
        assert_eq!(o.status.code(), Some(0), "{prog:?}: {}", stderr(&o));
        let got = nul_split(&std::fs::read(&file).expect("args"));
        let want: Vec<Vec<u8>> = odd_args().iter().map(|a| a.as_bytes().to_vec()).collect();
        assert_eq!(got, want, "{prog:?}");
    }
    // argv[0] exactly as written: a bare name is not replaced by the path found.
    let script = "cat /proc/$$/cmdline; exit 0";
    let o = output(&mut ncclenv(&vars, &["--", "sh", "-c", script]));
    assert_eq!(o.stdout, format!("sh\0-c\0{script}\0").into_bytes());
}

#[test]
fn environment_passes_byte_for_byte_except_ncclenvs_variables() {
    let tmp = TempDir::new("exenv");
    let mut vars: Vars = vec![
        var("ZZ_FIRST", "order is kept"),
        var("WITH_EQUALS", "a=b==c="),
        (
            os("NON_UTF8"),
            OsString::from_vec(vec![0xff, b'=', 0xfe, 0x80]),
        ),
        var("EMPTY", ""),
        var("SPACES", "  x  y  "),
        var("NEWLINE", "one\ntwo"),
        var("NCCL_DEBUG", "INFO"),
        var("SECRET_TOKEN", "hunter2"),
        var("AA_LAST", "z"),
    ];
    vars.extend(base(&tmp));
    let o = output(&mut ncclenv_ordered(
        &vars,
        &["--", "/bin/cat", "/proc/self/environ"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let got = env_pairs(&o.stdout);
    let theirs: Vars = got.iter().filter(|(k, _)| !is_ours(k)).cloned().collect();
    assert_eq!(
        theirs, vars,
        "the inherited environment, in order, byte for byte"
    );
    // ncclenv's own additions come after, and are exactly what `ncclenv env` exports.
    let added: Vec<(String, String)> = got[vars.len()..]
        .iter()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect();
    assert!(
        added.iter().all(|(k, _)| OURS.contains(&k.as_str())),
        "{added:?}"
    );
    let e = output(&mut ncclenv_ordered(&vars, &["env"]));
    assert_eq!(e.status.code(), Some(0), "{}", stderr(&e));
    let mut want = exports(&String::from_utf8_lossy(&e.stdout));
    let mut added_sorted = added.clone();
    want.sort();
    added_sorted.sort();
    assert_eq!(
        added_sorted, want,
        "the command got what `ncclenv env` exports"
    );
    assert!(
        added
            .iter()
            .any(|(k, v)| k == "NCCL_IB_DISABLE" && v == "1"),
        "no RDMA device in an empty sysfs: {added:?}"
    );

    // An inherited variable that ncclenv replaces keeps its place.
    let mut v2 = vars.clone();
    v2.insert(1, var("GLOO_SOCKET_IFNAME", "^lo,docker"));
    let o = output(&mut ncclenv_ordered(
        &v2,
        &["--", "/bin/cat", "/proc/self/environ"],
    ));
    let got = env_pairs(&o.stdout);
    assert_eq!(got[1].0, os("GLOO_SOCKET_IFNAME"));
    assert!(
        !got[1].1.as_bytes().starts_with(b"^"),
        "NCCL syntax in GLOO_SOCKET_IFNAME is repaired in place: {:?}",
        got[1]
    );
    assert_eq!(
        got.iter()
            .filter(|(k, _)| k == "GLOO_SOCKET_IFNAME")
            .count(),
        1
    );
}

#[test]
fn path_is_searched_in_order_after_ncclenvs_changes() {
    let tmp = TempDir::new("expath");
    let (d1, d2, d3) = (tmp.join("d1"), tmp.join("d2"), tmp.join("d3"));
    for d in [&d1, &d2, &d3] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let out = tmp.join("which");
    // d1: same name, not executable (skipped, EACCES remembered); d2: the real one.
    write_exe(&d1.join("ncclenv-t-cmd"), "#!/bin/sh\necho d1\n", 0o644);
    write_exe(
        &d2.join("ncclenv-t-cmd"),
        &format!("#!/bin/sh\necho d2 \"$0\" > '{}'\n", out.display()),
        0o755,
    );
    write_exe(
        &d3.join("ncclenv-t-only"),
        &format!("#!/bin/sh\necho d3 > '{}'\n", out.display()),
        0o755,
    );
    let mut vars = base(&tmp);
    vars[0] = (
        os("PATH"),
        format!("{}:{}:{}:{PATH}", d1.display(), d2.display(), d3.display()).into(),
    );
    let o = output(&mut ncclenv(&vars, &["--", "ncclenv-t-cmd"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(&out).expect("out"),
        format!("d2 {}/ncclenv-t-cmd\n", d2.display())
    );
    let o = output(&mut ncclenv(&vars, &["--", "ncclenv-t-only"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&out).expect("out"), "d3\n");

    // Not in PATH (only in the working directory): not found.
    std::fs::remove_file(&out).expect("rm");
    let mut v = vars.clone();
    v[0] = var("PATH", PATH);
    let o = output(ncclenv(&v, &["--", "ncclenv-t-only"]).current_dir(&d3));
    assert_eq!(o.status.code(), Some(127), "{}", stderr(&o));
    assert!(!out.exists());
    // An empty PATH entry is the working directory (as execvp).
    v[0] = (os("PATH"), format!("{PATH}:").into());
    let o = output(ncclenv(&v, &["--", "ncclenv-t-only"]).current_dir(&d3));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&out).expect("out"), "d3\n");
}

#[test]
fn a_script_without_shebang_runs_through_bin_sh() {
    let tmp = TempDir::new("exsh");
    let out = tmp.join("out");
    let script = tmp.join("noshebang");
    write_exe(
        &script,
        &format!("echo \"ran $# [$1] [$2]\" > '{}'\n", out.display()),
        0o755,
    );
    let bin = tmp.join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    common::exe::copy(&script, &bin.join("ncclenv-t-noshebang"));
    let mut vars = base(&tmp);
    vars[0] = (os("PATH"), format!("{}:{PATH}", bin.display()).into());
    let o = output(&mut ncclenv(
        &vars,
        &[os("--"), script.into(), os("a b"), os("")],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(&out).expect("out"),
        "ran 2 [a b] []\n"
    );
    std::fs::remove_file(&out).expect("rm");
    let o = output(&mut ncclenv(&vars, &["--", "ncclenv-t-noshebang", "x"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(&out).expect("out"),
        "ran 1 [x] []\n"
    );
}

// ---------------------------------------------------------------------------------------------------------
// File descriptors and signals

/// `sh -c 'exec 5>FILE; exec [ncclenv --] CMD…'`.
fn with_fd5(
    vars: &[(OsString, OsString)],
    file: &Path,
    through_ncclenv: bool,
    cmd: &[&str],
) -> Output {
    let mut c = Command::new("/bin/sh");
    c.env_clear()
        .args(["-c", "exec 5>\"$1\"; shift; exec \"$@\"", "sh"])
        .arg(file);
    if through_ncclenv {
        c.arg(BIN).arg("--");
    }
    c.args(cmd);
    for (k, v) in vars {
        c.env(k, v);
    }
    output(&mut c)
}

/// `ls -l /proc/self/fd` → (fd, target) with pipe and socket inodes dropped and ls's own descriptor on the
/// directory shown as `OWN`.
fn fd_listing(o: &Output) -> Vec<(u32, String)> {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    let listing = String::from_utf8_lossy(&o.stdout);
    let mut fds: Vec<(u32, String)> = listing
        .lines()
        .filter_map(|l| {
            let (left, target) = l.split_once(" -> ")?;
            let fd = left.rsplit(' ').next()?.parse().ok()?;
            let t = if target.starts_with("/proc/") && target.ends_with("/fd") {
                "OWN".to_string()
            } else {
                target.split(":[").next().unwrap_or(target).to_string()
            };
            Some((fd, t))
        })
        .collect();
    fds.sort();
    fds
}

#[test]
fn inherited_fds_stay_open_and_none_of_ncclenvs_leak() {
    let tmp = TempDir::new("exfd");
    let file = tmp.join("fd5");
    let mut vars = base(&tmp);
    let o = with_fd5(&vars, &file, true, &["/bin/sh", "-c", "echo hi >&5"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&file).expect("fd5"), "hi\n");

    // What the command sees without ncclenv in between (the test runner may pass descriptors of its own).
    let ls = ["/bin/ls", "-l", "/proc/self/fd"];
    let baseline = fd_listing(&with_fd5(&vars, &file, false, &ls));
    let file_s = file.display().to_string();
    assert!(baseline.contains(&(5, file_s)), "{baseline:?}");
    assert_eq!(baseline.iter().filter(|(_, t)| t == "OWN").count(), 1);
    // The same through ncclenv, also when the peer is a name that goes through the resolver thread.
    for peer in [None, Some("localhost")] {
        if let Some(p) = peer {
            vars.push(var("NCCLENV_PEER", p));
        }
        let got = fd_listing(&with_fd5(&vars, &file, true, &ls));
        assert_eq!(
            got, baseline,
            "peer {peer:?}: ncclenv added or lost a descriptor (e.g. its netlink socket)"
        );
    }
}

/// Parses `SigBlk`/`SigIgn` masks from /proc/PID/status text.
fn sig_mask(status: &str, field: &str) -> u64 {
    let line = status
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {status}"));
    u64::from_str_radix(line[field.len() + 1..].trim(), 16).expect("hex mask")
}

fn bit(sig: i32) -> u64 {
    1u64 << (sig - 1)
}

#[test]
fn the_command_gets_default_sigpipe_and_an_empty_signal_mask() {
    use nix::sys::signal::{signal, sigprocmask, SigHandler, SigSet, SigmaskHow, Signal};
    let tmp = TempDir::new("exsig");
    let vars = base(&tmp);
    // The parent blocks SIGUSR1 and SIGTERM, ignores SIGPIPE and SIGHUP (like nohup) before ncclenv starts.
    let mut c = ncclenv(&vars, &["--", "/bin/cat", "/proc/self/status"]);
    // SAFETY: only async-signal-safe calls (sigprocmask, sigaction with SIG_IGN) between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let mut set = SigSet::empty();
            set.add(Signal::SIGUSR1);
            set.add(Signal::SIGTERM);
            sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None)?;
            signal(Signal::SIGPIPE, SigHandler::SigIgn)?;
            signal(Signal::SIGHUP, SigHandler::SigIgn)?;
            Ok(())
        });
    }
    let o = output(&mut c);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let status = String::from_utf8_lossy(&o.stdout);
    assert_eq!(sig_mask(&status, "SigBlk"), 0, "signal mask not empty");
    let ign = sig_mask(&status, "SigIgn");
    assert_eq!(ign & bit(libc_sig(Signal::SIGPIPE)), 0, "SIGPIPE ignored");
    assert_ne!(
        ign & bit(libc_sig(Signal::SIGHUP)),
        0,
        "a signal the parent ignored (nohup) stays ignored"
    );

    // Without any of that in the parent: SIGPIPE still default (Rust ignores it inside ncclenv).
    let o = output(&mut ncclenv(
        &vars,
        &["--", "/bin/cat", "/proc/self/status"],
    ));
    let status = String::from_utf8_lossy(&o.stdout);
    assert_eq!(sig_mask(&status, "SigIgn") & bit(13), 0);
    assert_eq!(sig_mask(&status, "SigBlk"), 0);
    // And it acts: a writer into a closed pipe dies of SIGPIPE (exit 141 in sh) instead of seeing EPIPE. The
    // reader closes its end first and only then lets the writer go on (a FIFO handshake, not a sleep).
    let fifo = tmp.join("go");
    let o = output(&mut ncclenv(
        &vars,
        &[
            "--",
            "sh",
            "-c",
            "mkfifo \"$1\" && sh -c 'read _ <\"$1\"; echo x; echo after >&2' sh \"$1\" \
             | sh -c 'exec 0<&-; echo go >\"$1\"' sh \"$1\"",
            "sh",
            &fifo.display().to_string(),
        ],
    ));
    assert_eq!(
        o.status.code(),
        Some(0),
        "the pipeline's status is the reader's: {}",
        stderr(&o)
    );
    assert!(
        !stderr(&o).contains("after") && !stderr(&o).contains("Broken pipe"),
        "the writer survived a closed pipe: {}",
        stderr(&o)
    );
}

fn libc_sig(s: nix::sys::signal::Signal) -> i32 {
    s as i32
}

// ---------------------------------------------------------------------------------------------------------
// Switches and reporting

#[test]
fn disable_execs_without_changing_anything() {
    let tmp = TempDir::new("exdis");
    let mut vars = base(&tmp);
    vars.push(var("NCCL_SOCKET_IFNAME", "ncclenv-none0"));
    vars.push(var("GLOO_SOCKET_IFNAME", "^lo,docker"));
    vars.push(var("NCCLENV_DISABLE", "1"));
    vars.push((os("ODD"), OsString::from_vec(vec![0xff, b'=', b'x'])));
    let o = output(&mut ncclenv_ordered(
        &vars,
        &["--", "/bin/cat", "/proc/self/environ"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        env_pairs(&o.stdout),
        vars,
        "exactly the inherited environment"
    );
    let e = stderr(&o);
    assert!(!e.contains("warning"), "{e}");
    assert!(e.contains("NCCLENV_DISABLE"), "{e}");
    // The flag does the same.
    vars.pop();
    vars.retain(|(k, _)| k != "NCCLENV_DISABLE");
    let o = output(&mut ncclenv_ordered(
        &vars,
        &["--disable", "--", "/bin/cat", "/proc/self/environ"],
    ));
    assert_eq!(env_pairs(&o.stdout), vars);
    // Control: without it the broken values are repaired.
    let o = output(&mut ncclenv_ordered(
        &vars,
        &["--", "/bin/cat", "/proc/self/environ"],
    ));
    assert_ne!(env_pairs(&o.stdout), vars);
    // doctor and env report it (`disabled`) and change nothing; without it, no such finding.
    let codes = |v: &serde_json::Value| -> Vec<String> {
        v["decision"]["warnings"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|w| w["code"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut off = vars.clone();
    off.push(var("NCCLENV_DISABLE", "1"));
    let v = doctor_json(&off, &[]);
    assert_eq!(codes(&v), ["disabled"], "{v}");
    assert_eq!(v["decision"]["changes"], serde_json::json!([]), "{v}");
    let o = output(&mut ncclenv(&off, &["env"]));
    assert_eq!(o.status.code(), Some(0));
    assert!(exports(&String::from_utf8_lossy(&o.stdout)).is_empty());
    let v = doctor_json(&vars, &[]);
    assert!(!codes(&v).contains(&"disabled".to_string()), "{v}");
}

#[test]
fn log_off_prints_nothing_on_success() {
    let tmp = TempDir::new("exlog");
    let mut vars = base(&tmp);
    // A value that makes ncclenv warn at any other level.
    vars.push(var("NCCL_SOCKET_IFNAME", "ncclenv-none0"));
    let o = output(&mut ncclenv(&vars, &["--", "true"]));
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("ncclenv: warning: "), "{}", stderr(&o));
    for level in ["off", "OFF", "none"] {
        let mut v = vars.clone();
        v.push(var("NCCLENV_LOG", level));
        let o = output(&mut ncclenv(&v, &["--", "true"]));
        assert_eq!(o.status.code(), Some(0));
        assert_eq!(stderr(&o), "", "NCCLENV_LOG={level}");
        assert!(o.stdout.is_empty());
    }
    let o = output(&mut ncclenv(&vars, &["--log", "off", "--", "true"]));
    assert_eq!(stderr(&o), "");
    // warn: the warning, not the summary.
    let mut v = vars.clone();
    v.push(var("NCCLENV_LOG", "warn"));
    let o = output(&mut ncclenv(&v, &["--", "true"]));
    let e = stderr(&o);
    assert!(
        !e.is_empty() && e.lines().all(|l| l.starts_with("ncclenv: warning: ")),
        "{e}"
    );
}

#[test]
fn debug_level_adds_the_probed_facts() {
    let tmp = TempDir::new("exdbg");
    let mut vars = base(&tmp);
    vars.push(var("NCCLENV_LOG", "debug"));
    let o = output(&mut ncclenv(&vars, &["--", "true"]));
    assert_eq!(o.status.code(), Some(0));
    let e = stderr(&o);
    assert!(e.contains("ncclenv: debug: link lo (index 1) UP"), "{e}");
    assert!(e.contains("ncclenv: debug: job: "), "{e}");
    // Each variable set, with its reason.
    assert!(e.contains("ncclenv: debug: NCCL_SOCKET_FAMILY="), "{e}");
    // Plain words, never Rust's debug forms.
    for rust in ["Some(", "None", "Inet6", "[\""] {
        assert!(!e.contains(rust), "{rust} in {e}");
    }
    // info level: no debug lines.
    let o = output(&mut ncclenv(&base(&tmp), &["--", "true"]));
    assert!(!stderr(&o).contains("debug:"), "{}", stderr(&o));
}

/// Runs `ncclenv -- true` with a pseudo-terminal as stderr (`script`), returns what the terminal showed.
fn on_a_terminal(vars: &[(OsString, OsString)]) -> Option<Vec<u8>> {
    if Command::new("script").arg("--version").output().is_err() {
        common::skip("no `script` command (util-linux) for a pseudo-terminal");
        return None;
    }
    let mut c = Command::new("script");
    c.env_clear()
        .args(["-qec", &format!("{BIN} -- true"), "/dev/null"]);
    for (k, v) in vars {
        c.env(k, v);
    }
    let o = output(&mut c);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    Some(o.stdout)
}

#[test]
fn no_color_turns_escape_codes_off() {
    let tmp = TempDir::new("excol");
    let mut vars = base(&tmp);
    vars.push(var("NCCL_SOCKET_IFNAME", "ncclenv-none0"));
    // Control: on a terminal, warnings are coloured.
    let Some(tty) = on_a_terminal(&vars) else {
        return;
    };
    let text = String::from_utf8_lossy(&tty);
    assert!(text.contains("warning: "), "{text}");
    assert!(
        tty.contains(&0x1b),
        "colour expected on a terminal: {text:?}"
    );
    vars.push(var("NO_COLOR", "1"));
    let tty = on_a_terminal(&vars).expect("script");
    let text = String::from_utf8_lossy(&tty);
    assert!(text.contains("warning: "), "{text}");
    assert!(!tty.contains(&0x1b), "NO_COLOR=1 still coloured: {text:?}");
    // Not a terminal: never colour.
    vars.pop();
    let o = output(&mut ncclenv(&vars, &["--", "true"]));
    assert!(!o.stderr.contains(&0x1b));
}

#[test]
fn other_variables_are_never_printed() {
    let tmp = TempDir::new("exsec");
    let secrets = [
        "hunter2",
        "correct-horse-battery",
        "s3cr3tpw",
        "SECRET_TOKEN",
        "DB_PASSWORD",
    ];
    let mut vars = base(&tmp);
    vars.extend([
        var("SECRET_TOKEN", "hunter2"),
        var("DB_PASSWORD", "correct-horse-battery"),
        var("HTTP_PROXY", "http://alice:s3cr3tpw@proxy.example:3128"),
        var("https_proxy", "http://alice:s3cr3tpw@proxy.example:3128"),
        var("MASTER_ADDR", "127.0.0.1"),
        var("NCCL_SOCKET_IFNAME", "ncclenv-none0"),
        var("NCCLENV_LOG", "debug"),
    ]);
    let check = |what: &str, o: &Output, stdout_too: bool| {
        let e = stderr(o);
        let s = String::from_utf8_lossy(&o.stdout);
        for secret in secrets {
            assert!(!e.contains(secret), "{what}: stderr shows {secret}:\n{e}");
            if stdout_too {
                assert!(!s.contains(secret), "{what}: stdout shows {secret}:\n{s}");
            }
        }
    };
    let o = output(&mut ncclenv(&vars, &["--", "true"]));
    assert_eq!(o.status.code(), Some(0));
    check("exec", &o, true);
    for args in [
        &["env"][..],
        &["doctor"],
        &["doctor", "--json"],
        &["--", "ncclenv-no-such-command"],
    ] {
        let o = output(&mut ncclenv(&vars, args));
        assert!(!o.stdout.is_empty() || !o.stderr.is_empty(), "{args:?}");
        check(&format!("{args:?}"), &o, true);
    }
    // A usage error and a refusal print nothing of them either.
    let mut v = vars.clone();
    v.push(var("NCCLENV_STRICT", "maybe"));
    check("usage", &output(&mut ncclenv(&v, &["--", "true"])), true);
    let mut v = vars.clone();
    v.push(var("NCCLENV_STRICT", "1"));
    let o = output(&mut ncclenv(&v, &["--", "true"]));
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    check("refusal", &o, true);
}

// ---------------------------------------------------------------------------------------------------------
// A broken stdout or stderr never stops the job

/// stderr on `/dev/full` (every write fails with ENOSPC).
fn dev_full() -> std::process::Stdio {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full")
        .into()
}

/// The write end of a pipe whose reader is already closed (every write fails with EPIPE). Close-on-exec, so
/// that a child another test starts meanwhile does not inherit it (all tests share one process).
fn closed_pipe() -> std::process::Stdio {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    drop(r);
    w.into()
}

/// Not killed by a signal (abort), not a panic's 101.
fn no_crash(what: &str, st: std::process::ExitStatus) {
    assert_eq!(st.signal(), None, "{what}: killed by a signal: {st:?}");
    assert_ne!(st.code(), Some(101), "{what}: panicked: {st:?}");
}

#[test]
fn a_failing_stderr_never_keeps_the_command_from_running() {
    let tmp = TempDir::new("exfull");
    let vars = base(&tmp);
    // Every level that writes (info prints the summary, debug the probed facts), also with a warning.
    for level in ["info", "debug", "warn"] {
        let mut v = vars.clone();
        v.push(var("NCCLENV_LOG", level));
        v.push(var("NCCL_SOCKET_IFNAME", "ncclenv-none0"));
        for (name, err) in [
            ("/dev/full", dev_full as fn() -> std::process::Stdio),
            ("a closed pipe", closed_pipe),
        ] {
            let o = ncclenv(&v, &["--", "sh", "-c", "echo ran; exit 7"])
                .stdout(std::process::Stdio::piped())
                .stderr(err())
                .output()
                .expect("run");
            no_crash(&format!("{level}, stderr {name}"), o.status);
            assert_eq!(o.status.code(), Some(7), "{level}, stderr {name}");
            assert_eq!(
                String::from_utf8_lossy(&o.stdout),
                "ran\n",
                "{level}, {name}"
            );
        }
    }
    // The messages that are not log lines: exec failure, refusal, usage error keep their exit codes.
    let mut strict = vars.clone();
    strict.push(var("NCCLENV_STRICT", "1"));
    // A repair, which strict mode refuses.
    strict.push(var("NCCL_SOCKET_IFNAME", "ncclenv-none0"));
    let mut bad = vars.clone();
    bad.push(var("NCCLENV_LOG", "loud"));
    for (v, args, code) in [
        (&vars, &["--", "ncclenv-no-such-command"][..], 127),
        (&vars, &["--", "/"][..], 126),
        (&strict, &["--", "true"][..], 78),
        (&bad, &["--", "true"][..], 2),
        (&vars, &["--bogus"][..], 2),
    ] {
        let st = ncclenv(v, args)
            .stdout(std::process::Stdio::null())
            .stderr(dev_full())
            .status()
            .expect("run");
        no_crash(&format!("{args:?}"), st);
        assert_eq!(st.code(), Some(code), "{args:?}");
    }
}

#[test]
fn a_failing_stdout_never_panics() {
    let tmp = TempDir::new("expipe");
    let vars = base(&tmp);
    for args in [
        &["doctor"][..],
        &["doctor", "--json"],
        &["env"],
        &["--help"],
        &["--version"],
        &["check", "--json"],
    ] {
        let mut v = vars.clone();
        v.push(var("NCCLENV_CHECK_HELPER", "/nonexistent/ncclenv-check"));
        for (name, out) in [
            ("a closed pipe", closed_pipe as fn() -> std::process::Stdio),
            ("/dev/full", dev_full),
        ] {
            let o = ncclenv(&v, args)
                .stdout(out())
                .stderr(std::process::Stdio::piped())
                .output()
                .expect("run");
            let e = stderr(&o);
            no_crash(&format!("{args:?} > {name}"), o.status);
            assert!(!e.contains("panicked"), "{args:?} > {name}: {e}");
            let want: &[i32] = match args[0] {
                "doctor" => &[0, 1, 78],
                // No helper here: the check could not run (69).
                "check" => &[69],
                _ => &[0],
            };
            assert!(
                o.status.code().is_some_and(|c| want.contains(&c)),
                "{args:?} > {name}: {:?}\n{e}",
                o.status
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Usage details

#[test]
fn bad_numbers_and_peers_are_usage_errors_naming_the_variable() {
    let tmp = TempDir::new("exnum");
    let marker = tmp.join("ran");
    let touch = [
        "--".to_string(),
        "touch".into(),
        marker.display().to_string(),
    ];
    for (name, value, says) in [
        (
            "NCCLENV_CHECK_TIMEOUT",
            "18446744073709551615",
            "from 1 to 86400",
        ),
        ("NCCLENV_RESOLVE_TIMEOUT_MS", "600001", "from 1 to 600000"),
        ("NCCLENV_CHECK_MIB", "65537", "from 1 to 65536"),
        ("NCCLENV_CHECK_GPUS", "1025", "from 1 to 1024"),
        (
            "NCCLENV_SHM_MIN",
            "99999999999999999999",
            "from 0 to 1048576",
        ),
        ("NCCLENV_PEER", "10.0.0.1:abc", "port"),
        ("NCCLENV_PEER", "10.0.0.1:99999", "port"),
        ("NCCLENV_PEER", "[fd00::1", "']'"),
        ("NCCLENV_NNODES", "2:1", "minimum 2"),
    ] {
        let mut vars = base(&tmp);
        vars.push(var(name, value));
        vars.push(var("NCCLENV_CHECK", "bootstrap"));
        let o = output(&mut ncclenv(&vars, &touch));
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{name}={value}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(
            e.contains(name) && e.contains(value) && e.contains(says),
            "{name}={value}: {e}"
        );
        assert!(!marker.exists(), "{name}={value}: the command ran");
    }
    // The flags too.
    let vars = base(&tmp);
    for args in [
        &["--peer", "10.0.0.1:99999"][..],
        &["--peer=[fd00::1"],
        &["--check-timeout", "86401"],
    ] {
        let o = output(&mut ncclenv(
            &vars,
            &[args, &touch.each_ref().map(String::as_str)[..]].concat(),
        ));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(args[0].split('=').next().unwrap_or("")));
        assert!(!marker.exists());
    }
}

#[test]
fn usage_details_hint_once_value_before_double_dash_and_shell_like_messages() {
    let tmp = TempDir::new("exdet");
    let marker = tmp.join("ran");
    let mut vars = base(&tmp);
    let touch = ["touch".to_string(), marker.display().to_string()];
    // The "(see …--help)" hint once.
    let o = output(&mut ncclenv(&vars, &["--bogus", "--", "true"]));
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "ncclenv: unknown option --bogus (see ncclenv --help)\n"
    );
    // A valued option followed by -- does not eat it.
    for opt in ["--peer", "--nnodes", "--log"] {
        let o = output(&mut ncclenv(
            &vars,
            &[&[opt, "--"][..], &touch.each_ref().map(String::as_str)[..]].concat(),
        ));
        assert_eq!(o.status.code(), Some(2), "{opt}");
        assert!(
            stderr(&o).contains(&format!("{opt} needs a value")),
            "{}",
            stderr(&o)
        );
        assert!(!marker.exists(), "{opt}: the command ran");
    }
    vars.push(var("NCCLENV_LOG", "off"));
    // An empty command name is shown quoted.
    let o = output(&mut ncclenv(&vars, &["--", ""]));
    assert_eq!(o.status.code(), Some(127));
    assert_eq!(stderr(&o), "ncclenv: '': command not found\n");
    // A directory: 126, "Is a directory", as shells say.
    let dir = tmp.path.display().to_string();
    let o = output(&mut ncclenv(&vars, &["--", &dir]));
    assert_eq!(o.status.code(), Some(126));
    assert_eq!(stderr(&o), format!("ncclenv: {dir}: Is a directory\n"));
    // --help lists 128+N.
    let o = output(&mut ncclenv(&vars, &["--help"]));
    assert!(String::from_utf8_lossy(&o.stdout).contains("128+N"));
}

/// `doctor --json ARGS…` parsed.
fn doctor_json(vars: &[(OsString, OsString)], args: &[&str]) -> serde_json::Value {
    let o = output(&mut ncclenv(
        vars,
        &[&["doctor", "--json"][..], args].concat(),
    ));
    assert!(
        matches!(o.status.code(), Some(0 | 1 | 78)),
        "{args:?}: {:?}\n{}",
        o.status,
        stderr(&o)
    );
    serde_json::from_slice(&o.stdout).expect("doctor JSON")
}

#[test]
fn env_doctor_and_check_read_the_jobs_command_without_running_it() {
    let tmp = TempDir::new("exsub");
    let marker = tmp.join("ran");
    let m = marker.display().to_string();
    let mut vars = base(&tmp);
    vars.push(var("NCCLENV_CHECK_HELPER", "/nonexistent/ncclenv-check"));
    doctor_credits_the_job_to_its_sources(&vars, &m);
    env_and_check_read_the_command_and_run_only_themselves(&vars, &m);
    assert!(!marker.exists(), "the job's command ran");
}

/// doctor (with `vars`; `m`: the marker file a command that runs would create) reads the job from the
/// command and credits each fact to its source (launcher flags, --peer, NCCLENV_PEER, --nnodes); bad
/// launcher values and peers from the environment are problems, not silence.
fn doctor_credits_the_job_to_its_sources(vars: &[(OsString, OsString)], m: &str) {
    let d = doctor_json(
        vars,
        &[
            "--",
            "torchrun",
            "--nnodes=2",
            "--master-addr",
            "10.0.0.1",
            "t.py",
            m,
        ],
    );
    assert_eq!(d["job"]["nnodes"], 2, "{}", d["job"]);
    assert_eq!(d["job"]["source"], "--nnodes");
    assert_eq!(d["peer"]["source"], "--master-addr");
    assert_eq!(d["peer"]["host"], "10.0.0.1");
    // A peer given by --peer is credited to the flag, one given by NCCLENV_PEER to the variable; the flag
    // wins over the variable.
    let d = doctor_json(vars, &["--peer", "10.0.0.7"]);
    assert_eq!(d["peer"]["source"], "--peer", "{}", d["peer"]);
    let mut with_var = vars.to_vec();
    with_var.push(var("NCCLENV_PEER", "10.0.0.8"));
    let d = doctor_json(&with_var, &[]);
    assert_eq!(d["peer"]["source"], "NCCLENV_PEER", "{}", d["peer"]);
    let d = doctor_json(&with_var, &["--peer=10.0.0.7"]);
    assert_eq!(
        (&d["peer"]["source"], &d["peer"]["host"]),
        (&"--peer".into(), &"10.0.0.7".into())
    );
    // torchrun --standalone: one node.
    let d = doctor_json(vars, &["--", "torchrun", "--standalone", "t.py"]);
    assert_eq!(
        (&d["job"]["nnodes"], &d["job"]["source"]),
        (&1.into(), &"--standalone".into())
    );
    // ncclenv's own --nnodes says so.
    let d = doctor_json(vars, &["--nnodes", "3"]);
    assert_eq!(d["job"]["source"], "--nnodes/NCCLENV_NNODES");
    // Bad launcher values and peers from the environment are problems, not silence.
    let d = doctor_json(
        vars,
        &[
            "--",
            "python",
            "-m",
            "paddle.distributed.launch",
            "--nnodes",
            "2:1",
            "--master=:8090",
            "t.py",
        ],
    );
    let problems = d["job"]["problems"].to_string();
    assert!(
        problems.contains("--nnodes") && problems.contains("--master"),
        "{problems}"
    );
    let mut v = vars.to_vec();
    v.push(var("MASTER_ADDR", "a b"));
    let d = doctor_json(&v, &[]);
    assert!(
        d["job"]["problems"].to_string().contains("MASTER_ADDR"),
        "{}",
        d["job"]
    );
}

/// env reads the launcher argument (its problem is reported) and check runs the check (here it cannot run:
/// no helper, exit 69), neither the command (`touch m`, with `vars`); doctor and env take a command.
fn env_and_check_read_the_command_and_run_only_themselves(vars: &[(OsString, OsString)], m: &str) {
    // env: the launcher argument is read (its problem is reported); nothing runs.
    let o = output(&mut ncclenv(
        vars,
        &["env", "--", "torchrun", "--master-addr=:8090", "touch", m],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("export "));
    assert!(
        stderr(&o).contains("--master") && stderr(&o).contains("[launcher-argument]"),
        "{}",
        stderr(&o)
    );
    // check: runs the check (here it cannot run: no helper, exit 69), not the command.
    let o = output(&mut ncclenv(
        vars,
        &["check", "bootstrap", "--", "touch", m],
    ));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("COULD NOT RUN"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    for args in [
        &["doctor", "--", "touch", m][..],
        &["env", "--", "touch", m],
    ] {
        let o = output(&mut ncclenv(vars, args));
        assert_ne!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}

/// The test suite's CI switch (tests/it/common/needs.rs): the usual truthy spellings turn it on, anything else off.
#[test]
fn the_ci_switch_accepts_the_usual_truthy_values() {
    for v in ["1", "true", "TRUE", "True", "yes", "on", " true "] {
        assert!(common::truthy(v), "{v:?}");
    }
    for v in ["", "0", "false", "no", "off", "2", "y", "truee"] {
        assert!(!common::truthy(v), "{v:?}");
    }
}

/// The CLI helps: every subcommand has its own help page (`X --help`, `help X`), typos of flags and
/// subcommands get the nearest word, `--version` names the commit, and `NCCLENV_DISABLE` is echoed as given
/// (nothing at all with `NCCLENV_LOG=off`).
#[test]
fn help_pages_typo_suggestions_version_and_disable_echo() {
    let bin = BIN;
    let run = |args: &[&str], vars: &[(&str, &str)]| {
        Command::new(bin)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .envs(vars.iter().copied())
            .args(args)
            .output()
            .expect("run ncclenv")
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for sub in ["env", "doctor", "check", "install", "explain", "help"] {
        for args in [&[sub, "--help"][..], &["help", sub]] {
            let o = run(args, &[]);
            assert_eq!(o.status.code(), Some(0), "{args:?}");
            let page = text(&o.stdout);
            assert!(
                page.starts_with("usage: ncclenv ") && page.contains(sub),
                "{args:?}: {page}"
            );
            assert!(
                !page.contains("options (each also read"),
                "{args:?}: the global page"
            );
        }
    }
    for (args, want) in [
        (&["doctor", "--jsn"][..], "did you mean --json?"),
        (&["doctr"], "did you mean doctor?"),
        (&["check", "boot"], "did you mean bootstrap?"),
        (&["help", "chek"], "did you mean check?"),
    ] {
        let o = run(args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            text(&o.stderr).contains(want),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
    let o = run(&["check", "boot"], &[]);
    assert!(!text(&o.stderr).contains("off"), "{}", text(&o.stderr));
    let v = text(&run(&["--version"], &[]).stdout);
    assert!(v.starts_with("ncclenv ") && v.contains("(commit "), "{v}");
    let o = run(&["--", "true"], &[("NCCLENV_DISABLE", "yes")]);
    assert!(
        text(&o.stderr).contains("NCCLENV_DISABLE=yes: environment left untouched"),
        "{}",
        text(&o.stderr)
    );
    // The same line from the `tracing` facade (report::Logger) as a JSON record of kind `log`, and filtered out
    // below its level.
    let o = run(
        &["--", "true"],
        &[("NCCLENV_DISABLE", "yes"), ("NCCLENV_LOG_FORMAT", "json")],
    );
    let line = text(&o.stderr);
    let rec: serde_json::Value = serde_json::from_str(line.trim()).expect("one JSON record");
    assert_eq!(rec["kind"], "log", "{line}");
    assert_eq!(rec["level"], "info", "{line}");
    assert_eq!(
        rec["message"], "NCCLENV_DISABLE=yes: environment left untouched",
        "{line}"
    );
    let o = run(
        &["--", "true"],
        &[("NCCLENV_DISABLE", "yes"), ("NCCLENV_LOG", "warn")],
    );
    assert_eq!(text(&o.stderr), "");
    let o = run(
        &["--", "true"],
        &[("NCCLENV_DISABLE", "1"), ("NCCLENV_LOG", "off")],
    );
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(text(&o.stderr), "");
    // A malformed variable beside them is not said either (at NCCLENV_LOG=warn it is: reliability.rs).
    let o = run(
        &["--", "true"],
        &[
            ("NCCLENV_DISABLE", "1"),
            ("NCCLENV_LOG", "off"),
            ("NCCLENV_CHECK_TIMEOUT", "abc"),
        ],
    );
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(text(&o.stderr), "");
}
