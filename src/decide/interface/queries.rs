//! What other parts ask of the interface rules without deciding: the candidates in ranking order (the
//! check's repair, [`candidate_names`]), a chosen name ncclenv cannot write (the regime,
//! [`unwritable_choice`]), and what NCCL alone would choose (doctor, [`nccl_alone`], [`nccl_model_json`]).

use super::choice::rank;
use super::view::NetworkView;
use crate::config::Config;
use crate::nccl_rules::{self, Era, PickSource};
use crate::plan::Plan;
use crate::snapshot::Snapshot;

/// Names of every candidate interface (RUNNING, not loopback, not excluded, with a usable address), in
/// ranking order: the fallbacks the check's repair may try.
pub fn candidate_names(snap: &Snapshot, cfg: &Config) -> Vec<String> {
    let Ok(net) = &snap.net else {
        return Vec::new();
    };
    let v = NetworkView::new(net, &cfg.exclude);
    let mut c = v.candidates(None);
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
    .filter_map(|v| plan.value_of(v))
    .map(|v| v.strip_prefix('=').unwrap_or(v));
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
        PickSource::User(v) => format!("NCCL_SOCKET_IFNAME={v}"),
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

/// [`nccl_alone`] as data, for `doctor --json` (`decision.nccl_model`): `{"nccl_versions": [..], "era":
/// "before-2.28" | "2.28+", "source": "NCCL_SOCKET_IFNAME" | "automatic", "step": the automatic step or null,
/// "bootstrap": {"ifname", "addr"} or null ("no socket interface found"), "interfaces": [names NET/Socket
/// would use]}`; `null` when the network probe failed.
pub fn nccl_model_json(snap: &Snapshot) -> serde_json::Value {
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
            Era::Current => "2.28+",
        },
        "source": source,
        "step": step,
        "bootstrap": pick.found.first().map(|f| serde_json::json!({"ifname": f.name, "addr": f.addr})),
        "interfaces": pick.found.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
    })
}
