//! Property-based fuzz tests of the protocol parsers: the network configuration, CNI_ARGS, the
//! CNI_* environment, results in every version, and `dispatch` over all of them. Case counts
//! and the deep mode: docs/testing.md, "Fuzzing".

use std::ffi::OsString;
use std::net::IpAddr;
use std::os::unix::ffi::OsStringExt;

use ipnetwork::IpNetwork;
use proptest::prelude::*;
use serde_json::Value;

use super::args::CniArgs;
use super::env::{Command, RawEnv};
use super::result::{CniResult, Dns, Interface, IpConfig, Route};
use super::version::SUPPORTED_VERSIONS;
use super::{dispatch, wire, NetConf, Plugin, Request};
use crate::error::{Error, Result};
use crate::testutil::fuzz::{self, check_rejection};

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(IpAddr::from),
        any::<[u8; 16]>().prop_map(IpAddr::from),
    ]
}

fn net() -> impl Strategy<Value = IpNetwork> {
    ip().prop_flat_map(|a| {
        let max: u8 = if a.is_ipv4() { 32 } else { 128 };
        (0..=max).prop_map(move |p| IpNetwork::new(a, p).expect("prefix in range"))
    })
}

fn opt_text() -> impl Strategy<Value = Option<String>> {
    prop::option::of(fuzz::text())
}

fn interface() -> impl Strategy<Value = Interface> {
    (
        fuzz::text(),
        opt_text(),
        prop::option::of(any::<u32>()),
        opt_text(),
        opt_text(),
        opt_text(),
    )
        .prop_map(|(name, mac, mtu, sandbox, socket_path, pci_id)| Interface {
            name,
            mac,
            mtu,
            sandbox,
            socket_path,
            pci_id,
        })
}

fn route() -> impl Strategy<Value = Route> {
    (
        net(),
        prop::option::of(ip()),
        prop::array::uniform5(prop::option::of(any::<u32>())),
    )
        .prop_map(|(dst, gw, [mtu, advmss, priority, table, scope])| Route {
            dst,
            gw,
            mtu,
            advmss,
            priority,
            table,
            scope: scope.map(|s| s as u8),
        })
}

/// Any result the model can hold.
fn result() -> impl Strategy<Value = CniResult> {
    let dns = (
        prop::collection::vec(fuzz::text(), 0..3),
        opt_text(),
        prop::collection::vec(fuzz::text(), 0..3),
        prop::collection::vec(fuzz::text(), 0..3),
    )
        .prop_map(|(nameservers, domain, search, options)| Dns {
            nameservers,
            domain,
            search,
            options,
        });
    (
        prop::collection::vec(interface(), 0..3),
        prop::collection::vec(
            (
                net(),
                prop::option::of(ip()),
                prop::option::of(any::<usize>()),
            ),
            0..4,
        ),
        prop::collection::vec(route(), 0..3),
        dns,
    )
        .prop_map(|(interfaces, ips, routes, dns)| {
            let n = interfaces.len();
            let ips = ips
                .into_iter()
                .map(|(address, gateway, interface)| IpConfig {
                    address,
                    gateway,
                    interface: interface.filter(|_| n > 0).map(|i| i % n),
                })
                .collect();
            CniResult {
                interfaces,
                ips,
                routes,
                dns,
            }
        })
}

/// What survives writing `r` in `version`: fields the version does not define are dropped,
/// and empty optional strings are left out.
fn as_written_in(r: &CniResult, version: &str) -> CniResult {
    let v1_1 = version == "1.1.0";
    let nonempty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
    CniResult {
        interfaces: r
            .interfaces
            .iter()
            .map(|i| Interface {
                name: i.name.clone(),
                mac: nonempty(&i.mac),
                mtu: i.mtu.filter(|_| v1_1),
                sandbox: nonempty(&i.sandbox),
                socket_path: nonempty(&i.socket_path).filter(|_| v1_1),
                pci_id: nonempty(&i.pci_id).filter(|_| v1_1),
            })
            .collect(),
        ips: r.ips.clone(),
        routes: r
            .routes
            .iter()
            .map(|x| {
                if v1_1 {
                    x.clone()
                } else {
                    Route::new(x.dst, x.gw)
                }
            })
            .collect(),
        dns: r.dns.clone(),
    }
}

