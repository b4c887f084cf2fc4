#!/usr/bin/env bash
# Make sure MariaDB and Redis are up for the tests (start them when they are down), and that the
# test user exists. Idempotent: safe to run on a machine where both already run.
set -euo pipefail
DB_USER=${RC_TEST_DB_USER:-recovery_console}
DB_PASSWORD=${RC_TEST_DB_PASSWORD:-recovery_console}

waitfor() { for _ in $(seq 1 200); do eval "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "timed out: $1" >&2; return 1; }

if ! mariadb-admin ping >/dev/null 2>&1; then
  echo "Starting MariaDB ..."
  install -d -o mysql -g root -m 755 /run/mysqld
  # --pidfile matters: without it start-stop-daemon may match another mariadbd and start nothing.
  start-stop-daemon --start --oknodo --background --pidfile /run/mysqld/mysqld.pid \
    --exec /usr/sbin/mariadbd -- --user=mysql
  waitfor "mariadb-admin ping"
fi
mariadb -e "
  CREATE DATABASE IF NOT EXISTS recovery_console CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
  CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASSWORD';
  CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASSWORD';
  GRANT ALL PRIVILEGES ON recovery_console.* TO '$DB_USER'@'localhost', '$DB_USER'@'127.0.0.1';
  GRANT ALL PRIVILEGES ON \`test\\_%\`.* TO '$DB_USER'@'localhost', '$DB_USER'@'127.0.0.1';
  FLUSH PRIVILEGES;"

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "Starting Redis ..."
  install -d /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  waitfor "redis-cli -h 127.0.0.1 -p 6379 ping"
fi
echo "MariaDB and Redis are up."
