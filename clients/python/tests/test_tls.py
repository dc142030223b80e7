"""TLS and mutual TLS against a real server, with certificates made here."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import time

import pytest

import baton


def _openssl(*args: str, cwd: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    if shutil.which("openssl") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("openssl is missing")
        pytest.skip("openssl is missing")
    d = str(tmp_path_factory.mktemp("pki"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=baton test CA", cwd=d)
    for who, ext in (("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"),
                     ("client", "subjectAltName=URI:spiffe://test/worker\nextendedKeyUsage=clientAuth")):
        with open(os.path.join(d, who + ".ext"), "w") as f:
            f.write(ext + "\n")
        _openssl("req", *ec, "-keyout", who + ".key", "-out", who + ".csr", "-subj", "/CN=" + who, cwd=d)
        _openssl("x509", "-req", "-in", who + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", who + ".pem", "-days", "2", "-extfile", who + ".ext", cwd=d)
    return d


def test_tls(own_server, pki, name):
    p = lambda f: os.path.join(pki, f)  # noqa: E731
    srv = own_server("-tls-cert", p("server.pem"), "-tls-key", p("server.key"))
    c = baton.Client(srv.addr, tls=baton.tls_context(ca=p("ca.pem")), lease=2)
    with c.lock(name) as token:
        assert token > 0
    # A client that does not trust the server's CA cannot connect.
    bad = baton.Client(srv.addr, tls=baton.tls_context(ca=p("client.pem")), lease=2)
    with pytest.raises(baton.ConnectError):
        bad.session()


def test_mutual_tls(own_server, pki, name):
    p = lambda f: os.path.join(pki, f)  # noqa: E731
    srv = own_server("-tls-cert", p("server.pem"), "-tls-key", p("server.key"), "-tls-client-ca", p("ca.pem"))
    c = baton.Client(srv.addr, tls=baton.tls_context(ca=p("ca.pem"), cert=p("client.pem"), key=p("client.key")),
                     lease=1)
    with c.session() as s:
        a = s.claim(name)
        with pytest.raises(baton.Busy):
            s.claim(name, wait=False)
        time.sleep(1.2)  # heartbeats over TLS keep it (lease 1s)
        assert a.held and not a.lost.is_set()
        a.release()
        b = s.claim(name, timeout=10)
        assert b.token > a.token
    # Without a client certificate the server refuses the session.
    anon = baton.Client(srv.addr, tls=baton.tls_context(ca=p("ca.pem")), lease=2)
    with pytest.raises((baton.ConnectError, baton.SessionError, ssl.SSLError)):
        with anon.lock(name, timeout=5):
            pass
