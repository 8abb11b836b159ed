#!/usr/bin/env python3
"""Builds the e2e test images locally from Debian's busybox-static, with no registry.

    mkimage.py BUSYBOX OUTDIR NAME=CMD [NAME=CMD ...]

writes
  OUTDIR/rootfs.tar  a root filesystem (busybox and its applet links, /etc/passwd, /etc/group)
                     for `podman import`
  OUTDIR/oci.tar     an OCI image layout (oci-layout, index.json, blobs/sha256/...) holding one
                     image per NAME=CMD, all sharing the rootfs layer, for `ctr images import`.
                     CMD is a space-separated command (the image config's Cmd); each manifest is
                     named by the `io.containerd.image.name` annotation.
Only the standard library is used; the layer is an uncompressed tar (media type
application/vnd.oci.image.layer.v1.tar) so its digest is its diff_id.
"""
import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tarfile


ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def add_file(tar, name, data, mode=0o644):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def add_dir(tar, name, mode=0o755):
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = mode
    info.mtime = 0
    tar.addfile(info)


def rootfs_tar(busybox):
    applets = subprocess.run([busybox, "--list"], check=True, capture_output=True, text=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ["bin", "dev", "etc", "proc", "sys", "tmp", "run", "var", "root"]:
            add_dir(tar, d, 0o1777 if d == "tmp" else 0o755)
        with open(busybox, "rb") as f:
            add_file(tar, "bin/busybox", f.read(), 0o755)
        for applet in sorted(set(applets.stdout.split())):
            if applet == "busybox" or "/" in applet:
                continue
            info = tarfile.TarInfo("bin/" + applet)
            info.type = tarfile.SYMTYPE
            info.linkname = "busybox"
            info.mode = 0o777
            info.mtime = 0
            tar.addfile(info)
        add_file(tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
        add_file(tar, "etc/group", b"root:x:0:\n")
    return buf.getvalue()


def blob(blobs, data):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs, digest), "wb") as f:
        f.write(data)
    return "sha256:" + digest, len(data)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    busybox, out = sys.argv[1], sys.argv[2]
    images = [arg.split("=", 1) for arg in sys.argv[3:]]
    os.makedirs(out, exist_ok=True)
    layer = rootfs_tar(busybox)
    with open(os.path.join(out, "rootfs.tar"), "wb") as f:
        f.write(layer)

    layout = os.path.join(out, "oci")
    blobs = os.path.join(layout, "blobs", "sha256")
    os.makedirs(blobs, exist_ok=True)
    layer_digest, layer_size = blob(blobs, layer)
    manifests = []
    for name, cmd in images:
        config = {
            "architecture": ARCH,
            "os": "linux",
            "config": {"Env": ["PATH=/bin"], "Cmd": cmd.split(), "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
            "history": [{"created_by": "tests/e2e/mkimage.py from busybox-static"}],
        }
        config_digest, config_size = blob(blobs, json.dumps(config, sort_keys=True).encode())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config_size,
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest,
                    "size": layer_size,
                }
            ],
        }
        digest, size = blob(blobs, json.dumps(manifest, sort_keys=True).encode())
        manifests.append(
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest,
                "size": size,
                "platform": {"architecture": ARCH, "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                },
            }
        )
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": manifests}, f)
    with tarfile.open(os.path.join(out, "oci.tar"), "w", format=tarfile.PAX_FORMAT) as tar:
        for entry in ["oci-layout", "index.json", "blobs"]:
            tar.add(os.path.join(layout, entry), arcname=entry)


if __name__ == "__main__":
    main()
