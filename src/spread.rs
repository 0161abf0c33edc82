//! Runners that carry the launching node's environment to every node (#21 items 4 and 5): what the command
//! line says about how `mpirun` and DeepSpeed's multinode runner spread variables, read as each reads its
//! arguments. The decision (`crate::decide::spread`) turns it into what ncclenv forwards or withholds.
//!
//! * **mpirun** (Open MPI 4.1 `orterun`, MPICH/Hydra `mpiexec`): the nodes are `-H`/`--host` (read by
//!   `crate::launcher`) or a hostfile (`--hostfile`, `-hostfile`, `--machinefile`, `-machinefile`,
//!   `--default-hostfile`, Hydra's `-f`): one host per line, its first word, `host:N` or `host slots=N`,
//!   `#` starts a comment (Open MPI's `hostfile(5)`, Hydra's `-f` file). `-x NAME[=VALUE]` copies a variable to
//!   every rank (Open MPI's mpirun(1)); `--mca NAME VALUE` on the command line wins over `OMPI_MCA_NAME` in
//!   the environment (Open MPI's MCA precedence, mpirun(1) "Setting MCA Parameters").
//! * **DeepSpeed** (`deepspeed/launcher/runner.py`, 0.19.8): with a hostfile (`-H`/`--hostfile`, default
//!   `/job/hostfile`; lines `NAME slots=N`, `_parse_hostfile`) of more than one active host, or
//!   `--force_multi`, and without `--no_ssh`, the multinode runner starts every node's ranks over
//!   pdsh/mpirun/srun and exports into each every variable of the launching node whose name starts with
//!   `NCCL`, `UCX`, `PYTHON`, `MV2`, `MLFLOW` (`EXPORT_ENVS` plus the CUDA accelerator's `export_envs()`),
//!   plus the lines of `~/.deepspeed_env` and `./.deepspeed_env`. `--num_nodes N` keeps the first N hosts.
//!
//! The program a runner starts on every node is "ncclenv" when the command is `mpirun … ncclenv -- PROG` or
//! `deepspeed --no_python … ncclenv -- PROG`: then every rank decides on its own node.

use crate::launch_facts::{join_dir, LaunchInfo, ReadFile};
use crate::snapshot::{Launcher, Spread};
use std::collections::BTreeMap;
use std::path::Path;

/// mpirun's hostfile options (Open MPI 4.1 mpirun(1); Hydra `-f`).
pub const MPI_HOSTFILE: &[&str] = &[
    "--hostfile",
    "-hostfile",
    "--machinefile",
    "-machinefile",
    "--default-hostfile",
    "-f",
];

/// mpirun's options that name two words (`--mca NAME VALUE`), as `crate::launcher` skips them.
const MCA_PAIRS: &[&str] = &["--mca", "-mca", "--gmca", "-gmca"];

/// DeepSpeed's default hostfile (`DLTS_HOSTFILE`, deepspeed/launcher/runner.py).
pub const DEEPSPEED_DEFAULT_HOSTFILE: &str = "/job/hostfile";

/// The largest hostfile read (bytes); a longer one counts as unreadable.
const MAX_HOSTFILE: usize = 1 << 20;

/// What a runner's reading needs of the job beyond its command line: the variables the command receives
/// (`HOME`, `DS_ENV_FILE`) and the reader of its files (hostfiles, `.deepspeed_env`: bounded, non-blocking,
/// relative paths from the directory the command starts in; `crate::launch_facts::ReadFile`).
pub type Job<'e, 'f> = (&'e BTreeMap<String, String>, &'f ReadFile<'f>);

/// The command line of a runner that spreads the environment: `cmd` is the whole command, where the
/// launcher's name is, and where its own options end (the program, or the command's length); `opts` its
/// options as `crate::launcher` read them. Fills `info.shape.spread` and, when no other source gave one, the
/// node count from a hostfile (a hostfile that cannot be read is a problem).
pub fn read(
    l: Launcher,
    cmd: (&[String], usize, usize),
    opts: &[(String, String)],
    job: Job<'_, '_>,
    info: &mut LaunchInfo,
) {
    let (args, at, stop) = cmd;
    match l {
        Launcher::Mpi => mpi(args, at, stop, opts, job.1, info),
        Launcher::Deepspeed => deepspeed(args, stop, opts, job, info),
        _ => {}
    }
}

/// The last value of any of `names` among `opts`.
fn last<'a>(opts: &'a [(String, String)], names: &[&str]) -> Option<(&'a str, &'a str)> {
    opts.iter()
        .rev()
        .find(|(n, _)| names.contains(&n.as_str()))
        .map(|(n, v)| (n.as_str(), v.as_str()))
}

