"""``tidelog perf tiered-storage``: the tiered-storage design's three test cases, reproduced.

The design (DESIGN.md, "Reference figures") ran two workloads, acks=all and acks=1, each with
in-sync consumers reading 4x what was produced, in three cases: normal traffic; the same plus
out-of-sync consumers reading old data; a broker rebuilt after its data was wiped. It reported
the average (case 3: the largest) p99 and p95 produce latency over one-second windows and the
rebuild duration, with tiered storage and without.

Here each {without, with} tiered storage gets a cluster of its own (the same broker settings,
remote tier enabled on every broker; only the topic's ``remote.storage.enable`` differs, so a
rebuild replicates one topic's data), a topic as the design's (snappy, replication factor 3,
min.insync.replicas 2, many partitions) and historical data; then every case x workload runs:

- the in-sync readers start at the log end, the producer at the workload's rate;
- the case's event goes in (``events.CASES``): nothing; catching-up readers start at the earliest
  offset; or (rebuild) a broker, killed and wiped before the traffic started, is started again,
  and the run waits until it is back in every ISR (the rebuild's duration, from its start);
- the traffic goes on to the end of ``duration`` (or a quarter of it past the event).

Every case x workload x tiered leaves a run directory (tidelog/rundata.py) under ``--out``:
acks.parquet (every produce acknowledgement, its time and latency), consumer.parquet (each
reader's offset and lag per partition every second), events.parquet (what was injected; the
rebuild as kind ``rebuild`` with ``duration_ms``, written only once the broker is in every ISR),
and metadata.json (the exact command, seed, profile, machine). The figures printed are taken
from the acks tables, in the design's table shape, beside the design's own.
"""
