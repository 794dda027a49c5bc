"""The web benchmark (`python scripts/bench/run.py web`): a browser on the page while a terminal client streams.

Each round runs `deck serve --web 0` twice, with and without a headless Chromium (the
distribution's, driven by Playwright) showing the page, in turn first: a `deck attach
--frontend=jsonl` client sends the throughput's prompt (200,000 chunks) and reads to the end of
the turn. Measured: that client's time, and the server's CPU time until every client (the
browser included) has the whole answer. And the page's first paint from the local server
(`first-contentful-paint`), and the time until it shows its agents, connected.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import Any

import psutil

#: Headless, as root, off the network this machine cannot reach (as tests/browser.py starts it).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def bench_web(rounds: int, count: int = 200_000, size: int = 32) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright
    from run import DECK, PRODUCER, PY, _read_to_turn_end, attached, config, request, served

    cfg = config({"bench": [PY, str(PRODUCER), str(count), str(size)]})
    runs: dict[str, list[float]] = {
        "terminal s": [], "terminal+web s": [], "server cpu s": [], "server+web cpu s": [], "first paint s": [], "connected s": [],
    }  # fmt: skip
    chromium = os.environ.get("DECK_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"

    def serve() -> tuple[subprocess.Popen[bytes], dict[str, str], str]:
        server, env = served(cfg, "bench", "--web", "0")
        url = subprocess.run([*DECK, "web", "bench"], env=env, capture_output=True, text=True, check=True).stdout.strip()
        return server, env, url

    def one(browser: Any, with_page: bool) -> None:
        server, env, url = serve()
        try:
            client = attached(env, request(1, "AgentService.Start", name="bench"))
            assert client.stdout and client.stdin
            for line in client.stdout:
                if b'"id":1' in line:
                    break
            page = None
            if with_page:
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                started = time.perf_counter()
                page.goto(url)
                page.wait_for_selector("#link.up")
                runs["connected s"].append(time.perf_counter() - started)
                paint = page.evaluate("() => performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? -1")
                runs["first paint s"].append(paint / 1000)
            me = psutil.Process(server.pid)
            before = me.cpu_times()
            started = time.perf_counter()
            client.stdin.write(request(2, "ChatService.Send", agent="bench", text="go"))
            client.stdin.flush()
            _read_to_turn_end(client)
            runs["terminal+web s" if with_page else "terminal s"].append(time.perf_counter() - started)
            if page is not None:  # the whole answer has reached the browser too
                page.wait_for_function("() => deckPage.state.conversations.bench?.busy === false", timeout=300000)
            after = me.cpu_times()
            runs["server+web cpu s" if with_page else "server cpu s"].append((after.user + after.system) - (before.user + before.system))
            if page is not None:
                page.close()
            client.stdin.close()
            client.stdout.read()
            client.wait()
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            for n in range(rounds):
                for with_page in (False, True) if n % 2 == 0 else (True, False):
                    one(browser, with_page)
        finally:
            browser.close()
    return runs
