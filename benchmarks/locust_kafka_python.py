"""The baseline of benchmarks/locust_load.py: kafka-python's producer in a locust user.

Under locust's gevent patching, kafka-python's sender thread is a greenlet. The user hands
records to send() in runs of 100 and yields; each acknowledgement fires a request event timed
from its send() call to its callback. Options as tidelog's locustfile names them.
"""

from __future__ import annotations

import time
from typing import Any

from kafka import KafkaProducer
from locust import User, events, task


@events.init_command_line_parser.add_listener
def add_arguments(parser: Any) -> None:
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="locust")
    parser.add_argument("--acks", default="1")
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--batch-bytes", type=int, default=16384)


class KafkaPythonProducerUser(User):
    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.topic = options.topic
        self.payload = b"x" * options.record_size
        self.producer = KafkaProducer(
            bootstrap_servers=options.bootstrap,
            acks="all" if options.acks == "all" else int(options.acks),
            batch_size=options.batch_bytes,
            linger_ms=0,
        )

    def on_stop(self) -> None:
        self.producer.close(timeout=5)

    def acknowledged(self, sent: float, _: Any) -> None:
        self.environment.events.request.fire(
            request_type="produce",
            name=f"{self.topic} kafka-python",
            response_time=(time.perf_counter() - sent) * 1000,
            response_length=len(self.payload),
            exception=None,
            context={},
        )

    def failed(self, sent: float, error: Exception) -> None:
        self.environment.events.request.fire(
            request_type="produce",
            name=f"{self.topic} kafka-python",
            response_time=(time.perf_counter() - sent) * 1000,
            response_length=0,
            exception=error,
            context={},
        )

    @task
    def produce(self) -> None:
        for _ in range(100):
            sent = time.perf_counter()
            future = self.producer.send(self.topic, self.payload)
            future.add_callback(self.acknowledged, sent)
            future.add_errback(self.failed, sent)
        time.sleep(0)  # gevent's: the sender greenlet runs
