//! The unit tests of `explain`: lines written after NCCL's format strings, through the [`Explainer`], the
//! judges and the renderers.

use super::*;
use std::net::IpAddr;

/// Issue 22, item 8: what a hostile log makes a process keep is bounded and counted.
#[test]
fn what_a_process_keeps_is_bounded_and_counted() {
    let mut ex = Explainer::new();
    for i in 0..MAX_ITEMS + 10 {
        ex.feed(&format!(
            "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via T{i}/x"
        ));
        ex.feed(&format!(
            "h:1:1 [0] NCCL INFO NCCL_X{i} set by environment to {}",
            "v".repeat(5000)
        ));
    }
    for i in 0..MAX_WARNINGS + 5 {
        ex.feed(&format!(
            "h:1:1 [0] a.cc:1 NCCL WARN w{i} {}",
            "x".repeat(5000)
        ));
    }
    ex.feed("h:1:1 [0] a.cc:1 NCCL WARN w0 again");
    let r = ex.finish();
    let p = &r.processes[0];
    assert_eq!(p.transports.len(), MAX_ITEMS);
    assert_eq!(p.env.len(), MAX_ITEMS);
    assert!(p.env.values().all(|v| v.len() <= MAX_TEXT));
    assert_eq!(p.warnings.len(), MAX_WARNINGS);
    assert!(p.warnings.iter().all(|w| w.text.len() <= MAX_TEXT));
    assert_eq!(r.left_out.items, 20);
    assert_eq!(r.left_out.warnings, 6);
    let t = left_out_text(&r.left_out).expect("said");
    assert!(
        t.contains("6 more distinct WARN") && t.contains("20 more setting"),
        "{t}"
    );
    assert_eq!(left_out_text(&LeftOut::default()), None);
}

fn report(inputs: &[(&str, &str)]) -> Explanation {
    let mut ex = Explainer::new();
    for (name, text) in inputs {
        ex.start_input(name);
        for l in text.lines() {
            ex.feed(l);
        }
    }
    ex.finish()
}

fn codes(explanation: &Explanation) -> Vec<&'static str> {
    explanation.findings.iter().map(|f| f.code.code()).collect()
}

// Lines below are written after NCCL's format strings (v2.27.7-1 unless noted): src/debug.cc prefix,
// src/init.cc "NCCL version %s" / "Using network %s" / "comm %p rank %d nRanks %d nNodes %d localRanks %d
// localRank %d MNNVL %d", src/bootstrap.cc "Bootstrap: Using%s" (2.21.5: "Bootstrap : Using%s"),
// src/transport/net_socket.cc "NET/Socket : Using%s" with " [%d]%s:%s", src/transport/net_ib.cc
// "NET/IB : Using%s %s; OOB %s:%s" with " [%d]%s:%d/%s" and "NET/IB : No device found.",
// src/transport/net.cc "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s".
const NODE_A_IB: &str = "\
a1:10:10 [0] NCCL INFO NCCL version 2.27.7+cuda12.9
a1:10:10 [0] NCCL INFO Bootstrap: Using eth0:10.1.0.11<0>
a1:10:10 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.30.0.11<0>
a1:10:10 [0] NCCL INFO Using network IB
a1:10:10 [0] NCCL INFO comm 0x55d0c8e0 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
a1:10:10 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0
";
const NODE_B_SOCKET: &str = "\
b1:20:20 [0] NCCL INFO NCCL version 2.27.7+cuda12.9
b1:20:20 [0] NCCL INFO Bootstrap: Using eth0:10.1.0.12<0>
b1:20:20 [0] NCCL INFO NET/IB : No device found.
b1:20:20 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.0.12<0>
b1:20:20 [0] NCCL INFO Using network Socket
b1:20:20 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/Socket/0
";

