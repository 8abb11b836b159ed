//! The built binary under arbitrary stdin and environment, as a hostile or broken runtime may
//! exec it: it never dies of a signal, exits 0 or 1, and prints nothing or exactly one JSON
//! object, which on failure is a CNI error with a documented code.
//!
//! Only paths that change nothing on the host are taken: VERSION, ADD with CNI_NETNS under a
//! directory that does not exist (refused before anything is looked at), and commands that are
//! missing or garbage. Each case is an exec, so the default count is a few hundred; case counts
//! and the deep mode: docs/testing.md, "Fuzzing".

mod common;

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStringExt;
use std::process::{Command, Stdio};

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{json, Value};

use common::PLUGIN;

/// docs/configuration.md's "Error codes" table.
const DOCUMENTED_CODES: &[u64] = &[
    1, 2, 3, 4, 5, 6, 7, 11, 50, 51, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111,
    120, 121,
];

/// No netns path the plugin is given exists: ADD must fail at CNI_NETNS.
const NO_SUCH_DIR: &str = "/nonexistent-rdma-ns-fuzz";

fn cases(default: u32) -> u32 {
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
    };
    var("PROPTEST_CASES")
        .unwrap_or_else(|| default.saturating_mul(var("RDMA_NS_FUZZ_SCALE").unwrap_or(1).max(1)))
}

fn garbage() -> impl Strategy<Value = OsString> {
    prop_oneof![
        "\\PC{0,12}".prop_map(OsString::from),
        prop::collection::vec(1u8..=255, 0..12).prop_map(OsString::from_vec),
    ]
}

/// CNI_COMMAND: unset, VERSION, ADD, or something no runtime should send. DEL, CHECK, STATUS
/// and GC are left out: they act on the data directory and the IPAM plugin.
fn command() -> impl Strategy<Value = Option<OsString>> {
    let safe = |c: &OsString| !matches!(c.to_str(), Some("DEL" | "CHECK" | "STATUS" | "GC"));
    // Mostly ADD, so that most cases get through conf and env validation.
    prop_oneof![
        1 => Just(None),
        5 => Just(Some(OsString::from("ADD"))),
        2 => Just(Some(OsString::from("VERSION"))),
        1 => prop::sample::select(vec!["", "add", "version", "Add", "ADD ", "DELETE", "UP", "ADD\n"])
            .prop_map(|c| Some(OsString::from(c))),
        1 => garbage().prop_filter("a command that acts", safe).prop_map(Some),
    ]
}

fn var(valid: &'static [&'static str]) -> impl Strategy<Value = Option<OsString>> {
    prop_oneof![
        1 => Just(None),
        6 => prop::sample::select(valid).prop_map(|v| Some(OsString::from(v))),
        1 => garbage().prop_map(Some),
    ]
}

/// CNI_NETNS: unset, empty, or a path under a directory that does not exist.
fn netns() -> impl Strategy<Value = Option<OsString>> {
    prop::option::of(prop_oneof![
        1 => Just(OsString::new()),
        1 => Just(OsString::from(format!("{NO_SUCH_DIR}/pod"))),
        2 => garbage().prop_map(|g| {
            let mut p = OsString::from(format!("{NO_SUCH_DIR}/"));
            p.push(g);
            p
        }),
    ])
}

/// The conf on stdin: a valid one of some version and mode, edited as bytes, or junk.
fn stdin(data_dir: String) -> impl Strategy<Value = Vec<u8>> {
    let base = (
        prop::sample::select(vec![
            "1.1.0", "1.0.0", "0.4.0", "0.3.1", "0.3.0", "0.2.0", "9",
        ]),
        prop::sample::select(vec!["move", "macvlan", "ipoib", "rdma", "bogus"]),
        any::<bool>(),
    )
        .prop_map(move |(version, mode, ipam)| {
            let mut conf = json!({
                "cniVersion": version, "name": "fuzz-net", "type": "rdma-ns", "mode": mode,
                "device": "eth9", "master": "eth9", "dataDir": data_dir,
                "prevResult": {"ips": [{"address": "10.0.0.5/24"}]},
            });
            if ipam {
                conf["ipam"] = json!({"type": "no-such-ipam-rdma-ns-fuzz"});
            }
            conf.to_string().into_bytes()
        });
    let edit = (any::<usize>(), any::<u8>(), 0u8..3);
    prop_oneof![
        4 => (base, prop_oneof![Just(vec![]), prop::collection::vec(edit, 1..4)]).prop_map(|(mut bytes, edits)| {
            for (i, b, kind) in edits {
                if bytes.is_empty() {
                    break;
                }
                let at = i % bytes.len();
                match kind {
                    0 => bytes[at] = b,
                    1 => {
                        bytes.remove(at);
                    }
                    _ => bytes.truncate(at),
                }
            }
            bytes
        }),
        1 => prop::collection::vec(any::<u8>(), 0..48),
    ]
}

