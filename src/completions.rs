//! `ncclenv completions bash|zsh|fish`: the shell's completion script, made from the tables the parser reads
//! ([`cli::OPTIONS`], [`cli::SUBCOMMANDS`] with each one's [`cli::Arg`], [`cli::flag_names`]) and the word lists
//! of the options that take words ([`crate::config::variable_values`]), so that no list of flags or words is
//! written twice. The scripts follow each shell's own completion interface:
//!
//! - bash: a function for `complete -F` reading `COMP_WORDS`/`COMP_CWORD`, answering in `COMPREPLY` (bash
//!   manual, "Programmable Completion"; `compopt` since bash 4.0);
//! - zsh: a `#compdef` function for compsys, `_arguments` with one spec per option and `->state` actions
//!   (zshcompsys(1), "_arguments");
//! - fish: `complete -c ncclenv` lines with `__fish_use_subcommand`/`__fish_seen_subcommand_from` conditions
//!   (fish documentation, "complete").
//!
//! After `--` each completes the job's command as a command line of its own. tests/golden/completions/ holds
//! the scripts (`NCCLENV_BLESS=1 cargo test --lib completions` rewrites them); tests/it/completions.rs loads
//! each into the real shell.

use crate::cli::{self, Accepts, Arg, Shell};
use std::fmt::Write as _;

/// The completion script for `shell`.
pub fn script(shell: Shell) -> String {
    match shell {
        Shell::Bash => bash(),
        Shell::Zsh => zsh(),
        Shell::Fish => fish(),
    }
}

/// What an option's value is completed with.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    /// A switch: no value.
    None,
    /// One of these words.
    Words(Vec<&'static str>),
    /// A path.
    File,
    /// A host name.
    Host,
    /// Something to type (a number, names): nothing is offered.
    Typed,
}

/// One flag as the scripts offer it: the long name without dashes, the short one, its description and value.
struct Flag {
    long: &'static str,
    short: Option<char>,
    about: String,
    value: Value,
}

