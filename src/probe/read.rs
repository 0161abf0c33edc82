//! Reading a file that ncclenv does not control, without being stuck or swamped by it: the one way every
//! probe (NCCL configuration files, sysfs attributes, procfs, the loader cache) and the exec fallbacks read
//! a file.
//!
//! A path named by the environment (`NCCL_CONF_FILE=/dev/zero`, a `~/.nccl.conf` that is a FIFO) or a
//! strange mount can hand ncclenv a device that never ends, a FIFO whose `open` blocks until a writer comes,
//! or a file far larger than anything it expects. So a file is
//!
//! 1. opened with `O_NONBLOCK` (opening a FIFO returns at once instead of waiting for a writer) and
//!    `O_NOCTTY` (a terminal never becomes ncclenv's controlling terminal), close-on-exec as always;
//! 2. checked with `fstat` on the open descriptor (no race with a rename) to be a regular file. sysfs
//!    attributes and procfs files are regular files (`S_IFREG`, st_size 4096 or 0), so they pass; a FIFO, a
//!    character or block device, a socket or a directory does not;
//! 3. read up to a bound in bytes; a larger file is an error, never a partial read taken for the whole.
//!
//! The cost is the cost of `std::fs::read`: `openat`, one `statx` (std uses it for its size hint), `read`
//! until end of file, `close`. Callers turn an error into a warning and fail open.

use std::fmt;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Bound for an NCCL configuration file, in bytes (1 MiB). NCCL reads any size (`getline`, src/misc/param.cc
/// `setEnvFile`); a configuration file is a few lines, so anything larger is a mistake (or `/dev/zero`
/// behind a link) and is reported instead of read.
pub const CONF_FILE_MAX: usize = 1 << 20;
/// Bound for one sysfs attribute or procfs file, in bytes (64 KiB: a sysfs attribute is at most one page,
/// 4 KiB or 64 KiB depending on the architecture, Documentation/filesystems/sysfs.rst).
pub const ATTR_MAX: usize = 64 << 10;
/// Bound for the loader cache `/etc/ld.so.cache`, in bytes (16 MiB; a large image's cache is about 1 MiB).
pub const LD_CACHE_MAX: usize = 16 << 20;

/// Why a file was not read.
#[derive(Debug)]
pub enum ReadError {
    /// The path does not exist (`ENOENT`, `ENOTDIR`).
    Missing,
    /// The path is not a regular file: the kind in words (`a FIFO`, `a character device`, …).
    NotRegular(&'static str),
    /// The file holds more than this many bytes.
    TooLarge(usize),
    /// Any other failure (`EACCES`, `EIO`, …).
    Io(std::io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Missing => write!(f, "no such file"),
            ReadError::NotRegular(kind) => {
                write!(f, "it is {kind}, not a regular file; not read")
            }
            ReadError::TooLarge(max) => write!(f, "it is larger than {max} bytes; not read"),
            ReadError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl ReadError {
    /// True for [`ReadError::Missing`].
    pub fn is_missing(&self) -> bool {
        matches!(self, ReadError::Missing)
    }
}

/// The whole content of the regular file at `path`, at most `max` bytes (see the module documentation).
/// Errors: [`ReadError::Missing`], [`ReadError::NotRegular`] (FIFO, device, socket, directory),
/// [`ReadError::TooLarge`] (more than `max` bytes), [`ReadError::Io`].
pub fn read_file(path: &Path, max: usize) -> Result<Vec<u8>, ReadError> {
    read(path, max, false)
}

/// The first `n` bytes (fewer when the file is shorter) of the regular file at `path`: for looking at a
/// file's head (an executable's `#!` line or ELF header). Errors as [`read_file`], never
/// [`ReadError::TooLarge`].
pub fn read_head(path: &Path, n: usize) -> Result<Vec<u8>, ReadError> {
    read(path, n, true)
}

/// [`read_file`] as text: invalid UTF-8 replaced (U+FFFD), surrounding whitespace trimmed. `None` on any
/// error: for sysfs attributes that may be absent or unreadable (an unused GID entry reads `EINVAL`).
pub fn read_attr(path: &Path) -> Option<String> {
    read_file(path, ATTR_MAX)
        .ok()
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
}

fn read(path: &Path, max: usize, head: bool) -> Result<Vec<u8>, ReadError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.kind() {
            ErrorKind::NotFound | ErrorKind::NotADirectory => ReadError::Missing,
            _ => ReadError::Io(e),
        })?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    let ft = meta.file_type();
    if !ft.is_file() {
        return Err(ReadError::NotRegular(if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else if ft.is_socket() {
            "a socket"
        } else if ft.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        }));
    }
    // One byte more than the bound tells "exactly max" from "larger". sysfs says 4096 and procfs 0 for
    // st_size whatever the content, so the size is only a hint for the first allocation.
    let want = if head { max } else { max.saturating_add(1) };
    let hint = usize::try_from(meta.len()).unwrap_or(usize::MAX);
    let mut buf: Vec<u8> = Vec::with_capacity(hint.saturating_add(1).min(want));
    file.take(want as u64)
        .read_to_end(&mut buf)
        .map_err(ReadError::Io)?;
    if !head && buf.len() > max {
        return Err(ReadError::TooLarge(max));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("ncclenv-read-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&d);
        d
    }

    #[test]
    fn regular_files_up_to_the_bound() {
        let p = tmp("reg");
        std::fs::write(&p, b"abc").expect("write");
        assert_eq!(read_file(&p, 3).expect("3"), b"abc");
        assert!(matches!(read_file(&p, 2), Err(ReadError::TooLarge(2))));
        assert_eq!(read_head(&p, 2).expect("head"), b"ab");
        assert_eq!(read_head(&p, 10).expect("head"), b"abc");
        let big = vec![b'x'; 100_000];
        std::fs::write(&p, &big).expect("write");
        assert_eq!(read_file(&p, 100_000).expect("exact").len(), 100_000);
        assert!(read_file(&p, 99_999).is_err());
        std::fs::write(&p, b"").expect("write");
        assert_eq!(read_file(&p, 0).expect("empty"), b"");
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn devices_fifos_directories_and_missing_files_are_refused() {
        assert!(matches!(
            read_file(Path::new("/dev/zero"), 10),
            Err(ReadError::NotRegular("a character device"))
        ));
        assert!(matches!(
            read_file(Path::new("/"), 10),
            Err(ReadError::NotRegular("a directory"))
        ));
        assert!(read_file(Path::new("/nonexistent-ncclenv/x"), 10).is_err_and(|e| e.is_missing()));
        let p = tmp("fifo");
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
        // Returns at once (no writer): O_NONBLOCK.
        assert!(matches!(
            read_file(&p, 10),
            Err(ReadError::NotRegular("a FIFO"))
        ));
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn procfs_files_read_although_their_size_says_zero() {
        let b = read_file(Path::new("/proc/self/stat"), ATTR_MAX).expect("stat");
        assert!(b.starts_with(std::process::id().to_string().as_bytes()));
    }
}
