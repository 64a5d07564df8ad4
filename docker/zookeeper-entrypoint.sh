#!/bin/sh
# Writes zoo.cfg from the environment and runs ZooKeeper in the foreground (PID 1).
set -eu
home=/var/lib/zookeeper
config="$home/zoo.cfg"
mkdir -p "$home/data"
cat >"$config" <<CFG
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$home/data
clientPort=2181
admin.enableServer=false
4lw.commands.whitelist=*
maxClientCnxns=0
quorumListenOnAllIPs=true
CFG
if [ -n "${ZOO_SERVERS:-}" ]; then
    echo "${ZOO_MY_ID:?ZOO_SERVERS needs ZOO_MY_ID}" >"$home/data/myid"
    for server in $ZOO_SERVERS; do echo "$server" >>"$config"; done
fi
# The server's jar, a logger, and the dependencies Debian ships beside it (the same set as
# tidelog/cluster/zookeeper.py's classpath()).
classpath=/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar
for jar in /usr/share/java/zookeeper-jute*.jar /usr/share/java/netty-*.jar \
    /usr/share/java/slf4j-api*.jar /usr/share/java/metrics-core*.jar /usr/share/java/snappy*.jar; do
    [ -e "$jar" ] && classpath="$classpath:$jar"
done
exec java -Xmx256m ${JAVA_OPTS:-} -cp "$classpath" org.apache.zookeeper.server.quorum.QuorumPeerMain "$config"
