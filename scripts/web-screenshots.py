"""The web page's screenshots for the docs: docs/images/web-phone.png (390×844) and web-desktop.png (1280×800).

    python scripts/web-screenshots.py

Runs `deck serve --web 0` with the built-in demo agent (in a fresh HOME), sends it a prompt from
the page in the distribution's headless Chromium (scripts/install-browser.sh), and shots the page
with the demo's permission dialog open (phone) and its whole answer (desktop).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
DECK = [sys.executable, "-P", "-m", "deck"]
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="deck-shots-"))
    env = {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(home / "run"), "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config")}
    (home / "run").mkdir(mode=0o700)
    subprocess.run([*DECK, "serve", "--web", "0", "--detach"], env=env, cwd=home, check=True, stdout=subprocess.DEVNULL)
    try:
        url = subprocess.run([*DECK, "web"], env=env, capture_output=True, text=True, check=True).stdout.strip()
        out = ROOT / "docs" / "images"
        out.mkdir(exist_ok=True)
        chromium = os.environ.get("DECK_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=ARGS)
            phone = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
            phone.goto(url)
            phone.wait_for_selector("#link.up")
            phone.fill("#prompt", "Show me around")
            phone.press("#prompt", "Enter")
            phone.wait_for_selector("#ask[open]", timeout=30000)
            phone.screenshot(path=str(out / "web-phone.png"))
            phone.click("#ask-options button.primary")
            phone.wait_for_selector(".msg.agent.done", timeout=30000)
            desktop = browser.new_page(viewport={"width": 1280, "height": 800})
            desktop.goto(url)
            desktop.wait_for_selector(".msg.agent.done")
            desktop.screenshot(path=str(out / "web-desktop.png"))
            browser.close()
        print(f"wrote {out / 'web-phone.png'} and {out / 'web-desktop.png'}")
    finally:
        subprocess.run([*DECK, "stop"], env=env, stdout=subprocess.DEVNULL)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
