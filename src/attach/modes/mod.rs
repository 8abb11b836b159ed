//! The plugin's modes, listed once, below. Each is a type implementing [`ModeDriver`] in a file
//! of its own: the conf fields only it reads, what its ADD selects, its ADD and CHECK, what it
//! records and how it takes a recorded attachment back. DEL and GC are one frame for every mode
//! (`lifecycle::del`, `gc`) around the driver's `release`, chosen by the mode kept in the record.
//!
//! A new mode is a file here (its `ModeDriver`, or for a child interface its
//! [`child::ChildMode`]), its `pub mod` line and its line in the list: the list makes the
//! [`Mode`], [`ModeConf`] and [`ModeState`] enums and their dispatch (dispatch.rs).

#[macro_use]
mod dispatch;

pub mod chained;
pub mod child;
pub mod ipoib;
pub mod macvlan;
pub mod move_dev;

modes! {
    /// An existing host netdev is moved into the pod (the host-device class).
    Move => move_dev::MoveDevice,
    /// A macvlan child of a RoCE netdev, created in the pod (shared netns mode).
    Macvlan => macvlan::Macvlan,
    /// An IPoIB child (P_Key partition) of an IPoIB netdev, created in the pod.
    Ipoib => ipoib::Ipoib,
    /// Chained after sriov/host-device: the pod interface's ib device follows it (rdma-cni).
    Rdma => chained::Chained,
}

/// The mode of a conf without `mode`.
pub const DEFAULT: Mode = Mode::Move;

use std::path::Path;

use crate::attach::config::{AddConf, PluginConf};
use crate::attach::ib_device::RdmaConf;
use crate::attach::record::{Attachment, ModeRecord, ModeWire, RecordMismatch};
use crate::attach::select::DeviceId;
use crate::attach::steps::{CheckSubject, Step};
use crate::attach::Ctx;
use crate::cni::result::CniResult;
use crate::cni::{NetConf, Request};
use crate::error::{Error, Result};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::rtnetlink::Link;

/// One mode: its types (settings, what ADD selects, what it records) and its commands. Nothing
/// outside its file names them but the list above.
pub trait ModeDriver: Sized + 'static {
    /// The conf's `mode` value, and what records and messages call the mode.
    const NAME: &'static str;

    /// Whether DEL and GC hold the attachment's device lock around `release`: for a device
    /// other attachments can ask for (a moved netdev, a VF's ib device); a child is its
    /// attachment's alone.
    const LOCKS_DEVICE: bool;

    /// The shared steps ADD runs once the mode's device is in the pod, in order (steps.rs);
    /// CHECK checks them and DEL releases them in the same order.
    const STEPS: &'static [&'static dyn Step];

    /// The conf fields only this mode reads, parsed for every command.
    type Settings: std::fmt::Debug + Clone + PartialEq + Eq;

    /// What ADD selects its device by, from the conf's selectors. Parsed by ADD alone: DEL,
    /// CHECK and GC work from the record, so a broken selector never stops a release.
    type Target;

    /// What the mode records of an attachment, beside what every record holds.
    type State: ModeRecord + std::fmt::Debug + Clone + PartialEq + Eq;

    /// The settings, from `conf` (with its `rdma` already read).
    fn settings(conf: &NetConf, rdma: RdmaConf) -> Result<Self::Settings>;

    /// What ADD selects by; `device_id` is the device plugin's allocation.
    fn target(req: &Request, device_id: Option<&DeviceId>) -> Result<Self::Target>;

    fn add(ctx: &Ctx<'_>, req: &Request, add: &ModeAdd<'_, Self>) -> Result<CniResult>;

    /// CHECK of the recorded attachment (whose state is `state`) in its pod netns: what the
    /// mode made, before the steps' CHECKs; returns the pod interface it checked, if it made one.
    fn check(
        ctx: &Ctx<'_>,
        subject: &CheckSubject<'_>,
        state: &Self::State,
    ) -> Result<Option<Link>>;

    /// Takes back the kernel side of a recorded attachment, wherever it is now.
    fn release(ctx: &Ctx<'_>, release: &Release<'_, Self::State>) -> Result<()>;

    /// The state from the mode's fields of a record; a field it always writes and the record
    /// lacks is a mismatch.
    fn state_from_wire(wire: ModeWire) -> std::result::Result<Self::State, RecordMismatch>;

    /// The RDMA netns mode the mode needs with conf `rdma`, or None when either works (what
    /// `rdma-ns doctor` holds a node's mode against).
    fn netns_mode_needed(rdma: RdmaConf) -> Option<NetnsMode>;
}

/// The typed ADD configuration of mode `M`, parsed once before anything is looked at: what
/// every mode's ADD reads, the mode's settings and what it selects by.
pub struct ModeAdd<'a, M: ModeDriver> {
    pub conf: AddConf<'a>,
    pub settings: &'a M::Settings,
    pub target: M::Target,
}

/// What DEL and GC give a mode's release.
pub struct Release<'a, S> {
    pub att: &'a Attachment,
    /// The attachment's state, of the mode releasing it.
    pub state: &'a S,
    /// The pod netns DEL was given; None (GC, or an empty CNI_NETNS) means the recorded one, if
    /// it is still that netns.
    pub netns: Option<&'a Path>,
}

/// ADD in mode `M`: its configuration read (the device plugin's ID, then what `M` selects by,
/// then the rest), then `M`'s ADD.
fn add<M: ModeDriver>(
    ctx: &Ctx<'_>,
    req: &Request,
    pc: &PluginConf,
    settings: &M::Settings,
) -> Result<CniResult> {
    let device_id = crate::attach::select::device_plugin_id(&req.conf)?;
    let target = M::target(req, device_id.as_ref())?;
    let conf = AddConf::from_request(req, pc, device_id, M::STEPS)?;
    M::add(
        ctx,
        req,
        &ModeAdd {
            conf,
            settings,
            target,
        },
    )
}

impl Mode {
    /// Conf `mode`; absent or null is [`DEFAULT`].
    pub fn parse(value: Option<&str>) -> Result<Mode> {
        let Some(name) = value else {
            return Ok(DEFAULT);
        };
        Mode::from_name(name).ok_or_else(|| Error::UnsupportedField {
            field: "mode".into(),
            value: name.into(),
            msg: format!(
                "supported modes: {}",
                Mode::NAMES
                    .iter()
                    .map(|n| format!("{n:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
    }

    fn from_name(name: &str) -> Option<Mode> {
        Mode::ALL.iter().copied().find(|m| m.as_str() == name)
    }
}

impl serde::Serialize for Mode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Mode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Mode, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Mode::from_name(&name).ok_or_else(|| serde::de::Error::unknown_variant(&name, Mode::NAMES))
    }
}
