//! NCCL's own debug output: what `NCCL_DEBUG`, `NCCL_DEBUG_SUBSYS` and `NCCL_DEBUG_FILE` mean to a given NCCL
//! version, and the shape of the lines NCCL writes. The only place that knows NCCL's log format (`explain` reads
//! logs through it; `decide::debug` asks it which subsystems show what).
//!
//! Sources (NVIDIA/nccl, tags v2.21.5-1 and v2.27.7-1 unless a version is named):
//! - `src/debug.cc`, `ncclDebugInit`: the level names, the subsystem names (`strcasecmp` chain; an unknown name
//!   adds nothing), `^` inverts, `NCCL_DEBUG_FILE` expands `%h` (host name up to its first `.`, from
//!   `getHostName` in src/misc/utils.cc) and `%p` (pid), `%%` is `%`, and the file is opened with `fopen(…, "w")`
//!   (its folder must exist; when `fopen` fails NCCL logs to stdout). In 2.30 (`src/debug.cc` with
//!   `ncclParamBitsetOf`, src/include/param/parser_bitset.h and param.h) one unknown name makes the whole value
//!   invalid and NCCL falls back to its default subsystems.
//! - `src/debug.cc`, `ncclDebugLog`: the line prefix `host:pid:tid [cudaDev] NCCL INFO …`,
//!   `host:pid:tid [cudaDev] file.cc:line NCCL WARN …` (after an empty line), `host:pid:tid [cudaDev] ms file:line
//!   NCCL TRACE …` and `host:pid:tid NCCL CALL …`; from 2.26 on a WARN line starts with a timestamp
//!   (`[%F %T] ` by default, `NCCL_DEBUG_TIMESTAMP_FORMAT`). Without a GPU the `cudaDev` field holds whatever the
//!   failed `cudaGetDevice` left (any integer).
//! - `src/init.cc`, `showVersion`: `NCCL version X.Y.Z+cudaA.B`, printed without any prefix (2.21.5 `printf`s
//!   it; 2.27.7 logs it at level VERSION, which has no prefix, or as an INFO line).
//! - `src/bootstrap.cc`, `bootstrapNetInit`: `Bootstrap : Using%s` under `INIT` up to 2.22, under `BOOTSTRAP` in
//!   2.23, and `Bootstrap: Using%s` under `BOOTSTRAP` from 2.24 on; `%s` is ` ifname:address<port>` from
//!   `ncclSocketToString` (src/misc/socket.cc: `getnameinfo` numeric host, so an IPv6 link-local address carries
//!   `%scope`).

use std::net::IpAddr;

/// A subsystem name of `NCCL_DEBUG_SUBSYS`, with the first NCCL version that knows it (`ncclDebugInit`,
/// src/debug.cc; `BOOTSTRAP`, `REG` since 2.21, `PROFILE` since 2.22, `RAS` since 2.24, `ALLOC_HOST` and
/// `DESTROY` in 2.30). Versions are encoded as `ncclGetVersion` does (X·10000 + Y·100 + Z).
pub const SUBSYSTEMS: &[(&str, u32)] = &[
    ("INIT", 0),
    ("COLL", 0),
    ("P2P", 0),
    ("SHM", 0),
    ("NET", 0),
    ("GRAPH", 0),
    ("TUNING", 0),
    ("ENV", 0),
    ("ALLOC", 0),
    ("CALL", 0),
    ("PROXY", 0),
    ("NVLS", 0),
    ("BOOTSTRAP", 22100),
    ("REG", 22100),
    ("PROFILE", 22200),
    ("RAS", 22400),
    ("ALLOC_HOST", 23000),
    ("DESTROY", 23000),
    ("ALL", 0),
];

/// First version whose strict parameter parser drops the whole `NCCL_DEBUG_SUBSYS` value over one unknown
/// name (2.30: `bitsetResolve` returns `ncclInvalidArgument`, and the parameter keeps its default).
pub const STRICT_SUBSYS_SINCE: u32 = 23000;

