//! NCCL's own rules for socket interfaces and its variables, mirrored from its source. This module is the only
//! place that knows them; the decision asks it "what would NCCL do with this value here?", and `doctor` what
//! NCCL alone would do with the inherited environment ([`nccl_alone`], for the version the command loads:
//! [`nccl_target`]). The rules in words, with their sources: `docs/nccl-rules.md`.
//!
//! Sources (NVIDIA/nccl, tags 2.18.3 … 2.30.7):
//! - `initEnv`, `setEnvFile` in `src/misc/param.cc` (configuration files: the environment wins);
//! - `parseStringList`, `matchIf`, `matchIfList` in `src/misc/utils.cc` (list syntax);
//! - `findInterfaces`, `ncclFindInterfaces` in `src/misc/socket.cc` (interface order; `src/os/linux.cc` in 2.28+);
//! - `envSocketFamily` in `src/misc/socket.cc` (`NCCL_SOCKET_FAMILY`);
//! - `ncclLoadParam` in `src/misc/param.cc` (how every `NCCL_PARAM` integer variable is read).

use crate::snapshot::{Addr, ConfFile, Family, Link, Network, Snapshot, EXPLICIT_NCCL_SOURCE};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Where an inherited value that NCCL reads comes from: the process environment, or one of NCCL's
/// configuration files (`NCCL_CONF_FILE`, `~/.nccl.conf`, `/etc/nccl.conf`; `initEnv` in src/misc/param.cc),
/// named by its path. Displayed as `environment` or the path (how findings and doctor name it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The environment ncclenv received (and the command inherits).
    Environment,
    /// A configuration file NCCL applies under the environment, by its path.
    ConfigFile(String),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Environment => f.write_str("environment"),
            Origin::ConfigFile(path) => f.write_str(path),
        }
    }
}

/// The value NCCL sees for `name`: the environment's, else the first configuration file that sets it
/// (`initEnv`/`setEnvFile` in src/misc/param.cc, NCCL 2.18–2.30, apply each file with `setenv(name, value, 0)`:
/// the first applied wins, the environment always wins). `conf` lists the files in the order NCCL applies
/// them ([`crate::snapshot::Snapshot::conf_files`]). Returns the value and where it came from.
pub fn effective<'a>(
    name: &str,
    env: &'a BTreeMap<String, String>,
    conf: &'a [ConfFile],
) -> Option<(&'a str, Origin)> {
    if let Some(v) = env.get(name) {
        return Some((v.as_str(), Origin::Environment));
    }
    for f in conf {
        if let Some((_, v)) = f.values.iter().find(|(k, _)| k == name) {
            return Some((v.as_str(), Origin::ConfigFile(f.path.clone())));
        }
    }
    None
}

/// "inherited NAME=VALUE kept", or "NAME=VALUE (from FILE) kept" for a value from NCCL's config files.
pub fn kept_text(name: &str, value: &str, origin: &Origin) -> String {
    match origin {
        Origin::Environment => format!("inherited {name}={value} kept"),
        Origin::ConfigFile(path) => format!("{name}={value} (from {path}) kept"),
    }
}

/// `MAX_IFS` in NCCL (src/include/socket.h): at most 16 list entries are parsed and at most 16 interfaces kept.
pub const MAX_IFS: usize = 16;

/// One entry of an NCCL interface list: `name[:port[:rail[:plane]]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfEntry {
    /// The name or prefix.
    pub prefix: String,
    /// The port after `:` (`atoi`), when written; ignored for sockets, honoured in `NCCL_IB_HCA`.
    pub port: Option<i32>,
}

/// A parsed NCCL interface list (`NCCL_SOCKET_IFNAME`, `NCCL_IB_HCA`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IfList {
    /// Leading `^`: the list excludes.
    pub exclude: bool,
    /// `=` (after an optional `^`): entries are exact names, not prefixes.
    pub exact: bool,
    /// Entries, at most [`MAX_IFS`]; empty entries are skipped, nothing is trimmed.
    pub entries: Vec<IfEntry>,
}

