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
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cni::decode::{self, null_as_default, objects_only, Failure};
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

/// The DNS object: the same shape in every version and in the network configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub struct Dns {
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub search: Vec<String>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub options: Vec<String>,
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_none()
            && self.search.is_empty()
            && self.options.is_empty()
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

/// A result's layout depends on its version, so the version is read on its own first.
#[derive(Deserialize)]
#[serde(remote = "Self")]
struct VersionPeek {
    #[serde(rename = "cniVersion")]
    cni_version: Option<String>,
}

/// Decodes a result's text. Paths in failures are relative to the result, which is named only
/// when it is itself the bad value.
fn decode_result<T: serde::de::DeserializeOwned>(text: &[u8]) -> std::result::Result<T, Failure> {
    decode::from_slice(text, "").map_err(|f| match f {
        Failure::Field { path, msg } if path.is_empty() => Failure::Field {
            path: "result".into(),
            msg,
        },
        other => other,
    })
}

impl CniResult {
    /// Reads a result in the version named by its own `cniVersion` field, or `version` when it
    /// has none (a prevResult inherits the conf's version).
    pub fn parse(value: &Value, version: &str) -> Result<CniResult> {
        // Through text, so that each wire type is decoded by one deserializer only: the binary
        // stays small, and every exec of the plugin maps its pages.
        Self::from_json(value.to_string().as_bytes(), version)
    }

    /// [`CniResult::parse`] from JSON text.
    pub fn from_json(text: &[u8], version: &str) -> Result<CniResult> {
        let bad = |f: Failure| Error::decode("CNI result", f.joined());
        let peek: VersionPeek = decode_result(text).map_err(bad)?;
        let parsed = match shape(peek.cni_version.as_deref().unwrap_or(version))? {
            Shape::Legacy => decode_result::<ResultV0_4>(text).map_err(bad)?.into_model(),
            Shape::V1_0 => decode_result::<ResultV1_0>(text).map_err(bad)?.into_model(),
            Shape::V1_1 => decode_result::<ResultV1_1>(text).map_err(bad)?.into_model(),
        };
        parsed.map_err(|msg| Error::decode("CNI result", msg))
    }

    /// The result as JSON text in `version`'s layout.
    pub fn to_json(&self, version: &str) -> Result<String> {
        let text = match shape(version)? {
            Shape::Legacy => serde_json::to_string(&ResultV0_4::from_model(self, version)),
            Shape::V1_0 => serde_json::to_string(&ResultV1_0::from_model(self, version)),
            Shape::V1_1 => serde_json::to_string(&ResultV1_1::from_model(self, version)),
        };
        text.map_err(|e| Error::decode("CNI result", e.to_string()))
    }

    pub fn to_value(&self, version: &str) -> Result<Value> {
        let value = match shape(version)? {
            Shape::Legacy => serde_json::to_value(ResultV0_4::from_model(self, version)),
            Shape::V1_0 => serde_json::to_value(ResultV1_0::from_model(self, version)),
            Shape::V1_1 => serde_json::to_value(ResultV1_1::from_model(self, version)),
        };
        value.map_err(|e| Error::decode("CNI result", e.to_string()))
    }
}

/// 0.3.0, 0.3.1 and 0.4.0: each IP states its family in `version`.
type ResultV0_4 = WireResult<InterfaceV0, IpV0, RouteV0>;
/// 1.0.0 drops the IP's `version`.
type ResultV1_0 = WireResult<InterfaceV0, IpV1, RouteV0>;
/// 1.1.0 adds interface `mtu`, `socketPath`, `pciID` and route `mtu`, `advmss`, `priority`,
/// `table`, `scope`.
type ResultV1_1 = WireResult<InterfaceV1_1, IpV1, RouteV1_1>;

// Field order follows the reference implementation's types so output diffs cleanly against
// other plugins'. Fields a version does not define are neither read nor written in it.
#[derive(Serialize, Deserialize)]
#[serde(bound(deserialize = "I: Deserialize<'de>, P: Deserialize<'de>, R: Deserialize<'de>"))]
struct WireResult<I, P, R> {
    /// Read apart (`VersionPeek`), since it decides this type.
    #[serde(rename = "cniVersion", skip_deserializing)]
    cni_version: String,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    interfaces: Vec<I>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    ips: Vec<P>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    routes: Vec<R>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Dns::is_empty"
    )]
    dns: Dns,
}

/// One item of a result in one version's layout; `path` names it in messages.
trait WireItem<Model>: Sized {
    fn from_model(model: &Model) -> Self;
    fn into_model(self, path: &str) -> std::result::Result<Model, String>;
}

impl<I, P, R> WireResult<I, P, R>
where
    I: WireItem<Interface>,
    P: WireItem<IpConfig>,
    R: WireItem<Route>,
{
    fn from_model(result: &CniResult, version: &str) -> Self {
        WireResult {
            cni_version: version.to_string(),
            interfaces: result.interfaces.iter().map(I::from_model).collect(),
            ips: result.ips.iter().map(P::from_model).collect(),
            routes: result.routes.iter().map(R::from_model).collect(),
            dns: result.dns.clone(),
        }
    }

    fn into_model(self) -> std::result::Result<CniResult, String> {
        fn items<W: WireItem<M>, M>(
            list: Vec<W>,
            name: &str,
        ) -> std::result::Result<Vec<M>, String> {
            list.into_iter()
                .enumerate()
                .map(|(i, item)| item.into_model(&format!("{name}[{i}]")))
                .collect()
        }
        let interfaces = items(self.interfaces, "interfaces")?;
        let ips: Vec<IpConfig> = items(self.ips, "ips")?;
        for (i, ip) in ips.iter().enumerate() {
            match ip.interface {
                Some(idx) if idx >= interfaces.len() => {
                    return Err(format!(
                        "ips[{i}].interface is {idx} but there are {} interfaces",
                        interfaces.len()
                    ))
                }
                _ => {}
            }
        }
        Ok(CniResult {
            interfaces,
            ips,
            routes: items(self.routes, "routes")?,
            dns: self.dns,
        })
    }
}

