//! Root integration tests of the runtime inputs that only IPAM reads: the `ips` capability
//! (`runtimeConfig.ips`) and `IP` in `CNI_ARGS`. rdma-ns passes its stdin and environment to the
//! IPAM plugin unchanged (CNI_COMMAND aside), and Debian's `static` IPAM honours both, so a conf
//! whose static IPAM lists no address must still give the pod interface exactly the asked-for
//! address, in move mode and in macvlan mode.
//!
//! `static` here is a wrapper first in CNI_PATH that records the stdin and CNI_ARGS it gets and
//! then execs /usr/lib/cni/static with that same stdin, so the tests check both the bytes that
//! reach IPAM and the end result.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use common::*;
use serde_json::{json, Value};

const RC_IP: &str = "10.91.0.7/24";
const ARGS_IP: &str = "10.91.0.8/24";
const IFNAME: &str = "net1";

#[derive(Clone, Copy, Debug)]
enum Mode {
    Move,
    Macvlan,
}

const MODES: [Mode; 2] = [Mode::Move, Mode::Macvlan];

/// One attachment's world: the pod netns, the veth end standing in for the NIC (moved in move
/// mode, the macvlan parent otherwise), a data dir holding the plugin's state and the IPAM
/// wrapper.
struct Setup {
    mode: Mode,
    ns: TestNetns,
    veth: Veth,
    data: DataDir,
    bin: PathBuf,
}

impl Setup {
    fn new(mode: Mode) -> Setup {
        let ns = TestNetns::new();
        let veth = Veth::new();
        let data = DataDir::new();
        let bin = data.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let wrapper = bin.join("static");
        std::fs::write(
            &wrapper,
            "#!/bin/sh\n\
             d=$(dirname \"$0\")\n\
             cat >\"$d/stdin.$CNI_COMMAND\"\n\
             printf '%s' \"$CNI_ARGS\" >\"$d/args.$CNI_COMMAND\"\n\
             exec /usr/lib/cni/static <\"$d/stdin.$CNI_COMMAND\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        Setup {
            mode,
            ns,
            veth,
            data,
            bin,
        }
    }

    /// The network conf: the mode's device selection and `static` IPAM with no address.
    fn conf(&self) -> Value {
        let mut conf = match self.mode {
            Mode::Move => move_conf("1.0.0", "capnet", &self.veth.nic, &self.data),
            Mode::Macvlan => json!({"cniVersion": "1.0.0", "name": "capnet", "type": "rdma-ns",
                "mode": "macvlan", "master": self.veth.nic, "dataDir": self.data.state()}),
        };
        conf["ipam"] = json!({"type": "static"});
        conf
    }

    fn call(&self, command: &str, args: &str) -> Call {
        let mut call = Call::new(command, "capctr", &self.ns.path(), IFNAME);
        call.args = args.into();
        call.path = format!("{}:{}", self.bin.display(), cni_path());
        call
    }

    /// What the IPAM plugin got for `command`: its stdin and CNI_ARGS, byte for byte.
    fn ipam_saw(&self, command: &str) -> (String, String) {
        let stdin = std::fs::read_to_string(self.bin.join(format!("stdin.{command}")))
            .unwrap_or_else(|e| panic!("{:?}: IPAM never ran {command}: {e}", self.mode));
        let args = std::fs::read_to_string(self.bin.join(format!("args.{command}"))).unwrap();
        (stdin, args)
    }