fn version() -> impl Strategy<Value = &'static str> {
    prop::sample::select(SUPPORTED_VERSIONS.to_vec())
}

fn command() -> impl Strategy<Value = Command> {
    prop::sample::select(Command::ALL.to_vec())
}

/// A result document of some version, valid or edited.
fn result_doc() -> impl Strategy<Value = (Value, &'static str)> {
    (result(), version(), fuzz::json_edits(3), any::<bool>()).prop_map(
        |(r, v, edits, keep_version)| {
            let mut doc = r.to_value(v).expect("supported version");
            if !keep_version {
                // A prevResult inherits the conf's version.
                doc.as_object_mut().map(|o| o.remove("cniVersion"));
            }
            (fuzz::apply_edits(doc, &edits), v)
        },
    )
}

proptest! {
    #![proptest_config(fuzz::config(1000))]

    /// Any result written in any version reads back as the model minus what that version
    /// lacks; the IPs always survive.
    #[test]
    fn result_written_in_each_version_reads_back(r in result(), v in version()) {
        let doc = r.to_value(v).unwrap();
        let back = CniResult::parse(&doc, "1.1.0").unwrap();
        prop_assert_eq!(&back, &as_written_in(&r, v));
        prop_assert_eq!(&back.ips, &r.ips);
        let text = r.to_json(v).unwrap();
        prop_assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), doc);
    }

    /// Edited result documents either read (and then write and read back to the same model)
    /// or are refused with code 1 (version) or 6 (decode).
    #[test]
    fn result_parse_never_panics((doc, v) in result_doc()) {
        match CniResult::parse(&doc, v) {
            Ok(r) => {
                let own = doc.get("cniVersion").and_then(Value::as_str).unwrap_or(v);
                let again = CniResult::parse(&r.to_value(own).unwrap(), own).unwrap();
                prop_assert_eq!(again, r);
            }
            Err(e) => check_rejection(&e, &[1, 6])?,
        }
    }

    /// Arbitrary JSON as a result, against each version.
    #[test]
    fn result_parse_of_arbitrary_json(doc in fuzz::json(), v in fuzz::text()) {
        if let Err(e) = CniResult::parse(&doc, &v) {
            check_rejection(&e, &[1, 6])?;
        }
    }

    /// The network configuration: near-valid documents, edited, as bytes.
    #[test]
    fn conf_parse_never_panics(stdin in fuzz::mutated_json(fuzz::conf_doc()), c in command()) {
        match NetConf::parse(&stdin, c) {
            Ok(conf) => {
                prop_assert!(super::version::is_supported(&conf.cni_version));
                prop_assert!(super::env::is_valid_name(&conf.name));
                prop_assert!(!conf.plugin_type.is_empty());
                if let Some(prev) = &conf.prev_result {
                    // A prevResult read in the conf's version keeps its IPs when written
                    // again in it.
                    let back = CniResult::parse(&prev.to_value(&conf.cni_version).unwrap(), &conf.cni_version).unwrap();
                    prop_assert_eq!(&back.ips, &prev.ips);
                }
            }
            Err(e) => check_rejection(&e, &[1, 6, 7])?,
        }
    }

    #[test]
    fn conf_parse_of_arbitrary_bytes(stdin in fuzz::bytes(), c in command()) {
        if let Err(e) = NetConf::parse(&stdin, c) {
            check_rejection(&e, &[1, 6, 7])?;
        }
    }

    /// CNI_ARGS: refused with code 2 (unknown key) or 4 (malformed); accepted args keep every
    /// key in order, and their text form parses back to the same args.
    #[test]
    fn cni_args_parse(text in cni_args_text()) {
        match CniArgs::parse(&text) {
            Ok(a) => {
                let segments: Vec<&str> = text.split(';').filter(|s| !s.is_empty()).collect();
                prop_assert_eq!(a.pairs().len(), segments.len());
                for ((k, v), seg) in a.pairs().iter().zip(&segments) {
                    prop_assert_eq!(format!("{k}={v}"), *seg);
                    let last = a.pairs().iter().rev().find(|(k2, _)| k2 == k).map(|(_, v)| v.as_str());
                    prop_assert_eq!(a.get(k), last);
                }
                let joined: Vec<String> = a.pairs().iter().map(|(k, v)| format!("{k}={v}")).collect();
                prop_assert_eq!(CniArgs::parse(&joined.join(";")).unwrap(), a.clone());
                match a.mac() {
                    Ok(Some(m)) => prop_assert_eq!(m.clone(), m.to_ascii_lowercase()),
                    Ok(None) => prop_assert!(a.get("MAC").is_none()),
                    Err(e) => check_rejection(&e, &[4])?,
                }
                match a.ips() {
                    Ok(ips) => {
                        for n in ips {
                            prop_assert_eq!(super::result::parse_cidr(&n.to_string()), Some(n));
                        }
                    }
                    Err(e) => check_rejection(&e, &[4])?,
                }
            }
            Err(e) => check_rejection(&e, &[2, 4])?,
        }
    }

    /// The CNI_* environment, with values missing, empty, garbage or not UTF-8.
    #[test]
    fn env_validate(vars in env_vars()) {
        let raw = RawEnv::from_vars(vars);
        if let Err(e) = raw.command() {
            check_rejection(&e, &[4])?;
        }
        for c in Command::ALL {
            match raw.validate(c) {
                Ok(env) => {
                    prop_assert_eq!(env.command, c);
                    prop_assert!(!env.path.is_empty());
                    if matches!(c, Command::Add | Command::Del | Command::Check) {
                        prop_assert!(super::env::is_valid_name(&env.container_id));
                        prop_assert_eq!(super::env::ifname_problem(&env.ifname), None);
                    }
                    if matches!(c, Command::Add | Command::Check) {
                        prop_assert!(env.netns.is_some());
                    }
                }
                Err(e) => check_rejection(&e, &[2, 4])?,
            }
        }
    }

    /// The whole protocol layer as the binary runs it, over a plugin that succeeds with an
    /// arbitrary result: the output is one JSON object, and an error has a documented code.
    #[test]
    fn dispatch_answers_with_one_json_object(
        vars in env_vars(),
        stdin in prop_oneof![3 => fuzz::mutated_json(fuzz::conf_doc()), 1 => fuzz::bytes()],
        r in result(),
    ) {
        prop_assume!(!fuzz::names_log_file(&stdin));
        let plugin = Succeeds(r);
        match dispatch(&plugin, vars, stdin) {
            Ok(None) => {}
            Ok(Some(json)) => {
                let v: Value = serde_json::from_str(&json).unwrap();
                prop_assert!(v.get("cniVersion").and_then(Value::as_str).is_some(), "{}", json);
            }
            Err((version, e)) => {
                prop_assert!(!version.is_empty());
                check_rejection(&e, fuzz::DOCUMENTED_CODES)?;
                let v: Value = serde_json::from_str(&wire::error_json(&version, &e)).unwrap();
                prop_assert_eq!(v["code"].as_u64(), Some(u64::from(e.code())));
                prop_assert!(v["msg"].as_str().is_some_and(|m| !m.is_empty()), "{}", v);
                prop_assert_eq!(v["cniVersion"].as_str(), Some(version.as_str()));
            }
        }
    }

    /// VERSION's reply and version comparison accept anything.
    #[test]
    fn version_reply_is_always_json(stdin in fuzz::mutated_json(fuzz::conf_doc()), a in fuzz::text(), b in fuzz::text()) {
        let v: Value = serde_json::from_str(&super::version::version_reply(&stdin)).unwrap();
        prop_assert!(super::version::is_supported(v["cniVersion"].as_str().unwrap()));
        let _ = super::version::compare(&a, &b);
    }
}

