//! The helper ↔ entrypoint protocol: what `ncclenv-check` writes on its standard output, one JSON object per
//! line, and what the entrypoint reads back. Both sides use these types, so they cannot drift apart.
//!
//! Each line is one [`HelperMsg`]; its `ev` field names the kind. Anything NCCL prints itself
//! (`NCCL_DEBUG=INFO` writes to stdout) is redirected to the helper's standard error, so stdout carries only
//! protocol lines.
//!
//! - `{"ev":"step","rank":R,"step":S,"t_ms":T}` ([`StepMsg`]): rank R (absent for the orchestrator) entered
//!   step S ([`Step`]), T ms after the process started.
//! - `{"ev":"lib","what":"nccl"|"cuda","path":P,"nccl_version":V,"cuda":"driver"|"runtime"}` ([`LibMsg`]):
//!   which library was loaded.
//! - `{"ev":"id","rank":0,"addr":A,"port":P,"family":F,"id":HEX,"nranks":N,"gpus_visible":G}` ([`IdMsg`]):
//!   rank 0 made the unique id (the orchestrator forwards it without `id`).
//! - `{"ev":"nogpu","rank":0,"note":TEXT}` ([`NoGpuMsg`]): rank 0 found no usable GPU; the orchestrator falls
//!   back to the bootstrap check.
//! - `{"ev":"rank_result","rank":R,"ok":B,...}` ([`RankResult`]): one rank's verdict (forwarded).
//! - `{"ev":"result","mode":"bootstrap"|"allreduce","ok":B,...}` ([`HelperResult`]): the final verdict, last
//!   line. Failures carry `error` ([`HelperError`]: stage, NCCL code, `ncclGetErrorString`,
//!   `ncclGetLastError(NULL)`, places looked).
//! - `{"ev":"version","note":V}` ([`VersionMsg`]): `ncclenv-check --version`.
//!
//! `ev` is the first key of every line; the other fields are written in the order listed, optional ones left
//! out when unknown (an error's fields are always written, `null` when unknown). A line that is not one of
//! these messages (`ev` missing or not first, another `ev`, a missing required field, a field of the wrong
//! type) is not protocol: the entrypoint keeps it as stray output.
//!
//! Exit status of the helper: [`EXIT_RESULT`] when a result line was written (whatever its verdict),
//! [`EXIT_USAGE`] on bad usage.

use serde::de::value::MapAccessDeserializer;
use serde::de::{Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Exit status of the helper when it wrote its `result` line, whatever the verdict.
pub const EXIT_RESULT: i32 = 0;
/// Exit status of the helper on bad usage (after a `result` line of stage `usage`).
pub const EXIT_USAGE: i32 = 2;

/// Size of `ncclUniqueId` in bytes (`NCCL_UNIQUE_ID_BYTES`, src/nccl.h.in).
pub const UNIQUE_ID_BYTES: usize = 128;

/// The names of a unit enum on the wire: `ALL`, `name()`, and `Serialize`/`Deserialize` as that string. One
/// small reader ([`by_name`]) serves every such enum, where serde's derive would add a visitor to each.
macro_rules! wire_names {
    ($t:ident { $($v:ident => $n:literal),+ $(,)? }) => {
        impl $t {
            /// Every value, with its name on the wire.
            pub const ALL: &'static [($t, &'static str)] = &[$(($t::$v, $n)),+];

            /// The name on the wire.
            pub fn name(self) -> &'static str {
                match self {
                    $($t::$v => $n),+
                }
            }
        }

        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                by_name(d, $t::ALL)
            }
        }
    };
}

/// Read a string and find it among `all` (the names of a [`wire_names!`] enum).
fn by_name<'de, D: Deserializer<'de>, T: Copy>(
    d: D,
    all: &[(T, &'static str)],
) -> Result<T, D::Error> {
    let s = String::deserialize(d)?;
    all.iter()
        .find(|(_, n)| *n == s)
        .map(|(v, _)| *v)
        .ok_or_else(|| D::Error::custom(format_args!("unknown name {s:?}")))
}

/// Which check the helper ran (`mode` of a result).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `ncclGetVersion` + `ncclGetUniqueId` in a throwaway process.
    Bootstrap,
    /// One rank process per GPU and a verified allreduce.
    Allreduce,
}

wire_names!(Mode {
    Bootstrap => "bootstrap",
    Allreduce => "allreduce",
});

impl From<Mode> for crate::config::CheckMode {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Bootstrap => crate::config::CheckMode::Bootstrap,
            Mode::Allreduce => crate::config::CheckMode::Allreduce,
        }
    }
}

