//! The process environment exactly as the kernel handed it over: every entry of `environ`, byte for byte, in
//! order. Duplicated names and entries without `=` are kept (Rust's `std::env::vars_os` drops the latter, and
//! `std::process::Command` keeps only one value per name), because the command must get them unchanged.
//!
//! Reading follows `getenv` (glibc and musl): the first entry `NAME=…` wins. That is what NCCL, Python's
//! `os.environ` (built with `setdefault`) and every C library in the command will read, so it is what ncclenv
//! judges.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// An environment block: raw `NAME=value` entries (or anything else the parent put there), in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environ {
    entries: Vec<OsString>,
}

/// The name and value of an entry that has `=` after its first byte: split at that `=` (as Rust's std and
/// glibc's `getenv` do; an entry starting with `=` keeps it in the name). `None` for an entry without `=`.
pub fn split_entry(entry: &OsStr) -> Option<(&OsStr, &OsStr)> {
    let b = entry.as_bytes();
    let i = b.iter().skip(1).position(|c| *c == b'=')? + 1;
    Some((OsStr::from_bytes(&b[..i]), OsStr::from_bytes(&b[i + 1..])))
}

impl Environ {
    /// This process's environment, read from the C library's `environ` (call it before anything changes the
    /// environment; ncclenv never does).
    pub fn from_process() -> Environ {
        extern "C" {
            static environ: *const *const nix::libc::c_char;
        }
        let mut entries = Vec::new();
        // SAFETY: `environ` is the NULL-terminated array of NUL-terminated strings the C library set up at
        // start; nothing in this single-threaded start-up modifies it while it is read.
        unsafe {
            let mut p = environ;
            if !p.is_null() {
                while !(*p).is_null() {
                    let s = std::ffi::CStr::from_ptr(*p);
                    entries.push(OsString::from_vec(s.to_bytes().to_vec()));
                    p = p.add(1);
                }
            }
        }
        Environ { entries }
    }

    /// An environment of these raw entries, in order.
    pub fn from_entries(entries: Vec<OsString>) -> Environ {
        Environ { entries }
    }

    /// The raw entries, in order.
    pub fn entries(&self) -> &[OsString] {
        &self.entries
    }

    /// Every entry that has a name and a value ([`split_entry`]), in order, duplicates included.
    pub fn pairs(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.entries.iter().filter_map(|e| split_entry(e))
    }

    /// `getenv(name)`: the value of the first entry named `name`.
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.pairs()
            .find(|(k, _)| k.as_bytes() == name.as_bytes())
            .map(|(_, v)| v)
    }

    /// Set `name`: the first entry of that name gets the value in place (later ones are removed, so that no
    /// reader sees another value); without one, the entry is appended.
    pub fn set(&mut self, name: &str, value: &OsStr) {
        let mut entry = OsString::with_capacity(name.len() + 1 + value.len());
        entry.push(name);
        entry.push("=");
        entry.push(value);
        let mut placed = false;
        self.entries.retain_mut(|e| {
            if split_entry(e).is_none_or(|(k, _)| k.as_bytes() != name.as_bytes()) {
                return true;
            }
            if placed {
                return false;
            }
            placed = true;
            *e = std::mem::take(&mut entry);
            true
        });
        if !placed {
            self.entries.push(entry);
        }
    }

    /// Remove every entry named `name`.
    pub fn unset(&mut self, name: &str) {
        self.entries
            .retain(|e| split_entry(e).is_none_or(|(k, _)| k.as_bytes() != name.as_bytes()));
    }

    /// Total size of the block as `execve` counts it against `ARG_MAX`: each entry with its NUL, plus one
    /// pointer per entry (fs/exec.c, `bprm_stack_limits`).
    pub fn exec_size(&self) -> usize {
        self.entries
            .iter()
            .map(|e| e.len() + 1 + std::mem::size_of::<usize>())
            .sum()
    }
}

impl<K: Into<OsString>, V: Into<OsString>> FromIterator<(K, V)> for Environ {
    /// `NAME=value` entries from pairs, in order (duplicates kept).
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let entries = iter
            .into_iter()
            .map(|(k, v)| {
                let mut e: OsString = k.into();
                e.push("=");
                e.push(v.into());
                e
            })
            .collect();
        Environ { entries }
    }
}

