//! The allreduce check's orchestrator: one rank process per GPU (`ncclenv-check rank …`). Rank 0 decides the
//! communicator's size and makes the unique id; the orchestrator then starts the other ranks with the id on
//! their stdin, forwards every rank's lines, kills the others as soon as one fails or dies (they would wait
//! for it forever), and sums up the ranks' verdicts in the `result`.

use crate::bootstrap::bootstrap;
use crate::output::emit;
use ncclenv::check::protocol::{
    HelperError, HelperMsg, HelperResult, IdMsg, Mode, RankResult, Stage,
};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

/// What a rank's stdout reader passes on.
enum RankLine {
    /// A protocol line of the rank.
    Msg(u32, HelperMsg),
    /// The rank's stdout closed.
    Eof(u32),
}

/// Run the allreduce check over `gpus` ranks (capped by the visible GPUs) with buffers of `mib` MiB.
pub fn allreduce(gpus: u32, mib: u64) -> HelperResult {
    let spawn_error = |message: String| {
        HelperResult::failed(Mode::Allreduce, HelperError::new(Stage::Spawn, message))
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return spawn_error(format!("cannot find own executable: {e}")),
    };
    let mut o = Orchestrator::new(exe, gpus, mib);
    if let Err(e) = o.start(0, None) {
        return spawn_error(format!("cannot start rank 0: {e}"));
    }
    o.watch();
    o.kill_and_wait();
    o.result()
}

/// The rank processes and what they said so far.
struct Orchestrator {
    exe: PathBuf,
    gpus: u32,
    mib: u64,
    tx: mpsc::Sender<RankLine>,
    rx: mpsc::Receiver<RankLine>,
    /// Rank processes by rank; `None` once reaped.
    children: Vec<Option<Child>>,
    /// Ranks whose stdout is still open.
    open: usize,
    /// The ranks' verdicts, in arrival order.
    results: Vec<RankResult>,
    /// Rank 0's `id` line.
    id: Option<IdMsg>,
    /// The first `ncclGetVersion` a rank reported.
    nccl_version: Option<i32>,
    /// Rank 0 found no GPU: why.
    nogpu: Option<String>,
    /// The first failure.
    failure: Option<HelperError>,
    /// Ranks killed by the orchestrator (their end is not a crash).
    killed: Vec<u32>,
}

impl Orchestrator {
    fn new(exe: PathBuf, gpus: u32, mib: u64) -> Orchestrator {
        let (tx, rx) = mpsc::channel();
        Orchestrator {
            exe,
            gpus,
            mib,
            tx,
            rx,
            children: Vec::new(),
            open: 0,
            results: Vec::new(),
            id: None,
            nccl_version: None,
            nogpu: None,
            failure: None,
            killed: Vec::new(),
        }
    }

    /// Start `rank` (the next one) and read its stdout on a thread.
    fn start(&mut self, rank: u32, nranks: Option<u32>) -> std::io::Result<()> {
        let child = spawn_rank(&self.exe, rank, self.gpus, self.mib, nranks, &self.tx)?;
        self.children.push(Some(child));
        self.open += 1;
        Ok(())
    }

    /// Write the unique id (`hex`, one line) to `rank`'s stdin, and close it.
    fn send_id(&mut self, rank: u32, hex: &str) {
        let child = self
            .children
            .get_mut(rank as usize)
            .and_then(|c| c.as_mut());
        if let Some(mut si) = child.and_then(|c| c.stdin.take()) {
            let _ = si.write_all(format!("{hex}\n").as_bytes());
        }
    }

    /// Handle every rank's lines until all their stdouts closed.
    fn watch(&mut self) {
        while self.open > 0 {
            let Ok(line) = self.rx.recv() else { break };
            match line {
                RankLine::Msg(rank, m) => self.on_message(rank, m),
                RankLine::Eof(rank) => self.on_eof(rank),
            }
        }
    }

