"""tools/grafana/mla-dashboard.json: it is what tools/grafana/make_dashboard.py writes, its panels
are well formed, and every query names metrics, and labels of them, that a live `mla serve`
exports (the embedded tiny model with MTP speculative decoding on, so the spec-decode counters are
there too)."""
import importlib.util
import json
import re

import pytest
import requests
from agent_util import VOCAB_MODEL

from server_util import REPO, Server, parse_prometheus

DASHBOARD = REPO / "tools" / "grafana" / "mla-dashboard.json"
METRIC = re.compile(r"\bmla:[A-Za-z0-9_:]+")


def generator():
    spec = importlib.util.spec_from_file_location("make_dashboard", REPO / "tools" / "grafana" / "make_dashboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def queries(dashboard: dict) -> list[str]:
    out = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    out += [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return out


def test_the_committed_json_is_the_generators_output():
    assert DASHBOARD.read_text(encoding="utf-8") == generator().render(), \
        "tools/grafana/mla-dashboard.json is stale: run tools/grafana/make_dashboard.py"


def test_panels_are_well_formed(dashboard):
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in dashboard["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        cell = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cell & cells, f"{p['title']} overlaps another panel"
        cells |= cell
        if p["type"] == "row":
            continue
        assert p["targets"] and p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        for t in p["targets"]:
            expr = t["expr"]
            assert METRIC.search(expr), f"{p['title']}: no mla metric in {expr}"
            assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
            if "histogram_quantile" in expr:
                assert "_bucket" in expr and "by (le)" in expr, expr


@pytest.fixture(scope="module")
def exported() -> dict:
    """{sample name: set of its label names} from a live server's /metrics after some traffic."""
    s = Server(VOCAB_MODEL, "--max-model-len", "256",
               "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}')
    try:
        r = requests.post(s.url + "/v1/completions", timeout=60,
                          json={"prompt": "A dictionary is", "max_tokens": 8, "temperature": 0})
        assert r.status_code == 200, r.text
        samples = parse_prometheus(requests.get(s.url + "/metrics", timeout=10).text)
    finally:
        assert s.stop() == 0, s.log
    out: dict = {}
    for name, labels in samples:
        out.setdefault(name, set()).update(k for k, _ in labels)
    return out


def test_every_query_names_exported_metrics_and_labels(dashboard, exported):
    for expr in queries(dashboard):
        names = METRIC.findall(expr)
        for name in names:
            assert name in exported, f"{name} (in {expr}) is not exported; exported: {sorted(exported)}"
        # Labels matched in a selector, and grouped on in `sum by (...) (rate(METRIC...))`.
        for name, matchers in re.findall(r"(mla:[A-Za-z0-9_:]+)\{([^}]*)\}", expr):
            for label in re.findall(r"(\w+)\s*=", matchers):
                assert label in exported[name], f"{name} has no label {label} (in {expr})"
        for labels, name in re.findall(r"by \(([^)]*)\) \((?:\w+\()?(mla:[A-Za-z0-9_:]+)", expr):
            for label in (x.strip() for x in labels.split(",")):
                assert label in exported[name], f"{name} has no label {label} (in {expr})"
        if m := re.search(r"label_values\((mla:[A-Za-z0-9_:]+), (\w+)\)", expr):
            assert m.group(2) in exported[m.group(1)], expr


def test_every_exported_family_has_a_panel(dashboard, exported):
    """The dashboard leaves out no metric the server exports (histograms through their series)."""
    used = {re.sub(r"_(bucket|sum|count)$", "", n) for q in queries(dashboard) for n in METRIC.findall(q)}
    families = {re.sub(r"_(bucket|sum|count)$", "", n) for n in exported}
    assert families <= used, f"exported but on no panel: {sorted(families - used)}"
