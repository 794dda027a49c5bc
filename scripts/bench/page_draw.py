"""The web page's Markdown draw time by the size of what it draws: linear, or not.

    python scripts/bench/page_draw.py                     # 3 rounds, 16,000 to 1,000,000 characters
    python scripts/bench/page_draw.py -r 5 --sizes 32000,128000,512000

A `deck serve --web 0` (the fake agent of the tests as its agent) serves the page to the
distribution's headless Chromium (as scripts/bench/web.py starts it). In that page, each text —
prose (README.md), and text that opens what it never closes (`**a `, `[a`, …), quotes nested as
deep as the text is long, a long list — is repeated to each size and timed, the
best of the rounds (each run repeated to last 20 ms or more):

    markdown  deckMarkdown.render(text): its DOM nodes
    draw      the same, put in the page's message list and laid out (what a message's drawing costs)

For each size, the time per character ÷ the time per character at the smallest size: about 1 at
every size when the time is linear in the text (a square law would make it 62 at 1,000,000 ÷ 16,000);
"linear" when it is at most LINEAR for every text. The draw includes Chromium's own layout, which
grows a little faster than the text on a paragraph of 160,000 code spans (`a `a …).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: The most the time per character may grow, largest size ÷ smallest, for "linear": a few times the
#: timer's and the collector's noise, far below a square law's growth (62 for 1,000,000 ÷ 16,000).
LINEAR = 3.0

#: The texts, each repeated to every size.
TEXTS = {
    "prose": (ROOT / "README.md").read_text(),
    "**a": "**a ", "~~a": "~~a ", "__a": "__a ", "*a": "*a ", "_a": "_a ", "`a": "`a ", "[a": "[a", "[a](": "[a](",
    "http://.": "http://.", "quotes": "> ", "lists": "  - a\n",
}  # fmt: skip

MEASURE = """async ({ texts, sizes, rounds }) => {
    const box = document.getElementById("messages");
    const markdown = (text) => deckMarkdown.render(text);
    const draw = (text) => { // into the message list, laid out, taken out again
        const slot = document.createElement("div");
        slot.className = "msg agent done";
        slot.append(deckMarkdown.render(text));
        box.append(slot);
        void slot.offsetHeight;
        slot.remove();
    };
    // The best of the rounds, each run repeated to last 20 ms or more (timers are coarse: a short run alone is noise).
    const best = async (work, text) => {
        let started = performance.now();
        work(text);
        const repeat = Math.max(1, Math.ceil(20 / Math.max(performance.now() - started, 0.1)));
        let least = Infinity;
        for (let round = 0; round < rounds; round++) {
            started = performance.now();
            for (let r = 0; r < repeat; r++) work(text);
            least = Math.min(least, (performance.now() - started) / repeat);
            await new Promise((go) => setTimeout(go, 0)); // the page may draw a frame between rounds
        }
        return least;
    };
    const out = {};
    for (const [name, unit] of Object.entries(texts)) {
        const made = sizes.map((n) => unit.repeat(Math.ceil(n / unit.length)).slice(0, n));
        out[name] = { markdown: [], draw: [] };
        for (const text of made) {
            out[name].markdown.push(await best(markdown, text));
            out[name].draw.push(await best(draw, text));
        }
    }
    return out;
}"""


def measure(rounds: int, sizes: list[int]) -> dict[str, dict[str, list[float]]]:
    from playwright.sync_api import sync_playwright
    from run import DECK, FAKE_AGENT, PY, config, served
    from web import CHROMIUM_ARGS

    cfg = config({"bench": [PY, str(FAKE_AGENT)]})
    server, env = served(cfg, "bench", "--web", "0")
    chromium = os.environ.get("DECK_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    try:
        url = subprocess.run(
            [*DECK, "web", "bench"], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.goto(url)
                page.wait_for_selector("#link.up")
                page.set_default_timeout(0)
                result: Any = page.evaluate(MEASURE, {"texts": TEXTS, "sizes": sizes, "rounds": rounds})
            finally:
                browser.close()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait()
    return result


def report(result: dict[str, dict[str, list[float]]], sizes: list[int]) -> dict[str, float]:
    """Prints the table; returns, for markdown and draw, the largest per-character ratio (largest size ÷
    smallest) of any text."""
    print(f"{'text':<10} {'':<9}" + "".join(f"{n:>14,}" for n in sizes) + "   (ms; per character ÷ at the smallest)")
    worst = {"markdown": 0.0, "draw": 0.0}
    for name, times in result.items():
        for what in ("markdown", "draw"):
            ms = times[what]
            per_char = [t / n for t, n in zip(ms, sizes)]
            ratios = [p / per_char[0] if per_char[0] > 0 else float("nan") for p in per_char]
            worst[what] = max(worst[what], ratios[-1])
            cells = "".join(f"{t:>7.1f} ({r:>4.2f})" for t, r in zip(ms, ratios))
            print(f"{name:<10} {what:<9}{cells}")
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-r", "--rounds", type=int, default=3)
    parser.add_argument(
        "--sizes", default="16000,64000,256000,1000000", help="characters, comma-separated, smallest first"
    )
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    worst = report(measure(args.rounds, sizes), sizes)
    growth = sizes[-1] / sizes[0]
    print(f"time per character at {sizes[-1]:,} ÷ at {sizes[0]:,} ({growth:g}× the text), at most, for any text:")
    for what, ratio in worst.items():
        print(f"  {what:<9}{ratio:>6.2f}  {'linear' if ratio <= LINEAR else 'NOT LINEAR'} (a square law: {growth:g})")


if __name__ == "__main__":
    main()