impl From<&[(OsString, OsString)]> for Environ {
    fn from(pairs: &[(OsString, OsString)]) -> Self {
        pairs.iter().cloned().collect()
    }
}

impl From<&Vec<(OsString, OsString)>> for Environ {
    fn from(pairs: &Vec<(OsString, OsString)>) -> Self {
        pairs.iter().cloned().collect()
    }
}

impl From<&Environ> for Environ {
    fn from(e: &Environ) -> Self {
        e.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(entries: &[&[u8]]) -> Environ {
        Environ::from_entries(
            entries
                .iter()
                .map(|e| OsString::from_vec(e.to_vec()))
                .collect(),
        )
    }

    #[test]
    fn first_entry_wins_and_odd_entries_stay() {
        let e = env(&[b"A=1", b"NOEQ", b"A=2", b"=x=y", b"B=\xff"]);
        assert_eq!(e.get("A"), Some(OsStr::new("1")));
        assert_eq!(e.get("NOEQ"), None);
        assert_eq!(e.get("=x"), Some(OsStr::new("y")));
        assert_eq!(e.get("B").map(OsStr::as_bytes), Some(&b"\xff"[..]));
        assert_eq!(e.pairs().count(), 4);
    }

    #[test]
    fn set_replaces_the_first_in_place_and_drops_later_ones() {
        let mut e = env(&[b"X=0", b"A=1", b"NOEQ", b"A=2", b"Z"]);
        e.set("A", OsStr::new("new"));
        assert_eq!(e, env(&[b"X=0", b"A=new", b"NOEQ", b"Z"]));
        e.set("C", OsStr::new("c"));
        assert_eq!(e.entries().last().map(|s| s.as_bytes()), Some(&b"C=c"[..]));
        e.unset("A");
        assert_eq!(e, env(&[b"X=0", b"NOEQ", b"Z", b"C=c"]));
        // An entry without `=` that happens to be the name is not the variable.
        let mut e = env(&[b"A", b"A=1"]);
        e.set("A", OsStr::new("2"));
        assert_eq!(e, env(&[b"A", b"A=2"]));
    }

    #[test]
    fn the_process_environment_is_read() {
        let e = Environ::from_process();
        let std_count = std::env::vars_os().count();
        assert!(e.pairs().count() >= std_count);
    }

    /// Generated cases of the environment property test (docs/reliability.md).
    const PROPTEST_ENVIRON_CASES: u32 = 2000;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(PROPTEST_ENVIRON_CASES))]

        /// Against a plain model: `get` is the first `NAME=` entry; `set` makes `get` return the value and
        /// leaves every entry of other names (and entries without `=`) as they were, in order; `unset`
        /// removes exactly the entries of that name.
        #[test]
        fn reads_first_wins_and_changes_touch_only_their_name(
            entries in proptest::collection::vec(
                proptest::collection::vec(proptest::sample::select(b"AB=\xff".to_vec()), 0..5), 0..10),
            name in "[AB]{1,2}",
            value in "[ab=]{0,3}",
        ) {
            let e = env(&entries.iter().map(Vec::as_slice).collect::<Vec<_>>());
            let named = |x: &OsString| split_entry(x).is_some_and(|(k, _)| k.as_bytes() == name.as_bytes());
            let first = e.entries().iter().find(|x| named(x)).and_then(|x| split_entry(x)).map(|(_, v)| v);
            proptest::prop_assert_eq!(e.get(&name), first);
            let others: Vec<&OsString> = e.entries().iter().filter(|x| !named(x)).collect();
            let mut s = e.clone();
            s.set(&name, OsStr::new(&value));
            proptest::prop_assert_eq!(s.get(&name), Some(OsStr::new(&value)));
            proptest::prop_assert_eq!(s.entries().iter().filter(|x| named(x)).count(), 1);
            proptest::prop_assert_eq!(s.entries().iter().filter(|x| !named(x)).collect::<Vec<_>>(), others.clone());
            let mut u = e.clone();
            u.unset(&name);
            proptest::prop_assert_eq!(u.entries().iter().collect::<Vec<_>>(), others);
        }
    }
}
