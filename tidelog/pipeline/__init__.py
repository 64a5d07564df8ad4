"""PySpark jobs over tidelog's data; the only package that imports pyspark.

- ``source``/``segments``: ``spark.read.format("tidelog")`` over segment files;
- ``stream``: ``spark.readStream.format("tidelog")`` over the Fetch API;
- ``report``/``render``/``plots``: ``tidelog report`` over run directories (tidelog/rundata.py);
  ``units`` writes their figures as text;
- ``session``: the local SparkSession they run in.
"""
