//! What other parts ask of the interface rules without deciding: the candidates in ranking order (the
//! check's repair, [`candidate_names`]), a chosen name ncclenv cannot write (the regime,
//! [`unwritable_choice`]), and what NCCL alone would choose (doctor, [`nccl_alone`], [`nccl_model`]).

use super::choice::rank;
use super::view::NetworkView;
use crate::config::Config;
use crate::nccl_rules::{self, Era, PickSource};
use crate::plan::Plan;
use crate::snapshot::Snapshot;
use serde::Serialize;
use std::net::IpAddr;

/// Names of every candidate interface (RUNNING, not loopback, not excluded, with a usable address), in
/// ranking order: the fallbacks the check's repair may try.
pub fn candidate_names(snap: &Snapshot, cfg: &Config) -> Vec<String> {
    let Ok(net) = &snap.net else {
        return Vec::new();
    };
    let view = NetworkView::new(net, &cfg.exclude);
    let mut c = view.candidates(None);
    c.sort_by_key(|(l, a)| rank(l, a));
    c.into_iter()
        .filter(|(l, _)| !l.name_escaped)
        .map(|(l, _)| l.name.clone())
        .collect()
}

/// The interface `plan` names (its choice, or a value it sets for `NCCL_SOCKET_IFNAME`,
/// `GLOO_SOCKET_IFNAME` or `TP_SOCKET_IFNAME`) when its name is not UTF-8 ([`Link::name_escaped`](crate::snapshot::Link::name_escaped)): ncclenv
/// cannot write the real name, so the caller fails open. `None` when every name it would write is real.
pub fn unwritable_choice(snap: &Snapshot, plan: &Plan) -> Option<String> {
    let Ok(net) = &snap.net else { return None };
    let escaped: Vec<&str> = net
        .links
        .iter()
        .filter(|l| l.name_escaped)
        .map(|l| l.name.as_str())
        .collect();
    if escaped.is_empty() {
        return None;
    }
    let set = [
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "TP_SOCKET_IFNAME",
    ]
    .iter()
    .filter_map(|name| plan.value_of(name))
    .map(|value| value.strip_prefix('=').unwrap_or(value));
    plan.choice
        .iter()
        .map(|c| c.ifname.as_str())
        .chain(set)
        .find(|n| escaped.contains(n))
        .map(str::to_string)
}

/// What NCCL alone (without ncclenv) would choose with the inherited environment, for the report: the
/// bootstrap interface and address, or why it fails, and the NCCL version modelled
/// ([`nccl_rules::nccl_alone`]).
pub fn nccl_alone(snap: &Snapshot) -> Option<String> {
    let (pick, target) = nccl_rules::nccl_alone(snap)?;
    let source = match &pick.source {
        PickSource::User(value) => format!("NCCL_SOCKET_IFNAME={value}"),
        PickSource::Auto(step) => format!("automatic, step {step:?}"),
    };
    let model = target.describe();
    Some(match pick.found.first() {
        Some(f) => format!(
            "{} ({}) [{}; {} interface(s) for NET/Socket: {}; {model}]",
            f.name,
            f.addr,
            source,
            pick.found.len(),
            pick.found
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(",")
        ),
        None => format!("no socket interface found [{source}; {model}]"),
    })
}

/// [`nccl_alone`] as data, for `doctor --json` (`decision.nccl_model`, `docs/doctor.schema.json`). The
/// fields are declared in the alphabetical order doctor's JSON writes every object in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NcclModel {
    /// The interface NCCL bootstraps on, its first match; `None` (`null`): "no socket interface found".
    pub bootstrap: Option<NcclBootstrap>,
    /// The rules applied: `"before-2.28"` ([`Era::Before2_28`], also when no version is known) or `"2.28+"`
    /// ([`Era::Since2_28`]).
    pub era: &'static str,
    /// The names NET/Socket would use, the bootstrap interface first.
    pub interfaces: Vec<String>,
    /// The NCCL versions the model follows (`X.Y.Z`, sorted; [`nccl_rules::NcclTarget::versions`]); empty
    /// when unknown.
    pub nccl_versions: Vec<String>,
    /// `"NCCL_SOCKET_IFNAME"` when the inherited value counted, else `"automatic"` ([`PickSource`]).
    pub source: &'static str,
    /// The automatic chain's step that found the interfaces (`ib`, `^docker,lo`, …, `none`); `None` (`null`)
    /// for `NCCL_SOCKET_IFNAME`.
    pub step: Option<&'static str>,
}

