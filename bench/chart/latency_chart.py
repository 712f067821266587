"""Draws the latency distributions of a bench run: python latency_chart.py RESULTS.json OUT.png

Each panel is a percentile spectrum (HdrHistogram style): x is the percentile on a log scale of
1/(1-q), so the tail gets as much room as the median; y is latency in ms, also on a log scale.
One line per system.
Input is the JSON that bench/main.ts writes (the `spectra` of each scenario).
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.ticker import FixedFormatter, FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator  # noqa: E402

SYSTEM_STYLE = {
    "A": ("#444444", "A backend direct"),
    "B": ("#1f77b4", "B plain Envoy"),
    "C": ("#d62728", "C this gateway"),
    "D": ("#2ca02c", "D Envoy mcp_router"),
    "E": ("#ff7f0e", "E naive Node proxy"),
}
PERCENTILE_TICKS = [0.5, 0.9, 0.99, 0.999, 0.9999]
# 1, 2 and 5 of each decade: a panel whose lines span less than a decade still gets labels.
LATENCY_TICK_SUBS = (1.0, 2.0, 5.0)


def draw_spectra(axis, title, spectra):
    axis.set_title(title, fontsize=10)
    drawn = False
    for system, (color, label) in SYSTEM_STYLE.items():
        points = (spectra or {}).get(system)
        if not points:
            continue
        axis.plot([1 / (1 - p["q"]) for p in points], [p["ms"] for p in points], color=color, label=label, linewidth=1.4)
        drawn = True
    if not drawn:
        axis.text(0.5, 0.5, "not measured", ha="center", va="center", transform=axis.transAxes, color="#888888")
    axis.set_xscale("log")
    # Log latency too: one overloaded path's second-long tail must not flatten the others' milliseconds.
    axis.set_yscale("log")
    axis.yaxis.set_major_locator(LogLocator(base=10, subs=LATENCY_TICK_SUBS))
    axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.yaxis.set_minor_formatter(NullFormatter())
    axis.xaxis.set_major_locator(FixedLocator([1 / (1 - q) for q in PERCENTILE_TICKS]))
    axis.xaxis.set_major_formatter(FixedFormatter([f"{q * 100:g}%" for q in PERCENTILE_TICKS]))
    axis.xaxis.set_minor_locator(NullLocator())
    axis.set_xlim(left=1)  # the 0th percentile
    axis.set_ylabel("ms")
    axis.grid(True, which="major", alpha=0.3)


def main(results_file, png_file):
    with open(results_file, encoding="utf-8") as handle:
        results = json.load(handle)
    settings = results["settings"]
    tool_call = results["toolCall"]["spectra"]
    panels = [(f"tools/call at {rate} req/s", tool_call.get(str(rate))) for rate in settings["toolCall"]["ratesPerSecond"]]
    panels.append((f"tools/call at saturation ({settings['toolCall']['saturation']['concurrency']} clients)", tool_call.get("saturation")))
    notifications = settings["streaming"]["notifications"]
    panels.append((f"streaming: one-way delay per frame ({notifications} notifications)", results["streaming"]["spectra"]))
    list_rate = settings["toolList"]["ratePerSecond"]
    tools = results["toolList"]["expectedTools"]["normal"]
    for variant, label in [("normal", "all up"), ("down", "one down"), ("slow", "one slow")]:
        panels.append((f"tools/list {tools} tools, {label}, {list_rate} listings/s", results["toolList"]["spectra"].get(variant)))

    columns = 4
    rows = (len(panels) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.8 * rows), squeeze=False)
    for axis, (title, spectra) in zip(axes.flat, panels):
        draw_spectra(axis, title, spectra)
    for axis in list(axes.flat)[len(panels):]:
        axis.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=len(SYSTEM_STYLE), frameon=False)
    machine = results["environment"]["machine"]
    figure.suptitle(
        f"MCP gateway bench ({results['mode']} run, {results['startedAt'][:16]}Z) — latency percentile spectra; "
        f"{machine['nproc']} CPUs {machine['cpuModel']}, Envoy {results['environment']['versions']['envoy'].split(' ')[0]}, Node {results['environment']['versions']['node']}",
        fontsize=11,
    )
    figure.tight_layout(rect=(0, 0.04, 1, 0.96))
    figure.savefig(png_file, dpi=90, format="png")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: latency_chart.py RESULTS.json OUT.png")
    main(sys.argv[1], sys.argv[2])
