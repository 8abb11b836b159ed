//! Every port of every ib device with its counters, read in one pass for a metrics scrape: about
//! two thousand files each time. Each directory on the way (the device, its ports, each
//! counter directory) is opened once, relative to the one above it, and listed with
//! getdents64 into a buffer on the stack, but a counter directory whose listing is kept from
//! the scrape before (`listings.rs`); each file is opened relative to its directory and read
//! with one read(2). What was read goes to a [`ScrapeSink`] as it comes, so nothing is
//! allocated per counter, and a path is built only for an error.

use std::ffi::CStr;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::files::{absent, read_once_at};
use super::node::PortInfo;
use super::{PortState, RdmaSysfs};
use crate::kernel::sysfs::{entry_names, open_dir};

mod listings;
pub use listings::CounterListings;

/// The directory a counter was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterDir {
    /// `ports/N/counters`: the PMA counters (only drivers with `process_mad` have them, so
    /// rxe has none).
    Pma,
    /// `ports/N/hw_counters`: the driver's per-port counters (mlx5, rxe).
    PortHw,
    /// `<ibdev>/hw_counters`: device-wide driver counters, where the driver has them.
    DeviceHw,
}

/// What a scrape hands on, in order: for each ib device with ports, each port followed by its
/// PMA and driver counters, then the device's own counters. A directory's counters come in
/// the order the kernel lists them, without `lifespan` (a setting: how long the kernel caches
/// the values, in ms).
pub trait ScrapeSink {
    fn port(&mut self, port: &PortInfo);
    /// A counter of the port given last ([`CounterDir::Pma`], [`CounterDir::PortHw`]) or of
    /// its device ([`CounterDir::DeviceHw`]).
    fn counter(&mut self, dir: CounterDir, name: &str, value: u64);
    /// A counter file that could not be read or is not a number (drivers answer
    /// EINVAL/EOPNOTSUPP for counters the device does not implement), or, with no name, a
    /// counter directory that could not be listed.
    fn unreadable(&mut self, dir: CounterDir, name: Option<&str>, why: &str);
}

/// A directory held open. Its path is only needed to name it in an error, so it is kept as
/// the directory above and the name below it.
struct Dir<'a> {
    file: fs::File,
    place: Place<'a>,
}

enum Place<'a> {
    Path(PathBuf),
    Below(&'a Dir<'a>, &'a str),
}

impl<'a> Dir<'a> {
    fn open(path: PathBuf) -> io::Result<Option<Dir<'a>>> {
        match open_dir(&path) {
            Ok(file) => Ok(Some(Dir {
                file,
                place: Place::Path(path),
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(named(e, &path)),
        }
    }

    fn path(&self) -> PathBuf {
        match &self.place {
            Place::Path(p) => p.clone(),
            Place::Below(up, name) => up.path().join(name),
        }
    }

    fn error(&self, name: &str, e: io::Error) -> io::Error {
        named(e, &self.path().join(name))
    }

    /// The directory `name` below this one (symlinks followed); None when absent.
    fn sub<'s>(&'s self, name: &'s str) -> io::Result<Option<Dir<'s>>> {
        use nix::fcntl::{openat, OFlag};
        use std::os::fd::AsFd;
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        match openat(
            self.file.as_fd(),
            name,
            flags,
            nix::sys::stat::Mode::empty(),
        ) {
            Ok(fd) => Ok(Some(Dir {
                file: fs::File::from(fd),
                place: Place::Below(self, name),
            })),
            Err(nix::errno::Errno::ENOENT) => Ok(None),
            Err(e) => Err(self.error(name, e.into())),
        }
    }

    fn names(&self) -> io::Result<Vec<String>> {
        entry_names(&self.file).map_err(|e| named(e, &self.path()))
    }

    /// A text attribute, None when absent (or answering EINVAL, as an unsupported one does).
    fn attr(&self, name: &str) -> io::Result<Option<String>> {
        match read_small_at(&self.file, name) {
            Ok(t) => Ok(Some(t)),
            Err(e) if absent(&e) => Ok(None),
            Err(e) => Err(self.error(name, e)),
        }
    }

    /// An attribute that must be there.
    fn required(&self, name: &str) -> io::Result<String> {
        self.attr(name)?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: missing", self.path().join(name).display()),
            )
        })
    }

    /// Every counter file of the directory, to `sink`, by the names `listings` has for it.
    fn counters(
        &self,
        dir: CounterDir,
        listings: &mut CounterListings,
        sink: &mut impl ScrapeSink,
    ) -> io::Result<()> {
        listings
            .for_each_name(&self.file, |name, cname| {
                match read_number_at(&self.file, cname) {
                    Ok(Ok(v)) => sink.counter(dir, name, v),
                    Ok(Err(text)) => {
                        sink.unreadable(dir, Some(name), &format!("{text:?} is not a number"))
                    }
                    // A subdirectory is not a counter.
                    Err(e) if e.raw_os_error() == Some(nix::libc::EISDIR) => {}
                    // Gone since the directory was listed: the listing is out of date.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return false,
                    Err(e) => sink.unreadable(dir, Some(name), &e.to_string()),
                }
                true
            })
            .map_err(|e| named(e, &self.path()))
    }

    /// The counters of the directory `name` below this one (none when it is absent); a
    /// directory that cannot be read is told to `sink` as unreadable.
    fn sub_counters(
        &self,
        name: &str,
        dir: CounterDir,
        listings: &mut CounterListings,
        sink: &mut impl ScrapeSink,
    ) {
        let read = self
            .sub(name)
            .and_then(|d| d.map_or(Ok(()), |d| d.counters(dir, listings, sink)));
        if let Err(e) = read {
            sink.unreadable(dir, None, &e.to_string());
        }
    }
}

