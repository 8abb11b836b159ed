//! Selectors: how the conf (or a device plugin through Multus) names a device, read from the
//! conf fields (by ADD only: DEL, CHECK and GC work from the record, so a broken selector never
//! stops a release), and choosing exactly one host netdev from them.
//!
//! Direct lookups where the kernel offers them: a name is one RTM_GETLINK; a PCI or auxiliary
//! device is one sysfs directory listing plus one RTM_GETLINK per netdev found. Only `hwaddr`
//! needs a dump of every link, because the kernel has no lookup by address.

use serde::Deserialize;

use crate::attach::claim::DraDevice;
use crate::attach::record::HostSide;
use crate::cni::NetConf;
use crate::error::KernelContext;
use crate::error::{Error, Result};
use crate::kernel::rtnetlink::{format_hwaddr, parse_hwaddr, Link, NetOps};
use crate::kernel::sysfs::SysRoot;
use crate::kernel::Ns;

/// How the operator (or a device plugin through Multus) named the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// `device` (move mode) or `master` (child modes): a netdev name or altname in the host.
    Name { field: &'static str, name: String },
    /// `hwaddr`: the MAC (or 20-byte IPoIB) address, matched against the current and the
    /// permanent address.
    HwAddr(Vec<u8>),
    /// `kernelpath`: a sysfs device path such as `/sys/devices/pci0000:00/.../0000:3b:00.2`.
    KernelPath(String),
    /// `pciBusID`, or a PCI `deviceID`: `0000:3b:00.2`.
    Pci {
        field: &'static str,
        address: String,
    },
    /// An auxiliary-bus `deviceID` such as `mlx5_core.sf.4` (mlx5 subfunctions).
    Aux { field: &'static str, name: String },
    /// `rdmaDevice`: an ib device name (`mlx5_3`, `rocep59s0f2`); its netdev is selected.
    IbDevice(String),
    /// The device of the pod's prepared DRA claim (`draDevice`, which claim.rs writes into
    /// the conf from the claim the driver prepared): its host netdev, by name.
    Claim(DraDevice),
}

impl Selector {
    /// The conf field this selector came from and its value, for messages.
    pub fn describe(&self) -> String {
        match self {
            Selector::Name { field, name } => format!("{field}={name}"),
            Selector::HwAddr(a) => format!("hwaddr={}", format_hwaddr(a)),
            Selector::KernelPath(p) => format!("kernelpath={p}"),
            Selector::Pci { field, address } => format!("{field}={address}"),
            Selector::Aux { field, name } => format!("{field}={name}"),
            Selector::IbDevice(n) => format!("rdmaDevice={n}"),
            Selector::Claim(d) => format!(
                "DRA device {} (netdev {}) of claim {}",
                d.device, d.netdev, d.claim
            ),
        }
    }

    /// Whether an attachment whose record names `side` (and `ib_device`, the ib device it moved
    /// into its pod) holds the device this selector names. Records keep no kernelpath or
    /// auxiliary device name of the netdev they hold, so those selectors name no holder.
    pub fn names_recorded(&self, side: HostSide<'_>, ib_device: Option<&str>) -> bool {
        match self {
            Selector::Name { name, .. } => side.name == Some(name.as_str()),
            Selector::HwAddr(h) => side.hwaddr == Some(format_hwaddr(h).as_str()),
            Selector::Pci { address, .. } => side.pci == Some(address.as_str()),
            Selector::IbDevice(ibdev) => ib_device == Some(ibdev.as_str()),
            Selector::Claim(d) => side.name == Some(d.netdev.as_str()),
            Selector::KernelPath(_) | Selector::Aux { .. } => false,
        }
    }

    /// The device a device plugin's ID names: a PCI address (`0000:3b:00.2`, or the short
    /// `3b:00.2` form, normalized to domain 0000) or an auxiliary device name. None for anything
    /// else (see `config::DeviceId`).
    pub fn from_device_id(field: &'static str, value: &str) -> Option<Selector> {
        if let Some(address) = normalize_pci(value) {
            return Some(Selector::Pci { field, address });
        }
        is_aux_name(value).then(|| Selector::Aux {
            field,
            name: value.to_string(),
        })
    }
}

/// What a device plugin allocated to the pod, as Multus passes it on.
///
/// Multus v4 writes the kubelet's device ID into `deviceID` and `pciBusID` of every plugin of
/// the delegate config (older releases: `deviceID` of the first plugin only), and libcni adds
/// `runtimeConfig.deviceID` where the conf declares the `deviceID` capability. What the ID is
/// depends on the device plugin: the SR-IOV network device plugin and ib-sriov pass a PCI
/// address (or an auxiliary SF name for auxNetDevice pools); the RDMA shared device plugin
/// names its devices `"0"`, `"1"`, ... up to its `rdmaHcaMax`, which select nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceId {
    pub field: &'static str,
    pub value: String,
}

