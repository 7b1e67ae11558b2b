// gradflow's HTML pages: what the run report (run.js) and the lab pages (lab.js) share. Plain
// JavaScript with no library: DOM helpers, number formatting, colour scales, the tooltip, a line
// chart that zooms, and a heat map drawn on a canvas. Every page carries its data as JSON in
// <script id="report-data">; this file only defines functions, the page's own script draws.
"use strict";

// ---------------------------------------------------------------- DOM

const SVG_NS = "http://www.w3.org/2000/svg";

// An HTML element: el("td", {class: "num"}, "1.5") or el("div", {}, [child, "text", ...]).
function el(tag, attrs, children) {
  const e = document.createElement(tag);
  setAttrs(e, attrs);
  append(e, children);
  return e;
}

// An SVG element, the same way.
function svgEl(tag, attrs, children) {
  const e = document.createElementNS(SVG_NS, tag);
  setAttrs(e, attrs);
  append(e, children);
  return e;
}

function setAttrs(e, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);  // onclick: a listener
    else e.setAttribute(k, v);
  }
}

function append(e, children) {
  if (children === undefined || children === null) return;
  for (const c of Array.isArray(children) ? children : [children]) {
    if (c === null || c === undefined) continue;
    e.append(typeof c === "string" || typeof c === "number" ? String(c) : c);
  }
}

// A <select> of options [{value, label}], calling onChange(value) when the choice changes.
function selectBox(id, options, value, onChange) {
  const s = el("select", {id: id});
  for (const o of options) s.append(el("option", {value: String(o.value)}, o.label));
  s.value = String(value);
  s.addEventListener("change", () => onChange(s.value));
  return s;
}

// A relative link from its path segments (["toy", "toy.html"]), each encoded with
// encodeURIComponent: a folder's name cannot become a scheme ("javascript:"), a query or another
// folder, only the name of one segment.
function hrefOf(segments) {
  return segments.map(s => encodeURIComponent(String(s))).join("/");
}

// An SVG file's text as an <img> of a data: URL (base64 of its UTF-8 bytes): the browser draws it
// as a picture, in which no script runs and nothing is fetched, whatever the file holds.
function svgPicture(text, alt) {
  const bytes = new TextEncoder().encode(text);
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return el("img", {src: "data:image/svg+xml;base64," + btoa(binary), alt: alt});
}

// The page's data (see html_page in app/report_page.cpp).
function pageData() {
  return JSON.parse(document.getElementById("report-data").textContent);
}

// ---------------------------------------------------------------- numbers

// A number as a person reads it: 4 significant digits, exponent form when very large or small.
function fmt(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "n/a";
  if (!Number.isFinite(v)) return v > 0 ? "inf" : "-inf";
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e5 || a < 1e-4) return v.toExponential(2).replace(/\.?0+e/, "e");  // 5.00e-5 -> 5e-5
  return String(Number(v.toPrecision(4)));
}

function fmtSeconds(s) {
  if (s < 90) return s.toFixed(1) + " s";
  if (s < 5400) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(2) + " h";
}

