// The run report (`gradflow report RUN`): draws the page from the JSON that app/run_report.cpp
// writes into <script id="report-data">. Four sections: the run's settings; the loss curves over
// the learning-rate schedule; the gradient statistics (grad_stats.jsonl) as heat maps; and the
// attention explorer with gradient x input and attention rollout beside it.
"use strict";

// Called at the end of this file, once every function and constant below is defined.
function main() {
  const started = performance.now();
  const data = pageData();
  const page = document.getElementById("page");
  const m = data.model, st = data.state;
  const kv = m.kv_heads < m.heads ? `, ${m.kv_heads} key/value heads (grouped-query)` : "";
  const layers = m.arch === "decoder-only" ? `${m.layers} layers` : `${m.layers}+${m.layers} layers`;
  page.append(...header(
      "gradflow run report",
      `${data.run} · ${m.arch}, ${layers}, d_model ${m.d_model}, ${m.heads} heads${kv} · ${m.parameters.toLocaleString("en")} parameters · ` +
          `${st.step.toLocaleString("en")} steps in ${fmtSeconds(st.train_seconds)}` +
          (st.best_valid_loss !== null ? ` · best validation NLL ${fmt(st.best_valid_loss)}` : ""),
      [["settings", "Settings"], ["curves", "Loss and learning rate"], ["grad-stats", "Gradient statistics"], ["attention", "Attention explorer"]]));
  page.append(outsideSection(data.outside_files || []));
  page.append(settingsSection(data.config));
  page.append(curvesSection(data.curves, st.step));
  page.append(gradStatsSection(data.grad_stats));
  page.append(attentionSection(data.attention, m));
  page.append(footer(`Written by gradflow report from ${data.run} (weights: ${m.weights}). Everything on this page is in this one file; ` +
                     "nothing is fetched. docs/report.md explains each figure."));
  markReady(started);
}

// ---------------------------------------------------------------- files from outside the folder

// Every file from outside the run folder that the report read (app/run_report.h): a folder made by
// someone else names its data files in config.json, and the page shows text from them.
function outsideSection(files) {
  const s = el("section", {id: "outside-files"}, el("h2", {}, "Files read from outside the run folder"));
  if (!files.length) {
    s.append(el("p", {class: "note"}, "None: everything on this page comes from the run folder."));
    return s;
  }
  s.append(el("p", {}, `The report read ${files.length === 1 ? "this file" : `these ${files.length} files`}, outside the run folder, ` +
                       "and the page shows text from them:"));
  s.append(el("ul", {}, files.map(f => el("li", {}, [el("span", {class: "mono"}, f.path), ` (${f.why})`]))));
  return s;
}

// ---------------------------------------------------------------- settings

// config.json: its top-level values in one table, each nested object (the layer's options) in its own.
function settingsSection(config) {
  const s = el("section", {id: "settings"}, el("h2", {}, "Settings (config.json)"));
  const wrap = el("div", {class: "settings"});
  const table = (title, entries) => el("table", {}, [
    el("tr", {}, el("th", {colspan: 2}, title)),
    ...entries.map(([k, v]) => el("tr", {}, [
      el("td", {class: "mono"}, k),
      el("td", {class: "mono"}, typeof v === "string" ? v || '""' : JSON.stringify(v)),
    ])),
  ]);
  const flat = Object.entries(config).filter(([, v]) => v === null || typeof v !== "object");
  wrap.append(table("run", flat));
  for (const [k, v] of Object.entries(config)) if (v !== null && typeof v === "object") wrap.append(table(k, Object.entries(v)));
  s.append(wrap);
  return s;
}

// ---------------------------------------------------------------- curves

