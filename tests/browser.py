"""Headless Chromium for the report tests: render a page, read back what loaded."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

#: Appended to a copy of the page: once everything loaded, record each image's id,
#: whether it completed and its natural size, and the rows of the table ``TABLE_ID``.
_PROBE = """<script>
window.addEventListener('load', function () {
  var imgs = Array.prototype.map.call(document.images, function (i) {
    return [i.id, i.complete, i.naturalWidth, i.naturalHeight];
  });
  var t = document.getElementById('TABLE_ID');
  var probe = document.createElement('pre');
  probe.id = 'probe';
  probe.textContent = JSON.stringify({images: imgs, rows: t ? t.rows.length : 0});
  document.body.appendChild(probe);
});
</script>"""


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium with a fresh profile and no background networking."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )


def probe_page(page: Path, workdir: Path, table_id: str) -> dict[str, Any]:
    """Render ``page`` and return ``{"images": [[id, complete, w, h], ...], "rows": n}``."""
    html = page.read_text()
    assert "http://" not in html and "https://" not in html, "the page must be self-contained"
    probed = workdir / "probed.html"
    probed.write_text(html.replace("</body>", _PROBE.replace("TABLE_ID", table_id) + "</body>"))
    dom = chromium("--virtual-time-budget=10000", "--dump-dom", probed.as_uri()).stdout
    m = re.search(r'<pre id="probe">(.*?)</pre>', dom)
    assert m, dom[-2000:]
    result: dict[str, Any] = json.loads(m.group(1).replace("&quot;", '"'))
    return result