/// The words of a list as [`crate::config`] writes it for messages: `"off, error, warn, info or debug"`.
fn list_words(list: &'static str) -> Vec<&'static str> {
    list.split([',', ' '])
        .filter(|w| !w.is_empty() && *w != "or")
        .collect()
}

/// Every flag: the options of [`cli::OPTIONS`], then `--json`, `--help` (`-h`) and `--version` (`-V`), the
/// others of [`cli::flag_names`].
fn flags() -> Vec<Flag> {
    let mut out: Vec<Flag> = cli::OPTIONS
        .iter()
        .map(|o| Flag {
            long: o.name,
            short: None,
            about: o.help.split_whitespace().collect::<Vec<_>>().join(" "),
            value: match o.accepts {
                Accepts::Switch => Value::None,
                Accepts::Words => Value::Words(
                    crate::config::variable_values(&cli::option_variable(o.name))
                        .map(list_words)
                        .unwrap_or_default(),
                ),
                Accepts::Path | Accepts::AbsPath => Value::File,
                Accepts::Peer => Value::Host,
                Accepts::Whole { .. } | Accepts::Port | Accepts::Nnodes | Accepts::Names => {
                    Value::Typed
                }
            },
        })
        .collect();
    for long in cli::flag_names() {
        let (short, about) = match long {
            "json" => (None, "one JSON object (doctor, check, explain)"),
            "help" => (Some('h'), "the help page (of the subcommand)"),
            "version" => (Some('V'), "the version"),
            _ => continue,
        };
        out.push(Flag {
            long,
            short,
            about: about.to_string(),
            value: Value::None,
        });
    }
    out
}

/// A subcommand's description in a menu: its `about` on one line up to the first `. `, `: ` or `; ` outside
/// parentheses, without a final period.
fn summary(about: &str) -> String {
    let one = about.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut depth = 0i32;
    let mut end = one.len();
    for (i, c) in one.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            '.' | ':' | ';' if depth == 0 && one[i + 1..].starts_with(' ') => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    one[..end].trim_end_matches('.').to_string()
}

/// `s` in single quotes for bash and zsh (`'` as `'\''`).
fn sq(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// `s` in single quotes for fish (`\` and `'` escaped with `\`).
fn fish_sq(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The subcommands' names, space-separated.
fn sub_words() -> String {
    cli::subcommand_names().join(" ")
}

/// The bash script: one function, `_ncclenv`, and `complete -F _ncclenv ncclenv`.
fn bash() -> String {
    let flags = flags();
    let mut valued = Vec::new();
    let mut cases = String::new();
    for f in &flags {
        let action = match &f.value {
            Value::None => continue,
            Value::Words(w) => format!("_ncclenv_reply -W {}", sq(&w.join(" "))),
            Value::File => "compopt -o filenames; _ncclenv_reply -f".to_string(),
            Value::Host => "_ncclenv_reply -A hostname".to_string(),
            Value::Typed => ":".to_string(),
        };
        valued.push(format!("--{}", f.long));
        let _ = writeln!(cases, "    --{}) {action}; return ;;", f.long);
    }
    let mut words: Vec<String> = flags.iter().map(|f| format!("--{}", f.long)).collect();
    words.extend(
        flags
            .iter()
            .filter_map(|f| f.short.map(|c| format!("-{c}"))),
    );
    words.push("--".into());
    let mut subs = String::new();
    for s in cli::SUBCOMMANDS {
        let action = match s.args {
            Arg::Nothing => continue,
            Arg::Words(w) => format!("((n == 0)) && _ncclenv_reply -W {}", sq(&w.join(" "))),
            Arg::Subcommand => format!("((n == 0)) && _ncclenv_reply -W {}", sq(&sub_words())),
            Arg::Dir => "((n == 0)) && compopt -o filenames && _ncclenv_reply -d".to_string(),
            Arg::Files => "compopt -o default; COMPREPLY=()".to_string(),
        };
        let _ = writeln!(subs, "    {}) {action} ;;", s.name);
    }
    BASH.replace("@VALUED@", &valued.join("|"))
        .replace("@VALUE_CASES@", &cases)
        .replace("@FLAGS@", &sq(&words.join(" ")))
        .replace("@SUBS@", &sq(&sub_words()))
        .replace("@SUB_CASES@", &subs)
}

/// The bash script around the generated parts (`@…@`). `n` counts the words after the subcommand's; a
/// valued option's value (`--log debug`, `--log=debug`: bash splits at `=`, `COMP_WORDBREAKS`) is skipped.
const BASH: &str = r#"# bash completion for ncclenv (made by `ncclenv completions bash` from its table of options and subcommands)
_ncclenv_reply() {
    mapfile -t COMPREPLY < <(compgen "$@" -- "$cur")
}
_ncclenv() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]} sub='' n=0 i w
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        case $w in
        --)
            # The job's command: a command name first, then what that command takes.
            if ((i == COMP_CWORD - 1)); then _ncclenv_reply -c; else compopt -o default; COMPREPLY=(); fi
            return ;;
        @VALUED@) [[ ${COMP_WORDS[i + 1]-} == = ]] && ((i++)); ((i++)) ;;
        -*) [[ ${COMP_WORDS[i + 1]-} == = ]] && ((i += 2)) ;;
        *) if [[ -z $sub ]]; then sub=$w; else ((n++)); fi ;;
        esac
    done
    if [[ $cur == = ]]; then
        cur=
    elif [[ $prev == = ]]; then
        prev=${COMP_WORDS[COMP_CWORD - 2]}
    fi
    case $prev in
@VALUE_CASES@    esac
    if [[ $cur == -* ]]; then
        _ncclenv_reply -W @FLAGS@
        return
    fi
    case $sub in
    '') _ncclenv_reply -W @SUBS@ ;;
@SUB_CASES@    esac
}
complete -F _ncclenv ncclenv
"#;

/// `s` for zsh's `_arguments` description brackets and `_describe` items: quoted, `[`/`]` as parentheses.
fn zsh_desc(s: &str) -> String {
    s.replace('[', "(").replace(']', ")")
}

