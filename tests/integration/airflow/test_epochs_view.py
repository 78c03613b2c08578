"""The Airflow UI's epochs view (eos.airflow.plugin) in a real Airflow and a real browser.

One ``airflow standalone`` (the harness in tests/support/airflow_standalone.py), which loads the
plugin through the package's ``airflow.plugins`` entry point, runs a backfill of three DAG runs
of one pipeline (epochs of 1,000, 800 and 0 records: 1,800 events, some late, some malformed). Then:
- every route of the plugin's app refuses a request without credentials (401) and with a forged
  token or session cookie (403), and the one route that acts (start an audit) also refuses a
  logged-in request that lacks the page's own header (403);
- headless Chromium (Debian's ``chromium``, driven by Playwright) logs in through Airflow's
  login form, opens Browse -> "Exactly-once epochs", follows the pipeline's link, and finds the
  epochs, their states, runs and counts equal to what the epoch log and the checkpoint table hold
  (read here directly, not through ``eos.core.pipeline_status``); it presses "Verify now" and waits
  for the
  audit's verdict on the page; a task-log link opens that log in the Airflow UI. Screenshots go
  to ``test-output/`` at the project root.
- then, in Airflow's own UI with its dialogs' defaults, a run triggered from the Trigger
  dialog, a backfill of two missing dates from the Backfill dialog (Missing Runs, one active
  run) and a clear-and-rerun of a committed run all succeed; the epochs view lists each run
  under every epoch it touched (as the epoch log names them, read here directly, and as
  Airflow lists the DAG's runs), with its type, and a phase's log link opens the try that did
  the work, not the cleared run's latest, no-op one. Screenshots go to docs/screenshots/.
Per-DAG authorization (Airflow's auth manager, with real users logging in with their generated
passwords): a second pipeline, ``afdown``, runs its own DAG and points at a Kafka broker that is
not there (a closed port). ``alice`` (role ``user``) is granted only the first pipeline's DAG,
``vera`` (role ``viewer``) too: alice sees only that pipeline (index, pages, JSON, in the
browser too) and is refused the other's pages and audits (403); vera may read but, without
Airflow's right to trigger a DAG run, not start an audit (403). ``?limit=`` is bounded, and no
page waits for the unreachable broker.
"""

from __future__ import annotations

# Must come first: it points Airflow at a throwaway AIRFLOW_HOME before airflow is imported.
import support.airflow_home  # noqa: F401  # isort: skip

import json
import re
import shutil
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from eos.airflow.epochs_app import create_app
from eos.airflow.epochs_view import EXTERNAL_VIEW, NAME, URL_PREFIX
from eos.core import checkpoints, epochlog
from eos.core.config import PipelineConfig
from eos.core.layout import tables_for
from eos.core.pipeline_status import epoch_rows
from eos.tools.generator import GeneratorSpec
from eos.tools.pipelines import unique_topic, write_pipeline

from support.airflow_standalone import SCHEDULE, Airflow, backfill, running_airflow
from support.harness import free_port
from support.pipelines import make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]

SPEC = GeneratorSpec(events=1800, keys=12, interval_ms=250, late_fraction=0.02,
                     late_delay_ms=30_000, bad_fraction=0.03, seed=20261121)
OUTPUT = Path(__file__).resolve().parents[3] / "test-output"
CHROMIUM = shutil.which("chromium")
BROWSER_TIMEOUT_MS = 60_000
VERIFY_TIMEOUT_MS = 240_000
USERS = "admin:admin,alice:user,vera:viewer"
KAFKA_CLIENT_TIMEOUT_S = 10.0  # eos.core.kafka.METADATA_TIMEOUT_S: what a broker read waits
FAST_S = 4.0  # far below one Kafka client timeout (a sink's marker read, a lag read)
MAX_LIMIT = 500


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, kafka: str,
         spark_server: dict) -> Iterator[dict[str, Any]]:
    """Airflow with the plugin, after a backfill of three epochs of one pipeline; a second
    pipeline (never run) whose broker is unreachable; users limited to the first one's DAG."""
    directory = tmp_path_factory.mktemp("view-pipelines")
    config = make_pipeline(directory, dag=(data_dir, "afview"), records=SPEC, schedule=SCHEDULE)
    down = unreachable_pipeline(directory, data_dir)
    grants = {"alice": [config.dag_id], "vera": [config.dag_id]}
    with running_airflow(tmp_path_factory.mktemp("airflow-home"), [config, down], data_dir,
                         users=USERS, dag_grants=grants) as airflow:
        airflow.arm_commit_crash(False)
        runs = backfill(airflow, config, "--max-active-runs", "1")
        yield {"airflow": airflow, "config": config, "down": down, "runs": runs}


