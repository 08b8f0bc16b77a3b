#!/usr/bin/env bash
# The limits the project keeps on its own sources and front door, checked so they stay:
#  1. no function outside tests/ longer than 200 lines (scripts/longest_functions.sh
#     --limit 200), and the measure itself sees a planted 201-line function;
#  2. README.md at most 250 lines;
#  3. every relative link of README.md and docs/*.md names a file that exists.
set -u
cd "$(dirname "$0")/.." || exit 2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if scripts/longest_functions.sh --top 3 --limit 200 > "$tmp/longest" 2> "$tmp/over"; then
  echo "ok   longest functions: $(head -1 "$tmp/longest")"
else
  fail "functions over 200 lines: $(cat "$tmp/over")"
fi
# The measure: a planted function of 201 lines must be named.
{ echo 'int planted(void) {'; for i in $(seq 199); do echo "  (void)$i;"; done; echo '}'; } > "$tmp/planted.c"
if scripts/longest_functions.sh --limit 200 "$tmp/planted.c" > /dev/null 2>&1; then
  fail "a planted 201-line function passed --limit 200"
else
  echo "ok   a planted 201-line function is found"
fi

lines=$(wc -l < README.md)
if [ "$lines" -le 250 ]; then echo "ok   README.md has $lines lines"; else fail "README.md has $lines lines (at most 250)"; fi

# [text](target): relative targets, the #anchor cut off.
bad=0
for f in README.md docs/*.md; do
  dir=$(dirname "$f")
  while IFS= read -r target; do
    path=${target%%#*}
    [ -z "$path" ] && continue
    case "$path" in http://*|https://*|mailto:*) continue ;; esac
    if [ ! -e "$dir/$path" ]; then
      fail "$f links to $target: $dir/$path does not exist"; bad=$((bad + 1))
    fi
  done < <(grep -oE '\]\([^)[:space:]]+\)' "$f" | sed -E 's/^\]\((.*)\)$/\1/')
done
[ "$bad" -eq 0 ] && echo "ok   every relative link of README.md and docs/*.md exists"

if [ "$fails" -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "source limits hold"
