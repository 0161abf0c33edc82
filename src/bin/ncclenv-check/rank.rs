//! One rank of the allreduce check, a process of its own: load NCCL and CUDA, take a GPU, make (rank 0) or
//! read (the others, on stdin) the unique id, join the communicator, allreduce a buffer of known values
//! twice (the second timed), verify every element, and report with one `rank_result` line.

use crate::cuda::{Count, Cuda, DeviceBuffer, Stream};
use crate::nccl::{Nccl, UniqueId};
use crate::output::{emit, finish, step};
use ncclenv::check::protocol::{
    HelperError, HelperMsg, IdMsg, NoGpuMsg, RankResult, Stage, Step, EXIT_RESULT,
};
use std::io::BufRead;
use std::time::Instant;

/// The command line of one rank.
pub struct RankArgs {
    /// This rank.
    pub rank: u32,
    /// GPUs asked for (the communicator has at most as many ranks as GPUs are visible).
    pub gpus: u32,
    /// Buffer size in MiB.
    pub mib: u64,
    /// Ranks in the communicator (given to ranks > 0; rank 0 decides it).
    pub nranks: Option<u32>,
}

/// Why a rank stops before its verdict.
enum Stop {
    /// It failed: the error (its rank is filled in when reported).
    Failed(HelperError),
    /// Rank 0 found no usable GPU: the orchestrator falls back to the bootstrap check.
    NoGpu(NoGpuMsg),
}

impl From<HelperError> for Stop {
    fn from(e: HelperError) -> Stop {
        Stop::Failed(e)
    }
}

/// Run rank `a.rank` and report its verdict (or rank 0's `nogpu`), then end the process.
pub fn run(a: RankArgs) -> ! {
    let msg = match rank(&a) {
        Ok(r) => HelperMsg::RankResult(r),
        Err(Stop::NoGpu(m)) => HelperMsg::Nogpu(m),
        Err(Stop::Failed(mut e)) => {
            e.rank = Some(a.rank);
            HelperMsg::RankResult(RankResult::failed(a.rank, e))
        }
    };
    emit(&msg);
    finish(EXIT_RESULT)
}

/// The rank's steps, in order; a failure stops at its step.
fn rank(args: &RankArgs) -> Result<RankResult, Stop> {
    let rank = args.rank;
    step(Some(rank), Step::Load);
    let (nccl, cuda) = load(rank)?;
    if rank == 0 {
        emit(&nccl.lib_msg());
        emit(&cuda.lib_msg());
    }
    step(Some(rank), Step::Cuda);
    let visible = visible_gpus(&cuda, rank)?;
    let nranks = args.nranks.unwrap_or_else(|| args.gpus.max(1).min(visible));
    if rank >= visible {
        return Err(HelperError::new(
            Stage::Cuda,
            format!("rank {rank} has no GPU: only {visible} visible"),
        )
        .into());
    }
    let id = if rank == 0 {
        make_id(&nccl, nranks, visible)?
    } else {
        read_id()?
    };
    let bufs = Buffers::new(&cuda, rank, args.mib)?;
    step(Some(rank), Step::Init);
    let coll = nccl.collectives()?;
    let comm = coll.init_rank(nranks, id, rank)?;
    step(Some(rank), Step::Collective);
    let mut seconds = 0.0;
    // The first round warms up (connections, buffers); the second is timed.
    for round in 0..2 {
        let t0 = Instant::now();
        coll.all_reduce_sum(&comm, &bufs.send, &bufs.recv, &bufs.stream)?;
        cuda.sync(&bufs.stream)?;
        if round == 1 {
            seconds = t0.elapsed().as_secs_f64();
        }
    }
    step(Some(rank), Step::Verify);
    verify(&cuda, &bufs, rank, nranks, seconds)
}

/// Load libnccl, then CUDA; rank 0 without a CUDA library reports `nogpu` (with the places looked).
fn load(r: u32) -> Result<(Nccl, Cuda), Stop> {
    let nccl = Nccl::load()?;
    let cuda = Cuda::load().map_err(|looked| {
        let e = HelperError {
            looked,
            ..HelperError::new(Stage::Load, "no CUDA library found")
        };
        if r == 0 {
            Stop::NoGpu(NoGpuMsg {
                rank: Some(0),
                note: "no CUDA library found (libcuda.so.1, libcudart.so.13/.12/.11.0)".into(),
                error: Some(e),
            })
        } else {
            Stop::Failed(e)
        }
    })?;
    Ok((nccl, cuda))
}

