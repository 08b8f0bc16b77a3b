#!/usr/bin/env bash
# check_deps.sh: which source file calls into which, and whether the modules depend on each
# other only one way (docs/architecture.md).
#
# Usage: scripts/check_deps.sh [--quiet | --verbose] [--src DIR] [BUILD_DIR]
#   BUILD_DIR  a build directory; its objects are BUILD_DIR/obj/PATH.o for PATH.c and
#              BUILD_DIR/obj/PATH.cu.o for PATH.cu (default: build)
#   --src DIR  the source tree the objects were built from (default: this repository)
#   --quiet    print only violations
#   --verbose  also print objects left out
#
# What it checks:
#  1. Calls. For every object under BUILD_DIR/obj (tests/ and its fuzz harnesses left out,
#     and objects whose source file no longer exists), nm gives the global symbols it
#     defines and the ones it uses. A use of a symbol defined in another object is a call
#     from one source file into another. It prints, per source file, the files it calls
#     into ("nn/model.c -> nn/error.c nn/tensor.c").
#  2. Module rules. A module is a top-level directory (nn/cuda counts as its own module).
#     Every call from one module into another must be in the table ALLOWED below.
#  3. Cycles. The strongly connected components of the file call graph: a component whose
#     files lie in more than one module is a call cycle between modules, and fails; so
#     does a cycle among the files of one module (its files cannot be read, tested or
#     replaced one at a time).
#  4. Includes. Every #include "..." in the sources (.c .h .cu .cuh; tests/ and scripts/
#     left out) that names a file of the tree is checked against the same table, so a
#     header-only dependency counts too. This needs no build.
# Exit status: 0 clean, 1 a violation, 2 a usage error or no objects under BUILD_DIR/obj.
set -u
set -o pipefail

# Module -> the modules it may call into or include. A module may always use itself.
# "*" means anything. nn/cuda is the GPU half of the nn library (its entry points are
# declared in nn/nn_cuda.h), so the users of nn may call it; nn itself may not (nn/cuda
# calls nn, never the other way). bench may use collectives: allreduce_bench times the
# bare ring (--backend ring) beside the runtime. A module missing from this table is a violation: add it here and
# to docs/architecture.md.
ALLOWED='
util:
proto:
nn: util proto
nn/cuda: nn util
collectives: util
hvd: collectives util
train: hvd nn nn/cuda util data
bench: train hvd collectives nn nn/cuda util data
launcher: util
examples: hvd
serve: nn nn/cuda util data proto
data: proto
tests: *
scripts: *
'

usage() {
  sed -n '4,10p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

mode=normal
src=$(cd "$(dirname "$0")/.." && pwd)
build=
while [ $# -gt 0 ]; do
  case "$1" in
    --quiet|-q) mode=quiet ;;
    --verbose|-v) mode=verbose ;;
    --src) [ $# -ge 2 ] || usage; src=$2; shift ;;
    --src=*) src=${1#--src=} ;;
    -h|--help) usage ;;
    -*) echo "check_deps.sh: unknown option '$1'" >&2; usage ;;
    *) [ -z "$build" ] || { echo "check_deps.sh: one BUILD_DIR only ('$build', then '$1')" >&2; usage; }
       build=$1 ;;
  esac
  shift
done
build=${build:-build}
[ -d "$src" ] || { echo "check_deps.sh: source directory '$src' does not exist" >&2; exit 2; }
# A relative BUILD_DIR is taken from the current directory, as usual.
[ -d "$build/obj" ] || { echo "check_deps.sh: no objects: '$build/obj' does not exist (run make, or pass the build directory)" >&2; exit 2; }
command -v nm >/dev/null || { echo "check_deps.sh: nm is not installed (binutils)" >&2; exit 2; }

tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT

