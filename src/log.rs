//! Minimal leveled logging to stderr or a file (conf `logFile`, `logLevel`).
//!
//! stdout belongs to CNI JSON, so logs never go there. Default: stderr at `warn`. A log file is
//! opened in append mode once per process; lines carry the pid so parallel invocations can be
//! told apart.

use std::fs::OpenOptions;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
}

impl Level {
    pub fn parse(text: &str) -> Option<Level> {
        match text.to_ascii_lowercase().as_str() {
            "error" | "panic" | "fatal" => Some(Level::Error),
            "warn" | "warning" => Some(Level::Warn),
            "info" => Some(Level::Info),
            "debug" | "verbose" | "trace" => Some(Level::Debug),
            _ => None,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

struct Sink {
    level: Level,
    file: Option<Mutex<std::fs::File>>,
}

static SINK: OnceLock<Sink> = OnceLock::new();

/// Sets the destination and level once; later calls are ignored. An unknown level or an
/// unopenable file falls back to stderr at warn, with a note on stderr.
pub fn init(file: Option<&str>, level: Option<&str>) {
    let parsed = level.and_then(Level::parse);
    let mut notes = Vec::new();
    if let (Some(text), None) = (level, parsed) {
        notes.push(format!("unknown logLevel {text:?}, using warn"));
    }
    let file = match file.filter(|f| !f.is_empty()) {
        Some(path) if !is_plain_absolute(path) => {
            notes.push(format!(
                "logFile {path:?} is not an absolute path without `..`; logging to stderr"
            ));
            None
        }
        Some(path) => match open_log(path) {
            Ok(f) => Some(Mutex::new(f)),
            Err(e) => {
                notes.push(format!(
                    "cannot open logFile {path}: {e}; logging to stderr"
                ));
                None
            }
        },
        None => None,
    };
    let _ = SINK.set(Sink {
        level: parsed.unwrap_or(Level::Warn),
        file,
    });
    for n in notes {
        warn(&n);
    }
}

/// An absolute path with no `..` component: what `logFile` and `dataDir` must be, so a conf
/// cannot point them somewhere by relative tricks.
pub fn is_plain_absolute(path: &str) -> bool {
    let p = std::path::Path::new(path);
    p.is_absolute()
        && !p
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
}

/// Appends to `path`, never through a symlink (O_NOFOLLOW: the plugin runs as root and must not
/// be steered into creating or appending to another file), and creates it 0600: log lines name
/// pods and devices.
fn open_log(path: &str) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
}

pub fn enabled(level: Level) -> bool {
    level <= SINK.get().map(|s| s.level).unwrap_or(Level::Warn)
}

pub fn log(level: Level, msg: &str) {
    if !enabled(level) {
        return;
    }
    let line = format!(
        "{} rdma-ns[{}] {}: {}\n",
        timestamp(),
        std::process::id(),
        level.label(),
        msg
    );
    match SINK.get().and_then(|s| s.file.as_ref()) {
        Some(file) => {
            if let Ok(mut f) = file.lock() {
                let _ = f.write_all(line.as_bytes());
            }
        }
        None => {
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }
}

fn timestamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}.{:06}", now.as_secs(), now.subsec_micros())
}

/// `log_info!("...", args)` and friends format their message only when the level is on: the
/// plugin logs on its hot path, where the default level (warn) drops most lines.
#[macro_export]
macro_rules! log_at {
    ($level:expr, $($arg:tt)*) => {
        if $crate::log::enabled($level) {
            $crate::log::log($level, &format!($($arg)*))
        }
    };
}

#[macro_export]
macro_rules! log_error {
    ($($arg:tt)*) => { $crate::log_at!($crate::log::Level::Error, $($arg)*) };
}

#[macro_export]
macro_rules! log_warn {
    ($($arg:tt)*) => { $crate::log_at!($crate::log::Level::Warn, $($arg)*) };
}

#[macro_export]
macro_rules! log_info {
    ($($arg:tt)*) => { $crate::log_at!($crate::log::Level::Info, $($arg)*) };
}

#[macro_export]
macro_rules! log_debug {
    ($($arg:tt)*) => { $crate::log_at!($crate::log::Level::Debug, $($arg)*) };
}

pub fn error(msg: &str) {
    log(Level::Error, msg)
}
pub fn warn(msg: &str) {
    log(Level::Warn, msg)
}
pub fn info(msg: &str) {
    log(Level::Info, msg)
}
pub fn debug(msg: &str) {
    log(Level::Debug, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_files_are_created_private_and_never_through_a_symlink() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("rdma-ns-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("plugin.log");
        let _ = std::fs::remove_file(&file);
        open_log(file.to_str().unwrap()).unwrap();
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let target = dir.join("elsewhere");
        let link = dir.join("link.log");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(open_log(link.to_str().unwrap()).is_err());
        assert!(!target.exists(), "the symlink's target was not created");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_plain_absolute_paths_are_taken() {
        assert!(is_plain_absolute("/var/log/rdma-ns.log"));
        for bad in ["rdma-ns.log", "./x.log", "/var/log/../../etc/shadow", ""] {
            assert!(!is_plain_absolute(bad), "{bad}");
        }
    }

    #[test]
    fn levels_parse_in_any_case() {
        assert_eq!(Level::parse("DEBUG"), Some(Level::Debug));
        assert_eq!(Level::parse("Warning"), Some(Level::Warn));
        assert_eq!(Level::parse("loud"), None);
        assert!(Level::Error < Level::Debug);
    }
}
