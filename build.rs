//! Build script: the commit `ncclenv --version` names. `NCCLENV_GIT_COMMIT` when set (a build from a source
//! archive, or `docker build --build-arg NCCLENV_GIT_COMMIT=…`: the image's context has no `.git`), else
//! `git rev-parse --short=12 HEAD` (with `-dirty` when tracked files have changes), else `unknown` (not in
//! git, or no git: a fresh source tree without `.git`, maturin's sdist).
//!
//! Cargo reruns a build script that prints `rerun-if-*` lines only when they say so (The Cargo Book, "Build
//! Scripts", `cargo::rerun-if-changed`): the files that move with a commit (`HEAD`, the branch's ref,
//! `packed-refs`, the index) and the sources (for `-dirty`) are named, so a new commit is never built with
//! the old one's name.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git").args(args).output().ok()?;
    if !o.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// `rerun-if-changed` for the git files a commit or a checkout changes (in a worktree `--git-dir` holds
/// HEAD and the index, `--git-common-dir` the refs), each only when it exists: Cargo reruns every time
/// for a path that does not.
fn watch_git() {
    let dir = git(&["rev-parse", "--git-dir"]);
    let common = git(&["rev-parse", "--git-common-dir"]);
    let head_ref = git(&["symbolic-ref", "-q", "HEAD"]);
    let mut paths = Vec::new();
    if let Some(d) = &dir {
        paths.push(Path::new(d).join("HEAD"));
        paths.push(Path::new(d).join("index"));
    }
    if let Some(c) = &common {
        paths.push(Path::new(c).join("packed-refs"));
        if let Some(r) = &head_ref {
            paths.push(Path::new(c).join(r));
        }
    }
    for p in paths.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
}

/// The linker script that leaves the unwind tables out of the static entrypoint: every input's `.eh_frame`
/// but the C runtime's own (`crtbegin*.o` registers its frame table at start-up and refers to it, and
/// `crtend*.o` ends it) and every `.gcc_except_table` (the landing pads those tables point to). With
/// `panic = "abort"` and ncclenv's own panic hook, which prints no backtrace (src/main.rs `on_panic`),
/// nothing reads them: no unwinding ever runs. `INSERT BEFORE .rodata` adds this rule to the linker's default
/// script instead of replacing it (GNU ld manual, "INSERT"; lld accepts the same). 217 KB of the file,
/// docs/performance.md "Size under 1.5 MiB".
const NO_UNWIND_TABLES: &str = "\
SECTIONS
{
  /DISCARD/ : {
    *(EXCLUDE_FILE(*crtbegin*.o *crtend*.o) .eh_frame) *(.eh_frame.*)
    *(.gcc_except_table) *(.gcc_except_table.*)
  }
}
INSERT BEFORE .rodata;
";

/// Link the `ncclenv` binary of a musl target (the static entrypoint) with [`NO_UNWIND_TABLES`], written to
/// `OUT_DIR`. The argument goes to the linker directly when Cargo links with lld (`RUSTC_LINKER`, set from
/// `.cargo/config.toml`'s `linker = "rust-lld"` for aarch64) and through the C compiler driver otherwise.
/// Other targets (the glibc helper, the tests) link as before.
fn link_without_unwind_tables() {
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    if std::env::var("CARGO_CFG_TARGET_ENV").as_deref() != Ok("musl") {
        return;
    }
    let Ok(out) = std::env::var("OUT_DIR") else {
        return;
    };
    let script = Path::new(&out).join("no-unwind-tables.ld");
    if std::fs::write(&script, NO_UNWIND_TABLES).is_err() {
        return;
    }
    let lld = std::env::var("RUSTC_LINKER").is_ok_and(|l| l.ends_with("lld"));
    let arg = if lld {
        format!("-T{}", script.display())
    } else {
        format!("-Wl,-T,{}", script.display())
    };
    println!("cargo:rustc-link-arg-bin=ncclenv={arg}");
}

fn main() {
    link_without_unwind_tables();
    println!("cargo:rerun-if-env-changed=NCCLENV_GIT_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=Cargo.toml");
    let commit = std::env::var("NCCLENV_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            // Only this crate's own repository: a source tree without `.git` unpacked inside another
            // repository (a vendored copy, a monorepo) must not name that one's commit.
            let top = git(&["rev-parse", "--show-toplevel"])?;
            let here = std::env::var("CARGO_MANIFEST_DIR").ok()?;
            let same = |a: &str, b: &str| {
                std::fs::canonicalize(a)
                    .ok()
                    .zip(std::fs::canonicalize(b).ok())
                    .is_some_and(|(a, b)| a == b)
            };
            if !same(&top, &here) {
                return None;
            }
            watch_git();
            let head = git(&["rev-parse", "--short=12", "HEAD"]).filter(|h| !h.is_empty())?;
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            Some(if dirty { format!("{head}-dirty") } else { head })
        })
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=NCCLENV_GIT_COMMIT={commit}");
}
