//! The shell of `ncclenv explain` (`ncclenv-check __ncclenv-explain ARGS…`): parse `ncclenv`'s own arguments,
//! read the inputs (bounded per line by `ncclenv::explain::read_lines`), compare with this node's decision
//! when the log has processes of this host (probe and decide, as the entrypoint would), print, and return the
//! exit status. Everything it judges and renders is the pure `ncclenv::explain`; this file does the I/O.

use ncclenv::cli::{self, Cli, Mode};
use ncclenv::config::Config;
use ncclenv::explain::{self, Explainer, Explanation, Local};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Parse `args` as `ncclenv` does (they are `ncclenv`'s own), run `explain`, return the exit status (0
/// nothing wrong, 1 something wrong, 2 usage error).
pub fn main_in_helper(args: &[OsString], vars: Vec<(OsString, OsString)>) -> u8 {
    match cli::parse(args, vars.iter().cloned()) {
        Ok(Cli {
            mode: Mode::Explain { json, files },
            config,
        }) => run(&config, json, &files, &vars),
        Ok(_) => {
            err_line("ncclenv-check: __ncclenv-explain is for ncclenv explain only");
            2
        }
        Err(e) => {
            err_line(&format!("ncclenv: {} (see ncclenv --help)", e.0));
            2
        }
    }
}

/// `ncclenv explain`: read the logs (stdin when none, or `-`), compare with this node's decision when the log
/// has processes of this host, print, exit 0 (nothing wrong) or 1. An input that cannot be opened is a usage
/// error (2).
fn run(cfg: &Config, json: bool, files: &[PathBuf], vars: &[(OsString, OsString)]) -> u8 {
    let mut rep = match read_inputs(files) {
        Ok(r) => r,
        Err(code) => return code,
    };
    // NCCL's host name: gethostname up to the first '.' (getHostName, src/misc/utils.cc).
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim().split('.').next().unwrap_or("").to_string();
    if !host.is_empty() && rep.processes.iter().any(|p| p.host == host) {
        let local = decide_here(cfg, &rep, host, vars);
        explain::compare_local(&mut rep, local);
    }
    print(&rep, json);
    explain::exit_code(&rep)
}

/// Read every input (`-` for stdin; stdin alone when there is none) into one report; `Err(2)` (the message
/// already written) for a directory or a file that cannot be opened.
fn read_inputs(files: &[PathBuf]) -> Result<Explanation, u8> {
    let mut ex = Explainer::new();
    let stdin_only = [PathBuf::from("-")];
    let files = if files.is_empty() {
        &stdin_only[..]
    } else {
        files
    };
    for f in files {
        let name = f.display().to_string();
        ex.start_input(&name);
        if let Some(e) = read_input(f, &name, &mut ex)? {
            ex.input_error(format!("read stopped: {e}"));
        }
    }
    Ok(ex.finish())
}

/// Read one input into `ex`: the I/O error that stopped it, if any; `Err(2)` (the message written) when it
/// is a directory or cannot be opened.
fn read_input(f: &Path, name: &str, ex: &mut Explainer) -> Result<Option<std::io::Error>, u8> {
    if name == "-" {
        return Ok(explain::read_lines(std::io::stdin().lock(), ex));
    }
    if f.is_dir() {
        // open(2) succeeds on a directory and only the first read fails (EISDIR): say it here, as the
        // usage error it is.
        err_line(&format!(
            "ncclenv: explain: {name} is a directory; give the log files themselves (e.g. {}/*.log) or \
             - for stdin (see ncclenv --help)",
            name.trim_end_matches('/')
        ));
        return Err(2);
    }
    match std::fs::File::open(f) {
        Ok(file) => Ok(explain::read_lines(std::io::BufReader::new(file), ex)),
        Err(e) => {
            err_line(&format!(
                "ncclenv: explain: cannot open {name}: {e} (see ncclenv --help)"
            ));
            Err(2)
        }
    }
}

/// What ncclenv decides on this host now (probe and decide as the entrypoint would, without the debug
/// switch), with another host's bootstrap address from the log standing in for the master unless a peer was
/// given.
fn decide_here(
    cfg: &Config,
    rep: &Explanation,
    host: String,
    vars: &[(OsString, OsString)],
) -> Local {
    let mut cfg = cfg.clone();
    cfg.debug = false;
    let mut peer = None;
    if cfg.peer.is_none() {
        // Another host's bootstrap address stands in for the master: the route to it decides.
        if let Some(a) = explain::other_bootstraps(rep, &host).first() {
            cfg.peer = Some(a.to_string());
            cfg.peer_source = Some("another host's bootstrap address in the log".into());
            peer = Some(format!("{a} (another host's bootstrap address in the log)"));
        }
    } else {
        peer = cfg.peer.clone().map(|p| {
            format!(
                "{p} ({})",
                cfg.peer_source.as_deref().unwrap_or("--peer/NCCLENV_PEER")
            )
        });
    }
    let snap = ncclenv::probe::collect(&cfg, &[], vars, ncclenv::probe::Depth::Start);
    let plan = ncclenv::decide::decide(&snap, &cfg);
    let choice = plan
        .choice
        .as_ref()
        .filter(|_| !plan.hands_off)
        .map(|c| (c.ifname.clone(), c.addr, c.how.clone()));
    let no_choice = choice.is_none().then(|| {
        plan.warnings
            .first()
            .map(|w| format!("{} [{}]", w.message, w.code))
            .unwrap_or_else(|| "ncclenv would leave the interface to NCCL here".to_string())
    });
    Local {
        host,
        choice,
        no_choice,
        peer,
    }
}

/// Print the report as JSON (one line) or text. What the log holds is foreign text: escaped so that it cannot
/// act on a terminal (`ncclenv::text`).
fn print(rep: &Explanation, json: bool) {
    if json {
        let j = explain::render_json(rep).to_string();
        out(&format!("{}\n", ncclenv::text::escape_json(&j)));
    } else {
        out(&ncclenv::text::escape_lines(&explain::render_text(rep)));
    }
}

/// Write to stdout, ignoring errors (a reader that went away must not become a panic).
fn out(text: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes());
    let _ = o.flush();
}

/// One line to stderr, ignoring errors.
fn err_line(text: &str) {
    use std::io::Write;
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(text.as_bytes());
    let _ = e.write_all(b"\n");
}
