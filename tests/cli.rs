//! The binary's subcommands for people (`--version`, `migrate`), exec'd as a person would, and
//! the rule that keeps them off the CNI path: with CNI_COMMAND set, argv is never looked at.
//! Needs no root.

use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_rdma-ns");

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("CNI_COMMAND")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("exec rdma-ns")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn version_prints_the_package_version_and_the_commit_it_was_built_from() {
    let out = run(&["--version"], &[]);
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let line = stdout
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("{stdout:?}"));
    assert!(!line.contains('\n'), "one line: {stdout:?}");
    let commit = line
        .strip_prefix(&format!("rdma-ns {} (commit ", env!("CARGO_PKG_VERSION")))
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("want `rdma-ns VERSION (commit ID)`, got {line:?}"));

    // Built from a git checkout without the packager's override, the commit is HEAD's.
    let root = env!("CARGO_MANIFEST_DIR");
    let overridden = std::env::var("RDMA_NS_GIT_COMMIT").is_ok_and(|v| !v.is_empty());
    if std::path::Path::new(root).join(".git").exists() && !overridden {
        let head = Command::new("git")
            .args(["-C", root, "rev-parse", "--short", "HEAD"])
            .output()
            .expect("git");
        assert!(head.status.success(), "git rev-parse: {head:?}");
        assert_eq!(commit, text(&head.stdout).trim(), "{line}");
    } else {
        assert!(
            !commit.is_empty() && commit.chars().all(|c| c.is_ascii_alphanumeric()),
            "{line}"
        );
    }
}

#[test]
fn with_cni_command_set_argv_is_ignored() {
    let out = run(&["--version"], &[("CNI_COMMAND", "VERSION")]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("VERSION answers JSON ({e}): {}", text(&out.stdout)));
    assert!(v["supportedVersions"].is_array(), "{v}");
}

#[test]
fn without_a_subcommand_the_description_goes_to_stderr_only() {
    for args in [&[][..], &["--help"][..], &["ADD"][..]] {
        let out = run(args, &[]);
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert!(
            out.stdout.is_empty(),
            "{args:?}: stdout {:?}",
            text(&out.stdout)
        );
        let err = text(&out.stderr);
        assert!(
            err.starts_with(&format!(
                "rdma-ns {}: CNI plugin",
                env!("CARGO_PKG_VERSION")
            )) && err.contains("--version"),
            "{args:?}: {err}"
        );
    }
}

/// The expectation files of migrate case `name`: its own, else those of the case without its
/// form tag (`.conf`, `.conflist`, `.nad`), which every form of one configuration shares.
fn migrate_expectation(dir: &str, name: &str) -> String {
    if std::path::Path::new(&format!("{dir}/{name}.expected.json")).exists() {
        return name.to_string();
    }
    let (base, form) = name.rsplit_once('.').unwrap_or((name, ""));
    assert!(
        ["conf", "conflist", "nad"].contains(&form),
        "{name}: no {name}.expected.json"
    );
    base.to_string()
}

/// `rdma-ns migrate` on the peers' own README examples and on files with every field of each
/// peer (tests/data/migrate/README.md names each source): the conflist on stdout, one warning
/// line per field not carried over and per decision on stderr. The forms of one configuration
/// (single conf, conflist, NAD) share their expectation, so they must migrate alike.
#[test]
fn migrate_turns_the_peers_configurations_into_rdma_ns_conflists() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/migrate");
    let mut cases = 0;
    let mut expectations = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let Some((name, _)) = file.split_once(".input.") else {
            continue;
        };
        cases += 1;
        let expected = migrate_expectation(dir, name);
        expectations.insert(expected.clone());
        let input = e.path();
        let out = run(&["migrate", input.to_str().unwrap()], &[]);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        let got: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{name}: stdout is not JSON ({e}): {}", text(&out.stdout)));
        let want: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{dir}/{expected}.expected.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(got, want, "{name}");
        let want_warnings: Vec<String> =
            std::fs::read_to_string(format!("{dir}/{expected}.warnings"))
                .unwrap()
                .lines()
                .map(|l| format!("rdma-ns migrate: warning: {l}"))
                .collect();
        let got_warnings: Vec<String> = text(&out.stderr).lines().map(String::from).collect();
        assert_eq!(got_warnings, want_warnings, "{name}: stderr");
    }
    let unused: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let file = e.file_name().to_string_lossy().into_owned();
            let name = file.strip_suffix(".expected.json")?.to_string();
            (!expectations.contains(&name)).then_some(name)
        })
        .collect();
    assert!(unused.is_empty(), "expectations no input uses: {unused:?}");
    assert!(cases >= 25, "{cases} cases in {dir}");
}

