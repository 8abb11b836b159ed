//! `CNI_ARGS`: extra `KEY=VALUE` pairs separated by `;` (spec "Parameters").
//!
//! The spec lets a plugin reject keys it does not know unless the runtime sets
//! `IgnoreUnknown`, which is what the reference implementation does; we follow it so a typo in
//! a runtime's args is caught instead of silently dropped.

use std::net::IpAddr;
use std::str::FromStr;

use ipnetwork::IpNetwork;

use crate::error::{Error, Result};

/// Keys this plugin understands. The K8S_* ones are what kubelet/CRI runtimes send; MAC and IP
/// are what podman sends (its static-address feature).
pub const KNOWN_KEYS: &[&str] = &[
    "IgnoreUnknown",
    "K8S_POD_NAMESPACE",
    "K8S_POD_NAME",
    "K8S_POD_INFRA_CONTAINER_ID",
    "K8S_POD_UID",
    "MAC",
    "IP",
];

/// Parsed `CNI_ARGS`, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
    ignore_unknown: bool,
}

impl CniArgs {
    /// Parses `K=V;K=V`. A value may itself contain `=`: only the first one splits.
    pub fn parse(text: &str) -> Result<CniArgs> {
        let mut pairs = Vec::new();
        let mut malformed = Vec::new();
        // An empty segment (`A=1;;B=2`, a trailing `;`) carries nothing, so it is skipped
        // rather than refused.
        for segment in text.split(';').filter(|s| !s.is_empty()) {
            match segment.split_once('=') {
                Some((key, value)) if !key.is_empty() => {
                    pairs.push((key.to_string(), value.to_string()))
                }
                Some(_) => malformed.push(format!("{segment:?} has an empty key")),
                None => malformed.push(format!("{segment:?} has no '='")),
            }
        }
        if !malformed.is_empty() {
            return Err(Error::InvalidEnv {
                vars: vec!["CNI_ARGS".into()],
                msg: format!(
                    "CNI_ARGS must be KEY=VALUE pairs separated by ';': {}",
                    malformed.join(", ")
                ),
            });
        }
        let ignore_unknown = pairs
            .iter()
            .rev()
            .find(|(k, _)| k == "IgnoreUnknown")
            .is_some_and(|(_, v)| v == "1" || v.eq_ignore_ascii_case("true"));
        if !ignore_unknown {
            if let Some((key, value)) = pairs
                .iter()
                .find(|(k, _)| !KNOWN_KEYS.contains(&k.as_str()))
            {
                return Err(Error::UnsupportedField {
                    field: format!("CNI_ARGS {key}"),
                    value: value.clone(),
                    msg: format!(
                        "unknown CNI_ARGS key (known: {}); set IgnoreUnknown=1 in CNI_ARGS \
                         or drop it",
                        KNOWN_KEYS.join(", ")
                    ),
                });
            }
        }
        Ok(CniArgs {
            pairs,
            ignore_unknown,
        })
    }

