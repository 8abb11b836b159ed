//! The DRA driver's crates never reach the CNI binary (issue 31, §1): without the `dra`
//! feature the package's normal dependencies hold none of them (the presence twin: with it,
//! all of them), and when the tiers build with the feature, the `rdma-ns` binary still carries
//! none of their code while `rdma-ns-dra` does. Start time and size stay tests/bench's and
//! tests/e2e's (static musl build, no features).

use std::process::Command;

/// The crates `rdma-ns-dra` brings: the API client, gRPC, protobuf, the async runtime.
const DRA_CRATES: &[&str] = &["kube", "k8s-openapi", "tonic", "prost", "tokio", "hyper"];

/// The package's normal dependency names with `features` (`cargo tree`, offline, locked).
fn dependencies(features: &[&str]) -> Vec<String> {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "tree",
            "--locked",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}"]);
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    let out = cmd.output().expect("cargo tree");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn without_the_feature_no_driver_crate_is_a_dependency() {
    let plain = dependencies(&[]);
    let dra = dependencies(&["dra"]);
    for c in DRA_CRATES {
        assert!(
            !plain.iter().any(|d| d == c),
            "{c} is a dependency of the plain build: {plain:?}"
        );
        assert!(
            dra.iter().any(|d| d == c),
            "{c} is missing with --features dra: {dra:?}"
        );
    }
}

/// The panic locations every crate's code carries name its source path: tokio's appear in the
/// driver and never in the CNI binary, even built in the same cargo run with the feature on.
#[test]
fn the_cni_binary_carries_no_driver_code_when_built_beside_it() {
    let has = |bin: &str, needle: &str| {
        let bytes = std::fs::read(bin).unwrap_or_else(|e| panic!("{bin}: {e}"));
        bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
    };
    let cni = env!("CARGO_BIN_EXE_rdma-ns");
    for needle in ["/tokio-1.", "/tonic-0.", "/kube-client-", "/k8s-openapi-"] {
        assert!(!has(cni, needle), "rdma-ns carries {needle} code");
    }
    match option_env!("CARGO_BIN_EXE_rdma-ns-dra") {
        Some(driver) => assert!(has(driver, "/tokio-1."), "rdma-ns-dra carries no tokio?"),
        None => panic!(
            "built without --features dra: no rdma-ns-dra to compare; tests/run.sh builds with it"
        ),
    }
}
