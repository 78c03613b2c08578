"""The Spark application of ``precommit`` in spark-submit mode (``compute.mode: submit``): stage
one epoch, then exit with the protocol's code (0 staged, 2 permanent, else retried).

A thin caller: every decision lives in the installed ``eos`` package. Airflow's precommit task
runs this file when ``EOS_SPARK_APP`` names it (the compose stack does), else the package's own
copy of the same entry point (``eos/compute/app.py``). Arguments::

    spark-submit spark_apps/eos_precommit.py --config PIPELINE.yaml --epoch N [--plan-hash H]
"""

import sys

from eos.compute.app import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
