#!/usr/bin/env bash
# The benchmark pictures, drawn from small hand-written inputs (no benchmark runs):
# scripts/plot_strategies.py on compare_strategies.sh's table (every strategy of every
# model drawn, with and without the straggler, bar heights in proportion to images/sec,
# the MB per step written over the bars; also from the script's whole printed output)
# and scripts/plot_pipeline_timeline.py on train's pipeline output (every stage of each
# schedule, every forward and backward box, a box of one column told forward or backward
# by its order, widths in proportion to the chart's columns); bad inputs refused.
# Needs matplotlib for /usr/bin/python3 (scripts/install-deps.sh installs it).
set -u
cd "$(dirname "$0")/.."
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

# ---- compare_strategies.sh's table (its --out FILE, the header as the script writes it)
{
  echo "| model | straggler | strategy | images/sec | vs ring | ms/step | host 1 link, MB/step | busiest server, MB/step | max staleness |"
  echo "|---|---|---|---|---|---|---|---|---|"
  echo "| resnet20 | none | ring | 400.00 | 1.00x | 160 | 3.47 | - | - |"
  echo "| resnet20 | none | ps-sync-1ps | 300.00 | 0.75x | 160 | 4.52 | 6.58 | 0 |"
  echo "| resnet20 | none | ps-sync-coloc | 200.00 | **0.50x** | 320 | 4.52 | 5.04 | 0 |"
  echo "| resnet20 | none | ps-async-coloc | 100.00 | 0.25x | 640 | 4.52 | 5.04 | 3 |"
  echo "| resnet20 | rank 3, +171 ms | ring | 240.00 | 1.00x | 266 | 3.78 | - | - |"
  echo "| resnet20 | rank 3, +171 ms | ps-sync-1ps | 186.00 | 0.77x | 258 | 4.52 | 6.58 | 0 |"
  echo "| resnet20 | rank 3, +171 ms | ps-sync-coloc | 231.00 | 0.96x | 276 | 4.52 | 5.04 | 0 |"
  echo "| resnet20 | rank 3, +171 ms | ps-async-coloc | 439.00 | 1.83x | 146 | 4.52 | 5.04 | 7 |"
  echo "| vgg16 | none | ring | 0.36 | 1.00x | 22222 | 1850.71 | - | - |"
  echo "| vgg16 | none | ps-sync-1ps | 0.20 | 0.56x | 30000 | 2403.05 | 3320.59 | 0 |"
  echo "| vgg16 | none | ps-sync-coloc | 0 | - | - | 2402.68 | 2220.22 | - |"
  echo "| vgg16 | none | ps-async-coloc | 0.35 | 0.97x | 22857 | 2402.86 | 2220.22 | 1 |"
  echo "| vgg16 | rank 3, +14285 ms | ring | 0.29 | 1.00x | 27586 | 1863.23 | - | - |"
  echo "| vgg16 | rank 3, +14285 ms | ps-sync-1ps | 0.18 | 0.62x | 33333 | 2403.48 | 3320.59 | 0 |"
  echo "| vgg16 | rank 3, +14285 ms | ps-sync-coloc | 0.25 | 0.86x | 32000 | 2403.12 | 2220.22 | 0 |"
  echo "| vgg16 | rank 3, +14285 ms | ps-async-coloc | 0.32 | 1.10x | 25000 | 2402.80 | 2220.22 | 1 |"
} >"$tmp/table.md"
svg=$tmp/strategies.svg
if "$py" scripts/plot_strategies.py "$tmp/table.md" --out "$svg" >"$tmp/s.out" 2>&1 &&
   grep -q "wrote $svg (2 models, 16 runs)" "$tmp/s.out" && [ -s "$svg" ]; then
  ok "plot_strategies wrote $svg"
else
  bad "plot_strategies: $(cat "$tmp/s.out")"
fi
for s in ring ps-sync-1ps ps-sync-coloc ps-async-coloc; do
  n=$(grep -c ">$s</text>" "$svg")
  [ "$n" = 2 ] && ok "$s named in both panels" || bad "$s named $n times, want 2 (one per model)"
  for m in resnet20 vgg16; do
    for st in none straggler; do
      grep -q "id=\"bar-$m-$s-$st\"" "$svg" || bad "no bar for $m $s straggler=$st"
    done
  done
