//! Issue 5 part 4: PaddlePaddle's real launcher, two "nodes", end to end.
//!
//! Layout (built twice, once per run, so both runs go at the same time in separate namespaces):
//!
//! ```text
//!   node A netns (UTS ns, hostname node-a)        switch netns         node B netns (hostname node-b)
//!   eth0 10.99.0.1/24  ── veth ──  br0 ──  veth ──  eth0 10.99.0.2/24
//!   docker0 172.17.0.1/16 (bridge, RUNNING, carries the default route: a decoy)
//!   veth9f3a (RUNNING, fe80 only: a decoy)
//!   /etc/hosts: 127.0.1.1 node-a (bind-mounted, private mount ns)
//! ```
//!
//! Each node runs `python -m paddle.distributed.launch --nnodes=2 --master=10.99.0.1:8090 --nproc_per_node=1
//! tests/paddle/train.py`, whose worker initialises the parallel env (gloo on CPU), all-reduces rank + 1 and
//! writes the sum and the variables it saw to `rank<R>.json`.
//!
//! * With `ncclenv --preflight --` in front: the two ncclenvs first meet on Paddle's own master port
//!   (`10.99.0.1:8090`: the fleet preflight, which must free the port for Paddle's HTTP master), then
//!   ncclenv picks eth0 by the route to the master, sets POD_IP to eth0's address
//!   and GLOO_SOCKET_IFNAME=eth0; the job finishes with sum 3 on both nodes, and each worker saw the right
//!   interface, its own address in PADDLE_CURRENT_ENDPOINT and both real addresses in
//!   PADDLE_TRAINER_ENDPOINTS.
//! * Without it (the same layout, environment and command): Paddle's node address is
//!   `gethostbyname(getfqdn())` = 127.0.1.1, so node A does not see itself in `--master=10.99.0.1` and never
//!   starts the rendezvous server; both launchers log "master not ready" until the deadline. The run must not
//!   finish; otherwise the test proves nothing and fails.
//!
//! Needs root (namespaces) and the pinned Paddle CPU wheel from `scripts/install-paddle.sh`
//! (`$NCCLENV_TEST_PADDLE_ROOT/paddle-<ver>`, default `/opt/ncclenv/paddle-3.2.2`). Missing: skipped with a
//! message, a failure under `CI=true`. The environment of every process is cleared (PATH, HOME and the output
//! folder only: an inherited HTTP_PROXY would send Paddle's rendezvous to the proxy). Paddle's logs, which
//! dump the environment, go to a temporary folder, and are shown (tails) only when an assertion fails.
//! Every process runs in its own process group and is killed, with everything left in the node namespaces,
//! when the run ends or the test panics.

use crate::common;

use common::{Netns, TempDir};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ncclenv");
const PADDLE_VERSION: &str = "3.2.2";
const MASTER_PORT: u16 = 8090;
/// Bound on the run with ncclenv (it takes ~10 s on 2 loaded cores).
const RUN_DEADLINE: Duration = Duration::from_secs(180);
/// The run without ncclenv gets at least this long, and at least twice what the run with ncclenv took.
const HANG_MIN: Duration = Duration::from_secs(30);

/// The Paddle venv's python, or None (skip; panic under CI=true) when it is not installed.
fn paddle_python() -> Option<PathBuf> {
    common::needs::paddle(PADDLE_VERSION)
}

/// One node: its namespace (with the decoys), name and eth0 address.
struct Node {
    ns: Netns,
    host: &'static str,
    ip: &'static str,
}

/// Two nodes on a bridge in a switch namespace.
struct Cluster {
    _switch: Netns,
    nodes: [Node; 2],
}

