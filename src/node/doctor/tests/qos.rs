//! `roce-qos` on the fixture node (mlx5 PF ens1f0np0 at 0000:3b:00.0 with its VF 0000:3b:00.2,
//! rxe0 on the veth v0), the DCB replies of tests/data/dcb decoded by the real decoder: every
//! finding, each with its passing twin.

use super::*;
use crate::kernel::ethtool::Pause;

const LOSSLESS: &str = include_str!("../../../../tests/data/dcb/mlx5-lossless.hex");
const PCP_NO_PFC: &str = include_str!("../../../../tests/data/dcb/mlx5-pcp-no-pfc.hex");
const DSCP26_PRIO0: &str = include_str!("../../../../tests/data/dcb/mlx5-dscp26-prio0.hex");

/// DSCP 26 with ECN, priority 3: traffic class 106.
fn qos() -> serde_json::Value {
    json!({"dscp": 26, "ecn": true, "priority": 3})
}

fn network(entry: serde_json::Value) -> serde_json::Value {
    let mut e = entry;
    e["type"] = "rdma-ns".into();
    e["roceQos"] = qos();
    json!({"cniVersion":"1.0.0","name":"lossless","plugins":[e]})
}

/// The healthy node with a macvlan network on the PF, whose DCB answers `reply`, pause off.
fn env_with(reply: &'static str) -> Env {
    let mut env = Env::healthy();
    env.net.dcb.insert("ens1f0np0".into(), reply);
    env.net.pause.insert(
        "ens1f0np0".into(),
        Pause {
            autoneg: false,
            rx: false,
            tx: false,
        },
    );
    env.conf(network(json!({"mode":"macvlan","master":"ens1f0np0"})));
    env
}

fn qos_findings(r: &Report) -> Vec<&Finding> {
    find(r, "roce-qos", "")
}

#[test]
fn a_lossless_pf_passes_pfc_trust_and_pause() {
    let env = env_with(LOSSLESS);
    let r = env.run();
    let f = find(&r, "roce-qos", "ens1f0np0 (network lossless)");
    let ok: Vec<&str> = f
        .iter()
        .filter(|f| f.severity == Severity::Ok)
        .map(|f| f.finding.as_str())
        .collect();
    assert_eq!(
        ok,
        vec![
            "PFC on for priority 3",
            "trust DSCP: DSCP 26 -> priority 3",
            "global pause off"
        ],
        "{f:#?}"
    );
    assert_eq!(f.len(), 3, "{f:#?}");
    assert_eq!(*env.net.asked.borrow(), vec!["ens1f0np0"]);
}

#[test]
fn a_port_as_it_comes_fails_pfc_and_trust_with_the_commands_that_fix_them() {
    let r = env_with(PCP_NO_PFC).run();
    let f = find(&r, "roce-qos", "ens1f0np0");
    let fails: Vec<&&Finding> = f.iter().filter(|f| f.severity == Severity::Fail).collect();
    assert_eq!(fails.len(), 2, "{f:#?}");
    assert!(
        fails[0].finding.contains("PFC is off for priority 3"),
        "{:?}",
        fails[0]
    );
    assert_eq!(
        fails[0].fix.as_deref(),
        Some(
            "dcb pfc set dev ens1f0np0 prio-pfc 3:on (MLNX_OFED: mlnx_qos -i ens1f0np0 --pfc \
             0,0,0,1,0,0,0,0)"
        )
    );
    assert!(fails[1].finding.contains("trusts PCP"), "{:?}", fails[1]);
    let fix = fails[1].fix.as_deref().unwrap();
    assert!(
        fix.contains("mlnx_qos -i ens1f0np0 --trust dscp")
            && fix.contains("dcb app add dev ens1f0np0 dscp-prio 26:3"),
        "{fix}"
    );
    assert_eq!(r.worst(), Severity::Fail);
}