/// [`NcclModel::bootstrap`]: NCCL's name for the interface (`ifa_name`) and the address it binds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NcclBootstrap {
    /// The address NCCL binds (serialized as text, `"10.0.0.2"`).
    pub addr: IpAddr,
    /// The interface's name as NCCL sees it.
    pub ifname: String,
}

/// [`nccl_alone`] as data ([`NcclModel`]); `None` (`null` in doctor's JSON) when the network probe failed.
pub fn nccl_model(snap: &Snapshot) -> Option<NcclModel> {
    let (pick, target) = nccl_rules::nccl_alone(snap)?;
    let (source, step) = match &pick.source {
        PickSource::User(_) => ("NCCL_SOCKET_IFNAME", None),
        PickSource::Auto(step) => ("automatic", Some(*step)),
    };
    Some(NcclModel {
        bootstrap: pick.found.first().map(|f| NcclBootstrap {
            addr: f.addr,
            ifname: f.name.clone(),
        }),
        era: match target.era {
            Era::Before2_28 => "before-2.28",
            Era::Since2_28 => "2.28+",
        },
        interfaces: pick.found.iter().map(|f| f.name.clone()).collect(),
        nccl_versions: target.versions,
        source,
        step,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_snapshot::SnapshotBuilder;

    /// The JSON `doctor` wrote before [`NcclModel`] was typed (built by hand with `serde_json::json!`).
    fn hand_built(snap: &Snapshot) -> serde_json::Value {
        let Some((pick, target)) = nccl_rules::nccl_alone(snap) else {
            return serde_json::Value::Null;
        };
        let (source, step) = match &pick.source {
            PickSource::User(_) => ("NCCL_SOCKET_IFNAME", None),
            PickSource::Auto(step) => ("automatic", Some(*step)),
        };
        serde_json::json!({
            "nccl_versions": target.versions,
            "era": match target.era {
                Era::Before2_28 => "before-2.28",
                Era::Since2_28 => "2.28+",
            },
            "source": source,
            "step": step,
            "bootstrap": pick.found.first().map(|f| serde_json::json!({"ifname": f.name, "addr": f.addr})),
            "interfaces": pick.found.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
        })
    }

    /// [`nccl_model`] serializes byte for byte as the hand-built JSON did: automatic and user-given, a
    /// match and none, a known version and none, a failed network probe.
    #[test]
    fn nccl_model_serializes_as_the_hand_built_json() {
        let base = || {
            SnapshotBuilder::new()
                .plug("eth0", &["10.0.0.2/24"])
                .plug("eth1", &["fd00::2/64"])
        };
        let mut failed = base().build();
        failed.net = Err("netlink: permission denied".into());
        let cases = [
            base().build(),
            base().env("NCCL_SOCKET_IFNAME", "eth").build(),
            base().env("NCCL_SOCKET_IFNAME", "=eth9").build(),
            base().nccl("/usr/lib/libnccl.so.2", Some("2.28.3")).build(),
            failed,
        ];
        let seen: Vec<serde_json::Value> = cases.iter().map(hand_built).collect();
        assert!(seen
            .iter()
            .any(|m| m["source"] == "NCCL_SOCKET_IFNAME" && m["bootstrap"].is_null()));
        assert!(seen
            .iter()
            .any(|m| m["era"] == "2.28+" && m["bootstrap"]["ifname"] == "eth0"));
        assert!(seen.iter().any(serde_json::Value::is_null));
        for snap in &cases {
            let typed = serde_json::to_value(nccl_model(snap)).expect("json");
            let want = hand_built(snap);
            assert_eq!(typed, want);
            assert_eq!(
                serde_json::to_string_pretty(&typed).ok(),
                serde_json::to_string_pretty(&want).ok()
            );
        }
    }
}