/// The steps a rank (or the orchestrator) goes through, in order: the last one reported before a hang says
/// where it hung.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// `dlopen` of libnccl and CUDA.
    Load,
    /// CUDA device selection and buffers.
    Cuda,
    /// `ncclGetUniqueId`.
    Id,
    /// `ncclCommInitRank`.
    Init,
    /// `ncclAllReduce` and the stream synchronisation.
    Collective,
    /// Copying the result back and comparing every element.
    Verify,
}

wire_names!(Step {
    Load => "load",
    Cuda => "cuda",
    Id => "id",
    Init => "init",
    Collective => "collective",
    Verify => "verify",
});

/// Where a check failed (`stage` of a [`HelperError`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// No libnccl (or CUDA library) could be loaded.
    Load,
    /// The library lacks a symbol the check needs.
    Symbol,
    /// A CUDA call failed (the code is CUDA's).
    Cuda,
    /// `ncclGetUniqueId` failed.
    Id,
    /// `ncclCommInitRank` failed (or a rank got no unique id).
    Init,
    /// `ncclAllReduce` or the stream synchronisation failed.
    Collective,
    /// The result was wrong, or could not be copied back.
    Verify,
    /// The helper was called wrongly.
    Usage,
    /// A rank process could not be started.
    Spawn,
    /// A rank process died without a verdict.
    Crash,
}

impl Stage {
    /// True for the stages at which NCCL was never asked (no library loaded, no rank started): the check
    /// could not run (exit `CHECK_UNAVAILABLE`, as `CheckReport::could_not_run` reads them), it did not fail.
    pub fn asks_nccl_nothing(self) -> bool {
        matches!(self, Stage::Load | Stage::Spawn)
    }
}

wire_names!(Stage {
    Load => "load",
    Symbol => "symbol",
    Cuda => "cuda",
    Id => "id",
    Init => "init",
    Collective => "collective",
    Verify => "verify",
    Usage => "usage",
    Spawn => "spawn",
    Crash => "crash",
});

/// Which library a [`LibMsg`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LibKind {
    /// libnccl.
    Nccl,
    /// libcuda or libcudart.
    Cuda,
}

wire_names!(LibKind {
    Nccl => "nccl",
    Cuda => "cuda",
});

/// The CUDA flavour the ranks use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaApi {
    /// The driver API (`libcuda.so.1`).
    Driver,
    /// The runtime API (`libcudart`).
    Runtime,
}

wire_names!(CudaApi {
    Driver => "driver",
    Runtime => "runtime",
});

/// An error reported by the helper (protocol field `error`). Every field is written, `null` when unknown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelperError {
    /// Where it failed.
    pub stage: Stage,
    /// NCCL result code (`ncclResult_t`), or the CUDA error number for stage `cuda`.
    pub code: Option<i32>,
    /// `ncclGetErrorString(code)` (or `cuGetErrorString`/`cudaGetErrorString`).
    pub error_string: Option<String>,
    /// `ncclGetLastError(NULL)`: NCCL's last warning text, also without `NCCL_DEBUG`.
    pub last_error: Option<String>,
    /// Human message from the helper.
    #[serde(default)]
    pub message: String,
    /// Places looked for a library (stage `load`), each `path: why not`.
    #[serde(default)]
    pub looked: Vec<String>,
    /// The rank it happened on, when it is a rank's error.
    pub rank: Option<u32>,
}

impl HelperError {
    /// An error at `stage` with `message` and nothing else known.
    pub fn new(stage: Stage, message: impl Into<String>) -> HelperError {
        HelperError {
            stage,
            code: None,
            error_string: None,
            last_error: None,
            message: message.into(),
            looked: Vec::new(),
            rank: None,
        }
    }
}

/// `step`: a rank (or the orchestrator) entered a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepMsg {
    /// The rank (absent: the orchestrator or the bootstrap check).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The step entered.
    pub step: Step,
    /// Milliseconds since the reporting process started.
    #[serde(default)]
    pub t_ms: u64,
}

