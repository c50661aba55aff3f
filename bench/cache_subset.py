#!/usr/bin/env python3
"""A kernel cache cut down to a few specs, small enough to carry to the GPU host.

    python3 bench/cache_subset.py MANIFEST CUBIN_ROOT OUT SPEC_TAG[,SPEC_TAG...]

Keeps, from MANIFEST (a `generated/manifest.json`, e.g. an older commit's through `git
show REV:generated/manifest.json`), the named specs of every arch and the kernels they
serve, and copies those kernels' cubins from CUBIN_ROOT (a built `generated/`; a kernel's
cubin is named by its id, so one build holds the cubins of any manifest whose kernels it
shares). The runtime checks each cubin's hash against the manifest before loading it.
"""
import json, shutil, sys
from pathlib import Path


def main():
    manifest, root, out, tags = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4].split(",")
    m = json.load(open(manifest))
    keep = set()
    for arch in m["archs"].values():
        arch["specs"] = {t: e for t, e in arch["specs"].items() if t in tags}
        for e in arch["specs"].values():
            keep.add(e["default"])
            keep.update(e.get("tuned", {}).values())
    m["archs"] = {a: e for a, e in m["archs"].items() if e["specs"]}
    m["kernels"] = {k: v for k, v in m["kernels"].items() if k in keep}
    missing = [t for t in tags if not any(t in a["specs"] for a in m["archs"].values())]
    if missing:
        sys.exit(f"not in {manifest}: {', '.join(missing)}")
    for k in m["kernels"].values():
        # a kernel's varlen build lies beside its cubin (fa4_spec::varlen_cubin_path)
        varlen = [k["cubin"][: -len(".cubin")] + ".varlen.cubin"] if k.get("varlen_cubin_hash") else []
        for rel in [k["cubin"], *varlen]:
            dst = out / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / rel, dst)
    (out / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    print(f"{out}: {len(m['kernels'])} kernels for {len(tags)} specs")


if __name__ == "__main__":
    main()
