"""``pyspark_durable_streams.delta`` with the real ``delta-spark`` of the ``[delta]`` extra.

The extra cannot be installed into the test virtualenv (delta-spark 4.4.1 declares
``pyspark<=4.2.0``; the tests run a newer PySpark) and its jars cannot be fetched (no Maven
Central here), so ``make install-test`` puts delta-spark's Python package (with
``--no-deps``, beside the virtualenv: tests/delta_spark/site) where only this test's
subprocess imports it. What runs is the helper's part of the working path: delta-spark's own
``configure_spark_with_delta_pip`` on a builder that ``configure_delta`` prepared. Starting
the session (resolving the jars) is not tested here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SITE = REPO_ROOT / "tests" / "delta_spark" / "site"

_PROBE = """
import json, pyspark
from importlib.metadata import version
from pyspark.sql import SparkSession
from pyspark_durable_streams.delta import configure_delta
builder = SparkSession.builder.config("spark.sql.extensions", "com.example.Mine")
configured = configure_delta(builder, extra_packages=["org.example:extra_2.13:1.0"])
print(json.dumps({"options": configured._options, "delta": version("delta-spark"), "spark": pyspark.__version__}))
"""


def test_configure_delta_with_the_real_delta_spark() -> None:
    assert (SITE / "delta" / "pip_utils.py").exists(), f"{SITE} lacks delta-spark: run make install-test"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SITE), *sys.path])}
    result = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    options, spark = found["options"], ".".join(found["spark"].split(".")[:2])
    assert options["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"  # replaced, as documented
    assert options["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    # delta-spark names the jar built for this PySpark's minor version, then the extra packages
    jar = f"io.delta:delta-spark_{spark}_2.13:{found['delta']}"
    assert options["spark.jars.packages"] == f"{jar},org.example:extra_2.13:1.0"
