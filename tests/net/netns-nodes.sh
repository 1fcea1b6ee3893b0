#!/usr/bin/env bash
# A slow link made real (issue 36): N "nodes", each a network namespace with its own sshd, joined
# to a bridge in the root namespace, each node's interface rate-limited with `tc tbf` on egress, so
# the link between two nodes carries RATE (node a's egress shapes a -> b, b's shapes b -> a). The
# app (root namespace) reaches every node through the bridge; a node's own ranks talk over its
# loopback, which stays unthrottled (the intra-node figure).
#
#   netns-nodes.sh up STATE_DIR N [RATE]      N nodes (n0, n1, ...); RATE as tc takes it ("40mbit");
#                                              no RATE or "off" = unthrottled
#   netns-nodes.sh limit STATE_DIR NODE RATE  changes node NODE's (index or name) egress rate; "off"
#   netns-nodes.sh down STATE_DIR             removes everything: namespaces, bridge, sshd and every
#                                              process left in the namespaces; idempotent, works after
#                                              a crash (names derive from STATE_DIR's hash)
#   netns-nodes.sh check                      exit 0 when usable here, else prints why and exits 77
#
# `up` writes STATE_DIR/state.json: {"available":true,"subnet","bridge","client_key","rate",
# "nodes":[{"name","netns","ip","port","home","iface","sshd_pid"}]}. When namespaces cannot be used
# here (not root, no ip/tc/sshd, namespaces refused) `up` still exits 0 and writes
# {"available":false,"reason":"..."}: the tests that share this fixture then skip with that reason
# (a failed CTest fixture setup would mark them failed instead). Other test suites may create their
# own namespaces at the same time: every name carries a hash of STATE_DIR, and the subnet is chosen
# among 10.200-249.x.0/24 ones no route uses yet.
set -u

die() { echo "netns-nodes: $*" >&2; exit 1; }

names_for() {  # sets ID, BR from the state dir's absolute path
  local abs
  abs=$(realpath -m "$1")
  ID=$(printf '%s' "$abs" | md5sum | cut -c1-6)
  BR="fnb$ID"
}
ns_name() { echo "fn$ID-$1"; }
veth_host() { echo "fv$ID$1"; }  # <= 15 chars for i < 100000

why_unavailable() {
  [ "$(id -u)" = 0 ] || { echo "not root (network namespaces need root)"; return; }
  command -v ip >/dev/null || { echo "no 'ip' (iproute2)"; return; }
  command -v tc >/dev/null || { echo "no 'tc' (iproute2)"; return; }
  [ -x /usr/sbin/sshd ] || { echo "/usr/sbin/sshd is not installed (openssh-server)"; return; }
  command -v ssh-keygen >/dev/null || { echo "no ssh-keygen"; return; }
  local probe="fnprobe$$"
  if ! ip netns add "$probe" 2>/dev/null; then echo "network namespaces are not allowed here"; return; fi
  ip netns del "$probe" 2>/dev/null
  if ! ip link add "fnpb$$" type bridge 2>/dev/null; then echo "bridges cannot be created here"; return; fi
  ip link del "fnpb$$" 2>/dev/null
  echo ""
}

# Kills the processes we started inside our namespaces (sshd, sessions, runs), then the namespaces.
down() {
  local dir=$1
  names_for "$dir"
  # Namespaces of ours that exist, whatever the count file says (a crash before it was written).
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^fn$ID-"); do
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  # Host-side veths (by name, whatever the count file says), then the bridge. The kernel removes a
  # deleted namespace's veth pairs asynchronously: wait until none of ours is left.
  local link t
  for ((t = 0; t < 50; t++)); do
    local left=""
    for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^fv$ID\|^fnb$ID$"); do
      ip link del "$link" 2>/dev/null
      left=1
    done
    [ -z "$left" ] && break
    sleep 0.1
  done
  rm -f "$dir/state.json"
  return 0
}

tbf() {  # tbf NETNS RATE: replace node's egress qdisc ("off" = default)
  local ns=$1 rate=$2
  if [ -z "$rate" ] || [ "$rate" = off ]; then
    ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null
    return 0
  fi
  # burst 32 kB: small against the streams measured (MBs), big enough for the timer at any rate
  # used here; latency bounds the queue (drops beyond it make TCP back off to RATE).
  ip netns exec "$ns" tc qdisc replace dev eth0 root tbf rate "$rate" burst 32kb latency 200ms
}

