//! `NCCLENV_DEBUG=1` (`--debug`): turn on NCCL's own logs for the command, one file per host and process, with
//! the subsystems that show initialisation, the environment, the bootstrap and the network for the NCCL the
//! command will load, and the launcher's own distributed-debug switch. Only what is unset is set: an inherited
//! value (environment or NCCL config file) is kept, with a warning when it hides the bootstrap line.
//!
//! Why per version: the guides' `NCCL_DEBUG_SUBSYS=INIT,ENV,NET` shows `Bootstrap : Using eth0:…` on NCCL ≤ 2.22
//! (logged under `INIT`) but hides it from 2.23 on (logged under `BOOTSTRAP`, src/bootstrap.cc); `BOOTSTRAP` is
//! a name NCCL knows since 2.21, older versions skip a name they do not know, and 2.30 drops a whole value with
//! an unknown name (see [`crate::nccl_log`]). Measured with the pinned wheels 2.21.5 and 2.27.7
//! (tests/it/explain.rs).

use crate::config::{Config, DEFAULT_DEBUG_DIR};
use crate::decide::inherit::{settle, Fix, Inherited, Said, Verdict};
use crate::findings::Finding;
use crate::nccl_log::{
    bootstrap_subsystem, escape_debug_file, level_shows_info, subsystem_enabled, version_code,
    BOOTSTRAP_SUBSYS_SINCE,
};
use crate::plan::Plan;
use crate::snapshot::{Framework, Snapshot};

/// The file name NCCL writes in the debug folder: one per host (`%h`) and process (`%p`), expanded by NCCL
/// (src/debug.cc, `ncclDebugInit`).
pub const DEBUG_FILE_NAME: &str = "nccl.%h.%p.log";

/// Versions that stand for "unknown" when no NCCL install with a version was found: one that logs the
/// bootstrap under `INIT` (2.22) and one under `BOOTSTRAP` (2.27).
const UNKNOWN_VERSIONS: [u32; 2] = [22200, 22707];

/// The NCCL versions the command may load (from the installs found, `ncclGetVersion` encoding), and whether the
/// list is complete (every install's version known and at least one install found).
fn candidate_versions(snap: &Snapshot) -> (Vec<u32>, bool) {
    let mut v: Vec<u32> = snap
        .nccl_installs
        .iter()
        .filter_map(|i| i.version.as_deref().and_then(version_code))
        .collect();
    v.sort_unstable();
    v.dedup();
    let complete = !snap.nccl_installs.is_empty()
        && snap.nccl_installs.iter().all(|i| i.version.is_some())
        && !v.is_empty();
    (v, complete)
}

/// `NCCL_DEBUG_SUBSYS` for these versions: `INIT,ENV,NET`, plus `BOOTSTRAP` unless every version is known to
/// log its bootstrap line under `INIT` (before 2.23). With an unknown version `BOOTSTRAP` is included: every
/// version accepts it (known since 2.21; skipped as unknown before).
pub fn subsystems_for(versions: &[u32], complete: bool) -> String {
    let needs_bootstrap = !complete || versions.iter().any(|v| *v >= BOOTSTRAP_SUBSYS_SINCE);
    if needs_bootstrap {
        "INIT,ENV,NET,BOOTSTRAP".to_string()
    } else {
        "INIT,ENV,NET".to_string()
    }
}

fn versions_text(versions: &[u32], complete: bool) -> String {
    if versions.is_empty() {
        return "the NCCL version the command loads is unknown".to_string();
    }
    let list: Vec<String> = versions
        .iter()
        .map(|v| crate::nccl_errors::version_string(*v as i32))
        .collect();
    format!(
        "the command can load NCCL {}{}",
        list.join(", "),
        if complete {
            ""
        } else {
            " (and one of unknown version)"
        }
    )
}

/// Decide the debug variables (see the module documentation). Sets `plan.debug_dir` when NCCL's files go to a
/// folder that must exist before the command runs, and `plan.debug_files` to where NCCL's lines go.
pub fn decide_debug(snap: &Snapshot, cfg: &Config, plan: &mut Plan) {
    if !cfg.debug {
        return;
    }
    let (versions, complete) = candidate_versions(snap);
    debug_level(snap, plan);
    debug_subsystems(snap, &versions, complete, plan);
    debug_file(snap, cfg, plan);
    framework_debug(snap, plan);
}