/// `lib`: a library was loaded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LibMsg {
    /// The rank that loaded it (set by the orchestrator when it forwards a rank's line).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// Which library.
    pub what: LibKind,
    /// Its path (`dladdr` of a symbol when the loader found it).
    pub path: String,
    /// `ncclGetVersion`: X·10000+Y·100+Z (X·1000+Y·100+Z before 2.9); NCCL only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl_version: Option<i32>,
    /// The CUDA flavour; CUDA only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda: Option<CudaApi>,
}

/// The bootstrap address NCCL put into a unique id (fields `addr`, `port`, `family`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bootstrap {
    /// The address, when the family is AF_INET or AF_INET6.
    pub addr: Option<String>,
    /// The port, with the address.
    pub port: Option<u16>,
    /// `AF_INET`, `AF_INET6` or `family N`.
    pub family: Option<String>,
}

impl Bootstrap {
    /// The address decoded from a unique id ([`decode_unique_id`]).
    pub fn from_unique_id(id: &[u8]) -> Bootstrap {
        match decode_unique_id(id) {
            Ok((a, p)) => Bootstrap {
                addr: Some(a.to_string()),
                port: Some(p),
                family: Some(if a.is_ipv4() { "AF_INET" } else { "AF_INET6" }.into()),
            },
            Err(f) => Bootstrap {
                family: Some(format!("family {f}")),
                ..Bootstrap::default()
            },
        }
    }
}

/// `id`: rank 0 made the unique id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdMsg {
    /// Always 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// Bootstrap address decoded from the unique id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// Bootstrap port decoded from the unique id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// `AF_INET`, `AF_INET6` or `family N`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// The 128-byte unique id in hex (rank 0 → orchestrator only; not forwarded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Ranks in the communicator.
    pub nranks: u32,
    /// GPUs visible to CUDA (`cuDeviceGetCount` / `cudaGetDeviceCount`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_visible: Option<u32>,
}

/// `nogpu`: rank 0 found no usable GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoGpuMsg {
    /// Always 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// Why (no CUDA library, no device).
    #[serde(default)]
    pub note: String,
    /// The places looked, when no CUDA library was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<HelperError>,
}

/// `rank_result`: one rank's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankResult {
    /// The rank.
    pub rank: u32,
    /// True when the rank's allreduce result was right.
    pub ok: bool,
    /// Ranks in the communicator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nranks: Option<u32>,
    /// Bytes reduced (float32 count × 4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Seconds the timed allreduce took on this rank.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// Elements whose value was wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatches: Option<u64>,
    /// First wrong element: index, expected, got.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_mismatch: Option<(u64, f64, f64)>,
    /// The failure, when `ok` is false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<HelperError>,
}

impl RankResult {
    /// A failed rank: `error` on `rank`.
    pub fn failed(rank: u32, error: HelperError) -> RankResult {
        RankResult {
            rank,
            ok: false,
            nranks: None,
            bytes: None,
            seconds: None,
            mismatches: None,
            first_mismatch: None,
            error: Some(error),
        }
    }
}

/// `result`: the final verdict, the helper's last line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelperResult {
    /// The check that ran (an allreduce without GPU reports `bootstrap`).
    pub mode: Mode,
    /// True when NCCL accepted the environment (and, for allreduce, every element was right).
    pub ok: bool,
    /// Path of the loaded libnccl.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `ncclGetVersion` (see [`LibMsg::nccl_version`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl_version: Option<i32>,
    /// Bootstrap address decoded from the unique id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// Bootstrap port decoded from the unique id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// `AF_INET`, `AF_INET6` or `family N`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// Ranks in the communicator (allreduce).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nranks: Option<u32>,
    /// GPUs visible to CUDA (allreduce; 0 when it fell back to bootstrap).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_visible: Option<u32>,
    /// Bytes per rank reduced (float32 count × 4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Seconds the timed allreduce took (slowest rank).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// Algorithm bandwidth in GB/s (10^9 bytes/s): bytes / seconds, as nccl-tests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub algbw_gbps: Option<f64>,
    /// Bus bandwidth in GB/s: algbw · 2(n−1)/n, as nccl-tests for allreduce.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busbw_gbps: Option<f64>,
    /// A remark (one-rank communicator, fallback…).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The failure, when `ok` is false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<HelperError>,
    /// Per-rank results (allreduce), each written as a `rank_result` message.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "tagged_ranks",
        deserialize_with = "ranks_as_messages"
    )]
    pub ranks: Vec<RankResult>,
}

