"""The report page of every graph in graphs/, opened in a real browser: Debian's Chromium, driven
through its ChromeDriver by Selenium (both installed by setup.sh). The page must load without a
console message (no script error, no warning), lay out every node as a visible box of non-zero
size, and react to the pointer as its script promises (pointing at a node lights up the values
it writes wherever they appear).

The pages are rendered from each graph's plan (NAME.plan.json), the same function the build
uses for NAME.html; tests/test_html_report.py checks their content against the JSON.
"""
from __future__ import annotations

import json
import shutil

import pytest

from tinsmith.measure.page import write_page
from conftest import GRAPHS

ALL_GRAPHS = sorted(p.stem for p in GRAPHS.glob("*.yaml"))


def _browser_paths() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@pytest.fixture(scope="module")
def browser():
    paths = _browser_paths()
    if paths is None:
        pytest.skip("Chromium and its driver are not installed (sh setup.sh installs chromium and chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is a test dependency: pip install -e '.[test]'")
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--window-size=1600,1200"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: Selenium must not try to download one (CI has no network).
    driver = webdriver.Chrome(service=Service(executable_path=paths[1]), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, tuple]:
    """Each graph's page, drawn from its plan (the session's shared plans: tests/shared_builds.py)."""
    from shared_builds import every_plan
    plans = every_plan(tmp_path_factory.getbasetemp())
    folder = tmp_path_factory.mktemp("pages")
    result = {}
    for name in ALL_GRAPHS:
        plan = json.loads((plans / f"{name}.plan.json").read_text(encoding="utf-8"))
        result[name] = (write_page(plan, folder / f"{name}.html"), plan)
    return result


def _node_names(plan: dict) -> set[str]:
    return {n["name"] for n in plan["nodes"]} | {f["name"] for n in plan["nodes"] for f in n.get("fused", ())}


@pytest.mark.parametrize("name", ALL_GRAPHS)
def test_page_renders_every_node_without_console_messages(browser, pages, name):
    from selenium.webdriver.common.by import By
    path, plan = pages[name]
    browser.get_log("browser")  # drop whatever an earlier page left
    browser.get(path.as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    assert browser.get_log("browser") == []

    drawn = browser.find_elements(By.CSS_SELECTOR, "g.node[data-node]")
    assert {g.get_attribute("data-node") for g in drawn} == _node_names(plan)
    for g in drawn:
        box = browser.execute_script("var r = arguments[0].getBoundingClientRect(); return [r.width, r.height];", g)
        assert box[0] > 0 and box[1] > 0, (g.get_attribute("data-node"), box)
    rows = browser.find_elements(By.CSS_SELECTOR, "table#layers tr.layer")
    assert sorted(r.get_attribute("data-node") for r in rows) == sorted(_node_names(plan))
    assert all(r.is_displayed() for r in rows)


def test_pointing_at_a_node_lights_up_its_values(browser, pages):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    path, plan = pages["branches"]
    browser.get(path.as_uri())
    node = browser.find_elements(By.CSS_SELECTOR, "g.node[data-node]")[0]
    written = set((node.get_attribute("data-v") or "").split())
    assert written, "a node carries the values it writes"
    ActionChains(browser).move_to_element(node).perform()
    lit = browser.find_elements(By.CSS_SELECTOR, ".hl")
    assert node in lit
    assert all(written & set((e.get_attribute("data-v") or "").split()) for e in lit)
    assert browser.get_log("browser") == []


@pytest.mark.skipif(not shutil.which("qemu-system-arm") or not shutil.which("arm-none-eabi-g++"),
                    reason="needs arm-none-eabi-g++ and qemu-system-arm")
def test_vww_page_for_the_cortex_m4_shows_measured_instructions_per_layer(browser, tmp_path):
    """`build --instructions` on the Cortex-M4: the page the build wrote shows each layer's instructions
    as the emulator counted them (the numbers of NAME.json) and the call's total; it renders in
    Chromium without a console message."""
    from selenium.webdriver.common.by import By

    from conftest import tinsmith
    proc = tinsmith("build", str(GRAPHS / "vww_mobilenet.yaml"), "--target", "cortex-m4", "--instructions",
                    "--build-dir", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "vww_mobilenet" / "vww_mobilenet.json").read_text())
    total = report["instructions"]["total"]
    assert f"| {total:,} instructions (measured on the emulator)" in proc.stdout
    counts = {n["name"]: n["instructions"] for n in report["nodes"]}
    assert all(c > 0 for c in counts.values())  # every kernel ran some instructions
    # the hook's counter reads cost a little: the layers add up to the total within 1 %
    assert abs(sum(counts.values()) - total) < 0.01 * total

    browser.get_log("browser")
    browser.get((tmp_path / "vww_mobilenet" / "vww_mobilenet.html").as_uri())
    assert browser.get_log("browser") == []
    shown = {r.get_attribute("data-node"): r.find_element(By.CSS_SELECTOR, "td.instructions").text
             for r in browser.find_elements(By.CSS_SELECTOR, "table#layers tr.layer")}
    assert {k: int(v.replace(",", "")) for k, v in shown.items() if k in counts} == counts
    cards = browser.find_element(By.CSS_SELECTOR, "#summary").text
    assert "instructions per call" in cards and f"{total:,}" in cards


def test_finding_a_node_fades_the_others_and_filters_the_table(browser, pages):
    from selenium.webdriver.common.by import By
    path, plan = pages["vww_mobilenet"]
    browser.get(path.as_uri())
    browser.find_element(By.ID, "search").send_keys("pw3")
    wanted = {n for n in _node_names(plan) if "pw3" in n}
    assert wanted
    lit = {g.get_attribute("data-node") for g in browser.find_elements(By.CSS_SELECTOR, "g.node.match")}
    faded = {g.get_attribute("data-node") for g in browser.find_elements(By.CSS_SELECTOR, "g.node.dim")}
    assert wanted <= lit and not (lit & faded) and lit | faded == _node_names(plan)
    shown = {r.get_attribute("data-node") for r in browser.find_elements(By.CSS_SELECTOR, "table#layers tr.layer")
             if r.is_displayed()}
    assert wanted <= shown and all("pw3" in r for r in shown)
    assert browser.find_element(By.ID, "search-count").text == f"{len(lit)} node{'s' * (len(lit) != 1)}"
    # folding the drawing hides it; unfolding shows it again
    summary = browser.find_element(By.CSS_SELECTOR, "#graph-section > summary")
    summary.click()
    assert not browser.find_element(By.ID, "drawing").is_displayed()
    summary.click()
    assert browser.find_element(By.ID, "drawing").is_displayed()
    assert browser.get_log("browser") == []
