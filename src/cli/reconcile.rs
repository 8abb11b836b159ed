//! `rdma-ns reconcile [--dry-run] [--interval SECONDS] [--data-dir DIR]`: releases the
//! attachments whose pod netns is gone (see `rdma_ns::attach::operations`). Once, or every
//! SECONDS (as the installer DaemonSet's sidecar runs it); at node boot once.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use rdma_ns::attach::operations::{self, NetnsState};
use rdma_ns::attach::store::{Store, DEFAULT_DATA_DIR};
use rdma_ns::cni::Plugin;

const USAGE: &str = "usage: rdma-ns reconcile [--dry-run] [--interval SECONDS] [--data-dir DIR]";

pub fn run(args: &[OsString]) -> ExitCode {
    let mut dry_run = false;
    let mut interval = None;
    let mut data_dir = PathBuf::from(DEFAULT_DATA_DIR);
    let read = super::read_flags("reconcile", USAGE, args, |flag, flags| {
        match flag {
            "--dry-run" => dry_run = true,
            "--interval" => interval = Some(flags.seconds()?),
            "--data-dir" => data_dir = flags.value()?.into(),
            _ => return Err(flags.unknown()),
        }
        Ok(())
    });
    if let Err(exit) = read {
        return exit;
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
