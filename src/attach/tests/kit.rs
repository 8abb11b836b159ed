//! The one harness of the attach tests. A [`TestHost`] describes the node (host links and
//! addresses, the RDMA subsystem and its ib devices, sysfs, the char device dir), the network
//! conf's plugin fields and IPAM result, and the container; [`TestHost::build`] gives a
//! [`World`] that turns a command into a request and runs it the way the plugin does: ADD and
//! CHECK through the driver of the conf's mode, DEL through the one lifecycle frame, GC and
//! STATUS as themselves.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use ipnetwork::IpNetwork;

use crate::attach::config::PluginConf;
use crate::attach::plan::Fault;
use crate::attach::store::Store;
use crate::attach::tests::fake_ipam::FakeIpam;
use crate::attach::{check, gc, lifecycle, Ctx};
use crate::cni::env::RawEnv;
use crate::cni::result::CniResult;
use crate::cni::{Command, NetConf, Request};
use crate::error::Result;
use crate::kernel::fake::{Call, FakeKernel, FakeRdma, NsKey, POD};
use crate::kernel::nldev::NetnsMode;
use crate::kernel::rtnetlink::Link;
use crate::kernel::sysfs::SysRoot;
use crate::kernel::topology::fixtures::SysfsFixture;
use crate::testutil::TempDir;

/// Where the char devices are when a test does not make its own: nothing to find there.
const NO_DEV_DIR: &str = "/nonexistent/dev/infiniband";

/// The fault that fails an invocation right after `step`.
pub fn fail_after(step: &str) -> Option<Fault> {
    Some(Fault::FailAfter(step.to_string()))
}

/// An IPAM result of the one address `address` (`10.9.0.5/24`), no gateway, no route.
pub fn one_address(address: &str) -> CniResult {
    CniResult {
        ips: vec![crate::cni::result::IpConfig {
            address: address.parse().unwrap(),
            gateway: None,
            interface: None,
        }],
        ..Default::default()
    }
}

/// The netns a command is run with in the kill-point loop: the pod's, except for GC, which has
/// none.
pub fn netns_for(command: Command) -> &'static str {
    match command {
        Command::Gc => "",
        _ => POD,
    }
}

pub struct TestHost {
    network: String,
    container: String,
    ifname: String,
    links: Vec<Link>,
    addresses: Vec<(u32, IpNetwork)>,
    fields: String,
    ipam: Option<CniResult>,
    netns_mode: Option<NetnsMode>,
    ib_devices: Vec<(String, u32)>,
    ipoib_gid: Option<Vec<u8>>,
    sysfs: Option<SysfsFixture>,
    dev_dir: PathBuf,
}

impl TestHost {
    /// A host with no links, shared RDMA netns mode and no ib devices, an empty sysfs, and no
    /// IPAM in the conf; container `container` asks for `net1` on network `network`.
    pub fn new(network: &str, container: &str) -> TestHost {
        TestHost {
            network: network.to_string(),
            container: container.to_string(),
            ifname: "net1".to_string(),
            links: Vec::new(),
            addresses: Vec::new(),
            fields: String::new(),
            ipam: None,
            netns_mode: Some(NetnsMode::Shared),
            ib_devices: Vec::new(),
            ipoib_gid: None,
            sysfs: None,
            dev_dir: PathBuf::from(NO_DEV_DIR),
        }
    }

    pub fn links(mut self, links: Vec<Link>) -> TestHost {
        self.links = links;
        self
    }

    /// An address on the host link with ifindex `index`.
    pub fn address(mut self, index: u32, addr: &str) -> TestHost {
        self.addresses.push((index, addr.parse().unwrap()));
        self
    }

    /// The plugin's fields of the network conf, as JSON members without braces.
    pub fn fields(mut self, fields: &str) -> TestHost {
        self.fields = fields.to_string();
        self
    }

    /// Delegate IPAM (the conf gets an `ipam` section) to a fake that hands out `result`.
    pub fn ipam(mut self, result: CniResult) -> TestHost {
        self.ipam = Some(result);
        self
    }

    /// The RDMA subsystem's netns mode (None: it cannot be asked) and the (name, index) ib
    /// devices in the host.
    pub fn rdma(mut self, mode: Option<NetnsMode>, devices: &[(&str, u32)]) -> TestHost {
        self.netns_mode = mode;
        self.ib_devices = devices.iter().map(|(n, i)| (n.to_string(), *i)).collect();
        self
    }

    /// Moving an ib device re-creates the IPoIB netdev of this port GID beside it.
    pub fn ipoib_follows(mut self, gid_addr: Vec<u8>) -> TestHost {
        self.ipoib_gid = Some(gid_addr);
        self
    }

    pub fn sysfs(mut self, fixture: SysfsFixture) -> TestHost {
        self.sysfs = Some(fixture);
        self
    }

    pub fn dev_dir(mut self, dir: &Path) -> TestHost {
        self.dev_dir = dir.to_path_buf();
        self
    }

