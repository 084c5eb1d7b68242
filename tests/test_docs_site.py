"""The docs site in a real browser (issue 52, item 5): headless Chromium (Debian's `chromium`, driven by Playwright)
opens the built site's pages over HTTP; a page that does not load, an image that does not decode, a page without the
tables or figures it is made to show, or a dead internal link fails. The whole site's links are also checked file by
file (`docs/build.py`'s check, the one the build runs).

The site is `_site/` when `.ci/run` built it (`python docs/build.py`); else this module builds one into a temporary
folder, executing only the notebooks whose pages it opens (the others render without outputs). Screenshots go to
`$TREETRM_SCREENSHOTS` (default: a temporary folder) to be looked at."""
import functools, http.server, os, shutil, threading
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get('TREETRM_CHROMIUM', '/usr/bin/chromium')
# Chromium as this machine runs it headless: no sandbox as root, no background connections to a closed network
CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
                 '--disable-component-update', '--disable-sync']
# page -> (the least cell outputs, tables, figures) it must show once rendered
PAGES = {'index.html': (0, 0, 1), 'library/gate/00_evalues.html': (5, 0, 0), 'library/04_report.html': (5, 5, 2),
         'benchmarks/regime-map.html': (3, 3, 1), 'benchmarks/noise.html': (4, 1, 1), 'api.html': (0, 1, 0),
         'api/treetrm.gate.evalues.html': (0, 0, 0)}
EXECUTED = r'nbs/gate/00_evalues|nbs/04_report|docs/benchmarks/(regime-map|noise)'  # executed by a build made here

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason=f'no Chromium at {CHROMIUM} (.ci/run installs it: apt-get install chromium)')]

@pytest.fixture(scope='module')
def site(tmp_path_factory, docs_build) -> Path:
    "The built site: `_site/` when it is there, else one built here."
    if (ROOT/'_site'/'index.html').is_file(): return ROOT/'_site'
    tmp = tmp_path_factory.mktemp('site')
    return docs_build.build(tmp/'out', tmp/'work', workers=2, execute_re=EXECUTED)

@pytest.fixture(scope='module')
def served(site):
    "The site's address on a local HTTP server."
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f'http://127.0.0.1:{server.server_address[1]}/'
    server.shutdown()

@pytest.fixture(scope='module')
def browser():
    "Headless Chromium under Playwright."
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()

@pytest.fixture(scope='module')
def shots(tmp_path_factory) -> Path:
    "Where the screenshots go."
    d = Path(os.environ.get('TREETRM_SCREENSHOTS') or tmp_path_factory.mktemp('screenshots'))
    d.mkdir(parents=True, exist_ok=True)
    return d

BROKEN_IMAGES = "[...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)"
FIGURES = "[...document.querySelectorAll('img')].filter(i => i.naturalWidth >= 200).length"
OUTPUTS = "document.querySelectorAll('.cell_output').length"
TABLES = "document.querySelectorAll('table').length"
LINKS = ("[...document.querySelectorAll('a[href], img[src], link[href], script[src]')].map(e => e.href || e.src)"
         ".filter(u => u.startsWith(location.origin))")

def open_page(browser, url:str, shot:Path) -> dict:
    "Open `url` as a reader would: its status, broken images, figures, tables, internal links and script errors."
    page = browser.new_page(viewport={'width': 1280, 'height': 900})
    errors = []
    page.on('pageerror', lambda e: errors.append(str(e)))
    response = page.goto(url, wait_until='load')
    seen = {'status': response.status if response else None, 'broken': page.evaluate(BROKEN_IMAGES),
            'outputs': page.evaluate(OUTPUTS),
            'figures': page.evaluate(FIGURES), 'tables': page.evaluate(TABLES), 'links': page.evaluate(LINKS),
            'errors': errors}
    page.screenshot(path=str(shot), full_page=True)
    page.close()
    return seen