/// `NCCL_DEBUG=INFO` when unset; `debug-hides-bootstrap` when the inherited level hides INFO lines.
fn debug_level(snap: &Snapshot, plan: &mut Plan) {
    let Some(inh) = Inherited::nccl("NCCL_DEBUG", snap) else {
        plan.set(
            "NCCL_DEBUG",
            "INFO",
            "NCCLENV_DEBUG=1: NCCL logs its initialisation, interfaces and errors",
        );
        return;
    };
    let (v, origin) = (inh.value, &inh.origin);
    let verdict = if level_shows_info(v) {
        Verdict::Works
    } else {
        Verdict::risky(Said::new(
            Finding::DebugHidesBootstrap,
            format!("NCCLENV_DEBUG=1 keeps the inherited NCCL_DEBUG={v} (from {origin}): NCCL will write only its WARN lines, not the interface it bootstraps on"),
            "unset NCCL_DEBUG (ncclenv then sets INFO), or set NCCL_DEBUG=INFO",
        ))
    };
    settle(plan, Fix::REPAIRS, &inh, verdict);
}

/// `NCCL_DEBUG_SUBSYS` for the NCCL versions the command can load (`versions`; `complete` false when one is
/// of unknown version) when unset; `debug-hides-bootstrap` when the inherited list hides the bootstrap line
/// of one of them.
fn debug_subsystems(snap: &Snapshot, versions: &[u32], complete: bool, plan: &mut Plan) {
    let judged: Vec<u32> = if complete {
        versions.to_vec()
    } else {
        versions.iter().copied().chain(UNKNOWN_VERSIONS).collect()
    };
    let vtext = versions_text(versions, complete);
    let wanted = subsystems_for(versions, complete);
    match Inherited::nccl("NCCL_DEBUG_SUBSYS", snap) {
        None => plan.set(
            "NCCL_DEBUG_SUBSYS",
            wanted.clone(),
            format!(
                "{vtext}; INIT, ENV and NET show initialisation, settings and the network{}",
                if wanted.contains("BOOTSTRAP") {
                    "; NCCL 2.23+ logs the bootstrap interface under BOOTSTRAP (older versions skip a name they do not know)"
                } else {
                    "; these versions log the bootstrap interface under INIT"
                }
            ),
        ),
        Some(inh) => {
            let (v, origin) = (inh.value, &inh.origin);
            let hidden: Vec<String> = judged
                .iter()
                .filter(|ver| !subsystem_enabled(**ver, Some(v), bootstrap_subsystem(**ver)))
                .map(|ver| {
                    format!(
                        "NCCL {} logs it under {}",
                        crate::nccl_errors::version_string(*ver as i32),
                        bootstrap_subsystem(*ver)
                    )
                })
                .collect();
            let verdict = if hidden.is_empty() {
                Verdict::Works
            } else {
                Verdict::risky(Said::new(
                    Finding::DebugHidesBootstrap,
                    format!(
                        "NCCLENV_DEBUG=1 keeps the inherited NCCL_DEBUG_SUBSYS={v} (from {origin}), which hides the bootstrap line ({}; {vtext})",
                        hidden.join("; ")
                    ),
                    format!("unset NCCL_DEBUG_SUBSYS (ncclenv then sets {wanted}), or add the missing subsystem"),
                ))
            };
            settle(plan, Fix::REPAIRS, &inh, verdict);
        }
    }
}

/// `NCCL_DEBUG_FILE` in `NCCLENV_DEBUG_DIR` when unset (with `plan.debug_dir`, the folder to create), and
/// `plan.debug_files`, where NCCL's lines go.
fn debug_file(snap: &Snapshot, cfg: &Config, plan: &mut Plan) {
    match Inherited::nccl("NCCL_DEBUG_FILE", snap) {
        None => {
            let dir = cfg
                .debug_dir
                .as_ref()
                .map(|d| d.display().to_string())
                .unwrap_or_else(|| DEFAULT_DEBUG_DIR.to_string());
            let dir = dir.trim_end_matches('/').to_string();
            let dir = if dir.is_empty() { "/".to_string() } else { dir };
            let file = format!(
                "{}/{DEBUG_FILE_NAME}",
                escape_debug_file(if dir == "/" { "" } else { &dir })
            );
            plan.set(
                "NCCL_DEBUG_FILE",
                file.clone(),
                format!("one file per host (%h) and process (%p) in {dir} (NCCLENV_DEBUG_DIR); read them with ncclenv explain"),
            );
            plan.debug_dir = Some(dir);
            plan.debug_files = Some(file);
        }
        Some(inh) => {
            // Kept: where NCCL writes is the user's choice.
            plan.debug_files = Some(format!("{} (inherited from {})", inh.value, inh.origin));
            settle(plan, Fix::REPAIRS, &inh, Verdict::Works);
        }
    }
}