#[test]
fn a_dscp_mapped_elsewhere_names_its_priority() {
    let r = env_with(DSCP26_PRIO0).run();
    let f = find(&r, "roce-qos", "ens1f0np0");
    let fail = f.iter().find(|f| f.severity == Severity::Fail).unwrap();
    assert!(
        fail.finding
            .contains("maps DSCP 26 to priority 0, not network lossless's 3"),
        "{fail:?}"
    );
    assert!(fail
        .fix
        .as_deref()
        .unwrap()
        .contains("dcb app replace dev ens1f0np0 dscp-prio 26:3"));
    assert!(f.iter().any(|f| f.finding == "PFC on for priority 3"));
}

#[test]
fn global_pause_on_fails() {
    let mut env = env_with(LOSSLESS);
    env.net.pause.insert(
        "ens1f0np0".into(),
        Pause {
            autoneg: false,
            rx: true,
            tx: true,
        },
    );
    let r = env.run();
    let f = find(&r, "roce-qos", "ens1f0np0");
    let fail = f.iter().find(|f| f.severity == Severity::Fail).unwrap();
    assert!(
        fail.finding.contains("global pause is on (rx on, tx on)"),
        "{fail:?}"
    );
    assert_eq!(
        fail.fix.as_deref(),
        Some("ethtool -A ens1f0np0 rx off tx off")
    );
}

#[test]
fn a_vf_network_is_checked_on_its_pf_and_so_is_one_known_by_its_records() {
    let mut env = Env::healthy();
    env.net.dcb.insert("ens1f0np0".into(), LOSSLESS);
    env.conf(network(json!({"mode":"move","deviceID":"0000:3b:00.2"})));
    let r = env.run();
    assert!(!find(&r, "roce-qos", "ens1f0np0 (network lossless)").is_empty());
    assert_eq!(*env.net.asked.borrow(), vec!["ens1f0np0"]);
    // A network whose device comes from a device plugin at run time names none in its conf:
    // the records of its pods do.
    let mut env = Env::healthy();
    env.net.dcb.insert("ens1f0np0".into(), LOSSLESS);
    env.conf(json!({"cniVersion":"1.0.0","name":"roce","plugins":[
        {"type":"rdma-ns","mode":"move","roceQos":qos()}]}));
    assert!(qos_findings(&env.run()).is_empty(), "no device known yet");
    let att: Attachment = serde_json::from_value(json!({"network":"roce","containerId":"c1",
        "ifname":"net1","mode":"move","phase":"ready","netns":"/proc/self/ns/net",
        "deviceKey":"pci-0000:3b:00.2",
        "host":{"name":"ens1f0v0","ifindex":9,"mtu":9000,"hwaddr":"0c:42:a1:3b:00:02",
                "pci":"0000:3b:00.2","wasUp":true,"addresses":[]}}))
    .unwrap();
    Store::new(env.data_dir()).save(&att).unwrap();
    let r = env.run();
    assert!(
        !find(&r, "roce-qos", "ens1f0np0 (network roce)").is_empty(),
        "{:#?}",
        qos_findings(&r)
    );
}

#[test]
fn a_virtual_nic_is_not_applicable_and_decides_no_exit_code() {
    let mut env = Env::healthy();
    env.conf(network(
        json!({"mode":"move","device":"v0","softRoce":true}),
    ));
    let r = env.run();
    let f = one(
        &r,
        "roce-qos",
        "v0 (network lossless)",
        Severity::NotApplicable,
    );
    assert!(f.finding.contains("v0 has no DCB"), "{f:?}");
    let without: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.check != "roce-qos")
        .collect();
    let worst = without.iter().map(|f| f.severity).max().unwrap();
    assert_eq!(r.worst(), worst, "N/A ranks below every other finding");
    assert_eq!(Severity::NotApplicable.exit_code(), 0);
}

