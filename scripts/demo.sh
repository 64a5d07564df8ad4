#!/usr/bin/env bash
# make demo: a local 3-broker cluster with an embedded ZooKeeper, a short workload, the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
tidelog=.venv/bin/tidelog
dir=demo-cluster
records=${DEMO_RECORDS:-50000}

rm -rf "$dir"
trap '"$tidelog" cluster down --dir "$dir" >/dev/null 2>&1 || true' EXIT

echo "== Starting a local cluster: ZooKeeper and 3 brokers (state in $dir/)"
"$tidelog" cluster up --brokers 3 --dir "$dir"
"$tidelog" cluster status --dir "$dir"

echo
echo "== Creating topic 'demo' with 3 partitions"
"$tidelog" topic create --dir "$dir" --topic demo --partitions 3 --replication-factor 1
"$tidelog" topic describe --dir "$dir" --topic demo

echo
echo "== Producing $records records of 1 KiB with acks=1"
"$tidelog" perf produce --dir "$dir" --topic demo --num-records "$records" --record-size 1024 \
    --acks 1 --batch-size 65536

echo
echo "== Consuming them back"
"$tidelog" perf consume --dir "$dir" --topic demo --messages "$records"

echo
echo "== What the brokers hold"
for broker in 1 2 3; do
    port=$(python3 -c "import json,sys; print(json.load(open('$dir/cluster.json'))['brokers']['$broker']['admin_port'])")
    python3 - "$port" <<'PY'
import json, sys, urllib.request
port = sys.argv[1]
topic = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/topics/demo"))
for p in topic["partitions"]:
    if "log_end_offset" in p:
        print(f"broker {p['leader']}: demo-{p['partition']} offsets {p['log_start_offset']}..{p['log_end_offset']}, "
              f"high watermark {p['high_watermark']}, {p['size_bytes'] / 1e6:.1f} MB in {len(p['segments'])} segment(s)")
PY
done

echo
echo "== Stopping the cluster"
"$tidelog" cluster down --dir "$dir"
trap - EXIT
