//! `ncclenv doctor` on three real layouts (network namespaces): its exit code (0 ok, 1 warning, 78 refuse),
//! its text, and its JSON validated against `docs/doctor.schema.json` with Python's `jsonschema` (draft
//! 2020-12), an implementation independent of ours.

use crate::common;

use common::{require_root, Netns, TempDir};
use std::process::{Command, Output, Stdio};

fn doctor(ns: &Netns, sysfs: &TempDir, extra: &[(&str, &str)], json: bool) -> Output {
    doctor_cmd(ns, sysfs, extra, &[], json)
}

/// `ncclenv doctor [--json] [-- CMD…]` in `ns` with a cleared environment plus `extra`.
fn doctor_cmd(
    ns: &Netns,
    sysfs: &TempDir,
    extra: &[(&str, &str)],
    cmd: &[&str],
    json: bool,
) -> Output {
    let mut c = ns.command(env!("CARGO_BIN_EXE_ncclenv"));
    c.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("NCCLENV_SYSFS", &sysfs.path)
        .env("NCCLENV_DEVFS", &sysfs.path)
        .env("NCCLENV_SHM_MIN", "0");
    for (k, v) in extra {
        c.env(k, v);
    }
    c.arg("doctor");
    if json {
        c.arg("--json");
    }
    if !cmd.is_empty() {
        c.arg("--").args(cmd);
    }
    c.output().expect("run ncclenv doctor")
}

/// Validate a JSON document against the schema with Python's jsonschema; panics with the errors.
fn validate(doc: &[u8]) {
    let schema = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/doctor.schema.json");
    let script = "import json,sys,jsonschema\n\
        s=json.load(open(sys.argv[1]))\n\
        jsonschema.Draft202012Validator.check_schema(s)\n\
        d=json.load(sys.stdin)\n\
        errs=[f'{list(e.path)}: {e.message}' for e in jsonschema.Draft202012Validator(s).iter_errors(d)]\n\
        print('\\n'.join(errs)); sys.exit(1 if errs else 0)\n";
    let mut child = Command::new("python3")
        .args(["-c", script, schema])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(doc).expect("write json");
    }
    let o = child.wait_with_output().expect("python3 result");
    assert!(
        o.status.success(),
        "doctor JSON does not match docs/doctor.schema.json:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn check(ns: &Netns, extra: &[(&str, &str)], want_code: i32, want_text: &[&str]) {
    let sysfs = TempDir::new("docsys");
    let text = doctor(ns, &sysfs, extra, false);
    let t = String::from_utf8_lossy(&text.stdout);
    assert_eq!(
        text.status.code(),
        Some(want_code),
        "{t}\n{}",
        String::from_utf8_lossy(&text.stderr)
    );
    for w in want_text {
        assert!(t.contains(w), "doctor text lacks {w:?}:\n{t}");
    }
    let json = doctor(ns, &sysfs, extra, true);
    assert_eq!(json.status.code(), Some(want_code));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("doctor --json is JSON");
    assert_eq!(v["schema"], "ncclenv-doctor/1");
    validate(&json.stdout);
}

#[test]
fn doctor_on_a_docker_bridge_layout_is_clean() {
    if !require_root() {
        return;
    }
    let ns = Netns::new("docf1");
    ns.plug("eth0");
    ns.addr("eth0", "172.17.0.2/16");
    ns.route("default via 172.17.0.1 dev eth0");
    check(
        &ns,
        &[],
        0,
        &[
            "eth0",
            "172.17.0.2",
            "NCCL_SOCKET_IFNAME=eth0",
            "default via 172.17.0.1",
        ],
    );
}

#[test]
fn f7_doctor_on_vlan_children_warns_about_the_inherited_prefix() {
    if !require_root() {
        return;
    }
    let ns = Netns::new("docf7");
    ns.plug("bond0");
    ns.addr("bond0", "10.42.0.11/27");
    ns.route("default via 10.42.0.1 dev bond0");
    ns.macvlan("bond0.2973", "bond0");
    ns.addr("bond0.2973", "10.0.106.11/16");
    check(
        &ns,
        &[("NCCL_SOCKET_IFNAME", "bond0")],
        1,
        &["inherited-ifname-prefix", "bond0.2973", "=bond0"],
    );
}

#[test]
fn f10_doctor_without_network_refuses_a_two_node_job() {
    if !require_root() {
        return;
    }
    let ns = Netns::new("docf10");
    check(&ns, &[("NCCLENV_NNODES", "2")], 78, &["lo", "refuse"]);
}

