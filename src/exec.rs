//! Replacing ncclenv with the command: the final environment, the PATH search, `execve`, and the exit codes
//! shells and Docker use (126 found but not executable, 127 not found). Mirrors glibc's `execvpe`: a file
//! without `#!` that the kernel refuses with `ENOEXEC` runs through `/bin/sh` (musl's `execvp`,
//! src/process/execvp.c, does not do this itself; glibc's posix/execvpe.c does).

use crate::environ::Environ;
use crate::plan::{Action, Plan};
use crate::probe::read;
use nix::errno::Errno;
use nix::sys::signal::{signal, sigprocmask, SigHandler, SigSet, SigmaskHow, Signal};
use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// glibc's default search path when `PATH` is unset (`_CS_PATH`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Why the command could not be started: the exit code and one line for stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecError {
    /// 127 (not found) or 126 (found but cannot be executed).
    pub code: i32,
    /// `ncclenv: COMMAND: reason` (the caller escapes it for the terminal).
    pub message: String,
    /// `execve` failed with `E2BIG`: the arguments and environment together exceed `ARG_MAX`.
    pub too_big: bool,
}

/// The command's environment: the inherited block byte for byte, in its order (entries without `=` and
/// duplicates of other names included), with the plan's changes applied ([`Environ::set`] replaces the first
/// entry of the name in place and drops later duplicates, or appends; [`Environ::unset`] removes all).
pub fn final_env(inherited: &Environ, plan: &Plan) -> Environ {
    let mut env = inherited.clone();
    for c in &plan.changes {
        match &c.action {
            Action::Set { value } => env.set(&c.name, OsStr::new(value)),
            Action::Unset => env.unset(&c.name),
        }
    }
    env
}

/// [`exec`] with `env`; when the kernel refuses it with `E2BIG` (ncclenv's additions pushed an environment
/// that was just under `ARG_MAX` over it) and `env` differs from `inherited`, warn and exec with `inherited`
/// untouched: the job runs as it would have without ncclenv. Returns only on failure.
pub fn exec_or_fallback(cmd: &[OsString], env: &Environ, inherited: &Environ) -> ExecError {
    let e = exec(cmd, env);
    if !e.too_big || env == inherited {
        return e;
    }
    tracing::warn!(
        "the command's arguments and environment with ncclenv's variables ({} bytes of environment) exceed \
         the kernel's limit (execve: E2BIG, Argument list too long); running it with the inherited \
         environment, unchanged [{}] (what to do: shrink the environment, or set ncclenv's variables \
         in the image)",
        env.exec_size(),
        crate::findings::Finding::ExecE2big.code()
    );
    exec(cmd, inherited)
}

fn cstring(b: &[u8]) -> Option<CString> {
    CString::new(b).ok()
}

/// Restore what a Rust program changes and a command expects at its defaults: SIGPIPE (Rust ignores it) back
/// to `SIG_DFL`, and an empty signal mask. Signals the parent set to `SIG_IGN` (nohup's SIGHUP) stay ignored,
/// as `execve` keeps them.
pub fn reset_signals() {
    // SAFETY-free: nix's `signal` is unsafe because handlers may be Rust fns; SIG_DFL is not a handler.
    unsafe {
        let _ = signal(Signal::SIGPIPE, SigHandler::SigDfl);
    }
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
}

