#!/bin/sh
# Kafka 0.10.2's kafka-consumer-perf-test.sh, over tidelog's perf tools: the same options and summary line.
exec "$(dirname "$0")/tidelog-kafka-tool" kafka-consumer-perf-test "$@"
