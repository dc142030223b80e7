"""A PEP 517 build backend from the standard library alone.

`pip install ./clients/python` must work on a machine without a package
index, where pip cannot fetch setuptools into its isolated build
environment; this backend needs nothing, so it builds anywhere. It makes
a pure-Python wheel of the `baton` package (and an sdist).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "baton_client"
DIST = "baton-client"
VERSION = "0.1.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"


def _metadata() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (
        "Metadata-Version: 2.1\n"
        "Name: %s\nVersion: %s\n"
        "Summary: Python client for the baton distributed lock service (standard library only)\n"
        "Requires-Python: >=3.9\n"
        "Classifier: Programming Language :: Python :: 3\n"
        "Description-Content-Type: text/markdown\n\n%s" % (DIST, VERSION, readme)
    )


def _package_files():
    pkg = os.path.join(ROOT, "baton")
    for fn in sorted(os.listdir(pkg)):
        if fn.endswith(".py") or fn == "py.typed":
            yield "baton/" + fn, os.path.join(pkg, fn)


def _dist_info(files):
    di = "%s-%s.dist-info" % (NAME, VERSION)
    out = [
        (di + "/METADATA", _metadata().encode()),
        (di + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: baton_build\nRoot-Is-Purelib: true\nTag: %s\n" % TAG).encode()),
        (di + "/top_level.txt", b"baton\n"),
    ]
    return di, out


def _write_wheel(wheel_directory, entries):
    fn = "%s-%s-%s.whl" % (NAME, VERSION, TAG)
    di, meta = _dist_info(entries)
    entries = entries + meta
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, fn), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in entries:
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (arc, digest, len(data)))
        record.append(di + "/RECORD,,")
        z.writestr(di + "/RECORD", "\n".join(record) + "\n")
    return fn


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    entries = []
    for arc, path in _package_files():
        with open(path, "rb") as f:
            entries.append((arc, f.read()))
    return _write_wheel(wheel_directory, entries)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [("baton_client.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, VERSION)
    fn = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, fn), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/baton_build.py"] + [a for a, _ in _package_files()]:
            t.add(os.path.join(ROOT, rel), arcname=base + "/" + rel)
        pkg_info = _metadata().encode()
        ti = tarfile.TarInfo(base + "/PKG-INFO")
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return fn
