//! Runners that copy the launching node's environment to every node (`crate::spread` reads their command
//! line): ncclenv must not hand them a node-local interface name silently (#21 items 4 and 5). What it does:
//!
//! * **`mpirun` starting the ranks through ncclenv** (`mpirun … ncclenv -- PROG`): nothing is forwarded; each
//!   rank decides on its own node (the "Open MPI rank" row of `crate::orchestrator`).
//! * **`mpirun` of a job that may span nodes**: Open MPI forwards only `OMPI_*` to the ranks on other nodes
//!   (mpirun(1), "Exported Environment Variables"), so ncclenv names its interface variables in
//!   `OMPI_MCA_mca_base_env_list` (opal/runtime/opal_params.c: entries `NAME` or `NAME=VALUE` separated by
//!   `mca_base_env_list_delimiter`, default `;`), appended to an inherited list; the command's argv stays
//!   byte for byte. The names are this node's: valid where every node names its NIC alike, and the finding
//!   says so with the per-rank remedy. Open MPI's own `*_tcp_if_include` get the network as a CIDR instead
//!   (`decide::interface`). Open MPI 4.1 aborts when `-x` and `mca_base_env_list` are both given (measured:
//!   "Open MPI does not support mixing these two methods"), and a `--mca mca_base_env_list` on the command
//!   line wins over the variable: then ncclenv forwards nothing and warns (`runner-forward-blocked`).
//! * **DeepSpeed's multinode runner** exports every `NCCL*` variable of this node to every node
//!   (deepspeed/launcher/runner.py `EXPORT_ENVS` + the CUDA accelerator's `export_envs()`, 0.19.8; measured
//!   with the real CLI in tests/it/launcher_forms.rs), even to this node's own ranks (started over pdsh/ssh,
//!   not as ncclenv's children). ncclenv leaves the node-local values to each node: it does not set
//!   `NCCL_SOCKET_IFNAME` or `NCCL_IB_HCA` (DeepSpeed's own `EXCLUDE_ENVS` withholds `NCCL_IB_HCA` from
//!   copying for the same reason on AISC) nor an `NCCL_IB_DISABLE=1` that only skips a probe finding no HCA
//!   here; it names what else it sets with the `NCCL_` prefix as copied to every node, and says how to run
//!   ncclenv on every node (`deepspeed --no_python --no_local_rank … ncclenv -- python train.py`, or
//!   `deepspeed --no_ssh --node_rank=N` under ncclenv on each node).

use crate::findings::Finding;
use crate::plan::{Action, Plan};
use crate::snapshot::{Launcher, Snapshot};

/// The interface variables ncclenv forwards through `mpirun` when it sets them: node-local names (and the
/// family that goes with them).
pub const MPI_FORWARD: &[&str] = &[
    "NCCL_SOCKET_IFNAME",
    "NCCL_SOCKET_FAMILY",
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
];

/// How the snapshot records an inherited `OMPI_MCA_mca_base_env_list` that assigns values (`NAME=VALUE`, which
/// may be secrets; `probe::job::record_env`): ncclenv then does not rewrite the list.
pub const ENV_LIST_ASSIGNS: &str = "(assigns values; not recorded)";

/// The variables ncclenv withholds from DeepSpeed's multinode runner: node-local names that its `NCCL`
/// prefix export would copy to every node.
pub const DEEPSPEED_WITHHOLD: &[&str] = &["NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"];