#[test]
fn ofed_sysfs_trust_ecn_and_a_global_traffic_class_are_read_where_they_are() {
    let env = env_with(LOSSLESS);
    let fx = &env.fx;
    fx.write_attr("class/net/ens1f0np0/qos/trust", "pcp")
        .unwrap();
    fx.write_attr("class/net/ens1f0np0/ecn/roce_np/enable/3", "1")
        .unwrap();
    fx.write_attr("class/net/ens1f0np0/ecn/roce_rp/enable/3", "0")
        .unwrap();
    fx.write_attr(
        "class/infiniband/mlx5_2/tc/1/traffic_class",
        "Global tclass=96",
    )
    .unwrap();
    let r = env.run();
    let trust = find(&r, "roce-qos", "ens1f0np0")
        .into_iter()
        .find(|f| f.finding.contains("qos/trust"))
        .unwrap();
    assert_eq!(trust.severity, Severity::Fail);
    assert_eq!(
        trust.fix.as_deref(),
        Some("mlnx_qos -i ens1f0np0 --trust dscp")
    );
    let ecn: Vec<&Finding> = find(&r, "roce-qos", "ens1f0np0")
        .into_iter()
        .filter(|f| f.finding.contains("ECN"))
        .collect();
    assert_eq!(
        ecn.iter().map(|f| f.severity).collect::<Vec<_>>(),
        vec![Severity::Ok, Severity::Warn]
    );
    assert_eq!(
        ecn[1].fix.as_deref(),
        Some("echo 1 > /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3")
    );
    let tc = one(&r, "roce-qos", "mlx5_2/1", Severity::Fail);
    assert!(tc.finding.contains("forces traffic class 96"), "{tc:?}");
    assert_eq!(
        tc.fix.as_deref(),
        Some("echo 106 > /sys/class/infiniband/mlx5_2/tc/1/traffic_class")
    );
    // The twins.
    fx.write_attr("class/net/ens1f0np0/qos/trust", "dscp")
        .unwrap();
    fx.write_attr(
        "class/infiniband/mlx5_2/tc/1/traffic_class",
        "Global tclass=106",
    )
    .unwrap();
    let r = env.run();
    one(&r, "roce-qos", "mlx5_2/1", Severity::Ok);
    let trust = find(&r, "roce-qos", "ens1f0np0")
        .into_iter()
        .find(|f| f.finding.contains("qos/trust"))
        .unwrap();
    assert_eq!(trust.severity, Severity::Ok);
}

#[test]
fn a_shared_devices_rdma_cm_default_is_held_to_the_networks() {
    let env = env_with(LOSSLESS);
    // No configfs in the fixture: cannot be read.
    let f = one(&r_of(&env), "roce-qos", "mlx5_0/1", Severity::Warn);
    assert!(f.finding.contains("configfs is not mounted"), "{f:?}");
    let group = "kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos";
    env.fx
        .write_attr("kernel/config/rdma_cm/.keep", "")
        .unwrap();
    let f = one(&r_of(&env), "roce-qos", "mlx5_0/1", Severity::Warn);
    assert!(f.finding.contains("no rdma_cm configfs group"), "{f:?}");
    env.fx.write_attr(group, "0").unwrap();
    let f = one(&r_of(&env), "roce-qos", "mlx5_0/1", Severity::Warn);
    assert!(
        f.finding.contains("default ToS 0, not the network's 106"),
        "{f:?}"
    );
    assert!(f
        .fix
        .as_deref()
        .unwrap()
        .contains("cma_roce_tos -d mlx5_0 -p 1 -t 106"));
    env.fx.write_attr(group, "106").unwrap();
    one(&r_of(&env), "roce-qos", "mlx5_0/1", Severity::Ok);
}

fn r_of(env: &Env) -> Report {
    env.run()
}

#[test]
fn a_network_without_roce_qos_gets_no_finding() {
    let mut env = Env::healthy();
    env.net.dcb.insert("ens1f0np0".into(), PCP_NO_PFC);
    env.conf(macvlan("plain", "ens1f0np0"));
    assert!(qos_findings(&env.run()).is_empty());
    assert!(env.net.asked.borrow().is_empty());
}
