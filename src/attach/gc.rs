//! GC: releases every attachment of a network that the runtime no longer lists as valid.
//!
//! The runtime lists attachments by its own interface name. A conf chained in the runtime's
//! conflist with `dra.ifname` (conf/dra/standalone.conflist) attaches under that name instead
//! (every command goes through `claim::for_interface`), so there a valid entry of a container
//! keeps the container's attachment of that name: libcni sends `eth0`, the record says `net1`.

use crate::attach::Ctx;
use crate::cni::Request;
use crate::error::{Error, Result};

/// GC: release every attachment of this network that the runtime no longer lists as valid,
/// then let IPAM collect its own garbage, then clear what gone attachments left in the data dir
/// (`Store::sweep`). Keeps going on errors and reports them all.
pub fn gc(ctx: &Ctx<'_>, req: &Request, lock_timeout: std::time::Duration) -> Result<()> {
    let valid = &req.conf.valid_attachments;
    let chained_as = crate::attach::claim::DraConf::from_conf(&req.conf)?.ifname;
    let (attachments, mut errors) = ctx.store.list(&req.conf.name)?;
    for att in attachments {
        let keep = valid.iter().any(|v| {
            let ifname = chained_as.as_deref().unwrap_or(&v.ifname);
            v.container_id == att.container_id && ifname == att.ifname
        });
        if keep {
            continue;
        }
        crate::log_info!("GC: releasing stale attachment {}", att.id());
        let outcome = ctx
            .store
            .lock_device(&att.device_key, lock_timeout)
            .and_then(|_lock| {
                att.mode_state.release(ctx, None, &att)?;
                let mut published = Vec::new();
                crate::attach::lifecycle::release_all(ctx, None, &att, &mut published);
                Error::collect(published)
            })
            .and_then(|_| {
                ctx.store
                    .remove(&att.network, &att.container_id, &att.ifname)
            });
        if let Err(e) = outcome {
            errors.push(e);
        }
    }
    if let Err(e) = ctx.ipam.gc(req) {
        errors.push(e);
    }
    ctx.store.sweep();
    Error::collect(errors)
}
