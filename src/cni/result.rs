//! The ADD result (spec "Success"), modelled as 1.1.0 and read or written in any supported
//! version.
//!
//! Version differences handled here: up to 0.4.0 each IP carries `version` ("4"/"6"), dropped
//! in 1.0.0; 1.1.0 adds interface `mtu`, `socketPath`, `pciID` and route `mtu`, `advmss`,
//! `priority`, `table`, `scope`. Fields a version does not define are neither read nor written
//! in it.

use std::net::IpAddr;
use std::str::FromStr;

use ipnetwork::IpNetwork;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::cni::version;
use crate::error::{Error, Result};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniResult {
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub mac: Option<String>,
    pub mtu: Option<u32>,
    /// The netns path for interfaces inside the container; None for host-side ones.
    pub sandbox: Option<String>,
    pub socket_path: Option<String>,
    pub pci_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpConfig {
    /// Address with its subnet's prefix length, e.g. 10.1.2.3/24.
    pub address: IpNetwork,
    pub gateway: Option<IpAddr>,
    /// Index into `interfaces`.
    pub interface: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dst: IpNetwork,
    pub gw: Option<IpAddr>,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
    pub priority: Option<u32>,
    pub table: Option<u32>,
    pub scope: Option<u8>,
}

impl Route {
    pub fn new(dst: IpNetwork, gw: Option<IpAddr>) -> Route {
        Route {
            dst,
            gw,
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Dns {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_none()
            && self.search.is_empty()
            && self.options.is_empty()
    }

    /// Reads a DNS object (same shape in every version and in the network conf). The error is
    /// a path-qualified message for the caller to wrap.
    pub fn from_value(value: &Value, path: &str) -> std::result::Result<Dns, String> {
        let obj = object(value, path)?;
        Ok(Dns {
            nameservers: str_list(obj, "nameservers", path)?,
            domain: opt_str(obj, "domain", path)?,
            search: str_list(obj, "search", path)?,
            options: str_list(obj, "options", path)?,
        })
    }
}

/// How a version lays a result out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// 0.3.0, 0.3.1, 0.4.0.
    Legacy,
    V1_0,
    V1_1,
}

fn shape(v: &str) -> Result<Shape> {
    match v {
        "0.3.0" | "0.3.1" | "0.4.0" => Ok(Shape::Legacy),
        "1.0.0" => Ok(Shape::V1_0),
        "1.1.0" => Ok(Shape::V1_1),
        _ => Err(Error::IncompatibleVersion {
            version: v.to_string(),
            msg: format!(
                "results can be read and written only in {}",
                version::SUPPORTED_VERSIONS.join(", ")
            ),
        }),
    }
}

impl CniResult {
    /// Reads a result in the version named by its own `cniVersion` field, or `version` when it
    /// has none (a prevResult inherits the conf's version).
    pub fn parse(value: &Value, version: &str) -> Result<CniResult> {
        let version = match value.get("cniVersion") {
            Some(Value::String(v)) => v.as_str(),
            None | Some(Value::Null) => version,
            Some(other) => {
                return Err(Error::decode(
                    "CNI result",
                    format!("cniVersion must be a string, got {other}"),
                ))
            }
        };
        let shape = shape(version)?;
        parse_shaped(value, shape).map_err(|msg| Error::decode("CNI result", msg))
    }

    /// The result as JSON text in `version`'s layout.
    pub fn to_json(&self, version: &str) -> Result<String> {
        let wire = self.wire(version)?;
        serde_json::to_string(&wire).map_err(|e| Error::decode("CNI result", e.to_string()))
    }

    pub fn to_value(&self, version: &str) -> Result<Value> {
        let wire = self.wire(version)?;
        serde_json::to_value(&wire).map_err(|e| Error::decode("CNI result", e.to_string()))
    }

    fn wire<'a>(&'a self, version: &'a str) -> Result<WireResult<'a>> {
        let shape = shape(version)?;
        let v1_1 = shape == Shape::V1_1;
        let nonempty = |s: &'a Option<String>| s.as_deref().filter(|s| !s.is_empty());
        Ok(WireResult {
            cni_version: version,
            interfaces: self
                .interfaces
                .iter()
                .map(|i| WireInterface {
                    name: &i.name,
                    mac: nonempty(&i.mac),
                    mtu: i.mtu.filter(|_| v1_1),
                    sandbox: nonempty(&i.sandbox),
                    socket_path: nonempty(&i.socket_path).filter(|_| v1_1),
                    pci_id: nonempty(&i.pci_id).filter(|_| v1_1),
                })
                .collect(),
            ips: self
                .ips
                .iter()
                .map(|ip| WireIp {
                    version: (shape == Shape::Legacy).then_some(if ip.address.is_ipv4() {
                        "4"
                    } else {
                        "6"
                    }),
                    interface: ip.interface,
                    address: ip.address.to_string(),
                    gateway: ip.gateway.map(|g| g.to_string()),
                })
                .collect(),
            routes: self
                .routes
                .iter()
                .map(|r| WireRoute {
                    dst: r.dst.to_string(),
                    gw: r.gw.map(|g| g.to_string()),
                    mtu: r.mtu.filter(|_| v1_1),
                    advmss: r.advmss.filter(|_| v1_1),
                    priority: r.priority.filter(|_| v1_1),
                    table: r.table.filter(|_| v1_1),
                    scope: r.scope.filter(|_| v1_1),
                })
                .collect(),
            dns: &self.dns,
        })
    }
}

// Field order follows the reference implementation's types so output diffs cleanly against
// other plugins'.
#[derive(Serialize)]
struct WireResult<'a> {
    #[serde(rename = "cniVersion")]
    cni_version: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    interfaces: Vec<WireInterface<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ips: Vec<WireIp>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    routes: Vec<WireRoute>,
    #[serde(skip_serializing_if = "Dns::is_empty")]
    dns: &'a Dns,
}

#[derive(Serialize)]
struct WireInterface<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    mac: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mtu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<&'a str>,
    #[serde(rename = "socketPath", skip_serializing_if = "Option::is_none")]
    socket_path: Option<&'a str>,
    #[serde(rename = "pciID", skip_serializing_if = "Option::is_none")]
    pci_id: Option<&'a str>,
}