/// Empty strings are written as absent and read as absent.
fn nonempty(s: &Option<String>) -> Option<String> {
    s.clone().filter(|s| !s.is_empty())
}

#[derive(Serialize, Deserialize)]
#[serde(remote = "Self")]
struct InterfaceV0 {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sandbox: Option<String>,
}

impl WireItem<Interface> for InterfaceV0 {
    fn from_model(i: &Interface) -> Self {
        InterfaceV0 {
            name: i.name.clone(),
            mac: nonempty(&i.mac),
            sandbox: nonempty(&i.sandbox),
        }
    }
    fn into_model(self, _: &str) -> std::result::Result<Interface, String> {
        Ok(Interface {
            name: self.name,
            mac: nonempty(&self.mac),
            sandbox: nonempty(&self.sandbox),
            ..Interface::default()
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(remote = "Self")]
struct InterfaceV1_1 {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sandbox: Option<String>,
    #[serde(
        rename = "socketPath",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    socket_path: Option<String>,
    #[serde(rename = "pciID", default, skip_serializing_if = "Option::is_none")]
    pci_id: Option<String>,
}

impl WireItem<Interface> for InterfaceV1_1 {
    fn from_model(i: &Interface) -> Self {
        InterfaceV1_1 {
            name: i.name.clone(),
            mac: nonempty(&i.mac),
            mtu: i.mtu,
            sandbox: nonempty(&i.sandbox),
            socket_path: nonempty(&i.socket_path),
            pci_id: nonempty(&i.pci_id),
        }
    }
    fn into_model(self, _: &str) -> std::result::Result<Interface, String> {
        Ok(Interface {
            name: self.name,
            mac: nonempty(&self.mac),
            mtu: self.mtu,
            sandbox: nonempty(&self.sandbox),
            socket_path: nonempty(&self.socket_path),
            pci_id: nonempty(&self.pci_id),
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(remote = "Self")]
struct IpV0 {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    interface: Option<usize>,
    address: Cidr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gateway: Option<Ip>,
}

impl WireItem<IpConfig> for IpV0 {
    fn from_model(ip: &IpConfig) -> Self {
        let family = if ip.address.is_ipv4() { "4" } else { "6" };
        IpV0 {
            version: Some(family.into()),
            interface: ip.interface,
            address: Cidr(ip.address),
            gateway: ip.gateway.map(Ip),
        }
    }
    fn into_model(self, path: &str) -> std::result::Result<IpConfig, String> {
        let address = self.address.0;
        // The family is stated twice here; a disagreement means a broken producer.
        match self.version.as_deref() {
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
        Ok(IpConfig {
            address,
            gateway: self.gateway.map(|g| g.0),
            interface: self.interface,
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(remote = "Self")]
struct IpV1 {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    interface: Option<usize>,
    address: Cidr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gateway: Option<Ip>,
}

impl WireItem<IpConfig> for IpV1 {
    fn from_model(ip: &IpConfig) -> Self {
        IpV1 {
            interface: ip.interface,
            address: Cidr(ip.address),
            gateway: ip.gateway.map(Ip),
        }
    }
    fn into_model(self, _: &str) -> std::result::Result<IpConfig, String> {
        Ok(IpConfig {
            address: self.address.0,
            gateway: self.gateway.map(|g| g.0),
            interface: self.interface,
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(remote = "Self")]
struct RouteV0 {
    dst: Cidr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gw: Option<Ip>,
}

impl WireItem<Route> for RouteV0 {
    fn from_model(r: &Route) -> Self {
        RouteV0 {
            dst: Cidr(r.dst),
            gw: r.gw.map(Ip),
        }
    }
    fn into_model(self, _: &str) -> std::result::Result<Route, String> {
        Ok(Route::new(self.dst.0, self.gw.map(|g| g.0)))
    }
}

#[derive(Serialize, Deserialize)]
#[serde(remote = "Self")]
struct RouteV1_1 {
    dst: Cidr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gw: Option<Ip>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    advmss: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    table: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scope: Option<u8>,
}

impl WireItem<Route> for RouteV1_1 {
    fn from_model(r: &Route) -> Self {
        RouteV1_1 {
            dst: Cidr(r.dst),
            gw: r.gw.map(Ip),
            mtu: r.mtu,
            advmss: r.advmss,
            priority: r.priority,
            table: r.table,
            scope: r.scope,
        }
    }
    fn into_model(self, _: &str) -> std::result::Result<Route, String> {
        Ok(Route {
            dst: self.dst.0,
            gw: self.gw.map(|g| g.0),
            mtu: self.mtu,
            advmss: self.advmss,
            priority: self.priority,
            table: self.table,
            scope: self.scope,
        })
    }
}

objects_only!(VersionPeek);
objects_only!(
    ser: Dns,
    InterfaceV0,
    InterfaceV1_1,
    IpV0,
    IpV1,
    RouteV0,
    RouteV1_1
);

/// An `address/prefix` string on the wire.
struct Cidr(IpNetwork);

impl Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_cidr(&text).map(Cidr).ok_or_else(|| {
            serde::de::Error::custom(format!("{text:?} is not an address/prefix (CIDR)"))
        })
    }
}

/// An IP address string on the wire.
struct Ip(IpAddr);

impl Serialize for Ip {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Ip {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        IpAddr::from_str(&text)
            .map(Ip)
            .map_err(|_| serde::de::Error::custom(format!("{text:?} is not an IP address")))
    }
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