/// Whether a `NCCL_*_DISABLE` switch (`NCCL_IB_DISABLE`, `NCCL_SHM_DISABLE`, `NCCL_P2P_DISABLE`,
/// `NCCL_IBEXT_DISABLE`, …) set to `value` disables: NCCL reads it as an integer parameter
/// ([`param_value`], `ncclLoadParam` in src/misc/param.cc) and tests it against 0, so any non-zero number
/// disables while `""`, `"yes"` and `"0x0"` do not.
pub fn disables(value: &str) -> bool {
    param_value(value).is_some_and(|n| n != 0)
}

/// Whether a switch that NCCL compares with 1 (`NCCL_SHM_DISABLE`: `ncclParamShmDisable() == 1` in
/// `shmCanConnect`, src/transport/shm.cc; `NCCL_P2P_DISABLE`: `strtol(value, NULL, 0) == 1` in `ncclGetLevel`,
/// src/graph/paths.cc; NCCL 2.18–2.30) set to `value` disables: the integer read as [`param_value`] reads it
/// is exactly 1, so `"1"`, `"0x1"` and `"1abc"` disable while `"2"` and `"-1"` leave the transport on.
pub fn disables_at_one(value: &str) -> bool {
    param_value(value) == Some(1)
}

/// The value NCCL reads from an integer parameter variable (`NCCL_BUFFSIZE`, `NCCL_IB_GID_INDEX`, …), as
/// `ncclLoadParam` (src/misc/param.cc, NCCL 2.18–2.30) reads it: `strtoll(value, NULL, 0)`, so leading
/// whitespace and a sign are accepted, `0x` means hexadecimal and a leading `0` octal, parsing stops at the
/// first character that is not a digit (`"8M"` is 8, `"abc"` is 0). `None` where NCCL uses the parameter's
/// default: an empty value, or one that overflows (`errno` set).
pub fn param_value(value: &str) -> Option<i64> {
    if value.is_empty() {
        return None;
    }
    let s = value.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (radix, digits) = if let Some(rest) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))
    {
        if rest.bytes().next().is_some_and(|b| b.is_ascii_hexdigit()) {
            (16, rest)
        } else {
            // strtoll parses "0x" without hex digits as the number 0.
            (10, "0")
        }
    } else if s.starts_with('0') {
        (8, s)
    } else {
        (10, s)
    };
    let mut acc: i128 = 0;
    for c in digits.chars() {
        let Some(d) = c.to_digit(radix) else {
            break;
        };
        acc = acc * i128::from(radix) + i128::from(d);
        if acc > i128::from(i64::MAX) + 1 {
            return None;
        }
    }
    let v = if neg { -acc } else { acc };
    i64::try_from(v).ok()
}

/// True when NCCL takes `NCCL_SOCKET_IFNAME` into account at all: `strlen(env) > 1` in `ncclFindInterfaces`
/// (src/misc/socket.cc). `""` and one-character values (`^`, `=`, `e`) mean "unset".
pub fn ifname_counts(value: &str) -> bool {
    value.len() > 1
}

/// Parse a list as NCCL does (`findInterfaces` strips `^` then `=`; `parseStringList` splits on `,`, stops a
/// name at `:` and takes the port with `atoi`, skips empty entries, keeps at most [`MAX_IFS`] entries, trims
/// nothing). `=^x` therefore makes `^x` a name.
pub fn parse_if_list(value: &str) -> IfList {
    let mut rest = value;
    let exclude = rest.starts_with('^');
    if exclude {
        rest = &rest[1..];
    }
    let exact = rest.starts_with('=');
    if exact {
        rest = &rest[1..];
    }
    let mut entries = Vec::new();
    for item in rest.split(',') {
        if entries.len() >= MAX_IFS {
            break;
        }
        let (name, port) = match item.find(':') {
            Some(i) => (&item[..i], Some(atoi(&item[i + 1..]))),
            None => (item, None),
        };
        if name.is_empty() {
            continue;
        }
        entries.push(IfEntry {
            prefix: name.to_string(),
            port,
        });
    }
    IfList {
        exclude,
        exact,
        entries,
    }
}

