//! `rdma-ns list [--json] [--data-dir DIR]`: the node's attachments from their records.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use rdma_ns::attach::operations::{self, NetnsState};
use rdma_ns::attach::record::Attachment;
use rdma_ns::attach::store::{Store, DEFAULT_DATA_DIR};

const USAGE: &str = "usage: rdma-ns list [--json] [--data-dir DIR]";

pub fn run(args: &[OsString]) -> ExitCode {
    let mut json = false;
    let mut data_dir = PathBuf::from(DEFAULT_DATA_DIR);
    let read = super::read_flags("list", USAGE, args, |flag, flags| {
        match flag {
            "--json" => json = true,
            "--data-dir" => data_dir = flags.value()?.into(),
            _ => return Err(flags.unknown()),
        }
        Ok(())
    });
    if let Err(exit) = read {
        return exit;
    }
    let store = Store::new(&data_dir);
    // What gone attachments left goes first (`Store::sweep`).
    store.sweep();
    let (entries, unreadable) = operations::list(&store);
    if json {
        let rows: Vec<serde_json::Value> = entries.iter().map(|(a, s)| row_json(a, *s)).collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("a list of JSON values encodes")
        );
    } else {
        print_table(&entries);
    }
    for e in &unreadable {
        eprintln!("rdma-ns list: {e}");
    }
    if unreadable.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn pod_name(a: &Attachment) -> String {
    match &a.pod {
        Some(p) => format!(
            "{}/{}",
            p.namespace.as_deref().unwrap_or("-"),
            p.name.as_deref().unwrap_or("-")
        ),
        None => "-".into(),
    }
}

/// The host-side device: the moved netdev, a child's parent, a chained VF's function.
fn device(a: &Attachment) -> String {
    a.mode_state.record().listed_device()
}

fn ib_device(a: &Attachment) -> Option<String> {
    a.ib_device()
        .map(|r| r.ibdev.clone())
        .or_else(|| a.gids().first().map(|g| g.ibdev.clone()))
}

fn gid_indexes(a: &Attachment) -> Vec<u32> {
    a.gids().iter().map(|g| g.index).collect()
}

fn state(a: &Attachment, netns: NetnsState) -> String {
    let phase = serde_json::to_value(a.phase)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    match netns {
        NetnsState::Alive => phase,
        NetnsState::Gone => format!("{phase}, netns gone"),
        NetnsState::Unknown => format!("{phase}, netns unreadable"),
    }
}

fn row_json(a: &Attachment, netns: NetnsState) -> serde_json::Value {
    serde_json::json!({
        "pod": a.pod,
        "network": a.network,
        "containerId": a.container_id,
        "ifname": a.ifname,
        "mode": a.mode(),
        "device": device(a),
        "ibDevice": ib_device(a),
        "gidIndexes": gid_indexes(a),
        "phase": a.phase,
        "netns": a.netns,
        "netnsState": netns,
    })
}

fn print_table(entries: &[(Attachment, NetnsState)]) {
    let header = [
        "POD", "NETWORK", "IFACE", "MODE", "DEVICE", "IBDEV", "GID", "STATE",
    ];
    let rows: Vec<[String; 8]> = entries
        .iter()
        .map(|(a, s)| {
            let gids: Vec<String> = gid_indexes(a).iter().map(u32::to_string).collect();
            [
                pod_name(a),
                a.network.clone(),
                a.ifname.clone(),
                serde_json::to_value(a.mode())
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                device(a),
                ib_device(a).unwrap_or_else(|| "-".into()),
                if gids.is_empty() {
                    "-".into()
                } else {
                    gids.join(",")
                },
                state(a, *s),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.to_vec());
    for r in &rows {
        line(r.iter().map(String::as_str).collect());
    }
}
