//! The rdma-ns networks a node is configured for, read the way the plugin reads them: each
//! `rdma-ns` entry of a conflist (or a single conf) goes through the same decoders ADD uses
//! ([`NetConf::parse`], [`PluginConf::from_conf`], `devicePermissions`), so what the doctor
//! says about a conf is what an ADD would find.

use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::attach::config::PluginConf;
use crate::attach::ib_device::RdmaConf;
use crate::attach::modes::ipoib::IpoibModeConf;
use crate::attach::modes::{Mode, ModeConf};
use crate::attach::permissions::{self, DevicePermissions};
use crate::cni::env::Command;
use crate::cni::NetConf;
use crate::peers::{self, Peer};

/// One `rdma-ns` plugin entry, decoded.
#[derive(Debug, Clone)]
pub struct RdmaNetwork {
    /// Where it came from: a file, with ` (spec.config)` for a NetworkAttachmentDefinition.
    pub source: String,
    pub name: String,
    pub mode: Mode,
    pub rdma: RdmaConf,
    pub mtu: Option<u32>,
    pub ipoib_mode: Option<IpoibModeConf>,
    /// The selectors as written (`master`, `device`, `rdmaDevice`, `deviceID`/`pciBusID`).
    pub master: Option<String>,
    pub device: Option<String>,
    pub rdma_device: Option<String>,
    pub device_id: Option<String>,
    pub permissions: Option<DevicePermissions>,
    /// `roceQos`, as ADD reads it.
    pub roce_qos: Option<crate::qos::RoceQos>,
    /// `softRoce`: each pod gets an ib device of its own.
    pub soft_roce: bool,
    pub data_dir: PathBuf,
}

impl RdmaNetwork {
    /// The RDMA netns mode this network needs, or None when either works.
    pub fn needs(&self) -> Option<crate::kernel::nldev::NetnsMode> {
        self.mode.netns_mode_needed(self.rdma)
    }

    /// The netdev name the conf selects the device or parent by, if it names one.
    pub fn netdev(&self) -> Option<&str> {
        self.master.as_deref().or(self.device.as_deref())
    }
}

/// A conf, or one entry of it, that the plugin would refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfError {
    pub source: String,
    pub network: Option<String>,
    pub msg: String,
}

/// The rdma-ns entries of one conf or conflist (already parsed as JSON). Entries of other
/// plugins are skipped; a conf with no rdma-ns entry yields nothing.
pub fn rdma_networks(source: &str, conf: &Value) -> (Vec<RdmaNetwork>, Vec<ConfError>) {
    let mut found = Vec::new();
    let mut errors = Vec::new();
    let Value::Object(top) = conf else {
        errors.push(ConfError {
            source: source.to_string(),
            network: None,
            msg: "not a JSON object".into(),
        });
        return (found, errors);
    };
    let name = top.get("name").and_then(Value::as_str).map(str::to_string);
    let entries: Vec<Map<String, Value>> = match top.get("plugins") {
        Some(Value::Array(list)) => list.iter().filter_map(|p| p.as_object().cloned()).collect(),
        _ => vec![top.clone()],
    };
    for mut entry in entries {
        if entry.get("type").and_then(Value::as_str) != Some("rdma-ns") {
            continue;
        }
        // A runtime hands each plugin of a conflist the list's name and cniVersion.
        for key in ["name", "cniVersion"] {
            if let Some(v) = top.get(key) {
                entry.insert(key.to_string(), v.clone());
            }
        }
        let text = Value::Object(entry.clone()).to_string();
        match decode(source, &text, &entry) {
            Ok(n) => found.push(n),
            Err(msg) => errors.push(ConfError {
                source: source.to_string(),
                network: name.clone(),
                msg,
            }),
        }
    }
    (found, errors)
}

/// A plugin entry of a peer plugin (one rdma-ns replaces or chains after, see [`crate::peers`]):
/// what `doctor --conf` tells the operator about a node still using one.
#[derive(Debug, Clone)]
pub struct PeerEntry {
    /// As for [`RdmaNetwork::source`].
    pub source: String,
    /// The file it came from, for `rdma-ns migrate FILE`.
    pub file: String,
    pub network: Option<String>,
    pub peer: &'static Peer,
    /// Whether an rdma-ns entry comes later in the same conflist.
    pub rdma_ns_after: bool,
}