impl HelperResult {
    /// A result of `mode` with `ok` and nothing else known.
    pub fn new(mode: Mode, ok: bool) -> HelperResult {
        HelperResult {
            mode,
            ok,
            path: None,
            nccl_version: None,
            addr: None,
            port: None,
            family: None,
            nranks: None,
            gpus_visible: None,
            bytes: None,
            seconds: None,
            algbw_gbps: None,
            busbw_gbps: None,
            note: None,
            error: None,
            ranks: Vec::new(),
        }
    }

    /// A failed result of `mode`.
    pub fn failed(mode: Mode, error: HelperError) -> HelperResult {
        HelperResult {
            error: Some(error),
            ..HelperResult::new(mode, false)
        }
    }

    /// Set the bootstrap address fields.
    pub fn set_bootstrap(&mut self, b: Bootstrap) {
        self.addr = b.addr;
        self.port = b.port;
        self.family = b.family;
    }
}

/// `version`: the helper's version (`ncclenv-check --version`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VersionMsg {
    /// The crate version.
    pub note: String,
}

/// One protocol line (see the module documentation); `ev`, its first key, names the kind.
///
/// Written with serde's internal tagging (`ev` first). Read by [`HelperMsg`]'s own `Deserialize`, which
/// takes `ev` as the first key and then reads the kind's fields straight from the line: serde's generic
/// reading of an internally tagged enum buffers every line into a tree first, which costs the static
/// entrypoint several KiB of code.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum HelperMsg {
    /// A step entered.
    Step(StepMsg),
    /// A library loaded.
    Lib(LibMsg),
    /// Rank 0's unique id.
    Id(IdMsg),
    /// Rank 0 found no GPU.
    Nogpu(NoGpuMsg),
    /// One rank's verdict.
    RankResult(RankResult),
    /// The final verdict.
    Result(HelperResult),
    /// The helper's version.
    Version(VersionMsg),
}

impl HelperMsg {
    /// Parse one line; `None` when it is not a protocol message.
    pub fn parse(line: &str) -> Option<HelperMsg> {
        serde_json::from_str(line).ok()
    }

    /// The line to write: the JSON object and `\n` (`None` if it cannot be serialised).
    pub fn to_line(&self) -> Option<Vec<u8>> {
        let mut line = serde_json::to_vec(self).ok()?;
        line.push(b'\n');
        Some(line)
    }

    /// The rank the message is about, if it names one.
    pub fn rank(&self) -> Option<u32> {
        match self {
            HelperMsg::Step(m) => m.rank,
            HelperMsg::Lib(m) => m.rank,
            HelperMsg::Id(m) => m.rank,
            HelperMsg::Nogpu(m) => m.rank,
            HelperMsg::RankResult(m) => Some(m.rank),
            HelperMsg::Result(_) | HelperMsg::Version(_) => None,
        }
    }

    /// Name `rank` in a message that names none (the orchestrator forwarding a rank's line).
    pub fn set_rank_if_absent(&mut self, rank: u32) {
        let slot = match self {
            HelperMsg::Step(m) => &mut m.rank,
            HelperMsg::Lib(m) => &mut m.rank,
            HelperMsg::Id(m) => &mut m.rank,
            HelperMsg::Nogpu(m) => &mut m.rank,
            HelperMsg::RankResult(_) | HelperMsg::Result(_) | HelperMsg::Version(_) => return,
        };
        slot.get_or_insert(rank);
    }
}

/// The kinds of message, as `ev` names them (the variants of [`HelperMsg`], renamed as it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Step,
    Lib,
    Id,
    Nogpu,
    RankResult,
    Result,
    Version,
}

wire_names!(Kind {
    Step => "step",
    Lib => "lib",
    Id => "id",
    Nogpu => "nogpu",
    RankResult => "rank_result",
    Result => "result",
    Version => "version",
});

impl<'de> Deserialize<'de> for HelperMsg {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<HelperMsg, D::Error> {
        d.deserialize_map(MsgVisitor)
    }
}

/// Reads `ev` (the first key), then the rest of the object as that kind's fields.
struct MsgVisitor;

