//! Step `rail`: one rail of a multi-rail pod (conf `"rail": true`, or an object), routed by its
//! own addresses through a table of its own and answering ARP only for them.
//!
//! A pod with one RDMA NIC per GPU gets one interface per rail, each in its own subnet behind
//! its own gateway, every rail carrying the same east-west routes. In the pod's main table the
//! second rail's copy of a route collides (EEXIST) or is shadowed, and RoCE address resolution
//! (`drivers/infiniband/core/addr.c`), which looks the route up with the GID's netdev as output
//! interface and its IP as source, then finds no route by that netdev and ARPs on-link for a
//! remote peer. So, for every address of the attachment, a rule `from <IP> lookup <table>`
//! ahead of the main table's, and in that table the connected route of each address and every
//! route IPAM returned, through this interface: never into main.
//!
//! With `arp_ignore=0` every interface answers ARP for every local address, so peers on a
//! shared segment learn the wrong MAC for a rail ("ARP flux"); the rail's interface is set to
//! answer only for its own addresses and announce with them (see [`RailConf`] for the values).
//!
//! The step runs before `addresses`: the ARP values are set while the interface is still down,
//! before it can answer anyone, and the routes it puts into the table are the ones `addresses`
//! adds once the interface is up (the kernel refuses a route on a down link). In chained mode
//! the previous plugin configured the interface: the rail adds the table's routes itself and
//! moves prevResult's routes out of main.

use std::net::IpAddr;
use std::path::Path;

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::attach::plan::Plan;
use crate::attach::record::Attachment;
use crate::attach::steps::{CheckSubject, PodSide, Step, StepAdd};
use crate::attach::Ctx;
use crate::cni::result::Route;
use crate::cni::NetConf;
use crate::error::{Error, KernelContext, Result};
use crate::kernel::rtnetlink::{Ipv4Setting, Link, NetOps, RouteSpec, RuleSpec};
use crate::kernel::{Netns, Ns};

mod chained;

/// The conf field, and the key of the step's record in `Attachment::steps`.
pub const CONF_KEY: &str = "rail";

/// The default table is this plus the pod interface's ifindex: ifindexes are unique in a netns,
/// so two rails of one pod never share a table, and the sum stays clear of the kernel's
/// reserved tables (252 to 255).
pub const TABLE_BASE: u32 = 1000;

/// The default rule priority: after the local table's rule (0), before main's (32766).
pub const DEFAULT_PRIORITY: u32 = 1000;

/// RT_SCOPE_LINK: a connected route's scope.
const SCOPE_LINK: u8 = 253;

/// `rail` as the conf asks for it, with the ARP and reverse-path values for the rail's
/// interface.
///
/// - `arp_ignore` 1: answer ARP only for addresses configured on the interface the request
///   came in on (2 would also require the sender in that address's subnet, which refuses
///   neighbours reached by an on-link route to another prefix).
/// - `arp_announce` 2: the ARP requests a rail sends carry that rail's own address as sender,
///   never another interface's, so peers never learn a rail's IP at another rail's MAC.
/// - `rp_filter` 2 (loose): a packet's source must be routable by some interface; strict (1)
///   drops traffic that arrives on one rail for an address routed by another, which a fabric
///   whose peers pick their rail themselves sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RailConf {
    /// None: [`TABLE_BASE`] + the pod interface's ifindex.
    pub table: Option<u32>,
    pub priority: u32,
    pub arp_ignore: u32,
    pub arp_announce: u32,
    pub rp_filter: u32,
}

impl Default for RailConf {
    fn default() -> RailConf {
        RailConf {
            table: None,
            priority: DEFAULT_PRIORITY,
            arp_ignore: 1,
            arp_announce: 2,
            rp_filter: 2,
        }
    }
}

impl RailConf {
    fn ipv4_values(&self) -> [(Ipv4Setting, u32); 3] {
        [
            (Ipv4Setting::ArpIgnore, self.arp_ignore),
            (Ipv4Setting::ArpAnnounce, self.arp_announce),
            (Ipv4Setting::RpFilter, self.rp_filter),
        ]
    }
}

