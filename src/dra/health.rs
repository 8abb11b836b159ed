//! Device health for the kubelet (KEP-4680, dra-health v1): every published device, HEALTHY
//! while its port is ACTIVE with its physical link up (a Soft-RoCE netdev: while it has
//! carrier), UNHEALTHY with what was seen otherwise. The kubelet then names an unhealthy
//! device in the status of the pods using it (`allocatedResourcesStatus`).
//!
//! The list is sent whole on every change the daemon sees (rtnetlink and RDMA netlink events:
//! a port's state follows its link) and every resync, so the kubelet's timeout never expires a
//! healthy device.

use crate::dra::inventory::InvDevice;
use crate::dra::proto::health_v1::{
    DeviceHealth, DeviceIdentifier, HealthStatus, NodeWatchResourcesResponse,
};
use crate::dra::slices::{share_name, Sharing};

/// How long the kubelet keeps a report before it calls a device's health unknown: three
/// resyncs, so one late pass is no alarm.
pub fn timeout_seconds(resync_seconds: u64) -> i64 {
    (resync_seconds.saturating_mul(3)).min(i64::MAX as u64) as i64
}

/// The health of every device of `pool` as published with `sharing`, stamped `now` (Unix s).
pub fn report(
    pool: &str,
    devices: &[InvDevice],
    sharing: Sharing,
    now: i64,
    timeout: i64,
) -> NodeWatchResourcesResponse {
    let mut out = Vec::new();
    for d in devices {
        let names: Vec<String> = match (d.shared(), sharing) {
            (true, Sharing::Replicas(n)) => (0..n).map(|i| share_name(&d.name, i)).collect(),
            _ => vec![d.name.clone()],
        };
        for name in names {
            out.push(DeviceHealth {
                device: Some(DeviceIdentifier {
                    pool_name: pool.to_string(),
                    device_name: name,
                }),
                health: match d.unhealthy {
                    None => HealthStatus::Healthy,
                    Some(_) => HealthStatus::Unhealthy,
                } as i32,
                last_updated_time: now,
                health_check_timeout_seconds: timeout,
                message: d
                    .unhealthy
                    .clone()
                    .unwrap_or_default()
                    .chars()
                    .take(1024)
                    .collect(),
            });
        }
    }
    NodeWatchResourcesResponse { devices: out }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::config::DriverConfig;
    use crate::kernel::topology::fixtures::SysfsFixture;

    /// A port taken down is reported UNHEALTHY naming its state; the others stay HEALTHY; every
    /// report carries the pool, the time and the timeout; shares each get the device's health.
    #[test]
    fn a_port_down_is_reported_unhealthy_and_the_rest_healthy() {
        let fx = SysfsFixture::all().unwrap();
        fx.write_attr("class/infiniband/mlx5_2/ports/1/state", "1: DOWN")
            .unwrap();
        let devs = crate::dra::inventory::read(fx.root(), &DriverConfig::default()).unwrap();
        let r = report(
            "node-a",
            &devs,
            Sharing::MultipleAllocations,
            1_700_000_000,
            90,
        );
        assert_eq!(r.devices.len(), devs.len());
        let of = |name: &str| {
            r.devices
                .iter()
                .find(|h| h.device.as_ref().unwrap().device_name == name)
                .unwrap()
        };
        let down = of("mlx5-2-p1");
        assert_eq!(down.health, HealthStatus::Unhealthy as i32);
        assert!(down.message.contains("1: DOWN"), "{}", down.message);
        let up = of("mlx5-0-p1");
        assert_eq!(up.health, HealthStatus::Healthy as i32);
        assert!(up.message.is_empty());
        assert_eq!(up.device.as_ref().unwrap().pool_name, "node-a");
        assert_eq!(
            (up.last_updated_time, up.health_check_timeout_seconds),
            (1_700_000_000, 90)
        );

        let shares = report("node-a", &devs, Sharing::Replicas(2), 1, 90);
        let down_shares: Vec<_> = shares
            .devices
            .iter()
            .filter(|h| h.health == HealthStatus::Unhealthy as i32)
            .map(|h| h.device.as_ref().unwrap().device_name.clone())
            .collect();
        assert_eq!(down_shares, ["mlx5-2-p1-s0", "mlx5-2-p1-s1"]);
    }
}
