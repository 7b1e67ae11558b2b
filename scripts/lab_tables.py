#!/usr/bin/env python3
"""Tables for docs/labs.md from the output of `gradflow lab all --out DIR` (each DIR/NAME/NAME.json
and DIR/NAME-control/NAME.json): the labs' outcomes and times, the claims, and the seed arithmetic
of issue 35's item 2 (how many seeds each paper claim needs to be settled at the effect it showed,
and its design from the JSON: the smallest effect, the pilot's sd and the seeds that settle it).

  python3 scripts/lab_tables.py runs/lab > tables.md

Standard library only. The seed arithmetic: a paper claim with per-seed standard deviation sd and
distance d between its mean and its threshold is settled by n seeds when
t(1 - 0.025 / m, n - 1) * sd / sqrt(n) < d, with m the lab's paper claims (Holm's strictest level,
which the first claim decided is held to)."""
import glob
import json
import math
import os
import sys


def incomplete_beta(a, b, x):
    """I_x(a, b), by the continued fraction (as lab/report.cpp computes it)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):
        return 1 - incomplete_beta(b, a, 1 - x)
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 301):
        for half in range(2):
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)) if half == 0 else -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= c * d
            if half == 1 and abs(c * d - 1) < 1e-15:
                return front * h / a
    return front * h / a


def t_cdf(t, df):
    tail = 0.5 * incomplete_beta(df / 2, 0.5, df / (df + t * t))
    return 1 - tail if t > 0 else tail


def t_quantile(p, df):
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def seeds_needed(values, threshold, m, limit=200):
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    d = abs(mean - threshold)
    if sd == 0:
        return 2
    if d == 0:
        return None
    for k in range(2, limit + 1):
        if t_quantile(1 - 0.025 / m, k - 1) * sd / math.sqrt(k) < d:
            return k
    return None


def load(folder):
    runs = {}
    for path in sorted(glob.glob(os.path.join(folder, "*", "*.json"))):
        j = json.load(open(path))
        if "claims" not in j:
            continue
        kind = "ablate" if j.get("ablate") else "control" if j.get("control") else "lab"
        runs.setdefault(j["lab"], {})[kind] = j
    return runs


def fmt(x):
    return "-" if x is None else f"{x:.3g}"


def main(folder):
    runs = load(folder)
    print("| lab | paper claims: supported / contradicted / unsettled | checks | control | lab s | control s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, r in runs.items():
        lab = r.get("lab")
        if not lab:
            continue
        c = lab["check"]
        ctl = r.get("control") or r.get("ablate")
        if r.get("control") and "placebo" in r["control"]:
            rates = [p for p in r["control"]["placebo"]["claims"] if p["splits"]]
            worst = max(p["supported"] / p["splits"] for p in rates) if rates else float("nan")
            # "splits" counts the placebo's disjoint pools (lab/verdict.h)
            hits = max(p["supported"] for p in rates) if rates else 0
            ctext = f"placebo: at most {hits} of {rates[0]['splits'] if rates else 0} pools supported"
        elif ctl:
            ctext = f"ablation: {ctl['check']['control_targets_fail']} of {ctl['check']['control_targets']} targets not supported"
        else:
            ctext = "none"
        extra = r.get("ablate")
        if extra and r.get("control"):
            ctext += f"; ablation: {extra['check']['control_targets_fail']} of {extra['check']['control_targets']} targets not supported"
        secs = sum(x.get("seconds", 0) for k, x in r.items() if k != "lab")
        print(f"| `{name}` | {c['supported']} / {c['contradicted']} / {c['unsettled']} of {c['paper_claims']} | "
              f"{c['exact_checks_pass']} of {c['exact_checks']} | {ctext} | {lab['seconds']:.1f} | {secs:.1f} |")
    print()
    print("| lab | claim | outcome | mean [95% t] | decided on | per-seed sd | seeds | seeds to settle the effect seen | "
          "design: smallest effect, pilot sd, seeds |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r in runs.items():
        lab = r.get("lab")
        if not lab:
            continue
        papers = [c for c in lab["claims"] if c["kind"] == "paper"]
        for c in papers:
            v = [x for x in c["values"] if x is not None]
            mean = sum(v) / len(v)
            sd = math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0
            need = seeds_needed(v, c["threshold"], len(papers))
            dec = c.get("decisive", {})
            d = c.get("design")  # lab/claims.cpp's smallest effect and pilot sd (docs/labs.md, "Seeds by design")
            design = f"{d['min_effect']:g}, {d['pilot_sd']:.3g}, {d['seeds_needed']}" if d else "none stated"
            outcome = c["outcome"] + (" by design" if d and d["by_design"] else "")
            print(f"| {name} | `{c['id']}` | {outcome} | {fmt(c['mean'])} [{fmt(c['lo'])}, {fmt(c['hi'])}] "
                  f"{'>' if c['side'] == 'above' else '<'} {c['threshold']:g} | [{fmt(dec.get('lo'))}, {fmt(dec.get('hi'))}] "
                  f"({dec.get('method', '')}) | {sd:.3g} | {len(v)} | {need if need else 'more than 200'} | {design} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/lab")
