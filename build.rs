//! Build script: the commit `ncclenv --version` names. `NCCLENV_GIT_COMMIT` when set (a build from a source
//! archive), else `git rev-parse --short=12 HEAD` (with `-dirty` when the work tree has changes), else
//! `unknown` (not in git, or no git).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git").args(args).output().ok()?;
    if !o.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=NCCLENV_GIT_COMMIT");
    let commit = std::env::var("NCCLENV_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            let head = git(&["rev-parse", "--short=12", "HEAD"]).filter(|h| !h.is_empty())?;
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            Some(if dirty { format!("{head}-dirty") } else { head })
        })
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=NCCLENV_GIT_COMMIT={commit}");
}
