//! Run ncclenv's check from the command line without the entrypoint, for debugging (scripts/gpu-check.sh uses
//! `ncclenv check`): `check_driver bootstrap|allreduce [--json] [--json-out FILE]`. Reads `NCCLENV_CHECK_TIMEOUT`, `NCCLENV_CHECK_GPUS`,
//! `NCCLENV_CHECK_MIB`, `NCCLENV_CHECK_REPAIR`, `NCCLENV_NCCL_LIB`, `NCCLENV_CHECK_HELPER` (default: the
//! `ncclenv-check` of the same cargo profile). Exit 0 when the check passed, 1 when not, 2 on bad usage.

use ncclenv::check::{render_check, run_check};
use ncclenv::config::{CheckMode, Config};
use std::path::PathBuf;

fn num(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = match args.first().map(String::as_str) {
        Some("bootstrap") => CheckMode::Bootstrap,
        Some("allreduce") => CheckMode::Allreduce,
        _ => {
            eprintln!("usage: check_driver bootstrap|allreduce [--json]");
            std::process::exit(2);
        }
    };
    let json = args.iter().any(|a| a == "--json");
    let json_out = args
        .iter()
        .position(|a| a == "--json-out")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);
    let mut cfg = Config::default();
    if let Some(t) = num("NCCLENV_CHECK_TIMEOUT") {
        cfg.check_timeout_s = t;
    }
    if let Some(g) = num("NCCLENV_CHECK_GPUS") {
        cfg.check_gpus = u32::try_from(g).unwrap_or(2);
    }
    if let Some(m) = num("NCCLENV_CHECK_MIB") {
        cfg.check_mib = m;
    }
    cfg.check_repair = std::env::var("NCCLENV_CHECK_REPAIR").as_deref() == Ok("1");
    cfg.nccl_lib = std::env::var_os("NCCLENV_NCCL_LIB").map(PathBuf::from);
    if std::env::var_os("NCCLENV_CHECK_HELPER").is_none() {
        // target/<profile>/examples/check_driver → target/<profile>/ncclenv-check
        cfg.check_helper = std::env::current_exe().ok().and_then(|e| {
            e.parent()
                .and_then(|p| p.parent())
                .map(|p| p.join("ncclenv-check"))
        });
    }
    let env: Vec<_> = std::env::vars_os().collect();
    let report = run_check(&cfg, mode, &env, None, &[]);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report.to_json()).unwrap_or_default()
        );
    } else {
        print!("{}", render_check(&report));
    }
    if let Some(p) = json_out {
        let text = serde_json::to_string_pretty(&report.to_json()).unwrap_or_default();
        if let Err(e) = std::fs::write(&p, text) {
            eprintln!("cannot write {}: {e}", p.display());
        }
    }
    std::process::exit(if report.passed { 0 } else { 1 });
}
