# Airflow image for docker-compose.yaml: the official Airflow 3.1.8 image plus
#   - a headless JRE, because the Spark tasks run `spark-submit` from the pyspark wheel
#     (client mode: the Spark driver lives in the Airflow task process), and
#   - the project's locked Python dependencies (requirements.txt).
# The project itself is not copied: docker-compose.yaml mounts the repository at
# /opt/airflow/project and puts /opt/airflow/project/include on PYTHONPATH.
#
# Build context: the repository root (see docker-compose.yaml).
FROM apache/airflow:3.1.8-python3.11

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
COPY requirements.txt /requirements.txt
# requirements.txt pins apache-airflow==3.1.8 itself, so this cannot up- or downgrade Airflow.
RUN pip install --no-cache-dir -r /requirements.txt
