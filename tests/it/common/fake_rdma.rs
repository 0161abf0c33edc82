//! Fake RDMA trees for the tests: sysfs (`class/infiniband/<dev>/ports/…`, `class/infiniband_verbs/…`) as
//! the kernel writes it, and dev nodes made with `mknod` (needs root).
//!
//! Verbs nodes: [`uverbs`] makes one with `/dev/null`'s numbers (1:3), which opens read-write on any machine;
//! [`uverbs_unopenable`] uses the real uverbs major (231), which has no driver on a machine without RDMA, so
//! opening it fails with ENXIO ("exists but cannot be opened").

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Write `text` to `p`, creating its parents.
pub fn write(p: &Path, text: &str) {
    fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    fs::write(p, text).expect("write fixture");
}

/// `<sys>/class/infiniband/<dev>/ports/1/…`, ACTIVE and LinkUp, with GID 0 bound to `ndev` (RoCE).
pub fn hca(sys: &Path, dev: &str, link_layer: &str, rate: &str, ndev: Option<&str>) {
    let p = sys.join(format!("class/infiniband/{dev}/ports/1"));
    write(&p.join("state"), "4: ACTIVE\n");
    write(&p.join("phys_state"), "5: LinkUp\n");
    write(&p.join("link_layer"), &format!("{link_layer}\n"));
    write(&p.join("rate"), &format!("{rate}\n"));
    write(
        &p.join("gids/0"),
        "fe80:0000:0000:0000:0a5c:12ff:fe34:5678\n",
    );
    if let Some(n) = ndev {
        write(&p.join("gid_attrs/types/0"), "RoCE v2\n");
        write(&p.join("gid_attrs/ndevs/0"), &format!("{n}\n"));
    }
}

/// A RoCE GID table entry `index` on `<dev>` port 1.
pub fn gid(sys: &Path, dev: &str, index: u32, gid: &str, kind: &str, ndev: &str) {
    let p = sys.join(format!("class/infiniband/{dev}/ports/1"));
    write(&p.join(format!("gids/{index}")), &format!("{gid}\n"));
    write(
        &p.join(format!("gid_attrs/types/{index}")),
        &format!("{kind}\n"),
    );
    write(
        &p.join(format!("gid_attrs/ndevs/{index}")),
        &format!("{ndev}\n"),
    );
}

/// `<sys>/class/infiniband_verbs/<node>/ibdev` = `dev`: the kernel's map from verbs node to HCA.
pub fn verbs_map(sys: &Path, node: &str, dev: &str) {
    write(
        &sys.join(format!("class/infiniband_verbs/{node}/ibdev")),
        &format!("{dev}\n"),
    );
}

/// A character node `<dev>/<rel>`, mode 0666.
pub fn char_node(dev: &Path, rel: &str, major: u64, minor: u64) {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    let p = dev.join(rel);
    fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    mknod(
        &p,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(major, minor),
    )
    .unwrap_or_else(|e| panic!("mknod {}: {e}", p.display()));
    fs::set_permissions(&p, fs::Permissions::from_mode(0o666)).expect("chmod");
}

/// `<dev>/infiniband/uverbsN` that opens read-write (1:3, `/dev/null`'s numbers).
pub fn uverbs(dev: &Path, n: u32) {
    char_node(dev, &format!("infiniband/uverbs{n}"), 1, 3);
}

/// `<dev>/infiniband/uverbsN` with the real uverbs major and no driver behind it: opening fails (ENXIO).
pub fn uverbs_unopenable(dev: &Path, n: u32) {
    char_node(
        dev,
        &format!("infiniband/uverbs{n}"),
        231,
        192 + u64::from(n),
    );
}
