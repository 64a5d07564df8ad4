"""Kafka load from locust: users that produce and consume (``locustfile.py``), the design's two
workloads as locust config files (``workloads/``), and the blocking client they use.

The client is tidelog's own protocol code on blocking sockets (``client.py``), which locust's
gevent patching turns cooperative: a user waiting for an answer lets the others run. Why not
the alternatives:

- kafka-python keeps a Python object per record and sends from a background thread (a greenlet
  under gevent: it works, acknowledgements arrive through its callbacks), where these users send
  a batch as one repeated message and count fetched records with ``struct``. One locust user in
  one process, acks=1, 100-byte records, three brokers on this project's shared 2-core machine
  (``benchmarks/locust_load.py``, three runs): kafka-python 2,700 to 3,600 records/s (its
  buffer held records for seconds before sending), this client 20,000 to 26,700, 5.5 to 9
  times as many.
- tidelog's asyncio client (``tidelog/protocol/client.py``): an asyncio loop run inside a greenlet
  blocks every other user while it runs, and running it on gevent's hub would need a bridge
  that locust does not have.
"""
