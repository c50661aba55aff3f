#!/usr/bin/env bash
# compute-sanitizer over small calls of the Hopper kernels, one device call:
#
#   here:   cargo build --release && bash bench/sanitize.sh prepare
#   there:  bash bench/sanitize.sh run         (carrying .device; results in $OUT/r.tgz)
#
# Each kernel below runs `verify` on one small standard case (two sequences of 128
# tokens) under racecheck (every severity, `info` included), then under memcheck and
# synccheck. Only fa4-gen's kernel is instrumented, not verify's reference: racecheck
# slows a kernel by orders of magnitude (three cases of up to 2,048 tokens, every kernel
# instrumented, took more than 500 s for one kernel; this case, 1 to 3 s). The kernels cover each way the warp-specialised kernel
# synchronises: pingpong turns at the GEMMs and at the MUFU, three consumers, a
# persistent grid with an O slot per consumer and with one O slot taken in turn (d256),
# cluster pairs, K/V over pages (copies and TMA boxes), e4m3 (V transposed by the
# producer), pack-GQA. r/logs.tgz keeps each <tool>-<kernel>.log (a kernel that reaches
# the print limit may run out its CAP seconds: rc 124 after its reports); r/summary.txt
# counts the reports per kernel, kind and source line (bench/sanitize_summary.py).
set -u
cd "$(dirname "$0")/.."
# shellcheck source=bench/device_steps.sh
. bench/device_steps.sh

# dtype head-dim mask features config (the config's tag, or "default")
KERNELS=(
    "bf16 256 causal none m128n64w12s2_overlap1_persistent1_pingpong1_ws1"
    "bf16 128 causal none default"
    "bf16 128 none none m128n128w12s2_cluster2_overlap1_pingpong1_ws1"
    "bf16 128 none none m128n128w12s2_overlap1_persistent1_pingpong1_ws1"
    "bf16 128 causal paged default"
    "e4m3 128 causal none default"
    "e4m3 128 none paged default"
    "bf16 64 causal none m128n128w12s2_mufuturn1_overlap1_pingpong1_ws1"
    "bf16 128 causal none m128n128w12s2_overlap1_packgqa1_pingpong1_ws1"
    "bf16 64 causal none m192n128w16s2_mufuturn1_overlap1_pingpong1_ws1"
)
CASES=s128
# seconds a kernel may take under one tool
CAP=${CAP:-45}

prepare() {
    pack_binaries
    du -ch .device/*.xz | tail -1
}

# A KERNELS line as NAME, SPEC (the spec's flags) and PICK (its config's filter; none for
# the default).
parse() {
    local dtype hd mask features config
    read -r dtype hd mask features config <<< "$1"
    NAME="$dtype-d$hd-$mask-$features-${config%%_ws1}"
    SPEC=(--arch sm90 --template hopper --dtype "$dtype" --head-dim "$hd" --mask "$mask" --features "$features")
    PICK=()
    if [ "$config" != default ]; then PICK=(--config-filter "$config"); fi
}

# The kernel parse() read, under one tool: TOOL [sanitizer options]
under() {
    local tool=$1
    shift
    step "$tool-$NAME" 20 timeout "$CAP" "$SAN" --tool "$tool" --kernel-name kns=fa4_fwd "$@" --print-limit 200 \
        "$B" verify "${SPEC[@]}" "${PICK[@]}" --cases "$CASES" --seed 7 --build-dir /tmp/build -q
}

run() {
    unpack_binaries
    steps_begin
    trap 'steps_end' EXIT
    cp .device/commit "$R/commit"
    nvidia-smi --query-gpu=name,driver_version --format=csv > "$R/gpu.csv" 2>&1
    SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2> /dev/null | head -1)
    "$SAN" --version > "$R/sanitizer-version.txt" 2>&1
    local k
    for k in "${KERNELS[@]}"; do
        parse "$k"
        step "compile-$NAME" 10 "$B" compile "${SPEC[@]}" "${PICK[@]:---default-only}" --out /tmp/build -q
        under racecheck --racecheck-report all --racecheck-detect-level info
    done
    for k in "${KERNELS[@]}"; do
        parse "$k"
        under memcheck
        under synccheck
    done
    python3 bench/sanitize_summary.py "$R" > "$R/summary.txt" 2>&1
    # every log in one file: the trip back takes a few files
    tar czf "$R/logs.tgz" -C "$R" $(cd "$R" && ls ./*check-*.log) && rm -f "$R"/*check-*.log
}

case "${1:-}" in
    prepare) prepare ;;
    run) run ;;
    *)
        echo "usage: bench/sanitize.sh prepare | run" >&2
        exit 2
        ;;
esac