fn is_ncclenv(program: Option<&String>) -> bool {
    program
        .and_then(|p| Path::new(p).file_name())
        .is_some_and(|n| n == "ncclenv")
}

fn mpi(
    args: &[String],
    at: usize,
    stop: usize,
    opts: &[(String, String)],
    files: &ReadFile<'_>,
    info: &mut LaunchInfo,
) {
    let mut spread = Spread {
        ranks_through_ncclenv: is_ncclenv(args.get(stop)),
        ..Spread::default()
    };
    for (n, v) in opts {
        if n == "-x" {
            let name = v.split('=').next().unwrap_or("").to_string();
            if !name.is_empty() && !spread.exports.contains(&name) {
                spread.exports.push(name);
            }
        }
    }
    let own = &args[at.min(args.len())..stop.min(args.len())];
    for w in own.windows(2) {
        if MCA_PAIRS.contains(&w[0].as_str()) {
            let name = w[1].as_str();
            if !spread.mca.iter().any(|m| m == name) {
                spread.mca.push(name.to_string());
            }
        }
    }
    if info.shape.nnodes.is_none() {
        if let Some((n, path)) = last(opts, MPI_HOSTFILE) {
            match hostfile(path, false, files) {
                Ok(hosts) if !hosts.is_empty() => set_count(info, hosts.len(), n, path),
                Ok(_) => problem(
                    info,
                    format!("mpirun {n} {path}: it names no host; the node count is unknown"),
                ),
                Err(e) => problem(
                    info,
                    format!("mpirun {n} {path}: cannot read it ({e}); the node count is unknown"),
                ),
            }
        }
    }
    info.shape.spread = Some(spread);
}

fn deepspeed(
    args: &[String],
    stop: usize,
    opts: &[(String, String)],
    (env, files): Job<'_, '_>,
    info: &mut LaunchInfo,
) {
    if last(opts, &["--no_ssh"]).is_some() {
        return; // every node runs its own `deepspeed --no_ssh --node_rank=N`: nothing is copied.
    }
    let given = last(opts, &["--hostfile", "-H"]);
    let (src, path) = given.unwrap_or(("the default hostfile", DEEPSPEED_DEFAULT_HOSTFILE));
    let hosts = match hostfile(path, true, files) {
        Ok(h) => h,
        Err(e) => {
            // runner.py's fetch_hostfile: a missing file means local resources only (a warning there too).
            if given.is_some() {
                problem(info, format!("deepspeed {src} {path}: cannot read it ({e}); DeepSpeed runs on this node only"));
            }
            Vec::new()
        }
    };
    let keep = last(opts, &["--num_nodes"])
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(usize::MAX);
    let active = hosts.len().min(keep);
    let force = last(opts, &["--force_multi"]).is_some();
    if active > 1 && keep == usize::MAX {
        set_count(info, active, src, path);
    }
    if active > 1 || force {
        let no_python = last(opts, &["--no_python"]).is_some();
        // runner.py: DEEPSPEED_ENVIRONMENT_PATHS = [os.path.expanduser("~"), '.'], the file name from
        // DS_ENV_FILE, both as the command (the runner) receives them; `.` is the directory it starts in.
        let name = env
            .get("DS_ENV_FILE")
            .map_or(DEEPSPEED_ENV_FILE, String::as_str);
        let dirs: Vec<&str> = env
            .get("HOME")
            .map(String::as_str)
            .into_iter()
            .chain(["."])
            .collect();
        info.shape.spread = Some(Spread {
            ranks_through_ncclenv: no_python && is_ncclenv(args.get(stop)),
            env_file_ifname: deepspeed_env_ifname(&dirs, name, files),
            ..Spread::default()
        });
    }
}

/// DeepSpeed's environment file name (`DEEPSPEED_ENVIRONMENT_NAME`, deepspeed/launcher/runner.py; `DS_ENV_FILE`
/// replaces it).
pub const DEEPSPEED_ENV_FILE: &str = ".deepspeed_env";

