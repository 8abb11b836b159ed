//! RealKernel against the running kernel. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN for
//! setns). Each test makes its own namespaces and veth pairs with names unique to this
//! process and test, and a guard deletes them however the test ends. iproute2 is used only
//! to build fixtures and to cross-check what the plugin's own requests did.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use ipnetwork::IpNetwork;
use nix::errno::Errno;
use rdma_ns::kernel::rtnetlink::RealKernel;
use rdma_ns::kernel::rtnetlink::{
    Ipv4Setting, Link, LinkChange, LinkKind, MacvlanMode, NetOps, NewLink, RouteSpec, RuleSpec,
};
use rdma_ns::kernel::{Netns, Ns};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// One field of a `LinkChange`, named: `change(&[MoveTo(..), Name("net1"), Mtu(1300)])`.
enum Set<'a> {
    MoveTo(Ns<'a>),
    Name(&'a str),
    Mtu(u32),
    Up(bool),
}
use Set::*;

/// The `LinkChange` that sets exactly these fields and leaves the rest alone.
fn change<'a>(fields: &[Set<'a>]) -> LinkChange<'a> {
    let mut c = LinkChange::default();
    for f in fields {
        match f {
            MoveTo(ns) => c.netns = Some(*ns),
            Name(name) => c.name = Some(name.to_string()),
            Mtu(mtu) => c.mtu = Some(*mtu),
            Up(up) => c.up = Some(*up),
        }
    }
    c
}