/// The GPUs CUDA sees; none is `nogpu` on rank 0 and a failure at stage `cuda` on the others.
fn visible_gpus(cuda: &Cuda, r: u32) -> Result<u32, Stop> {
    match cuda.count()? {
        Count::Gpus(n) => Ok(n),
        Count::NoGpu(why) if r == 0 => Err(Stop::NoGpu(NoGpuMsg {
            rank: Some(0),
            note: why,
            error: None,
        })),
        Count::NoGpu(why) => Err(HelperError::new(Stage::Cuda, why).into()),
    }
}

/// Rank 0: `ncclGetUniqueId`, then the `id` line (with the id in hex, for the orchestrator to pass on).
fn make_id(nccl: &Nccl, nranks: u32, visible: u32) -> Result<UniqueId, HelperError> {
    step(Some(0), Step::Id);
    let id = nccl.unique_id()?;
    let b = id.bootstrap();
    emit(&HelperMsg::Id(IdMsg {
        rank: Some(0),
        addr: b.addr,
        port: b.port,
        family: b.family,
        id: Some(id.hex()),
        nranks,
        gpus_visible: Some(visible),
    }));
    Ok(id)
}

/// Ranks > 0: the unique id, one line of hex on stdin.
fn read_id() -> Result<UniqueId, HelperError> {
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    unhex(&line)
        .and_then(|b| UniqueId::from_bytes(&b))
        .ok_or_else(|| HelperError::new(Stage::Init, "no valid unique id on stdin"))
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// Value rank `r` puts at element `i`; the sum over n ranks is n·(i mod 7) + n(n+1)/2, exact in float32.
fn pattern(i: usize, r: u32) -> f32 {
    ((i % 7) as u32 + r + 1) as f32
}

/// The sum over `n` ranks at element `i`.
fn expected(i: usize, n: u32) -> f32 {
    (n * (i % 7) as u32 + n * (n + 1) / 2) as f32
}

/// The rank's device, stream and buffers; `send` filled with [`pattern`].
struct Buffers {
    stream: Stream,
    send: DeviceBuffer,
    recv: DeviceBuffer,
    /// float32 elements in each buffer.
    count: usize,
}

impl Buffers {
    /// Take GPU `r`, a stream on it, and two buffers of `mib` MiB; fill the send buffer.
    fn new(cuda: &Cuda, r: u32, mib: u64) -> Result<Buffers, HelperError> {
        let stream = cuda.select(r)?;
        let count = usize::try_from(mib.max(1) * 1024 * 1024 / 4).unwrap_or(1 << 24);
        let bytes = count * 4;
        let host: Vec<f32> = (0..count).map(|i| pattern(i, r)).collect();
        let send = cuda.alloc(bytes)?;
        let recv = cuda.alloc(bytes)?;
        cuda.to_device(&send, &host)?;
        Ok(Buffers {
            stream,
            send,
            recv,
            count,
        })
    }
}

/// Copy the result back and compare every element with [`expected`]: the rank's verdict.
fn verify(
    cuda: &Cuda,
    bufs: &Buffers,
    rank: u32,
    nranks: u32,
    seconds: f64,
) -> Result<RankResult, Stop> {
    let mut out = vec![0f32; bufs.count];
    cuda.to_host(&mut out, &bufs.recv)?;
    let mut mismatches = 0u64;
    let mut first = None;
    for (i, got) in out.iter().enumerate() {
        let want = expected(i, nranks);
        if got.to_bits() != want.to_bits() {
            mismatches += 1;
            if first.is_none() {
                first = Some((i as u64, f64::from(want), f64::from(*got)));
            }
        }
    }
    let error = (mismatches > 0).then(|| {
        let (at, want, got) = first.unwrap_or((0, 0.0, 0.0));
        HelperError {
            rank: Some(rank),
            ..HelperError::new(
                Stage::Verify,
                format!(
                    "wrong allreduce result on rank {rank}: {mismatches} of {} float32 elements differ; first at \
                     index {at} (expected {want}, got {got})",
                    bufs.count
                ),
            )
        }
    });
    Ok(RankResult {
        rank,
        ok: mismatches == 0,
        nranks: Some(nranks),
        bytes: Some(bufs.send.bytes() as u64),
        seconds: Some(seconds),
        mismatches: Some(mismatches),
        first_mismatch: first,
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_sums_exactly() {
        for n in 1..=8u32 {
            for i in 0..14 {
                let sum: f32 = (0..n).map(|r| pattern(i, r)).sum();
                assert_eq!(sum.to_bits(), expected(i, n).to_bits(), "n={n} i={i}");
            }
        }
    }

    #[test]
    fn ids_pass_through_hex() {
        let bytes: Vec<u8> = (0..128u8).collect();
        let id = UniqueId::from_bytes(&bytes).expect("128 bytes");
        assert_eq!(unhex(&format!("{}\n", id.hex())), Some(bytes));
        assert!(unhex("abc").is_none());
        assert!(UniqueId::from_bytes(&[0u8; 127]).is_none());
    }
}
