//! `ncclenv-check`: the dynamically linked helper that proves an environment with the real NCCL library.
//!
//! The static entrypoint cannot `dlopen`; it runs this binary as a child (see `ncclenv::check` for the command
//! line, and `ncclenv::check::protocol` for the JSON lines it writes on stdout). This process loads libnccl and
//! CUDA with `libloading`; it is always a throwaway process (NCCL caches its interface search, keeps a
//! listening socket and a detached thread). It also runs `ncclenv explain`, which is not linked into the
//! static entrypoint.
//!
//! Files: `main.rs` (the command line), `output.rs` (the protocol output), `libsearch.rs` (where the
//! libraries are looked for), `ffi.rs`, `nccl.rs` and `cuda.rs` (every C call, and the only `unsafe`),
//! `bootstrap.rs` (the bootstrap check), `allreduce.rs` (the orchestrator), `rank.rs` (one rank),
//! `explain.rs` (the shell of `ncclenv explain`: inputs, this node's decision, output).

// Errors and messages carry the full report (codes, texts, places looked); they are made once per process.
#![allow(clippy::result_large_err, clippy::large_enum_variant)]

mod allreduce;
mod bootstrap;
mod cuda;
mod decls;
mod explain;
mod ffi;
mod libsearch;
mod nccl;
mod output;
mod rank;

use ncclenv::check::protocol::{
    HelperError, HelperMsg, HelperResult, Mode, Stage, Step, VersionMsg, EXIT_RESULT, EXIT_USAGE,
};
use output::{emit, finish, step};

const USAGE: &str = "usage: ncclenv-check bootstrap | allreduce [--gpus N] [--mib M] | \
                     rank --rank R --gpus N --mib M [--nranks N] | --version";

/// Bad usage: a failed `result` of stage `usage`, the message on stderr, exit [`EXIT_USAGE`].
fn usage_error(msg: &str) -> ! {
    let e = HelperError::new(Stage::Usage, format!("{msg}; {USAGE}"));
    emit(&HelperMsg::Result(HelperResult::failed(Mode::Bootstrap, e)));
    eprintln!("ncclenv-check: {msg}\n{USAGE}");
    finish(EXIT_USAGE)
}

/// The options after the command word.
struct Options {
    gpus: u32,
    mib: u64,
    rank: Option<u32>,
    nranks: Option<u32>,
}

/// Parse `--gpus N`, `--mib M`, `--rank R`, `--nranks N` (each takes a number).
fn options(args: &[String]) -> Options {
    let mut options = Options {
        gpus: 2,
        mib: 64,
        rank: None,
        nranks: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let Some(v) = it.next().and_then(|v| v.parse::<u64>().ok()) else {
            usage_error(&format!("{a} needs a number"))
        };
        let v32 = u32::try_from(v).unwrap_or(u32::MAX);
        match a.as_str() {
            "--gpus" => options.gpus = v32.max(1),
            "--mib" => options.mib = v.clamp(1, 1 << 20),
            "--rank" => options.rank = Some(v32),
            "--nranks" => options.nranks = Some(v32.max(1)),
            other => usage_error(&format!("unknown option {other}")),
        }
    }
    options
}

fn main() {
    // `ncclenv explain` runs here (it is not linked into the static entrypoint): stdout is its own.
    let raw: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if raw
        .first()
        .is_some_and(|a| a == ncclenv::explain::HELPER_WORD)
    {
        let code = explain::main_in_helper(&raw[1..], std::env::vars_os().collect());
        std::process::exit(i32::from(code));
    }
    output::setup();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        usage_error("no command")
    };
    let opts = options(&args[1..]);
    match cmd.as_str() {
        "bootstrap" => {
            emit(&HelperMsg::Result(bootstrap::bootstrap(None)));
            finish(EXIT_RESULT)
        }
        "allreduce" => {
            step(None, Step::Load);
            emit(&HelperMsg::Result(allreduce::allreduce(
                opts.gpus, opts.mib,
            )));
            finish(EXIT_RESULT)
        }
        "rank" => {
            let Some(rank) = opts.rank else {
                usage_error("rank needs --rank")
            };
            rank::run(rank::RankArgs {
                rank,
                gpus: opts.gpus,
                mib: opts.mib,
                nranks: opts.nranks,
            })
        }
        "--version" | "-V" => {
            println!("ncclenv-check {}", env!("CARGO_PKG_VERSION"));
            emit(&HelperMsg::Version(VersionMsg {
                note: env!("CARGO_PKG_VERSION").into(),
            }));
            finish(EXIT_RESULT)
        }
        "--help" | "-h" => {
            eprintln!("{USAGE}");
            finish(EXIT_RESULT)
        }
        other => usage_error(&format!("unknown command {other}")),
    }
}