done
for t in ">resnet20</text>" ">vgg16</text>" ">link 3.47 MB</text>" ">server 6.58 MB</text>" \
         ">link 2403 MB</text>" ">server 3321 MB</text>" ">failed</text>" "rank 3, +171 ms"; do
  grep -qF "$t" "$svg" && ok "text $t" || bad "no text $t in the picture"
done
# Bar heights: resnet20 without straggler is 400, 300, 200, 100 images/sec.
extents() {   # extents x|y SVG ID...: each path's extent along x or y, in the picture's units
  "$py" - "$@" <<'PY'
import re, sys
axis, svg = sys.argv[1], open(sys.argv[2]).read()
pattern = r"[ML] ([-0-9.]+) [-0-9.]+" if axis == "x" else r"[ML] [-0-9.]+ ([-0-9.]+)"
for gid in sys.argv[3:]:
    m = re.search(r'<g id="%s">\s*<path d="([^"]*)"' % re.escape(gid), svg)
    vs = [float(v) for v in re.findall(pattern, m.group(1))] if m else [0]
    print("%.3f" % (max(vs) - min(vs)))
PY
}
read -r h1 h2 h3 h4 <<<"$(extents y "$svg" bar-resnet20-ring-none bar-resnet20-ps-sync-1ps-none \
  bar-resnet20-ps-sync-coloc-none bar-resnet20-ps-async-coloc-none | tr '\n' ' ')"
if awk -v a="$h1" -v b="$h2" -v c="$h3" -v d="$h4" 'BEGIN {
     exit !(d > 0 && (a/d - 4)^2 < 1e-3 && (b/d - 3)^2 < 1e-3 && (c/d - 2)^2 < 1e-3) }'; then
  ok "bar heights 4:3:2:1 like the images/sec"
else
  bad "bar heights $h1 $h2 $h3 $h4, want 4:3:2:1 (400, 300, 200, 100 images/sec)"
fi
# The script's whole printed output: rows printed during the run, then the table.
{ echo "resnet20: the compute step alone takes 171 ms (4 ranks, 374 images/sec)"
  sed -n 3p "$tmp/table.md"; echo; cat "$tmp/table.md"; } >"$tmp/printed"
"$py" scripts/plot_strategies.py "$tmp/printed" --out "$tmp/p.svg" >"$tmp/s.out" 2>&1 &&
  grep -q "(2 models, 16 runs)" "$tmp/s.out" && ok "the printed output plots the same 16 runs" ||
  bad "plot_strategies on the printed output: $(cat "$tmp/s.out")"
echo "no table here" >"$tmp/empty"
if "$py" scripts/plot_strategies.py "$tmp/empty" --out "$tmp/e.svg" >"$tmp/s.out" 2>&1; then
  bad "a file without a table was accepted"
else
  grep -q "holds no table of compare_strategies.sh" "$tmp/s.out" && ok "a file without a table refused" ||
    bad "no table: unclear message: $(cat "$tmp/s.out")"
fi

# ---- train's pipeline output (lines as train prints them; a loaded run's charts, with
# boxes of one column: stage 1's digits alone are forwards first, then backwards)
pipelog() {   # pipelog SCHEDULE STEP_MS STAGE0 STAGE1
  echo "pipeline: 2 stages x 1 replicas, 4 micro-batches of 8, $1"
  echo "stage 0: layers 0-3 (conv1 .. conv2), 52096 parameters, 38.191 ms per micro-batch"
  echo "Epoch 1/1: 8 steps, 4.3s - loss 2.3193 - accuracy 0.0866 - lr 0.01 - 59 img/s"
  echo "pipeline: the last step of replica 0, $2 ms (F: forward, B: backward, the digit: its micro-batch, '.': idle)"
  echo "  stage 0 |$3|"
  echo "  stage 1 |$4|"
  echo "pipeline stage 0: idle 5.3% of the steps (bubble theory 20.0%), peak activation stash 6.22 MiB"
  echo "pipeline stage 1: idle 70.5% of the steps (bubble theory 20.0%), peak activation stash 2.36 MiB"
}
pipelog gpipe 229.2 "0FFF1FF2FFFFFF3FFFFF...0BBBBBBBBBBBBBBB1BBBBBBBB2BBBBBBBBBBBB3BBBBBBBBBB" \
  ".....0...1.....2.....30123.............................................." >"$tmp/gpipe.4"