/// Each peer's every-field case has, in each of its forms, every field the peer's table lists:
/// the table and the test files are read from the same schema.
#[test]
fn migrate_cases_hold_every_field_of_each_peer() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/migrate");
    for (peer_type, case) in [
        ("rdma", "rdma-cni-all"),
        ("ipoib", "ipoib-cni-all"),
        ("infiniband", "ipoib-cni-first-all"),
        ("host-device", "host-device-all"),
        ("sriov", "sriov-cni-all"),
        ("sriov", "sriov-cni-v1-all"),
        ("ib-sriov", "ib-sriov-cni-all"),
    ] {
        for form in ["conf.input.json", "conflist.input.json", "nad.input.yaml"] {
            let path = format!("{dir}/{case}.{form}");
            let config =
                rdma_ns::nad::network_config(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let plugins = match config.get("plugins") {
                Some(p) => p.as_array().unwrap().clone(),
                None => vec![config.clone()],
            };
            let entry = plugins
                .iter()
                .find(|p| p["type"] == peer_type)
                .unwrap_or_else(|| panic!("{path}: no {peer_type} entry"));
            let peer = rdma_ns::peers::peer_of(entry.as_object().unwrap()).unwrap();
            for field in peer.fields {
                let found = field.name.split('.').try_fold(entry, |v, key| v.get(key));
                assert!(found.is_some(), "{path}: no {}", field.name);
            }
        }
    }
}

#[test]
fn migrate_reads_standard_input_and_refuses_what_it_cannot_read() {
    let input = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/migrate/ipoib-cni-readme.input.json"
    ))
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["migrate", "-"])
        .env_remove("CNI_COMMAND")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), &input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["plugins"][0]["mode"], "ipoib", "{got}");

    for (args, want) in [
        (
            &["migrate", "/nonexistent/conf.json"][..],
            "reading /nonexistent/conf.json",
        ),
        (&["migrate", "a", "b"][..], "usage: rdma-ns migrate"),
    ] {
        let out = run(args, &[]);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            out.stdout.is_empty(),
            "{args:?}: stdout {}",
            text(&out.stdout)
        );
        assert!(
            text(&out.stderr).contains(want),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let garbage = std::env::temp_dir().join(format!("rdma-ns-migrate-{}.txt", std::process::id()));
    std::fs::write(&garbage, "kind: Pod\n").unwrap();
    let out = run(&["migrate", garbage.to_str().unwrap()], &[]);
    std::fs::remove_file(&garbage).unwrap();
    assert!(!out.status.success() && out.stdout.is_empty(), "{out:?}");
}

/// Every subcommand that takes flags reads them alike: `--help` prints its usage on stdout
/// and exits 0; a misuse names what was wrong, then the usage, on stderr only, with the
/// subcommand's usage status (doctor's is 3: 1 and 2 are its findings). No case needs root or
/// touches the node: each stops before any work.
#[test]
fn every_subcommand_reads_flags_the_same_way() {
    for (sub, status) in [
        ("list", 2),
        ("reconcile", 2),
        ("env", 2),
        ("doctor", 3),
        ("exporter", 2),
    ] {
        let usage = format!("usage: rdma-ns {sub}");
        let out = run(&[sub, "--help"], &[]);
        assert_eq!(out.status.code(), Some(0), "{sub} --help: {out:?}");
        assert!(
            text(&out.stdout).starts_with(&usage),
            "{sub} --help: {out:?}"
        );
        assert!(out.stderr.is_empty(), "{sub} --help: {out:?}");
        for (args, want) in [
            (&["--frob"][..], r#"unknown argument "--frob""#.to_string()),
            (&["--data-dir"][..], "--data-dir needs a value".to_string()),
            (&["stray"][..], r#"unexpected argument "stray""#.to_string()),
        ] {
            let args: Vec<&str> = std::iter::once(sub).chain(args.iter().copied()).collect();
            // env has no --data-dir: there the flag itself is the misuse.
            let want = match (sub, args[1]) {
                ("env", "--data-dir") => r#"unknown argument "--data-dir""#.to_string(),
                _ => want,
            };
            let out = run(&args, &[]);
            assert_eq!(out.status.code(), Some(status), "{args:?}: {out:?}");
            assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
            let err = text(&out.stderr);
            assert!(
                err.starts_with(&format!("rdma-ns {sub}: {want}\n{usage}")),
                "{args:?}: {err}"
            );
        }
    }
    let out = run(&["reconcile", "--interval=0"], &[]);
    assert!(
        text(&out.stderr).contains(r#"--interval "0": a whole number of seconds above 0"#),
        "{out:?}"
    );
    let out = run(&["list", "--json=yes"], &[]);
    assert!(
        text(&out.stderr).contains("--json takes no value"),
        "{out:?}"
    );
}
