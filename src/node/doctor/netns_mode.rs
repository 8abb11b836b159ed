//! `netns-mode`: the RDMA netns mode against what the configured networks need.

use std::collections::BTreeMap;

use super::modules::load_fix;
use super::{Report, Severity};
use crate::kernel::nldev::NetnsMode;
use crate::node::confs::RdmaNetwork;
use crate::node::values::netns_mode_name;
use crate::node::{NetView, Node};

const OBJECT: &str = "RDMA netns mode";

fn switch_fix(to: NetnsMode) -> String {
    match to {
        NetnsMode::Exclusive => "echo 'options ib_core netns_mode=0' > \
             /etc/modprobe.d/ib_core.conf and reboot (or, while no pod runs: rdma system set \
             netns exclusive)"
            .into(),
        NetnsMode::Shared => "remove `options ib_core netns_mode=0` from /etc/modprobe.d and \
             reboot (or, while no pod runs: rdma system set netns shared)"
            .into(),
    }
}

pub(super) struct NetnsModeCheck<'a> {
    pub(super) node: &'a Node,
    pub(super) net: &'a dyn NetView,
    pub(super) networks: &'a [RdmaNetwork],
}

impl NetnsModeCheck<'_> {
    /// The mode, for the checks after this one; None when it could not be read.
    pub(super) fn check(&self, r: &mut Report) -> Option<NetnsMode> {
        let mode = self.mode(r)?;
        r.facts.netns_mode = Some(mode);
        self.against_networks(mode, r);
        Some(mode)
    }

    /// `ib_core`'s parameter, else RDMA netlink; a FAIL when neither answers.
    fn mode(&self, r: &mut Report) -> Option<NetnsMode> {
        if let Some(m) = self.node.netns_mode_from_sysfs() {
            return Some(m);
        }
        match self.net.netns_mode() {
            Ok(m) => Some(m),
            Err(e) => {
                r.push(
                    "netns-mode",
                    Severity::Fail,
                    OBJECT,
                    format!(
                        "unknown: {} is missing and RDMA netlink answered: {e}",
                        self.node
                            .sys
                            .path("module/ib_core/parameters/netns_mode")
                            .display()
                    ),
                    Some(load_fix("ib_core")),
                );
                None
            }
        }
    }

    /// `shared`/`exclusive` → the networks that need it, as `name (mode m)`.
    fn needs(&self) -> BTreeMap<&'static str, Vec<String>> {
        let mut needs: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
        for n in self.networks {
            if let Some(m) = n.needs() {
                needs.entry(netns_mode_name(m)).or_default().push(format!(
                    "{} (mode {})",
                    n.name,
                    n.mode.as_str()
                ));
            }
        }
        needs
    }

    fn against_networks(&self, mode: NetnsMode, r: &mut Report) {
        let have = netns_mode_name(mode);
        let needs = self.needs();
        if needs.len() > 1 {
            r.push(
                "netns-mode",
                Severity::Fail,
                OBJECT,
                format!(
                    "{have}; networks need both: shared for {}, exclusive for {}; one node runs \
                     one mode",
                    needs["shared"].join(", "),
                    needs["exclusive"].join(", ")
                ),
                Some(
                    "run the two kinds of network on separate node pools: select nodes by the \
                     label feature.node.kubernetes.io/rdma-netns-mode (rdma-ns doctor --nfd)"
                        .into(),
                ),
            );
            return;
        }
        match needs.into_iter().next() {
            Some((need, who)) if need != have => {
                let to = if need == "shared" {
                    NetnsMode::Shared
                } else {
                    NetnsMode::Exclusive
                };
                r.push(
                    "netns-mode",
                    Severity::Fail,
                    OBJECT,
                    format!(
                        "{have}, but {} need {need}: their ADDs fail with code 120",
                        who.join(", ")
                    ),
                    Some(switch_fix(to)),
                );
            }
            Some((_, who)) => r.push(
                "netns-mode",
                Severity::Ok,
                OBJECT,
                format!("{have}, as {} need", who.join(", ")),
                None,
            ),
            None => r.push("netns-mode", Severity::Ok, OBJECT, have, None),
        }
    }
}
