"""The README's offline install works with Debian's packages alone: no index, no download."""

import shutil
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1]
# The command of clients/python/README.md ("Install offline"), run from the repository root.
INSTALL = ["-m", "pip", "install", "--no-index", "--no-build-isolation"]


def test_offline_install(tmp_path):
    readme = (PKG / "README.md").read_text()
    assert "pip install --no-index --no-build-isolation ./clients/python" in readme
    src = tmp_path / "python"  # a copy: the build leaves build/ and egg-info beside the sources
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    res = subprocess.run([py, *INSTALL, str(src)], capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run([py, "-c", "import proxy_operator, proxy_operator.scrapy; print(proxy_operator.__file__)"],
                         capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert res.returncode == 0 and str(venv) in res.stdout, res.stdout + res.stderr
