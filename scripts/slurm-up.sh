#!/usr/bin/env bash
# Start a self-contained N-node Slurm 22.05 cluster on ONE Debian 12 host (no systemd needed).
# Everything (config, munge key/socket, state, logs, pid files, DB) lives under $LAB.
#   LAB=$LAB NNODES=4 [ACCOUNTING=1] [RESTD=1] bash slurm-up.sh
#   export SLURM_CONF=$LAB/etc/slurm.conf      # every client command (sbatch, squeue, ...) needs this
set -euo pipefail
LAB=${LAB:-${TMPDIR:-/tmp}/slurmlab}
NNODES=${NNODES:-4}
CPUS_PER_NODE=${CPUS_PER_NODE:-2}          # declared CPUs per node; may exceed real cores (config_overrides)
CTLD_PORT=${CTLD_PORT:-16817}              # slurmctld (Slurm default 6817 avoided)
NODE_PORT_BASE=${NODE_PORT_BASE:-17000}    # node i listens on NODE_PORT_BASE+i
SLURMD_TIMEOUT=${SLURMD_TIMEOUT:-10}       # dead slurmd -> node DOWN + job NODE_FAIL after ~2.7x this
REQUEUE_EXIT=${REQUEUE_EXIT:-}             # exit codes Slurm itself requeues a job for (RequeueExit)
CRED_EXPIRE=${CRED_EXPIRE:-10}             # >=5; a requeued job may restart only after this many seconds
ACCOUNTING=${ACCOUNTING:-0}                # 1 = MariaDB + slurmdbd, enables sacct
DBD_PORT=${DBD_PORT:-16819}
DB_PORT=${DB_PORT:-13306}
RESTD=${RESTD:-0}                          # 1 = slurmrestd on unix:$LAB/run/slurmrestd.sock
GPUS_PER_NODE=${GPUS_PER_NODE:-0}          # 1-5 = that many stand-in "gpu" gres per node (sinfo gres "gpu:N")
READY_TIMEOUT=${READY_TIMEOUT:-60}
export SLURM_CONF=$LAB/etc/slurm.conf
t0=$(date +%s.%N)
el() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }
waitfor() { local n=$(( READY_TIMEOUT * 10 )); while [ $n -gt 0 ]; do eval "$1" >/dev/null 2>&1 && return 0; sleep 0.1; n=$((n-1)); done; echo "timeout waiting for: $1" >&2; return 1; }
mkdir -p "$LAB"/{etc,munge,state/ctld,log,run,jobs}
chmod 755 "$LAB/munge"   # munged: socket dir must be o+x and not group/world-writable

# ---------- 1. munged (own key + socket; never touches /etc/munge or /run/munge) ----------
[ -s "$LAB/munge/munge.key" ] || dd if=/dev/urandom of="$LAB/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$LAB/munge/munge.key"
MSOCK=$LAB/munge/munge.socket
munged --socket="$MSOCK" --key-file="$LAB/munge/munge.key" --pid-file="$LAB/run/munged.pid" \
       --log-file="$LAB/log/munged.log" --seed-file="$LAB/munge/munged.seed" --num-threads=10
waitfor "munge -n -S '$MSOCK' | unmunge -S '$MSOCK'"

# ---------- 2. optional: MariaDB + slurmdbd ----------
ACCT_CONF="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
if [ "$ACCOUNTING" = 1 ]; then
  DB=$LAB/mysql; DSOCK=$DB/mysqld.sock; mkdir -p "$DB/data"
  [ -d "$DB/data/mysql" ] || mariadb-install-db --no-defaults --user=root --datadir="$DB/data" \
        --auth-root-authentication-method=socket --skip-test-db > "$LAB/log/mariadb-install.log" 2>&1
  ( setsid /usr/sbin/mariadbd --no-defaults --user=root --datadir="$DB/data" --socket="$DSOCK" \
      --port="$DB_PORT" --bind-address=127.0.0.1 --pid-file="$LAB/run/mariadbd.pid" \
      --log-error="$LAB/log/mariadbd.log" --skip-log-bin --innodb-buffer-pool-size=256M \
      --innodb-log-file-size=64M --innodb-lock-wait-timeout=900 </dev/null >/dev/null 2>&1 & )
  waitfor "mariadb-admin --no-defaults --socket='$DSOCK' -uroot ping"
  mariadb --no-defaults --socket="$DSOCK" -uroot -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
  cat > "$LAB/etc/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$MSOCK
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
DebugLevel=info
LogFile=$LAB/log/slurmdbd.log
PidFile=$LAB/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
CONF
  chmod 600 "$LAB/etc/slurmdbd.conf"     # slurmdbd refuses a group/world-readable conf
  ACCT_CONF="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
# munge socket used for the slurmctld/sacct/sacctmgr -> slurmdbd connection (NOT taken from AuthInfo!)
AccountingStoragePass=$MSOCK
JobAcctGatherType=jobacct_gather/linux"
fi

