# Sourced by the tests that use simulated hosts (tests/test_netns_*.sh), after they set
# `hosts` (scripts/netns-hosts.sh) and define skip(). Skips (exit 77) where the machine
# cannot make network namespaces, takes the lock that lets one user of the namespaces
# run at a time (tests, benchmark), and removes the hosts on every exit (plus the
# directory in $netns_tmp when set).
[ "$(id -u)" -eq 0 ] || skip "simulated hosts need root (network namespaces, a bridge)"
command -v ip >/dev/null || skip "ip (iproute2) is not installed"
command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
command -v mpirun >/dev/null || skip "mpirun is not installed"
probe=hvdprobe$$
ip netns add "$probe" 2>/tmp/$probe.err || skip "ip netns add is not permitted here: $(cat /tmp/$probe.err)"
ip netns del "$probe"; rm -f /tmp/$probe.err
unshare --uts true 2>/dev/null || skip "unshare --uts is not permitted here"
exec 9>/run/hvd-netns.lock
flock -w 240 9 || { echo "FAIL: another job holds /run/hvd-netns.lock for over 240 s"; exit 1; }
trap '"$hosts" down >/dev/null 2>&1; [ -n "${netns_tmp:-}" ] && rm -rf "$netns_tmp"' EXIT
trap 'exit 1' INT TERM
