//! Commands wrapped in a shell or a prefix program, read down to the simple command that starts the job.
//!
//! Public manifests start jobs as `["/bin/bash", "-c", "cd /workspace && torchrun …"]`, Compose files as
//! `sh -c "…"`, launch scripts as `env MASTER_ADDR=… nohup torchrun …`. [`unwrap`] reads such a command the way
//! the shell would run it, without running anything:
//!
//! * prefix programs are skipped: `exec`, `env [-i] [-u NAME] [VAR=value…]`, `nohup`, `time`, `nice`,
//!   `setsid`, `stdbuf`, `timeout DURATION`, `command`, `tini --`, `dumb-init`; leading `VAR=value` words
//!   of a shell command are assignments, exported to that command (POSIX "Simple Commands"), and count as
//!   the job's environment;
//! * `sh`/`bash`/`dash`/`zsh`/`ksh`/`ash`/`mksh` with `-c` (also clustered: `-lc`, `-ec`, `-xc`; `-o NAME`
//!   and `-O NAME` take a value) read the command string (the first argument that is not an option, as bash
//!   and dash read it). The string is cut into simple commands at the control operators `&&`, `||`, `;`, `&`,
//!   `|` and newlines (outside quotes and `$(…)`), `cd DIR` and other builtins are passed over, `export
//!   VAR=value` is remembered, and the first simple command in which `crate::launch_facts::detect` recognises a
//!   launcher is the job's (else the last one). Words are split by the `shlex` crate (POSIX quoting,
//!   backslashes, `#` comments);
//! * parameters are expanded from the environment the shell receives (and the string's own assignments):
//!   `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:=default}`; an unquoted expansion is split
//!   into words as the shell splits it. The words after the string are the positional parameters (`$0`
//!   first): `"$@"`, `$@`, `$*`, `"$*"`, `$1`…, `${N}`, `${N:-default}`, `$#` expand from them (POSIX 2.5.1,
//!   2.5.2). An unquoted `~`/`~/…` at a word's start or after `NAME=` is `HOME` (POSIX 2.6.1). Anything else
//!   — a command substitution `$(…)` or `` `…` ``, arithmetic, `$?`, `~user`, other `${…}` forms, a variable
//!   that is not set — is *unknown*: the word carries [`UNKNOWN`] around the text as written, and the
//!   launcher reading treats it as not known, never as a value;
//! * what a subshell `( … )`, a command of a multi-command pipeline, one run in the background (`&`) or a
//!   nested shell changes (`cd`, variables, exports, `set --`, `shift`) ends with it (POSIX 2.12, 2.9.3.1;
//!   bash(1) Pipelines); `cd DIR || true` is followed; a relative `cd` with `CDPATH` set goes where ncclenv
//!   cannot follow (unknown);
//! * a shell running a script file (`bash run.sh`) or sourcing one (`. env.sh`, `source env.sh`) does not
//!   read it: [`Unwrapped::script`] names the first such file.
//!
//! A string that does not split (an unclosed quote or `$(`) is a problem (a `launcher-argument` warning), and
//! the command is then read as written. Sources: POSIX.1-2017 Shell Command Language, 2.3 (token
//! recognition), 2.5 (parameters), 2.6.1 (tilde expansion), 2.6.2 (parameter expansion), 2.9.1 (simple
//! commands), 2.12 (shell execution environment); bash(1) `-c`, Pipelines.

use std::collections::BTreeMap;

// The marks of an expansion ncclenv cannot know live with what every reader shares (`crate::launch_facts`),
// so that readers below the shell can read a shell's words without importing it.
pub use crate::launch_facts::{display, is_unknown, join_dir, UNKNOWN};

/// Marks a word that `"$@"` with no positional parameters left empty: the word is removed (POSIX 2.5.2:
/// `"$@"` then expands to zero fields), the mark removed from any other word.
const DROP: char = '\u{1C}';

/// How deep shells inside shells are read (`sh -c "bash -c '…'"`).
const MAX_DEPTH: usize = 4;

/// What [`unwrap`] read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unwrapped {
    /// The simple command that starts the job, its words after quote removal and expansion (words holding
    /// [`UNKNOWN`] are not known). The command itself when nothing wraps it.
    pub argv: Vec<String>,
    /// Variables the shell or a prefix program exports to that command (`VAR=value cmd`, `env VAR=value`,
    /// `export VAR=value`), in order; a value holding [`UNKNOWN`] is not known.
    pub assignments: Vec<(String, String)>,
    /// True when `env -i` starts the command with an empty environment (only [`Unwrapped::assignments`]).
    pub cleared: bool,
    /// Names `env -u NAME` removes from the command's environment.
    pub unset: Vec<String>,
    /// What was read through, outermost first (`env`, `sh -c`, `nohup`, …); empty when the command is read
    /// as written.
    pub via: Vec<String>,
    /// The script file a shell runs (`bash run.sh`), which ncclenv does not read.
    pub script: Option<String>,
    /// Strings that could not be read, one sentence each.
    pub problems: Vec<String>,
    /// The working directory the command starts in when a wrapper changes it (`cd DIR`, `pushd DIR`,
    /// `env -C DIR`; bash(1) `cd`, coreutils env(1) `--chdir`): absolute, or relative to ncclenv's own; it
    /// holds [`UNKNOWN`] when it is not known (`cd -`, `cd "$(…)"`, `popd`, a relative `cd` with `CDPATH`
    /// set). `None` when unchanged.
    pub cwd: Option<String>,
}

impl Unwrapped {
    /// True when a shell's `-c` string or a prefix program was read (the job's command is not `argv[0]`).
    pub fn wrapped(&self) -> bool {
        !self.via.is_empty()
    }
}

/// Read `argv` down to the simple command that starts the job (see the module docs). `env` looks up the
/// environment the command receives (the shell expands from it). Never fails: what cannot be read is in
/// [`Unwrapped::problems`] and the command is then taken as written.
pub fn unwrap(argv: &[String], env: &dyn Fn(&str) -> Option<String>) -> Unwrapped {
    let mut st = State {
        env,
        locals: BTreeMap::new(),
        cleared: false,
        exports: Vec::new(),
        via: Vec::new(),
        script: None,
        problems: Vec::new(),
        cwd: None,
        positional: Vec::new(),
        passes_all: std::cell::Cell::new(false),
    };
    let mut cmd = command(argv.to_vec(), false, &mut st, 0);
    place(&mut cmd, &st);
    let mut assignments = cmd.exports;
    assignments.extend(cmd.assigns);
    Unwrapped {
        argv: cmd.words,
        assignments,
        cleared: cmd.cleared,
        unset: cmd.unset,
        via: st.via,
        script: st.script,
        problems: st.problems,
        cwd: cmd.cwd,
    }
}

/// Give `cmd` the working directory it starts in and the variables exported to it: what an inner shell
/// already found, else the shell's current ones (`State::cwd`, `State::exports`), changed by `env -C DIR`.
fn place(cmd: &mut Cmd, st: &State) {
    if cmd.placed {
        return;
    }
    cmd.placed = true;
    cmd.exports = st.exports.clone();
    cmd.cwd = match cmd.chdir.take() {
        Some(d) => Some(join_dir(st.cwd.as_deref(), &d)),
        None => st.cwd.clone(),
    };
}

/// `cd`/`pushd`/`popd` with `args` (after the builtin's name) change the shell's directory: `cd` alone goes
/// to `$HOME`; `cd -`, `popd` and a `pushd` without a directory go where ncclenv cannot follow (unknown).
fn change_dir(builtin: &str, args: &[String], st: &mut State) {
    let dir = args
        .iter()
        .find(|a| !(a.starts_with('-') && a.len() > 1) || a.as_str() == "-");
    let next = match (builtin, dir.map(String::as_str)) {
        ("popd", _) | (_, Some("-")) | ("pushd", None) => UNKNOWN.to_string(),
        (_, Some(d)) if searches_cdpath(d, st) => UNKNOWN.to_string(),
        (_, Some(d)) => join_dir(st.cwd.as_deref(), d),
        (_, None) => match st.lookup("HOME") {
            Some(Some(h)) => h,
            _ => UNKNOWN.to_string(),
        },
    };
    st.cwd = Some(next);
}

