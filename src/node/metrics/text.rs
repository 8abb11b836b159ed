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

    /// A sample whose labels are `labels` (already written as `k="v",...`, escaped; empty for
    /// none) and, when given, one more label after them.
    pub(super) fn sample(&mut self, labels: &str, more: Option<(&str, &str)>, value: u64) {
        self.series(labels, more);
        push_u64(self.out, value);
        self.out.push('\n');
    }

    /// A sample of a gauge in seconds, without labels.
    pub(super) fn seconds(&mut self, value: std::time::Duration) {
        self.series("", None);
        let _ = writeln!(self.out, "{}", value.as_secs_f64());
    }

    /// The header before the family's first sample, then `name{labels} `.
    fn series(&mut self, labels: &str, more: Option<(&str, &str)>) {
        if !self.started {
            self.started = true;
            let Family { name, kind, help } = self.family;
            let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        }
        self.out.push_str(self.family.name);
        if !labels.is_empty() || more.is_some() {
            self.out.push('{');
            self.out.push_str(labels);
            if let Some((k, v)) = more {
                if !labels.is_empty() {
                    self.out.push(',');
                }
                push_label(self.out, k, v);
            }
            self.out.push('}');
        }
        self.out.push(' ');
    }
}

/// A number in decimal: a scrape writes thousands, and this spares each the formatting
/// machinery.
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
    out.extend(digits[start..].iter().map(|d| char::from(*d)));
}

/// `k="v",...` with every value escaped: what [`FamilyText::sample`] takes.
pub(super) fn labels(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_label(&mut out, k, v);
    }
    out
}

fn push_label(out: &mut String, key: &str, value: &str) {
    out.push_str(key);
    out.push_str("=\"");
    escape_label_value(out, value);
    out.push('"');
}

/// Label values escape `\`, `"` and newline (exposition format 0.0.4).
pub fn escape_label_value(out: &mut String, v: &str) {
    if !v.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        out.push_str(v);
        return;
    }
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}