# ---- 1. symbols of every object: "SOURCE TYPE SYMBOL" ----
: > "$tmp/syms"
: > "$tmp/skipped"
nobj=0
while IFS= read -r o; do
  rel=${o#"$build/obj/"}
  case "$rel" in tests/*) continue ;; esac
  # protobuf-c's code for proto/ (the Makefile's $(GEN)): a library, not a module
  case "$rel" in "$build"/gen/*) continue ;; esac
  base=${rel%.o}
  s=
  case "$base" in
    *.cu) [ -f "$src/$base" ] && s=$base ;;
    *) for ext in c cc cpp; do [ -f "$src/$base.$ext" ] && { s=$base.$ext; break; }; done ;;
  esac
  if [ -z "$s" ]; then echo "$rel (no source file $base.c or .cu: a stale object)" >> "$tmp/skipped"; continue; fi
  nobj=$((nobj + 1))
  # nm -P: "NAME TYPE [VALUE SIZE]"; an error (not an object) is fatal.
  nm -P "$o" > "$tmp/nm" 2> "$tmp/nm.err" || { echo "check_deps.sh: nm $o failed: $(head -n 1 "$tmp/nm.err")" >&2; exit 2; }
  awk -v f="$s" 'NF >= 2 { print f, $2, $1 }' "$tmp/nm" >> "$tmp/syms"
done < <(find "$build/obj" -type f -name '*.o' | LC_ALL=C sort)
[ "$nobj" -gt 0 ] || { echo "check_deps.sh: no objects under $build/obj with a source file in $src" >&2; exit 2; }

# ---- 4 (gathered here). includes: "FILE INCLUDED" for included files of the tree ----
: > "$tmp/incs"
while IFS= read -r f; do
  dir=$(dirname "$f")
  while IFS= read -r inc; do
    # the compiler's order for "...": the including file's directory, then -I. (the root)
    r=
    if [ -f "$src/$dir/$inc" ]; then r=$dir/$inc; elif [ -f "$src/$inc" ]; then r=$inc; fi
    [ -n "$r" ] || continue   # a system or library header
    # fold "a/./b" and "a/x/../b"
    while [[ "$r" =~ (^|/)\./ ]]; do r=${r/.\//}; done
    while [[ "$r" =~ [^/.][^/]*/\.\./ ]]; do r=$(sed -E 's#[^/.][^/]*/\.\./##' <<<"$r"); done
    echo "$f $r" >> "$tmp/incs"
  done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/p' "$src/$f")
done < <(cd "$src" && find . \( -path './.*' -o -path './build*' -o -path ./tests -o -path ./scripts \) -prune -o \
           -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print |
         sed 's#^\./##' | LC_ALL=C sort)

