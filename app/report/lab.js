// The lab pages (`gradflow lab NAME --html`, `gradflow lab all --html`, `gradflow report DIR`):
// drawn from the JSON that app/lab_page.cpp writes into <script id="report-data">, which holds
// the lab's own NAME.json (and its control's) as lab/report.cpp wrote it. Two kinds of page:
// "lab" (one lab: verdicts, the claims table with each interval against its threshold, the
// figures, the printed tables and log, the settings) and "lab-index" (every lab and its control).
"use strict";

// Called at the end of this file, once every function below is defined.
function main() {
  const started = performance.now();
  const data = pageData();
  const page = document.getElementById("page");
  if (data.kind === "lab-index") indexPage(page, data);
  else labPage(page, data);
  markReady(started);
}

// ---------------------------------------------------------------- pieces

// The reference text with each arXiv id as a link to its abstract (a link, not a fetch).
function referenceLine(text) {
  const p = el("p", {class: "reference"});
  let last = 0;
  for (const m of text.matchAll(/arXiv:(\d{4}\.\d{4,5})/g)) {
    p.append(text.slice(last, m.index), el("a", {href: `https://arxiv.org/abs/${m[1]}`}, m[0]));
    last = m.index + m[0].length;
  }
  p.append(text.slice(last));
  return p;
}

// Whether a control did its job: a placebo's false-positive rates within bounds, or an ablation
// leaving every targeted claim unsupported.
function controlOk(run) {
  if (!run) return false;
  if (run.placebo) return !!run.placebo.ok;
  const c = run.check || {};
  return c.control_targets > 0 && c.control_targets_fail === c.control_targets;
}

function verdictBox(run, what) {
  const c = run.check || {};
  const ok = what === "control" ? controlOk(run) : c.agrees;
  const title = ok ? "as it must be" : "NOT as it must be";
  const good = what === "control" ? !!run.placebo && ok : c.agrees;  // an ablation's line reads as a disagreement
  return el("div", {class: "verdict " + (good ? "agrees" : "disagrees"), title: title}, c.line || "(no verdict)");
}

// "mean [lo, hi] (method, n)", or for an exact check its value.
function intervalText(claim) {
  if (claim.method === "exact") return `${fmt(claim.mean)} (exact)`;
  return `${fmt(claim.mean)} [${fmt(claim.lo)}, ${fmt(claim.hi)}] (${claim.method}, n ${claim.n})`;
}

// A small picture of the lab's interval (and the control's, grey) against the threshold, with the
// claimed side shaded: the claim holds when the whole bar lies in the shade.
function intervalPlot(spec, lab, control) {
  const W = 200, H = 34, pad = 8;
  const runs = [lab, control].filter(r => r && Number.isFinite(r.lo) && Number.isFinite(r.hi));
  if (!runs.length || !Number.isFinite(spec.threshold)) return null;
  const values = runs.flatMap(r => [r.lo, r.hi, r.mean]).concat([spec.threshold]);
  let lo = Math.min(...values), hi = Math.max(...values);
  const log = lo > 0 && hi / lo > 100;  // ratios over orders of magnitude read on a log axis
  const f = log ? Math.log10 : (v => v);
  let a = f(lo), b = f(hi);
  if (b - a < 1e-12) { a -= 1; b += 1; }
  const margin = (b - a) * 0.08;
  a -= margin, b += margin;
  const x = v => pad + (f(v) - a) / (b - a) * (W - 2 * pad);
  const svg = svgEl("svg", {width: W, height: H, class: "interval-plot", viewBox: `0 0 ${W} ${H}`});
  const t = x(spec.threshold);
  const above = spec.side === "above";
  svg.append(svgEl("rect", {x: above ? t : 0, y: 0, width: above ? W - t : t, height: H, fill: "#dafbe1"}));
  svg.append(svgEl("line", {x1: t, x2: t, y1: 0, y2: H, stroke: "#cf222e", "stroke-dasharray": "3 2"}));
  const bar = (r, y, colour) => {
    svg.append(svgEl("line", {x1: x(r.lo), x2: x(r.hi), y1: y, y2: y, stroke: colour, "stroke-width": 3}));
    svg.append(svgEl("circle", {cx: x(r.mean), cy: y, r: 3.2, fill: colour}));
  };
  if (lab && runs.includes(lab)) bar(lab, 11, "#1f6feb");
  if (control && runs.includes(control)) bar(control, 24, "#8c959f");
  svg.append(svgEl("title", {}, `threshold ${fmt(spec.threshold)} (${spec.side}); blue: the lab, grey: its control` + (log ? "; log axis" : "")));
  return svg;
}