/// Replace this process with `cmd` (argv\[0\] as written) and `env` (its entries as they are). Returns only
/// on failure.
///
/// Search: a name containing `/` is executed as is; otherwise each `PATH` entry of `env` (the final
/// environment, an empty entry meaning the current directory) is tried in order: `ENOENT`/`ENOTDIR` go on,
/// `EACCES` is remembered and goes on, `ENOEXEC` runs the file through `/bin/sh FILE ARGS…`, anything else
/// stops. Exit codes: 127 when nothing was found, 126 when something was found but could not be run.
///
/// `ENOENT` for a file that exists means its interpreter is missing: the program in its `#!` line, or the
/// dynamic loader an ELF binary names (`PT_INTERP`). That is reported as such, with 127 as bash 5.2 and dash
/// do ("cannot execute: required file not found", "not found"; bash up to 5.1 said "bad interpreter" and
/// exited 126). The files are looked at only after the search failed, so a successful start costs nothing.
pub fn exec(cmd: &[OsString], env: &Environ) -> ExecError {
    let Some(prog) = cmd.first() else {
        return ExecError {
            code: i32::from(crate::exit::NOT_FOUND),
            message: "ncclenv: no command".into(),
            too_big: false,
        };
    };
    // An empty name is shown quoted, as shells do (`'': command not found`), so that the line still names it.
    let shown = if prog.is_empty() {
        "''".to_string()
    } else {
        prog.to_string_lossy().into_owned()
    };
    let fail = |code: i32, why: &str| ExecError {
        code,
        message: format!("ncclenv: {shown}: {why}"),
        too_big: false,
    };
    let errno_fail = |e: Errno| ExecError {
        too_big: e == Errno::E2BIG,
        ..fail(i32::from(crate::exit::CANNOT_EXECUTE), e.desc())
    };
    let mut argv: Vec<CString> = Vec::with_capacity(cmd.len());
    for a in cmd {
        match cstring(a.as_bytes()) {
            Some(c) => argv.push(c),
            None => {
                return fail(
                    i32::from(crate::exit::CANNOT_EXECUTE),
                    "an argument contains a NUL byte",
                )
            }
        }
    }
    let envp: Vec<CString> = env
        .entries()
        .iter()
        .filter_map(|e| cstring(e.as_bytes()))
        .collect();
    if prog.is_empty() {
        return fail(i32::from(crate::exit::NOT_FOUND), "command not found");
    }
    reset_signals();
    let bytes = prog.as_bytes();
    if bytes.contains(&b'/') {
        return match try_exec(bytes, &argv, &envp) {
            Errno::ENOENT | Errno::ENOTDIR => match missing_interpreter(Path::new(prog)) {
                Some(why) => fail(i32::from(crate::exit::NOT_FOUND), &why),
                None => fail(
                    i32::from(crate::exit::NOT_FOUND),
                    "No such file or directory",
                ),
            },
            // execve says EACCES for a directory; shells say what it is.
            Errno::EACCES if Path::new(prog).is_dir() => {
                fail(i32::from(crate::exit::CANNOT_EXECUTE), "Is a directory")
            }
            e => errno_fail(e),
        };
    }
    let path: OsString = env
        .get("PATH")
        .map(OsStr::to_os_string)
        .unwrap_or_else(|| OsString::from(DEFAULT_PATH));
    let mut denied: Option<Errno> = None;
    let mut absent: Vec<Vec<u8>> = Vec::new();
    for dir in path.as_bytes().split(|b| *b == b':') {
        let mut full: Vec<u8> = if dir.is_empty() {
            Vec::new()
        } else {
            dir.to_vec()
        };
        if !full.is_empty() {
            full.push(b'/');
        }
        full.extend_from_slice(bytes);
        match try_exec(&full, &argv, &envp) {
            Errno::ENOENT => absent.push(full),
            Errno::ENOTDIR | Errno::ESTALE | Errno::ENODEV | Errno::ETIMEDOUT => {}
            Errno::EACCES => denied = Some(Errno::EACCES),
            e => return errno_fail(e),
        }
    }
    if let Some(e) = denied {
        return fail(i32::from(crate::exit::CANNOT_EXECUTE), e.desc());
    }
    // Not found, unless one of the places that said ENOENT holds the file: then its interpreter is missing.
    for full in absent {
        let p = OsString::from_vec(full);
        if let Some(why) = missing_interpreter(Path::new(&p)) {
            return ExecError {
                code: i32::from(crate::exit::NOT_FOUND),
                message: format!("ncclenv: {}: {why}", p.to_string_lossy()),
                too_big: false,
            };
        }
    }
    fail(i32::from(crate::exit::NOT_FOUND), "command not found")
}

