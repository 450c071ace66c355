"""``reliable-kafka ui``: a live, read-only page of a running topology, in the spirit of Storm UI.

A standard-library HTTP server with four routes: ``/`` (one HTML page with inline JavaScript and SVG;
no external assets, so it works offline and behind strict proxies), ``/api/status`` (the
``status --json`` report, rebuilt at most once a second however many pages poll it),
``/api/dead-letters`` (the newest dead letters, read at most every few seconds) and ``/metrics``
(the report's verdicts for Prometheus: :class:`~reliable_kafka.ops.metrics.TopologyCollector`). The page
polls the report every two seconds and draws the topology as a graph of components and topics,
per-component rates, latency, failures and capacity, lag per source partition, the newest dead
letters and their reasons, and small charts of the last minutes (kept in the page).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from reliable_kafka.ops.dead_letter_panel import recent_dead_letters
from reliable_kafka.ops.metrics import TopologyCollector
from reliable_kafka.ops.status import build_report

__all__ = ["StatusPage", "PAGE"]

log = logging.getLogger(__name__)

CACHE_S = 1.0
DEAD_LETTERS_CACHE_S = 5.0  # the dead-letter panel reads the DLQ's tail at most this often
DEAD_LETTERS_SHOWN = 200  # newest letters per DLQ partition that the panel reads and counts


class StatusPage:
    """Serves the page for ``topology``; ``start()`` in a thread, or ``serve_forever()``."""

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        topology: str,
        kafka_config: dict[str, Any] | None = None,
        host: str = "127.0.0.1",
        port: int = 8080,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topology = topology
        self.kafka_config = dict(kafka_config or {})
        self._report: tuple[float, bytes] | None = None
        self._letters: tuple[float, bytes] | None = None
        self._lock = threading.Lock()
        self._letters_lock = threading.Lock()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(TopologyCollector(lambda: json.loads(self.report_json())))
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
                elif path == "/api/dead-letters":
                    try:
                        self._send(200, "application/json", page.dead_letters_json())
                    except Exception as exc:
                        self._send(503, "application/json", json.dumps({"error": str(exc)}).encode())
                elif path == "/metrics":
                    try:
                        self._send(200, CONTENT_TYPE_LATEST, generate_latest(page.registry))
                    except Exception as exc:  # no report, no verdicts: the scrape fails and `up` says so
                        self._send(503, "text/plain", f"no status report: {exc}\n".encode())
                else:
                    self._send(404, "text/plain", b"not found")

            def _send(self, code: int, content_type: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
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

    def dead_letters_json(self) -> bytes:
        with self._letters_lock:
            if self._letters is None or time.monotonic() - self._letters[0] > DEAD_LETTERS_CACHE_S:
                letters = recent_dead_letters(
                    self.bootstrap_servers, self.topology, kafka_config=self.kafka_config, limit=DEAD_LETTERS_SHOWN
                )
                self._letters = (time.monotonic(), json.dumps(letters).encode())
            return self._letters[1]

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
.OK{background:#2e8b57}.WARN{background:#d48806}.STALL{background:#c0392b}.DOWN{background:#6b7487}.STOPPED{background:#4a6fa5}
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
<h2>Dead letters <span class="muted" id="dlq-summary"></span></h2>
<div class="charts" style="align-items:flex-start"><table id="dlq-reasons" style="min-width:0"><thead><tr><th class="l">reason (among the newest read)</th><th>letters</th></tr></thead><tbody></tbody></table>
<table id="dlq-letters" style="min-width:0"><thead><tr><th class="l">parked</th><th class="l">source record</th><th class="l">by</th><th>attempts</th>
<th class="l">reason</th></tr></thead><tbody></tbody></table></div>
<h2>Last minutes</h2><div class="charts" id="charts"></div>
<script>
"use strict";
const KEEP_S = 600, series = {}, intervals = {};  // component -> [{t, in, done, fail, gap}], its interval
let refreshes = 0, missed = false;  // missed: the last read of the report failed
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));
const num = (x, d = 1) => x == null ? "-" : (Math.abs(x) >= 1000 ? Math.round(x).toLocaleString("en") : (+x).toFixed(d));
const ms = (s) => s == null ? "-" : (s < 10 ? Math.round(s * 1000) + " ms" : Math.round(s) + " s");
const ago = (s) => s == null ? "-" : s < 120 ? Math.round(s) + "s" : s < 7200 ? Math.round(s / 60) + "m" : (s / 3600).toFixed(1) + "h";
function rateIn(r) { return r.read ?? r.received ?? r.inputs ?? r.entries_folded ?? 0; }
function rateDone(r) { return r.completed ?? r.acked ?? 0; }
// one failed rate: trees that failed or timed out (spouts), tuples failed (bolts: a handler error
// fails its tuple, so it is in "failed" already and never added again)
function rateFail(r) { let f = 0; for (const k of ["failed","timed_out","tracker_failed","tracker_timed_out"]) f += r[k] || 0; return f; }
const SPOUTS = new Set(["spout", "transactional-spout", "spark-spout"]);
// topology order: spouts, then bolts in the order of their inputs (a bolt after whatever writes
// its input topics), then ackers; ties by name
function ordered(components) {
  const rank = new Map(), writers = new Map();
  for (const c of components) for (const t of c.outputs || []) (writers.get(t) || writers.set(t, []).get(t)).push(c.name);
  const depth = (c, seen) => {
    if (rank.has(c.name)) return rank.get(c.name);
    if (SPOUTS.has(c.kind)) { rank.set(c.name, 0); return 0; }
    if (c.kind === "acker") return 1e6;
    seen.add(c.name);
    let d = 1;
    for (const t of c.inputs || []) for (const w of writers.get(t) || []) {
      const up = components.find((x) => x.name === w);
      if (up && !seen.has(w) && up.kind !== "acker") d = Math.max(d, depth(up, seen) + 1);
    }
    rank.set(c.name, d); return d;
  };
  return [...components].sort((a, b) => depth(a, new Set()) - depth(b, new Set()) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}
function verdict(v) { return `<span class="v ${esc(v)}">${esc(v)}</span>`; }

function drawGraph(report) {
  const live = ordered(report.components.filter((c) => c.state !== "stopped"));
  const comps = live.filter((c) => c.kind !== "acker"), ackers = live.filter((c) => c.kind === "acker");
  const nodes = new Map(), edges = [], dashed = [];
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
  let top = 20 + Math.max(0, ...columns.map((c) => c.length)) * H;
  // the ack path below the data flow: <topology>.acks -> each acker -> <topology>.outcomes
  if (ackers.length) {
    const acks = "t:" + report.topology + ".acks", outs = "t:" + report.topology + ".outcomes";
    node(acks, report.topology + ".acks", "topic"); node(outs, report.topology + ".outcomes", "topic");
    top += 16;
    pos.set(acks, {x: 20, y: top});
    ackers.forEach((c, i) => {
      node("c:" + c.name, c.name, "component", {c}); pos.set("c:" + c.name, {x: 20 + W, y: top + i * H});
      dashed.push([acks, "c:" + c.name], ["c:" + c.name, outs]);
    });
    pos.set(outs, {x: 20 + 2 * W, y: top});
    for (const c of comps) if (SPOUTS.has(c.kind)) dashed.push([outs, "c:" + c.name]);
    top += ackers.length * H;
  }
  const width = Math.max(900, 40 + Math.max(columns.length, ackers.length ? 3 : 0) * W), height = Math.max(90, top + 20);
  let svg = `<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" fill="#9aa3b5"/></marker></defs>`;
  if (ackers.length) svg += `<text x="20" y="${pos.get("t:" + report.topology + ".acks").y - 4}" font-size="10" fill="#6b7487">ack path</text>`;
  const line = (a, b, extra) => {
    const p = pos.get(a), q = pos.get(b);
    if (!p || !q) return "";
    const back = q.x <= p.x;  // an outcome going back to its spout: from the bottom edge
    return `<line x1="${back ? p.x + 75 : p.x + 150}" y1="${back ? p.y + 6 : p.y + 20}" x2="${back ? q.x + 75 : q.x}" y2="${back ? q.y + 40 : q.y + 20}" stroke="#9aa3b5" stroke-width="1.5" marker-end="url(#arrow)"${extra}/>`;
  };
  for (const [a, b] of edges) svg += line(a, b, "");
  for (const [a, b] of dashed) svg += line(a, b, ` stroke-dasharray="4 3" class="ack-edge"`);
  for (const [id, n] of nodes) {
    const p = pos.get(id);
    if (n.type === "topic") {
      svg += `<rect x="${p.x}" y="${p.y + 6}" width="150" height="28" rx="14" fill="#eef0f4" stroke="#b8bfcc"/>` +
             `<text x="${p.x + 75}" y="${p.y + 24}" text-anchor="middle" font-size="11">${esc(n.label.slice(-26))}</text>`;
    } else {
      const c = n.c, color = {OK: "#2e8b57", WARN: "#d48806", STALL: "#c0392b", DOWN: "#6b7487", STOPPED: "#4a6fa5"}[c.verdict] || "#6b7487";
      svg += `<g class="node" data-component="${esc(c.name)}" data-kind="${esc(c.kind)}"><rect x="${p.x}" y="${p.y}" width="150" height="40" rx="4" fill="#fff" stroke="${color}" stroke-width="2"/>` +
             `<text x="${p.x + 6}" y="${p.y + 15}" font-size="11" font-weight="600">${esc(c.name.slice(0, 22))}</text>` +
             `<text x="${p.x + 6}" y="${p.y + 31}" font-size="10" fill="#44506a">${esc(c.kind)} · ${num(rateIn(c.rates))}/s · ${esc(c.verdict)}</text></g>`;
    }
  }
  const g = $("graph"); g.setAttribute("width", width); g.setAttribute("height", height); g.innerHTML = svg;
}

function drawTables(report) {
  const now = report.generated_at;
  $("components").tBodies[0].innerHTML = ordered(report.components).map((c) => {
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

// a stretch longer than a component's DOWN rule (3 of its publishing intervals + 5 s) without a
// sample of it is drawn as a gap: it was silent or DOWN, or the page could not read the report
// (then the next point says so: gap)
function segments(points, interval) {
  const limit = 3 * (interval || 5) + 5, out = [];
  points.forEach((p, i) => {
    if (!i || p.t - points[i - 1].t > limit || p.gap) out.push([]);
    out[out.length - 1].push(p);
  });
  return out;
}
function spark(points, key, color, label, interval) {
  // x spans what the page has seen (up to KEEP_S), so a fresh page fills its charts too
  const w = 220, h = 46, t1 = points.length ? points[points.length - 1].t : 0;
  const t0 = points.length ? Math.max(points[0].t, t1 - KEEP_S) : 0, span = Math.max(1, t1 - t0);
  const max = Math.max(1e-9, ...points.map((p) => p[key]));
  const lines = segments(points, interval).map((seg) => {
    const xy = seg.map((p) => `${(w * (p.t - t0) / span).toFixed(1)},${(h - 2 - (h - 14) * p[key] / max).toFixed(1)}`);
    return seg.length === 1 ? `<circle cx="${xy[0].split(",")[0]}" cy="${xy[0].split(",")[1]}" r="1.5" fill="${color}"/>`
      : `<polyline fill="none" stroke="${color}" stroke-width="1.5" points="${xy.join(" ")}"/>`;
  });
  return `<svg width="${w}" height="${h}" data-segments="${lines.length}"><rect width="${w}" height="${h}" fill="#fafbfc"/>` +
         lines.join("") + `<text x="2" y="10" font-size="9" fill="${color}">${label}</text>` +
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
    const steps = (c.history || []).slice(1).map((h, i) => h.t - c.history[i].t).sort((a, b) => a - b);
    if (steps.length) intervals[c.name] = steps[Math.floor(steps.length / 2)];
    const silent = c.verdict === "DOWN" || c.state === "stopped";  // no rates to draw: a gap
    if (!silent && (!s.length || s[s.length - 1].t < c.last_seen)) s.push({t: c.last_seen, in: rateIn(c.rates), done: rateDone(c.rates), fail: rateFail(c.rates), gap: missed});
    while (s.length && s[0].t < c.last_seen - KEEP_S) s.shift();
  }
  $("charts").innerHTML = ordered(report.components).filter((c) => c.kind !== "acker").map((c) =>
    `<div class="chart" data-component="${esc(c.name)}"><div class="t">${esc(c.name)} <span class="muted">${esc(c.kind)}</span></div>` +
    spark(series[c.name], "in", "#2f6fd6", "in/s", intervals[c.name]) + " " +
    spark(series[c.name], "done", "#2e8b57", "done/s", intervals[c.name]) + " " +
    spark(series[c.name], "fail", "#c0392b", "failed/s", intervals[c.name]) + `</div>`).join("");
  missed = false;
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
  } catch (e) { $("error").textContent = "no data: " + e.message; missed = true; }
}
async function refreshDeadLetters() {
  try {
    const response = await fetch("api/dead-letters", {cache: "no-store"});
    const d = await response.json();
    if (!response.ok) throw new Error(d.error || response.statusText);
    $("dlq-summary").textContent = d.records == null ? `(${d.topic}: not created yet)` :
      `· ${d.records} in ${d.topic}; the newest ${d.read} read`;
    $("dlq-reasons").tBodies[0].innerHTML = Object.entries(d.by_reason).slice(0, 12).map(([reason, n]) =>
      `<tr data-reason="${esc(reason)}"><td class="l">${esc(reason)}</td><td class="count">${n}</td></tr>`).join("") ||
      `<tr><td class="l muted" colspan="2">none</td></tr>`;
    $("dlq-letters").tBodies[0].innerHTML = d.letters.map((l) =>
      `<tr data-offset="${l.partition}@${l.offset}"><td class="l">${l.at_ms > 0 ? new Date(l.at_ms).toLocaleTimeString() : "-"}</td>` +
      `<td class="l">${esc(l.source ?? "-")}</td><td class="l">${esc(l.component ?? "-")}</td><td>${l.attempts ?? "-"}</td>` +
      `<td class="l reason" title="${esc(l.reason)}">${esc(l.reason.length > 70 ? l.reason.slice(0, 69) + "…" : l.reason)}</td></tr>`).join("");
  } catch (e) { $("dlq-summary").textContent = "(no data: " + e.message + ")"; }
}
refresh(); setInterval(refresh, 2000);
refreshDeadLetters(); setInterval(refreshDeadLetters, 5000);
</script></body></html>
"""