pipelog 1f1b 223.6 "0FFFF1FF.........0BBBBBBBBB2FF1BBBBBBBBBBBBBB3FFF2BBBBBBBBBBB3BBBBBBBBBB" \
  "00BBBB11BBBBBB...........22BBBB............3F3.........................." >"$tmp/1f1b.4"
svg=$tmp/pipeline.svg
if "$py" scripts/plot_pipeline_timeline.py "$tmp/gpipe.4" "$tmp/1f1b.4" --out "$svg" >"$tmp/p.out" 2>&1 &&
   grep -q "wrote $svg (gpipe M = 4, 1f1b M = 4)" "$tmp/p.out" && [ -s "$svg" ]; then
  ok "plot_pipeline_timeline wrote $svg"
else
  bad "plot_pipeline_timeline: $(cat "$tmp/p.out")"
fi
grep -q "computations found" "$tmp/p.out" && bad "boxes reported missing: $(cat "$tmp/p.out")"
for sched in gpipe 1f1b; do
  grep -q ">$sched, S = 2, M = 4: the last step" "$svg" && ok "$sched's panel" || bad "no panel titled $sched"
  for s in 0 1; do
    for k in F B; do
      for m in 0 1 2 3; do
        n=$(grep -c "id=\"box-$sched-stage$s-$k$m\"" "$svg")
        [ "$n" = 1 ] || bad "$sched stage $s: $n boxes $k$m, want 1"
      done
    done
  done
done
for s in 0 1; do
  n=$(grep -c ">stage $s</text>" "$svg")
  [ "$n" = 2 ] && ok "stage $s named in both panels" || bad "stage $s named $n times, want 2"
done
# Widths in columns: gpipe stage 0's forwards take 4, 3, 7 and 6 of the 72.
read -r w0 w1 w2 w3 <<<"$(extents x "$svg" box-gpipe-stage0-F0 box-gpipe-stage0-F1 \
  box-gpipe-stage0-F2 box-gpipe-stage0-F3 | tr '\n' ' ')"
if awk -v a="$w0" -v b="$w1" -v c="$w2" -v d="$w3" 'BEGIN {
     exit !(b > 0 && (a/b - 4/3)^2 < 1e-3 && (c/b - 7/3)^2 < 1e-3 && (d/b - 2)^2 < 1e-3) }'; then
  ok "box widths 4:3:7:6 like the chart's columns"
else
  bad "box widths $w0 $w1 $w2 $w3, want 4:3:7:6"
fi
# A forward hidden under its backward (train's chart lost it): said, and the rest drawn.
pipelog 1f1b 100.0 "0FFFF1FF.........0BBBBBBBBB2FF1BBBBBBBBBBBBBB3FFF2BBBBBBBBBBB3BBBBBBBBBB" \
  "0BBBBB11BBBBBB...........22BBBB............3F3.........................." >"$tmp/hidden"
"$py" scripts/plot_pipeline_timeline.py "$tmp/hidden" --out "$tmp/h.svg" >"$tmp/p.out" 2>&1 &&
  grep -q "1f1b, stage 1: 7 of its 8 computations found" "$tmp/p.out" &&
  ok "a hidden computation reported" || bad "hidden computation: $(cat "$tmp/p.out")"
head -3 "$tmp/gpipe.4" >"$tmp/nochart"
if "$py" scripts/plot_pipeline_timeline.py "$tmp/nochart" --out "$tmp/n.svg" >"$tmp/p.out" 2>&1; then
  bad "a log without the chart was accepted"
else
  grep -q "has no chart of the last step" "$tmp/p.out" && ok "a log without the chart refused" ||
    bad "no chart: unclear message: $(cat "$tmp/p.out")"
fi

[ $fail -eq 0 ] && echo "PASS" || echo "FAILED"
exit $fail