#[derive(Serialize)]
struct WireIp {
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    interface: Option<usize>,
    address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway: Option<String>,
}

#[derive(Serialize)]
struct WireRoute {
    dst: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    gw: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mtu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    advmss: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    table: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<u8>,
}

type Parsed<T> = std::result::Result<T, String>;

fn parse_shaped(value: &Value, shape: Shape) -> Parsed<CniResult> {
    let top = object(value, "result")?;
    let v1_1 = shape == Shape::V1_1;

    let mut interfaces = Vec::new();
    for (i, item) in list(top, "interfaces", "")?.iter().enumerate() {
        let path = format!("interfaces[{i}]");
        let obj = object(item, &path)?;
        let name =
            opt_str(obj, "name", &path)?.ok_or_else(|| format!("{path}.name is required"))?;
        let only_1_1 = |key: &str| -> Parsed<Option<String>> {
            if v1_1 {
                opt_str(obj, key, &path)
            } else {
                Ok(None)
            }
        };
        interfaces.push(Interface {
            name,
            mac: opt_str(obj, "mac", &path)?.filter(|s| !s.is_empty()),
            mtu: if v1_1 {
                opt_u32(obj, "mtu", &path)?
            } else {
                None
            },
            sandbox: opt_str(obj, "sandbox", &path)?.filter(|s| !s.is_empty()),
            socket_path: only_1_1("socketPath")?.filter(|s| !s.is_empty()),
            pci_id: only_1_1("pciID")?.filter(|s| !s.is_empty()),
        });
    }

    let mut ips = Vec::new();
    for (i, item) in list(top, "ips", "")?.iter().enumerate() {
        let path = format!("ips[{i}]");
        let obj = object(item, &path)?;
        let address = opt_str(obj, "address", &path)?
            .ok_or_else(|| format!("{path}.address is required"))
            .and_then(|a| parse_cidr(&a).ok_or_else(|| bad_cidr(&path, "address", &a)))?;
        if shape == Shape::Legacy {
            // Up to 0.4.0 the family is stated twice; a disagreement means a broken producer.
            match opt_str(obj, "version", &path)?.as_deref() {
                None => {}
                Some("4") if address.is_ipv4() => {}
                Some("6") if address.is_ipv6() => {}
                Some(v @ ("4" | "6")) => {
                    return Err(format!(
                        "{path}.version is {v:?} but address {address} is IPv{}",
                        if address.is_ipv4() { 4 } else { 6 }
                    ))
                }
                Some(v) => return Err(format!("{path}.version must be \"4\" or \"6\", got {v:?}")),
            }
        }
        let interface = match obj.get("interface") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let idx = v
                    .as_u64()
                    .ok_or_else(|| format!("{path}.interface must be a non-negative integer"))?;
                if idx >= interfaces.len() as u64 {
                    return Err(format!(
                        "{path}.interface is {idx} but there are {} interfaces",
                        interfaces.len()
                    ));
                }
                Some(idx as usize)
            }
        };
        ips.push(IpConfig {
            address,
            gateway: opt_ip(obj, "gateway", &path)?,
            interface,
        });
    }

    let mut routes = Vec::new();
    for (i, item) in list(top, "routes", "")?.iter().enumerate() {
        let path = format!("routes[{i}]");
        let obj = object(item, &path)?;
        let dst = opt_str(obj, "dst", &path)?
            .ok_or_else(|| format!("{path}.dst is required"))
            .and_then(|d| parse_cidr(&d).ok_or_else(|| bad_cidr(&path, "dst", &d)))?;
        let mut route = Route::new(dst, opt_ip(obj, "gw", &path)?);
        if v1_1 {
            route.mtu = opt_u32(obj, "mtu", &path)?;
            route.advmss = opt_u32(obj, "advmss", &path)?;
            route.priority = opt_u32(obj, "priority", &path)?;
            route.table = opt_u32(obj, "table", &path)?;
            route.scope = match opt_u32(obj, "scope", &path)? {
                None => None,
                Some(s) => {
                    Some(u8::try_from(s).map_err(|_| format!("{path}.scope {s} is above 255"))?)
                }
            };
        }
        routes.push(route);
    }

    let dns = match top.get("dns") {
        None | Some(Value::Null) => Dns::default(),
        Some(v) => Dns::from_value(v, "dns")?,
    };

    Ok(CniResult {
        interfaces,
        ips,
        routes,
        dns,
    })
}