/// True when `cd dir` looks `dir` up in a `CDPATH` the shell has (POSIX `cd` step 5: a relative operand whose
/// first component is not `.` or `..`): which entry holds it is not known without the files. `cd DIR ||
/// true` is followed as if `cd` succeeded (ncclenv cannot know either way).
fn searches_cdpath(dir: &str, st: &State) -> bool {
    let first = dir.split('/').next().unwrap_or(dir);
    let cdpath = match st.lookup("CDPATH") {
        Some(Some(v)) => !v.is_empty(),
        Some(None) => true,
        None => false,
    };
    cdpath && !dir.starts_with('/') && !matches!(first, "." | "..")
}

/// The reading's state: the environment, the shell's own variables, what was exported.
struct State<'e> {
    env: &'e dyn Fn(&str) -> Option<String>,
    /// Variables set in the string (`export A=b`, `A=b`); `None` when the value is not known.
    locals: BTreeMap<String, Option<String>>,
    /// The shell itself was started by `env -i`: the environment holds only its assignments.
    cleared: bool,
    exports: Vec<(String, String)>,
    via: Vec<String>,
    script: Option<String>,
    problems: Vec<String>,
    /// The shell's working directory after its `cd`s (`None`: ncclenv's own).
    cwd: Option<String>,
    /// The positional parameters of the shell whose string is being read, `$0` first (POSIX 2.5.1; `sh -c
    /// STRING NAME ARG…`: NAME is `$0`, the ARGs `$1`…); empty outside a shell.
    positional: Vec<String>,
    /// Set when the string expands `$@` or `$*` (it passes its positional parameters on itself).
    passes_all: std::cell::Cell<bool>,
}

impl State<'_> {
    /// A variable's value as the shell sees it: `Some(None)` when set but not known, `None` when unset.
    fn lookup(&self, name: &str) -> Option<Option<String>> {
        if let Some(v) = self.locals.get(name) {
            return Some(v.clone());
        }
        if self.cleared {
            return None;
        }
        (self.env)(name).map(Some)
    }
}

/// One simple command: its words, the assignments exported to it, and `env`'s effects.
#[derive(Default)]
struct Cmd {
    words: Vec<String>,
    assigns: Vec<(String, String)>,
    cleared: bool,
    unset: Vec<String>,
    /// `env -C DIR`: the directory the command starts in, relative to the shell's.
    chdir: Option<String>,
    /// Where the command starts ([`place`]).
    cwd: Option<String>,
    /// What the shell has exported when the command starts ([`place`]).
    exports: Vec<(String, String)>,
    /// True once [`place`] gave the command its directory and exports.
    placed: bool,
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// A shell variable name (POSIX: letters, digits and `_`, not starting with a digit).
fn is_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f == '_' || f.is_ascii_alphabetic())
        && c.all(|x| x == '_' || x.is_ascii_alphanumeric())
}

/// `NAME=value` → the pair, when NAME is a variable name.
fn assignment(word: &str) -> Option<(String, String)> {
    let (n, v) = word.split_once('=')?;
    is_name(n).then(|| (n.to_string(), v.to_string()))
}

/// A command read through its prefixes and, when it is a shell with `-c`, through its string.
fn command(words: Vec<String>, in_shell: bool, st: &mut State, depth: usize) -> Cmd {
    let mut cmd = strip_prefixes(words, in_shell, st);
    let Some(prog) = cmd.words.first().cloned() else {
        return cmd;
    };
    let base = basename(&prog).to_string();
    if depth >= MAX_DEPTH || !is_shell(&base) {
        return cmd;
    }
    match shell_args(&cmd.words[1..]) {
        ShellArgs::Command(s, positional) => {
            st.via.push(format!("{base} -c"));
            // The shell's `cd`s and variables die with it (it is a process of its own): a `cd` inside
            // `sh -c 'cd /w' && torchrun` does not move torchrun; a launcher inside the string is placed
            // where it starts before they are undone.
            let outer = Saved::of(st);
            for (n, v) in &cmd.assigns {
                let known = (!v.contains(UNKNOWN)).then(|| v.clone());
                st.locals.insert(n.clone(), known);
            }
            st.cleared |= cmd.cleared;
            if let Some(d) = cmd.chdir.take() {
                st.cwd = Some(join_dir(st.cwd.as_deref(), &d));
            }
            let mut params = positional.clone();
            if params.is_empty() {
                params.push(prog.clone());
            }
            st.positional = params;
            let outer_passes = st.passes_all.replace(false);
            let read = read_string(&s, st, depth + 1);
            outer.restore(st);
            let passes_all = st.passes_all.replace(outer_passes);
            if let Some(mut inner) = read {
                // No launcher in the string and no `$@`/`$*` in it: its positional parameters (after
                // `$0`) may be the launcher's arguments a wrapper passes on; they are read after the
                // command's own words, as a command ncclenv does not recognise is read.
                if !passes_all && crate::launch_facts::detect(&inner.words).is_none() {
                    inner.words.extend(positional.into_iter().skip(1));
                }
                let mut assigns = std::mem::take(&mut cmd.assigns);
                assigns.append(&mut inner.assigns);
                inner.assigns = assigns;
                inner.cleared |= cmd.cleared;
                inner.unset.append(&mut cmd.unset);
                return inner;
            }
            cmd
        }
        ShellArgs::Script(f) => {
            st.script = Some(f);
            cmd
        }
        ShellArgs::Stdin => cmd,
    }
}

/// True when `base` (a program's file name) is a POSIX-family shell ncclenv reads `-c` strings of.
pub fn is_shell(base: &str) -> bool {
    matches!(
        base,
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "ash" | "mksh"
    )
}

/// What a shell's arguments run.
#[derive(Debug, PartialEq, Eq)]
enum ShellArgs {
    /// `-c STRING`, and the shell's positional parameters after it (`$0` first).
    Command(String, Vec<String>),
    /// A script file.
    Script(String),
    /// Commands from standard input (no `-c`, no file).
    Stdin,
}

/// A shell's arguments (after its name): options (`-lc`, `-e`, `-o pipefail`, `--login`, `+x`), then with
/// `-c` the command string (the first word that is not an option), else the script file.
fn shell_args(args: &[String]) -> ShellArgs {
    let mut with_c = false;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--" || a == "-" {
            i += 1;
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            if matches!(long, "rcfile" | "init-file") {
                i += 1;
            }
        } else if a.len() > 1 && (a.starts_with('-') || a.starts_with('+')) {
            let letters = &a[1..];
            with_c |= a.starts_with('-') && letters.contains('c');
            // `-o NAME` (set -o) and bash's `-O NAME` (shopt) take the next word.
            i += letters.matches(['o', 'O']).count();
        } else {
            break;
        }
        i += 1;
    }
    match args.get(i) {
        Some(w) if with_c => ShellArgs::Command(w.clone(), args[i + 1..].to_vec()),
        Some(w) => ShellArgs::Script(w.clone()),
        None => ShellArgs::Stdin,
    }
}

/// Skip prefix programs and (in a shell) leading assignments; what remains is the command.
fn strip_prefixes(mut words: Vec<String>, in_shell: bool, st: &mut State) -> Cmd {
    let mut cmd = Cmd::default();
    let mut i = 0;
    loop {
        if in_shell {
            while let Some((n, v)) = words.get(i).and_then(|w| assignment(w)) {
                cmd.assigns.push((n, v));
                i += 1;
            }
        }
        let Some(w) = words.get(i) else { break };
        let base = basename(w).to_string();
        let Some(skip) = prefix_len(&base, &words[i + 1..], &mut cmd) else {
            break;
        };
        if i + 1 + skip >= words.len() {
            // A prefix program with no command after it (`env -0`) is the command itself.
            break;
        }
        st.via.push(base.clone());
        i += 1 + skip;
        if base == "env" {
            // env's own assignments follow its options.
            while let Some((n, v)) = words.get(i).and_then(|w| assignment(w)) {
                cmd.assigns.push((n, v));
                i += 1;
            }
        }
    }
    cmd.words = words.split_off(i.min(words.len()));
    cmd
}

