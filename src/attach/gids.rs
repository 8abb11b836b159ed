//! RoCE GID indexes for the pod's addresses: found, recorded, and re-checked.
//!
//! RoCE v2 traffic is addressed by GID index (NCCL_IB_GID_INDEX, ib_write_bw -x). The kernel
//! adds a GID for each IP of a netdev bound to a RoCE port, from a workqueue, shortly after the
//! address appears, at an index that depends on the order addresses came: index 2 was seen for a
//! pod's IPv4 on rxe, not 3. So the index is looked up, never assumed, and ADD waits (bounded)
//! until the kernel has added it.

use std::net::IpAddr;
use std::time::{Duration, Instant};

pub use crate::records::attachment::{GidRecord, GidView};

use crate::attach::plan::Plan;
use crate::attach::record::Attachment;
use crate::attach::steps::{CheckSubject, PodSide, Step, StepAdd};
use crate::attach::Ctx;
use crate::cni::NetConf;
use crate::error::{Error, Result};
use crate::kernel::rtnetlink::Link;
use crate::kernel::sysfs::SysRoot;
use crate::kernel::topology::{GidType, RdmaSysfs};
use crate::kernel::Netns;

/// Step `gids`: waits (bounded by `gidTimeoutMs`) for the kernel to add the pod IPs' RoCE GIDs
/// where the mode said they show, and records their indexes; ADD fails with 121 when one never
/// appears. Its CHECK: every recorded GID still holds its IP at its index.
#[derive(Debug)]
pub struct GidWait;

impl Step for GidWait {
    fn configure(&self, _conf: &NetConf) -> Result<Box<dyn StepAdd>> {
        Ok(Box::new(GidWait))
    }

    fn check(&self, ctx: &Ctx<'_>, subject: &CheckSubject<'_>, _link: Option<&Link>) -> Result<()> {
        check_gids(ctx.sys, subject.ns, subject.att)
    }
}

impl StepAdd for GidWait {
    fn apply<'a>(&self, pod: &mut PodSide<'a>, plan: &mut Plan<'a>) -> Result<()> {
        let ips: Vec<IpAddr> = pod.result.ips.iter().map(|i| i.address.ip()).collect();
        if let (Some(source), false) = (&pod.gids, ips.is_empty()) {
            let ifname = &pod.req.env.ifname;
            let timeout = pod.conf.plugin.gid_timeout;
            let found = wait_in_view(pod.ctx.sys, source, pod.netns, &ips, ifname, timeout)?;
            let mode = pod.att.mode().as_str();
            let recorded = pod.att.pod_interface_mut().ok_or_else(|| {
                Error::State(format!(
                    "{ifname}: mode {mode} records no pod interface GIDs"
                ))
            })?;
            recorded.gid_view = (!found.is_empty()).then_some(source.view);
            recorded.gids = found;
        }
        plan.checkpoint("gids")
    }
}

/// [`wait_for_gids`] on the sysfs `source` names. rxe deletes its ib device when its netdev
/// leaves the host netns (NETDEV_UNREGISTER): then there is no GID to report, and none is
/// waited for. Hardware keeps its ib device.
fn wait_in_view(
    sys: &SysRoot,
    source: &GidSource,
    netns: &Netns,
    ips: &[IpAddr],
    ndev: &str,
    timeout: Duration,
) -> Result<Vec<GidRecord>> {
    let ports = &source.ports;
    with_view(sys, source.view, netns, |sys| {
        if ports
            .iter()
            .all(|(d, _)| !sys.device_exists(format!("class/infiniband/{d}")))
        {
            crate::log_warn!(
                "{ndev}: the ib device(s) {ports:?} went away when the netdev moved (software \
                 RoCE does this); no GID to report"
            );
            return Ok(Vec::new());
        }
        wait_for_gids(sys, ports, ips, ndev, timeout)
    })
}

/// Default bound on the wait for the kernel to add the pod's GIDs.
pub const DEFAULT_GID_TIMEOUT_MS: u64 = 3_000;