def unreachable_pipeline(directory: Path, data_dir: Path) -> PipelineConfig:
    """A pipeline whose source and Kafka sink are on a broker that is not there: a closed port
    refuses every connection, and a metadata request waits out its whole timeout."""
    closed = f"127.0.0.1:{free_port()}"
    name = f"afdown_{unique_topic('')[1:]}"
    return write_pipeline(
        directory, name=name,
        kafka={"topic": unique_topic("afdown"), "read_timeout": "30s",
               "client": {"bootstrap.servers": closed}},
        sinks={"windows": [{"kafka": unique_topic("afdown-out")}, {"delta": "target"}],
               "late": [{"delta": "late"}], "quarantine": [{"delta": "quarantine"}]},
        tables={"root": str(data_dir / name)},
    )


def as_user(airflow: Airflow, username: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {airflow.login(username)}"}


def plugin_routes(pipeline: str) -> list[tuple[str, str]]:
    """(method, URL path) of every route the plugin's app serves, for ``pipeline``."""
    routes = []
    for route in create_app().routes:
        for method in sorted(getattr(route, "methods", None) or ()):
            if method != "HEAD":
                routes.append((method, URL_PREFIX + route.path.replace("{name}", pipeline)))
    return routes


def test_every_plugin_route_refuses_requests_without_a_valid_login(view: dict[str, Any]
                                                                   ) -> None:
    airflow: Airflow = view["airflow"]
    config: PipelineConfig = view["config"]
    routes = plugin_routes(config.name)
    assert len(routes) >= 6, routes  # index, page, two JSON reads, verify GET and POST
    refused = {}
    for method, path in routes:
        url = f"{airflow.base}{path}"
        refused[(method, path)] = (
            httpx.request(method, url, timeout=30).status_code,
            httpx.request(method, url, timeout=30,
                          headers={"Authorization": "Bearer forged.jwt.token"}).status_code,
            httpx.request(method, url, timeout=30, headers={"Cookie": "_token=forged"}).status_code,
        )
    assert all(codes == (401, 403, 403) for codes in refused.values()), refused

    # Logged in, every read answers; starting an audit also needs the page's header.
    auth = {"Authorization": f"Bearer {airflow.token}"}
    for method, path in routes:
        if method == "GET":
            response = httpx.get(f"{airflow.base}{path}", headers=auth, timeout=60)
            assert response.status_code == 200, (path, response.text[:500])
    verify = f"{airflow.base}{URL_PREFIX}/api/pipelines/{config.name}/verify"
    assert httpx.post(verify, headers=auth, timeout=30).status_code == 403

    # The JSON the page is rendered from shows no secret (client settings are redacted).
    shown = httpx.get(f"{airflow.base}{URL_PREFIX}/api/pipelines/{config.name}", headers=auth,
                      timeout=60).json()
    assert shown["committed_epoch"] == 2 and shown["dag_id"] == config.dag_id
    assert "bootstrap.servers" in shown["client"]

    # Airflow lists the view under Browse.
    plugins = airflow.api("GET", "/api/v2/plugins")["plugins"]
    views = [v for p in plugins for v in p.get("external_views", [])]
    assert any(v["name"] == NAME and v["href"] == EXTERNAL_VIEW["href"] for v in views), plugins


def expected_epochs(config: PipelineConfig) -> dict[int, dict[str, str]]:
    """What the page must show per epoch, from the epoch log and the checkpoint table."""
    tables = tables_for(config)
    committed = {c.epoch for c in checkpoints.read_all(tables)}
    expected: dict[int, dict[str, str]] = {}
    for row in epoch_rows(tables):
        entry = expected.setdefault(row["epoch"], {})
        if row["phase"] == epochlog.PLANNED and "records" not in entry:
            plan = json.loads(row["plan"])
            entry["records"] = str(sum(r["until"] - r["start"] for r in plan["ranges"]))
            entry["run"] = row["run_id"]
        if row["phase"] == epochlog.PRECOMMITTED:
            counts = json.loads(row["details"])["rows"]
            entry.update({"windows": str(counts["output"]), "late": str(counts["late"]),
                          "quarantine": str(counts["quarantine"])})
    for epoch, entry in expected.items():
        entry["state"] = "committed" if epoch in committed else "not committed"
    return expected


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed: `./dev test` "
                    "installs it when run as root (apt-get install chromium); the browser test "
                    "needs a real browser and no other is fetched")
