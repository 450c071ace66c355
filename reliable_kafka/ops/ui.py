"""``reliable-kafka ui``: a live, read-only page of a running topology, in the spirit of Storm UI.

A standard-library HTTP server with two routes: ``/`` (one HTML page with inline JavaScript and SVG;
no external assets, so it works offline and behind strict proxies) and ``/api/status`` (the
``status --json`` report, rebuilt at most once a second however many pages poll it). The page
polls the report every two seconds and draws the topology as a graph of components and topics,
per-component rates, latency, failures and capacity, lag per source partition, and small charts
of the last minutes (kept in the page).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from reliable_kafka.ops.status import build_report

__all__ = ["StatusPage", "PAGE"]

log = logging.getLogger(__name__)

CACHE_S = 1.0


class StatusPage:
    """Serves the page for ``topology``; ``start()`` in a thread, or ``serve_forever()``."""

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        topology: str,
        kafka_config: dict | None = None,
        host: str = "127.0.0.1",
        port: int = 8080,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topology = topology
        self.kafka_config = dict(kafka_config or {})
        self._report: tuple[float, bytes] | None = None
        self._lock = threading.Lock()
        page = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                path = self.path.split("?", 1)[0]
                if path == "/":
                    self._send(200, "text/html; charset=utf-8", PAGE.encode())
                elif path == "/api/status":
                    try:
                        self._send(200, "application/json", page.report_json())
                    except Exception as exc:  # the broker is away: the page shows the error and retries
                        self._send(503, "application/json", json.dumps({"error": str(exc)}).encode())
                else:
                    self._send(404, "text/plain", b"not found")

            def _send(self, code: int, content_type: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format, *args) -> None:
                log.debug("ui: " + format, *args)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{port}/"

    def report_json(self) -> bytes:
        with self._lock:  # one broker read at a time; others get the fresh copy
            if self._report is None or time.monotonic() - self._report[0] > CACHE_S:
                report = build_report(self.bootstrap_servers, self.topology, kafka_config=self.kafka_config)
                self._report = (time.monotonic(), json.dumps(report).encode())
            return self._report[1]

    def start(self) -> StatusPage:
        self._thread = threading.Thread(target=self.server.serve_forever, name="rk-ui", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        try:
            self.server.serve_forever()
        finally:
            self.server.server_close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>reliable-kafka</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:13px/1.4 system-ui,-apple-system,"DejaVu Sans",sans-serif;margin:16px 20px;color:#1d2330;background:#f6f7f9}
h1{font-size:18px;margin:0 0 4px} h2{font-size:14px;margin:18px 0 6px;color:#44506a}
.muted{color:#6b7487} .v{display:inline-block;padding:1px 6px;border-radius:3px;font-weight:600;font-size:11px;color:#fff}
.OK{background:#2e8b57}.WARN{background:#d48806}.STALL{background:#c0392b}.DOWN{background:#6b7487}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0001;min-width:70%}
th,td{padding:4px 8px;border-bottom:1px solid #e7e9ee;text-align:right;white-space:nowrap}
th{background:#eef0f4;font-weight:600;font-size:12px} td.l,th.l{text-align:left}
#graph{background:#fff;box-shadow:0 1px 2px #0001;display:block}
.charts{display:flex;flex-wrap:wrap;gap:10px} .chart{background:#fff;box-shadow:0 1px 2px #0001;padding:6px 8px}
.chart .t{font-size:12px;font-weight:600} #error{color:#c0392b;font-weight:600}
</style></head><body>
<h1>reliable-kafka &middot; <span id="topology">?</span> <span id="verdict" class="v DOWN">?</span></h1>
<div class="muted">updated <span id="updated">never</span> &middot; refresh <span id="refreshes">0</span>
 &middot; <span id="totals"></span> <span id="error"></span></div>
<h2>Topology</h2><svg id="graph" width="900" height="120"></svg>
<h2>Components</h2>
<table id="components"><thead><tr><th class="l">component</th><th class="l">kind</th><th class="l">verdict</th>
<th class="l">host:pid</th><th>up</th><th>in/s</th><th>done/s</th><th>failed/s</th><th>p50</th><th>p99</th>
<th>capacity</th><th>pending</th><th class="l">why</th></tr></thead><tbody></tbody></table>
<h2>Source partitions</h2>
<table id="partitions"><thead><tr><th class="l">partition</th><th class="l">verdict</th><th>committed</th>
<th>end</th><th>lag</th><th>done above commit</th><th>pending</th><th>retrying</th><th class="l">oldest pending</th>
</tr></thead><tbody></tbody></table>
<h2>Last minutes</h2><div class="charts" id="charts"></div>
<script>
"use strict";
const KEEP_S = 600, series = {};  // component -> [{t, in, done, fail, lag}]
let refreshes = 0;
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));
const num = (x, d = 1) => x == null ? "-" : (Math.abs(x) >= 1000 ? Math.round(x).toLocaleString("en") : (+x).toFixed(d));
const ms = (s) => s == null ? "-" : (s < 10 ? Math.round(s * 1000) + " ms" : Math.round(s) + " s");
const ago = (s) => s == null ? "-" : s < 120 ? Math.round(s) + "s" : s < 7200 ? Math.round(s / 60) + "m" : (s / 3600).toFixed(1) + "h";
function rateIn(r) { return r.read ?? r.received ?? r.inputs ?? r.entries_folded ?? 0; }
function rateDone(r) { return r.completed ?? r.acked ?? 0; }
function rateFail(r) { let f = 0; for (const k of ["failed","timed_out","tracker_failed","tracker_timed_out","handler_errors"]) f += r[k] || 0; return f; }
function verdict(v) { return `<span class="v ${esc(v)}">${esc(v)}</span>`; }

function drawGraph(report) {
  const comps = report.components.filter((c) => c.kind !== "acker" && c.state !== "stopped");
  const nodes = new Map(), edges = [];
  const node = (id, label, type, extra) => { if (!nodes.has(id)) nodes.set(id, {id, label, type, ...extra}); return nodes.get(id); };
  for (const c of comps) {
    node("c:" + c.name, c.name, "component", {c});
    for (const t of c.inputs) { node("t:" + t, t, "topic"); edges.push(["t:" + t, "c:" + c.name]); }
    for (const t of c.outputs) { node("t:" + t, t, "topic"); edges.push(["c:" + c.name, "t:" + t]); }
  }
  const layer = new Map([...nodes.keys()].map((k) => [k, 0]));
  for (let i = 0; i < nodes.size; i++) for (const [a, b] of edges) if (layer.get(b) < layer.get(a) + 1) layer.set(b, layer.get(a) + 1);
  const columns = [];
  for (const [id, l] of layer) (columns[l] = columns[l] || []).push(id);
  const W = 190, H = 62, pos = new Map();
  columns.forEach((ids, l) => ids.forEach((id, i) => pos.set(id, {x: 20 + l * W, y: 20 + i * H})));
  const width = Math.max(900, 40 + columns.length * W), height = Math.max(90, 40 + Math.max(1, ...columns.map((c) => c.length)) * H);
  let svg = `<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" fill="#9aa3b5"/></marker></defs>`;
  for (const [a, b] of edges) {
    const p = pos.get(a), q = pos.get(b);
    svg += `<line x1="${p.x + 150}" y1="${p.y + 20}" x2="${q.x}" y2="${q.y + 20}" stroke="#9aa3b5" stroke-width="1.5" marker-end="url(#arrow)"/>`;
  }
  for (const [id, n] of nodes) {
    const p = pos.get(id);
    if (n.type === "topic") {
      svg += `<rect x="${p.x}" y="${p.y + 6}" width="150" height="28" rx="14" fill="#eef0f4" stroke="#b8bfcc"/>` +
             `<text x="${p.x + 75}" y="${p.y + 24}" text-anchor="middle" font-size="11">${esc(n.label.slice(-26))}</text>`;
    } else {
      const c = n.c, color = {OK: "#2e8b57", WARN: "#d48806", STALL: "#c0392b", DOWN: "#6b7487"}[c.verdict] || "#6b7487";
      svg += `<g class="node" data-component="${esc(c.name)}"><rect x="${p.x}" y="${p.y}" width="150" height="40" rx="4" fill="#fff" stroke="${color}" stroke-width="2"/>` +
             `<text x="${p.x + 6}" y="${p.y + 15}" font-size="11" font-weight="600">${esc(c.name.slice(0, 22))}</text>` +
             `<text x="${p.x + 6}" y="${p.y + 31}" font-size="10" fill="#44506a">${esc(c.kind)} · ${num(rateIn(c.rates))}/s · ${esc(c.verdict)}</text></g>`;
    }
  }
  const g = $("graph"); g.setAttribute("width", width); g.setAttribute("height", height); g.innerHTML = svg;
}

function drawTables(report) {
  const now = report.generated_at;
  $("components").tBodies[0].innerHTML = report.components.map((c) => {
    const l = c.latency || {}, r = c.rates || {};
    const pending = c.pending_roots ?? c.backlog;
    return `<tr data-component="${esc(c.name)}" data-kind="${esc(c.kind)}"><td class="l">${esc(c.name)}</td><td class="l">${esc(c.kind)}</td>` +
      `<td class="l">${verdict(c.verdict)}</td><td class="l">${esc(c.host)}:${esc(c.pid)}</td><td>${ago(now - c.started_at)}</td>` +
      `<td class="rate-in">${num(rateIn(r))}</td><td class="rate-done">${num(rateDone(r))}</td><td class="rate-fail">${num(rateFail(r))}</td>` +
      `<td>${ms(l.p50_s)}</td><td>${ms(l.p99_s)}</td><td>${c.capacity == null ? "-" : c.capacity.toFixed(2)}</td>` +
      `<td>${num(pending, 0)}</td><td class="l muted">${esc(c.reason)}</td></tr>`;
  }).join("");
  $("partitions").tBodies[0].innerHTML = report.partitions.map((p) => {
    const o = p.oldest_pending;
    return `<tr data-partition="${esc(p.topic)}[${p.partition}]"><td class="l">${esc(p.topic)}[${p.partition}]</td><td class="l">${verdict(p.verdict)}</td>` +
      `<td class="committed">${num(p.committed, 0)}</td><td>${num(p.end, 0)}</td><td class="lag">${num(p.lag, 0)}</td>` +
      `<td>${num(p.done_above_commit, 0)}</td><td>${num(p.pending, 0)}</td><td>${num(p.retrying, 0)}</td>` +
      `<td class="l">${o ? `@${o.offset} (${ago(o.age_s)})` : "-"}</td></tr>`;
  }).join("");
}

function spark(points, key, color, label) {
  // x spans what the page has seen (up to KEEP_S), so a fresh page fills its charts too
  const w = 220, h = 46, t1 = points.length ? points[points.length - 1].t : 0;
  const t0 = points.length ? Math.max(points[0].t, t1 - KEEP_S) : 0, span = Math.max(1, t1 - t0);
  const max = Math.max(1e-9, ...points.map((p) => p[key]));
  const xy = points.map((p) => `${(w * (p.t - t0) / span).toFixed(1)},${(h - 2 - (h - 14) * p[key] / max).toFixed(1)}`).join(" ");
  return `<svg width="${w}" height="${h}"><rect width="${w}" height="${h}" fill="#fafbfc"/>` +
         `<polyline fill="none" stroke="${color}" stroke-width="1.5" points="${xy}"/>` +
         `<text x="2" y="10" font-size="9" fill="${color}">${label}</text>` +
         `<text x="${w - 2}" y="10" text-anchor="end" font-size="9" fill="#6b7487">max ${num(max)} · ${ago(span)}</text></svg>`;
}

function record(report) {
  for (const c of report.components) {
    const s = series[c.name] = series[c.name] || [];
    if (!s.length && c.history && c.history.length > 1) {  // seed with the component's own last minute
      for (let i = 1; i < c.history.length; i++) {
        const a = c.history[i - 1], b = c.history[i], dt = Math.max(1e-3, b.t - a.t), d = {};
        for (const k in b) if (k !== "t") d[k] = (b[k] - (a[k] || 0)) / dt;
        s.push({t: b.t, in: rateIn(d), done: rateDone(d), fail: rateFail(d)});
      }
    }
    if (!s.length || s[s.length - 1].t < c.last_seen) s.push({t: c.last_seen, in: rateIn(c.rates), done: rateDone(c.rates), fail: rateFail(c.rates)});
    while (s.length && s[0].t < c.last_seen - KEEP_S) s.shift();
  }
  $("charts").innerHTML = report.components.filter((c) => c.kind !== "acker").map((c) =>
    `<div class="chart" data-component="${esc(c.name)}"><div class="t">${esc(c.name)} <span class="muted">${esc(c.kind)}</span></div>` +
    spark(series[c.name], "in", "#2f6fd6", "in/s") + " " + spark(series[c.name], "done", "#2e8b57", "done/s") + " " +
    spark(series[c.name], "fail", "#c0392b", "failed/s") + `</div>`).join("");
}

async function refresh() {
  try {
    const response = await fetch("api/status", {cache: "no-store"});
    const report = await response.json();
    if (!response.ok) throw new Error(report.error || response.statusText);
    $("topology").textContent = report.topology;
    $("verdict").textContent = report.verdict; $("verdict").className = "v " + report.verdict;
    $("totals").textContent = `ackers: ${report.ackers.workers} · pending roots ${report.ackers.pending_roots}` +
      ` · tables ${(report.ackers.table_bytes / 1e6).toFixed(2)} MB · dead letters ${report.dead_letters.records ?? "-"}` +
      ` · quarantined ${report.quarantine.records ?? "-"}`;
    drawGraph(report); drawTables(report); record(report);
    $("updated").textContent = new Date(report.generated_at * 1000).toLocaleTimeString();
    $("refreshes").textContent = ++refreshes; $("error").textContent = "";
  } catch (e) { $("error").textContent = "no data: " + e.message; }
}
refresh(); setInterval(refresh, 2000);
</script></body></html>
"""