/// How many option words prefix program `base` takes before its command (`rest` follows its name), or
/// `None` when `base` is not a prefix program. `env -i` and `env -u NAME` are recorded in `cmd`.
fn prefix_len(base: &str, rest: &[String], cmd: &mut Cmd) -> Option<usize> {
    // Options taking a value, per program (coreutils, util-linux, bash's `exec` and `time`).
    let valued: &[&str] = match base {
        "exec" => &["-a"],
        "env" => &["-u", "-C", "-S", "--unset", "--chdir", "--split-string"],
        "nohup" | "command" | "dumb-init" | "tini" | "setsid" => &[],
        "time" => &["-f", "-o", "--format", "--output"],
        "nice" => &["-n", "--adjustment"],
        "stdbuf" => &["-i", "-o", "-e"],
        "timeout" => &["-s", "-k", "--signal", "--kill-after"],
        _ => return None,
    };
    let mut i = 0;
    while let Some(a) = rest.get(i) {
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') || a == "-" && base != "env" {
            break;
        }
        if base == "env" && (a == "-i" || a == "-" || a == "--ignore-environment") {
            cmd.cleared = true;
        }
        if base == "env" && (a == "-u" || a == "--unset") {
            if let Some(n) = rest.get(i + 1) {
                cmd.unset.push(n.clone());
            }
        }
        if let Some(n) = a.strip_prefix("--unset=") {
            cmd.unset.push(n.to_string());
        }
        if base == "env" && (a == "-C" || a == "--chdir") {
            cmd.chdir = rest.get(i + 1).cloned();
        }
        if let Some(d) = a.strip_prefix("--chdir=").filter(|_| base == "env") {
            cmd.chdir = Some(d.to_string());
        }
        if valued.contains(&a.as_str()) {
            i += 1;
        }
        i += 1;
    }
    if base == "timeout" && rest.get(i).is_some() {
        i += 1; // the duration
    }
    Some(i)
}

/// Read a `-c` string: its simple commands in order; the first with a launcher, else the last one that is
/// not a builtin. `None` (with a problem recorded) when the string does not split.
fn read_string(s: &str, st: &mut State, depth: usize) -> Option<Cmd> {
    let pieces = match cut(s) {
        Ok(v) => v,
        Err(why) => {
            st.problems.push(format!(
                "the command string of {} does not split ({why}); its launcher arguments were not read",
                st.via.last().map_or("the shell", String::as_str)
            ));
            return None;
        }
    };
    let mut last: Option<Cmd> = None;
    let mut launcher: Option<(Cmd, Saved, Option<String>)> = None;
    let mut second: Option<String> = None;
    // The shell's state at each open `(`: what its subshell changes is undone at the `)` (POSIX 2.12:
    // "changes made to the subshell environment shall not affect the shell environment").
    let mut subshells: Vec<Saved> = Vec::new();
    let mut groups: Vec<(Saved, bool)> = Vec::new();
    for (k, piece) in pieces.iter().enumerate() {
        let text = match piece {
            Piece::Open => {
                subshells.push(Saved::of(st));
                continue;
            }
            Piece::Close => {
                if let Some(saved) = subshells.pop() {
                    saved.restore(st);
                }
                continue;
            }
            Piece::Pipe | Piece::Background | Piece::Sep => continue,
            Piece::Text(t) => t,
        };
        // A `{ …; }` group in a pipeline or the background is a subshell as a whole: saved at its `{`,
        // put back at its `}` (the first word of a command's text) when a `|` or `&` joins it.
        let first = text.split_whitespace().next();
        if first == Some("{") {
            groups.push((Saved::of(st), in_subshell(&pieces, k)));
        }
        if first == Some("}") {
            if let Some((saved, piped_before)) = groups.pop() {
                if piped_before || in_subshell(&pieces, k) {
                    saved.restore(st);
                }
            }
        }
        // Each command of a pipeline runs in a subshell (bash(1) "Pipelines": "Each command in a
        // multi-command pipeline … is executed in its own subshell"), and so does one run in the
        // background (POSIX 2.9.3.1): its `cd` is not the next one's.
        let element = (first != Some("{") && in_subshell(&pieces, k)).then(|| Saved::of(st));
        let found = simple(text, st, depth);
        if let Some(saved) = element {
            saved.restore(st);
        }
        match found {
            Some(cmd) if crate::launch_facts::detect(&cmd.words).is_some() => match &launcher {
                // The first launcher is the one read; the shell's state as it left it is kept for it.
                None => launcher = Some((cmd, Saved::of(st), st.script.clone())),
                Some(_) => {
                    second.get_or_insert_with(|| launcher_words(&cmd));
                }
            },
            Some(cmd) if launcher.is_none() => last = Some(cmd),
            _ => {}
        }
    }
    let Some((cmd, saved, script)) = launcher else {
        return last;
    };
    saved.restore(st);
    st.script = script;
    if let Some(second) = second {
        // Break-it finding: `torchrun --standalone warm.py && torchrun --nnodes=2 … train.py` was decided as
        // the first run alone, without a word about the second.
        st.problems.push(format!(
            "the command string of {} runs a second launcher ({second}) after {}: ncclenv reads the first only; \
             where the second is the job across nodes, name its master (NCCLENV_PEER=<master host>) or start it \
             on its own",
            st.via.last().map_or("the shell", String::as_str),
            launcher_words(&cmd)
        ));
    }
    Some(cmd)
}

/// A launcher command's first two words as shown in a message (`torchrun --nnodes=2 …`).
fn launcher_words(cmd: &Cmd) -> String {
    let shown: Vec<String> = cmd.words.iter().take(2).map(|w| display(w)).collect();
    let more = if cmd.words.len() > 2 { " …" } else { "" };
    format!("{}{more}", shown.join(" "))
}

/// True when the command at `pieces[k]` runs in a subshell of its own: an element of a multi-command
/// pipeline (a `|` before or after it, across the `(`/`)` of a group) or a command run in the background
/// (`&` after it).
fn in_subshell(pieces: &[Piece], k: usize) -> bool {
    let after = pieces[k + 1..].iter().find(|p| **p != Piece::Close);
    let before = pieces[..k].iter().rev().find(|p| **p != Piece::Open);
    matches!(after, Some(Piece::Pipe | Piece::Background)) || before == Some(&Piece::Pipe)
}

/// One simple command's text of a shell string, expanded and read: the command, or `None` for a builtin,
/// assignments alone (recorded in `st`) or text that does not split (a problem recorded).
fn simple(text: &str, st: &mut State, depth: usize) -> Option<Cmd> {
    let text = expand(text, st);
    let Some(mut words) = shlex::split(&text) else {
        st.problems.push(
            "a command of the shell's string does not split (an unclosed quote); not read".into(),
        );
        return None;
    };
    words.retain(|w| w.is_empty() || w.chars().any(|c| c != DROP));
    for w in &mut words {
        w.retain(|c| c != DROP);
    }
    strip_redirections(&mut words);
    while words
        .first()
        .is_some_and(|w| RESERVED.contains(&w.as_str()))
    {
        words.remove(0);
    }
    if words.is_empty() || builtin(&words, st) {
        return None;
    }
    let mut cmd = command(words, true, st, depth);
    place(&mut cmd, st);
    if !cmd.words.is_empty() {
        return Some(cmd);
    }
    // Assignments alone (`A=b`): shell variables. A variable the shell received in its environment, or
    // exported earlier, stays exported with its new value (POSIX 2.9.1 and `export`: "the variables in the
    // environment are marked for export"), so `MASTER_ADDR=m; torchrun` gives torchrun `m`.
    for (n, v) in cmd.assigns {
        let exported = st.exports.iter().any(|(e, _)| *e == n)
            || (!st.cleared && !st.locals.contains_key(&n) && (st.env)(&n).is_some());
        if exported {
            st.exports.push((n.clone(), v.clone()));
        }
        let known = (!v.contains(UNKNOWN)).then_some(v);
        st.locals.insert(n, known);
    }
    None
}

/// What a subshell, a pipeline's command or a shell inside the shell may change of the reading's state,
/// saved to be put back when it ends.
struct Saved {
    cwd: Option<String>,
    locals: BTreeMap<String, Option<String>>,
    exports: Vec<(String, String)>,
    cleared: bool,
    positional: Vec<String>,
}

impl Saved {
    fn of(st: &State) -> Saved {
        Saved {
            cwd: st.cwd.clone(),
            locals: st.locals.clone(),
            exports: st.exports.clone(),
            cleared: st.cleared,
            positional: st.positional.clone(),
        }
    }
    fn restore(self, st: &mut State) {
        st.cwd = self.cwd;
        st.locals = self.locals;
        st.exports = self.exports;
        st.cleared = self.cleared;
        st.positional = self.positional;
    }
}