@pytest.mark.timeout(900)
def test_the_epochs_view_in_a_browser_shows_the_epoch_log(view: dict[str, Any]) -> None:
    from playwright.sync_api import expect, sync_playwright

    airflow: Airflow = view["airflow"]
    config: PipelineConfig = view["config"]
    expected = expected_epochs(config)
    assert [e["records"] for e in expected.values()] == ["1000", "800", "0"], expected
    assert {e["run"] for e in expected.values()} == {r["dag_run_id"] for r in view["runs"]}
    OUTPUT.mkdir(exist_ok=True)

    with sync_playwright() as playwright:
        # --no-sandbox: Chromium's sandbox refuses to run as root (CI runs as root).
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 1600, "height": 1300})
            page = context.new_page()
            page.set_default_timeout(BROWSER_TIMEOUT_MS)
            # Not logged in: Airflow sends the browser to its login form.
            page.goto(f"{airflow.base}/plugin/{EXTERNAL_VIEW['url_route']}")
            page.fill("input[name=username]", "admin")
            page.fill("input[name=password]", airflow.password)
            page.click("button[type=submit]")
            page.wait_for_url(lambda url: "/auth/login" not in url)
            page.goto(f"{airflow.base}/plugin/{EXTERNAL_VIEW['url_route']}")
            frame = page.frame_locator("iframe")
            frame.locator(f'tr[data-pipeline="{config.name}"] a').first.click()
            expect(frame.locator("#committed-epoch")).to_have_text("2")

            shown = {}
            rows = frame.locator("#epochs tbody tr")
            for i in range(rows.count()):
                row = rows.nth(i)
                cells = {name: row.locator(f"td.{name}").inner_text().strip()
                         for name in ("records", "windows", "late", "quarantine", "state", "run")}
                href = row.locator("td.run a").get_attribute("href")
                cells["state"] = cells["state"].split()[0]
                shown[int(row.get_attribute("data-epoch"))] = {**cells, "href": href}
            assert sorted(shown) == sorted(expected), (shown, expected)
            for epoch, want in expected.items():
                got = shown[epoch]
                assert got["state"] == "committed" == want["state"], (epoch, got, want)
                assert {k: got[k] for k in ("records", "windows", "late", "quarantine")} == {
                    k: want[k] for k in ("records", "windows", "late", "quarantine")
                }, (epoch, got, want)
                assert got["run"] == want["run"], (epoch, got, want)
                assert got["href"] == f"/dags/{config.dag_id}/runs/{quote(want['run'], safe='')}"
            page.screenshot(path=str(OUTPUT / "epochs-view.png"))

            # The verify button runs `eos verify` in the background and shows its verdict.
            frame.locator("#verify").click()
            expect(frame.locator("#audit-verdict")).to_have_text("OK", timeout=VERIFY_TIMEOUT_MS)
            expect(frame.locator("#verify-report")).to_contain_text("verdict: OK")
            page.screenshot(path=str(OUTPUT / "epochs-view-verified.png"))
            # The page on its own (same session cookie), whole.
            alone = context.new_page()
            alone.goto(f"{airflow.base}{URL_PREFIX}/pipelines/{config.name}")
            expect(alone.locator("#audit-verdict")).to_have_text("OK")
            alone.screenshot(path=str(OUTPUT / "epochs-page.png"), full_page=True)

            # A task-log link opens that log in the Airflow UI itself (not inside the frame).
            run = expected[1]["run"]
            frame.locator('tr[data-epoch="1"] td.logs').get_by_role(
                "link", name="commit", exact=True).click()
            page.wait_for_url(f"**/dags/{config.dag_id}/runs/{quote(run, safe='')}/tasks/commit*")
            expect(page.get_by_text("phase=commit", exact=False).first).to_be_visible()
        finally:
            browser.close()
    print(f"screenshots: {sorted(str(path) for path in OUTPUT.glob('epochs-*.png'))}")


