//! The plugin's modes. Each is a [`ModeDriver`]: its ADD, its CHECK, and how it takes back the
//! kernel side of a recorded attachment from wherever that is now. DEL and GC are one frame for
//! every mode (`lifecycle::del`, `gc`) around the driver's `release`, chosen by the mode kept in
//! the record. A new mode is a file here, a `Mode` variant (config.rs) and one arm in [`driver`].

pub mod chained;
pub mod child;
pub mod move_dev;

use std::path::Path;

use crate::attach::config::{Mode, PluginConf};
use crate::attach::record::Attachment;
use crate::attach::Ctx;
use crate::cni::result::CniResult;
use crate::cni::Request;
use crate::error::Result;

pub trait ModeDriver: Sync {
    fn add(&self, ctx: &Ctx<'_>, req: &Request, pc: &PluginConf) -> Result<CniResult>;

    fn check(&self, ctx: &Ctx<'_>, req: &Request, pc: &PluginConf) -> Result<()>;

    /// Takes back the kernel side of `att`. `netns` is the pod netns DEL was given; None (GC,
    /// or an empty CNI_NETNS) means the recorded one, if it is still that netns.
    fn release(&self, ctx: &Ctx<'_>, netns: Option<&Path>, att: &Attachment) -> Result<()>;

    /// Whether release holds the attachment's device lock: a device other attachments can ask
    /// for (a moved netdev, a VF's ib device); a child is its attachment's alone.
    fn locks_device(&self) -> bool;
}

/// The driver of `mode`. Exhaustive on purpose: a new `Mode` variant does not compile until it
/// has one.
pub fn driver(mode: Mode) -> &'static dyn ModeDriver {
    match mode {
        Mode::Move => &move_dev::MoveDevice,
        Mode::Macvlan | Mode::Ipoib => &child::ChildInterface,
        Mode::Rdma => &chained::Chained,
    }
}