/// The peer plugins' entries of one conf or conflist (already parsed as JSON), in order.
pub fn peer_entries(source: &str, file: &str, conf: &Value) -> Vec<PeerEntry> {
    let Value::Object(top) = conf else {
        return Vec::new();
    };
    let network = top.get("name").and_then(Value::as_str).map(str::to_string);
    let entries: Vec<&Map<String, Value>> = match top.get("plugins") {
        Some(Value::Array(list)) => list.iter().filter_map(Value::as_object).collect(),
        _ => vec![top],
    };
    let is_rdma_ns =
        |e: &Map<String, Value>| e.get("type").and_then(Value::as_str) == Some("rdma-ns");
    entries
        .iter()
        .enumerate()
        .filter_map(|(at, entry)| {
            Some(PeerEntry {
                source: source.to_string(),
                file: file.to_string(),
                network: network.clone(),
                peer: peers::peer_of(entry)?,
                rdma_ns_after: entries[at + 1..].iter().any(|e| is_rdma_ns(e)),
            })
        })
        .collect()
}

fn decode(source: &str, text: &str, entry: &Map<String, Value>) -> Result<RdmaNetwork, String> {
    let conf = NetConf::parse(text.as_bytes(), Command::Add).map_err(|e| e.to_string())?;
    let plugin = PluginConf::from_conf(&conf).map_err(|e| e.to_string())?;
    let permissions = permissions::from_conf(&conf).map_err(|e| e.to_string())?;
    let roce_qos = crate::attach::qos::from_conf(&conf).map_err(|e| e.to_string())?;
    let soft_roce = crate::attach::soft_roce::enabled(&conf).map_err(|e| e.to_string())?;
    let string = |key: &str| {
        entry
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let ipoib_mode = match &plugin.mode {
        ModeConf::Ipoib(c) => Some(c.ipoib_mode),
        _ => None,
    };
    Ok(RdmaNetwork {
        source: source.to_string(),
        name: conf.name.clone(),
        mode: plugin.mode.kind(),
        rdma: plugin.rdma,
        mtu: plugin.mtu,
        ipoib_mode,
        master: string("master"),
        device: string("device"),
        rdma_device: string("rdmaDevice"),
        device_id: string("deviceID").or_else(|| string("pciBusID")),
        permissions,
        roce_qos,
        soft_roce,
        data_dir: plugin.data_dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conflist_entries_get_the_list_name_and_other_plugins_are_skipped() {
        let conf = json!({"cniVersion":"1.0.0","name":"roce","plugins":[
            {"type":"sriov"},
            {"type":"rdma-ns","mode":"macvlan","master":"ens1f0np0",
             "devicePermissions":{"uverbs":"0666"}}]});
        let (nets, errors) = rdma_networks("/etc/cni/net.d/10-roce.conflist", &conf);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(nets.len(), 1);
        let n = &nets[0];
        assert_eq!(n.name, "roce");
        assert_eq!(n.mode, Mode::Macvlan);
        assert_eq!(n.netdev(), Some("ens1f0np0"));
        assert_eq!(n.permissions.as_ref().unwrap().uverbs, Some(0o666));
        assert_eq!(n.needs(), Some(crate::kernel::nldev::NetnsMode::Shared));
    }

    #[test]
    fn a_bad_field_is_reported_with_the_plugins_own_message() {
        let conf = json!({"cniVersion":"1.0.0","name":"x","type":"rdma-ns","mode":"bogus"});
        let (nets, errors) = rdma_networks("f.conf", &conf);
        assert!(nets.is_empty());
        assert_eq!(errors.len(), 1);
        assert!(errors[0].msg.contains("mode") && errors[0].msg.contains("bogus"));
    }

    #[test]
    fn needs_follow_mode_and_rdma() {
        use crate::kernel::nldev::NetnsMode;
        let conf = |extra: Value| {
            let mut v = json!({"cniVersion":"1.0.0","name":"n","type":"rdma-ns"});
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            rdma_networks("f", &v).0.remove(0).needs()
        };
        assert_eq!(conf(json!({"mode":"rdma"})), Some(NetnsMode::Exclusive));
        assert_eq!(
            conf(json!({"mode":"move","rdma":"exclusive"})),
            Some(NetnsMode::Exclusive)
        );
        assert_eq!(conf(json!({"mode":"move"})), None);
        assert_eq!(
            conf(json!({"mode":"ipoib","master":"ib0"})),
            Some(NetnsMode::Shared)
        );
        assert_eq!(
            conf(json!({"mode":"macvlan","master":"e","rdma":"off"})),
            None
        );
    }
}
