//! IPAM as the attachment steps see it, and the real delegation to the CNI_PATH plugin.

use crate::attach::plan;
use crate::cni::result::CniResult;
use crate::cni::Request;
use crate::error::Result;

/// IPAM as the attachment steps see it: None/no-op when the conf has no `ipam`.
pub trait IpamOps {
    fn add(&self, req: &Request) -> Result<Option<CniResult>>;
    fn del(&self, req: &Request) -> Result<()>;
    fn check(&self, req: &Request) -> Result<()>;
    fn status(&self, req: &Request) -> Result<()>;
    fn gc(&self, req: &Request) -> Result<()>;
}

/// The real delegation: exec `ipam.type` from CNI_PATH.
pub struct DelegatedIpam;

impl IpamOps for DelegatedIpam {
    fn add(&self, req: &Request) -> Result<Option<CniResult>> {
        match req.conf.ipam {
            Some(_) => crate::cni::ipam::add(req).map(Some),
            None => Ok(None),
        }
    }
    fn del(&self, req: &Request) -> Result<()> {
        match req.conf.ipam {
            Some(_) if plan::test_fault("skip-ipam-del") => Ok(()),
            Some(_) => crate::cni::ipam::del(req),
            None => Ok(()),
        }
    }
    fn check(&self, req: &Request) -> Result<()> {
        match req.conf.ipam {
            Some(_) => crate::cni::ipam::check(req),
            None => Ok(()),
        }
    }
    fn status(&self, req: &Request) -> Result<()> {
        match req.conf.ipam {
            Some(_) => crate::cni::ipam::status(req),
            None => Ok(()),
        }
    }
    fn gc(&self, req: &Request) -> Result<()> {
        match req.conf.ipam {
            Some(_) => crate::cni::ipam::gc(req),
            None => Ok(()),
        }
    }
}