/// Step "runners that copy the environment" (see the module docs). Runs after the interface and RDMA
/// decisions, on their changes.
pub fn decide_spread(snap: &Snapshot, cfg: &crate::config::Config, plan: &mut Plan) {
    let Some(s) = &snap.job.spread else { return };
    if plan.hands_off || snap.job.is_single_node() {
        return;
    }
    let launcher = snap.job.launcher;
    if s.ranks_through_ncclenv {
        plan.finding(
            Finding::RunnerCopiesEnv,
            format!(
                "{} starts every rank through ncclenv, which decides on each node: no interface variable is forwarded",
                launcher.map_or("the runner", |l| l.name())
            ),
            "nothing to do",
        );
        return;
    }
    match launcher {
        Some(Launcher::Mpi) => mpirun(snap, s, plan),
        Some(Launcher::Deepspeed) => {
            deepspeed(snap, cfg, plan);
            deepspeed_env_file(s, plan);
        }
        _ => {}
    }
}

/// The value ncclenv sets for `name`, when it sets one.
fn set_value<'p>(plan: &'p Plan, name: &str) -> Option<&'p str> {
    plan.changes
        .iter()
        .find(|c| c.name == name)
        .and_then(|c| match &c.action {
            Action::Set { value } => Some(value.as_str()),
            Action::Unset => None,
        })
}

/// Why ncclenv cannot forward through `mpirun` (Open MPI's precedence and its refusal to mix `-x` with
/// `mca_base_env_list`), when it cannot.
fn blocked_reason(snap: &Snapshot, s: &crate::snapshot::Spread) -> Option<String> {
    if !s.exports.is_empty() {
        Some(format!(
            "mpirun -x {} is given and Open MPI refuses -x together with mca_base_env_list",
            s.exports.join(" -x ")
        ))
    } else if s.mca.iter().any(|m| m == "mca_base_env_list") {
        Some(
            "mpirun --mca mca_base_env_list is given and wins over OMPI_MCA_mca_base_env_list"
                .to_string(),
        )
    } else if snap
        .env
        .get("OMPI_MCA_mca_base_env_list")
        .map(String::as_str)
        == Some(ENV_LIST_ASSIGNS)
    {
        Some("the inherited OMPI_MCA_mca_base_env_list assigns values, which ncclenv does not copy or rewrite".to_string())
    } else {
        None
    }
}

fn mpirun(snap: &Snapshot, s: &crate::snapshot::Spread, plan: &mut Plan) {
    let names: Vec<&str> = MPI_FORWARD
        .iter()
        .copied()
        .filter(|n| set_value(plan, n).is_some())
        .collect();
    if names.is_empty() {
        return;
    }
    let shown: Vec<String> = names
        .iter()
        .map(|n| format!("{n}={}", set_value(plan, n).unwrap_or("")))
        .collect();
    let per_rank =
        "start the ranks through ncclenv (mpirun … ncclenv -- PROGRAM), which decides on each node";
    let blocked = blocked_reason(snap, s);
    if let Some(why) = blocked {
        let copied: Vec<&str> = s
            .exports
            .iter()
            .map(String::as_str)
            .filter(|e| MPI_FORWARD.contains(e))
            .collect();
        let copied = if copied.is_empty() {
            String::new()
        } else {
            format!(
                "; -x {} copies this node's value to every node, valid only where every node's NIC has that name",
                copied.join(", -x ")
            )
        };
        plan.finding(
            Finding::RunnerForwardBlocked,
            format!(
                "{why}: ncclenv cannot forward {} to the ranks on other nodes, which choose on their own{copied}",
                shown.join(", ")
            ),
            if s.exports.is_empty() {
                // -x beside mca_base_env_list makes Open MPI abort: name them in the list instead.
                format!("{per_rank}, or add {} to your mca_base_env_list", names.join(", "))
            } else {
                format!("{per_rank}, or add -x NAME for each of {}", names.join(", "))
            },
        );
        return;
    }
    let sep = snap
        .env
        .get("OMPI_MCA_mca_base_env_list_delimiter")
        .filter(|d| !d.is_empty())
        .map_or(";", String::as_str);
    let inherited = snap
        .env
        .get("OMPI_MCA_mca_base_env_list")
        .filter(|v| !v.is_empty());
    let mut entries: Vec<String> = inherited
        .map(|v| v.split(sep).map(str::to_string).collect())
        .unwrap_or_default();
    for n in &names {
        // An inherited entry for the name (forwarded or assigned) is the user's: kept.
        if !entries.iter().any(|e| e.split('=').next() == Some(n)) {
            entries.push((*n).to_string());
        }
    }
    let value = entries.join(sep);
    if inherited.is_some_and(|v| *v == value) {
        return;
    }
    plan.set(
        "OMPI_MCA_mca_base_env_list",
        value,
        format!(
            "forward {} to the ranks on every node (Open MPI forwards only OMPI_* otherwise){}",
            names.join(", "),
            if inherited.is_some() {
                "; appended to the inherited list"
            } else {
                ""
            }
        ),
    );
    plan.finding(
        Finding::RunnerCopiesEnv,
        format!(
            "mpirun: {} forwarded by name to every node (OMPI_MCA_mca_base_env_list); valid where every node's NIC on this network has the same name, else run mpirun … ncclenv -- PROGRAM",
            shown.join(", ")
        ),
        format!("where the nodes' interface names differ, {per_rank}"),
    );
}