/// Polls `sys` until every IP in `ips` has a GID on one of `ports` (ib device, port) whose
/// netdev is `ndev`, or until `timeout`. Each IP takes the first port that has it; each GID
/// found is logged, for the operator matching NCCL_IB_GID_INDEX by hand.
pub fn wait_for_gids(
    sys: &SysRoot,
    ports: &[(String, u32)],
    ips: &[IpAddr],
    ndev: &str,
    timeout: Duration,
) -> Result<Vec<GidRecord>> {
    let topo = RdmaSysfs::new(sys);
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(2);
    loop {
        let mut found = Vec::new();
        let mut missing = Vec::new();
        for ip in ips {
            let mut hit = None;
            for (ibdev, port) in ports {
                let gid = topo.find_gid_for_ip(ibdev, *port, *ip, ndev).map_err(|e| {
                    Error::io(format!("reading the GID table of {ibdev} port {port}"), e)
                })?;
                if let Some((index, gid_type)) = gid {
                    hit = Some(GidRecord {
                        ip: *ip,
                        ibdev: ibdev.clone(),
                        port: *port,
                        index,
                        gid_type: gid_type_text(&gid_type),
                    });
                    break;
                }
            }
            match hit {
                Some(h) => found.push(h),
                None => missing.push(*ip),
            }
        }
        if missing.is_empty() {
            for g in &found {
                crate::log_info!(
                    "{ndev}: {} has GID index {} ({}) on {} port {}",
                    g.ip,
                    g.index,
                    g.gid_type,
                    g.ibdev,
                    g.port
                );
            }
            return Ok(found);
        }
        if Instant::now() >= deadline {
            return Err(Error::GidMissing(format!(
                "the kernel added no RoCE GID for {} on {ndev} ({}) within {} ms: RDMA traffic from \
                 the pod would have no source GID. Check that the RoCE port is up and that the \
                 address is not tentative (IPv6 DAD)",
                missing.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", "),
                ports
                    .iter()
                    .map(|(d, p)| format!("{d} port {p}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                timeout.as_millis()
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Where the pod IPs' RoCE GIDs show: the RoCE ports (ib device, port) and the sysfs that
/// shows their GID tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidSource {
    pub ports: Vec<(String, u32)>,
    pub view: GidView,
}

/// Runs `f` on the sysfs of `view`.
pub fn with_view<T: Send>(
    sys: &SysRoot,
    view: GidView,
    netns: &crate::kernel::Netns,
    f: impl FnOnce(&SysRoot) -> Result<T> + Send,
) -> Result<T> {
    if view == GidView::Host || sys.root() != std::path::Path::new("/sys") {
        return f(sys);
    }
    let mut out = None;
    netns
        .with_own_sysfs(|pod_sys| {
            out = Some(f(pod_sys));
            Ok(())
        })
        .map_err(|e| {
            Error::io(
                format!(
                    "mounting a sysfs inside the pod netns {}",
                    netns.path().display()
                ),
                e,
            )
        })?;
    out.expect("closure ran")
}

/// The RoCE ports (ib device, port) a host netdev is bound to, by its own device or rxe's
/// `parent`. A netdev found only in a GID table is an upper device such as a VLAN, whose ib
/// device belongs to the lower one: not looked for (it would cost a scan of every GID).
pub fn roce_ports_of(sys: &SysRoot, netdev: &str) -> Result<Vec<(String, u32)>> {
    let topo = RdmaSysfs::new(sys);
    let refs = topo
        .ib_ports_of_own_device(netdev)
        .map_err(|e| Error::io(format!("reading the ib devices of {netdev} in sysfs"), e))?;
    let mut out = Vec::new();
    for r in refs {
        let dev = topo
            .device(&r.ibdev)
            .map_err(|e| Error::io(format!("reading ib device {}", r.ibdev), e))?;
        let roce = dev
            .and_then(|d| {
                d.port(r.port)
                    .map(|p| p.link_layer == crate::kernel::topology::LinkLayer::Ethernet)
            })
            .unwrap_or(false);
        if roce {
            out.push((r.ibdev, r.port));
        }
    }
    Ok(out)
}

fn gid_type_text(t: &GidType) -> String {
    t.to_string()
}

/// CHECK: each recorded GID still holds its IP for `ndev` (the index may not have moved either:
/// applications were told that index).
pub fn verify_gids(sys: &SysRoot, records: &[GidRecord], ndev: &str) -> Result<()> {
    let topo = RdmaSysfs::new(sys);
    for r in records {
        let now = topo
            .find_gid_for_ip(&r.ibdev, r.port, r.ip, ndev)
            .map_err(|e| {
                Error::io(
                    format!("reading the GID table of {} port {}", r.ibdev, r.port),
                    e,
                )
            })?;
        match now {
            Some((index, _)) if index == r.index => {}
            Some((index, _)) => {
                return Err(Error::CheckFailed(format!(
                    "the GID for {} on {ndev} moved from index {} to {index} on {} port {}: \
                     applications configured with index {} now use another GID",
                    r.ip, r.index, r.ibdev, r.port, r.index
                )))
            }
            None => {
                return Err(Error::CheckFailed(format!(
                    "the GID for {} on {ndev} (index {} on {} port {}) is gone: the address was \
                     removed or the port went down",
                    r.ip, r.index, r.ibdev, r.port
                )))
            }
        }
    }
    Ok(())
}

/// CHECK: every recorded GID still holds its IP at its index.
fn check_gids(sys: &SysRoot, ns: &Netns, att: &Attachment) -> Result<()> {
    let Some(pod_interface) = att.pod_interface() else {
        return Ok(());
    };
    match pod_interface.gid_view {
        Some(view) if !pod_interface.gids.is_empty() => {
            let ifname = att.ifname.clone();
            let gids = pod_interface.gids.clone();
            with_view(sys, view, ns, move |s| verify_gids(s, &gids, &ifname))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::topology::fixtures::SysfsFixture;

    #[test]
    fn finds_the_recorded_index_and_notices_when_it_goes() {
        let fx = SysfsFixture::all().unwrap();
        let table = RdmaSysfs::new(fx.root()).gid_table("mlx5_0", 1).unwrap();
        let entry = table
            .iter()
            .find(|g| g.ipv4().is_some() && g.ndev.is_some())
            .expect("the fixture has an IPv4 RoCE v2 GID");
        let ip = IpAddr::V4(entry.ipv4().unwrap());
        let ndev = entry.ndev.clone().unwrap();
        let ports = vec![("mlx5_0".to_string(), 1)];
        let got =
            wait_for_gids(fx.root(), &ports, &[ip], &ndev, Duration::from_millis(50)).unwrap();
        assert_eq!(got[0].index, entry.index);
        assert_eq!(got[0].gid_type, "RoCE v2");
        verify_gids(fx.root(), &got, &ndev).unwrap();

        let other: IpAddr = "10.250.0.9".parse().unwrap();
        let err = wait_for_gids(
            fx.root(),
            &ports,
            &[other],
            &ndev,
            Duration::from_millis(30),
        )
        .unwrap_err();
        assert_eq!(err.code(), 121, "{err}");
        assert!(err.to_string().contains("10.250.0.9"), "{err}");

        let mut moved = got.clone();
        moved[0].index += 1;
        let err = verify_gids(fx.root(), &moved, &ndev).unwrap_err();
        assert!(err.to_string().contains("moved"), "{err}");
        let err = verify_gids(fx.root(), &got, "some-other-netdev").unwrap_err();
        assert!(err.to_string().contains("gone"), "{err}");
    }

    /// rxe's GID table has 1024 entries, a sysfs read each: on the lab's emulated nodes a whole
    /// scan took over a second. The wait stops at the pod IP's RoCE v2 entry, so an entry past
    /// it (here one that cannot be read) is never read; an IP without an entry still reads them
    /// all.
    #[test]
    fn the_wait_reads_the_table_only_up_to_the_ips_roce_v2_entry() {
        let fx = SysfsFixture::all().unwrap();
        let past = "class/infiniband/rxe0/ports/1/gids/5";
        fx.remove(past).unwrap();
        std::fs::create_dir(fx.path().join(past)).unwrap();
        let ports = vec![("rxe0".to_string(), 1)];
        let ip: IpAddr = "10.9.0.5".parse().unwrap();
        let got = wait_for_gids(fx.root(), &ports, &[ip], "v0", Duration::from_millis(50)).unwrap();
        assert_eq!((got[0].index, got[0].gid_type.as_str()), (1, "RoCE v2"));

        let other: IpAddr = "10.9.0.6".parse().unwrap();
        let err = wait_for_gids(fx.root(), &ports, &[other], "v0", Duration::from_millis(50))
            .unwrap_err();
        assert!(err.to_string().contains("gids/5"), "{err}");
    }

    /// The scan's early end looks at no netdev: an address that two netdevs hold on one port
    /// is still found for the second one, past the first one's entry.
    #[test]
    fn an_address_another_netdev_holds_first_is_found_further_on() {
        let fx = SysfsFixture::all().unwrap();
        let port = "class/infiniband/rxe0/ports/1";
        let gid = "0000:0000:0000:0000:0000:ffff:0a09:0005";
        fx.write_attr(format!("{port}/gids/3"), gid).unwrap();
        fx.write_attr(format!("{port}/gid_attrs/types/3"), "RoCE v2")
            .unwrap();
        fx.write_attr(format!("{port}/gid_attrs/ndevs/3"), "v1")
            .unwrap();
        let ports = vec![("rxe0".to_string(), 1)];
        let ip: IpAddr = "10.9.0.5".parse().unwrap();
        for (ndev, index) in [("v0", 1), ("v1", 3)] {
            let got =
                wait_for_gids(fx.root(), &ports, &[ip], ndev, Duration::from_millis(50)).unwrap();
            assert_eq!(
                (got[0].index, got[0].ibdev.as_str()),
                (index, "rxe0"),
                "{ndev}"
            );
        }
    }
}
