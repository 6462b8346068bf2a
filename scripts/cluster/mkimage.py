#!/usr/bin/env python3
"""Write a single-layer OCI image archive (an OCI layout as a tar) from a
root filesystem directory, named for `ctr images import`.

    mkimage.py ROOTFS OUT.tar NAME [--entrypoint ARG]... [--cmd ARG]...
               [--env K=V]... [--workdir DIR] [--user UID[:GID]]

The layer is reproducible (sorted entries, mtime 0, owner root), so the same
rootfs gives the same image digest. NAME should be fully qualified
(docker.io/library/busybox:stable); the index carries it in the
io.containerd.image.name annotation, which `ctr images import` uses.
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import stat
import tarfile


def layer_bytes(rootfs):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = []
        for dirpath, dirnames, filenames in os.walk(rootfs):
            dirnames.sort()
            for n in sorted(dirnames + filenames):
                entries.append(os.path.join(dirpath, n))
        for path in entries:
            rel = os.path.relpath(path, rootfs)
            info = tar.gettarinfo(path, arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    diff = raw.getvalue()
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, compresslevel=6) as g:
        g.write(diff)
    return diff, gz.getvalue()


def blob(tar, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo("blobs/sha256/" + digest.split(":", 1)[1])
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))
    return digest


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rootfs")
    ap.add_argument("out")
    ap.add_argument("name")
    ap.add_argument("--entrypoint", action="append", default=None)
    ap.add_argument("--cmd", action="append", default=None)
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--workdir", default="/")
    # The image's USER (a Dockerfile's USER): who its containers run as
    # unless their securityContext says otherwise. None: root.
    ap.add_argument("--user")
    a = ap.parse_args()

    diff, gz = layer_bytes(a.rootfs)
    env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + a.env
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": env, "WorkingDir": a.workdir},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(diff).hexdigest()]},
        "history": [{"created_by": "pav scripts/cluster/mkimage.py"}],
    }
    if a.entrypoint:
        config["config"]["Entrypoint"] = a.entrypoint
    if a.cmd:
        config["config"]["Cmd"] = a.cmd
    if a.user:
        config["config"]["User"] = a.user
    cfg = json.dumps(config, sort_keys=True).encode()

    tmp = a.out + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        layer_digest = blob(tar, gz)
        cfg_digest = blob(tar, cfg)
        manifest = json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": cfg_digest, "size": len(cfg)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": layer_digest, "size": len(gz)}],
        }, sort_keys=True).encode()
        man_digest = blob(tar, manifest)
        tag = a.name.rsplit(":", 1)[1] if ":" in a.name.rsplit("/", 1)[-1] else "latest"
        index = json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": man_digest, "size": len(manifest),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"io.containerd.image.name": a.name,
                                "org.opencontainers.image.ref.name": tag},
            }],
        }, sort_keys=True).encode()
        for name, data in (("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, a.out)
    print(man_digest)


if __name__ == "__main__":
    main()