/// The zsh script: a `#compdef ncclenv` function (a file `_ncclenv` in `$fpath`, or sourced after `compinit`).
fn zsh() -> String {
    let mut specs = String::new();
    for f in flags() {
        let about = zsh_desc(&f.about);
        let value = match &f.value {
            Value::None => String::new(),
            Value::Words(w) => format!(":{}:({})", f.long, w.join(" ")),
            Value::File => format!(":{}:_files", f.long),
            Value::Host => format!(":{}:_hosts", f.long),
            Value::Typed => format!(":{}: ", f.long),
        };
        let eq = if value.is_empty() { "" } else { "=" };
        let spec = match f.short {
            // -h/-V end what can follow: `'(- *)'{-h,--help}'[…]'`.
            Some(c) => format!("'(- *)'{{-{c},--{}}}{}", f.long, sq(&format!("[{about}]"))),
            None => sq(&format!("--{}{eq}[{about}]{value}", f.long)),
        };
        let _ = writeln!(specs, "    {spec} \\");
    }
    let mut subs = String::new();
    let mut cases = String::new();
    for s in cli::SUBCOMMANDS {
        let _ = writeln!(
            subs,
            "    {}",
            sq(&format!("{}:{}", s.name, zsh_desc(&summary(s.about))))
        );
        let action = match s.args {
            Arg::Nothing => continue,
            Arg::Words(w) => format!("(( CURRENT == 2 )) && compadd -- {}", w.join(" ")),
            Arg::Subcommand => {
                "(( CURRENT == 2 )) && _describe -t subcommands 'ncclenv subcommand' subcommands"
                    .to_string()
            }
            Arg::Dir => "(( CURRENT == 2 )) && _files -/".to_string(),
            Arg::Files => "_files".to_string(),
        };
        let _ = writeln!(cases, "      {}) {action} && ret=0 ;;", s.name);
    }
    ZSH.replace("@SUBS@", &subs)
        .replace("@SPECS@", &specs)
        .replace("@SUB_CASES@", &cases)
}

/// The zsh script around the generated parts (`@…@`). After `--` the rest is completed as a command line of
/// its own (`_normal`).
const ZSH: &str = r#"#compdef ncclenv
# zsh completion for ncclenv (made by `ncclenv completions zsh` from its table of options and subcommands)
_ncclenv() {
  local curcontext=$curcontext state state_descr line ret=1
  local -A opt_args
  local -i dd=${words[(i)--]}
  if (( dd < CURRENT )); then
    # The job's command after --.
    words=("${(@)words[dd + 1, -1]}")
    (( CURRENT -= dd ))
    _normal
    return
  fi
  local -a subcommands=(
@SUBS@  )
  _arguments -C -S \
@SPECS@    '1: :->subcommand' \
    '*:: :->argument' && ret=0
  case $state in
    subcommand) _describe -t subcommands 'ncclenv subcommand' subcommands && ret=0 ;;
    argument)
      case $words[1] in
@SUB_CASES@      esac ;;
  esac
  return ret
}
if [[ $funcstack[1] == _ncclenv ]]; then
  _ncclenv "$@"
else
  compdef _ncclenv ncclenv
fi
"#;

/// The fish script: two conditions (`--` seen, `--` just before the cursor) and `complete -c ncclenv` lines.
fn fish() -> String {
    let mut out = String::from(FISH);
    for s in cli::SUBCOMMANDS {
        let _ = writeln!(
            out,
            "complete -c ncclenv -n '__ncclenv_options; and __fish_use_subcommand' -a {} -d {}",
            s.name,
            fish_sq(&summary(s.about))
        );
    }
    for s in cli::SUBCOMMANDS {
        let args = match s.args {
            Arg::Nothing => continue,
            Arg::Words(w) => format!("-a {}", fish_sq(&w.join(" "))),
            Arg::Subcommand => format!("-a {}", fish_sq(&sub_words())),
            Arg::Dir => "-a '(__fish_complete_directories)'".to_string(),
            Arg::Files => "-F".to_string(),
        };
        let _ = writeln!(
            out,
            "complete -c ncclenv -n '__ncclenv_options; and __fish_seen_subcommand_from {}' {args}",
            s.name
        );
    }
    for f in flags() {
        let short = f.short.map(|c| format!(" -s {c}")).unwrap_or_default();
        let value = match &f.value {
            Value::None => String::new(),
            Value::Words(w) => format!(" -x -a {}", fish_sq(&w.join(" "))),
            Value::File => " -r -F".to_string(),
            Value::Host => " -x -a '(__fish_print_hostnames)'".to_string(),
            Value::Typed => " -x".to_string(),
        };
        let _ = writeln!(
            out,
            "complete -c ncclenv -n __ncclenv_options{short} -l {}{value} -d {}",
            f.long,
            fish_sq(&f.about)
        );
    }
    out
}