/// C `atoi`: optional sign and leading digits, 0 when none; saturates instead of overflowing.
fn atoi(s: &str) -> i32 {
    let s = s.trim_start();
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut v: i64 = 0;
    for b in digits.bytes().take_while(u8::is_ascii_digit) {
        v = (v * 10 + i64::from(b - b'0')).min(i64::from(i32::MAX) + 1);
    }
    let v = if neg { -v } else { v };
    v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

impl IfList {
    /// Does interface `name` pass this list? `matchIfList(name, -1, …) ^ searchNot` (src/misc/utils.cc): an
    /// empty list matches everything (so `^` with no entries matches nothing); a prefix entry matches every
    /// name that starts with it; an exact entry only the same name.
    pub fn accepts(&self, name: &str) -> bool {
        let matched =
            self.entries.is_empty() || self.entries.iter().any(|e| self.entry_matches(e, name));
        matched != self.exclude
    }
    /// Does one entry match `name` (ignoring `^`)? `matchIf`: `strncmp(name, prefix, strlen(prefix))`, or with
    /// `=` the whole name including its terminator.
    pub fn entry_matches(&self, entry: &IfEntry, name: &str) -> bool {
        if self.exact {
            name == entry.prefix
        } else {
            name.starts_with(entry.prefix.as_str())
        }
    }
}

/// Parse `NCCL_SOCKET_FAMILY` as `envSocketFamily` does: exactly `AF_INET` or `AF_INET6`; anything else is
/// ignored (returns `None`, meaning both families).
pub fn socket_family(value: Option<&str>) -> Option<Family> {
    match value {
        Some("AF_INET") => Some(Family::Inet),
        Some("AF_INET6") => Some(Family::Inet6),
        _ => None,
    }
}

/// One `getifaddrs()` entry as NCCL sees it: an interface name, its flags and one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfAddr {
    /// The entry's `ifa_name`: the link's name, or an IPv4 address's label ([`Addr::label`]).
    pub name: String,
    /// Interface index.
    pub index: u32,
    /// `IFF_RUNNING`.
    pub running: bool,
    /// `IFF_LOOPBACK`.
    pub loopback: bool,
    /// The address.
    pub addr: IpAddr,
    /// Its prefix length.
    pub prefix_len: u8,
}

/// The `getifaddrs()` walk NCCL makes: every address in kernel order, IPv4 entries before IPv6 ones (glibc
/// asks `RTM_GETADDR` for all families; the kernel dumps AF_INET before AF_INET6). An IPv4 address with a
/// label is an entry named by its label (glibc's `getifaddrs` copies `IFA_LABEL` into `ifa_name`,
/// sysdeps/unix/sysv/linux/ifaddrs.c), so to NCCL `eno1:avahi` is an interface of its own that the prefix
/// `eno1` matches (`findInterfaces` compares and keeps `ifa_name`, src/misc/socket.cc 2.18–2.27,
/// src/os/linux.cc 2.28–2.30).
pub fn ifaddrs(net: &Network) -> Vec<IfAddr> {
    let by_index: std::collections::HashMap<u32, &Link> =
        net.links.iter().map(|l| (l.index, l)).collect();
    let link = |index: u32| by_index.get(&index).copied();
    let mut out: Vec<IfAddr> = net
        .addrs
        .iter()
        .filter_map(|a: &Addr| {
            let l: &Link = link(a.index)?;
            Some(IfAddr {
                name: a.label.clone().unwrap_or_else(|| l.name.clone()),
                index: l.index,
                running: l.running,
                loopback: l.loopback,
                addr: a.addr,
                prefix_len: a.prefix_len,
            })
        })
        .collect();
    out.sort_by_key(|e| Family::of(&e.addr));
    out
}

