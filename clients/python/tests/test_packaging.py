"""The package builds with the standard library alone (no package index)."""

from __future__ import annotations

import os
import sys
import zipfile

HERE = os.path.join(os.path.dirname(__file__), "..")
sys.path.insert(0, os.path.join(HERE, "_build"))

import baton_build  # noqa: E402


def test_wheel_has_the_package_and_a_record(tmp_path):
    fn = baton_build.build_wheel(str(tmp_path))
    with zipfile.ZipFile(os.path.join(str(tmp_path), fn)) as z:
        names = set(z.namelist())
        assert {"baton/__init__.py", "baton/client.py", "baton/py.typed"} <= names
        record = z.read("baton_client-0.1.0.dist-info/RECORD").decode()
        assert "baton/client.py,sha256=" in record
        assert b"Requires-Python: >=3.9" in z.read("baton_client-0.1.0.dist-info/METADATA")
    assert baton_build.build_sdist(str(tmp_path)).endswith(".tar.gz")
