//! Every finding `ncclenv explain` can make, named once, in the style of [`crate::findings`] and with the same
//! macro ([`crate::code_table`]): [`Code`] knows its stable code (`[warn] CODE:` in the text, `code` in
//! `--json`), its severity and a one-line summary. The findings table of `docs/explain.md` is generated from
//! [`Code::ALL`] (`NCCLENV_BLESS=1 cargo test --lib explain` rewrites it).

use crate::plan::Severity;

crate::code_table::code_table! {
    enum Code = "One finding of `ncclenv explain`.";
    all = "Every code, in the order of `docs/explain.md`'s table.";
    code = "The stable code, e.g. `bootstrap-address-shared`.";
    severity = "Info (worth knowing) or warn (something is wrong: `explain` exits 1).";
    summary = "What the finding means, in one line (the table of `docs/explain.md`).";
    /// An NCCL WARN line (per known error, or per distinct unknown text).
    NcclWarn = "nccl-warn", Warn,
        "a WARN line (one finding per known error, or per distinct unknown text), with the processes";
    /// A known error outside NCCL's lines.
    ErrorQuoted = "error-quoted", Warn,
        "a known error outside NCCL's lines: Gloo's `Unable to find address for`, or NCCL's text quoted by a framework's exception";
    /// An INFO line that explains a silent fallback.
    NcclInfo = "nccl-info", Info,
        "an INFO line that explains a silent fallback (`NET/IB : No device found.`: sockets are used)";
    /// A process without a bootstrap line.
    BootstrapNotLogged = "bootstrap-not-logged", Info,
        "a process logged NCCL lines but no bootstrap line (subsystems, or it never initialised the network)";
    /// Bootstraps in both address families.
    BootstrapFamilyMixed = "bootstrap-family-mixed", Warn,
        "some processes bootstrap on IPv4, others on IPv6";
    /// A loopback bootstrap in a multi-host job.
    BootstrapLoopback = "bootstrap-loopback", Warn,
        "a loopback bootstrap in a multi-host log (or one whose `nNodes` > 1)";
    /// A link-local bootstrap in a multi-host job.
    BootstrapLinkLocal = "bootstrap-link-local", Warn,
        "a link-local bootstrap in a multi-host log (works only for IPv4 on one shared link)";
    /// The same bootstrap address on two hosts (NAT).
    BootstrapAddressShared = "bootstrap-address-shared", Warn,
        "two hosts bootstrap on the same address: private addresses behind NAT";
    /// Hosts bootstrap in different address blocks.
    BootstrapNetworksDiffer = "bootstrap-networks-differ", Warn,
        "hosts bootstrap in different address blocks (10/8, 172.16/12, 192.168/16, 100.64/10, public; ULA, global)";
    /// Different NCCL versions.
    NcclVersionsDiffer = "nccl-versions-differ", Warn,
        "the processes run different NCCL versions (logged, or told apart by the bootstrap line's spelling)";
    /// InfiniBand on some processes, sockets on others.
    NetTransportMixed = "net-transport-mixed", Warn,
        "InfiniBand/RoCE on some processes, sockets on others";
    /// NCCL bootstrapped elsewhere than ncclenv would choose on this node.
    LocalChoiceDiffers = "local-choice-differs", Warn,
        "on this node NCCL bootstrapped elsewhere than ncclenv would choose";
    /// The input holds no NCCL line.
    NoNcclLines = "no-nccl-lines", Warn,
        "the input holds no NCCL line";
}

impl Code {
    /// The code of a string, when `explain` knows it.
    pub fn from_code(code: &str) -> Option<Code> {
        Code::ALL.iter().copied().find(|c| c.code() == code)
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_well_formed() {
        let mut seen = std::collections::BTreeSet::new();
        for c in Code::ALL {
            assert!(seen.insert(c.code()), "duplicate {c}");
            assert!(
                c.code()
                    .chars()
                    .all(|ch| ch.is_ascii_lowercase() || ch == '-'),
                "{c}"
            );
            assert_eq!(Code::from_code(c.code()), Some(*c));
            assert!(
                !c.summary().contains('|') && !c.summary().contains('\n'),
                "{c}"
            );
        }
        assert_eq!(Code::from_code("no-such-code"), None);
    }

    const BEGIN: &str = "<!-- explain-findings:begin (generated from src/explain/codes.rs) -->\n";
    const END: &str = "<!-- explain-findings:end -->";

    /// The table of `docs/explain.md`, one row per code.
    fn table() -> String {
        let mut t = String::from("| code | severity | meaning |\n|---|---|---|\n");
        for c in Code::ALL {
            let sev = match c.severity() {
                Severity::Info => "info",
                Severity::Warn => "warn",
            };
            t.push_str(&format!("| `{}` | {sev} | {} |\n", c.code(), c.summary()));
        }
        t
    }

    /// `docs/explain.md`'s findings table is [`Code::ALL`]; with `NCCLENV_BLESS=1` this test rewrites it
    /// instead of failing.
    #[test]
    fn docs_explain_table_is_the_enum() {
        crate::doc_table::check_or_bless(
            "docs/explain.md",
            BEGIN,
            END,
            &table(),
            "docs/explain.md's findings table differs from src/explain/codes.rs; run NCCLENV_BLESS=1 cargo test --lib explain",
        );
    }
}