/// Why `execve(path)` said `ENOENT` although `path` is a file: the interpreter of its `#!` line, or the
/// dynamic loader of an ELF binary (`PT_INTERP`), does not exist. `None` when `path` is not a regular file
/// (so the file itself is missing). Reads at most 64 KiB of the file's head (`probe::read`).
pub(crate) fn missing_interpreter(path: &Path) -> Option<String> {
    let head = read::read_head(path, 64 << 10).ok()?;
    if let Some(line) = head.strip_prefix(b"#!") {
        // The kernel reads the interpreter from the first 256 bytes (BINPRM_BUF_SIZE, fs/binfmt_script.c).
        let line = &line[..line.len().min(254)];
        let line = line.split(|b| *b == b'\n').next().unwrap_or(&[]);
        let interp: Vec<u8> = line
            .iter()
            .copied()
            .skip_while(|b| *b == b' ' || *b == b'\t')
            .take_while(|b| *b != b' ' && *b != b'\t' && *b != b'\r')
            .collect();
        let shown = String::from_utf8_lossy(&interp).into_owned();
        // The kernel ends the interpreter's name at a blank or the newline only (fs/binfmt_script.c): with
        // Windows line endings it looks for `/bin/sh\r`, which the message would show as `/bin/sh` (break-it
        // finding: "/bin/sh does not exist" on a host that has it).
        let lead = line
            .iter()
            .take_while(|b| **b == b' ' || **b == b'\t')
            .count();
        if line.get(lead + interp.len()) == Some(&b'\r') {
            return Some(format!(
                "cannot execute: its #! line names {shown} followed by a carriage return (the file has Windows \
                 CRLF line endings), and no {shown}\\r exists: convert the file (dos2unix, or sed -i 's/\\r$//')"
            ));
        }
        return Some(format!(
            "cannot execute: the interpreter named in its #! line, {shown}, does not exist"
        ));
    }
    if let Some(interp) = elf_interpreter(&head) {
        return Some(format!(
            "cannot execute: its ELF interpreter (dynamic loader) {interp} does not exist (a binary built for \
             another C library or architecture?)"
        ));
    }
    Some("cannot execute: required file not found".to_string())
}

/// The `PT_INTERP` path of an ELF file whose program headers and interpreter string lie within `head`
/// (ELF32/ELF64, either byte order; the System V gABI, "Program Header").
fn elf_interpreter(head: &[u8]) -> Option<String> {
    if head.len() < 52 || &head[..4] != b"\x7fELF" {
        return None;
    }
    let is64 = head[4] == 2;
    let le = head[5] != 2;
    let num = |at: usize, len: usize| -> Option<u64> {
        let b = head.get(at..at.checked_add(len)?)?;
        let mut v: u64 = 0;
        for i in 0..len {
            let byte = if le { b[len - 1 - i] } else { b[i] };
            v = (v << 8) | u64::from(byte);
        }
        Some(v)
    };
    let (phoff, phentsize, phnum) = if is64 {
        (num(32, 8)?, num(54, 2)?, num(56, 2)?)
    } else {
        (num(28, 4)?, num(42, 2)?, num(44, 2)?)
    };
    for i in 0..phnum.min(256) {
        let at = usize::try_from(phoff.checked_add(i.checked_mul(phentsize)?)?).ok()?;
        if num(at, 4)? != 3 {
            continue; // not PT_INTERP
        }
        let (off, size) = if is64 {
            (num(at + 8, 8)?, num(at + 32, 8)?)
        } else {
            (num(at + 4, 4)?, num(at + 16, 4)?)
        };
        let start = usize::try_from(off).ok()?;
        let end = start.checked_add(usize::try_from(size).ok()?)?;
        let s = head.get(start..end)?;
        let s = s.split(|b| *b == 0).next().unwrap_or(&[]);
        return Some(String::from_utf8_lossy(s).into_owned());
    }
    None
}

