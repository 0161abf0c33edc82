//! Judging one attempt: which [`Judged`] it had, and for each outcome one function that writes its verdict
//! (summary, detail, whether another environment could make it pass).

use super::attempt::{Attempt, Ending};
use super::causes;
use super::outcome::{CheckDetail, ErrorDetail, Expected, Hang, OwnError, OwnStage, ReportedError};
use super::process::signal_name;
use super::protocol::{HelperError, HelperMsg, HelperResult, LibKind, Stage, Step};
use crate::config::CheckMode;
use std::net::IpAddr;
use std::time::Duration;

/// Events written into a report (`events`), the latest ones; the rest are counted in `events_not_shown`.
const REPORTED_EVENTS: usize = 256;
/// Characters of the helper's last stderr line quoted when it ended without a verdict.
const LAST_LINE_CHARS: usize = 300;

/// The verdict of one attempt, before repair.
#[derive(Debug)]
pub(super) struct AttemptVerdict {
    /// The check that ran (the requested one when the helper gave no result).
    pub mode: CheckMode,
    /// True when the check passed.
    pub passed: bool,
    /// One line.
    pub summary: String,
    /// Everything known about the attempt.
    pub detail: CheckDetail,
    /// True when a different environment could make it pass (an NCCL failure, a hang, a wrong sum, a crash).
    pub repairable: bool,
}

