//! A network's RoCE QoS (`roceQos`): the DSCP, ECN and priority its pods' RDMA traffic carries,
//! the traffic class byte they make, and the pod interface's alias that carries them into the
//! pod, where `rdma-ns env` reads them.
//!
//! RoCE v2 puts a QP's GRH traffic class in the IP header as it is (the IPv4 TOS byte, the IPv6
//! traffic class): DSCP in the upper six bits, the ECN field in the lower two. `ecn` sets the
//! ECN-capable transport codepoint ECT(0), 0b10: RFC 3168 asks senders that need one ECT
//! codepoint to use ECT(0) (ECT(1) is L4S's since RFC 9331), and it is the bit RFC 2481 named
//! ECT; so DSCP 26 with ECN is 106, the byte UCX sends by default and NVIDIA's guides give
//! NCCL_IB_TC.
//!
//! Used by the step that applies it (attach/qos.rs), `env` (discover/), `doctor` (node/) and
//! `migrate` (peers/): it names no CNI field and no kernel call.

use std::fmt;

use serde::Serialize;

/// RFC 3168's ECT(0): what `ecn` sets in the ECN field.
pub const ECT0: u8 = 0b10;

/// The largest DSCP (six bits).
pub const DSCP_MAX: u8 = 63;

/// The largest priority (PCP, and the SL NCCL and UCX take).
pub const PRIORITY_MAX: u8 = 7;

/// What the pod interface's alias starts with when rdma-ns put a network's QoS there.
pub const ALIAS_PREFIX: &str = "rdma-ns roceQos";

/// A network's RoCE QoS, validated: `dscp` and `fifo_dscp` at most [`DSCP_MAX`], `priority` at
/// most [`PRIORITY_MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoceQos {
    pub dscp: u8,
    pub ecn: bool,
    pub priority: u8,
    /// The DSCP of NCCL's CTS messages (NCCL_IB_FIFO_TC), when it differs from the data's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fifo_dscp: Option<u8>,
}

impl RoceQos {
    /// The traffic class byte of the data: `dscp << 2 | ECT(0)` with `ecn`.
    pub fn traffic_class(&self) -> u8 {
        self.byte(self.dscp)
    }

    /// The traffic class byte of NCCL's CTS (FIFO) messages, when `fifo_dscp` is set.
    pub fn fifo_traffic_class(&self) -> Option<u8> {
        self.fifo_dscp.map(|d| self.byte(d))
    }

    fn byte(&self, dscp: u8) -> u8 {
        dscp << 2 | if self.ecn { ECT0 } else { 0 }
    }

    /// The alias rdma-ns gives the pod interface: [`ALIAS_PREFIX`] and the fields as
    /// `key=value`, which [`RoceQos::from_alias`] reads back.
    pub fn to_alias(&self) -> String {
        let mut alias = format!(
            "{ALIAS_PREFIX} dscp={} ecn={} priority={}",
            self.dscp,
            u8::from(self.ecn),
            self.priority
        );
        if let Some(fifo) = self.fifo_dscp {
            alias.push_str(&format!(" fifoDscp={fifo}"));
        }
        alias
    }

    /// The QoS an interface alias carries: None when the alias is not rdma-ns's; an error
    /// naming what is wrong when it starts like rdma-ns's but does not read as one.
    pub fn from_alias(alias: &str) -> Result<Option<RoceQos>, String> {
        let Some(rest) = alias.strip_prefix(ALIAS_PREFIX) else {
            return Ok(None);
        };
        if !rest.is_empty() && !rest.starts_with(' ') {
            return Ok(None);
        }
        let mut fields = [None::<u8>; 4];
        for token in rest.split_whitespace() {
            let (key, value) = token
                .split_once('=')
                .ok_or_else(|| format!("`{token}` is not key=value"))?;
            let slot = ["dscp", "ecn", "priority", "fifoDscp"]
                .iter()
                .position(|k| *k == key)
                .ok_or_else(|| format!("unknown key `{key}`"))?;
            let value: u8 = value
                .parse()
                .map_err(|_| format!("`{key}={value}` is not a small number"))?;
            fields[slot] = Some(value);
        }
        let need = |slot: usize, key: &str| fields[slot].ok_or_else(|| format!("no `{key}`"));
        let qos = RoceQos {
            dscp: need(0, "dscp")?,
            ecn: match need(1, "ecn")? {
                0 => false,
                1 => true,
                other => return Err(format!("`ecn={other}` is neither 0 nor 1")),
            },
            priority: need(2, "priority")?,
            fifo_dscp: fields[3],
        };
        qos.validate().map(|()| Some(qos))
    }