/// Remove redirections (`2>&1`, `>log`, `> log`, `>>log`, `<in`, `&>log`, `2>/dev/null`): they are not
/// arguments of the command. A redirection operator written alone takes the next word as its target.
fn strip_redirections(words: &mut Vec<String>) {
    let mut out = Vec::with_capacity(words.len());
    let mut it = std::mem::take(words).into_iter();
    while let Some(w) = it.next() {
        let rest = w.trim_start_matches(|c: char| c.is_ascii_digit());
        let op = ["&>>", "&>", ">>", ">&", "<&", ">|", "<>", ">", "<"]
            .iter()
            .find(|op| rest.starts_with(**op));
        match op {
            Some(op) if rest.len() == op.len() => {
                it.next();
            }
            Some(_) => {}
            None => out.push(w),
        }
    }
    *words = out;
}

/// Reserved words that may start a simple command's text (`if …; then torchrun …; fi`).
const RESERVED: &[&str] = &[
    "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}",
];

/// Builtins and commands that run no job (`cd DIR`, `set -e`, `export A=b`, …). `export` and `declare -x`
/// record their assignments. True when `words` is one of them.
fn builtin(words: &[String], st: &mut State) -> bool {
    let first = words[0].as_str();
    match first {
        "export" | "declare" | "typeset" | "readonly" | "local" => {
            let exported = first == "export" || words.iter().any(|w| w == "-x");
            for (n, v) in words[1..].iter().filter_map(|w| assignment(w)) {
                let known = (!v.contains(UNKNOWN)).then(|| v.clone());
                st.locals.insert(n.clone(), known);
                if exported {
                    st.exports.push((n, v));
                }
            }
            true
        }
        "cd" | "pushd" | "popd" => {
            change_dir(first, &words[1..], st);
            true
        }
        "set" | "shift" => {
            set_positional(words, st);
            true
        }
        "source" | "." => {
            // The file runs in this shell and is not read: a launcher or an `export` in it is not seen.
            // The first one is named, as a script a shell runs is (doctor says so; break-it finding).
            if st.script.is_none() {
                st.script = words.get(1).cloned();
            }
            true
        }
        "shopt" | "ulimit" | "umask" | "echo" | "printf" | "true" | "false" | ":" | "trap"
        | "wait" | "sleep" | "mkdir" | "unset" | "hostname" | "nvidia-smi" | "pip" | "pip3"
        | "ls" | "cat" | "fi" | "done" => true,
        _ => false,
    }
}

/// `set [OPTION…] -- ARG…` makes the ARGs the positional parameters, `shift [N]` drops the first N (POSIX
/// 2.14 `set`, `shift`); an N not known makes them one unknown word. Other `set`s change none.
fn set_positional(words: &[String], st: &mut State) {
    let Some(zero) = st.positional.first().cloned() else {
        return;
    };
    if words[0] == "set" {
        if let Some(at) = words.iter().position(|w| w == "--") {
            st.positional = std::iter::once(zero)
                .chain(words[at + 1..].iter().cloned())
                .collect();
        }
        return;
    }
    let n = words.get(1).map_or(Some(1), |w| w.parse::<usize>().ok());
    match n {
        Some(n) if n < st.positional.len() => {
            st.positional.drain(1..=n);
        }
        Some(_) => {} // `shift` past the last one fails and changes nothing.
        None => st.positional = vec![zero, format!("{UNKNOWN}$@{UNKNOWN}")],
    }
}

/// Quote state while scanning shell text.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Q {
    None,
    Single,
    Double,
}

/// A piece of a shell string as [`cut`] finds it.
#[derive(Debug, PartialEq, Eq)]
enum Piece {
    /// The text of one simple command.
    Text(String),
    /// `(`: a subshell starts (POSIX 2.9.4 "Grouping Commands").
    Open,
    /// `)`: it ends.
    Close,
    /// `|` or bash's `|&`: the commands on both sides are one pipeline's.
    Pipe,
    /// `&` after a command: it runs in the background, in a subshell (POSIX 2.9.3.1).
    Background,
    /// `;`, `&&`, `||`, `;;`, a newline.
    Sep,
}

/// Cut shell text into the text of its simple commands at unquoted control operators (`;`, `&`, `|`,
/// newline, `(`, `)`), keeping `$(…)`, `` `…` `` and quoted text whole and dropping `#` comments. An
/// unclosed quote, `$(` or backquote is an error.
fn cut(s: &str) -> Result<Vec<Piece>, String> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut q, mut depth, mut tick) = (Q::None, 0usize, false);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let word_start = cur.is_empty() || cur.ends_with(char::is_whitespace);
        match (q, c) {
            (Q::Single, '\'') => q = Q::None,
            (Q::Single, _) => {}
            (_, '\\') => {
                cur.push(c);
                if let Some(n) = chars.get(i + 1) {
                    cur.push(*n);
                }
                i += 2;
                continue;
            }
            (Q::None, '\'') => q = Q::Single,
            (Q::None, '"') => q = Q::Double,
            (Q::Double, '"') if depth == 0 && !tick => q = Q::None,
            (_, '`') => tick = !tick,
            (_, '$') if chars.get(i + 1) == Some(&'(') => {
                cur.push_str("$(");
                depth += 1;
                i += 2;
                continue;
            }
            // A `(` inside a substitution opens a group that its own `)` closes: `$((RANK+1))`,
            // `$(f (x))` stay one word (POSIX 2.6.3/2.6.4: the substitution ends at its matching `)`).
            (_, '(') if depth > 0 && q != Q::Single => depth += 1,
            (_, ')') if depth > 0 => depth -= 1,
            (Q::None, '#') if depth == 0 && !tick && word_start => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            // `2>&1`, `<&0`, `&>log`: redirections, not the `&` operator.
            (Q::None, '&')
                if matches!(cur.chars().last(), Some('>' | '<'))
                    || chars.get(i + 1) == Some(&'>') => {}
            (Q::None, ';' | '&' | '|' | '\n' | '(' | ')') if depth == 0 && !tick => {
                if !cur.trim().is_empty() {
                    out.push(Piece::Text(std::mem::take(&mut cur)));
                }
                cur.clear();
                let next = chars.get(i + 1).copied();
                let (piece, len) = match (c, next) {
                    ('(', _) => (Piece::Open, 1),
                    (')', _) => (Piece::Close, 1),
                    ('|', Some('|')) | ('&', Some('&')) => (Piece::Sep, 2),
                    ('|', Some('&')) => (Piece::Pipe, 2),
                    ('|', _) => (Piece::Pipe, 1),
                    ('&', _) => (Piece::Background, 1),
                    _ => (Piece::Sep, 1),
                };
                out.push(piece);
                i += len;
                continue;
            }
            _ => {}
        }
        cur.push(c);
        i += 1;
    }
    if q != Q::None {
        return Err("an unclosed quote".into());
    }
    if depth > 0 || tick {
        return Err("an unclosed command substitution".into());
    }
    if !cur.trim().is_empty() {
        out.push(Piece::Text(cur));
    }
    Ok(out)
}

/// A parameter expansion: its value, or the text as written when it cannot be known.
enum Expansion {
    Known(String),
    /// `$@` (and unquoted `$*`): one field per positional parameter, none when there are none.
    Fields(Vec<String>),
    Unknown(String),
    /// `$*`: joined (inside double quotes), else the fields.
    Star(String, Vec<String>),
    /// A `$` that starts no expansion.
    Dollar,
}