pick_subnet() {  # first 10.A.B.0/24 (A from 200, B from the hash) that no route mentions
  local b=$((16#${ID:0:2})) a
  for a in $(seq 200 249); do
    if ! ip -4 route show table all 2>/dev/null | grep -q "10\.$a\.$b\."; then
      echo "10.$a.$b"
      return
    fi
  done
  echo ""
}

wait_port() {  # wait_port IP PORT SECONDS
  local t=0
  while ((t < $3 * 10)); do
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
    sleep 0.1
    t=$((t + 1))
  done
  return 1
}

up() {
  local dir=$1 n=$2 rate=${3:-off}
  [[ "$n" =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 50)) || die "N must be 1..50"
  mkdir -p "$dir" || die "cannot create $dir"
  dir=$(realpath "$dir")
  down "$dir"  # a previous crash leaves nothing behind
  local why
  why=$(why_unavailable)
  if [ -n "$why" ]; then
    printf '{"available":false,"reason":"%s"}\n' "$why" >"$dir/state.json"
    echo "netns-nodes: unavailable: $why"
    return 0
  fi
  names_for "$dir"
  echo "$n" >"$dir/count"
  rm -rf "$dir"/n*-home  # every fixture session starts with empty node homes (no runs left over)
  local subnet
  subnet=$(pick_subnet)
  [ -n "$subnet" ] || die "no free 10.200-249.x.0/24 subnet"
  mkdir -p "$dir/keys"
  rm -f "$dir/keys/client" "$dir/keys/client.pub"
  ssh-keygen -q -t ed25519 -N '' -C flotilla-netns -f "$dir/keys/client" </dev/null >/dev/null || die "ssh-keygen failed"
  cp "$dir/keys/client.pub" "$dir/keys/authorized_keys"
  mkdir -p /run/sshd

  ip link add "$BR" type bridge || die "cannot create bridge $BR"
  ip addr add "$subnet.1/24" dev "$BR"
  ip link set "$BR" up
  local i nodes=""
  for ((i = 0; i < n; i++)); do
    local ns vh ip home
    ns=$(ns_name "$i")
    vh=$(veth_host "$i")
    ip="$subnet.$((i + 2))"
    home="$dir/n$i-home"
    mkdir -p "$home"
    ip netns add "$ns" || { down "$dir"; die "cannot create namespace $ns"; }
    ip link add "$vh" type veth peer name "fvp$ID$i" || { down "$dir"; die "cannot create veth $vh"; }
    ip link set "fvp$ID$i" netns "$ns"
    ip link set "$vh" master "$BR" up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip link set "fvp$ID$i" name eth0
    ip netns exec "$ns" ip addr add "$ip/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    tbf "$ns" "$rate" || { down "$dir"; die "tc tbf failed on $ns"; }
    [ -f "$dir/keys/host$i" ] || ssh-keygen -q -t ed25519 -N '' -C flotilla-netns -f "$dir/keys/host$i" </dev/null >/dev/null
    cat >"$dir/sshd$i.conf" <<EOF
ListenAddress $ip
Port 22
HostKey $dir/keys/host$i
PidFile $dir/sshd$i.pid
AuthorizedKeysFile $dir/keys/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
SetEnv HOME=$home OMP_NUM_THREADS=1
MaxStartups 50
LogLevel ERROR
EOF
    rm -f "$dir/sshd$i.pid"
    ip netns exec "$ns" /usr/sbin/sshd -f "$dir/sshd$i.conf" -E "$dir/sshd$i.log" || { down "$dir"; die "sshd failed on $ns: $(cat "$dir/sshd$i.log")"; }
    wait_port "$ip" 22 10 || { down "$dir"; die "sshd on $ip:22 did not answer: $(cat "$dir/sshd$i.log")"; }
    local pid
    pid=$(cat "$dir/sshd$i.pid" 2>/dev/null || echo 0)
    [ -n "$nodes" ] && nodes="$nodes,"
    nodes="$nodes{\"name\":\"n$i\",\"netns\":\"$ns\",\"ip\":\"$ip\",\"port\":22,\"home\":\"$home\",\"iface\":\"eth0\",\"sshd_pid\":$pid}"
  done
  printf '{"available":true,"subnet":"%s.0/24","bridge":"%s","client_key":"%s","rate":"%s","nodes":[%s]}\n' \
    "$subnet" "$BR" "$dir/keys/client" "$rate" "$nodes" >"$dir/state.json"
  echo "netns-nodes: $n node(s) up on $subnet.0/24 (bridge $BR), egress $rate; state in $dir/state.json"
}

limit() {
  local dir=$1 node=$2 rate=$3
  names_for "$dir"
  node=${node#n}
  [[ "$node" =~ ^[0-9]+$ ]] || die "NODE is an index or n<index>"
  ip netns list | awk '{print $1}' | grep -qx "$(ns_name "$node")" || die "node $node is not up"
  # state.json keeps the rate `up` set: tests restore it after changing a node's.
  tbf "$(ns_name "$node")" "$rate" || die "tc failed"
}

case "${1:-}" in
  up) [ $# -ge 3 ] || die "usage: up STATE_DIR N [RATE]"; up "$2" "$3" "${4:-off}" ;;
  down) [ $# -ge 2 ] || die "usage: down STATE_DIR"; down "$2"; echo "netns-nodes: down" ;;
  limit) [ $# -ge 4 ] || die "usage: limit STATE_DIR NODE RATE"; limit "$2" "$3" "$4" ;;
  check) w=$(why_unavailable); [ -z "$w" ] && exit 0; echo "$w"; exit 77 ;;
  *) die "usage: up STATE_DIR N [RATE] | limit STATE_DIR NODE RATE | down STATE_DIR | check" ;;
esac
