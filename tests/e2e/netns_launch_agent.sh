#!/usr/bin/env bash
# mpirun's remote launch agent for test_multi_node.sh, in place of ssh: `netns_launch_agent.sh HOST CMD...`
# runs CMD (a shell command line, as ssh would) in the network namespace that plays HOST, with its own
# hostname. LOOM_NETNS_HOSTS maps addresses to namespaces: "10.77.0.1=ns1 10.77.0.2=ns2".
set -euo pipefail
host=$1; shift
for pair in ${LOOM_NETNS_HOSTS:?}; do
  if [ "${pair%%=*}" = "$host" ]; then
    ns=${pair#*=}
    exec ip netns exec "$ns" unshare --uts bash -c 'hostname "$0"; exec bash -c "$*"' "$ns" "$@"
  fi
done
echo "netns_launch_agent.sh: no namespace plays host $host (LOOM_NETNS_HOSTS=$LOOM_NETNS_HOSTS)" >&2
exit 1
