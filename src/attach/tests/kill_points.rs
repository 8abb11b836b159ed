//! Crash safety as a property: for every step of ADD and DEL, an invocation killed right after
//! it (no undo, no further write) is followed by DEL twice and GC, which must leave nothing
//! stranded. The steps are learnt from a clean run, so a new step is covered the day it lands.

use crate::attach::plan::{Fault, VISITED};
use crate::attach::tests::kit::{netns_for, World};
use crate::cni::Command;

fn visited() -> Vec<String> {
    VISITED.with(|v| std::mem::take(&mut *v.borrow_mut()))
}

/// `make` builds a fresh world; `assert_clean` checks that nothing is left (its `&str` names
/// the case).
pub fn every_kill_point(make: impl Fn() -> World, assert_clean: impl Fn(&World, &str)) {
    let run = |w: &World, command: Command, fault: Option<Fault>| {
        w.run(command, netns_for(command), fault).map(drop)
    };
    let w = make();
    visited();
    run(&w, Command::Add, None).unwrap();
    let add_steps = visited();
    // The probe of attachment lock files finds the one an ADD with IPAM leaves.
    let conf: serde_json::Value = serde_json::from_str(&w.conf(Command::Add)).unwrap();
    let with_ipam = conf.get("ipam").is_some();
    assert_eq!(
        attachment_locks(w.store.dir()).len(),
        usize::from(with_ipam),
        "the attachment lock while it exists"
    );
    run(&w, Command::Del, None).unwrap();
    let del_steps: Vec<String> = visited()
        .into_iter()
        .filter(|s| s.starts_with("del-"))
        .collect();
    assert_clean(&w, "a clean ADD and DEL");
    assert!(add_steps.len() >= 3, "ADD steps: {add_steps:?}");
    assert!(del_steps.len() >= 2, "DEL steps: {del_steps:?}");

    let recover = |w: &World, case: &str| {
        for _ in 0..2 {
            run(w, Command::Del, None).unwrap_or_else(|e| panic!("{case}: DEL after it: {e}"));
        }
        run(w, Command::Gc, None).unwrap_or_else(|e| panic!("{case}: GC after it: {e}"));
        assert_clean(w, case);
        let locks = attachment_locks(w.store.dir());
        assert!(
            locks.is_empty(),
            "{case}: attachment lock files left: {locks:?}"
        );
    };
    for step in &add_steps {
        let case = format!("killed after ADD step {step}");
        let w = make();
        let e = run(&w, Command::Add, Some(Fault::SimulatedKillAt(step.clone()))).expect_err(&case);
        assert!(e.to_string().contains("killed after step"), "{case}: {e}");
        recover(&w, &case);
    }
    for step in &del_steps {
        let case = format!("killed after DEL step {step}");
        let w = make();
        run(&w, Command::Add, None).unwrap();
        let e = run(&w, Command::Del, Some(Fault::SimulatedKillAt(step.clone()))).expect_err(&case);
        assert!(e.to_string().contains("killed after step"), "{case}: {e}");
        recover(&w, &case);
    }
}

/// IPAM is balanced: after the last ADD there was a DEL.
pub fn ipam_released(calls: &[Command], case: &str) {
    let last_add = calls.iter().rposition(|c| *c == Command::Add);
    let last_del = calls.iter().rposition(|c| *c == Command::Del);
    if let Some(a) = last_add {
        assert!(
            last_del.is_some_and(|d| d > a),
            "{case}: IPAM allocation never released: {calls:?}"
        );
    }
}

/// The attachment lock files under the data dir `dir` (device locks name devices).
fn attachment_locks(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir.join("locks"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ipam-"))
        .collect()
}

/// No temp file of an atomic write is left anywhere under `dir`.
pub fn no_temp_files(dir: &std::path::Path, case: &str) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(
                !name.contains(".tmp-"),
                "{case}: temp file {name} left in {}",
                d.display()
            );
            if e.path().is_dir() {
                stack.push(e.path());
            }
        }
    }
}
