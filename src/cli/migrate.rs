//! `rdma-ns migrate [FILE|-]`: reads a network configuration that uses the plugins rdma-ns
//! replaces or chains after (the peers, [`rdma_ns::peers`]) and prints the rdma-ns equivalent
//! conflist on stdout, one warning line on stderr per field not carried over and per decision
//! taken.

use rdma_ns::peers::migrate::{migrate, MigrateError};

pub fn run(args: &[std::ffi::OsString]) -> std::process::ExitCode {
    let source = match args {
        [] => "-".to_string(),
        [one] => one.to_string_lossy().into_owned(),
        _ => {
            eprintln!("usage: rdma-ns migrate [FILE|-]");
            return std::process::ExitCode::from(2);
        }
    };
    let text = if source == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map(|_| s)
            .map_err(|e| MigrateError::Read("standard input".into(), e))
    } else {
        std::fs::read_to_string(&source).map_err(|e| MigrateError::Read(source.clone(), e))
    };
    match text.and_then(|t| migrate(&source, &t)) {
        Ok(m) => {
            for w in &m.warnings {
                eprintln!("rdma-ns migrate: warning: {w}");
            }
            // A conflist rendered by serde_json cannot fail to serialize.
            println!(
                "{}",
                serde_json::to_string_pretty(&m.conflist).unwrap_or_default()
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rdma-ns migrate: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