/// Expand the parameters of one simple command's text (outside single quotes), re-quoting each result so
/// that `shlex` splits it as the shell would: an unquoted value into words at whitespace, a double-quoted
/// one whole; an unknown expansion becomes its text between [`UNKNOWN`] marks.
fn expand(seg: &str, st: &State) -> String {
    let chars: Vec<char> = seg.chars().collect();
    let mut out = String::new();
    let mut quote = Q::None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match (quote, c) {
            (Q::Single, '\'') => quote = Q::None,
            (Q::None, '\'') => quote = Q::Single,
            (Q::None, '"') => quote = Q::Double,
            (Q::Double, '"') => quote = Q::None,
            (Q::None | Q::Double, '\\') => {
                out.push(c);
                if let Some(n) = chars.get(i + 1) {
                    out.push(*n);
                }
                i += 2;
                continue;
            }
            (Q::None, '~') if tilde_may_start(&chars, i) => {
                let (len, e) = tilde(&chars[i..], st);
                match e {
                    Expansion::Known(v) => push_quoted(&mut out, &v, false),
                    _ => {
                        let written: String = chars[i..i + len].iter().collect();
                        push_quoted(&mut out, &format!("{UNKNOWN}{written}{UNKNOWN}"), false);
                    }
                }
                i += len;
                continue;
            }
            (Q::None | Q::Double, '$' | '`') => {
                let (len, e) = if c == '`' {
                    backquoted(&chars[i..])
                } else {
                    parameter(&chars[i..], st)
                };
                match e {
                    Expansion::Dollar => out.push('$'),
                    Expansion::Known(v) => push_value(&mut out, &v, quote == Q::Double),
                    Expansion::Fields(v) => push_fields(&mut out, &v, quote == Q::Double),
                    Expansion::Star(joined, _) if quote == Q::Double => {
                        push_value(&mut out, &joined, true)
                    }
                    Expansion::Star(_, v) => push_fields(&mut out, &v, false),
                    Expansion::Unknown(t) => {
                        let marked = format!("{UNKNOWN}{t}{UNKNOWN}");
                        push_quoted(&mut out, &marked, quote == Q::Double);
                    }
                }
                i += len.max(1);
                continue;
            }
            _ => {}
        }
        out.push(c);
        i += 1;
    }
    out
}

/// Append a known value: inside double quotes escaped for them; outside, one single-quoted word per
/// whitespace-separated field (the shell's field splitting with the default IFS).
fn push_value(out: &mut String, v: &str, in_double: bool) {
    if in_double {
        push_quoted(out, v, true);
        return;
    }
    let fields: Vec<&str> = v.split_whitespace().collect();
    for (k, f) in fields.iter().enumerate() {
        if k > 0 {
            out.push(' ');
        }
        push_quoted(out, f, false);
    }
}

/// Append `$@`'s fields: inside double quotes each one word (the quotes closed and opened again between
/// them; none at all gives [`DROP`], so that `"$@"` alone is no word), outside split as values are (POSIX
/// 2.5.2: `"$@"` expands to `"$1" "$2" …`).
fn push_fields(out: &mut String, fields: &[String], in_double: bool) {
    if in_double && fields.is_empty() {
        out.push(DROP);
    }
    for (k, f) in fields.iter().enumerate() {
        if k > 0 {
            out.push_str(if in_double { "\" \"" } else { " " });
        }
        push_value(out, f, in_double);
    }
}

/// Append text as one literal piece: escaped for double quotes, or single-quoted (`'` as `'\''`).
fn push_quoted(out: &mut String, v: &str, in_double: bool) {
    if in_double {
        for ch in v.chars() {
            if matches!(ch, '"' | '\\' | '$' | '`') {
                out.push('\\');
            }
            out.push(ch);
        }
    } else {
        out.push('\'');
        out.push_str(&v.replace('\'', "'\\''"));
        out.push('\'');
    }
}

/// True when the unquoted `~` at `chars[i]` starts a word, or follows the `=` of an assignment word
/// (`NAME=~/x`): where POSIX 2.6.1 expands a tilde-prefix.
fn tilde_may_start(chars: &[char], i: usize) -> bool {
    let start = chars[..i]
        .iter()
        .rposition(|c| c.is_whitespace())
        .map_or(0, |p| p + 1);
    let escaped = start >= 2 && chars[start - 2] == '\\';
    if escaped {
        return false;
    }
    let before: String = chars[start..i].iter().collect();
    before.is_empty() || before.strip_suffix('=').is_some_and(is_name)
}

/// The tilde-prefix at `chars[0] == '~'` (up to the first `/` or the word's end; POSIX 2.6.1): `~` alone is
/// `HOME` as the shell has it (its environment and the string's own assignments; unknown when unset), `~user`
/// (and bash's `~+`, `~-`) unknown; a prefix with a quote, a backslash or a `$` is no tilde-prefix and
/// stays a literal `~`. Returns the length read and the expansion.
fn tilde(chars: &[char], st: &State) -> (usize, Expansion) {
    let len = chars
        .iter()
        .position(|c| *c == '/' || c.is_whitespace())
        .unwrap_or(chars.len());
    if chars[1..len].iter().any(|c| "'\"\\$`".contains(*c)) {
        return (1, Expansion::Known("~".into()));
    }
    match (len, st.lookup("HOME")) {
        (1, Some(Some(home))) => (1, Expansion::Known(home)),
        _ => (len, Expansion::Unknown(String::new())),
    }
}

/// `` `…` ``: always unknown. Returns the length read and the expansion.
fn backquoted(chars: &[char]) -> (usize, Expansion) {
    let end = chars[1..]
        .iter()
        .position(|c| *c == '`')
        .map_or(chars.len(), |p| p + 2);
    (end, Expansion::Unknown(chars[..end].iter().collect()))
}

/// The expansion starting at `chars[0] == '$'`: its length and value.
fn parameter(chars: &[char], st: &State) -> (usize, Expansion) {
    let text = |n: usize| chars[..n.min(chars.len())].iter().collect::<String>();
    match chars.get(1) {
        Some('(') => {
            let n = closing(chars, 1, '(', ')');
            (n, Expansion::Unknown(text(n)))
        }
        Some('{') => {
            let n = closing(chars, 1, '{', '}');
            let inner: String = chars[2..n.saturating_sub(1).max(2)].iter().collect();
            (n, braced(&inner, st, text(n)))
        }
        Some(c) if *c == '_' || c.is_ascii_alphabetic() => {
            let n = 1 + chars[1..]
                .iter()
                .take_while(|c| **c == '_' || c.is_ascii_alphanumeric())
                .count();
            let name = text(n)[1..].to_string();
            (n, variable(&name, st, text(n)))
        }
        Some(c) if c.is_ascii_digit() || "@*#".contains(*c) => (2, special(*c, st)),
        Some(c) if "?$!-".contains(*c) => (2, Expansion::Unknown(text(2))),
        _ => (1, Expansion::Dollar),
    }
}

/// The length up to and including the bracket that closes the one at `open_at` (nesting counted); the
/// whole rest when it does not close.
fn closing(chars: &[char], open_at: usize, open: char, close: char) -> usize {
    let mut depth = 0usize;
    for (k, c) in chars.iter().enumerate().skip(open_at) {
        if *c == open {
            depth += 1;
        } else if *c == close {
            depth -= 1;
            if depth == 0 {
                return k + 1;
            }
        }
    }
    chars.len()
}

/// `$N` (a digit), `$@`, `$*`, `$#` from the shell's positional parameters (POSIX 2.5.1, 2.5.2): `$N`
/// beyond the last one is empty, `$*` (quoted) joins them with spaces (the first character of the default
/// IFS), `$@` and unquoted `$*` are fields ([`push_fields`]).
fn special(c: char, st: &State) -> Expansion {
    let args = st.positional.get(1..).unwrap_or_default();
    match c {
        '@' | '*' => {
            st.passes_all.set(true);
            if c == '*' {
                return Expansion::Star(args.join(" "), args.to_vec());
            }
            Expansion::Fields(args.to_vec())
        }
        '#' => Expansion::Known(args.len().to_string()),
        _ => positional(&c.to_string(), st),
    }
}

/// Positional parameter `digits` (`1`, `10` from `${10}`): its value, empty when beyond the last.
fn positional(digits: &str, st: &State) -> Expansion {
    let v = digits
        .parse::<usize>()
        .ok()
        .and_then(|n| st.positional.get(n));
    Expansion::Known(v.cloned().unwrap_or_default())
}

/// A variable's value, or unknown (not set, or set to something not known).
fn variable(name: &str, st: &State, written: String) -> Expansion {
    match st.lookup(name) {
        Some(Some(v)) => Expansion::Known(v),
        _ => Expansion::Unknown(written),
    }
}