/// Succeeds with a fixed result, so dispatch's output path sees arbitrary results.
struct Succeeds(CniResult);

impl Plugin for Succeeds {
    fn add(&self, _: &Request) -> Result<CniResult> {
        Ok(self.0.clone())
    }
    fn del(&self, _: &Request) -> Result<()> {
        Ok(())
    }
    fn check(&self, _: &Request) -> Result<()> {
        Ok(())
    }
    fn status(&self, _: &Request) -> Result<()> {
        Ok(())
    }
    fn gc(&self, _: &Request) -> Result<()> {
        Err(Error::NotAvailable("gc is not part of this fake".into()))
    }
}

/// `K=V` segments from known and unknown keys and malformed pieces, joined by `;`.
fn cni_args_text() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        4 => prop::sample::select(super::args::KNOWN_KEYS.to_vec()).prop_map(str::to_string),
        1 => fuzz::text(),
    ];
    let value = prop_oneof![
        2 => prop::sample::select(vec![
            "1", "true", "0", "02:AA:bb:00:00:01", "02:aa", "10.0.0.5,fd00::5/64, 10.1.0.1/24",
            "10.0.0.300", "10.0.0.1/33", "10.0.0.1/", "a=b", "",
        ])
        .prop_map(str::to_string),
        1 => fuzz::text(),
        1 => Just(vec!["80"; 20].join(":")),
    ];
    let segment = prop_oneof![
        6 => (key, value).prop_map(|(k, v)| format!("{k}={v}")),
        1 => fuzz::text(),
    ];
    prop_oneof![
        4 => prop::collection::vec(segment, 0..5).prop_map(|s| s.join(";")),
        1 => fuzz::text(),
    ]
}

