"""Small inline SVG charts for self-contained HTML reports: no script, no external file, same data ->
same bytes. Each function returns one <svg> element as a string; hovering a bar shows its value
(an SVG <title>)."""

from __future__ import annotations

from html import escape

A_COLOR = "#5b7db1"
B_COLOR = "#e08a3c"
UP_COLOR = "#3f9a5a"
DOWN_COLOR = "#c8504b"
FONT = 'font-family="system-ui, sans-serif" font-size="12"'


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}"


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1
    magnitude = 10 ** (len(str(int(v))) - 1)
    for step in (1, 2, 2.5, 5, 10):
        if v <= step * magnitude:
            return step * magnitude
    return 10 * magnitude


def _open(title: str, width: float, height: float) -> str:
    """An <svg class="chart"> of this size, named and titled by `title`."""
    return (
        f'<svg class="chart" role="img" aria-label="{escape(title)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
        f'<text x="0" y="16" {FONT} font-weight="600">{escape(title)}</text>'
    )


def _steps(values: list[float], left: float, bw: float, base: float, chart_h: float, ymax: float) -> str:
    """A step line's points: each value level across its bin."""
    points = []
    for i, v in enumerate(values):
        y = base - chart_h * v / ymax
        points += [f"{left + i * bw:.1f},{y:.1f}", f"{left + (i + 1) * bw:.1f},{y:.1f}"]
    return " ".join(points)


def _share_axes(left: float, chart_w: float, top_pad: float, base: float, ymax: float, lo, hi, unit: str) -> str:
    """The x axis of a distribution chart, its first and last bin, and its 0 and top share; closes the <svg>."""
    return (
        f'<line x1="{left}" y1="{base}" x2="{left + chart_w}" y2="{base}" stroke="#999"/>'
        f'<text x="{left - 6}" y="{top_pad + 10}" text-anchor="end" {FONT} fill="#444">{ymax:.0%}</text>'
        f'<text x="{left - 6}" y="{base}" text-anchor="end" {FONT} fill="#444">0</text>'
        f'<text x="{left}" y="{base + 16}" {FONT} fill="#444">{_fmt(lo)}</text>'
        f'<text x="{left + chart_w}" y="{base + 16}" text-anchor="end" {FONT} fill="#444">'
        f"{_fmt(hi)} {escape(unit)}</text></svg>"
    )


def legend(x: float, y: float, labels: list[tuple[str, str]]) -> str:
    parts = []
    for i, (text, color) in enumerate(labels):
        lx = x + i * 150
        parts.append(
            f'<rect x="{lx}" y="{y - 10}" width="12" height="12" fill="{color}"/>'
            f'<text x="{lx + 18}" y="{y}" {FONT}>{escape(text)}</text>'
        )
    return "".join(parts)


def grouped_bars(
    title: str, categories: list[str], a: list[float], b: list[float], labels: tuple[str, str] = ("A", "B")
) -> str:
    """Horizontal bars, one pair (A, B) per category."""
    label_w, chart_w, row_h = 190, 420, 34
    height = 50 + row_h * len(categories) + 20
    top = _nice_max(max(a + b + [0]))
    out = [
        _open(title, label_w + chart_w + 90, height),
        legend(label_w, 38, [(labels[0], A_COLOR), (labels[1], B_COLOR)]),
    ]
    for i, cat in enumerate(categories):
        y = 50 + i * row_h
        out.append(f'<text x="{label_w - 8}" y="{y + 20}" text-anchor="end" {FONT}>{escape(cat)}</text>')
        for j, (vals, color) in enumerate(((a, A_COLOR), (b, B_COLOR))):
            w = chart_w * vals[i] / top
            by = y + 4 + j * 13
            out.append(
                f'<rect class="bar" x="{label_w}" y="{by}" width="{w:.1f}" height="12" fill="{color}">'
                f"<title>{escape(cat)} {labels[j]}: {_fmt(vals[i])}</title></rect>"
                f'<text x="{label_w + w + 4:.1f}" y="{by + 10}" {FONT} fill="#444">{_fmt(vals[i])}</text>'
            )
    out.append(f'<line x1="{label_w}" y1="46" x2="{label_w}" y2="{height - 16}" stroke="#999"/></svg>')
    return "".join(out)