struct Run {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
}

fn exec(vars: &[(&str, Option<OsString>)], input: &[u8]) -> Run {
    let mut cmd = Command::new(PLUGIN);
    cmd.env_clear().env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    for (k, v) in vars {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the plugin");
    // The plugin may exit before reading stdin (an error it can tell from the env alone);
    // a broken pipe then is its right, not a test failure.
    let _ = child.stdin.take().unwrap().write_all(input);
    let out = child.wait_with_output().unwrap();
    Run {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn check(run: &Run) -> Result<(), TestCaseError> {
    let code = run.status.code();
    prop_assert!(
        matches!(code, Some(0 | 1)),
        "exit {:?} (a signal if None); stderr: {}",
        run.status,
        run.stderr
    );
    if run.stdout.is_empty() {
        prop_assert_eq!(
            code,
            Some(0),
            "failed without a CNI error; stderr: {}",
            run.stderr
        );
        return Ok(());
    }
    prop_assert!(
        run.stdout.ends_with('\n') && run.stdout.matches('\n').count() == 1,
        "not one line: {:?}",
        run.stdout
    );
    let v: Value = serde_json::from_str(&run.stdout)
        .map_err(|e| TestCaseError::fail(format!("stdout is not JSON ({e}): {:?}", run.stdout)))?;
    prop_assert!(v.is_object(), "{}", v);
    prop_assert!(
        v["cniVersion"].as_str().is_some_and(|s| !s.is_empty()),
        "{}",
        v
    );
    if code == Some(1) {
        let c = v["code"].as_u64();
        prop_assert!(c.is_some_and(|c| DOCUMENTED_CODES.contains(&c)), "{}", v);
        prop_assert!(v["msg"].as_str().is_some_and(|m| !m.is_empty()), "{}", v);
    }
    Ok(())
}

#[test]
fn binary_answers_any_input_with_nothing_or_one_json_object() {
    let data_dir = std::env::temp_dir().join(format!("rdma-ns-fuzz-binary-{}", std::process::id()));
    let vars = (
        command(),
        var(&["c1", "0123456789abcdef", "-x"]),
        netns(),
        var(&["net1", "a-name-too-long-for-ifnamsiz", "eth0:1"]),
        var(&[
            "",
            "IgnoreUnknown=1;FOO=bar",
            "K8S_POD_NAME=web",
            "FOO=bar",
            "junk",
            "MAC=zz",
        ]),
        var(&["/nonexistent-rdma-ns-fuzz/bin", "::", ""]),
    );
    let mut runner = proptest::test_runner::TestRunner::new(Config {
        cases: cases(300),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(
        &(vars, stdin(data_dir.display().to_string())),
        |((command, id, netns, ifname, args, path), input)| {
            // The log sink would create a logFile wherever an edit pointed it.
            let names_log = serde_json::from_slice::<Value>(&input)
                .ok()
                .is_some_and(|v| v.get("logFile").is_some());
            prop_assume!(!names_log);
            let run = exec(
                &[
                    ("CNI_COMMAND", command),
                    ("CNI_CONTAINERID", id),
                    ("CNI_NETNS", netns),
                    ("CNI_IFNAME", ifname),
                    ("CNI_ARGS", args),
                    ("CNI_PATH", path),
                ],
                &input,
            );
            check(&run)
        },
    );
    let _ = std::fs::remove_dir_all(&data_dir);
    result.unwrap();
}
