//! Steps with undo.
//!
//! An ADD runs its steps in order; each step that changed something registers how to take the
//! change back. On the first failure every registered undo runs in reverse order, so a failed
//! ADD leaves host and pod as they were. Undo failures are collected, never hidden: they are
//! reported together with the error that triggered the rollback.

use crate::error::{Error, Result};

type UndoFn<'a> = Box<dyn FnOnce() -> Result<()> + 'a>;

/// The undo log of one ADD.
pub struct Plan<'a> {
    undo: Vec<(&'static str, UndoFn<'a>)>,
    /// A step name after which to fail, to exercise every undo path.
    fail_after: Option<String>,
}

impl<'a> Plan<'a> {
    /// `fail_after`: see [`fault_injection_point`].
    pub fn new(fail_after: Option<String>) -> Self {
        Plan {
            undo: Vec::new(),
            fail_after,
        }
    }

    /// Registers how to undo `step`, which has just been applied.
    pub fn on_undo(&mut self, step: &'static str, undo: impl FnOnce() -> Result<()> + 'a) {
        self.undo.push((step, Box::new(undo)));
    }

    /// Marks `step` as applied. Fails with an injected error when `step` is the configured
    /// fault-injection point, so the rollback includes the step's own undo.
    pub fn checkpoint(&self, step: &str) -> Result<()> {
        if self.fail_after.as_deref() == Some(step) {
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
        let mut undo_errors = Vec::new();
        for (step, undo) in self.undo.into_iter().rev() {
            crate::log::info(&format!("undo {step}"));
            if let Err(e) = undo() {
                crate::log::error(&format!("undo of {step} failed: {e}"));
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

/// Debug builds only: the step after which an ADD fails on purpose (env
/// `RDMA_NS_TEST_FAIL_AFTER`), so root tests can exercise every undo path of the real binary.
/// Release builds never read it.
#[cfg(debug_assertions)]
pub fn fault_injection_point() -> Option<String> {
    std::env::var("RDMA_NS_TEST_FAIL_AFTER")
        .ok()
        .filter(|s| !s.is_empty())
}

#[cfg(not(debug_assertions))]
pub fn fault_injection_point() -> Option<String> {
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
        plan.fail_after = Some("b".into());
        plan.checkpoint("a").unwrap();
        let err = plan.checkpoint("b").unwrap_err();
        assert!(err.to_string().contains("after step `b`"), "{err}");
    }
}