def diverging_bars(title: str, categories: list[str], values: list[float]) -> str:
    """Horizontal bars left (negative, red) or right (positive, green) of a zero line."""
    label_w, half, row_h = 330, 220, 24
    height = 34 + row_h * len(categories) + 10
    top = _nice_max(max([abs(v) for v in values] + [0]))
    zero = label_w + half
    out = [
        _open(title, label_w + 2 * half + 70, height),
    ]
    for i, (cat, v) in enumerate(zip(categories, values)):
        y = 34 + i * row_h
        w = half * abs(v) / top
        x = zero if v >= 0 else zero - w
        color = UP_COLOR if v >= 0 else DOWN_COLOR
        tx = zero + w + 4 if v >= 0 else zero - w - 4
        anchor = "start" if v >= 0 else "end"
        out.append(
            f'<text x="{label_w - 8}" y="{y + 13}" text-anchor="end" {FONT}>{escape(cat)}</text>'
            f'<rect class="bar" x="{x:.1f}" y="{y + 2}" width="{max(w, 1):.1f}" height="15" fill="{color}">'
            f"<title>{escape(cat)}: {v:+,}</title></rect>"
            f'<text x="{tx:.1f}" y="{y + 14}" text-anchor="{anchor}" {FONT} fill="#444">{v:+,}</text>'
        )
    out.append(f'<line x1="{zero}" y1="30" x2="{zero}" y2="{height - 6}" stroke="#999"/></svg>')
    return "".join(out)


def histogram(
    title: str,
    lo: float,
    hi: float,
    width: float,
    a: list[int],
    b: list[int],
    unit: str,
    labels: tuple[str, str] = ("A", "B"),
) -> str:
    """Two histograms on shared bins, as fractions of each side's rows (so different sizes compare):
    A as filled bars, B as an outlined step line over them."""
    chart_w, chart_h, left, top_pad = 560, 180, 50, 44
    n = len(a)
    sa, sb = sum(a) or 1, sum(b) or 1
    fa, fb = [v / sa for v in a], [v / sb for v in b]
    ymax = max(fa + fb + [1e-9])
    bw = chart_w / max(n, 1)
    total_h = top_pad + chart_h + 40
    out = [
        _open(title, left + chart_w + 20, total_h),
        legend(left, 34, [(f"{labels[0]} (bars)", A_COLOR), (f"{labels[1]} (line)", B_COLOR)]),
    ]
    base = top_pad + chart_h
    for i, v in enumerate(fa):
        h = chart_h * v / ymax
        start, end = lo + i * width, lo + (i + 1) * width - 1
        span = _fmt(start) if width == 1 else f"{_fmt(start)}–{_fmt(end)}"
        out.append(
            f'<rect class="bar" x="{left + i * bw:.1f}" y="{base - h:.1f}" width="{max(bw - 1, 1):.1f}" '
            f'height="{h:.1f}" fill="{A_COLOR}" fill-opacity="0.75"><title>{span} {unit}: '
            f"{labels[0]} {a[i]:,} ({fa[i]:.1%}), {labels[1]} {b[i]:,} ({fb[i]:.1%})</title></rect>"
        )
    if fb:
        out.append(
            f'<polyline class="line" points="{_steps(fb, left, bw, base, chart_h, ymax)}" fill="none" '
            f'stroke="{B_COLOR}" stroke-width="2.5"/>'
        )
    out.append(_share_axes(left, chart_w, top_pad, base, ymax, lo, hi, unit))
    return "".join(out)


# Several series (the scales, the sources) in one chart: one colour each, in this order.
PALETTE = (A_COLOR, B_COLOR, UP_COLOR, DOWN_COLOR, "#8a6bb1", "#6f6f6f", "#b59b2f", "#3a9fb0")