#[test]
fn ib_on_one_rank_and_sockets_on_the_other() {
    let r = report(&[("a.log", NODE_A_IB), ("b.log", NODE_B_SOCKET)]);
    assert_eq!(r.processes.len(), 2);
    let a = &r.processes[0];
    assert_eq!(a.nccl_version.as_deref(), Some("2.27.7"));
    assert_eq!(a.cuda_version.as_deref(), Some("12.9"));
    assert_eq!(a.net_ib, vec!["mlx5_0:1/IB"]);
    assert_eq!(a.net_kind().as_deref(), Some("IB"));
    assert_eq!(a.nnodes, Some(2));
    assert!(a.transports.contains("NET/IB"));
    assert_eq!(r.processes[1].net_kind().as_deref(), Some("Socket"));
    let c = codes(&r);
    assert!(c.contains(&"net-transport-mixed"), "{c:?}");
    assert!(c.contains(&"nccl-info"), "{c:?}");
    assert!(!c.contains(&"nccl-versions-differ"), "{c:?}");
    assert!(!c.contains(&"bootstrap-networks-differ"), "{c:?}");
    assert_eq!(exit_code(&r), 1);
    // Both on sockets: no mix.
    let r = report(&[
        ("b.log", NODE_B_SOCKET),
        ("c.log", &NODE_B_SOCKET.replace("b1:20:20", "c1:30:30")),
    ]);
    assert!(!codes(&r).contains(&"net-transport-mixed"));
}

#[test]
fn versions_differ_explicitly_or_by_the_bootstrap_spelling() {
    let old = "x1:5:5 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.13<0>\n";
    let r = report(&[("a.log", NODE_A_IB), ("x.log", old)]);
    assert!(
        codes(&r).contains(&"nccl-versions-differ"),
        "{:?}",
        codes(&r)
    );
    let f = r
        .findings
        .iter()
        .find(|f| f.code == Code::NcclVersionsDiffer)
        .expect("finding");
    assert!(
        f.message.contains("≤ 2.23") && f.message.contains("2.27.7"),
        "{}",
        f.message
    );
    // A bare version line (2.21.5 prints it without a prefix) belongs to the only process of its input.
    let r = report(&[("x.log", &format!("NCCL version 2.21.5+cuda12.4\n{old}"))]);
    assert_eq!(r.processes[0].nccl_version.as_deref(), Some("2.21.5"));
    assert!(!codes(&r).contains(&"nccl-versions-differ"));
    let r = report(&[("a.log", NODE_A_IB), ("b.log", NODE_B_SOCKET)]);
    assert!(!codes(&r).contains(&"nccl-versions-differ"));
}

#[test]
fn bootstrap_addresses_across_hosts() {
    let line = |h: &str, a: &str| format!("{h}:1:1 [0] NCCL INFO Bootstrap: Using eth0:{a}<0>\n");
    let r = report(&[(
        "j.log",
        &(line("n1", "172.17.0.2") + &line("n2", "172.17.0.2")),
    )]);
    let c = codes(&r);
    assert!(c.contains(&"bootstrap-address-shared"), "{c:?}");
    assert!(!c.contains(&"bootstrap-networks-differ"), "{c:?}");
    let r = report(&[(
        "j.log",
        &(line("n1", "10.1.0.11") + &line("n2", "172.18.0.1")),
    )]);
    assert!(codes(&r).contains(&"bootstrap-networks-differ"));
    let r = report(&[(
        "j.log",
        &(line("n1", "10.1.0.11") + &line("n2", "10.2.0.12")),
    )]);
    assert!(codes(&r).is_empty(), "{:?}", codes(&r));
    let r = report(&[(
        "j.log",
        &(line("n1", "10.1.0.11") + &line("n2", "fd00::12")),
    )]);
    assert!(codes(&r).contains(&"bootstrap-family-mixed"));
    let r = report(&[(
        "j.log",
        &(line("n1", "10.1.0.11") + &line("n2", "127.0.0.1")),
    )]);
    assert!(codes(&r).contains(&"bootstrap-loopback"));
    let r = report(&[(
        "j.log",
        &(line("n1", "10.1.0.11") + &line("n2", "169.254.3.4")),
    )]);
    assert!(codes(&r).contains(&"bootstrap-link-local"));
    // One host: loopback is fine (single node).
    let r = report(&[(
        "j.log",
        &(line("n1", "127.0.0.1") + &line("n1", "127.0.0.1")),
    )]);
    assert!(codes(&r).is_empty(), "{:?}", codes(&r));
}

