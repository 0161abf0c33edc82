//! The result of the decision: variables to set or unset, each with its reason; warnings with remedies; and a
//! verdict. `report` prints it, `env` turns it into shell lines, `exec` applies it.

use crate::findings::Finding;
/// How serious a finding is (defined with the findings table, which gives each code its severity).
pub use crate::findings::Severity;
use serde::{Deserialize, Serialize};

/// What to do with one environment variable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum Action {
    /// Set the variable to this value (replacing any inherited value).
    Set {
        /// The value exported.
        value: String,
    },
    /// Remove the variable from the command's environment.
    Unset,
}

/// One variable change, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Variable name, e.g. `NCCL_SOCKET_IFNAME`.
    pub name: String,
    /// Set or unset.
    #[serde(flatten)]
    pub action: Action,
    /// Why, in one sentence a user can act on.
    pub reason: String,
    /// The value inherited before the change, when it replaces one (a repair).
    pub replaced: Option<String>,
}

/// One finding as made, an info or a warning (its [`Severity`]): what was found and what the user can do.
/// Made by [`Plan::finding`]; the code stays a string here because a fleet verdict (`preflight`) may carry the
/// codes of another ncclenv version. (It was `Warning`, though it holds infos too.) The plan's list keeps the
/// name `warnings`, the key doctor's JSON has always had (`docs/doctor.schema.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    /// Stable identifier, e.g. `inherited-ifname-repaired` (every code: [`Finding`], `docs/findings.md`).
    pub code: String,
    /// Info or warn.
    pub severity: Severity,
    /// What was found.
    pub message: String,
    /// What the user can do about it.
    pub remedy: String,
    /// True when `NCCLENV_STRICT=1` turns this finding into a refusal (exit 78).
    pub strict_refuses: bool,
}

impl Note {
    /// The finding of this note's code, when this ncclenv knows it.
    pub fn finding(&self) -> Option<Finding> {
        Finding::from_code(&self.code)
    }
}

/// Run the command, or refuse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "lowercase")]
pub enum Verdict {
    /// Apply the changes and run the command.
    Proceed,
    /// Do not run the command; exit 78 (`EX_CONFIG`).
    Refuse {
        /// Why NCCL would certainly fail (or which strict finding refused).
        reason: String,
        /// What the container or job lacks, and how to provide it.
        remedy: String,
        /// The refusal's finding code (`docs/findings.md`): the strict finding that refused, the preflight's,
        /// or the refusal's own (`no-interface-multi-node`).
        code: String,
    },
}

/// The interface ncclenv settled on, for the summary line and the check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choice {
    /// Interface name.
    pub ifname: String,
    /// Its address NCCL will bootstrap on, when it has one.
    pub addr: Option<std::net::IpAddr>,
    /// How it was chosen, e.g. `route to peer 10.0.0.1 (MASTER_ADDR)`, `default route (metric 100)`,
    /// `inherited NCCL_SOCKET_IFNAME=eth1`.
    pub how: String,
}

/// Everything the decision produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    /// Variable changes, in the order they are reported.
    pub changes: Vec<Change>,
    /// Findings, in the order they were made.
    pub warnings: Vec<Note>,
    /// Run or refuse.
    pub verdict: Verdict,
    /// The interface NCCL will bootstrap on, when known.
    pub choice: Option<Choice>,
    /// True when ncclenv deliberately leaves the network alone (`NCCLENV_DISABLE=1`, `NCCL_COMM_ID`, or a probe
    /// failure under fail-open). Under `NCCL_COMM_ID` the `/dev/shm` rule still runs, so `changes` may hold
    /// `NCCL_SHM_DISABLE` (and `NCCLENV_DEBUG=1` its debug variables).
    pub hands_off: bool,
    /// Raise the soft RLIMIT_MEMLOCK to the hard limit before exec (the command inherits it; no privilege
    /// needed). Set by the RDMA rules.
    pub raise_memlock: bool,
    /// A folder that must exist before the command runs: where `NCCL_DEBUG_FILE` points under
    /// `NCCLENV_DEBUG=1` (NCCL opens its file with `fopen` and does not create folders). Set by `decide::debug`.
    #[serde(default)]
    pub debug_dir: Option<String>,
    /// Where NCCL's debug lines go under `NCCLENV_DEBUG=1` (the `NCCL_DEBUG_FILE` pattern, or the inherited
    /// setting), for the summary line.
    #[serde(default)]
    pub debug_files: Option<String>,
    /// The `/dev/shm` budget the shared-memory rule judged against (set by `decide::shm`; `None` when
    /// `/dev/shm` was not probed or the rule did not run).
    #[serde(default)]
    pub shm_need: Option<ShmNeed>,
}

