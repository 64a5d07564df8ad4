#!/usr/bin/env bash
# make demo: a local 3-broker cluster with an embedded ZooKeeper, replicated workloads with acks=all
# and acks=1, one chaos scenario, and the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
tidelog=.venv/bin/tidelog
dir=demo-cluster
records=${DEMO_RECORDS:-30000}

rm -rf "$dir"
trap '"$tidelog" cluster down --dir "$dir" >/dev/null 2>&1 || true' EXIT

echo "== Starting a local cluster: ZooKeeper and 3 brokers (state in $dir/)"
"$tidelog" cluster up --brokers 3 --dir "$dir"
"$tidelog" cluster status --dir "$dir"

echo
echo "== Creating topic 'demo': 3 partitions, each on 3 brokers, min.insync.replicas=2"
"$tidelog" topic create --dir "$dir" --topic demo --partitions 3 --replication-factor 3 \
    --config min.insync.replicas=2
"$tidelog" topic describe --dir "$dir" --topic demo

echo
echo "== Producing $records records of 1 KiB with acks=all (every in-sync replica has them)"
"$tidelog" perf produce --dir "$dir" --topic demo --num-records "$records" --record-size 1024 \
    --acks all --batch-size 262144 --linger-ms 10

echo
echo "== Producing $records more with acks=1 (the leader has them)"
"$tidelog" perf produce --dir "$dir" --topic demo --num-records "$records" --record-size 1024 \
    --acks 1 --batch-size 262144 --linger-ms 10

echo
echo "== Consuming all $((2 * records)) back"
"$tidelog" perf consume --dir "$dir" --topic demo --messages "$((2 * records))"

echo
echo "== What the brokers hold"
for broker in 1 2 3; do
    port=$(python3 -c "import json,sys; print(json.load(open('$dir/cluster.json'))['brokers']['$broker']['admin_port'])")
    python3 - "$port" "$broker" <<'PY'
import json, sys, urllib.request
port, topic_broker = sys.argv[1], int(sys.argv[2])
topic = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/topics/demo"))
for p in topic["partitions"]:
    if "log_end_offset" in p:
        role = "leader  " if p["leader"] == topic_broker else "follower"
        print(f"broker {topic_broker} ({role}) demo-{p['partition']}: offsets {p['log_start_offset']}..{p['log_end_offset']}, "
              f"high watermark {p['high_watermark']}, ISR {p['isr']}, {p['size_bytes'] / 1e6:.1f} MB")
PY
done

echo
echo "== A chaos scenario: while producing to a new topic, SIGKILL and restart the leader of its partition 0"
"$tidelog" scenario replication --dir "$dir" --failure hard_bounce --target leader --cycles 1 --rate 100

echo
echo "== Stopping the cluster"
"$tidelog" cluster down --dir "$dir"
trap - EXIT
