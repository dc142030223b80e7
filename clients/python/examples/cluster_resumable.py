"""A cluster: claims go to their names' owner nodes; a resumable session
keeps its claims (same tokens) when the node it talks to dies.

    python3 examples/cluster_resumable.py 127.0.0.1:7070 127.0.0.1:7170 127.0.0.1:7270
"""

import sys
import time

import baton

nodes = sys.argv[1:] or ["127.0.0.1:7070", "127.0.0.1:7170", "127.0.0.1:7270"]
client = baton.Client(nodes, lease=8)
with client.session(resumable=True) as s:
    cl = s.claim("jobs/nightly")
    print("held on", cl.session.address, "token", cl.token, "resumable:", cl.session.resumable)
    for _ in range(30):
        if cl.lost.wait(1):
            print("lost:", cl.error)
            break
    else:
        cl.release()
