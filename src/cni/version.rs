//! Spec versions this plugin speaks, and the VERSION command's reply.

use std::cmp::Ordering;

use serde_json::{json, Value};

/// Every version whose result format we can read (prevResult, IPAM) and write.
pub const SUPPORTED_VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// Errors met before a conf's version is known are reported in the newest version we speak.
pub const DEFAULT_ERROR_VERSION: &str = "1.1.0";

pub fn is_supported(version: &str) -> bool {
    SUPPORTED_VERSIONS.contains(&version)
}

/// Orders `x.y.z` versions numerically (a missing minor or patch counts as 0, so "1.1" equals
/// "1.1.0"); None when either is not of that form.
pub fn compare(a: &str, b: &str) -> Option<Ordering> {
    Some(parse(a)?.cmp(&parse(b)?))
}

fn parse(v: &str) -> Option<[u64; 3]> {
    let parts: Vec<&str> = v.split('.').collect();
    if parts.len() > 3 {
        return None;
    }
    let mut out = [0u64; 3];
    for (slot, part) in out.iter_mut().zip(&parts) {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *slot = part.parse().ok()?;
    }
    Some(out)
}

/// The `cniVersion` field of `stdin` when it is a non-empty string.
fn conf_version(stdin: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(stdin).ok()?;
    match value.get("cniVersion")? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

/// VERSION's reply: answered in the caller's version when we speak it, so an old runtime can
/// read it, else in the newest.
pub fn version_reply(stdin: &[u8]) -> String {
    let version = conf_version(stdin)
        .filter(|v| is_supported(v))
        .unwrap_or_else(|| DEFAULT_ERROR_VERSION.to_string());
    json!({
        "cniVersion": version,
        "supportedVersions": SUPPORTED_VERSIONS,
    })
    .to_string()
}

/// The version an error is reported in: the conf's own when it can be read, since the runtime
/// decodes our output with the version it sent.
pub fn error_version_of(stdin: &[u8]) -> String {
    conf_version(stdin).unwrap_or_else(|| DEFAULT_ERROR_VERSION.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_is_numeric() {
        assert_eq!(compare("0.4.0", "1.0.0"), Some(Ordering::Less));
        assert_eq!(compare("1.10.0", "1.9.0"), Some(Ordering::Greater));
        assert_eq!(compare("1.1", "1.1.0"), Some(Ordering::Equal));
        assert_eq!(compare("1", "0.9.9"), Some(Ordering::Greater));
        for bad in ["", "1.x.0", "1..0", "1.0.0.0", "v1.0.0", "1.0.0-rc1"] {
            assert_eq!(compare(bad, "1.0.0"), None, "{bad:?}");
        }
    }

    #[test]
    fn supported_list_is_sorted_and_complete() {
        assert!(SUPPORTED_VERSIONS
            .windows(2)
            .all(|w| compare(w[0], w[1]) == Some(Ordering::Less)));
        assert!(is_supported("0.3.1") && is_supported("1.1.0"));
        assert!(!is_supported("0.2.0") && !is_supported("1.1"));
        assert!(is_supported(DEFAULT_ERROR_VERSION));
    }

    #[test]
    fn version_reply_echoes_a_supported_version_only() {
        assert_eq!(
            version_reply(br#"{"cniVersion":"0.4.0"}"#),
            r#"{"cniVersion":"0.4.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}"#
        );
        for stdin in [&br#"{"cniVersion":"9.9.9"}"#[..], b"", b"not json", b"{}"] {
            let v: Value = serde_json::from_str(&version_reply(stdin)).unwrap();
            assert_eq!(v["cniVersion"], "1.1.0");
        }
    }

    #[test]
    fn error_version_takes_any_readable_string() {
        assert_eq!(error_version_of(br#"{"cniVersion":"0.3.1"}"#), "0.3.1");
        assert_eq!(error_version_of(br#"{"cniVersion":"9.9.9"}"#), "9.9.9");
        assert_eq!(error_version_of(br#"{"cniVersion":3}"#), "1.1.0");
        assert_eq!(error_version_of(br#"{"cniVersion":""}"#), "1.1.0");
        assert_eq!(error_version_of(b"{"), "1.1.0");
    }
}