impl DeviceId {
    /// The device this ID selects: a PCI function or an auxiliary device. None for an ID that is
    /// neither, such as a shared device plugin's index.
    pub fn selector(&self) -> Option<Selector> {
        Selector::from_device_id(self.field, &self.value)
    }

    /// The conf field and value, for messages.
    pub fn describe(&self) -> String {
        format!("{}={}", self.field, self.value)
    }

    /// Why this ID selects nothing, for the log and errors.
    pub fn not_a_selector(&self) -> String {
        let looks_like = if !self.value.is_empty() && self.value.bytes().all(|b| b.is_ascii_digit())
        {
            " (it looks like an index of the RDMA shared device plugin, which names its devices \
             0, 1, ... up to rdmaHcaMax)"
        } else {
            ""
        };
        format!(
            "{:?} in {} is neither a PCI address (0000:3b:00.2) nor an auxiliary device name \
             (mlx5_core.sf.4){looks_like}",
            self.value, self.field
        )
    }
}

/// The device plugin's allocation, in the one order of precedence every mode uses:
/// `runtimeConfig.deviceID` (the capability), then `deviceID`, then `pciBusID`. Empty values
/// count as absent.
pub fn device_plugin_id(conf: &NetConf) -> Result<Option<DeviceId>> {
    #[derive(Deserialize)]
    struct Fields {
        #[serde(rename = "deviceID")]
        device_id: Option<String>,
        #[serde(rename = "pciBusID")]
        pci_bus_id: Option<String>,
    }
    if let Some(id) = conf
        .runtime_config
        .device_id
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        return Ok(Some(DeviceId {
            field: "runtimeConfig.deviceID",
            value: id.to_string(),
        }));
    }
    let fields: Fields = conf.fields()?;
    Ok([
        ("deviceID", fields.device_id),
        ("pciBusID", fields.pci_bus_id),
    ]
    .into_iter()
    .find_map(|(field, value)| {
        let value = value.filter(|s| !s.is_empty())?;
        Some(DeviceId { field, value })
    }))
}

/// The move-mode device selector (read by ADD only: DEL, CHECK and GC work from the record).
///
/// A device plugin's ID that names a PCI function or an auxiliary device wins over the static
/// selectors, because Multus adds it to whatever the conf holds. An ID that names neither (the
/// RDMA shared device plugin's index) gives way to a static selector; alone it is an error,
/// since move mode needs a whole device. Among the static selectors exactly one may be given.
pub fn device_selector(conf: &NetConf, id: Option<&DeviceId>) -> Result<Selector> {
    if let Some(d) = crate::attach::claim::dra_device(conf)? {
        return Ok(Selector::Claim(d));
    }
    if let Some(s) = id.and_then(DeviceId::selector) {
        return Ok(s);
    }
    match (static_selector(conf)?, id) {
        (Some(s), Some(id)) => {
            crate::log_info!(
                "{}; selecting the device by {} instead",
                id.not_a_selector(),
                s.describe()
            );
            Ok(s)
        }
        (Some(s), None) => Ok(s),
        (None, Some(id)) => Err(Error::config(
            id.field,
            format!(
                "{}: move mode moves a whole netdev and needs a device of its own, such as a VF \
                 from the SR-IOV network device plugin (whose deviceID is the VF's PCI address), \
                 or a `device` (or hwaddr, kernelpath, rdmaDevice) in the conf; for the shared \
                 device plugin use mode macvlan or ipoib",
                id.not_a_selector()
            ),
        )),
        (None, None) => Err(Error::config(
            "device",
            "move mode needs one of device, hwaddr, kernelpath, rdmaDevice, pciBusID or \
             deviceID (or runtimeConfig.deviceID from a device plugin)",
        )),
    }
}

