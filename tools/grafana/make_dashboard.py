"""Writes tools/grafana/mla-dashboard.json: a Grafana dashboard for `mla serve`'s Prometheus
metrics (docs/API.md "Metrics"), laid out like vLLM's: throughput, latency histograms, scheduler
state, KV and prefix cache use, the MLA attention paths, DSA and speculative decoding.

    .venv/bin/python tools/grafana/make_dashboard.py        # rewrites the JSON next to this file

Import the JSON in Grafana (Dashboards > New > Import) and pick the Prometheus data source that
scrapes the server's /metrics. tests/py/test_grafana_dashboard.py checks that the committed JSON
is this script's output and that every query names metrics (and labels) a live server exports.
"""
from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).with_name("mla-dashboard.json")
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = '{model_name="$model_name"}'
RATE = "$__rate_interval"


def rate(metric: str, by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({metric}{SEL}[{RATE}]))"


def ratio(numerator: str, denominator: str) -> str:
    return f"{numerator} / {denominator}"


def quantiles(histogram: str) -> list[tuple[str, str]]:
    """p50 / p90 / p99 and the mean of a histogram over the rate window."""
    out = [(f"histogram_quantile({q}, {rate(histogram + '_bucket', 'le')})", f"p{int(q * 100)}")
           for q in (0.5, 0.9, 0.99)]
    out.append((ratio(rate(histogram + "_sum"), rate(histogram + "_count")), "mean"))
    return out


