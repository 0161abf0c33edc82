//! `ncclenv completions bash|zsh|fish`, loaded into the real shells: each script passes the shell's own syntax
//! check (`bash -n`, `zsh -n`, `fish -n`; bash's also shellcheck), and completes as a user sees it: bash
//! registers `complete -F _ncclenv ncclenv` and its function answers in `COMPREPLY`, fish's `complete -C`
//! lists the candidates, zsh's `compinit` maps `ncclenv` to `_ncclenv`. The scripts are the golden files
//! (tests/golden/completions/, `src/completions.rs`).
//!
//! Needs bash, zsh and fish (scripts/test.sh installs them); skips without them, fails under `CI=true`.

use crate::common;

use common::TempDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn ncclenv() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ncclenv"))
}

fn output(c: &mut Command) -> Output {
    common::exe::output(c.stdin(Stdio::null())).unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The script `ncclenv completions SHELL` prints, written to `dir/ncclenv.SHELL`; it is the golden file.
fn script(dir: &Path, shell: &str) -> PathBuf {
    let o = output(ncclenv().args(["completions", shell]));
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(o.stderr.is_empty(), "{}", text(&o.stderr));
    let golden = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/golden/completions/ncclenv.{shell}"));
    assert_eq!(
        text(&o.stdout),
        std::fs::read_to_string(&golden).unwrap_or_default(),
        "{}",
        golden.display()
    );
    let path = dir.join(format!("ncclenv.{shell}"));
    std::fs::write(&path, &o.stdout).expect("write the script");
    path
}

/// True when `shell` runs here; otherwise skips (fails under CI).
fn have(shell: &str) -> bool {
    let ok = Command::new(shell)
        .args(["-c", "exit 0"])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success());
    ok || common::skip(&format!("no {shell} (apt-get install {shell})"))
}

/// Runs `shell -c code` (with `-n FILE` first: the syntax check); panics unless it succeeds; its stdout.
fn sh(shell: &str, args: &[&str]) -> String {
    let o = output(Command::new(shell).args(args).env("HOME", "/nonexistent"));
    assert!(
        o.status.success(),
        "{shell} {args:?} failed ({}):\n{}{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
    text(&o.stdout)
}

#[test]
fn bash_loads_the_script_and_completes_from_the_tables() {
    if !have("bash") {
        return;
    }
    let tmp = TempDir::new("compl-bash");
    let f = script(&tmp.join(""), "bash");
    let file = f.to_string_lossy().into_owned();
    sh("bash", &["-n", &file]);
    match Command::new("shellcheck").arg("--version").output() {
        Ok(_) => {
            sh("shellcheck", &["-s", "bash", &file]);
        }
        Err(_) => {
            common::skip("no shellcheck (apt-get install shellcheck)");
        }
    }
    // `t WORDS...` completes the last word as bash would (COMP_WORDS as bash splits: `=` is its own word).
    let code = format!(
        r#"source '{file}'
complete -p ncclenv
t() {{ COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); _ncclenv; echo "${{COMPREPLY[*]}}"; }}
t ncclenv doc
t ncclenv ''
t ncclenv check ''
t ncclenv check bootstrap ''
t ncclenv --log ''
t ncclenv --log = d
t ncclenv --log-format json ''
t ncclenv --strict doctor --js
t ncclenv help ch
t ncclenv completions ''
t ncclenv -- ncclenv-no-such-command-
t ncclenv --check ''
"#
    );
    let out = sh("bash", &["-c", &code]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "complete -F _ncclenv ncclenv",
            "doctor",
            "env doctor check install explain help completions",
            "bootstrap allreduce",
            "",
            "off error warn info debug",
            "debug",
            // --log-format's value is skipped: the next word is still the subcommand.
            "env doctor check install explain help completions",
            "--json",
            "check",
            "bash zsh fish",
            "",
            "off bootstrap allreduce",
        ],
        "{out}"
    );
}

#[test]
fn zsh_loads_the_script_and_compinit_maps_it() {
    if !have("zsh") {
        return;
    }
    let tmp = TempDir::new("compl-zsh");
    let f = script(&tmp.join(""), "zsh");
    let file = f.to_string_lossy().into_owned();
    sh("zsh", &["-n", &file]);
    // As a file of $fpath named _ncclenv (its #compdef line), and sourced after compinit.
    let fpath = tmp.join("fpath");
    std::fs::create_dir_all(&fpath).expect("mkdir");
    std::fs::copy(&f, fpath.join("_ncclenv")).expect("copy");
    let dump = tmp.join("zcompdump");
    let code = format!(
        "fpath=('{}' $fpath); autoload -U compinit; compinit -u -d '{}'; print -r -- $_comps[ncclenv]; \
         unset '_comps[ncclenv]'; source '{file}'; print -r -- $_comps[ncclenv]; whence -w _ncclenv",
        fpath.display(),
        dump.display()
    );
    let out = sh("zsh", &["-f", "-c", &code]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["_ncclenv", "_ncclenv", "_ncclenv: function"],
        "{out}"
    );
}

#[test]
fn fish_loads_the_script_and_completes_from_the_tables() {
    if !have("fish") {
        return;
    }
    let tmp = TempDir::new("compl-fish");
    let f = script(&tmp.join(""), "fish");
    let file = f.to_string_lossy().into_owned();
    sh("fish", &["-n", &file]);
    let line = |cmdline: &str| -> Vec<String> {
        let code = format!("source '{file}'; complete -C '{cmdline}'");
        sh("fish", &["--no-config", "-c", &code])
            .lines()
            .map(|l| l.split('\t').next().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(line("ncclenv doc"), ["doctor"]);
    assert_eq!(line("ncclenv check "), ["allreduce", "bootstrap"]);
    assert_eq!(line("ncclenv completions "), ["bash", "fish", "zsh"]);
    assert_eq!(
        line("ncclenv --log "),
        ["debug", "error", "info", "off", "warn"]
    );
    assert_eq!(line("ncclenv doctor --js"), ["--json"]);
    let subs = line("ncclenv ");
    for s in [
        "env",
        "doctor",
        "check",
        "install",
        "explain",
        "help",
        "completions",
    ] {
        assert!(subs.iter().any(|x| x == s), "{s}: {subs:?}");
    }
    // After -- the words are the job's: ncclenv's flags are not offered.
    assert_eq!(line("ncclenv -- python --js"), Vec::<String>::new());
}

#[test]
fn completions_takes_one_known_shell() {
    for (args, want) in [
        (&["completions"][..], "completions takes one shell"),
        (
            &["completions", "bash", "zsh"][..],
            "completions takes one shell",
        ),
        (&["completions", "bsh"][..], "did you mean bash?"),
        (&["completions", "tcsh"][..], "(expected bash, zsh or fish)"),
        (
            &["completions", "bash", "--", "x"][..],
            "completions takes one shell",
        ),
    ] {
        let o = output(ncclenv().args(args));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        assert!(o.stdout.is_empty(), "{args:?}");
        assert!(
            text(&o.stderr).contains(want),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
    let o = output(ncclenv().args(["completions", "--help"]));
    assert_eq!(o.status.code(), Some(0));
    assert!(
        text(&o.stdout).starts_with("usage: ncclenv completions bash|zsh|fish"),
        "{}",
        text(&o.stdout)
    );
}
