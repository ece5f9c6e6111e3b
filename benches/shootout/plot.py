"""A hand-written SVG, one panel per landscape: the true speed-up of each
contestant's *confirmed* recommendation against engine time (comparisons
included), the median over seeds; dashed, a tuner's best trial as the tool
gives it (its search time only)."""

import math
import statistics

COLORS = {"loop-bandit": "#d62728", "loop-model": "#ff7f0e", "tpe": "#1f77b4",
          "random": "#2ca02c", "coordinate": "#9467bd"}


def step_value(traj, t):
    """The true log ratio of the recommendation current at engine time t."""
    v = 0.0
    for ti, tl in traj:
        if ti <= t and tl is not None:
            v = tl
    return v


def panel(report, x0, y0, w, h, out):
    L, R, T, B = 60, 10, 30, 40
    budget = report["budget"]
    opt = report["optimum"]
    ts = [budget * i / 200 for i in range(201)]
    lines = {}
    for c in dict.fromkeys(r["contestant"] for r in report["rows"]):
        rows = [r for r in report["rows"] if r["contestant"] == c]
        conf = [statistics.median(math.exp(-step_value(r["confirmed_trajectory"], t)) for r in rows) for t in ts]
        raw = None
        if not c.startswith("loop-"):
            raw = [statistics.median(math.exp(-step_value(r["trajectory"], t)) for r in rows) for t in ts]
        lines[c] = (conf, raw)
    top = max([math.exp(-opt), 1.0] + [max(v) for conf, raw in lines.values() for v in (conf, raw or conf)])
    ymax, ymin = top * 1.2, min([1.0] + [min(v) for conf, raw in lines.values() for v in (conf, raw or conf)]) / 1.1
    span = math.log(ymax) - math.log(ymin)
    ly = lambda y: y0 + T + (h - T - B) * (1 - (math.log(y) - math.log(ymin)) / span)  # noqa: E731
    lx = lambda t: x0 + L + (w - L - R) * t / budget  # noqa: E731
    out.append(f'<text x="{x0 + L}" y="{y0 + 20}" font-size="13">{report["name"]}: {report["title"]} '
               f'(median of {report["seeds"]} seed(s))</text>')
    out.append(f'<line x1="{x0 + L}" y1="{y0 + h - B}" x2="{x0 + w - R}" y2="{y0 + h - B}" stroke="black"/>')
    out.append(f'<line x1="{x0 + L}" y1="{y0 + T}" x2="{x0 + L}" y2="{y0 + h - B}" stroke="black"/>')
    ticks = [ymin * (ymax / ymin) ** (i / 4) for i in range(5)]
    for y in ticks:
        out.append(f'<line x1="{x0 + L - 4}" y1="{ly(y):.1f}" x2="{x0 + w - R}" y2="{ly(y):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x0 + L - 6}" y="{ly(y) + 4:.1f}" text-anchor="end" font-size="10">{y:.2f}x</text>')
    for i in range(6):
        t = budget * i / 5
        out.append(f'<text x="{lx(t):.1f}" y="{y0 + h - B + 14}" text-anchor="middle" font-size="10">{t:.0f}</text>')
    out.append(f'<text x="{x0 + (L + w - R) / 2}" y="{y0 + h - 8}" text-anchor="middle" font-size="11">'
               f'engine seconds</text>')
    for level, label in ((math.exp(-opt), "optimum"), (math.exp(-0.9 * opt), "90%")):
        if ymin < level < ymax:
            out.append(f'<line x1="{x0 + L}" y1="{ly(level):.1f}" x2="{x0 + w - R}" y2="{ly(level):.1f}" '
                       f'stroke="#555" stroke-dasharray="2,3"/>')
            out.append(f'<text x="{x0 + w - R - 2}" y="{ly(level) - 3:.1f}" text-anchor="end" font-size="10" '
                       f'fill="#555">{label}</text>')
    for c, (conf, raw) in lines.items():
        col = COLORS.get(c, "#333")
        pts = " ".join(f"{lx(t):.1f},{ly(v):.1f}" for t, v in zip(ts, conf))
        out.append(f'<polyline fill="none" stroke="{col}" stroke-width="2" points="{pts}"/>')
        if raw:
            pts = " ".join(f"{lx(t):.1f},{ly(v):.1f}" for t, v in zip(ts, raw))
            out.append(f'<polyline fill="none" stroke="{col}" stroke-width="1" stroke-dasharray="5,4" '
                       f'points="{pts}"/>')


def write_svg(path, doc):
    reports = list(doc["landscapes"].values())
    W, PH, LEG = 760, 300, 150
    H = PH * len(reports) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W + LEG}" height="{H}" font-family="sans-serif" '
           f'font-size="12">', f'<rect width="{W + LEG}" height="{H}" fill="white"/>',
           '<text x="10" y="18" font-size="14">True speed-up of the confirmed recommendation vs engine time '
           '(dashed: a tuner\'s best trial, unconfirmed)</text>']
    for i, rep in enumerate(reports):
        panel(rep, 0, 30 + i * PH, W, PH, out)
    names = list(dict.fromkeys(r["contestant"] for rep in reports for r in rep["rows"]))
    for i, c in enumerate(names):
        y = 60 + 18 * i
        out.append(f'<line x1="{W + 10}" y1="{y}" x2="{W + 30}" y2="{y}" stroke="{COLORS.get(c, "#333")}" '
                   f'stroke-width="2"/>')
        out.append(f'<text x="{W + 34}" y="{y + 4}">{c}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")