// Round tick values covering [lo, hi]: steps of 1, 2, 2.5 or 5 times a power of ten (as
// train/plot's nice_ticks).
function niceTicks(lo, hi, target) {
  if (!(hi > lo)) { hi = lo + 1; lo = lo - 1; }
  const raw = (hi - lo) / (target || 6);
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map(m => m * p).find(s => s >= raw);
  const ticks = [];
  for (let t = Math.floor(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

// Ticks for a log axis: powers of ten, and 2 and 5 between them over less than three decades.
function logTicks(lo, hi) {
  const ticks = [];
  const a = Math.floor(Math.log10(lo)), b = Math.ceil(Math.log10(hi));
  for (let e = a; e <= b; e++)
    for (const m of (b - a < 3 ? [1, 2, 5] : [1])) {
      const t = m * Math.pow(10, e);
      if (t >= lo * 0.999 && t <= hi * 1.001) ticks.push(t);
    }
  return ticks.length >= 2 ? ticks : [lo, hi];
}

// The width of a label in pixels at a font size: SVG cannot measure text before it is drawn, so an
// estimate (Hangul and CJK about 1 em, Latin about 0.6 em), as train/plot's SVG writers make it.
function textWidth(text, px) {
  let em = 0;
  for (const ch of text) em += ch.codePointAt(0) >= 0x1100 ? 1.0 : 0.6;
  return em * px;
}

// ---------------------------------------------------------------- colours

// Viridis through five stops (as train/plot/svg_chart.cpp): t in [0, 1] -> "rgb(...)".
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
function viridis(t) {
  t = Math.min(1, Math.max(0, t)) * 4;
  const k = Math.min(3, Math.floor(t)), f = t - k;
  const c = [0, 1, 2].map(i => Math.round(VIRIDIS[k][i] + (VIRIDIS[k + 1][i] - VIRIDIS[k][i]) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

// White -> dark blue, for attention weights and attribution shares in [0, 1].
function blues(t) {
  t = Math.min(1, Math.max(0, t));
  const c = [[255, 255, 255], [8, 48, 107]].reduce((a, b) => a.map((x, i) => Math.round(x + (b[i] - x) * t)));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

// Text that stays readable on a background of blues(t).
function inkOn(t) { return t > 0.55 ? "#ffffff" : "#1f2328"; }

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

// ---------------------------------------------------------------- tooltip

// One tooltip for the page: show(text, event) near the pointer, hide() when it leaves.
const tooltip = {
  show(text, event) {
    const t = document.getElementById("tooltip");
    t.textContent = text;
    t.hidden = false;
    const x = Math.min(event.clientX + 14, window.innerWidth - t.offsetWidth - 8);
    const y = event.clientY + 16 + t.offsetHeight > window.innerHeight ? event.clientY - t.offsetHeight - 10 : event.clientY + 16;
    t.style.left = x + "px";
    t.style.top = y + "px";
  },
  hide() { document.getElementById("tooltip").hidden = true; },
};

// ---------------------------------------------------------------- line chart

let clipCounter = 0;  // each chart's clip path needs an id of its own

// A line chart as SVG. series: [{name, points: [[x, y], ...], color, dashed, dots}]; a point with a
// null or non-finite y (or y <= 0 on a log axis) is a gap. opts: {title, xLabel, yLabel, logY,
// logX, height, zoomGroup, xRange (the whole x range; default: the data's), yZero (y from 0)}. Drag
// across the plot to zoom into that range of x, double-click to zoom
// out; charts given the same zoomGroup (an array) zoom together. Hover shows each series' value at
// the nearest x.
class LineChart {
  constructor(parent, series, opts) {
    this.series = series;
    this.opts = Object.assign({height: 260, logY: false, logX: false}, opts);
    this.W = 900;
    this.H = this.opts.height;
    this.m = {left: 64, right: 16, top: 24, bottom: 38};
    const xs = series.flatMap(s => s.points.map(p => p[0])).filter(Number.isFinite);
    this.full = this.opts.xRange ? this.opts.xRange.slice() : xs.length ? [Math.min(...xs), Math.max(...xs)] : [0, 1];
    this.range = this.full.slice();
    this.svg = svgEl("svg", {class: "chart", viewBox: `0 0 ${this.W} ${this.H}`, role: "img"});
    parent.append(this.svg);
    this.group = this.opts.zoomGroup || [];
    this.group.push(this);
    this.listen();
    this.draw();
  }

  // Zooms every chart of the group to [lo, hi] (null: the whole range).
  zoom(lo, hi) {
    for (const c of this.group.length ? this.group : [this]) {
      c.range = lo === null ? c.full.slice() : [lo, hi];
      c.draw();
    }
  }

  // Plot coordinates of data values.
  sx(x) {
    const [a, b] = this.opts.logX ? this.range.map(Math.log10) : this.range;
    const v = this.opts.logX ? Math.log10(x) : x;
    return this.m.left + (v - a) / (b - a || 1) * (this.W - this.m.left - this.m.right);
  }
  sy(y) {
    const [a, b] = this.opts.logY ? this.yRange.map(Math.log10) : this.yRange;
    const v = this.opts.logY ? Math.log10(y) : y;
    return this.H - this.m.bottom - (v - a) / (b - a || 1) * (this.H - this.m.top - this.m.bottom);
  }
  invertX(px) {
    const f = (px - this.m.left) / (this.W - this.m.left - this.m.right);
    if (this.opts.logX) {
      const [a, b] = this.range.map(Math.log10);
      return Math.pow(10, a + f * (b - a));
    }
    return this.range[0] + f * (this.range[1] - this.range[0]);
  }

  usable(p) { return p[1] !== null && Number.isFinite(p[1]) && !(this.opts.logY && p[1] <= 0) && !(this.opts.logX && p[0] <= 0); }

  draw() {
    const svg = this.svg;
    svg.replaceChildren();
    const [x0, x1] = this.range;
    const visible = this.series.flatMap(s => s.points.filter(p => p[0] >= x0 && p[0] <= x1 && this.usable(p)).map(p => p[1]));
    let lo = visible.length ? Math.min(...visible) : 0, hi = visible.length ? Math.max(...visible) : 1;
    if (this.opts.logY) {
      if (!(lo > 0)) { lo = 1e-6; hi = 1; }
      if (hi / lo < 1.5) { lo /= 1.2; hi *= 1.2; }
      this.yRange = [lo, hi];
    } else {
      const pad = (hi - lo) * 0.05 || Math.abs(hi) * 0.05 || 1;
      this.yRange = [this.opts.yZero ? Math.min(0, lo) : lo - pad, hi + pad];
    }
    const clipId = `clip${++clipCounter}`;
    const L = this.m.left, R = this.W - this.m.right, T = this.m.top, B = this.H - this.m.bottom;
    svg.append(svgEl("defs", {}, svgEl("clipPath", {id: clipId}, svgEl("rect", {x: L, y: T, width: R - L, height: B - T}))));
    if (this.opts.title) svg.append(svgEl("text", {class: "title", x: L, y: 15}, this.opts.title));
    // Axes, grid and tick labels.
    const axis = svgEl("g", {class: "axis"}), grid = svgEl("g", {class: "grid"});
    const yt = this.opts.logY ? logTicks(...this.yRange) : niceTicks(...this.yRange, 5).filter(t => t >= this.yRange[0] && t <= this.yRange[1]);
    for (const t of yt) {
      const y = this.sy(t);
      grid.append(svgEl("line", {x1: L, x2: R, y1: y, y2: y}));
      axis.append(svgEl("text", {x: L - 6, y: y + 4, "text-anchor": "end"}, fmt(t)));
    }
    const xt = this.opts.logX ? logTicks(x0, x1) : niceTicks(x0, x1, 8).filter(t => t >= x0 && t <= x1);
    for (const t of xt) {
      const x = this.sx(t);
      grid.append(svgEl("line", {x1: x, x2: x, y1: T, y2: B}));
      axis.append(svgEl("text", {x: x, y: B + 14, "text-anchor": "middle"}, fmt(t)));
    }
    axis.append(svgEl("path", {d: `M${L},${T} V${B} H${R}`, fill: "none"}));
    if (this.opts.xLabel) axis.append(svgEl("text", {x: (L + R) / 2, y: this.H - 4, "text-anchor": "middle"}, this.opts.xLabel));
    if (this.opts.yLabel) {
      const mid = (T + B) / 2;
      axis.append(svgEl("text", {x: 12, y: mid, transform: `rotate(-90 12 ${mid})`, "text-anchor": "middle"}, this.opts.yLabel));
    }
    svg.append(grid, axis);
    // The series, clipped to the plot.
    const lines = svgEl("g", {"clip-path": `url(#${clipId})`});
    this.series.forEach((s, i) => {
      const color = s.color || PALETTE[i % PALETTE.length];
      let d = "", pen = false;
      for (const p of s.points) {
        if (!this.usable(p)) { pen = false; continue; }
        d += `${pen ? "L" : "M"}${this.sx(p[0]).toFixed(1)},${this.sy(p[1]).toFixed(1)}`;
        pen = true;
      }
      lines.append(svgEl("path", {d: d, fill: "none", stroke: color, "stroke-width": 1.6, "stroke-dasharray": s.dashed ? "5 4" : null}));
      if (s.dots)
        for (const p of s.points.filter(q => this.usable(q)))
          lines.append(svgEl("circle", {cx: this.sx(p[0]), cy: this.sy(p[1]), r: 2.6, fill: color}));
    });
    svg.append(lines);
    // Legend, top right.
    const legend = svgEl("g", {class: "legend"});
    this.series.forEach((s, i) => {
      const y = T + 12 + 15 * i, color = s.color || PALETTE[i % PALETTE.length];
      legend.append(svgEl("line", {x1: R - 150, x2: R - 128, y1: y - 4, y2: y - 4, stroke: color, "stroke-width": 2,
                                   "stroke-dasharray": s.dashed ? "5 4" : null}));
      legend.append(svgEl("text", {x: R - 122, y: y}, s.name));
    });
    svg.append(legend);
    this.hoverLine = svgEl("line", {class: "hover-line", y1: T, y2: B, visibility: "hidden"});
    this.selection = svgEl("rect", {class: "selection", y: T, height: B - T, visibility: "hidden"});
    svg.append(this.hoverLine, this.selection);
  }

  // Pointer position in the SVG's own coordinates.
  local(event) {
    const p = this.svg.createSVGPoint();
    p.x = event.clientX;
    p.y = event.clientY;
    return p.matrixTransform(this.svg.getScreenCTM().inverse());
  }

  listen() {
    let start = null;
    const inside = x => Math.min(this.W - this.m.right, Math.max(this.m.left, x));
    this.svg.addEventListener("mousedown", e => { start = inside(this.local(e).x); });
    this.svg.addEventListener("mousemove", e => {
      const x = inside(this.local(e).x);
      if (start !== null) {
        this.selection.setAttribute("x", Math.min(start, x));
        this.selection.setAttribute("width", Math.abs(x - start));
        this.selection.setAttribute("visibility", "visible");
      }
      this.hover(x, e);
    });
    this.svg.addEventListener("mouseup", e => {
      const x = inside(this.local(e).x);
      if (start !== null && Math.abs(x - start) > 4) {
        const a = this.invertX(Math.min(start, x)), b = this.invertX(Math.max(start, x));
        this.zoom(a, b);
      }
      start = null;
      this.selection.setAttribute("visibility", "hidden");
    });
    this.svg.addEventListener("mouseleave", () => {
      start = null;
      this.selection.setAttribute("visibility", "hidden");
      this.hoverLine.setAttribute("visibility", "hidden");
      tooltip.hide();
    });
    this.svg.addEventListener("dblclick", () => this.zoom(null));
  }

  // The tooltip: each series' point nearest to the pointer's x.
  hover(px, event) {
    const x = this.invertX(px);
    const lines = [];
    let at = null;
    for (const s of this.series) {
      let best = null;
      for (const p of s.points) if (this.usable(p) && (best === null || Math.abs(p[0] - x) < Math.abs(best[0] - x))) best = p;
      if (best) {
        lines.push(`${s.name}: ${fmt(best[1])} (${this.opts.xLabel || "x"} ${fmt(best[0])})`);
        at = at === null ? best[0] : at;
      }
    }
    if (at === null) return;
    this.hoverLine.setAttribute("x1", this.sx(at));
    this.hoverLine.setAttribute("x2", this.sx(at));
    this.hoverLine.setAttribute("visibility", "visible");
    tooltip.show(lines.join("\n"), event);
  }
}

// ---------------------------------------------------------------- heat map on a canvas

// rows x columns of values coloured by viridis on a linear or log10 scale, drawn on a canvas (a
// grad-stats map has thousands of cells). opts: {rowLabels, colLabels (numbers shown under the
// map), values: [row][col] (null: grey), log, lo, hi (fixed range; else the values' own),
// cell: {w, h} at most, label (the colour bar's), onHover(row, col, event), onLeave(),
// onClick(row)}. Returns {canvas, redraw(values, opts)}.
function heatMap(parent, opts) {
  const wrap = el("div", {class: "heat-wrap"});
  const canvas = el("canvas", {class: "heat"});
  const bar = el("canvas", {class: "colorbar"});
  wrap.append(canvas, bar);
  parent.append(wrap);
  let o = opts, geometry = null;

  function scaleOf(values) {
    const flat = values.flat().filter(v => v !== null && Number.isFinite(v) && (!o.log || v > 0));
    let lo = o.lo !== undefined ? o.lo : Math.min(...flat), hi = o.hi !== undefined ? o.hi : Math.max(...flat);
    if (!flat.length) { lo = 0; hi = 1; }
    const f = o.log ? Math.log10 : (v => v);
    const a = f(lo), b = f(hi);
    return {lo, hi, t: v => (v === null || !Number.isFinite(v) || (o.log && v <= 0)) ? null : (b > a ? (f(v) - a) / (b - a) : 0.5)};
  }

  function draw() {
    const rows = o.values.length, cols = rows ? o.values[0].length : 0;
    const labelW = 10 + Math.max(40, ...o.rowLabels.map(s => s.length * 6.4));
    const cw = Math.max(1, Math.min(o.cell.w, Math.floor((Math.min(parent.clientWidth || 900, 1100) - labelW - 110) / Math.max(1, cols))));
    const ch = o.cell.h;
    const W = labelW + cw * cols + 4, H = ch * rows + 30;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = W * dpr;
    canvas.height = H * dpr;
    canvas.style.width = W + "px";
    canvas.style.height = H + "px";
    const g = canvas.getContext("2d");
    g.scale(dpr, dpr);
    g.fillStyle = "#ffffff";
    g.fillRect(0, 0, W, H);
    const scale = scaleOf(o.values);
    for (let r = 0; r < rows; r++)
      for (let c = 0; c < cols; c++) {
        const t = scale.t(o.values[r][c]);
        g.fillStyle = t === null ? "#d9d9d9" : viridis(t);
        g.fillRect(labelW + c * cw, r * ch, cw + 0.5, ch + 0.5);
      }
    // Row labels where they fit; a line under the selected row.
    g.fillStyle = "#59636e";
    g.font = `${Math.min(11, ch)}px system-ui, sans-serif`;
    g.textAlign = "right";
    g.textBaseline = "middle";
    const every = Math.max(1, Math.ceil(9 / ch));
    for (let r = 0; r < rows; r += every) g.fillText(o.rowLabels[r], labelW - 6, r * ch + ch / 2);
    if (o.selectedRow !== undefined && o.selectedRow !== null) {
      g.strokeStyle = "#e36209";
      g.lineWidth = 2;
      g.strokeRect(labelW - 1, o.selectedRow * ch, cw * cols + 2, ch);
    }
    // Column labels (steps), about ten.
    g.textAlign = "center";
    g.textBaseline = "top";
    const colEvery = Math.max(1, Math.ceil(cols / 10));
    for (let c = 0; c < cols; c += colEvery) g.fillText(String(o.colLabels[c]), labelW + c * cw + cw / 2, rows * ch + 4);
    g.fillText(o.colTitle || "", labelW + cw * cols / 2, rows * ch + 17);
    geometry = {labelW, cw, ch, rows, cols};
    drawBar(scale, Math.max(120, Math.min(H - 30, 260)));
  }

  function drawBar(scale, h) {
    const dpr = window.devicePixelRatio || 1, W = 96;
    bar.width = W * dpr;
    bar.height = (h + 20) * dpr;
    bar.style.width = W + "px";
    bar.style.height = h + 20 + "px";
    const g = bar.getContext("2d");
    g.scale(dpr, dpr);
    for (let i = 0; i < h; i++) {
      g.fillStyle = viridis(1 - i / (h - 1));
      g.fillRect(0, 10 + i, 14, 1.5);
    }
    g.fillStyle = "#59636e";
    g.font = "11px system-ui, sans-serif";
    g.textBaseline = "middle";
    g.fillText(fmt(scale.hi), 18, 12);
    g.fillText(fmt(scale.lo), 18, h + 8);
    if (o.label) {
      g.save();
      g.translate(70, 10 + h / 2);
      g.rotate(Math.PI / 2);
      g.textAlign = "center";
      g.fillText(o.label + (o.log ? " (log)" : ""), 0, 0);
      g.restore();
    }
  }

  // The cell under the pointer, or null.
  function cellAt(event) {
    if (!geometry) return null;
    const box = canvas.getBoundingClientRect();
    const x = event.clientX - box.left - geometry.labelW, y = event.clientY - box.top;
    const c = Math.floor(x / geometry.cw), r = Math.floor(y / geometry.ch);
    return r >= 0 && r < geometry.rows && c >= 0 && c < geometry.cols ? {r, c} : null;
  }

  canvas.addEventListener("mousemove", e => {
    const at = cellAt(e);
    if (at && o.onHover) o.onHover(at.r, at.c, e);
    else tooltip.hide();
  });
  canvas.addEventListener("mouseleave", () => tooltip.hide());
  canvas.addEventListener("click", e => {
    const at = cellAt(e);
    if (at && o.onClick) o.onClick(at.r);
  });
  draw();
  return {canvas, redraw(changes) { o = Object.assign({}, o, changes); draw(); }};
}

// ---------------------------------------------------------------- page chrome

function header(title, subtitle, links) {
  const nav = el("nav", {}, links.map(([id, label]) => el("a", {href: "#" + id}, label)));
  return [el("h1", {}, title), el("p", {class: "sub"}, subtitle), nav];
}

function footer(text) {
  return el("footer", {}, text);
}

// Marks the page drawn: the browser test (tests/test_report_browser.cpp) waits for this and reads
// how long drawing took.
function markReady(started) {
  document.body.dataset.renderMs = String(Math.round(performance.now() - started));
  document.body.dataset.ready = "1";
}
