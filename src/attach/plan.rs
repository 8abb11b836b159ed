//! Steps with undo.
//!
//! An ADD runs its steps in order; each step that changed something registers how to take the
//! change back. On the first failure every registered undo runs in reverse order, so a failed
//! ADD leaves host and pod as they were. Undo failures are collected, never hidden: they are
//! reported together with the error that triggered the rollback.

use std::cell::Cell;

use crate::error::{Error, Result};

type UndoFn<'a> = Box<dyn FnOnce() -> Result<()> + 'a>;

/// A fault a test plants at a named step of ADD (a checkpoint) or DEL (a kill point).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Fail right after the step, so the rollback runs every undo registered so far.
    FailAfter(String),
    /// SIGKILL the process right after the step: no undo, no further write, as a runtime's
    /// timeout, the OOM killer or a reboot would leave it.
    KillAt(String),
    /// The same in-process, for unit tests over fakes: the step's caller gets an error and
    /// nothing runs after it, no undo either.
    SimulatedKillAt(String),
}

impl Fault {
    fn kills_at(&self, step: &str) -> bool {
        matches!(self, Fault::KillAt(s) | Fault::SimulatedKillAt(s) if s == step)
    }
}

/// Stops this invocation at `step` when `fault` says to kill it there; the error is what a
/// simulated kill leaves its caller (nothing may run after it).
pub fn kill_point(fault: Option<&Fault>, step: &str) -> Result<()> {
    // With the time since the previous step (or since the command began): rdma-ns's own
    // timings (crate::log::timed).
    let now = std::time::Instant::now();
    let since = PREVIOUS_STEP
        .replace(Some(now))
        .unwrap_or_else(crate::log::began);
    crate::log_debug!("step {step} done: {}", crate::log::millis(now - since));
    #[cfg(test)]
    VISITED.with(|v| v.borrow_mut().push(step.to_string()));
    match fault {
        Some(f @ Fault::KillAt(_)) if f.kills_at(step) => {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
            unreachable!("SIGKILL cannot be caught")
        }
        Some(f @ Fault::SimulatedKillAt(_)) if f.kills_at(step) => Err(Error::State(format!(
            "killed after step `{step}` (simulated)"
        ))),
        _ => Ok(()),
    }
}

thread_local! {
    /// When this thread passed its last step.
    static PREVIOUS_STEP: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
}

#[cfg(test)]
thread_local! {
    /// Steps passed on this thread, in order: tests learn every kill point of a command from a
    /// run, so a new step cannot be missed.
    pub static VISITED: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The undo log of one ADD.
pub struct Plan<'a> {
    undo: Vec<(&'static str, UndoFn<'a>)>,
    fault: Option<Fault>,
    /// Set by a simulated kill: the process would be gone, so no undo runs.
    killed: Cell<bool>,
}

impl<'a> Plan<'a> {
    /// `fault`: see [`fault_from_env`].
    pub fn new(fault: Option<Fault>) -> Self {
        Plan {
            undo: Vec::new(),
            fault,
            killed: Cell::new(false),
        }
    }

    /// Registers how to undo `step`, which has just been applied.
    pub fn on_undo(&mut self, step: &'static str, undo: impl FnOnce() -> Result<()> + 'a) {
        self.undo.push((step, Box::new(undo)));
    }

    /// Marks `step` as applied. Fails with an injected error when `step` is the configured
    /// fault-injection point, so the rollback includes the step's own undo; or ends the
    /// invocation there, undo-less, when the fault is a kill.
    pub fn checkpoint(&self, step: &str) -> Result<()> {
        if let Err(e) = kill_point(self.fault.as_ref(), step) {
            self.killed.set(true);
            return Err(e);
        }
        if self.fault == Some(Fault::FailAfter(step.to_string())) {
            return Err(Error::State(format!(
                "injected failure after step `{step}` (RDMA_NS_TEST_FAIL_AFTER)"
            )));
        }
        Ok(())
    }

    /// The ADD succeeded: forget the undo log.
    pub fn commit(self) {}

    /// Undoes every registered step in reverse order and returns `cause`, extended with any
    /// undo failures so nothing is hidden.
    pub fn rollback(self, cause: Error) -> Error {
        if self.killed.get() {
            return cause;
        }
        let mut undo_errors = Vec::new();
        for (step, undo) in self.undo.into_iter().rev() {
            crate::log_info!("undo {step}");
            if let Err(e) = undo() {
                crate::log_error!("undo of {step} failed: {e}");
                undo_errors.push(e);
            }
        }
        if undo_errors.is_empty() {
            cause
        } else {
            undo_errors.insert(0, cause);
            Error::Multiple(undo_errors)
        }
    }

