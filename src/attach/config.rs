//! This plugin's own fields of the network configuration, decoded once into derived types:
//! [`PluginConf`], the fields every command reads (the mode's own settings among them), and for
//! ADD [`AddConf`], what ADD reads beside them. The mode's own fields are decoded by its file
//! (modes/<mode>.rs), device selectors by select.rs.
//!
//! Device selectors (`device`, `master`, `deviceID`, ...) are decoded by ADD only: DEL, CHECK
//! and GC work from the record, so a broken selector never stops a release.

use std::path::PathBuf;
use std::time::Duration;

use serde::de::{Deserializer, Unexpected, Visitor};
use serde::Deserialize;

use crate::attach::ib_device::RdmaConf;
use crate::attach::modes::{Mode, ModeConf};
use crate::attach::select::DeviceId;
use crate::attach::steps::{Step, StepAdd};
use crate::attach::store::DEFAULT_DATA_DIR;
use crate::cni::{NetConf, Request};
use crate::error::{Error, Result};

/// How long an ADD/DEL waits for another invocation holding the same device.
pub const DEFAULT_LOCK_TIMEOUT_MS: u64 = 10_000;

/// The fields every command reads.
#[derive(Debug, Clone)]
pub struct PluginConf {
    /// The mode, with the settings only it reads.
    pub mode: ModeConf,
    /// MTU to set in the pod; None keeps the device's MTU.
    pub mtu: Option<u32>,
    pub data_dir: PathBuf,
    pub lock_timeout: Duration,
    /// Conf `rdma`: what to do with the netdev's ib device.
    pub rdma: RdmaConf,
    /// Conf `gidTimeoutMs`: how long ADD waits for the kernel to add the pod IPs' RoCE GIDs.
    pub gid_timeout: Duration,
}

/// The fields every mode reads, as sent.
#[derive(Deserialize)]
struct CommonFields {
    mode: Option<String>,
    mtu: Option<Mtu>,
    #[serde(rename = "lockTimeoutMs")]
    lock_timeout_ms: Option<u32>,
    rdma: Option<String>,
    #[serde(rename = "gidTimeoutMs")]
    gid_timeout_ms: Option<u32>,
}

impl PluginConf {
    pub fn from_conf(conf: &NetConf) -> Result<PluginConf> {
        let common: CommonFields = conf.fields()?;
        let kind = Mode::parse(common.mode.as_deref())?;
        let data_dir = data_dir(conf)?;
        if let Some(log_file) = conf.log_file.as_deref().filter(|f| !f.is_empty()) {
            if !crate::log::is_plain_absolute(log_file) {
                return Err(Error::config(
                    "logFile",
                    format!("{log_file:?} must be an absolute path without `..`"),
                ));
            }
        }
        let rdma = RdmaConf::parse(common.rdma.as_deref())?;
        let mode = kind.settings(conf, rdma)?;
        crate::attach::soft_roce::refuse_where_unsupported(conf, kind, rdma)?;
        // Checked here so a bad value fails before anything changes, not at the first IPAM call.
        conf.ipam_timeout()?;
        let millis = |ms: Option<u32>, default: u64| {
            Duration::from_millis(ms.map(u64::from).unwrap_or(default))
        };
        Ok(PluginConf {
            mode,
            mtu: common.mtu.map(|m| m.0),
            data_dir,
            lock_timeout: millis(common.lock_timeout_ms, DEFAULT_LOCK_TIMEOUT_MS),
            rdma,
            gid_timeout: millis(
                common.gid_timeout_ms,
                crate::attach::gids::DEFAULT_GID_TIMEOUT_MS,
            ),
        })
    }
}

/// `dataDir`, absolute and without `..`; the default when absent.
pub fn data_dir(conf: &NetConf) -> Result<PathBuf> {
    let data_dir = conf
        .data_dir
        .as_deref()
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    if !crate::log::is_plain_absolute(&data_dir.to_string_lossy()) {
        return Err(Error::config(
            "dataDir",
            format!(
                "{} must be an absolute path without `..`",
                data_dir.display()
            ),
        ));
    }
    Ok(data_dir)
}

/// What ADD reads of the conf beside [`PluginConf`], the same for every mode (a mode's settings
/// and what it selects by are in `modes::ModeAdd`): parsed once, before anything is looked at,
/// and handed to the steps, which never read the conf again.
#[derive(Debug)]
pub struct AddConf<'a> {
    pub plugin: &'a PluginConf,
    /// The device plugin's allocation (`runtimeConfig.deviceID`, `deviceID` or `pciBusID`), as
    /// the record keeps it, also when it selects nothing.
    pub device_id: Option<DeviceId>,
    /// The mode's steps, each with its fields of the conf (`devicePermissions`,
    /// `runtimeConfig.CNIDeviceInfoFile`, ...), in the order ADD runs them.
    pub steps: Vec<Box<dyn StepAdd>>,
}

impl<'a> AddConf<'a> {
    /// The ADD configuration of a mode that runs `steps`.
    pub fn from_request(
        req: &Request,
        plugin: &'a PluginConf,
        device_id: Option<DeviceId>,
        steps: &[&dyn Step],
    ) -> Result<AddConf<'a>> {
        Ok(AddConf {
            plugin,
            device_id,
            steps: crate::attach::steps::configure(steps, &req.conf)?,
        })
    }

    /// Whether a step reads the pod's ib devices (`steps::PodSide::ib_devices`).
    pub fn reads_ib_devices(&self) -> bool {
        self.steps.iter().any(|s| s.reads_ib_devices())
    }

    /// The device plugin's ID as the record keeps it.
    pub fn recorded_device_id(&self) -> Option<String> {
        self.device_id.as_ref().map(|id| id.value.clone())
    }
}

/// `mtu`: 68 is IPv4's minimum, 65535 the largest an IPv4 packet can be.
struct Mtu(u32);

impl<'de> Deserialize<'de> for Mtu {
    fn deserialize<D: Deserializer<'de>>(de: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Mtu;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer from 68 to 65535")
            }
            fn visit_u64<E: serde::de::Error>(self, m: u64) -> std::result::Result<Mtu, E> {
                match u32::try_from(m) {
                    Ok(m) if (68..=65535).contains(&m) => Ok(Mtu(m)),
                    _ => Err(E::custom(format!(
                        "{m} is outside 68..=65535 (68 is IPv4's minimum)"
                    ))),
                }
            }
            fn visit_i64<E: serde::de::Error>(self, m: i64) -> std::result::Result<Mtu, E> {
                match u64::try_from(m) {
                    Ok(m) => self.visit_u64(m),
                    Err(_) => Err(E::invalid_value(Unexpected::Signed(m), &self)),
                }
            }
        }
        de.deserialize_u64(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(fields: serde_json::Value) -> NetConf {
        let mut base = json!({"cniVersion": "1.1.0", "name": "n", "type": "rdma-ns"});
        for (k, v) in fields.as_object().unwrap() {
            base[k] = v.clone();
        }
        NetConf::parse(base.to_string().as_bytes(), crate::cni::Command::Add).unwrap()
    }

    #[test]
    fn an_mtu_of_the_wrong_type_names_the_real_range() {
        let e = PluginConf::from_conf(&conf(json!({"mtu": "9000"}))).unwrap_err();
        assert_eq!(e.code(), 7);
        assert!(e.to_string().contains("68 to 65535"), "{e}");
    }
}
