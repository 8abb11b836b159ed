//! The exposition text itself: a family's `# HELP` and `# TYPE` lines before its first sample,
//! samples as `name{label="value",...} number`, label values escaped.
//!
//! The text is built as bytes: a scrape appends thousands of pieces of a few dozen bytes (a
//! counter's line is its family's head, its file's name and its value), and a `String` can
//! append a piece only through the C library's memcpy, whose start-up (`rep movsq` in musl)
//! costs more than copying such a piece; [`push_bytes`] copies it eight bytes at a time. Only
//! the bytes of `str` values and ASCII are appended, whole, so the text is UTF-8.

use std::io::Write as _;

/// A metric family: its name, its type (`gauge`, `counter`) and its help line.
pub(super) struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
}

impl Family {
    pub(super) const fn gauge(name: &'static str, help: &'static str) -> Family {
        Family {
            name,
            kind: "gauge",
            help,
        }
    }

    pub(super) const fn counter(name: &'static str, help: &'static str) -> Family {
        Family {
            name,
            kind: "counter",
            help,
        }
    }

    pub(super) fn name(&self) -> &'static str {
        self.name
    }

    /// The family with `body`, its samples; nothing when it has none.
    pub(super) fn write(&self, out: &mut Vec<u8>, body: &[u8]) {
        if body.is_empty() {
            return;
        }
        self.header(out);
        out.extend_from_slice(body);
    }

    fn header(&self, out: &mut Vec<u8>) {
        let Family { name, kind, help } = self;
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
}

/// One family being written into the text. The header goes out with the first sample, so a
/// family without samples leaves no line.
pub(super) struct FamilyText<'o> {
    out: &'o mut Vec<u8>,
    family: &'o Family,
    started: bool,
}

impl<'o> FamilyText<'o> {
    pub(super) fn new(out: &'o mut Vec<u8>, family: &'o Family) -> Self {
        FamilyText {
            out,
            family,
            started: false,
        }
    }

    /// A sample whose labels are `labels`, already written as `k="v",...` and escaped (empty
    /// for none).
    pub(super) fn sample(&mut self, labels: &[u8], value: u64) {
        self.header();
        push_sample(self.out, self.family.name, labels, value);
    }

    /// A sample of a gauge in seconds, without labels.
    pub(super) fn seconds(&mut self, value: std::time::Duration) {
        self.header();
        let _ = writeln!(self.out, "{} {}", self.family.name, value.as_secs_f64());
    }

    /// HELP and TYPE, before the family's first sample.
    fn header(&mut self) {
        if !self.started {
            self.started = true;
            self.family.header(self.out);
        }
    }
}

/// Appends a short piece (a name, a head, digits) without a memcpy call (see the module
/// documentation): the text is lengthened first (zeroed by the C library's memset, which
/// stores a few bytes without start-up), then the piece is copied in eight-byte arrays,
/// assignments of a known size that the compiler makes single moves, and the rest a byte at
/// a time.
pub(super) fn push_bytes(out: &mut Vec<u8>, piece: &[u8]) {
    let start = out.len();
    out.resize(start + piece.len(), 0);
    let mut to = out[start..].chunks_exact_mut(8);
    let mut from = piece.chunks_exact(8);
    for (to, from) in (&mut to).zip(&mut from) {
        if let (Ok(to), Ok(from)) = (<&mut [u8; 8]>::try_from(to), <[u8; 8]>::try_from(from)) {
            *to = from;
        }
    }
    for (to, from) in to.into_remainder().iter_mut().zip(from.remainder()) {
        *to = *from;
    }
}

/// A number in decimal.
fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    push_bytes(out, &digits[start..]);
}

/// `name{labels} value`, a line; `labels` already written as `k="v",...` and escaped (empty for
/// none).
pub(super) fn push_sample(out: &mut Vec<u8>, name: &str, labels: &[u8], value: u64) {
    push_bytes(out, name.as_bytes());
    if !labels.is_empty() {
        out.push(b'{');
        push_bytes(out, labels);
        out.push(b'}');
    }
    out.push(b' ');
    push_u64(out, value);
    out.push(b'\n');
}

/// What every sample of a counter directory's files starts with: `name{labels,counter="`.
pub(super) fn counter_head(out: &mut Vec<u8>, name: &str, labels: &[(&str, &str)]) {
    push_bytes(out, name.as_bytes());
    out.push(b'{');
    push_labels(out, labels);
    if !labels.is_empty() {
        out.push(b',');
    }
    push_bytes(out, b"counter=\"");
}

/// `head` (see [`counter_head`]), the file's name and its value: a line.
pub(super) fn push_counter(out: &mut Vec<u8>, head: &[u8], file: &str, value: u64) {
    push_bytes(out, head);
    escape_label_value(out, file);
    push_bytes(out, b"\"} ");
    push_u64(out, value);
    out.push(b'\n');
}

/// `k="v",...` with every value escaped: what [`push_sample`] takes.
pub(super) fn labels(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(pairs.iter().map(|(k, v)| k.len() + v.len() + 4).sum());
    push_labels(&mut out, pairs);
    out
}

/// Appends `k="v",...`, every value escaped.
pub(super) fn push_labels(out: &mut Vec<u8>, pairs: &[(&str, &str)]) {
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_bytes(out, k.as_bytes());
        push_bytes(out, b"=\"");
        escape_label_value(out, v);
        out.push(b'"');
    }
}

/// Label values escape `\`, `"` and newline (exposition format 0.0.4). The runs between them
/// are appended whole. The escapes are ASCII and a UTF-8 sequence has no ASCII byte inside,
/// so every character is copied whole.
pub fn escape_label_value(out: &mut Vec<u8>, v: &str) {
    let mut rest = v.as_bytes();
    while let Some(at) = rest.iter().position(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        push_bytes(out, &rest[..at]);
        push_bytes(
            out,
            match rest[at] {
                b'\\' => b"\\\\",
                b'"' => b"\\\"",
                _ => b"\\n",
            },
        );
        rest = &rest[at + 1..];
    }
    push_bytes(out, rest);
}
