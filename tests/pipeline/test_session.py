"""The Spark session tidelog's report runs on."""

from __future__ import annotations

from tidelog.pipeline.session import DRIVER_JAVA_OPTIONS


def test_the_drivers_jvm_runs_with_tidelogs_java_options(spark):
    # a driver's Java options set after its JVM started would be silently ignored: read them
    # back from the JVM itself
    arguments = list(
        spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
    )
    assert set(DRIVER_JAVA_OPTIONS.split()) <= set(arguments), arguments
    assert "-XX:TieredStopAtLevel=1" in arguments
