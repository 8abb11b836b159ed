//! A real kube-apiserver and etcd on 127.0.0.1 for the root tier (tests/dra_apiserver.rs,
//! tests/helm.rs), and the lab's cache of built components (install/lab/build.sh) they come
//! from.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// The version install/lab/versions pins for `component`.
pub fn lab_version(component: &str) -> String {
    let versions =
        std::fs::read_to_string(repo("install/lab/versions")).expect("install/lab/versions");
    versions
        .lines()
        .find_map(|l| {
            l.strip_prefix(component)
                .filter(|r| r.starts_with(char::is_whitespace))
                .and_then(|r| r.split_whitespace().nth(1))
        })
        .unwrap_or_else(|| panic!("a {component} line in install/lab/versions"))
        .to_string()
}

/// Where install/lab/build.sh puts `component`: `$RDMA_NS_LAB_CACHE` (default
/// ~/.cache/rdma-ns/lab) `/bin/<component>-<the version pinned in install/lab/versions>`.
pub fn lab_bin_dir(component: &str) -> PathBuf {
    let cache = std::env::var_os("RDMA_NS_LAB_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/rdma-ns/lab")
        });
    cache
        .join("bin")
        .join(format!("{component}-{}", lab_version(component)))
}

pub fn lab_kube_dir() -> PathBuf {
    lab_bin_dir("kubernetes")
}

/// The directory with kube-apiserver, etcd and kubectl: `$RDMA_NS_KUBE_BIN` or the lab's.
pub fn kube_bin() -> Option<PathBuf> {
    let dir = std::env::var_os("RDMA_NS_KUBE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(lab_kube_dir);
    ["kube-apiserver", "etcd", "kubectl"]
        .iter()
        .all(|b| dir.join(b).exists())
        .then_some(dir)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `cmd`; its stdout, or a panic with its output.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// etcd and kube-apiserver on loopback, with an admin kubeconfig; both killed on drop.
pub struct ApiServer {
    pub dir: PathBuf,
    bin: PathBuf,
    children: Vec<Child>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// etcd on loopback with its data under `dir`; its client port.
fn start_etcd(bin: &Path, dir: &Path) -> (Child, u16) {
    let (client, peer) = (free_port(), free_port());
    let etcd = Command::new(bin.join("etcd"))
        .args(["--data-dir", &dir.join("etcd").display().to_string()])
        .args([
            "--listen-client-urls",
            &format!("http://127.0.0.1:{client}"),
        ])
        .args([
            "--advertise-client-urls",
            &format!("http://127.0.0.1:{client}"),
        ])
        .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .args([
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
        ])
        .args([
            "--initial-cluster",
            &format!("default=http://127.0.0.1:{peer}"),
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("etcd.log")).unwrap())
        .spawn()
        .expect("etcd");
    (etcd, client)
}

impl ApiServer {
    pub fn start(bin: PathBuf) -> ApiServer {
        static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir =
            std::env::temp_dir().join(format!("rdma-ns-apiserver-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        pki(&dir);
        let (etcd, client) = start_etcd(&bin, &dir);
        let secure = free_port();
        let d = |f: &str| dir.join(f).display().to_string();
        let apiserver = Command::new(bin.join("kube-apiserver"))
            .args(["--etcd-servers", &format!("http://127.0.0.1:{client}")])
            .args([
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                &secure.to_string(),
            ])
            .args(["--advertise-address", "127.0.0.1"])
            // No `kubernetes` Service endpoints: a loopback address may not be one.
            .args(["--endpoint-reconciler-type", "none"])
            .args([
                "--tls-cert-file",
                &d("apiserver.crt"),
                "--tls-private-key-file",
                &d("apiserver.key"),
            ])
            .args(["--client-ca-file", &d("ca.crt")])
            .args(["--service-account-key-file", &d("sa.pub")])
            .args(["--service-account-signing-key-file", &d("sa.key")])
            .args(["--service-account-issuer", "https://kubernetes.default.svc"])
            .args(["--authorization-mode", "Node,RBAC"])
            // As the lab's (install/lab.sh): the installer's reconcile container is privileged.
            .args(["--allow-privileged=true"])
            .args(["--service-cluster-ip-range", "10.96.0.0/16"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("apiserver.log")).unwrap())
            .spawn()
            .expect("kube-apiserver");
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster:\n    server: https://127.0.0.1:{secure}\n    certificate-authority: {}\nusers:\n- name: admin\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: t\n  context: {{cluster: t, user: admin}}\ncurrent-context: t\n",
            d("ca.crt"), d("admin.crt"), d("admin.key")
        );
        std::fs::write(dir.join("admin.conf"), kubeconfig).unwrap();
        let mut s = ApiServer {
            dir,
            bin,
            children: vec![etcd, apiserver],
        };
        s.wait_ready();
        s
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.conf")
    }

    pub fn kubectl(&self, args: &[&str]) -> Command {
        let mut c = Command::new(self.bin.join("kubectl"));
        c.arg("--kubeconfig").arg(self.kubeconfig()).args(args);
        c
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            for c in &mut self.children {
                if let Ok(Some(status)) = c.try_wait() {
                    panic!(
                        "{status}: {}{}",
                        std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default(),
                        std::fs::read_to_string(self.dir.join("apiserver.log")).unwrap_or_default()
                    );
                }
            }
            let ok = self
                .kubectl(&["get", "--raw", "/readyz"])
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready in 120 s: {}",
                std::fs::read_to_string(self.dir.join("apiserver.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    pub fn apply(&self, file: &Path) -> String {
        run(self.kubectl(&["apply", "-f"]).arg(file))
    }

    pub fn create_json(&self, v: &Value) {
        let path = self.dir.join("obj.json");
        std::fs::write(&path, v.to_string()).unwrap();
        run(self.kubectl(&["create", "-f"]).arg(&path));
    }

    pub fn get(&self, args: &[&str]) -> Value {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&run(&mut self.kubectl(&a))).unwrap()
    }
}

/// The lab's way (install/lab/pki.sh): one CA, the API server's certificate for 127.0.0.1, an
/// admin in system:masters, the service account key pair.
fn pki(dir: &Path) {
    let sh = format!(
        r#"set -e; cd {d}
key() {{ openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }}
key ca.key; openssl req -x509 -new -key ca.key -days 1 -subj /CN=test-ca -out ca.crt -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
cert() {{ key "$1.key"; openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\n%s\n' "$3" "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile "$1.ext" -out "$1.crt" 2>/dev/null; }}
cert apiserver /CN=kube-apiserver serverAuth subjectAltName=IP:127.0.0.1,DNS:localhost
cert admin /O=system:masters/CN=test-admin clientAuth ''
key sa.key; openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null"#,
        d = dir.display()
    );
    run(Command::new("bash").args(["-c", &sh]));
}
