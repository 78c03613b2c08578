"""The epochs view's FastAPI app (``eos.airflow.epochs_view``): its routes over a few helpers.

Security: the API server does not authenticate plugin apps by itself, so the app depends on
Airflow's ``requires_authenticated()`` for every route: the browser's Airflow session cookie
(or a bearer token) must name a valid user, else 401 (no token) or 403 (an invalid one).
Then each pipeline is its DAG's (``PipelineConfig.dag_id``), and Airflow's auth manager decides
per DAG, as for Airflow's own pages: seeing a pipeline (its index row, page, JSON, audit
state) needs what reading the DAG's runs needs (``is_authorized_dag`` GET on its runs), and
starting an audit needs what triggering a DAG run needs (POST on its runs, as Airflow's
``POST /dags/{dag_id}/dagRuns``): else 403, and the index leaves the row out. A pipeline whose
YAML does not load has no DAG to ask about: only a user who may read every DAG sees it. The
one route that does something (start an audit) also requires the ``X-EOS-Request`` header,
which another site's form cannot send, so a logged-in user cannot be made to start audits by a
foreign page. Kafka client settings are shown redacted (``eos.core.kafka.redact``: a value
read from the environment as its ``${VAR}``).

No request reads Kafka (``eos.airflow.epochs_cache``): pages show what the protocol recorded
(checkpoints, epoch log, verdicts), and each sink's epoch and the lag as last read by a
background thread, with their age. ``?limit=`` (epochs shown) is 1..``MAX_LIMIT``, else 422.

Routes (under ``URL_PREFIX``): ``/`` the pipelines, ``/pipelines/{name}`` a pipeline's page,
``/api/pipelines`` and ``/api/pipelines/{name}`` the same as JSON, ``/api/pipelines/{name}/verify``
GET (the last background audit) and POST (start one unless one runs: 202).
"""

import time
from functools import lru_cache
from typing import Any

from airflow.api_fastapi.core_api.security import GetUserDep, requires_authenticated
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from eos.airflow import epochs_html as epochs_page
from eos.airflow import verify_runs
from eos.airflow.deployment import pipelines_dir
from eos.airflow.epochs_cache import BROKER_STATE, SinkState, recorded_status
from eos.airflow.epochs_view import NAME, URL_PREFIX
from eos.core import verdicts as audits
from eos.core.config import PipelineConfig, list_pipelines, load_config
from eos.core.errors import EosError
from eos.core.layout import tables_for

REQUEST_HEADER = "X-EOS-Request"
DEFAULT_LIMIT = 50
MAX_LIMIT = 500  # epochs on one page: each is a row, two chart bars and a log read
READ, TRIGGER = "GET", "POST"  # on a DAG's runs: see them, start one

LIMIT_QUERY = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT,
                    description=f"how many of the last epochs to show, 1..{MAX_LIMIT}")

router = APIRouter()


@lru_cache(maxsize=1)
def fastapi_app() -> dict[str, Any]:
    """The ``fastapi_apps`` entry. Built on first use (only the API server asks for it), so a
    task process loading plugins does not import the API server's security module."""
    return {"app": create_app(), "url_prefix": URL_PREFIX, "name": NAME}