/// Which NCCL generation to mirror where they differ (measured against the pinned wheels 2.21.5 and 2.27.7,
/// read in `src/misc/socket.cc` up to 2.27 and `src/os/linux.cc` from 2.28).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Era {
    /// NCCL before 2.28: an interface that has an address but no carrier (`IFF_RUNNING` clear) is taken like
    /// any other, and the automatic chain is `ib` → `^docker,lo` → `docker` → `lo` (`virbr*` is an ordinary
    /// interface).
    Before2_28,
    /// NCCL 2.28 and later: interfaces without `IFF_RUNNING` are skipped; the chain excludes `virbr*` in its
    /// main step and tries it last.
    Since2_28,
}

impl Era {
    /// The era of an NCCL version written `X.Y.Z` (or `X.Y`): [`Era::Before2_28`] below 2.28, else
    /// [`Era::Since2_28`]. `None` when the text is not a version.
    pub fn of_version(version: &str) -> Option<Era> {
        let mut parts = version.trim().split('.');
        let major: u32 = parts.next()?.parse().ok()?;
        let minor: u32 = parts.next()?.parse().ok()?;
        Some(if (major, minor) < (2, 28) {
            Era::Before2_28
        } else {
            Era::Since2_28
        })
    }

    /// How this era differs, in words, for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Era::Before2_28 => "before 2.28: interfaces without carrier count",
            Era::Since2_28 => "2.28+: interfaces without carrier are skipped",
        }
    }
}

/// An interface NCCL found, with the first address it kept for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The interface's name as NCCL sees it (`ifa_name`: the link's name or an address label).
    pub name: String,
    /// Index of the link that holds the address.
    pub index: u32,
    /// The address NCCL uses on it (the first acceptable one in `getifaddrs` order).
    pub addr: IpAddr,
    /// `IFF_RUNNING` at probe time.
    pub running: bool,
    /// `IFF_LOOPBACK`.
    pub loopback: bool,
}

/// `findInterfaces(prefixList, …)`: walk the addresses, keep the first acceptable address of each interface
/// that passes the list, at most `max`. Skips non-IP entries, the other family when `family` is set, IPv6
/// `::1`, and (in [`Era::Since2_28`]) interfaces without `IFF_RUNNING`. IPv6 link-local addresses are NOT
/// skipped (NCCL does not skip them).
pub fn find_interfaces(
    entries: &[IfAddr],
    list: &IfList,
    family: Option<Family>,
    era: Era,
    max: usize,
) -> Vec<Found> {
    let mut found: Vec<Found> = Vec::new();
    for e in entries {
        if found.len() >= max {
            break;
        }
        if let Some(f) = family {
            if Family::of(&e.addr) != f {
                continue;
            }
        }
        if let IpAddr::V6(v6) = e.addr {
            if v6.is_loopback() {
                continue;
            }
        }
        if era == Era::Since2_28 && !e.running {
            continue;
        }
        if !list.accepts(&e.name) {
            continue;
        }
        if found.iter().any(|f| f.name == e.name) {
            continue;
        }
        found.push(Found {
            name: e.name.clone(),
            index: e.index,
            addr: e.addr,
            running: e.running,
            loopback: e.loopback,
        });
    }
    found
}

/// How NCCL arrived at its interfaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PickSource {
    /// `NCCL_SOCKET_IFNAME` counted: "find or fail", no fallback.
    User(String),
    /// The automatic chain; the step that found something (`ib`, `^docker,lo,virbr`, `docker`, `lo`, `virbr`),
    /// or `none`.
    Auto(&'static str),
}