/// The `/dev/shm` budget of the job on this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShmNeed {
    /// Ranks on this node: the launcher's local ranks, else the visible GPUs; `None` when unknown.
    pub ranks: Option<u32>,
    /// Where `ranks` came from (`--devices`, `PET_NPROC_PER_NODE`, `CUDA_VISIBLE_DEVICES`, …).
    pub ranks_source: String,
    /// Ranks counted in the budget: `ranks` (at least 2); 0 when unknown (no budget: nothing is judged).
    pub counted_ranks: u64,
    /// Segments counted per rank (`decide::shm::SEGMENTS_PER_GPU`).
    pub segments_per_rank: u64,
    /// Bytes of one segment ([`BufferSizes::segment_bytes`], defined in `decide::shm`).
    pub segment_bytes: u64,
    /// The buffers the segment is made of.
    pub buffers: BufferSizes,
    /// `NCCLENV_SHM_MIN` in MiB, when set (it replaces the computed need).
    pub override_mib: Option<u64>,
    /// Free bytes needed: `counted_ranks × segments_per_rank × segment_bytes`, or the override; 0 when the
    /// ranks are unknown and there is no override.
    pub need_bytes: u64,
}

/// NCCL's per-protocol buffer sizes in bytes, as `computeBuffSizes` (src/init.cc) sets them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferSizes {
    /// LL protocol buffer (`NCCL_LL_BUFFSIZE`).
    pub ll: u64,
    /// LL128 protocol buffer (`NCCL_LL128_BUFFSIZE`).
    pub ll128: u64,
    /// SIMPLE protocol buffer (`NCCL_BUFFSIZE`).
    pub simple: u64,
    /// The variables that changed a size, as `NAME=value (origin)`.
    pub set_by: Vec<String>,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            changes: Vec::new(),
            warnings: Vec::new(),
            verdict: Verdict::Proceed,
            choice: None,
            hands_off: false,
            raise_memlock: false,
            debug_dir: None,
            debug_files: None,
            shm_need: None,
        }
    }
}

impl Plan {
    /// Add a `Set` change.
    pub fn set(&mut self, name: &str, value: impl Into<String>, reason: impl Into<String>) {
        self.changes.retain(|c| c.name != name);
        self.changes.push(Change {
            name: name.to_string(),
            action: Action::Set {
                value: value.into(),
            },
            reason: reason.into(),
            replaced: None,
        });
    }
    /// Add a `Set` change that replaces an inherited value (a repair).
    pub fn repair(
        &mut self,
        name: &str,
        old: &str,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) {
        self.set(name, value, reason);
        if let Some(c) = self.changes.last_mut() {
            c.replaced = Some(old.to_string());
        }
    }
    /// Add an `Unset` change.
    pub fn unset(&mut self, name: &str, reason: impl Into<String>) {
        self.changes.retain(|c| c.name != name);
        self.changes.push(Change {
            name: name.to_string(),
            action: Action::Unset,
            reason: reason.into(),
            replaced: None,
        });
    }
    /// Add a finding: its code, severity and strict flag come from [`Finding`]; the message says what was
    /// found here, the remedy what the user can do.
    pub fn finding(&mut self, f: Finding, message: impl Into<String>, remedy: impl Into<String>) {
        self.finding_as(f, f.severity(), message, remedy);
    }
    /// Add a finding whose severity depends on where it is made (e.g. a warning on one node that is only worth
    /// knowing on another): `severity` instead of the code's own; an info never refuses under strict mode.
    pub fn finding_as(
        &mut self,
        f: Finding,
        severity: Severity,
        message: impl Into<String>,
        remedy: impl Into<String>,
    ) {
        self.warnings.push(Note {
            code: f.code().to_string(),
            severity,
            message: message.into(),
            remedy: remedy.into(),
            strict_refuses: f.strict_refuses() && severity == Severity::Warn,
        });
    }
    /// Refuse to run the command (exit 78) with finding code `code`. The first refusal wins.
    pub fn refuse(&mut self, code: &str, reason: impl Into<String>, remedy: impl Into<String>) {
        if self.verdict == Verdict::Proceed {
            self.verdict = Verdict::Refuse {
                reason: reason.into(),
                remedy: remedy.into(),
                code: code.to_string(),
            };
        }
    }
    /// The value this plan sets for `name`, if any.
    pub fn value_of(&self, name: &str) -> Option<&str> {
        self.changes.iter().find_map(|c| match &c.action {
            Action::Set { value } if c.name == name => Some(value.as_str()),
            _ => None,
        })
    }
    /// True when any warning (not info) was made.
    pub fn has_warnings(&self) -> bool {
        self.warnings.iter().any(|w| w.severity == Severity::Warn)
    }
}

