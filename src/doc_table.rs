//! Tests only: a generated table of a document, between two markers, checked against its source (and, with
//! `NCCLENV_BLESS=1`, rewritten instead). Used for `docs/findings.md` ([`crate::findings`]),
//! `docs/explain.md` ([`crate::explain::Code`]) and `docs/configuration.md` ([`crate::cli`]).

/// Check that the text of `rel` (a path under the crate's root) between `begin` and `end` is `want`; when it
/// is not, rewrite it under `NCCLENV_BLESS=1`, else panic with `differs` (which says how to bless).
pub fn check_or_bless(rel: &str, begin: &str, end: &str, want: &str, differs: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let (Some(b), Some(e)) = (doc.find(begin), doc.find(end)) else {
        panic!("{rel} lacks the markers {begin:?} … {end:?}");
    };
    if doc[b + begin.len()..e] == *want {
        return;
    }
    if std::env::var("NCCLENV_BLESS").as_deref() == Ok("1") {
        let new = format!("{}{begin}{want}{}", &doc[..b], &doc[e..]);
        std::fs::write(&path, new).unwrap_or_else(|e| panic!("write {rel}: {e}"));
    } else {
        panic!("{differs}");
    }
}
