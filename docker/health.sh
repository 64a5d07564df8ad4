#!/bin/bash
# The images' healthcheck: healthy = the admin API's /health answers 200 (the broker is
# registered in ZooKeeper and serving). Bash alone, no Python: the engine runs this every two
# seconds in every broker, and a Python start importing tidelog cost more CPU than an idle broker
# and, on a loaded machine, took longer than the check's timeout (healthy brokers were reported
# unhealthy). The admin port is read from the settings the entry point wrote (admin.listener).
port=8080
while IFS='=' read -r key value; do
    [ "$key" = admin.listener ] && port=${value##*:}
done </var/lib/tidelog/server.properties
exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
IFS= read -r -t 2 status <&3 || { echo "no answer from 127.0.0.1:$port/health"; exit 1; }
case $status in
"HTTP/1."?" 200 "*) exit 0 ;;
esac
echo "not healthy: ${status%$'\r'}"
exit 1
