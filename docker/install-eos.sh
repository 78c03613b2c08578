#!/usr/bin/env bash
# Install eos into a Python environment the way the images do, and the way a deployment adds it
# to the Airflow environment it already runs:
#
#   docker/install-eos.sh PYTHON PACKAGE [CONSTRAINTS]
#
#   PYTHON       the environment's interpreter (e.g. /home/airflow/.local/bin/python, a venv's python)
#   PACKAGE      what to install: a wheel, a source directory, or either with extras, e.g.
#                "/src[airflow,avro,protobuf,json-schema,s3,celery,postgres]"
#   CONSTRAINTS  a constraints file (default: none). The images pass the repository's lock
#                (requirements.txt), Airflow's own practice: every dependency the lock names
#                gets the locked version, the package's ranges decide nothing on their own.
#
# The dependencies come from the package index (or whatever index pip/uv is configured with);
# the package brings its entry points (the `eos` command, the sink types, the Airflow plugin).
# uv installs when it is on PATH (fast, shares its cache), pip otherwise.
set -euo pipefail

[ $# -ge 2 ] || { sed -n '4,10p' "$0" >&2; exit 2; }
python=$1
package=$2
constraints=${3:-}

args=()
[ -n "$constraints" ] && args+=(--constraint "$constraints")

if command -v uv >/dev/null 2>&1; then
  uv pip install --quiet --python "$python" "${args[@]}" "$package"
else
  "$python" -m pip install --quiet --no-cache-dir --disable-pip-version-check "${args[@]}" "$package"
fi

# The installed package answers for itself: its version, its command, its entry points.
"$python" - <<'PY'
from importlib.metadata import entry_points, version

import eos

assert eos.__version__ == version("eos-pipeline"), (eos.__version__, version("eos-pipeline"))
sinks = {ep.name for ep in entry_points(group="eos.sinks")}
assert {"delta", "kafka"} <= sinks, f"eos.sinks entry points missing: {sinks}"
print(f"eos {eos.__version__} installed (sink types: {', '.join(sorted(sinks))})")
PY