/// First version that logs its bootstrap interface under `BOOTSTRAP` instead of `INIT` (2.23,
/// src/bootstrap.cc).
pub const BOOTSTRAP_SUBSYS_SINCE: u32 = 22300;

/// First version that spells the line `Bootstrap: Using` (no space before the colon; 2.24, src/bootstrap.cc).
pub const BOOTSTRAP_NO_SPACE_SINCE: u32 = 22400;

/// The subsystem under which `version` logs `Bootstrap : Using …` (see [`BOOTSTRAP_SUBSYS_SINCE`]).
pub fn bootstrap_subsystem(version: u32) -> &'static str {
    if version >= BOOTSTRAP_SUBSYS_SINCE {
        "BOOTSTRAP"
    } else {
        "INIT"
    }
}

/// True when NCCL `version` knows the subsystem `name` (case-insensitive, as `strcasecmp`).
pub fn knows_subsystem(version: u32, name: &str) -> bool {
    SUBSYSTEMS
        .iter()
        .any(|(n, since)| n.eq_ignore_ascii_case(name) && version >= *since)
}

/// The default subsystems when `NCCL_DEBUG_SUBSYS` is unset (src/debug.cc): `INIT` up to 2.15, `INIT,ENV` from
/// 2.16, `INIT,BOOTSTRAP,ENV` from 2.23.
pub fn default_subsystems(version: u32) -> &'static [&'static str] {
    if version >= 22300 {
        &["INIT", "BOOTSTRAP", "ENV"]
    } else if version >= 21600 {
        &["INIT", "ENV"]
    } else {
        &["INIT"]
    }
}

/// Whether NCCL `version` logs subsystem `wanted` with `NCCL_DEBUG_SUBSYS=value` (`None`: unset), following
/// `ncclDebugInit`: comma-separated names, case-insensitive, a leading `^` inverts the list, `ALL` is every
/// subsystem; before 2.30 an unknown name adds nothing, from 2.30 it makes NCCL ignore the whole value.
pub fn subsystem_enabled(version: u32, value: Option<&str>, wanted: &str) -> bool {
    let Some(value) = value else {
        return default_subsystems(version)
            .iter()
            .any(|n| n.eq_ignore_ascii_case(wanted));
    };
    let (invert, list) = match value.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, value),
    };
    // `strtok` skips empty tokens.
    let names: Vec<&str> = list.split(',').filter(|n| !n.is_empty()).collect();
    if version >= STRICT_SUBSYS_SINCE && names.iter().any(|n| !knows_subsystem(version, n)) {
        return subsystem_enabled(version, None, wanted);
    }
    let listed = names.iter().any(|n| {
        knows_subsystem(version, n)
            && (n.eq_ignore_ascii_case(wanted) || n.eq_ignore_ascii_case("ALL"))
    });
    listed != invert
}

/// True when `NCCL_DEBUG=value` makes NCCL write INFO lines (`INFO` or `TRACE`, case-insensitive; any other
/// value, `VERSION`, `WARN`, `ABORT` or a typo, does not; src/debug.cc `ncclDebugInit`).
pub fn level_shows_info(value: &str) -> bool {
    value.eq_ignore_ascii_case("INFO") || value.eq_ignore_ascii_case("TRACE")
}

/// `path` written so that `NCCL_DEBUG_FILE` reads it literally: every `%` doubled (NCCL expands `%h`, `%p` and
/// `%%`, src/debug.cc).
pub fn escape_debug_file(path: &str) -> String {
    path.replace('%', "%%")
}

/// `"2.27.7"` (also `"2.27.7+cuda12.9"`) → `22707`, the `ncclGetVersion` encoding.
pub fn version_code(v: &str) -> Option<u32> {
    let v = v.split('+').next().unwrap_or(v);
    let mut parts = v.split('.');
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    let patch: String = parts
        .next()?
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let patch: u32 = patch.parse().ok()?;
    if minor > 99 || patch > 99 {
        return None;
    }
    Some(major * 10000 + minor * 100 + patch)
}

