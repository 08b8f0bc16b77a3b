#!/usr/bin/env bash
# figure_training.sh: one command for the training curves (loss and accuracy per epoch,
# train and validation) and the table beside them. Trains lenet on Fashion-MNIST on 2
# ranks for 3 epochs, as `make run` does (build/train --logdir: log.csv, one row per
# epoch), and makes from that log.csv both docs/img/training_curves.png and the table
# (docs/img/training_curves.md, spliced into docs/performance.md), with the date, the
# commit and the machine's load in the header and train's test accuracy (scripts/figures.py).
#   usage: scripts/figure_training.sh [more train flags, e.g. --epochs 5]
#   env:   HVD_BUILD (build), NP (2), MACHINE_NOTE ("machine shared/loaded"),
#          FIGURES_DOCS (docs/performance.md; '' leaves the docs alone)
set -u
cd "$(dirname "$0")/.."
build=${HVD_BUILD:-build}
np=${NP:-2}
out=$build/figures/training
[ -x "$build/train" ] && [ -x "$build/hvdrun" ] ||
  { echo "figure_training: $build/train or $build/hvdrun not built (make BUILD=$build)" >&2; exit 1; }
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || apt-get install -y python3-matplotlib >/dev/null ||
  { echo "figure_training: no matplotlib (apt-get install -y python3-matplotlib)" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
load=$(cut -d' ' -f1-3 /proc/loadavg)
args=(--model lenet --dataset fashion-mnist --epochs 3 --optimizer adam --lr 0.001
      --lr-schedule cosine --logdir "$out" "$@")
"$build/hvdrun" -np "$np" "$build/train" "${args[@]}" 2>&1 | tee "$out/train.out"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "figure_training: train failed" >&2; exit 1; }
echo "figure_training: the run's log is $out/log.csv (stdout: $out/train.out)"
exec /usr/bin/python3 scripts/figures.py training "$out" \
  --load-start "$load" --docs "${FIGURES_DOCS-docs/performance.md}" \
  --command "scripts/figure_training.sh${*:+ $*}: $build/hvdrun -np $np $build/train ${args[*]}"
