#!/bin/sh
# Kafka 0.10.2's kafka-run-class.sh, over tidelog: kafka.tools.DumpLogSegments only (as
# `tidelog dump-log`); any other class is refused by name.
exec "$(dirname "$0")/tidelog-kafka-tool" kafka-run-class "$@"