/// The level of one NCCL log line (`ncclDebugLogLevel`, src/include/nccl_common.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// `NCCL INFO`.
    Info,
    /// `NCCL WARN`: NCCL's own error report; the text is also what `ncclGetLastError` returns.
    Warn,
    /// `NCCL TRACE` (debug builds).
    Trace,
    /// `NCCL CALL` (API tracing).
    Call,
}

/// One line NCCL wrote, split at its prefix (see the module documentation for the formats).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line<'a> {
    /// The host name NCCL logged (`gethostname` up to the first `.`).
    pub host: &'a str,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// INFO, WARN, TRACE or CALL.
    pub level: Level,
    /// `file.cc:line` of a WARN or TRACE line.
    pub source: Option<&'a str>,
    /// The message after `NCCL INFO ` / `NCCL WARN ` / ….
    pub message: &'a str,
}

/// The markers after the prefix, with their level.
const MARKERS: &[(&str, Level)] = &[
    ("NCCL INFO", Level::Info),
    ("NCCL WARN", Level::Warn),
    ("NCCL TRACE", Level::Trace),
    ("NCCL CALL", Level::Call),
];

/// Parse one line of NCCL output. Anything before NCCL's prefix is allowed (a launcher's `[rank0]:`, a
/// timestamp, a container runtime's tag), so lines of a job's combined log are found too. Returns `None` for
/// lines that are not NCCL's (including the bare `NCCL version …` line: see [`parse_version`]).
pub fn parse_line(line: &str) -> Option<Line<'_>> {
    let line = line.trim_end_matches(['\r', '\n']);
    let mut best: Option<Line<'_>> = None;
    for (marker, level) in MARKERS {
        let mut from = 0;
        while let Some(i) = line[from..].find(marker).map(|i| i + from) {
            from = i + marker.len();
            let after = &line[i + marker.len()..];
            let message = match after.strip_prefix(' ') {
                Some(m) => m,
                None if after.is_empty() => "",
                None => continue,
            };
            if let Some(l) = parse_prefix(&line[..i], *level, message) {
                let better = best
                    .as_ref()
                    .is_none_or(|b| b.message.len() < l.message.len());
                if better {
                    best = Some(l);
                }
                break;
            }
        }
    }
    best
}

/// The prefix before the marker, read from its end: `host:pid:tid [dev]` (INFO), `… [dev] file:line` (WARN),
/// `… [dev] ms file:line` (TRACE), `host:pid:tid` (CALL).
fn parse_prefix<'a>(pre: &'a str, level: Level, message: &'a str) -> Option<Line<'a>> {
    let mut toks = pre.split_whitespace().rev().peekable();
    let mut source = None;
    if matches!(level, Level::Warn | Level::Trace) {
        // NCCL 2.29 and later put the function after the source: `bootstrap.cc:126 (bootstrapNetInit) NCCL
        // WARN …` (measured with the 2.29.7 and 2.30.7 wheels).
        toks.next_if(|t| t.starts_with('(') && t.ends_with(')'));
        let s = toks.next()?;
        let (file, num) = s.rsplit_once(':')?;
        if file.is_empty() || num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        source = Some(s);
    }
    if level == Level::Trace {
        let ms = toks.next()?;
        if ms.is_empty() || !ms.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return None;
        }
    }
    if level != Level::Call {
        let dev = toks.next()?;
        let inner = dev.strip_prefix('[')?.strip_suffix(']')?;
        inner.parse::<i64>().ok()?;
    }
    let who = toks.next()?;
    let (rest, tid) = who.rsplit_once(':')?;
    let (host_raw, pid) = rest.rsplit_once(':')?;
    let pid: u32 = pid.parse().ok()?;
    let tid: u32 = tid.parse().ok()?;
    // The host name is the tail of the token made of host-name characters (a launcher may glue its own tag,
    // `[default0]:`, to it).
    let start = host_raw
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .last()
        .map(|(i, _)| i)?;
    let host = &host_raw[start..];
    Some(Line {
        host,
        pid,
        tid,
        level,
        source,
        message,
    })
}

