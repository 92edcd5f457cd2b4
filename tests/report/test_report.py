"""`specguard report`: the page's data agrees with route, lint and fix, the page is self-contained
and escapes what it echoes, and it works in a real browser (tests/report/browser.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from specguard.cli import main
from tests.conftest import raw_safetensors


def _report(capsys, *args: str) -> tuple[int, str]:
    code = main(["report", *args])
    return code, capsys.readouterr().out


def _data(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert m
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def s1_page(scenarios, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "s1.html"
    assert main(["report", str(scenarios["s1"].path), "-o", str(out)]) == 0
    return out


def _route_records(path: Path, *extra: str) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "specguard.cli", "route", str(path), "--json", "--all", *extra],
                         capture_output=True, text=True, check=False)
    return json.loads(out.stdout)["records"]


@pytest.mark.parametrize("name", ["s1", "s2", "s3", "s5", "s6", "q1"])
def test_marked_cells_are_exactly_the_modules_route_says_are_not_ok(scenarios, tmp_path, capsys, name):
    info = scenarios[name]
    out = tmp_path / "page.html"
    code, said = _report(capsys, str(info.path), "-o", str(out))
    assert code == 0 and str(out) in said
    data = _data(out.read_text())
    routes = data["routes"]
    bad_in_page = {routes[i]["prefix"] for c in data["cells"] if c["marks"][0] for i in c["routes"]
                   if routes[i]["built"][0]["verdict"] != "ok"}
    records = _route_records(info.path)
    assert bad_in_page == {r["runtime_prefix"] for r in records if r["verdict"] != "ok"}
    assert {r["prefix"] for r in routes} == {r["runtime_prefix"] for r in records}
    # every marked cell holds a module that is not ok, and no unmarked cell does
    for c in data["cells"]:
        assert bool(c["marks"][0]) == any(routes[i]["built"][0]["verdict"] != "ok" for i in c["routes"])


def test_summary_states_lints_exit_code_and_the_fix(scenarios, s1_page, capsys):
    data = _data(s1_page.read_text())
    engine = data["engines"][0]
    assert engine["lint_exit"] == main(["lint", str(scenarios["s1"].path)]) == 1
    lint_out = capsys.readouterr().out
    assert engine["findings"] == len(data["findings"]) == sum(
        1 for line in lint_out.splitlines() if re.match(r"SG\d{3} ", line))
    assert set(data["rules"]) == {f["code"] for f in data["findings"]}
    # the repair shown is the one `specguard fix --diff` prints for the same platform
    assert main(["fix", str(scenarios["s1"].path), "--platform", "cuda", "--diff"]) == 0
    fix_out = capsys.readouterr().out
    assert data["fix"]["state"] == "repair"
    assert data["fix"]["diff"] and data["fix"]["diff"] in fix_out
    stored = {b["format"]: b["bytes"] for b in data["bytes_by_format"]}
    assert set(stored) >= {"nvfp4", "mxfp4", "fp8_block", "bf16"}


def test_clean_checkpoint_has_no_marks(scenarios, tmp_path, capsys):
    out = tmp_path / "clean.html"
    fixed = tmp_path / "s1-fixed"
    assert main(["fix", str(scenarios["s1"].path), "--platform", "cuda", "--out", str(fixed)]) == 0
    capsys.readouterr()
    code, said = _report(capsys, str(fixed), "--platform", "cuda", "-o", str(out))
    assert code == 0 and "loads as stored" in said
    data = _data(out.read_text())
    assert not any(any(c["marks"]) for c in data["cells"])
    assert data["engines"][0]["verdict"] == "loads as stored"
    assert data["fix"]["state"] == "clean"
    assert 'class="cell marked"' not in out.read_text()


class _Refs(HTMLParser):
    """Every URL an element would fetch."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href", "action", "data", "poster", "srcset") and v and not v.startswith("#"):
                self.refs.append(f"{tag} {k}={v}")


def test_page_is_self_contained(s1_page):
    page = s1_page.read_text()
    p = _Refs()
    p.feed(page)
    assert p.refs == []
    assert "link" not in p.tags and "iframe" not in p.tags
    assert not re.search(r"@import|url\(|https?://", page.split('id="report-data"')[0])


EVIL = 'model.layers.0.mlp.</script><img src=x onerror="alert(1)">'


@pytest.fixture(scope="module")
def hostile_page(tmp_path_factory) -> Path:
    """A checkpoint whose tensor name carries markup and a script end tag."""
    root = tmp_path_factory.mktemp("hostile")
    ckpt = root / "ckpt"
    ckpt.mkdir()
    header = {f"{EVIL}.weight": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]},
              "model.embed_tokens.weight": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [8, 16]}}
    raw_safetensors(ckpt / "model.safetensors", header, bytes(16))
    (ckpt / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 1,
        "hidden_size": 2, "intermediate_size": 2, "num_attention_heads": 1, "vocab_size": 2}))
    out = root / "page.html"
    assert main(["report", str(ckpt), "-o", str(out)]) == 0
    return out


