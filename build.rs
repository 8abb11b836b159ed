//! Names the commit the binary is built from, for `rdma-ns --version`, as the env var
//! `RDMA_NS_GIT_COMMIT` of the compiled crate.
//!
//! Where it comes from, first match:
//! - `RDMA_NS_GIT_COMMIT` in the build's environment: a packager building from a source tarball
//!   (no `.git`) names the commit the tarball was cut from;
//! - `git rev-parse --short HEAD` when the package root has a `.git` (a directory, or the file a
//!   worktree or submodule has). Only the package's own `.git` counts: a tarball unpacked inside
//!   some other repository must not report that repository's commit;
//! - `unknown`.
//!
//! The script reruns only when HEAD or the branch it points to moves (and when the env var
//! changes), not on every source edit: a commit rebuilds this crate, never its dependencies.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RDMA_NS_GIT_COMMIT");
    let commit = match std::env::var("RDMA_NS_GIT_COMMIT") {
        Ok(c) if !c.is_empty() => {
            // It ends up in --version output that scripts parse: one plain token.
            if c.len() > 64
                || !c
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || "._+-".contains(ch))
            {
                panic!(
                    "RDMA_NS_GIT_COMMIT={c:?}: want a commit id such as 4d707f6 \
                     (letters, digits, . _ + -; at most 64)"
                );
            }
            c
        }
        _ => from_git().unwrap_or_else(|| "unknown".to_string()),
    };
    println!("cargo:rustc-env=RDMA_NS_GIT_COMMIT={commit}");
    #[cfg(feature = "dra")]
    compile_kubelet_protos();
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn from_git() -> Option<String> {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    if !root.join(".git").exists() {
        return None;
    }
    // The files whose change means another commit: HEAD itself (a checkout, a detached HEAD
    // moving) and the ref it names, loose or packed. A worktree's HEAD lives in its own git
    // dir and its refs in the common one; `--git-path` resolves both.
    let abs = |p: String| {
        let p = PathBuf::from(p);
        if p.is_absolute() {
            p
        } else {
            root.join(p)
        }
    };
    let head = abs(git(&root, &["rev-parse", "--git-path", "HEAD"])?);
    println!("cargo:rerun-if-changed={}", head.display());
    if let Some(reference) = git(&root, &["symbolic-ref", "-q", "HEAD"]) {
        let loose = abs(git(&root, &["rev-parse", "--git-path", &reference])?);
        // A path that does not exist would make cargo rerun the script on every build. A ref
        // that is only packed gets a loose file on the next commit: its directory changes then.
        if loose.exists() {
            println!("cargo:rerun-if-changed={}", loose.display());
        } else if let Some(dir) = loose.parent().filter(|d| d.exists()) {
            println!("cargo:rerun-if-changed={}", dir.display());
        }
        let packed = abs(git(&root, &["rev-parse", "--git-path", "packed-refs"])?);
        if packed.exists() {
            println!("cargo:rerun-if-changed={}", packed.display());
        }
    }
    git(&root, &["rev-parse", "--short", "HEAD"])
}

/// The kubelet's gRPC APIs (proto/), for `rdma-ns-dra` only: the CNI binary's build never
/// runs protoc.
#[cfg(feature = "dra")]
fn compile_kubelet_protos() {
    let protos = [
        "proto/kubelet/pluginregistration/v1/api.proto",
        "proto/kubelet/dra/v1/api.proto",
        "proto/kubelet/dra-health/v1/api.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    tonic_prost_build::configure()
        .compile_protos(&protos, &["proto/kubelet"])
        .unwrap_or_else(|e| {
            panic!(
                "compiling the kubelet's protos (feature dra): {e}; protoc comes from Debian's \
                 protobuf-compiler (tests/run.sh installs it), or set PROTOC"
            )
        });
}