    pub fn build(self) -> World {
        let tmp = TempDir::new("attach-kit");
        let kernel = FakeKernel::with_host_links(self.links);
        let rdma = kernel.rdma();
        {
            let mut st = kernel.state.borrow_mut();
            for (index, addr) in self.addresses {
                st.addrs.entry(index).or_default().push(addr);
            }
            st.ipoib_gid = self.ipoib_gid;
        }
        let devices: Vec<(&str, u32)> = self
            .ib_devices
            .iter()
            .map(|(n, i)| (n.as_str(), *i))
            .collect();
        rdma.configure(self.netns_mode, &devices);
        let sys = match &self.sysfs {
            Some(fx) => fx.root().clone(),
            None => SysRoot::new(tmp.path().join("sys")),
        };
        World {
            kernel,
            rdma,
            ipam_in_conf: self.ipam.is_some(),
            ipam: FakeIpam {
                result: self.ipam,
                ..Default::default()
            },
            store: Store::new(tmp.path().join("data")),
            sys,
            _sysfs: self.sysfs,
            dev_dir: self.dev_dir,
            network: self.network,
            container: self.container,
            ifname: self.ifname,
            fields: self.fields,
            _tmp: tmp,
        }
    }
}

/// A built [`TestHost`]: the fakes, the record store, and the conf requests are made from.
pub struct World {
    pub kernel: FakeKernel,
    pub rdma: FakeRdma,
    pub ipam: FakeIpam,
    pub store: Store,
    pub sys: SysRoot,
    /// The sysfs fixture `sys` reads, kept for as long as the world.
    _sysfs: Option<SysfsFixture>,
    /// The plugin's fields of the conf; a test may change them between commands.
    pub fields: String,
    ipam_in_conf: bool,
    dev_dir: PathBuf,
    network: String,
    container: String,
    ifname: String,
    _tmp: TempDir,
}

impl World {
    /// The network conf as the runtime sends it with `command`: GC lists no valid attachment.
    pub fn conf(&self, command: Command) -> String {
        let mut conf: serde_json::Value =
            serde_json::from_str(&format!("{{{}}}", self.fields)).expect("fields are JSON");
        conf["cniVersion"] = "1.1.0".into();
        conf["name"] = self.network.as_str().into();
        conf["type"] = "rdma-ns".into();
        conf["dataDir"] = self.store.dir().display().to_string().into();
        if self.ipam_in_conf {
            conf["ipam"] = serde_json::json!({"type": "fake"});
        }
        if command == Command::Gc {
            conf["cni.dev/valid-attachments"] = serde_json::json!([]);
        }
        conf.to_string()
    }

    /// `command` with this world's conf; `netns` "" for none.
    pub fn request(&self, command: Command, netns: &str) -> Request {
        self.request_with_conf(command, &self.conf(command), netns)
    }

    pub fn request_with_conf(&self, command: Command, conf: &str, netns: &str) -> Request {
        self.request_for(command, conf, netns, &self.ifname)
    }

    /// The same for the pod interface `ifname` (a second interface of the container).
    pub fn request_for(&self, command: Command, conf: &str, netns: &str, ifname: &str) -> Request {
        let vars: Vec<(OsString, OsString)> = [
            ("CNI_COMMAND", command.as_str()),
            ("CNI_CONTAINERID", self.container.as_str()),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", ifname),
            ("CNI_PATH", "/nonexistent"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        Request {
            env: RawEnv::from_vars(vars).validate(command).unwrap(),
            conf: NetConf::parse(conf.as_bytes(), command).unwrap(),
            stdin: conf.as_bytes().to_vec(),
        }
    }

    pub fn ctx(&self, fault: Option<Fault>) -> Ctx<'_> {
        Ctx {
            kernel: &self.kernel,
            sys: &self.sys,
            store: &self.store,
            ipam: &self.ipam,
            rdma: &self.rdma,
            dev_dir: &self.dev_dir,
            fault,
        }
    }

    /// Runs `command` with this world's conf; ADD's result, None for the others.
    pub fn run(
        &self,
        command: Command,
        netns: &str,
        fault: Option<Fault>,
    ) -> Result<Option<CniResult>> {
        self.dispatch(&self.request(command, netns), fault)
    }

    /// ADD into the pod, with its result.
    pub fn add(&self, fault: Option<Fault>) -> Result<CniResult> {
        self.run(Command::Add, POD, fault)
            .map(|result| result.expect("ADD returns a result"))
    }

    /// Runs `req` as the plugin does (`Plugin for RdmaNs`), less the check that CNI_NETNS is
    /// not the plugin's own: the tests' pod is.
    pub fn dispatch(&self, req: &Request, fault: Option<Fault>) -> Result<Option<CniResult>> {
        let pc = PluginConf::from_conf(&req.conf)?;
        let ctx = self.ctx(fault);
        match req.env.command {
            Command::Add => pc.mode.add(&ctx, req, &pc).map(Some),
            Command::Check => check::check(&ctx, req, &pc).map(|()| None),
            Command::Del => lifecycle::del(&ctx, req, &pc).map(|()| None),
            Command::Gc => gc::gc(&ctx, req, pc.lock_timeout).map(|()| None),
            Command::Status => crate::attach::status(&ctx, req).map(|()| None),
            Command::Version => unreachable!("VERSION never reaches the plugin"),
        }
    }

    /// `link` appears in `ns` by no doing of the plugin's: another plugin's netdev, a clash.
    pub fn put_link(&self, ns: NsKey, link: Link) {
        self.kernel.state.borrow_mut().links.push((ns, link));
    }

    /// Every call into the fake host so far, netdev and ib device alike, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.kernel.calls()
    }
}
