"""A hand-written SVG: true speed-up of the current recommendation against
engine time, one line per contestant, the median over seeds."""

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


def write_svg(path, report):
    W, H, L, R, T, B = 760, 440, 70, 170, 40, 50
    budget = report["budget"]
    opt = report["optimum"]
    ts = [budget * i / 200 for i in range(201)]
    lines = {}
    for c in dict.fromkeys(r["contestant"] for r in report["rows"]):
        trajs = [r["trajectory"] for r in report["rows"] if r["contestant"] == c]
        lines[c] = [statistics.median(math.exp(-step_value(tr, t)) for tr in trajs) for t in ts]
    ymax = max([math.exp(-opt)] + [max(v) for v in lines.values()]) * 1.15
    ly = lambda y: T + (H - T - B) * (1 - math.log(y) / math.log(ymax))  # noqa: E731
    lx = lambda x: L + (W - L - R) * x / budget  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="22" font-size="14">True speed-up of the current recommendation vs engine time '
           f'(median of {report["seeds"]} seed(s))</text>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>']
    y = 1.0
    while y <= ymax:
        out.append(f'<line x1="{L - 4}" y1="{ly(y):.1f}" x2="{W - R}" y2="{ly(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 8}" y="{ly(y) + 4:.1f}" text-anchor="end">{y:g}x</text>')
        y *= 2
    for i in range(6):
        x = budget * i / 5
        out.append(f'<text x="{lx(x):.1f}" y="{H - B + 18}" text-anchor="middle">{x:.0f}</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">engine seconds (sum of engine-run wall time)</text>')
    for level, label in ((math.exp(-opt), "grid optimum"), (math.exp(-0.9 * opt), "90% of its gain")):
        out.append(f'<line x1="{L}" y1="{ly(level):.1f}" x2="{W - R}" y2="{ly(level):.1f}" stroke="#555" stroke-dasharray="5,4"/>')
        out.append(f'<text x="{W - R + 4}" y="{ly(level) + 4:.1f}" fill="#555">{label}</text>')
    for i, (c, vs) in enumerate(lines.items()):
        pts = " ".join(f"{lx(t):.1f},{ly(v):.1f}" for t, v in zip(ts, vs))
        col = COLORS.get(c, "#333")
        out.append(f'<polyline fill="none" stroke="{col}" stroke-width="2" points="{pts}"/>')
        out.append(f'<line x1="{W - R + 10}" y1="{T + 60 + 18 * i}" x2="{W - R + 30}" y2="{T + 60 + 18 * i}" stroke="{col}" stroke-width="2"/>')
        out.append(f'<text x="{W - R + 34}" y="{T + 64 + 18 * i}">{c}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")