/// The one static selector of the conf (`device`, `hwaddr`, `kernelpath`, `rdmaDevice`), if
/// any; several is an error.
fn static_selector(conf: &NetConf) -> Result<Option<Selector>> {
    #[derive(Deserialize)]
    struct Fields {
        device: Option<String>,
        hwaddr: Option<String>,
        kernelpath: Option<String>,
        #[serde(rename = "rdmaDevice")]
        rdma_device: Option<String>,
    }
    let fields: Fields = conf.fields()?;
    let given: Vec<(&'static str, String)> = [
        ("device", fields.device),
        ("hwaddr", fields.hwaddr),
        ("kernelpath", fields.kernelpath),
        ("rdmaDevice", fields.rdma_device),
    ]
    .into_iter()
    .filter_map(|(field, v)| Some((field, v.filter(|s| !s.is_empty())?)))
    .collect();
    match given.as_slice() {
        [] => Ok(None),
        [(field, value)] => static_value(field, value).map(Some),
        several => Err(Error::config(
            several[0].0,
            format!(
                "give only one of device, hwaddr, kernelpath, rdmaDevice; got {}",
                several
                    .iter()
                    .map(|(f, v)| format!("{f}={v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// Parses one static selector's value; `device` and `master` are netdev names.
fn static_value(field: &'static str, value: &str) -> Result<Selector> {
    match field {
        "device" | "master" => {
            if value.len() > 15 || value.contains(['/', ':']) || value.contains(char::is_whitespace)
            {
                return Err(Error::config(
                    field,
                    format!("{value:?} is not a valid netdev name"),
                ));
            }
            Ok(Selector::Name {
                field,
                name: value.to_string(),
            })
        }
        "rdmaDevice" => {
            if value.is_empty()
                || value.len() > 64
                || value.contains(['/', '\0'])
                || value == ".."
                || value == "."
            {
                return Err(Error::config(
                    "rdmaDevice",
                    format!("{value:?} is not an ib device name"),
                ));
            }
            Ok(Selector::IbDevice(value.to_string()))
        }
        "hwaddr" => parse_hwaddr(value).map(Selector::HwAddr).ok_or_else(|| {
            Error::config(
                "hwaddr",
                format!("{value:?} is not a hardware address like 02:00:00:00:00:01"),
            )
        }),
        _ => {
            if !value.starts_with("/sys/") || value.contains("/../") || value.ends_with("/..") {
                return Err(Error::config(
                    "kernelpath",
                    format!("{value:?} must be a path under /sys/ such as /sys/devices/pci0000:00/0000:00:02.0/0000:3b:00.2"),
                ));
            }
            Ok(Selector::KernelPath(value.to_string()))
        }
    }
}

/// The parent of a macvlan or ipoib child, as every selector given names it: a device plugin's
/// PCI or auxiliary ID `id`, `master` (a name or altname) and `rdmaDevice` (an ib device: its
/// RoCE or IPoIB netdev). Each one given must name the same netdev; the caller resolves and
/// compares them. A device plugin ID that selects nothing (a shared device plugin's index) is
/// left out.
pub fn parent_selectors(conf: &NetConf, id: Option<&DeviceId>) -> Result<Vec<Selector>> {
    #[derive(Deserialize)]
    struct Fields {
        master: Option<String>,
        #[serde(rename = "rdmaDevice")]
        rdma_device: Option<String>,
    }
    if let Some(d) = crate::attach::claim::dra_device(conf)? {
        return Ok(vec![Selector::Claim(d)]);
    }
    let mut selectors: Vec<Selector> = id.and_then(DeviceId::selector).into_iter().collect();
    let fields: Fields = conf.fields()?;
    for (field, value) in [
        ("master", fields.master),
        ("rdmaDevice", fields.rdma_device),
    ] {
        if let Some(v) = value.filter(|s| !s.is_empty()) {
            selectors.push(static_value(field, &v)?);
        }
    }
    Ok(selectors)
}

/// `dddd:bb:dd.f` in lowercase, or None. Accepts `bb:dd.f` (domain 0000).
pub fn normalize_pci(text: &str) -> Option<String> {
    let full = if text.matches(':').count() == 1 {
        format!("0000:{text}")
    } else {
        text.to_string()
    };
    let lower = full.to_ascii_lowercase();
    let b = lower.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(|c| c.is_ascii_hexdigit());
    let ok = b.len() == 12
        && hex(0..4)
        && b[4] == b':'
        && hex(5..7)
        && b[7] == b':'
        && hex(8..10)
        && b[10] == b'.'
        && (b'0'..=b'7').contains(&b[11]);
    ok.then_some(lower)
}

/// `<driver>.<type>.<id>` as the auxiliary bus names devices (`mlx5_core.sf.4`).
fn is_aux_name(text: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    parts.len() >= 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
        })
        && parts.last().unwrap().bytes().all(|c| c.is_ascii_digit())
}

/// Finds the one host link `selector` names. Zero or several → an error naming the selector and
/// the candidates.
pub fn select_host_device(kernel: &dyn NetOps, sys: &SysRoot, selector: &Selector) -> Result<Link> {
    let lookup_err = |e| Error::kernel(format!("looking up {}", selector.describe()), e);
    match selector {
        Selector::Claim(d) => match kernel
            .link_by_name(Ns::Host, &d.netdev)
            .map_err(lookup_err)?
        {
            Some(link) => Ok(link),
            None => Err(Error::DeviceNotFound(format!(
                "{}: the netdev is not in the host network namespace (moved to a pod, renamed \
                 or gone since the claim was prepared); the driver republishes the node's \
                 devices, and a new claim gets a present one",
                selector.describe()
            ))),
        },
        Selector::Name { name, .. } => {
            match kernel.link_by_name(Ns::Host, name).map_err(lookup_err)? {
                Some(link) => Ok(link),
                None => Err(not_found(selector, &[])),
            }
        }
        Selector::HwAddr(addr) => {
            let matches = kernel
                .links_with_hwaddr(Ns::Host, addr)
                .map_err(lookup_err)?;
            one(selector, matches)
        }
        Selector::KernelPath(path) => {
            let names = sys
                .kernelpath_netdevs(path)
                .map_err(|e| sysfs_err(selector, e))?;
            links_named(kernel, selector, names)
        }
        Selector::Pci { address, .. } => {
            let names = sys
                .pci_netdevs(address)
                .map_err(|e| sysfs_err(selector, e))?;
            links_named(kernel, selector, names)
        }
        Selector::Aux { name, .. } => {
            let names = sys.aux_netdevs(name).map_err(|e| sysfs_err(selector, e))?;
            links_named(kernel, selector, names)
        }
        Selector::IbDevice(name) => {
            let topo = crate::kernel::topology::RdmaSysfs::new(sys);
            if topo
                .device(name)
                .map_err(|e| sysfs_err(selector, e))?
                .is_none()
            {
                return Err(Error::DeviceNotFound(format!(
                    "{}: no such ib device in /sys/class/infiniband (in exclusive netns mode a \
                     device attached to a pod is not visible from the host)",
                    selector.describe()
                )));
            }
            let mut names: Vec<String> = topo
                .netdevs_of_ib_device(name)
                .map_err(|e| sysfs_err(selector, e))?
                .into_iter()
                .map(|(_, n)| n)
                .collect();
            names.dedup();
            links_named(kernel, selector, names)
        }
    }
}

/// The parent of a child interface: the one host link every selector names (an ib device's
/// netdevs come from its function's `net/` directory, so P_Key and macvlan children, being
/// virtual, are never among them). Selectors that name different links are a conf error
/// naming both.
pub fn select_parent(kernel: &dyn NetOps, sys: &SysRoot, selectors: &[Selector]) -> Result<Link> {
    let mut chosen: Option<(&Selector, Link)> = None;
    for selector in selectors {
        let link = select_host_device(kernel, sys, selector)?;
        match &chosen {
            None => chosen = Some((selector, link)),
            Some((first, l)) if l.index != link.index => {
                return Err(Error::config(
                    selector_field(selector),
                    format!(
                        "{} names {}, but {} names {}: they must name the same parent netdev; \
                         drop one of them or make them agree",
                        first.describe(),
                        l.name,
                        selector.describe(),
                        link.name
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    chosen
        .map(|(_, l)| l)
        .ok_or_else(|| Error::config("master", "no parent selector given"))
}

fn selector_field(selector: &Selector) -> &'static str {
    match selector {
        Selector::Name { field, .. }
        | Selector::Pci { field, .. }
        | Selector::Aux { field, .. } => field,
        Selector::HwAddr(_) => "hwaddr",
        Selector::KernelPath(_) => "kernelpath",
        Selector::IbDevice(_) => "rdmaDevice",
        Selector::Claim(_) => "draDevice",
    }
}

fn links_named(kernel: &dyn NetOps, selector: &Selector, names: Vec<String>) -> Result<Link> {
    let mut links = Vec::new();
    for name in &names {
        // The host's /sys lists only host-netns netdevs, so each name is in the host netns; a
        // race with a concurrent move makes the lookup come back empty, which is "not found".
        if let Some(l) = kernel
            .link_by_name(Ns::Host, name)
            .kernel_ctx(|| format!("looking up {name} for {}", selector.describe()))?
        {
            links.push(l);
        }
    }
    if links.is_empty() {
        return Err(not_found(selector, &names));
    }
    one(selector, links)
}

fn one(selector: &Selector, mut links: Vec<Link>) -> Result<Link> {
    match links.len() {
        1 => Ok(links.pop().unwrap()),
        0 => Err(not_found(selector, &[])),
        _ => {
            let names: Vec<String> = links
                .iter()
                .map(|l| format!("{} ({})", l.name, l.hwaddr_string()))
                .collect();
            Err(Error::DeviceAmbiguous(format!(
                "{} matches {} host netdevs: {}; select one with `device` (its name) or `hwaddr`",
                selector.describe(),
                links.len(),
                names.join(", ")
            )))
        }
    }
}

fn not_found(selector: &Selector, candidates: &[String]) -> Error {
    let mut msg = format!(
        "{} matches no netdev in the host network namespace; check `ip link` on the node \
         (a device already attached to a pod is no longer in the host)",
        selector.describe()
    );
    if !candidates.is_empty() {
        msg.push_str(&format!(
            "; sysfs lists {} for it, none of them in the host netns now",
            candidates.join(", ")
        ));
    }
    Error::DeviceNotFound(msg)
}

fn sysfs_err(selector: &Selector, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        Error::DeviceNotFound(format!(
            "{}: no such device in sysfs ({e}); check the address and that the driver is bound",
            selector.describe()
        ))
    } else {
        Error::io(format!("reading sysfs for {}", selector.describe()), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pci_addresses_normalize_and_reject_garbage() {
        assert_eq!(
            normalize_pci("0000:3B:00.2").as_deref(),
            Some("0000:3b:00.2")
        );
        assert_eq!(normalize_pci("3b:00.2").as_deref(), Some("0000:3b:00.2"));
        assert_eq!(normalize_pci("0000:3b:00.8"), None);
        assert_eq!(normalize_pci("0000:3b:00"), None);
        assert_eq!(normalize_pci("mlx5_core.sf.4"), None);
    }

    #[test]
    fn device_ids_are_pci_or_aux() {
        assert_eq!(
            Selector::from_device_id("deviceID", "0000:3b:00.2").unwrap(),
            Selector::Pci {
                field: "deviceID",
                address: "0000:3b:00.2".into()
            }
        );
        assert_eq!(
            Selector::from_device_id("deviceID", "mlx5_core.sf.4").unwrap(),
            Selector::Aux {
                field: "deviceID",
                name: "mlx5_core.sf.4".into()
            }
        );
        for not_a_device in ["eth0", "0", "12", "../../x.y.1", ""] {
            assert_eq!(
                Selector::from_device_id("deviceID", not_a_device),
                None,
                "{not_a_device}"
            );
        }
    }

    fn conf(fields: serde_json::Value) -> NetConf {
        let mut base = json!({"cniVersion": "1.1.0", "name": "n", "type": "rdma-ns"});
        for (k, v) in fields.as_object().unwrap() {
            base[k] = v.clone();
        }
        NetConf::parse(base.to_string().as_bytes(), crate::cni::Command::Add).unwrap()
    }

    /// Move mode's selector of `conf`, with its device plugin ID read as ADD reads it.
    fn selector(conf: &NetConf) -> Result<Selector> {
        device_selector(conf, device_plugin_id(conf)?.as_ref())
    }

    /// The child modes' parent selectors of `conf`, likewise.
    fn parents(conf: &NetConf) -> Result<Vec<Selector>> {
        parent_selectors(conf, device_plugin_id(conf)?.as_ref())
    }

    #[test]
    fn move_mode_takes_a_pci_or_aux_device_id_over_static_selectors() {
        let pci = |field| Selector::Pci {
            field,
            address: "0000:3b:00.2".into(),
        };
        // Multus v4: deviceID and pciBusID, plus runtimeConfig.deviceID with the capability.
        let v4 = conf(
            json!({"deviceID": "0000:3b:00.2", "pciBusID": "0000:3b:00.2",
                             "runtimeConfig": {"deviceID": "3b:00.2"}, "device": "eth9"}),
        );
        assert_eq!(selector(&v4).unwrap(), pci("runtimeConfig.deviceID"));
        let legacy = conf(json!({"deviceID": "0000:3b:00.2"}));
        assert_eq!(selector(&legacy).unwrap(), pci("deviceID"));
        let bus_id = conf(json!({"pciBusID": "0000:3b:00.2"}));
        assert_eq!(selector(&bus_id).unwrap(), pci("pciBusID"));
        let aux = conf(json!({"deviceID": "mlx5_core.sf.4"}));
        assert_eq!(
            selector(&aux).unwrap(),
            Selector::Aux {
                field: "deviceID",
                name: "mlx5_core.sf.4".into()
            }
        );
    }

    #[test]
    fn move_mode_lets_an_explicit_selector_win_over_a_shared_plugin_index() {
        for fields in [
            json!({"deviceID": "0", "pciBusID": "0", "device": "ens1f0v0"}),
            json!({"runtimeConfig": {"deviceID": "1"}, "device": "ens1f0v0"}),
        ] {
            assert_eq!(
                selector(&conf(fields.clone())).unwrap(),
                Selector::Name {
                    field: "device",
                    name: "ens1f0v0".into()
                },
                "{fields}"
            );
        }
        assert_eq!(
            selector(&conf(json!({"deviceID": "0", "rdmaDevice": "mlx5_2"}))).unwrap(),
            Selector::IbDevice("mlx5_2".into())
        );
    }

    #[test]
    fn move_mode_with_only_a_shared_plugin_index_says_what_to_use() {
        let e = selector(&conf(json!({"deviceID": "0", "pciBusID": "0"}))).unwrap_err();
        assert_eq!(e.code(), 7);
        let msg = e.to_string();
        for needle in [
            "deviceID",
            "\"0\"",
            "RDMA shared device plugin",
            "SR-IOV network device plugin",
            "`device`",
        ] {
            assert!(msg.contains(needle), "{needle}: {msg}");
        }
        let e = selector(&conf(json!({"deviceID": "eth0"}))).unwrap_err();
        assert_eq!(e.code(), 7);
        assert!(!e.to_string().contains("index"), "{e}");
    }

    #[test]
    fn child_parent_selectors_collect_every_given_one() {
        let index = conf(json!({"deviceID": "0", "pciBusID": "0", "master": "ens1f0np0"}));
        assert_eq!(
            parents(&index).unwrap(),
            vec![Selector::Name {
                field: "master",
                name: "ens1f0np0".into()
            }],
            "a shared device plugin's index selects nothing"
        );
        assert_eq!(device_plugin_id(&index).unwrap().unwrap().value, "0");
        let sel = parents(&conf(
            json!({"deviceID": "0000:3b:00.0", "master": "ens1f0np0", "rdmaDevice": "mlx5_0"}),
        ))
        .unwrap();
        assert_eq!(sel.len(), 3);
        assert_eq!(
            parents(&conf(json!({"master": "a/b"}))).unwrap_err().code(),
            7
        );
    }
}
