//! The RDMA seam of the fake host: ib devices per namespace, their moves, and the Soft-RoCE
//! links `add_link` makes (see the module doc of fake.rs for what it mimics).

use std::cell::RefCell;
use std::rc::Rc;

use super::{Call, FakeRxe, FakeState, NsKey};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::rdma_cm::CmFs;
use crate::kernel::rdma_ops::{RdmaOps, ROCE_V2_PORT};
use crate::kernel::{KResult, KernelError, Ns};

/// The RDMA seam of the fake host (see [`FakeKernel::rdma`]).
pub struct FakeRdma {
    pub state: Rc<RefCell<FakeState>>,
}

impl FakeRdma {
    /// Sets the RDMA subsystem's netns mode (None: the kernel cannot be asked) and puts these
    /// (name, index) ib devices in the host.
    pub fn configure(&self, mode: Option<NetnsMode>, devices: &[(&str, u32)]) {
        let mut st = self.state.borrow_mut();
        st.netns_mode = mode;
        st.ib_devices = devices
            .iter()
            .map(|(name, index)| (NsKey::Host, name.to_string(), *index))
            .collect();
    }

    /// Where the ib device called `name` is now.
    pub fn location(&self, name: &str) -> Option<NsKey> {
        self.state
            .borrow()
            .ib_devices
            .iter()
            .find(|(_, n, _)| n == name)
            .map(|(k, _, _)| k.clone())
    }
}

impl RdmaOps for FakeRdma {
    fn netns_mode(&self) -> KResult<Option<NetnsMode>> {
        let mut st = self.state.borrow_mut();
        st.record(Call::NetnsMode, Ns::Host, "rdma")?;
        Ok(st.netns_mode)
    }

    fn device_index(&self, ns: Ns<'_>, name: &str) -> KResult<Option<u32>> {
        let key = NsKey::of(ns);
        let mut st = self.state.borrow_mut();
        st.record(
            Call::IbDeviceIndex {
                ns: key.clone(),
                name: name.to_string(),
            },
            ns,
            name,
        )?;
        Ok(st
            .ib_devices
            .iter()
            .find(|(k, n, _)| *k == key && n == name)
            .map(|(_, _, i)| *i))
    }

    fn move_device(&self, ns: Ns<'_>, index: u32, target: Ns<'_>) -> KResult<()> {
        let key = NsKey::of(ns);
        let target = NsKey::of(target);
        let call = Call::MoveIb {
            ns: key.clone(),
            index,
            target: target.clone(),
        };
        let op = call.to_string();
        let mut st = self.state.borrow_mut();
        st.record(call, ns, "ib")?;
        if !st.rxe_netns_sockets && st.rxe.iter().any(|r| r.index == index) {
            return Err(KernelError::new(op, "ib", ns, nix::libc::EOPNOTSUPP));
        }
        let dev = st
            .ib_devices
            .iter_mut()
            .find(|(k, _, i)| *k == key && *i == index)
            .ok_or_else(|| KernelError::new(op, "ib", ns, nix::libc::ENODEV))?;
        dev.0 = target.clone();
        // The core removes and adds the device's clients around a move: RDMA CM's values
        // start again at 0.
        st.cm.client_removed(index);
        if let Some(gid) = st.ipoib_gid.clone() {
            if let Some((k, l)) = st
                .links
                .iter_mut()
                .find(|(_, l)| l.hwaddr.len() == 20 && l.hwaddr[4..] == gid[4..])
            {
                *k = target;
                l.name = format!("ib{}", l.index);
                l.hwaddr[1] = l.hwaddr[1].wrapping_add(1);
                l.up = false;
            }
        }
        Ok(())
    }

    fn port_state(&self, ns: Ns<'_>, index: u32, port: u32) -> KResult<Option<u8>> {
        let mut st = self.state.borrow_mut();
        st.record(
            Call::IbPortState {
                ns: NsKey::of(ns),
                index,
                port,
            },
            ns,
            "ib",
        )?;
        Ok(Some(st.port_state))
    }

