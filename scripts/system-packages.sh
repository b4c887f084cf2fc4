#!/usr/bin/env bash
# Install the Debian packages a role needs, when they are missing (needs root and apt-get).
#   scripts/system-packages.sh build   -> what pip needs to build mysqlclient
#   scripts/system-packages.sh test    -> plus the servers and tools the test suite starts
set -euo pipefail
role=${1:-build}
want=(pkg-config libmariadb-dev gcc)
if [ "$role" = test ]; then
  want+=(mariadb-server redis-server prometheus openssl chromium chromium-driver)
  # the controller tests' local Slurm cluster (scripts/slurm-up.sh) and sshd for the SSH transport
  want+=(munge slurmctld slurmd slurm-client openssh-server openssh-client)
fi
missing=()
for pkg in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "Missing system packages: ${missing[*]}. Install them (e.g. sudo apt-get install ${missing[*]}) and retry." >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "Installing ${missing[*]} ..."
apt-get update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
