//! The Docker images and examples, end to end.
//!
//! - Offline lints (no Docker): `docker/Dockerfile` builds what cargo produces, the example Dockerfiles chain
//!   ncclenv correctly, the Kubernetes manifests carry the recommended settings (python3 + PyYAML) and repeat
//!   no launcher argument as a variable, every reference to the carrier image has the same tag, the Compose
//!   files pass `docker compose config` and follow the Compose specification (no `version:`, GPUs through
//!   device reservations), and `examples/launch.sh` runs.
//! - Real Docker: the carrier image is built from host binaries with `docker/Dockerfile.local`, a `FROM
//!   scratch` test image adds `/bin/busybox` (Debian's busybox-static) and `tini-static`, and containers run
//!   with `ncclenv --` as their entrypoint on the default bridge, the host network, no network, two user
//!   networks, an IPv6 network, small and large `/dev/shm`, behind an init, and as a two-node Compose job
//!   (`docker compose`, Compose v2). The carrier runs as a Kubernetes-style init container (`ncclenv install`
//!   into a volume) for an image without ncclenv, and a refusal lands in `/dev/termination-log`.
//!
//! Without Docker (or busybox-static) the Docker tests print why and pass; under `CI=true` they fail.
//! Everything created (containers, networks, images, temp dirs) is removed by Drop guards, also on failure;
//! names carry the test process id.

use crate::common;

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