    /// The value of `key`; when repeated, the last one wins, as in the reference
    /// implementation's loader.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn ignore_unknown(&self) -> bool {
        self.ignore_unknown
    }

    /// All pairs in the order given.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// `MAC`: colon-separated hex octets (6 for Ethernet, 20 for IPoIB), lowercased.
    pub fn mac(&self) -> Result<Option<String>> {
        let Some(text) = self.get("MAC") else {
            return Ok(None);
        };
        let octets: Vec<&str> = text.split(':').collect();
        let well_formed = (octets.len() == 6 || octets.len() == 20)
            && octets
                .iter()
                .all(|o| o.len() == 2 && o.bytes().all(|b| b.is_ascii_hexdigit()));
        if !well_formed {
            return Err(Error::InvalidEnv {
                vars: vec!["CNI_ARGS".into()],
                msg: format!(
                    "CNI_ARGS MAC={text:?} is not a hardware address \
                     (6 or 20 colon-separated hex octets)"
                ),
            });
        }
        Ok(Some(text.to_ascii_lowercase()))
    }

    /// `IP`: a comma-separated list. Each entry is either a bare address (what host-local
    /// reads) or address/prefix (what static reads); a bare address gets the full-length
    /// prefix (/32 or /128).
    pub fn ips(&self) -> Result<Vec<IpNetwork>> {
        let Some(text) = self.get("IP") else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let parsed = match entry.split_once('/') {
                Some((addr, prefix)) if prefix.bytes().all(|b| b.is_ascii_digit()) => {
                    IpAddr::from_str(addr)
                        .ok()
                        .zip(prefix.parse::<u8>().ok())
                        .and_then(|(a, p)| IpNetwork::new(a, p).ok())
                }
                Some(_) => None,
                None => IpAddr::from_str(entry).ok().map(IpNetwork::from),
            };
            match parsed {
                Some(net) => out.push(net),
                None => {
                    return Err(Error::InvalidEnv {
                        vars: vec!["CNI_ARGS".into()],
                        msg: format!(
                            "CNI_ARGS IP entry {entry:?} is not an IP address or address/prefix"
                        ),
                    })
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_split_at_the_first_equals() {
        let a = CniArgs::parse("K8S_POD_NAME=web;K8S_POD_NAMESPACE=a=b").unwrap();
        assert_eq!(a.get("K8S_POD_NAME"), Some("web"));
        assert_eq!(a.get("K8S_POD_NAMESPACE"), Some("a=b"));
        assert_eq!(a.get("K8S_POD_UID"), None);
        assert!(!a.ignore_unknown());
        assert_eq!(a.pairs().len(), 2);
    }

    #[test]
    fn empty_segments_are_skipped_and_last_value_wins() {
        let a = CniArgs::parse("MAC=aa:bb:cc:dd:ee:ff;;MAC=02:00:00:00:00:01;").unwrap();
        assert_eq!(a.get("MAC"), Some("02:00:00:00:00:01"));
        assert_eq!(CniArgs::parse("").unwrap(), CniArgs::default());
    }

    #[test]
    fn unknown_key_needs_ignore_unknown() {
        let e = CniArgs::parse("K8S_POD_NAME=x;FOO=bar").unwrap_err();
        assert_eq!(e.code(), 2);
        let text = e.to_string();
        assert!(text.contains("FOO") && text.contains("bar"), "{text}");
        assert!(text.contains("IgnoreUnknown=1"), "{text}");

        for v in ["1", "true", "TRUE", "True"] {
            let a = CniArgs::parse(&format!("IgnoreUnknown={v};FOO=bar")).unwrap();
            assert!(a.ignore_unknown(), "{v}");
            assert_eq!(a.get("FOO"), Some("bar"));
        }
        for v in ["0", "false", "yes", ""] {
            let e = CniArgs::parse(&format!("IgnoreUnknown={v};FOO=bar")).unwrap_err();
            assert_eq!(e.code(), 2, "{v}");
        }
    }

    #[test]
    fn malformed_pairs_are_invalid_env() {
        for bad in ["K8S_POD_NAME", "=x", "K8S_POD_NAME=a;junk"] {
            let e = CniArgs::parse(bad).unwrap_err();
            assert_eq!(e.code(), 4, "{bad}");
            assert!(
                matches!(&e, Error::InvalidEnv { vars, .. } if vars == &["CNI_ARGS"]),
                "{e}"
            );
        }
    }

    #[test]
    fn mac_is_validated_and_lowercased() {
        let a = CniArgs::parse("MAC=02:AA:bb:00:00:01").unwrap();
        assert_eq!(a.mac().unwrap().as_deref(), Some("02:aa:bb:00:00:01"));
        let ib = format!("MAC={}", vec!["80"; 20].join(":"));
        assert!(CniArgs::parse(&ib).unwrap().mac().unwrap().is_some());
        assert_eq!(CniArgs::default().mac().unwrap(), None);
        for bad in ["MAC=02:aa", "MAC=zz:00:00:00:00:00", "MAC=020000000001"] {
            let e = CniArgs::parse(bad).unwrap().mac().unwrap_err();
            assert_eq!(e.code(), 4, "{bad}");
        }
    }

    #[test]
    fn ips_accept_bare_and_cidr_lists() {
        let a = CniArgs::parse("IP=10.0.0.5,fd00::5/64, 10.1.0.1/24").unwrap();
        let ips: Vec<String> = a.ips().unwrap().iter().map(|n| n.to_string()).collect();
        assert_eq!(ips, ["10.0.0.5/32", "fd00::5/64", "10.1.0.1/24"]);
        assert!(CniArgs::default().ips().unwrap().is_empty());
        for bad in [
            "IP=10.0.0.300",
            "IP=10.0.0.1/33",
            "IP=10.0.0.1/255.255.255.0",
        ] {
            let e = CniArgs::parse(bad).unwrap().ips().unwrap_err();
            assert_eq!(e.code(), 4, "{bad}");
        }
    }
}
