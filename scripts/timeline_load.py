#!/usr/bin/env python3
"""Load an HVD_TIMELINE file, also one cut short by a kill.

The runtime writes "[" and then one event per line followed by a comma, flushing each
line, and closes the array at hvd_shutdown. A run that was killed leaves no "]" and
maybe half a last line; trace viewers (Perfetto, chrome://tracing) load such a file,
and so does load() here: it drops an incomplete last line and closes the array.

usage: timeline_load.py FILE   prints the number of events per name, and whether the
                               file was complete or cut short; exits 1 if it cannot be
                               read as a timeline at all."""
import json
import sys


def load(path):
    """The events of the timeline at path, and whether the file was complete."""
    text = open(path, encoding="utf-8").read()
    try:
        return json.loads(text), True
    except ValueError:
        pass
    lines = text.rstrip("\n").split("\n")
    if not lines or lines[0].strip() != "[":
        raise ValueError("%s does not start with '[': not a timeline" % path)
    events = []
    for i, line in enumerate(lines[1:], start=2):
        line = line.strip().rstrip(",")
        if not line or line == "]":
            continue
        try:
            events.append(json.loads(line))
        except ValueError:
            if i == len(lines):   # the line the kill cut short
                break
            raise ValueError("%s:%d is not one JSON event" % (path, i))
    return events, False


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    try:
        events, complete = load(sys.argv[1])
    except (OSError, ValueError) as e:
        sys.exit("timeline_load: %s" % e)
    counts = {}
    for e in events:
        if e.get("ph") == "X":
            counts[e["name"]] = counts.get(e["name"], 0) + 1
    print("%s: %d events, %s" % (sys.argv[1], len(events),
                                 "complete" if complete else "cut short (no closing ']')"))
    for name in sorted(counts):
        print("  %-28s %d" % (name, counts[name]))


if __name__ == "__main__":
    main()
