//! The names in each counter directory as a scrape last listed them, kept for the next scrape,
//! which lists a counter directory again only when it is not the directory listed then.
//!
//! Why a listing can be kept: the kernel makes a port's `counters` (the PMA table its sysfs
//! code picks per port) and `hw_counters`, and the device's `hw_counters`, when the device
//! registers, as attribute groups built from the driver's `alloc_hw_port_stats` /
//! `alloc_hw_device_stats` (K:drivers/infiniband/core/sysfs.c, `alloc_hw_stats_port`,
//! `setup_port`), and removes them only with the port or the device. The counters a driver can
//! switch on and off later (IB_STAT_FLAG_OPTIONAL, over RDMA netlink) are left out of sysfs.
//! So a counter directory's entries do not change while it lives. A device registered again
//! (a driver reload, an rxe link deleted and added) gets new directories, and a new kernfs node
//! is a new inode number: kernfs numbers its nodes cyclically and, with a 64-bit ino_t, puts a
//! generation that grows at each wrap in the upper 32 bits (K:fs/kernfs/dir.c
//! `__kernfs_new_node`, K:include/linux/kernfs.h `kernfs_id_ino`), so a number is not given
//! twice. Hence a directory is known by its st_dev and st_ino, one fstat of the fd the scrape
//! opened it with. On an ordinary filesystem (test fixtures) a freed inode number can be given
//! again at once, so a fixture that re-creates a device keeps the old tree until it is done.
//! A cached name that is gone (ENOENT) means the listing is out of date: the name is skipped,
//! as a listing now would not have it, and the directory is listed again at the next scrape.
//!
//! The kept listings follow the order in which a scrape meets the counter directories (slot
//! n is the n-th directory met), so nothing is looked up; a directory that is not the one the
//! slot was listed from is listed into it again, and a scrape that met fewer directories than
//! there are slots drops the rest, so the listings hold the node's current directories only.

use std::ffi::CStr;
use std::fs;
use std::io;

use nix::sys::stat::fstat;

use crate::kernel::sysfs::for_each_entry;

/// The counter directories' names, kept between scrapes (see the module documentation).
#[derive(Debug, Default)]
pub struct CounterListings {
    slots: Vec<Listing>,
    /// The slot of the next directory the scrape being made meets.
    next: usize,
    /// How many times a directory was listed; for tests, which check when one is.
    #[cfg(test)]
    listed: usize,
}

#[derive(Debug, Default)]
struct Listing {
    /// st_dev and st_ino of the directory listed; None when the listing is out of date.
    identity: Option<(u64, u64)>,
    /// Each name with its NUL, one after another, in the order the kernel listed them; no
    /// `lifespan` (a setting: how long the kernel caches the values, in ms).
    names: Vec<u8>,
}

impl CounterListings {
    /// How many times a counter directory was listed since these listings were made.
    #[cfg(test)]
    pub fn listed(&self) -> usize {
        self.listed
    }

    /// Before a scrape: its first directory goes to the first slot.
    pub(super) fn start(&mut self) {
        self.next = 0;
    }

    /// After a scrape that met every directory: the slots it did not reach are of
    /// directories that are gone.
    pub(super) fn finish(&mut self) {
        self.slots.truncate(self.next);
    }

    /// Calls `f` with each counter name of `dir` (as text and with its NUL, for openat), from
    /// the listing kept when `dir` is the directory it was made from, else from a new one.
    /// `f` says whether the name was there; a name that was not makes the listing out of date.
    pub(super) fn for_each_name(
        &mut self,
        dir: &fs::File,
        mut f: impl FnMut(&str, &CStr) -> bool,
    ) -> io::Result<()> {
        if self.next == self.slots.len() {
            self.slots.push(Listing::default());
        }
        let slot = &mut self.slots[self.next];
        self.next += 1;
        let st = fstat(dir)?;
        let identity = Some((st.st_dev as u64, st.st_ino as u64));
        if slot.identity != identity {
            slot.list(dir)?;
            slot.identity = identity;
            #[cfg(test)]
            {
                self.listed += 1;
            }
        }
        let mut rest = slot.names.as_slice();
        while let Ok(cname) = CStr::from_bytes_until_nul(rest) {
            rest = &rest[cname.count_bytes() + 1..];
            let bytes = cname.to_bytes();
            let there = match std::str::from_utf8(bytes) {
                Ok(text) => f(text, cname),
                Err(_) => f(&String::from_utf8_lossy(bytes), cname),
            };
            if !there {
                slot.identity = None;
            }
        }
        Ok(())
    }
}

impl Listing {
    /// Lists `dir` into `names`, whose buffer is kept: a listing made again allocates only
    /// when the new names need more room.
    fn list(&mut self, dir: &fs::File) -> io::Result<()> {
        self.identity = None;
        self.names.clear();
        for_each_entry(dir, |name, cname| {
            if name != "lifespan" {
                self.names.extend_from_slice(cname.to_bytes_with_nul());
            }
        })
    }
}