def dead_links(browser, links) -> list[str]:
    "The links (absolute, on the local server) that do not answer 200, with their status."
    request = browser.new_context().request
    out = []
    for u in sorted({l.split('#')[0] for l in links}):
        status = request.get(u).status
        if status != 200: out.append(f'{u}: {status}')
    return out

@pytest.mark.parametrize('name', list(PAGES))
def test_pages_load_with_their_tables_and_figures(name, served, browser, shots):
    seen = open_page(browser, served + name, shots/(name.replace('/', '__').removesuffix('.html') + '.png'))
    least = dict(zip(('outputs', 'tables', 'figures'), PAGES[name]))
    assert seen['status'] == 200, f'{name} did not load: {seen["status"]}'
    assert not seen['broken'], f'{name}: images that do not load: {seen["broken"]}'
    assert all(seen[k] >= n for k, n in least.items()), f'{name}: {({k: seen[k] for k in least})}, at least {least}'
    assert not seen['errors'], f'{name}: script errors {seen["errors"]}'
    assert not dead_links(browser, seen['links']), f'{name}: dead links {dead_links(browser, seen["links"])}'

def test_every_internal_link_of_the_site_resolves(site, docs_build):
    assert not docs_build.broken_links(site)

def test_the_link_check_finds_a_dead_link_and_a_missing_anchor(site, docs_build, tmp_path):
    copy = tmp_path/'site'
    shutil.copytree(site, copy, ignore=shutil.ignore_patterns('api', 'library', '_static', '_images'))
    (copy/'extra.html').write_text('<a href="gone.html">x</a> <a href="index.html#no-such-section">y</a> '
                                   '<img src="benchmarks/figures/none.png"> <a href="https://example.org/x">z</a>')
    problems = [p for p in docs_build.broken_links(copy) if p.startswith('extra.html')]
    assert problems == ['extra.html: gone.html (no such file)',
                        'extra.html: index.html#no-such-section (no such anchor)',
                        'extra.html: benchmarks/figures/none.png (no such file)']

def test_a_broken_image_fails_in_the_browser(site, browser, tmp_path):
    "The browser check sees an image that does not decode (its bytes are not a PNG)."
    (tmp_path/'bad.png').write_bytes(b'not a png')
    (tmp_path/'page.html').write_text('<img src="bad.png"><img src="missing.png">')
    seen = open_page(browser, (tmp_path/'page.html').as_uri(), tmp_path/'shot.png')
    assert len(seen['broken']) == 2


@pytest.fixture(scope='module')
def quick_start_report(tmp_path_factory) -> Path:
    "The quick start's run (the demo world, default settings, as the README trains it) written by `treetrm report`."
    import subprocess, sys
    root = tmp_path_factory.mktemp('quick_start')
    run = lambda *args: subprocess.run([sys.executable, *args], cwd=root, check=True, capture_output=True, timeout=900)
    # the README's quick start as a script (`python train.py`), then the command that writes the page
    run('-c', "import asyncio\nfrom treetrm import Runner\n\nrunner = Runner('my_ws', backend='sim')\n"
              "result = asyncio.run(runner.train('v1'))")
    run('-m', 'treetrm', 'report', 'my_ws', 'v1', '-o', 'report.html')
    return root/'report.html'

def test_the_quick_starts_run_report_opens_with_its_figures_and_fetches_nothing(quick_start_report, browser, shots):
    page = browser.new_page(viewport={'width': 1280, 'height': 900})
    fetched = []
    page.on('request', lambda r: fetched.append(r.url) if not r.url.startswith(('file:', 'data:')) else None)
    page.goto(quick_start_report.as_uri(), wait_until='load')
    broken, figures, tables = page.evaluate(BROKEN_IMAGES), page.evaluate(FIGURES), page.evaluate(TABLES)
    page.screenshot(path=str(shots/'run_report.png'), full_page=True)
    page.close()
    assert not broken and figures >= 2 and tables >= 5, (broken, figures, tables)
    assert not fetched, f'the page fetched {fetched}: it must hold everything it shows'
