//! Minimal leveled logging to stderr or a file (conf `logFile`, `logLevel`, `logFormat`).
//!
//! stdout belongs to CNI JSON, so logs never go there. Default: stderr at `warn`. A log file is
//! opened in append mode once per process. Every line carries an RFC 3339 UTC timestamp, the pid,
//! and, once the request is known, the attachment it is about (container ID shortened to 12
//! characters, network, interface, pod), so that lines of parallel invocations in one file can
//! be told apart and grepped by pod. `logFormat: json` writes one JSON object a line instead.

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
    json: bool,
    file: Option<Mutex<std::fs::File>>,
}

static SINK: OnceLock<Sink> = OnceLock::new();

/// Which attachment the lines are about; set once the request's environment is known.
#[derive(Debug, Clone, Default)]
pub struct LogContext {
    pub container: String,
    pub network: String,
    pub ifname: String,
    /// `namespace/name` from CNI_ARGS, when given.
    pub pod: Option<String>,
}

static CONTEXT: OnceLock<LogContext> = OnceLock::new();

/// Sets the attachment every later line names (the first call wins).
pub fn set_context(mut ctx: LogContext) {
    ctx.container = ctx.container.chars().take(12).collect();
    let _ = CONTEXT.set(ctx);
}

/// Sets the destination and level once; later calls are ignored. An unknown level or an
/// unopenable file falls back to stderr at warn, with a note on stderr.
pub fn init(file: Option<&str>, level: Option<&str>, format: Option<&str>) {
    let parsed = level.and_then(Level::parse);
    let mut notes = Vec::new();
    if let (Some(text), None) = (level, parsed) {
        notes.push(format!("unknown logLevel {text:?}, using warn"));
    }
    let json = match format {
        None | Some("text") => false,
        Some("json") => true,
        Some(other) => {
            notes.push(format!(
                "unknown logFormat {other:?} (text or json), using text"
            ));
            false
        }
    };
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
        json,
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
    let json = SINK.get().is_some_and(|s| s.json);
    let line = format_line(
        json,
        &rfc3339(std::time::SystemTime::now()),
        level,
        CONTEXT.get(),
        msg,
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

fn format_line(
    json: bool,
    time: &str,
    level: Level,
    ctx: Option<&LogContext>,
    msg: &str,
) -> String {
    let pid = std::process::id();
    if json {
        let mut obj = serde_json::json!({"time": time, "level": level.label(), "pid": pid});
        if let Some(c) = ctx {
            obj["container"] = c.container.clone().into();
            obj["network"] = c.network.clone().into();
            obj["ifname"] = c.ifname.clone().into();
            if let Some(p) = &c.pod {
                obj["pod"] = p.clone().into();
            }
        }
        obj["msg"] = msg.into();
        return format!("{obj}\n");
    }
    let about = match ctx {
        Some(c) => format!(
            " [container={} network={} ifname={}{}]",
            c.container,
            c.network,
            c.ifname,
            c.pod
                .as_deref()
                .map(|p| format!(" pod={p}"))
                .unwrap_or_default()
        ),
        None => String::new(),
    };
    format!("{time} rdma-ns[{pid}] {}:{about} {msg}\n", level.label())
}

/// RFC 3339 in UTC with microseconds, e.g. `2026-12-01T01:02:03.000456Z`.
fn rfc3339(t: std::time::SystemTime) -> String {
    let micros = t
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_micros();
    let seconds = rfc3339_seconds(t);
    format!("{}.{micros:06}Z", seconds.trim_end_matches('Z'))
}

/// RFC 3339 in UTC to the second, e.g. `2026-12-01T01:02:03Z`, from the civil date of the days
/// since the epoch (Howard Hinnant's days_from_civil, inverted): no time crate needed.
pub fn rfc3339_seconds(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
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

/// Runs `work`, then logs at debug how long it took, as `<what>: <ms> ms`: rdma-ns's own
/// timings of an ADD (the command, each step, the IPAM plugin, the claim's CDI edits), which
/// tests/bench/kube_start_bench.py reads from a `logFile` at `logLevel: debug`
/// (docs/configuration.md, "Timings"). Off, it costs nothing but the level check.
pub fn timed<T>(what: impl FnOnce() -> String, work: impl FnOnce() -> T) -> T {
    if !enabled(Level::Debug) {
        return work();
    }
    let started = std::time::Instant::now();
    let out = work();
    log(
        Level::Debug,
        &format!("{}: {}", what(), millis(started.elapsed())),
    );
    out
}

/// When this process's command began: its first log sink's setup ([`init`]), or the first
/// call here.
pub fn began() -> std::time::Instant {
    *BEGAN.get_or_init(std::time::Instant::now)
}

static BEGAN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// `12.3 ms`: the unit every timing line uses.
pub fn millis(d: std::time::Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
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
    fn timestamps_are_rfc3339_utc() {
        use std::time::{Duration, UNIX_EPOCH};
        let at = |s: u64, us: u32| rfc3339(UNIX_EPOCH + Duration::new(s, us * 1000));
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        // `date -u -d @1796085720` and a leap day.
        assert_eq!(at(1_796_085_720, 7), "2026-12-01T00:42:00.000007Z");
        assert_eq!(at(951_825_600, 0), "2000-02-29T12:00:00.000000Z");
        assert_eq!(at(4_102_444_799, 0), "2099-12-31T23:59:59.000000Z");
    }

    #[test]
    fn lines_name_the_attachment_in_text_and_json() {
        let ctx = LogContext {
            container: "0123456789ab".into(),
            network: "roce".into(),
            ifname: "net1".into(),
            pod: Some("team/trainer-0".into()),
        };
        let t = "2026-12-01T00:42:00.000007Z";
        let text = format_line(false, t, Level::Info, Some(&ctx), "moved \"x\"");
        assert_eq!(
            text,
            format!(
                "{t} rdma-ns[{}] info: [container=0123456789ab network=roce ifname=net1 \
                 pod=team/trainer-0] moved \"x\"\n",
                std::process::id()
            )
        );
        let line = format_line(true, t, Level::Warn, Some(&ctx), "moved \"x\"");
        let v: serde_json::Value = serde_json::from_str(line.trim_end()).unwrap();
        assert_eq!(v["time"], t);
        assert_eq!(v["level"], "warn");
        assert_eq!(v["pod"], "team/trainer-0");
        assert_eq!(v["container"], "0123456789ab");
        assert_eq!(v["msg"], "moved \"x\"");
        let bare = format_line(false, t, Level::Error, None, "m");
        assert!(bare.ends_with(" error: m\n"), "{bare}");
    }

    #[test]
    fn levels_parse_in_any_case() {
        assert_eq!(Level::parse("DEBUG"), Some(Level::Debug));
        assert_eq!(Level::parse("Warning"), Some(Level::Warn));
        assert_eq!(Level::parse("loud"), None);
        assert!(Level::Error < Level::Debug);
    }
}
