"""The Airflow UI's epochs view (plugins/eos_epochs.py) in a real Airflow and a real browser.

One ``airflow standalone`` (the harness in tests/airflow_standalone.py) with the project's
plugins/ folder runs a backfill of three DAG runs of one pipeline (epochs of 1,000, 800 and 0
records: 1,800 events, some late, some malformed). Then:
- every route of the plugin's app refuses a request without credentials (401) and with a forged
  token or session cookie (403), and the one route that acts (start an audit) also refuses a
  logged-in request that lacks the page's own header (403);
- headless Chromium (Debian's ``chromium``, driven by Playwright) logs in through Airflow's
  login form, opens Browse -> "Exactly-once epochs", follows the pipeline's link, and finds the
  epochs, their states, runs and counts equal to what the epoch log and the checkpoint table hold
  (read here directly, not through ``eos.core.status``); it presses "Verify now" and waits for the
  audit's verdict on the page; a task-log link opens that log in the Airflow UI. Screenshots go
  to ``test-output/`` at the project root.
"""

from __future__ import annotations

# Must come first: it points Airflow at a throwaway AIRFLOW_HOME before airflow is imported.
import conftest_airflow  # noqa: F401  # isort: skip

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from airflow_standalone import Airflow, backfill, make_pipeline, running_airflow

from eos.airflow.epochs_view import EXTERNAL_VIEW, NAME, URL_PREFIX, create_app
from eos.core import checkpoints, epochlog
from eos.core.config import PipelineConfig
from eos.core.layout import tables_for
from eos.tools.produce import GeneratorSpec

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]

SPEC = GeneratorSpec(events=1800, keys=12, interval_ms=250, late_fraction=0.02,
                     late_delay_ms=30_000, bad_fraction=0.03, seed=20261121)
OUTPUT = Path(__file__).resolve().parents[1] / "test-output"
CHROMIUM = shutil.which("chromium")
BROWSER_TIMEOUT_MS = 60_000
VERIFY_TIMEOUT_MS = 240_000


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, kafka: str,
         spark_server: dict) -> Iterator[dict[str, Any]]:
    """Airflow with the plugin, after a backfill of three epochs of one pipeline."""
    config = make_pipeline(tmp_path_factory.mktemp("view-pipelines"), data_dir, "afview", SPEC)
    with running_airflow(tmp_path_factory.mktemp("airflow-home"), [config], data_dir) as airflow:
        airflow.arm_commit_crash(False)
        runs = backfill(airflow, config, "--max-active-runs", "1")
        yield {"airflow": airflow, "config": config, "runs": runs}


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
    for row in epochlog.rows(tables):
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
