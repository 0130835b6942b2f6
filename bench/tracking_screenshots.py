#!/usr/bin/env python3
"""Screenshots of TensorBoard and the MLflow UI for docs/observability.md, taken by headless
Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: no websocket
library, no open debugging port). Each page is loaded, then polled until what it should show is
drawn (not a spinner), then captured, cropped and written as PNG.
Called by bench/tracking_screenshots.sh, which starts the servers and trains the runs.
Usage: tracking_screenshots.py --tensorboard URL --mlflow URL --experiment NAME --run NAME
                               --runs N --out-dir DIR [--chromium BIN]
"""
import argparse
import io
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import base64

from PIL import Image

WIDTH, HEIGHT = 1600, 1000


class Browser:
    """One headless Chromium; commands go in on fd 3, replies come out on fd 4, NUL-terminated JSON."""

    def __init__(self, chromium):
        self.profile = tempfile.mkdtemp(prefix="shardtrain-chromium-")
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def child_fds():  # in the child: the pipe ends onto fds 3 and 4 (they may be 3 or 4 already)
            r, w = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(r, 3)
            os.dup2(w, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)
            os.setsid()

        self.proc = subprocess.Popen(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--user-data-dir=" + self.profile, "--window-size=%d,%d" % (WIDTH, HEIGHT), "--hide-scrollbars",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
             "--disable-background-networking", "--disable-component-update", "--mute-audio",
             "--force-device-scale-factor=1", "--lang=en-US", "about:blank"],
            # os.pipe()'s own descriptors close on exec; the copies on 3 and 4 stay open in chromium
            preexec_fn=child_fds, close_fds=False,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buf = b""
        self.next_id = 0
        self.session = None
        try:
            self._attach()
        except BaseException:
            self.close()
            raise

    def _attach(self):
        for _ in range(50):  # the first tab may take a moment to exist
            pages = [t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page"]
            if pages:
                break
            time.sleep(0.2)
        page = pages[0]
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1, mobile=False)

    def call(self, method, timeout=60, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if self.session and not method.startswith(("Target.", "Browser.")):
            msg["sessionId"] = self.session
        try:
            os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        except BrokenPipeError:
            raise RuntimeError("chromium exited (status %s) before %s" % (self.proc.wait(), method)) from None
        end = time.monotonic() + timeout
        while True:
            while b"\0" not in self.buf:
                left = end - time.monotonic()
                if left <= 0 or not select.select([self.from_chrome], [], [], left)[0]:
                    raise TimeoutError("chromium did not answer %s within %d s" % (method, timeout))
                chunk = os.read(self.from_chrome, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the pipe (exit %s)" % self.proc.poll())
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError("%s: %s" % (method, reply["error"]))
                return reply.get("result", {})

    def size(self, width, height):
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            return None
        return r["result"].get("value")

    def goto(self, url, ready_js, what, limit_s=90, settle_s=2.0):
        """Loads url and waits until ready_js is true twice in a row settle_s apart."""
        self.call("Page.navigate", url=url)
        end = time.monotonic() + limit_s
        while time.monotonic() < end:
            if self.js(ready_js):
                time.sleep(settle_s)
                if self.js(ready_js):
                    return
            time.sleep(0.5)
        self.shot("/tmp/shardtrain-screenshot-timeout.png")
        raise TimeoutError("%s did not render within %d s (%s); what it showed: "
                           "/tmp/shardtrain-screenshot-timeout.png" % (what, limit_s, url))

    def shot(self, path, clip=None, max_width=None):
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=False)["data"]
        img = Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")
        if clip:
            img = img.crop(clip)
        if max_width and img.width > max_width:
            img = img.resize((max_width, round(img.height * max_width / img.width)), Image.LANCZOS)
        img = img.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        img.save(path, optimize=True)
        print("wrote %s (%dx%d, %d KiB)" % (path, img.width, img.height, os.path.getsize(path) // 1024))

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        os.close(self.to_chrome)
        os.close(self.from_chrome)
        shutil.rmtree(self.profile, ignore_errors=True)


def api(base, path, body=None):
    req = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def tensorboard(b, base, runs, out):
    # The Time Series dashboard's settings live in the page's localStorage: settings pane closed,
    # cards wide enough that loss and val_loss fill the width side by side.
    b.call("Page.navigate", url=base + "/index.html?unused")
    time.sleep(1)
    b.js("localStorage.setItem('_tb_global_settings', JSON.stringify({timeSeriesSettingsPaneOpened: false, "
         "timeSeriesCardMinWidth: 640, sideBarWidthInPercent: 14, ignoreOutliers: false}))")
    # loss and val_loss only; SVG lines (WebGL draws nothing without a GPU here); no smoothing: the
    # default 0.6 drags val_loss's 7 points far behind their values
    query = urllib.parse.urlencode({"darkMode": "false", "forceSVG": "true", "smoothing": "0",
                                    "tagFilter": "^(loss|val_loss)$"})
    url = "%s/?%s#timeseries" % (base, query)
    # ready: both cards have drawn a line per run
    ready = """(() => {
      const cards = [...document.querySelectorAll('scalar-card')];
      return cards.length == 2 && cards.every(c => [...c.querySelectorAll('svg path')].filter(p => (p.getAttribute('d') || '').length > 40).length >= %d)
             && document.querySelectorAll('mat-spinner, mat-progress-spinner').length == 0;
    })()""" % runs
    b.goto(url, ready, "TensorBoard's loss charts")
    # down to the cards and the run list: the page is blank below them
    bottom = b.js("Math.max(...[...document.querySelectorAll('scalar-card')].map(c => c.getBoundingClientRect().bottom))")
    b.shot(os.path.join(out, "tensorboard-two-runs.png"), clip=(0, 0, WIDTH, min(HEIGHT, int(bottom or HEIGHT) + 24)))


def mlflow(b, base, experiment, run_name, out):
    exp = api(base, "/api/2.0/mlflow/experiments/get-by-name?" + urllib.parse.urlencode({"experiment_name": experiment}))
    eid = exp["experiment"]["experiment_id"]
    found = api(base, "/api/2.0/mlflow/runs/search",
                {"experiment_ids": [eid], "filter": "attributes.run_name = '%s'" % run_name})["runs"]
    if len(found) != 1:
        sys.exit("MLflow: %d runs named %s in experiment %s" % (len(found), run_name, experiment))
    rid = found[0]["info"]["run_id"]
    # The UI keeps its modes in localStorage: the "Model training" workflow (not GenAI's), the
    # assistant's panel closed.
    b.call("Page.navigate", url=base + "/health")
    time.sleep(1)
    b.js("""localStorage.setItem('mlflow.workflowType_v1', JSON.stringify('machine_learning'));
            localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');
            localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');""")
    b.size(1400, 2000)  # tall enough for the metrics and parameters tables
    url = "%s/#/experiments/%s/runs/%s" % (base, eid, rid)
    ready = """(() => { const t = document.body.innerText;
                        return t.includes('%s') && t.includes('Finished') && /Parameters \\(\\d+\\)/.test(t)
                               && t.includes('val_loss') && t.includes('batch-size'); })()""" % run_name
    b.goto(url, ready, "MLflow's run page")
    # the parameters table shows 14 of its rows: filter it to the learning rate's, the runs' difference
    b.js("document.querySelector('input[placeholder*=\"parameters\" i]').focus()")
    b.call("Input.insertText", text="lr")
    end = time.monotonic() + 20
    while time.monotonic() < end and not b.js("!document.body.innerText.includes('breakdown-every')"):
        time.sleep(0.3)
    b.js("document.activeElement.blur()")
    time.sleep(1)
    # down to the parameters table's box: the one around its search field
    bottom = b.js("""(() => { let e = document.querySelector('input[placeholder*="parameters" i]');
                              while (e && e.getBoundingClientRect().height < 300) e = e.parentElement;
                              return e ? e.getBoundingClientRect().bottom : null; })()""")
    b.shot(os.path.join(out, "mlflow-run.png"), clip=(0, 0, 1400, min(2000, int(bottom or 1976) + 24)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tensorboard", required=True)
    p.add_argument("--mlflow", required=True)
    p.add_argument("--experiment", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--only", choices=("tensorboard", "mlflow"))
    p.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    a = p.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    b = Browser(a.chromium)
    try:
        if a.only != "mlflow":
            tensorboard(b, a.tensorboard.rstrip("/"), a.runs, a.out_dir)
        if a.only != "tensorboard":
            mlflow(b, a.mlflow.rstrip("/"), a.experiment, a.run, a.out_dir)
    finally:
        b.close()


if __name__ == "__main__":
    main()