/// What NCCL would do with a given environment on this network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclPick {
    /// Where the list came from.
    pub source: PickSource,
    /// Interfaces found, in order; the first one is bootstrap's. Empty = "no socket interface found".
    pub found: Vec<Found>,
}

/// `ncclFindInterfaces` (src/misc/socket.cc; src/os/linux.cc in 2.28+): with `NCCL_SOCKET_IFNAME` counting
/// (see [`ifname_counts`]) only that list; else the automatic chain `ib` → (`NCCL_COMM_ID` subnet, not
/// modelled: ncclenv changes nothing when it is set) → `^docker,lo,virbr` (2.28+; `^docker,lo` before) →
/// `docker` → `lo` → `virbr`.
pub fn nccl_pick(
    net: &Network,
    ifname: Option<&str>,
    family: Option<Family>,
    era: Era,
) -> NcclPick {
    let entries = ifaddrs(net);
    if let Some(v) = ifname.filter(|v| ifname_counts(v)) {
        return NcclPick {
            source: PickSource::User(v.to_string()),
            found: find_interfaces(&entries, &parse_if_list(v), family, era, MAX_IFS),
        };
    }
    let chain: &[&'static str] = match era {
        Era::Since2_28 => &["ib", "^docker,lo,virbr", "docker", "lo", "virbr"],
        Era::Before2_28 => &["ib", "^docker,lo", "docker", "lo"],
    };
    for step in chain {
        let found = find_interfaces(&entries, &parse_if_list(step), family, era, MAX_IFS);
        if !found.is_empty() {
            return NcclPick {
                source: PickSource::Auto(step),
                found,
            };
        }
    }
    NcclPick {
        source: PickSource::Auto("none"),
        found: Vec::new(),
    }
}

/// The NCCL the command will run with, as far as the snapshot tells (`Snapshot::nccl_installs`: the library
/// of `NCCLENV_NCCL_LIB` alone when it is set, else every installation found), and so the rules the model
/// of NCCL applies where versions differ ([`Era`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclTarget {
    /// The rules applied: [`Era::Since2_28`] only when every version found is 2.28 or later; otherwise (an
    /// older one, or none known) [`Era::Before2_28`], under which more inherited values fail.
    pub era: Era,
    /// The distinct versions found (`X.Y.Z`), sorted; empty when unknown.
    pub versions: Vec<String>,
}

impl NcclTarget {
    /// `NCCL 2.21.5 (before 2.28: …)`, or what was assumed when the version is unknown.
    pub fn describe(&self) -> String {
        if self.versions.is_empty() {
            format!(
                "NCCL (version not found; modelled as {})",
                self.era.describe()
            )
        } else {
            format!(
                "NCCL {} ({})",
                self.versions.join(", "),
                self.era.describe()
            )
        }
    }
}

/// See [`NcclTarget`].
pub fn nccl_target(snap: &Snapshot) -> NcclTarget {
    let installs = match snap.nccl_installs.first() {
        Some(i) if i.source == EXPLICIT_NCCL_SOURCE => std::slice::from_ref(i),
        _ => &snap.nccl_installs[..],
    };
    let mut versions: Vec<String> = installs.iter().filter_map(|i| i.version.clone()).collect();
    versions.sort_unstable();
    versions.dedup();
    let eras: Vec<Era> = versions.iter().filter_map(|v| Era::of_version(v)).collect();
    let era = if !eras.is_empty() && eras.len() == versions.len() {
        eras.iter().copied().min().unwrap_or(Era::Before2_28)
    } else {
        Era::Before2_28
    };
    NcclTarget { era, versions }
}

