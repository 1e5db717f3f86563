"""The in-page CapsNet (book/_static/capsnet.js, on book/appendix_inpage) in headless Chromium,
against PyTorch, through the page's own controls (each test names the property it checks).
Prints the forward pass's time in the browser, the page's weight and each weight file's size.

Uses tests/book/test_browser.py's server, browser and conditions (it skips, or fails under
CAPSEDU_REQUIRE_BROWSER=1, where they do).
"""
import base64
import json

import numpy as np
import pytest
import torch

# isort: off
# test_browser first: it skips this module too (or fails it, in CI) where Chromium, the built book
# or Selenium is missing, before Selenium is imported here.
from test_browser import HTML, _browser, _errors, _load, _shot, browser, server  # noqa: F401 (fixtures)
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait
# isort: on

from capsedu.core.routing import dynamic_routing
from capsedu.figures.frames import perturb
from capsedu.figures.static import to_uint8
from capsedu.training.pretrained import load_capsnet

PAGE = "book/appendix_inpage.html"
MAX_PIXEL_ERROR = 2          # out of 255
MAX_LENGTH_ERROR = 0.02

PIXELS = """var c = arguments[0], d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, out = [];
            for (var k = 0; k < d.length; k += 4) { out.push(d[k]); } return out;"""
SET_SLIDERS = """var sliders = arguments[0].querySelectorAll('.ci-sliders input');
                 arguments[1].forEach(function (v, d) { sliders[d].value = v;
                   sliders[d].dispatchEvent(new Event('input', {bubbles: true})); });
                 return Array.from(sliders).map(function (s) { return Number(s.value); });"""
BINARIES = "return performance.getEntriesByType('resource').map(e => e.name).filter(n => n.endsWith('.bin'));"


@pytest.fixture(scope="module")
def model():
    return load_capsnet()


@pytest.fixture(scope="module")
def page(browser, server):  # noqa: F811 (the imported fixtures)
    """The chapter opened once, its panel's data read, the decoder and the network loaded by their buttons."""
    _load(browser, f"{server}/{PAGE}")
    panel = browser.find_element(By.CSS_SELECTOR, ".capsedu-inpage")
    browser.execute_script("arguments[0].scrollIntoView({block: 'start'});", panel)
    data = json.loads(browser.execute_script(
        "return arguments[0].querySelector('script.capsedu-inpage-data').textContent;", panel))
    assert browser.execute_script(BINARIES) == [], "weights downloaded before the reader asked"
    panel.find_element(By.CSS_SELECTOR, ".ci-load-decoder").click()
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: panel.find_element(By.CSS_SELECTOR, ".ci-decoder .ci-body").is_displayed())
    assert [n.rsplit("/", 1)[1] for n in browser.execute_script(BINARIES)] == [data["decoder"]]
    return browser, panel, data


def _pixels(driver, canvas):
    return np.array(driver.execute_script(PIXELS, canvas), dtype=np.int16).reshape(28, 28)


def _images(b64):
    return torch.from_numpy(np.frombuffer(base64.b64decode(b64), np.uint8).reshape(-1, 1, 28, 28) / 255).float()


def _reference(model, data, n, delta):
    """PyTorch's reconstruction of test digit n's capsule plus ``delta``, as grey uint8."""
    label = data["digits"]["labels"][n]
    caps = torch.zeros(10, 16)
    caps[label] = torch.tensor(data["digits"]["capsules"][n])
    with torch.no_grad():
        return to_uint8(perturb(model, caps, label, None, torch.tensor(delta, dtype=torch.float32))).astype(np.int16)


def _decode_in_page(page, n, values):
    driver, panel, _ = page
    Select(panel.find_element(By.CSS_SELECTOR, "select.ci-digit")).select_by_value(str(n))
    delta = driver.execute_script(SET_SLIDERS, panel, list(values))
    return _pixels(driver, panel.find_element(By.CSS_SELECTOR, "canvas.ci-recon")), delta


def test_build_time_capsules_are_the_networks(page, model):
    _, _, data = page
    images = _images(data["digits"]["images"])
    assert len(images) >= 20
    with torch.no_grad():
        capsules = model.capsules(images)
    picked = capsules[torch.arange(len(images)), data["digits"]["labels"]]
    assert torch.allclose(picked, torch.tensor(data["digits"]["capsules"]), atol=1e-5)


