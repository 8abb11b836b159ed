//! Subcommands for people, run only when CNI_COMMAND is unset: they live in the binary crate,
//! not the library, and use nothing the CNI path does not already link. Output goes to stdout,
//! diagnostics to stderr.

pub mod doctor;
pub mod env;
pub mod exporter;
pub mod flags;
pub mod list;
pub mod migrate;
pub mod reconcile;
pub mod stop;

use std::ffi::OsString;
use std::process::ExitCode;

/// How the description line names the subcommands.
pub const SUBCOMMANDS: &str = "--version, migrate [FILE|-], list, reconcile, env [--netns PATH] \
     [--format sh|json|env-file] [--best-effort] [--exec -- CMD...], doctor [--pod] [--json] \
     [--nfd FILE], exporter [--listen ADDR]";

/// `rdma-ns --version`: the package version and the commit it was built from (build.rs).
pub fn version_line() -> String {
    format!(
        "rdma-ns {} (commit {})",
        env!("CARGO_PKG_VERSION"),
        env!("RDMA_NS_GIT_COMMIT")
    )
}

/// A usage error of `subcommand`: what was wrong and the usage on stderr, nothing on stdout,
/// and `status` (2, except where a subcommand gives its own codes another meaning).
pub fn refuse(subcommand: &str, err: &flags::UsageError, usage: &str, status: u8) -> ExitCode {
    eprintln!("rdma-ns {subcommand}: {err}\n{usage}");
    ExitCode::from(status)
}

/// `--help`: the usage on stdout, status 0.
pub fn help(usage: &str) -> ExitCode {
    println!("{usage}");
    ExitCode::SUCCESS
}

/// Reads a subcommand's flags with `on_flag` (see [`flags::Flags::read_all`]). Err is the exit
/// code of a run that ends here: `--help` printed the usage (0), or a usage error was refused
/// (2).
pub fn read_flags<'a>(
    subcommand: &str,
    usage: &str,
    args: &'a [OsString],
    on_flag: impl FnMut(&'a str, &mut flags::Flags<'a>) -> Result<(), flags::UsageError>,
) -> Result<(), ExitCode> {
    match flags::Flags::new(args).read_all(on_flag) {
        Ok(false) => Ok(()),
        Ok(true) => Err(help(usage)),
        Err(e) => Err(refuse(subcommand, &e, usage, 2)),
    }
}

/// Runs the subcommand named by `args[0]`, or returns None when it names none (the caller then
/// prints the description, as the binary always did).
pub fn dispatch(args: &[OsString]) -> Option<ExitCode> {
    let first = args.first()?.to_str()?;
    match first {
        "--version" | "-V" => {
            if args.len() > 1 {
                eprintln!("rdma-ns --version takes no arguments");
                return Some(ExitCode::from(2));
            }
            println!("{}", version_line());
            Some(ExitCode::SUCCESS)
        }
        "migrate" => Some(migrate::run(&args[1..])),
        "list" => Some(list::run(&args[1..])),
        "reconcile" => Some(reconcile::run(&args[1..])),
        "env" => Some(env::run(&args[1..])),
        "doctor" => Some(doctor::run(&args[1..])),
        "exporter" => Some(exporter::run(&args[1..])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_subcommands_are_taken() {
        assert!(dispatch(&[]).is_none());
        assert!(dispatch(&["--help".into()]).is_none());
        assert!(dispatch(&["ADD".into()]).is_none());
        assert!(dispatch(&["--version".into(), "x".into()]).is_some());
    }

    #[test]
    fn the_version_line_names_version_and_commit() {
        let line = version_line();
        let rest = line
            .strip_prefix(&format!("rdma-ns {} (commit ", env!("CARGO_PKG_VERSION")))
            .unwrap_or_else(|| panic!("{line}"));
        let commit = rest.strip_suffix(')').unwrap_or_else(|| panic!("{line}"));
        assert!(!commit.is_empty() && !commit.contains(' '), "{line}");
    }
}
