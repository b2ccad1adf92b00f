"""The report stage's page (reports/report.html) of the built sample project: it opens in a real
headless Chromium with the network off, every chart is drawn (boxes and pixels), nothing is fetched,
and the same lake gives the same bytes. `dvc metrics show` of the same project fits 120 columns."""

from __future__ import annotations

import base64
import os
import re
import shutil
from pathlib import Path

import yaml

from tracelake.core.stage import HEADLINE
from tracelake.curate.composition import build_report
from tracelake.explore import svg
from tracelake.explore.report_page import render_report

from ..helpers import chromium_page, run_ok

CHART_LABELS = [
    *(f"{source}: in, dropped by each rule, kept" for source in ("nl2bash", "superuser", "swesmith", "tezos")),
    "Rows per source, per scale",
    "Tasks by rollouts per task (share of each scale's tasks)",
    "Rows by assistant turns (share of each scale's rows)",
    "Rows by length in 1,024-token buckets (share of each scale's rows)",
]

# A chart's screenshot, decoded by the browser itself: the share of pixels darker than the white
# background, and how many pixels show each series colour (within 6 per channel: antialiasing).
INK = """async ([b64, colours]) => {
  const img = new Image();
  img.src = "data:image/png;base64," + b64;
  await img.decode();
  const canvas = document.createElement("canvas");
  canvas.width = img.width; canvas.height = img.height;
  const ctx = canvas.getContext("2d");
  ctx.drawImage(img, 0, 0);
  const d = ctx.getImageData(0, 0, img.width, img.height).data;
  const hits = colours.map(() => 0);
  let inked = 0;
  for (let i = 0; i < d.length; i += 4) {
    if (d[i] + d[i + 1] + d[i + 2] < 600) inked++;
    colours.forEach((c, k) => {
      if (Math.abs(d[i] - c[0]) <= 6 && Math.abs(d[i + 1] - c[1]) <= 6 && Math.abs(d[i + 2] - c[2]) <= 6) hits[k]++;
    });
  }
  return {inked: inked / (d.length / 4), hits};
}"""


def rgb(colour: str) -> list[int]:
    return [int(colour[i : i + 2], 16) for i in (1, 3, 5)]


def test_report_page_renders_offline_in_headless_chromium(sample_project, tmp_path):
    page_file = tmp_path / "report.html"  # alone in a directory: nothing beside it to load either
    shutil.copy(sample_project / "reports" / "report.html", page_file)
    text = page_file.read_text()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", text, re.I)
    assert not re.search(r"https?://", text.replace('xmlns="http://www.w3.org/2000/svg"', ""))
    assert "<script" not in text and "<link" not in text and "@import" not in text and "url(" not in text

    with chromium_page(1200, 4000) as (page, messages, failures, dialogs):
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.context.set_offline(True)
        page.route(
            "**/*", lambda route: route.abort() if not route.request.url.startswith("file:") else route.continue_()
        )
        page.goto(page_file.as_uri(), wait_until="load")
        assert page.title() == "tracelake report"
        assert page.evaluate("document.documentElement.scrollHeight") <= 4000  # all of it in the viewport
        assert "offline view" in page.inner_text("p.note")
        charts = page.locator("svg.chart")
        labels = [charts.nth(i).get_attribute("aria-label") for i in range(charts.count())]
        assert labels == CHART_LABELS
        for i, label in enumerate(labels):
            chart = charts.nth(i)
            box = chart.bounding_box()
            assert box and box["width"] > 300 and box["height"] > 100, (label, box)
            marks = chart.locator("rect.bar, polyline.line")
            boxes = [marks.nth(j).bounding_box() for j in range(marks.count())]
            assert boxes and max(b["width"] for b in boxes) > 50 and max(b["height"] for b in boxes) > 10, label
            # drawn: below the legend, the series' colours are on screen (the funnel's one; of four
            # sources or scales at least two: a scale's line can lie under another's where they agree);
            # the viewport holds the whole page, so boxes are page coordinates
            colours, legend = (svg.PALETTE[:1], 0) if i < 4 else (svg.PALETTE[:4], 50)
            clip = {**box, "y": box["y"] + legend, "height": box["height"] - legend}
            shot = base64.b64encode(page.screenshot(clip=clip)).decode()
            ink = page.evaluate(INK, [shot, [rgb(c) for c in colours]])
            seen = sum(n >= 20 for n in ink["hits"])
            assert 0.01 < ink["inked"] < 0.9 and seen >= min(len(colours), 2), (label, ink)
        assert page.locator("svg.chart polyline.line").count() == 3 * 4  # three distributions, four scales
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 50_000
    assert requests == [page_file.as_uri()]
    assert messages == [] and failures == [] and dialogs == []
    keep = os.environ.get("TRACELAKE_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "report.png")


def test_report_page_is_the_same_bytes_for_the_same_lake(sample_project):
    scales = yaml.safe_load((sample_project / "params.yaml").read_text())["scales"]
    pages = [render_report(*build_report(sample_project / "lake", scales)).encode() for _ in range(2)]
    assert pages[0] == pages[1] == (sample_project / "reports" / "report.html").read_bytes()


def test_dvc_metrics_show_fits_120_columns(sample_project):
    """Each stage's DVC metrics file holds the same few headline keys, so `dvc metrics show` (the
    union of all files' keys as columns) stays one narrow table; the counts stay in metrics/*.json."""
    out = run_ok(["dvc", "metrics", "show"], sample_project)
    lines = out.rstrip("\n").splitlines()
    assert max(map(len, lines)) <= 120, out
    header = lines[0].split()
    assert header[0] == "Path" and set(header[1:]) <= set(HEADLINE), header
    paths = [line.split()[0] for line in lines[1:]]
    assert paths and all(p.startswith("metrics/headline/") for p in paths), paths
    assert "metrics/headline/filter.json" in paths and "metrics/headline/select/1k.json" in paths
    assert (sample_project / "metrics" / "filter.json").is_file()  # the detailed counts, beside