/// `NCCL_SOCKET_IFNAME` as DeepSpeed's runner exports it from its environment files: `name` in each of `dirs`
/// in order (runner.py reads `~` then `.`, each line `KEY=VALUE` split at the first `=` and passed to
/// `add_export`, so a later file's value wins, and the files win over the launching node's own variables).
/// The file's path and the value (its line end removed); `None` when no file sets it. Each file is read
/// through `files` at `name` joined to its directory ([`join_dir`]: an absolute `name` is itself; one
/// ncclenv cannot know is no file); one that cannot be read, or is larger than 1 MiB, counts as absent.
pub fn deepspeed_env_ifname(
    dirs: &[&str],
    name: &str,
    files: &ReadFile<'_>,
) -> Option<(String, String)> {
    let mut found = None;
    for d in dirs {
        let path = join_dir(Some(d), name);
        let Ok(bytes) = files(&path, MAX_HOSTFILE) else {
            continue;
        };
        for line in String::from_utf8_lossy(&bytes).lines() {
            if let Some(("NCCL_SOCKET_IFNAME", v)) = line.split_once('=') {
                found = Some((path.clone(), v.trim_end_matches('\r').to_string()));
            }
        }
    }
    found
}

fn set_count(info: &mut LaunchInfo, n: usize, opt: &str, path: &str) {
    if info.shape.nnodes.is_none() {
        info.shape.nnodes = Some(u32::try_from(n).unwrap_or(u32::MAX));
        info.shape.source = Some(format!("{opt} {path}"));
    }
}

fn problem(info: &mut LaunchInfo, text: String) {
    if !info.shape.problems.contains(&text) {
        info.shape.problems.push(text);
    }
}

/// The distinct hosts of a hostfile at `path`, in order. A line's first word is the host (`host:N` →
/// `host`); blank lines and `#` comments are skipped. `slots_only` keeps only lines DeepSpeed accepts
/// (`^(\S+)\s+slots=(\d+)`, runner.py `_parse_hostfile`), read through `files`. Errors: the file cannot be
/// read or is over 1 MiB (the reader's reason).
pub fn hostfile(path: &str, slots_only: bool, files: &ReadFile<'_>) -> Result<Vec<String>, String> {
    let bytes = files(path, MAX_HOSTFILE).map_err(|(_, why)| why)?;
    Ok(hostfile_hosts(&String::from_utf8_lossy(&bytes), slots_only))
}

