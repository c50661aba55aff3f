#!/bin/bash
# The GPU check of what `fa4-gen build-cache --borrow-sinks` adds (each spec that carries
# sinks and was never tuned, served its sink-free twin's tuned tiles, built for it),
# prepared here without a GPU and run in one device call:
#
#   bench/borrowed_check.sh prepare      # here (about 12 minutes on 2 cores): .device/borrow*
#   bash bench/borrowed_check.sh run     # on the GPU host, carrying .device; results in $OUT/r
#
# prepare: 1. `build-cache --borrow-sinks` into a scratch folder (the committed cache is
# left as it is); 2. every borrowed kernel compiled into a build folder, one `fa4-gen
# compile --config-filter TAG` per config tag over the specs that borrow it, so that
# `verify` with the same arguments finds every kernel it plans already built; 3. two
# cut-down caches (bench/cache_subset.py), the committed manifest's and the borrowing
# one's, for the specs bench/served_ab.py times.
# run: `fa4-gen verify` of each group (every verify case), then bench/served_ab.py: the
# kernels both caches serve, side by side through the Python binding (steps, logs and the
# archive by bench/device_steps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
TIMED=sm90_bf16_d128_causal_sinks,sm90_bf16_d128_none_sinks,sm90_bf16_d192_causal_sinks,sm90_bf16_d256_causal_sinks,sm90_bf16_d256_none_sinks,sm90_bf16_d128_local_sinks

prepare() {
    local B=target/release/fa4-gen W
    W=$(mktemp -d)
    cargo build --release --quiet
    "$B" build-cache --borrow-sinks --out "$W/gen" -q
    # template dtypes head-dims masks features tag, one line per borrowed config tag
    python3 - "$W/gen/manifest.json" > .device/borrow-groups.txt <<'EOF'
import collections, json, sys
m = json.load(open(sys.argv[1]))
groups = collections.defaultdict(lambda: (set(), set(), set()))
for a in m["archs"].values():
    for e in a["specs"].values():
        if not e.get("borrowed_from"):
            continue
        for kid in set(e["tuned"].values()) - {e["default"]}:
            k = m["kernels"][kid]
            s, c = k["spec"], k["config"]
            feats = "+".join(f for f in ("sinks", "softcap", "paged") if s["features"].get(f))
            tag = "m%dn%dw%ds%d" % (c["block_m"], c["block_n"], c["warps"], c["stages"]) + "".join(
                "_%s%d" % kv for kv in sorted(c["switches"].items()))
            g = groups[(k["template"], feats, tag)]
            g[0].add(s["dtype"]); g[1].add(s["head_dim"]); g[2].add(s["mask"])
for (t, f, tag), (dts, hds, ms) in sorted(groups.items()):
    print(t, ",".join(sorted(dts)), ",".join(map(str, sorted(hds))), ",".join(sorted(ms)), f, tag)
EOF
    while read -r t dt hd m f tag; do
        "$B" compile --arch sm90 --template "$t" --dtype "$dt" --head-dim "$hd" --mask "$m" \
            --features "$f" --config-filter "$tag" --out "$W/vb" -q
    done < .device/borrow-groups.txt
    rm -rf "$W/vb/src"
    git show HEAD:generated/manifest.json > "$W/committed.json"
    python3 bench/cache_subset.py "$W/committed.json" "$W/gen" "$W/old" "$TIMED"
    python3 bench/cache_subset.py "$W/gen/manifest.json" "$W/gen" "$W/new" "$TIMED"
    tar cf - -C "$W" old new vb | xz -T0 -6 > .device/borrow.tar.xz
    xz -T0 -6 -c "$B" > .device/fa4-gen.xz
    xz -T0 -6 -c target/release/libfa4_runtime.so > .device/libfa4_runtime.so.xz
    rm -rf "$W"
    echo "$(wc -l < .device/borrow-groups.txt) config tags; carry .device and run: bash bench/borrowed_check.sh run"
}

run() {
    B=$PWD/.device/fa4-gen
    source bench/device_steps.sh
    steps_begin
    trap steps_end EXIT
    mkdir -p /tmp/x
    xz -dc .device/fa4-gen.xz > "$B"; chmod +x "$B"
    xz -dc .device/libfa4_runtime.so.xz > python/fa4gen/libfa4_runtime.so
    tar xJf .device/borrow.tar.xz -C /tmp/x
    local n=0
    while read -r t dt hd m f tag; do
        n=$((n + 1))
        step "verify-$n" 20 "$B" verify --arch sm90 --template "$t" --dtype "$dt" --head-dim "$hd" \
            --mask "$m" --features "$f" --config-filter "$tag" --build-dir /tmp/x/vb -q \
            --json "$R/verify-$n.json"
    done < .device/borrow-groups.txt
    echo "verify: $n groups, $(grep -c '^verify-.* rc=[^0]' "$R/steps.txt") failed" | tee -a "$R/steps.txt"
    PYTHONPATH=$PWD/python step ab 60 python3 bench/served_ab.py /tmp/x/old /tmp/x/new --json "$R/ab.json"
}

"${1:?usage: bench/borrowed_check.sh prepare|run}"
