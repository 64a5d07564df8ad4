# ZooKeeper and one tidelog broker in one container, as testcontainers' KafkaContainer runs
# Kafka: what tidelog.testing.TidelogContainer starts, and a quick way to try tidelog.
#
#   docker build -f docker/zookeeper.Dockerfile -t tidelog-zookeeper:dev .
#   docker build -f docker/standalone.Dockerfile -t tidelog-standalone:dev .
#   docker run -p 127.0.0.1:9092:9092 -e KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://127.0.0.1:9092 tidelog-standalone:dev
#
# ZOOKEEPER_IMAGE: the image docker/zookeeper.Dockerfile builds; python3.11 is installed from
# Debian's packages when it lacks it.
ARG ZOOKEEPER_IMAGE=tidelog-zookeeper:dev

FROM ${ZOOKEEPER_IMAGE} AS python
USER root
RUN if ! command -v python3.11 >/dev/null 2>&1; then \
        apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            python3.11 python3.11-venv && rm -rf /var/lib/apt/lists/*; \
    fi

# the dependencies: rebuilt only when pyproject.toml or the wheelhouse change
FROM python AS dependencies
COPY docker/install-venv.sh /usr/local/bin/
COPY docker/wheels/ /wheels/
COPY pyproject.toml /src/
RUN install-venv.sh dependencies

FROM python
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/tidelog --create-home tidelog \
    && mkdir -p /var/lib/tidelog/logs /etc/tidelog \
    && chown tidelog:tidelog /var/lib/tidelog/logs
COPY --from=dependencies /opt/tidelog /opt/tidelog
COPY docker/install-venv.sh /usr/local/bin/
# tidelog itself: a change to its source rebuilds this small layer only
COPY pyproject.toml README.md /src/
COPY tidelog /src/tidelog
RUN install-venv.sh tidelog && rm -rf /src
COPY docker/entrypoint.py docker/health.sh /opt/tidelog/
ENV PATH=/opt/tidelog/bin:$PATH PYTHONUNBUFFERED=1
USER tidelog
WORKDIR /var/lib/tidelog
VOLUME /var/lib/tidelog/logs
EXPOSE 9092
HEALTHCHECK --interval=1s --timeout=3s --start-period=60s --retries=3 \
    CMD ["bash", "/opt/tidelog/health.sh"]
ENTRYPOINT ["python", "/opt/tidelog/entrypoint.py", "standalone"]