function curvesSection(curves, steps) {
  const s = el("section", {id: "curves"}, el("h2", {}, "Loss and learning rate"));
  s.append(el("p", {class: "note"},
              "Drag across either chart to zoom into those steps; double-click to zoom out. Both charts share the step axis. " +
              `Training: ${curves.train_note}; validation: ${curves.valid_note}. The learning rate is the schedule the trainer applied ` +
              `(${curves.lr_note}).`));
  const group = [];
  const lossSeries = [
    {name: "training loss", points: curves.train, color: PALETTE[0]},
    {name: "validation NLL", points: curves.valid, color: PALETTE[1], dots: true},
  ];
  const logBox = el("input", {type: "checkbox", id: "curves-log"});
  const reset = el("button", {type: "button"}, "zoom out");
  s.append(el("div", {class: "controls"}, [el("label", {}, [logBox, "log scale for the loss"]), reset]));
  const lossHolder = el("div", {id: "curves-loss"}), lrHolder = el("div", {id: "curves-lr"});
  s.append(lossHolder, lrHolder);
  const xRange = [1, Math.max(2, steps)];  // both charts over every step, so that their axes line up
  const loss = new LineChart(lossHolder, lossSeries,
                             {title: "loss", xLabel: "step", yLabel: "loss (nats/token)", height: 300, zoomGroup: group, xRange});
  new LineChart(lrHolder, [{name: "learning rate", points: curves.lr, color: PALETTE[2]}],
                {title: "learning rate", xLabel: "step", yLabel: "lr", height: 150, zoomGroup: group, yZero: true, xRange});
  logBox.addEventListener("change", () => {
    loss.opts.logY = logBox.checked;
    loss.draw();
  });
  reset.addEventListener("click", () => loss.zoom(null));
  if (!curves.train.length) s.append(el("p", {class: "note"}, "No training curve yet: the run has not finished 20 steps."));
  return s;
}

// ---------------------------------------------------------------- gradient statistics

const STATS = {
  grad_norm: "gradient norm (before clipping)",
  update_ratio: "update / weight: |Δp| / |p| of the Adam step applied",
  param_norm: "parameter norm",
};

function gradStatsSection(g) {
  const s = el("section", {id: "grad-stats"}, el("h2", {}, "Gradient statistics"));
  if (!g) {
    s.append(el("p", {class: "note"},
                "This run did not record gradient statistics. Train with --grad-stats N (every N steps; docs/grad-stats.md) and run " +
                "gradflow report again."));
    return s;
  }
  const every = Math.ceil(g.recorded / g.steps.length);
  const thinned = g.steps.length < g.recorded ? ` (${g.recorded} records; every ${every}th shown, and the last)` : "";
  s.append(el("p", {class: "note"},
              `Recorded at ${g.steps.length} steps from ${g.steps[0]} to ${g.steps[g.steps.length - 1]}${thinned}. One row per module ` +
              "group, one column per recorded step, log colour scale. Hover a cell for its three values; click a row for that " +
              "module's curves."));
  let stat = "grad_norm", selected = null;
  const curveHolder = el("div", {id: "gs-curve"});
  const statOptions = Object.entries(STATS).map(([value, label]) => ({value, label}));
  const controls = el("div", {class: "controls"}, el("label", {}, ["colour by", selectBox("gs-stat", statOptions, stat, v => {
    stat = v;
    map.redraw({values: g[stat], label: STATS[stat].split(":")[0]});
  })]));
  s.append(controls);
  const holder = el("div", {id: "gs-map"});
  s.append(holder, curveHolder);
  const map = heatMap(holder, {
    rowLabels: g.groups, colLabels: g.steps, colTitle: "step", values: g[stat], log: true, cell: {w: 24, h: 11},
    label: STATS[stat].split(":")[0],
    onHover(r, c, e) {
      tooltip.show(`${g.groups[r]}, step ${g.steps[c]}\ngradient norm ${fmt(g.grad_norm[r][c])}\nupdate / weight ${fmt(g.update_ratio[r][c])}\n` +
                   `parameter norm ${fmt(g.param_norm[r][c])}\nloss at this step ${fmt(g.loss[c])}, lr ${fmt(g.lr[c])}`, e);
    },
    onClick(r) {
      selected = r;
      map.redraw({selectedRow: r});
      curveHolder.replaceChildren();
      const pts = key => g.steps.map((x, c) => [x, g[key][r][c]]);
      new LineChart(curveHolder, [{name: "gradient norm", points: pts("grad_norm")}, {name: "update / weight", points: pts("update_ratio")}],
                    {title: `${g.groups[r]}: gradient norm and update / weight over the steps (log scale)`, xLabel: "step", logY: true, height: 240});
    },
  });
  curveHolder.append(el("p", {class: "note"}, "Click a row of the map to see that module's curves here."));
  if (g.heads.length) s.append(entropyView(g));
  return s;
}