/// How an attempt ended, in the order they are judged.
enum Judged<'a> {
    /// The helper could not be started.
    NotStarted(&'a str),
    /// A signal reached ncclenv.
    Interrupted(i32),
    /// No verdict before the deadline.
    Hung,
    /// The helper ended without a verdict.
    NoVerdict,
    /// The helper's verdict is a failure.
    Failed(&'a HelperResult),
    /// NCCL accepted the environment, but bootstraps on another address than ncclenv chose.
    WrongAddress(&'a HelperResult, IpAddr),
    /// The check passed.
    Passed(&'a HelperResult),
}

/// The interface and address ncclenv chose.
pub(super) type Chosen<'a> = Option<(&'a str, IpAddr)>;

/// Judge attempt `att` of a check of `mode` with deadline `timeout`; `expected` is compared with the
/// bootstrap address NCCL chose.
pub(super) fn judge(
    att: &Attempt,
    mode: CheckMode,
    expected: Chosen<'_>,
    timeout: Duration,
) -> AttemptVerdict {
    let detail = attempt_detail(att, mode);
    match outcome(att, expected) {
        Judged::NotStarted(why) => not_started(detail, mode, why),
        Judged::Interrupted(sig) => interrupted(detail, mode, sig, att.elapsed_ms),
        Judged::Hung => hung(detail, mode, att, timeout),
        Judged::NoVerdict => no_verdict(detail, mode, att),
        Judged::Failed(res) => failed(with_result(detail, res, expected), res),
        Judged::WrongAddress(res, got) => {
            wrong_address(with_result(detail, res, expected), res, got, expected)
        }
        Judged::Passed(res) => passed(with_result(detail, res, expected), res, mode, expected),
    }
}

fn outcome<'a>(att: &'a Attempt, expected: Chosen<'_>) -> Judged<'a> {
    match &att.ending {
        Ending::NotStarted(why) => return Judged::NotStarted(why),
        Ending::Interrupted(sig) => return Judged::Interrupted(*sig),
        Ending::Hung => return Judged::Hung,
        Ending::Ran => {}
    }
    let Some(res) = &att.result else {
        return Judged::NoVerdict;
    };
    if !res.ok {
        return Judged::Failed(res);
    }
    let decoded: Option<IpAddr> = res.addr.as_deref().and_then(|a| a.parse().ok());
    match (decoded, expected) {
        (Some(got), Some((_, want))) if got != want => Judged::WrongAddress(res, got),
        _ => Judged::Passed(res),
    }
}

/// The facts of every attempt: what was asked, how the helper ended, its output (bounded), the libraries it
/// loaded.
fn attempt_detail(att: &Attempt, mode: CheckMode) -> CheckDetail {
    let mut detail = CheckDetail {
        requested: Some(mode),
        elapsed_ms: Some(att.elapsed_ms),
        helper_pid: Some(att.pid),
        helper_exit: Some(att.exit.clone()),
        processes_left: Some(!att.group_gone),
        events_dropped: (att.events_dropped > 0).then_some(att.events_dropped),
        lines_too_long: (att.lines_too_long > 0).then_some(att.lines_too_long),
        stderr_tail: (!att.stderr_tail.is_empty()).then(|| att.stderr_tail.clone()),
        stray_output: (!att.junk.is_empty()).then(|| att.junk.clone()),
        ..CheckDetail::default()
    };
    // The report keeps the last REPORTED_EVENTS events (a flood must not flood the report either).
    let shown: Vec<&HelperMsg> = att
        .events
        .iter()
        .filter(|e| !matches!(e, HelperMsg::Result(_)))
        .collect();
    let skip = shown.len().saturating_sub(REPORTED_EVENTS);
    if skip > 0 || att.events_dropped > 0 {
        detail.events_not_shown = Some(skip as u64 + att.events_dropped);
    }
    detail.events = Some(shown[skip..].iter().map(|e| (*e).clone()).collect());
    for e in &att.events {
        let HelperMsg::Lib(lib) = e else { continue };
        match lib.what {
            LibKind::Nccl => {
                detail.nccl_path = Some(lib.path.clone());
                if let Some(v) = lib.nccl_version {
                    detail.nccl_version = Some(crate::nccl_errors::version_string(v));
                }
            }
            LibKind::Cuda => {
                detail.cuda_path = Some(lib.path.clone());
                detail.cuda_api = lib.cuda;
            }
        }
    }
    detail
}

/// A failed verdict of the requested `mode`.
fn fail(mode: CheckMode, detail: CheckDetail, summary: String, repairable: bool) -> AttemptVerdict {
    AttemptVerdict {
        mode,
        passed: false,
        summary,
        detail,
        repairable,
    }
}

fn not_started(mut d: CheckDetail, mode: CheckMode, why: &str) -> AttemptVerdict {
    d.error = Some(ErrorDetail::Own(OwnError::new(
        OwnStage::Spawn,
        why.to_string(),
    )));
    fail(mode, d, format!("check could not run: {why}"), false)
}

fn interrupted(mut d: CheckDetail, mode: CheckMode, sig: i32, elapsed_ms: u64) -> AttemptVerdict {
    d.interrupted_by = Some(sig);
    let summary = format!(
        "check interrupted by {} after {elapsed_ms} ms; helper processes killed",
        signal_name(sig),
    );
    fail(mode, d, summary, false)
}

fn hung(
    mut detail: CheckDetail,
    mode: CheckMode,
    att: &Attempt,
    timeout: Duration,
) -> AttemptVerdict {
    let steps = last_steps(&att.events);
    let where_ = if steps.is_empty() {
        "helper before its first step".to_string()
    } else {
        steps
            .iter()
            .map(|(r, s)| match r {
                Some(r) => format!("rank {r} in {}", s.name()),
                None => format!("helper in {}", s.name()),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    // The most advanced step names the cause.
    let worst = steps.iter().map(|(_, s)| *s).max();
    let causes = causes::hang_causes(worst);
    detail.hang = Some(Hang {
        timeout_s: timeout.as_secs_f64(),
        where_: where_.clone(),
        step: worst,
        likely_causes: causes,
    });
    let summary = format!(
        "check HUNG: no verdict within {} s ({where_}); killed. Likely: {causes}",
        timeout.as_secs()
    );
    fail(mode, detail, summary, true)
}

fn no_verdict(mut d: CheckDetail, mode: CheckMode, att: &Attempt) -> AttemptVerdict {
    let said = if att.stderr_tail.is_empty() {
        String::new()
    } else {
        format!(": {}", last_line(&att.stderr_tail))
    };
    let msg = format!("helper ended without a verdict ({}){said}", att.exit);
    d.error = Some(ErrorDetail::Own(OwnError::new(
        OwnStage::Crash,
        msg.clone(),
    )));
    fail(mode, d, format!("check FAILED: {msg}"), true)
}

/// The attempt's detail with the helper's result: the check that ran, its note, the result line, and the
/// address ncclenv chose when NCCL's can be compared with it.
fn with_result(mut d: CheckDetail, res: &HelperResult, expected: Chosen<'_>) -> CheckDetail {
    d.mode = Some(res.mode.into());
    d.note = res.note.clone();
    d.result = Some(res.clone());
    let decoded = res.addr.as_deref().and_then(|a| a.parse::<IpAddr>().ok());
    if let (Some(_), Some((ifname, want))) = (decoded, expected) {
        d.expected = Some(Expected {
            interface: ifname.to_string(),
            addr: want.to_string(),
        });
    }
    d
}

fn failed(mut detail: CheckDetail, res: &HelperResult) -> AttemptVerdict {
    let ran = CheckMode::from(res.mode);
    let error = res.error.clone().unwrap_or_else(|| {
        HelperError::new(
            Stage::Crash,
            "the helper reported a failure without an error",
        )
    });
    let (explanation, remedy) = causes::explain_failure(&error, res.nccl_version);
    let facts = causes::failure_facts(&error);
    let facts = if facts.is_empty() {
        facts
    } else {
        format!("{facts}: ")
    };
    let rank = error
        .rank
        .map(|r| format!(" on rank {r}"))
        .unwrap_or_default();
    // As `ncclenv check` heads it: a check that never asked NCCL could not run (break-it finding: the
    // entrypoint said FAILED where the check said COULD NOT RUN).
    let verb = if error.stage.asks_nccl_nothing() {
        "COULD NOT RUN"
    } else {
        "FAILED"
    };
    let summary = format!(
        "{} check {verb} at {}{rank}: {facts}{explanation}",
        mode_name(ran),
        error.stage.name()
    );
    // A missing library or an unusable CUDA (NCCL code 1) is not something NCCL variables can fix.
    let repairable = ran == CheckMode::Allreduce
        && !matches!(
            error.stage,
            Stage::Load | Stage::Symbol | Stage::Cuda | Stage::Usage | Stage::Spawn
        )
        && error.code != Some(1);
    detail.error = Some(ErrorDetail::Reported(ReportedError {
        stage: error.stage,
        code: error.code,
        name: error.code.map(crate::nccl_errors::result_name),
        error_string: error.error_string,
        last_error: error.last_error,
        message: error.message,
        looked: error.looked,
        rank: error.rank,
        explanation,
        remedy,
    }));
    fail(ran, detail, summary, repairable)
}

fn wrong_address(
    mut detail: CheckDetail,
    res: &HelperResult,
    got: IpAddr,
    expected: Chosen<'_>,
) -> AttemptVerdict {
    let ran = CheckMode::from(res.mode);
    let (ifname, want) = match expected {
        Some((i, w)) => (i, w.to_string()),
        None => ("", String::new()),
    };
    let p = format!(
        "NCCL bootstraps on {got} but ncclenv chose {ifname} ({want}): another NCCL_SOCKET_IFNAME, \
         NCCL_SOCKET_FAMILY or an NCCL config file decides"
    );
    let summary = format!("{} check FAILED: {p}", mode_name(ran));
    detail.error = Some(ErrorDetail::Own(OwnError {
        remedy: Some(
            "Set NCCL_SOCKET_IFNAME to the interface ncclenv chose, or remove the setting that overrides it"
                .into(),
        ),
        ..OwnError::new(OwnStage::Address, p)
    }));
    fail(ran, detail, summary, false)
}

fn passed(
    detail: CheckDetail,
    res: &HelperResult,
    mode: CheckMode,
    expected: Chosen<'_>,
) -> AttemptVerdict {
    let ran = CheckMode::from(res.mode);
    let vtxt = res
        .nccl_version
        .map(|v| format!("NCCL {}", crate::nccl_errors::version_string(v)))
        .unwrap_or_else(|| "NCCL".to_string());
    let at = match (&res.addr, res.port) {
        (Some(a), Some(p)) => format!(" on {a} port {p}"),
        (Some(a), None) => format!(" on {a}"),
        _ => String::new(),
    };
    let at_if = expected.map(|(i, _)| format!(" ({i})")).unwrap_or_default();
    let summary = match ran {
        CheckMode::Allreduce => {
            let n = res.nranks.unwrap_or(0);
            let mib = res.bytes.unwrap_or(0) as f64 / (1024.0 * 1024.0);
            // The helper's note says when fewer GPUs than ranks asked were visible (and what one rank proves).
            let one = match (&res.note, n) {
                (Some(note), _) => format!(" ({note})"),
                (None, 1) => {
                    " (one GPU: one-rank communicator, nothing crossed between GPUs)".into()
                }
                _ => String::new(),
            };
            format!(
                "allreduce check passed: {vtxt}, {n} rank(s), {mib:.0} MiB float32 verified in {:.2} ms, algbw {:.2} GB/s, busbw {:.2} GB/s; bootstrap{at}{at_if}{one}",
                res.seconds.unwrap_or(0.0) * 1e3,
                res.algbw_gbps.unwrap_or(0.0),
                res.busbw_gbps.unwrap_or(0.0),
            )
        }
        _ => {
            // The helper's note says why no GPU is visible (CUDA's answer to the first call that needs one).
            let fb = match (mode, &res.note) {
                (CheckMode::Allreduce, Some(note)) => format!(" ({note})"),
                (CheckMode::Allreduce, None) => {
                    " (no GPU visible: fell back to the bootstrap check)".into()
                }
                _ => String::new(),
            };
            format!(
                "bootstrap check passed: {vtxt} accepts the environment, bootstraps{at}{at_if}{fb}"
            )
        }
    };
    AttemptVerdict {
        mode: ran,
        passed: true,
        summary,
        detail,
        repairable: false,
    }
}

/// The last step each rank reported before a hang: `(rank or None for the orchestrator, step)`, ranks that
/// gave their verdict left out.
fn last_steps<'a>(events: impl IntoIterator<Item = &'a HelperMsg>) -> Vec<(Option<u32>, Step)> {
    let mut out: Vec<(Option<u32>, Step)> = Vec::new();
    for e in events {
        match e {
            HelperMsg::Step(s) => match out.iter_mut().find(|(r, _)| *r == s.rank) {
                Some(slot) => slot.1 = s.step,
                None => out.push((s.rank, s.step)),
            },
            HelperMsg::RankResult(r) => out.retain(|(rank, _)| *rank != Some(r.rank)),
            _ => {}
        }
    }
    out
}

/// The last non-blank line of `s`, cut to [`LAST_LINE_CHARS`] characters.
fn last_line(s: &str) -> String {
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .chars()
        .take(LAST_LINE_CHARS)
        .collect()
}

/// `off`, `bootstrap` or `allreduce`.
pub(super) fn mode_name(mode: CheckMode) -> &'static str {
    match mode {
        CheckMode::Off => "off",
        CheckMode::Bootstrap => "bootstrap",
        CheckMode::Allreduce => "allreduce",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::protocol::{RankResult, StepMsg};
    use std::net::Ipv4Addr;
    use std::time::Instant;

    fn step(rank: u32, step: Step) -> HelperMsg {
        HelperMsg::Step(StepMsg {
            rank: Some(rank),
            step,
            t_ms: 0,
        })
    }

    #[test]
    fn last_steps_track_unfinished_ranks() {
        let done = HelperMsg::RankResult(RankResult::failed(0, HelperError::new(Stage::Init, "x")));
        let s = last_steps(&[step(0, Step::Init), step(1, Step::Collective), done]);
        assert_eq!(s, vec![(Some(1), Step::Collective)]);
    }

    fn attempt(lines: &[&str], ending: Ending) -> Attempt {
        let mut att = Attempt::default();
        att.ending = ending;
        att.exit = "exit 0".into();
        for l in lines {
            att.take_line(l, Instant::now());
        }
        att
    }

    #[test]
    fn a_hang_names_each_rank_and_the_most_advanced_step() {
        let att = attempt(
            &[
                r#"{"ev":"step","step":"load","t_ms":0}"#,
                r#"{"ev":"step","rank":0,"step":"init","t_ms":1}"#,
                r#"{"ev":"step","rank":1,"step":"collective","t_ms":2}"#,
            ],
            Ending::Hung,
        );
        let v = judge(&att, CheckMode::Allreduce, None, Duration::from_secs(3));
        assert!(!v.passed && v.repairable);
        let h = v.detail.hang.expect("hang");
        assert_eq!(h.step, Some(Step::Collective));
        assert_eq!(
            h.where_,
            "helper in load, rank 0 in init, rank 1 in collective"
        );
        assert!(v.summary.contains("no verdict within 3 s"), "{}", v.summary);
        let none = judge(
            &attempt(&[], Ending::Hung),
            CheckMode::Bootstrap,
            None,
            Duration::from_secs(1),
        );
        let h = none.detail.hang.expect("hang");
        assert_eq!(
            (h.step, h.where_.as_str()),
            (None, "helper before its first step")
        );
    }

    #[test]
    fn the_bootstrap_address_is_compared_with_the_choice() {
        let line = r#"{"ev":"result","mode":"bootstrap","ok":true,"nccl_version":22105,"addr":"10.0.0.1","port":5,"family":"AF_INET"}"#;
        let att = attempt(&[line], Ending::Ran);
        let same = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let v = judge(
            &att,
            CheckMode::Bootstrap,
            Some(("eth0", same)),
            Duration::from_secs(1),
        );
        assert!(v.passed, "{}", v.summary);
        assert_eq!(
            v.summary,
            "bootstrap check passed: NCCL 2.21.5 accepts the environment, bootstraps on 10.0.0.1 port 5 (eth0)"
        );
        let other = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9));
        let v = judge(
            &att,
            CheckMode::Bootstrap,
            Some(("eth1", other)),
            Duration::from_secs(1),
        );
        assert!(!v.passed && !v.repairable);
        assert!(
            v.summary.contains("ncclenv chose eth1 (10.0.0.9)"),
            "{}",
            v.summary
        );
        assert_eq!(v.detail.error.map(|e| e.stage()), Some("address"));
    }

    #[test]
    fn a_missing_library_is_not_repairable() {
        let line = r#"{"ev":"result","mode":"allreduce","ok":false,"error":{"stage":"load","code":null,"error_string":null,"last_error":null,"message":"no","looked":["/x: not found"],"rank":null}}"#;
        let v = judge(
            &attempt(&[line], Ending::Ran),
            CheckMode::Allreduce,
            None,
            Duration::from_secs(1),
        );
        assert!(!v.passed && !v.repairable);
        assert_eq!(
            v.summary,
            "allreduce check COULD NOT RUN at load: no (looked: /x: not found)"
        );
        let crash = judge(
            &attempt(&[], Ending::Ran),
            CheckMode::Allreduce,
            None,
            Duration::from_secs(1),
        );
        assert!(!crash.passed && crash.repairable);
        assert_eq!(
            crash.summary,
            "check FAILED: helper ended without a verdict (exit 0)"
        );
    }

    /// Generated cases of the helper-protocol property test (docs/reliability.md).
    const PROPTEST_PROTOCOL_CASES: u32 = 2000;

    fn protocol_line() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let value = prop_oneof![
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(|f| serde_json::json!(f)),
            ".{0,12}".prop_map(serde_json::Value::from),
            proptest::sample::select(vec![
                "load",
                "cuda",
                "init",
                "collective",
                "nccl",
                "driver",
                "bootstrap",
                "allreduce",
            ])
            .prop_map(serde_json::Value::from),
            Just(serde_json::Value::Null),
            Just(serde_json::json!([{"ev": "step"}, 1, "x"])),
            Just(serde_json::json!({"stage": 3, "code": "x"})),
            Just(serde_json::json!({"stage": "init", "code": 2, "message": "m"})),
        ];
        let key = proptest::sample::select(vec![
            "ev",
            "mode",
            "rank",
            "step",
            "t_ms",
            "ok",
            "what",
            "path",
            "nccl_version",
            "cuda",
            "addr",
            "port",
            "family",
            "id",
            "nranks",
            "bytes",
            "seconds",
            "first_mismatch",
            "error",
            "ranks",
            "note",
            "zz",
        ]);
        let ev = proptest::sample::select(vec![
            "step",
            "lib",
            "id",
            "nogpu",
            "rank_result",
            "result",
            "version",
            "",
            "other",
        ]);
        prop_oneof![
            3 => (ev, proptest::collection::vec((key, value), 0..8)).prop_map(|(ev, kv)| {
                let mut m = serde_json::Map::new();
                m.insert("ev".into(), ev.into());
                for (k, v) in kv {
                    m.insert(k.into(), v);
                }
                serde_json::Value::Object(m).to_string()
            }),
            1 => proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)
                .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(PROPTEST_PROTOCOL_CASES))]

        /// Any sequence of protocol lines (valid messages with fields of any type, and garbage): recording
        /// and judging never panic, and the records stay within their bounds.
        #[test]
        fn any_protocol_lines_are_judged(
            lines in proptest::collection::vec(protocol_line(), 0..40),
            timed_out in proptest::prelude::any::<bool>(),
        ) {
            let ending = if timed_out { Ending::Hung } else { Ending::Ran };
            let mut att = Attempt::default();
            att.ending = ending;
            att.exit = "exit 0".into();
            let start = Instant::now();
            for l in &lines {
                att.take_line(l, start);
            }
            proptest::prop_assert!(
                att.events.len() <= crate::check::attempt::MAX_EVENTS
                    && att.junk.len() <= crate::check::attempt::MAX_JUNK
            );
            let ip: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
            for mode in [CheckMode::Bootstrap, CheckMode::Allreduce] {
                let v = judge(&att, mode, Some(("eth0", ip)), Duration::from_secs(1));
                proptest::prop_assert!(!v.summary.is_empty());
                proptest::prop_assert!(serde_json::to_value(&v.detail).is_ok());
            }
        }
    }
}
