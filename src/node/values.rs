//! Kernel values as the node tools read and name them, the same in the doctor's findings, the
//! NFD labels and the metrics: a port's rate, its link layer, the RDMA netns mode.

use crate::kernel::nldev::NetnsMode;
use crate::kernel::topology::LinkLayer;

/// `100 Gb/sec (4X EDR)` → 100000 Mb/s; `2.5 Gb/sec (1X SDR)` → 2500.
pub fn rate_mbps(rate: &str) -> Option<u64> {
    let mut words = rate.split_whitespace();
    let number = words.next()?;
    if words.next()? != "Gb/sec" {
        return None;
    }
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let mut mbps = int.parse::<u64>().ok()?.checked_mul(1000)?;
    let mut scale = 100;
    for c in frac.chars().take(3) {
        mbps += u64::from(c.to_digit(10)?) * scale;
        scale /= 10;
    }
    Some(mbps)
}

/// `InfiniBand`, `Ethernet`, or what sysfs wrote for another layer.
pub fn link_layer_name(layer: &LinkLayer) -> &str {
    match layer {
        LinkLayer::InfiniBand => "InfiniBand",
        LinkLayer::Ethernet => "Ethernet",
        LinkLayer::Other(o) => o,
    }
}

/// `shared` or `exclusive`, as `rdma system` spells them.
pub fn netns_mode_name(mode: NetnsMode) -> &'static str {
    match mode {
        NetnsMode::Shared => "shared",
        NetnsMode::Exclusive => "exclusive",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_to_mbps() {
        assert_eq!(rate_mbps("100 Gb/sec (4X EDR)"), Some(100_000));
        assert_eq!(rate_mbps("2.5 Gb/sec (1X SDR)"), Some(2_500));
        assert_eq!(rate_mbps("14.0625 Gb/sec"), Some(14_062));
        assert_eq!(rate_mbps("fast"), None);
    }
}
