//! `ncclenv install DIR`: copy the running `ncclenv` (and `ncclenv-check` when it sits beside it) into DIR,
//! so that an unmodified image can run them from there. The use it exists for: the `FROM scratch` carrier
//! image as a Kubernetes init container that drops both binaries into an `emptyDir` shared with the training
//! container, which then runs `/opt/ncclenv/ncclenv -- COMMAND` (examples/k8s/init/).
//!
//! Safe on existing files: each binary is written to a temporary file in DIR and renamed over the old one, so
//! a file another container is running (`ETXTBSY` for an in-place write) or a half-written copy never shows;
//! a file already identical is left alone. Files are mode 0755 (the training container may run as another
//! user). DIR is created when missing, but not the folders above it: a mistyped path (`/opt/ncclnev/bin`) is
//! an error, not a new tree. A DIR that already holds identical copies on a read-only volume (prepared once)
//! counts as installed.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The names the binaries get in DIR: what `ncclenv check` looks for beside `ncclenv`.
pub const NAMES: [&str; 2] = ["ncclenv", "ncclenv-check"];

/// Mode of the installed files: rwxr-xr-x.
pub const MODE: u32 = 0o755;

/// What happened to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileAction {
    /// Copied (new, or replacing a different file).
    Copied,
    /// DIR already held an identical file (its mode set to 0755, or left as it is when the file is
    /// executable by everyone and the mode cannot be set: a read-only volume).
    Unchanged,
    /// The source is the destination itself (DIR is where it already runs from).
    InPlace,
}

/// One installed file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// Where it came from.
    pub source: PathBuf,
    /// Where it is now.
    pub dest: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// What was done.
    pub outcome: FileAction,
}

impl Installed {
    /// One line for the user: `copied /ncclenv to /shared/ncclenv (1345328 bytes, mode 755)`.
    pub fn line(&self) -> String {
        let what = match self.outcome {
            FileAction::Copied => "copied",
            FileAction::Unchanged => "already up to date:",
            FileAction::InPlace => "already in place:",
        };
        match self.outcome {
            FileAction::Copied => format!(
                "{what} {} to {} ({} bytes, mode {:o})",
                self.source.display(),
                self.dest.display(),
                self.bytes,
                MODE
            ),
            _ => format!("{what} {} ({} bytes)", self.dest.display(), self.bytes),
        }
    }
}

/// The report of [`install`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installation {
    /// The files installed, `ncclenv` first.
    pub files: Vec<Installed>,
    /// Set when no `ncclenv-check` sits beside `exe`: the path looked at.
    pub helper_missing: Option<PathBuf>,
}

/// Install `exe` as `DIR/ncclenv` and, when an executable `ncclenv-check` sits beside `exe`, that as
/// `DIR/ncclenv-check`. Errors: one message naming the path and the OS error (DIR's parent missing, a file in
/// the way, DIR not writable, a directory in the way of a binary, a read failure); nothing half-written is
/// left behind.
pub fn install(exe: &Path, dir: &Path) -> Result<Installation, String> {
    prepare_dir(dir)?;
    let mut files = vec![install_one(exe, &dir.join(NAMES[0]))?];
    let helper = exe
        .parent()
        .map_or_else(|| PathBuf::from(NAMES[1]), |d| d.join(NAMES[1]));
    let helper_missing = if is_executable_file(&helper) {
        files.push(install_one(&helper, &dir.join(NAMES[1]))?);
        None
    } else {
        Some(helper)
    };
    Ok(Installation {
        files,
        helper_missing,
    })
}

/// Make sure DIR is a folder: an existing one is used, a missing one is created when its parent exists (one
/// level, as `mkdir DIR`). Errors start with `cannot create DIR: ` and say what is wrong.
fn prepare_dir(dir: &Path) -> Result<(), String> {
    let fail = |why: String| Err(format!("cannot create {}: {why}", dir.display()));
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => {
            return fail(
                "a file is in the way (not a folder); remove it or choose another DIR".into(),
            )
        }
        Err(_) => {}
    }
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match fs::metadata(parent) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return fail(format!("{} is a file, not a folder", parent.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return fail(format!(
                "its parent {} does not exist (install creates DIR, not the folders above it)",
                parent.display()
            ))
        }
        Err(e) => return fail(format!("{}: {e}", parent.display())),
    }
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        // Another init container made it at the same moment.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => fail(e.to_string()),
    }
}

/// Give an identical `dest` the mode [`MODE`]. When the mode cannot be set (a read-only volume prepared
/// once) and everyone may already run the file, it counts as installed; otherwise the error names the path.
fn set_mode_of_identical(dest: &Path, meta: &fs::Metadata) -> Result<(), String> {
    if meta.mode() & 0o7777 == MODE {
        return Ok(());
    }
    match fs::set_permissions(dest, fs::Permissions::from_mode(MODE)) {
        Ok(()) => Ok(()),
        Err(_) if meta.mode() & 0o555 == 0o555 => Ok(()),
        Err(e) => Err(format!("cannot set the mode of {}: {e}", dest.display())),
    }
}

