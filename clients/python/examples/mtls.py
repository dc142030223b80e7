"""Mutual TLS: trust the server's CA and present a client certificate,
whose identity the server's ACL checks.

    python3 examples/mtls.py 127.0.0.1:7070 ca.pem client.pem client.key
"""

import sys

import baton

addr, ca, cert, key = sys.argv[1:5]
client = baton.Client(addr, tls=baton.tls_context(ca=ca, cert=cert, key=key))
with client.lock("reports") as token:
    print("holding reports over mutual TLS, token", token)
