#!/usr/bin/env bash
# plot_scaling.sh: the figures of docs/performance.md, as PNG with gnuplot.
#   docs/img/scaling_MODEL.png  total images/sec vs ranks: ours (horovod), PyTorch DDP,
#                               and the no-communication ceiling (--variable_update none),
#                               from scripts/compare_scaling.sh's scaling_ranks_MODEL.dat
#   docs/img/allreduce_busbw.png  allreduce bus bandwidth vs message size, one line per
#                               backend (ours, MPI_Allreduce, Gloo, ...), from the saved
#                               output of scripts/compare_allreduce.sh, if present
# Usage: scripts/plot_scaling.sh [SCALING_DIR [ALLREDUCE_LOG]]
#   SCALING_DIR    default build/scaling
#   ALLREDUCE_LOG  default build/compare_allreduce.txt, e.g. made by
#                  scripts/compare_allreduce.sh | tee build/compare_allreduce.txt
#                  Read as: its table (header "size ring mpi ...", one row of busbw
#                  per size), or nccl-tests rows (size count type redop time algbw
#                  busbw #wrong) each block under a line naming its backend (ring,
#                  hvd, mpi, sendrecv, gloo).
set -u
cd "$(dirname "$0")/.."
dir=${1:-build/scaling}
log=${2:-build/compare_allreduce.txt}
img=docs/img
command -v gnuplot >/dev/null || { echo "plot_scaling: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
mkdir -p "$img"
made=0

for dat in "$dir"/scaling_ranks_*.dat; do
  [ -f "$dat" ] || continue
  model=$(basename "$dat" .dat); model=${model#scaling_ranks_}
  when=$(date -r "$dat" +%F)
  gnuplot <<EOF || exit 1
set terminal pngcairo size 640,480 noenhanced
set output "$img/scaling_$model.png"
set title "$model, batch 64 per rank, 1 thread per rank, CPU ($when)"
set xlabel "ranks"; set ylabel "total images/sec"
set xtics 1; set xrange [0.8:2.2]; set yrange [0:*]; set key outside below; set grid
plot "$dat" using 1:4 with linespoints lw 2 title "no communication (ceiling)", \
     "$dat" using 1:2 with linespoints lw 2 title "ours (hvd, horovod)", \
     "$dat" using 1:3 with linespoints lw 2 title "PyTorch DDP (Gloo)"
EOF
  echo "plot_scaling: wrote $img/scaling_$model.png"
  made=$((made + 1))
done

if [ -f "$log" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  /usr/bin/python3 - "$log" "$tmp" <<'PY' || exit 1
import re, sys
log, tmp = sys.argv[1], sys.argv[2]
# Two layouts: compare_allreduce.sh's table (a header "size ring mpi ... ring/mpi ..."
# then one row per size, busbw per backend, "-" where missing), or nccl-tests rows
# (size count type redop time algbw busbw #wrong) under a line naming the backend.
row = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$")
names = ["sendrecv", "gloo", "hvd", "ring", "mpi"]
series, cur, cols = {}, None, None
for line in open(log):
    tok = line.split()
    if tok and tok[0] == "size" and not line.lstrip().startswith("#"):
        cols = tok[1:]
        continue
    if cols and tok and tok[0].isdigit() and len(tok) >= len(cols) + 1:
        if len(tok) != len(cols) + 1: continue      # a garbled row: skip it whole
        for name, v in zip(cols, tok[1:]):
            if "/" in name or v == "-": continue
            try: series.setdefault(name, []).append((int(tok[0]), float(v)))
            except ValueError: pass
        continue
    m = row.match(line)
    if m:
        if cur is not None:
            series.setdefault(cur, []).append((int(m.group(1)), float(m.group(5))))
        continue
    low = line.lower()
    for n in names:
        if re.search(r"\b%s\b" % n, low):
            cur = n
            break
for n, pts in series.items():
    with open("%s/%s.dat" % (tmp, n), "w") as f:
        for size, busbw in sorted(pts):
            if size > 0: f.write("%d %g\n" % (size, busbw))
print(" ".join(sorted(series)))
PY
  plots=""
  for f in "$tmp"/*.dat; do
    [ -f "$f" ] || continue
    n=$(basename "$f" .dat)
    case $n in hvd) t="ours (hvd runtime)";; ring) t="ours (bare ring)";;
               mpi) t="MPI_Allreduce (allreduce_bench)";; mpi_peer) t="MPI_Allreduce (peer)";;
               gloo) t="Gloo (PyTorch)";; sendrecv) t="MPI_Sendrecv one way (reference)";;
               *) t=$n;; esac
    plots="$plots${plots:+, }\"$f\" using (\$1/1048576):2 with linespoints lw 2 title \"$t\""
  done
  if [ -n "$plots" ]; then
    gnuplot <<EOF || exit 1
set terminal pngcairo size 640,480 noenhanced
set output "$img/allreduce_busbw.png"
set title "allreduce float32, 2 ranks, this machine ($(date -r "$log" +%F))"
set xlabel "message size (MiB)"; set ylabel "busbw (GB/s)"
set logscale x 2; set yrange [0:*]; set key outside below; set grid
plot $plots
EOF
    echo "plot_scaling: wrote $img/allreduce_busbw.png"
    made=$((made + 1))
  else
    echo "plot_scaling: no allreduce rows found in $log" >&2
  fi
else
  echo "plot_scaling: no $log (save scripts/compare_allreduce.sh's output there); skipping the busbw plot" >&2
fi
[ $made -gt 0 ] || { echo "plot_scaling: nothing to plot (run scripts/compare_scaling.sh first)" >&2; exit 1; }
