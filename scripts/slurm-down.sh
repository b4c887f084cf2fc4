#!/usr/bin/env bash
# Stop everything slurm-up.sh started, by the PIDs recorded under $LAB/run (never by name).
LAB=${LAB:-${TMPDIR:-/tmp}/slurmlab}
export SLURM_CONF=$LAB/etc/slurm.conf
# alive = exists and is not a zombie (daemons get re-parented to PID 1, which may reap them late)
pstate() { local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; s=${s##*) }; set -- $s; echo "$1"; }
alive() { local st; [ -n "${1:-}" ] && st=$(pstate "$1") && [ "$st" != Z ]; }
stop() {  # stop <pidfile>: TERM, wait up to 10 s, then KILL
  local f=$1 p; [ -f "$f" ] || return 0; p=$(cat "$f")
  if alive "$p"; then kill -TERM "$p"; for _ in $(seq 1 100); do alive "$p" || break; sleep 0.1; done; alive "$p" && kill -KILL "$p"; fi
  rm -f "$f"
}
# 1. cancel all jobs so slurmstepd and the job processes exit cleanly
if [ -f "$LAB/run/slurmctld.pid" ] && scontrol ping 2>/dev/null | grep -q 'is UP'; then
  scancel --user="$(id -un)" 2>/dev/null || true
  for _ in $(seq 1 100); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
fi
# 2. daemons, by PID file
stop "$LAB/run/slurmrestd.pid"
for f in "$LAB"/run/slurmd-*.pid; do stop "$f"; done
stop "$LAB/run/slurmctld.pid"
stop "$LAB/run/slurmdbd.pid"
stop "$LAB/run/mariadbd.pid"
# 3. leftovers of THIS cluster (e.g. after a slurmd was kill -9'd): slurmstepd and job processes keep running.
#    Identify them by SLURM_CONF=<ours> in /proc/PID/environ (slurmstepd inherits it from slurmd; job
#    processes get it via sbatch's default --export=ALL), plus all descendants of such a slurmstepd.
ours() { tr '\0' '\n' 2>/dev/null < "/proc/$1/environ" | grep -qx "SLURM_CONF=$SLURM_CONF"; }
ppid() { local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 1; return; }; s=${s##*) }; set -- $s; echo "$2"; }
pairs=$(for f in /proc/[0-9]*/stat; do q=${f#/proc/}; q=${q%/stat}; echo "$q $(ppid "$q")"; done)
kids() { local c; for c in $(echo "$pairs" | awk -v pp="$1" '$2==pp{print $1}'); do echo "$c"; kids "$c"; done; }
self_and_parents() { local p=$$; while [ "${p:-1}" -gt 1 ]; do echo "$p"; p=$(ppid "$p"); done; }
skip=" $(self_and_parents | tr '\n' ' ') "
victims=""
for d in /proc/[0-9]*; do
  p=${d#/proc/}; case "$skip" in *" $p "*) continue;; esac
  ours "$p" || continue
  if [ "$(cat "$d/comm" 2>/dev/null)" = slurmstepd ]; then victims="$victims $p $(kids "$p" | tr '\n' ' ')"
  elif tr '\0' '\n' 2>/dev/null < "$d/environ" | grep -q '^SLURM_JOB_ID='; then victims="$victims $p"; fi
done
for p in $victims; do case "$skip" in *" $p "*) ;; *) kill -KILL "$p" 2>/dev/null;; esac; done
stop "$LAB/run/munged.pid"
echo "slurm-down: done"