class Layout:
    """Panels placed left to right, two per row of the grid (24 wide), rows of panels under row
    headers."""

    def __init__(self):
        self.panels: list[dict] = []
        self.y = 0
        self.x = 0

    def row(self, title: str):
        self._newline()
        self.panels.append({"type": "row", "title": title, "collapsed": False, "panels": [],
                            "id": len(self.panels) + 1, "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}})
        self.y += 1

    def _newline(self):
        if self.x:
            self.x = 0
            self.y += 8

    def panel(self, title: str, description: str, targets: list[tuple[str, str]], unit: str,
              kind: str = "timeseries", width: int = 12):
        if self.x + width > 24:
            self._newline()
        p = {"type": kind, "title": title, "description": description, "datasource": DS,
             "id": len(self.panels) + 1, "gridPos": {"h": 8, "w": width, "x": self.x, "y": self.y},
             "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
             "targets": [{"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend}
                         for i, (expr, legend) in enumerate(targets)]}
        if kind == "timeseries":
            p["options"] = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                            "tooltip": {"mode": "multi", "sort": "none"}}
        else:  # heatmap of a histogram's buckets
            p["options"] = {"calculate": False, "yAxis": {"unit": unit}, "color": {"scheme": "Oranges"}}
            for t in p["targets"]:
                t["format"] = "heatmap"
        self.panels.append(p)
        self.x += width


def build() -> dict:
    g = Layout()
    g.row("Throughput and scheduling")
    g.panel("Token throughput", "Prompt tokens admitted and tokens generated per second.",
            [(rate("mla:prompt_tokens_total"), "prompt"), (rate("mla:generation_tokens_total"), "generation")],
            "short")
    g.panel("Finished requests", "Requests finished per second, by the reason of their first choice.",
            [(rate("mla:request_success_total", "finished_reason"), "{{finished_reason}}")], "reqps")
    g.panel("Scheduler state", "Sequences running in the engine and waiting to be scheduled (new or preempted).",
            [(f"mla:num_requests_running{SEL}", "running"), (f"mla:num_requests_waiting{SEL}", "waiting")],
            "short")
    g.panel("KV cache usage", "Fraction of the KV cache's blocks in use.",
            [(f"mla:kv_cache_usage_perc{SEL}", "used")], "percentunit")

    g.row("Latency")
    g.panel("Time to first token", "From a request's arrival to its first generated token.",
            quantiles("mla:time_to_first_token_seconds"), "s")
    g.panel("Time per output token", "Between consecutive generated tokens of a sequence.",
            quantiles("mla:time_per_output_token_seconds"), "s")
    g.panel("End-to-end request latency", "From a request's arrival to its last output.",
            quantiles("mla:e2e_request_latency_seconds"), "s")
    g.panel("Time to first token (heatmap)", "Requests per TTFT bucket over the rate window.",
            [(f"sum by (le) (increase(mla:time_to_first_token_seconds_bucket{SEL}[{RATE}]))", "{{le}}")],
            "s", kind="heatmap")

    g.row("Prefix cache and KV tiers")
    g.panel("Prefix cache hit rate", "Prompt tokens found in the prefix cache over prompt tokens looked up.",
            [(ratio(rate("mla:prefix_cache_hits_total"), rate("mla:prefix_cache_queries_total")), "hit rate")],
            "percentunit")
    g.panel("Preemptions", "Sequences preempted per second (their KV freed, recomputed later).",
            [(rate("mla:num_preemptions_total"), "preemptions")], "short")
    g.panel("Tier lookups", "KV blocks found (hits) and not found (misses) per second in the RAM and disk tiers "
            "(--kv-cache-host-bytes, --kv-cache-dir).",
            [(rate("mla:prefix_cache_tier_hits_total", "tier"), "hits {{tier}}"),
             (rate("mla:prefix_cache_tier_misses_total", "tier"), "misses {{tier}}")], "short")
    g.panel("Tier contents", "Bytes of KV blocks each tier holds.",
            [(f"sum by (tier) (mla:prefix_cache_tier_bytes{SEL})", "{{tier}}")], "bytes")
    g.panel("Prefill saved by the tiers", "Prompt tokens per second loaded from RAM or disk instead of computed.",
            [(rate("mla:prefix_cache_tier_tokens_loaded_total"), "tokens loaded")], "short")
    g.panel("Disk tier I/O", "Block files read and written per second.",
            [(rate("mla:prefix_cache_disk_read_bytes_total"), "read"),
             (rate("mla:prefix_cache_disk_written_bytes_total"), "written")], "Bps")
    g.panel("Disk tier problems", "Blocks per second not written (queue full, write failed) and files rejected "
            "(corrupt, truncated, another model's).",
            [(rate("mla:prefix_cache_disk_writes_dropped_total"), "dropped"),
             (rate("mla:prefix_cache_disk_write_errors_total"), "write errors"),
             (rate("mla:prefix_cache_disk_files_rejected_total"), "rejected")], "short")

    g.row("MLA attention paths, DSA")
    g.panel("Tokens by MLA path", "Tokens attended per second through each MLA path, as the model counted them "
            "(mha: decompressed K/V, prefill chunks; mqa: absorbed, decode).",
            [(rate("mla:attention_path_tokens_total", "path"), "{{path}}")], "short")
    g.panel("Share of the MHA path", "Fraction of attended tokens that went down the decompressed (MHA) path.",
            [(ratio(f'sum(rate(mla:attention_path_tokens_total{{model_name="$model_name",path="mha"}}[{RATE}]))',
                    rate("mla:attention_path_tokens_total")), "mha share")], "percentunit")
    g.panel("DSA rows per sparse token", "Context rows the lightning indexer selected per token of a sparse "
            "layer (DeepSeek-V3.2 / GLM-5 sparse attention; empty for dense models).",
            [(ratio(rate("mla:sparse_attention_selected_rows_total"), rate("mla:sparse_attention_layer_tokens_total")),
              "rows per token")], "short")

    g.row("Speculative decoding (MTP)")
    g.panel("Draft acceptance rate", "Accepted draft tokens over verified ones (--speculative-config).",
            [(ratio(rate("mla:spec_decode_num_accepted_tokens_total"), rate("mla:spec_decode_num_draft_tokens_total")),
              "acceptance")], "percentunit")
    g.panel("Mean accepted length", "Tokens per verify step: 1 + accepted drafts per step that carried drafts.",
            [("1 + " + ratio(rate("mla:spec_decode_num_accepted_tokens_total"), rate("mla:spec_decode_num_drafts_total")),
              "tokens per step")], "short")
    g.panel("Accepted drafts by position", "Accepted draft tokens per second by their place in the step.",
            [(rate("mla:spec_decode_num_accepted_tokens_per_pos_total", "position"), "position {{position}}")],
            "short", width=24)

    return {
        "title": "mla.cpp",
        "uid": "mla-cpp-serve",
        "description": "mla serve: throughput, latency, scheduling, caches, MLA paths (tools/grafana/make_dashboard.py)",
        "tags": ["mla", "llm", "inference"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "10s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0, "refresh": 1, "options": []},
            {"name": "model_name", "label": "Model", "type": "query", "datasource": DS,
             "query": {"query": "label_values(mla:num_requests_running, model_name)", "refId": "model_name"},
             "definition": "label_values(mla:num_requests_running, model_name)",
             "current": {}, "hide": 0, "refresh": 2, "options": [], "includeAll": False, "multi": False,
             "sort": 1},
        ]},
        "panels": g.panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT}")