// Per-head attention entropy over the steps, as a share of its largest possible value.
function entropyView(g) {
  const d = el("div", {id: "gs-entropy"});
  d.append(el("h3", {}, "Attention entropy per head"));
  d.append(el("p", {class: "note"},
              "Each head's mean entropy over the query rows of the recorded batch, divided by log(visible keys): 1 is attending evenly " +
              "to every key it may see, 0 to a single key (entropy collapse). Hover for the values in nats."));
  const labels = g.heads.map(h => `${h.attention} h${h.head}`);
  const share = g.entropy.map((row, r) => row.map((v, c) => (v === null || !g.uniform[r][c]) ? null : v / g.uniform[r][c]));
  const curve = el("div");
  heatMap(d, {
    rowLabels: labels, colLabels: g.steps, colTitle: "step", values: share, lo: 0, hi: 1, cell: {w: 24, h: 10}, label: "entropy / log(keys)",
    onHover(r, c, e) {
      tooltip.show(`${labels[r]}, step ${g.steps[c]}\nentropy ${fmt(g.entropy[r][c])} nats\nlargest possible ${fmt(g.uniform[r][c])} nats\n` +
                   `share ${fmt(share[r][c])}`, e);
    },
    onClick(r) {
      curve.replaceChildren();
      new LineChart(curve, [{name: labels[r], points: g.steps.map((x, c) => [x, share[r][c]])}],
                    {title: `${labels[r]}: entropy / log(visible keys)`, xLabel: "step", height: 200, yZero: true});
    },
  });
  d.append(curve);
  return d;
}

// ---------------------------------------------------------------- attention explorer

function attentionSection(a, model) {
  const s = el("section", {id: "attention"}, el("h2", {}, "Attention explorer"));
  if (!a.sentences.length) {
    s.append(el("p", {class: "note"}, a.note || "No sentence to show."));
    return s;
  }
  s.append(el("p", {class: "note"},
              `Sentences: ${a.from === "--src" ? "given with --src" : "the first short ones of " + a.from}, translated greedily with the ` +
              "run's weights. Pick an attention, a layer and a head; hover a token in the left column to see where it attends, in " +
              "the right column to see where attention to it comes from. Click a decoder position (or pick an output token) for its " +
              "gradient × input attribution and attention rollout on the right."));
  const state = {sentence: 0, view: null, layer: 0, head: "mean", target: 0};
  const body = el("div");
  s.append(body);
  const groups = a.kv_group;
  const grouped = model.kv_heads < model.heads;

  function render() {
    const sent = a.sentences[state.sentence];
    const views = sent.views;
    if (!views.find(v => v.id === state.view)) state.view = (views.find(v => v.id === "cross") || views[0]).id;
    const view = views.find(v => v.id === state.view);
    state.layer = Math.min(state.layer, view.layers.length - 1);
    state.target = Math.min(state.target, sent.outputs.length - 1);
    const heads = view.layers[0].length;
    body.replaceChildren();
    body.append(sentenceBlock(sent));
    const headOptions = [{value: "mean", label: "mean of heads"}].concat(
        [...Array(heads).keys()].map(h => ({value: h, label: `head ${h}` + (grouped ? ` (kv ${groups[h]})` : "")})));
    body.append(el("div", {class: "controls"}, [
      el("label", {}, ["sentence", selectBox("att-sentence", a.sentences.map((x, i) => ({value: i, label: `${i + 1}: ${x.source}`})),
                                             state.sentence, v => {
        state.sentence = Number(v);
        render();
      })]),
      el("label", {}, ["attention", selectBox("att-view", views.map(v => ({value: v.id, label: v.label})), state.view, v => {
        state.view = v;
        render();
      })]),
      el("label", {}, ["layer", selectBox("att-layer", view.layers.map((x, i) => ({value: i, label: String(i)})), state.layer, v => {
        state.layer = Number(v);
        render();
      })]),
      el("label", {}, ["head", selectBox("att-head", headOptions, state.head, v => {
        state.head = v === "mean" ? "mean" : Number(v);
        render();
      })]),
    ]));
    if (grouped)
      body.append(el("p", {class: "note"},
                      `Grouped-query attention: the ${model.heads} query heads share ${model.kv_heads} key/value heads ` +
                      `(head h uses key/value head h / ${model.heads / model.kv_heads}); heads of one group see the same keys.`));
    const weights = headMap(view.layers[state.layer], state.head);
    body.append(el("p", {class: "note"}, view.note));
    const grid = el("div", {class: "explorer"});
    const linesBox = el("div"), matrixBox = el("div"), attrBox = el("div", {id: "att-attr"});
    grid.append(linesBox, matrixBox, attrBox);
    body.append(grid);
    const targetRow = view.target_rows ? view.target_rows[state.target] : null;
    const matrix = matrixView(matrixBox, view, weights, targetRow);
    linesView(linesBox, view, weights, targetRow, matrix, row => {
      if (!view.target_rows) return;
      const t = view.target_rows.indexOf(row);
      if (t >= 0) {
        state.target = t;
        render();
      }
    });
    attributionView(attrBox, sent, state.target, t => {
      state.target = t;
      render();
    });
  }
  render();
  return s;
}

