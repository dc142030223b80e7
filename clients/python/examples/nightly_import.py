"""The first lock: run a job while holding "nightly-import", stop if lost.

    python3 examples/nightly_import.py 127.0.0.1:7070
"""

import sys
import time

import baton

client = baton.Client(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7070", lease=10)
lk = client.lock("nightly-import", timeout=60)
try:
    with lk as token:
        print("holding nightly-import, fencing token", token)
        for step in range(5):
            if lk.lost.is_set():  # the lock was lost: stop the work at once
                print("lost:", lk.claim.error)
                break
            # Pass the token to the storage you write to, so that it can
            # refuse a stale holder (docs/fencing.md).
            time.sleep(1)
except baton.LockTimeout:
    print("someone else held nightly-import for a minute")
