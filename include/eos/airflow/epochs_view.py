"""The Airflow UI's epochs view (Flink's Checkpoints tab, inside Airflow): a FastAPI app the
Airflow 3 API server mounts from ``eos.airflow.plugin``, and the nav entry that shows it.

Thin by design: every page and API answer is a ``PipelineStatus`` (``eos.core.pipeline_status``,
what
``eos status`` prints; here from ``eos.airflow.epochs_cache``) rendered by
``eos.airflow.epochs_html``; the verify button starts ``eos verify`` through
``eos.airflow.verify_runs``. The app writes no table (an audit it starts records its verdict, as
``eos verify`` always does).

The app itself (its routes, their access checks) is ``eos.airflow.epochs_app``; this module is
what the plugin registers without importing it.
"""

URL_PREFIX = "/eos"
NAME = "Exactly-once epochs"

# Airflow's nav: Browse -> "Exactly-once epochs", the index page in an iframe at /plugin/eos-epochs.
EXTERNAL_VIEW = {
    "name": NAME,
    "href": URL_PREFIX.lstrip("/") + "/",  # relative: works behind a proxy's base path
    "url_route": "eos-epochs",
    "destination": "nav",
    "category": "browse",
}