/// What NCCL alone (without ncclenv) would do with the inherited environment (`NCCL_SOCKET_IFNAME` and
/// `NCCL_SOCKET_FAMILY` as [`effective`] reads them), following the version the command will load
/// ([`nccl_target`]): the pick and the target. `None` when the network probe failed.
pub fn nccl_alone(snap: &Snapshot) -> Option<(NcclPick, NcclTarget)> {
    let Ok(net) = &snap.net else { return None };
    let ifn = effective("NCCL_SOCKET_IFNAME", &snap.env, &snap.conf_files);
    let fam = effective("NCCL_SOCKET_FAMILY", &snap.env, &snap.conf_files);
    let target = nccl_target(snap);
    let pick = nccl_pick(
        net,
        ifn.as_ref().map(|(v, _)| *v),
        socket_family(fam.as_ref().map(|(v, _)| *v)),
        target.era,
    );
    Some((pick, target))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "Non-zero disables" as NCCL reads a `*_DISABLE` switch: numbers in any base, `""` and words are 0.
    #[test]
    fn disables_is_non_zero_as_strtoll_reads_it() {
        for v in ["1", "2", "-1", "0x1", " 1", "1yes"] {
            assert!(disables(v), "{v:?} disables");
        }
        for v in ["0", "", "yes", "true", "0x0", "00"] {
            assert!(!disables(v), "{v:?} does not disable");
        }
    }

    #[test]
    fn effective_prefers_environment_then_first_file() {
        let conf = vec![
            ConfFile {
                path: "/u".into(),
                values: vec![("A".into(), "u".into())],
                error: None,
            },
            ConfFile {
                path: "/etc".into(),
                values: vec![("A".into(), "e".into()), ("B".into(), "e".into())],
                error: None,
            },
        ];
        let mut env = BTreeMap::new();
        assert_eq!(
            effective("A", &env, &conf),
            Some(("u", Origin::ConfigFile("/u".to_string())))
        );
        assert_eq!(
            effective("B", &env, &conf),
            Some(("e", Origin::ConfigFile("/etc".to_string())))
        );
        env.insert("A".to_string(), "x".to_string());
        assert_eq!(
            effective("A", &env, &conf),
            Some(("x", Origin::Environment))
        );
        assert_eq!(effective("C", &env, &conf), None);
    }

    #[test]
    fn params_read_like_strtoll() {
        assert_eq!(param_value("8388608"), Some(8_388_608));
        assert_eq!(param_value("0x800000"), Some(8_388_608));
        assert_eq!(param_value("010"), Some(8));
        assert_eq!(param_value("  -1"), Some(-1));
        assert_eq!(param_value("+3"), Some(3));
        assert_eq!(param_value("8M"), Some(8));
        assert_eq!(param_value("abc"), Some(0));
        assert_eq!(param_value("0x"), Some(0));
        assert_eq!(param_value(""), None);
        assert_eq!(param_value("99999999999999999999"), None);
        assert_eq!(param_value("-9223372036854775808"), Some(i64::MIN));
    }

    fn names(l: &IfList, all: &[&str]) -> Vec<String> {
        all.iter()
            .filter(|n| l.accepts(n))
            .map(|n| n.to_string())
            .collect()
    }
    const ALL: &[&str] = &[
        "eth0",
        "eth1",
        "eth10",
        "lo",
        "docker0",
        "^x",
        "bond0",
        "bond0.2973",
    ];

    #[test]
    fn prefix_matches_longer_names() {
        let l = parse_if_list("eth1");
        assert_eq!(names(&l, ALL), ["eth1", "eth10"]);
        let l = parse_if_list("bond0");
        assert_eq!(names(&l, ALL), ["bond0", "bond0.2973"]);
    }

    #[test]
    fn exact_matches_only_the_name() {
        let l = parse_if_list("=eth1");
        assert!(l.exact && !l.exclude);
        assert_eq!(names(&l, ALL), ["eth1"]);
    }

    #[test]
    fn caret_excludes_prefixes() {
        let l = parse_if_list("^eth,lo");
        assert_eq!(names(&l, ALL), ["docker0", "^x", "bond0", "bond0.2973"]);
    }

    #[test]
    fn caret_equals_excludes_exact_names() {
        let l = parse_if_list("^=eth1,lo");
        assert!(l.exclude && l.exact);
        assert_eq!(
            names(&l, ALL),
            ["eth0", "eth10", "docker0", "^x", "bond0", "bond0.2973"]
        );
    }

    #[test]
    fn equals_caret_makes_caret_part_of_the_name() {
        let l = parse_if_list("=^x");
        assert!(l.exact && !l.exclude);
        assert_eq!(l.entries[0].prefix, "^x");
        assert_eq!(names(&l, ALL), ["^x"]);
    }

    #[test]
    fn empty_entries_are_skipped_and_empty_list_matches_all() {
        let l = parse_if_list("eth0,,lo,");
        assert_eq!(l.entries.len(), 2);
        let l = parse_if_list(",,");
        assert!(l.entries.is_empty());
        assert_eq!(names(&l, ALL).len(), ALL.len());
        // `^` with nothing after it: empty list matches all, negated: nothing.
        let l = parse_if_list("^,");
        assert!(names(&l, ALL).is_empty());
    }

    #[test]
    fn spaces_are_not_trimmed() {
        let l = parse_if_list("eth0, eth1");
        assert_eq!(l.entries[1].prefix, " eth1");
        assert_eq!(names(&l, ALL), ["eth0"]);
    }

    #[test]
    fn one_character_values_do_not_count() {
        assert!(!ifname_counts(""));
        assert!(!ifname_counts("^"));
        assert!(!ifname_counts("="));
        assert!(!ifname_counts("e"));
        assert!(ifname_counts("e0"));
        assert!(ifname_counts("^e"));
    }

    #[test]
    fn at_most_sixteen_entries() {
        let v: Vec<String> = (0..17).map(|i| format!("if{i}x")).collect();
        let l = parse_if_list(&v.join(","));
        assert_eq!(l.entries.len(), 16);
        assert!(l.accepts("if15x"));
        assert!(!l.accepts("if16x"));
    }

    #[test]
    fn ports_are_parsed_and_stop_the_name() {
        let l = parse_if_list("mlx5_0:1,mlx5_1:x,eth0:1:2:3");
        assert_eq!(l.entries[0].prefix, "mlx5_0");
        assert_eq!(l.entries[0].port, Some(1));
        assert_eq!(l.entries[1].port, Some(0));
        assert_eq!(l.entries[2].prefix, "eth0");
        assert_eq!(l.entries[2].port, Some(1));
        assert_eq!(atoi("99999999999"), i32::MAX);
        assert_eq!(atoi("-5x"), -5);
    }

    #[test]
    fn family_spelling_is_exact() {
        assert_eq!(socket_family(Some("AF_INET")), Some(Family::Inet));
        assert_eq!(socket_family(Some("AF_INET6")), Some(Family::Inet6));
        assert_eq!(socket_family(Some("inet")), None);
        assert_eq!(socket_family(Some("AF_INET ")), None);
        assert_eq!(socket_family(None), None);
    }

    fn link(index: u32, name: &str, running: bool) -> Link {
        Link {
            index,
            name: name.into(),
            up: true,
            running,
            lower_up: running,
            loopback: name == "lo",
            oper_state: if running { "up".into() } else { "down".into() },
            ..Default::default()
        }
    }
    fn addr(index: u32, a: &str, p: u8) -> Addr {
        Addr {
            index,
            addr: a.parse().expect("test address"),
            prefix_len: p,
            scope: 0,
            tentative: false,
            deprecated: false,
            dad_failed: false,
            label: None,
        }
    }

    fn net() -> Network {
        Network {
            links: vec![
                link(1, "lo", true),
                link(2, "docker0", true),
                link(3, "veth1", true),
                link(4, "eth0", true),
                link(5, "enp3s0", false),
            ],
            addrs: vec![
                addr(1, "127.0.0.1", 8),
                addr(2, "172.17.0.1", 16),
                addr(4, "10.0.0.2", 24),
                addr(5, "10.0.9.2", 24),
                addr(1, "::1", 128),
                addr(3, "fe80::1", 64),
                addr(4, "fe80::2", 64),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn auto_chain_skips_docker_and_lo_and_keeps_fe80_veths() {
        let p = nccl_pick(&net(), None, None, Era::Since2_28);
        assert_eq!(p.source, PickSource::Auto("^docker,lo,virbr"));
        let n: Vec<_> = p.found.iter().map(|f| f.name.as_str()).collect();
        // IPv4 first: eth0 10.0.0.2; then veth1's fe80 (IPv6 link-local is not skipped).
        assert_eq!(n, ["eth0", "veth1"]);
        assert_eq!(p.found[0].addr, "10.0.0.2".parse::<IpAddr>().expect("ip"));
    }

    #[test]
    fn era_follows_the_version() {
        assert_eq!(Era::of_version("2.21.5"), Some(Era::Before2_28));
        assert_eq!(Era::of_version("2.27.7"), Some(Era::Before2_28));
        assert_eq!(Era::of_version("2.28.3"), Some(Era::Since2_28));
        assert_eq!(Era::of_version("2.30"), Some(Era::Since2_28));
        assert_eq!(Era::of_version("3.0.1"), Some(Era::Since2_28));
        assert_eq!(Era::of_version("1.3.4"), Some(Era::Before2_28));
        assert_eq!(Era::of_version("x.28"), None);
        assert_eq!(Era::of_version("2"), None);
    }

    #[test]
    fn before_2_28_chain_does_not_exclude_virbr() {
        let mut n = net();
        n.links.push(link(6, "virbr0", true));
        n.addrs.insert(4, addr(6, "192.168.122.1", 24));
        // 2.28+: virbr0 is excluded from the main step, eth0 (index 4) is first.
        let p = nccl_pick(&n, None, None, Era::Since2_28);
        assert_eq!(p.found[0].name, "eth0");
        // Before: the chain's main step is ^docker,lo, and enp3s0 (no carrier) and virbr0 count too.
        let p = nccl_pick(&n, None, None, Era::Before2_28);
        assert_eq!(p.source, PickSource::Auto("^docker,lo"));
        let names: Vec<&str> = p.found.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["eth0", "enp3s0", "virbr0", "veth1"]);
    }

    #[test]
    fn before_2_28_takes_interfaces_without_carrier() {
        let p = nccl_pick(&net(), Some("en"), None, Era::Before2_28);
        assert_eq!(p.found.len(), 1);
        assert_eq!(p.found[0].name, "enp3s0");
        let p = nccl_pick(&net(), Some("en"), None, Era::Since2_28);
        assert!(p.found.is_empty());
    }

    #[test]
    fn user_list_is_find_or_fail_and_family_filters() {
        let p = nccl_pick(&net(), Some("eth2"), None, Era::Since2_28);
        assert!(p.found.is_empty());
        assert_eq!(p.source, PickSource::User("eth2".into()));
        let p = nccl_pick(&net(), Some("eth0"), Some(Family::Inet6), Era::Since2_28);
        assert_eq!(p.found[0].addr, "fe80::2".parse::<IpAddr>().expect("ip"));
        // A one-character value does not count: the auto chain runs.
        let p = nccl_pick(&net(), Some("^"), None, Era::Since2_28);
        assert!(matches!(p.source, PickSource::Auto(_)));
    }

    #[test]
    fn loopback_is_the_last_resort() {
        let mut n = net();
        n.links.retain(|l| l.name == "lo");
        let p = nccl_pick(&n, None, None, Era::Since2_28);
        assert_eq!(p.source, PickSource::Auto("lo"));
        assert_eq!(p.found.len(), 1);
        assert_eq!(p.found[0].addr, "127.0.0.1".parse::<IpAddr>().expect("ip"));
    }
}