def test_hostile_names_are_escaped(hostile_page):
    page = hostile_page.read_text()
    p = _Refs()
    p.feed(page)
    assert "img" not in p.tags
    assert page.count("</script>") == 2  # the data and the script, nothing a name closed
    assert any(EVIL in r["prefix"] for r in _data(page)["routes"])


def test_hostile_names_show_as_text_in_a_browser(browser, hostile_page):
    page = browser.open(hostile_page.as_uri())
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    page.click("tr.g-main td.cell")
    assert EVIL in page.evaluate("document.getElementById('details').innerText")
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.console == []


def test_bad_output_refused_before_any_work(tmp_path, capsys):
    assert main(["report", "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main(["report", "-o", str(tmp_path / "no" / "page.html")]) == 2
    assert "not a directory" in capsys.readouterr().err


# -- in a real browser ---------------------------------------------------------------------------


def test_s1_in_a_browser(browser, s1_page, tmp_path):
    page = browser.open(s1_page.as_uri(), width=1280, height=900)
    assert page.evaluate("document.body.dataset.ready") == "1"  # the script ran to its end
    rows = page.evaluate("[...document.querySelectorAll('table.map tbody tr')].map("
                         "tr => [tr.querySelector('th').innerText, [...tr.querySelectorAll('td.cell.marked')]"
                         ".map(td => td.dataset.column)])")
    marked = {label: cols for label, cols in rows if cols}
    assert marked == {"draft (mtp) 0 (layer 2)": ["experts"]}  # the MTP experts, no main layer
    assert [label for label, _ in rows[:2]] == ["layer 0", "layer 1"]
    # main layers' experts are shown (NVFP4) and not marked
    main_experts = page.evaluate("[...document.querySelectorAll('tr.g-main td[data-column=experts]')]"
                                 ".map(td => td.innerText.trim() + '|' + td.classList.contains('marked'))")
    assert main_experts == ["nv4|false", "nv4|false"]
    page.click("td.cell.marked")
    text = page.evaluate("document.getElementById('details').innerText")
    for want in ("model.layers.2.ffn.experts", "mxfp4", "nvfp4", "moe_quant_algo", "ModelOptNvFp4FusedMoE",
                 "misrouted"):
        assert want in text
    # keyboard: the selected cell has focus; arrows move it, Enter shows that cell
    assert page.evaluate("document.activeElement.dataset.column") == "experts"
    page.key("ArrowUp")
    assert page.evaluate("document.activeElement.closest('tr').querySelector('th').innerText") == "layer 1"
    page.key("Enter")
    assert "model.layers.1.ffn.experts" in page.evaluate("document.getElementById('details').innerText")
    page.screenshot(tmp_path / "s1-1280.png")
    assert (tmp_path / "s1-1280.png").stat().st_size > 10_000
    assert page.console == []


def test_s1_at_phone_width(browser, s1_page, tmp_path):
    page = browser.open(s1_page.as_uri(), width=390, height=844, mobile=True)
    # the page itself does not scroll sideways; the map scrolls inside its own box
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.evaluate("getComputedStyle(document.querySelector('.map-scroll')).overflowX") == "auto"
    page.screenshot(tmp_path / "s1-390.png")
    assert page.console == []


def test_the_first_tab_stop_is_the_marked_cell(browser, s1_page):
    page = browser.open(s1_page.as_uri())
    # Tab from the page start reaches the map's one tab stop after the findings' links... focus the
    # cell as the roving tab index says, as assistive technology would.
    assert page.evaluate("document.querySelectorAll('td.cell[tabindex=\"0\"]').length") == 1
    assert page.evaluate("document.querySelector('td.cell[tabindex=\"0\"]').classList.contains('marked')")
    page.evaluate("document.querySelector('td.cell[tabindex=\"0\"]').focus()")
    page.key(" ")
    assert "misrouted" in page.evaluate("document.getElementById('details').innerText")
    assert page.console == []


def test_every_engine_side_by_side(scenarios, tmp_path, capsys):
    """``--engine all``: one summary row and one mark per modelled engine, in the same cells."""
    out = tmp_path / "all.html"
    code, said = _report(capsys, str(scenarios["s1"].path), "--engine", "all", "-o", str(out))
    assert code == 0 and "vLLM 0.32" in said and "vLLM 0.33" in said
    data = _data(out.read_text())
    assert [g["name"] for g in data["engines"]] == ["vLLM 0.33 on cuda", "vLLM 0.32 on cuda",
                                                    "SGLang 0.5.23 on cuda"]
    marks = {data["routes"][c["routes"][0]]["prefix"]: c["marks"] for c in data["cells"] if any(c["marks"])}
    # vLLM misroutes the draft's experts, SGLang the target's (one module per row, whatever each calls it)
    assert marks == {"model.layers.2.ffn.experts": ["misrouted", "misrouted", None],
                     "model.layers.0.ffn.experts": [None, None, "misrouted"],
                     "model.layers.1.ffn.experts": [None, None, "misrouted"]}
    assert {len(r["built"]) for r in data["routes"]} == {3}
