#!/usr/bin/env python3
"""Builds an OCI image as an image-layout tar that `ctr images import` takes, with no registry,
no daemon and the standard library only. The lab builds every image it runs this way.

    oci.py --ref NAME:TAG [--ref NAME:TAG...] --out FILE.tar [LAYER...] [CONFIG...]

Layers, in order, each one tar layer:
  --busybox PATH        a root filesystem: busybox at /bin/busybox with a link per applet,
                        /etc/passwd, /etc/group (root and nobody), /tmp, /root, /var, /run
  --tree DIR            the files under DIR, as they are (owner root)
  --files DEST=SRC ...  one layer of files: each SRC copied to DEST (mode kept); ends at the
                        next option. DEST ending in / takes SRC's name. DEST=@TARGET makes DEST
                        a symbolic link to TARGET.
Config:
  --entrypoint JSON, --cmd JSON (JSON arrays), --env K=V (repeatable), --user U[:G], --workdir D

Layers are uncompressed tars (application/vnd.oci.image.layer.v1.tar), so a layer's digest is its
diff_id; times are 0 and owners root, so the same inputs give the same digests. The manifest is
named by the `io.containerd.image.name` annotation (the full reference) and
`org.opencontainers.image.ref.name` (the tag), once per --ref: `ctr images import` makes an
image of each name.
"""
import argparse
import hashlib
import io
import json
import os
import platform
import stat
import subprocess
import sys
import tarfile

ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def _info(name, kind, mode):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def add_bytes(tar, name, data, mode=0o644):
    info = _info(name, tarfile.REGTYPE, mode)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def add_dir(tar, name, mode=0o755):
    tar.addfile(_info(name, tarfile.DIRTYPE, mode))


def add_symlink(tar, name, target):
    info = _info(name, tarfile.SYMTYPE, 0o777)
    info.linkname = target
    tar.addfile(info)


def add_parents(tar, path, made):
    parts = path.strip("/").split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        if d not in made:
            made.add(d)
            add_dir(tar, d)


def busybox_layer(busybox):
    applets = subprocess.run([busybox, "--list"], check=True, capture_output=True, text=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ["bin", "dev", "etc", "proc", "sys", "tmp", "run", "var", "var/run", "root", "usr", "usr/bin"]:
            add_dir(tar, d, 0o1777 if d == "tmp" else 0o755)
        with open(busybox, "rb") as f:
            add_bytes(tar, "bin/busybox", f.read(), 0o755)
        for applet in sorted(set(applets.stdout.split()) - {"busybox"}):
            if "/" not in applet:
                add_symlink(tar, "bin/" + applet, "busybox")
        add_bytes(tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
        add_bytes(tar, "etc/group", b"root:x:0:\nnogroup:x:65534:\n")
    return buf.getvalue()


def tree_layer(root):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel = os.path.relpath(dirpath, root)
            if rel != ".":
                add_dir(tar, rel, stat.S_IMODE(os.lstat(dirpath).st_mode))
            for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
                path = os.path.join(dirpath, name)
                arc = os.path.normpath(os.path.join(rel, name))
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    add_symlink(tar, arc, os.readlink(path))
                elif stat.S_ISREG(st.st_mode):
                    info = _info(arc, tarfile.REGTYPE, stat.S_IMODE(st.st_mode))
                    info.size = st.st_size
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
    return buf.getvalue()


def files_layer(pairs):
    buf = io.BytesIO()
    made = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for pair in pairs:
            dest, _, src = pair.partition("=")
            if not dest or not src:
                sys.exit(f"oci.py: --files takes DEST=SRC, not {pair!r}")
            if dest.endswith("/"):
                dest += os.path.basename(src)
            dest = dest.lstrip("/")
            add_parents(tar, dest, made)
            if src.startswith("@"):
                add_symlink(tar, dest, src[1:])
                continue
            with open(src, "rb") as f:
                add_bytes(tar, dest, f.read(), stat.S_IMODE(os.stat(src).st_mode))
    return buf.getvalue()


class Blobs:
    def __init__(self, tar):
        self.tar = tar
        self.seen = set()

    def put(self, data):
        digest = hashlib.sha256(data).hexdigest()
        if digest not in self.seen:
            self.seen.add(digest)
            add_bytes(self.tar, "blobs/sha256/" + digest, data)
        return {"digest": "sha256:" + digest, "size": len(data)}


def write_image(out, refs, layers, config):
    # Per process: an `up` interrupted by killing lab.sh alone leaves its builder running.
    tmp = f"{out}.tmp-{os.getpid()}"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        blobs = Blobs(tar)
        add_dir(tar, "blobs")
        add_dir(tar, "blobs/sha256")
        descs = [blobs.put(layer) for layer in layers]
        image_config = {
            "architecture": ARCH,
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in descs]},
            "history": [{"created_by": "install/lab/oci.py"} for _ in descs],
        }
        cfg = blobs.put(json.dumps(image_config, sort_keys=True).encode())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": dict(cfg, mediaType="application/vnd.oci.image.config.v1+json"),
            "layers": [dict(d, mediaType="application/vnd.oci.image.layer.v1.tar") for d in descs],
        }
        man = blobs.put(json.dumps(manifest, sort_keys=True).encode())
        index = {
            "schemaVersion": 2,
            "manifests": [
                dict(
                    man,
                    mediaType="application/vnd.oci.image.manifest.v1+json",
                    platform={"architecture": ARCH, "os": "linux"},
                    annotations={"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag_of(ref)},
                )
                for ref in refs
            ],
        }
        add_bytes(tar, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add_bytes(tar, "index.json", json.dumps(index).encode())
    os.replace(tmp, out)


def tag_of(ref):
    return ref.rsplit(":", 1)[-1] if ":" in ref.rsplit("/", 1)[-1] else "latest"


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ref", required=True, action="append", dest="refs")
    p.add_argument("--out", required=True)
    p.add_argument("--busybox", action="append", default=[], dest="layers", type=lambda v: ("busybox", v))
    p.add_argument("--tree", action="append", dest="layers", type=lambda v: ("tree", v))
    p.add_argument("--files", nargs="+", action="append", dest="layers", type=lambda v: ("file", v))
    p.add_argument("--entrypoint", type=json.loads)
    p.add_argument("--cmd", type=json.loads)
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--user")
    p.add_argument("--workdir", default="/")
    return p.parse_args(argv)


def main(argv):
    args = parse(argv)
    layers = []
    for entry in args.layers:
        if isinstance(entry, list):
            layers.append(files_layer([v for _, v in entry]))
        elif entry[0] == "busybox":
            layers.append(busybox_layer(entry[1]))
        else:
            layers.append(tree_layer(entry[1]))
    if not layers:
        sys.exit("oci.py: an image needs at least one layer")
    config = {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + args.env}
    config["WorkingDir"] = args.workdir
    for key, value in (("Entrypoint", args.entrypoint), ("Cmd", args.cmd), ("User", args.user)):
        if value is not None:
            config[key] = value
    write_image(args.out, args.refs, layers, config)


if __name__ == "__main__":
    main(sys.argv[1:])
