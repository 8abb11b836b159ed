//! The driver's configuration: a JSON file (the DaemonSet mounts it from a ConfigMap) plus the
//! node name from the environment. A malformed file stops the driver with a message naming
//! the field and the value, in its log, before it publishes anything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

/// The driver's name: the domain of its attributes, its DeviceClasses' selector, its CDI kind.
pub const DRIVER_NAME: &str = "rdma-ns.io";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DriverConfig {
    /// Rails by ib device, netdev or PCI address: `{"mlx5_0": "rail0"}`, published as the
    /// device's `rail` attribute.
    #[serde(default)]
    pub rails: BTreeMap<String, String>,
    /// Netdevs to publish as Soft-RoCE-capable devices (`kind` soft-roce): each pod gets a
    /// child of it with a Soft-RoCE device of its own (conf `softRoce`).
    #[serde(default)]
    pub soft_roce_netdevs: Vec<String>,
    /// Multus's `k8s.cni.cncf.io/resourceName` per kind; default `rdma-ns.io/<kind>`.
    #[serde(default)]
    pub resource_names: BTreeMap<String, String>,
    /// How many claims may share a shared-mode device on an API server without consumable
    /// capacity (KEP-5075): the device is published that many times, `<device>-s<N>`.
    #[serde(default = "default_shares")]
    pub shares_per_device: u32,
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    #[serde(default = "default_cdi_dir")]
    pub cdi_dir: PathBuf,
    /// The kubelet's root (`/var/lib/kubelet`): its `plugins_registry/` and `plugins/`.
    #[serde(default = "default_kubelet_dir")]
    pub kubelet_dir: PathBuf,
    /// How often everything is derived again without an event, in seconds.
    #[serde(default = "default_resync")]
    pub resync_seconds: u64,
}

fn default_shares() -> u32 {
    16
}
fn default_data_dir() -> PathBuf {
    PathBuf::from(crate::records::store::DEFAULT_DATA_DIR)
}
fn default_cdi_dir() -> PathBuf {
    PathBuf::from("/var/run/cdi")
}
fn default_kubelet_dir() -> PathBuf {
    PathBuf::from("/var/lib/kubelet")
}
fn default_resync() -> u64 {
    30
}

impl Default for DriverConfig {
    fn default() -> Self {
        serde_json::from_str("{}").expect("every field has a default")
    }
}

impl DriverConfig {
    /// Parses the configuration file's bytes; `what` names it in errors.
    pub fn parse(bytes: &[u8], what: &str) -> Result<DriverConfig> {
        let de = &mut serde_json::Deserializer::from_slice(bytes);
        let cfg: DriverConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            Error::config(
                format!("{what}: {}", e.path()),
                format!(
                    "{}; see install/dra/configmap.yaml for the fields",
                    e.inner()
                ),
            )
        })?;
        cfg.validate(what)?;
        Ok(cfg)
    }

    pub fn load(path: &Path) -> Result<DriverConfig> {
        let bytes = std::fs::read(path)
            .map_err(|e| Error::io(format!("reading driver config {}", path.display()), e))?;
        DriverConfig::parse(&bytes, &path.display().to_string())
    }

    fn validate(&self, what: &str) -> Result<()> {
        for (key, rail) in &self.rails {
            if rail.is_empty() || rail.len() > 64 {
                return Err(Error::config(
                    format!("{what}: rails.{key}"),
                    format!("{rail:?}: a rail name is 1 to 64 characters"),
                ));
            }
        }
        for (kind, name) in &self.resource_names {
            if !["roce", "ipoib", "soft-roce"].contains(&kind.as_str()) || name.len() > 64 {
                return Err(Error::config(
                    format!("{what}: resourceNames.{kind}"),
                    format!(
                        "{name:?}: kinds are roce, ipoib, soft-roce; names at most 64 characters"
                    ),
                ));
            }
        }
        if self.shares_per_device == 0 || self.shares_per_device > 64 {
            return Err(Error::config(
                format!("{what}: sharesPerDevice"),
                format!("{}: want 1 to 64", self.shares_per_device),
            ));
        }
        for dir in [&self.data_dir, &self.cdi_dir, &self.kubelet_dir] {
            if !crate::log::is_plain_absolute(&dir.to_string_lossy()) {
                return Err(Error::config(
                    format!("{what}: {}", dir.display()),
                    "directories must be absolute paths without `..`",
                ));
            }
        }
        Ok(())
    }

    /// The Multus resource name of devices of `kind`.
    pub fn resource_name(&self, kind: &str) -> String {
        self.resource_names
            .get(kind)
            .cloned()
            .unwrap_or_else(|| format!("{DRIVER_NAME}/{kind}"))
    }

    /// The socket the kubelet's plugin watcher finds the driver by.
    pub fn registration_socket(&self) -> PathBuf {
        self.kubelet_dir
            .join("plugins_registry")
            .join(format!("{DRIVER_NAME}-reg.sock"))
    }

    /// The socket of the DRA and health services.
    pub fn plugin_socket(&self) -> PathBuf {
        self.kubelet_dir
            .join("plugins")
            .join(DRIVER_NAME)
            .join("dra.sock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_sockets_are_the_kubelets() {
        let c = DriverConfig::default();
        assert_eq!(c.shares_per_device, 16);
        assert_eq!(
            c.registration_socket(),
            Path::new("/var/lib/kubelet/plugins_registry/rdma-ns.io-reg.sock")
        );
        assert_eq!(
            c.plugin_socket(),
            Path::new("/var/lib/kubelet/plugins/rdma-ns.io/dra.sock")
        );
        assert_eq!(c.resource_name("roce"), "rdma-ns.io/roce");
    }

    #[test]
    fn a_malformed_config_names_the_field_and_value() {
        let e = DriverConfig::parse(br#"{"rails": {"mlx5_0": 7}}"#, "cfg.json").unwrap_err();
        assert_eq!(e.code(), 7);
        assert!(e.to_string().contains("rails.mlx5_0"), "{e}");
        let e = DriverConfig::parse(br#"{"sharesPerDevice": 0}"#, "cfg.json").unwrap_err();
        assert!(
            e.to_string().contains("sharesPerDevice") && e.to_string().contains("0"),
            "{e}"
        );
        let e = DriverConfig::parse(br#"{"rail": {}}"#, "cfg.json").unwrap_err();
        assert!(e.to_string().contains("unknown field `rail`"), "{e}");
        let ok = DriverConfig::parse(
            br#"{"rails": {"mlx5_0": "rail0"}, "softRoceNetdevs": ["eth1"]}"#,
            "cfg.json",
        )
        .unwrap();
        assert_eq!(ok.rails["mlx5_0"], "rail0");
        assert_eq!(ok.soft_roce_netdevs, vec!["eth1".to_string()]);
    }
}