/// The object's keys, with the values each takes.
pub(crate) const KEYS: [(&str, &str); 5] = [
    (
        "table",
        "1 to 4294967295 but 252-255 (the kernel's compat, default, main and local)",
    ),
    (
        "priority",
        "1 to 32765 (0 is the local table's rule, 32766 main's)",
    ),
    (
        "arpIgnore",
        "0, 1, 2, 3 or 8 (net.ipv4.conf.<if>.arp_ignore)",
    ),
    ("arpAnnounce", "0, 1 or 2 (net.ipv4.conf.<if>.arp_announce)"),
    ("rpFilter", "0, 1 or 2 (net.ipv4.conf.<if>.rp_filter)"),
];

fn in_range(key: &str, v: u64) -> bool {
    match key {
        "table" => (1..=u64::from(u32::MAX)).contains(&v) && !(252..=255).contains(&v),
        "priority" => (1..=32765).contains(&v),
        "arpIgnore" => matches!(v, 0..=3 | 8),
        _ => v <= 2,
    }
}

/// `rail` from the conf: None when absent, null or false.
pub fn from_conf(conf: &NetConf) -> Result<Option<RailConf>> {
    #[derive(Deserialize)]
    struct Fields {
        rail: Option<Value>,
    }
    let fields: Fields = conf.fields()?;
    match fields.rail {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(None),
        Some(Value::Bool(true)) => Ok(Some(RailConf::default())),
        Some(Value::Object(map)) => parse_object(&map).map(Some),
        Some(other) => Err(Error::config(
            CONF_KEY,
            format!("must be true, false or an object such as {{\"table\": 1001}}, got {other}"),
        )),
    }
}

fn parse_object(map: &serde_json::Map<String, Value>) -> Result<RailConf> {
    let mut rail = RailConf::default();
    for (key, value) in map {
        let field = format!("{CONF_KEY}.{key}");
        let Some((_, allowed)) = KEYS.iter().find(|(k, _)| k == key) else {
            let known: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
            return Err(Error::config(
                field,
                format!("unknown key `{key}`; known keys: {}", known.join(", ")),
            ));
        };
        if value.is_null() {
            continue;
        }
        let v = value
            .as_u64()
            .filter(|v| in_range(key, *v))
            .ok_or_else(|| Error::config(&field, format!("{value} is not one of {allowed}")))?;
        let v = u32::try_from(v).expect("every range fits u32");
        match key.as_str() {
            "table" => rail.table = Some(v),
            "priority" => rail.priority = v,
            "arpIgnore" => rail.arp_ignore = v,
            "arpAnnounce" => rail.arp_announce = v,
            _ => rail.rp_filter = v,
        }
    }
    Ok(rail)
}

/// What a rail's ADD recorded, before it changed anything: what DEL removes and CHECK looks
/// for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RailRecord {
    /// The pod interface's ifindex.
    pub ifindex: u32,
    pub table: u32,
    pub priority: u32,
    /// The sources of the rules, one per address (`/32`, `/128`).
    #[serde(with = "networks")]
    pub sources: Vec<IpNetwork>,
    /// The table's routes, all through `ifindex`.
    pub routes: Vec<RailRoute>,
    pub arp_ignore: u32,
    pub arp_announce: u32,
    pub rp_filter: u32,
}

/// One route of a rail's table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RailRoute {
    #[serde(with = "network")]
    pub dst: IpNetwork,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
}

