//! The fake IPAM of the attach tests: the delegated plugin's seam ([`IpamOps`]), which the
//! kernel's fake host (`kernel::fake`) does not model.

use std::sync::Mutex;

use crate::attach::IpamOps;
use crate::cni::result::CniResult;
use crate::cni::{Command, Request};
use crate::error::{Error, Result};

/// An IPAM that hands out a fixed result and logs the CNI command of each call it got.
#[derive(Default)]
pub struct FakeIpam {
    pub result: Option<CniResult>,
    pub fail_add: bool,
    pub fail_del: bool,
    pub calls: Mutex<Vec<Command>>,
}

impl IpamOps for FakeIpam {
    fn add(&self, _req: &Request) -> Result<Option<CniResult>> {
        self.calls.lock().unwrap().push(Command::Add);
        if self.fail_add {
            return Err(Error::Delegated {
                plugin: "fake".into(),
                code: 11,
                msg: "pool exhausted".into(),
                details: String::new(),
            });
        }
        Ok(self.result.clone())
    }
    fn del(&self, _req: &Request) -> Result<()> {
        self.calls.lock().unwrap().push(Command::Del);
        if self.fail_del {
            return Err(Error::Delegated {
                plugin: "fake".into(),
                code: 11,
                msg: "store locked".into(),
                details: String::new(),
            });
        }
        Ok(())
    }
    fn check(&self, _req: &Request) -> Result<()> {
        self.calls.lock().unwrap().push(Command::Check);
        Ok(())
    }
    fn status(&self, _req: &Request) -> Result<()> {
        self.calls.lock().unwrap().push(Command::Status);
        Ok(())
    }
    fn gc(&self, _req: &Request) -> Result<()> {
        self.calls.lock().unwrap().push(Command::Gc);
        Ok(())
    }
}