def test_a_user_sees_and_audits_only_pipelines_whose_dag_they_may_read(view: dict[str, Any]
                                                                       ) -> None:
    airflow: Airflow = view["airflow"]
    mine: PipelineConfig = view["config"]
    other: PipelineConfig = view["down"]
    alice = as_user(airflow, "alice")
    base = f"{airflow.base}{URL_PREFIX}"

    listed = httpx.get(f"{base}/api/pipelines", headers=alice, timeout=60)
    assert listed.status_code == 200, listed.text[:500]
    assert [row["name"] for row in listed.json()] == [mine.name], listed.json()
    index = httpx.get(f"{base}/", headers=alice, timeout=60).text
    assert f'data-pipeline="{mine.name}"' in index and other.name not in index, index

    refused = {path: httpx.get(f"{base}{path}", headers=alice, timeout=60).status_code
               for path in (f"/pipelines/{other.name}", f"/api/pipelines/{other.name}",
                            f"/api/pipelines/{other.name}/verify")}
    refused["POST verify"] = httpx.post(f"{base}/api/pipelines/{other.name}/verify",
                                        headers={**alice, "X-EOS-Request": "1"},
                                        timeout=60).status_code
    assert set(refused.values()) == {403}, refused
    # Her own pipeline's pages answer; admin (every DAG) sees both.
    assert httpx.get(f"{base}/api/pipelines/{mine.name}", headers=alice,
                     timeout=60).status_code == 200
    admin = {"Authorization": f"Bearer {airflow.token}"}
    assert {row["name"] for row in httpx.get(f"{base}/api/pipelines", headers=admin,
                                             timeout=60).json()} == {mine.name, other.name}


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
@pytest.mark.timeout(300)
def test_in_the_browser_the_index_lists_only_the_users_pipelines(view: dict[str, Any]) -> None:
    from playwright.sync_api import expect, sync_playwright

    airflow: Airflow = view["airflow"]
    mine: PipelineConfig = view["config"]
    other: PipelineConfig = view["down"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.set_default_timeout(BROWSER_TIMEOUT_MS)
            page.goto(f"{airflow.base}/plugin/{EXTERNAL_VIEW['url_route']}")
            page.fill("input[name=username]", "alice")
            page.fill("input[name=password]", airflow.passwords["alice"])
            page.click("button[type=submit]")
            page.wait_for_url(lambda url: "/auth/login" not in url)
            page.goto(f"{airflow.base}/plugin/{EXTERNAL_VIEW['url_route']}")
            frame = page.frame_locator("iframe")
            expect(frame.locator(f'tr[data-pipeline="{mine.name}"]')).to_have_count(
                1, timeout=BROWSER_TIMEOUT_MS)
            expect(frame.locator("#pipelines tbody tr")).to_have_count(1)
            expect(frame.locator(f'tr[data-pipeline="{other.name}"]')).to_have_count(0)
            # The other pipeline's page, opened by its URL: refused.
            response = page.goto(f"{airflow.base}{URL_PREFIX}/pipelines/{other.name}")
            assert response is not None and response.status == 403
        finally:
            browser.close()


def test_reading_a_dag_without_the_right_to_trigger_it_cannot_start_an_audit(
        view: dict[str, Any]) -> None:
    airflow: Airflow = view["airflow"]
    config: PipelineConfig = view["config"]
    vera = as_user(airflow, "vera")
    base = f"{airflow.base}{URL_PREFIX}"
    for path in (f"/pipelines/{config.name}", f"/api/pipelines/{config.name}",
                 f"/api/pipelines/{config.name}/verify"):
        response = httpx.get(f"{base}{path}", headers=vera, timeout=60)
        assert response.status_code == 200, (path, response.text[:300])
    started = httpx.post(f"{base}/api/pipelines/{config.name}/verify",
                         headers={**vera, "X-EOS-Request": "1"}, timeout=60)
    assert started.status_code == 403, started.text[:300]
    # Her page offers no button that could only fail.
    page = httpx.get(f"{base}/pipelines/{config.name}", headers=vera, timeout=60).text
    assert '<button id="verify" type="button" disabled' in page, page[-3000:]


def test_limit_is_bounded(view: dict[str, Any]) -> None:
    airflow: Airflow = view["airflow"]
    config: PipelineConfig = view["config"]
    admin = {"Authorization": f"Bearer {airflow.token}"}
    codes = {}
    for path in (f"/pipelines/{config.name}", f"/api/pipelines/{config.name}"):
        for limit in (-1, 0, MAX_LIMIT + 1, 10**9):
            response = httpx.get(f"{airflow.base}{URL_PREFIX}{path}", headers=admin, timeout=60,
                                 params={"limit": limit})
            codes[(path, limit)] = response.status_code
            if response.status_code == 422:
                assert "limit" in response.text, response.text[:300]
        codes[(path, MAX_LIMIT)] = httpx.get(f"{airflow.base}{URL_PREFIX}{path}", headers=admin,
                                             timeout=60, params={"limit": MAX_LIMIT}).status_code
    assert codes == {key: (200 if key[1] == MAX_LIMIT else 422) for key in codes}, codes


def test_no_page_waits_for_an_unreachable_broker(view: dict[str, Any]) -> None:
    """The index and the pipeline's page answer far within one Kafka client timeout while the
    pipeline's broker (its source and its Kafka sink) is down: no request reads Kafka. What
    the sinks hold is read in the background and shown with its age."""
    airflow: Airflow = view["airflow"]
    down: PipelineConfig = view["down"]
    admin = {"Authorization": f"Bearer {airflow.token}"}
    base = f"{airflow.base}{URL_PREFIX}"
    took = {}
    for _ in range(2):  # the first load too, and a load while a background read may be waiting
        for path in ("/", "/api/pipelines", f"/pipelines/{down.name}",
                     f"/api/pipelines/{down.name}"):
            started = time.monotonic()
            response = httpx.get(f"{base}{path}", headers=admin, timeout=60)
            took[path] = max(took.get(path, 0.0), time.monotonic() - started)
            assert response.status_code == 200, (path, response.text[:300])
    assert all(seconds < FAST_S < KAFKA_CLIENT_TIMEOUT_S for seconds in took.values()), took
    page = httpx.get(f"{base}/pipelines/{down.name}", headers=admin, timeout=60).text
    assert 'id="sink-state-age"' in page, page[-2000:]


# -- the operator's workflows in Airflow's own UI: trigger, backfill, clear-and-rerun ------------

SCREENSHOTS = Path(__file__).resolve().parents[3] / "docs" / "screenshots"
DOCS_VIEWPORT = {"width": 1280, "height": 800}
RUNS_TIMEOUT_S = 900.0


CLEAR_RUN = re.compile(r"^(Clear Dag Run|Press shift\+c to clear)$")


def pick_date_and_time(page: Any, dialog: Any, index: int, when: datetime) -> None:
    """Fill the ``index``-th date-and-time field of a dialog (Airflow 3.3's picker: a button
    that opens a popover with a date field, ``YYYY/MM/DD``, and a time field, ``HH:mm``),
    then close the popover by clicking the dialog's title."""
    from playwright.sync_api import expect

    dialog.get_by_test_id("datetime-input").nth(index).click()
    popover = page.locator('[data-scope="popover"][data-part="content"][data-state="open"]')
    fields = popover.locator("input")
    fields.nth(0).fill(when.strftime("%Y/%m/%d"))
    fields.nth(1).fill(when.strftime("%H:%M"))
    fields.nth(1).press("Tab")
    dialog.get_by_text("Date Range", exact=True).click()
    expect(dialog.get_by_test_id("datetime-input").nth(index)).to_contain_text(
        when.strftime("%Y"))


def shoot(page: Any, name: str) -> None:
    """A screenshot for the guide (docs/operating.md): the viewport (1280x800), dialogs past
    their opening animation."""
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), animations="disabled")