def test_random_slider_settings_decode_as_pytorch(page, model):
    driver, panel, data = page
    rng = np.random.default_rng(26)
    worst = 0
    for _ in range(12):
        n = int(rng.integers(len(data["digits"]["labels"])))
        values = np.round(rng.uniform(-data["span"], data["span"], 16) * (rng.random(16) < 0.6), 2)
        shown, delta = _decode_in_page(page, n, values.tolist())
        assert np.allclose(delta, values), "the sliders did not take the values"
        error = int(np.abs(shown - _reference(model, data, n, delta)).max())
        worst = max(worst, error)
        assert error <= MAX_PIXEL_ERROR, f"digit {n}, sliders {delta}: max pixel error {error}/255"
        length = float(panel.find_element(By.CSS_SELECTOR, "output.ci-length").text)
        want = (torch.tensor(data["digits"]["capsules"][n]) + torch.tensor(delta)).norm().item()
        assert abs(length - want) < 1e-3
    print(f"decoder in the page: max pixel error {worst}/255 over 12 random settings")
    _shot(panel, "inpage_decoder.png")
    assert not _errors(driver.get_log("browser"))


def test_two_sliders_together_differ_from_each_alone(page, model):
    _, panel, data = page
    a, b = np.zeros(16), np.zeros(16)
    a[0], b[5] = 0.4, -0.4
    alone_a, _ = _decode_in_page(page, 0, a.tolist())
    alone_b, _ = _decode_in_page(page, 0, b.tolist())
    both, delta = _decode_in_page(page, 0, (a + b).tolist())
    assert np.abs(both - alone_a).max() > 4 * MAX_PIXEL_ERROR and np.abs(both - alone_b).max() > 4 * MAX_PIXEL_ERROR
    assert np.abs(both - _reference(model, data, 0, delta)).max() <= MAX_PIXEL_ERROR
    panel.find_element(By.CSS_SELECTOR, "button.ci-reset").click()
    reset, _ = _decode_in_page(page, 0, [0.0] * 16)
    assert np.abs(reset - _reference(model, data, 0, [0.0] * 16)).max() <= MAX_PIXEL_ERROR


def _load_network(page):
    driver, panel, data = page
    button = panel.find_elements(By.CSS_SELECTOR, "button.ci-load-network")
    if button and button[0].is_displayed():
        button[0].click()
        WebDriverWait(driver, 120).until(lambda d: not button[0].is_displayed())
        assert sorted(n.rsplit("/", 1)[1] for n in driver.execute_script(BINARIES)) == sorted(
            [data["decoder"], data["encoder"]])


def test_sample_digits_through_the_whole_network_match_pytorch(page, model):
    driver, panel, data = page
    _load_network(page)
    samples = _images(data["samples"]["images"])
    with torch.no_grad():
        _, want, _ = model(samples)                                         # (S, 10)
        _, history = model.capsules(samples, return_history=True)
    coupling = history[-1].mean(dim=1)                                      # (S, 10): mean c_ij over i
    times = []
    for k in range(min(len(samples), 5)):
        panel.find_element(By.CSS_SELECTOR, f'button.ci-sample[data-sample="{k}"]').click()
        bars = panel.find_element(By.CSS_SELECTOR, ".ci-lengths")
        got = torch.tensor(json.loads(bars.get_attribute("data-lengths")))
        assert (got - want[k]).abs().max() <= MAX_LENGTH_ERROR, f"sample {k}: {got} vs {want[k]}"
        assert int(got.argmax()) == int(want[k].argmax())
        captions = [float(c.text.split(": ")[1]) for c in panel.find_elements(By.CSS_SELECTOR, ".ci-coupling figcaption")]
        assert len(captions) == 10 and np.abs(np.array(captions) - coupling[k].numpy()).max() <= 0.005
        times.append(float(panel.find_element(By.CSS_SELECTOR, ".ci-verdict").get_attribute("data-ms")))
        assert Select(panel.find_element(By.CSS_SELECTOR, "select.ci-digit")).first_selected_option.get_attribute(
            "value") == "drawn"                                             # the sliders now move this digit
    print(f"forward pass in headless Chromium: {json.dumps({'ms': times, 'median_ms': float(np.median(times))})}")
    _shot(panel, "inpage_network.png")
    assert not _errors(driver.get_log("browser"))


