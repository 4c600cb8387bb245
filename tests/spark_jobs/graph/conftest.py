"""The views use a pandas UDF: make Spark's Python workers run this interpreter (which has numpy).

Set at collection time, before the session-scoped ``spark`` fixture creates the SparkContext, which reads
``PYSPARK_PYTHON`` once. (``spark_jobs.session`` should set this itself; see the graph report.)
"""

import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
