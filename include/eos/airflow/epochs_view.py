"""The Airflow UI's epochs view (Flink's Checkpoints tab, inside Airflow): a FastAPI app the
Airflow 3.1 API server mounts from ``plugins/eos_epochs.py``, and the nav entry that shows it.

Thin by design: every page and API answer is ``eos.core.status.pipeline_status`` (what ``eos
status``
prints) rendered by ``eos.airflow.epochs_html``; the verify button starts ``eos verify`` through
``eos.airflow.verify_runs``. The app writes no table (an audit it starts records its verdict, as
``eos verify`` always does).

Security: the API server does not authenticate plugin apps by itself, so the app depends on
Airflow's ``requires_authenticated()`` for every route: the browser's Airflow session cookie
(or a bearer token) must name a valid user, else 401 (no token) or 403 (an invalid one). The
one route that does something (start an audit) also requires the ``X-EOS-Request`` header,
which another site's form cannot send, so a logged-in user cannot be made to start audits by a
foreign page. Kafka client settings are shown redacted.

Routes (under ``URL_PREFIX``): ``/`` the pipelines, ``/pipelines/{name}`` a pipeline's page,
``/api/pipelines`` and ``/api/pipelines/{name}`` the same as JSON, ``/api/pipelines/{name}/verify``
GET (the last background audit) and POST (start one unless one runs: 202).
"""


import time
from functools import lru_cache
from typing import Any

URL_PREFIX = "/eos"
NAME = "Exactly-once epochs"
REQUEST_HEADER = "X-EOS-Request"

# Airflow's nav: Browse -> "Exactly-once epochs", the index page in an iframe at /plugin/eos-epochs.
EXTERNAL_VIEW = {
    "name": NAME,
    "href": URL_PREFIX.lstrip("/") + "/",  # relative: works behind a proxy's base path
    "url_route": "eos-epochs",
    "destination": "nav",
    "category": "browse",
}


@lru_cache(maxsize=1)
def fastapi_app() -> dict[str, Any]:
    """The ``fastapi_apps`` entry. Built on first use (only the API server asks for it), so a
    task process loading plugins does not import the API server's security module."""
    return {"app": create_app(), "url_prefix": URL_PREFIX, "name": NAME}


def create_app() -> Any:
    from airflow.api_fastapi.core_api.security import requires_authenticated
    from fastapi import Depends, FastAPI, HTTPException, Request
    from fastapi.responses import HTMLResponse

    from eos.airflow import epochs_html as epochs_page
    from eos.airflow import verify_runs
    from eos.core import verdicts as audits
    from eos.core.config import list_pipelines, load_config
    from eos.core.errors import EosError
    from eos.core.layout import tables_for
    from eos.core.status import pipeline_status

    app = FastAPI(title=NAME, dependencies=[Depends(requires_authenticated())],
                  docs_url=None, redoc_url=None, openapi_url=None)

    def config_of(name: str) -> Any:
        paths = {path.stem: path for path in list_pipelines()}
        if name not in paths:
            raise HTTPException(404, f"no pipeline named {name!r} (known: {sorted(paths)})")
        try:
            return load_config(paths[name])
        except EosError as error:
            raise HTTPException(422, str(error)) from None

    def links(request: Request) -> epochs_page.Links:
        # The app is mounted at URL_PREFIX under whatever base path Airflow is served from.
        root = request.scope.get("root_path", "")
        return epochs_page.Links(airflow=root.removesuffix(URL_PREFIX))

    def summaries() -> list[dict[str, Any]]:
        rows = []
        for path in list_pipelines():
            try:
                status = pipeline_status(load_config(path), limit=0, with_lag=False)
            except EosError as error:
                rows.append({"name": path.stem, "error": str(error)})
                continue
            rows.append({"name": status.name, "dag_id": status.dag_id,
                         "committed_epoch": status.committed_epoch,
                         "last_audit": status.last_audit})
        return rows

    def require_header(request: Request) -> None:
        if request.headers.get(REQUEST_HEADER) != "1":
            raise HTTPException(403, f"missing header {REQUEST_HEADER}: 1")

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request) -> HTMLResponse:
        return _no_store(HTMLResponse(epochs_page.index_page(summaries(), links(request))))

    @app.get("/pipelines/{name}", response_class=HTMLResponse)
    def pipeline(name: str, request: Request, limit: int = 50) -> HTMLResponse:
        started = time.monotonic()
        status = pipeline_status(config_of(name), limit=limit)
        took_ms = (time.monotonic() - started) * 1000
        return _no_store(HTMLResponse(epochs_page.pipeline_page(status, links(request), took_ms)))

    @app.get("/api/pipelines")
    def api_pipelines() -> list[dict[str, Any]]:
        return [{**row, "last_audit": _verdict_json(row.get("last_audit"))}
                for row in summaries()]

    @app.get("/api/pipelines/{name}")
    def api_pipeline(name: str, limit: int = 50) -> dict[str, Any]:
        return pipeline_status(config_of(name), limit=limit).to_json()

    @app.get("/api/pipelines/{name}/verify")
    def verify_state(name: str) -> dict[str, Any]:
        config = config_of(name)
        return _run_json(verify_runs.current(config), audits.latest(tables_for(config)))

    @app.post("/api/pipelines/{name}/verify", status_code=202,
              dependencies=[Depends(require_header)])
    def verify_start(name: str) -> dict[str, Any]:
        config = config_of(name)
        return _run_json(verify_runs.start(config), audits.latest(tables_for(config)))

    return app


def _no_store(response: Any) -> Any:
    response.headers["Cache-Control"] = "no-store"
    return response


def _verdict_json(verdict: Any) -> dict[str, Any] | None:
    if verdict is None:
        return None
    return {"at": verdict.at.isoformat(), "ok": verdict.ok,
            "committed_epoch": verdict.committed_epoch, "records": verdict.records,
            "problems": verdict.problems, "duration_ms": verdict.duration_ms}


def _run_json(run: Any, verdict: Any) -> dict[str, Any]:
    """A background audit as the page polls it; ``verdict_recorded``: it left a verdict."""
    if run is None:
        return {"pid": None, "running": False, "verdict_recorded": False,
                "last_audit": _verdict_json(verdict)}
    return {"pid": run.pid, "running": run.running, "started_at": run.started_at.isoformat(),
            "output": run.output(),
            "verdict_recorded": verdict is not None and verdict.at >= run.started_at,
            "last_audit": _verdict_json(verdict)}
