//! The exposition text itself: a family's `# HELP` and `# TYPE` lines before its first sample,
//! samples as `name{label="value",...} number`, label values escaped.

use std::fmt::Write as _;

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
    pub(super) fn write(&self, out: &mut String, body: &str) {
        if body.is_empty() {
            return;
        }
        self.header(out);
        out.push_str(body);
    }

    fn header(&self, out: &mut String) {
        let Family { name, kind, help } = self;
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
}

/// One family being written into the text. The header goes out with the first sample, so a
/// family without samples leaves no line.
pub(super) struct FamilyText<'o> {
    out: &'o mut String,
    family: &'o Family,
    started: bool,
}

impl<'o> FamilyText<'o> {
    pub(super) fn new(out: &'o mut String, family: &'o Family) -> Self {
        FamilyText {
            out,
            family,
            started: false,
        }
    }

    /// A sample whose labels are `labels`, already written as `k="v",...` and escaped (empty
    /// for none).
    pub(super) fn sample(&mut self, labels: &str, value: u64) {
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

/// A number in decimal. Pushed a digit at a time: a scrape writes thousands of numbers, and
/// musl's memcpy, behind `push_str`, costs more for a few bytes than pushing them one by one.
fn push_u64(out: &mut String, mut v: u64) {
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
    for d in &digits[start..] {
        out.push(char::from(*d));
    }
}

/// `name{labels} value`, a line; `labels` already written as `k="v",...` and escaped (empty for
/// none).
pub(super) fn push_sample(out: &mut String, name: &str, labels: &str, value: u64) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        out.push_str(labels);
        out.push('}');
    }
    out.push(' ');
    push_u64(out, value);
    out.push('\n');
}

/// What every sample of a counter directory's files starts with: `name{labels,counter="`.
pub(super) fn counter_head(out: &mut String, name: &str, labels: &[(&str, &str)]) {
    out.push_str(name);
    out.push('{');
    push_labels(out, labels);
    if !labels.is_empty() {
        out.push(',');
    }
    out.push_str("counter=\"");
}

/// `head` (see [`counter_head`]), the file's name and its value: a line.
pub(super) fn push_counter(out: &mut String, head: &str, file: &str, value: u64) {
    out.push_str(head);
    escape_label_value(out, file);
    out.push('"');
    out.push('}');
    out.push(' ');
    push_u64(out, value);
    out.push('\n');
}

/// `k="v",...` with every value escaped: what [`push_sample`] takes.
pub(super) fn labels(pairs: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(pairs.iter().map(|(k, v)| k.len() + v.len() + 4).sum());
    push_labels(&mut out, pairs);
    out
}

/// Appends `k="v",...`, every value escaped.
pub(super) fn push_labels(out: &mut String, pairs: &[(&str, &str)]) {
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push_str("=\"");
        escape_label_value(out, v);
        out.push('"');
    }
}

/// Label values escape `\`, `"` and newline (exposition format 0.0.4). One pass that copies as
/// it checks: label values are short, and for a few bytes musl's memcpy costs more.
pub fn escape_label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}
