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
        f'<svg class="chart" role="img" aria-label="{escape(title)}" width="{label_w + chart_w + 90}" '
        f'height="{height}" viewBox="0 0 {label_w + chart_w + 90} {height}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="0" y="16" {FONT} font-weight="600">{escape(title)}</text>',
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
        f'<svg class="chart" role="img" aria-label="{escape(title)}" width="{label_w + 2 * half + 70}" '
        f'height="{height}" viewBox="0 0 {label_w + 2 * half + 70} {height}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="0" y="16" {FONT} font-weight="600">{escape(title)}</text>',
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
        f'<svg class="chart" role="img" aria-label="{escape(title)}" width="{left + chart_w + 20}" '
        f'height="{total_h}" viewBox="0 0 {left + chart_w + 20} {total_h}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="0" y="16" {FONT} font-weight="600">{escape(title)}</text>',
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
    points = []
    for i, v in enumerate(fb):
        y = base - chart_h * v / ymax
        points += [f"{left + i * bw:.1f},{y:.1f}", f"{left + (i + 1) * bw:.1f},{y:.1f}"]
    if points:
        out.append(
            f'<polyline class="line" points="{" ".join(points)}" fill="none" stroke="{B_COLOR}" stroke-width="2.5"/>'
        )
    out.append(
        f'<line x1="{left}" y1="{base}" x2="{left + chart_w}" y2="{base}" stroke="#999"/>'
        f'<text x="{left - 6}" y="{top_pad + 10}" text-anchor="end" {FONT} fill="#444">{ymax:.0%}</text>'
        f'<text x="{left - 6}" y="{base}" text-anchor="end" {FONT} fill="#444">0</text>'
        f'<text x="{left}" y="{base + 16}" {FONT} fill="#444">{_fmt(lo)}</text>'
        f'<text x="{left + chart_w}" y="{base + 16}" text-anchor="end" {FONT} fill="#444">'
        f"{_fmt(hi)} {escape(unit)}</text></svg>"
    )
    return "".join(out)