/// `execve(path)`, and on `ENOEXEC` `/bin/sh path args…` as glibc's `execvpe` does. Returns the errno that
/// stopped it.
fn try_exec(path: &[u8], argv: &[CString], envp: &[CString]) -> Errno {
    let Some(p) = cstring(path) else {
        return Errno::ENOENT;
    };
    let e = match nix::unistd::execve(&p, argv, envp) {
        Err(e) => e,
        Ok(never) => match never {},
    };
    if e != Errno::ENOEXEC {
        return e;
    }
    let mut sh_argv: Vec<CString> = Vec::with_capacity(argv.len() + 1);
    let Some(sh) = cstring(b"/bin/sh") else {
        return e;
    };
    sh_argv.push(sh.clone());
    sh_argv.push(p);
    sh_argv.extend(argv.iter().skip(1).cloned());
    match nix::unistd::execve(&sh, &sh_argv, envp) {
        Err(_) => e,
        Ok(never) => match never {},
    }
}

/// The name of the command for messages.
pub fn command_name(cmd: &[OsString]) -> String {
    cmd.first()
        .map(|c| OsStr::new(c).to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_env_replaces_in_place_appends_and_unsets() {
        let inh: Environ = vec![
            (OsString::from("A"), OsString::from("1")),
            (OsString::from("NCCL_SOCKET_IFNAME"), OsString::from("eth0")),
            (OsString::from("B"), OsString::from_vec(vec![0xff, 0xfe])),
            (OsString::from("GONE"), OsString::from("x")),
        ]
        .into_iter()
        .collect();
        let mut p = Plan::default();
        p.set("NCCL_SOCKET_IFNAME", "ens6", "r");
        p.set("NEW", "v", "r");
        p.unset("GONE", "r");
        let e = final_env(&inh, &p);
        let want: Environ = vec![
            (OsString::from("A"), OsString::from("1")),
            (OsString::from("NCCL_SOCKET_IFNAME"), OsString::from("ens6")),
            (OsString::from("B"), OsString::from_vec(vec![0xff, 0xfe])),
            (OsString::from("NEW"), OsString::from("v")),
        ]
        .into_iter()
        .collect();
        assert_eq!(e, want);
    }

    #[test]
    fn elf_and_script_interpreters_are_named() {
        let head = read::read_head(Path::new("/bin/sh"), 64 << 10).expect("/bin/sh");
        if head.starts_with(b"\x7fELF") {
            let i = elf_interpreter(&head);
            // A static /bin/sh has none; a dynamic one names its loader.
            if let Some(i) = i {
                assert!(i.starts_with('/'), "{i}");
            }
        }
        assert_eq!(elf_interpreter(b"\x7fELF"), None);
        assert_eq!(elf_interpreter(&[0u8; 100]), None);
    }

    /// A `#!` line with Windows line endings names the carriage return and how to convert the file (break-it
    /// finding); one that names a missing interpreter says so plainly.
    #[test]
    fn a_crlf_script_is_named_as_such() {
        let dir = std::env::temp_dir().join(format!("ncclenv-crlf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let crlf = dir.join("crlf.sh");
        std::fs::write(&crlf, b"#! /bin/sh\r\necho hi\r\n").expect("write");
        let why = missing_interpreter(&crlf).expect("a reason");
        assert!(
            why.contains("/bin/sh followed by a carriage return") && why.contains("dos2unix"),
            "{why}"
        );
        let missing = dir.join("missing.sh");
        std::fs::write(&missing, b"#!/nope/sh\necho hi\n").expect("write");
        let why = missing_interpreter(&missing).expect("a reason");
        assert!(why.contains("/nope/sh, does not exist"), "{why}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