/// [`hostfile`] over the file's text.
pub fn hostfile_hosts(text: &str, slots_only: bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        if slots_only {
            let slots = words.next().and_then(|w| w.strip_prefix("slots="));
            if !slots.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
                continue;
            }
        }
        let host = if slots_only {
            first
        } else {
            first.split(':').next().unwrap_or(first)
        };
        if !host.is_empty() && !out.iter().any(|h| h == host) {
            out.push(host.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    /// The files on disk, as the probe reads them for the command (bounded; a longer one is an error).
    fn disk(path: &str, max: usize) -> Result<Vec<u8>, (bool, String)> {
        match std::fs::read(path) {
            Ok(b) if b.len() > max => Err((false, "too large".into())),
            Ok(b) => Ok(b),
            Err(e) => Err((e.kind() == std::io::ErrorKind::NotFound, e.to_string())),
        }
    }

    fn read(argv: &[&str]) -> LaunchInfo {
        let a: Vec<OsString> = argv.iter().map(OsString::from).collect();
        crate::launcher::read_with(&a, &Default::default(), &disk)
    }

    fn tmp(name: &str, text: &str) -> String {
        let p = std::env::temp_dir().join(format!("ncclenv-spread-{}-{name}", std::process::id()));
        std::fs::write(&p, text).expect("write temp hostfile");
        p.display().to_string()
    }

    #[test]
    fn deepspeed_env_files_home_then_cwd() {
        let base = std::env::temp_dir().join(format!("ncclenv-dsenv-{}", std::process::id()));
        let (home, cwd) = (base.join("home"), base.join("cwd"));
        for d in [&home, &cwd] {
            std::fs::create_dir_all(d).expect("temp dir");
        }
        let (h, c) = (home.display().to_string(), cwd.display().to_string());
        let dirs = [h.as_str(), c.as_str()];
        assert_eq!(deepspeed_env_ifname(&dirs, DEEPSPEED_ENV_FILE, &disk), None);
        std::fs::write(
            home.join(DEEPSPEED_ENV_FILE),
            "PYTHONPATH=/w\nNCCL_SOCKET_IFNAME=eth0\r\n",
        )
        .expect("write");
        let got = deepspeed_env_ifname(&dirs, DEEPSPEED_ENV_FILE, &disk);
        assert_eq!(got.as_ref().map(|g| g.1.as_str()), Some("eth0"));
        // The current directory's file is read after the home one and wins.
        std::fs::write(
            cwd.join(DEEPSPEED_ENV_FILE),
            "NCCL_SOCKET_IFNAME=enp1s0=x\nbad line\n",
        )
        .expect("write");
        let got = deepspeed_env_ifname(&dirs, DEEPSPEED_ENV_FILE, &disk);
        assert_eq!(got.as_ref().map(|g| g.1.as_str()), Some("enp1s0=x"));
        assert!(got.is_some_and(|g| g.0.ends_with("cwd/.deepspeed_env")));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn hostfile_lines() {
        let t = "# nodes\nn1 slots=8\nn2:4\n\n  n3 slots=2 max_slots=4 # x\nn1 slots=8\n";
        assert_eq!(hostfile_hosts(t, false), ["n1", "n2", "n3"]);
        // DeepSpeed drops lines without slots=N.
        assert_eq!(hostfile_hosts(t, true), ["n1", "n3"]);
        assert!(hostfile_hosts("", false).is_empty());
    }

    #[test]
    fn mpirun_hostfile_counts_the_nodes() {
        let p = tmp("hf", "a slots=2\nb slots=2\nc\n");
        let i = read(&["mpirun", "-np", "6", "--hostfile", &p, "python", "t.py"]);
        assert_eq!(i.shape.nnodes, Some(3), "{:?}", i.shape);
        assert!(i
            .shape
            .source
            .as_deref()
            .is_some_and(|s| s.starts_with("--hostfile ")));
        let i = read(&["mpiexec", "-f", &p, "-n", "2", "./a.out"]);
        assert_eq!(i.shape.nnodes, Some(3));
        // -H wins over the file (read first).
        let i = read(&["mpirun", "-H", "x,y", "-hostfile", &p, "./a.out"]);
        assert_eq!(i.shape.nnodes, Some(2));
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn unreadable_hostfile_is_a_problem() {
        let i = read(&["mpirun", "--hostfile", "/nonexistent/hosts", "./a.out"]);
        assert_eq!(i.shape.nnodes, None);
        assert!(
            i.shape
                .problems
                .iter()
                .any(|p| p.contains("/nonexistent/hosts") && p.contains("cannot read")),
            "{:?}",
            i.shape.problems
        );
    }

    #[test]
    fn mpirun_exports_mca_and_program() {
        let i = read(&[
            "mpirun",
            "-np",
            "2",
            "-H",
            "a,b",
            "-x",
            "NCCL_DEBUG=INFO",
            "-x",
            "LD_LIBRARY_PATH",
            "--mca",
            "mca_base_env_list",
            "FOO",
            "ncclenv",
            "--",
            "python",
            "t.py",
        ]);
        let s = i.shape.spread.expect("spread");
        assert_eq!(s.exports, ["NCCL_DEBUG", "LD_LIBRARY_PATH"]);
        assert_eq!(s.mca, ["mca_base_env_list"]);
        assert!(s.ranks_through_ncclenv);
        let s = read(&["mpirun", "-np", "2", "/usr/local/bin/python", "ncclenv"])
            .shape
            .spread;
        assert!(!s.expect("spread").ranks_through_ncclenv);
    }

    #[test]
    fn deepspeed_multinode_runner() {
        let p = tmp("ds", "w1 slots=4\nw2 slots=4\nw3 slots=4\n");
        let i = read(&["deepspeed", "--hostfile", &p, "train.py"]);
        assert_eq!(i.shape.nnodes, Some(3));
        assert_eq!(i.shape.spread, Some(Spread::default()));
        let i = read(&["deepspeed", "-H", &p, "--num_nodes", "2", "train.py"]);
        assert_eq!(i.shape.nnodes, Some(2));
        let i = read(&[
            "deepspeed",
            "--hostfile",
            &p,
            "--no_python",
            "--no_local_rank",
            "ncclenv",
            "--",
            "python",
            "t.py",
        ]);
        assert!(i.shape.spread.expect("spread").ranks_through_ncclenv);
        // --no_ssh: each node launches itself; one host; no hostfile: nothing is copied.
        assert_eq!(
            read(&["deepspeed", "-H", &p, "--no_ssh", "--node_rank=1", "t.py"])
                .shape
                .spread,
            None
        );
        let one = tmp("ds1", "w1 slots=4\n");
        assert_eq!(read(&["deepspeed", "-H", &one, "t.py"]).shape.spread, None);
        assert!(read(&["deepspeed", "-H", &one, "--force_multi", "t.py"])
            .shape
            .spread
            .is_some());
        let i = read(&["deepspeed", "--hostfile", "/nonexistent/hf", "t.py"]);
        assert_eq!(i.shape.spread, None);
        assert!(i
            .shape
            .problems
            .iter()
            .any(|p| p.contains("/nonexistent/hf")));
        let _ = std::fs::remove_file(&p);
        let _ = std::fs::remove_file(&one);
    }
}