    /// A line of `rank`: forwarded (with its rank), and acted on.
    fn on_message(&mut self, rank: u32, mut m: HelperMsg) {
        m.set_rank_if_absent(rank);
        match m {
            HelperMsg::Lib(ref l) => {
                self.nccl_version = self.nccl_version.or(l.nccl_version);
                emit(&m);
            }
            HelperMsg::Nogpu(ref n) => {
                self.nogpu = Some(n.note.clone());
                emit(&m);
            }
            HelperMsg::Id(id) if rank == 0 && self.id.is_none() => self.on_id(id),
            HelperMsg::RankResult(r) => self.on_rank_result(rank, r),
            other => emit(&other),
        }
    }

    /// Rank 0's unique id: forward it (without the id itself) and start the other ranks with it.
    fn on_id(&mut self, id: IdMsg) {
        let n = id.nranks.max(1);
        let hex = id.id.clone().unwrap_or_default();
        emit(&HelperMsg::Id(IdMsg {
            id: None,
            ..id.clone()
        }));
        self.id = Some(id);
        for r in 1..n {
            match self.start(r, Some(n)) {
                Ok(()) => self.send_id(r, &hex),
                Err(e) => {
                    self.fail(HelperError {
                        rank: Some(r),
                        ..HelperError::new(Stage::Spawn, format!("cannot start rank {r}: {e}"))
                    });
                    self.kill_except(None);
                    break;
                }
            }
        }
    }

    /// A rank's verdict: forwarded; a failure stops the others (they would wait for this rank forever).
    fn on_rank_result(&mut self, rank: u32, r: RankResult) {
        emit(&HelperMsg::RankResult(r.clone()));
        if !r.ok {
            let e = r.error.clone().unwrap_or_else(|| HelperError {
                rank: Some(rank),
                ..HelperError::new(Stage::Crash, format!("rank {rank} failed"))
            });
            self.fail(e);
            self.kill_except(Some(rank));
        }
        self.results.push(r);
    }

    /// A rank's stdout closed: reap it; without a verdict (and not killed, nor rank 0 without GPU) it crashed,
    /// and the others are stopped.
    fn on_eof(&mut self, rank: u32) {
        self.open = self.open.saturating_sub(1);
        let status = self
            .children
            .get_mut(rank as usize)
            .and_then(|c| c.take())
            .and_then(|mut c| c.wait().ok());
        let reported = self.results.iter().any(|m| m.rank == rank);
        let was_killed = self.killed.contains(&rank);
        let nogpu_exit = rank == 0 && self.nogpu.is_some();
        if reported || was_killed || nogpu_exit {
            return;
        }
        let how = status.map(describe_exit).unwrap_or_else(|| "ended".into());
        self.fail(HelperError {
            rank: Some(rank),
            ..HelperError::new(
                Stage::Crash,
                format!("rank {rank} process died without a verdict ({how})"),
            )
        });
        self.kill_except(None);
    }

    /// Record `e` unless a failure is recorded already (the first one is the cause).
    fn fail(&mut self, e: HelperError) {
        self.failure.get_or_insert(e);
    }

    /// Kill every rank still running but `spare`.
    fn kill_except(&mut self, spare: Option<u32>) {
        for (i, c) in self.children.iter_mut().enumerate() {
            let i = i as u32;
            if Some(i) == spare {
                continue;
            }
            if let Some(c) = c {
                let _ = c.kill();
                self.killed.push(i);
            }
        }
    }

