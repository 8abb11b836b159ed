#!/usr/bin/env bash
# Writes the lab's certificates and kubeconfigs with openssl into DIR (install/lab.sh calls it
# once per lab, into $LAB_STATE/pki):
#
#   install/lab/pki.sh DIR API-ADDRESS LOOPBACK-PORT NODE...
#
# One CA signs everything (ECDSA P-256, valid 30 days: a lab lives hours). The API server's
# certificate names the API address, 127.0.0.1 (the host's forwarder) and the `kubernetes`
# Service's first address and names. Each client certificate carries the identity Kubernetes'
# authorizers expect (the Node authorizer: CN system:node:<name> in O system:nodes). The service
# account signing key pair is sa.key / sa.pub. Kubeconfigs: admin.conf (API address, for use
# inside the lab's netns), admin-host.conf (127.0.0.1:LOOPBACK-PORT, for the host),
# controller-manager.conf, scheduler.conf, kube-proxy.conf and <node>.conf per node.
set -euo pipefail
dir=$1 api=$2 port=$3
shift 3
nodes=("$@")
mkdir -p "$dir"
cd "$dir"
umask 077

ec_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

openssl_ca() {
    ec_key ca.key
    openssl req -x509 -new -key ca.key -days 30 -subj "/CN=rdma-ns-lab-ca" -out ca.crt \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}

# cert NAME SUBJECT EXTENDED-KEY-USAGE [SUBJECT-ALT-NAMES]
cert() {
    local name=$1 subj=$2 eku=$3 san=${4:-}
    ec_key "$name.key"
    openssl req -new -key "$name.key" -subj "$subj" -out "$name.csr"
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$eku"
        [[ -z $san ]] || echo "subjectAltName=$san"
    } >"$name.ext"
    openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
        -extfile "$name.ext" -out "$name.crt" 2>/dev/null
    rm -f "$name.csr" "$name.ext"
}

# kubeconfig FILE SERVER CERT-NAME USER
kubeconfig() {
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rdma-ns-lab
  cluster:
    server: $2
    certificate-authority-data: $(base64 -w0 ca.crt)
users:
- name: $4
  user:
    client-certificate-data: $(base64 -w0 "$3.crt")
    client-key-data: $(base64 -w0 "$3.key")
contexts:
- name: rdma-ns-lab
  context:
    cluster: rdma-ns-lab
    user: $4
current-context: rdma-ns-lab
EOF
}

openssl_ca
cert apiserver "/CN=kube-apiserver" serverAuth \
    "IP:$api,IP:127.0.0.1,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
cert admin "/O=system:masters/CN=rdma-ns-lab-admin" clientAuth
cert controller-manager "/CN=system:kube-controller-manager" clientAuth
cert scheduler "/CN=system:kube-scheduler" clientAuth
cert kube-proxy "/CN=system:kube-proxy" clientAuth
ec_key sa.key
openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null

kubeconfig admin.conf "https://$api:6443" admin rdma-ns-lab-admin
kubeconfig admin-host.conf "https://127.0.0.1:$port" admin rdma-ns-lab-admin
kubeconfig controller-manager.conf "https://$api:6443" controller-manager system:kube-controller-manager
kubeconfig scheduler.conf "https://$api:6443" scheduler system:kube-scheduler
kubeconfig kube-proxy.conf "https://$api:6443" kube-proxy system:kube-proxy
for node in "${nodes[@]}"; do
    cert "$node" "/O=system:nodes/CN=system:node:$node" clientAuth
    kubeconfig "$node.conf" "https://$api:6443" "$node" "system:node:$node"
done
