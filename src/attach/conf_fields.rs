//! Every field of the network configuration the plugin reads, in one list: the protocol's
//! (`cni::conf`), every mode's and every step's, a nested object's keys as `object.key`.
//! docs/configuration.md's reference documents exactly these (src/docs_tests.rs), and the
//! tests below hold the list to the parsers: each field of it, given a value of the wrong
//! type, is refused naming it, and every field a parser reads is in it.

/// A field and the JSON type of a value it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfField {
    pub name: &'static str,
    pub json: Json,
}

/// What a field's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Json {
    Text,
    Number,
    /// A string or a number (`pkey`, `devicePermissions.group`).
    TextOrNumber,
    Bool,
    Object,
    Array,
    /// `true`, `false`, null or an object (`rail`, `dra`).
    SwitchOrObject,
}

const fn field(name: &'static str, json: Json) -> ConfField {
    ConfField { name, json }
}

/// Every field the plugin reads, in docs/configuration.md's order.
pub const CONF_FIELDS: &[ConfField] = &[
    field("cniVersion", Json::Text),
    field("name", Json::Text),
    field("type", Json::Text),
    field("mode", Json::Text),
    field("device", Json::Text),
    field("rdmaDevice", Json::Text),
    field("hwaddr", Json::Text),
    field("kernelpath", Json::Text),
    field("pciBusID", Json::Text),
    field("deviceID", Json::Text),
    field("mtu", Json::Number),
    field("master", Json::Text),
    field("macvlanMode", Json::Text),
    field("mac", Json::Text),
    field("pkey", Json::TextOrNumber),
    field("ipoibMode", Json::Text),
    field("umcast", Json::Bool),
    field("rdma", Json::Text),
    field("gidTimeoutMs", Json::Number),
    field("softRoce", Json::Bool),
    field("ipam", Json::Object),
    field("ipamTimeoutMs", Json::Number),
    field("devicePermissions", Json::Object),
    field("devicePermissions.uverbs", Json::Text),
    field("devicePermissions.umad", Json::Text),
    field("devicePermissions.issm", Json::Text),
    field("devicePermissions.rdma_cm", Json::Text),
    field("devicePermissions.group", Json::TextOrNumber),
    field("rail", Json::SwitchOrObject),
    field("rail.table", Json::Number),
    field("rail.priority", Json::Number),
    field("rail.arpIgnore", Json::Number),
    field("rail.arpAnnounce", Json::Number),
    field("rail.rpFilter", Json::Number),
    field("roceQos", Json::Object),
    field("roceQos.dscp", Json::Number),
    field("roceQos.ecn", Json::Bool),
    field("roceQos.priority", Json::Number),
    field("roceQos.fifoDscp", Json::Number),
    field("dra", Json::SwitchOrObject),
    field("dra.request", Json::Text),
    field("dra.ifname", Json::Text),
    field("dra.optional", Json::Bool),
    field("dra.cdiDir", Json::Text),
    field("dra.kubeletDir", Json::Text),
    field("draDevice", Json::Object),
    field("runtimeConfig", Json::Object),
    field("runtimeConfig.deviceID", Json::Text),
    field("runtimeConfig.CNIDeviceInfoFile", Json::Text),
    field("runtimeConfig.mac", Json::Text),
    field("runtimeConfig.ips", Json::Array),
    field("capabilities", Json::Object),
    field("dns", Json::Object),
    field("dataDir", Json::Text),
    field("lockTimeoutMs", Json::Number),
    field("logFile", Json::Text),
    field("logLevel", Json::Text),
    field("logFormat", Json::Text),
    field("prevResult", Json::Object),
    field("cni.dev/valid-attachments", Json::Array),
    field("cni.dev/attachments", Json::Array),
];