#[test]
fn warnings_are_explained_and_counted_and_combined_logs_work() {
    // A job log: launcher lines, a rank prefix, NCCL's lines and a framework's exception quoting NCCL.
    let log = "\
LAUNCH INFO 2026-11-30 starting 2 workers
[default0]:n1:7:9 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth9
[default0]:

[default0]:[2026-11-30 16:18:07] n1:7:9 [0] bootstrap.cc:115 NCCL WARN Bootstrap : no socket interface found
[default0]:[2026-11-30 16:18:08] n1:7:9 [0] bootstrap.cc:115 NCCL WARN Bootstrap : no socket interface found
[default0]:RuntimeError: ... Last error: Bootstrap : no socket interface found
Traceback: gloo: Unable to find address for: ^lo
";
    let log = format!("{log}[default0]:n1:7:9 [0] NCCL INFO init.cc:84 -> 5\n");
    let r = report(&[("-", &log)]);
    assert_eq!(r.processes[0].returned, Some(5));
    assert_eq!(r.processes.len(), 1);
    let p = &r.processes[0];
    assert_eq!(
        p.env.get("NCCL_SOCKET_IFNAME").map(String::as_str),
        Some("eth9")
    );
    assert_eq!(p.warnings.len(), 1);
    assert_eq!(p.warnings[0].count, 2);
    assert_eq!(
        p.warnings[0].known.map(|k| k.id),
        Some("no-socket-interface")
    );
    assert_eq!(p.warnings[0].source.as_deref(), Some("bootstrap.cc:115"));
    let c = codes(&r);
    assert!(
        c.contains(&"nccl-warn") && c.contains(&"error-quoted"),
        "{c:?}"
    );
    let quoted: Vec<&str> = r
        .quoted
        .iter()
        .filter_map(|q| q.known.map(|k| k.id))
        .collect();
    assert_eq!(quoted, vec!["no-socket-interface", "gloo-no-address"]);
    assert!(!c.contains(&"bootstrap-not-logged"), "{c:?}");
    let text = render_text(&r);
    assert!(text.contains("cause:") && text.contains("(×2)"), "{text}");
    let j = render_json(&r);
    assert_eq!(
        j["processes"][0]["warnings"][0]["known"]["id"],
        "no-socket-interface"
    );
    assert_eq!(j["exit"], 1);
}

#[test]
fn nothing_from_nccl_and_nothing_wrong() {
    let r = report(&[("x", "hello\nworld\n")]);
    assert_eq!(codes(&r), vec!["no-nccl-lines"]);
    let r = report(&[(
        "x",
        "n1:1:1 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.2<0>\n",
    )]);
    assert!(r.findings.is_empty());
    assert_eq!(exit_code(&r), 0);
    let r = report(&[(
        "x",
        "n1:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n",
    )]);
    assert_eq!(codes(&r), vec!["bootstrap-not-logged"]);
    assert_eq!(exit_code(&r), 0);
}

#[test]
fn local_comparison() {
    let log = "vm:1:1 [0] NCCL INFO Bootstrap: Using docker0:172.17.0.1<0>\nother:2:2 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.3<0>\n";
    let local = |ifname: &str| Local {
        host: "vm".into(),
        choice: Some((
            ifname.into(),
            "10.0.0.2".parse().ok(),
            "default route (metric 0)".into(),
        )),
        no_choice: None,
        peer: None,
    };
    let mut r = report(&[("x", log)]);
    assert_eq!(
        other_bootstraps(&r, "vm"),
        vec!["10.0.0.3".parse::<IpAddr>().expect("ip")]
    );
    compare_local(&mut r, local("eth0"));
    let f = r
        .findings
        .iter()
        .find(|f| f.code == Code::LocalChoiceDiffers)
        .expect("differs");
    assert!(
        f.message.contains("docker0") && f.message.contains("eth0"),
        "{}",
        f.message
    );
    assert_eq!(r.local.as_ref().and_then(|l| l.agrees), Some(false));
    let mut r = report(&[("x", log)]);
    compare_local(&mut r, local("docker0"));
    assert!(!codes(&r).contains(&"local-choice-differs"));
    let mut r = report(&[("x", log)]);
    compare_local(
        &mut r,
        Local {
            host: "elsewhere".into(),
            ..local("eth0")
        },
    );
    assert!(r.local.is_none());
}

