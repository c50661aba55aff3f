# Sourced by the device-call scripts (bench/softcap_tune.sh, bench/headdim_check.sh). Here,
# the kit a call carries; there, a call's steps under one time limit, each step's log and
# exit status under $OUT/r, and what the call leaves for the trip back ($OUT/r.tgz, the
# tuning database's export).
#
#   pack_kit NAME BUILD      # here: BUILD (cubins and report), the committed export and the
#                            # binary into .device (NAME-build.tar.xz, sm90.json.xz, fa4-gen.xz)
#   unpack_kit NAME          # there: the binary as $B, the export in /tmp/db.sled, the build
#                            # in /tmp/build; then steps_begin, with steps_end as the EXIT trap
#   step NAME NEED CMD...    # CMD with its log in $R/NAME.log, if NEED seconds are left
#   pack_binaries            # here: the binary, the runtime library and the commit into .device
#   unpack_binaries          # there: them as $B and .device/libfa4_runtime.so

pack_kit() {
    local name=$1 build=$2
    rm -rf "$build/src"
    tar cf - -C "$(dirname "$build")" "$(basename "$build")" | xz -T0 -6 > ".device/$name-build.tar.xz"
    xz -T0 -6 -c tuning-db/sm90.json > .device/sm90.json.xz
    xz -T0 -6 -c target/release/fa4-gen > .device/fa4-gen.xz
    du -ch ".device/$name-build.tar.xz" .device/sm90.json.xz .device/fa4-gen.xz | tail -1
}

unpack_kit() {
    # globals: the EXIT trap runs after the caller's function has returned
    B=$PWD/.device/fa4-gen
    steps_begin
    trap 'steps_end /tmp/db.sled' EXIT
    xz -dc .device/fa4-gen.xz > "$B"
    chmod +x "$B"
    xz -dc .device/sm90.json.xz > /tmp/sm90.json
    mkdir -p /tmp/kit
    tar xJf ".device/$1-build.tar.xz" -C /tmp/kit
    rm -rf /tmp/build
    mv /tmp/kit/* /tmp/build
    "$B" db import /tmp/sm90.json --db /tmp/db.sled -q > "$R/import.log" 2>&1
}

steps_begin() {
    # globals: the EXIT trap runs after the caller's function has returned
    R=$OUT/r
    LIMIT=${LIMIT:-570}
    START=$(date +%s)
    mkdir -p "$R"
    { nvidia-smi -q | grep -iE "serial" | head -1; } > "$R/gpu.txt" 2> /dev/null || true
}

left() { echo $((LIMIT - ($(date +%s) - START))); }

step() {
    local name=$1 need=$2 t0 rc=0
    shift 2
    if [ "$(left)" -lt "$need" ]; then
        echo "SKIP $name (left $(left)s)" | tee -a "$R/steps.txt"
        return
    fi
    t0=$(date +%s)
    timeout $(($(left) - 15)) "$@" > "$R/$name.log" 2>&1 || rc=$?
    echo "$name rc=$rc $(($(date +%s) - t0))s" | tee -a "$R/steps.txt"
}

steps_end() {
    if [ -n "${1:-}" ] && [ -d "$1" ]; then
        "$B" db export --db "$1" --out "$R/sm90-new.json" > "$R/export.log" 2>&1 || true
        xz -T0 "$R/sm90-new.json" 2> /dev/null || true
    fi
    tar czf "$OUT/r.tgz" -C "$OUT" r
}

pack_binaries() {
    mkdir -p .device
    # compressed: the tree and what a call carries travel within 64 MiB
    xz -T0 -6 -c target/release/fa4-gen > .device/fa4-gen.xz
    xz -T0 -6 -c target/release/libfa4_runtime.so > .device/libfa4_runtime.so.xz
    git describe --always --dirty --abbrev=8 > .device/commit
}

unpack_binaries() {
    # global: the callers' steps run $B
    B=$PWD/.device/fa4-gen
    xz -dc .device/fa4-gen.xz > "$B"
    xz -dc .device/libfa4_runtime.so.xz > .device/libfa4_runtime.so
    chmod +x "$B"
}