/// The launcher framework's own debug switches (PyTorch, Paddle), each only when unset; an inherited one is
/// kept through the one rule (it works: the user chose the level).
fn framework_debug(snap: &Snapshot, plan: &mut Plan) {
    let framework_var =
        |plan: &mut Plan, name: &str, value: &str, reason: &str| match Inherited::env(name, snap) {
            Some(inh) => settle(plan, Fix::REPAIRS, &inh, Verdict::Works),
            None => plan.set(name, value, reason),
        };
    match snap.job.framework {
        Some(Framework::PyTorch) => {
            framework_var(
                plan,
                "TORCH_CPP_LOG_LEVEL",
                "INFO",
                "PyTorch's C++ log level: with TORCH_DISTRIBUTED_DEBUG=INFO torch.distributed logs at debug level (c10d store, process groups)",
            );
            framework_var(
                plan,
                "TORCH_DISTRIBUTED_DEBUG",
                "INFO",
                "PyTorch's distributed debug switch; INFO adds logging only (DETAIL would add checks to every collective)",
            );
        }
        // Paddle's launcher lets PADDLE_LOG_LEVEL override its --log_level argument (context/__init__.py,
        // `set_env_in_args`): an explicit --log_level is left alone.
        Some(Framework::Paddle) if snap.job.launcher_log_level.is_none() => {
            framework_var(
                plan,
                "PADDLE_LOG_LEVEL",
                "DEBUG",
                "paddle.distributed.launch's --log_level: DEBUG logs the launcher's steps and streams every worker's log",
            );
        }
        Some(Framework::Paddle) | None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::ConfFile;
    use crate::test_machine::{has_warning, warning};

    fn snap(env: &[(&str, &str)], versions: &[Option<&str>]) -> Snapshot {
        let b = crate::test_snapshot::SnapshotBuilder::new().envs(env);
        versions
            .iter()
            .enumerate()
            .fold(b, |b, (i, v)| b.nccl(&format!("/lib{i}/libnccl.so.2"), *v))
            .build()
    }

    fn on() -> Config {
        Config {
            debug: true,
            ..Config::default()
        }
    }

    fn run(s: &Snapshot, cfg: &Config) -> Plan {
        let mut p = Plan::default();
        decide_debug(s, cfg, &mut p);
        p
    }

    #[test]
    fn off_by_default() {
        let p = run(&snap(&[], &[]), &Config::default());
        assert!(p.changes.is_empty() && p.debug_files.is_none());
    }

    #[test]
    fn subsystems_follow_the_version() {
        let p = run(&snap(&[], &[Some("2.21.5")]), &on());
        assert_eq!(p.value_of("NCCL_DEBUG_SUBSYS"), Some("INIT,ENV,NET"));
        let p = run(&snap(&[], &[Some("2.27.7")]), &on());
        assert_eq!(
            p.value_of("NCCL_DEBUG_SUBSYS"),
            Some("INIT,ENV,NET,BOOTSTRAP")
        );
        // Two installs, one new: BOOTSTRAP. Unknown: BOOTSTRAP.
        let p = run(&snap(&[], &[Some("2.21.5"), Some("2.27.7")]), &on());
        assert_eq!(
            p.value_of("NCCL_DEBUG_SUBSYS"),
            Some("INIT,ENV,NET,BOOTSTRAP")
        );
        let p = run(&snap(&[], &[]), &on());
        assert_eq!(
            p.value_of("NCCL_DEBUG_SUBSYS"),
            Some("INIT,ENV,NET,BOOTSTRAP")
        );
        let p = run(&snap(&[], &[Some("2.21.5"), None]), &on());
        assert_eq!(
            p.value_of("NCCL_DEBUG_SUBSYS"),
            Some("INIT,ENV,NET,BOOTSTRAP")
        );
        assert_eq!(p.value_of("NCCL_DEBUG"), Some("INFO"));
        assert_eq!(
            p.value_of("NCCL_DEBUG_FILE"),
            Some("/tmp/ncclenv-debug/nccl.%h.%p.log")
        );
        assert_eq!(p.debug_dir.as_deref(), Some("/tmp/ncclenv-debug"));
        assert!(p.warnings.is_empty());
    }

    #[test]
    fn inherited_values_are_kept_and_a_hiding_one_is_named() {
        // The guides' recipe on 2.27.7 hides the bootstrap line.
        let s = snap(
            &[
                ("NCCL_DEBUG_SUBSYS", "INIT,ENV,NET"),
                ("NCCL_DEBUG", "INFO"),
            ],
            &[Some("2.27.7")],
        );
        let p = run(&s, &on());
        assert_eq!(p.value_of("NCCL_DEBUG_SUBSYS"), None);
        assert_eq!(p.value_of("NCCL_DEBUG"), None);
        assert!(has_warning(&p, "debug-hides-bootstrap"), "{:?}", p.warnings);
        // The same on 2.21.5 hides nothing.
        let s = snap(&[("NCCL_DEBUG_SUBSYS", "INIT,ENV,NET")], &[Some("2.21.5")]);
        assert!(run(&s, &on()).warnings.is_empty());
        // A config file's NCCL_DEBUG=WARN counts as inherited.
        let mut s = snap(&[], &[Some("2.27.7")]);
        s.conf_files.push(ConfFile {
            path: "/etc/nccl.conf".into(),
            values: vec![("NCCL_DEBUG".into(), "WARN".into())],
            error: None,
        });
        let p = run(&s, &on());
        assert_eq!(p.value_of("NCCL_DEBUG"), None);
        let w = warning(&p, "debug-hides-bootstrap");
        assert!(w.message.contains("/etc/nccl.conf"), "{}", w.message);
        // An inherited file is kept and reported as where the lines go.
        let s = snap(&[("NCCL_DEBUG_FILE", "/logs/n.%h")], &[]);
        let p = run(&s, &on());
        assert_eq!(p.value_of("NCCL_DEBUG_FILE"), None);
        assert!(p.debug_dir.is_none());
        assert!(p
            .debug_files
            .as_deref()
            .is_some_and(|f| f.contains("/logs/n.%h")));
    }

    #[test]
    fn folder_is_escaped_and_frameworks_get_their_switch() {
        let cfg = Config {
            debug: true,
            debug_dir: Some("/data/50%/logs/".into()),
            ..Config::default()
        };
        let mut s = snap(&[], &[]);
        s.job.framework = Some(Framework::PyTorch);
        let p = run(&s, &cfg);
        assert_eq!(
            p.value_of("NCCL_DEBUG_FILE"),
            Some("/data/50%%/logs/nccl.%h.%p.log")
        );
        assert_eq!(p.debug_dir.as_deref(), Some("/data/50%/logs"));
        assert_eq!(p.value_of("TORCH_DISTRIBUTED_DEBUG"), Some("INFO"));
        assert_eq!(p.value_of("TORCH_CPP_LOG_LEVEL"), Some("INFO"));
        assert_eq!(p.value_of("PADDLE_LOG_LEVEL"), None);
        s.env
            .insert("TORCH_DISTRIBUTED_DEBUG".into(), "DETAIL".into());
        assert_eq!(run(&s, &cfg).value_of("TORCH_DISTRIBUTED_DEBUG"), None);
        s.job.framework = Some(Framework::Paddle);
        let p = run(&s, &cfg);
        assert_eq!(p.value_of("PADDLE_LOG_LEVEL"), Some("DEBUG"));
        assert_eq!(p.value_of("TORCH_CPP_LOG_LEVEL"), None);
        // Paddle's environment variable would override an explicit --log_level: left alone then.
        s.job.launcher_log_level = Some("INFO".into());
        assert_eq!(run(&s, &cfg).value_of("PADDLE_LOG_LEVEL"), None);
        s.job.framework = None;
        s.job.launcher_log_level = None;
        let p = run(&s, &cfg);
        assert!(p.changes.iter().all(|c| c.name.starts_with("NCCL_")));
    }
}
