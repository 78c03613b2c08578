# Spark standalone master/worker image for docker-compose.yaml: Apache Spark 4.0.1 (Scala 2.13,
# Java 17, the same JVM as the Airflow image) plus
#   - the Delta Lake jars (delta-spark + delta-storage 4.0.1) in /opt/spark/jars, downloaded from
#     Maven Central at build time and checked against Maven's .sha1 files, so Spark users can
#     query the Delta tables with the Delta SQL extensions;
#   - a Python 3.11 virtualenv (/opt/venv, first on PATH) with the eos package and the record
#     formats' extras, installed by docker/install-eos.sh with the lock as constraints: the
#     executors run its Kafka Python Data Source, parsers and Delta/Arrow code, the Connect
#     server's driver plans with it;
#   - the repository's pipelines at the path the Airflow image has them (/opt/airflow/pipelines).
#
# Why Python 3.11: PySpark refuses to run when the executors' Python minor version differs from
# the driver's, and the driver runs in the Airflow image (python3.11). The base image ships
# Ubuntu 22.04's python3 (3.10), so 3.11 comes from the Ubuntu archive and `python3` on PATH is
# the venv's 3.11 interpreter.
#
# Build context: the repository root (the package's source is copied; nothing is mounted).
FROM apache/spark:4.0.1-scala2.13-java17-python3-ubuntu

USER root

ARG DELTA_VERSION=4.0.1
ARG SCALA_BINARY_VERSION=2.13
ARG MAVEN_REPO=https://repo1.maven.org/maven2

RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends ca-certificates curl python3.11 python3.11-venv; \
    rm -rf /var/lib/apt/lists/*

RUN set -eux; \
    cd /opt/spark/jars; \
    for artifact in "delta-spark_${SCALA_BINARY_VERSION}" delta-storage; do \
        jar="${artifact}-${DELTA_VERSION}.jar"; \
        url="${MAVEN_REPO}/io/delta/${artifact}/${DELTA_VERSION}/${jar}"; \
        curl -fsSL --retry 5 -o "${jar}" "${url}"; \
        echo "$(curl -fsSL --retry 5 "${url}.sha1" | cut -c1-40)  ${jar}" | sha1sum -c -; \
    done; \
    chmod 0644 delta-*.jar

COPY docker/install-eos.sh /opt/eos/install-eos.sh
COPY pyproject.toml README.md LICENSE requirements.txt /opt/eos/src/
COPY include/eos /opt/eos/src/include/eos
RUN set -eux; \
    python3.11 -m venv /opt/venv; \
    bash /opt/eos/install-eos.sh /opt/venv/bin/python "/opt/eos/src[avro,protobuf,json-schema]" \
        /opt/eos/src/requirements.txt; \
    rm -rf /opt/eos/src
COPY include/pipelines /opt/airflow/pipelines

# docker-compose.yaml runs these containers as ${AIRFLOW_UID}:0, the Airflow containers' user.
# Give group 0 the directories a standalone master/worker writes to.
RUN set -eux; \
    mkdir -p /opt/spark/work /opt/spark/logs; \
    chgrp -R 0 /opt/spark/work /opt/spark/logs /opt/spark/work-dir; \
    chmod -R g+rwX /opt/spark/work /opt/spark/logs /opt/spark/work-dir

ENV PATH=/opt/venv/bin:${PATH} \
    PYSPARK_PYTHON=/opt/venv/bin/python

USER spark