/// `addr/prefix` with a numeric prefix; ipnetwork alone would also take a bare address or a
/// dotted netmask, which results never carry.
pub fn parse_cidr(text: &str) -> Option<IpNetwork> {
    let (addr, prefix) = text.split_once('/')?;
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    IpNetwork::new(IpAddr::from_str(addr).ok()?, prefix.parse().ok()?).ok()
}

fn bad_cidr(path: &str, key: &str, text: &str) -> String {
    format!("{path}.{key} {text:?} is not an address/prefix (CIDR)")
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn object<'a>(value: &'a Value, path: &str) -> Parsed<&'a Map<String, Value>> {
    value
        .as_object()
        .ok_or_else(|| format!("{path} must be an object, got {value}"))
}

fn list<'a>(obj: &'a Map<String, Value>, key: &str, path: &str) -> Parsed<&'a [Value]> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(format!("{} must be an array, got {other}", join(path, key))),
    }
}

fn opt_str(obj: &Map<String, Value>, key: &str, path: &str) -> Parsed<Option<String>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("{} must be a string, got {other}", join(path, key))),
    }
}

fn str_list(obj: &Map<String, Value>, key: &str, path: &str) -> Parsed<Vec<String>> {
    list(obj, key, path)?
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{}[{i}] must be a string, got {v}", join(path, key)))
        })
        .collect()
}

