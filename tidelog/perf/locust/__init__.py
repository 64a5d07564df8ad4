"""Kafka load from locust: users that produce and consume (``locustfile.py``), the design's two
workloads as locust config files (``workloads/``), and the blocking client they use.

The client is tidelog's own protocol code on blocking sockets (``client.py``), which locust's
gevent patching turns cooperative. Not kafka-python: its producer keeps a Python object per
record and sends from a background thread (a greenlet under gevent), where tidelog's users
send a batch as one repeated message (no per-record work) and count fetched records with
``struct``. Not tidelog's asyncio client either: an asyncio
loop inside a gevent greenlet blocks every other user while it runs.
"""
