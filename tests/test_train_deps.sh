#!/usr/bin/env bash
# scripts/install-deps.sh (what `make test` runs first) brings what the PyTorch
# interchange tests need on a fresh machine, so that they run there instead of failing:
# with dpkg reporting nothing installed (a stub dpkg-query) it runs apt-get update and
# installs python3-torch, python3-numpy and dataset-fashion-mnist (a stub apt-get records
# the call; nothing is installed for real); with everything installed it runs no apt-get
# at all; and it ends by checking that /usr/bin/python3 imports numpy and torch.
set -u
tmp=$(mktemp -d /tmp/test_train_deps.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"
cat >"$tmp/bin/dpkg-query" <<'EOF'
#!/bin/sh
# A fresh machine: nothing installed (HVD_STUB_INSTALLED=1: everything).
[ "${HVD_STUB_INSTALLED:-0}" = 1 ] && { printf 'install ok installed'; exit 0; }
exit 1
EOF
cat >"$tmp/bin/apt-get" <<'EOF'
#!/bin/sh
echo "apt-get $*" >>"$HVD_STUB_LOG"
EOF
cat >"$tmp/bin/sudo" <<'EOF'
#!/bin/sh
exec "$@"
EOF
chmod +x "$tmp/bin/"*
fails=0

HVD_STUB_LOG=$tmp/fresh.log PATH="$tmp/bin:$PATH" scripts/install-deps.sh >"$tmp/fresh.out" 2>&1
rc=$?
install=$(grep '^apt-get .*install' "$tmp/fresh.log" 2>/dev/null)
if [ $rc -ne 0 ] || ! grep -q '^apt-get update' "$tmp/fresh.log" 2>/dev/null; then
  echo "FAIL fresh machine: exit $rc, apt-get calls:"; cat "$tmp/fresh.log" "$tmp/fresh.out" 2>/dev/null; fails=$((fails + 1))
else
  for p in python3-torch python3-numpy dataset-fashion-mnist; do
    case " $install " in
      *" $p "*) ;;
      *) echo "FAIL fresh machine: $p not installed: $install"; fails=$((fails + 1)) ;;
    esac
  done
  [ $fails -eq 0 ] && echo "ok   fresh machine: apt-get update, then $(echo "$install" | grep -o 'python3-torch python3-numpy') among $(echo "$install" | wc -w) words"
fi

HVD_STUB_INSTALLED=1 HVD_STUB_LOG=$tmp/done.log PATH="$tmp/bin:$PATH" scripts/install-deps.sh >"$tmp/done.out" 2>&1
rc=$?
if [ $rc -ne 0 ] || [ -e "$tmp/done.log" ]; then
  echo "FAIL everything installed: exit $rc, apt-get calls: $(cat "$tmp/done.log" 2>/dev/null)"; cat "$tmp/done.out"
  fails=$((fails + 1))
else
  echo "ok   everything installed: no apt-get, /usr/bin/python3 imports numpy and torch"
fi
grep -q "import numpy, torch" scripts/install-deps.sh \
  || { echo "FAIL install-deps does not check the import"; fails=$((fails + 1)); }
[ $fails -eq 0 ] && { echo "install-deps brings the PyTorch tests' packages"; exit 0; }
exit 1
