//! Executables a test writes (or copies) and then runs at once, without "Text file busy" (ETXTBSY).
//!
//! All tests share one process, and many threads start children at the same time. When a thread holds a
//! file open for writing and another thread forks, the child holds that descriptor too until it execs
//! (close-on-exec closes it only then); `execve` of the file in that window fails with ETXTBSY. That is the
//! flaky "Text file busy" of tests that copied `ncclenv` and ran it at once (the same race as
//! golang/go#22315). Two defences, used together:
//! - [`write`] and [`copy`] let a child process (`cat`, `cp`) write the file, so this process never holds a
//!   descriptor open for writing on it and no other test's child can inherit one;
//! - [`output`] and [`spawn`] retry a start that still failed with ETXTBSY (the executable, or one a
//!   wrapper such as `ip netns exec` or `ncclenv` execs, reported as "Text file busy"), for a few seconds.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long [`output`] and [`spawn`] retry a start that fails with ETXTBSY.
const RETRY_FOR: Duration = Duration::from_secs(10);

/// Writes `contents` to `path` with permission bits `mode` (e.g. `0o755`), through a child `cat` so that
/// this process never has the file open for writing. Panics when it cannot.
pub fn write(path: &Path, contents: impl AsRef<[u8]>, mode: u32) {
    let mut child = Command::new("sh")
        .args(["-c", "cat > \"$1\"", "sh"])
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start cat > {}: {e}", path.display()));
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(contents.as_ref())
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    drop(stdin);
    let st = child.wait().expect("wait for cat");
    assert!(st.success(), "cat > {}: {st}", path.display());
    chmod(path, mode);
}

/// Copies the executable `src` to `dst` (mode 0755) with a child `cp`, so that this process never has
/// `dst` open for writing. Panics when it cannot.
pub fn copy(src: &Path, dst: &Path) {
    let o = Command::new("cp")
        .arg("--")
        .arg(src)
        .arg(dst)
        .output()
        .unwrap_or_else(|e| panic!("cannot run cp: {e}"));
    assert!(
        o.status.success(),
        "cp {} {}: {}",
        src.display(),
        dst.display(),
        String::from_utf8_lossy(&o.stderr).trim()
    );
    chmod(dst, 0o755);
}

/// Sets the permission bits of `path` to `mode` (chmod opens nothing for writing).
pub fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

/// True for the start error ETXTBSY.
fn busy(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(nix::libc::ETXTBSY)
}

/// `cmd.output()`, started again while the start fails with ETXTBSY or the command's stderr says "Text file
/// busy" (a wrapper that execs a fresh file: `ip netns exec`, `sh`, ncclenv itself), for up to 10 s.
pub fn output(cmd: &mut Command) -> std::io::Result<Output> {
    let deadline = Instant::now() + RETRY_FOR;
    loop {
        let r = cmd.output();
        let again = match &r {
            Err(e) => busy(e),
            Ok(o) => {
                !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("Text file busy")
            }
        };
        if !again || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `cmd.spawn()`, started again while it fails with ETXTBSY, for up to 10 s.
pub fn spawn(cmd: &mut Command) -> std::io::Result<Child> {
    let deadline = Instant::now() + RETRY_FOR;
    loop {
        match cmd.spawn() {
            Err(e) if busy(&e) && Instant::now() <= deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            r => return r,
        }
    }
}
