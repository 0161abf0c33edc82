//! Known defects of NCCL versions, as one table ([`DEFECTS`]): the version range, the condition, the effect,
//! what ncclenv does, the remedy and the source of each row. The decision asks [`applying`] which rows apply
//! to the NCCL the command will load (`nccl_rules::nccl_target`) and the job's environment; `doctor` lists
//! them under the NCCL installations. The table in words: `docs/nccl-rules.md`, "Known defects of NCCL
//! versions".

use crate::nccl_rules::{effective, nccl_target};
use crate::snapshot::Snapshot;

/// An NCCL version `X.Y.Z` as numbers.
pub type Version = (u32, u32, u32);

/// What makes a row's defect bite, read from the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// An interface holds an address but has no carrier (`IFF_RUNNING` clear).
    AddressWithoutCarrier,
    /// `NCCL_COMM_ID` is set (environment or configuration file).
    CommIdSet,
}

impl Condition {
    /// True when the condition holds on `snap`.
    pub fn holds(self, snap: &Snapshot) -> bool {
        match self {
            Condition::AddressWithoutCarrier => snap.net.as_ref().is_ok_and(|n| {
                n.links.iter().any(|l| {
                    !l.running && !l.loopback && n.addrs.iter().any(|a| a.index == l.index)
                })
            }),
            Condition::CommIdSet => {
                effective("NCCL_COMM_ID", &snap.env, &snap.conf_files).is_some()
            }
        }
    }
}

/// One known defect of a range of NCCL versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defect {
    /// A short stable name (`comm-id-binds-lo`).
    pub id: &'static str,
    /// The first version with the defect.
    pub from: Version,
    /// The first version without it (exclusive).
    pub fixed_in: Version,
    /// When it bites.
    pub condition: Condition,
    /// The condition in words.
    pub condition_text: &'static str,
    /// What goes wrong.
    pub effect: &'static str,
    /// What ncclenv does about it.
    pub ncclenv_does: &'static str,
    /// What the user can do.
    pub remedy: &'static str,
    /// Where it is documented or measured.
    pub source: &'static str,
}

/// Every known defect, oldest first.
pub const DEFECTS: &[Defect] = &[
    Defect {
        id: "no-carrier-counts",
        from: (0, 0, 0),
        fixed_in: (2, 28, 0),
        condition: Condition::AddressWithoutCarrier,
        condition_text: "an interface holds an address but has no carrier (IFF_RUNNING clear)",
        effect: "NCCL takes it like any other interface: a list whose first match is that dead link makes bootstrap listen where no peer can connect",
        ncclenv_does: "models it (nccl_rules::Era::Before2_28): an inherited NCCL_SOCKET_IFNAME whose first match has no carrier is repaired (strict: refused); ncclenv's own choice is always a RUNNING interface",
        remedy: "NCCL 2.28 or later, or an NCCL_SOCKET_IFNAME that names an interface with carrier",
        source: "findInterfaces, src/misc/socket.cc (no IFF_RUNNING test before 2.28; src/os/linux.cc adds it in 2.28); measured with the 2.21.5 and 2.27.7 wheels (tests/it/check_real_nccl.rs)",
    },
    Defect {
        id: "comm-id-binds-lo",
        from: (2, 29, 0),
        fixed_in: (2, 30, 3),
        condition: Condition::CommIdSet,
        condition_text: "NCCL_COMM_ID is set",
        effect: "bootstrap binds lo instead of the interface in NCCL_COMM_ID's subnet: the other ranks cannot connect",
        ncclenv_does: "warns nccl-version-defect (strict: refused) instead of its hands-off line; changes nothing else while NCCL_COMM_ID is set",
        remedy: "load NCCL 2.30.3 or later (or 2.28.x), or unset NCCL_COMM_ID and let the launcher hand out the unique id",
        source: "NVIDIA/nccl#2047 (fixed in 2.30.3)",
    },
];

/// The version `X.Y.Z` (or `X.Y`) as numbers; `None` when the text is not one.
pub fn parse_version(v: &str) -> Option<Version> {
    let mut p = v.trim().split('.');
    let x = p.next()?.parse().ok()?;
    let y = p.next()?.parse().ok()?;
    let z = p.next().map_or(Some(0), |s| s.parse().ok())?;
    Some((x, y, z))
}

impl Defect {
    /// True when `version` is in this row's range.
    pub fn affects(&self, version: Version) -> bool {
        self.from <= version && version < self.fixed_in
    }
    /// The range in words: `2.29.0 up to 2.30.3 (fixed)`, `before 2.28.0`.
    pub fn range_text(&self) -> String {
        let v = |(x, y, z): Version| format!("{x}.{y}.{z}");
        if self.from == (0, 0, 0) {
            format!("before {}", v(self.fixed_in))
        } else {
            format!("{} up to {} (fixed)", v(self.from), v(self.fixed_in))
        }
    }
}

/// The rows that apply to `snap`: a version the command may load (`nccl_target`) is in the row's range,
/// and the row's condition holds. Each with the versions it affects.
pub fn applying(snap: &Snapshot) -> Vec<(&'static Defect, Vec<String>)> {
    let versions = nccl_target(snap).versions;
    DEFECTS
        .iter()
        .filter_map(|d| {
            let hit: Vec<String> = versions
                .iter()
                .filter(|v| parse_version(v).is_some_and(|p| d.affects(p)))
                .cloned()
                .collect();
            (!hit.is_empty() && d.condition.holds(snap)).then_some((d, hit))
        })
        .collect()
}

/// The table as Markdown rows (`| versions | condition | effect | what ncclenv does | remedy | source |`),
/// for `docs/nccl-rules.md` (checked by a test).
pub fn markdown_table() -> String {
    let mut s = String::from(
        "| versions | condition | effect | what ncclenv does | remedy | source |\n|---|---|---|---|---|---|\n",
    );
    for d in DEFECTS {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            d.range_text(),
            d.condition_text,
            d.effect,
            d.ncclenv_does,
            d.remedy,
            d.source
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_the_versions() {
        let d = DEFECTS
            .iter()
            .find(|d| d.id == "comm-id-binds-lo")
            .expect("row");
        for (v, hit) in [
            ("2.27.7", false),
            ("2.28.9", false),
            ("2.29.0", true),
            ("2.29.7", true),
            ("2.30.2", true),
            ("2.30.3", false),
            ("2.30.7", false),
        ] {
            assert_eq!(d.affects(parse_version(v).expect("version")), hit, "{v}");
        }
        let c = DEFECTS
            .iter()
            .find(|d| d.id == "no-carrier-counts")
            .expect("row");
        assert!(c.affects((2, 27, 7)) && !c.affects((2, 28, 0)));
        assert_eq!(parse_version("2.30"), Some((2, 30, 0)));
        assert_eq!(parse_version("x"), None);
    }

    /// docs/nccl-rules.md holds the table as generated here.
    #[test]
    fn the_docs_hold_the_table() {
        let doc = include_str!("../docs/nccl-rules.md");
        assert!(
            doc.contains(&markdown_table()),
            "docs/nccl-rules.md must hold:\n{}",
            markdown_table()
        );
    }
}
