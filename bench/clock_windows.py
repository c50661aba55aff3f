# Usage: python3 bench/clock_windows.py ROWS.json CLOCKS.csv [--skip SECONDS]
# Joins timed rows that carry wall-clock `start`/`end` stamps (bench/sustained.py) with an
# nvidia-smi log taken beside them (timestamp, clocks.sm, clocks.mem, power.draw, ...;
# its timestamps in UTC, as the GPU hosts keep them): each row gets the mean SM clock and
# board power over its window less the first SECONDS (0.5: the clocks settle), and its
# TFLOP/s per GHz. Prints the rows and, per cell, fa4-gen against cuDNN.
import collections, csv, datetime, json, sys

def clock_log(path):
    out = []
    for r in csv.reader(open(path)):
        if not r or r[0].startswith("timestamp"):
            continue
        try:
            ts = datetime.datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
        except ValueError:
            continue
        ts = ts.replace(tzinfo=datetime.timezone.utc).timestamp()
        out.append((ts, float(r[1].split()[0]), float(r[3].split()[0])))
    return out

def with_clocks(rows, log, skip):
    for r in rows:
        window = [c for c in log if r["start"] + skip <= c[0] <= r["end"]]
        if not window:
            raise SystemExit("no clock sample inside %s's window: is the log from the same run?" % r["backend"])
        r["mhz"] = sum(c[1] for c in window) / len(window)
        r["watts"] = sum(c[2] for c in window) / len(window)
        r["tflops_per_ghz"] = r["tflops"] / (r["mhz"] / 1000)
    return rows

def main():
    args = sys.argv[1:]
    skip = 0.5
    if "--skip" in args:
        i = args.index("--skip")
        skip = float(args[i + 1])
        del args[i:i + 2]
    rows = with_clocks(json.load(open(args[0])), clock_log(args[1]), skip)
    cells = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in rows:
        print("d%-3d %5d causal %d %-8s %7.1f TFLOP/s %6.0f MHz %5.0f W %6.1f TFLOP/s per GHz"
              % (r["hdim"], r["seqlen"], r["causal"], r["backend"], r["tflops"], r["mhz"], r["watts"], r["tflops_per_ghz"]))
        cells[(r["hdim"], r["seqlen"], r["causal"])][r["backend"]].append(r)
    mean = lambda rs, key: sum(r[key] for r in rs) / len(rs)
    for (d, s, c), by in cells.items():
        if "fa4-gen" in by and "cudnn" in by:
            o, p = by["fa4-gen"], by["cudnn"]
            print("d%d %d causal %d: %.3fx cuDNN, clock %.3fx, work per clock %.3fx"
                  % (d, s, c, mean(o, "tflops") / mean(p, "tflops"), mean(o, "mhz") / mean(p, "mhz"),
                     mean(o, "tflops_per_ghz") / mean(p, "tflops_per_ghz")))

main()