#[test]
fn long_lines_are_cut_and_non_utf8_survives() {
    let mut data = vec![b'x'; MAX_LINE + 10];
    data.push(b'\n');
    data.extend_from_slice(b"n1:1:1 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.2<0>\n\xff\xfe\n");
    let mut ex = Explainer::new();
    ex.start_input("bin");
    assert!(read_lines(std::io::Cursor::new(data), &mut ex).is_none());
    let r = ex.finish();
    assert_eq!(r.inputs[0].lines, 3);
    assert_eq!(r.processes.len(), 1);
}

/// Every code of [`Code::ALL`] (the table of `docs/explain.md`) is made by some log: no code in the table is
/// dead.
#[test]
fn every_code_is_made_by_some_log() {
    let boot = |h: &str, a: &str| format!("{h}:1:1 [0] NCCL INFO Bootstrap: Using eth0:{a}<0>\n");
    let logs = [
        format!("{NODE_A_IB}{NODE_B_SOCKET}"),
        format!("{NODE_A_IB}x1:5:5 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.13<0>\n"),
        boot("n1", "172.17.0.2") + &boot("n2", "172.17.0.2"),
        boot("n1", "10.1.0.11") + &boot("n2", "172.18.0.1"),
        boot("n1", "10.1.0.11") + &boot("n2", "fd00::12"),
        boot("n1", "10.1.0.11") + &boot("n2", "127.0.0.1"),
        boot("n1", "10.1.0.11") + &boot("n2", "169.254.3.4"),
        "n1:7:9 [0] bootstrap.cc:115 NCCL WARN Bootstrap : no socket interface found\n\
         gloo: Unable to find address for: ^lo\n"
            .to_string(),
        "hello\n".to_string(),
        "n1:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n".to_string(),
    ];
    let mut made: std::collections::BTreeSet<&'static str> = std::collections::BTreeSet::new();
    for l in &logs {
        made.extend(codes(&report(&[("x", l)])));
    }
    let mut r = report(&[(
        "x",
        &(boot("vm", "172.17.0.1") + &boot("other", "10.0.0.3")),
    )]);
    compare_local(
        &mut r,
        Local {
            host: "vm".into(),
            choice: Some(("eth1".into(), None, "default route".into())),
            no_choice: None,
            peer: None,
        },
    );
    made.extend(codes(&r));
    let all: std::collections::BTreeSet<&'static str> =
        Code::ALL.iter().map(|c| c.code()).collect();
    assert_eq!(made, all);
}

/// Two processes under one `host:pid` (two containers with one `--hostname`, each NCCL as PID 1; break-it
/// finding of stop 32): NCCL logs its version once per process, so the second version line is a second
/// process (`trainer:1#2`), and their different versions are found. The same log given twice is two
/// processes with one version, and nothing differs.
#[test]
fn a_second_version_line_under_one_host_and_pid_is_another_process() {
    let a = "trainer:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n\
             trainer:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n";
    let b = "trainer:1:1 [0] NCCL INFO NCCL version 2.27.7+cuda12.9\n\
             trainer:1:1 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.2<0>\n";
    let r = report(&[("a.log", a), ("b.log", b)]);
    let names: Vec<String> = r.processes.iter().map(|p| p.name()).collect();
    assert_eq!(names, ["trainer:1", "trainer:1#2"]);
    assert_eq!(r.processes[1].nccl_version.as_deref(), Some("2.27.7"));
    assert!(
        codes(&r).contains(&"nccl-versions-differ"),
        "{:?}",
        codes(&r)
    );
    // One input with both, one after the other (two pods' logs concatenated).
    let r = report(&[("all.log", &format!("{a}{b}"))]);
    assert_eq!(r.processes.len(), 2);
    assert!(codes(&r).contains(&"nccl-versions-differ"));
    // The same file twice: two processes, one version.
    let r = report(&[("a.log", a), ("a-copy.log", a)]);
    assert_eq!(r.processes.len(), 2);
    assert!(
        !codes(&r).contains(&"nccl-versions-differ"),
        "{:?}",
        codes(&r)
    );
    // One process's lines after its version line stay one process.
    let r = report(&[("a.log", &format!("{a}trainer:1:2 [1] NCCL INFO comm 0x1 rank 1 nRanks 2 nNodes 1 localRanks 2 localRank 1 MNNVL 0\n"))]);
    assert_eq!(r.processes.len(), 1);
}