# ---------- 3. slurm.conf ----------
cat > "$LAB/etc/slurm.conf" <<CONF
# $NNODES-node Slurm cluster on ONE host (multiple-slurmd mode; Debian's build has it)
ClusterName=lab
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmdPort=$NODE_PORT_BASE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire (min 5, default 120) is also the delay before a requeued job may start again
AuthInfo=socket=$MSOCK,cred_expire=$CRED_EXPIRE
StateSaveLocation=$LAB/state/ctld
SlurmdSpoolDir=$LAB/state/%n
SlurmctldPidFile=$LAB/run/slurmctld.pid
SlurmdPidFile=$LAB/run/slurmd-%n.pid
SlurmctldLogFile=$LAB/log/slurmctld.log
SlurmdLogFile=$LAB/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$LAB/etc/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
$ACCT_CONF
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# fast scheduling passes so requeued / begin-time jobs start within ~1-2 s (defaults 30/60 s)
SchedulerParameters=bf_interval=1,sched_interval=2
# reject impossible jobs (e.g. -N 5 on 4 nodes) at submit time instead of pending forever
EnforcePartLimits=ALL
MpiDefault=none
SlurmdParameters=config_overrides
# 1: nodes DOWN for "Not responding" come back by themselves when their slurmd re-registers;
#    admin "state=down" stays down until "state=resume" (with 2 it would bounce back at once)
ReturnToService=1
JobRequeue=1
${REQUEUE_EXIT:+RequeueExit=$REQUEUE_EXIT}
SlurmdTimeout=$SLURMD_TIMEOUT
SlurmctldTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
MessageTimeout=10
NodeName=node[1-$NNODES] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$((NODE_PORT_BASE+1))-$((NODE_PORT_BASE+NNODES))] CPUs=$CPUS_PER_NODE Sockets=1 CoresPerSocket=$CPUS_PER_NODE ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN
# EXCLUSIVE: every job gets whole nodes (node state "allocated", never "mixed")
PartitionName=debug Nodes=node[1-$NNODES] Default=YES MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE
CONF
: > "$LAB/etc/plugstack.conf"
# optional GPUs (at most 5): slurmd's gpu plugin wants one device file per GPU, so harmless character
# devices stand in for /dev/nvidiaN; no cgroup device constraint is configured, so nothing is blocked
: > "$LAB/etc/gres.conf"
if [ "$GPUS_PER_NODE" -gt 0 ]; then
  stand_ins=(/dev/null /dev/zero /dev/full /dev/urandom /dev/random)
  gpu_files=$(IFS=,; echo "${stand_ins[*]:0:$GPUS_PER_NODE}")
  sed -i "s/^NodeName=.*/& Gres=gpu:$GPUS_PER_NODE/" "$LAB/etc/slurm.conf"
  echo "GresTypes=gpu" >> "$LAB/etc/slurm.conf"
  printf 'AutoDetect=off\nNodeName=node[1-%s] Name=gpu File=%s\n' "$NNODES" "$gpu_files" > "$LAB/etc/gres.conf"
fi

if [ "$ACCOUNTING" = 1 ]; then
  slurmdbd
  waitfor "exec 3<>/dev/tcp/127.0.0.1/$DBD_PORT"
  sacctmgr -i add cluster lab >/dev/null 2>&1 || true   # "already exists" on reuse is fine
fi

# ---------- 4. slurmctld ----------
slurmctld -c      # -c: discard saved jobs (fresh queue); node state is rebuilt from slurm.conf
waitfor "scontrol ping | grep -q 'is UP'"

# ---------- 5. one slurmd per node ----------
for i in $(seq 1 "$NNODES"); do mkdir -p "$LAB/state/node$i"; slurmd -N "node$i"; done
waitfor "[ \"\$(sinfo -h -t idle -o %D | awk '{s+=\$1} END{print s+0}')\" = $NNODES ]"

# ---------- 6. optional: slurmrestd (unix socket, rest_auth/local) ----------
if [ "$RESTD" = 1 ]; then
  rm -f "$LAB/run/slurmrestd.sock"
  ( SLURMRESTD_SECURITY=disable_user_check setsid slurmrestd -a rest_auth/local \
      -s openapi/v0.0.38$([ "$ACCOUNTING" = 1 ] && echo ,openapi/dbv0.0.38) \
      "unix:$LAB/run/slurmrestd.sock" </dev/null >"$LAB/log/slurmrestd.log" 2>&1 &
    echo $! > "$LAB/run/slurmrestd.pid" )
  waitfor "curl -sf --unix-socket '$LAB/run/slurmrestd.sock' http://localhost/slurm/v0.0.38/ping"
fi
sinfo
echo "slurm-up: $NNODES nodes idle after $(el) s (ACCOUNTING=$ACCOUNTING RESTD=$RESTD); export SLURM_CONF=$SLURM_CONF"
