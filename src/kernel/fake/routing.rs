//! The fake host's routing: routes by table, policy rules, per-interface IPv4 values, and what
//! the kernel drops when a link leaves its netns. Errors are the errno the kernel answers.

use super::{FakeState, NsKey};
use crate::kernel::rtnetlink::{Ipv4Conf, Ipv4Setting, Link, RouteSpec, RuleSpec};

/// RT_TABLE_MAIN: where a route without a table goes.
const MAIN_TABLE: u32 = 254;
/// IPV4_DEVCONF_MAX on the kernels the root tier runs: the length of IFLA_INET_CONF.
const DEVCONF_LEN: usize = 33;

type Errno = i32;

/// A rule as `ip rule` shows it, for the call log.
pub fn text(rule: &RuleSpec) -> String {
    format!(
        "from {} lookup {} priority {}",
        rule.src, rule.table, rule.priority
    )
}

fn table_of(route: &RouteSpec) -> u32 {
    route.table.unwrap_or(MAIN_TABLE)
}

impl FakeState {
    /// What the kernel drops when a link leaves its netns (moved or deleted): its addresses,
    /// its routes in every table, its per-interface IPv4 values. Rules name no link and stay.
    pub(super) fn left_its_netns(&mut self, index: u32) {
        self.addrs.remove(&index);
        self.routes.retain(|(_, r)| r.oif != index);
        self.ipv4_conf.remove(&index);
    }

    fn link_in(&self, ns: &NsKey, index: u32) -> Option<&Link> {
        self.links
            .iter()
            .find_map(|(k, l)| (k == ns && l.index == index).then_some(l))
    }

    /// On a link that is down: ENETDOWN for an on-link route, as the kernel refuses a nexthop
    /// whose device is not up, and ENETUNREACH through a gateway (no connected route leads to
    /// it yet). EEXIST for a second route to the same destination in the same table at the
    /// same metric, whatever its gateway (IPv4's rule, which a rail relies on).
    pub(super) fn add_route(&mut self, ns: NsKey, route: &RouteSpec) -> Result<(), Errno> {
        if !self.link_in(&ns, route.oif).is_some_and(|l| l.up) {
            return Err(match route.gateway {
                None => nix::libc::ENETDOWN,
                Some(_) => nix::libc::ENETUNREACH,
            });
        }
        let clash = self.routes.iter().any(|(k, r)| {
            k == &ns
                && r.dst == route.dst
                && table_of(r) == table_of(route)
                && r.metric == route.metric
        });
        if clash {
            return Err(nix::libc::EEXIST);
        }
        self.routes.push((ns, route.clone()));
        Ok(())
    }

    /// Deletes the first route that matches as RTM_DELROUTE does: destination and table, and
    /// the gateway, interface and metric when the request gives them (unset ones match any).
    /// ESRCH when none does (gone with its link, or never added).
    pub(super) fn del_route(&mut self, ns: &NsKey, route: &RouteSpec) -> Result<(), Errno> {
        let matches = |r: &RouteSpec| {
            r.dst == route.dst
                && table_of(r) == table_of(route)
                && (route.gateway.is_none() || r.gateway == route.gateway)
                && (route.oif == 0 || r.oif == route.oif)
                && (route.metric.is_none() || r.metric == route.metric)
        };
        let at = self.routes.iter().position(|(k, r)| k == ns && matches(r));
        self.routes.remove(at.ok_or(nix::libc::ESRCH)?);
        Ok(())
    }

    /// The routes of `table` in `ns`, each with its table, as a dump lists them.
    pub(super) fn routes_of(&self, ns: &NsKey, table: u32) -> Vec<RouteSpec> {
        self.routes
            .iter()
            .filter(|(k, r)| k == ns && table_of(r) == table)
            .map(|(_, r)| RouteSpec {
                table: Some(table),
                ..r.clone()
            })
            .collect()
    }

    /// EEXIST for an identical rule, as NLM_F_EXCL asks.
    pub(super) fn add_rule(&mut self, ns: NsKey, rule: &RuleSpec) -> Result<(), Errno> {
        if self.rules.iter().any(|(k, r)| k == &ns && r == rule) {
            return Err(nix::libc::EEXIST);
        }
        self.rules.push((ns, *rule));
        Ok(())
    }

    /// ENOENT when there is no such rule.
    pub(super) fn del_rule(&mut self, ns: &NsKey, rule: &RuleSpec) -> Result<(), Errno> {
        let at = self.rules.iter().position(|(k, r)| k == ns && r == rule);
        let i = at.ok_or(nix::libc::ENOENT)?;
        self.rules.remove(i);
        Ok(())
    }

    pub(super) fn rules_of(&self, ns: &NsKey) -> Vec<RuleSpec> {
        self.rules
            .iter()
            .filter(|(k, _)| k == ns)
            .map(|(_, r)| *r)
            .collect()
    }

    /// ENODEV when the link is not in `ns`.
    pub(super) fn set_ipv4_conf(
        &mut self,
        ns: &NsKey,
        index: u32,
        values: &[(Ipv4Setting, u32)],
    ) -> Result<(), Errno> {
        self.link_in(ns, index).ok_or(nix::libc::ENODEV)?;
        let conf = self
            .ipv4_conf
            .entry(index)
            .or_insert_with(|| Ipv4Conf(vec![0; DEVCONF_LEN]));
        for (setting, value) in values {
            conf.0[usize::from(setting.id()) - 1] = *value;
        }
        Ok(())
    }

    /// None when the link is not in `ns`; the defaults (all 0) until something is set.
    pub(super) fn ipv4_conf_of(&self, ns: &NsKey, index: u32) -> Option<Ipv4Conf> {
        self.link_in(ns, index)?;
        Some(
            self.ipv4_conf
                .get(&index)
                .cloned()
                .unwrap_or_else(|| Ipv4Conf(vec![0; DEVCONF_LEN])),
        )
    }
}
