// The report's page (see report.h): one HTML file that needs nothing else to open. The run's data
// is a JSON document inside it; the script below draws every chart from it as inline SVG, and marks
// each with the number of points it drew (data-points), which a test reads back from the browser.
// The sample grids are PNGs inside the page as data: URIs.
#include <algorithm>
#include <string>

#include "io/file_roles.h"
#include "run/report.h"

namespace dit {

namespace {

constexpr const char* kStyle = R"CSS(
body { font: 14px/1.45 system-ui, sans-serif; color: #222; margin: 0 auto; max-width: 1200px; padding: 0 20px 40px; }
h1 { font-size: 22px; margin: 18px 0 4px; }
h2 { font-size: 17px; margin: 26px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 3px; }
.sub { color: #666; margin: 0 0 6px; word-break: break-all; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 8px 18px; }
.chart h3 { font-size: 13px; font-weight: 600; margin: 4px 0 0; }
svg text { font: 11px system-ui, sans-serif; fill: #444; }
.legend { font-size: 12px; color: #444; margin: 2px 0 6px 62px; }
.legend span { display: inline-block; margin-right: 12px; }
.legend i { display: inline-block; width: 12px; height: 3px; margin-right: 4px; vertical-align: middle; }
.note { color: #777; font-style: italic; }
table { border-collapse: collapse; font-size: 12px; margin: 6px 0; }
th, td { border: 1px solid #ddd; padding: 2px 7px; text-align: right; }
th { background: #f4f4f4; }
td:first-child, th:first-child { text-align: left; }
td { white-space: nowrap; }
#summary td { text-align: left; }
#time-body, #eval-body, #layout-body { overflow-x: auto; }
.grids { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }
.grids figure { margin: 0; }
.grids img { image-rendering: pixelated; max-width: 560px; border: 1px solid #ddd; }
figcaption { font-size: 12px; color: #555; }
pre { background: #f7f7f7; padding: 8px; font-size: 12px; overflow: auto; max-height: 420px; }
label { font-size: 13px; }
)CSS";

constexpr const char* kScript = R"JS(
"use strict";
const D = JSON.parse(document.getElementById("run-data").textContent);
const NS = "http://www.w3.org/2000/svg";
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf"];
const $ = id => document.getElementById(id);
const finite = v => typeof v === "number" && isFinite(v);

function svg(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}
function html(tag, text, parent, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  if (cls) e.className = cls;
  if (parent) parent.appendChild(e);
  return e;
}
function note(box, text) { html("p", text, box, "note"); }
function fmt(v) {
  if (!finite(v)) return "-";
  const a = Math.abs(v);
  return a !== 0 && (a >= 1e6 || a < 1e-3) ? v.toExponential(2) : String(+v.toPrecision(4));
}
function bytes(v) {
  if (!finite(v)) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; ++i; }
  return (i ? v.toFixed(1) : String(v)) + " " + units[i];
}
function seconds(v) { return !finite(v) ? "-" : v >= 1 ? v.toFixed(2) + " s" : (v * 1e3).toFixed(1) + " ms"; }
const percent = v => finite(v) ? (100 * v).toFixed(1) + "%" : "-";

function extent(values, withZero) {
  let lo = Infinity, hi = -Infinity;
  for (const v of values) if (finite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  if (lo === Infinity) return [0, 1];
  if (withZero) { lo = Math.min(lo, 0); hi = Math.max(hi, 0); }
  if (lo === hi) { const d = Math.abs(lo) * 0.1 || 1; return [lo - d, hi + d]; }
  return [lo, hi];
}
function ticks(lo, hi, n) {
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(m => m * mag).find(s => (hi - lo) / s <= n);
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toPrecision(12));
  return out;
}

// Axes for xr x yr in a new <svg data-chart=name data-source=source>; returns it with its scales.
function frame(box, spec, xr, yr) {
  const W = spec.width || 560, H = spec.height || 230, m = {l: 62, r: 14, t: 10, b: 34};
  const s = svg("svg", {viewBox: `0 0 ${W} ${H}`, width: W, height: H, "data-chart": spec.name,
                        "data-source": spec.source}, box);
  const X = x => m.l + (x - xr[0]) / (xr[1] - xr[0]) * (W - m.l - m.r);
  const Y = y => H - m.b - (y - yr[0]) / (yr[1] - yr[0]) * (H - m.t - m.b);
  const yfmt = spec.yfmt || fmt;
  // Bytes tick at round numbers of their unit (KiB, MiB, GiB), others at round decimals.
  const top = Math.max(Math.abs(yr[0]), Math.abs(yr[1]));
  const unit = yfmt === bytes && top >= 1024 ? Math.pow(1024, Math.floor(Math.log(top) / Math.log(1024))) : 1;
  for (const t of ticks(yr[0] / unit, yr[1] / unit, 5).map(t => t * unit)) {
    svg("line", {x1: m.l, x2: W - m.r, y1: Y(t), y2: Y(t), stroke: "#eee"}, s);
    svg("text", {x: m.l - 5, y: Y(t) + 4, "text-anchor": "end"}, s).textContent = yfmt(t);
  }
  for (const t of ticks(xr[0], xr[1], 8)) {
    svg("line", {x1: X(t), x2: X(t), y1: H - m.b, y2: H - m.b + 4, stroke: "#888"}, s);
    svg("text", {x: X(t), y: H - m.b + 16, "text-anchor": "middle"}, s).textContent = fmt(t);
  }
  svg("line", {x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b, stroke: "#888"}, s);
  svg("text", {x: (m.l + W - m.r) / 2, y: H - 3, "text-anchor": "middle"}, s).textContent = spec.xlabel || "step";
  return {s, X, Y};
}
function legend(box, items) {
  const l = html("div", null, box, "legend");
  for (const it of items) {
    const span = html("span", null, l);
    html("i", null, span).style.background = it.color;
    span.appendChild(document.createTextNode(it.label));
  }
}
function titled(box, title) {
  const c = html("div", null, box, "chart");
  html("h3", title, c);
  return c;
}

// Lines over xs: series [{label, ys, color, width, dash}]; a point that is not finite breaks its line.
function lineChart(box, spec) {
  const xs = spec.xs;
  const f = frame(box, spec, extent(xs), extent([].concat(...spec.series.map(s => s.ys)), spec.withZero));
  for (const s of spec.series) {
    let d = "", pen = false;
    xs.forEach((x, i) => {
      const y = s.ys[i];
      if (!finite(y)) { pen = false; return; }
      d += (pen ? "L" : "M") + f.X(x).toFixed(1) + " " + f.Y(y).toFixed(1);
      pen = true;
      if (xs.length < 3) svg("circle", {cx: f.X(x), cy: f.Y(y), r: 2.5, fill: s.color}, f.s);
    });
    svg("path", {d, fill: "none", stroke: s.color, "stroke-width": s.width || 1.5,
                 "stroke-dasharray": s.dash || "none", opacity: s.opacity || 1}, f.s);
  }
  f.s.setAttribute("data-points", xs.length);
  legend(box, spec.series.filter(s => s.label));
  return f.s;
}

// Stacked bars over xs: layers [{label, ys, color}], each bar the sum of its layers.
function stackedChart(box, spec) {
  const xs = spec.xs, n = xs.length;
  const totals = xs.map((_, i) => spec.layers.reduce((a, l) => a + (finite(l.ys[i]) ? l.ys[i] : 0), 0));
  let gap = Infinity;
  for (let i = 1; i < n; ++i) gap = Math.min(gap, xs[i] - xs[i - 1]);
  if (!(gap > 0 && isFinite(gap))) gap = 1;
  const xr = [Math.min(...xs) - gap / 2, Math.max(...xs) + gap / 2];
  const f = frame(box, spec, xr, extent(totals, true));
  const w = Math.max(1, (f.X(xr[0] + gap) - f.X(xr[0])) * 0.8);
  xs.forEach((x, i) => {
    let below = 0;
    for (const l of spec.layers) {
      const v = finite(l.ys[i]) ? l.ys[i] : 0;
      if (v <= 0) continue;
      const r = svg("rect", {x: f.X(x) - w / 2, y: f.Y(below + v), width: w, height: f.Y(below) - f.Y(below + v),
                             fill: l.color}, f.s);
      svg("title", {}, r).textContent = `step ${x}: ${l.label} ${seconds(v)}`;
      below += v;
    }
  });
  f.s.setAttribute("data-points", n);
  legend(box, spec.layers);
}

function table(box, columns, rows, attrs) {
  const t = html("table", null, box);
  for (const k in attrs || {}) t.setAttribute(k, attrs[k]);
  const head = html("tr", null, t);
  for (const c of columns) html("th", c.label, head);
  for (const r of rows) {
    const tr = html("tr", null, t);
    for (const c of columns) html("td", (c.show || fmt)(r[c.key]), tr);
  }
  return t;
}

// TensorBoard's smoothing: an exponential moving average, debiased for its first points.
function smoothed(ys, weight) {
  let last = 0, n = 0;
  return ys.map(y => {
    if (!finite(y)) return y;
    last = last * weight + (1 - weight) * y;
    ++n;
    return last / (1 - Math.pow(weight, n));
  });
}

const M = D.metrics, steps = M.map(r => r.step);
const col = key => M.map(r => r[key]);
const LOGGED = new Set(["step", "loss", "grad_norm", "lr", "images_per_s", "tflops", "mfu", "peak_mem_bytes",
                        "elapsed_s", "loss_scale", "skipped_steps"]);

function summary() {
  const box = $("summary"), last = M[M.length - 1];
  const acc = D.accounting || [];
  const dim = k => acc.reduce((a, r) => Math.max(a, (r[k] || 0) + 1), 0);
  const facts = [["run folder", D.run]];
  if (acc.length) facts.push(["layout", `${acc.length} ranks: tp ${dim("tp")} x pp ${dim("pp")} x dp ${dim("dp")}`]);
  if (last) {
    facts.push(["logged steps", `${M.length}, the last step ${last.step}`], ["last loss", fmt(last.loss)]);
    facts.push(["images/s (last log)", fmt(last.images_per_s)], ["MFU (last log)", percent(last.mfu)]);
    facts.push(["elapsed", seconds(last.elapsed_s)]);
  }
  table(box, [{key: 0, label: "", show: String}, {key: 1, label: "", show: String}], facts);
}

function lossCharts() {
  const box = $("loss-body");
  if (!M.length) {
    note(box, "No logged step in metrics.jsonl yet (the run logs every train.log_every steps).");
    return;
  }
  const slider = $("smoothing"), charts = html("div", null, box, "charts");
  const lossBox = titled(charts, "loss"), termsBox = titled(charts, "loss terms (smoothed)");
  const terms = Object.keys(M[0]).filter(k => !LOGGED.has(k));
  const draw = () => {
    const w = +slider.value;
    $("smoothing-value").textContent = w.toFixed(3);
    for (const b of [lossBox, termsBox]) while (b.childNodes.length > 1) b.removeChild(b.lastChild);
    lineChart(lossBox, {name: "loss", source: "metrics.jsonl", xs: steps, series: [
      {label: "raw", ys: col("loss"), color: COLORS[0], opacity: 0.3, width: 1},
      {label: `smoothed (${w.toFixed(3)})`, ys: smoothed(col("loss"), w), color: COLORS[0], width: 2}]});
    const series = terms.map((k, i) => ({label: k, ys: smoothed(col(k), w), color: COLORS[(i + 1) % 10]}));
    lineChart(termsBox, {name: "loss-terms", source: "metrics.jsonl", xs: steps, series});
  };
  slider.addEventListener("input", draw);
  draw();
  const more = html("div", null, box, "charts");
  lineChart(titled(more, "gradient norm (before clipping)"), {name: "grad-norm", source: "metrics.jsonl", xs: steps,
            series: [{label: "", ys: col("grad_norm"), color: COLORS[4]}]});
  lineChart(titled(more, "learning rate"), {name: "lr", source: "metrics.jsonl", xs: steps,
            series: [{label: "", ys: col("lr"), color: COLORS[5]}], withZero: true});
}

function throughputCharts() {
  const box = $("throughput-body");
  if (!M.length) { note(box, "No logged step yet."); return; }
  const charts = html("div", null, box, "charts");
  lineChart(titled(charts, "images/s (over the steps since the previous log)"), {name: "throughput",
            source: "metrics.jsonl", xs: steps, series: [{label: "", ys: col("images_per_s"), color: COLORS[2]}],
            withZero: true});
  lineChart(titled(charts, "MFU (model FLOP/s over train.peak_tflops)"), {name: "mfu", source: "metrics.jsonl",
            xs: steps, series: [{label: "", ys: col("mfu"), color: COLORS[3]}], withZero: true, yfmt: percent});
}

const PARTS = [["compute_s", "compute"], ["tp_s", "tensor-parallel comm. (exposed)"],
               ["pp_s", "pipeline comm. (exposed)"], ["bubble_s", "pipeline bubble"],
               ["dp_s", "data-parallel comm. (exposed)"], ["data_s", "data wait"], ["optimizer_s", "optimizer"],
               ["checkpoint_s", "checkpoint"]];
const rankIds = () => [...new Set([].concat(...D.ranks.map(r => r.ranks.map(x => x.rank))))].sort((a, b) => a - b);
const ofRank = (row, rank) => row.ranks.find(x => x.rank === rank) || {};

function timeSplit() {
  const box = $("time-body");
  if (!D.ranks) {
    note(box, "Not recorded: this run folder has no ranks.jsonl (each rank's step split and memory at every " +
              "logged step, written by a run that records them).");
    return;
  }
  const rows = D.ranks, ids = rankIds();
  const has = k => rows.some(r => r.ranks.some(x => finite(x[k])));
  const parts = PARTS.filter(([k]) => has(k));
  const pick = (row, k, view) => {
    if (view >= 0) return ofRank(row, view)[k];
    const v = row.ranks.map(x => x[k]).filter(finite);
    return v.length ? v.reduce((a, b) => a + b, 0) / v.length : NaN;
  };
  const label = html("label", "split of ", box);
  const select = html("select", null, label);
  html("option", "the mean over the ranks", select).value = -1;
  for (const r of ids) html("option", `rank ${r}`, select).value = r;
  const chart = html("div", null, box, "chart");
  const draw = () => {
    chart.textContent = "";
    const view = +select.value;
    const layers = parts.map(([k, l], i) => ({label: l, color: COLORS[i], ys: rows.map(r => pick(r, k, view))}));
    if (has("step_s"))
      layers.push({label: "other (step time not split)", color: "#ccc", ys: rows.map((r, i) =>
        Math.max(0, pick(r, "step_s", view) - layers.reduce((a, l) => a + (finite(l.ys[i]) ? l.ys[i] : 0), 0)))});
    stackedChart(chart, {name: "time-split", source: "ranks.jsonl", xs: rows.map(r => r.step), layers,
                         width: 1100, height: 260, yfmt: seconds});
  };
  select.addEventListener("change", draw);
  draw();
  const last = rows[rows.length - 1];
  html("h3", `each rank at the last logged step (${last.step})`, box);
  const cols = [{key: "rank", label: "rank"}, {key: "host", label: "host", show: String},
                {key: "stage", label: "stage"}, {key: "step_s", label: "step", show: seconds}]
    .concat(parts.map(([k, l]) => ({key: k, label: l.replace(" (exposed)", ""), show: seconds})))
    .concat([["rss_bytes", "host RSS"], ["device_bytes", "device"], ["device_peak_bytes", "device peak"],
             ["planned_bytes", "planned"]].filter(([k]) => has(k)).map(([k, l]) => ({key: k, label: l, show: bytes})));
  table(box, cols, ids.map(r => ofRank(last, r)), {"data-chart": "ranks-last", "data-points": ids.length,
                                                   "data-source": "ranks.jsonl"});
}

function memory() {
  const box = $("memory-body");
  const rows = D.ranks || [];
  const has = k => rows.some(r => r.ranks.some(x => finite(x[k])));
  if (rows.length && (has("device_bytes") || has("rss_bytes"))) {
    const key = has("device_bytes") ? "device_bytes" : "rss_bytes";
    const series = [];
    rankIds().forEach((r, i) => {
      const color = COLORS[i % 10];
      series.push({label: `rank ${r}`, color, ys: rows.map(row => ofRank(row, r)[key])});
      if (has("planned_bytes"))
        series.push({label: "", color, dash: "5 4", width: 1, ys: rows.map(row => ofRank(row, r).planned_bytes)});
    });
    note(box, `${key === "device_bytes" ? "Device memory in use" : "Host memory (RSS)"} of each rank at each ` +
              `logged step (solid) against the bytes planned for it (dashed).`);
    lineChart(box, {name: "memory", source: "ranks.jsonl", xs: rows.map(r => r.step), series, width: 1100,
                    height: 260, yfmt: bytes, withZero: true});
    return;
  }
  if (!M.length) { note(box, "Not recorded: no ranks.jsonl and no logged step."); return; }
  const planned = Math.max(...(D.accounting || []).map(r => r.total_bytes).filter(finite));
  note(box, "No ranks.jsonl in this run folder: the largest peak host RSS over the ranks (metrics.jsonl)" +
            (isFinite(planned) ? ", against the largest rank's planned bytes (accounting.json, dashed)." : "."));
  const series = [{label: "peak RSS, largest rank", ys: col("peak_mem_bytes"), color: COLORS[0]}];
  if (isFinite(planned)) series.push({label: "planned", ys: steps.map(() => planned), color: COLORS[0], dash: "5 4"});
  lineChart(box, {name: "memory-peak", source: "metrics.jsonl", xs: steps, series, width: 1100, height: 240,
                  yfmt: bytes, withZero: true});
}

function flatten(o, prefix, out) {
  for (const k in o) {
    const v = o[k];
    if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, prefix + k + ".", out);
    else out[prefix + k] = v;
  }
  return out;
}

function evaluation() {
  const box = $("eval-body");
  const rows = D.evals.map(r => flatten(r.eval, "", {step: r.step}));
  if (D.eval_file) rows.push(flatten(D.eval_file, "", {step: "eval.json"}));
  if (!rows.length) {
    note(box, "No evaluation: set train.eval_every (with eval.classifier and eval.reference) while training, " +
              "or run dit_mp evaluate --run on the run folder afterwards (eval.json).");
    return;
  }
  const keys = [];
  for (const r of rows) for (const k in r) if (!keys.includes(k)) keys.push(k);
  const numeric = keys.filter(k => k === "step" || rows.some(r => finite(r[k])));
  table(box, numeric.map(k => ({key: k, label: k, show: k === "step" ? String : fmt})), rows,
        {"data-chart": "eval", "data-points": rows.length, "data-source": "metrics.jsonl+eval.json"});
  for (const k of keys.filter(k => !numeric.includes(k)))
    note(box, `${k}: ${[...new Set(rows.map(r => r[k]).filter(v => v !== undefined))].join(", ")}`);
}

function layout() {
  const box = $("layout-body");
  const acc = D.accounting;
  if (acc) {
    note(box, "The plan and the last step of each rank (accounting.json, written when the run ends):");
    const cols = [["rank", "rank"], ["tp", "tp"], ["pp", "pp"], ["dp", "dp"]].map(([k, l]) => ({key: k, label: l}))
      .concat([["param_bytes", "params"], ["grad_bytes", "grads"], ["optimizer_state_bytes", "optimizer state"],
               ["activation_bytes", "activations"], ["total_bytes", "total planned"]]
              .map(([k, l]) => ({key: k, label: l, show: bytes})))
      .concat([{key: "step_s", label: "last step", show: seconds},
               {key: "measured_bubble", label: "bubble", show: percent},
               {key: "theoretical_bubble", label: "bubble (schedule)", show: percent}])
      .filter(c => acc.some(r => r[c.key] !== undefined));
    table(box, cols, acc, {"data-chart": "layout", "data-points": acc.length, "data-source": "accounting.json"});
  } else {
    note(box, "No accounting.json (a run writes it when it ends).");
  }
  const details = html("details", null, box);
  html("summary", "config.toml (the run's resolved configuration)", details);
  html("pre", D.config, details);
}

function timeline() {
  const box = $("timeline-body");
  const T = D.trace;
  if (!T) {
    note(box, "Not recorded: train with --profile A:B (e.g. --profile 5:8) to record steps A to B of every " +
              "rank into trace.json (it also opens in Perfetto and chrome://tracing).");
    return;
  }
  const pids = [...new Set(T.spans.map(s => s[0]))].sort((a, b) => a - b);
  const t0 = Math.min(...T.spans.map(s => s[2])), t1 = Math.max(...T.spans.map(s => s[2] + s[3]));
  const cats = [...new Set(T.spans.map(s => s[5]))];
  const W = 1100, rowH = 22, top = 6, left = 230, H = top + pids.length * rowH + 34;
  const s = svg("svg", {viewBox: `0 0 ${W} ${H}`, width: W, height: H, "data-chart": "timeline",
                        "data-source": "trace.json"}, box);
  const X = t => left + (t - t0) / ((t1 - t0) || 1) * (W - left - 10);
  const row = pid => top + pids.indexOf(pid) * rowH;
  pids.forEach(p => {
    svg("text", {x: left - 6, y: row(p) + rowH / 2 + 4, "text-anchor": "end"}, s).textContent =
      T.names[String(p)] || `rank ${p}`;
    svg("line", {x1: left, x2: W - 10, y1: row(p) + rowH, y2: row(p) + rowH, stroke: "#f0f0f0"}, s);
  });
  // The longest first, so the spans nested in a step (its actions, their waits) are drawn over it.
  for (const [pid, , ts, dur, name, cat] of [...T.spans].sort((a, b) => b[3] - a[3])) {
    const r = svg("rect", {x: X(ts), y: row(pid) + 3, width: Math.max(0.6, X(ts + dur) - X(ts)), height: rowH - 6,
                           fill: COLORS[cats.indexOf(cat) % 10]}, s);
    svg("title", {}, r).textContent = `${name} (${cat}): ${(dur / 1e3).toFixed(3)} ms`;
  }
  for (const [p0, ts0, p1, ts1] of T.flows)
    if (pids.includes(p0) && pids.includes(p1))
      svg("line", {x1: X(ts0), y1: row(p0) + rowH / 2, x2: X(ts1), y2: row(p1) + rowH / 2, stroke: "#333",
                   "stroke-width": 0.7, opacity: 0.6}, s);
  const axis = top + pids.length * rowH;
  for (const t of ticks(0, (t1 - t0) / 1e3, 10)) {
    svg("line", {x1: X(t0 + t * 1e3), x2: X(t0 + t * 1e3), y1: axis, y2: axis + 4, stroke: "#888"}, s);
    svg("text", {x: X(t0 + t * 1e3), y: axis + 16, "text-anchor": "middle"}, s).textContent = fmt(t);
  }
  svg("text", {x: (left + W) / 2, y: H - 3, "text-anchor": "middle"}, s).textContent = "ms since the first event";
  s.setAttribute("data-points", T.spans.length);
  legend(box, cats.map((c, i) => ({label: c || "(no category)", color: COLORS[i % 10]})));
  note(box, `${T.spans.length} events on ${pids.length} ranks, ${T.flows.length} sends joined to their receives.`);
}

summary();
lossCharts();
throughputCharts();
timeSplit();
memory();
evaluation();
layout();
timeline();
)JS";

std::string escaped_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string base64(const std::string& bytes) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    unsigned v = 0;
    for (std::size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k) out += k <= n ? digits[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// The data inside <script type="application/json">: a '<' (only ever inside a string) as \u003c, so
// no "</script>" in a config value or event name can end the element early.
std::string script_safe(const std::string& json) {
  std::string out;
  for (char c : json) out += c == '<' ? std::string("\\u003c") : std::string(1, c);
  return out;
}

std::string grids_html(const std::vector<ReportGrid>& grids) {
  std::string out = "<div class=\"grids\" data-chart=\"samples\" data-source=\"samples_step_*.png+samples.png\" "
                    "data-points=\"" + std::to_string(grids.size()) + "\">\n";
  for (const ReportGrid& g : grids) {
    const std::string caption = g.step < 0 ? "the end (samples.png)" : "step " + std::to_string(g.step);
    out += "<figure><img alt=\"" + escaped_html(g.name) + "\" src=\"data:image/png;base64," + base64(g.png) +
           "\"><figcaption>" + escaped_html(caption) + "</figcaption></figure>\n";
  }
  if (grids.empty())
    out += "<p class=\"note\">No sample grid: a run writes one every train.sample_every steps and samples.png at "
           "its end (a latent run only with data.vae).</p>\n";
  return out + "</div>\n";
}

std::string section(const char* id, const char* title, const std::string& body) {
  return std::string("<section id=\"") + id + "\"><h2>" + title + "</h2>\n" + body + "</section>\n";
}

}  // namespace

std::string report_page(const ReportInputs& in) {
  const std::string name = escaped_html(in.run_dir);
  std::string page = std::string(kReportHead) + " -->\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  page += "<title>dit_mp report: " + name + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  page += "<h1>dit_mp report</h1>\n<p class=\"sub\">" + name + "</p>\n<div id=\"summary\"></div>\n";
  page += section("loss", "Loss",
                  "<label>smoothing (an exponential moving average, as TensorBoard's slider) "
                  "<input id=\"smoothing\" type=\"range\" min=\"0\" max=\"0.999\" step=\"0.001\" value=\"0.9\"> "
                  "<span id=\"smoothing-value\"></span></label>\n<div id=\"loss-body\"></div>\n");
  page += section("throughput", "Throughput and MFU", "<div id=\"throughput-body\"></div>\n");
  page += section("time", "Where a step's time goes", "<div id=\"time-body\"></div>\n");
  page += section("memory", "Memory per rank", "<div id=\"memory-body\"></div>\n");
  page += section("samples", "Samples across training", grids_html(in.grids));
  page += section("eval", "Evaluation", "<div id=\"eval-body\"></div>\n");
  page += section("layout", "Layout", "<div id=\"layout-body\"></div>\n");
  page += section("timeline", "Timeline", "<div id=\"timeline-body\"></div>\n");
  page += "<script id=\"run-data\" type=\"application/json\">" + script_safe(in.data) + "</script>\n";
  page += std::string("<script>") + kScript + "</script>\n</body>\n</html>\n";
  return page;
}

}  // namespace dit
