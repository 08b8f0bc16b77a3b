#!/usr/bin/env python3
"""A small reader of TensorBoard event files (TFRecord framing + Event protobuf), with
no TensorFlow: checks both masked CRC-32C of every record, decodes Event fields, the
scalar Summary values and HistogramProto values, and prints one line per scalar:
"step tag value". read_events(path) is the library entry (tests/tb_keras_check.py).
Usage: tfevents_reader.py FILE [--expect TAG ...] [--steps N]
  --expect TAG  fail unless TAG has at least one value (repeatable)
  --steps N     fail unless every expected tag has exactly N values
Exit 0 when the file parses and the expectations hold, 1 otherwise."""
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    shift = v = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def fields(buf):
    """Yields (field number, wire type, value) of one protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v = buf[i:i + 8]; i += 8
        elif wt == 2:
            n, i = varint(buf, i)
            v = buf[i:i + n]; i += n
        elif wt == 5:
            v = buf[i:i + 4]; i += 4
        else:
            raise ValueError("unsupported wire type %d" % wt)
        if i > len(buf):
            raise ValueError("field runs past the end of its message")
        yield num, wt, v


HISTO_FIELDS = {1: "min", 2: "max", 3: "num", 4: "sum", 5: "sum_squares"}


def histogram(buf):
    """A HistogramProto: min, max, num, sum, sum_squares, bucket_limit, bucket (packed
    doubles, or one double per field as an unpacked encoder writes them)."""
    h = {"bucket_limit": [], "bucket": []}
    for num, wt, v in fields(buf):
        if num in HISTO_FIELDS and wt == 1:
            h[HISTO_FIELDS[num]] = struct.unpack("<d", v)[0]
        elif num in (6, 7):
            key = "bucket_limit" if num == 6 else "bucket"
            if wt == 2:
                if len(v) % 8:
                    raise ValueError("packed doubles of %d bytes" % len(v))
                h[key] += list(struct.unpack("<%dd" % (len(v) // 8), v))
            elif wt == 1:
                h[key].append(struct.unpack("<d", v)[0])
    return h


def read_events(path):
    data = open(path, "rb").read()
    pos, events = 0, []
    while pos < len(data):
        if pos + 12 > len(data):
            raise ValueError("truncated record header at byte %d" % pos)
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked(header) != hcrc:
            raise ValueError("bad length CRC at byte %d" % pos)
        body = data[pos + 12:pos + 12 + length]
        if len(body) != length or pos + 16 + length > len(data):
            raise ValueError("truncated record at byte %d" % pos)
        (dcrc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if masked(body) != dcrc:
            raise ValueError("bad data CRC at byte %d" % pos)
        pos += 16 + length
        ev = {"scalars": [], "histograms": []}
        for num, wt, v in fields(body):
            if num == 1 and wt == 1:
                ev["wall_time"] = struct.unpack("<d", v)[0]
            elif num == 2 and wt == 0:
                ev["step"] = v
            elif num == 3 and wt == 2:
                ev["file_version"] = v.decode()
            elif num == 5 and wt == 2:
                for sn, swt, sv in fields(v):
                    if sn != 1 or swt != 2:
                        continue
                    tag, val, histo = None, None, None
                    for vn, vwt, vv in fields(sv):
                        if vn == 1 and vwt == 2:
                            tag = vv.decode()
                        elif vn == 2 and vwt == 5:
                            val = struct.unpack("<f", vv)[0]
                        elif vn == 5 and vwt == 2:
                            histo = histogram(vv)
                    if histo is not None:
                        ev["histograms"].append((tag, histo))
                    elif val is not None:
                        ev["scalars"].append((tag, val))
        events.append(ev)
    return events


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 1
    path, expect, steps = argv[1], [], None
    i = 2
    while i < len(argv):
        if argv[i] == "--expect":
            expect.append(argv[i + 1]); i += 2
        elif argv[i] == "--steps":
            steps = int(argv[i + 1]); i += 2
        else:
            print("unknown argument " + argv[i]); return 1
    try:
        events = read_events(path)
    except (ValueError, IndexError, struct.error) as e:
        print("%s: %s" % (path, e))
        return 1
    if not events or events[0].get("file_version") != "brain.Event:2":
        print("%s: first event is not file_version brain.Event:2" % path)
        return 1
    counts = {}
    for ev in events:
        for tag, val in ev["scalars"]:
            print("%d %s %.6g" % (ev.get("step", 0), tag, val))
            counts[tag] = counts.get(tag, 0) + 1
    ok = True
    for tag in expect:
        n = counts.get(tag, 0)
        if n == 0 or (steps is not None and n != steps):
            print("%s: tag %s has %d values, expected %s" % (path, tag, n, steps or ">0"))
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
