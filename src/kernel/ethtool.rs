//! The one ethtool request `doctor` asks: a netdev's link-level pause (IEEE 802.3x global
//! pause) settings, through the ioctl `ethtool -a` used before ethtool netlink
//! (SIOCETHTOOL, ETHTOOL_GPAUSEPARAM), which the kernel answers without privilege
//! (net/ethtool/ioctl.c lists it among the commands anyone may run). Global pause and PFC
//! exclude each other on a port: with pause on, a lossless priority is paused with all the
//! others.

use std::io;
use std::os::fd::AsRawFd;

use nix::libc;

/// SIOCETHTOOL (linux/sockios.h).
pub const SIOCETHTOOL: u64 = 0x8946;
/// ETHTOOL_GPAUSEPARAM (linux/ethtool.h).
pub const ETHTOOL_GPAUSEPARAM: u32 = 0x12;

/// `struct ethtool_pauseparam`.
#[repr(C)]
#[derive(Debug, Default)]
struct PauseParam {
    cmd: u32,
    autoneg: u32,
    rx_pause: u32,
    tx_pause: u32,
}

/// A netdev's pause settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    pub autoneg: bool,
    pub rx: bool,
    pub tx: bool,
}

/// The pause settings of `ifname` in the calling thread's netns; None when its driver has no
/// pause settings (EOPNOTSUPP: a veth, a bridge).
pub fn pause(ifname: &str) -> io::Result<Option<Pause>> {
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    if ifname.is_empty() || ifname.len() >= ifr.ifr_name.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{ifname:?} is no interface name"),
        ));
    }
    for (dst, src) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
        *dst = src as libc::c_char;
    }
    let mut param = PauseParam {
        cmd: ETHTOOL_GPAUSEPARAM,
        ..PauseParam::default()
    };
    ifr.ifr_ifru.ifru_data = (&mut param as *mut PauseParam).cast();
    let sock =
        std::net::UdpSocket::bind("0.0.0.0:0").or_else(|_| std::net::UdpSocket::bind("[::]:0"))?;
    // SAFETY: `ifr` names the interface and points at `param`, a live ethtool_pauseparam the
    // kernel fills (copy_to_user of its size); both outlive the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut ifr) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EOPNOTSUPP) => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(Pause {
        autoneg: param.autoneg != 0,
        rx: param.rx_pause != 0,
        tx: param.tx_pause != 0,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::uapi::assert_header_agrees;

    #[test]
    fn constants_and_layout_match_the_installed_uapi_headers() {
        assert_header_agrees(
            "/usr/include/linux/sockios.h",
            &[("SIOCETHTOOL", SIOCETHTOOL as i64)],
        );
        assert_header_agrees(
            "/usr/include/linux/ethtool.h",
            &[("ETHTOOL_GPAUSEPARAM", ETHTOOL_GPAUSEPARAM.into())],
        );
        // Four __u32: cmd, autoneg, rx_pause, tx_pause.
        assert_eq!(std::mem::size_of::<PauseParam>(), 16);
    }

    #[test]
    fn loopback_has_no_pause_and_a_missing_netdev_is_enodev() {
        assert_eq!(pause("lo").unwrap(), None);
        let e = pause("rdmans-nosuch").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV), "{e}");
        assert!(pause("").is_err());
    }
}