    /// The ranges, named by field; what `roceQos` in a conf and an alias are held to.
    pub fn validate(&self) -> Result<(), String> {
        let dscps = [("dscp", Some(self.dscp)), ("fifoDscp", self.fifo_dscp)];
        for (key, value) in dscps {
            if let Some(v) = value.filter(|v| *v > DSCP_MAX) {
                return Err(format!("`{key}` {v} is outside 0..={DSCP_MAX}"));
            }
        }
        if self.priority > PRIORITY_MAX {
            return Err(format!(
                "`priority` {} is outside 0..={PRIORITY_MAX}",
                self.priority
            ));
        }
        Ok(())
    }
}

impl fmt::Display for RoceQos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DSCP {}{}, traffic class {}, priority {}",
            self.dscp,
            if self.ecn { " with ECN" } else { "" },
            self.traffic_class(),
            self.priority
        )?;
        if let (Some(d), Some(tc)) = (self.fifo_dscp, self.fifo_traffic_class()) {
            write!(f, ", FIFO DSCP {d} (traffic class {tc})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qos(dscp: u8, ecn: bool, priority: u8, fifo: Option<u8>) -> RoceQos {
        RoceQos {
            dscp,
            ecn,
            priority,
            fifo_dscp: fifo,
        }
    }

    #[test]
    fn the_byte_is_dscp_shifted_with_ect0() {
        // UCX's default (0x6a) and Spectrum-X's 96 (DSCP 24, no ECN).
        assert_eq!(qos(26, true, 3, None).traffic_class(), 106);
        assert_eq!(qos(24, false, 3, None).traffic_class(), 96);
        assert_eq!(qos(63, true, 7, None).traffic_class(), 254);
        assert_eq!(qos(0, false, 0, None).traffic_class(), 0);
        assert_eq!(qos(26, true, 3, Some(46)).fifo_traffic_class(), Some(186));
        assert_eq!(qos(26, false, 3, Some(46)).fifo_traffic_class(), Some(184));
        assert_eq!(qos(26, true, 3, None).fifo_traffic_class(), None);
    }

    #[test]
    fn the_alias_reads_back_as_written() {
        for q in [
            qos(26, true, 3, None),
            qos(0, false, 0, Some(63)),
            qos(63, true, 7, Some(0)),
        ] {
            let alias = q.to_alias();
            assert!(alias.len() < 256, "IFALIASZ: {alias}");
            assert_eq!(RoceQos::from_alias(&alias), Ok(Some(q)), "{alias}");
        }
        assert_eq!(
            qos(26, true, 3, Some(24)).to_alias(),
            "rdma-ns roceQos dscp=26 ecn=1 priority=3 fifoDscp=24"
        );
    }

    #[test]
    fn another_alias_is_none_and_a_broken_one_says_why() {
        for other in ["", "uplink to leaf 3", "rdma-ns roceQosX dscp=1"] {
            assert_eq!(RoceQos::from_alias(other), Ok(None), "{other}");
        }
        for (broken, says) in [
            ("rdma-ns roceQos", "no `dscp`"),
            ("rdma-ns roceQos dscp=26 ecn=1", "no `priority`"),
            ("rdma-ns roceQos dscp=64 ecn=0 priority=3", "`dscp` 64"),
            ("rdma-ns roceQos dscp=26 ecn=2 priority=3", "`ecn=2`"),
            ("rdma-ns roceQos dscp=26 ecn=0 priority=8", "`priority` 8"),
            (
                "rdma-ns roceQos dscp=26 ecn=0 priority=3 tc=9",
                "unknown key `tc`",
            ),
            ("rdma-ns roceQos dscp=x ecn=0 priority=3", "`dscp=x`"),
            ("rdma-ns roceQos dscp", "not key=value"),
        ] {
            let e = RoceQos::from_alias(broken).unwrap_err();
            assert!(e.contains(says), "{broken}: {e}");
        }
    }

    #[test]
    fn display_names_every_value() {
        assert_eq!(
            qos(26, true, 3, Some(46)).to_string(),
            "DSCP 26 with ECN, traffic class 106, priority 3, FIFO DSCP 46 (traffic class 186)"
        );
    }
}
