//! Node operations over the attachment records, with no runtime involved: what `rdma-ns list`
//! shows, and the orphans `rdma-ns reconcile` releases.
//!
//! An orphan is an attachment whose pod netns is gone (the path is missing, or names another
//! netns than the one recorded at ADD) while its record is still there: the runtime never sent
//! DEL (a kubelet that lost the pod, a node rebooted with pods on it). GC cannot help, since only
//! a runtime sends GC. The kernel has by then destroyed a virtual device with its netns, and
//! returned a physical netdev to the host under the pod's name (`devN` on a clash) with the
//! pod's MTU, and an ib device to the host; IPAM still holds the address. Releasing the orphan
//! is its DEL, replayed from what the record kept: the network configuration and CNI_PATH.

use std::ffi::OsString;
use std::path::Path;

use serde::Serialize;

use crate::attach::record::{Attachment, NetnsId};
use crate::attach::store::Store;
use crate::cni::env::RawEnv;
use crate::cni::{Command, NetConf, Request};
use crate::error::{Error, Result};
use crate::kernel::Netns;

/// Where an attachment's pod netns stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetnsState {
    Alive,
    /// No file at the recorded path, or it names another netns now.
    Gone,
    /// It exists but cannot be opened (permissions): nothing is decided about it.
    Unknown,
}

pub fn netns_state(att: &Attachment) -> NetnsState {
    match Netns::open(Path::new(&att.netns)) {
        Ok(ns) => match att.netns_id {
            Some(id) if NetnsId::of(&ns) != Some(id) => NetnsState::Gone,
            _ => NetnsState::Alive,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => NetnsState::Gone,
        Err(_) => NetnsState::Unknown,
    }
}

/// Every record of the node with its netns state, and the records that could not be read.
pub fn list(store: &Store) -> (Vec<(Attachment, NetnsState)>, Vec<Error>) {
    let (all, unreadable) = store.list_all();
    let listed = all
        .into_iter()
        .map(|a| {
            let state = netns_state(&a);
            (a, state)
        })
        .collect();
    (listed, unreadable)
}

/// The DEL a runtime would have sent for `att`: its recorded network configuration (a record of
/// 0.1.0 kept none: then a minimal one, and IPAM is not released, which is logged), its
/// CNI_PATH, and no netns (it is gone).
pub fn orphan_del(att: &Attachment, data_dir: &Path) -> Result<Request> {
    let conf = match &att.conf {
        Some(c) => c.clone(),
        None => {
            crate::log_warn!(
                "{}: the record predates recorded configurations; releasing it without IPAM \
                 (release its address in the IPAM plugin by hand)",
                att.id()
            );
            serde_json::json!({"cniVersion": "1.0.0", "name": att.network, "type": "rdma-ns",
                "mode": att.mode()})
        }
    };
    let mut conf = conf;
    // The record was found here: its DEL must look here too.
    conf["dataDir"] = serde_json::json!(data_dir);
    let stdin = serde_json::to_vec(&conf)
        .map_err(|e| Error::State(format!("encoding the configuration of {}: {e}", att.id())))?;
    let vars: Vec<(OsString, OsString)> = [
        ("CNI_COMMAND", "DEL".to_string()),
        ("CNI_CONTAINERID", att.container_id.clone()),
        ("CNI_IFNAME", att.ifname.clone()),
        ("CNI_PATH", att.cni_path.join(":")),
    ]
    .into_iter()
    .map(|(k, v)| (k.into(), v.into()))
    .collect();
    Ok(Request {
        env: RawEnv::from_vars(vars).validate(Command::Del)?,
        conf: NetConf::parse(&stdin, Command::Del)?,
        stdin,
    })
}
