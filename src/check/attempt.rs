//! What one run of the helper produced ([`Attempt`]): its protocol events and verdict, its stray output and
//! stderr, how it ended. Everything kept is bounded, whatever the helper writes.

use super::protocol::{HelperMsg, HelperResult};
use std::collections::VecDeque;
use std::time::Instant;

/// Protocol events kept per attempt, and the bytes of their lines: the latest ones within both bounds
/// (older ones are counted in `events_dropped`).
pub(super) const MAX_EVENTS: usize = 4096;
/// See [`MAX_EVENTS`] (16 MiB).
pub(super) const MAX_EVENT_BYTES: usize = 16 << 20;
/// Stray (non-protocol) lines kept, each cut to [`JUNK_CHARS`] characters.
pub(super) const MAX_JUNK: usize = 50;
/// Characters kept of a stray line.
pub(super) const JUNK_CHARS: usize = 300;

/// How an attempt ended, apart from what the helper said.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) enum Ending {
    /// The helper ran and ended (or its verdict came in time): judge what it wrote.
    #[default]
    Ran,
    /// The helper could not be started: why.
    NotStarted(String),
    /// The deadline passed without a verdict: a hang.
    Hung,
    /// SIGINT or SIGTERM reached ncclenv meanwhile: the signal number.
    Interrupted(i32),
}

/// What one run of the helper produced.
#[derive(Debug, Default)]
pub(super) struct Attempt {
    /// How it ended.
    pub ending: Ending,
    /// The final `result` line, if one came.
    pub result: Option<HelperResult>,
    /// Protocol lines, in order (`result` included): the latest [`MAX_EVENTS`].
    pub events: VecDeque<HelperMsg>,
    /// The length in bytes of each line in [`Attempt::events`].
    event_sizes: VecDeque<usize>,
    /// Sum of `event_sizes`, at most [`MAX_EVENT_BYTES`].
    event_bytes: usize,
    /// Protocol lines dropped to keep [`Attempt::events`] bounded.
    pub events_dropped: u64,
    /// Lines on stdout that were not protocol (should not happen), the first [`MAX_JUNK`], cut.
    pub junk: Vec<String>,
    /// Lines longer than [`super::lines::MAX_LINE`], dropped.
    pub lines_too_long: u64,
    /// Last 8 KiB of the helper's stderr (NCCL's own output goes there).
    pub stderr_tail: String,
    /// Exit description of the helper (`exit 0`, `killed by signal 9 (SIGKILL)`…).
    pub exit: String,
    /// Milliseconds from spawn to verdict.
    pub elapsed_ms: u64,
    /// The helper's pid (= its process group).
    pub pid: i32,
    /// True when every process the attempt started was gone at the end: the helper's process group, and the
    /// processes that left the group (`setsid`) and were adopted by ncclenv as subreaper.
    pub group_gone: bool,
}

impl Attempt {
    /// An attempt of the helper started as `pid`.
    pub fn started(pid: i32) -> Attempt {
        Attempt {
            pid,
            ..Attempt::default()
        }
    }

    /// An attempt whose helper could not be started.
    pub fn not_started(why: String) -> Attempt {
        Attempt {
            ending: Ending::NotStarted(why),
            group_gone: true,
            ..Attempt::default()
        }
    }

    /// Handle one stdout line: a protocol message becomes an event (the `result` also the verdict), anything
    /// else stray output. Bounded: see [`MAX_EVENTS`], [`MAX_EVENT_BYTES`], [`MAX_JUNK`].
    pub fn take_line(&mut self, s: &str, start: Instant) {
        if s.is_empty() {
            return;
        }
        match HelperMsg::parse(s) {
            Some(m) => {
                if let HelperMsg::Result(r) = &m {
                    self.result = Some(r.clone());
                    self.elapsed_ms = start.elapsed().as_millis() as u64;
                }
                self.keep_event(m, s.len());
            }
            None => self.keep_junk(s),
        }
    }

    /// Keep `m` (its line `len` bytes long), dropping the oldest events beyond the bounds.
    fn keep_event(&mut self, m: HelperMsg, len: usize) {
        while !self.events.is_empty()
            && (self.events.len() >= MAX_EVENTS || self.event_bytes + len > MAX_EVENT_BYTES)
        {
            self.events.pop_front();
            self.event_bytes -= self.event_sizes.pop_front().unwrap_or(0);
            self.events_dropped += 1;
        }
        self.events.push_back(m);
        self.event_sizes.push_back(len);
        self.event_bytes += len;
    }

    /// Keep the start of a stray line, up to [`MAX_JUNK`] of them.
    fn keep_junk(&mut self, s: &str) {
        if self.junk.len() < MAX_JUNK {
            self.junk.push(s.chars().take(JUNK_CHARS).collect());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_bounded_under_a_flood() {
        let mut att = Attempt::default();
        let start = Instant::now();
        let line = r#"{"ev":"step","rank":0,"step":"load"}"#;
        for _ in 0..(MAX_EVENTS + 100) {
            att.take_line(line, start);
        }
        for _ in 0..(MAX_JUNK + 10) {
            att.take_line(&"x".repeat(10_000), start);
        }
        assert_eq!(att.events.len(), MAX_EVENTS);
        assert_eq!(att.events_dropped, 100);
        assert_eq!(att.junk.len(), MAX_JUNK);
        assert!(att.junk.iter().all(|j| j.chars().count() <= JUNK_CHARS));
    }

    #[test]
    fn event_bytes_are_bounded() {
        let mut att = Attempt::default();
        let start = Instant::now();
        let line = format!(
            r#"{{"ev":"step","step":"load","note":"{}"}}"#,
            "x".repeat(1 << 20)
        );
        for _ in 0..40 {
            att.take_line(&line, start);
        }
        assert!(att.event_bytes <= MAX_EVENT_BYTES);
        assert_eq!(att.events.len(), MAX_EVENT_BYTES / line.len());
        assert_eq!(att.events_dropped, 40 - att.events.len() as u64);
    }

    #[test]
    fn the_result_is_the_verdict() {
        let mut att = Attempt::default();
        att.take_line(
            r#"{"ev":"result","mode":"bootstrap","ok":true}"#,
            Instant::now(),
        );
        assert!(att.result.as_ref().is_some_and(|r| r.ok));
        assert_eq!(att.events.len(), 1);
        assert!(att.junk.is_empty());
    }
}