def create_app() -> FastAPI:
    """The app: every route requires an authenticated Airflow user (``requires_authenticated``)."""
    app = FastAPI(title=NAME, dependencies=[Depends(requires_authenticated())],
                  docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(router)
    return app


# -- helpers ------------------------------------------------------------------------------------

def config_of(name: str, user: Any, method: str = READ) -> PipelineConfig:
    """The pipeline's config, if ``user`` may ``method`` its DAG's runs; else 403 (404:
    no such pipeline)."""
    paths = {path.stem: path for path in list_pipelines(pipelines_dir())}
    if name not in paths:
        raise HTTPException(404, f"no pipeline named {name!r}")
    try:
        config = load_config(paths[name])
    except EosError as error:
        if not may(user, READ, None):
            raise HTTPException(403, "Forbidden") from None
        raise HTTPException(422, str(error)) from None
    if not may(user, method, config.dag_id):
        raise HTTPException(403, "Forbidden")
    return config


def links(request: Request) -> epochs_page.Links:
    # The app is mounted at URL_PREFIX under whatever base path Airflow is served from.
    root = request.scope.get("root_path", "")
    return epochs_page.Links(airflow=root.removesuffix(URL_PREFIX))


def summaries(user: Any) -> list[dict[str, Any]]:
    """The index's rows the user may see, from the recorded tables only."""
    rows = []
    for path in list_pipelines(pipelines_dir()):
        try:
            config = load_config(path)
        except EosError as error:
            if may(user, READ, None):
                rows.append({"name": path.stem, "error": str(error)})
            continue
        if not may(user, READ, config.dag_id):
            continue
        try:
            status = recorded_status(config, limit=0)
        except EosError as error:
            rows.append({"name": config.name, "dag_id": config.dag_id, "error": str(error)})
            continue
        rows.append({"name": status.name, "dag_id": status.dag_id,
                     "committed_epoch": status.committed_epoch,
                     "last_audit": status.last_audit})
    return rows


def status_of(config: PipelineConfig, limit: int) -> tuple[Any, SinkState]:
    reading = BROKER_STATE.latest(config)
    return (recorded_status(config, limit, reading),
            SinkState(reading.at if reading else None))


def require_header(request: Request) -> None:
    if request.headers.get(REQUEST_HEADER) != "1":
        raise HTTPException(403, f"missing header {REQUEST_HEADER}: 1")


# -- routes -------------------------------------------------------------------------------------

@router.get("/", response_class=HTMLResponse)
def index(request: Request, user: GetUserDep) -> HTMLResponse:
    return no_store(HTMLResponse(epochs_page.index_page(summaries(user), links(request))))


@router.get("/pipelines/{name}", response_class=HTMLResponse)
def pipeline(name: str, request: Request, user: GetUserDep,
             limit: int = LIMIT_QUERY) -> HTMLResponse:
    started = time.monotonic()
    config = config_of(name, user)
    status, sink_state = status_of(config, limit)
    took_ms = (time.monotonic() - started) * 1000
    from eos.airflow.tasks import phase_tasks

    return no_store(HTMLResponse(epochs_page.pipeline_page(
        status, links(request), took_ms, sink_state,
        can_audit=may(user, TRIGGER, config.dag_id), tasks=phase_tasks(config))))


@router.get("/api/pipelines")
def api_pipelines(user: GetUserDep) -> list[dict[str, Any]]:
    return [{**row, "last_audit": verdict_json(row.get("last_audit"))}
            for row in summaries(user)]


@router.get("/api/pipelines/{name}")
def api_pipeline(name: str, user: GetUserDep, limit: int = LIMIT_QUERY) -> dict[str, Any]:
    status, sink_state = status_of(config_of(name, user), limit)
    return {**status.to_json(), "sink_state": sink_state.to_json()}


@router.get("/api/pipelines/{name}/verify")
def verify_state(name: str, user: GetUserDep) -> dict[str, Any]:
    config = config_of(name, user)
    return run_json(verify_runs.current(config), audits.latest(tables_for(config)))


@router.post("/api/pipelines/{name}/verify", status_code=202,
             dependencies=[Depends(require_header)])
def verify_start(name: str, user: GetUserDep) -> dict[str, Any]:
    config = config_of(name, user, TRIGGER)
    return run_json(verify_runs.start(config), audits.latest(tables_for(config)))


def may(user: Any, method: str, dag_id: str | None) -> bool:
    """Whether Airflow's auth manager lets ``user`` ``method`` the runs of DAG ``dag_id``
    (None: of every DAG): the check Airflow's own ``/dags/{dag_id}/dagRuns`` routes make
    (``requires_access_dag(method, DagAccessEntity.RUN)``). The DAG is named by id alone, as
    Airflow's ``filter_authorized_dag_ids`` does: no metadata-DB read per pipeline, and a
    manager that grants by team (experimental in 3.1) refuses rather than over-grants.
    """
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        DagAccessEntity,
        DagDetails,
    )

    return get_auth_manager().is_authorized_dag(
        method=method, access_entity=DagAccessEntity.RUN,
        details=DagDetails(id=dag_id) if dag_id else None, user=user)


def no_store(response: Any) -> Any:
    response.headers["Cache-Control"] = "no-store"
    return response


def verdict_json(verdict: Any) -> dict[str, Any] | None:
    if verdict is None:
        return None
    return {"at": verdict.at.isoformat(), "ok": verdict.ok,
            "committed_epoch": verdict.committed_epoch, "records": verdict.records,
            "problems": verdict.problems, "duration_ms": verdict.duration_ms}


def run_json(run: Any, verdict: Any) -> dict[str, Any]:
    """A background audit as the page polls it; ``verdict_recorded``: it left a verdict."""
    if run is None:
        return {"pid": None, "running": False, "verdict_recorded": False,
                "last_audit": verdict_json(verdict)}
    return {"pid": run.pid, "running": run.running, "started_at": run.started_at.isoformat(),
            "output": run.output(),
            "verdict_recorded": verdict is not None and verdict.at >= run.started_at,
            "last_audit": verdict_json(verdict)}
