//! `rdma-ns reconcile [--dry-run] [--interval SECONDS] [--data-dir DIR]`: releases the
//! attachments whose pod netns is gone (see `rdma_ns::attach::operations`). Once, or every
//! SECONDS (as the installer DaemonSet's sidecar runs it); at node boot once.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use super::flags::{Flags, Next};
use rdma_ns::attach::operations::{self, NetnsState};
use rdma_ns::attach::store::{Store, DEFAULT_DATA_DIR};
use rdma_ns::cni::Plugin;

const USAGE: &str = "usage: rdma-ns reconcile [--dry-run] [--interval SECONDS] [--data-dir DIR]";

pub fn run(args: &[OsString]) -> ExitCode {
    let mut dry_run = false;
    let mut interval = None;
    let mut data_dir = PathBuf::from(DEFAULT_DATA_DIR);
    let mut flags = Flags::new(args);
    loop {
        let read = match flags.next() {
            Ok(Next::End) => break,
            Ok(Next::Help) => return super::help(USAGE),
            Ok(Next::Flag("--dry-run")) => {
                dry_run = true;
                Ok(())
            }
            Ok(Next::Flag("--interval")) => flags.seconds().map(|s| interval = Some(s)),
            Ok(Next::Flag("--data-dir")) => flags.value().map(|d| data_dir = d.into()),
            Ok(Next::Flag(_)) => Err(flags.unknown()),
            Err(e) => Err(e),
        };
        if let Err(e) = read {
            return super::refuse("reconcile", &e, USAGE, 2);
        }
    }
    match interval {
        None => once(&data_dir, dry_run),
        Some(every) => loop {
            // A pass that failed is retried at the next one: the records stay until released.
            let _ = once(&data_dir, dry_run);
            std::thread::sleep(every);
        },
    }
}

/// One pass: every orphan released (or, with `dry_run`, named). Non-zero when any release or
/// record read failed.
fn once(data_dir: &std::path::Path, dry_run: bool) -> ExitCode {
    let store = Store::new(data_dir);
    if !dry_run {
        // What gone attachments left goes first (`Store::sweep`).
        store.sweep();
    }
    let (entries, unreadable) = operations::list(&store);
    let mut failed = !unreadable.is_empty();
    for e in &unreadable {
        eprintln!("rdma-ns reconcile: {e}");
    }
    for (att, state) in entries {
        if state != NetnsState::Gone {
            continue;
        }
        let what = format!(
            "{} (network {}, netns {} gone)",
            att.id(),
            att.network,
            att.netns
        );
        if dry_run {
            println!("would release {what}");
            continue;
        }
        let outcome = operations::orphan_del(&att, data_dir)
            .and_then(|req| rdma_ns::attach::RdmaNs.del(&req));
        match outcome {
            Ok(()) => println!("released {what}"),
            Err(e) => {
                failed = true;
                eprintln!("rdma-ns reconcile: releasing {what}: {e}");
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