fn is_executable_file(p: &Path) -> bool {
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Copy `src` to `dest` through a temporary file in `dest`'s directory and a rename.
fn install_one(src: &Path, dest: &Path) -> Result<Installed, String> {
    let smeta = fs::metadata(src).map_err(|e| format!("cannot read {}: {e}", src.display()))?;
    let installed = |outcome| Installed {
        source: src.to_path_buf(),
        dest: dest.to_path_buf(),
        bytes: smeta.len(),
        outcome,
    };
    match fs::symlink_metadata(dest) {
        Ok(d) if d.is_dir() => {
            return Err(format!(
                "{} is a directory; remove it or choose another DIR",
                dest.display()
            ))
        }
        Ok(d) if d.dev() == smeta.dev() && d.ino() == smeta.ino() => {
            return Ok(installed(FileAction::InPlace))
        }
        Ok(d) if d.is_file() && d.len() == smeta.len() && same_content(src, dest) => {
            set_mode_of_identical(dest, &d)?;
            return Ok(installed(FileAction::Unchanged));
        }
        _ => {}
    }
    let dir = dest.parent().unwrap_or(Path::new("."));
    let name = dest
        .file_name()
        .map_or_else(|| "ncclenv".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = copy_to(src, &tmp).and_then(|()| fs::rename(&tmp, dest));
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(format!("cannot write {}: {e}", dest.display()));
    }
    Ok(installed(FileAction::Copied))
}

/// Write `src`'s bytes to a new file `tmp` (mode 0755, whatever the umask), flushed to disk.
fn copy_to(src: &Path, tmp: &Path) -> io::Result<()> {
    let mut from = fs::File::open(src)?;
    let _ = fs::remove_file(tmp);
    let mut to = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(MODE)
        .open(tmp)?;
    io::copy(&mut from, &mut to)?;
    to.set_permissions(fs::Permissions::from_mode(MODE))?;
    to.flush()?;
    to.sync_all()
}

/// True when both files hold the same bytes (read in 64 KiB blocks; a read error counts as different).
fn same_content(a: &Path, b: &Path) -> bool {
    let (Ok(mut fa), Ok(mut fb)) = (fs::File::open(a), fs::File::open(b)) else {
        return false;
    };
    let mut ba = vec![0u8; 64 * 1024];
    let mut bb = vec![0u8; 64 * 1024];
    loop {
        let na = match read_full(&mut fa, &mut ba) {
            Ok(n) => n,
            Err(_) => return false,
        };
        let nb = match read_full(&mut fb, &mut bb) {
            Ok(n) => n,
            Err(_) => return false,
        };
        if na != nb || ba[..na] != bb[..nb] {
            return false;
        }
        if na == 0 {
            return true;
        }
    }
}

/// Fill `buf` as far as the file allows; returns the bytes read (0 at the end).
fn read_full(f: &mut fs::File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(what: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ncclenv-install-{what}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        let _ = fs::create_dir_all(&d);
        d
    }

    fn exe(dir: &Path, name: &str, body: &[u8]) -> PathBuf {
        let p = dir.join(name);
        let _ = fs::write(&p, body);
        let _ = fs::set_permissions(&p, fs::Permissions::from_mode(0o700));
        p
    }

    #[test]
    fn copies_both_then_leaves_identical_files_and_replaces_different_ones() {
        let src = tmpdir("src");
        let dst = tmpdir("dst").join("sub");
        let e = exe(&src, "ncclenv", b"main");
        exe(&src, "ncclenv-check", b"helper");
        let r = install(&e, &dst).expect("install");
        assert_eq!(r.files.len(), 2);
        assert!(r.files.iter().all(|f| f.outcome == FileAction::Copied));
        assert_eq!(
            fs::read(dst.join("ncclenv-check")).unwrap_or_default(),
            b"helper"
        );
        let mode = fs::metadata(dst.join("ncclenv")).map(|m| m.permissions().mode() & 0o7777);
        assert_eq!(mode.ok(), Some(0o755));

        let r = install(&e, &dst).expect("again");
        assert!(r.files.iter().all(|f| f.outcome == FileAction::Unchanged));

        let _ = fs::write(dst.join("ncclenv"), b"older");
        let r = install(&e, &dst).expect("replace");
        assert_eq!(r.files[0].outcome, FileAction::Copied);
        assert_eq!(fs::read(dst.join("ncclenv")).unwrap_or_default(), b"main");
        let leftovers: Vec<_> = fs::read_dir(&dst)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert_eq!(leftovers.len(), 2, "{leftovers:?}");
    }

    #[test]
    fn a_missing_parent_or_a_file_in_the_way_is_an_error_and_creates_nothing() {
        let src = tmpdir("parent");
        let e = exe(&src, "ncclenv", b"main");
        let missing = src.join("no/such/dir");
        let err = install(&e, &missing).expect_err("missing parent");
        assert!(
            err.contains("its parent") && err.contains("does not exist"),
            "{err}"
        );
        assert!(!src.join("no").exists(), "nothing created");
        let file = src.join("a-file");
        let _ = fs::write(&file, b"x");
        let err = install(&e, &file).expect_err("a file is DIR");
        assert!(err.contains("a file is in the way"), "{err}");
        let err = install(&e, &file.join("sub")).expect_err("a file is the parent");
        assert!(err.contains("is a file, not a folder"), "{err}");
        // One missing level is created, as mkdir does.
        assert!(install(&e, &src.join("one")).is_ok());
    }

    #[test]
    fn without_a_helper_only_ncclenv_and_says_where_it_looked() {
        let src = tmpdir("nohelper");
        let e = exe(&src, "ncclenv", b"main");
        let dst = tmpdir("nohelper-dst");
        let r = install(&e, &dst).expect("install");
        assert_eq!(r.files.len(), 1);
        assert_eq!(r.helper_missing, Some(src.join("ncclenv-check")));
    }

    #[test]
    fn in_place_and_directory_in_the_way() {
        let src = tmpdir("inplace");
        let e = exe(&src, "ncclenv", b"main");
        let r = install(&e, &src).expect("in place");
        assert_eq!(r.files[0].outcome, FileAction::InPlace);
        let dst = tmpdir("dir-in-way");
        let _ = fs::create_dir_all(dst.join("ncclenv"));
        let err = install(&e, &dst).expect_err("directory");
        assert!(err.contains("is a directory"), "{err}");
    }
}