def hbars(title: str, categories: list[str], values: list[float], color: str = A_COLOR) -> str:
    """Horizontal bars, one per category, each labelled with its value."""
    label_w, chart_w, row_h = 190, 260, 20
    height = 30 + row_h * len(categories) + 8
    top = _nice_max(max(values + [0]))
    width = label_w + chart_w + 70
    out = [
        _open(title, width, height),
    ]
    for i, (cat, v) in enumerate(zip(categories, values)):
        y, w = 30 + i * row_h, chart_w * v / top
        out.append(
            f'<text x="{label_w - 8}" y="{y + 12}" text-anchor="end" {FONT}>{escape(cat)}</text>'
            f'<rect class="bar" x="{label_w}" y="{y + 2}" width="{w:.1f}" height="13" fill="{color}">'
            f"<title>{escape(cat)}: {_fmt(v)}</title></rect>"
            f'<text x="{label_w + w + 4:.1f}" y="{y + 13}" {FONT} fill="#444">{_fmt(v)}</text>'
        )
    out.append(f'<line x1="{label_w}" y1="28" x2="{label_w}" y2="{height - 6}" stroke="#999"/></svg>')
    return "".join(out)


def stacked_bars(title: str, categories: list[str], series: list[tuple[str, list[float]]]) -> str:
    """One horizontal bar per category, split into the series (in order, one colour each)."""
    label_w, chart_w, row_h = 110, 460, 26
    legend_rows = (len(series) + 3) // 4
    top_pad = 30 + 18 * legend_rows
    height = top_pad + row_h * len(categories) + 8
    totals = [sum(vals[i] for _, vals in series) for i in range(len(categories))]
    top = _nice_max(max(totals + [0]))
    width = label_w + chart_w + 80
    out = [
        _open(title, width, height),
    ]
    for r in range(legend_rows):
        row = series[4 * r : 4 * r + 4]
        out.append(legend(label_w, 36 + 18 * r, [(name, PALETTE[4 * r + j]) for j, (name, _) in enumerate(row)]))
    for i, cat in enumerate(categories):
        y, x = top_pad + i * row_h, float(label_w)
        out.append(f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end" {FONT}>{escape(cat)}</text>')
        for j, (name, vals) in enumerate(series):
            w = chart_w * vals[i] / top
            out.append(
                f'<rect class="bar" x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="16" '
                f'fill="{PALETTE[j % len(PALETTE)]}"><title>{escape(cat)} {escape(name)}: {_fmt(vals[i])}</title></rect>'
            )
            x += w
        out.append(f'<text x="{x + 4:.1f}" y="{y + 15}" {FONT} fill="#444">{_fmt(totals[i])}</text>')
    out.append(f'<line x1="{label_w}" y1="{top_pad - 4}" x2="{label_w}" y2="{height - 6}" stroke="#999"/></svg>')
    return "".join(out)


def share_lines(title: str, xs: list[int], series: list[tuple[str, list[float]]], unit: str) -> str:
    """Several distributions over the same bins `xs` (each series the share of its rows in each bin),
    one step line each, so datasets of different sizes compare."""
    chart_w, chart_h, left = 560, 180, 50
    legend_rows = (len(series) + 3) // 4
    top_pad = 30 + 18 * legend_rows
    ymax = max([v for _, vals in series for v in vals] + [1e-9])
    bw = chart_w / max(len(xs), 1)
    total_h = top_pad + chart_h + 40
    width = left + chart_w + 20
    base = top_pad + chart_h
    out = [
        _open(title, width, total_h),
    ]
    for r in range(legend_rows):
        row = series[4 * r : 4 * r + 4]
        out.append(legend(left, 36 + 18 * r, [(name, PALETTE[4 * r + j]) for j, (name, _) in enumerate(row)]))
    for j, (name, vals) in enumerate(series):
        tip = ", ".join(f"{_fmt(x)}: {v:.1%}" for x, v in zip(xs, vals) if v)
        out.append(
            f'<polyline class="line" points="{_steps(vals, left, bw, base, chart_h, ymax)}" fill="none" '
            f'stroke="{PALETTE[j % len(PALETTE)]}" stroke-width="2"><title>{escape(name)}: {tip}</title></polyline>'
        )
    lo, hi = (xs[0], xs[-1]) if xs else (0, 0)
    out.append(_share_axes(left, chart_w, top_pad, base, ymax, lo, hi, unit))
    return "".join(out)
