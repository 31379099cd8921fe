#!/usr/bin/env bash
# A real one-host Slurm cluster (munged + slurmctld + slurmd from Debian's packages)
# in a folder of its own, for trying the sbatch templates here and for the tests.
# Nothing outside the folder is touched: private munge socket and key, private
# state, spool, logs, pid files and ports, so it can run beside a real cluster.
#
#   local-cluster.sh start DIR [CPUS]   start it (CPUS: what the node offers, default 4;
#                                       more than the machine has is allowed)
#   local-cluster.sh stop DIR           stop it and wait for the daemons to exit
#   export SLURM_CONF=DIR/slurm.conf    then sbatch, srun, squeue, scontrol, scancel
#
# Several nodes: NODES="h1=10.200.0.1 h2=10.200.0.2" local-cluster.sh start DIR, where
# each name is a network namespace that exists (`ip netns add`, see
# shared/SCALEOUT.md) and the address is the node's there. slurmctld runs in the first
# namespace, one slurmd in each, every daemon with the node's hostname and each slurmd
# with a /tmp of its own; munged stays in the root namespace (its socket is a file).
# Run the clients inside the first namespace (nsenter --net=/run/netns/h1 sbatch ...).
#
# Needs root and: slurmctld slurmd slurm-client munge (scripts/setup.sh installs them).
set -euo pipefail
cmd="${1:-}"
dir="${2:-}"
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR [CPUS]" >&2; exit 2; }

stop_cluster() {
  local pids=()
  for f in "$dir/run/"slurmd*.pid "$dir/run/slurmctld.pid" "$dir/munge/munged.pid"; do
    [ -s "$f" ] && pids+=("$(cat "$f")")
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 100); do  # at most 10 s
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -f "$dir/run/"*.pid "$dir/munge/munged.pid"
}

if [ "$cmd" = stop ]; then
  stop_cluster
  exit 0
fi
[ "$cmd" = start ] || { echo "unknown command '$cmd' (start or stop)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "local-cluster.sh: needs root (slurmd runs jobs as their users)" >&2; exit 1; }
for p in munged slurmctld slurmd; do
  command -v "$p" > /dev/null || [ -x "/usr/sbin/$p" ] ||
    { echo "local-cluster.sh: $p is missing (bash scripts/setup.sh installs Slurm and munge)" >&2; exit 1; }
done
cpus="${3:-4}"
# The nodes: "name=address" pairs (namespaces), or the machine itself as localhost.
read -r -a nodes <<< "${NODES:-}"
names=() addrs=()
for n in "${nodes[@]}"; do
  names+=("${n%%=*}")
  addrs+=("${n#*=}")
  [ -e "/run/netns/${n%%=*}" ] || { echo "local-cluster.sh: no network namespace '${n%%=*}' (NODES)" >&2; exit 1; }
done
mkdir -p "$dir"
dir="$(realpath "$dir")"
mkdir -p "$dir"/{munge,run,state,spool,log}
# munged runs as its own user and insists on private key and socket folders that
# it owns; every folder above them must be traversable.
chmod 755 "$dir"
chown munge:munge "$dir/munge"
chmod 700 "$dir/munge"
[ -s "$dir/munge/munge.key" ] || { dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none; }
chown munge:munge "$dir/munge/munge.key"
chmod 400 "$dir/munge/munge.key"

# Ports of its own (two per cluster), picked from the folder's name so that two
# clusters on one machine do not collide, below the ephemeral range (32768+).
base=$(( 20000 + $(printf '%s' "$dir" | cksum | cut -d' ' -f1) % 6000 * 2 ))
cat > "$dir/slurm.conf" <<CONF
# Written by deploy/slurm/local-cluster.sh
ClusterName=distllm-local
SlurmctldHost=$( [ ${#names[@]} -gt 0 ] && echo "${names[0]}(${addrs[0]})" || echo localhost )
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
MailProg=/bin/true
JobRequeue=1
ReturnToService=2
KillWait=5
InactiveLimit=0
CONF
if [ ${#names[@]} -eq 0 ]; then
  echo "NodeName=localhost CPUs=$cpus RealMemory=1000 State=UNKNOWN" >> "$dir/slurm.conf"
  node_list=localhost
else
  for i in "${!names[@]}"; do
    echo "NodeName=${names[$i]} NodeAddr=${addrs[$i]} CPUs=$cpus RealMemory=1000 State=UNKNOWN" >> "$dir/slurm.conf"
  done
  node_list="$(IFS=,; echo "${names[*]}")"
fi
echo "PartitionName=debug Nodes=$node_list Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO" >> "$dir/slurm.conf"

stop_cluster  # a cluster left over in this folder
runuser -u munge -- /usr/sbin/munged --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed" --force
export SLURM_CONF="$dir/slurm.conf"
if [ ${#names[@]} -eq 0 ]; then
  /usr/sbin/slurmctld -f "$dir/slurm.conf"
  /usr/sbin/slurmd -f "$dir/slurm.conf" -N localhost
  client=()
else
  # nsenter, not `ip netns exec`: that remounts /sys, and slurmd then finds no cgroups.
  nsenter --net="/run/netns/${names[0]}" unshare --uts sh -c "hostname ${names[0]}; exec /usr/sbin/slurmctld -f '$dir/slurm.conf'"
  for n in "${names[@]}"; do
    nsenter --net="/run/netns/$n" unshare --uts --mount sh -c \
      "mount -t tmpfs tmpfs /tmp && hostname $n && exec /usr/sbin/slurmd -f '$dir/slurm.conf' -N $n"
  done
  client=(nsenter --net="/run/netns/${names[0]}")
fi
want="$(printf 'idle\n%.0s' $(seq "$(echo "$node_list" | tr ',' '\n' | wc -l)"))"
state=""
for _ in $(seq 100); do  # at most about 20 s
  kill -0 "$(cat "$dir/run/slurmctld.pid" 2>/dev/null || echo 0)" 2>/dev/null || { state="slurmctld exited"; break; }
  state="$(timeout 2 "${client[@]}" sinfo -h -N -o %t 2>/dev/null || true)"
  [ "$state" = "${want%$'\n'}" ] && { echo "local Slurm cluster up ($node_list): export SLURM_CONF=$dir/slurm.conf"; exit 0; }
  sleep 0.2
done
stop_cluster
echo "local-cluster.sh: the node did not become idle (state '${state:-none}'); logs in $dir/log" >&2
tail -5 "$dir/log/"*.log >&2 || true
exit 1
