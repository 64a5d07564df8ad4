# ZooKeeper from Debian's zookeeper package, for tidelog's compose cluster.
#
#   docker build -f docker/zookeeper.Dockerfile -t tidelog-zookeeper .
#
# Standalone by default; an ensemble member with ZOO_MY_ID=N and ZOO_SERVERS="server.1=zk1:2888:3888;2181
# server.2=..." (as the official zookeeper image takes them). Data: a volume at /var/lib/zookeeper.
# Client port 2181; healthy once `srvr` answers a Mode: line (ruok answers before it serves).
#
# ZOOKEEPER_BASE_IMAGE: any Debian bookworm image; zookeeper and Java are installed from Debian's
# packages when it lacks them (scripts/docker-engine.sh builds a stand-in with them where no
# registry is reachable).
ARG ZOOKEEPER_BASE_IMAGE=debian:bookworm-slim
FROM ${ZOOKEEPER_BASE_IMAGE}
RUN if ! dpkg -s zookeeper >/dev/null 2>&1; then \
        apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            zookeeper default-jre-headless && rm -rf /var/lib/apt/lists/*; \
    fi \
    && mkdir -p /var/lib/zookeeper/data && chown -R zookeeper:zookeeper /var/lib/zookeeper
COPY docker/zookeeper-entrypoint.sh /usr/local/bin/
USER zookeeper
VOLUME /var/lib/zookeeper
EXPOSE 2181 2888 3888
HEALTHCHECK --interval=2s --timeout=3s --start-period=30s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/2181 && printf srvr >&3 && grep -q Mode: <&3"]
ENTRYPOINT ["zookeeper-entrypoint.sh"]