// One head's map, or the mean over the heads: (queries, keys).
function headMap(heads, head) {
  if (head !== "mean") return heads[head];
  return heads[0].map((row, i) => row.map((x, j) => heads.reduce((sum, h) => sum + h[i][j], 0) / heads.length));
}

function sentenceBlock(sent) {
  const exact = sent.reference !== null && sent.reference === sent.output;
  return el("div", {class: "sentence"}, [
    el("div", {}, [el("span", {class: "label"}, "source"), sent.source]),
    sent.reference !== null ? el("div", {}, [el("span", {class: "label"}, "reference"), sent.reference]) : null,
    el("div", {}, [el("span", {class: "label"}, "model output"), sent.output,
                   sent.reference !== null ? el("span", {class: exact ? "holds" : "fails"}, exact ? "  (exact match)" : "  (differs)") : null]),
  ]);
}

// bertviz's picture: queries on the left, keys on the right, a line for every weight above 0.5%,
// as opaque as the weight. Hovering a token shows only its lines and colours the other side by
// weight. matrix: the matrix view, whose row or column it outlines. onPick(row): a query clicked.
function linesView(box, view, w, targetRow, matrix, onPick) {
  box.append(el("h3", {}, view.label));
  const rowH = 19, n = Math.max(view.queries.length, view.keys.length);
  const labelW = Math.max(70, ...view.queries.concat(view.keys).map(t => textWidth(t, 12) + 10));
  const W = 2 * labelW + 150, H = n * rowH + 24;
  const xl = labelW, xr = labelW + 150;
  const svg = svgEl("svg", {id: "att-lines", class: "tokens", width: W, height: H, viewBox: `0 0 ${W} ${H}`});
  svg.append(svgEl("text", {x: xl - 4, y: 12, "text-anchor": "end", fill: "#59636e"}, "queries"));
  svg.append(svgEl("text", {x: xr + 4, y: 12, fill: "#59636e"}, "keys"));
  const y = i => 24 + i * rowH + rowH / 2;
  const lines = [];
  const linesG = svgEl("g");
  for (let i = 0; i < w.length; i++)
    for (let j = 0; j < w[i].length; j++)
      if (w[i][j] > 0.005) {
        const line = svgEl("line", {class: "attn-line", x1: xl + 4, y1: y(i), x2: xr - 4, y2: y(j),
                                    "stroke-width": 1 + 2.5 * w[i][j], "stroke-opacity": w[i][j]});
        lines.push({i, j, w: w[i][j], line});
        linesG.append(line);
      }
  svg.append(linesG);
  // A token: a rect behind its text, coloured when the other side's token is hovered.
  const token = (text, x, row, side) => {
    const width = textWidth(text, 12) + 8;
    const rect = svgEl("rect", {x: side === "q" ? x - width : x, y: y(row) - 8, width: width, height: 16, fill: "#ffffff", rx: 2});
    const t = svgEl("text", {x: side === "q" ? x - 4 : x + 4, y: y(row) + 4, "text-anchor": side === "q" ? "end" : "start"}, text);
    if (side === "q" && row === targetRow) t.classList.add("active");
    const g = svgEl("g", {class: side === "q" ? "query" : "key"}, [rect, t]);
    g.addEventListener("mouseenter", () => focus(side, row));
    g.addEventListener("mouseleave", () => focus(null, null));
    if (side === "q") g.addEventListener("click", () => onPick(row));
    svg.append(g);
    return {rect, t};
  };
  const qs = view.queries.map((t, i) => token(t, xl, i, "q"));
  const ks = view.keys.map((t, j) => token(t, xr, j, "k"));
  // side "q": where query `index` attends; "k": where attention to key `index` comes from.
  function focus(side, index) {
    for (const l of lines) {
      const on = side === null || (side === "q" ? l.i === index : l.j === index);
      l.line.setAttribute("stroke-opacity", side === null ? l.w : on ? Math.max(0.15, l.w) : 0.03);
    }
    const colour = (list, weightOf) => list.forEach((tok, k) => {
      const v = weightOf(k);
      tok.rect.setAttribute("fill", v === null ? "#ffffff" : blues(v));
      if (v === null) tok.t.removeAttribute("fill");
      else tok.t.setAttribute("fill", inkOn(v));
    });
    colour(ks, j => side === "q" ? w[index][j] : null);
    colour(qs, i => side === "k" ? w[i][index] : null);
    matrix.outline(side, index);
    if (side === "q") tooltipFor(view.queries[index], "attends to", view.keys, w[index]);
    else if (side === "k") tooltipFor(view.keys[index], "is attended by", view.queries, w.map(r => r[index]));
  }
  box.append(svg);
}