/// The parts of a doctor sample that are the machine's own and that scripts/doctor-samples.sh cannot pin:
/// the bodies of the "GPUs" and "NCCL installations" sections (a GPU driver, libraries on disk) and the NCCL
/// version the "NCCL alone" line names (it follows those libraries). Everything else is compared as is.
fn normalise_sample(doc: &str) -> String {
    let mut out = Vec::new();
    let mut machine = false;
    for line in doc.lines() {
        if !line.starts_with(' ') {
            machine = line == "GPUs" || line == "NCCL installations";
            out.push(line.to_string());
            if machine {
                out.push("  <machine-specific>".to_string());
            }
            continue;
        }
        if machine {
            continue;
        }
        match (
            line.trim_start().starts_with("NCCL alone:"),
            line.rfind("; NCCL "),
        ) {
            (true, Some(i)) if line.ends_with(']') => {
                out.push(format!("{}; <NCCL version>]", &line[..i]))
            }
            _ => out.push(line.to_string()),
        }
    }
    out.join("\n")
}

/// docs/doctor-samples.md is exactly what scripts/doctor-samples.sh prints with the binary under test (after
/// [`normalise_sample`]): the samples cannot drift from what doctor prints.
#[test]
fn doctor_samples_document_is_the_scripts_output() {
    if !require_root() {
        return;
    }
    let root = env!("CARGO_MANIFEST_DIR");
    let o = Command::new("bash")
        .arg(format!("{root}/scripts/doctor-samples.sh"))
        .arg("--stdout")
        .arg(env!("CARGO_BIN_EXE_ncclenv"))
        .output()
        .expect("run scripts/doctor-samples.sh");
    assert!(
        o.status.success(),
        "scripts/doctor-samples.sh failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let fresh = String::from_utf8_lossy(&o.stdout);
    let doc = std::fs::read_to_string(format!("{root}/docs/doctor-samples.md"))
        .expect("docs/doctor-samples.md");
    let (fresh_n, doc_n) = (normalise_sample(&fresh), normalise_sample(&doc));
    if fresh_n != doc_n {
        let first = fresh_n
            .lines()
            .zip(doc_n.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(fresh_n.lines().count().min(doc_n.lines().count()));
        panic!(
            "docs/doctor-samples.md differs from scripts/doctor-samples.sh's output from line {} on \
             (regenerate it: sudo scripts/doctor-samples.sh):\n  script: {:?}\n  file:   {:?}",
            first + 1,
            fresh_n.lines().nth(first),
            doc_n.lines().nth(first)
        );
    }
    // The normalisation hides little: the samples still show the three layouts' decisions.
    for needle in [
        "NCCL_SOCKET_IFNAME=eth0",
        "[warn] inherited-ifname-prefix",
        "[warn] rdma-no-verbs-devices",
    ] {
        assert!(doc_n.contains(needle), "{needle}");
    }
}

/// The Peer section: the master, how it was found (flag, `PET_*`, variable), the launcher's facts, and for a
/// name that did not resolve how long it was tried; the JSON of each against the schema. A URL's password is
/// in neither.
#[test]
fn doctor_shows_the_peer_and_how_it_was_found() {
    if !require_root() {
        return;
    }
    let ns = Netns::new("docpeer");
    ns.plug("eth0");
    ns.addr("eth0", "10.244.0.5/24");
    ns.route("default via 10.244.0.1 dev eth0");
    ns.plug("net1");
    ns.addr("net1", "10.100.0.7/24");
    let sysfs = TempDir::new("docpeer");
    let run = |extra: &[(&str, &str)], cmd: &[&str]| {
        let t = doctor_cmd(&ns, &sysfs, extra, cmd, false);
        let j = doctor_cmd(&ns, &sysfs, extra, cmd, true);
        validate(&j.stdout);
        let v: serde_json::Value = serde_json::from_slice(&j.stdout).expect("json");
        (String::from_utf8_lossy(&t.stdout).into_owned(), v, j.stdout)
    };
    let (t, v, raw) = run(
        &[("PET_NODE_RANK", "1")],
        &[
            "torchrun",
            "--nnodes=2",
            "--rdzv-endpoint=etcd://root:S3CR3T@10.100.0.5:2379",
            "train.py",
        ],
    );
    for want in [
        "10.100.0.5 port 2379 from --rdzv-endpoint (torchrun)",
        "route to 10.100.0.5: dev net1",
        "rendezvous: torchrun's etcd rendezvous at 10.100.0.5:2379 (HTTP",
        "node rank: 1 (PET_NODE_RANK)",
        "kernel's route to off-link",
    ] {
        assert!(t.contains(want), "doctor text lacks {want:?}:\n{t}");
    }
    assert!(!t.contains("S3CR3T") && !String::from_utf8_lossy(&raw).contains("S3CR3T"));
    assert_eq!(v["peer"]["source"], "--rdzv-endpoint");
    assert_eq!(v["job"]["rendezvous"]["protocol"], "http");
    assert_eq!(v["job"]["node_rank_source"], "PET_NODE_RANK");
    // A name that does not resolve: how long it was tried.
    let (t, v, _) = run(
        &[
            ("MASTER_ADDR", "no-such-master.invalid"),
            ("NCCLENV_RESOLVE_TIMEOUT_MS", "300"),
        ],
        &[],
    );
    assert!(t.contains("no-such-master.invalid from MASTER_ADDR"), "{t}");
    assert!(t.contains("not resolved: tried for"), "{t}");
    assert!(t.contains("peer-unresolved"), "{t}");
    let ms = v["peer"]["resolve_ms"].as_u64().expect("resolve_ms");
    assert!(ms >= 300, "{}", v["peer"]);
    assert!(v["peer"]["resolve_attempts"].as_u64() >= Some(1));
}

/// Per-device facts: F22's two HCAs (one without its verbs node) with a RoCE GID table, an HPC-X-style net
/// plugin on `LD_LIBRARY_PATH`, an inherited `NCCL_IB_GID_INDEX` and the launcher's local ranks, in text and
/// in JSON valid against the schema.
#[test]
fn f22_doctor_shows_each_hca_its_gid_table_plugins_and_the_shm_budget() {
    use common::fake_rdma::{gid, hca, uverbs, verbs_map, write};
    if !require_root() {
        return;
    }
    let ns = Netns::new("docrdma");
    ns.plug("eth0");
    ns.addr("eth0", "10.244.2.5/24");
    ns.route("default via 10.244.2.1 dev eth0");
    ns.plug("net1");
    ns.addr("net1", "10.10.0.5/24");
    let t = TempDir::new("docrdma");
    let sys = t.join("sys");
    for (i, net) in [(0, "net1"), (1, "net2")] {
        let dev = format!("erdma_{i}");
        hca(&sys, &dev, "Ethernet", "100 Gb/sec (4X EDR)", Some(net));
        gid(
            &sys,
            &dev,
            1,
            "0000:0000:0000:0000:0000:ffff:0a0a:0005",
            "RoCE v2",
            net,
        );
        verbs_map(&sys, &format!("uverbs{i}"), &dev);
    }
    uverbs(&t.join("dev"), 0);
    write(&t.join("lib/libnccl-net.so"), "not loaded by the test");
    let run = |json: bool| {
        let mut c = ns.command(env!("CARGO_BIN_EXE_ncclenv"));
        c.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("NCCLENV_SYSFS", &sys)
            .env("NCCLENV_DEVFS", t.join("dev"))
            .env("LD_LIBRARY_PATH", t.join("lib"))
            .env("NCCL_IB_GID_INDEX", "5")
            .env("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
            .arg("doctor");
        if json {
            c.arg("--json");
        }
        c.args(["--", "torchrun", "--nproc-per-node=2", "train.py"]);
        c.output().expect("run ncclenv doctor")
    };
    let text = run(false);
    let t_out = String::from_utf8_lossy(&text.stdout);
    assert_eq!(text.status.code(), Some(1), "{t_out}");
    for want in [
        "VERBS NODE",
        "uverbs0 (opens)",
        "uverbs1 (missing)",
        "not usable: no verbs node",
        "GID tables",
        "::ffff:10.10.0.5",
        "NCCL's choice, works here",
        "NCCL net plugins",
        "lib/libnccl-net.so",
        "local ranks: 2 (--nproc-per-node)",
        "NCCL needs: 74 MiB for 2 local rank(s) (--nproc-per-node)",
        "[warn] rdma-hca-unusable",
        "[warn] rdma-gid-index-unusable: inherited NCCL_IB_GID_INDEX=5",
        "beyond the GID table (2 entries)",
    ] {
        assert!(t_out.contains(want), "doctor text lacks {want:?}:\n{t_out}");
    }
    let json = run(true);
    validate(&json.stdout);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let hcas = &v["decision"]["rdma_hcas"];
    assert_eq!(hcas[0]["verbs"], "opens");
    assert_eq!(hcas[1]["verbs"], "missing");
    assert_eq!(hcas[1]["ports"][0]["usable"], false);
    assert_eq!(hcas[0]["ports"][0]["nccl_gid_index"], 1);
    assert_eq!(hcas[0]["ports"][0]["working_gid_index"], 1);
    assert_eq!(v["rdma"]["devices"][0]["verbs"]["name"], "uverbs0");
    assert_eq!(v["rdma"]["devices"][0]["ports"][0]["gid_tbl_len"], 2);
    assert_eq!(v["job"]["local_ranks"], 2);
    assert_eq!(v["decision"]["shm_need"]["ranks"], 2);
    assert_eq!(v["decision"]["shm_need"]["segment_bytes"], 9_637_888);
    let plugins = v["net_plugins"].as_array().cloned().unwrap_or_default();
    assert!(
        plugins
            .iter()
            .any(|p| p["loads"] == true && p["source"] == "LD_LIBRARY_PATH"),
        "{plugins:?}"
    );
    assert_eq!(
        v["decision"]["changes"].as_array().map(|c| c
            .iter()
            .any(|c| c["name"] == "NCCL_IB_HCA" && c["value"] == "=erdma_0")),
        Some(true)
    );
}