impl<'de> Visitor<'de> for MsgVisitor {
    type Value = HelperMsg;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object whose first key is \"ev\"")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HelperMsg, A::Error> {
        if map.next_key::<String>()?.as_deref() != Some("ev") {
            return Err(A::Error::custom("the first key is not \"ev\""));
        }
        let kind: Kind = map.next_value()?;
        let rest = MapAccessDeserializer::new(map);
        Ok(match kind {
            Kind::Step => HelperMsg::Step(StepMsg::deserialize(rest)?),
            Kind::Lib => HelperMsg::Lib(LibMsg::deserialize(rest)?),
            Kind::Id => HelperMsg::Id(IdMsg::deserialize(rest)?),
            Kind::Nogpu => HelperMsg::Nogpu(NoGpuMsg::deserialize(rest)?),
            Kind::RankResult => HelperMsg::RankResult(RankResult::deserialize(rest)?),
            Kind::Result => HelperMsg::Result(HelperResult::deserialize(rest)?),
            Kind::Version => HelperMsg::Version(VersionMsg::deserialize(rest)?),
        })
    }
}

/// A `result` or `rank_result` written with its `ev` tag, as a line of its own would be.
#[derive(Serialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
enum Tagged<'a> {
    RankResult(&'a RankResult),
    Result(&'a HelperResult),
}

/// Per-rank results as `rank_result` messages (field `ranks` of a result).
fn tagged_ranks<S: Serializer>(ranks: &[RankResult], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(ranks.iter().map(Tagged::RankResult))
}

/// Per-rank results read as the `rank_result` messages they are written as (through [`HelperMsg`]'s reader,
/// not a second reader of [`RankResult`]); an element of another kind is an error.
fn ranks_as_messages<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<RankResult>, D::Error> {
    Vec::<HelperMsg>::deserialize(d)?
        .into_iter()
        .map(|m| match m {
            HelperMsg::RankResult(r) => Ok(r),
            _ => Err(D::Error::custom(
                "ranks holds a message that is not a rank_result",
            )),
        })
        .collect()
}

/// A result as its `result` message (with `ev`), for a report that shows the helper's line.
pub fn tagged_result(r: &HelperResult) -> impl Serialize + '_ {
    Tagged::Result(r)
}

