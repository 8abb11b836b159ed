//! The kernel's uapi headers, read back so that tests check the constants the netlink code
//! speaks against the installed ones.

use std::collections::HashMap;

/// Values of the enumerators and integer `#define`s of a C header: enough C to read
/// rdma_netlink.h, netlink.h and sock_diag.h (implicit numbering, `= literal`, `= OTHER_NAME`, `(1 << n)`).
pub fn c_constants(text: &str) -> HashMap<String, i64> {
    let mut src = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        src.push_str(&rest[..start]);
        src.push(' ');
        rest = match rest[start + 2..].find("*/") {
            Some(end) => &rest[start + 2 + end + 2..],
            None => "",
        };
    }
    src.push_str(rest);
    let src: String = src
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");

    let mut values: HashMap<String, i64> = HashMap::new();
    let eval = |expr: &str, values: &HashMap<String, i64>| -> Option<i64> {
        let e = expr
            .trim()
            .trim_start_matches('(')
            .trim_end_matches(')')
            .trim();
        if let Some((a, b)) = e.split_once("<<") {
            return Some(lit(a.trim())? << lit(b.trim())?);
        }
        lit(e).or_else(|| values.get(e).copied())
    };
    for line in src.lines() {
        let mut words = line.split_whitespace();
        if words.next() == Some("#define") {
            if let (Some(name), Some(value)) = (words.next(), words.next()) {
                if let Some(v) = eval(value, &values) {
                    values.insert(name.to_string(), v);
                }
            }
        }
    }
    let mut rest = src.as_str();
    while let Some(pos) = rest.find("enum") {
        let after = &rest[pos + 4..];
        let (Some(open), Some(close)) = (after.find('{'), after.find('}')) else {
            break;
        };
        if open > close || after[..open].contains(';') {
            rest = after;
            continue;
        }
        let mut next: Option<i64> = Some(0);
        for item in after[open + 1..close].split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (name, value) = match item.split_once('=') {
                Some((n, e)) => (n.trim(), eval(e, &values)),
                None => (item, next),
            };
            if let Some(v) = value {
                values.insert(name.to_string(), v);
            }
            next = value.map(|v| v + 1);
        }
        rest = &after[close..];
    }
    values
}

/// An integer literal of C, decimal or `0x` hex.
pub fn lit(s: &str) -> Option<i64> {
    match s.strip_prefix("0x") {
        Some(h) => i64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// A uapi header's text; a missing one fails the test with what to install.
pub fn header(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!("{path}: {e}; install the kernel uapi headers (Debian: linux-libc-dev)")
    })
}

/// Each `(name, value)` of `ours` is what the header at `header_path` defines.
pub fn assert_header_agrees(header_path: &str, ours: &[(&str, i64)]) {
    let table = c_constants(&header(header_path));
    for (name, value) in ours {
        assert_eq!(table.get(*name), Some(value), "{name} in {header_path}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_reader_follows_c_enum_rules() {
        let v = c_constants(
            "#define A 20\nenum x {\n X_UNSPEC,\n X_PAD = X_UNSPEC, /* a, b */\n X_ONE, // c,\n \
             X_NINE = 9,\n X_TEN,\n X_BIT = (1 << 3),\n};\n/* enum { NOT_THIS } */",
        );
        assert_eq!(v["A"], 20);
        assert_eq!(v["X_PAD"], 0);
        assert_eq!(v["X_ONE"], 1);
        assert_eq!(v["X_TEN"], 10);
        assert_eq!(v["X_BIT"], 8);
        assert!(!v.contains_key("NOT_THIS"));
    }
}
