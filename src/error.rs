//! One error type for the whole plugin, and the one place that maps each kind to a CNI code.
//!
//! Codes 1-7 and 11 are the CNI spec's well-known codes; 50/51 are STATUS's; 100 and up are
//! this plugin's own ([`CODES`]; docs/configuration.md's error table, which a docs test keeps
//! equal to it). Every message names what failed, on
//! which device or field, and what to do about it.

use crate::kernel::KernelError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// 1: the conf's or prevResult's cniVersion is not one this plugin speaks.
    #[error("incompatible CNI version {version}: {msg}")]
    IncompatibleVersion { version: String, msg: String },

    /// 2: a field has a value this plugin does not support.
    #[error("unsupported value for field `{field}`: {value}: {msg}")]
    UnsupportedField {
        field: String,
        value: String,
        msg: String,
    },

    /// 3: the container (its netns) is unknown or gone, where that matters (CHECK).
    #[error("unknown container: {0}")]
    UnknownContainer(String),

    /// 4: CNI_* environment variables missing or malformed.
    #[error("invalid environment ({}): {msg}", .vars.join(", "))]
    InvalidEnv { vars: Vec<String>, msg: String },

    /// 5: I/O on a file or directory failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },

    /// 6: stdin, prevResult or a delegated plugin's output could not be decoded.
    #[error("cannot decode {what}: {msg}")]
    Decode { what: String, msg: String },

    /// 7: the network configuration is invalid.
    #[error("invalid network configuration: field `{field}`: {msg}")]
    InvalidConfig { field: String, msg: String },

    /// 11: transient; the runtime should retry (a device lock was held too long).
    #[error("try again later: {0}")]
    TryAgainLater(String),

    /// 50: STATUS: the plugin cannot serve ADDs now.
    #[error("plugin not available: {0}")]
    NotAvailable(String),

    /// 51: STATUS: IPAM cannot serve ADDs now (no free addresses, plugin unavailable).
    #[error("IPAM not available: {0}")]
    IpamNotAvailable(String),

    /// A delegated plugin (IPAM) returned a CNI error: passed through with its own code.
    #[error("IPAM plugin `{plugin}` failed: {msg}")]
    Delegated {
        plugin: String,
        code: u32,
        msg: String,
        details: String,
    },

    /// 100: the selector matched no device.
    #[error("{0}")]
    DeviceNotFound(String),

    /// 101: the selector matched several devices.
    #[error("{0}")]
    DeviceAmbiguous(String),

    /// 102: the device is held by another live attachment.
    #[error("{0}")]
    DeviceInUse(String),

    /// 103: CNI_IFNAME already exists in the pod netns.
    #[error("{0}")]
    IfnameTaken(String),

    /// 104: CNI_NETNS is not an openable network namespace.
    #[error("{0}")]
    Netns(String),

    /// 105: the kernel refused a netlink request. Boxed: KernelError is large, and every
    /// `Result` in the crate would otherwise carry its size (clippy::result_large_err).
    #[error("{context}: {source}")]
    Kernel {
        context: String,
        #[source]
        source: Box<KernelError>,
    },

    /// 106: attachment state on disk is unusable.
    #[error("{0}")]
    State(String),

    /// 107: running the IPAM plugin failed (not found, not executable, bad output).
    #[error("{0}")]
    IpamExec(String),

    /// 108: CHECK found the attachment different from what ADD made.
    #[error("{0}")]
    CheckFailed(String),

    /// 110: the parent of a child interface cannot carry it (wrong link type, down, no
    /// connected mode).
    #[error("{0}")]
    ParentUnsuitable(String),

    /// 120: the RDMA subsystem cannot do what conf `rdma` asks (no RDMA netlink, shared netns
    /// mode, no ib device for the netdev).
    #[error("{0}")]
    RdmaUnavailable(String),

    /// 122: a DRA network's pod has no claim prepared on this node (or none holds the device
    /// Multus named).
    #[error("{0}")]
    NoPreparedClaim(String),

    /// 121: the kernel added no RoCE GID for a pod IP within the bound.
    #[error("{0}")]
    GidMissing(String),

    /// 109: several errors during DEL or GC, all reported.
    #[error("{} errors: {}", .0.len(), .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Multiple(Vec<Error>),

    /// 111: an RDMA char device node cannot be given the configured permissions: missing
    /// (module not loaded), a symlink, not a char device, or another device number than sysfs
    /// reports.
    #[error("{0}")]
    DevicePermission(String),
}

/// A failed kernel request with what was being done: `.kernel_ctx(|| format!(...))` in place of
/// `.map_err(|e| Error::kernel(format!(...), e))`. The message is built only on failure.
pub trait KernelContext<T> {
    fn kernel_ctx<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T>;
}

