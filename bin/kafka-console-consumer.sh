#!/bin/sh
# Kafka 0.10.2's kafka-console-consumer.sh, over tidelog: the same options and output.
exec "$(dirname "$0")/tidelog-kafka-tool" kafka-console-consumer "$@"