# What the vote explorer shows of the last run (the panel element's capsedu property): the
# primary capsules' lengths (its grid), the votes for the predicted class and c of every iteration.
EXPLORED = """var x = arguments[0].capsedu, r = x.result, N = r.types * r.cells, D = r.capsules.length / r.lengths.length;
              return {label: r.label, lengths: Array.from(x.explorer.lengths),
                      votes: Array.from(r.votes.subarray(r.label * N * D, (r.label + 1) * N * D)),
                      couplings: r.couplings.map(function (c) { return Array.from(c); })};"""
EXPLORER_STATE = """var v = arguments[0].capsedu.explorer;
                    return {i: v.i, j: v.j, r: v.r, radii: Array.from(v.radii)};"""
# The int8 encoder's cost, measured on the 5 samples (2026-12-04, Chromium): primary lengths
# 0.0025, votes 0.0013 (their entries reach 0.32), c_ij 0 / 0.00015 / 0.00046 at iterations 1-3.
MAX_PRIMARY_LENGTH_ERROR = 0.01
MAX_VOTE_ERROR = 0.005           # absolute, any entry of any vote for the predicted class
MAX_COUPLING_ERROR = 0.002       # any single c_ij, at any iteration (c moves off 0.1 by hundredths)


def test_the_vote_explorer_shows_pytorchs_routing(page, model):
    """For 5 samples: the grid's primary-capsule lengths, the votes for the predicted class and c
    at each routing iteration, against capsedu's PyTorch network and dynamic_routing."""
    driver, panel, data = page
    _load_network(page)
    samples = _images(data["samples"]["images"])
    cfg = model.config
    with torch.no_grad():
        primary = model.primary(torch.relu(model.conv1(samples)))          # (S, 1152, 8)
        u_hat = model.digits.predictions(primary)                           # (S, 1152, 10, 16)
        _, history = dynamic_routing(u_hat, cfg.iterations, cfg.routing, True, cfg.squash_k)
    worst = {"primary length": 0.0, "vote": 0.0, "c": [0.0] * cfg.iterations}
    for k in range(min(len(samples), 5)):
        panel.find_element(By.CSS_SELECTOR, f'button.ci-sample[data-sample="{k}"]').click()
        got = driver.execute_script(EXPLORED, panel)
        label = got["label"]
        lengths = torch.tensor(got["lengths"])
        error = float((lengths - primary[k].norm(dim=-1)).abs().max())
        worst["primary length"] = max(worst["primary length"], error)
        assert error <= MAX_PRIMARY_LENGTH_ERROR, f"sample {k}: primary lengths off by {error}"
        votes = torch.tensor(got["votes"]).view(-1, cfg.digit_dim)
        error = float((votes - u_hat[k, :, label]).abs().max())
        worst["vote"] = max(worst["vote"], error)
        assert error <= MAX_VOTE_ERROR, f"sample {k}: votes for class {label} off by {error}"
        assert len(got["couplings"]) == cfg.iterations
        for r, c in enumerate(got["couplings"]):
            error = float((torch.tensor(c).view(-1, cfg.num_classes) - history[r][k]).abs().max())
            worst["c"][r] = max(worst["c"][r], error)
            assert error <= MAX_COUPLING_ERROR, f"sample {k}, iteration {r + 1}: c_ij off by {error}"
    scale = float(u_hat[:5].abs().max())
    print(f"vote explorer against PyTorch, 5 samples: {json.dumps(worst)} (largest |vote entry| {scale:.3f})")
    assert not _errors(driver.get_log("browser"))


def _bars(explorer):
    return [float(b.get_attribute("data-c")) for b in explorer.find_elements(By.CSS_SELECTOR, ".ci-x-bar")]