fn cluster(tag: &str) -> Cluster {
    let switch = Netns::new(&format!("pd{tag}sw"));
    switch.ip(&["link", "add", "br0", "type", "bridge", "forward_delay", "0"]);
    switch.up("br0");
    let mk = |side: &str, host: &'static str, ip: &'static str| {
        let ns = Netns::new(&format!("pd{tag}{side}"));
        let port = format!("sw{side}");
        switch.ip(&[
            "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns.name,
        ]);
        switch.ip(&["link", "set", &port, "master", "br0"]);
        switch.up(&port);
        ns.addr("eth0", &format!("{ip}/24"));
        ns.up("eth0");
        ns.wait_running("eth0");
        // Decoys: a docker0 bridge with an address and the default route, an fe80-only veth.
        ns.bridge("docker0");
        ns.addr("docker0", "172.17.0.1/16");
        ns.route("default via 172.17.0.254 dev docker0");
        ns.plug("veth9f3a");
        ns.wait_link_local("veth9f3a");
        Node { ns, host, ip }
    };
    let a = mk("a", "node-a", "10.99.0.1");
    let b = mk("b", "node-b", "10.99.0.2");
    switch.wait_running("br0");
    Cluster {
        _switch: switch,
        nodes: [a, b],
    }
}

/// A launcher running on one node, in its own process group; killed (with everything left in its network
/// namespace) on drop.
struct Launch {
    child: Child,
    netns: String,
    dir: PathBuf,
    status: Option<ExitStatus>,
}

impl Launch {
    fn start(node: &Node, python: &Path, with_ncclenv: bool, dir: PathBuf) -> Launch {
        std::fs::create_dir_all(&dir).unwrap();
        let hosts = dir.join("hosts");
        std::fs::write(
            &hosts,
            format!("127.0.0.1 localhost\n127.0.1.1 {}\n", node.host),
        )
        .unwrap();
        let train = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/paddle/train.py");
        let out = std::fs::File::create(dir.join("out")).unwrap();
        let mut c = node.ns.command("unshare");
        c.args(["--uts", "--mount", "sh", "-c"])
            .arg(r#"hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@""#)
            .arg("sh")
            .arg(node.host)
            .arg(&hosts);
        if with_ncclenv {
            // With the fleet preflight on both nodes: node A holds Paddle's own master port (8090) for the
            // meeting, then frees it for Paddle's HTTP master.
            c.args([BIN, "--preflight", "--"]);
        }
        c.arg(python)
            .args(["-m", "paddle.distributed.launch", "--nnodes=2"])
            .arg(format!("--master=10.99.0.1:{MASTER_PORT}"))
            .arg("--nproc_per_node=1")
            .arg(format!("--log_dir={}", dir.join("log").display()))
            .arg(&train)
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", &dir)
            .env("E2E_OUT_DIR", &dir)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0);
        let child = c
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"));
        Launch {
            child,
            netns: node.ns.name.clone(),
            dir,
            status: None,
        }
    }

