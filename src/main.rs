//! The `rdma-ns` binary: a CNI plugin when CNI_COMMAND is set (as runtimes exec it). Without it,
//! a known subcommand in argv[1] (`--version`, `migrate`, `list`, `reconcile`, `env`, `doctor`,
//! `exporter`) runs from [`cli`]; anything else gets a
//! one-line description on stderr. CNI_COMMAND is looked at first, so a runtime's call never
//! reaches the subcommand code, whatever its argv.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    let cni_command = std::env::var_os("CNI_COMMAND").filter(|v| !v.is_empty());
    if cni_command.is_none() {
        let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
        if let Some(code) = cli::dispatch(&args) {
            return code;
        }
        eprintln!(
            "rdma-ns {}: CNI plugin moving RDMA netdevs and ib devices into pod network \
             namespaces; CNI protocol versions {}; subcommands: {}",
            env!("CARGO_PKG_VERSION"),
            rdma_ns::cni::version::SUPPORTED_VERSIONS.join(", "),
            cli::SUBCOMMANDS
        );
        return ExitCode::SUCCESS;
    }
    let code = rdma_ns::cni::run(&rdma_ns::attach::RdmaNs);
    ExitCode::from(code as u8)
}