def test_the_vote_explorer_answers_its_controls(page):
    """A click on another cell of the grid selects that capsule (its c_i bars change); the
    iteration slider changes the dots' radii (at iteration 1 every c_ij is 1/10: all equal)."""
    driver, panel, _ = page
    _load_network(page)
    panel.find_element(By.CSS_SELECTOR, 'button.ci-sample[data-sample="0"]').click()
    explorer = panel.find_element(By.CSS_SELECTOR, ".ci-explorer")
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", explorer)
    grid = explorer.find_element(By.CSS_SELECTOR, "canvas.ci-x-grid")
    before, bars = driver.execute_script(EXPLORER_STATE, panel), _bars(explorer)
    assert len(bars) == 10 and abs(sum(bars) - 1) < 1e-3 and before["r"] == 3
    # the grid's first tile (type 0) is at its top left, 6 px a cell: click cell (row 2, column 3)
    size = grid.size
    ActionChains(driver).move_to_element_with_offset(grid, 3 * 6 + 3 - size["width"] // 2,
                                                     2 * 6 + 3 - size["height"] // 2).click().perform()
    after = driver.execute_script(EXPLORER_STATE, panel)
    assert after["i"] == 2 * 6 + 3 != before["i"], (before["i"], after["i"])
    assert _bars(explorer) != bars, "the selected capsule changed but not its coupling bars"
    step = explorer.find_element(By.CSS_SELECTOR, "input.ci-x-iter")
    driver.execute_script("arguments[0].value = 1; arguments[0].dispatchEvent(new Event('input'));", step)
    first = driver.execute_script(EXPLORER_STATE, panel)
    assert first["r"] == 1 and np.ptp(first["radii"]) < 1e-6, "at iteration 1 every c_ij is 1/10"
    assert all(abs(c - 0.1) < 1e-6 for c in _bars(explorer))
    driver.execute_script("arguments[0].value = 3; arguments[0].dispatchEvent(new Event('input'));", step)
    last = driver.execute_script(EXPLORER_STATE, panel)
    assert np.ptp(last["radii"]) > 0.1 and last["radii"] != first["radii"]
    Select(explorer.find_element(By.CSS_SELECTOR, "select.ci-x-class")).select_by_value(str((last["j"] + 1) % 10))
    assert driver.execute_script(EXPLORER_STATE, panel)["j"] == (last["j"] + 1) % 10
    caption = explorer.find_element(By.CSS_SELECTOR, ".ci-x-caption").text
    assert caption.startswith("iteration 3: c for class ") and "uniform 0.10" in caption
    # it fits the article's column: nothing wider than the explorer, the explorer no wider than the panel
    widths = driver.execute_script("""var e = arguments[0], p = e.closest('.capsedu-inpage');
        return [e.scrollWidth, e.clientWidth, e.getBoundingClientRect().right, p.getBoundingClientRect().right];""",
                                   explorer)
    assert widths[0] <= widths[1] and widths[2] <= widths[3] + 1, widths
    _shot(explorer, "inpage_explorer.png")
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", panel)   # as the fixture left it
    assert not _errors(driver.get_log("browser"))


def _draw_seven(driver, panel):
    """A "7" drawn off-centre in the top-left part of the pad: a bar, then a slanted stroke."""
    pad = panel.find_element(By.CSS_SELECTOR, "canvas.ci-draw")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", pad)
    ActionChains(driver).move_to_element_with_offset(pad, -110, -110).click_and_hold() \
        .move_by_offset(60, 0).move_by_offset(-30, 50).move_by_offset(-15, 40).release().perform()


def test_a_drawn_digit_is_read_as_mnist_digits_are_made(page):
    driver, panel, _ = page
    _load_network(page)
    panel.find_element(By.CSS_SELECTOR, "button.ci-clear").click()
    _draw_seven(driver, panel)
    image = _pixels(driver, panel.find_element(By.CSS_SELECTOR, "canvas.ci-input")) / 255
    rows, cols = np.nonzero(image > 0.05)
    assert max(np.ptp(rows), np.ptp(cols)) + 1 in (19, 20, 21), "the digit is not scaled into a 20 x 20 box"
    ys, xs = np.mgrid[0:28, 0:28]
    centre = (image * ys).sum() / image.sum(), (image * xs).sum() / image.sum()
    assert abs(centre[0] - 14) <= 1 and abs(centre[1] - 14) <= 1, f"centre of mass {centre}"
    lengths = json.loads(panel.find_element(By.CSS_SELECTOR, ".ci-lengths").get_attribute("data-lengths"))
    assert len(lengths) == 10 and all(0 <= v < 1 for v in lengths)
    _shot(panel, "inpage_drawn.png")


def test_weight_files_are_served_with_the_sizes_the_page_shows(page):
    _, _, data = page
    for name in (data["decoder"], data["encoder"]):
        size = (HTML / "_static" / name).stat().st_size
        assert size == data["files"][name]
        print(f"{name}: {size / 1e6:.2f} MB")
    print(f"{PAGE}: {(HTML / PAGE).stat().st_size / 1e6:.2f} MB")


# without JavaScript only the panel's note is left: test_browser's test_without_javascript_...


# The whole view of the panel after a run: what the network read and decoded, its lengths, the
# sliders and the explorer's selection (with the dots' radii, which depend on all three).
VIEW = """var p = arguments[0], x = p.capsedu && p.capsedu.explorer;
    function px(c) { var d = c.getContext('2d').getImageData(0, 0, 28, 28).data, o = [];
                     for (var k = 0; k < d.length; k += 4) { o.push(d[k]); } return o; }
    return x && {input: px(p.querySelector('.ci-input')), recon: px(p.querySelector('.ci-recon')),
                 lengths: p.querySelector('.ci-lengths').getAttribute('data-lengths'),
                 digit: p.querySelector('select.ci-digit').value,
                 sliders: Array.from(p.querySelectorAll('.ci-sliders input')).map(function (s) { return s.value; }),
                 i: x.i, j: x.j, r: x.r, radii: Array.from(x.radii)};"""


def test_the_panels_view_survives_a_reload_from_its_url(server, model, tmp_path_factory):  # noqa: F811
    """A drawn digit, moved sliders and an explorer selection, written to the URL; that URL
    opened anew loads the weights and shows the same view. The explorer's two axes on the drawn
    digit are numpy's principal axes (its votes and c_ij: test_the_vote_explorer_shows_pytorchs_routing)."""
    driver = _browser(tmp_path_factory)
    try:
        _load(driver, f"{server}/{PAGE}")
        panel = driver.find_element(By.CSS_SELECTOR, ".capsedu-inpage")
        panel.find_element(By.CSS_SELECTOR, ".ci-load-network").click()
        WebDriverWait(driver, 120).until(lambda d: d.execute_script("return !!arguments[0].querySelector"
                                                                    "('.ci-load-network').closest('p').hidden;", panel))
        _draw_seven(driver, panel)
        WebDriverWait(driver, 30).until(lambda d: d.execute_script(VIEW, panel))
        explorer = panel.find_element(By.CSS_SELECTOR, ".ci-explorer")
        label = driver.execute_script(VIEW, panel)["j"]
        Select(explorer.find_element(By.CSS_SELECTOR, "select.ci-x-class")).select_by_value(str((label + 3) % 10))
        driver.execute_script("var s = arguments[0].querySelector('input.ci-x-iter'); s.value = 2;"
                              "s.dispatchEvent(new Event('input'));", explorer)
        driver.execute_script(SET_SLIDERS, panel, [0.0] * 3 + [0.3, 0.0, -0.2] + [0.0] * 10)
        view, url = driver.execute_script(VIEW, panel), driver.current_url
        assert view["r"] == 2 and view["j"] == (label + 3) % 10 and view["digit"] == "drawn"
        assert "ci-input=d" in url and len(url) < 1000, url

        # the explorer's axes on this drawn digit, against numpy's
        image = torch.tensor(view["input"], dtype=torch.float32).view(1, 1, 28, 28) / 255
        with torch.no_grad():
            u_hat = model.digits.predictions(model.primary(torch.relu(model.conv1(image))))   # (1, 1152, 10, 16)
        shown = np.array(driver.execute_script("return arguments[0].capsedu.explorer.axes.map(function (a) {"
                                               " return Array.from(a); });", panel))        # (2, 16)
        x = u_hat[0, :, view["j"]].double().numpy()                                     # (1152, 16)
        _, vectors = np.linalg.eigh(np.cov(x, rowvar=False))
        assert np.abs((shown * vectors[:, [-1, -2]].T).sum(axis=1)).min() > 0.999   # the same axes, up to sign

        driver.get("about:blank")
        _load(driver, url)
        panel = driver.find_element(By.CSS_SELECTOR, ".capsedu-inpage")
        WebDriverWait(driver, 120).until(lambda d: (d.execute_script(VIEW, panel) or {}).get("sliders")
                                         == view["sliders"])
        again = driver.execute_script(VIEW, panel)
        assert again == view, {k: (view[k], again[k]) for k in view if again[k] != view[k]}
        _shot(panel, "inpage_restored.png")
        assert not _errors(driver.get_log("browser"))
    finally:
        driver.quit()