/// DeepSpeed's multinode runner copies every `NCCL*` variable: ncclenv does not set the node-local names
/// ([`DEEPSPEED_WITHHOLD`]) nor an `NCCL_IB_DISABLE=1` that only skips a probe finding nothing here
/// (`rdma::ib_disable_only_skips_probe`: on a node with HCAs it would switch InfiniBand off, here it changes
/// nothing); what else it sets with the `NCCL_` prefix (the family, a repair such as `NCCL_SHM_DISABLE=1` or
/// an `NCCL_IB_DISABLE=1` that this node needs) stays, and the finding names it as copied to every node.
fn deepspeed(snap: &Snapshot, cfg: &crate::config::Config, plan: &mut Plan) {
    let skip_only = super::rdma::ib_disable_only_skips_probe(snap, cfg);
    let withhold = |name: &str| {
        DEEPSPEED_WITHHOLD.contains(&name) || (name == super::switches::IB.var && skip_only)
    };
    let mut withheld = Vec::new();
    let mut copied = Vec::new();
    for c in &plan.changes {
        let Action::Set { value } = &c.action else {
            continue;
        };
        if withhold(&c.name) {
            withheld.push(format!("{}={value}", c.name));
        } else if c.name.starts_with("NCCL_") {
            copied.push(format!("{}={value}", c.name));
        }
    }
    if withheld.is_empty() && copied.is_empty() {
        return;
    }
    plan.changes
        .retain(|c| !(withhold(&c.name) && matches!(c.action, Action::Set { .. })));
    let left = if withheld.is_empty() {
        String::new()
    } else {
        format!(
            "ncclenv leaves {} (this node's choices) to each node and does not set them; ",
            withheld.join(", ")
        )
    };
    let kept = if copied.is_empty() {
        String::new()
    } else {
        format!(
            "it sets {}, which the runner copies to every node as this node's values; ",
            copied.join(", ")
        )
    };
    plan.finding(
        Finding::RunnerCopiesEnv,
        format!(
            "DeepSpeed's multinode runner copies every NCCL* variable of this node to every node: {left}{kept}to decide on every node, run deepspeed --no_python --no_local_rank … ncclenv -- python train.py"
        ),
        "run ncclenv on every node: deepspeed --hostfile H --no_python --no_local_rank … ncclenv -- python train.py, or deepspeed --no_ssh --node_rank=N under ncclenv on each node",
    );
}