    /// ADD, with the IPAM input and the pod interface checked; returns the result.
    #[track_caller]
    fn add(&self, conf: &Value, args: &str, want: &[&str]) -> Value {
        let add = self.call("ADD", args).run(conf);
        add.ok();
        let result = add.json();
        let (stdin, ipam_args) = self.ipam_saw("ADD");
        assert_eq!(stdin, conf.to_string(), "{:?}: IPAM ADD stdin", self.mode);
        assert_eq!(
            ipam_args, args,
            "{:?}: IPAM ADD got another CNI_ARGS",
            self.mode
        );

        let got: Vec<&str> = result["ips"]
            .as_array()
            .map(|ips| {
                ips.iter()
                    .map(|ip| ip["address"].as_str().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(got, want, "{:?}: result {result}", self.mode);
        let link = self.ns.link(IFNAME).expect("the pod interface");
        let kind = link["linkinfo"]["info_kind"].as_str().unwrap_or_default();
        match self.mode {
            Mode::Move => assert_eq!(kind, "veth", "{link}"),
            Mode::Macvlan => assert_eq!(kind, "macvlan", "{link}"),
        }
        let mut addrs = self.ns.addrs(IFNAME);
        addrs.sort();
        let mut want_sorted: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        want_sorted.sort();
        assert_eq!(addrs, want_sorted, "{:?}: addresses in the pod", self.mode);
        result
    }

    /// CHECK and DEL with prevResult (IPAM sees those stdins too), then nothing left.
    #[track_caller]
    fn check_del(&self, conf: &Value, args: &str, result: Value) {
        let mut with_prev = conf.clone();
        with_prev["prevResult"] = result;
        self.call("CHECK", args).run(&with_prev).ok();
        let (stdin, _) = self.ipam_saw("CHECK");
        assert_eq!(
            stdin,
            with_prev.to_string(),
            "{:?}: IPAM CHECK stdin",
            self.mode
        );
        self.call("DEL", args).run(&with_prev).ok();
        let (stdin, ipam_args) = self.ipam_saw("DEL");
        assert_eq!(
            stdin,
            with_prev.to_string(),
            "{:?}: IPAM DEL stdin",
            self.mode
        );
        assert_eq!(
            ipam_args, args,
            "{:?}: IPAM DEL got another CNI_ARGS",
            self.mode
        );
        assert!(
            self.ns.link(IFNAME).is_none(),
            "{:?}: left in the pod",
            self.mode
        );
        let host = host_link(&self.veth.nic).expect("the NIC/parent in the host after DEL");
        assert_eq!(host["mtu"], 1500, "{host}");
        assert!(self.data.records().is_empty(), "{:?}", self.data.records());
    }
}

#[test]
fn runtime_config_ips_reach_static_ipam_in_move_and_macvlan_mode() {
    for mode in MODES {
        let s = Setup::new(mode);
        let mut conf = s.conf();
        conf["capabilities"] = json!({"ips": true});
        conf["runtimeConfig"] = json!({"ips": [RC_IP]});
        let result = s.add(&conf, "", &[RC_IP]);
        s.check_del(&conf, "", result);
    }
}

#[test]
fn cni_args_ip_reaches_static_ipam_in_move_and_macvlan_mode() {
    let args = format!("IgnoreUnknown=1;IP={ARGS_IP}");
    for mode in MODES {
        let s = Setup::new(mode);
        let conf = s.conf();
        let result = s.add(&conf, &args, &[ARGS_IP]);
        s.check_del(&conf, &args, result);
    }
}

/// The controls: without runtimeConfig or CNI_ARGS the same conf gives no address (so the
/// addresses above came from those inputs); with both, IPAM gets both and static's own
/// precedence decides: `runtimeConfig.ips` replaces every other address ("runtimeConfig IP
/// overwrites IP" in plugins/ipam/static/main.go; calling /usr/lib/cni/static directly gives
/// the same).
#[test]
fn without_either_input_no_address_and_with_both_static_prefers_runtime_config() {
    for mode in MODES {
        let s = Setup::new(mode);
        let mut conf = s.conf();
        conf["capabilities"] = json!({"ips": true});
        let result = s.add(&conf, "", &[]);
        s.check_del(&conf, "", result);

        let args = format!("IgnoreUnknown=1;IP={ARGS_IP}");
        conf["runtimeConfig"] = json!({"ips": [RC_IP]});
        let result = s.add(&conf, &args, &[RC_IP]);
        s.check_del(&conf, &args, result);
    }
}