// A claim's outcome: supported, contradicted or unsettled (paper), passes or fails (check).
function holdsCell(claim) {
  if (!claim) return el("td", {class: "note"}, "not run");
  const word = claim.outcome || (claim.holds ? "holds" : "fails");
  const cls = claim.holds ? "holds" : word === "unsettled" ? "note" : "fails";
  const d = claim.design;
  return el("td", {}, [el("span", {class: cls}, d && d.by_design ? "unsettled by design" : word), el("br"),
                       el("span", {class: "mono"}, intervalText(claim)), ...(d ? [el("br"), el("span", {class: "note"}, designText(claim))] : [])]);
}

// A paper claim's design (lab/claims.cpp): the seeds that would settle its smallest effect at the
// pilot's spread, against the seeds this run had.
function designText(claim) {
  const d = claim.design;
  const needed = d.seeds_needed >= 1000 ? "1000 or more" : `${d.seeds_needed}`;
  const head = `designed to settle an effect of ${fmt(d.min_effect)} with ${needed} seeds (pilot sd ${fmt(d.pilot_sd)}, ` +
               `Holm level ${fmt(d.alpha)}); this run has ${claim.n}`;
  return d.by_design ? `${head}: unsettled by design, it needs ${needed} seeds for its smallest effect` : head;
}

// ---------------------------------------------------------------- one lab

function labPage(page, data) {
  const lab = data.lab, result = data.result, control = data.control;
  const links = [["verdict", "Verdict"], ["claims", "Claims"], ["figures", "Figures"]];
  if (result && (result.dose_response || []).length) links.push(["dose-response", "Dose-response"]);
  links.push(["tables", "Tables"], ["log", "Log"], ["settings", "Settings"]);
  page.append(...header(`gradflow lab ${lab.name}: ${lab.title}`, lab.question || "", links));
  page.append(referenceLine(`Paper: ${lab.reference}`));
  if (data.index) page.append(el("p", {}, el("a", {href: hrefOf(data.index)}, "← every lab")));

  const v = el("section", {id: "verdict"}, el("h2", {}, "Verdict"));
  if (result) {
    v.append(el("h3", {}, "the lab"), verdictBox(result, "lab"));
    v.append(el("p", {class: "note"}, `${fmtSeconds(result.seconds || 0)} on ${result.threads} threads (OpenBLAS ${result.blas_core}), ` +
                                      `${result.settings.seeds} seeds from ${result.settings.seed}; folder ${result.folder}.`));
  } else {
    v.append(el("p", {class: "note"}, `The lab itself was not found beside this control: gradflow lab ${lab.name} --html.`));
  }
  v.append(el("h3", {}, "its negative control"));
  if (control && control.placebo) {
    v.append(el("p", {}, `${control.control_removes || lab.control_removes}. Each contrast between two groups of seeds of one ` +
                         "arm, over many splits of a pool of runs: the rule must call it supported in at most 5% of them."));
    v.append(verdictBox(control, "control"));
    const rates = control.placebo.claims.map(p => p.splits ? `${p.id}: ${p.supported} of ${p.splits}` : `${p.id}: ${p.how}`);
    v.append(el("p", {class: controlOk(control) ? "holds" : "fails"}, rates.join("; ")));
  } else if (control) {
    v.append(el("p", {}, `Removed: ${control.control_removes || lab.control_removes}. ` +
                         "The paper claims marked as its targets must not be supported."));
    v.append(verdictBox(control, "control"));
    const c = control.check || {};
    const ok = controlOk(control);
    v.append(el("p", {class: ok ? "holds" : "fails"},
                ok ? (c.control_targets === 1 ? "The targeted claim is not supported without the causal ingredient, as it must be."
                                              : `None of the ${c.control_targets} targeted claims is supported without the causal ingredient.`)
                   : `${c.control_targets_fail} of ${c.control_targets} targeted claims not supported: ` +
                     "the lab cannot tell the effect from its absence."));
  } else if (lab.control_removes) {
    v.append(el("p", {class: "note"}, `Not run. Its control removes: ${lab.control_removes}. Run gradflow lab ${lab.name} --control ` +
                                      "(it writes the lab's folder with -control appended, which this page then shows) and write the page again."));
  } else {
    v.append(el("p", {class: "note"}, "This lab has no negative control."));
  }
  page.append(v);
  page.append(claimsSection(lab, result, control));
  page.append(figuresSection(result, control));
  if (result && (result.dose_response || []).length) page.append(doseSection(result));
  page.append(tablesSection(result, control));
  page.append(logSection(result, control));
  page.append(settingsSection(result, control));
  page.append(footer(`Written by gradflow from ${lab.name}.json (${result ? result.folder : control.folder}). Every number above is in ` +
                     "that file, and its free-form raw numbers (\"data\") stay there; nothing on this page is fetched."));
}