/// A `.deepspeed_env` that sets `NCCL_SOCKET_IFNAME` (`Spread::env_file_ifname`): DeepSpeed's runner exports
/// its lines to every node after the launching node's own variables (deepspeed/launcher/runner.py), so the value
/// wins over anything ncclenv decides here. One name (or `=name`) is this node's NIC, which another node may
/// lack ("Bootstrap : no socket interface found" there), and ncclenv cannot know the other nodes' names: a
/// warning with the remedy. An exclusion list (`^docker,lo`) and a list of several names (the form NCCL's
/// maintainers recommend for nodes whose names differ) are left alone.
fn deepspeed_env_file(s: &crate::snapshot::Spread, plan: &mut Plan) {
    let Some((path, value)) = &s.env_file_ifname else {
        return;
    };
    let v = value.trim();
    if v.is_empty() || v.starts_with('^') || v.contains(',') {
        return;
    }
    plan.finding(
        Finding::RunnerCopiesEnv,
        format!(
            "{path} sets NCCL_SOCKET_IFNAME={v}, which DeepSpeed's runner copies to every node over this node's choice; a node whose NIC has another name fails (\"Bootstrap : no socket interface found\"), and ncclenv cannot know the other nodes' names"
        ),
        format!(
            "remove NCCL_SOCKET_IFNAME from {path} and run ncclenv on every node (deepspeed --hostfile H --no_python --no_local_rank … ncclenv -- python train.py, or through the node launcher with --launcher_args), or set there a prefix or list valid on every node (e.g. NCCL_SOCKET_IFNAME=en, or ^docker,lo)"
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::snapshot::{RdmaDevice, RdmaPort, RdmaSnapshot, Spread};
    use crate::test_machine::{has_warning, warning, warnings};

    fn plan_with(sets: &[(&str, &str)]) -> Plan {
        let mut p = Plan::default();
        for (n, v) in sets {
            p.set(n, *v, "test");
        }
        p
    }

    fn snap(l: Launcher, nnodes: Option<u32>, s: Spread, env: &[(&str, &str)]) -> Snapshot {
        let mut snap = crate::test_snapshot::SnapshotBuilder::new().build();
        snap.job.launcher = Some(l);
        snap.job.nnodes = nnodes;
        snap.job.spread = Some(s);
        for (k, v) in env {
            snap.env.insert(k.to_string(), v.to_string());
        }
        snap
    }

    #[test]
    fn mpirun_forwards_by_env_list_and_appends() {
        let s = snap(Launcher::Mpi, Some(2), Spread::default(), &[]);
        let mut p = plan_with(&[
            ("NCCL_SOCKET_IFNAME", "eth0"),
            ("GLOO_SOCKET_IFNAME", "eth0"),
        ]);
        decide_spread(&s, &Config::default(), &mut p);
        assert_eq!(
            p.value_of("OMPI_MCA_mca_base_env_list"),
            Some("NCCL_SOCKET_IFNAME;GLOO_SOCKET_IFNAME")
        );
        let w = warning(&p, "runner-copies-env");
        assert!(
            w.message.contains("same name") && w.remedy.contains("ncclenv --"),
            "{w:?}"
        );
        // An inherited list (and its delimiter) is kept and extended; an entry of the user's wins.
        let s = snap(
            Launcher::Mpi,
            None,
            Spread::default(),
            &[
                ("OMPI_MCA_mca_base_env_list", "FOO,NCCL_SOCKET_IFNAME=ib0"),
                ("OMPI_MCA_mca_base_env_list_delimiter", ","),
            ],
        );
        let mut p = plan_with(&[
            ("NCCL_SOCKET_IFNAME", "eth0"),
            ("NCCL_SOCKET_FAMILY", "AF_INET"),
        ]);
        decide_spread(&s, &Config::default(), &mut p);
        assert_eq!(
            p.value_of("OMPI_MCA_mca_base_env_list"),
            Some("FOO,NCCL_SOCKET_IFNAME=ib0,NCCL_SOCKET_FAMILY")
        );
    }

    #[test]
    fn mpirun_single_node_or_through_ncclenv_forwards_nothing() {
        let mut p = plan_with(&[("NCCL_SOCKET_IFNAME", "eth0")]);
        decide_spread(
            &snap(Launcher::Mpi, Some(1), Spread::default(), &[]),
            &Config::default(),
            &mut p,
        );
        assert_eq!(p.value_of("OMPI_MCA_mca_base_env_list"), None);
        let through = Spread {
            ranks_through_ncclenv: true,
            ..Spread::default()
        };
        decide_spread(
            &snap(Launcher::Mpi, Some(2), through, &[]),
            &Config::default(),
            &mut p,
        );
        assert_eq!(p.value_of("OMPI_MCA_mca_base_env_list"), None);
        assert!(warnings(&p, "runner-copies-env").any(|w| w.message.contains("through ncclenv")));
    }

    #[test]
    fn mpirun_x_blocks_forwarding_with_a_warning() {
        let s = Spread {
            exports: vec!["NCCL_SOCKET_IFNAME".into(), "PATH".into()],
            ..Spread::default()
        };
        let mut p = plan_with(&[("NCCL_SOCKET_IFNAME", "eth0")]);
        decide_spread(
            &snap(Launcher::Mpi, Some(2), s, &[]),
            &Config::default(),
            &mut p,
        );
        assert_eq!(p.value_of("OMPI_MCA_mca_base_env_list"), None);
        let w = warning(&p, "runner-forward-blocked");
        assert!(
            w.message
                .contains("-x NCCL_SOCKET_IFNAME copies this node's value"),
            "{}",
            w.message
        );
        let s = Spread {
            mca: vec!["mca_base_env_list".into()],
            ..Spread::default()
        };
        let mut p = plan_with(&[("NCCL_SOCKET_IFNAME", "eth0")]);
        decide_spread(
            &snap(Launcher::Mpi, Some(2), s, &[]),
            &Config::default(),
            &mut p,
        );
        assert!(has_warning(&p, "runner-forward-blocked"));
        // An inherited list with assignments is not recorded (secrets) and not rewritten.
        let rec = crate::probe::job::record_env([(
            "OMPI_MCA_mca_base_env_list".into(),
            "TOKEN=s3cret;FOO".into(),
        )]);
        assert_eq!(
            rec.get("OMPI_MCA_mca_base_env_list").map(String::as_str),
            Some(ENV_LIST_ASSIGNS)
        );
        let env: Vec<(&str, &str)> = rec.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut p = plan_with(&[("NCCL_SOCKET_IFNAME", "eth0")]);
        decide_spread(
            &snap(Launcher::Mpi, Some(2), Spread::default(), &env),
            &Config::default(),
            &mut p,
        );
        assert_eq!(p.value_of("OMPI_MCA_mca_base_env_list"), None);
        assert!(has_warning(&p, "runner-forward-blocked"));
        // A list of names is recorded as is.
        let rec = crate::probe::job::record_env([(
            "OMPI_MCA_mca_base_env_list".into(),
            "FOO;BAR".into(),
        )]);
        assert_eq!(
            rec.get("OMPI_MCA_mca_base_env_list").map(String::as_str),
            Some("FOO;BAR")
        );
    }

    #[test]
    fn deepspeed_multinode_leaves_node_local_names_to_each_node() {
        let mut p = plan_with(&[
            ("NCCL_SOCKET_IFNAME", "enp179s0f0"),
            ("NCCL_SOCKET_FAMILY", "AF_INET"),
            ("NCCL_IB_HCA", "=mlx5_0"),
        ]);
        decide_spread(
            &snap(Launcher::Deepspeed, Some(2), Spread::default(), &[]),
            &Config::default(),
            &mut p,
        );
        assert_eq!(p.value_of("NCCL_SOCKET_IFNAME"), None);
        assert_eq!(p.value_of("NCCL_IB_HCA"), None);
        assert_eq!(p.value_of("NCCL_SOCKET_FAMILY"), Some("AF_INET"));
        let w = warning(&p, "runner-copies-env");
        assert!(
            w.message.contains("enp179s0f0") && w.remedy.contains("--no_python --no_local_rank"),
            "{w:?}"
        );
    }

    /// #21 item 5: a `.deepspeed_env` naming one NIC is warned about with the remedy; an exclusion list, a
    /// cross-node list, a single-node job and ranks through ncclenv are not.
    #[test]
    fn deepspeed_env_file_with_a_node_local_name_is_warned() {
        let warned = |value: &str, nodes: u32, through: bool| {
            let s = Spread {
                ranks_through_ncclenv: through,
                env_file_ifname: Some(("/home/u/.deepspeed_env".into(), value.into())),
                ..Spread::default()
            };
            let mut p = plan_with(&[]);
            decide_spread(
                &snap(Launcher::Deepspeed, Some(nodes), s, &[]),
                &Config::default(),
                &mut p,
            );
            p.warnings
                .into_iter()
                .find(|w| w.message.contains(".deepspeed_env"))
        };
        let w = warned("enp179s0f0", 2, false).expect("warning");
        assert!(
            w.message.contains("NCCL_SOCKET_IFNAME=enp179s0f0")
                && w.remedy.contains("--launcher_args")
                && w.remedy.contains("prefix"),
            "{w:?}"
        );
        assert!(warned("=eth0", 2, false).is_some());
        assert!(warned("^docker,lo", 2, false).is_none());
        assert!(warned("enp179s0f0,enp1s0", 2, false).is_none());
        assert!(warned("enp179s0f0", 1, false).is_none());
        assert!(warned("enp179s0f0", 2, true).is_none());
    }

    /// This node's RDMA: `hca` adds one InfiniBand HCA with an ACTIVE port and no verbs node (`uverbs`), which
    /// NCCL cannot open (a repair); none: no device (a probe that finds nothing).
    fn rdma(hca: bool) -> RdmaSnapshot {
        let port = RdmaPort {
            port: 1,
            state: 4,
            phys_state: 5,
            link_layer: "InfiniBand".into(),
            rate: "200 Gb/sec (4X HDR)".into(),
            gids: Vec::new(),
            gid_tbl_len: 0,
        };
        RdmaSnapshot {
            devices: if hca {
                vec![RdmaDevice {
                    name: "mlx5_0".into(),
                    ports: vec![port],
                    verbs: None,
                }]
            } else {
                Vec::new()
            },
            ..RdmaSnapshot::default()
        }
    }

    /// The real DeepSpeed 0.19.8 runner exports this node's `NCCL_IB_DISABLE=1` into every node
    /// (tests/it/launcher_forms.rs): withheld when it only skips a probe that finds no device here, kept (and
    /// named as copied) when it repairs an HCA this node cannot open.
    #[test]
    fn deepspeed_withholds_an_ib_disable_that_only_skips_the_probe() {
        for (hca, withheld) in [(false, true), (true, false)] {
            let mut p = plan_with(&[("NCCL_IB_DISABLE", "1"), ("NCCL_SOCKET_FAMILY", "AF_INET")]);
            let mut s = snap(Launcher::Deepspeed, Some(2), Spread::default(), &[]);
            s.rdma = Some(rdma(hca));
            decide_spread(&s, &Config::default(), &mut p);
            let w = warning(&p, "runner-copies-env");
            assert_eq!(
                p.value_of("NCCL_IB_DISABLE").is_none(),
                withheld,
                "hca {hca}: {w:?}"
            );
            // What ncclenv leaves to each node comes first, what the runner copies after "it sets".
            let (left, copied) = w.message.split_once("it sets ").expect("copied part");
            assert!(
                copied.contains("NCCL_SOCKET_FAMILY=AF_INET")
                    && left.contains("leaves NCCL_IB_DISABLE=1") == withheld
                    && copied.contains("NCCL_IB_DISABLE=1") != withheld,
                "{w:?}"
            );
        }
    }
}
