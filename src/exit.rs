//! ncclenv's exit codes, named once. `main.rs`, `exec`, `doctor`, `report` and the check use these names;
//! README.md "Exit codes" and `ncclenv --help` say the same.
//!
//! When ncclenv runs as the entrypoint and all goes well, it has no exit code of its own: it is replaced by
//! the command (`execve`), whose exit code the job sees.

/// Success: `env` printed its lines, `doctor` found nothing to warn about, the check passed, `install` copied.
pub const OK: u8 = 0;

/// A diagnostic's "something is wrong": `doctor` with a finding of severity warn, `install` that could not
/// copy, `explain` that found something wrong. (`ncclenv check`'s failure is [`CHECK_FAILED`], the same
/// value.)
pub const FAILED: u8 = 1;

/// A usage error: one line naming the option or variable and what it accepts. Also the helper's usage
/// error (`check::protocol::EXIT_USAGE`).
pub const USAGE: u8 = 2;

/// An internal error (a panic) in `env`, `doctor` or `check` (`EX_SOFTWARE` from sysexits.h). As the
/// entrypoint, ncclenv runs the command with the environment it received instead.
pub const SOFTWARE: u8 = 70;

/// A refusal (`EX_CONFIG` from sysexits.h): NCCL would certainly fail and no repair exists, or
/// `NCCLENV_STRICT=1` and a strict finding. Also `doctor`'s verdict "would refuse" and `ncclenv check` where
/// the entrypoint would refuse.
pub const REFUSED: u8 = 78;

/// The command was found but cannot be executed (not executable, a directory, E2BIG…), as shells say it.
pub const CANNOT_EXECUTE: u8 = 126;

/// The command, or its interpreter (its `#!` line's program, an ELF binary's loader), was not found, as
/// bash 5.2 and dash say it.
pub const NOT_FOUND: u8 = 127;

/// `ncclenv check` ran and failed.
pub const CHECK_FAILED: u8 = FAILED;

/// `ncclenv check` could not run the check (no helper, its glibc loader missing, no libnccl): 69
/// (`EX_UNAVAILABLE` from sysexits.h, "a support program or file does not exist"), so that a CI gate tells
/// "not installed" from "NCCL fails".
pub const CHECK_UNAVAILABLE: u8 = 69;

/// 128 + N: interrupted by signal N during a check: the shells' convention for a command killed by a signal
/// (POSIX.1-2017 Shell Command Language, 2.8.2 "Exit Status for Commands"; bash's manual, "Exit Status").
pub const SIGNAL_BASE: u8 = 128;

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's exit-code table names every code here.
    #[test]
    fn readme_names_every_exit_code() {
        let readme = include_str!("../README.md");
        let table = readme
            .split("## Exit codes")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .unwrap_or("");
        for code in [
            USAGE,
            SOFTWARE,
            REFUSED,
            CANNOT_EXECUTE,
            NOT_FOUND,
            CHECK_UNAVAILABLE,
        ] {
            assert!(
                table.contains(&format!("\n| {code} |")),
                "README's exit codes lack {code}"
            );
        }
        assert!(table.contains(&format!("{SIGNAL_BASE}+N")));
        assert_eq!(CHECK_FAILED, FAILED);
    }
}
