#!/usr/bin/env python
"""Where does a horovod_spark collective spend its time? Summarise a HOROVOD_TIMELINE trace.

    horovod-spark-run -np 2 --timeline-filename /tmp/tl.json python train.py
    python benchmarks/timeline_summary.py /tmp/tl.json [--group-regex 'bench\\.(\\d+)']

The trace (rank 0's view, Chrome trace format) has per-tensor phases: QUEUE (enqueued until the
engine thread picks it up), NEGOTIATE_<OP> (until the coordinator says every rank is ready),
then the data phases (<OP>, or MEMCPY_IN_FUSION_BUFFER / COLLECTIVE / MEMCPY_OUT_FUSION_BUFFER
when fused). Tensors are grouped by name with digits collapsed (or by --group-regex), and each
phase's median and total time are printed per group.
"""
import argparse
import collections
import json
import re
import statistics
import sys


def load_events(path):
    with open(path) as f:
        text = f.read().rstrip()
    # A job that died mid-run leaves the array unterminated (and maybe a trailing comma).
    if not text.endswith("]"):
        text = text.rstrip(",") + "\n]"
    return json.loads(text)


def phase_durations(events):
    """{tensor name: [(phase, duration_us), ...]} from B/E pairs (one open phase per tensor)."""
    names = {}
    open_phase = {}
    spans = collections.defaultdict(list)
    for ev in events:
        ph, pid = ev.get("ph"), ev.get("pid")
        if ph == "M" and ev.get("name") == "process_name":
            names[pid] = ev["args"]["name"]
        elif ph == "B":
            open_phase[pid] = (ev["name"], ev["ts"])
        elif ph == "E" and pid in open_phase:
            phase, start = open_phase.pop(pid)
            spans[names.get(pid, str(pid))].append((phase, ev["ts"] - start))
    return spans


def group_key(name, regex):
    if regex:
        m = re.search(regex, name)
        if m:
            return m.group(1) if m.groups() else m.group(0)
        return "(other)"
    return re.sub(r"\d+", "#", name)


def summarize(spans, regex=None):
    """{group: {phase: [durations]}} plus op counts per group."""
    groups = collections.defaultdict(lambda: collections.defaultdict(list))
    for name, items in spans.items():
        for phase, dur in items:
            groups[group_key(name, regex)][phase].append(dur)
    return groups


def fmt_us(us):
    return "%.1f µs" % us if us < 1000 else "%.2f ms" % (us / 1000)


def render(groups):
    lines = ["| tensors | phase | count | median | total |", "| --- | --- | ---: | ---: | ---: |"]
    for group in sorted(groups):
        phases = groups[group]
        for phase in sorted(phases, key=lambda p: -sum(phases[p])):
            d = phases[phase]
            lines.append("| %s | %s | %d | %s | %s |" % (group, phase, len(d), fmt_us(statistics.median(d)),
                                                        fmt_us(sum(d))))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("--group-regex", help="group tensors by this regex's first group instead of "
                                         "their digit-collapsed names")
    args = p.parse_args(argv)
    try:
        events = load_events(args.trace)
    except (OSError, ValueError) as exc:
        sys.exit("cannot read timeline %s: %s" % (args.trace, exc))
    print(render(summarize(phase_durations(events), args.group_regex)))


if __name__ == "__main__":
    main()
