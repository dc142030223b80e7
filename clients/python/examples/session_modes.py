"""Several claims on one session: shared readers, a semaphore, no-wait.

    python3 examples/session_modes.py 127.0.0.1:7070
"""

import sys

import baton

client = baton.Client(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7070", lease=5)


def on_lost(claim: baton.Claim, err: baton.LockLost) -> None:
    # Runs on the session's thread before the connection closes: keep it short.
    print("lost", claim.name, type(err).__name__, err)


with client.session() as s:
    with s.claim("orders", mode=baton.Mode.SHARED, on_lost=on_lost) as reader:
        print("reading orders with token", reader.token)
    slot = s.claim("gpu-pool", mode=baton.Mode.SEMAPHORE, limit=4)
    print("one of 4 gpu-pool places, token", slot.token)
    try:
        s.claim("deploy", wait=False)
    except baton.Busy:
        print("deploy is held by someone else")
    slot.release()