impl<T> KernelContext<T> for std::result::Result<T, KernelError> {
    fn kernel_ctx<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| Error::kernel(context(), e))
    }
}

impl Error {
    /// The CNI error code for this error.
    pub fn code(&self) -> u32 {
        match self {
            Error::IncompatibleVersion { .. } => 1,
            Error::UnsupportedField { .. } => 2,
            Error::UnknownContainer(_) => 3,
            Error::InvalidEnv { .. } => 4,
            Error::Io { .. } => 5,
            Error::Decode { .. } => 6,
            Error::InvalidConfig { .. } => 7,
            Error::TryAgainLater(_) => 11,
            Error::NotAvailable(_) => 50,
            Error::IpamNotAvailable(_) => 51,
            Error::Delegated { code, .. } => *code,
            Error::DeviceNotFound(_) => 100,
            Error::DeviceAmbiguous(_) => 101,
            Error::DeviceInUse(_) => 102,
            Error::IfnameTaken(_) => 103,
            Error::Netns(_) => 104,
            Error::Kernel { .. } => 105,
            Error::State(_) => 106,
            Error::IpamExec(_) => 107,
            Error::CheckFailed(_) => 108,
            Error::ParentUnsuitable(_) => 110,
            Error::RdmaUnavailable(_) => 120,
            Error::GidMissing(_) => 121,
            Error::NoPreparedClaim(_) => 122,
            Error::Multiple(errors) => match errors.as_slice() {
                [only] => only.code(),
                _ => 109,
            },
            Error::DevicePermission(_) => 111,
        }
    }

    /// The `details` string of the CNI error: the underlying cause chain, if any.
    pub fn details(&self) -> String {
        match self {
            Error::Delegated { details, .. } => details.clone(),
            Error::Kernel { source, .. } => format!("errno {}", source.errno),
            Error::Io { source, .. } => source.to_string(),
            _ => String::new(),
        }
    }

    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    pub fn kernel(context: impl Into<String>, source: KernelError) -> Self {
        Error::Kernel {
            context: context.into(),
            source: Box::new(source),
        }
    }

    pub fn config(field: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::InvalidConfig {
            field: field.into(),
            msg: msg.into(),
        }
    }

    pub fn decode(what: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Decode {
            what: what.into(),
            msg: msg.into(),
        }
    }

    /// Collapses a list of errors: none → Ok, one → itself, several → Multiple.
    pub fn collect(mut errors: Vec<Error>) -> Result<(), Error> {
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.pop().unwrap()),
            _ => Err(Error::Multiple(errors)),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every code an [`Error`] of this plugin can carry (a delegated IPAM plugin's own code passes
/// through as it came): what docs/configuration.md's error table documents.
pub const CODES: &[u32] = &[
    1, 2, 3, 4, 5, 6, 7, 11, 50, 51, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111,
    120, 121, 122,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_spec_and_our_table() {
        assert_eq!(Error::config("mode", "bad").code(), 7);
        assert_eq!(Error::decode("stdin", "x").code(), 6);
        assert_eq!(Error::TryAgainLater("x".into()).code(), 11);
        assert_eq!(Error::DeviceNotFound("x".into()).code(), 100);
        assert_eq!(Error::DevicePermission("x".into()).code(), 111);
        let one = Error::Multiple(vec![Error::State("s".into())]);
        assert_eq!(one.code(), 106);
        let two = Error::Multiple(vec![Error::State("s".into()), Error::Netns("n".into())]);
        assert_eq!(two.code(), 109);
        assert!(two.to_string().starts_with("2 errors: s; n"), "{two}");
    }

    /// `code()` matches every variant without a wildcard, so a new kind of error does not
    /// compile without its code there: reading the codes off its arms finds every one.
    #[test]
    fn codes_lists_every_code_of_code_and_nothing_else() {
        let source = include_str!("error.rs");
        let start = source.find("pub fn code(&self)").expect("fn code");
        let end = start + source[start..].find("pub fn details").expect("fn details");
        let mut codes: Vec<u32> = source[start..end]
            .split("=> ")
            .skip(1)
            .filter_map(|arm| arm.split(',').next()?.trim().parse().ok())
            .collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes, CODES);
    }

    #[test]
    fn collect_keeps_every_error() {
        assert!(Error::collect(vec![]).is_ok());
        let e = Error::collect(vec![Error::State("a".into())]).unwrap_err();
        assert_eq!(e.code(), 106);
        let e =
            Error::collect(vec![Error::State("a".into()), Error::State("b".into())]).unwrap_err();
        assert!(matches!(e, Error::Multiple(ref v) if v.len() == 2));
    }
}
