#!/usr/bin/env bash
# scripts/longest_functions.sh: the longest functions of the tree, in lines.
#
# Usage: scripts/longest_functions.sh [--top N] [--limit L] [--all] [FILE...]
#   --top N    print the N longest (default 10)
#   --limit L  also exit 1 when a function outside tests/ is longer than L lines, naming it
#   --all      every file git tracks, tests/ included (default: tests/ left out)
#   FILE...    measure these files instead of the tracked ones
# Output: one line per function, longest first: "LINES FILE:LINE NAME".
#
# How it measures: a small brace counter in awk over the C, CUDA and header files that git
# tracks. Comments, string and character literals and preprocessor lines are removed
# first. At brace depth 0 the text since the last ';' or '}' is the header of what
# follows; a '{' after a header that ends in ')' and holds no '=' starts a function
# (so the initialisers of tables, such as the programs' flag tables, are never counted:
# they are data, not functions). A function's length is its lines from the first line of
# its header (return type and name) to its closing '}', both included; blank and comment
# lines inside count, the comment above it does not. Macros that expand to functions and
# code inside #if 0 are not understood.
set -u
set -o pipefail
cd "$(dirname "$0")/.." || exit 2

top=10 limit= all=0
files=()
usage() { sed -n '4,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --top) [ $# -ge 2 ] || usage; top=$2; shift ;;
    --limit) [ $# -ge 2 ] || usage; limit=$2; shift ;;
    --all) all=1 ;;
    -h|--help) usage ;;
    -*) echo "longest_functions.sh: unknown option '$1'" >&2; usage ;;
    *) files+=("$1") ;;
  esac
  shift
done
for n in "$top" ${limit:+"$limit"}; do
  case "$n" in ''|*[!0-9]*) echo "longest_functions.sh: '$n' is not a number of lines" >&2; exit 2 ;; esac
done
if [ ${#files[@]} -eq 0 ]; then
  command -v git >/dev/null || { echo "longest_functions.sh: git is not installed; name the files" >&2; exit 2; }
  mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh' | { if [ "$all" = 1 ]; then cat; else grep -v '^tests/'; fi; })
  [ ${#files[@]} -gt 0 ] || { echo "longest_functions.sh: git lists no source file here" >&2; exit 2; }
fi
for f in "${files[@]}"; do [ -r "$f" ] || { echo "longest_functions.sh: cannot read '$f'" >&2; exit 2; }; done

tmp=$(mktemp) || exit 2
trap 'rm -f "$tmp"' EXIT
LC_ALL=C awk '
FNR == 1 { depth = 0; incomment = 0; header = ""; hline = 0; infn = 0; cont = 0 }
{
  line = $0
  # a preprocessor line, and its continuation lines
  if (cont) { cont = (line ~ /\\$/); next }
  if (!incomment && line ~ /^[ \t]*#/) { cont = (line ~ /\\$/); next }
  # strip comments and literals, keeping the code
  out = ""; i = 1; n = length(line)
  while (i <= n) {
    c = substr(line, i, 1); c2 = substr(line, i, 2)
    if (incomment) {
      if (c2 == "*/") { incomment = 0; i += 2 } else i++
      continue
    }
    if (c2 == "/*") { incomment = 1; i += 2; out = out " "; continue }
    if (c2 == "//") break
    if (c == "\"" || c == "\x27") {
      q = c; i++
      while (i <= n && substr(line, i, 1) != q) i += (substr(line, i, 1) == "\\") ? 2 : 1
      i++; out = out " 0 "; continue
    }
    out = out c; i++
  }
  for (i = 1; i <= length(out); i++) {
    c = substr(out, i, 1)
    if (depth == 0 && c !~ /[ \t{};]/ && hline == 0) hline = FNR
    if (c == "{") {
      if (depth == 0) {
        h = header; gsub(/[ \t]+$/, "", h)
        if (h ~ /\)$/ && h !~ /=/) {
          infn = 1; start = hline
          name = h; sub(/\(.*/, "", name); gsub(/.*[^A-Za-z0-9_:~]/, "", name)
        }
      }
      depth++
    } else if (c == "}") {
      if (depth > 0) depth--
      if (depth == 0) {
        if (infn) printf "%d %s:%d %s\n", FNR - start + 1, FILENAME, start, name
        infn = 0; header = ""; hline = 0
      }
    } else if (c == ";" && depth == 0) {
      header = ""; hline = 0
    } else if (depth == 0) {
      header = header c
    }
  }
  if (depth == 0) header = header " "
}' "${files[@]}" | sort -k1,1nr -k2,2 > "$tmp"

head -n "$top" "$tmp"
[ -n "$limit" ] || exit 0
over=$(awk -v l="$limit" '$1 > l && $2 !~ /^tests\//' "$tmp")
if [ -n "$over" ]; then
  echo "longest_functions.sh: functions outside tests/ longer than $limit lines:" >&2
  printf '%s\n' "$over" >&2
  exit 1
fi
