#!/bin/sh
# Kafka 2.1's kafka-delete-records.sh, over tidelog: the same options, JSON file and output.
exec "$(dirname "$0")/tidelog-kafka-tool" kafka-delete-records "$@"
