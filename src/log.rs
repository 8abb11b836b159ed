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
        Some(path) => match OpenOptions::new().create(true).append(true).open(path) {
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
    fn levels_parse_in_any_case() {
        assert_eq!(Level::parse("DEBUG"), Some(Level::Debug));
        assert_eq!(Level::parse("Warning"), Some(Level::Warn));
        assert_eq!(Level::parse("loud"), None);
        assert!(Level::Error < Level::Debug);
    }
}