// The hover text for a token: its largest weights on the other side.
function tooltipFor(token, verb, others, weights) {
  const top = weights.map((v, k) => [v, k]).sort((a, b) => b[0] - a[0]).slice(0, 4);
  const text = `"${token}" ${verb}:\n` + top.map(([v, k]) => `  ${others[k]}  ${fmt(v)}`).join("\n");
  const label = document.getElementById("att-hover");
  if (label) label.textContent = text;
}

// The weights as a matrix of cells, queries down, keys across; outline(side, index) frames a row
// ("q") or a column ("k"). The output token's row is framed in orange.
function matrixView(box, view, w, targetRow) {
  box.append(el("h3", {}, "weights (rows: queries, columns: keys)"));
  const cell = Math.max(9, Math.min(22, Math.floor(300 / Math.max(view.keys.length, view.queries.length))));
  const left = Math.min(140, Math.max(40, ...view.queries.map(t => textWidth(t, 10) + 8)));
  const top = Math.min(120, Math.max(40, ...view.keys.map(t => textWidth(t, 10) * 0.87 + 8)));  // keys are turned 60 degrees
  const W = left + cell * view.keys.length + 6, H = top + cell * view.queries.length + 6;
  const svg = svgEl("svg", {id: "att-matrix", class: "matrix", width: W, height: H, viewBox: `0 0 ${W} ${H}`});
  view.keys.forEach((t, j) => {
    const x = left + j * cell + cell / 2;
    svg.append(svgEl("text", {x: x, y: top - 4, transform: `rotate(-60 ${x} ${top - 4})`}, t));
  });
  view.queries.forEach((t, i) => svg.append(svgEl("text", {x: left - 4, y: top + i * cell + cell / 2 + 3, "text-anchor": "end"}, t)));
  for (let i = 0; i < w.length; i++)
    for (let j = 0; j < w[i].length; j++) {
      const r = svgEl("rect", {x: left + j * cell, y: top + i * cell, width: cell, height: cell, fill: blues(w[i][j])});
      r.addEventListener("mousemove", e => tooltip.show(`query "${view.queries[i]}" (${i}) -> key "${view.keys[j]}" (${j}): ${fmt(w[i][j])}`, e));
      r.addEventListener("mouseleave", () => tooltip.hide());
      svg.append(r);
    }
  if (targetRow !== null && targetRow !== undefined)
    svg.append(svgEl("rect", {class: "outline", x: left, y: top + targetRow * cell, width: cell * view.keys.length, height: cell}));
  const frame = svgEl("rect", {x: 0, y: 0, width: 0, height: 0, fill: "none", stroke: "#1f6feb", "stroke-width": 1.5, visibility: "hidden"});
  svg.append(frame);
  box.append(svg);
  box.append(el("pre", {id: "att-hover", class: "note"}, ""));
  return {
    outline(side, index) {
      if (side === null) return frame.setAttribute("visibility", "hidden");
      const row = side === "q";
      frame.setAttribute("x", row ? left : left + index * cell);
      frame.setAttribute("y", row ? top + index * cell : top);
      frame.setAttribute("width", row ? cell * view.keys.length : cell);
      frame.setAttribute("height", row ? cell : cell * view.queries.length);
      frame.setAttribute("visibility", "visible");
    },
  };
}