/// CNI_* variables as a runtime (or a broken one) sets them, in any order, some repeated.
fn env_vars() -> impl Strategy<Value = Vec<(OsString, OsString)>> {
    let key = prop::sample::select(vec![
        "CNI_COMMAND",
        "CNI_CONTAINERID",
        "CNI_NETNS",
        "CNI_IFNAME",
        "CNI_ARGS",
        "CNI_PATH",
        "cni_command",
        "HOME",
    ]);
    let value = prop_oneof![
        3 => prop::sample::select(vec![
            "ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION", "add", "UP", "abc123", "-x",
            "/var/run/netns/p", "net1", "eth0:1", "a b", "0123456789abcdef", "..",
            "K8S_POD_NAME=web", "IgnoreUnknown=1;FOO=bar", "FOO=bar", "junk", "/opt/cni/bin",
            ":", "::/opt/cni/bin", "",
        ])
        .prop_map(OsString::from),
        2 => fuzz::text().prop_map(OsString::from),
        1 => prop::collection::vec(any::<u8>(), 0..12).prop_map(OsString::from_vec),
    ];
    let pair = (key, value).prop_map(|(k, v)| (OsString::from(k), v));
    // Mostly a complete, valid environment with a few variables replaced, dropped or added,
    // so that most cases get past the first check.
    let valid = prop::sample::select(Command::ALL.to_vec()).prop_map(|c| {
        [
            ("CNI_COMMAND", c.as_str()),
            ("CNI_CONTAINERID", "abc123"),
            ("CNI_NETNS", "/var/run/netns/pod"),
            ("CNI_IFNAME", "net1"),
            ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=web"),
            ("CNI_PATH", "/opt/cni/bin"),
        ]
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect::<Vec<_>>()
    });
    let edited = (
        valid,
        prop::collection::vec(any::<prop::sample::Index>(), 0..3),
        prop::collection::vec(pair.clone(), 0..3),
    )
        .prop_map(|(mut vars, drop, add)| {
            for i in drop {
                if !vars.is_empty() {
                    vars.remove(i.index(vars.len()));
                }
            }
            vars.extend(add);
            vars
        });
    prop_oneof![
        3 => edited,
        1 => prop::collection::vec(pair, 0..10),
    ]
}