/// Decode the bootstrap address from a unique id: bytes 0–7 are the magic, bytes 8… a `sockaddr_in` or
/// `sockaddr_in6` (`struct ncclBootstrapHandle { uint64_t magic; union ncclSocketAddress addr; }`,
/// src/include/bootstrap.h, unchanged 2.18–2.32). Family is a little-endian u16 (x86-64/aarch64 hosts), the
/// port is big-endian. Returns `(address, port)`, or the family number when it is neither AF_INET (2) nor
/// AF_INET6 (10).
pub fn decode_unique_id(id: &[u8]) -> Result<(IpAddr, u16), u16> {
    if id.len() < 8 + 28 {
        return Err(0);
    }
    let family = u16::from_le_bytes([id[8], id[9]]);
    let port = u16::from_be_bytes([id[10], id[11]]);
    match family {
        2 => {
            let a = Ipv4Addr::new(id[12], id[13], id[14], id[15]);
            Ok((IpAddr::V4(a), port))
        }
        10 => {
            let mut b = [0u8; 16];
            b.copy_from_slice(&id[16..32]);
            Ok((IpAddr::V6(Ipv6Addr::from(b)), port))
        }
        other => Err(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_ipv4_and_ipv6_ids() {
        let mut id = [0u8; 128];
        id[8..10].copy_from_slice(&2u16.to_le_bytes());
        id[10..12].copy_from_slice(&40000u16.to_be_bytes());
        id[12..16].copy_from_slice(&[10, 0, 0, 2]);
        assert_eq!(
            decode_unique_id(&id),
            Ok((IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 40000))
        );
        let mut id6 = [0u8; 128];
        id6[8..10].copy_from_slice(&10u16.to_le_bytes());
        id6[10..12].copy_from_slice(&1234u16.to_be_bytes());
        let a: Ipv6Addr = "fd00::2".parse().unwrap_or(Ipv6Addr::UNSPECIFIED);
        id6[16..32].copy_from_slice(&a.octets());
        assert_eq!(decode_unique_id(&id6), Ok((IpAddr::V6(a), 1234)));
        assert_eq!(decode_unique_id(&[0u8; 128]), Err(0));
        assert_eq!(decode_unique_id(&[0u8; 10]), Err(0));
    }

    /// The lines as the helper wrote them before the protocol was typed (a bag of optional fields in one
    /// struct): every kind parses, and writes back byte for byte.
    #[test]
    fn lines_round_trip_byte_for_byte() {
        let lines = [
            r#"{"ev":"step","step":"load","t_ms":0}"#,
            r#"{"ev":"step","rank":1,"step":"collective","t_ms":12}"#,
            r#"{"ev":"lib","rank":0,"what":"nccl","path":"/x/libnccl.so.2","nccl_version":22105}"#,
            r#"{"ev":"lib","rank":0,"what":"cuda","path":"/x/libcuda.so.1","cuda":"driver"}"#,
            r#"{"ev":"id","rank":0,"addr":"10.0.0.2","port":40000,"family":"AF_INET","id":"00ff","nranks":2,"gpus_visible":2}"#,
            r#"{"ev":"id","rank":0,"family":"family 7","nranks":1,"gpus_visible":1}"#,
            r#"{"ev":"nogpu","rank":0,"note":"CUDA sees 0 devices"}"#,
            r#"{"ev":"rank_result","rank":1,"ok":false,"error":{"stage":"verify","code":null,"error_string":null,"last_error":null,"message":"wrong","looked":[],"rank":1}}"#,
            r#"{"ev":"rank_result","rank":0,"ok":false,"nranks":2,"bytes":1048576,"seconds":0.5,"mismatches":1,"first_mismatch":[3,4.0,5.0]}"#,
            r#"{"ev":"result","mode":"bootstrap","ok":true,"path":"/x/libnccl.so.2","nccl_version":22707,"addr":"fd00::2","port":1234,"family":"AF_INET6"}"#,
            r#"{"ev":"result","mode":"bootstrap","ok":false,"error":{"stage":"load","code":null,"error_string":null,"last_error":null,"message":"libnccl.so.2 not found","looked":["a: not found"],"rank":null}}"#,
            r#"{"ev":"result","mode":"allreduce","ok":true,"nccl_version":22105,"addr":"127.0.0.1","port":5,"family":"AF_INET","nranks":1,"gpus_visible":1,"bytes":4,"seconds":0.25,"algbw_gbps":1.6e-8,"busbw_gbps":0.0,"note":"one","ranks":[{"ev":"rank_result","rank":0,"ok":true,"nranks":1,"bytes":4,"seconds":0.25,"mismatches":0}]}"#,
            r#"{"ev":"version","note":"0.1.0"}"#,
        ];
        for l in lines {
            let m = HelperMsg::parse(l).unwrap_or_else(|| panic!("not parsed: {l}"));
            let out = m.to_line().expect("serialised");
            assert_eq!(String::from_utf8_lossy(&out), format!("{l}\n"));
        }
    }

    #[test]
    fn what_is_not_a_message_is_not_parsed() {
        for l in [
            "",
            "x",
            r#"{"ev":"other"}"#,
            r#"{"ev":""}"#,
            r#"{"step":"load"}"#,
            r#"{"ev":"step"}"#,
            r#"{"ev":"step","step":"nap"}"#,
            r#"{"ev":"step","step":"load","rank":"0"}"#,
            r#"{"ev":"result","ok":true}"#,
            r#"{"ev":"result","mode":"bootstrap","ok":true,"error":{"stage":"elsewhere"}}"#,
            r#"{"step":"load","ev":"step"}"#,
            r#"{"ev":"result","mode":"allreduce","ok":true,"ranks":[{"ev":"step","step":"load"}]}"#,
            r#"{"ev":"result","mode":"allreduce","ok":true,"ranks":[{"rank":0,"ok":true}]}"#,
            r#"["ev","step"]"#,
        ] {
            assert_eq!(HelperMsg::parse(l), None, "{l}");
        }
        // Fields that are not the kind's are ignored.
        assert!(HelperMsg::parse(r#"{"ev":"step","step":"load","note":"x"}"#).is_some());
    }

    #[test]
    fn steps_are_ordered_as_the_rank_goes() {
        let mut all = [
            Step::Verify,
            Step::Load,
            Step::Collective,
            Step::Id,
            Step::Init,
            Step::Cuda,
        ];
        all.sort();
        let names: Vec<&str> = all.iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            ["load", "cuda", "id", "init", "collective", "verify"]
        );
    }
}