def log_in(page: Any, airflow: Airflow, username: str = "admin") -> None:
    """Airflow's login form, as a person fills it."""
    page.goto(f"{airflow.base}/dags")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", airflow.passwords[username])
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/auth/login" not in url)


def wait_for_runs(airflow: Airflow, dag_id: str, done: Any, what: str) -> list[dict[str, Any]]:
    """Poll the DAG's runs until ``done(runs)``; fail at once on a failed run."""
    from support.airflow_standalone import dag_runs, summarize, wait_for

    def check() -> list[dict[str, Any]] | None:
        runs = dag_runs(airflow, dag_id)
        if any(run["state"] == "failed" for run in runs):
            pytest.fail("a run failed:\n" + summarize(airflow, dag_id))
        return runs if done(runs) else None

    return wait_for(what, check, RUNS_TIMEOUT_S, airflow.problem)


def touched(config: PipelineConfig) -> dict[int, list[str]]:
    """Per epoch, the runs its record names (its plan's, the runs bound to it, the task tries'
    rows, the tries precommit and commit recorded), read here directly, in the order they first
    appear."""
    runs: dict[int, list[str]] = {}
    for row in epoch_rows(tables_for(config)):
        if row["run_id"] and row["run_id"] not in runs.setdefault(row["epoch"], []):
            runs[row["epoch"]].append(row["run_id"])
    return runs