    /// Kill and reap what is left.
    fn kill_and_wait(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The final verdict: the bootstrap check when rank 0 found no GPU; else the first failure, a missing
    /// verdict, or the allreduce's numbers (the slowest rank's time; algbw and busbw as nccl-tests).
    fn result(mut self) -> HelperResult {
        if let Some(why) = self.nogpu.take() {
            let mut r = bootstrap(Some(format!(
                "no GPU visible ({why}): fell back to the bootstrap check"
            )));
            r.gpus_visible = Some(0);
            return r;
        }
        let mut result = HelperResult::new(Mode::Allreduce, false);
        result.nccl_version = self.nccl_version;
        if let Some(id) = &self.id {
            result.addr = id.addr.clone();
            result.port = id.port;
            result.family = id.family.clone();
            result.nranks = Some(id.nranks);
            result.gpus_visible = id.gpus_visible;
        }
        self.results.sort_by_key(|m| m.rank);
        result.ranks = std::mem::take(&mut self.results);
        if let Some(e) = self.failure {
            result.error = Some(e);
            return result;
        }
        let nranks = result.nranks.unwrap_or(0);
        if nranks == 0 || result.ranks.len() as u32 != nranks {
            result.error = Some(HelperError::new(
                Stage::Crash,
                format!("{} of {nranks} ranks reported", result.ranks.len()),
            ));
            return result;
        }
        let secs = result
            .ranks
            .iter()
            .filter_map(|m| m.seconds)
            .fold(0.0f64, f64::max);
        let bytes = result
            .ranks
            .iter()
            .filter_map(|m| m.bytes)
            .max()
            .unwrap_or(0);
        result.ok = true;
        result.bytes = Some(bytes);
        result.seconds = Some(secs);
        if secs > 0.0 {
            let alg = bytes as f64 / secs / 1e9;
            result.algbw_gbps = Some(alg);
            result.busbw_gbps = Some(alg * 2.0 * (f64::from(nranks) - 1.0) / f64::from(nranks));
        }
        result.note = capped_note(self.gpus, nranks);
        result
    }
}

/// The note of an allreduce of `n` ranks when `asked` were asked for: fewer GPUs than ranks asked (NCCL
/// refuses two ranks on one GPU with `ncclInvalidUsage`: up to 2.29 `WARN("Duplicate GPU detected : rank %d and
/// rank %d both on CUDA device %lx")`, src/init.cc `initTransportsRank`; 2.30 says "Multiple Ranks are using the
/// same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration." (both strings read from
/// the libnccl.so.2 of the nvidia-nccl-cu12 wheels 2.21.5, 2.27.7, 2.29.7 and 2.30.7)), and what one rank
/// proves.
fn capped_note(asked: u32, n: u32) -> Option<String> {
    let mut parts = Vec::new();
    if asked > n {
        parts.push(format!(
            "a {asked}-rank allreduce needs {asked} GPUs and {n} is visible: ran {n} rank(s) (NCCL refuses two \
             ranks on one GPU with ncclInvalidUsage: \"Duplicate GPU detected\" up to 2.29, \"Multiple Ranks are \
             using the same GPU\" from 2.30)"
        ));
    }
    if n == 1 {
        parts.push(
            "one GPU visible: a one-rank communicator (bootstrap and init exercised; nothing crossed between GPUs)"
                .to_string(),
        );
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// How a rank process ended, in words.
fn describe_exit(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (_, Some(sig)) => format!(
            "killed by signal {sig} ({})",
            ncclenv::check::signal_name(sig)
        ),
        (Some(c), _) => format!("exit {c}"),
        _ => "ended".into(),
    }
}

/// Start `ncclenv-check rank --rank R …` with piped stdin and stdout (stderr shared), and a thread that passes
/// its protocol lines, then its EOF, to `tx`.
fn spawn_rank(
    exe: &Path,
    rank: u32,
    gpus: u32,
    mib: u64,
    nranks: Option<u32>,
    tx: &mpsc::Sender<RankLine>,
) -> std::io::Result<Child> {
    let mut cmd = Command::new(exe);
    cmd.arg("rank")
        .arg("--rank")
        .arg(rank.to_string())
        .arg("--gpus")
        .arg(gpus.to_string())
        .arg("--mib")
        .arg(mib.to_string());
    if let Some(n) = nranks {
        cmd.arg("--nranks").arg(n.to_string());
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    if let Some(out) = child.stdout.take() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let rd = std::io::BufReader::new(out);
            for line in rd.lines() {
                let Ok(line) = line else { break };
                if let Some(m) = HelperMsg::parse(&line) {
                    if tx.send(RankLine::Msg(rank, m)).is_err() {
                        return;
                    }
                }
            }
            let _ = tx.send(RankLine::Eof(rank));
        });
    }
    Ok(child)
}
