# Sourced by tests: two "hosts" on one machine as network namespaces joined by a veth
# pair (shared/SCALEOUT.md). Every address of a fake host is used only from inside a
# namespace, and a blackhole route for their subnet in the root namespace keeps a
# mistake on the machine.
#
#   source tests/support/fake_hosts.sh
#   fake_hosts_up        # sets H1 H2 (namespace = host names), NET (a /24 prefix), A1 A2
#   ...                  # ip netns exec "$H1" ..., nsenter --net=/run/netns/$H1 ...
#   fake_hosts_down      # also run from the caller's EXIT trap
#
# Names and the subnet come from the shell's pid, so parallel runs never collide.
# Each namespace gets /etc/netns/NS/hosts naming both hosts (`ip netns exec` shows it
# as /etc/hosts).

fake_hosts_up() {
  [ "$(id -u)" = 0 ] || { echo "fake_hosts_up: needs root for network namespaces" >&2; return 1; }
  command -v ip > /dev/null || { echo "fake_hosts_up: iproute2 missing (scripts/setup.sh installs it)" >&2; return 1; }
  local tag="dl$$"
  H1="${tag}a"
  H2="${tag}b"
  NET="10.231.$(( $$ % 200 + 20 ))"
  A1="$NET.1"
  A2="$NET.2"
  ip route add blackhole "$NET.0/24"
  ip netns add "$H1"
  ip netns add "$H2"
  ip link add "${tag}x" type veth peer name "${tag}y"
  ip link set "${tag}x" netns "$H1"
  ip link set "${tag}y" netns "$H2"
  ip -n "$H1" addr add "$A1/24" dev "${tag}x"
  ip -n "$H2" addr add "$A2/24" dev "${tag}y"
  local ns
  for ns in "$H1" "$H2"; do
    ip -n "$ns" link set lo up
    mkdir -p "/etc/netns/$ns"
    printf '127.0.0.1 localhost\n%s %s\n%s %s\n' "$A1" "$H1" "$A2" "$H2" > "/etc/netns/$ns/hosts"
  done
  ip -n "$H1" link set "${tag}x" up
  ip -n "$H2" link set "${tag}y" up
}

fake_hosts_down() {
  [ -n "${H1:-}" ] || return 0
  ip netns del "$H1" 2>/dev/null || true
  ip netns del "$H2" 2>/dev/null || true
  ip route del blackhole "$NET.0/24" 2>/dev/null || true
  rm -rf "/etc/netns/$H1" "/etc/netns/$H2"
}