// Gradient x input and attention rollout of one output token, over the input tokens.
function attributionView(box, sent, t, onTarget) {
  box.append(el("h3", {}, "Which inputs the output token comes from"));
  const targets = sent.outputs.map((x, i) => ({value: i, label: `${i}: ${x}`}));
  box.append(el("div", {class: "controls"}, el("label", {}, ["output token", selectBox("att-target", targets, t, v => onTarget(Number(v)))])));
  const lp = sent.log_probs[t];
  box.append(el("p", {}, [`"${sent.outputs[t]}": log p = ${fmt(lp)} (p = ${fmt(Math.exp(lp))})`]));
  // In the decoder-only model output token t is predicted at position P - 1 + t: later positions do not exist for it yet.
  const visible = j => sent.prompt_length === undefined || j <= sent.prompt_length - 1 + t;
  const row = (title, values, note, signed) => {
    const abs = values.map((v, j) => visible(j) ? Math.abs(v) : 0);
    const total = abs.reduce((a, b) => a + b, 0), max = Math.max(...abs);
    box.append(el("div", {}, [el("strong", {}, title), el("span", {class: "note"}, "  " + note)]));
    const chips = el("div", {class: "chips"});
    sent.inputs.forEach((tok, j) => {
      const share = total > 0 ? abs[j] / total : 0, shade = max > 0 ? abs[j] / max : 0;
      const style = visible(j) ? `background:${blues(shade)};color:${inkOn(shade)}` : "";
      const chip = el("span", {class: "chip" + (visible(j) ? "" : " later"), style: style}, tok);
      chip.addEventListener("mousemove", e => tooltip.show(
          visible(j) ? `${tok}: ${signed ? "g·x = " + fmt(values[j]) + ", " : ""}share ${fmt(share)}` : `${tok}: after the predicting position`, e));
      chip.addEventListener("mouseleave", () => tooltip.hide());
      chips.append(chip);
    });
    box.append(chips);
  };
  row("gradient × input", sent.grad_x_input[t], "|(d log p / d x_s) · x_s| per input token, shaded by its share of the largest", true);
  row("attention rollout", sent.rollout[t], sent.rollout_note, false);
  const top = values => {
    let best = -1, at = 0;
    values.forEach((v, j) => { if (visible(j) && Math.abs(v) > best) { best = Math.abs(v); at = j; } });
    return sent.inputs[at];
  };
  box.append(el("p", {class: "note"},
                `Largest: gradient × input "${top(sent.grad_x_input[t])}", rollout "${top(sent.rollout[t])}". The two need not agree: ` +
                "attention says where information was read, the gradient how much the prediction changes with each input (the " +
                "`attribution` lab measures how often they agree)."));
}

main();