// The claims: lab/claims.cpp's rows (written before any run), with the lab's and the control's results.
function claimsSection(lab, result, control) {
  const s = el("section", {id: "claims"}, el("h2", {}, "Claims"));
  s.append(el("p", {class: "note"},
              "A paper claim is supported when its interval across seeds (Holm-adjusted across the lab's paper claims) lies " +
              "strictly on the claimed side of the threshold, contradicted when it lies strictly on the other side, and unsettled " +
              "when it contains the threshold; an exact check passes when its value lies on the claimed side. " +
              "The picture shows each interval (blue: the lab, grey: the control) against the " +
              "threshold (red) with the claimed side shaded."));
  const byId = run => Object.fromEntries(((run && run.claims) || []).map(c => [c.id, c]));
  const mine = byId(result), theirs = byId(control);
  // Rows: the table's, then any claim a run made that is not in it (a folder written before
  // lab/claims.cpp dropped or renamed that claim).
  const rows = lab.claims_table.slice();
  for (const run of [result, control])
    for (const c of (run && run.claims) || []) if (!rows.find(r => r.id === c.id)) rows.push(c);
  const table = el("table", {id: "claims-table"}, el("tr", {}, ["claim", "statement", "holds when", "the lab", "its control", "interval", "source"]
                                                       .map(h => el("th", {}, h))));
  for (const spec of rows) {
    const a = mine[spec.id], b = theirs[spec.id];
    const evidence = [[a, "the lab's numbers"], [b, "the control's numbers"]].filter(([x]) => x && x.evidence).map(
        ([x, what]) => el("details", {}, [el("summary", {}, what), el("div", {class: "note"}, x.evidence)]));
    table.append(el("tr", {}, [
      el("td", {}, [el("span", {class: "mono"}, spec.id), el("br"),
                    el("span", {class: "note"}, spec.kind + (spec.control_targets ? ", control target" : ""))]),
      el("td", {}, [spec.statement, ...evidence]),
      el("td", {}, [el("span", {class: "mono"}, `${spec.side === "above" ? ">" : "<"} ${fmt(spec.threshold)}`),
                    ...(a && a.design ? [el("br"), el("span", {class: "note"}, `smallest effect ${fmt(a.design.min_effect)}: ` +
                                                                             a.design.min_effect_reason)] : [])]),
      holdsCell(a),
      control || b ? holdsCell(b) : el("td", {class: "note"}, "—"),
      el("td", {}, intervalPlot(spec, a, b)),
      el("td", {class: "note"}, spec.source),
    ]));
  }
  s.append(table);
  return s;
}

function figuresSection(result, control) {
  const s = el("section", {id: "figures"}, el("h2", {}, "Figures"));
  const draw = (run, parent) => {
    for (const f of run.figures || []) {
      parent.append(el("h3", {}, f.name));
      if (f.svg) {
        // A picture, never markup: whatever the folder's file holds, no script in it runs here.
        parent.append(el("div", {class: "figure"}, svgPicture(f.svg, f.name)));
      } else {
        const why = f.missing ? "The file is missing from the folder." :
                    f.not_regular ? `It is ${f.not_regular}, not a regular file: not read.` :
                    `Too large to inline (${f.too_large} bytes): open it beside this page.`;
        parent.append(el("p", {class: "note"}, why));
      }
    }
    if (!(run.figures || []).length) parent.append(el("p", {class: "note"}, "This run wrote no figure."));
  };
  if (result) draw(result, s);
  if (control) {
    const d = el("details", {}, el("summary", {}, "the control's figures"));
    draw(control, d);
    s.append(d);
  }
  return s;
}

