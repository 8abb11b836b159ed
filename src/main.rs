//! The `rdma-ns` binary: a CNI plugin when CNI_COMMAND is set (as runtimes exec it), otherwise a
//! one-line description on stderr (where CLI subcommands will live).

use std::process::ExitCode;

fn main() -> ExitCode {
    let cni_command = std::env::var_os("CNI_COMMAND").filter(|v| !v.is_empty());
    if cni_command.is_none() {
        eprintln!(
            "rdma-ns {}: CNI plugin moving RDMA netdevs and ib devices into pod network \
             namespaces; CNI protocol versions {}",
            env!("CARGO_PKG_VERSION"),
            rdma_ns::cni::version::SUPPORTED_VERSIONS.join(", ")
        );
        return ExitCode::SUCCESS;
    }
    let code = rdma_ns::cni::run(&rdma_ns::attach::RdmaNs);
    ExitCode::from(code as u8)
}
