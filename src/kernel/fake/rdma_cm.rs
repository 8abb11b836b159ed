//! RDMA CM's configfs on the fake host, as kernel/rdma_cm.rs says the kernel keeps it: groups
//! by device name, the values with the devices (by index), reset to 0 when a device moves to
//! another netns and gone with it.

use std::collections::HashMap;

use super::{Call, FakeState};
use crate::kernel::rdma_cm::CmFs;
use crate::kernel::{KResult, KernelError, Ns};

/// The ports a fake ib device has: one, as rxe and a VF's device.
const PORTS: u32 = 1;

/// The configfs side of the fake host.
#[derive(Debug, Clone)]
pub struct FakeCm {
    pub availability: CmFs,
    /// Device names that have a group.
    pub groups: Vec<String>,
    /// (device index, port) → default ToS; a port without an entry reads 0, what the kernel
    /// allocates.
    pub tos: HashMap<(u32, u32), u8>,
}

impl Default for FakeCm {
    fn default() -> Self {
        FakeCm {
            availability: CmFs::Ready,
            groups: Vec::new(),
            tos: HashMap::new(),
        }
    }
}

impl FakeCm {
    /// The device's RDMA CM client went and came back (a netns move) or went (deleted): its
    /// values with it.
    pub fn client_removed(&mut self, index: u32) {
        self.tos.retain(|(i, _), _| *i != index);
    }
}

fn fail<T>(call: &Call, name: &str, errno: i32) -> KResult<T> {
    Err(KernelError::new(call.to_string(), name, Ns::Host, errno))
}

impl FakeState {
    /// The index of the ib device `name`, in whatever netns it is.
    fn ib_index(&self, name: &str) -> Option<u32> {
        self.ib_devices
            .iter()
            .find(|(_, n, _)| n == name)
            .map(|(_, _, i)| *i)
    }

    pub(super) fn cm_group_exists(&mut self, name: &str) -> KResult<bool> {
        let call = Call::CmGroupExists {
            name: name.to_string(),
        };
        self.record(call, Ns::Host, name)?;
        Ok(self.cm.groups.iter().any(|g| g == name))
    }

    pub(super) fn cm_make_group(&mut self, name: &str) -> KResult<()> {
        let call = Call::CmMakeGroup {
            name: name.to_string(),
        };
        self.record(call.clone(), Ns::Host, name)?;
        if self.cm.availability != CmFs::Ready {
            return fail(&call, name, nix::libc::ENOENT);
        }
        if self.cm.groups.iter().any(|g| g == name) {
            return fail(&call, name, nix::libc::EEXIST);
        }
        if self.ib_index(name).is_none() {
            return fail(&call, name, nix::libc::ENODEV);
        }
        self.cm.groups.push(name.to_string());
        Ok(())
    }

    pub(super) fn cm_remove_group(&mut self, name: &str) -> KResult<()> {
        let call = Call::CmRemoveGroup {
            name: name.to_string(),
        };
        self.record(call.clone(), Ns::Host, name)?;
        let before = self.cm.groups.len();
        self.cm.groups.retain(|g| g != name);
        match self.cm.groups.len() < before {
            true => Ok(()),
            false => fail(&call, name, nix::libc::ENOENT),
        }
    }

    /// The index of the device whose port the group's file stands for, as a read or write
    /// finds it: ENOENT without the group or port, ENODEV when the device is gone.
    fn cm_port(&self, call: &Call, name: &str, port: u32) -> KResult<u32> {
        if !self.cm.groups.iter().any(|g| g == name) || port == 0 || port > PORTS {
            return fail(call, name, nix::libc::ENOENT);
        }
        match self.ib_index(name) {
            Some(index) => Ok(index),
            None => fail(call, name, nix::libc::ENODEV),
        }
    }

    pub(super) fn cm_default_tos(&mut self, name: &str, port: u32) -> KResult<u8> {
        let call = Call::CmDefaultTos {
            name: name.to_string(),
            port,
        };
        self.record(call.clone(), Ns::Host, name)?;
        let index = self.cm_port(&call, name, port)?;
        Ok(self.cm.tos.get(&(index, port)).copied().unwrap_or(0))
    }

    pub(super) fn cm_set_default_tos(&mut self, name: &str, port: u32, tos: u8) -> KResult<()> {
        let call = Call::CmSetDefaultTos {
            name: name.to_string(),
            port,
            tos,
        };
        self.record(call.clone(), Ns::Host, name)?;
        let index = self.cm_port(&call, name, port)?;
        self.cm.tos.insert((index, port), tos);
        Ok(())
    }
}