def tries_of(config: PipelineConfig, run_id: str) -> list[tuple[str, int, bool]]:
    """(task, try, did the work) of every try of ``run_id`` the epoch log recorded (in a
    ``tried`` row, or in the row of the phase the try did)."""
    found = [epochlog.try_facts(r) for r in epoch_rows(tables_for(config))
             if r["run_id"] == run_id]
    return [(t["task"], t["try"], t["wrote"]) for t in found if t is not None]


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
@pytest.mark.timeout(2400)
def test_trigger_backfill_with_the_dialogs_defaults_and_clear_and_rerun_in_the_browser(
        view: dict[str, Any]) -> None:
    """What an operator does in Airflow's UI, with the UI's defaults: trigger a run, backfill
    two missing dates from the Backfill dialog as it opens (Missing Runs, one active run), clear
    a committed run and let it rerun. Every run then shows in the epochs view under each epoch
    it touched, with its type and tries; a phase's log link opens the try that did the work
    (after the clear the latest try is the no-op one). The screenshots go to docs/screenshots/
    (docs/operating.md shows them)."""
    from playwright.sync_api import expect, sync_playwright

    from support.airflow_standalone import first_of_month, task_instance

    airflow: Airflow = view["airflow"]
    config: PipelineConfig = view["config"]
    dag_id = config.dag_id
    before = {run["dag_run_id"] for run in view["runs"]}
    cleared = view["runs"][0]["dag_run_id"]  # epoch 0's run: committed, cleared below
    now = time.gmtime()
    # Two first-of-months older than the fixture's backfill (its three latest): missing runs.
    missing = [first_of_month(now.tm_year, now.tm_mon - back) for back in (5, 4)]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport=DOCS_VIEWPORT, timezone_id="UTC")
            page = context.new_page()
            page.set_default_timeout(BROWSER_TIMEOUT_MS)
            log_in(page, airflow)

            # Trigger: the DAG's Trigger dialog, a single run with its defaults.
            page.goto(f"{airflow.base}/dags/{dag_id}")
            page.get_by_role("button", name="Trigger Dag").click()  # its aria-label
            dialog = page.get_by_role("dialog")
            expect(dialog.get_by_text("Single Run", exact=True)).to_be_visible()
            shoot(page, "trigger")
            dialog.get_by_role("button", name="Trigger", exact=True).click()
            manual = wait_for_runs(
                airflow, dag_id, lambda runs: any(
                    r["run_type"] == "manual" and r["state"] == "success" for r in runs),
                "the triggered run to succeed")
            manual_id = next(r["dag_run_id"] for r in manual if r["run_type"] == "manual")

            # Backfill: the same dialog's Backfill form; only the dates are filled in.
            page.goto(f"{airflow.base}/dags/{dag_id}")
            page.get_by_role("button", name="Trigger Dag").click()  # its aria-label
            dialog = page.get_by_role("dialog")
            dialog.get_by_text("Backfill", exact=True).click()
            for i, when in enumerate(missing):
                pick_date_and_time(page, dialog, i, when)
            expect(dialog.get_by_text("2 runs will be triggered.")).to_be_visible()
            shoot(page, "backfill")
            dialog.get_by_role("button", name="Run Backfill").click()
            runs = wait_for_runs(
                airflow, dag_id, lambda runs: sum(
                    r["run_type"] == "backfill" and r["state"] == "success"
                    and r["dag_run_id"] not in before for r in runs) == 2,
                "the dialog's two backfill runs to succeed")
            filled = [r for r in runs if r["run_type"] == "backfill"
                      and r["dag_run_id"] not in before]
            assert sorted(r["logical_date"][:10] for r in filled) == [
                d.strftime("%Y-%m-%d") for d in missing], filled

            # Clear-and-rerun a committed run: every task finds its work done.
            page.goto(f"{airflow.base}/dags/{dag_id}/runs/{quote(cleared, safe='')}")
            # Its label is the hotkey's tooltip where the hotkey is on (Airflow 3.3).
            page.get_by_role("button", name=CLEAR_RUN).first.click()
            dialog = page.get_by_role("dialog")
            expect(dialog.get_by_role("button", name="Confirm")).to_be_visible()
            shoot(page, "clear-and-rerun")
            dialog.get_by_role("button", name="Confirm").click()
            wait_for_runs(
                airflow, dag_id, lambda runs: task_instance(
                    airflow, dag_id, cleared, "commit")["try_number"] >= 2 and all(
                    r["state"] == "success" for r in runs if r["dag_run_id"] == cleared),
                "the cleared run to rerun and succeed")
            assert tries_of(config, cleared) == [
                ("begin", 1, True), ("precommit", 1, True), ("commit", 1, True),
                ("begin", 2, False), ("precommit", 2, False), ("commit", 2, False)]

            # The epochs view: each epoch lists every run that touched it, with its type.
            expected = touched(config)
            every_run = {r["dag_run_id"] for r in airflow.api(
                "GET", f"/api/v2/dags/{dag_id}/dagRuns", params={"limit": 100})["dag_runs"]}
            assert every_run == {run for runs in expected.values() for run in runs}, expected
            assert manual_id in every_run and len(every_run) == 6, every_run
            page.goto(f"{airflow.base}/plugin/{EXTERNAL_VIEW['url_route']}")
            frame = page.frame_locator("iframe")
            frame.locator(f'tr[data-pipeline="{config.name}"] a').first.click()
            expect(frame.locator("#committed-epoch")).to_have_text(str(max(expected)))
            shown: dict[int, list[tuple[str, str]]] = {}
            rows = frame.locator("#epochs tbody tr")
            for i in range(rows.count()):
                row = rows.nth(i)
                touches = row.locator("td.runs .touch")
                shown[int(row.get_attribute("data-epoch"))] = [
                    (touches.nth(j).get_attribute("data-run"),
                     touches.nth(j).get_attribute("data-type")) for j in range(touches.count())]
            types = {r["dag_run_id"]: r["run_type"] for r in airflow.api(
                "GET", f"/api/v2/dags/{dag_id}/dagRuns", params={"limit": 100})["dag_runs"]}
            assert shown == {epoch: [(run, types[run]) for run in runs]
                             for epoch, runs in expected.items()}, (shown, expected)

            # Epoch 0's commit log link opens the try that committed (1), not the latest (2).
            link = frame.locator('tr[data-epoch="0"] td.logs a[data-task="commit"]')
            expect(link).to_have_attribute("data-try", "1")
            noop = frame.locator(f'tr[data-epoch="0"] td.runs .touch[data-run="{cleared}"] '
                                 'a.try.noop[data-task="commit"]')
            expect(noop).to_have_attribute("data-try", "2")
            frame.locator('tr[data-epoch="0"]').scroll_into_view_if_needed()
            shoot(page, "epochs-runs")
            link.click()
            task_page = f"/dags/{dag_id}/runs/{quote(cleared, safe='')}/tasks/commit"
            page.wait_for_url(lambda url: task_page in url and "try_number=1" in url)
            expect(page.get_by_text("outcome=committed", exact=False).first).to_be_visible()
            shoot(page, "phase-log")
        except Exception:
            OUTPUT.mkdir(exist_ok=True)
            page.screenshot(path=str(OUTPUT / "workflows-failure.png"), full_page=True)
            (OUTPUT / "workflows-failure.html").write_text(page.content())
            raise
        finally:
            browser.close()
