#!/usr/bin/env python3
"""The Python package as an engine installs it: one wheel holding the module, the runtime
library and the kernel cache, so that serving needs no compiler, no repository and no
environment variable.

    cargo build --release
    python3 scripts/build_wheel.py --arch sm90            # dist/fa4gen-<version>-py3-none-linux_x86_64.whl
    pip install dist/fa4gen-*.whl

--arch keeps the cache's kernels for those GPUs only (the whole cache is 360 MB of
cubins, sm90's 127 MB); --cache and --lib take another cache folder or library. The
library is loaded with ctypes, not imported, so the wheel is tagged py3-none for the
platform it was built on. Written with zipfile alone: nothing to download.
"""

import argparse
import base64
import csv
import hashlib
import io
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "fa4gen"
# Every module of the package (the library and the cache are added beside them).
MODULES = sorted(p.name for p in (ROOT / "python" / PACKAGE).glob("*.py"))


def workspace_version():
    """Cargo's workspace version, with the commit as a local label when there is one."""
    text = (ROOT / "Cargo.toml").read_text()
    version = re.search(r'^\[workspace\.package\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.M | re.S).group(1)
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=8", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        return "%s+g%s" % (version, commit)
    except (OSError, subprocess.CalledProcessError):
        return version


def cut_manifest(manifest, archs):
    """The manifest with only `archs` (all if empty) and the kernels they serve."""
    m = json.loads(json.dumps(manifest))
    if archs:
        unknown = sorted(set(archs) - set(m["archs"]))
        if unknown:
            sys.exit("not in the cache: %s (it has %s)" % (", ".join(unknown), ", ".join(m["archs"])))
        m["archs"] = {a: e for a, e in m["archs"].items() if a in archs}
    keep = set()
    for arch in m["archs"].values():
        for e in arch["specs"].values():
            keep.add(e["default"])
            keep.update(e.get("tuned", {}).values())
    m["kernels"] = {k: v for k, v in m["kernels"].items() if k in keep}
    return m


def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", default="", help="comma-separated archs to ship [every arch in the cache]")
    ap.add_argument("--cache", default=str(ROOT / "generated"), help="kernel cache folder [generated]")
    ap.add_argument("--lib", default=str(ROOT / "target/release/libfa4_runtime.so"), help="the runtime library")
    ap.add_argument("--out", default=str(ROOT / "dist"), help="folder for the wheel [dist]")
    ap.add_argument("--platform", default="linux_x86_64", help="platform tag [linux_x86_64]")
    a = ap.parse_args()

    lib, cache = Path(a.lib), Path(a.cache)
    if not lib.is_file():
        sys.exit("%s not found: build it with `cargo build --release` or pass --lib" % lib)
    if not (cache / "manifest.json").is_file():
        sys.exit("%s has no manifest.json: build the cache with `fa4-gen build-cache` or pass --cache" % cache)
    manifest = cut_manifest(json.loads((cache / "manifest.json").read_text()),
                            [x for x in a.arch.split(",") if x])
    files = {"%s/%s" % (PACKAGE, name): (ROOT / "python" / PACKAGE / name).read_bytes() for name in MODULES}
    files[PACKAGE + "/libfa4_runtime.so"] = lib.read_bytes()
    files[PACKAGE + "/cache/manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    for kernel in manifest["kernels"].values():
        # a kernel's varlen build lies beside its cubin (fa4_spec::varlen_cubin_path)
        names = [kernel["cubin"]]
        if kernel.get("varlen_cubin_hash"):
            names.append(kernel["cubin"][: -len(".cubin")] + ".varlen.cubin")
        for name in names:
            cubin = cache / name
            if not cubin.is_file():
                sys.exit("%s: the manifest's cubin is missing; rebuild the cache with `fa4-gen build-cache`" % cubin)
            files["%s/cache/%s" % (PACKAGE, name)] = cubin.read_bytes()

    version = workspace_version()
    info = "%s-%s.dist-info" % (PACKAGE, version)
    files[info + "/METADATA"] = (
        "Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
        "Summary: FlashAttention prefill kernels generated and tuned ahead of time, with their runtime\n"
        "Requires-Python: >=3.9\nLicense: Apache-2.0\n" % (PACKAGE, version)).encode()
    tag = "py3-none-" + a.platform
    files[info + "/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: fa4-gen scripts/build_wheel.py\n"
                              "Root-Is-Purelib: false\nTag: %s\n" % tag).encode()
    files[info + "/top_level.txt"] = (PACKAGE + "\n").encode()
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data in files.items():
        writer.writerow([name, digest(data), len(data)])
    writer.writerow([info + "/RECORD", "", ""])
    files[info + "/RECORD"] = record.getvalue().encode()

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / ("%s-%s-%s.whl" % (PACKAGE, version, tag))
    partial = wheel.with_suffix(".whl.partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    partial.replace(wheel)
    print("%s: %d kernels for %s, %.1f MB" % (wheel, len(manifest["kernels"]), ", ".join(manifest["archs"]),
                                               wheel.stat().st_size / 1e6))


if __name__ == "__main__":
    main()