// The lab's dose-responses (NAME.json's "dose_response", lab/report.h): the mean statistic per level
// of the causal factor with its 95% t band across seeds, and each seed's trend, which the claim decides.
function doseSection(result) {
  const s = el("section", {id: "dose-response"}, el("h2", {}, "Dose-response"));
  s.append(el("p", {class: "note"}, "The lab's main statistic at each level of its causal factor: the mean over seeds (line) " +
                                    "and its 95% t interval (band). The claim is the trend, one value per seed."));
  for (const d of result.dose_response) {
    s.append(el("h3", {}, `${d.statistic} against ${d.factor}`));
    s.append(doseChart(d));
    s.append(el("p", {class: "mono"}, `${d.trend} per seed: ${(d.trends || []).map(fmt).join(", ")}`));
  }
  return s;
}

// One dose-response as an SVG line with its band: levels on the x axis (log when d.log_x).
function doseChart(d) {
  const W = 520, H = 260, left = 64, right = 16, top = 12, bottom = 40;
  const xs = d.levels, fx = d.log_x ? Math.log10 : (v => v);
  const ys = [...d.mean, ...d.lo, ...d.hi].filter(Number.isFinite);
  let y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (!(y1 > y0)) { y0 -= 1; y1 += 1; }
  const pad = (y1 - y0) * 0.06;
  y0 -= pad, y1 += pad;
  const a = fx(xs[0]), b = fx(xs[xs.length - 1]);
  const X = v => left + (b > a ? (fx(v) - a) / (b - a) : 0.5) * (W - left - right);
  const Y = v => top + (1 - (v - y0) / (y1 - y0)) * (H - top - bottom);
  const svg = svgEl("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "dose-chart"});
  svg.append(svgEl("rect", {x: left, y: top, width: W - left - right, height: H - top - bottom, fill: "none", stroke: "#d0d7de"}));
  for (const t of niceTicks(y0, y1, 5)) {
    if (t < y0 || t > y1) continue;
    svg.append(svgEl("line", {x1: left, x2: W - right, y1: Y(t), y2: Y(t), stroke: "#eaeef2"}));
    svg.append(svgEl("text", {x: left - 6, y: Y(t) + 4, "text-anchor": "end", "font-size": 11}, fmt(t)));
  }
  for (const v of xs) svg.append(svgEl("text", {x: X(v), y: H - bottom + 16, "text-anchor": "middle", "font-size": 11}, fmt(v)));
  svg.append(svgEl("text", {x: (left + W - right) / 2, y: H - 6, "text-anchor": "middle", "font-size": 12}, d.factor));
  const ok = xs.map((_, k) => [d.mean[k], d.lo[k], d.hi[k]].every(Number.isFinite));
  const pts = xs.map((v, k) => ok[k] ? [X(v), Y(d.mean[k])] : null).filter(p => p);
  const upper = xs.map((v, k) => ok[k] ? `${X(v)},${Y(d.hi[k])}` : null).filter(p => p);
  const lower = xs.map((v, k) => ok[k] ? `${X(v)},${Y(d.lo[k])}` : null).filter(p => p).reverse();
  svg.append(svgEl("polygon", {points: [...upper, ...lower].join(" "), fill: "#1f6feb", "fill-opacity": 0.18, stroke: "none"}));
  svg.append(svgEl("polyline", {points: pts.map(p => p.join(",")).join(" "), fill: "none", stroke: "#1f6feb", "stroke-width": 2}));
  xs.forEach((v, k) => {
    if (!ok[k]) return;
    const c = svgEl("circle", {cx: X(v), cy: Y(d.mean[k]), r: 3.5, fill: "#1f6feb"});
    c.append(svgEl("title", {}, `${d.factor} ${fmt(v)}: ${fmt(d.mean[k])} [${fmt(d.lo[k])}, ${fmt(d.hi[k])}] (${d.band})`));
    svg.append(c);
  });
  return svg;
}

// Every table the lab printed, as it printed it (numbers exact in the JSON, 4 significant digits here).
function tablesSection(result, control) {
  const s = el("section", {id: "tables"}, el("h2", {}, "Tables"));
  const draw = (run, parent) => {
    for (const [name, t] of Object.entries(run.tables || {})) {
      const d = el("details", {open: Object.keys(run.tables).length <= 3 ? "" : null}, el("summary", {}, `${name} (${t.rows.length} rows)`));
      const table = el("table", {}, el("tr", {}, t.columns.map(c => el("th", {}, c))));
      for (const r of t.rows)
        table.append(el("tr", {}, r.map(v => typeof v === "number" ? el("td", {class: "num"}, Number.isInteger(v) ? String(v) : fmt(v))
                                                                    : el("td", {}, String(v)))));
      d.append(table);
      parent.append(d);
    }
  };
  if (result) draw(result, s);
  if (control) {
    s.append(el("h3", {}, "the control's tables"));
    draw(control, s);
  }
  return s;
}

function logSection(result, control) {
  const s = el("section", {id: "log"}, el("h2", {}, "Log"));
  for (const [what, run] of [["the lab", result], ["the control", control]]) {
    if (!run) continue;
    const d = el("details", {}, el("summary", {}, `what ${what} printed (${(run.log || []).length} lines)`));
    d.append(el("pre", {class: "log"}, (run.log || []).join("\n") + "\n" + ((run.check || {}).line || "")));
    s.append(d);
  }
  return s;
}

function settingsSection(result, control) {
  const s = el("section", {id: "settings"}, el("h2", {}, "Settings"));
  const run = result || control;
  const rows = Object.entries(run.settings || {}).map(([k, v]) => el("tr", {}, [el("td", {class: "mono"}, k), el("td", {class: "mono"}, String(v))]));
  s.append(el("table", {}, [el("tr", {}, [el("th", {}, "setting"), el("th", {}, "value")]), ...rows]));
  s.append(el("p", {class: "note"}, `Reproduce: gradflow lab ${run.lab}` + (result ? "" : " --control") + " with these settings as flags."));
  return s;
}

// ---------------------------------------------------------------- the index

function indexPage(page, data) {
  page.append(...header("gradflow lab: every lab and its negative control", `from ${data.folder}`, []));
  page.append(el("p", {class: "note"},
                 "Each lab's paper claims are supported, contradicted or unsettled, and its exact checks must pass; each control, a " +
                 "placebo (two groups of seeds of one arm) or the protocol without the causal ingredient, must not find the effect. " +
                 "Click a lab for its page."));
  const columns = ["lab", "question and paper", "the lab", "seconds", "its control", "seconds"];
  const table = el("table", {id: "labs-table"}, el("tr", {}, columns.map(h => el("th", {}, h))));
  let ok = true, total = 0;
  for (const row of data.labs) {
    const r = row.result, c = row.control;
    const labOk = r && r.agrees;
    const ablationOk = c && c.control_targets > 0 && c.control_targets_fail === c.control_targets;
    const cOk = !row.lab.control_removes || (c && (c.placebo ? c.placebo_ok : ablationOk));
    ok = ok && labOk && cOk;
    total += (r ? r.seconds : 0) + (c ? c.seconds : 0);
    table.append(el("tr", {}, [
      el("td", {}, el("a", {href: hrefOf(row.page)}, row.lab.name)),
      el("td", {}, [row.lab.title, el("br"), el("span", {class: "note"}, row.lab.reference)]),
      el("td", {}, r ? [el("span", {class: r.agrees ? "holds" : r.contradicted ? "fails" : "note"},
                           r.agrees ? "agrees" : r.contradicted ? "DISAGREES" : "unsettled"), el("br"),
                        el("span", {class: "note"}, `supports ${r.paper_claims_hold}, contradicts ${r.contradicted || 0}, ` +
                                                    `unsettled ${r.unsettled || 0} of ${r.paper_claims}; ` +
                                                    `${r.exact_checks_pass} of ${r.exact_checks} checks pass`)]
                   : el("span", {class: "note"}, "not run")),
      el("td", {class: "num"}, r ? fmt(r.seconds) : ""),
      el("td", {}, c ? (c.placebo ? [el("span", {class: c.placebo_ok ? "holds" : "fails"},
                                        c.placebo_ok ? "placebo within 5%" : "PLACEBO OVER 5%")]
                                  : [el("span", {class: cOk ? "holds" : "fails"}, cOk ? "no target supported" : "A TARGET SUPPORTED"), el("br"),
                                     el("span", {class: "note"}, `${c.control_targets_fail} of ${c.control_targets} targets not supported`)])
                   : el("span", {class: "note"}, row.lab.control_removes ? "not run" : "no control")),
      el("td", {class: "num"}, c ? fmt(c.seconds) : ""),
    ]));
  }
  page.append(el("div", {class: "verdict " + (ok ? "agrees" : "disagrees")},
                 ok ? "Every lab's claims are supported and every control finds no effect." :
                      "Not every lab's claims are supported, or a control found an effect: see each row."));
  page.append(table);
  page.append(el("p", {class: "note"}, `${data.labs.length} labs, ${fmtSeconds(total)} in all.`));
  page.append(footer("Written by gradflow from each lab's NAME.json; nothing on this page is fetched."));
}

main();