/// `${NAME}`, `${NAME:-word}`, `${NAME-word}`, `${NAME:=word}`, `${NAME=word}` (a `word` without
/// expansions or quotes); any other form is unknown.
fn braced(inner: &str, st: &State, written: String) -> Expansion {
    if is_name(inner) {
        return variable(inner, st, written);
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match inner {
        "@" => return special('@', st),
        "*" => return special('*', st),
        "#" => return special('#', st),
        _ if digits(inner) => return positional(inner, st),
        _ => {}
    }
    let name_len = inner
        .find(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
        .unwrap_or(inner.len());
    let (name, rest) = inner.split_at(name_len);
    let (colon, word) = match rest.strip_prefix(':') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let Some(word) = word.strip_prefix('-').or_else(|| word.strip_prefix('=')) else {
        return Expansion::Unknown(written);
    };
    if !(is_name(name) || digits(name)) || word.contains(['$', '`', '\'', '"', '\\']) {
        return Expansion::Unknown(written);
    }
    let value = if digits(name) {
        name.parse::<usize>()
            .ok()
            .and_then(|n| st.positional.get(n))
            .map(|v| Some(v.clone()))
    } else {
        st.lookup(name)
    };
    match value {
        Some(Some(v)) if !(colon && v.is_empty()) => Expansion::Known(v),
        Some(None) => Expansion::Unknown(written),
        _ => Expansion::Known(word.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| m.get(k).cloned()
    }
    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| w.to_string()).collect()
    }
    fn un(argv: &[&str], env: &[(&str, &str)]) -> Unwrapped {
        unwrap(&words(argv), &env_of(env))
    }

    #[test]
    fn a_plain_command_is_read_as_written() {
        let u = un(&["torchrun", "--nnodes=2", "t.py"], &[]);
        assert_eq!(u.argv, words(&["torchrun", "--nnodes=2", "t.py"]));
        assert!(!u.wrapped() && u.problems.is_empty() && u.script.is_none());
    }

    #[test]
    fn shell_strings_in_every_option_form() {
        for opts in [
            &["-c"][..],
            &["-lc"],
            &["-ec"],
            &["-xc"],
            &["-l", "-c"],
            &["-o", "pipefail", "-c"],
            &["--login", "-c"],
            &["+x", "-ec"],
        ] {
            for sh in ["sh", "/bin/bash", "dash", "/usr/bin/zsh"] {
                let mut argv = vec![sh];
                argv.extend_from_slice(opts);
                argv.push("cd /workspace && torchrun --nnodes=2 --master_addr=m t.py");
                let u = un(&argv, &[]);
                assert_eq!(
                    u.argv,
                    words(&["torchrun", "--nnodes=2", "--master_addr=m", "t.py"]),
                    "{argv:?}"
                );
                assert_eq!(
                    u.via.last().map(String::as_str),
                    Some(&*format!("{} -c", basename(sh)))
                );
            }
        }
    }

    #[test]
    fn arithmetic_and_nested_substitutions_stay_one_word() {
        // A break-it finding: `$((RANK))` ended the substitution at its first `)`, the second `)` cut the
        // command there, and the master named after it was lost (a 2-node job ran on lo).
        let u = un(
            &[
                "bash",
                "-c",
                "torchrun --node_rank=$((RANK)) --nnodes=2 --master_addr=m t.py",
            ],
            &[],
        );
        assert_eq!(u.argv.len(), 5, "{:?}", u.argv);
        assert_eq!(u.argv[4], "t.py");
        assert_eq!(u.argv[3], "--master_addr=m");
        assert!(u.problems.is_empty(), "{:?}", u.problems);
        let u = un(
            &[
                "sh",
                "-c",
                "N=$(( (1+2)*$(nproc) )) torchrun --nnodes=2 t.py",
            ],
            &[],
        );
        assert_eq!(u.argv, words(&["torchrun", "--nnodes=2", "t.py"]));
        assert!(u.problems.is_empty(), "{:?}", u.problems);
    }

    #[test]
    fn reassigning_an_inherited_variable_exports_the_new_value() {
        // Break-it finding 4: the new value was a shell variable only, and the inherited one was read.
        let env = [("MASTER_ADDR", "old")];
        let u = un(
            &["sh", "-c", "MASTER_ADDR=new; torchrun --nnodes=2 t.py"],
            &env,
        );
        assert_eq!(
            u.assignments,
            vec![("MASTER_ADDR".to_string(), "new".to_string())]
        );
        // Control: a variable the shell did not receive stays the shell's own.
        let u = un(
            &["sh", "-c", "MASTER_ADDR=new; torchrun --nnodes=2 t.py"],
            &[],
        );
        assert!(u.assignments.is_empty(), "{:?}", u.assignments);
        // Exported earlier in the string, then changed: the last value.
        let u = un(
            &[
                "sh",
                "-c",
                "export MASTER_ADDR=a; MASTER_ADDR=b; torchrun t.py",
            ],
            &[],
        );
        assert_eq!(u.assignments.last().map(|(_, v)| v.as_str()), Some("b"));
    }

    #[test]
    fn the_working_directory_follows_cd_pushd_and_env_chdir() {
        let cwd = |line: &str, env: &[(&str, &str)]| un(&["sh", "-c", line], env).cwd;
        assert_eq!(cwd("torchrun t.py", &[]), None);
        assert_eq!(cwd("cd /w && torchrun t.py", &[]).as_deref(), Some("/w"));
        assert_eq!(
            cwd("cd /w; cd sub/ && cd x && torchrun t.py", &[]).as_deref(),
            Some("/w/sub/x")
        );
        assert_eq!(cwd("cd rel && torchrun t.py", &[]).as_deref(), Some("rel"));
        assert_eq!(
            cwd("cd && torchrun t.py", &[("HOME", "/h")]).as_deref(),
            Some("/h")
        );
        assert_eq!(
            cwd("cd -L -- /a && torchrun t.py", &[]).as_deref(),
            Some("/a")
        );
        assert_eq!(
            cwd("pushd /p >/dev/null && torchrun t.py", &[]).as_deref(),
            Some("/p")
        );
        assert_eq!(
            cwd("cd \"$W\" && torchrun t.py", &[("W", "/from-env")]).as_deref(),
            Some("/from-env")
        );
        assert_eq!(cwd("env -C /e torchrun t.py", &[]).as_deref(), Some("/e"));
        assert_eq!(
            cwd("cd /a && env --chdir=b torchrun t.py", &[]).as_deref(),
            Some("/a/b")
        );
        for unknown in [
            "cd /a && cd - && torchrun t.py",
            "cd $(mktemp -d) && torchrun t.py",
            "pushd /a && popd && torchrun t.py",
            "cd $UNSET_DIR/x && torchrun t.py",
        ] {
            let d = cwd(unknown, &[]);
            assert!(d.as_deref().is_some_and(is_unknown), "{unknown}: {d:?}");
        }
        // Unknown stays unknown through a relative cd; an absolute one is known again.
        assert!(cwd("cd - && cd rel && torchrun t.py", &[]).is_some_and(|d| is_unknown(&d)));
        assert_eq!(
            cwd("cd - && cd /abs && torchrun t.py", &[]).as_deref(),
            Some("/abs")
        );
    }

    #[test]
    fn a_cd_in_a_subshell_a_nested_shell_or_a_pipeline_does_not_move_the_launcher() {
        // Break-it 01: `(cd /w); accelerate …` read accelerate's config file from /w (POSIX 2.12: a
        // subshell's changes do not affect the shell; bash(1) Pipelines: each command of a multi-command
        // pipeline runs in a subshell; a nested `sh -c` is a process of its own).
        let cwd = |line: &str, env: &[(&str, &str)]| un(&["bash", "-c", line], env).cwd;
        for line in [
            "( cd /w ); accelerate launch t.py",
            "(cd /w && true); accelerate launch t.py",
            "(cd /a; (cd /b)); accelerate launch t.py",
            "sh -c 'cd /w' && accelerate launch t.py",
            "cd /w | true; accelerate launch t.py",
            "cd /w |& cat; accelerate launch t.py",
            "cd /w & accelerate launch t.py",
            "{ cd /w; } | cat; accelerate launch t.py",
            "{ cd /w; true; } 2>&1 & accelerate launch t.py",
            "true | { cd /w; }; accelerate launch t.py",
            "true | cd /w; accelerate launch t.py",
            "(export MASTER_ADDR=x); accelerate launch t.py",
        ] {
            let u = un(&["bash", "-c", line], &[]);
            assert_eq!(u.argv[0], "accelerate", "{line}");
            assert_eq!(u.cwd, None, "{line}");
            assert!(u.assignments.is_empty(), "{line}: {:?}", u.assignments);
        }
        // What runs inside the subshell or the nested shell runs where it cds to, with its exports.
        assert_eq!(
            cwd("(cd /w && accelerate launch t.py)", &[]).as_deref(),
            Some("/w")
        );
        let u = un(
            &[
                "bash",
                "-c",
                "sh -c 'cd /w && export MASTER_ADDR=m && torchrun t.py'",
            ],
            &[],
        );
        assert_eq!(u.cwd.as_deref(), Some("/w"));
        assert_eq!(
            u.assignments,
            vec![("MASTER_ADDR".to_string(), "m".to_string())]
        );
        assert_eq!(
            cwd("{ cd /w; } && accelerate launch t.py", &[]).as_deref(),
            Some("/w"),
            "a group alone is no subshell"
        );
        assert_eq!(
            cwd("true | { cd /w; accelerate launch t.py; }", &[]).as_deref(),
            Some("/w")
        );
        assert_eq!(
            cwd("cd /a && (cd b; true) && accelerate launch t.py", &[]).as_deref(),
            Some("/a")
        );
        assert_eq!(
            cwd(
                "(cd /a) && cd /b | cat && cd /c || true; cd /d & torchrun t.py | tee log",
                &[]
            )
            .as_deref(),
            Some("/c"),
            "`cd DIR || true` is followed"
        );
        // CDPATH: which entry holds a relative name is not known; `.`/`..` and absolute names skip it.
        let cdpath = [("CDPATH", "/x:/y")];
        assert!(cwd("cd w && torchrun t.py", &cdpath).is_some_and(|d| is_unknown(&d)));
        assert!(cwd("CDPATH=/x; cd w && torchrun t.py", &[]).is_some_and(|d| is_unknown(&d)));
        assert_eq!(
            cwd("cd ./w && torchrun t.py", &cdpath).as_deref(),
            Some("./w")
        );
        assert_eq!(
            cwd("cd /w && torchrun t.py", &cdpath).as_deref(),
            Some("/w")
        );
        assert_eq!(
            cwd("cd w && torchrun t.py", &[("CDPATH", "")]).as_deref(),
            Some("w")
        );
    }

    #[test]
    fn a_tilde_expands_from_home() {
        // Break-it 04: `deepspeed --hostfile ~/hf` looked for a file named `~/hf` (POSIX 2.6.1).
        let home = [("HOME", "/h")];
        let argv = |line: &str, env: &[(&str, &str)]| un(&["sh", "-c", line], env).argv;
        assert_eq!(
            argv("deepspeed --hostfile ~/hf t.py", &home),
            words(&["deepspeed", "--hostfile", "/h/hf", "t.py"])
        );
        assert_eq!(
            argv(
                "deepspeed --hostfile ~ '~/q' \"~/q\" \\~/q a~ --x=~/q ~\"/q\" ~/\"q\" t.py",
                &home
            ),
            words(&[
                "deepspeed",
                "--hostfile",
                "/h",
                "~/q",
                "~/q",
                "~/q",
                "a~",
                "--x=~/q",
                "~/q",
                "/h/q",
                "t.py"
            ])
        );
        assert_eq!(
            argv("HOME='/a b'; deepspeed --hostfile ~/hf t.py", &home),
            words(&["deepspeed", "--hostfile", "/a b/hf", "t.py"])
        );
        let u = un(&["sh", "-c", "F=~/hf deepspeed t.py"], &home);
        assert_eq!(u.assignments, vec![("F".to_string(), "/h/hf".to_string())]);
        for unknown in [
            "deepspeed --hostfile ~u/hf t.py",
            "deepspeed --hostfile ~+/hf t.py",
        ] {
            let w = &argv(unknown, &home)[2];
            assert!(is_unknown(w), "{unknown}: {w:?}");
            assert_eq!(display(w), &unknown[21..26]);
        }
        assert!(is_unknown(&argv("deepspeed --hostfile ~/hf t.py", &[])[2]));
        assert_eq!(
            un(&["sh", "-c", "cd ~ && mpirun --hostfile hosts t.py"], &home)
                .cwd
                .as_deref(),
            Some("/h")
        );
        assert_eq!(
            un(
                &["sh", "-c", "cd ~/w && mpirun --hostfile hosts t.py"],
                &home
            )
            .cwd
            .as_deref(),
            Some("/h/w")
        );
    }

    #[test]
    fn lists_pipes_prefixes_and_assignments() {
        let u = un(
            &[
                "bash",
                "-c",
                "set -e; pip install -r req.txt || true\nexport NODE_RANK=1\n\
                 MASTER_ADDR=10.0.0.1 exec env -u X nohup time -p torchrun --nnodes 2 t.py 2>&1 | tee log",
            ],
            &[],
        );
        assert_eq!(u.argv, words(&["torchrun", "--nnodes", "2", "t.py"]));
        assert_eq!(
            u.assignments,
            vec![
                ("NODE_RANK".to_string(), "1".to_string()),
                ("MASTER_ADDR".to_string(), "10.0.0.1".to_string())
            ]
        );
        assert_eq!(u.unset, vec!["X".to_string()]);
        let u = un(
            &[
                "env",
                "-i",
                "MASTER_ADDR=m",
                "sh",
                "-c",
                "if true; then python -m torch.distributed.run t.py; fi",
            ],
            &[],
        );
        assert!(u.cleared);
        assert_eq!(
            u.argv,
            words(&["python", "-m", "torch.distributed.run", "t.py"])
        );
        assert_eq!(u.via, words(&["env", "sh -c"]));
        // Without a launcher, the last command.
        let u = un(&["sh", "-c", "cd /w; python train.py --master_addr=m"], &[]);
        assert_eq!(u.argv, words(&["python", "train.py", "--master_addr=m"]));
        // The first launcher found is the job's.
        let u = un(
            &["sh", "-c", "torchrun --nnodes=2 a.py && deepspeed b.py"],
            &[],
        );
        assert_eq!(u.argv[0], "torchrun");
        let u = un(
            &[
                "timeout",
                "-s",
                "KILL",
                "2h",
                "tini",
                "--",
                "sh",
                "-c",
                "bash -c 'torchrun t.py'",
            ],
            &[],
        );
        assert_eq!(u.argv, words(&["torchrun", "t.py"]));
        assert_eq!(u.via, words(&["timeout", "tini", "sh -c", "bash -c"]));
    }

    #[test]
    fn expansions_known_and_unknown() {
        let env = [
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "23456"),
            ("EMPTY", ""),
        ];
        let u = un(
            &[
                "sh",
                "-c",
                "torchrun --rdzv_endpoint=${MASTER_ADDR}:$MASTER_PORT --node_rank=${NODE_RANK:-0} \
                 --nnodes=${NN-3} --master_addr=\"$MASTER_ADDR\" --x='$MASTER_ADDR' --y=${EMPTY:-d} --z=${EMPTY-d} t.py",
            ],
            &env,
        );
        assert_eq!(
            u.argv,
            words(&[
                "torchrun",
                "--rdzv_endpoint=10.0.0.1:23456",
                "--node_rank=0",
                "--nnodes=3",
                "--master_addr=10.0.0.1",
                "--x=$MASTER_ADDR",
                "--y=d",
                "--z=",
                "t.py"
            ])
        );
        let u = un(
            &[
                "bash",
                "-c",
                "A=$(hostname -i); torchrun --master_addr=$(scontrol show hostnames | head -n1) \
                 --a=`hostname` --b=$UNSET --c=$? --d=${X%%.*} --e=$A t.py",
            ],
            &env,
        );
        assert_eq!(u.argv.len(), 8);
        for w in &u.argv[1..7] {
            assert!(is_unknown(w), "{w:?}");
        }
        assert_eq!(
            display(&u.argv[1]),
            "--master_addr=$(scontrol show hostnames | head -n1)"
        );
        assert_eq!(display(&u.argv[4]), "--c=$?");
        // An unquoted value with spaces splits into words, a quoted one does not.
        let u = un(
            &["sh", "-c", "torchrun $OPTS \"$OPTS\" t.py"],
            &[("OPTS", "--nnodes=2 --node_rank=1")],
        );
        assert_eq!(
            u.argv,
            words(&[
                "torchrun",
                "--nnodes=2",
                "--node_rank=1",
                "--nnodes=2 --node_rank=1",
                "t.py"
            ])
        );
        // A value with quotes stays literal.
        let u = un(
            &["sh", "-c", "torchrun --master_addr=$Q t.py"],
            &[("Q", "a'b\"c")],
        );
        assert_eq!(u.argv[1], "--master_addr=a'b\"c");
    }

    /// Two launcher runs in one string: the first is read, with the shell's state as it left it (a `cd` or an
    /// `export` after it is not its), and a problem names the second (break-it finding).
    #[test]
    fn a_second_launcher_in_the_string_is_named() {
        let u = un(
            &[
                "sh",
                "-c",
                "torchrun --standalone warm.py && cd /w && export NCCL_SOCKET_IFNAME=eth9 && \
                 torchrun --nnodes=2 --master-addr=m train.py",
            ],
            &[],
        );
        assert_eq!(u.argv, words(&["torchrun", "--standalone", "warm.py"]));
        assert_eq!(u.cwd, None);
        assert!(u.assignments.is_empty(), "{:?}", u.assignments);
        assert_eq!(u.problems.len(), 1, "{:?}", u.problems);
        assert!(
            u.problems[0].contains("second launcher (torchrun --nnodes=2 …)")
                && u.problems[0].contains("NCCLENV_PEER"),
            "{:?}",
            u.problems
        );
        let u = un(
            &["sh", "-c", "pip install x && torchrun --nnodes=2 t.py"],
            &[],
        );
        assert!(u.problems.is_empty(), "{:?}", u.problems);
    }

    #[test]
    fn scripts_stdin_and_unclosed_quotes() {
        let u = un(&["bash", "run.sh", "--nnodes=2"], &[]);
        assert_eq!(u.script.as_deref(), Some("run.sh"));
        assert_eq!(u.argv[0], "bash");
        let u = un(&["bash", "-x", "/w/run.sh"], &[]);
        assert_eq!(u.script.as_deref(), Some("/w/run.sh"));
        // A file sourced into the string is not read either; the launcher after it still is.
        let u = un(&["bash", "-c", "source /opt/env.sh && torchrun t.py"], &[]);
        assert_eq!(u.script.as_deref(), Some("/opt/env.sh"));
        assert_eq!(u.argv, words(&["torchrun", "t.py"]));
        let u = un(&["sh", "-c", ". ./a.sh; . ./b.sh; exec torchrun t.py"], &[]);
        assert_eq!(u.script.as_deref(), Some("./a.sh"));
        let u = un(&["sh", "-c", "torchrun --master_addr='m t.py"], &[]);
        assert_eq!(u.problems.len(), 1, "{:?}", u.problems);
        assert!(u.problems[0].contains("unclosed quote"), "{:?}", u.problems);
        assert_eq!(u.argv[0], "sh");
        let u = un(&["sh", "-c", "torchrun --master_addr=$(hostname t.py"], &[]);
        assert!(u.problems[0].contains("command substitution"));
        let u = un(&["sh"], &[]);
        assert_eq!(u.argv, words(&["sh"]));
        // Comments and operators inside quotes and substitutions do not cut.
        let u = un(
            &[
                "sh",
                "-c",
                "# a; comment\ntorchrun --x='a;b' --y=\"$(f; g)\" t.py # tail; x",
            ],
            &[],
        );
        assert_eq!(u.argv[0], "torchrun");
        assert_eq!(u.argv[1], "--x=a;b");
        assert_eq!(display(&u.argv[2]), "--y=$(f; g)");
        assert_eq!(u.argv.len(), 4);
    }

    #[test]
    fn positional_parameters_follow_a_command_without_launcher() {
        let u = un(
            &[
                "sh",
                "-c",
                "touch \"$1\" && exec env -0",
                "sh",
                "/m",
                "--nnodes=2",
            ],
            &[],
        );
        assert_eq!(u.argv, words(&["env", "-0", "/m", "--nnodes=2"]));
        let u = un(&["sh", "-c", "torchrun t.py", "sh", "--nnodes=2"], &[]);
        assert_eq!(u.argv, words(&["torchrun", "t.py"]));
    }

    #[test]
    fn dollar_at_and_positional_parameters_expand_from_the_words_after_the_string() {
        // Break-it finding: the entrypoint idiom `sh -c 'cd /w && exec "$@"' sh LAUNCHER …` was read as an
        // unknown `$@` and no master was read (POSIX 2.5.2: "$@" expands to "$1" "$2" …).
        let acc = [
            "accelerate",
            "launch",
            "--num_machines",
            "2",
            "--main_process_ip",
            "10.4.4.4",
            "t.py",
        ];
        let mut argv = vec!["sh", "-c", "cd /w && exec \"$@\"", "sh"];
        argv.extend_from_slice(&acc);
        let u = un(&argv, &[]);
        assert_eq!(u.argv, words(&acc));
        assert_eq!(u.cwd.as_deref(), Some("/w"));
        let mut argv = vec!["sh", "-c", "accelerate launch \"$@\"", "sh"];
        argv.extend_from_slice(&acc[2..]);
        assert_eq!(un(&argv, &[]).argv, words(&acc));
        // Each parameter one word in "$@", split outside quotes; "$*" one word.
        let run = |line: &str, params: &[&str]| {
            let mut argv = vec!["sh", "-c", line];
            argv.extend_from_slice(params);
            un(&argv, &[]).argv
        };
        let p = ["n", "a b", "c"];
        assert_eq!(
            run("torchrun \"$@\" x", &p),
            words(&["torchrun", "a b", "c", "x"])
        );
        assert_eq!(
            run("torchrun $@ $*", &p),
            words(&["torchrun", "a", "b", "c", "a", "b", "c"])
        );
        assert_eq!(run("torchrun \"$*\"", &p), words(&["torchrun", "a b c"]));
        assert_eq!(
            run("torchrun \"${@}\"", &p),
            words(&["torchrun", "a b", "c"])
        );
        assert_eq!(
            run(
                "torchrun $0 $1 ${2} \"$3\" $# ${1:-d} ${3:-d} --x=\"$2\"",
                &p
            ),
            words(&["torchrun", "n", "a", "b", "c", "", "2", "a", "b", "d", "--x=c"])
        );
        // No parameters: "$@" is no word at all, "x$@" is x, $0 is the shell's name.
        assert_eq!(
            run("torchrun \"$@\" \"x$@\" $0 $#", &[]),
            words(&["torchrun", "x", "sh", "0"])
        );
        assert_eq!(run("torchrun \"$@\"", &["n"]), words(&["torchrun"]));
        // A nested shell has its own parameters.
        assert_eq!(
            run(
                "sh -c 'exec \"$@\"' in torchrun \"$1\"",
                &["n", "--nnodes=2"]
            ),
            words(&["torchrun", "--nnodes=2"])
        );
        // `set --` and `shift` change them.
        assert_eq!(
            run("shift; exec \"$@\"", &["sh", "x", "torchrun", "t.py"]),
            words(&["torchrun", "t.py"])
        );
        assert_eq!(
            run(
                "set -e -- torchrun \"$@\"; (shift); exec \"$@\"",
                &["sh", "--nnodes=2"]
            ),
            words(&["torchrun", "--nnodes=2"])
        );
        assert_eq!(
            run("shift 5; torchrun \"$@\"", &["sh", "a"]),
            words(&["torchrun", "a"])
        );
        assert!(is_unknown(
            &run("shift $N; torchrun \"$@\"", &["sh", "a"])[1]
        ));
        // A string that passes "$@" on is not read with its parameters appended again.
        assert_eq!(
            run("cd /w && exec \"$@\"", &["sh", "python", "t.py"]),
            words(&["python", "t.py"])
        );
    }

    #[test]
    fn never_panics() {
        use proptest::prelude::*;
        proptest!(|(s in "[ -~\\n]{0,60}")| {
            let _ = un(&["sh", "-c", &s], &[("A", "1")]);
            let _ = un(&["env", &s, "bash", "-c", &s], &[]);
            let _ = un(&["sh", "-c", &s, &s, "a b", ""], &[("HOME", "/h"), ("CDPATH", "/c")]);
        });
    }
}