const MUSL_TARGET: &str = "x86_64-unknown-linux-musl";
const BUSYBOX: &str = "/bin/busybox";
const TINI_STATIC: &str = "/usr/bin/tini-static";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Prints why a test cannot run and returns false; under CI (`common::ci`) panics instead.
fn cannot(why: &str) -> bool {
    common::skip(why)
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A unique, Docker-safe name: `ncclenv-e2e-<pid>-<n>-<what>`.
fn uniq(what: &str) -> String {
    format!(
        "ncclenv-e2e-{}-{}-{what}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn output(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Runs `cmd`, panicking with its stderr unless it succeeds; returns stdout.
fn ok(cmd: &mut Command) -> String {
    let out = output(cmd);
    if !out.status.success() {
        panic!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn docker(args: &[&str]) -> Command {
    let mut c = Command::new("docker");
    c.args(args);
    c
}

/// Removes what a test created when dropped (also when the test panics).
enum Guard {
    Container(String),
    Network(String),
    Image(String),
    Volume(String),
    Dir(PathBuf),
    Compose {
        project: String,
        file: PathBuf,
        env: Vec<(String, String)>,
    },
}

impl Drop for Guard {
    fn drop(&mut self) {
        let quiet = |mut c: Command| {
            let _ = c.stdout(Stdio::null()).stderr(Stdio::null()).status();
        };
        match self {
            Guard::Container(n) => quiet(docker(&["rm", "-f", "-v", n])),
            Guard::Network(n) => quiet(docker(&["network", "rm", n])),
            Guard::Image(n) => quiet(docker(&["rmi", n])),
            Guard::Volume(n) => quiet(docker(&["volume", "rm", "-f", n])),
            Guard::Dir(d) => {
                let _ = std::fs::remove_dir_all(d);
            }
            Guard::Compose { project, file, env } => {
                let mut c = docker(&["compose"]);
                c.envs(env.iter().map(|(k, v)| (k, v)));
                c.arg("-p").arg(&*project).arg("-f").arg(&*file);
                c.args(["down", "-v", "--remove-orphans", "-t", "1"]);
                quiet(c);
            }
        }
    }
}

fn temp_dir(what: &str) -> (PathBuf, Guard) {
    let d = std::env::temp_dir().join(uniq(what));
    std::fs::create_dir_all(&d).unwrap();
    (d.clone(), Guard::Dir(d))
}

// ---------------------------------------------------------------------------------------------------------
// Host binaries and images

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// Builds (incrementally; a no-op when fresh) the static entrypoint and the check helper; returns their paths.
fn host_binaries() -> (PathBuf, PathBuf) {
    ok(cargo().args([
        "build",
        "--quiet",
        "--release",
        "--target",
        MUSL_TARGET,
        "--bin",
        "ncclenv",
    ]));
    ok(cargo().args(["build", "--quiet", "--release", "--bin", "ncclenv-check"]));
    let t = target_dir();
    (
        t.join(MUSL_TARGET).join("release/ncclenv"),
        t.join("release/ncclenv-check"),
    )
}

fn target_dir() -> PathBuf {
    let meta: Value = serde_json::from_str(&ok(cargo().args([
        "metadata",
        "--no-deps",
        "--format-version",
        "1",
    ])))
    .unwrap();
    PathBuf::from(meta["target_directory"].as_str().unwrap())
}

/// Docker and busybox-static are present (else skip, or fail under CI).
fn docker_ready() -> bool {
    common::needs::docker()
}

/// The carrier image (docker/Dockerfile.local) and the test image built on it. Shared by the tests that run at
/// the same time; removed when the last of them drops it.
struct Images {
    carrier: String,
    test: String,
    has_tini: bool,
    _guards: Vec<Guard>,
}

static IMAGES: Mutex<Weak<Images>> = Mutex::new(Weak::new());

const FAKE_NVIDIA_ENTRYPOINT: &str = r#"#!/bin/sh
# Stand-in for NGC's /opt/nvidia/nvidia_entrypoint.sh: source entrypoint.d, then exec the arguments.
for f in /opt/nvidia/entrypoint.d/*.sh; do [ -e "$f" ] && . "$f"; done
if [ $# -eq 0 ]; then exec /bin/sh; else exec "$@"; fi
"#;

fn images() -> Arc<Images> {
    let mut slot = IMAGES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = slot.upgrade() {
        return i;
    }
    let (ncclenv, check) = host_binaries();
    let mut guards = Vec::new();

    // The carrier, exactly as a user builds it offline.
    let (ctx, g) = temp_dir("carrier-ctx");
    guards.push(g);
    std::fs::copy(&ncclenv, ctx.join("ncclenv")).unwrap();
    std::fs::copy(&check, ctx.join("ncclenv-check")).unwrap();
    let carrier = format!("{}:carrier", uniq("img"));
    build(&root().join("docker/Dockerfile.local"), &ctx, &carrier, &[]);
    guards.push(Guard::Image(carrier.clone()));

    // The test image: the carrier's files where users put them, busybox, tini, an NGC-like entrypoint.
    let (ctx, g) = temp_dir("test-ctx");
    guards.push(g);
    std::fs::copy(BUSYBOX, ctx.join("busybox")).unwrap();
    let has_tini = Path::new(TINI_STATIC).exists();
    let tini_line = if has_tini {
        std::fs::copy(TINI_STATIC, ctx.join("tini")).unwrap();
        "COPY tini /usr/bin/tini\n"
    } else {
        eprintln!(
            "no {TINI_STATIC} (apt-get install tini): the tini cases use docker run --init only"
        );
        ""
    };
    std::fs::write(ctx.join("nvidia_entrypoint.sh"), FAKE_NVIDIA_ENTRYPOINT).unwrap();
    std::fs::write(ctx.join("10-banner.sh"), "export NGC_BANNER=shown\n").unwrap();
    std::fs::write(
        ctx.join("Dockerfile"),
        format!(
            "FROM scratch\n\
             COPY --from={carrier} /ncclenv /ncclenv-check /usr/local/bin/\n\
             COPY busybox /bin/busybox\n\
             RUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n\
             {tini_line}\
             COPY nvidia_entrypoint.sh /opt/nvidia/nvidia_entrypoint.sh\n\
             COPY 10-banner.sh /opt/nvidia/entrypoint.d/10-banner.sh\n\
             RUN [\"/bin/chmod\", \"755\", \"/opt/nvidia/nvidia_entrypoint.sh\"]\n\
             ENV PATH=/usr/local/bin:/usr/bin:/bin\n\
             ENTRYPOINT [\"ncclenv\", \"--\"]\n"
        ),
    )
    .unwrap();
    let test = format!("{}:test", uniq("img"));
    build(&ctx.join("Dockerfile"), &ctx, &test, &[]);
    guards.push(Guard::Image(test.clone()));

    let i = Arc::new(Images {
        carrier,
        test,
        has_tini,
        _guards: guards,
    });
    *slot = Arc::downgrade(&i);
    i
}

fn build(dockerfile: &Path, ctx: &Path, tag: &str, build_args: &[(&str, &str)]) {
    let mut c = docker(&["build", "-q", "--force-rm", "-t", tag, "-f"]);
    c.arg(dockerfile);
    for (k, v) in build_args {
        c.arg("--build-arg").arg(format!("{k}={v}"));
    }
    c.arg(ctx);
    ok(&mut c);
}

/// `docker run` with a name guarded for removal. Returns the output.
fn run(args: &[&str], image: &str, cmd: &[&str]) -> Output {
    let name = uniq("c");
    let _g = Guard::Container(name.clone());
    let mut c = docker(&["run", "--name", &name]);
    c.args(args).arg(image).args(cmd);
    output(&mut c)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `NAME=value` lines of `env` output.
fn env_of(out: &str) -> BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The interface (in `ip -o addr` output) holding an IPv4 address inside `cidr`, and that address.
fn owner_in_subnet(ip_out: &str, cidr: &str) -> (String, String) {
    let (net, len) = cidr.split_once('/').unwrap();
    let net: std::net::Ipv4Addr = net.parse().unwrap();
    let mask = u32::MAX
        .checked_shl(32 - len.parse::<u32>().unwrap())
        .unwrap_or(0);
    addr_owners(ip_out)
        .into_iter()
        .find(|(a, _)| {
            a.parse::<std::net::Ipv4Addr>()
                .is_ok_and(|a| u32::from(a) & mask == u32::from(net) & mask)
        })
        .map(|(a, i)| (i, a))
        .unwrap_or_else(|| panic!("no interface in {cidr}:\n{ip_out}"))
}

/// The IPv4 subnet of a Docker network.
fn subnet4(net: &str) -> String {
    inspect("network", net)["IPAM"]["Config"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["Subnet"].as_str())
        .find(|s| !s.contains(':'))
        .unwrap()
        .to_string()
}

/// `ip -o -4 addr` / `ip -o addr` lines → address → interface.
fn addr_owners(out: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for l in out.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if let Some(i) = w.iter().position(|x| *x == "inet" || *x == "inet6") {
            if let (Some(ifname), Some(a)) = (w.get(1), w.get(i + 1)) {
                let ifname = ifname.trim_end_matches(':').split('@').next().unwrap();
                m.insert(a.split('/').next().unwrap().to_string(), ifname.to_string());
            }
        }
    }
    m
}

fn expect_env(env: &BTreeMap<String, String>, k: &str, v: &str, ctx: &str) {
    assert_eq!(
        env.get(k).map(String::as_str),
        Some(v),
        "{k} ({ctx}); env: {env:?}"
    );
}

/// The host's default-route interface with the lowest metric (`ip -j route show default`).
fn host_default_dev() -> Option<String> {
    let out = Command::new("ip")
        .args(["-j", "route", "show", "default"])
        .output()
        .ok()?;
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v.as_array()?
        .iter()
        .min_by_key(|r| r["metric"].as_u64().unwrap_or(0))
        .and_then(|r| r["dev"].as_str().map(String::from))
}

fn host_links() -> Vec<String> {
    let out = Command::new("ip").args(["-j", "link"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["ifname"].as_str().map(String::from))
        .collect()
}

/// A user network (IPv4 subnet allocated by Docker, distinct from every other network); extra args e.g. IPv6.
fn network(extra: &[&str]) -> (String, Guard) {
    let n = uniq("net");
    let mut c = docker(&["network", "create"]);
    c.args(extra).arg(&n);
    ok(&mut c);
    (n.clone(), Guard::Network(n))
}

fn inspect(what: &str, name: &str) -> Value {
    let v: Value = serde_json::from_str(&ok(&mut docker(&[what, "inspect", name]))).unwrap();
    v[0].clone()
}

// ---------------------------------------------------------------------------------------------------------
// Docker cases

#[test]
fn bridge_host_and_none() {
    if !docker_ready() {
        return;
    }
    let img = images();

    // F1: the default bridge.
    let o = run(&["--rm"], &img.test, &["env"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let env = env_of(&stdout(&o));
    expect_env(&env, "NCCL_SOCKET_IFNAME", "eth0", "default bridge");
    expect_env(&env, "NCCL_SOCKET_FAMILY", "AF_INET", "default bridge");
    expect_env(&env, "GLOO_SOCKET_IFNAME", "eth0", "default bridge");

    // --network=host: the host's default-route interface (oracle: ip -j route), never docker0.
    match host_default_dev() {
        Some(dev) => {
            let o = run(&["--rm", "--network=host"], &img.test, &["env"]);
            assert!(o.status.success(), "{}", stderr(&o));
            let env = env_of(&stdout(&o));
            expect_env(&env, "NCCL_SOCKET_IFNAME", &dev, "--network=host");
            assert_ne!(env["NCCL_SOCKET_IFNAME"], "docker0");
        }
        None => eprintln!("the host has no default route: --network=host case not checked"),
    }

    // F10: --network=none → lo with a warning; a 2-node job is refused before the command runs.
    let o = run(&["--rm", "--network=none"], &img.test, &["env"]);
    assert!(o.status.success(), "{}", stderr(&o));
    expect_env(
        &env_of(&stdout(&o)),
        "NCCL_SOCKET_IFNAME",
        "lo",
        "--network=none",
    );
    assert!(stderr(&o).contains("[loopback-only]"), "{}", stderr(&o));
    let o = run(
        &["--rm", "--network=none"],
        &img.test,
        &["env", "--nnodes=2"],
    );
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "the command ran: {}", stdout(&o));
    assert!(stderr(&o).contains("refused"), "{}", stderr(&o));
}

#[test]
fn two_user_networks_peer_on_the_second() {
    if !docker_ready() {
        return;
    }
    let img = images();
    let (first, _g1) = network(&[]);
    let (second, _g2) = network(&[]);
    let net2 = inspect("network", &second);
    let peer = net2["IPAM"]["Config"][0]["Gateway"]
        .as_str()
        .unwrap()
        .to_string();

    let name = uniq("c");
    let _c = Guard::Container(name.clone());
    let peer_env = format!("MASTER_ADDR={peer}");
    ok(&mut docker(&[
        "create",
        "--name",
        &name,
        "--network",
        &first,
        "-e",
        &peer_env,
        &img.test,
        "sh",
        "-c",
        "ip -o addr; echo ---; env",
    ]));
    ok(&mut docker(&["network", "connect", &second, &name]));
    let o = output(&mut docker(&["start", "-a", &name]));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let (ips, envs) = out.split_once("---").unwrap();
    let (want, mine) = owner_in_subnet(ips, &subnet4(&second));
    let env = env_of(envs);
    expect_env(
        &env,
        "NCCL_SOCKET_IFNAME",
        &want,
        "MASTER_ADDR on the second network",
    );
    expect_env(
        &env,
        "GLOO_SOCKET_IFNAME",
        &want,
        "MASTER_ADDR on the second network",
    );
    expect_env(&env, "POD_IP", &mine, "the address on the second network");
    assert!(
        stderr(&o).contains(&format!("route to peer {peer}")),
        "{}",
        stderr(&o)
    );
}

#[test]
fn ipv6_network_gives_af_inet6() {
    if !docker_ready() {
        return;
    }
    let img = images();
    // Docker 20.10 always gives a user network an IPv4 subnet too (allocated here); the IPv6 one is ours.
    let v6 = format!(
        "fd00:{:x}:{:x}::/64",
        std::process::id() & 0xffff,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let (net, _g) = network(&["--ipv6", "--subnet", &v6]);
    let gw6 = inspect("network", &net)["IPAM"]["Config"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["Gateway"].as_str())
        .find(|g| g.contains(':'))
        .map(String::from)
        .unwrap_or_else(|| v6.replace("::/64", "::1"));

    // Dual stack, the peer is IPv6: NCCL must bootstrap over IPv6.
    let peer = format!("MASTER_ADDR={gw6}");
    let o = run(
        &["--rm", "--network", &net, "-e", &peer],
        &img.test,
        &["env"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let env = env_of(&stdout(&o));
    expect_env(&env, "NCCL_SOCKET_IFNAME", "eth0", "IPv6 peer");
    expect_env(&env, "NCCL_SOCKET_FAMILY", "AF_INET6", "IPv6 peer");

    // IPv6 only: the container's IPv4 address is removed before ncclenv runs (busybox ip, NET_ADMIN); no peer.
    let o = run(
        &[
            "--rm",
            "--network",
            &net,
            "--cap-add",
            "NET_ADMIN",
            "--entrypoint",
            "/bin/sh",
        ],
        &img.test,
        &["-c", "ip -4 addr flush dev eth0 && exec ncclenv -- env"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let env = env_of(&stdout(&o));
    expect_env(&env, "NCCL_SOCKET_IFNAME", "eth0", "IPv6 only");
    expect_env(&env, "NCCL_SOCKET_FAMILY", "AF_INET6", "IPv6 only");
    assert!(!env.contains_key("POD_IP"), "POD_IP is IPv4 only: {env:?}");
}

#[test]
fn shm_size_decides_shm_disable() {
    if !docker_ready() {
        return;
    }
    let img = images();
    let gpus = ["-e", "CUDA_VISIBLE_DEVICES=0,1,2,3"];
    let shm = |extra: &str| {
        let mut args = vec!["--rm", extra];
        args.extend(gpus);
        let o = run(&args, &img.test, &["env"]);
        assert!(o.status.success(), "{}", stderr(&o));
        (env_of(&stdout(&o)), stderr(&o))
    };
    let (env, err) = shm("--shm-size=64m");
    expect_env(&env, "NCCL_SHM_DISABLE", "1", "--shm-size=64m");
    // The default level: the finding on one line of at most 200 characters; its remedy at the debug level.
    let line = err
        .lines()
        .find(|l| l.contains("[shm-too-small]"))
        .unwrap_or_else(|| panic!("no [shm-too-small]: {err}"));
    assert!(line.chars().count() <= 200, "{line}");
    let (_, err) = shm("--env=NCCLENV_LOG=debug"); // Docker's default /dev/shm: 64 MiB
    assert!(err.contains("--shm-size=1g"), "{err}");
    let (env, _) = shm("--shm-size=1g");
    assert!(
        !env.contains_key("NCCL_SHM_DISABLE"),
        "--shm-size=1g: {env:?}"
    );

    // --ipc=host: the host's /dev/shm; the oracle is its free space against NCCL's need (4 GPUs).
    let need: u64 = 4 * 9_637_888 * 4;
    let s = ok(Command::new("stat").args(["-f", "-c", "%a %S", "/dev/shm"]));
    let mut w = s.split_whitespace().map(|x| x.parse::<u64>().unwrap());
    let free = w.next().unwrap() * w.next().unwrap();
    let (env, _) = shm("--ipc=host");
    assert_eq!(
        env.get("NCCL_SHM_DISABLE").map(String::as_str),
        if free < need { Some("1") } else { None },
        "--ipc=host with {free} B free on the host's /dev/shm, {need} B needed"
    );
}

#[test]
fn baked_ifname_repaired_on_host_network() {
    if !docker_ready() {
        return;
    }
    let Some(dev) = host_default_dev() else {
        cannot("the host has no default route");
        return;
    };
    let img = images();
    // The image bakes a name this host lacks (eth0 unless the host has one).
    let links = host_links();
    let baked = ["eth0", "ens6", "enp99s0"]
        .into_iter()
        .find(|n| !links.iter().any(|l| l == n))
        .unwrap();
    let (ctx, _d) = temp_dir("baked-ctx");
    std::fs::write(
        ctx.join("Dockerfile"),
        format!("FROM {}\nENV NCCL_SOCKET_IFNAME={baked}\n", img.test),
    )
    .unwrap();
    let tag = format!("{}:baked", uniq("img"));
    build(&ctx.join("Dockerfile"), &ctx, &tag, &[]);
    let _i = Guard::Image(tag.clone());

    let o = run(&["--rm", "--network=host"], &tag, &["env"]);
    assert!(o.status.success(), "{}", stderr(&o));
    expect_env(
        &env_of(&stdout(&o)),
        "NCCL_SOCKET_IFNAME",
        &dev,
        "baked name repaired",
    );
    let err = stderr(&o);
    assert!(
        err.contains("[inherited-ifname-repaired]") && err.contains(baked),
        "{err}"
    );

    let o = run(
        &["--rm", "--network=host", "-e", "NCCLENV_STRICT=1"],
        &tag,
        &["env"],
    );
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(
        stdout(&o).is_empty(),
        "the command ran under NCCLENV_STRICT=1"
    );
}

/// Starts `ncclenv -- sleep 1000` detached (with `run_args` and `cmd_prefix` in front), waits until ncclenv
/// has exec'd sleep, then returns how long `docker stop -t <t>` took and the container's exit code.
fn stop_time(img: &str, run_args: &[&str], prefix: &[&str], t: &str) -> (Duration, i64) {
    let name = uniq("c");
    let _g = Guard::Container(name.clone());
    let mut c = docker(&["run", "-d", "--name", &name]);
    c.args(run_args)
        .arg(img)
        .args(prefix)
        .args(["sleep", "1000"]);
    ok(&mut c);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let top = output(&mut docker(&["top", &name]));
        // A process whose command is `sleep 1000` itself (ps's CMD, the 8th column on): `ncclenv -- sleep 1000`
        // still deciding also holds the words, and a stop then ends ncclenv at once with 143 (seen in CI on 2
        // loaded cores, where it took that long).
        let started = stdout(&top)
            .lines()
            .skip(1)
            .any(|l| l.split_whitespace().skip(7).collect::<Vec<_>>() == ["sleep", "1000"]);
        if started {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sleep never started: {}",
            stdout(&top)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let t0 = Instant::now();
    ok(&mut docker(&["stop", "-t", t, &name]));
    let took = t0.elapsed();
    let code = inspect("container", &name)["State"]["ExitCode"]
        .as_i64()
        .unwrap();
    (took, code)
}

#[test]
fn init_forwards_stop_and_exit_code() {
    if !docker_ready() {
        return;
    }
    let img = images();
    // With an init that forwards SIGTERM the container stops at once and exits 143 (128+15); without, Docker
    // waits out the stop timeout and kills it (137). The exit code is the proof; the timeout is long (60 s)
    // so that a forwarded stop is told apart from a killed one by a wide margin, whatever the machine's load.
    let grace = "60";
    let fast = Duration::from_secs(45);

    // docker run --init: Docker's tini is PID 1, forwards SIGTERM; sleep dies of it (tini exits 128+15).
    let (took, code) = stop_time(&img.test, &["--init"], &[], grace);
    assert!(took < fast, "docker stop with --init took {took:?}");
    assert_eq!(code, 143);
    let o = run(&["--rm", "--init"], &img.test, &["sh", "-c", "exit 42"]);
    assert_eq!(o.status.code(), Some(42), "{}", stderr(&o));

    // ENTRYPOINT ["tini", "--", "ncclenv", "--"] (examples/tini/Dockerfile).
    if img.has_tini {
        let entry = ["--entrypoint", "tini"];
        let (took, code) = stop_time(&img.test, &entry, &["--", "ncclenv", "--"], grace);
        assert!(took < fast, "docker stop behind tini took {took:?}");
        assert_eq!(code, 143);
        let o = run(
            &["--rm", "--entrypoint", "tini"],
            &img.test,
            &["--", "ncclenv", "--", "sh", "-c", "exit 42"],
        );
        assert_eq!(o.status.code(), Some(42), "{}", stderr(&o));
    } else {
        cannot("no tini-static: the ENTRYPOINT [\"tini\", …] case is not run");
    }

    // Without an init the command itself is PID 1 (ncclenv exec'd it) and ignores SIGTERM: Docker waits out
    // the timeout and kills it. This is why examples/README.md recommends an init.
    let (took, code) = stop_time(&img.test, &[], &[], "2");
    assert!(
        took >= Duration::from_secs(2),
        "sleep as PID 1 stopped in {took:?}"
    );
    assert_eq!(code, 137);
    let o = run(&["--rm"], &img.test, &["sh", "-c", "exit 42"]);
    assert_eq!(o.status.code(), Some(42), "{}", stderr(&o));
}

/// examples/ngc/entrypoint.d/90-ncclenv.sh in an NGC-like image that keeps NVIDIA's ENTRYPOINT (#24 item 7):
/// the stand-in `nvidia_entrypoint.sh` sources entrypoint.d with the container's command as `"$@"`, as NGC's
/// does. The command gets ncclenv's decision, so does an interactive shell, and a refusal (a 2-node
/// job with no network) stops the entrypoint with 78 before the command runs.
#[test]
fn ngc_entrypoint_d_part_applies_the_decision() {
    if !docker_ready() {
        return;
    }
    let img = images();
    let (ctx, _d) = temp_dir("ngc-base-ctx");
    std::fs::write(
        ctx.join("Dockerfile"),
        // NGC's images have no ncclenv: without the rm, the example's COPY would add a layer identical to one
        // the base already has, which the legacy builder fails to export now and then ("failed to get layer
        // ... layer does not exist", moby/moby#36573).
        format!(
            "FROM {}\nRUN [\"rm\", \"/usr/local/bin/ncclenv\", \"/usr/local/bin/ncclenv-check\"]\n\
             ENTRYPOINT [\"/opt/nvidia/nvidia_entrypoint.sh\"]\n",
            img.test
        ),
    )
    .unwrap();
    let base = format!("{}:ngc-base", uniq("img"));
    build(&ctx.join("Dockerfile"), &ctx, &base, &[]);
    let _b = Guard::Image(base.clone());
    let image = format!("{}:ngc-d", uniq("img"));
    build(
        &root().join("examples/ngc/Dockerfile.entrypoint-d"),
        &root().join("examples/ngc"),
        &image,
        &[("NCCLENV_IMAGE", &img.carrier), ("NGC_IMAGE", &base)],
    );
    let _g = Guard::Image(image.clone());
    let o = run(&["--rm"], &image, &["sh", "-c", "env"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let env = env_of(&stdout(&o));
    expect_env(&env, "NGC_BANNER", "shown", "NGC's other parts still run");
    expect_env(&env, "NCCL_SOCKET_IFNAME", "eth0", "the command");
    // `docker run -it IMG bash` (here sh, reading its commands from stdin): the interactive shell has it too.
    let mut child = docker(&["run", "--rm", "-i", &image, "sh"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("docker run -i");
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"env\n").expect("write the shell's input");
    }
    let o = child.wait_with_output().expect("docker run -i");
    expect_env(
        &env_of(&stdout(&o)),
        "NCCL_SOCKET_IFNAME",
        "eth0",
        "a shell with no command",
    );
    // A 2-node job in a container with no network: refused, the command never starts.
    let o = run(
        &["--rm", "--network", "none"],
        &image,
        &[
            "torchrun",
            "--nnodes=2",
            "--master-addr=10.0.0.1",
            "train.py",
        ],
    );
    assert_eq!(o.status.code(), Some(78), "{}{}", stdout(&o), stderr(&o));
    assert!(
        !stderr(&o).contains("torchrun: not found"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn example_images_build_and_chain() {
    if !docker_ready() {
        return;
    }
    let img = images();
    let (ctx, _d) = temp_dir("example-ctx");
    std::fs::write(ctx.join("train.py"), "print('train')\n").unwrap();

    // examples/ngc/Dockerfile on a stand-in NGC base (the test image has an nvidia_entrypoint.sh that sources
    // entrypoint.d and execs its arguments, like NGC's).
    let ngc = format!("{}:ngc", uniq("img"));
    build(
        &root().join("examples/ngc/Dockerfile"),
        &ctx,
        &ngc,
        &[("NCCLENV_IMAGE", &img.carrier), ("NGC_IMAGE", &img.test)],
    );
    let _g = Guard::Image(ngc.clone());
    let o = run(&["--rm"], &ngc, &["sh", "-c", "echo pid=$$; env"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("pid=1\n"),
        "the command is not PID 1 after both execs: {out}"
    );
    let env = env_of(&out);
    expect_env(&env, "NGC_BANNER", "shown", "NGC's entrypoint.d ran");
    expect_env(
        &env,
        "NCCL_SOCKET_IFNAME",
        "eth0",
        "ncclenv ran after NGC's entrypoint",
    );

    // docker/Dockerfile.paddle on a stand-in tagged paddlepaddle/paddle:<unique>.
    let tag = uniq("stand-in");
    let stand_in = format!("paddlepaddle/paddle:{tag}");
    ok(&mut docker(&["tag", &img.test, &stand_in]));
    let _s = Guard::Image(stand_in);
    let paddle = format!("{}:paddle", uniq("img"));
    build(
        &root().join("docker/Dockerfile.paddle"),
        &ctx,
        &paddle,
        &[("NCCLENV_IMAGE", &img.carrier), ("PADDLE_TAG", &tag)],
    );
    let _p = Guard::Image(paddle.clone());
    let o = run(&["--rm"], &paddle, &["sh", "-c", "cat train.py; env"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("print('train')"));
    expect_env(
        &env_of(&stdout(&o)),
        "NCCL_SOCKET_IFNAME",
        "eth0",
        "Paddle image",
    );
    // Its own CMD: ncclenv reads the launcher's --master and --nnodes, decides, then execs python (absent
    // in the stand-in: 127).
    let o = run(&["--rm"], &paddle, &[]);
    assert_eq!(o.status.code(), Some(127), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("10.0.0.1") && summary_sets(&err, "NCCL_SOCKET_IFNAME") == Some("eth0"),
        "{err}"
    );
}

/// The value the summary line (`ncclenv: interface … set A=x B,C=y …`) gives `name`: variables set to one
/// value are named together when the line would pass 200 characters (docs/logging.md).
fn summary_sets<'a>(err: &'a str, name: &str) -> Option<&'a str> {
    let line = err.lines().find(|l| l.starts_with("ncclenv: interface "))?;
    let (_, set) = line.split_once("; set ")?;
    set.split_whitespace().find_map(|item| {
        let (names, value) = item.split_once('=')?;
        names.split(',').any(|n| n == name).then_some(value)
    })
}

/// `docker compose` (Compose v2) works here; else skip (fail under CI).
fn compose_ready() -> bool {
    match docker(&["compose", "version"]).output() {
        Ok(o) if o.status.success() => true,
        _ => cannot(
            "no `docker compose` (Compose v2: scripts/test.sh installs it as a Docker CLI plugin)",
        ),
    }
}

#[test]
fn compose_two_nodes_route_to_master() {
    if !docker_ready() || !compose_ready() {
        return;
    }
    let img = images();
    // The Compose file's own command (torchrun with --master-addr=master --nnodes=2), run by a stand-in
    // torchrun that prints the addresses and the environment it got.
    let (ctx, _d) = temp_dir("compose-ctx");
    std::fs::write(
        ctx.join("torchrun"),
        "#!/bin/sh\nip -o addr; echo ---; env; sleep 3\n",
    )
    .unwrap();
    std::fs::write(
        ctx.join("Dockerfile"),
        format!(
            "FROM {}\nCOPY torchrun /usr/local/bin/torchrun\nRUN [\"/bin/chmod\", \"755\", \"/usr/local/bin/torchrun\"]\n",
            img.test
        ),
    )
    .unwrap();
    let job_img = format!("{}:compose", uniq("img"));
    build(&ctx.join("Dockerfile"), &ctx, &job_img, &[]);
    let _i = Guard::Image(job_img.clone());

    let project = uniq("job").replace('-', "_");
    let file = root().join("examples/compose/docker-compose.yml");
    let env = vec![("IMAGE".to_string(), job_img.clone())];
    let compose = |args: &[&str]| {
        let mut c = docker(&["compose"]);
        c.envs(env.iter().map(|(k, v)| (k, v)));
        c.arg("-p").arg(&project).arg("-f").arg(&file).args(args);
        c
    };
    let _g = Guard::Compose {
        project: project.clone(),
        file: file.clone(),
        env: env.clone(),
    };
    ok(&mut compose(&["up", "-d"]));
    let job_net = format!("{project}_job");
    for node in ["node0", "node1"] {
        // `--all`: Compose lists only running containers by default, and the node may have finished while
        // the other was waited for (CI under load: `docker wait ""`).
        let id = ok(&mut compose(&["ps", "--all", "-q", node]))
            .trim()
            .to_string();
        let code = ok(&mut docker(&["wait", &id])).trim().to_string();
        let logs = output(&mut docker(&["logs", &id]));
        assert_eq!(code, "0", "{node}: {}", stderr(&logs));
        let out = stdout(&logs);
        let (ips, envs) = out.split_once("---").unwrap();
        let (want, _) = owner_in_subnet(ips, &subnet4(&job_net));
        let env = env_of(envs);
        expect_env(
            &env,
            "NCCL_SOCKET_IFNAME",
            &want,
            &format!("{node}: the job network"),
        );
        expect_env(&env, "GLOO_SOCKET_IFNAME", &want, node);
        // The summary says why: the route to the master named by the command's own --master-addr.
        let err = stderr(&logs);
        assert!(
            err.contains("route to peer") || err.contains("this host is the peer"),
            "{node}: {err}"
        );
        eprintln!("{node}: {}", err.lines().last().unwrap_or(""));
    }
}

/// The carrier run as it is prints install's usage and exits 0 (not "No command specified"), as the numeric
/// non-root user a `runAsNonRoot` pod admits (#24 item 7).
#[test]
fn the_carrier_alone_prints_its_usage_as_a_non_root_user() {
    if !docker_ready() {
        return;
    }
    let img = images();
    // Run as it is, the carrier prints install's usage and exits 0.
    let o = run(&["--rm"], &img.carrier, &[]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).starts_with("usage: ncclenv install DIR"),
        "{}",
        stdout(&o)
    );
    let o = output(&mut docker(&[
        "image",
        "inspect",
        "--format",
        "{{.Config.User}}",
        &img.carrier,
    ]));
    assert_eq!(stdout(&o).trim(), "65532:65532", "{}", stderr(&o));
}

/// The carrier image as a Kubernetes init container (examples/k8s/init/): `ncclenv install` copies both
/// binaries into a fresh volume; an image without ncclenv runs its command through `/opt/ncclenv/ncclenv` from
/// that volume, read-only. A second install into the same volume changes nothing. A refusal writes its reason
/// to `/dev/termination-log` (Kubernetes bind-mounts a file there; here a host file is).
#[test]
fn init_container_install() {
    if !docker_ready() {
        return;
    }
    let img = images();
    let (plain, _p) = plain_image();
    let vol = uniq("vol");
    ok(&mut docker(&["volume", "create", &vol]));
    let _v = Guard::Volume(vol.clone());
    let init_mount = format!("{vol}:/opt/ncclenv");
    install_into_volume(&img.carrier, &plain, &init_mount);
    let main_mount = format!("{vol}:/opt/ncclenv:ro");
    run_from_the_volume(&plain, &main_mount);
    refusal_reaches_the_termination_log(&plain, &main_mount);
}

/// Builds the "unmodified training image" (busybox only, no ncclenv) and checks it has no ncclenv. Returns
/// its tag and the guard that removes it.
fn plain_image() -> (String, Guard) {
    let (ctx, _d) = temp_dir("plain-ctx");
    std::fs::copy(BUSYBOX, ctx.join("busybox")).unwrap();
    std::fs::write(
        ctx.join("Dockerfile"),
        "FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\nENV PATH=/usr/bin:/bin\n",
    )
    .unwrap();
    let plain = format!("{}:plain", uniq("img"));
    build(&ctx.join("Dockerfile"), &ctx, &plain, &[]);
    let _p = Guard::Image(plain.clone());
    let o = run(
        &["--rm"],
        &plain,
        &["sh", "-c", "command -v ncclenv || echo none"],
    );
    assert_eq!(stdout(&o).trim(), "none", "the plain image has ncclenv");
    (plain, _p)
}

/// The init container: the carrier image `carrier` runs `ncclenv install` into the volume `init_mount`
/// (`VOL:/opt/ncclenv`, made world-writable first in the image `plain`, as an emptyDir is), which copies
/// both binaries and names the path to run; a second install changes nothing.
fn install_into_volume(carrier: &str, plain: &str, init_mount: &str) {
    // The carrier runs as 65532 (runAsNonRoot); a Kubernetes emptyDir is world-writable (mode 1777 here), a
    // fresh Docker volume is root's: make it what emptyDir is, as root in the plain image.
    let o = run(
        &["--rm", "-v", init_mount, "--user", "0:0"],
        plain,
        &["chmod", "1777", "/opt/ncclenv"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(
        &["--rm", "-v", init_mount],
        carrier,
        &["/ncclenv", "install", "/opt/ncclenv"],
    );
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("run: /opt/ncclenv/ncclenv -- COMMAND"),
        "install names the path the training container mounts: {out}"
    );
    for name in ["ncclenv", "ncclenv-check"] {
        assert!(
            out.lines().any(
                |l| l.starts_with(&format!("copied /{name} to /opt/ncclenv/{name} ("))
                    && l.ends_with("mode 755)")
            ),
            "{name}: {out}"
        );
    }
    let o = run(
        &["--rm", "-v", init_mount],
        carrier,
        &["/ncclenv", "install", "/opt/ncclenv"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o)
            .lines()
            .filter(|l| l.starts_with("already up to date: "))
            .count(),
        2,
        "{}",
        stdout(&o)
    );
}

/// The training container: the image `plain` with the volume read-only at the same path (`main_mount`, as
/// in examples/k8s/init/), as a non-root user, running the command `install`'s "run:" line names; and
/// `check` finding its helper beside the installed ncclenv.
fn run_from_the_volume(plain: &str, main_mount: &str) {
    let o = run(
        &["--rm", "-v", main_mount, "--user", "1000:1000"],
        plain,
        &[
            "/opt/ncclenv/ncclenv",
            "--",
            "sh",
            "-c",
            "ls -l /opt/ncclenv; env",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let env = env_of(&stdout(&o));
    expect_env(
        &env,
        "NCCL_SOCKET_IFNAME",
        "eth0",
        "installed from the volume",
    );
    assert!(stdout(&o).contains("-rwxr-xr-x"), "{}", stdout(&o));
    // `check` finds its helper beside the installed ncclenv (it then fails on this image: no glibc, no NCCL).
    let o = run(
        &["--rm", "-v", main_mount],
        plain,
        &["/opt/ncclenv/ncclenv", "check", "--json"],
    );
    let out = stdout(&o);
    assert!(!out.contains("not found (looked:"), "{out}{}", stderr(&o));
    assert!(out.contains("/opt/ncclenv/ncclenv-check"), "{out}");
}

/// Kubernetes' /dev/termination-log (a host file bind-mounted there), in the image `plain` with the volume
/// at `main_mount`: a refusal writes its reason there; a job that runs does not.
fn refusal_reaches_the_termination_log(plain: &str, main_mount: &str) {
    let (tdir, _t) = temp_dir("termlog");
    let tlog = tdir.join("termination-log");
    std::fs::write(&tlog, "").unwrap();
    let bind = format!("type=bind,src={},dst=/dev/termination-log", tlog.display());
    let o = run(
        &["--rm", "--network=none", "-v", main_mount, "--mount", &bind],
        plain,
        &["/opt/ncclenv/ncclenv", "--nnodes=2", "--", "true"],
    );
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    let written = std::fs::read_to_string(&tlog).unwrap();
    assert!(
        written.starts_with("ncclenv: refused (exit 78): "),
        "{written}"
    );
    assert!(written.contains("--network=none"), "{written}");
    std::fs::write(&tlog, "").unwrap();
    let o = run(
        &["--rm", "-v", main_mount, "--mount", &bind],
        plain,
        &["/opt/ncclenv/ncclenv", "--", "true"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&tlog).unwrap(), "");
}

// ---------------------------------------------------------------------------------------------------------
// Offline checks: Dockerfiles, manifests, launch script

/// One Dockerfile instruction: keyword (upper case), flags (`--from=x`), arguments (JSON form or words).
#[derive(Debug, Clone)]
struct Insn {
    op: String,
    flags: BTreeMap<String, String>,
    args: Vec<String>,
    json: bool,
}

#[derive(Debug, Default)]
struct Stage {
    from: String,
    name: Option<String>,
    insns: Vec<Insn>,
}

/// Parses a Dockerfile into global ARG defaults and stages, expanding `${ARG}`/`$ARG` with the defaults
/// (not in RUN, CMD, ENTRYPOINT: the shell expands those, from the ARGs in its environment).
fn parse_dockerfile(path: &Path) -> (BTreeMap<String, String>, Vec<Stage>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut global = BTreeMap::new();
    let mut stages: Vec<Stage> = Vec::new();
    let mut scope: BTreeMap<String, String> = BTreeMap::new();
    for l in dockerfile_lines(path, &text) {
        let first = l
            .split_once(char::is_whitespace)
            .map_or(l.as_str(), |(w, _)| w);
        let vars = if stages.is_empty() || first.eq_ignore_ascii_case("FROM") {
            &global
        } else {
            &scope
        };
        let Insn {
            op,
            flags,
            args: words,
            json,
        } = parse_insn(path, &l, vars);
        if op == "ARG" {
            let (k, v) = words[0].split_once('=').unwrap_or((&words[0], ""));
            let v = if v.is_empty() {
                global.get(k).cloned().unwrap_or_default()
            } else {
                v.to_string()
            };
            if stages.is_empty() {
                global.insert(k.to_string(), v);
                continue;
            }
            scope.insert(k.to_string(), v);
        }
        if op == "FROM" {
            let name = match words.as_slice() {
                [_, kw, n] if kw.eq_ignore_ascii_case("AS") => Some(n.clone()),
                [_] => None,
                _ => panic!("{}: bad FROM {words:?}", path.display()),
            };
            stages.push(Stage {
                from: words[0].clone(),
                name,
                insns: Vec::new(),
            });
            scope.clear();
            continue;
        }
        let stage = stages
            .last_mut()
            .unwrap_or_else(|| panic!("{}: {op} before FROM", path.display()));
        stage.insns.push(Insn {
            op,
            flags,
            args: words,
            json,
        });
    }
    (global, stages)
}

/// The instructions of Dockerfile `text` (read from `path`, named in messages), one a line: blank and
/// comment lines dropped, `\` continuations joined (a comment inside a continuation is skipped). Panics on
/// a continuation that never ends.
fn dockerfile_lines(path: &Path, text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for l in text.lines() {
        let t = l.trim();
        if cur.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if cur.is_empty() || !t.starts_with('#') {
            match t.strip_suffix('\\') {
                Some(s) => {
                    cur.push_str(s);
                    cur.push(' ');
                    continue;
                }
                None => cur.push_str(t),
            }
        }
        lines.push(std::mem::take(&mut cur));
    }
    assert!(
        cur.is_empty(),
        "{}: dangling line continuation",
        path.display()
    );
    lines
}

/// One joined Dockerfile line `l` (from `path`, named in messages) as an instruction: the keyword upper
/// cased and checked against the known ones, `vars` (the ARG defaults in scope) expanded except in RUN, CMD
/// and ENTRYPOINT, the JSON form decoded, and leading `--flag=value` words split off the shell form.
fn parse_insn(path: &Path, l: &str, vars: &BTreeMap<String, String>) -> Insn {
    let (op, rest) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
    let op = op.to_ascii_uppercase();
    let known = [
        "FROM",
        "ARG",
        "RUN",
        "COPY",
        "ADD",
        "ENV",
        "WORKDIR",
        "LABEL",
        "ENTRYPOINT",
        "CMD",
        "USER",
        "EXPOSE",
        "VOLUME",
        "SHELL",
        "STOPSIGNAL",
        "HEALTHCHECK",
        "ONBUILD",
    ];
    assert!(
        known.contains(&op.as_str()),
        "{}: unknown instruction {op}",
        path.display()
    );
    // The builder substitutes variables in these; RUN, CMD and ENTRYPOINT are left to the shell.
    let rest = if ["RUN", "CMD", "ENTRYPOINT"].contains(&op.as_str()) {
        rest.trim().to_string()
    } else {
        expand(rest.trim(), vars)
    };
    let json = rest.starts_with('[');
    let mut words: Vec<String> = if json {
        serde_json::from_str(&rest)
            .unwrap_or_else(|e| panic!("{}: {op} {rest}: bad JSON form: {e}", path.display()))
    } else {
        rest.split_whitespace().map(String::from).collect()
    };
    let mut flags = BTreeMap::new();
    if !json {
        while words.first().is_some_and(|w| w.starts_with("--")) {
            let f = words.remove(0);
            let (k, v) = f[2..].split_once('=').unwrap_or((&f[2..], ""));
            flags.insert(k.to_string(), v.to_string());
        }
    }
    Insn {
        op,
        flags,
        args: words,
        json,
    }
}

fn expand(s: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = s.to_string();
    for (k, v) in vars {
        out = out
            .replace(&format!("${{{k}}}"), v)
            .replace(&format!("${k}"), v);
    }
    out
}

impl Stage {
    fn all(&self, op: &str) -> Vec<&Insn> {
        self.insns.iter().filter(|i| i.op == op).collect()
    }
    fn workdir(&self) -> String {
        self.all("WORKDIR")
            .last()
            .map(|i| i.args[0].clone())
            .unwrap_or_else(|| "/".into())
    }
    fn entrypoint(&self) -> Vec<String> {
        let e = self.all("ENTRYPOINT");
        let e = e.last().expect("no ENTRYPOINT");
        assert!(e.json, "ENTRYPOINT must be the exec (JSON) form: {e:?}");
        e.args.clone()
    }
    /// The sources copied into the stage from the build context.
    fn context_copies(&self) -> Vec<String> {
        self.all("COPY")
            .into_iter()
            .filter(|i| !i.flags.contains_key("from"))
            .flat_map(|i| i.args[..i.args.len() - 1].to_vec())
            .collect()
    }
}

/// The executable cargo produces for `args` (a `cargo build` invocation), relative to the target directory.
fn cargo_artifact(args: &[&str]) -> String {
    let mut c = cargo();
    c.args(args).args(["--quiet", "--message-format=json"]);
    let out = ok(&mut c);
    let target = target_dir();
    let exe = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|m| m["executable"].as_str().map(PathBuf::from))
        .next_back()
        .unwrap_or_else(|| panic!("cargo {args:?} reported no executable"));
    exe.strip_prefix(&target)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// The highest `rust-version` among the locked dependencies whose sources are in the cargo registry.
fn locked_msrv() -> (u32, u32) {
    let lock = std::fs::read_to_string(root().join("Cargo.lock")).unwrap();
    let home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap()).join(".cargo"));
    let regs: Vec<PathBuf> = std::fs::read_dir(home.join("registry/src"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    let toml = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let mut best = parse_rust_version(&toml).unwrap();
    for pkg in lock.split("[[package]]").skip(1) {
        let field = |k: &str| {
            pkg.lines()
                .find_map(|l| l.strip_prefix(&format!("{k} = \"")))
                .map(|v| v.trim_end_matches('"').to_string())
        };
        let (Some(name), Some(version)) = (field("name"), field("version")) else {
            continue;
        };
        for r in &regs {
            if let Ok(t) = std::fs::read_to_string(r.join(format!("{name}-{version}/Cargo.toml"))) {
                if let Some(v) = parse_rust_version(&t) {
                    best = best.max(v);
                }
            }
        }
    }
    best
}

fn parse_rust_version(toml: &str) -> Option<(u32, u32)> {
    let v = toml
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = \""))?;
    let mut it = v
        .trim_end_matches('"')
        .split('.')
        .map(|x| x.parse::<u32>().unwrap_or(0));
    Some((it.next()?, it.next().unwrap_or(0)))
}

/// The targets rustup knows for the project's toolchain (`rustup target list`), or only the installed ones.
fn rustup_targets(installed_only: bool) -> Vec<String> {
    let mut c = Command::new("rustup");
    c.current_dir(root()).args(["target", "list"]);
    if installed_only {
        c.arg("--installed");
    }
    ok(&mut c)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect()
}

/// A builder stage's RUNs, run by `sh -c` in a sandbox directory standing for its WORKDIR.
struct Sim {
    /// The commands given to the stand-ins for rustup and cargo, in order (command name first).
    calls: Vec<Vec<String>>,
    workdir: PathBuf,
    _guard: Guard,
}

/// Runs `stage`'s RUN instructions (shell form) as the builder would on a machine whose `uname -m` is
/// `arch`, with `MUSL_TARGET` in the environment when `musl_target` is given (`--build-arg`). On PATH ahead
/// of the system: `uname` (only `-m`), `rustup` (records), and `cargo` (records; for `build … --target T
/// --bin B` it writes the text `target/T/release/B` to that file, cargo's layout, which the caller checks
/// against cargo itself).
fn simulate_runs(stage: &Stage, arch: &str, musl_target: Option<&str>) -> Sim {
    let (dir, guard) = temp_dir("sim");
    let bin = dir.join("bin");
    let workdir = dir.join("wd");
    let log = dir.join("calls");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&workdir).unwrap();
    let record = "IFS=\"$(printf '\\t')\"; printf '%s\\n' \"$(basename \"$0\")\t$*\" >> \"$SIM_LOG\"; unset IFS\n";
    let scripts = [
        (
            "uname",
            "[ \"$#\" = 1 ] && [ \"$1\" = -m ] || { echo \"uname stand-in: only -m, not $*\" >&2; exit 2; }\n\
             echo \"$SIM_ARCH\"\n"
                .to_string(),
        ),
        ("rustup", record.to_string()),
        (
            "cargo",
            format!(
                "{record}[ \"$1\" = build ] || exit 0\n\
                 t=; b=\n\
                 while [ \"$#\" -gt 0 ]; do\n\
                   case \"$1\" in\n\
                     --target) t=\"$2\"; shift ;;\n\
                     --bin) b=\"$2\"; shift ;;\n\
                   esac\n\
                   shift\n\
                 done\n\
                 [ -n \"$b\" ] || exit 0\n\
                 d=\"target/${{t:+$t/}}release\"\n\
                 mkdir -p \"$d\" && printf '%s' \"$d/$b\" > \"$d/$b\"\n"
            ),
        ),
    ];
    for (name, body) in scripts {
        let p = bin.join(name);
        common::exe::write(&p, format!("#!/bin/sh\n{body}"), 0o755);
    }
    for r in stage.all("RUN") {
        assert!(!r.json, "{:?}: RUN in shell form: {r:?}", stage.name);
        let mut c = Command::new("sh");
        c.arg("-c").arg(r.args.join(" ")).current_dir(&workdir);
        c.env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("SIM_LOG", &log)
            .env("SIM_ARCH", arch);
        if let Some(t) = musl_target {
            c.env("MUSL_TARGET", t);
        }
        ok(&mut c);
    }
    let calls = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split('\t').map(String::from).collect())
        .collect();
    Sim {
        calls,
        workdir,
        _guard: guard,
    }
}

#[test]
fn dockerfile_builds_what_cargo_produces() {
    let (global, stages) = parse_dockerfile(&root().join("docker/Dockerfile"));
    check_builder_stages(&global, &stages);
    let musl = &stages[0];
    check_musl_target_is_derived(&global, musl);
    let sims = simulate_musl_builds(musl);
    check_musl_layout_against_cargo();
    let g_rel = check_glibc_stage(&stages[1]);
    check_carrier(&stages, &sims, &g_rel);
    for s in &stages {
        assert!(
            !s.insns
                .iter()
                .any(|i| i.op == "ENV" && i.args.join(" ").contains("CARGO_TARGET_DIR")),
            "CARGO_TARGET_DIR moves cargo's output"
        );
    }
    check_local_dockerfile();
    check_dockerignores();
}

/// Where cargo puts `--target t --bin b` under the target directory; checked against cargo in
/// [`check_musl_layout_against_cargo`].
fn layout(t: &str, b: &str) -> String {
    format!("{t}/release/{b}")
}

/// The arguments (after `cargo`) the musl stage must give to build ncclenv for target `t`.
fn ncclenv_args(t: &str) -> Vec<String> {
    [
        "build",
        "--locked",
        "--release",
        "--target",
        t,
        "--bin",
        "ncclenv",
    ]
    .map(String::from)
    .to_vec()
}

/// docker/Dockerfile's stages (`global`: its global ARG defaults, `stages`: as parsed) are musl, glibc and
/// carrier; the rust image is new enough for every locked dependency; both builder stages are on that rust
/// image, the glibc one on a Debian with glibc <= 2.31 (Ubuntu 20.04); and every stage that runs cargo
/// copies what cargo reads, the build script (the commit of --version) too.
fn check_builder_stages(global: &BTreeMap<String, String>, stages: &[Stage]) {
    let names: Vec<_> = stages
        .iter()
        .map(|s| s.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["musl", "glibc", "carrier"]);

    // The rust image is new enough for every locked dependency.
    let rv = global["RUST_VERSION"].clone();
    let mut it = rv.split('.').map(|x| x.parse::<u32>().unwrap());
    let have = (it.next().unwrap(), it.next().unwrap());
    let need = locked_msrv();
    assert!(
        have >= need,
        "RUST_VERSION {rv} is older than the locked dependencies need ({need:?})"
    );

    // Builder stages: a rust image; glibc stage on a Debian with glibc <= 2.31 (Ubuntu 20.04).
    for s in &stages[..2] {
        assert!(
            s.from.starts_with(&format!("rust:{rv}-")),
            "{}: {}",
            names[0],
            s.from
        );
    }
    let glibc_of = |from: &str| match from.rsplit('-').next().unwrap() {
        "buster" => (2, 28),
        "bullseye" => (2, 31),
        other => panic!("glibc stage on {other}: pick bullseye (glibc 2.31) or older"),
    };
    assert!(glibc_of(&stages[1].from) <= (2, 31));

    // Every stage that runs cargo copies what cargo reads, the build script (the commit of --version) too.
    assert!(
        root().join("build.rs").exists(),
        "build.rs is gone: update this test"
    );
    for s in &stages[..2] {
        let copied = s.context_copies();
        for need in ["Cargo.toml", "Cargo.lock", "build.rs", ".cargo", "src"] {
            assert!(
                copied.iter().any(|c| c == need),
                "{:?} does not copy {need}",
                s.name
            );
        }
    }
}

/// The musl stage (`musl`; `global`: the Dockerfile's global ARG defaults) derives its target: ARG
/// MUSL_TARGET without a default, neither a global default nor an ENV pinning it, and one WORKDIR.
fn check_musl_target_is_derived(global: &BTreeMap<String, String>, musl: &Stage) {
    let arg = musl
        .all("ARG")
        .into_iter()
        .find(|a| a.args[0].split('=').next() == Some("MUSL_TARGET"))
        .expect("musl stage: ARG MUSL_TARGET");
    assert!(
        matches!(arg.args[0].as_str(), "MUSL_TARGET" | "MUSL_TARGET="),
        "ARG MUSL_TARGET must default to empty (derive from uname -m): {:?}",
        arg.args
    );
    assert!(
        !global.contains_key("MUSL_TARGET"),
        "a global ARG MUSL_TARGET default would pin one target"
    );
    assert!(
        !musl
            .all("ENV")
            .iter()
            .any(|e| e.args.join(" ").contains("MUSL_TARGET")),
        "ENV pins MUSL_TARGET"
    );
    assert_eq!(musl.all("WORKDIR").len(), 1, "musl stage: one WORKDIR");
}

/// Runs the musl stage's RUNs for real (`sh -c`) with stand-ins for uname, rustup and cargo, once per
/// `uname -m` and once with the MUSL_TARGET override each way, and checks each asks rustup for, and cargo
/// to build, the musl target rustup knows. Returns, per build, its description, the target it must build
/// and the sandbox it ran in (for the carrier's check).
fn simulate_musl_builds(musl: &Stage) -> Vec<(String, &'static str, Sim)> {
    let known = rustup_targets(false);
    let cases = [
        ("x86_64", None, "x86_64-unknown-linux-musl"),
        ("aarch64", None, "aarch64-unknown-linux-musl"),
        (
            "x86_64",
            Some("aarch64-unknown-linux-musl"),
            "aarch64-unknown-linux-musl",
        ),
        (
            "aarch64",
            Some("x86_64-unknown-linux-musl"),
            "x86_64-unknown-linux-musl",
        ),
    ];
    let mut sims = Vec::new();
    for (arch, over, want) in cases {
        let sim = simulate_runs(musl, arch, over);
        let ctx = format!("uname -m = {arch}, MUSL_TARGET = {over:?}");
        assert!(
            want.ends_with("-unknown-linux-musl") && known.iter().any(|k| k == want),
            "{ctx}: {want} is not a musl target rustup knows"
        );
        let mut want_calls = vec![["rustup", "target", "add", want].map(String::from).to_vec()];
        want_calls.push(
            std::iter::once("cargo".to_string())
                .chain(ncclenv_args(want))
                .collect(),
        );
        assert_eq!(sim.calls, want_calls, "{ctx}: rustup and cargo commands");
        sims.push((ctx, want, sim));
    }
    sims
}

/// Cargo's own word on where each musl target's binary goes (for every target installed here; the layout is
/// the same for every triple, and the host's musl target must be installed), against [`layout`].
fn check_musl_layout_against_cargo() {
    let installed = rustup_targets(true);
    assert!(
        installed.iter().any(|t| t == MUSL_TARGET),
        "rustup target add {MUSL_TARGET}"
    );
    for t in ["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"] {
        if installed.iter().any(|i| i == t) {
            let args = ncclenv_args(t);
            let rel = cargo_artifact(&args.iter().map(String::as_str).collect::<Vec<_>>());
            assert_eq!(rel, layout(t, "ncclenv"), "where cargo puts {t}'s ncclenv");
        } else {
            cannot(&format!(
                "{t} is not installed (rustup target add {t}): its layout is not checked"
            ));
        }
    }
}

/// The glibc stage (`glibc`) builds the check helper for the platform the stage runs on. Returns where cargo
/// puts it, relative to the target directory.
fn check_glibc_stage(glibc: &Stage) -> String {
    let runs = glibc.all("RUN");
    let g = runs
        .iter()
        .find(|r| r.args.join(" ").contains("cargo build"))
        .expect("glibc stage: no cargo build")
        .args
        .clone();
    assert_eq!(&g[..2], ["cargo", "build"]);
    assert_eq!(
        g[2..].to_vec(),
        ["--locked", "--release", "--bin", "ncclenv-check"],
        "glibc stage: cargo build arguments"
    );
    let g_rel = cargo_artifact(&g[1..].iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(g_rel, "release/ncclenv-check");
    g_rel
}

/// The carrier (`stages[2]`): FROM scratch, exactly /ncclenv from the musl stage and /ncclenv-check from the
/// glibc stage (`g_rel`: where cargo puts it), nothing run. /ncclenv's source is a fixed path that, in every
/// simulated build (`sims`, from [`simulate_musl_builds`]), holds the binary cargo built for that target.
fn check_carrier(stages: &[Stage], sims: &[(String, &str, Sim)], g_rel: &str) {
    let carrier = &stages[2];
    assert_eq!(carrier.from, "scratch");
    for i in &carrier.insns {
        assert!(
            ["ARG", "COPY", "LABEL", "USER", "CMD"].contains(&i.op.as_str()),
            "carrier: {} (only ARG, COPY, LABEL, USER and CMD: nothing runs)",
            i.op
        );
    }
    carrier_runs_as_a_user_and_says_what_it_is("docker/Dockerfile", carrier);
    let copies: Vec<(String, String, String)> = carrier
        .all("COPY")
        .iter()
        .map(|c| {
            assert_eq!(c.args.len(), 2, "carrier: one file per COPY: {c:?}");
            assert_eq!(c.flags.len(), 1, "carrier: COPY flags {:?}", c.flags);
            (
                c.flags.get("from").cloned().unwrap_or_default(),
                c.args[0].clone(),
                c.args[1].clone(),
            )
        })
        .collect();
    let shape: Vec<(&str, &str)> = copies
        .iter()
        .map(|(f, _, d)| (f.as_str(), d.as_str()))
        .collect();
    assert_eq!(
        shape,
        [("musl", "/ncclenv"), ("glibc", "/ncclenv-check")],
        "carrier COPY --from and destinations"
    );
    let m_src = &copies[0].1;
    assert!(
        !m_src.contains('$') && !m_src.contains('*'),
        "carrier: /ncclenv's source must not depend on the target: {m_src}"
    );
    let m_rel = m_src
        .strip_prefix(&format!("{}/", stages[0].workdir()))
        .unwrap_or_else(|| panic!("{m_src} is not under the musl stage's WORKDIR"));
    for (ctx, want, sim) in sims {
        let got = std::fs::read_to_string(sim.workdir.join(m_rel))
            .unwrap_or_else(|e| panic!("{ctx}: {m_src} not written: {e}"));
        assert_eq!(
            got,
            format!("target/{}", layout(want, "ncclenv")),
            "{ctx}: {m_src} is not the ncclenv cargo built"
        );
    }
    assert_eq!(
        copies[1].1,
        format!("{}/target/{g_rel}", stages[1].workdir()),
        "carrier: /ncclenv-check's source"
    );
}

/// The offline variant, docker/Dockerfile.local, publishes the same two paths, user, command and labels.
fn check_local_dockerfile() {
    let (_, local) = parse_dockerfile(&root().join("docker/Dockerfile.local"));
    assert_eq!(local.len(), 1);
    assert_eq!(local[0].from, "scratch");
    carrier_runs_as_a_user_and_says_what_it_is("docker/Dockerfile.local", &local[0]);
    let dests: Vec<_> = local[0]
        .all("COPY")
        .iter()
        .map(|c| c.args.clone())
        .collect();
    assert_eq!(
        dests,
        [
            vec!["ncclenv", "/ncclenv"],
            vec!["ncclenv-check", "/ncclenv-check"]
        ]
    );
}

/// BuildKit's per-Dockerfile ignore file, and the root one the classic builder reads, keep only what the
/// builder stages copy.
fn check_dockerignores() {
    for file in ["docker/Dockerfile.dockerignore", ".dockerignore"] {
        let ignore = std::fs::read_to_string(root().join(file)).unwrap();
        assert!(
            ignore.lines().any(|l| l == "*"),
            "{file} does not ignore everything else"
        );
        for keep in ["!Cargo.toml", "!Cargo.lock", "!build.rs", "!.cargo", "!src"] {
            assert!(ignore.lines().any(|l| l == keep), "{file} lacks {keep}");
        }
    }
}

/// The carrier's run-time shape (#24 item 7): a numeric non-root USER (what `runAsNonRoot` can verify), a CMD
/// that prints install's usage and no ENTRYPOINT (so `docker run IMG /ncclenv install DIR` and an init
/// container's `command:` keep working), and OCI labels with the crate's version, the source and the revision.
fn carrier_runs_as_a_user_and_says_what_it_is(rel: &str, carrier: &Stage) {
    let user = carrier.all("USER");
    assert_eq!(user.len(), 1, "{rel}: one USER");
    let ids: Vec<u32> = user[0].args[0]
        .split(':')
        .map(|n| {
            n.parse()
                .unwrap_or_else(|_| panic!("{rel}: USER {n} is not numeric"))
        })
        .collect();
    assert!(
        ids.len() == 2 && ids[0] != 0,
        "{rel}: USER {:?}",
        user[0].args
    );
    assert!(carrier.all("ENTRYPOINT").is_empty(), "{rel}: no ENTRYPOINT");
    let cmd = carrier.all("CMD");
    assert_eq!(cmd.len(), 1, "{rel}: one CMD");
    assert!(cmd[0].json, "{rel}: CMD in exec form");
    assert_eq!(cmd[0].args, ["/ncclenv", "install", "--help"], "{rel}");
    let labels = carrier
        .all("LABEL")
        .iter()
        .map(|l| l.args.join(" "))
        .collect::<Vec<_>>()
        .join(" ");
    let version = format!(
        "org.opencontainers.image.version=\"{}\"",
        env!("CARGO_PKG_VERSION")
    );
    assert!(
        labels.contains(&version),
        "{rel}: {version} missing: {labels}"
    );
    for key in ["source", "revision", "licenses", "title"] {
        let k = format!("org.opencontainers.image.{key}=");
        assert!(labels.contains(&k), "{rel}: {k} missing: {labels}");
    }
}

/// An example user Dockerfile: a stage alias for the carrier, the final stage copies both binaries from it
/// into /usr/local/bin and uses `entrypoint`.
fn check_user_dockerfile(rel: &str, base: &str, entrypoint: &[&str]) -> Stage {
    let (global, mut stages) = parse_dockerfile(&root().join(rel));
    assert_eq!(stages.len(), 2, "{rel}");
    assert_eq!(stages[0].name.as_deref(), Some("ncclenv"), "{rel}");
    assert_eq!(stages[0].from, global["NCCLENV_IMAGE"], "{rel}");
    let last = stages.pop().unwrap();
    assert!(last.from.starts_with(base), "{rel}: FROM {}", last.from);
    let copy = last
        .all("COPY")
        .into_iter()
        .find(|c| c.flags.get("from").map(String::as_str) == Some("ncclenv"))
        .unwrap_or_else(|| panic!("{rel}: no COPY --from=ncclenv"));
    assert_eq!(
        copy.args,
        ["/ncclenv", "/ncclenv-check", "/usr/local/bin/"],
        "{rel}"
    );
    assert_eq!(last.entrypoint(), entrypoint, "{rel}");
    let cmd = last.all("CMD");
    assert!(
        cmd.last().is_some_and(|c| c.json),
        "{rel}: CMD in exec form"
    );
    last
}

#[test]
fn example_dockerfiles_chain_ncclenv() {
    let paddle = check_user_dockerfile(
        "docker/Dockerfile.paddle",
        "paddlepaddle/paddle:",
        &["ncclenv", "--"],
    );
    assert!(
        paddle.from.contains("-gpu"),
        "a GPU Paddle image: {}",
        paddle.from
    );
    let cmd = paddle.all("CMD")[0].args.join(" ");
    assert!(
        cmd.contains("paddle.distributed.launch")
            && cmd.contains("--nnodes=2")
            && cmd.contains("--master=")
    );
    check_user_dockerfile(
        "examples/ngc/Dockerfile",
        "nvcr.io/nvidia/",
        &["/opt/nvidia/nvidia_entrypoint.sh", "ncclenv", "--"],
    );
    let tini = check_user_dockerfile(
        "examples/tini/Dockerfile",
        "nvidia/cuda:",
        &["tini", "--", "ncclenv", "--"],
    );
    assert!(tini.all("RUN").iter().any(|r| r
        .args
        .join(" ")
        .contains("install -y --no-install-recommends tini")));
}

/// Launcher arguments and the variables that say the same thing: a setting that repeats the command's own
/// argument is redundant (and drifts when one of them is edited).
const REPEATS: &[(&str, &[&str])] = &[
    (
        "MASTER_ADDR",
        &["--master-addr", "--master_addr", "--master"],
    ),
    ("MASTER_PORT", &["--master-port", "--master_port"]),
    (
        "NCCLENV_PEER",
        &[
            "--master-addr",
            "--master_addr",
            "--master",
            "--rdzv-endpoint",
        ],
    ),
    ("NCCLENV_NNODES", &["--nnodes"]),
    ("PET_NNODES", &["--nnodes"]),
    ("PADDLE_NNODES", &["--nnodes"]),
];

/// Panics when a variable in `env` (name → value) repeats an argument of `cmd`.
fn assert_no_repeats(what: &str, cmd: &[String], env: &[String]) {
    for (var, flags) in REPEATS {
        if !env.iter().any(|e| e == var) {
            continue;
        }
        for f in *flags {
            assert!(
                !cmd.iter()
                    .any(|a| a == f || a.starts_with(&format!("{f}="))),
                "{what}: {var} repeats the command's {f}: {cmd:?}"
            );
        }
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Every YAML document of `files` (paths under the repository), parsed by python3 + PyYAML; `None` when that
/// is missing (skip, or fail under CI).
fn load_yaml(files: &[&str]) -> Option<Vec<Vec<Value>>> {
    let py = "import json, sys, yaml\nprint(json.dumps([list(yaml.safe_load_all(open(f))) for f in sys.argv[1:]]))";
    let mut c = Command::new("python3");
    c.arg("-c")
        .arg(py)
        .args(files.iter().map(|f| root().join(f)));
    match c.output() {
        Ok(o) if o.status.success() => Some(serde_json::from_slice(&o.stdout).unwrap()),
        Ok(o) => {
            cannot(&format!(
                "python3 with PyYAML: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            None
        }
        Err(e) => {
            cannot(&format!("no python3: {e}"));
            None
        }
    }
}

/// The carrier image's tag everywhere it is named: `ncclenv:<the crate's version>`.
fn carrier_tag() -> String {
    format!("ncclenv:{}", env!("CARGO_PKG_VERSION"))
}

#[test]
fn k8s_manifests() {
    let files = [
        "examples/k8s/paddlejob.yaml",
        "examples/k8s/pytorchjob.yaml",
        "examples/k8s/rdma-net.yaml",
        "examples/k8s/init/pytorchjob.yaml",
        "examples/k8s/init/paddlejob.yaml",
        "examples/k8s/job.yaml",
    ];
    let Some(docs) = load_yaml(&files) else {
        return;
    };
    let (paddle, torch, nad) = (&docs[0][0], &docs[1][0], &docs[2][0]);
    let (init_torch, init_paddle, job) = (&docs[3][0], &docs[4][0], &docs[5][0]);
    assert_eq!(nad["kind"], "NetworkAttachmentDefinition");
    let net = nad["metadata"]["name"].as_str().unwrap();
    check_entrypoint_manifests(paddle, torch, net);
    check_init_manifests(init_torch, init_paddle, job);
}

/// Every pod template `tpl` (named `what` in messages): its container (named `container`) has the command
/// `entry`, which runs ncclenv; nothing repeats the launcher's arguments; a memory-backed /dev/shm; and
/// Kubernetes shows the termination log.
fn check_pod_common(what: &str, tpl: &Value, container: &str, entry: &[&str]) {
    let spec = &tpl["spec"];
    let c = &spec["containers"][0];
    assert_eq!(c["name"], container, "{what}");
    assert_eq!(
        strings(&c["command"]),
        entry,
        "{what}: command replaces ENTRYPOINT"
    );
    let env: Vec<String> = c["env"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    assert_no_repeats(what, &strings(&c["args"]), &env);
    assert_eq!(
        c["terminationMessagePolicy"], "FallbackToLogsOnError",
        "{what}"
    );
    assert!(
        c["resources"]["limits"]["nvidia.com/gpu"].is_number(),
        "{what}"
    );
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/dev/shm")
        .unwrap_or_else(|| panic!("{what}: no /dev/shm mount"));
    let vol = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert_eq!(
        vol["emptyDir"]["medium"], "Memory",
        "{what}: memory-backed /dev/shm"
    );
}

/// The entrypoint examples' pod template `tpl` (named `what`; its container `container`): on the Multus
/// network `net`, with an RDMA resource and IPC_LOCK, besides [`check_pod_common`].
fn check_entrypoint_pod(what: &str, tpl: &Value, container: &str, net: &str) {
    check_pod_common(what, tpl, container, &["ncclenv", "--"]);
    let ann = &tpl["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"];
    assert_eq!(ann.as_str(), Some(net), "{what}: Multus annotation");
    let c = &tpl["spec"]["containers"][0];
    let limits = c["resources"]["limits"].as_object().unwrap();
    assert!(
        limits.keys().any(|k| k.starts_with("rdma/")),
        "{what}: RDMA device plugin resource"
    );
    let caps = &c["securityContext"]["capabilities"]["add"];
    assert!(
        caps.as_array().unwrap().iter().any(|x| x == "IPC_LOCK"),
        "{what}: IPC_LOCK"
    );
}

/// The init-container examples' pod template `tpl` (named `what`; its container `container`): the carrier
/// runs `ncclenv install` into an emptyDir, which the training container mounts (read-only) where its
/// command finds ncclenv, besides [`check_pod_common`].
fn check_init_pod(what: &str, tpl: &Value, container: &str) {
    check_pod_common(what, tpl, container, &["/opt/ncclenv/ncclenv", "--"]);
    let spec = &tpl["spec"];
    let init = &spec["initContainers"][0];
    assert!(
        init["image"]
            .as_str()
            .is_some_and(|i| i.ends_with(&format!("/{}", carrier_tag()))),
        "{what}: init image {} is not the carrier {}",
        init["image"],
        carrier_tag()
    );
    let cmd = strings(&init["command"]);
    assert_eq!(cmd.len(), 3, "{what}: {cmd:?}");
    assert_eq!(&cmd[..2], ["/ncclenv", "install"], "{what}");
    let into = init["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == cmd[2].as_str())
        .unwrap_or_else(|| panic!("{what}: nothing mounted at {}", cmd[2]));
    let vol = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == into["name"])
        .unwrap();
    assert!(
        vol["emptyDir"].is_object(),
        "{what}: the binaries go to an emptyDir"
    );
    let c = &spec["containers"][0];
    let m = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == into["name"])
        .unwrap_or_else(|| panic!("{what}: the training container does not mount the emptyDir"));
    // The same path in both: `install DIR` prints `run: DIR/ncclenv -- COMMAND`, which must exist in the
    // training container.
    assert_eq!(
        m["mountPath"],
        cmd[2].as_str(),
        "{what}: mounted elsewhere than installed"
    );
    assert_eq!(m["readOnly"], true, "{what}");
}

/// A refusal (exit 78) fails the job instead of restarting it: Kubeflow's `ExitCode` (1-127 permanent), in
/// the replica spec `spec` (named `what`).
fn fails_on_78(what: &str, spec: &Value) {
    assert_eq!(
        spec["restartPolicy"], "ExitCode",
        "{what}: exit 78 must fail the job"
    );
}

/// The entrypoint examples: PaddleFlow's PaddleJob (`paddle`) and the PyTorchJob (`torch`), their pods on
/// the Multus network `net`.
fn check_entrypoint_manifests(paddle: &Value, torch: &Value, net: &str) {
    // PaddleFlow's PaddleJob: the operator's endpoint list tells ncclenv the master and the node count.
    assert_eq!(paddle["apiVersion"], "batch.paddlepaddle.org/v1");
    assert_eq!(paddle["kind"], "PaddleJob");
    assert_eq!(paddle["spec"]["worker"]["replicas"], 2);
    check_entrypoint_pod(
        "PaddleJob",
        &paddle["spec"]["worker"]["template"],
        "paddle",
        net,
    );
    // PaddleFlow: a failed worker fails the job; the pod must not restart the container itself.
    assert_eq!(
        paddle["spec"]["worker"]["template"]["spec"]["restartPolicy"], "Never",
        "PaddleJob: exit 78 must fail the pod"
    );

    assert_eq!(torch["kind"], "PyTorchJob");
    let specs = &torch["spec"]["pytorchReplicaSpecs"];
    assert_eq!(specs["Master"]["replicas"], 1);
    assert_eq!(specs["Worker"]["replicas"], 1);
    for role in ["Master", "Worker"] {
        check_entrypoint_pod(
            &format!("PyTorchJob {role}"),
            &specs[role]["template"],
            "pytorch",
            net,
        );
        fails_on_78(&format!("PyTorchJob {role}"), &specs[role]);
    }
}

/// The init-container examples: the PyTorchJob (`init_torch`), Kubeflow's PaddleJob (`init_paddle`) and
/// the plain batch Job (`job`).
fn check_init_manifests(init_torch: &Value, init_paddle: &Value, job: &Value) {
    assert_eq!(init_torch["kind"], "PyTorchJob");
    let specs = &init_torch["spec"]["pytorchReplicaSpecs"];
    for role in ["Master", "Worker"] {
        check_init_pod(
            &format!("init PyTorchJob {role}"),
            &specs[role]["template"],
            "pytorch",
        );
        fails_on_78(&format!("init PyTorchJob {role}"), &specs[role]);
    }
    // Kubeflow's PaddleJob: its container must be named `paddle` and its port `master` (the operator looks
    // them up by name).
    assert_eq!(init_paddle["apiVersion"], "kubeflow.org/v1");
    assert_eq!(init_paddle["kind"], "PaddleJob");
    let worker = &init_paddle["spec"]["paddleReplicaSpecs"]["Worker"];
    assert_eq!(worker["replicas"], 2);
    check_init_pod("init PaddleJob", &worker["template"], "paddle");
    fails_on_78("init PaddleJob", worker);
    assert_eq!(
        worker["template"]["spec"]["containers"][0]["ports"][0]["name"],
        "master"
    );

    // The plain batch Job: a pod failure policy fails it on the training container's exit 78.
    assert_eq!(
        (&job["apiVersion"], &job["kind"]),
        (&"batch/v1".into(), &"Job".into())
    );
    check_init_pod("Job", &job["spec"]["template"], "train");
    assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    let rules = job["spec"]["podFailurePolicy"]["rules"]
        .as_array()
        .expect("podFailurePolicy");
    assert!(
        rules.iter().any(|r| r["action"] == "FailJob"
            && r["onExitCodes"]["operator"] == "In"
            && r["onExitCodes"]["containerName"] == "train"
            && r["onExitCodes"]["values"]
                .as_array()
                .is_some_and(|v| v.contains(&78.into()))),
        "Job: no FailJob rule for exit 78: {rules:?}"
    );
}

/// The Compose files: no obsolete `version:` key, no legacy `runtime:`, GPUs through
/// `deploy.resources.reservations.devices`, no variable repeating the command's own arguments, and
/// `docker compose config` (Compose v2, the Compose specification) accepts the base file alone and merged with
/// the GPU file.
#[test]
fn compose_files_follow_the_compose_specification() {
    let base = "examples/compose/docker-compose.yml";
    let gpu = "examples/compose/docker-compose.gpu.yml";
    let Some(docs) = load_yaml(&[base, gpu]) else {
        return;
    };
    for (f, d) in [base, gpu].iter().zip(&docs) {
        let d = &d[0];
        assert!(d.get("version").is_none(), "{f}: obsolete version: key");
        for (name, svc) in d["services"].as_object().unwrap() {
            assert!(svc.get("runtime").is_none(), "{f}: {name}: legacy runtime:");
        }
    }
    let text = std::fs::read_to_string(root().join(base)).unwrap();
    assert!(
        !text.contains("docker-compose "),
        "{base}: says docker-compose, not docker compose"
    );
    if !compose_ready() {
        return;
    }
    let config = |files: &[&str]| -> Value {
        let mut c = docker(&["compose"]);
        for f in files {
            c.arg("-f").arg(root().join(f));
        }
        c.args(["config", "--format", "json"]);
        serde_json::from_str(&ok(&mut c)).unwrap()
    };
    let _ = config(&[base]);
    let merged = config(&[base, gpu]);
    for (name, svc) in merged["services"].as_object().unwrap() {
        let cmd = strings(&svc["command"]);
        assert!(
            cmd.iter().any(|a| a.starts_with("--master-addr=")),
            "{name}: {cmd:?}"
        );
        let env: Vec<String> = svc["environment"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        assert_no_repeats(name, &cmd, &env);
        let devices = &svc["deploy"]["resources"]["reservations"]["devices"];
        assert!(
            devices
                .as_array()
                .is_some_and(|d| d.iter().any(|x| strings(&x["capabilities"]) == ["gpu"])),
            "{name}: no GPU reservation: {svc}"
        );
    }
}

/// Every reference to the carrier image in the README, the examples and the Dockerfiles uses one tag,
/// `ncclenv:<version>` (a bare `ncclenv` would be `ncclenv:latest`, which nothing builds).
#[test]
fn carrier_image_tag_is_the_same_everywhere() {
    let tag = carrier_tag();
    let mut files = vec![root().join("README.md"), root().join("examples/README.md")];
    for dir in [
        "docker",
        "examples/ngc",
        "examples/tini",
        "examples/k8s",
        "examples/k8s/init",
    ] {
        for e in std::fs::read_dir(root().join(dir)).unwrap().flatten() {
            if e.path().is_file() {
                files.push(e.path());
            }
        }
    }
    let mut seen = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for line in text.lines() {
            // `-t NAME`, `--from=NAME`, `NCCLENV_IMAGE=NAME`, `image: …/NAME`: the word after them.
            for (i, _) in line.match_indices("ncclenv:") {
                let start = line[..i]
                    .rfind(|c: char| {
                        c.is_whitespace() || c == '=' || c == '/' || c == '`' || c == '"'
                    })
                    .map_or(0, |p| p + 1);
                if start != i {
                    continue; // part of another word (e.g. `ncclenv-e2e-…:carrier`)
                }
                let word: String = line[i..]
                    .chars()
                    .take_while(|c| !c.is_whitespace() && !matches!(c, '`' | '"' | ')' | ','))
                    .collect();
                if word == "ncclenv:" {
                    continue; // prose: "ncclenv: …" log lines
                }
                assert_eq!(word, tag, "{}: {line}", f.display());
                seen += 1;
            }
        }
    }
    assert!(seen >= 5, "only {seen} references to {tag}");
}

#[test]
fn launch_script_evals_ncclenv_env() {
    let (ncclenv, _) = host_binaries();
    let path = format!(
        "{}:{}",
        ncclenv.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = root().join("examples/launch.sh");
    let o = output(
        Command::new("bash")
            .arg(&script)
            .arg("--print-env")
            .env("PATH", &path)
            .env("NNODES", "1"),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let env = env_of(&stdout(&o));
    match host_default_dev() {
        Some(dev) => expect_env(&env, "NCCL_SOCKET_IFNAME", &dev, "launch.sh"),
        None => assert!(env.contains_key("NCCL_SOCKET_IFNAME"), "{env:?}"),
    }
    assert!(env.contains_key("NCCL_SOCKET_FAMILY"), "{env:?}");

    // A refusal stops the script: a 2-node job in a namespace with no network (unshare -n, root).
    let o = output(
        Command::new("unshare")
            .args(["-n", "bash"])
            .arg(&script)
            .arg("--print-env")
            .env("PATH", &path)
            .env("NNODES", "2")
            .env("MASTER_ADDR", "10.0.0.1"),
    );
    let err = stderr(&o);
    if o.status.code() != Some(78) && err.contains("unshare") {
        cannot(&format!("unshare -n: {}", err.trim()));
        return;
    }
    assert_eq!(o.status.code(), Some(78), "{err}");
    assert!(stdout(&o).is_empty(), "the script went on: {}", stdout(&o));
}

/// Validates every pod template of the Kubernetes examples with kubernetes-validate (PyPI, pinned in
/// scripts/test.sh; it ships the Kubernetes JSON schemas and runs offline), strict (an unknown field is an
/// error), against Kubernetes 1.31 (the first with `podFailurePolicy` stable) and 1.37. Resources of the
/// core API (the batch Job) are validated whole; an operator's resource (PyTorchJob, PaddleJob) has no schema
/// there, so each of its pod templates is validated as a `v1` `PodTemplate`. Prints `ok WHAT` per template,
/// or `FAIL WHAT: MESSAGE`.
const K8S_VALIDATE: &str = r#"
import sys, yaml, kubernetes_validate as kv
def templates(doc):
    kind = doc.get("kind")
    spec = doc.get("spec", {})
    if kind == "PyTorchJob":
        return [(k, v["template"]) for k, v in spec["pytorchReplicaSpecs"].items()]
    if kind == "PaddleJob" and "paddleReplicaSpecs" in spec:
        return [(k, v["template"]) for k, v in spec["paddleReplicaSpecs"].items()]
    if kind == "PaddleJob":
        return [(k, spec[k]["template"]) for k in ("ps", "worker", "heter") if k in spec]
    return []
versions = sys.argv[1].split(",")
for f in sys.argv[2:]:
    for doc in yaml.safe_load_all(open(f)):
        if doc.get("apiVersion") in ("v1", "batch/v1", "apps/v1"):
            todo = [(doc["kind"], doc)]
        else:
            todo = [(role, {"apiVersion": "v1", "kind": "PodTemplate",
                            "metadata": {"name": "t"}, "template": t})
                    for role, t in templates(doc)]
        for what, obj in todo:
            for v in versions:
                name = f"{f} {doc['kind']} {what} (Kubernetes {v})"
                try:
                    kv.validate(obj, v, strict=True)
                    print("ok", name)
                except kv.ValidationError as e:
                    print("FAIL", name + ":", e.message, "at", "/".join(map(str, e.path)))
"#;

/// `python3 -c K8S_VALIDATE VERSIONS FILES…`: its stdout, or `None` after a skip (no kubernetes-validate).
fn k8s_validate(versions: &str, files: &[PathBuf]) -> Option<String> {
    let o = Command::new("python3")
        .args(["-c", K8S_VALIDATE, versions])
        .args(files)
        .output();
    match o {
        Ok(o) if o.status.success() => Some(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => {
            cannot(&format!(
                "python3 with kubernetes-validate (scripts/test.sh installs it): {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            None
        }
        Err(e) => {
            cannot(&format!("no python3: {e}"));
            None
        }
    }
}

#[test]
fn k8s_pod_templates_validate() {
    let files: Vec<PathBuf> = [
        "examples/k8s/paddlejob.yaml",
        "examples/k8s/pytorchjob.yaml",
        "examples/k8s/init/pytorchjob.yaml",
        "examples/k8s/init/paddlejob.yaml",
        "examples/k8s/job.yaml",
    ]
    .iter()
    .map(|f| root().join(f))
    .collect();
    let Some(out) = k8s_validate("1.31,1.37", &files) else {
        return;
    };
    let fails: Vec<&str> = out.lines().filter(|l| !l.starts_with("ok ")).collect();
    assert!(fails.is_empty(), "{}", fails.join("\n"));
    // Every pod template of every file, at both versions: 1 (PaddleFlow's worker) + 2 + 2 + 1 + 1 (the Job)
    // = 7, × 2.
    assert_eq!(out.lines().count(), 14, "{out}");

    // Control: the validator rejects a misspelt field in a container and in the pod failure policy.
    let (dir, _d) = temp_dir("k8s-bad");
    let job = std::fs::read_to_string(root().join("examples/k8s/job.yaml")).unwrap();
    let mut bad = Vec::new();
    for (from, to) in [
        ("volumeMounts:", "volumeMount:"),
        ("containerName: train", "container: train"),
    ] {
        assert!(job.contains(from), "{from}");
        let f = dir.join(format!("bad-{}.yaml", bad.len()));
        std::fs::write(&f, job.replacen(from, to, 1)).unwrap();
        bad.push(f);
    }
    let out = k8s_validate("1.31", &bad).unwrap_or_default();
    assert_eq!(
        out.lines().filter(|l| l.starts_with("FAIL ")).count(),
        2,
        "the validator accepted a broken Job:\n{out}"
    );
}