    /// Names of the steps registered so far (for tests).
    pub fn registered(&self) -> Vec<&'static str> {
        self.undo.iter().map(|(s, _)| *s).collect()
    }
}

/// Runs `steps` on a new plan with `fault` (see [`fault_from_env`]): when they succeed the undo
/// log is forgotten; when one fails every undo registered so far runs, in reverse.
pub fn transact<'a, T>(
    fault: Option<Fault>,
    steps: impl FnOnce(&mut Plan<'a>) -> Result<T>,
) -> Result<T> {
    let mut plan = Plan::new(fault);
    match steps(&mut plan) {
        Ok(done) => {
            plan.commit();
            Ok(done)
        }
        Err(e) => Err(plan.rollback(e)),
    }
}

/// Debug builds only: the step after which an ADD fails on purpose (env
/// `RDMA_NS_TEST_FAIL_AFTER`), or after which the plugin SIGKILLs itself (env
/// `RDMA_NS_TEST_KILL_AT`, a step of ADD or a `del-*` step of DEL), so root tests can exercise
/// every undo path and every crash point of the real binary. Release builds never read them.
#[cfg(debug_assertions)]
pub fn fault_from_env() -> Option<Fault> {
    let var = |name| std::env::var(name).ok().filter(|s: &String| !s.is_empty());
    var("RDMA_NS_TEST_KILL_AT")
        .map(Fault::KillAt)
        .or_else(|| var("RDMA_NS_TEST_FAIL_AFTER").map(Fault::FailAfter))
}

#[cfg(not(debug_assertions))]
pub fn fault_from_env() -> Option<Fault> {
    None
}

/// The DEL faults a debug build can be told to plant (env `RDMA_NS_TEST_FAULT`, a comma-separated
/// list), each a real bug that DEL still reports as success: `skip-child-delete` leaves a
/// macvlan/ipoib child where it is, `skip-ipam-del` never asks IPAM to release the address,
/// `skip-rename-back` brings a moved device back under `rdmans<ifindex>` instead of its name.
/// They exist so the tests' leak and absence checks can be shown to fail when the plugin leaks
/// (tests/fault_detection.rs). Release builds never read the variable.
#[cfg(debug_assertions)]
pub fn test_fault(name: &str) -> bool {
    std::env::var("RDMA_NS_TEST_FAULT").is_ok_and(|v| v.split(',').any(|f| f.trim() == name))
}

#[cfg(not(debug_assertions))]
pub fn test_fault(_name: &str) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn plan_without_injection<'a>() -> Plan<'a> {
        Plan::new(None)
    }

    #[test]
    fn rollback_runs_undos_in_reverse_and_keeps_their_errors() {
        let log = RefCell::new(Vec::new());
        let mut plan = plan_without_injection();
        plan.on_undo("a", || {
            log.borrow_mut().push("undo a");
            Ok(())
        });
        plan.on_undo("b", || {
            log.borrow_mut().push("undo b");
            Err(Error::State("b stuck".into()))
        });
        plan.checkpoint("c").unwrap();
        assert_eq!(plan.registered(), vec!["a", "b"]);
        let err = plan.rollback(Error::State("cause".into()));
        assert_eq!(*log.borrow(), vec!["undo b", "undo a"]);
        match err {
            Error::Multiple(v) => {
                assert_eq!(v[0].to_string(), "cause");
                assert_eq!(v[1].to_string(), "b stuck");
            }
            other => panic!("expected both errors, got {other}"),
        }
    }

    #[test]
    fn clean_rollback_returns_the_cause_itself() {
        let mut plan = plan_without_injection();
        plan.on_undo("a", || Ok(()));
        let err = plan.rollback(Error::IfnameTaken("x".into()));
        assert_eq!(err.code(), 103);
    }

    #[test]
    fn injected_failure_fires_only_at_the_named_step() {
        let mut plan = plan_without_injection();
        plan.fault = Some(Fault::FailAfter("b".into()));
        plan.checkpoint("a").unwrap();
        let err = plan.checkpoint("b").unwrap_err();
        assert!(err.to_string().contains("after step `b`"), "{err}");
    }

    #[test]
    fn a_simulated_kill_stops_at_its_step_and_runs_no_undo() {
        let undone = RefCell::new(false);
        let mut plan = Plan::new(Some(Fault::SimulatedKillAt("b".into())));
        plan.on_undo("a", || {
            *undone.borrow_mut() = true;
            Ok(())
        });
        plan.checkpoint("a").unwrap();
        let err = plan.checkpoint("b").unwrap_err();
        assert!(err.to_string().contains("killed after step `b`"), "{err}");
        plan.rollback(err);
        assert!(!*undone.borrow(), "a killed process undoes nothing");
    }
}