/// Quote a value for POSIX `sh` in single quotes: `it's` → `'it'\''s'`.
pub fn shell_quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for ch in value.chars() {
        if ch == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(ch);
        }
    }
    out.push('\'');
    out
}

/// A `printf` format that prints `value` exactly, written in single quotes for POSIX `sh`: `%` as `%%`, `\\`
/// as `\\\\`, every byte of a character `text::escape` would escape as a three-digit octal escape `\\ooo`
/// (POSIX printf), `'` as `'\\''`. The line that carries it holds no control character.
pub fn printf_format(value: &str) -> String {
    let mut out = String::from("'");
    for c in value.chars() {
        match c {
            '%' => out.push_str("%%"),
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("'\\''"),
            c if crate::text::needs_escape(c) => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("\\{b:03o}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The plan as POSIX shell lines for `eval "$(ncclenv env)"`: `export NAME='value'` and `unset NAME`, one per
/// change, in order. A value with a control character (an interface name with an ESC in it) is written as
/// `export NAME="$(printf 'FORMAT')"` ([`printf_format`]), so that the lines themselves never carry a
/// control character to a terminal and `eval` still sets the exact value (a value never ends in a newline,
/// which `$(…)` would drop: interface names cannot hold whitespace). Variable names are ncclenv's own and
/// always valid shell identifiers.
pub fn shell_lines(plan: &Plan) -> String {
    let mut out = String::new();
    for c in &plan.changes {
        match &c.action {
            Action::Set { value } if value.chars().any(crate::text::needs_escape) => out.push_str(
                &format!("export {}=\"$(printf {})\"\n", c.name, printf_format(value)),
            ),
            Action::Set { value } => {
                out.push_str(&format!("export {}={}\n", c.name, shell_quote(value)))
            }
            Action::Unset => out.push_str(&format!("unset {}\n", c.name)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_handles_single_quotes_and_specials() {
        assert_eq!(shell_quote("eth0"), "'eth0'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote("$(rm -rf /)"), "'$(rm -rf /)'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn values_with_control_characters_export_through_printf() {
        let v = "e\x1bt'h%\\0\u{9b}";
        let mut p = Plan::default();
        p.set("NCCL_SOCKET_IFNAME", v, "r");
        let line = shell_lines(&p);
        assert!(
            !line.trim_end().chars().any(crate::text::needs_escape),
            "{line}"
        );
        // What sh makes of it.
        let o = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{line}printf '%s' \"$NCCL_SOCKET_IFNAME\""))
            .output()
            .expect("sh");
        assert_eq!(String::from_utf8_lossy(&o.stdout), v);
    }

    #[test]
    fn set_replaces_earlier_change_of_same_name() {
        let mut p = Plan::default();
        p.set("A", "1", "first");
        p.set("A", "2", "second");
        assert_eq!(p.changes.len(), 1);
        assert_eq!(p.value_of("A"), Some("2"));
        p.unset("A", "gone");
        assert_eq!(p.value_of("A"), None);
        assert_eq!(shell_lines(&p), "unset A\n");
    }

    #[test]
    fn findings_take_severity_and_strictness_from_the_enum() {
        let mut p = Plan::default();
        p.finding(Finding::RdmaMemlockLow, "m", "r");
        p.finding(Finding::RdmaUsable, "m", "r");
        p.finding_as(Finding::RdmaMemlockLow, Severity::Info, "m", "r");
        let got: Vec<(&str, Severity, bool)> = p
            .warnings
            .iter()
            .map(|w| (w.code.as_str(), w.severity, w.strict_refuses))
            .collect();
        assert_eq!(
            got,
            vec![
                ("rdma-memlock-low", Severity::Warn, true),
                ("rdma-usable", Severity::Info, false),
                ("rdma-memlock-low", Severity::Info, false),
            ]
        );
        assert_eq!(p.warnings[0].finding(), Some(Finding::RdmaMemlockLow));
        assert!(p.has_warnings());
    }

    #[test]
    fn first_refusal_wins() {
        let mut p = Plan::default();
        p.refuse("c1", "one", "r1");
        p.refuse("c2", "two", "r2");
        assert!(
            matches!(p.verdict, Verdict::Refuse { ref reason, ref code, .. } if reason == "one" && code == "c1")
        );
    }
}
