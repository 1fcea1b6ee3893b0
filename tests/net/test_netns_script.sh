#!/usr/bin/env bash
# netns-nodes.sh cleans up after a crash: `up` a private set of nodes, leave a process running in a
# namespace and lose the count file (as a crash mid-test would), then `down` must leave no
# namespace, link or process of this state dir behind, and a second `down` must succeed too.
# Exit 77 (skip) when namespaces cannot be used here.
set -u
script=$(dirname "$0")/netns-nodes.sh
dir=${1:?usage: test_netns_script.sh STATE_DIR}
why=$("$script" check) || { echo "SKIP: $why"; exit 77; }
fail() { echo "FAIL: $*"; "$script" down "$dir" >/dev/null; exit 1; }

"$script" up "$dir" 2 10mbit || fail "up failed"
grep -q '"available":true' "$dir/state.json" || fail "state: $(cat "$dir/state.json")"
id=$(printf '%s' "$(realpath -m "$dir")" | md5sum | cut -c1-6)
[ "$(ip netns list | grep -c "^fn$id-")" = 2 ] || fail "expected 2 namespaces fn$id-*"
ip netns exec "fn$id-1" tc qdisc show dev eth0 | grep -q "tbf.*rate 10Mbit" || fail "no tbf on node 1"
ip netns exec "fn$id-1" sleep 600 &
sleep 0.3
pgrep -f "sshd -f $dir/" >/dev/null || fail "no sshd running"
rm -f "$dir/count"
"$script" down "$dir" >/dev/null || fail "down failed"
ip netns list | grep -q "^fn$id-" && fail "namespaces left: $(ip netns list | grep "^fn$id-")"
ip -o link show | grep -q "fv$id\|fnb$id" && fail "links left"
pgrep -f "sshd -f $dir/" >/dev/null && fail "sshd left running"
wait  # the sleep was killed by down
"$script" down "$dir" >/dev/null || fail "second down failed"
echo "netns_script: ok"