/// `NCCL version 2.21.5+cuda12.4` anywhere in `text` → `("2.21.5", Some("12.4"))` (src/init.cc `VERSION_STRING`).
pub fn parse_version(text: &str) -> Option<(String, Option<String>)> {
    let i = text.find("NCCL version ")?;
    let tok = text[i + "NCCL version ".len()..]
        .split_whitespace()
        .next()?;
    let (v, cuda) = match tok.split_once("+cuda") {
        Some((v, c)) => (v, Some(c.to_string())),
        None => (tok, None),
    };
    version_code(v)?;
    Some((v.to_string(), cuda))
}

/// An interface and its address as NCCL prints them (`ifname:address<port>`, `ncclSocketToString`). The name is
/// split at the first `:` after which an address parses, so an IPv4 alias label (`eth0:1`) stays whole; an
/// IPv6 `%scope` is dropped.
pub fn parse_if_addr(s: &str) -> Option<(String, IpAddr)> {
    let s = s.trim();
    let s = match s.rfind('<') {
        Some(i) if s.ends_with('>') => &s[..i],
        _ => s,
    };
    for (i, _) in s.match_indices(':') {
        let (name, addr) = (&s[..i], &s[i + 1..]);
        let addr = addr.split('%').next().unwrap_or(addr);
        if name.is_empty() {
            continue;
        }
        if let Ok(ip) = addr.parse::<IpAddr>() {
            return Some((name.to_string(), ip));
        }
    }
    None
}

/// What a `Bootstrap : Using` / `Bootstrap: Using` message says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bootstrap {
    /// The socket interface and address of bootstrap (`bootstrapNetInit`); `spaced` is true for the
    /// `Bootstrap : Using` spelling (NCCL ≤ 2.23).
    Socket {
        /// Interface name.
        ifname: String,
        /// Its address.
        addr: IpAddr,
        /// `Bootstrap : Using` (≤ 2.23) rather than `Bootstrap: Using` (≥ 2.24).
        spaced: bool,
    },
    /// The out-of-band network device (`netGetDevice`, src/bootstrap.cc, 2.23+ with `NCCL_OOB_NET_ENABLE=1`):
    /// `Bootstrap: Using mlx5_0:1`.
    Device(String),
}

/// Parse the bootstrap line's message (see [`Bootstrap`]).
pub fn parse_bootstrap(message: &str) -> Option<Bootstrap> {
    let (rest, spaced) = if let Some(r) = message.strip_prefix("Bootstrap : Using") {
        (r, true)
    } else if let Some(r) = message.strip_prefix("Bootstrap: Using") {
        (r, false)
    } else {
        return None;
    };
    let rest = rest.trim();
    if rest.ends_with('>') {
        let (ifname, addr) = parse_if_addr(rest)?;
        Some(Bootstrap::Socket {
            ifname,
            addr,
            spaced,
        })
    } else if !rest.is_empty() && !rest.contains(' ') {
        Some(Bootstrap::Device(rest.to_string()))
    } else {
        None
    }
}

/// `NET/Socket : Using [0]eth0:10.0.0.2<0> [1]eth1:…` (`ncclNetSocketInit`, src/transport/net_socket.cc) → the
/// interfaces, in NCCL's order.
pub fn parse_net_socket(message: &str) -> Option<Vec<(String, IpAddr)>> {
    let rest = message.strip_prefix("NET/Socket : Using")?;
    let mut out = Vec::new();
    for tok in rest.split_whitespace() {
        let Some(body) = tok.strip_prefix('[').and_then(|t| t.split_once(']')) else {
            continue;
        };
        if let Some(pair) = parse_if_addr(body.1) {
            out.push(pair);
        }
    }
    (!out.is_empty()).then_some(out)
}

