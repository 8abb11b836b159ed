//! The CNI binary must start on hosts without rdma-core: it links no libibverbs, even when the
//! package is built with the `verbs` feature that builds rdma-ns-probe, which does link it (the
//! presence twin, through the same ldd check). tests/run.sh builds its tiers with `--features
//! verbs`; a build without it still checks the first half.

use std::process::Command;

/// The shared libraries `ldd` resolves for a binary.
fn needed(bin: &str) -> String {
    let out = Command::new("ldd")
        .arg(bin)
        .output()
        .unwrap_or_else(|e| panic!("ldd (libc-bin): {e}"));
    // A static binary makes ldd exit 1 with "not a dynamic executable": nothing is needed.
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_cni_binary_links_no_libibverbs_and_the_probe_does() {
    let cni = needed(env!("CARGO_BIN_EXE_rdma-ns"));
    assert!(
        !cni.contains("libibverbs"),
        "rdma-ns links libibverbs:\n{cni}"
    );
    assert!(
        !cni.contains("librdmacm"),
        "rdma-ns links librdmacm:\n{cni}"
    );
    match option_env!("CARGO_BIN_EXE_rdma-ns-probe") {
        Some(probe) => {
            let p = needed(probe);
            assert!(p.contains("libibverbs.so"), "rdma-ns-probe:\n{p}");
        }
        None => eprintln!("built without --features verbs: no rdma-ns-probe to compare"),
    }
}
