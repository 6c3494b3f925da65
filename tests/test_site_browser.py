"""The report site of the smoke run, opened in a real browser (headless Chromium through Selenium):
every page loads with no console error and no broken link or image; each table page holds its table,
each figure page its image; screenshots are kept under the test's tmp dir.

Chromium and its driver come from Debian (packages chromium, chromium-driver); when they are missing
the test installs them with apt-get (as root), and skips saying why where it cannot."""
from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

CHROMIUM = ("chromium", "chromium-browser")
DRIVER = "chromedriver"


def ensure_chromium(apt_install) -> tuple[str, str]:
    """(browser, driver) paths; installs Debian's chromium + chromium-driver when missing, else skips."""
    def found() -> tuple[str | None, str | None]:
        return next((p for p in map(shutil.which, CHROMIUM) if p), None), shutil.which(DRIVER)

    browser, driver = found()
    if browser and driver:
        return browser, driver
    apt_install(["chromium", "chromium-driver"], "no browser for the site test")
    browser, driver = found()
    if not (browser and driver):
        pytest.skip("apt-get installed chromium but chromium / chromedriver are not on PATH")
    return browser, driver


@pytest.fixture(scope="module")
def browser(apt_install):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install selenium==4.40.0, a pinned dependency)")
    binary, driver_path = ensure_chromium(apt_install)
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--allow-file-access-from-files"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(options=opts, service=Service(executable_path=driver_path))
    yield drv
    drv.quit()


@pytest.mark.slow
def test_site_in_browser(smoke_run, browser, tmp_path):
    results, run = smoke_run
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    site = results / "site"
    pages = sorted(site.rglob("*.html"))
    tables = [p for p in pages if p.name.startswith("table-")]
    figures = [p for p in pages if p.name.startswith("figure-")]
    assert (site / "index.html") in pages and (site / "claims.html") in pages
    assert len(tables) >= 37 and len(figures) >= 10
    shots = tmp_path / "screenshots"
    shots.mkdir()
    problems = []
    for page in pages:
        browser.get(page.as_uri())
        assert browser.execute_script("return document.readyState") == "complete"
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        if errors:
            problems.append(f"{page}: console errors {errors}")
        links = browser.execute_script(
            "return Array.from(document.querySelectorAll('a[href], link[href]')).map(a => a.href)"
            ".concat(Array.from(document.querySelectorAll('img')).map(i => i.src))")
        for url in links:
            u = urlparse(url)
            if u.scheme != "file":
                continue
            target = Path(unquote(u.path))
            if not target.exists():
                problems.append(f"{page}: broken link {url}")
            elif u.fragment and target.suffix == ".html" and f"id='{u.fragment}'" not in target.read_text():
                problems.append(f"{page}: no element #{u.fragment} in {target}")
        broken = browser.execute_script(
            "return Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)")
        if broken:
            problems.append(f"{page}: images that did not load {broken}")
        if page in tables:
            n_cells = browser.execute_script("return document.querySelectorAll('table.paper td.cell').length")
            if not n_cells:
                problems.append(f"{page}: no table cells")
        if page in figures and not browser.execute_script("return document.querySelectorAll('img.fig').length"):
            problems.append(f"{page}: no figure image")
        if page == site / "claims.html" and not browser.execute_script("return document.querySelectorAll('img.forest').length"):
            problems.append(f"{page}: no forest plot of the claims (smoke's effectiveness claims are tested)")
        if page.name == "index.html" and page.parent == site or page == tables[0]:
            browser.save_screenshot(str(shots / f"{page.parent.name}-{page.stem}.png"))
    assert not problems, "\n".join(problems[:20])
    assert len(list(shots.glob("*.png"))) == 2
    print(f"screenshots: {shots}")