/// What `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.2<0>` says (`ncclIbInit`,
/// src/transport/net_ib.cc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetIb {
    /// `device:port/IB` or `device:port/RoCE` entries (merged devices `{…}` are kept as written).
    pub devices: Vec<String>,
    /// The out-of-band socket interface and address.
    pub oob: Option<(String, IpAddr)>,
}

/// Parse a `NET/IB : Using` message (see [`NetIb`]).
pub fn parse_net_ib(message: &str) -> Option<NetIb> {
    let rest = message.strip_prefix("NET/IB : Using")?;
    let (devs, oob) = match rest.split_once("; OOB ") {
        Some((d, o)) => (d, parse_if_addr(o)),
        None => (rest, None),
    };
    let devices = devs
        .split_whitespace()
        .filter(|t| *t != "[RO]")
        .map(
            |t| match t.strip_prefix('[').and_then(|t| t.split_once(']')) {
                Some((_, d)) => d.to_string(),
                None => t.to_string(),
            },
        )
        .filter(|d| !d.is_empty())
        .collect();
    Some(NetIb { devices, oob })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_of_both_versions_and_of_combined_logs() {
        // As NCCL 2.21.5 wrote them here (see tests/it/explain.rs for the real files).
        let l = parse_line("vm:29971:29971 [32764] NCCL INFO Bootstrap : Using v0:10.77.0.2<0>")
            .expect("info");
        assert_eq!(
            (l.host, l.pid, l.tid, l.level),
            ("vm", 29971, 29971, Level::Info)
        );
        assert_eq!(l.message, "Bootstrap : Using v0:10.77.0.2<0>");
        // 2.27.7's WARN with its default timestamp; a garbage device number.
        let l = parse_line(
            "[2026-11-30 16:18:07] vm:1826:1826 [-9229500] misc/cudawrap.cc:257 NCCL WARN Cuda failure 'x'",
        )
        .expect("warn");
        assert_eq!(l.level, Level::Warn);
        assert_eq!(l.source, Some("misc/cudawrap.cc:257"));
        assert_eq!(l.message, "Cuda failure 'x'");
        // 2.29.7/2.30.7 name the function after the source.
        let l = parse_line(
            "[2026-12-02 20:21:27] vm:3217:3217 [0] bootstrap.cc:126 (bootstrapNetInit) NCCL WARN Bootstrap : no socket interface found",
        )
        .expect("warn with function");
        assert_eq!(l.source, Some("bootstrap.cc:126"));
        assert_eq!(l.message, "Bootstrap : no socket interface found");
        // A launcher's tag glued to the host name, and a hyphenated host.
        let l = parse_line(
            "[default0]:node-a:77:78 [0] NCCL INFO NET/Plugin: Using internal network plugin.",
        )
        .expect("tagged");
        assert_eq!((l.host, l.pid), ("node-a", 77));
        assert!(parse_line("NCCL version 2.21.5+cuda12.4").is_none());
        assert!(parse_line("training step 4 NCCL INFO something").is_none());
        assert!(parse_line("vm:1:1 [0] NCCL INFOx").is_none());
        let l = parse_line("vm:1:2 NCCL CALL ncclGetUniqueId(0x1)").expect("call");
        assert_eq!(l.level, Level::Call);
        let l = parse_line("vm:1:2 [0] 12.5 graph/search.cc:10 NCCL TRACE x").expect("trace");
        assert_eq!(
            (l.level, l.source),
            (Level::Trace, Some("graph/search.cc:10"))
        );
    }

    #[test]
    fn bootstrap_socket_and_ib_messages() {
        assert_eq!(
            parse_bootstrap("Bootstrap: Using v0:fd77::2<0>"),
            Some(Bootstrap::Socket {
                ifname: "v0".into(),
                addr: "fd77::2".parse().expect("ip"),
                spaced: false
            })
        );
        assert_eq!(
            parse_bootstrap("Bootstrap : Using eth0:1:10.0.0.3<0>"),
            Some(Bootstrap::Socket {
                ifname: "eth0:1".into(),
                addr: "10.0.0.3".parse().expect("ip"),
                spaced: true
            })
        );
        assert_eq!(
            parse_if_addr("veth9:fe80::1%veth9<0>"),
            Some(("veth9".into(), "fe80::1".parse().expect("ip")))
        );
        assert_eq!(
            parse_bootstrap("Bootstrap: Using mlx5_0:1"),
            Some(Bootstrap::Device("mlx5_0:1".into()))
        );
        let s = parse_net_socket("NET/Socket : Using [0]eth0:10.0.0.2<0> [1]eth1:10.0.1.2<0>")
            .expect("s");
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].0, "eth1");
        let ib = parse_net_ib(
            "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.30.0.5<0>",
        )
        .expect("ib");
        assert_eq!(ib.devices, vec!["mlx5_0:1/IB", "mlx5_1:1/RoCE"]);
        assert_eq!(ib.oob.map(|o| o.0), Some("ib0".to_string()));
    }

    #[test]
    fn versions() {
        assert_eq!(version_code("2.27.7"), Some(22707));
        assert_eq!(version_code("2.21.5+cuda12.4"), Some(22105));
        assert_eq!(version_code("2.x"), None);
        assert_eq!(
            parse_version("NCCL version 2.27.7+cuda12.9"),
            Some(("2.27.7".into(), Some("12.9".into())))
        );
        assert_eq!(parse_version("no version here"), None);
    }

    #[test]
    fn subsystems_follow_each_versions_parser() {
        // 2.27.7 logs the bootstrap line under BOOTSTRAP: the guides' INIT,ENV,NET hides it.
        assert!(!subsystem_enabled(
            22707,
            Some("INIT,ENV,NET"),
            bootstrap_subsystem(22707)
        ));
        assert!(subsystem_enabled(
            22105,
            Some("INIT,ENV,NET"),
            bootstrap_subsystem(22105)
        ));
        // Unset: the defaults carry it on both.
        assert!(subsystem_enabled(22707, None, "BOOTSTRAP"));
        assert!(subsystem_enabled(22105, None, "INIT"));
        // An unknown name adds nothing before 2.30 and voids the whole list from 2.30 on.
        assert!(subsystem_enabled(22707, Some("INIT,NOSUCH"), "INIT"));
        assert!(!subsystem_enabled(22707, Some("NOSUCH"), "INIT"));
        assert!(!subsystem_enabled(23000, Some("NET,NOSUCH"), "NET"));
        assert!(subsystem_enabled(23000, Some("NET,NOSUCH"), "INIT"));
        // BOOTSTRAP is unknown before 2.21: ignored there.
        assert!(!knows_subsystem(22005, "BOOTSTRAP"));
        assert!(subsystem_enabled(22005, Some("INIT,BOOTSTRAP"), "INIT"));
        // ^ inverts; ALL; case-insensitive; empty entries skipped.
        assert!(!subsystem_enabled(22707, Some("^BOOTSTRAP"), "BOOTSTRAP"));
        assert!(subsystem_enabled(22707, Some("^INIT"), "BOOTSTRAP"));
        assert!(subsystem_enabled(22707, Some("all"), "NET"));
        assert!(subsystem_enabled(22707, Some(",,bootstrap,"), "BOOTSTRAP"));
        assert!(level_shows_info("info") && level_shows_info("TRACE") && !level_shows_info("WARN"));
        assert_eq!(escape_debug_file("/a%b"), "/a%%b");
    }
}