fn ip(args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("iproute2 `ip` is needed to build test fixtures");
    assert!(
        out.status.success(),
        "ip {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Namespaces and host links of one test, removed on drop (deleting a namespace destroys
/// the virtual links inside it; a veth pair goes when either end is deleted).
struct Scratch {
    id: String,
    netns: Vec<String>,
    host_links: Vec<String>,
}

impl Scratch {
    fn new() -> Scratch {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Scratch {
            id: format!("{:x}-{n}", std::process::id()),
            netns: Vec::new(),
            host_links: Vec::new(),
        }
    }

    /// A name for a link, at most 15 bytes: `nl<pid hex>-<n><tag>`.
    fn name(&self, tag: &str) -> String {
        let name = format!("nl{}{tag}", self.id);
        assert!(name.len() <= 15, "test link name {name} too long");
        name
    }

    /// Creates a namespace and returns its name and an open handle.
    fn netns(&mut self, tag: &str) -> (String, Netns) {
        let name = format!("rdmans-nl-{}{tag}", self.id);
        ip(&["netns", "add", &name]);
        self.netns.push(name.clone());
        let ns = Netns::open(Path::new(&format!("/run/netns/{name}"))).unwrap();
        (name, ns)
    }

    /// Creates a veth pair in the host namespace.
    fn veth(&mut self, a: &str, b: &str) {
        ip(&["link", "add", a, "type", "veth", "peer", "name", b]);
        self.host_links.push(a.to_string());
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for link in &self.host_links {
            let _ = Command::new("ip").args(["link", "del", link]).output();
        }
        for ns in &self.netns {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

fn kernel() -> RealKernel {
    RealKernel::new().expect("netlink socket (these tests run as root)")
}

fn host_link(k: &RealKernel, name: &str) -> Link {
    k.link_by_name(Ns::Host, name)
        .unwrap()
        .unwrap_or_else(|| panic!("{name} not found in host netns"))
}

fn net(s: &str) -> IpNetwork {
    s.parse().unwrap()
}

#[test]
fn move_rename_and_mtu_in_one_request_and_back() {
    let mut s = Scratch::new();
    let (a, b) = (s.name("a"), s.name("b"));
    s.veth(&a, &b);
    let (_, pod) = s.netns("p");
    let k = kernel();
    let before = host_link(&k, &a);

    k.set_link(
        Ns::Host,
        before.index,
        &change(&[MoveTo(Ns::Pod(&pod)), Name("net1"), Mtu(1300)]),
    )
    .unwrap();

    assert_eq!(k.link_by_name(Ns::Host, &a).unwrap(), None);
    let moved = k.link_by_name(Ns::Pod(&pod), "net1").unwrap().unwrap();
    assert_eq!(moved.mtu, 1300);
    assert_eq!(moved.hwaddr, before.hwaddr);
    // The pod's namespace is new and its indexes are low, so there was no collision:
    // the kernel kept the ifindex.
    assert_eq!(moved.index, before.index);
    assert_eq!(moved.kind.as_deref(), Some("veth"));

    k.set_link(
        Ns::Pod(&pod),
        moved.index,
        &change(&[MoveTo(Ns::Host), Name(&a), Mtu(1500)]),
    )
    .unwrap();
    let back = host_link(&k, &a);
    assert_eq!((back.index, back.mtu), (before.index, 1500));
    assert_eq!(k.link_by_name(Ns::Pod(&pod), "net1").unwrap(), None);
}

#[test]
fn moved_link_gets_a_new_ifindex_when_the_target_uses_its_own() {
    let mut s = Scratch::new();
    let (a, b) = (s.name("a"), s.name("b"));
    s.veth(&a, &b);
    let (pod_name, pod) = s.netns("p");
    let k = kernel();
    let before = host_link(&k, &a);
    let taken = before.index.to_string();
    ip(&[
        "-n",
        &pod_name,
        "link",
        "add",
        "name",
        "occupant",
        "index",
        &taken,
        "type",
        "veth",
        "peer",
        "name",
        "occupant-peer",
    ]);

    k.set_link(
        Ns::Host,
        before.index,
        &change(&[MoveTo(Ns::Pod(&pod)), Name("net1")]),
    )
    .unwrap();
    let moved = k.link_by_name(Ns::Pod(&pod), "net1").unwrap().unwrap();
    assert_ne!(moved.index, before.index);
    assert_eq!(moved.hwaddr, before.hwaddr);
}

#[test]
fn a_move_whose_rename_fails_leaves_the_link_moved_under_its_old_name() {
    let mut s = Scratch::new();
    let (a, b) = (s.name("a"), s.name("b"));
    s.veth(&a, &b);
    let (pod_name, pod) = s.netns("p");
    ip(&[
        "-n", &pod_name, "link", "add", "net1", "type", "veth", "peer", "name", "x",
    ]);
    let k = kernel();
    let before = host_link(&k, &a);

    let err = k
        .set_link(
            Ns::Host,
            before.index,
            &change(&[MoveTo(Ns::Pod(&pod)), Name("net1"), Mtu(1300)]),
        )
        .unwrap_err();
    assert!(err.is_errno(Errno::EEXIST), "{err}");
    // do_setlink moves first, then sets the MTU, then renames, and does not undo the move
    // or the MTU when the rename fails.
    assert_eq!(k.link_by_name(Ns::Host, &a).unwrap(), None);
    let stranded = k.link_by_name(Ns::Pod(&pod), &a).unwrap().unwrap();
    assert_eq!(stranded.index, before.index);
    assert_eq!(stranded.mtu, 1300);
    assert!(
        err.target.contains(&format!("ifindex {}", before.index))
            && err
                .target
                .contains("gone from host netns: probably already moved to netns /run/netns/"),
        "{err}"
    );
    assert!(err.op.contains("rename to net1"), "{err}");
}

#[test]
fn altnames_resolve_to_the_primary_name_travel_with_moves_and_can_be_deleted() {
    let mut s = Scratch::new();
    let (a, b) = (s.name("a"), s.name("b"));
    s.veth(&a, &b);
    let short = s.name("alt");
    let long = format!("{}-a-longer-alternative-name", s.name("x"));
    ip(&["link", "property", "add", "dev", &a, "altname", &short]);
    ip(&["link", "property", "add", "dev", &a, "altname", &long]);
    let k = kernel();

    let by_alt = k.link_by_name(Ns::Host, &short).unwrap().unwrap();
    assert_eq!(by_alt.name, a);
    assert_eq!(by_alt.altnames, vec![short.clone(), long.clone()]);
    // Longer than IFNAMSIZ - 1: looked up through IFLA_ALT_IFNAME.
    assert_eq!(k.link_by_name(Ns::Host, &long).unwrap().unwrap().name, a);

    let (_, pod) = s.netns("p");
    k.set_link(
        Ns::Host,
        by_alt.index,
        &change(&[MoveTo(Ns::Pod(&pod)), Name("net1")]),
    )
    .unwrap();
    assert_eq!(k.link_by_name(Ns::Host, &short).unwrap(), None);
    let moved = k.link_by_name(Ns::Pod(&pod), &short).unwrap().unwrap();
    assert_eq!(moved.name, "net1");
    assert_eq!(moved.altnames, vec![short.clone(), long.clone()]);

    k.del_altname(Ns::Pod(&pod), moved.index, &short).unwrap();
    assert_eq!(k.link_by_name(Ns::Pod(&pod), &short).unwrap(), None);
    let after = k.link_by_name(Ns::Pod(&pod), "net1").unwrap().unwrap();
    assert_eq!(after.altnames, vec![long.clone()]);

    let err = k
        .del_altname(Ns::Pod(&pod), moved.index, &short)
        .unwrap_err();
    assert!(err.is_errno(Errno::ENOENT), "{err}");
    assert!(err.target.contains("net1"), "{err}");
}

#[test]
fn up_and_down() {
    let mut s = Scratch::new();
    let (a, b) = (s.name("a"), s.name("b"));
    s.veth(&a, &b);
    let k = kernel();
    let link = host_link(&k, &a);
    assert!(!link.up);
    let up = change(&[Up(true)]);
    k.set_link(Ns::Host, link.index, &up).unwrap();
    assert!(host_link(&k, &a).up);
    assert!(ip(&["-o", "link", "show", "dev", &a]).contains(",UP"));
    let down = change(&[Up(false)]);
    k.set_link(Ns::Host, link.index, &down).unwrap();
    assert!(!host_link(&k, &a).up);
}

#[test]
fn addresses_v4_and_v6_in_a_pod() {
    let mut s = Scratch::new();
    let (pod_name, pod) = s.netns("p");
    ip(&[
        "-n", &pod_name, "link", "add", "v0", "type", "veth", "peer", "name", "v1",
    ]);
    ip(&["-n", &pod_name, "link", "set", "v1", "up"]);
    let k = kernel();
    let ns = Ns::Pod(&pod);
    let v0 = k.link_by_name(ns, "v0").unwrap().unwrap();
    k.set_link(ns, v0.index, &change(&[Up(true)])).unwrap();

    k.add_address(ns, v0.index, net("10.1.2.3/24")).unwrap();
    k.add_address(ns, v0.index, net("fd00::2/64")).unwrap();
    let addrs = k.addresses(ns, v0.index).unwrap();
    assert!(addrs.contains(&net("10.1.2.3/24")), "{addrs:?}");
    assert!(addrs.contains(&net("fd00::2/64")), "{addrs:?}");
    // The dump is filtered to the asked link: v1's list has only its own link-local.
    let v1 = k.link_by_name(ns, "v1").unwrap().unwrap();
    let v1_addrs = k.addresses(ns, v1.index).unwrap();
    assert!(!v1_addrs.contains(&net("10.1.2.3/24")), "{v1_addrs:?}");
    assert!(!v1_addrs.contains(&net("fd00::2/64")), "{v1_addrs:?}");

    // IFA_F_NODAD: usable at once, never "tentative", although the link has carrier.
    let shown = ip(&["-n", &pod_name, "-6", "-o", "addr", "show", "dev", "v0"]);
    let line = shown.lines().find(|l| l.contains("fd00::2/64")).unwrap();
    assert!(!line.contains("tentative"), "{line}");

    let again = k.add_address(ns, v0.index, net("10.1.2.3/24")).unwrap_err();
    assert!(again.is_errno(Errno::EEXIST), "{again}");
    assert!(
        again.op.contains("10.1.2.3/24") && again.target.contains("v0"),
        "{again}"
    );

    k.del_address(ns, v0.index, net("10.1.2.3/24")).unwrap();
    k.del_address(ns, v0.index, net("fd00::2/64")).unwrap();
    let addrs = k.addresses(ns, v0.index).unwrap();
    assert!(!addrs.contains(&net("10.1.2.3/24")), "{addrs:?}");
    assert!(!addrs.contains(&net("fd00::2/64")), "{addrs:?}");
    let gone = k.del_address(ns, v0.index, net("10.1.2.3/24")).unwrap_err();
    assert!(gone.is_errno(Errno::EADDRNOTAVAIL), "{gone}");
}

/// A pod netns with a veth pair `v0`/`v1`, both up, `v0` with 10.1.2.3/24 and fd00::2/64 (added
/// by the plugin's own requests): its name and handle, the kernel handle, and `v0`.
fn addressed_veth_in_pod(s: &mut Scratch) -> (String, Netns, RealKernel, Link) {
    let (pod_name, pod) = s.netns("p");
    ip(&[
        "-n", &pod_name, "link", "add", "v0", "type", "veth", "peer", "name", "v1",
    ]);
    ip(&["-n", &pod_name, "link", "set", "v1", "up"]);
    ip(&["-n", &pod_name, "link", "set", "v0", "up"]);
    let k = kernel();
    let ns = Ns::Pod(&pod);
    let v0 = k.link_by_name(ns, "v0").unwrap().unwrap();
    k.add_address(ns, v0.index, net("10.1.2.3/24")).unwrap();
    k.add_address(ns, v0.index, net("fd00::2/64")).unwrap();
    (pod_name, pod, k, v0)
}

#[test]
fn routes_with_gateway_metric_mtu_and_table() {
    let mut s = Scratch::new();
    let (pod_name, pod, k, v0) = addressed_veth_in_pod(&mut s);
    let ns = Ns::Pod(&pod);

    let via = RouteSpec {
        dst: net("10.9.0.0/16"),
        gateway: Some("10.1.2.1".parse().unwrap()),
        oif: v0.index,
        metric: Some(100),
        mtu: Some(1400),
        table: None,
        scope: None,
    };
    k.add_route(ns, &via).unwrap();
    // `-d`: iproute2 hides "proto boot" otherwise.
    let shown = ip(&["-n", &pod_name, "-d", "route", "show", "10.9.0.0/16"]);
    for want in [
        "via 10.1.2.1",
        "dev v0",
        "proto boot",
        "scope global",
        "metric 100",
        "mtu 1400",
    ] {
        assert!(shown.contains(want), "{want} missing from {shown}");
    }
    let dup = k.add_route(ns, &via).unwrap_err();
    assert!(dup.is_errno(Errno::EEXIST), "{dup}");

    let onlink = RouteSpec {
        dst: net("10.8.0.0/16"),
        gateway: None,
        oif: v0.index,
        metric: None,
        mtu: None,
        table: Some(1000),
        scope: None,
    };
    k.add_route(ns, &onlink).unwrap();
    let shown = ip(&["-n", &pod_name, "-d", "route", "show", "table", "1000"]);
    assert!(
        shown.contains("10.8.0.0/16 dev v0 proto boot scope link"),
        "{shown}"
    );

    let v6 = RouteSpec {
        dst: net("fd01::/64"),
        gateway: Some("fd00::1".parse().unwrap()),
        oif: v0.index,
        metric: None,
        mtu: None,
        table: None,
        scope: None,
    };
    k.add_route(ns, &v6).unwrap();
    assert!(ip(&["-n", &pod_name, "-6", "route", "show", "fd01::/64"]).contains("via fd00::1"));

    for r in [&via, &onlink, &v6] {
        k.del_route(ns, r).unwrap();
    }
    assert_eq!(ip(&["-n", &pod_name, "route", "show", "10.9.0.0/16"]), "");
    assert_eq!(ip(&["-n", &pod_name, "route", "show", "table", "1000"]), "");
    assert_eq!(
        ip(&["-n", &pod_name, "-6", "route", "show", "fd01::/64"]),
        ""
    );
}

/// Rules and a table's routes in both families, and per-interface IPv4 values, as iproute2 and
/// /proc/sys see what the plugin's own requests did.
#[test]
fn rules_a_tables_routes_and_ipv4_conf_as_iproute2_and_proc_see_them() {
    let mut s = Scratch::new();
    let (pod_name, pod, k, v0) = addressed_veth_in_pod(&mut s);
    let ns = Ns::Pod(&pod);

    let rules = [
        RuleSpec {
            src: net("10.1.2.3/32"),
            table: 1005,
            priority: 1000,
        },
        RuleSpec {
            src: net("fd00::2/128"),
            table: 1005,
            priority: 1000,
        },
    ];
    for r in &rules {
        k.add_rule(ns, r).unwrap();
    }
    assert!(ip(&["-n", &pod_name, "rule", "show"]).contains("1000:\tfrom 10.1.2.3 lookup 1005"));
    assert!(
        ip(&["-n", &pod_name, "-6", "rule", "show"]).contains("1000:\tfrom fd00::2 lookup 1005")
    );
    // The default rules (local, main, default) are not of the shape and are left out.
    assert_eq!(k.rules(ns).unwrap(), rules);

    let v4 = RouteSpec {
        dst: net("10.100.0.0/14"),
        gateway: Some("10.1.2.1".parse().unwrap()),
        oif: v0.index,
        metric: None,
        mtu: None,
        table: Some(1005),
        scope: None,
    };
    let v6 = RouteSpec {
        dst: net("fd01::/64"),
        gateway: Some("fd00::1".parse().unwrap()),
        ..v4.clone()
    };
    k.add_route(ns, &v4).unwrap();
    k.add_route(ns, &v6).unwrap();
    let listed = k.routes(ns, 1005).unwrap();
    let found: Vec<_> = listed.iter().map(|r| (r.dst, r.gateway, r.oif)).collect();
    assert_eq!(
        found,
        [
            (v4.dst, v4.gateway, v0.index),
            (v6.dst, v6.gateway, v0.index)
        ],
        "{listed:?}"
    );
    assert!(ip(&["-n", &pod_name, "route", "show", "table", "1005"])
        .contains("10.100.0.0/14 via 10.1.2.1 dev v0"));
    assert!(
        k.routes(ns, 1006).unwrap().is_empty(),
        "a table that does not exist"
    );
    assert!(
        k.routes(ns, 254)
            .unwrap()
            .iter()
            .all(|r| r.table == Some(254)),
        "main lists only main's routes"
    );

    let proc = |name: &str| {
        let path = format!("/proc/sys/net/ipv4/conf/v0/{name}");
        ip(&["netns", "exec", &pod_name, "cat", &path])
            .trim()
            .to_string()
    };
    let values = [
        (Ipv4Setting::ArpIgnore, 1),
        (Ipv4Setting::ArpAnnounce, 2),
        (Ipv4Setting::RpFilter, 2),
    ];
    k.set_ipv4_conf(ns, v0.index, &values).unwrap();
    let conf = k.ipv4_conf(ns, v0.index).unwrap().unwrap();
    for (setting, value) in values {
        assert_eq!(
            proc(setting.sysctl()),
            value.to_string(),
            "{setting:?} in /proc"
        );
        assert_eq!(conf.get(setting), Some(value), "{setting:?} read back");
    }
    k.set_ipv4_conf(ns, v0.index, &[(Ipv4Setting::RpFilter, 0)])
        .unwrap();
    assert_eq!(proc("rp_filter"), "0", "a zero is sent, not skipped");
    assert_eq!(proc("arp_ignore"), "1", "what was not sent stays");

    for r in &rules {
        k.del_rule(ns, r).unwrap();
    }
    assert!(k.rules(ns).unwrap().is_empty());
    assert!(!ip(&["-n", &pod_name, "rule", "show"]).contains("lookup 1005"));
}

#[test]
fn unreachable_gateway_reports_the_kernels_explanation() {
    let mut s = Scratch::new();
    let (a, b) = (s.name("a"), s.name("b"));
    s.veth(&a, &b);
    let k = kernel();
    let link = host_link(&k, &a);
    let route = RouteSpec {
        dst: net("10.99.0.0/16"),
        gateway: Some("10.98.0.1".parse().unwrap()),
        oif: link.index,
        metric: None,
        mtu: None,
        table: None,
        scope: None,
    };
    let err = k.add_route(Ns::Host, &route).unwrap_err();
    // The extack text is the kernel's wording and changes between versions: what is ours to
    // check is that it is decoded whole (printable, non-empty) and shown in the error.
    assert!(err.is_errno(Errno::ENETUNREACH), "{err}");
    let ext_ack = err.ext_ack.clone().unwrap_or_default();
    assert!(
        !ext_ack.is_empty() && ext_ack.chars().all(|c| !c.is_control()),
        "{err}"
    );
    assert!(err.to_string().contains(&ext_ack), "{err}");
    assert!(err.target.contains(&a), "{err}");
    assert_eq!(err.netns, "host netns");
    let text = err.to_string();
    assert!(
        text.contains("add route 10.99.0.0/16 via 10.98.0.1"),
        "{text}"
    );

    let mixed = RouteSpec {
        gateway: Some("fd00::1".parse().unwrap()),
        ..route
    };
    assert!(k
        .add_route(Ns::Host, &mixed)
        .unwrap_err()
        .is_errno(Errno::EINVAL));
}

#[test]
fn link_dump_finds_a_link_by_hwaddr() {
    let mut s = Scratch::new();
    let (a, b) = (s.name("a"), s.name("b"));
    let pid = std::process::id();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mac = format!(
        "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        (pid >> 16) & 0xff,
        (pid >> 8) & 0xff,
        pid & 0xff,
        n & 0xff,
        0x5a
    );
    ip(&[
        "link", "add", &a, "address", &mac, "type", "veth", "peer", "name", &b,
    ]);
    s.host_links.push(a.clone());
    let k = kernel();
    let links = k.links(Ns::Host).unwrap();
    let found: Vec<&Link> = links.iter().filter(|l| l.hwaddr_string() == mac).collect();
    assert_eq!(found.len(), 1, "{mac} in {links:?}");
    assert_eq!(found[0].name, a);
    assert!(links.iter().any(|l| l.name == "lo" && l.index == 1));
}

#[test]
fn link_dump_of_more_than_two_thousand_links() {
    let mut s = Scratch::new();
    let (pod_name, pod) = s.netns("p");
    let batch: String = (0..1100)
        .map(|i| format!("link add v{i} type veth peer name p{i}\n"))
        .collect();
    let path = std::env::temp_dir().join(format!("rdmans-nl-{}.batch", s.id));
    std::fs::write(&path, batch).unwrap();
    let built = Command::new("ip")
        .args(["-n", &pod_name, "-batch"])
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );

    let k = kernel();
    let links = k.links(Ns::Pod(&pod)).unwrap();
    assert_eq!(links.len(), 2201);
    let mut indexes: Vec<u32> = links.iter().map(|l| l.index).collect();
    indexes.sort_unstable();
    indexes.dedup();
    assert_eq!(indexes.len(), 2201, "a link was reported twice");
    let p1099 = links.iter().find(|l| l.name == "p1099").unwrap();
    let v1099 = links.iter().find(|l| l.name == "v1099").unwrap();
    assert_eq!(p1099.link, Some(v1099.index));

    // The hwaddr search walks the same dump and decodes only the match.
    let by_addr = k.links_with_hwaddr(Ns::Pod(&pod), &v1099.hwaddr).unwrap();
    assert_eq!(by_addr, vec![v1099.clone()]);
    assert!(k
        .links_with_hwaddr(Ns::Pod(&pod), &[0x02, 0xde, 0xad, 0, 0, 1])
        .unwrap()
        .is_empty());
}

#[test]
fn macvlan_child_created_in_the_pod_with_its_final_name() {
    let mut s = Scratch::new();
    let (a, b) = (s.name("a"), s.name("b"));
    s.veth(&a, &b);
    let (_, pod) = s.netns("p");
    let k = kernel();
    let parent = host_link(&k, &a);
    let mac = vec![0x02, 0x11, 0x22, 0x33, 0x44, 0x55];

    k.create_link(
        Ns::Host,
        &NewLink {
            name: "net1".into(),
            kind: LinkKind::Macvlan {
                mode: MacvlanMode::Bridge,
            },
            parent_index: parent.index,
            target_netns: Some(Ns::Pod(&pod)),
            mtu: Some(1400),
            hwaddr: Some(mac.clone()),
        },
    )
    .unwrap();
    let child = k.link_by_name(Ns::Pod(&pod), "net1").unwrap().unwrap();
    assert_eq!(child.kind.as_deref(), Some("macvlan"));
    assert_eq!(child.mtu, 1400);
    assert_eq!(child.hwaddr, mac);
    // IFLA_LINK names the parent by its ifindex in the host namespace.
    assert_eq!(child.link, Some(parent.index));
    assert_eq!(k.link_by_name(Ns::Host, "net1").unwrap(), None);

    let dup = k
        .create_link(
            Ns::Host,
            &NewLink {
                name: "net1".into(),
                kind: LinkKind::Macvlan {
                    mode: MacvlanMode::Private,
                },
                parent_index: parent.index,
                target_netns: Some(Ns::Pod(&pod)),
                mtu: None,
                hwaddr: None,
            },
        )
        .unwrap_err();
    assert!(dup.is_errno(Errno::EEXIST), "{dup}");
    assert!(dup.target.contains(&a), "{dup}");

    k.delete_link(Ns::Pod(&pod), child.index).unwrap();
    assert_eq!(k.link_by_name(Ns::Pod(&pod), "net1").unwrap(), None);
    let gone = k.delete_link(Ns::Pod(&pod), child.index).unwrap_err();
    assert!(gone.is_errno(Errno::ENODEV), "{gone}");
}

/// From inside a pod, a child made there on a host parent names its lower by IFLA_LINK and
/// IFLA_LINK_NETNSID; a lookup in the netns that id names (IFLA_TARGET_NETNSID, on the pod's
/// socket, as root) finds the host's parent.
#[test]
fn a_childs_lower_is_found_from_the_pod_in_the_netns_its_link_netnsid_names() {
    let mut s = Scratch::new();
    let (a, b) = (s.name("a"), s.name("b"));
    s.veth(&a, &b);
    let (pod_name, pod) = s.netns("p");
    ip(&[
        "link", "add", "link", &a, "name", "net1", "netns", &pod_name, "type", "macvlan",
    ]);
    let k = kernel();
    let parent = host_link(&k, &a);
    let child = k.link_by_name(Ns::Pod(&pod), "net1").unwrap().unwrap();
    assert_eq!(child.link, Some(parent.index));
    let id = child
        .link_netnsid
        .expect("a lower in another netns has a netns id");
    let lower = k
        .link_by_index_in_netnsid(Ns::Pod(&pod), id, parent.index)
        .unwrap()
        .expect("the parent, looked up in the host netns");
    assert_eq!(
        (lower.name.as_str(), lower.index),
        (a.as_str(), parent.index)
    );
    // An id the pod's netns does not know is refused; an ifindex that netns lacks is none.
    let unknown = k
        .link_by_index_in_netnsid(Ns::Pod(&pod), id + 1000, parent.index)
        .unwrap_err();
    assert!(unknown.is_errno(Errno::EINVAL), "{unknown}");
    assert_eq!(
        k.link_by_index_in_netnsid(Ns::Pod(&pod), id, 0x7fff_fff0)
            .unwrap(),
        None
    );
    // Twin: a veth whose peer is in its own netns names no netns id.
    assert_eq!(host_link(&k, &b).link_netnsid, None);
}

#[test]
fn ipoib_child_on_a_non_ib_parent_is_refused() {
    let mut s = Scratch::new();
    let (a, b) = (s.name("a"), s.name("b"));
    s.veth(&a, &b);
    let k = kernel();
    let parent = host_link(&k, &a);
    let err = k
        .create_link(
            Ns::Host,
            &NewLink {
                name: s.name("ib"),
                kind: LinkKind::Ipoib {
                    pkey: Some(0x8001),
                    mode: Some(1),
                    umcast: Some(1),
                },
                parent_index: parent.index,
                target_netns: None,
                mtu: None,
                hwaddr: None,
            },
        )
        .unwrap_err();
    // Without ib_ipoib the kernel knows no "ipoib" kind: EOPNOTSUPP from rtnl_newlink before any
    // IPoIB attribute is read. With it, a veth is no IPoIB parent. No tier's kernel decodes this
    // request's IFLA_IPOIB_* attributes (docs/testing.md, "What each tier can and cannot detect").
    let expected = if std::path::Path::new("/sys/module/ib_ipoib").exists() {
        Errno::EINVAL
    } else {
        Errno::EOPNOTSUPP
    };
    assert!(err.is_errno(expected), "expected {expected}: {err}");
    assert!(err.op.starts_with("create ipoib link"), "{err}");
    assert!(err.target.contains(&a), "{err}");
    assert_eq!(k.link_by_name(Ns::Host, &s.name("ib")).unwrap(), None);
}

#[test]
fn lookup_misses_and_refusals() {
    let mut s = Scratch::new();
    let (a, b) = (s.name("a"), s.name("b"));
    s.veth(&a, &b);
    let k = kernel();
    assert_eq!(k.link_by_name(Ns::Host, &s.name("none")).unwrap(), None);
    assert_eq!(k.link_by_index(Ns::Host, 0).unwrap(), None);
    assert_eq!(k.link_by_index(Ns::Host, 0x7fff_fff0).unwrap(), None);
    let link = host_link(&k, &a);
    assert_eq!(
        k.link_by_index(Ns::Host, link.index).unwrap().unwrap().name,
        a
    );

    // Rename onto the veth's own peer: the kernel answers EEXIST (with no extended-ack
    // text on 6.18: dev_change_name sets none).
    let err = k
        .set_link(Ns::Host, link.index, &change(&[Name(&b)]))
        .unwrap_err();
    assert!(err.is_errno(Errno::EEXIST), "{err}");
    assert!(
        err.target
            .contains(&format!("{a} (ifindex {})", link.index)),
        "{err}"
    );
    assert!(err.to_string().contains("File exists"), "{err}");

    let err = k
        .set_link(Ns::Host, link.index, &change(&[Mtu(70000)]))
        .unwrap_err();
    assert!(err.is_errno(Errno::EINVAL), "{err}");
    assert_eq!(
        err.ext_ack.as_deref(),
        Some("mtu greater than device maximum")
    );

    let err = k
        .set_link(Ns::Host, 0x7fff_fff0, &change(&[Up(true)]))
        .unwrap_err();
    assert!(err.is_errno(Errno::ENODEV), "{err}");
    assert!(err.target.contains("ifindex 2147483632"), "{err}");

    let bad = k.link_by_name(Ns::Host, "eth0\0x").unwrap_err();
    assert!(bad.is_errno(Errno::EINVAL), "{bad}");
}

#[test]
fn pod_requests_act_in_the_pod_whichever_handle_names_it() {
    let mut s = Scratch::new();
    let (pod_name, pod) = s.netns("p");
    let again = Netns::open(Path::new(&format!("/run/netns/{pod_name}"))).unwrap();
    ip(&[
        "-n", &pod_name, "link", "add", "v0", "type", "veth", "peer", "name", "v1",
    ]);
    let k = kernel();
    let one = k.link_by_name(Ns::Pod(&pod), "v0").unwrap().unwrap();
    let two = k.link_by_name(Ns::Pod(&again), "v0").unwrap().unwrap();
    assert_eq!(one, two);
    let mut names: Vec<String> = k
        .links(Ns::Pod(&pod))
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    names.sort();
    assert_eq!(names, ["lo", "v0", "v1"]);
}

/// The NetOps scenarios the fake kernel is held to (src/attach/tests/conformance.rs), here
/// against the real kernel: the fake cannot drift from it unnoticed.
#[test]
fn the_real_kernel_behaves_as_the_conformance_scenarios_say() {
    use rdma_ns::kernel::conformance;
    type Scenario = fn(&dyn NetOps, Ns<'_>, &Link, &str) -> Result<(), String>;
    let scenarios: [(&str, Scenario, &str); 8] = [
        (
            "a move keeps the ifindex",
            conformance::a_move_keeps_the_ifindex,
            "net1",
        ),
        (
            "a move flushes addresses and sets the link down",
            conformance::a_move_flushes_addresses_and_sets_the_link_down,
            "net1",
        ),
        (
            "a rename that fails leaves the link moved",
            conformance::a_rename_that_fails_leaves_the_link_moved,
            "net9",
        ),
        (
            "a taken name is EEXIST",
            conformance::a_taken_name_is_eexist,
            "net9",
        ),
        (
            "a table holds one route per destination",
            conformance::a_table_holds_one_route_per_destination,
            "net1",
        ),
        (
            "routes go with their link, rules stay",
            conformance::routes_go_with_their_link_and_rules_stay,
            "net1",
        ),
        (
            "IPv4 conf is the link's until it moves",
            conformance::ipv4_conf_is_the_links_until_it_moves,
            "net1",
        ),
        (
            "an alias goes with its link",
            conformance::an_alias_goes_with_its_link,
            "net1",
        ),
    ];
    for (what, scenario, ifname) in scenarios {
        let mut s = Scratch::new();
        let (a, b) = (s.name("a"), s.name("b"));
        s.veth(&a, &b);
        ip(&["addr", "add", "192.0.2.7/24", "dev", &a]);
        ip(&["link", "set", &a, "up"]);
        let (pod_name, pod) = s.netns("c");
        ip(&[
            "-n", &pod_name, "link", "add", "net9", "type", "veth", "peer", "name", "net9p",
        ]);
        let k = kernel();
        let dev = host_link(&k, &a);
        scenario(&k, Ns::Pod(&pod), &dev, ifname).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
}

/// DCB netlink against this kernel: a veth has no DCB ops, so DCB_CMD_IEEE_GET answers
/// EOPNOTSUPP (None) and so does the pause query; the presence twin is the loopback's name,
/// which the kernel resolves (no ENODEV) before it finds no DCB either, against a name that is
/// no netdev.
#[test]
fn dcb_and_pause_of_a_veth_are_none_and_of_no_netdev_an_error() {
    use rdma_ns::kernel::netlink::{NlSocket, Route};
    use rdma_ns::kernel::{dcbnl, ethtool};
    let mut s = Scratch::new();
    let (a, b) = (s.name("a"), s.name("b"));
    s.veth(&a, &b);
    let mut sock = NlSocket::<Route>::open().unwrap();
    assert_eq!(dcbnl::query(&mut sock, &a).unwrap(), None);
    assert_eq!(ethtool::pause(&a).unwrap(), None);
    let missing = dcbnl::query(&mut sock, "rdmans-nosuch").unwrap_err();
    assert_ne!(missing.errno, nix::libc::EOPNOTSUPP, "{missing:?}");
    assert_eq!(
        ethtool::pause("rdmans-nosuch").unwrap_err().raw_os_error(),
        Some(nix::libc::ENODEV)
    );
}

/// iproute2's own `dcb` reads the DCB replies the doctor's tests use (tests/data/dcb, built by
/// build.py from dcbnl.c's layout, since no NIC here answers DCB) as rdma-ns's decoder does:
/// tests/support/dcb-replay.c hands them to it in place of the kernel, and keeps the request
/// dcb sent, which must be rdma-ns's byte for byte.
#[test]
fn dcb_reads_the_fixture_replies_as_the_doctor_does() {
    use rdma_ns::kernel::dcbnl;
    let dir = std::env::temp_dir().join(format!("rdma-ns-dcb-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let shim = dir.join("dcb-replay.so");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&shim)
        .arg("tests/support/dcb-replay.c")
        .arg("-ldl")
        .status()
        .expect("cc (gcc) builds the replay shim");
    assert!(built.success());
    for fixture in ["mlx5-lossless", "mlx5-pcp-no-pfc", "mlx5-dscp26-prio0"] {
        let file = format!("tests/data/dcb/{fixture}.hex");
        let request = dir.join("request.hex");
        let dcb = |args: &[&str]| -> serde_json::Value {
            let out = Command::new("dcb")
                .args(args)
                .env("LD_PRELOAD", &shim)
                .env("DCB_REPLAY", &file)
                .env("DCB_REPLAY_REQUEST", &request)
                .output()
                .expect("iproute2's dcb");
            assert!(out.status.success(), "{fixture}: dcb {args:?}: {out:?}");
            serde_json::from_slice(&out.stdout).unwrap()
        };
        let pfc = dcb(&["-j", "pfc", "show", "dev", "lo"]);
        let app = dcb(&["-j", "-N", "app", "show", "dev", "lo"]);
        let sent = std::fs::read_to_string(&request).unwrap();
        let seq = u32::from_str_radix(&sent[16..24], 16).unwrap().swap_bytes();
        let ours: String = dcbnl::ieee_get(seq, "lo")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(sent, ours, "{fixture}: the request");

        let text: String = std::fs::read_to_string(&file)
            .unwrap()
            .split_whitespace()
            .collect();
        let bytes: Vec<u8> = (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect();
        let ieee = dcbnl::decode_ieee(&bytes[16..]).unwrap();
        let theirs: Vec<bool> = serde_json::from_value(pfc["prio_pfc"].clone()).unwrap();
        let mine: Vec<bool> = (0..8).map(|p| ieee.pfc_enabled(p)).collect();
        assert_eq!(mine, theirs, "{fixture}: PFC per priority");
        let mut theirs: Vec<(u16, u8)> = app
            .get("dscp_prio")
            .map(|v| serde_json::from_value(v.clone()).unwrap())
            .unwrap_or_default();
        let mut mine: Vec<(u16, u8)> = ieee
            .apps
            .iter()
            .filter(|a| a.selector == dcbnl::IEEE_8021QAZ_APP_SEL_DSCP)
            .map(|a| (a.protocol, a.priority))
            .collect();
        theirs.sort();
        mine.sort();
        assert_eq!(mine, theirs, "{fixture}: the DSCP map");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
