"""Counts compute-sanitizer's reports per kernel and source line (bench/sanitize.sh).

    python3 bench/sanitize_summary.py DIR

For each DIR/<tool>-<kernel>.log: the tool's closing summary line, then each distinct
report (its severity and kind, and the source lines of its accesses, paths cut to the
file name) with how often it came. A report's lines are the ones that follow its header
up to the next header, its own included.
"""

import collections
import pathlib
import re
import sys

PREFIX = re.compile(r"^=+ ?")
HEADER = re.compile(r"^(Error|Warning|Info|ERROR|WARNING|INFO|Invalid|Barrier|Race|Program hit)")
SOURCE = re.compile(r"([\w.+-]+\.(?:cuh|cu|h)):(\d+)")
ACCESS = re.compile(r"\b(Read|Write)\b")


def reports(text):
    """(header, [source lines]) for each report in a log."""
    current = None
    for raw in text.splitlines():
        if not raw.startswith("="):
            continue
        line = PREFIX.sub("", raw).strip()
        if HEADER.match(line) and "SUMMARY" not in line:
            if current:
                yield current
            current = (line, [])
        if current is not None:
            sources = SOURCE.findall(line)
            accesses = ACCESS.findall(line)
            for i, (path, number) in enumerate(sources):
                access = accesses[i] if len(accesses) == len(sources) else ""
                current[1].append(f"{access} {path}:{number}".strip())
    if current:
        yield current


def shape(header):
    """A report's header up to its first place, without addresses, blocks and counts."""
    header = header.split(" at ")[0]
    header = re.sub(r"0x[0-9a-f]+", "ADDR", header)
    header = re.sub(r"\(\d+,\d+,\d+\)", "(..)", header)
    return re.sub(r"\d+", "N", header)


def main(root):
    for log in sorted(pathlib.Path(root).glob("*check-*.log")):
        text = log.read_text(errors="replace")
        closing = [l for l in text.splitlines() if "SUMMARY" in l]
        print(f"## {log.stem}: {closing[-1].strip('= ') if closing else 'no summary line'}")
        counts = collections.Counter(
            (shape(header), " / ".join(dict.fromkeys(lines))) for header, lines in reports(text)
        )
        for (header, lines), n in counts.most_common(12):
            print(f"  {n:6d}  {header}  [{lines}]")
        if len(counts) > 12:
            print(f"  ... {len(counts) - 12} more kinds")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
