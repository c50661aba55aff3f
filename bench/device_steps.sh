# Sourced by the device-call scripts (bench/softcap_tune.sh, bench/d96_check.sh): a call's
# steps under one time limit, each step's log and exit status under $OUT/r, and what the
# call leaves for the trip back ($OUT/r.tgz, the tuning database's export when there is one).
#
#   steps_begin              # R=$OUT/r, the clock starts; LIMIT (seconds) from the caller's env
#   step NAME NEED CMD...    # CMD with its log in $R/NAME.log, if NEED seconds are left
#   steps_end [DB]           # the EXIT trap: DB exported to $R/sm90-new.json.xz, $R packed

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
