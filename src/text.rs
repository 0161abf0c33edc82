//! Text that leaves ncclenv: escaping what a terminal would act on, and showing bytes that are not UTF-8.
//! The logger (`report`), `doctor`, `check`'s report, the refusal line and `env`'s shell lines all use these
//! functions, so that one rule decides what reaches a terminal.

/// `s` with every character a terminal could act on written as an escape, so that one line stays one
/// inert line: C0 controls and DEL as `\xNN` (`\x1b`, `\x0d`, `\x0a`; tab too), C1 controls (U+0080–U+009F)
/// and the bidirectional formatting characters (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069) as
/// `\u{NNNN}`. A backslash stays as it is. Borrows when there is nothing to escape. Idempotent: the result
/// holds no character it would escape.
pub fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !needs_escape(c) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
    }
    std::borrow::Cow::Owned(out)
}

/// True for a character [`escape`] writes as an escape.
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `escape` for text of several lines: each line escaped, the line breaks kept.
pub fn escape_lines(s: &str) -> String {
    s.split('\n').map(escape).collect::<Vec<_>>().join("\n")
}

/// A JSON text (as serde_json writes it, which escapes only C0 controls, `"` and `\\`) with DEL, the C1
/// controls and the bidirectional formatting characters also written as `\uNNNN`: the same data, inert on a
/// terminal. Those characters can only occur inside JSON strings, where `\uNNNN` means the character itself.
pub fn escape_json(json: &str) -> std::borrow::Cow<'_, str> {
    if !json.chars().any(needs_escape) {
        return std::borrow::Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if needs_escape(c) && !matches!(c, '\n' | '\r' | '\t') {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Bytes from the world (an interface name, a variable's name) as text: valid UTF-8 as it is, each byte of
/// an invalid sequence as `\xNN`. For showing and matching, never for writing back: the result is not the
/// original bytes.
pub fn bytes_text(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        out.push_str(chunk.valid());
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_the_rest_kept() {
        assert_eq!(escape("eth0"), "eth0");
        assert_eq!(
            escape("a\x1b[31mb\r\nc\td\x7f"),
            "a\\x1b[31mb\\x0d\\x0ac\\x09d\\x7f"
        );
        assert_eq!(escape("x\u{9b}y\u{202e}z"), "x\\u{9b}y\\u{202e}z");
        assert_eq!(escape("back\\slash é"), "back\\slash é");
        let once = escape("\x1b\x07").into_owned();
        assert_eq!(escape(&once), once);
        assert_eq!(escape_lines("a\x1b\nb"), "a\\x1b\nb");
    }

    #[test]
    fn json_keeps_its_meaning() {
        let v = serde_json::json!({"n": "a\u{9b}\u{7f}\u{202e}\x1b"});
        let text = escape_json(&v.to_string()).into_owned();
        assert!(!text.chars().any(needs_escape), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(back, v);
    }

    #[test]
    fn invalid_bytes_show_as_hex() {
        assert_eq!(bytes_text(b"eth0\xff"), "eth0\\xff");
        assert_eq!(bytes_text("é".as_bytes()), "é");
        assert_eq!(bytes_text(b"\xff\xfe"), "\\xff\\xfe");
    }

    /// Generated cases of the escaping property test (docs/reliability.md).
    const PROPTEST_TEXT_CASES: u32 = 3000;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(PROPTEST_TEXT_CASES))]

        /// Whatever the text, the escaped line holds nothing a terminal acts on and escaping twice changes
        /// nothing; JSON keeps its meaning; bytes_text is UTF-8 and the identity on UTF-8.
        #[test]
        fn escaping_is_inert_idempotent_and_lossless_for_json(
            s in "(\\PC|[\\x00-\\x1f\\x7f\\u{80}-\\u{9f}\\u{202a}-\\u{202e}\\u{2066}-\\u{2069}])*",
            b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
        ) {
            let e = escape(&s);
            proptest::prop_assert!(!e.chars().any(needs_escape));
            proptest::prop_assert_eq!(escape(&e), e.clone());
            let v = serde_json::Value::from(s.clone());
            let j = escape_json(&v.to_string()).into_owned();
            proptest::prop_assert!(!j.chars().any(needs_escape));
            proptest::prop_assert_eq!(serde_json::from_str::<serde_json::Value>(&j).ok(), Some(v));
            let t = bytes_text(&b);
            if let Ok(u) = std::str::from_utf8(&b) {
                proptest::prop_assert_eq!(t, u);
            }
        }
    }
}