# ---- 2, 3, 4: the graph, the rules, the cycles ----
printf '%s\n' "$ALLOWED" > "$tmp/allowed"
cat "$tmp/skipped" > "$tmp/skipped.out"
LC_ALL=C awk -v mode="$mode" -v allowed="$tmp/allowed" -v incs="$tmp/incs" -v skipped="$tmp/skipped" '
function module(path,   d, n) {
  if (path !~ /\//) return "."
  # what protoc-c writes from proto/ into BUILD_DIR/gen: the messages, calling nothing of ours
  if (path ~ /^[^\/]+\/gen\//) return "proto"
  d = path; sub(/\/[^\/]*$/, "", d)
  if (d == "nn/cuda" || index(d, "nn/cuda/") == 1) return "nn/cuda"
  n = index(d, "/"); return n ? substr(d, 1, n - 1) : d
}
# 1 when module a may use module b, 0 when not, -1 when a is not in the table.
function may(a, b) {
  if (a == b) return 1
  if (!(a in table)) return -1
  if (table[a] == "*") return 1
  return ((" " table[a] " ") ~ (" " b " ")) ? 1 : 0
}
function allowed_list(a) { return (a in table) ? (table[a] == "" ? "nothing" : table[a]) : "?" }
# Tarjan: strongly connected components of the file graph (recursion depth <= files).
function connect(v,   i, w) {
  index_of[v] = lowlink[v] = ++counter
  stack[++sp] = v; onstack[v] = 1
  for (i = 1; i <= nsucc[v]; i++) {
    w = succ[v, i]
    if (!(w in index_of)) { connect(w); if (lowlink[w] < lowlink[v]) lowlink[v] = lowlink[w] }
    else if (onstack[w] && index_of[w] < lowlink[v]) lowlink[v] = index_of[w]
  }
  if (lowlink[v] == index_of[v]) {
    ncomp++
    do { w = stack[sp--]; onstack[w] = 0; comp[w] = ncomp; csize[ncomp]++ } while (w != v)
  }
}
# A shortest path from a to b inside component c, as "a -> x -> b".
function path_in(a, b, c,   q, head, tail, v, i, w, prev, p) {
  head = 1; tail = 0; q[++tail] = a; prev[a] = ""
  while (head <= tail) {
    v = q[head++]
    if (v == b) break
    for (i = 1; i <= nsucc[v]; i++) {
      w = succ[v, i]
      if (comp[w] == c && !(w in prev)) { prev[w] = v; q[++tail] = w }
    }
  }
  p = b
  for (v = b; prev[v] != ""; v = prev[v]) p = prev[v] " -> " p
  return p
}
BEGIN {
  while ((getline line < allowed) > 0) {
    if (line !~ /:/) continue
    k = line; sub(/:.*/, "", k); v = line; sub(/^[^:]*:[ ]*/, "", v); sub(/[ ]+$/, "", v)
    table[k] = v
  }
  violations = 0
}
# symbols: "FILE TYPE NAME"
{
  f = $1; t = $2; s = $3
  files[f] = 1
  if (t == "U" || t == "w" || t == "v") { nuse++; use_f[nuse] = f; use_s[nuse] = s; next }
  if (t ~ /^[TDBRGSCVWiu]$/) {
    weak = (t == "W" || t == "V")
    if (weak) { if (!((s, f) in wdef)) { wdef[s, f] = 1; wdefs[s] = wdefs[s] " " f } }
    else if (!((s, f) in sdef)) { sdef[s, f] = 1; sdefs[s] = sdefs[s] " " f }
  }
}
END {
  # call edges: a use of s in f goes to the files defining s strongly (or weakly if none)
  for (i = 1; i <= nuse; i++) {
    f = use_f[i]; s = use_s[i]
    d = (s in sdefs) ? sdefs[s] : ((s in wdefs) ? wdefs[s] : "")
    if (d == "") continue
    n = split(d, defs, " ")
    for (j = 1; j <= n; j++) {
      g = defs[j]
      if (g == f) continue
      if (!((f, g) in edge)) { edge[f, g] = 1; nsucc[f]++; succ[f, nsucc[f]] = g; esyms[f, g] = s }
      else if ((" " esyms[f, g] " ") !~ (" " s " ")) esyms[f, g] = esyms[f, g] " " s
    }
  }
  nf = 0
  for (f in files) sorted[++nf] = f
  for (i = 2; i <= nf; i++) { v = sorted[i]; for (j = i - 1; j >= 1 && sorted[j] > v; j--) sorted[j + 1] = sorted[j]; sorted[j + 1] = v }

  # 1. the file graph
  if (mode != "quiet") {
    print "Calls between source files (" nf " files):"
    for (i = 1; i <= nf; i++) {
      f = sorted[i]; line = ""
      for (j = 1; j <= nf; j++) if ((f, sorted[j]) in edge) line = line " " sorted[j]
      print "  " f " ->" (line == "" ? " (nothing)" : line)
    }
  }
  # 2. module rules on calls
  for (i = 1; i <= nf; i++) for (j = 1; j <= nf; j++) {
    f = sorted[i]; g = sorted[j]
    if (!((f, g) in edge)) continue
    a = module(f); b = module(g)
    if (a == b) continue
    mcount[a, b]++; if (!((a, b) in mseen)) { mseen[a, b] = 1; mods[a] = 1; mods[b] = 1 }
    r = may(a, b)
    if (r == 1) continue
    violations++
    if (r < 0) viol[violations] = "module " a " is not in the table of scripts/check_deps.sh: " f " calls " g " (" esyms[f, g] ")"
    else viol[violations] = "forbidden call " a " -> " b ": " f " calls " g " (" esyms[f, g] "); " a " may use only: " allowed_list(a)
  }
  # 3. cycles
  for (i = 1; i <= nf; i++) if (!(sorted[i] in index_of)) connect(sorted[i])
  for (c = 1; c <= ncomp; c++) {
    if (csize[c] < 2) continue
    members = ""; nm = 0; delete cm
    for (i = 1; i <= nf; i++) if (comp[sorted[i]] == c) { members = members " " sorted[i]; cm[module(sorted[i])] = 1 }
    modlist = ""; for (m in cm) { nm++; modlist = modlist (modlist == "" ? "" : ", ") m }
    if (nm < 2) {
      # name one cycle: the first file, a file it calls in the component, and back
      found = ""
      f = ""; for (i = 1; i <= nf && f == ""; i++) if (comp[sorted[i]] == c) f = sorted[i]
      for (j = 1; j <= nf && found == ""; j++) {
        g = sorted[j]
        if ((f, g) in edge && comp[g] == c)
          found = f " -> " path_in(g, f, c) "  (" f " calls " esyms[f, g] ")"
      }
      violations++
      viol[violations] = "call cycle between files of module " modlist ": " found "; files in the cycle:" members
      continue
    }
    # name one cycle: a cross-module edge f -> g of the component, then g back to f
    found = ""
    for (i = 1; i <= nf && found == ""; i++) for (j = 1; j <= nf && found == ""; j++) {
      f = sorted[i]; g = sorted[j]
      if ((f, g) in edge && comp[f] == c && comp[g] == c && module(f) != module(g))
        found = f " -> " path_in(g, f, c) "  (" f " calls " esyms[f, g] ")"
    }
    violations++
    viol[violations] = "call cycle between modules " modlist ": " found "; files in the cycle:" members
  }
  # 4. includes: "FILE INCLUDED"
  while ((getline line < incs) > 0) {
    split(line, p, " "); f = p[1]; g = p[2]
    a = module(f); b = module(g)
    if (a == b) continue
    incl[a, b] = 1; imods[a] = 1; imods[b] = 1
    r = may(a, b)
    if (r == 1) continue
    violations++
    if (r < 0) viol[violations] = "module " a " is not in the table of scripts/check_deps.sh: " f " includes " g
    else viol[violations] = "forbidden include " a " -> " b ": " f " includes \"" g "\"; " a " may use only: " allowed_list(a)
  }
  if (mode != "quiet") {
    print ""
    print "Modules (calls, from the objects):"
    for (a in mods) for (b in mods) if ((a, b) in mseen)
      print "  " a " -> " b " (" mcount[a, b] " file pair(s))" (may(a, b) == 1 ? "" : "  FORBIDDEN") | "LC_ALL=C sort"
    close("LC_ALL=C sort")
    print "Modules (includes, from the sources):"
    for (a in imods) for (b in imods) if ((a, b) in incl)
      print "  " a " -> " b (may(a, b) == 1 ? "" : "  FORBIDDEN") | "LC_ALL=C sort"
    close("LC_ALL=C sort")
  }
  if (mode == "verbose") while ((getline line < skipped) > 0) print "note: left out " line
  fflush()
  if (violations) {
    if (mode != "quiet") { print ""; fflush() }
    for (i = 1; i <= violations; i++) print "FAIL: " viol[i] > "/dev/stderr"
    print "check_deps.sh: " violations " violation(s); the allowed module dependencies are in scripts/check_deps.sh and docs/architecture.md" > "/dev/stderr"
    exit 1
  }
  if (mode != "quiet") print "\nok: no forbidden call or include, no call cycle between modules nor between the files of a module"
}' "$tmp/syms"
