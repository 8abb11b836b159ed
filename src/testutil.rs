//! Helpers shared by unit tests.

pub mod fuzz;
pub mod serde_fields;
pub mod uapi;

use std::path::{Path, PathBuf};

/// A self-cleaning temporary directory (avoids a dev-dependency for one helper).
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        TempDir::under(&std::env::temp_dir(), tag)
    }

    /// One in the device-info directory, the only place a device-info file may be
    /// (`attach::device_info::DIR`).
    pub fn devinfo(tag: &str) -> TempDir {
        TempDir::under(Path::new(crate::attach::device_info::DIR), tag)
    }

    fn under(base: &Path, tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = base.join(format!(
            "rdma-ns-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One netlink attribute as the kernel lays it out: u16 length (header included), u16 type,
/// the value, padded to 4 bytes.
pub fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    while out.len() % 4 != 0 {
        out.push(0);
    }
    out
}

/// Hex with optional spaces (a capture as strace prints it) → bytes.
pub fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len() % 2 == 0, "odd hex length");
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}