fn named(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

impl RdmaSysfs<'_> {
    /// Every ib device that has ports, to `sink` (see [`ScrapeSink`] for the order). A port
    /// whose state cannot be read fails the reading, as [`RdmaSysfs::devices`] does; what
    /// `sink` was given until then is not the whole node. A counter directory that cannot be
    /// read goes to `sink`, and the reading goes on. The counter directories' names come
    /// from `listings`, kept from the scrape before (see [`CounterListings`]).
    pub fn scrape(
        &self,
        listings: &mut CounterListings,
        sink: &mut impl ScrapeSink,
    ) -> io::Result<()> {
        listings.start();
        for ibdev in self.device_names()? {
            // Through the class symlink, which the open follows in the kernel once.
            let path = self.sys.path(Path::new("class/infiniband").join(&ibdev));
            let Some(dev) = Dir::open(path)? else {
                continue;
            };
            let netdevs = device_netdevs(&dev)?;
            if port_readings(&dev, &ibdev, &netdevs, listings, sink)? > 0 {
                dev.sub_counters("hw_counters", CounterDir::DeviceHw, listings, sink);
            }
        }
        listings.finish();
        Ok(())
    }
}

/// (port, name) of the netdevs that share the device's parent, the port being `dev_port` + 1;
/// rxe's one netdev is its `parent` file.
fn device_netdevs(dev: &Dir<'_>) -> io::Result<Vec<(u32, String)>> {
    let Some(parent) = dev.sub("device")? else {
        return Ok(dev
            .attr("parent")?
            .filter(|n| !n.is_empty())
            .map(|n| vec![(1, n)])
            .unwrap_or_default());
    };
    let Some(net) = parent.sub("net")? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for name in net.names()? {
        let dev_port = net.attr(&format!("{name}/dev_port"))?;
        if let Some(port) = dev_port
            .and_then(|p| p.parse::<u32>().ok())
            .unwrap_or(0)
            .checked_add(1)
        {
            out.push((port, name));
        }
    }
    Ok(out)
}

/// Each port of the device with its counters, to `sink`; how many there were.
fn port_readings(
    dev: &Dir<'_>,
    ibdev: &str,
    netdevs: &[(u32, String)],
    listings: &mut CounterListings,
    sink: &mut impl ScrapeSink,
) -> io::Result<usize> {
    let Some(ports) = dev.sub("ports")? else {
        return Ok(0);
    };
    let mut numbered: Vec<(u32, String)> = ports
        .names()?
        .into_iter()
        .filter_map(|n| Some((n.parse().ok()?, n)))
        .collect();
    numbered.sort_unstable();
    let mut count = 0;
    for (port, name) in &numbered {
        let Some(pd) = ports.sub(name)? else {
            continue;
        };
        let state = PortState::parse(&pd.path(), *port, &pd.required("state")?, |name| {
            pd.required(name)
        })?;
        sink.port(&PortInfo {
            ibdev: ibdev.to_string(),
            port: state,
            rate: pd.attr("rate")?,
            netdevs: netdevs
                .iter()
                .filter(|(p, _)| p == port)
                .map(|(_, n)| n.clone())
                .collect(),
        });
        pd.sub_counters("counters", CounterDir::Pma, listings, sink);
        pd.sub_counters("hw_counters", CounterDir::PortHw, listings, sink);
        count += 1;
    }
    Ok(count)
}

/// Reads a small numeric attribute with one read(2) into a stack buffer: a counter file is a
/// decimal number and a newline, and a scrape reads thousands of them, so the size query and
/// the heap buffer of `read_to_string` are worth saving. Ok(Err(text)) is a file that is not a
/// number.
fn read_number_at(dir: &fs::File, name: &CStr) -> io::Result<Result<u64, String>> {
    let mut buf = [0u8; 64];
    let (_, len) = read_once_at(dir, name, &mut buf)?;
    if len == buf.len() {
        return Ok(Err(format!("{}...", String::from_utf8_lossy(&buf))));
    }
    Ok(decimal(buf[..len].trim_ascii()).ok_or_else(|| {
        let text = String::from_utf8_lossy(&buf[..len]);
        text.trim().to_string()
    }))
}

/// Digits (with an optional `+`, as `u64::from_str` takes) as a number, without going
/// through `str`: a scrape parses thousands.
fn decimal(text: &[u8]) -> Option<u64> {
    let digits = text.strip_prefix(b"+").unwrap_or(text);
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, d| {
        let d = d.checked_sub(b'0').filter(|d| *d < 10)?;
        n.checked_mul(10)?.checked_add(u64::from(d))
    })
}

/// A short text attribute opened relative to its directory, read with one read(2) (see
/// [`read_once_at`]), newline trimmed.
fn read_small_at(dir: &fs::File, name: &str) -> io::Result<String> {
    use std::io::Read;
    let mut buf = [0u8; 256];
    let (mut f, len) = read_once_at(dir, name, &mut buf)?;
    if len == buf.len() {
        let mut rest = String::from_utf8_lossy(&buf).into_owned();
        f.read_to_string(&mut rest)?;
        return Ok(rest.trim_end_matches('\n').to_string());
    }
    Ok(String::from_utf8_lossy(&buf[..len])
        .trim_end_matches('\n')
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::decimal;

    #[test]
    fn decimals_are_what_u64_from_str_takes() {
        for text in ["0", "7", "+5", "18446744073709551615", "007"] {
            assert_eq!(decimal(text.as_bytes()), text.parse().ok(), "{text}");
        }
        for text in ["", "+", "-1", "1 2", "N/A", "18446744073709551616", "0x10"] {
            assert_eq!(decimal(text.as_bytes()), None, "{text}");
            assert!(text.parse::<u64>().is_err(), "{text}");
        }
    }
}
