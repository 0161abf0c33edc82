//! The entrypoint as shipped: `cargo build --release --target x86_64-unknown-linux-musl --bin ncclenv`
//! (scripts/test.sh builds it before the tests) must be fully static (`file`: "statically linked") and under
//! 1.75 MiB stripped, and must run (docs/performance.md: 1.5 MiB until the per-device RDMA and /dev/shm rules
//! of issue #13 added 61 KB to a binary 2 KB under it).

use crate::common;

use std::path::PathBuf;
use std::process::Command;

/// Size budget of the stripped static binary, bytes (1.75 MiB). Raised from 1.6 MiB when the job's sources
/// (#21: shell-wrapped commands, the orchestrator table), NCCL's address labels and version defects (#26), the
/// hostile-network preflight and signals (#22) and the preflight's MTU comparison took it from 1,652,368 to
/// 1,762,992 bytes; issue #20 item 8 is to bring it back down.
const MAX_BYTES: u64 = 1792 * 1024;

fn musl_binary() -> Option<PathBuf> {
    common::needs::built(
        common::target_dir().join("x86_64-unknown-linux-musl/release/ncclenv"),
        "run cargo build --release --target x86_64-unknown-linux-musl --bin ncclenv",
    )
}

#[test]
fn the_musl_build_is_static_small_and_runs() {
    let Some(bin) = musl_binary() else { return };
    let file = Command::new("file")
        .arg(&bin)
        .output()
        .expect("the file command");
    let desc = String::from_utf8_lossy(&file.stdout);
    assert!(desc.contains("statically linked"), "{desc}");
    assert!(!desc.contains("dynamically"), "{desc}");
    let size = std::fs::metadata(&bin).expect("stat").len();
    assert!(
        size < MAX_BYTES,
        "{} is {size} bytes, over 1.75 MiB",
        bin.display()
    );
    let v = Command::new(&bin)
        .arg("--version")
        .output()
        .expect("run --version");
    assert_eq!(v.status.code(), Some(0));
    common::assert_version(String::from_utf8_lossy(&v.stdout).trim());
    let ok = Command::new(&bin)
        .args(["--", "sh", "-c", "exit 3"])
        .env("NCCLENV_LOG", "off")
        .output()
        .expect("run as entrypoint");
    assert_eq!(ok.status.code(), Some(3));
}
