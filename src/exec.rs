//! Replacing ncclenv with the command: the final environment, the PATH search, `execve`, and the exit codes
//! shells and Docker use (126 found but not executable, 127 not found). Mirrors glibc's `execvpe`: a file
//! without `#!` that the kernel refuses with `ENOEXEC` runs through `/bin/sh` (musl does not do this itself,
//! NCCL-FACTS §9).

use crate::plan::{Action, Plan};
use nix::errno::Errno;
use nix::sys::signal::{signal, sigprocmask, SigHandler, SigSet, SigmaskHow, Signal};
use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// glibc's default search path when `PATH` is unset (`_CS_PATH`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Why the command could not be started: the exit code and one line for stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecError {
    /// 127 (not found) or 126 (found but cannot be executed).
    pub code: i32,
    /// `ncclenv: COMMAND: reason`.
    pub message: String,
}

/// The command's environment: the inherited variables byte for byte, in their order, with the plan's
/// changes applied (a set replaces the value in place or is appended; an unset removes it).
pub fn final_env(inherited: &[(OsString, OsString)], plan: &Plan) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = inherited.to_vec();
    for c in &plan.changes {
        let name = OsString::from(&c.name);
        match &c.action {
            Action::Set { value } => {
                match env.iter_mut().find(|(k, _)| *k == name) {
                    Some(slot) => slot.1 = OsString::from(value),
                    None => env.push((name, OsString::from(value))),
                }
                // A duplicate entry later in the block would shadow ours for some readers: drop it.
                let mut seen = false;
                env.retain(|(k, _)| {
                    if *k != OsString::from(&c.name) {
                        return true;
                    }
                    let keep = !seen;
                    seen = true;
                    keep
                });
            }
            Action::Unset => env.retain(|(k, _)| *k != name),
        }
    }
    env
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

/// Replace this process with `cmd` (argv\[0\] as written) and `env`. Returns only on failure.
///
/// Search: a name containing `/` is executed as is; otherwise each `PATH` entry of `env` (the final
/// environment, an empty entry meaning the current directory) is tried in order: `ENOENT`/`ENOTDIR` go on,
/// `EACCES` is remembered and goes on, `ENOEXEC` runs the file through `/bin/sh FILE ARGS…`, anything else
/// stops. Exit codes: 127 when nothing was found, 126 when something was found but could not be run.
pub fn exec(cmd: &[OsString], env: &[(OsString, OsString)]) -> ExecError {
    let Some(prog) = cmd.first() else {
        return ExecError {
            code: 127,
            message: "ncclenv: no command".into(),
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
    };
    let mut argv: Vec<CString> = Vec::with_capacity(cmd.len());
    for a in cmd {
        match cstring(a.as_bytes()) {
            Some(c) => argv.push(c),
            None => return fail(126, "an argument contains a NUL byte"),
        }
    }
    let mut envp: Vec<CString> = Vec::with_capacity(env.len());
    for (k, v) in env {
        let mut kv = k.clone().into_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        if let Some(c) = cstring(&kv) {
            envp.push(c);
        }
    }
    if prog.is_empty() {
        return fail(127, "command not found");
    }
    reset_signals();
    let bytes = prog.as_bytes();
    if bytes.contains(&b'/') {
        return match try_exec(bytes, &argv, &envp) {
            Errno::ENOENT | Errno::ENOTDIR => fail(127, "No such file or directory"),
            // execve says EACCES for a directory; shells say what it is.
            Errno::EACCES if std::path::Path::new(prog).is_dir() => fail(126, "Is a directory"),
            e => fail(126, e.desc()),
        };
    }
    let path: OsString = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| OsString::from(DEFAULT_PATH));
    let mut denied: Option<Errno> = None;
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
            Errno::ENOENT | Errno::ENOTDIR | Errno::ESTALE | Errno::ENODEV | Errno::ETIMEDOUT => {}
            Errno::EACCES => denied = Some(Errno::EACCES),
            e => return fail(126, e.desc()),
        }
    }
    match denied {
        Some(e) => fail(126, e.desc()),
        None => fail(127, "command not found"),
    }
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
        let inh = vec![
            (OsString::from("A"), OsString::from("1")),
            (OsString::from("NCCL_SOCKET_IFNAME"), OsString::from("eth0")),
            (OsString::from("B"), OsString::from_vec(vec![0xff, 0xfe])),
            (OsString::from("GONE"), OsString::from("x")),
        ];
        let mut p = Plan::default();
        p.set("NCCL_SOCKET_IFNAME", "ens6", "r");
        p.set("NEW", "v", "r");
        p.unset("GONE", "r");
        let e = final_env(&inh, &p);
        assert_eq!(
            e,
            vec![
                (OsString::from("A"), OsString::from("1")),
                (OsString::from("NCCL_SOCKET_IFNAME"), OsString::from("ens6")),
                (OsString::from("B"), OsString::from_vec(vec![0xff, 0xfe])),
                (OsString::from("NEW"), OsString::from("v")),
            ]
        );
    }
}