/// The fish script's start: no file names unless asked; after `--` the job's command (a command name, then
/// files).
const FISH: &str = r#"# fish completion for ncclenv (made by `ncclenv completions fish` from its table of options and subcommands)
function __ncclenv_options -d 'no -- before the cursor: ncclenv\'s own options and subcommands'
    not contains -- -- (commandline -opc)
end
function __ncclenv_command -d 'the word before the cursor is --: the job\'s command name'
    set -l words (commandline -opc)
    test "$words[-1]" = --
end
complete -c ncclenv -f
complete -c ncclenv -n __ncclenv_command -x -a '(__fish_complete_command)'
complete -c ncclenv -n 'not __ncclenv_options; and not __ncclenv_command' -F
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::SHELL_WORDS;

    /// Every option that takes words has its list ([`crate::config::variable_values`]): a new one without a list
    /// would complete nothing.
    #[test]
    fn every_word_option_has_its_words() {
        for f in flags() {
            if let Value::Words(w) = &f.value {
                assert!(w.len() >= 2, "--{}: {w:?}", f.long);
            }
        }
        assert_eq!(
            list_words(crate::config::LOG_VALUES),
            ["off", "error", "warn", "info", "debug"]
        );
        // Each word the script offers is one the parser takes.
        for f in cli::OPTIONS {
            if let Some(list) = crate::config::variable_values(&cli::option_variable(f.name)) {
                for w in list_words(list) {
                    let arg = format!("--{}={w}", f.name);
                    let args = [arg.as_str().into(), "doctor".into()];
                    assert!(cli::parse(&args, Vec::new()).is_ok(), "{arg}");
                }
            }
        }
    }

    /// The flags are [`cli::flag_names`], and every subcommand and flag is in every script.
    #[test]
    fn the_scripts_name_every_flag_and_subcommand() {
        let longs: Vec<&str> = flags().iter().map(|f| f.long).collect();
        assert_eq!(longs, cli::flag_names());
        for shell in SHELL_WORDS {
            let s = script(Shell::from_word(shell).expect("shell"));
            for f in &longs {
                let want = match *shell {
                    "fish" => format!("-l {f}"),
                    _ => format!("--{f}"),
                };
                assert!(s.contains(&want), "{shell}: {want}");
            }
            for sub in cli::subcommand_names() {
                assert!(s.contains(sub), "{shell}: {sub}");
            }
        }
    }

    /// tests/golden/completions/ncclenv.{bash,zsh,fish} are the scripts; `NCCLENV_BLESS=1` rewrites them.
    #[test]
    fn the_scripts_are_the_golden_files() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/completions");
        let bless = std::env::var_os("NCCLENV_BLESS").is_some_and(|v| v == "1");
        for shell in SHELL_WORDS {
            let path = dir.join(format!("ncclenv.{shell}"));
            let s = script(Shell::from_word(shell).expect("shell"));
            if bless {
                std::fs::create_dir_all(&dir).expect("mkdir");
                std::fs::write(&path, &s).expect("write golden");
                continue;
            }
            let golden = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                golden == s,
                "{} differs from `ncclenv completions {shell}` (NCCLENV_BLESS=1 cargo test --lib completions rewrites it)",
                path.display()
            );
        }
    }
}