    fn add_link(&self, ns: Ns<'_>, name: &str, link_type: &str, netdev: &str) -> KResult<()> {
        let key = NsKey::of(ns);
        let call = Call::AddRdmaLink {
            ns: key.clone(),
            name: name.to_string(),
            link_type: link_type.to_string(),
            netdev: netdev.to_string(),
        };
        let op = call.to_string();
        let mut st = self.state.borrow_mut();
        st.record(call, ns, name)?;
        let fail = |errno| Err(KernelError::new(op.clone(), name, ns, errno));
        let Some(bound) = st
            .links
            .iter()
            .find(|(k, l)| *k == key && l.name == netdev)
            .map(|(_, l)| l.index)
        else {
            return fail(nix::libc::ENODEV);
        };
        if link_type != "rxe" || !st.rxe_module {
            return fail(nix::libc::EINVAL);
        }
        // Linux 7 answers EEXIST to a duplicate ib device name (6.1: ENFILE) and to a netdev
        // that has a rxe device already.
        let taken = st.ib_devices.iter().any(|(_, n, _)| n == name);
        if taken
            || st
                .rxe
                .iter()
                .any(|r| r.netdev_ns == key && r.netdev == bound)
        {
            return fail(nix::libc::EEXIST);
        }
        let index = st.ib_devices.iter().map(|(_, _, i)| *i).max().unwrap_or(0) + 1;
        st.ib_devices.push((NsKey::Host, name.to_string(), index));
        st.rxe.push(FakeRxe {
            name: name.to_string(),
            index,
            netdev_ns: key,
            netdev: bound,
        });
        Ok(())
    }

    fn delete_link(&self, ns: Ns<'_>, index: u32) -> KResult<()> {
        let key = NsKey::of(ns);
        let call = Call::DeleteRdmaLink {
            ns: key.clone(),
            index,
        };
        let op = call.to_string();
        let mut st = self.state.borrow_mut();
        st.record(call, ns, "ib")?;
        if !st
            .ib_devices
            .iter()
            .any(|(k, _, i)| *k == key && *i == index)
        {
            return Err(KernelError::new(op, "ib", ns, nix::libc::EINVAL));
        }
        if !st.rxe.iter().any(|r| r.index == index) {
            return Err(KernelError::new(op, "ib", ns, nix::libc::EOPNOTSUPP));
        }
        st.rxe.retain(|r| r.index != index);
        st.ib_devices.retain(|(_, _, i)| *i != index);
        st.cm.client_removed(index);
        Ok(())
    }

    fn udp_port_bound(&self, ns: Ns<'_>, port: u16) -> KResult<bool> {
        let key = NsKey::of(ns);
        let mut st = self.state.borrow_mut();
        st.record(
            Call::UdpPortBound {
                ns: key.clone(),
                port,
            },
            ns,
            "sock_diag",
        )?;
        if port != ROCE_V2_PORT || !st.rxe_module {
            return Ok(false);
        }
        Ok(match st.rxe_netns_sockets {
            true => st.rxe.iter().any(|r| r.netdev_ns == key),
            false => key == NsKey::Host,
        })
    }

    fn cm_availability(&self) -> CmFs {
        self.state.borrow().cm.availability
    }

    fn cm_group_exists(&self, name: &str) -> KResult<bool> {
        self.state.borrow_mut().cm_group_exists(name)
    }

    fn cm_make_group(&self, name: &str) -> KResult<()> {
        self.state.borrow_mut().cm_make_group(name)
    }

    fn cm_remove_group(&self, name: &str) -> KResult<()> {
        self.state.borrow_mut().cm_remove_group(name)
    }

    fn cm_default_tos(&self, name: &str, port: u32) -> KResult<u8> {
        self.state.borrow_mut().cm_default_tos(name, port)
    }

    fn cm_set_default_tos(&self, name: &str, port: u32, tos: u8) -> KResult<()> {
        self.state.borrow_mut().cm_set_default_tos(name, port, tos)
    }
}