    /// Polls; true once exited.
    fn done(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().unwrap();
        }
        self.status.is_some()
    }

    fn kill(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        // Workers may have their own session (Paddle starts them with setsid): kill whatever is left in the
        // node's network namespace, by pid.
        for _ in 0..3 {
            let pids = Command::new("ip")
                .args(["netns", "pids", &self.netns])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            let pids: Vec<i32> = pids
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            if pids.is_empty() {
                break;
            }
            for p in pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(p),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if self.status.is_none() {
            self.status = self.child.wait().ok();
        }
    }

    /// The launcher's output (ncclenv's lines, Paddle's launcher log) and the worker log, last lines, for a
    /// failure message.
    fn tails(&self) -> String {
        let tail = |p: PathBuf| {
            let s = std::fs::read_to_string(&p).unwrap_or_default();
            let lines: Vec<&str> = s.lines().collect();
            let from = lines.len().saturating_sub(25);
            format!(
                "--- {} (last 25 lines)\n{}",
                p.display(),
                lines[from..].join("\n")
            )
        };
        format!(
            "{}\n{}",
            tail(self.dir.join("out")),
            tail(self.dir.join("log/workerlog.0"))
        )
    }

    fn output(&self) -> String {
        std::fs::read_to_string(self.dir.join("out")).unwrap_or_default()
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `rank*.json` files a node's worker wrote.
fn results(dir: &Path) -> Vec<serde_json::Value> {
    let mut v = vec![];
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("rank") && name.ends_with(".json") {
            let s = std::fs::read_to_string(e.path()).unwrap();
            v.push(serde_json::from_str(&s).unwrap_or_else(|e| panic!("{name}: {e}: {s}")));
        }
    }
    v
}

#[test]
fn paddle_launch_two_nodes_needs_ncclenv() {
    if !common::require_root() {
        return;
    }
    let Some(python) = paddle_python() else {
        return;
    };
    let tmp = TempDir::new("paddle-e2e");
    let with = cluster("w");
    let without = cluster("n");

    let t0 = Instant::now();
    let mut good: Vec<Launch> = with
        .nodes
        .iter()
        .map(|n| Launch::start(n, &python, true, tmp.join(&format!("with-{}", n.host))))
        .collect();
    let mut bad: Vec<Launch> = without
        .nodes
        .iter()
        .map(|n| Launch::start(n, &python, false, tmp.join(&format!("without-{}", n.host))))
        .collect();
    let took = run_with_ncclenv_finishes(&mut good, t0);

    // What each node's worker saw.
    let mut ranks = vec![];
    for (node, l) in with.nodes.iter().zip(&good) {
        let ctx = || all_tails(&good);
        let rs = results(&l.dir);
        assert_eq!(
            rs.len(),
            1,
            "{}: one worker result expected\n{}",
            node.host,
            ctx()
        );
        ranks.push(check_worker_saw(node, &rs[0]));
        ncclenv_said_why(node, l, &ctx);
    }
    assert_eq!(ranks, vec![0, 1], "node A (the master) is rank 0");
    drop(good);
    run_without_ncclenv_hangs(&without, &mut bad, t0, took);
}

/// The logs' tails of every launcher in `ls`, for a failure message.
fn all_tails(ls: &[Launch]) -> String {
    ls.iter().map(Launch::tails).collect::<Vec<_>>().join("\n")
}

/// Waits for the run with ncclenv (`good`, started at `t0`): both launchers must exit 0 within
/// [`RUN_DEADLINE`]. Returns how long it took.
fn run_with_ncclenv_finishes(good: &mut [Launch], t0: Instant) -> Duration {
    while !good.iter_mut().all(Launch::done) {
        if t0.elapsed() > RUN_DEADLINE {
            good.iter_mut().for_each(Launch::kill);
            panic!(
                "with ncclenv the job did not finish in {RUN_DEADLINE:?}\n{}",
                all_tails(good)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = t0.elapsed();
    eprintln!("paddle e2e: the run with ncclenv took {took:.1?}");
    for l in good.iter() {
        assert!(
            l.status.unwrap().success(),
            "with ncclenv a launcher failed ({:?})\n{}",
            l.status,
            all_tails(good)
        );
    }
    took
}

/// One worker's result `r` (from `node`, with ncclenv): the all-reduce sum, the world size, the hostname,
/// the interface and family variables, POD_IP, the backend, and its own and both real addresses among the
/// endpoints. Returns its rank.
fn check_worker_saw(node: &Node, r: &serde_json::Value) -> i64 {
    let env = &r["env"];
    let s = |k: &str| env[k].as_str().unwrap_or("<unset>").to_string();
    assert_eq!(
        r["sum"].as_f64(),
        Some(3.0),
        "{}: all-reduce sum: {r}",
        node.host
    );
    assert_eq!(r["world_size"].as_i64(), Some(2), "{}: {r}", node.host);
    assert_eq!(
        r["hostname"].as_str(),
        Some(node.host),
        "{}: {r}",
        node.host
    );
    assert_eq!(s("NCCL_SOCKET_IFNAME"), "eth0", "{}: {r}", node.host);
    assert_eq!(s("NCCL_SOCKET_FAMILY"), "AF_INET", "{}: {r}", node.host);
    assert_eq!(s("GLOO_SOCKET_IFNAME"), "eth0", "{}: {r}", node.host);
    assert_eq!(s("TP_SOCKET_IFNAME"), "eth0", "{}: {r}", node.host);
    assert_eq!(s("POD_IP"), node.ip, "{}: {r}", node.host);
    assert_eq!(s("PADDLE_DISTRI_BACKEND"), "gloo", "{}: {r}", node.host);
    let current = s("PADDLE_CURRENT_ENDPOINT");
    assert!(
        current.starts_with(&format!("{}:", node.ip)),
        "{}: PADDLE_CURRENT_ENDPOINT {current}: {r}",
        node.host
    );
    let eps: Vec<String> = s("PADDLE_TRAINER_ENDPOINTS")
        .split(',')
        .map(String::from)
        .collect();
    assert_eq!(eps.len(), 2, "{}: {r}", node.host);
    assert!(eps[0].starts_with("10.99.0.1:"), "{}: {r}", node.host);
    assert!(eps[1].starts_with("10.99.0.2:"), "{}: {r}", node.host);
    assert!(eps.contains(&current), "{}: {r}", node.host);
    r["rank"].as_i64().unwrap()
}

/// ncclenv on `node` (its launch `l`; `ctx`: every launcher's tails) said why: the route to the master from
/// --master, not docker0's default route; no warnings; and the preflight met both nodes on Paddle's master
/// port before Paddle did.
fn ncclenv_said_why(node: &Node, l: &Launch, ctx: &dyn Fn() -> String) {
    let out = l.output();
    let line = out
        .lines()
        .find(|l| l.starts_with("ncclenv: interface "))
        .unwrap_or_else(|| panic!("{}: no ncclenv decision line\n{}", node.host, ctx()));
    // Node A owns the master's address; node B routes to it (docker0 holds the default route).
    let why = if node.ip == "10.99.0.1" {
        "this host is the peer 10.99.0.1"
    } else {
        "route to peer 10.99.0.1"
    };
    assert!(
        line.starts_with(&format!("ncclenv: interface eth0 {} ({why}", node.ip)),
        "{}: {line}",
        node.host
    );
    let warnings: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("ncclenv: warning"))
        .collect();
    assert!(warnings.is_empty(), "{}: {warnings:?}", node.host);
    // The preflight met both nodes on Paddle's master port before Paddle did.
    assert!(
        out.contains("[preflight-passed]"),
        "{}\n{}",
        node.host,
        ctx()
    );
    if node.ip == "10.99.0.1" {
        assert!(
            out.contains(&format!("listening on 10.99.0.1:{MASTER_PORT}"))
                && out.contains("preflight: node 2/2 node-b 10.99.0.2"),
            "{}\n{}",
            node.host,
            ctx()
        );
    } else {
        assert!(
            out.contains(&format!("preflight: verdict from the master 10.99.0.1:{MASTER_PORT} for 2 of 2 nodes: proceed")),
            "{}\n{}",
            node.host,
            ctx()
        );
    }
}

/// The run without ncclenv (`without`'s nodes, launches `bad`, started at `t0`) must not finish, for at least
/// max([`HANG_MIN`], 2 × `took`, the run with ncclenv) from its start; and each launcher says why.
fn run_without_ncclenv_hangs(without: &Cluster, bad: &mut [Launch], t0: Instant, took: Duration) {
    let hang = HANG_MIN.max(took * 2);
    while t0.elapsed() < hang && !bad.iter_mut().all(Launch::done) {
        std::thread::sleep(Duration::from_millis(200));
    }
    bad.iter_mut().for_each(Launch::kill);
    eprintln!("paddle e2e: the run without ncclenv was stopped after {hang:.1?}");
    for (node, l) in without.nodes.iter().zip(bad.iter()) {
        let rs = results(&l.dir);
        let finished = l.status.map(|s| s.success()).unwrap_or(false);
        assert!(
            rs.is_empty() && !finished,
            "{}: without ncclenv the job finished ({:?}, {rs:?}): this layout proves nothing\n{}",
            node.host,
            l.status,
            all_tails(bad)
        );
        // Why: node A's address is 127.0.1.1, so no launcher serves --master=10.99.0.1.
        assert!(
            l.output().contains("master not ready"),
            "{}: without ncclenv, expected Paddle's 'master not ready'\n{}",
            node.host,
            all_tails(bad)
        );
    }
}