fn opt_u32(obj: &Map<String, Value>, key: &str, path: &str) -> Parsed<Option<u32>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "{} must be an integer from 0 to {}, got {v}",
                    join(path, key),
                    u32::MAX
                )
            }),
    }
}

fn opt_ip(obj: &Map<String, Value>, key: &str, path: &str) -> Parsed<Option<IpAddr>> {
    match opt_str(obj, key, path)? {
        None => Ok(None),
        Some(text) => IpAddr::from_str(&text)
            .map(Some)
            .map_err(|_| format!("{} {text:?} is not an IP address", join(path, key))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn net(s: &str) -> IpNetwork {
        parse_cidr(s).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// A result using every field the model has.
    fn full() -> CniResult {
        CniResult {
            interfaces: vec![
                Interface {
                    name: "host-side".into(),
                    mac: Some("02:00:00:00:00:01".into()),
                    ..Interface::default()
                },
                Interface {
                    name: "net1".into(),
                    mac: Some("02:00:00:00:00:02".into()),
                    mtu: Some(9000),
                    sandbox: Some("/var/run/netns/pod".into()),
                    socket_path: Some("/run/sock".into()),
                    pci_id: Some("0000:3b:00.2".into()),
                },
            ],
            ips: vec![
                IpConfig {
                    address: net("10.1.2.3/24"),
                    gateway: Some(ip("10.1.2.1")),
                    interface: Some(1),
                },
                IpConfig {
                    address: net("fd00::3/64"),
                    gateway: None,
                    interface: None,
                },
            ],
            routes: vec![Route {
                dst: net("0.0.0.0/0"),
                gw: Some(ip("10.1.2.1")),
                mtu: Some(1500),
                advmss: Some(1460),
                priority: Some(100),
                table: Some(200),
                scope: Some(0),
            }],
            dns: Dns {
                nameservers: vec!["10.0.0.10".into()],
                domain: Some("cluster.local".into()),
                search: vec!["svc.cluster.local".into()],
                options: vec!["ndots:5".into()],
            },
        }
    }

    const IFACES_1_0: &str = r#""interfaces":[{"name":"host-side","mac":"02:00:00:00:00:01"},{"name":"net1","mac":"02:00:00:00:00:02","sandbox":"/var/run/netns/pod"}]"#;
    const DNS: &str = r#""dns":{"nameservers":["10.0.0.10"],"domain":"cluster.local","search":["svc.cluster.local"],"options":["ndots:5"]}"#;

    #[test]
    fn legacy_shape_bytes() {
        for v in ["0.3.0", "0.3.1", "0.4.0"] {
            let expected = format!(
                r#"{{"cniVersion":"{v}",{IFACES_1_0},"ips":[{{"version":"4","interface":1,"address":"10.1.2.3/24","gateway":"10.1.2.1"}},{{"version":"6","address":"fd00::3/64"}}],"routes":[{{"dst":"0.0.0.0/0","gw":"10.1.2.1"}}],{DNS}}}"#
            );
            assert_eq!(full().to_json(v).unwrap(), expected);
        }
    }

    #[test]
    fn v1_0_shape_bytes() {
        let expected = format!(
            r#"{{"cniVersion":"1.0.0",{IFACES_1_0},"ips":[{{"interface":1,"address":"10.1.2.3/24","gateway":"10.1.2.1"}},{{"address":"fd00::3/64"}}],"routes":[{{"dst":"0.0.0.0/0","gw":"10.1.2.1"}}],{DNS}}}"#
        );
        assert_eq!(full().to_json("1.0.0").unwrap(), expected);
    }

    #[test]
    fn v1_1_shape_bytes() {
        let expected = format!(
            r#"{{"cniVersion":"1.1.0","interfaces":[{{"name":"host-side","mac":"02:00:00:00:00:01"}},{{"name":"net1","mac":"02:00:00:00:00:02","mtu":9000,"sandbox":"/var/run/netns/pod","socketPath":"/run/sock","pciID":"0000:3b:00.2"}}],"ips":[{{"interface":1,"address":"10.1.2.3/24","gateway":"10.1.2.1"}},{{"address":"fd00::3/64"}}],"routes":[{{"dst":"0.0.0.0/0","gw":"10.1.2.1","mtu":1500,"advmss":1460,"priority":100,"table":200,"scope":0}}],{DNS}}}"#
        );
        assert_eq!(full().to_json("1.1.0").unwrap(), expected);
    }

    #[test]
    fn empty_parts_are_omitted() {
        let minimal = CniResult {
            interfaces: vec![Interface {
                name: "net1".into(),
                mac: Some(String::new()),
                ..Interface::default()
            }],
            ..CniResult::default()
        };
        assert_eq!(
            minimal.to_json("1.1.0").unwrap(),
            r#"{"cniVersion":"1.1.0","interfaces":[{"name":"net1"}]}"#
        );
        assert_eq!(
            CniResult::default().to_json("0.4.0").unwrap(),
            r#"{"cniVersion":"0.4.0"}"#
        );
        let v = full().to_value("1.0.0").unwrap();
        assert_eq!(v["ips"][1], json!({"address": "fd00::3/64"}));
    }

    #[test]
    fn round_trips_in_every_version() {
        assert_eq!(
            CniResult::parse(&full().to_value("1.1.0").unwrap(), "0.3.1").unwrap(),
            full()
        );
        // Older layouts lose exactly the 1.1.0-only fields.
        let mut older = full();
        older.interfaces[1].mtu = None;
        older.interfaces[1].socket_path = None;
        older.interfaces[1].pci_id = None;
        older.routes[0] = Route::new(net("0.0.0.0/0"), Some(ip("10.1.2.1")));
        for v in ["0.3.0", "0.3.1", "0.4.0", "1.0.0"] {
            let back = CniResult::parse(&full().to_value(v).unwrap(), "1.1.0").unwrap();
            assert_eq!(back, older, "{v}");
            assert_eq!(back.to_json(v).unwrap(), full().to_json(v).unwrap(), "{v}");
        }
    }

    #[test]
    fn legacy_prev_result_converts_to_1_1_and_back() {
        let prev = json!({
            "cniVersion": "0.3.1",
            "interfaces": [{"name": "eth0", "mac": "0a:58:0a:f4:00:05", "sandbox": "/proc/42/ns/net"}],
            "ips": [{"version": "4", "interface": 0, "address": "10.244.0.5/24", "gateway": "10.244.0.1"}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {}
        });
        let parsed = CniResult::parse(&prev, "1.1.0").unwrap();
        assert_eq!(parsed.ips[0].interface, Some(0));
        assert_eq!(parsed.ips[0].gateway, Some(ip("10.244.0.1")));
        assert!(parsed.dns.is_empty());
        assert_eq!(
            parsed.to_json("1.1.0").unwrap(),
            r#"{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","mac":"0a:58:0a:f4:00:05","sandbox":"/proc/42/ns/net"}],"ips":[{"interface":0,"address":"10.244.0.5/24","gateway":"10.244.0.1"}],"routes":[{"dst":"0.0.0.0/0"}]}"#
        );
        let back: Value = serde_json::from_str(&parsed.to_json("0.3.1").unwrap()).unwrap();
        let mut expected = prev.clone();
        expected.as_object_mut().unwrap().remove("dns");
        assert_eq!(back, expected);
    }

    #[test]
    fn version_comes_from_the_result_when_present() {
        // 1.1.0-only fields in a result that says 1.0.0 are not part of its version.
        let v = json!({"cniVersion": "1.0.0", "interfaces": [{"name": "a", "mtu": 9000}]});
        assert_eq!(
            CniResult::parse(&v, "1.1.0").unwrap().interfaces[0].mtu,
            None
        );
        let v = json!({"interfaces": [{"name": "a", "mtu": 9000}]});
        assert_eq!(
            CniResult::parse(&v, "1.1.0").unwrap().interfaces[0].mtu,
            Some(9000)
        );
        // `version` is a legacy field: a 1.0.0 result carrying it is not checked against it.
        let v = json!({"ips": [{"version": "6", "address": "10.0.0.1/8"}]});
        assert!(CniResult::parse(&v, "1.0.0").is_ok());
    }

    #[test]
    fn legacy_version_must_match_the_family() {
        let v = json!({"ips": [{"version": "6", "address": "10.0.0.1/8"}]});
        let e = CniResult::parse(&v, "0.4.0").unwrap_err();
        assert_eq!(e.code(), 6);
        assert!(e.to_string().contains("ips[0].version"), "{e}");
        let v = json!({"ips": [{"version": "4", "address": "fd00::1/64"}]});
        assert_eq!(CniResult::parse(&v, "0.3.0").unwrap_err().code(), 6);
        let v = json!({"ips": [{"version": "5", "address": "10.0.0.1/8"}]});
        assert_eq!(CniResult::parse(&v, "0.3.1").unwrap_err().code(), 6);
        let v = json!({"ips": [{"address": "fd00::1/64"}]});
        assert!(CniResult::parse(&v, "0.3.1").is_ok());
    }

    #[test]
    fn unsupported_versions_are_code_1() {
        let e = CniResult::parse(&json!({"cniVersion": "0.2.0"}), "1.1.0").unwrap_err();
        assert_eq!(e.code(), 1);
        assert!(e.to_string().contains("0.3.0, 0.3.1"), "{e}");
        assert_eq!(CniResult::default().to_json("2.0.0").unwrap_err().code(), 1);
        assert_eq!(CniResult::default().to_value("").unwrap_err().code(), 1);
    }

    #[test]
    fn malformed_results_name_the_field() {
        let cases = [
            (json!([]), "result must be an object"),
            (json!({"cniVersion": 1}), "cniVersion must be a string"),
            (json!({"interfaces": {}}), "interfaces must be an array"),
            (
                json!({"interfaces": [{"mac": "x"}]}),
                "interfaces[0].name is required",
            ),
            (json!({"ips": [{"address": "10.0.0.1"}]}), "ips[0].address"),
            (
                json!({"ips": [{"address": "10.0.0.1/255.0.0.0"}]}),
                "ips[0].address",
            ),
            (
                json!({"ips": [{"address": "10.0.0.1/8", "gateway": "x"}]}),
                "ips[0].gateway",
            ),
            (
                json!({"ips": [{"address": "10.0.0.1/8", "interface": 0}]}),
                "0 interfaces",
            ),
            (
                json!({"ips": [{"address": "10.0.0.1/8", "interface": -1}]}),
                "ips[0].interface",
            ),
            (
                json!({"routes": [{"gw": "10.0.0.1"}]}),
                "routes[0].dst is required",
            ),
            (
                json!({"routes": [{"dst": "0.0.0.0/0", "scope": 300}]}),
                "routes[0].scope",
            ),
            (
                json!({"routes": [{"dst": "0.0.0.0/0", "mtu": "big"}]}),
                "routes[0].mtu",
            ),
            (json!({"dns": {"nameservers": [1]}}), "dns.nameservers[0]"),
        ];
        for (value, needle) in cases {
            let e = CniResult::parse(&value, "1.1.0").unwrap_err();
            assert_eq!(e.code(), 6, "{value}");
            assert!(e.to_string().contains(needle), "{value}: {e}");
        }
    }

    #[test]
    fn cidr_parsing_is_strict() {
        assert_eq!(net("10.1.2.3/24").ip(), ip("10.1.2.3"));
        assert_eq!(net("fd00::1/128").prefix(), 128);
        for bad in [
            "10.0.0.1",
            "10.0.0.1/",
            "10.0.0.1/33",
            "10.0.0.1/+8",
            "x/8",
            "/8",
        ] {
            assert_eq!(parse_cidr(bad), None, "{bad}");
        }
    }
}
