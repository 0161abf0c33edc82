//! Cutting the helper's standard output into lines within a bound, whatever the chunks it arrives in.

/// Longest helper stdout line kept, in bytes (1 MiB: an allreduce result of 1024 ranks is about 300 KiB).
/// A longer line is dropped whole and counted (`lines_too_long`); `cat /dev/zero` is one endless line.
pub const MAX_LINE: usize = 1 << 20;

/// One item from the stdout reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A complete line (without its `\n`, trailing whitespace trimmed, invalid UTF-8 replaced), at most
    /// [`MAX_LINE`] bytes.
    Out(String),
    /// A line longer than the bound was dropped; its length so far in bytes.
    TooLong(usize),
    /// End of file.
    Eof,
}

/// Splits a byte stream into lines of at most `max` bytes, whatever the chunks it arrives in: memory stays
/// within `max` bytes however long a line is (a longer line is reported as [`Line::TooLong`] once, and its
/// bytes are skipped up to the next `\n`). The helper's stdout goes through it.
#[derive(Debug)]
pub struct LineSplitter {
    max: usize,
    cur: Vec<u8>,
    /// Bytes of the current line beyond the bound, when it is being skipped.
    skipping: Option<usize>,
}

impl LineSplitter {
    /// A splitter for lines of at most `max` bytes.
    pub fn new(max: usize) -> LineSplitter {
        LineSplitter {
            max,
            cur: Vec::new(),
            skipping: None,
        }
    }

    /// Feed the next bytes; each complete line (or dropped one) goes to `out`, in order.
    pub fn push(&mut self, mut chunk: &[u8], out: &mut dyn FnMut(Line)) {
        while !chunk.is_empty() {
            let nl = chunk.iter().position(|b| *b == b'\n');
            let (part, rest) = match nl {
                Some(i) => (&chunk[..i], Some(&chunk[i + 1..])),
                None => (chunk, None),
            };
            match self.skipping.as_mut() {
                Some(n) => *n = n.saturating_add(part.len()),
                None if self.cur.len() + part.len() > self.max => {
                    self.skipping = Some(self.cur.len() + part.len());
                    self.cur = Vec::new();
                }
                None => self.cur.extend_from_slice(part),
            }
            match rest {
                Some(r) => {
                    self.end_line(out);
                    chunk = r;
                }
                None => chunk = &[],
            }
        }
    }

    /// End of the stream: a last line without `\n` is delivered, then [`Line::Eof`].
    pub fn finish(&mut self, out: &mut dyn FnMut(Line)) {
        if !self.cur.is_empty() || self.skipping.is_some() {
            self.end_line(out);
        }
        out(Line::Eof);
    }

    fn end_line(&mut self, out: &mut dyn FnMut(Line)) {
        match self.skipping.take() {
            Some(n) => out(Line::TooLong(n)),
            None => {
                let s = String::from_utf8_lossy(&self.cur).trim_end().to_string();
                self.cur.clear();
                out(Line::Out(s));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Generated cases of the splitter's property test (docs/reliability.md).
    const PROPTEST_SPLITTER_CASES: u32 = 2000;

    /// Lines the way a reference splitter cuts them: at each `\n`, the last piece only when not empty.
    fn reference_lines(stream: &[u8], max: usize) -> Vec<Line> {
        let mut out = Vec::new();
        let mut parts: Vec<&[u8]> = stream.split(|b| *b == b'\n').collect();
        if parts.last().is_some_and(|p| p.is_empty()) {
            parts.pop();
        }
        for p in parts {
            if p.len() > max {
                out.push(Line::TooLong(p.len()));
            } else {
                out.push(Line::Out(String::from_utf8_lossy(p).trim_end().to_string()));
            }
        }
        out.push(Line::Eof);
        out
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(PROPTEST_SPLITTER_CASES))]

        /// However the stream is cut into reads, the splitter gives the reference's lines, none longer than
        /// its bound.
        #[test]
        fn lines_are_split_and_bounded_whatever_the_chunks(
            stream in proptest::collection::vec(
                proptest::prop_oneof![4 => proptest::sample::select(b"ab{}\n\r\xff".to_vec()),
                                       1 => proptest::prelude::any::<u8>()], 0..400),
            cuts in proptest::collection::vec(1usize..64, 1..20),
            max in 1usize..40,
        ) {
            let mut got = Vec::new();
            let mut sp = LineSplitter::new(max);
            let mut rest: &[u8] = &stream;
            let mut i = 0;
            while !rest.is_empty() {
                let n = cuts[i % cuts.len()].min(rest.len());
                sp.push(&rest[..n], &mut |l| got.push(l));
                rest = &rest[n..];
                i += 1;
            }
            sp.finish(&mut |l| got.push(l));
            proptest::prop_assert_eq!(&got, &reference_lines(&stream, max));
            for l in &got {
                if let Line::Out(s) = l {
                    proptest::prop_assert!(s.len() <= 3 * max);
                }
            }
        }
    }
}