impl RailRecord {
    fn rules(&self) -> impl Iterator<Item = RuleSpec> + '_ {
        self.sources.iter().map(|src| RuleSpec {
            src: *src,
            table: self.table,
            priority: self.priority,
        })
    }

    /// The routes as the table holds them, to delete one: RTM_DELROUTE matches on what is
    /// given, so destination, gateway, interface and table identify it.
    fn route_specs(&self) -> impl Iterator<Item = RouteSpec> + '_ {
        self.routes.iter().map(|r| RouteSpec {
            dst: r.dst,
            gateway: r.gw,
            oif: self.ifindex,
            metric: None,
            mtu: None,
            table: Some(self.table),
            scope: None,
        })
    }

    fn ipv4_values(&self) -> [(Ipv4Setting, u32); 3] {
        RailConf {
            table: Some(self.table),
            priority: self.priority,
            arp_ignore: self.arp_ignore,
            arp_announce: self.arp_announce,
            rp_filter: self.rp_filter,
        }
        .ipv4_values()
    }
}

/// IpNetwork in the record as its text (`10.1.0.0/24`): ipnetwork is built without serde.
mod network {
    use ipnetwork::IpNetwork;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(net: &IpNetwork, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(net)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<IpNetwork, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

mod networks {
    use ipnetwork::IpNetwork;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(nets: &[IpNetwork], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(nets.iter().map(|n| n.to_string()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpNetwork>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|t| t.parse().map_err(serde::de::Error::custom))
            .collect()
    }
}

/// Step `rail` (checkpoints `rail-sysctls`, `rail-intent`, `rail-rules`, and in chained mode
/// `rail-routes`): see the module doc.
#[derive(Debug)]
pub struct Rail;

/// [`Rail`] as the conf asks for it: None makes it do nothing.
#[derive(Debug)]
struct RailAdd(Option<RailConf>);

impl Step for Rail {
    fn configure(&self, conf: &NetConf) -> Result<Box<dyn StepAdd>> {
        Ok(Box::new(RailAdd(from_conf(conf)?)))
    }

    fn check(&self, ctx: &Ctx<'_>, subject: &CheckSubject<'_>, _link: Option<&Link>) -> Result<()> {
        match recorded(subject.att)? {
            Some(rec) => check_rail(ctx.kernel, subject.ns, &subject.req.env.ifname, &rec),
            None => Ok(()),
        }
    }

    /// The rules go (a rule names no link, so it outlives the interface in the pod) and so do
    /// the table's routes still there (the mode's release usually took them with the
    /// interface). A pod netns that is gone took both with it. The ARP values go with the
    /// interface.
    fn release(&self, ctx: &Ctx<'_>, netns: Option<&Path>, att: &Attachment) -> Result<()> {
        let Some(rec) = recorded(att)? else {
            return Ok(());
        };
        match crate::attach::lifecycle::pod_netns(netns, att)? {
            Some(ns) => remove_rail(ctx.kernel, &ns, &rec),
            None => Ok(()),
        }
    }
}

impl StepAdd for RailAdd {
    fn apply<'a>(&self, pod: &mut PodSide<'a>, plan: &mut Plan<'a>) -> Result<()> {
        let Some(conf) = self.0 else {
            return Ok(());
        };
        match pod.link.clone() {
            Some(link) => rail_before_addresses(pod, &conf, &link, plan),
            None => chained::after_previous_plugin(pod, &conf, plan),
        }
    }
}

/// What the step recorded for `att`, if it ran.
fn recorded(att: &Attachment) -> Result<Option<RailRecord>> {
    att.steps.get(CONF_KEY).map_err(|e| {
        Error::State(format!(
            "record {}: its `steps.{CONF_KEY}` is unreadable ({e}); remove the rules `from` \
             its addresses by hand",
            att.id()
        ))
    })
}

/// The rail's plan for the pod interface `link` with the addresses `ips` and IPAM's `routes`:
/// its table, the rules, and the table's routes (the connected route of each address, then
/// IPAM's). Refused when the table already holds another interface's routes.
fn plan_rail(
    k: &dyn NetOps,
    netns: &Netns,
    conf: &RailConf,
    link: &Link,
    ips: &[IpNetwork],
    routes: &[Route],
) -> Result<RailRecord> {
    let table = conf.table.unwrap_or(TABLE_BASE + link.index);
    let held = k
        .routes(Ns::Pod(netns), table)
        .kernel_ctx(|| format!("listing routing table {table} in the pod"))?;
    if let Some(other) = held.iter().find(|r| r.oif != link.index) {
        return Err(Error::config(
            format!("{CONF_KEY}.table"),
            format!(
                "table {table} already holds a route of ifindex {} ({} in the pod): give each \
                 rail a table of its own, or leave `table` out (the default is {TABLE_BASE} + \
                 the interface's ifindex)",
                other.oif, other.dst
            ),
        ));
    }
    let connected = ips
        .iter()
        .filter(|ip| ip.prefix() < host_prefix(ip.ip()))
        .map(|ip| RailRoute {
            dst: IpNetwork::new(ip.network(), ip.prefix()).expect("a network of its own prefix"),
            gw: None,
        });
    let ipam = routes.iter().map(|r| RailRoute {
        dst: r.dst,
        gw: r.gw,
    });
    Ok(RailRecord {
        ifindex: link.index,
        table,
        priority: conf.priority,
        sources: ips
            .iter()
            .map(|ip| IpNetwork::new(ip.ip(), host_prefix(ip.ip())).expect("a host prefix"))
            .collect(),
        routes: connected.chain(ipam).collect(),
        arp_ignore: conf.arp_ignore,
        arp_announce: conf.arp_announce,
        rp_filter: conf.rp_filter,
    })
}

fn host_prefix(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// Modes that made the pod interface (move, macvlan, ipoib), which is still down: its ARP
/// values, the record of what the rail adds, the rules; then the table's routes become the
/// result's, for `addresses` to add once the interface is up. The ARP values need no undo: a
/// rollback takes the interface out of the pod, and the kernel gives it the defaults of the
/// netns it lands in.
fn rail_before_addresses<'a>(
    pod: &mut PodSide<'a>,
    conf: &RailConf,
    link: &Link,
    plan: &mut Plan<'a>,
) -> Result<()> {
    let (k, netns, ifname) = (pod.ctx.kernel, pod.netns, &pod.req.env.ifname);
    set_ipv4_values(k, netns, ifname, link.index, &conf.ipv4_values())?;
    plan.checkpoint("rail-sysctls")?;
    let ips: Vec<IpNetwork> = pod.result.ips.iter().map(|ip| ip.address).collect();
    let rec = plan_rail(k, netns, conf, link, &ips, &pod.result.routes)?;
    record_intent(pod, &rec)?;
    plan.checkpoint("rail-intent")?;
    add_rules(k, netns, &rec, plan)?;
    plan.checkpoint("rail-rules")?;
    pod.result.routes = result_routes(&rec, &pod.result.routes);
    Ok(())
}

/// The record of what the rail will add, on disk before the first rule: a plugin killed after
/// it leaves DEL the rules and routes to remove. Appended without fsync, as the final record
/// is: a kill cannot lose it, and a power loss takes the pod netns, rules and all, with it.
fn record_intent(pod: &mut PodSide<'_>, rec: &RailRecord) -> Result<()> {
    pod.att
        .steps
        .set(CONF_KEY, rec)
        .map_err(|e| Error::State(format!("recording the rail of {}: {e}", pod.att.id())))?;
    pod.ctx.store.update(&pod.att)
}

fn set_ipv4_values(
    k: &dyn NetOps,
    netns: &Netns,
    ifname: &str,
    index: u32,
    values: &[(Ipv4Setting, u32)],
) -> Result<()> {
    k.set_ipv4_conf(Ns::Pod(netns), index, values)
        .kernel_ctx(|| format!("setting the ARP and reverse-path values of {ifname} in the pod"))
}

/// The rules, each with its undo.
fn add_rules<'a>(
    k: &'a dyn NetOps,
    netns: &'a Netns,
    rec: &RailRecord,
    plan: &mut Plan<'a>,
) -> Result<()> {
    let pod = Ns::Pod(netns);
    for rule in rec.rules() {
        k.add_rule(pod, &rule).kernel_ctx(|| {
            format!(
                "adding rule from {} lookup {} priority {} in the pod",
                rule.src, rule.table, rule.priority
            )
        })?;
        plan.on_undo("rail-rule", move || {
            k.del_rule(pod, &rule)
                .kernel_ctx(|| format!("removing rule from {}", rule.src))
        });
    }
    Ok(())
}

/// The routes of the result: the table's, in its order (connected first), as CNI 1.1.0 routes
/// with their `table`; older versions, which have no `table`, list them without it. An IPAM
/// route keeps its metric and MTU; a table IPAM named is replaced by the rail's.
fn result_routes(rec: &RailRecord, ipam: &[Route]) -> Vec<Route> {
    let connected = rec.routes.len() - ipam.len();
    let mut out: Vec<Route> = rec.routes[..connected]
        .iter()
        .map(|r| Route {
            table: Some(rec.table),
            scope: Some(SCOPE_LINK),
            ..Route::new(r.dst, None)
        })
        .collect();
    for route in ipam {
        if let Some(asked) = route.table.filter(|t| *t != rec.table) {
            crate::log_info!(
                "route {}: IPAM asked for table {asked}; a rail's routes go into its table {}",
                route.dst,
                rec.table
            );
        }
        out.push(Route {
            table: Some(rec.table),
            ..route.clone()
        });
    }
    out
}

/// CHECK: every rule, every route of the table, and the ARP values are as recorded; what is
/// missing or different is named, all of it.
fn check_rail(k: &dyn NetOps, netns: &Netns, ifname: &str, rec: &RailRecord) -> Result<()> {
    let pod = Ns::Pod(netns);
    let mut missing = Vec::new();
    let rules = k.rules(pod).kernel_ctx(|| "listing the pod's rules")?;
    for rule in rec.rules().filter(|r| !rules.contains(r)) {
        missing.push(format!(
            "rule from {} lookup {} priority {}",
            rule.src, rule.table, rule.priority
        ));
    }
    let table = k
        .routes(pod, rec.table)
        .kernel_ctx(|| format!("listing routing table {} in the pod", rec.table))?;
    for route in &rec.routes {
        let held = table
            .iter()
            .any(|r| r.dst == route.dst && r.gateway == route.gw && r.oif == rec.ifindex);
        if !held {
            let via = route.gw.map(|g| format!(" via {g}")).unwrap_or_default();
            missing.push(format!("route {}{via} in table {}", route.dst, rec.table));
        }
    }
    let conf = k
        .ipv4_conf(pod, rec.ifindex)
        .kernel_ctx(|| format!("reading the IPv4 values of {ifname} in the pod"))?
        .unwrap_or_default();
    for (setting, want) in rec.ipv4_values() {
        let have = conf.get(setting);
        if have != Some(want) {
            let have = have.map_or("unreadable".to_string(), |v| v.to_string());
            missing.push(format!("{} {want} (it is {have})", setting.sysctl()));
        }
    }
    match missing.is_empty() {
        true => Ok(()),
        false => Err(Error::CheckFailed(format!(
            "{ifname}: the rail lacks {}",
            missing.join(", ")
        ))),
    }
}

/// DEL: the rules and the table's routes, each tolerated as already gone (a kill before it was
/// added, a route that left with its interface, a second DEL).
fn remove_rail(k: &dyn NetOps, netns: &Netns, rec: &RailRecord) -> Result<()> {
    let pod = Ns::Pod(netns);
    let mut errors = Vec::new();
    for rule in rec.rules() {
        match k.del_rule(pod, &rule) {
            Err(e) if !e.is_errno(nix::errno::Errno::ENOENT) => errors.push(Error::kernel(
                format!("removing rule from {} lookup {}", rule.src, rule.table),
                e,
            )),
            _ => {}
        }
    }
    for route in rec.route_specs() {
        match k.del_route(pod, &route) {
            Err(e)
                if !e.is_errno(nix::errno::Errno::ESRCH)
                    && !e.is_errno(nix::errno::Errno::ENODEV) =>
            {
                errors.push(Error::kernel(
                    format!("removing route {} from table {}", route.dst, rec.table),
                    e,
                ))
            }
            _ => {}
        }
    }
    Error::collect(errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(rail: Value) -> Result<Option<RailConf>> {
        let text = json!({"cniVersion": "1.1.0", "name": "n", "type": "rdma-ns", "rail": rail});
        from_conf(&NetConf::parse(text.to_string().as_bytes(), crate::cni::Command::Add).unwrap())
    }

    #[test]
    fn true_takes_the_defaults_and_false_or_null_is_off() {
        assert_eq!(conf(json!(true)).unwrap(), Some(RailConf::default()));
        assert_eq!(conf(json!(false)).unwrap(), None);
        assert_eq!(conf(Value::Null).unwrap(), None);
        let d = RailConf::default();
        assert_eq!(
            (
                d.table,
                d.priority,
                d.arp_ignore,
                d.arp_announce,
                d.rp_filter
            ),
            (None, 1000, 1, 2, 2)
        );
    }

    #[test]
    fn an_object_overrides_what_it_names() {
        let got = conf(json!({"table": 2001, "priority": 500, "arpIgnore": 2, "rpFilter": 0}));
        assert_eq!(
            got.unwrap(),
            Some(RailConf {
                table: Some(2001),
                priority: 500,
                arp_ignore: 2,
                arp_announce: 2,
                rp_filter: 0,
            })
        );
        assert_eq!(conf(json!({})).unwrap(), Some(RailConf::default()));
    }

    #[test]
    fn values_out_of_range_and_unknown_keys_name_the_field() {
        for (bad, field) in [
            (json!({"table": 254}), "rail.table"),
            (json!({"table": 0}), "rail.table"),
            (json!({"table": -1}), "rail.table"),
            (json!({"table": "1001"}), "rail.table"),
            (json!({"priority": 32766}), "rail.priority"),
            (json!({"priority": 0}), "rail.priority"),
            (json!({"arpIgnore": 4}), "rail.arpIgnore"),
            (json!({"arpAnnounce": 3}), "rail.arpAnnounce"),
            (json!({"rpFilter": 3}), "rail.rpFilter"),
            (json!({"tabel": 1001}), "rail.tabel"),
            (json!("yes"), "rail"),
        ] {
            let e = conf(bad.clone()).unwrap_err();
            assert_eq!(e.code(), 7, "{bad}: {e}");
            assert!(e.to_string().contains(field), "{bad}: {e}");
        }
        let e = conf(json!({"priority": 40000})).unwrap_err();
        assert!(e.to_string().contains("32766 main's"), "{e}");
    }

    #[test]
    fn the_record_reads_back_as_written() {
        let rec = RailRecord {
            ifindex: 5,
            table: 1005,
            priority: 1000,
            sources: vec![
                "10.1.0.2/32".parse().unwrap(),
                "fd00::2/128".parse().unwrap(),
            ],
            routes: vec![
                RailRoute {
                    dst: "10.1.0.0/24".parse().unwrap(),
                    gw: None,
                },
                RailRoute {
                    dst: "10.100.0.0/14".parse().unwrap(),
                    gw: Some("10.1.0.1".parse().unwrap()),
                },
            ],
            arp_ignore: 1,
            arp_announce: 2,
            rp_filter: 2,
        };
        let text = serde_json::to_value(&rec).unwrap();
        assert_eq!(text["sources"], json!(["10.1.0.2/32", "fd00::2/128"]));
        assert_eq!(text["routes"][0], json!({"dst": "10.1.0.0/24"}));
        assert_eq!(serde_json::from_value::<RailRecord>(text).unwrap(), rec);
    }
}
