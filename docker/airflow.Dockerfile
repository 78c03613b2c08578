# Airflow image for docker-compose.yaml: the official Airflow 3.3.2 image plus
#   - a headless JRE, because the Spark tasks run `spark-submit` from the pyspark wheel
#     (client mode: the Spark driver lives in the Airflow task process), and
#   - the eos package with the extras the stack uses, installed by docker/install-eos.sh with
#     the lock (requirements.txt) as constraints, Airflow's own practice: the lock pins
#     apache-airflow==3.3.2, the image's version, so the install never changes Airflow;
#   - in $AIRFLOW_HOME (/opt/airflow) the two files a deployment writes for eos: the DAG file in
#     dags/ and the scheduler's preload in config/airflow_local_settings.py
#     (eos.airflow.environment); the epochs view's plugin comes from the package's entry point;
#   - the repository's pipelines in /opt/airflow/pipelines (EOS_PIPELINES_DIR in
#     docker-compose.yaml); a deployment mounts or copies its own there.
# Nothing of the repository is mounted at run time.
#
# Build context: the repository root (see docker-compose.yaml; .dockerignore keeps it small).
FROM apache/airflow:3.3.2-python3.11

USER root
# /usr/share/man/man1 must exist for the openjdk postinst script on slim Debian images.
# The java-home symlink gives a JAVA_HOME that does not depend on the CPU architecture.
RUN set -eux; \
    mkdir -p /usr/share/man/man1; \
    apt-get update; \
    apt-get install -y --no-install-recommends openjdk-17-jre-headless; \
    ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/java-home; \
    apt-get autoremove -yqq --purge; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-home

USER airflow
COPY --chown=airflow:0 docker/install-eos.sh /opt/eos/install-eos.sh
COPY --chown=airflow:0 pyproject.toml README.md LICENSE requirements.txt /opt/eos/src/
COPY --chown=airflow:0 include/eos /opt/eos/src/include/eos
RUN bash /opt/eos/install-eos.sh "$(command -v python)" \
        "/opt/eos/src[airflow,audit,avro,protobuf,json-schema,s3,celery,postgres,iceberg]" \
        /opt/eos/src/requirements.txt \
    && python -c "from pathlib import Path; from eos.airflow.environment import prepare_home; prepare_home(Path('/opt/airflow'))"
COPY --chown=airflow:0 include/pipelines /opt/airflow/pipelines
ENV EOS_PIPELINES_DIR=/opt/airflow/pipelines