/// The listed field `name`, if the plugin reads it.
pub fn conf_field(name: &str) -> Option<&'static ConfField> {
    CONF_FIELDS.iter().find(|f| f.name == name)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::{json, Value};

    use super::*;
    use crate::attach::claim::{self, DraConf};
    use crate::attach::config::PluginConf;
    use crate::attach::ib_device::RdmaConf;
    use crate::attach::modes::Mode;
    use crate::attach::{permissions, qos, rail, select, steps};
    use crate::cni::{Command, NetConf};
    use crate::error::{Error, Result};
    use crate::testutil::serde_fields::read_log;

    /// A conf every reader accepts: GC's list for the protocol, a device for move mode and a
    /// parent for the child modes.
    fn accepted() -> Value {
        json!({"cniVersion": "1.1.0", "name": "n", "type": "rdma-ns", "device": "eth1",
               "master": "eth1", "cni.dev/valid-attachments": []})
    }

    /// What every reader of the plugin says of `conf`: the protocol's (as for GC, the command
    /// that reads the most), every mode's settings and steps, the selectors, DRA's fields.
    fn read_every_field(conf: &Value) -> Vec<Error> {
        let stdin = conf.to_string();
        let conf = match NetConf::parse(stdin.as_bytes(), Command::Gc) {
            Ok(conf) => conf,
            Err(e) => return vec![e],
        };
        let mut results: Vec<Result<()>> = vec![
            PluginConf::from_conf(&conf).map(drop),
            conf.ipam_timeout().map(drop),
            DraConf::from_conf(&conf).map(drop),
            claim::dra_device(&conf).map(drop),
        ];
        for mode in Mode::ALL {
            results.push(mode.settings(&conf, RdmaConf::Auto).map(drop));
            results.push(steps::configure(mode.steps(), &conf).map(drop));
        }
        match select::device_plugin_id(&conf) {
            Ok(id) => {
                results.push(select::device_selector(&conf, id.as_ref()).map(drop));
                results.push(select::parent_selectors(&conf, id.as_ref()).map(drop));
            }
            Err(e) => results.push(Err(e)),
        }
        results.into_iter().filter_map(Result::err).collect()
    }

    /// `conf` with `value` at the listed field `name` (`rail.table` inside `rail`).
    fn with(mut conf: Value, name: &str, value: Value) -> Value {
        match name
            .split_once('.')
            .filter(|_| !name.starts_with("cni.dev/"))
        {
            Some((object, key)) => {
                // roceQos requires some of its keys: the wrong one goes among valid others.
                if object == qos::CONF_KEY {
                    conf[object] = json!({"dscp": 26, "ecn": true, "priority": 3});
                }
                conf[object][key] = value;
            }
            None => conf[name] = value,
        }
        // The draft's key is read only without the current one.
        if name == "cni.dev/attachments" {
            conf.as_object_mut()
                .expect("an object")
                .remove("cni.dev/valid-attachments");
        }
        conf
    }

    fn of_the_wrong_type(json: Json) -> Value {
        match json {
            Json::Text | Json::Object | Json::Array | Json::SwitchOrObject => json!(7),
            Json::Number | Json::Bool => json!("7"),
            Json::TextOrNumber => json!(true),
        }
    }

    #[test]
    fn the_accepted_conf_is_accepted() {
        let errors = read_every_field(&accepted());
        assert!(errors.is_empty(), "{errors:?}");
    }

    /// The list is the parsers': a field it names is read by one of them, which refuses a
    /// value of the wrong type naming the field.
    #[test]
    fn every_listed_field_of_the_wrong_type_is_refused_naming_it() {
        for f in CONF_FIELDS {
            let conf = with(accepted(), f.name, of_the_wrong_type(f.json));
            let errors = read_every_field(&conf);
            assert!(
                errors.iter().any(|e| e.to_string().contains(f.name)),
                "{} = {}: no reader refused it naming the field: {errors:?}",
                f.name,
                of_the_wrong_type(f.json)
            );
        }
    }

    /// The other way: every field a reader decodes (the derived types it reads them into, and
    /// the key lists of the objects read by hand) is in the list.
    #[test]
    fn every_field_a_reader_decodes_is_listed() {
        let mut conf = accepted();
        conf["dra"] = json!({});
        read_log::start();
        let errors = read_every_field(&conf);
        let mut read = read_log::take();
        assert!(errors.is_empty(), "{errors:?}");
        let nested = [
            (rail::CONF_KEY, rail::KEYS.map(|(k, _)| k).to_vec()),
            (qos::CONF_KEY, qos::KEYS.map(|(k, _)| k).to_vec()),
            (
                permissions::CONF_KEY,
                permissions::MODE_KEYS
                    .map(|(k, _)| k)
                    .into_iter()
                    .chain([permissions::GROUP_KEY])
                    .collect(),
            ),
            (
                "runtimeConfig",
                crate::cni::conf::RUNTIME_CONFIG_KEYS.to_vec(),
            ),
        ];
        for (object, keys) in nested {
            read.extend(keys.iter().map(|k| format!("{object}.{k}")));
        }
        let listed: BTreeSet<String> = CONF_FIELDS.iter().map(|f| f.name.to_string()).collect();
        let unlisted: Vec<&String> = read.difference(&listed).collect();
        assert!(
            unlisted.is_empty(),
            "read but not in CONF_FIELDS (nor in docs/configuration.md): {unlisted:?}"
        );
        assert!(
            read.contains("macvlanMode") && read.contains("dra.cdiDir"),
            "{read:?}"
        );
    }
}
